//! Container supervision: the warm pool of long-lived, hardened subagent containers.
//!
//! Through bollard against a real Docker engine this crate creates the containers, attaches to
//! their stdio, routes protocol responses to waiters by `id`, health-checks, recycles and
//! replaces them, and removes them on shutdown. Nothing in here decides *what* a task is; the
//! host does that.
//!
//! The API in one breath: [`Pool::start`] with a [`PoolConfig`], then [`Pool::run_task`] in a
//! [`Room`] (which says which container ran the task; a container never serves two rooms) or [`Pool::execute`] / [`Pool::execute_with_progress`]
//! per task, [`Pool::snapshot`] / [`Pool::stats`] / [`Pool::logs`] / [`Pool::restart`] /
//! [`Pool::kill`] / [`Pool::ping`] / [`Pool::ping_all`] for the operator,
//! [`Pool::container_for_address`] for the egress proxy, and [`Pool::shutdown`] at the end.
//! [`ensure_internal_network`] (and [`ensure_pool_network`]) and [`spec::container_spec`] are
//! public for the parts that need to see the network and the container spec (egress proxy,
//! compose). A pool and its network belong to one daemon instance, an [`Owner`] (see
//! [`owner`]): [`Pool::start_owned`] and [`ensure_pool_network_owned`] let tests stand in for
//! other daemons. The host reaches Docker only through this crate: [`connect`] makes its connection,
//! and [`engine_version`], [`image_present`] and [`network_gateway`] answer `nexbot doctor`.

pub mod config;
mod connect;
mod engine;
pub mod error;
mod lines;
mod link;
mod logs;
mod member;
pub mod network;
mod own;
pub mod owner;
mod pool;
mod restart;
mod room;
mod slot;
pub mod spec;
mod stats;
mod supervisor;

pub use config::{InvalidField, PoolConfig};
pub use connect::{
    connect, engine_version, image_present, network_gateway, Docker, EngineUnreachable,
    ENGINE_TIMEOUT,
};
pub use error::PoolError;
pub use network::{
    ensure_internal_network, ensure_pool_network, ensure_pool_network_owned, remove_network,
    NetworkInfo,
};
pub use own::{
    discover_own_container, OwnContainer, SelfDiscovery, DISCOVERY_ATTEMPTS, DISCOVERY_PAUSE,
};
pub use owner::Owner;
pub use pool::{PingResult, Pool, TaskRun, MAX_TASK_TIMEOUT_SECS};
pub use restart::RestartReason;
pub use room::{Room, DEFAULT_ROOM};
pub use slot::{count_by_state, ContainerSnapshot, SlotState};
pub use stats::{PoolStats, RoomCounts, SlotBackoff, TaskCounts};
