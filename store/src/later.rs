//! Writes that must land even when the disk is full: how an update or a task ended. Such a
//! write is tried at once; when it fails for lack of space it is tried again in the background
//! (every 1 s, then up to every 30 s) until it succeeds or the process ends.
//!
//! Why: the answer was already sent when its "answered" is written. If that write is lost, the
//! record says `pending`/`running` for ever: the next start replays the update (answered twice)
//! or calls a finished task interrupted. Seen in the soak run (`make soak`): after 8 s of a
//! full disk, 2 updates stayed pending and 1 task running in a daemon that went on serving.

use std::future::Future;
use std::time::Duration;

use crate::{Store, StoreError};

/// The first wait before a retry; doubled up to [`MAX_WAIT`].
const FIRST_WAIT: Duration = Duration::from_secs(1);
const MAX_WAIT: Duration = Duration::from_secs(30);

impl Store {
    /// Runs `write` on this store; if it fails because the disk is full, returns that error and
    /// keeps trying `write` in the background until it succeeds (`what` names it in the log).
    /// Other errors are returned as they are, without a retry.
    pub async fn write_or_retry<F, Fut>(&self, what: String, write: F) -> Result<(), StoreError>
    where
        F: Fn(Store) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), StoreError>> + Send + 'static,
    {
        let err = match write(self.clone()).await {
            Err(e) if e.is_disk_full() => e,
            other => return other,
        };
        let store = self.clone();
        tokio::spawn(async move {
            let mut wait = FIRST_WAIT;
            let mut tries = 1u32;
            loop {
                tokio::time::sleep(wait).await;
                tries += 1;
                match write(store.clone()).await {
                    Ok(()) => {
                        tracing::warn!(tries, "{what} is recorded now (the disk had been full)");
                        return;
                    }
                    Err(e) if e.is_disk_full() => wait = (wait * 2).min(MAX_WAIT),
                    Err(e) => {
                        tracing::error!(error = %e, "{what} cannot be recorded; given up");
                        return;
                    }
                }
            }
        });
        Err(err)
    }
}
