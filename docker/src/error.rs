//! Every way a pool operation can fail, each with a message that says what went wrong and,
//! where it matters, which container and task it concerned, so that the host can pass it on
//! to the model or the operator unchanged.

use thiserror::Error;

#[derive(Debug, Error)]
pub enum PoolError {
    #[error("invalid pool configuration: {0}")]
    InvalidConfig(String),

    #[error("invalid request: {0}")]
    InvalidRequest(String),

    #[error("Docker engine error while trying to {action}: {source}")]
    Docker {
        action: String,
        #[source]
        source: bollard::errors::Error,
    },

    /// The engine took too long over one operation: it is hung or overloaded.
    #[error(
        "the Docker engine did not {action} within {secs} s; is dockerd hung or overloaded? \
         `systemctl status docker`, `docker info`"
    )]
    EngineTimeout { action: String, secs: u64 },

    #[error("image {image:?} not found in the local Docker engine (build it with `make image`)")]
    ImageMissing { image: String },

    /// The engine has no runtime of that name registered (`sandbox.runtime`).
    #[error(
        "the Docker engine has no runtime {runtime:?} (it has: {registered}); to run the \
         sandboxes under it, {fix}"
    )]
    RuntimeMissing { runtime: String, registered: String, fix: String },

    #[error("network {name:?}: {reason}")]
    Network { name: String, reason: String },

    /// A pool name or network that belongs to another nexbot instance that is still alive.
    #[error("{what} belongs to another running nexbot, {owner}: {why}; {fix}")]
    Owned { what: String, owner: String, why: String, fix: String },

    #[error(
        "request {task_id} is {bytes} bytes as a protocol line, over the limit of {limit} bytes \
         (docs/protocol.md); it was not sent: shorten the task text or pass large data another way"
    )]
    TooLarge { task_id: String, bytes: usize, limit: usize },

    #[error("pool busy: all {size} containers are busy and the queue of {queue} is full")]
    Busy { size: usize, queue: usize },

    #[error("task {task_id} waited {waited_secs} s in the queue without getting a container")]
    QueueTimeout { task_id: String, waited_secs: u64 },

    #[error("the pool is shutting down and takes no new work")]
    ShuttingDown,

    #[error("task {task_id} was cancelled")]
    Cancelled { task_id: String },

    /// The operator killed the container serving the task (`Pool::kill`): the task's
    /// processes died with it, and the slot gets a new container.
    #[error(
        "task {task_id} was stopped: its container {container} was killed by operator; \
         nothing of the task kept running (the slot gets a fresh container), so submit it again \
         if it is still wanted"
    )]
    KilledByOperator { task_id: String, container: String },

    #[error("container {container} failed while serving {request}: {reason}")]
    ContainerFailed { container: String, request: String, reason: String },

    #[error("container {container} did not answer ping within {timeout_ms} ms")]
    PingTimeout { container: String, timeout_ms: u64 },

    #[error("no container {0:?} in this pool")]
    UnknownContainer(String),

    #[error("slot {0} has no container right now (it is being replaced)")]
    NoContainer(String),

    #[error("the pool did not become ready within {secs} s: {detail}")]
    StartupTimeout { secs: u64, detail: String },
}

impl PoolError {
    pub(crate) fn docker(action: impl Into<String>, source: bollard::errors::Error) -> Self {
        Self::Docker { action: action.into(), source }
    }
}
