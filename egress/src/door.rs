//! Doors: the proxy's way in for requests the host itself makes in a fixed name.
//!
//! A remote MCP server is reached by the host (its MCP client runs in the daemon), not by a
//! container, so no source address says whose its requests are. A [`Door`] is a Unix socket
//! in a directory only this user may open, served by the same proxy code as the listener:
//! every request through it is in the door's one name (the audit's task id, the approvals'
//! task), checked by the same policy, filled in with the door's own proxy-mode secrets under
//! their bindings, scrubbed, metered and audited. A door takes absolute-form requests
//! (`POST https://host/mcp`, which the proxy sends on over its own TLS), never CONNECT: a
//! tunnel could be neither filled in nor scrubbed.
//!
//! Dropping the door closes it: the socket and its directory go, open connections end, and
//! its secrets are taken back (unless a newer door of the same name holds its own).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio::net::UnixListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use super::attribution::Attributed;
use super::credentials::{Credential, TaskSecrets};
use super::proxy::{self, Caller};
use super::Shared;

/// What the audit names as the container of a door's requests.
pub const DOOR_CONTAINER: &str = "host";
/// Connections one door serves at once (an MCP session keeps a few: its POSTs, its GET
/// stream, a cancellation).
const MAX_DOOR_CONNECTIONS: usize = 64;

/// Opens doors into a running proxy; cheap to clone ([`crate::Egress::doors`]).
#[derive(Clone)]
pub struct Doors {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Doors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Doors").field("proxy", &self.shared.local).finish()
    }
}

/// Why a door did not open.
#[derive(Debug, thiserror::Error)]
pub enum DoorError {
    #[error("the egress proxy is stopping")]
    Stopping,
    #[error("cannot make the door's socket at {path}: {source}")]
    Socket { path: PathBuf, source: std::io::Error },
    #[error(transparent)]
    Credentials(#[from] super::credentials::CredentialError),
}

/// One open door; see the module docs.
pub struct Door {
    identity: String,
    dir: PathBuf,
    path: PathBuf,
    stop: CancellationToken,
    granted: Option<Arc<TaskSecrets>>,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Door {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Door")
            .field("identity", &self.identity)
            .field("path", &self.path)
            .field("secrets", &self.granted.as_ref().map(|s| s.names()))
            .finish()
    }
}

impl Doors {
    pub(crate) fn new(shared: Arc<Shared>) -> Self {
        Self { shared }
    }

    /// Opens a door whose requests are `identity`'s, with these proxy-mode secrets (filled in
    /// only at their bindings). Replaces what `identity` held before.
    pub fn open(&self, identity: &str, credentials: Vec<Credential>) -> Result<Door, DoorError> {
        let shared = &self.shared;
        if shared.stop.is_cancelled() {
            return Err(DoorError::Stopping);
        }
        let dir = private_dir().map_err(|(path, source)| DoorError::Socket { path, source })?;
        let path = dir.join("door.sock");
        let listener = match UnixListener::bind(&path) {
            Ok(listener) => listener,
            Err(source) => {
                let _ = std::fs::remove_dir_all(&dir);
                return Err(DoorError::Socket { path, source });
            }
        };
        let granted = match shared.credentials.grant_owned(identity, credentials, Vec::new()) {
            Ok(granted) => granted,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&dir);
                return Err(e.into());
            }
        };
        let stop = shared.stop.child_token();
        let who = Arc::new(Attributed {
            container: DOOR_CONTAINER.to_owned(),
            task_id: Some(identity.to_owned()),
            dedicated: true,
            room: None,
        });
        shared.tracker.spawn(serve(listener, who, stop.clone(), shared.clone()));
        tracing::debug!(identity, path = %path.display(), "egress door open");
        Ok(Door { identity: identity.to_owned(), dir, path, stop, granted, shared: shared.clone() })
    }
}

impl Door {
    /// The socket to connect to.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whose its requests are.
    pub fn identity(&self) -> &str {
        &self.identity
    }
}

impl Drop for Door {
    fn drop(&mut self) {
        self.stop.cancel();
        let _ = std::fs::remove_dir_all(&self.dir);
        if let Some(granted) = &self.granted {
            self.shared.credentials.revoke_own(&self.identity, granted);
        }
    }
}

/// A fresh directory only this user may open (mode 0700), in the temporary directory: a Unix
/// socket's path must stay short, which a data directory's need not be.
fn private_dir() -> Result<PathBuf, (PathBuf, std::io::Error)> {
    use std::os::unix::fs::DirBuilderExt;
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let mut random = [0u8; 6];
    let _ = getrandom::fill(&mut random);
    let tag: String = random.iter().map(|b| format!("{b:02x}")).collect();
    let name =
        format!("nexbot-door-{}-{}-{tag}", std::process::id(), SEQ.fetch_add(1, Ordering::Relaxed));
    let dir = std::env::temp_dir().join(name);
    std::fs::DirBuilder::new().mode(0o700).create(&dir).map_err(|e| (dir.clone(), e))?;
    Ok(dir)
}

async fn serve(
    listener: UnixListener,
    who: Arc<Attributed>,
    stop: CancellationToken,
    shared: Arc<Shared>,
) {
    let capacity = Arc::new(Semaphore::new(MAX_DOOR_CONNECTIONS));
    loop {
        let permit = tokio::select! {
            permit = capacity.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => return,
            },
            () = stop.cancelled() => return,
        };
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = stop.cancelled() => return,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(err) => {
                tracing::warn!(%err, "egress door: accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let caller = Caller::Door(who.clone());
        let (shared, stop) = (shared.clone(), stop.clone());
        shared.clone().tracker.spawn(async move {
            tokio::select! {
                () = proxy::connection(stream, caller, None, shared) => {}
                () = stop.cancelled() => {}
            }
            drop(permit);
        });
    }
}
