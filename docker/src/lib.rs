//! Container supervision: the warm pool of long-lived, hardened subagent containers.
//!
//! Through bollard against a real Docker engine this crate creates the containers, attaches to
//! their stdio, routes protocol responses to waiters by `id`, health-checks, recycles and
//! replaces them, and removes them on shutdown. Nothing in here decides *what* a task is; the
//! host does that.
//!
//! The API in one breath: [`Pool::start`] with a [`PoolConfig`], then [`Pool::execute`] (or
//! [`Pool::execute_with_progress`]) per task, [`Pool::snapshot`] / [`Pool::logs`] /
//! [`Pool::restart`] / [`Pool::kill`] / [`Pool::ping_all`] for the operator,
//! [`Pool::container_for_address`] for the egress proxy, and [`Pool::shutdown`] at the end.
//! [`ensure_internal_network`] and [`spec::container_spec`] are public for the parts that need
//! to see the network and the container spec (egress proxy, compose).

pub mod config;
mod engine;
pub mod error;
mod lines;
mod link;
mod logs;
mod member;
pub mod network;
mod pool;
mod slot;
pub mod spec;
mod supervisor;

pub use config::PoolConfig;
pub use error::PoolError;
pub use network::{ensure_internal_network, remove_network, NetworkInfo};
pub use pool::{PingResult, Pool};
pub use slot::{ContainerSnapshot, SlotState};
