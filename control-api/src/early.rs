//! The control socket from the daemon's first moment: while the parts start (the store, the
//! sandbox's network, proxy and pool, the agent), every request is answered "starting" instead
//! of finding no socket, so `nexbot-ctl` and the compose health check can tell a daemon that is
//! coming up from one that is not running (issue 48: the socket opened seconds late and
//! `nexbot-ctl` said the daemon was not running meanwhile).
//!
//! The socket is bound once. [`EarlySocket::open`] serves the "starting" answer on a copy of
//! it; [`EarlySocket::hand_over`] stops that server and gives the listener to the real control
//! API, so no connection finds the path missing in between (one that arrives then waits in the
//! socket's backlog for the real server).

use std::path::{Path, PathBuf};
use std::time::Instant;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Json, Router};
use nexbot_control::ErrorBody;
use tokio_util::sync::CancellationToken;

/// The bound control socket and the "starting" server answering on it.
#[derive(Debug)]
pub struct EarlySocket {
    path: PathBuf,
    /// Taken by the hand-over; still here on drop when the daemon did not come up.
    listener: Option<std::os::unix::net::UnixListener>,
    stop: CancellationToken,
    server: Option<tokio::task::JoinHandle<()>>,
}

impl EarlySocket {
    /// Binds `path` (as the control API does: a stale socket replaced, mode 0600) and answers
    /// every request with 503 and [`starting_answer`] until [`EarlySocket::hand_over`].
    pub fn open(path: &Path) -> std::io::Result<Self> {
        let listener = super::bind_unix(path)?.into_std()?;
        let serving = tokio::net::UnixListener::from_std(listener.try_clone()?)?;
        let stop = CancellationToken::new();
        let since = Instant::now();
        let app = Router::new().fallback(move || async move { starting_answer(since) });
        let until = stop.clone();
        let server = tokio::spawn(async move {
            let served = axum::serve(serving, app)
                .with_graceful_shutdown(async move { until.cancelled().await })
                .await;
            if let Err(e) = served {
                tracing::warn!(error = %e, "the control socket's \"starting\" answer stopped");
            }
        });
        Ok(Self { path: path.to_owned(), listener: Some(listener), stop, server: Some(server) })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Stops answering "starting" (a request being answered finishes first) and gives the
    /// socket's listener to whoever serves it next.
    pub async fn hand_over(mut self) -> std::io::Result<tokio::net::UnixListener> {
        self.stop.cancel();
        if let Some(server) = self.server.take() {
            let _ = server.await;
        }
        let listener = self.listener.take().ok_or_else(|| std::io::Error::other("handed over"))?;
        tokio::net::UnixListener::from_std(listener)
    }
}

/// A daemon that did not come up (its start failed) leaves no socket behind.
impl Drop for EarlySocket {
    fn drop(&mut self) {
        self.stop.cancel();
        if self.listener.take().is_some() {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// 503 with the body `nexbot-ctl` reads as "starting" ([`ErrorBody::starting`]).
fn starting_answer(since: Instant) -> Response {
    let body = ErrorBody {
        error: format!(
            "the nexbot daemon is starting (for {} s: its store, sandbox and channels); try \
             again in a moment",
            since.elapsed().as_secs()
        ),
        starting: true,
    };
    (StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn it_answers_starting_until_the_hand_over_then_the_listener_serves_on() {
        let dir = std::env::temp_dir().join(format!("nxh-early-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("nexbot.sock");
        let early = EarlySocket::open(&path).unwrap();
        let client = nexbot_control::Client::new(&path);
        let err = client.get::<serde_json::Value>("/v1/health").await.unwrap_err();
        assert!(
            matches!(&err, nexbot_control::ClientError::Starting { message } if message.contains("is starting")),
            "{err:?}"
        );
        assert_eq!(err.exit_code(), 4);
        // A client that connects after the hand-over is served by the next server on the
        // same socket, with no moment where the path is missing.
        let listener = early.hand_over().await.unwrap();
        assert!(path.exists());
        let next = tokio::spawn(async move {
            let app = Router::new().fallback(|| async { Json(serde_json::json!({"served": 1})) });
            let _ = axum::serve(listener, app).await;
        });
        let served: serde_json::Value = client.get("/v1/health").await.unwrap();
        assert_eq!(served["served"], 1);
        next.abort();
        // A daemon whose start fails drops it unhanded: the path goes with it.
        let failed = EarlySocket::open(&path).unwrap();
        drop(failed);
        assert!(!path.exists(), "a failed start left its socket");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
