//! Container supervision: the warm pool of long-lived, hardened subagent containers.
//!
//! Through bollard against a real Docker engine this crate creates the containers, attaches to
//! their stdio, routes protocol responses to waiters by `id`, health-checks, recycles and
//! replaces them, and removes them on shutdown. Nothing in here decides *what* a task is; the
//! host does that.

pub mod config;
pub mod error;
pub mod network;
pub mod spec;

pub use config::PoolConfig;
pub use error::PoolError;
pub use network::{ensure_internal_network, remove_network, NetworkInfo};
