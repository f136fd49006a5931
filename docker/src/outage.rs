//! The engine as the degraded part: when the pool cannot reach the Docker engine, the
//! operator's first answer (`health`, `/status`, the dashboard) should name the engine, not
//! only say that no container is warm.
//!
//! There is no second record of engine errors: the pool's one account of what went wrong is
//! each slot's last error (what `subagents ps` shows). A slot whose attempts fail because
//! the engine cannot be reached marks that error with the time the run of such failures
//! began ([`crate::slot::SlotInner::engine_unreachable_since`]); the outage is read from the
//! slots that have no container up, and ends the moment one comes up again.
//!
//! # After the engine comes back
//!
//! - A graceful restart (`systemctl restart docker`) without live-restore stops every
//!   container: each slot's link closes, the slot retries with back-off until the engine
//!   answers, then starts a fresh container; the stopped ones are removed by their pending
//!   removals ([`crate::removal`]), which retry until the engine confirms them gone.
//! - Under the engine's `live-restore`, containers keep running through the restart, but the
//!   pool's attach streams (the containers' stdin and stdout) end with the old daemon, and
//!   with them the only way to talk to the subagent (its stdin is `StdinOnce`: it closes,
//!   and the subagent exits on it). Such a survivor is treated like a dead one — replaced,
//!   then force-removed once the engine answers — so no task is sent to a container the pool
//!   cannot hear, and none is left running behind.

use std::time::SystemTime;

use serde::Serialize;

use crate::error::PoolError;
use crate::pool::Pool;
use crate::slot::SlotState;

/// The pool could not reach the engine ([`Pool::engine_outage`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EngineOutage {
    /// When a slot's first attempt of this outage failed for want of the engine.
    pub since: SystemTime,
    /// That slot's last error, as `subagents ps` shows it.
    pub error: String,
}

/// `true` when `error` says the engine could not be reached at all (its socket is missing
/// or refuses connections), not that it answered with a refusal.
pub(crate) fn engine_unreachable(error: &PoolError) -> bool {
    use bollard::errors::Error as E;
    match error {
        PoolError::Docker { source, .. } => match source {
            E::HyperLegacyError { err } => err.is_connect(),
            E::IOError { .. } | E::SocketNotFoundError(_) => true,
            _ => false,
        },
        _ => false,
    }
}

impl Pool {
    /// Whether the engine is out of reach now: `Some` while a slot without a container
    /// failed its last attempt for want of the engine (the earliest such slot's account).
    pub fn engine_outage(&self) -> Option<EngineOutage> {
        self.inner
            .slots
            .iter()
            .filter_map(|slot| {
                let s = slot.lock();
                let up = matches!(s.state, SlotState::Idle | SlotState::Busy | SlotState::Draining);
                let since = s.engine_unreachable_since.filter(|_| !up)?;
                Some(EngineOutage { since, error: s.last_error.clone().unwrap_or_default() })
            })
            .min_by_key(|outage| outage.since)
    }

    /// How many containers the pool let go of but could not remove yet (the engine was
    /// away); each is retried until it is gone ([`crate::removal`]).
    pub fn pending_removals(&self) -> usize {
        self.inner.engine.removals.pending()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn error_from(docker: bollard::Docker) -> PoolError {
        let e = docker.ping().await.unwrap_err();
        PoolError::docker("ping", e)
    }

    #[tokio::test]
    async fn a_socket_nobody_listens_on_is_an_unreachable_engine() {
        // What a killed dockerd leaves: its socket file, and nobody accepting on it; then
        // the file gone too.
        let path = std::env::temp_dir().join(format!("nexbot-outage-{}.sock", std::process::id()));
        let _ = std::fs::remove_file(&path);
        drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
        let docker = bollard::Docker::connect_with_unix(
            path.to_str().unwrap(),
            5,
            bollard::API_DEFAULT_VERSION,
        )
        .unwrap();
        let refused = error_from(docker.clone()).await;
        assert!(engine_unreachable(&refused), "{refused:?}");
        assert!(refused.to_string().contains("client error (Connect)"), "{refused}");
        std::fs::remove_file(&path).unwrap();
        let absent = error_from(docker).await;
        assert!(engine_unreachable(&absent), "{absent:?}");
    }

    #[test]
    fn an_answer_from_the_engine_is_not_an_unreachable_one() {
        let refused = PoolError::docker(
            "create container",
            bollard::errors::Error::DockerResponseServerError {
                status_code: 409,
                message: "name in use".into(),
            },
        );
        assert!(!engine_unreachable(&refused));
        assert!(!engine_unreachable(&PoolError::EngineTimeout { action: "x".into(), secs: 1 }));
    }
}
