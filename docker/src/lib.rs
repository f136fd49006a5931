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
//! [`pool_owner`]): [`Pool::start_owned`] and [`ensure_pool_network_owned`] let tests stand in for
//! other daemons. The host reaches Docker only through this crate: [`connect`] makes its connection,
//! and [`engine_version`], [`image_present`] and [`network_gateway`] answer `nexbot doctor`.
//!
//! # Start (`network.rs`, `pool_owner.rs`, `spec.rs`, `engine.rs`)
//!
//! [`Pool::start`] ensures the internal network (internal, inter-container traffic off, no
//! IPv6; a wrong existing network is recreated when unused, else refused with the fix), refuses
//! a pool name or network owned by another *live* daemon (owner labels: instance id, pid,
//! process start time, boot id), removes containers a dead owner (or this process's dropped
//! pools) left, and brings every container up in parallel: create from the hardened spec,
//! attach stdio, start, first pong. Each container is a *member* of a *slot* (`member.rs`,
//! `slot.rs`); a slot outlives its members, so `ps` ids, restart counts and recent logs survive
//! replacement.
//!
//! # Link (`link.rs`, `logs.rs`)
//!
//! Requests are written as JSON lines to the container's stdin; a reader task splits the
//! attach stream (stdout → `Response`s through the protocol codec, which keeps partial lines
//! between frames; stderr → re-emitted via `tracing` with the container id and kept in a ring)
//! and routes each response to its waiter by `id`. Pings and tasks share a link, so a busy
//! container still answers health pings. When the link dies every waiter is woken at once with
//! the reason (exit code, OOM, unanswered ping): no waiter can hang.
//!
//! # Rooms and dispatch (`room.rs`, `pool.rs`, `pool/dispatch.rs`)
//!
//! Every task runs in a [`Room`] (the host names it by the chat; this crate compares opaque
//! keys). A container starts *blank*; the first task handed to it binds it to that task's room
//! for life (`Member::bind`, once). A task takes an idle container of its room, else a blank
//! (up to [`PoolConfig::room_limit`] per room), else waits in a bounded FIFO queue; beyond it,
//! `Busy` at once. A released container goes to the first waiter of its room. Blanks come back
//! by retiring bound containers: idle past `room_idle_secs` (`RestartReason::RoomIdle`), or,
//! when a task finds no blank and none is on its way, the longest-idle container of another
//! room (`RoomYielded`). All dispatch decisions are made under one dispatch lock (the census of
//! rooms, idle blanks and slots coming back), so a room's count and a blank's binding never
//! race. A blank is warm: the subagent builds what a first task would build lazily before it
//! answers its first ping.
//!
//! A task holds a lease whose `Drop` settles the slot however the task ended (answer,
//! hard-limit timeout, crash, cancel, the caller dropping the future), so no slot is ever
//! lost. Past the hard limit (`timeout + hard_limit_grace_secs`) the waiter gets a `timeout`
//! response with a report of the progress seen. A container is recycled after any timeout,
//! crash, abandoned task, an answer without a clean `scrub`, or its task budget
//! (`max_tasks_per_container` minus a random quarter, so containers do not all recycle
//! together; the replacement starts during the last task). An `execute` line over the
//! protocol's line limit is refused before it is sent (`PoolError::TooLarge`).
//!
//! # Supervision and accounting (`supervisor.rs`, `restart.rs`, `stats.rs`)
//!
//! Per slot, a task watches the member (link closed, condemned, ping timeout), removes and
//! replaces it — at once the first time, then with exponential back-off while replacements
//! keep failing. A removal the engine cannot do (it is away) stays pending and is retried
//! until the container is gone (`removal.rs`); while the slots fail for want of the engine,
//! [`Pool::engine_outage`] names it, from each slot's last error (`outage.rs`, which also says
//! what happens after an engine restart and under `live-restore`). One task per pool follows the engine's `oom`/`die` events: an OOM condemns the
//! container even when only a child process was killed. Every replacement has a
//! `RestartReason`. *Planned* ones — the pool's policy retiring a container that still
//! answered (task budget, not clean, timed-out or abandoned task, room retirement, operator
//! restart) — count as a slot's `planned_replacements`; all others (died, OOM-killed, stopped
//! answering, killed by the operator) as its `restarts`, so a rising restart count always means
//! trouble; only those feed the back-off. [`Pool::kill`] condemns the member *before* the
//! SIGKILL and wakes the task's waiter only after it, so the caller gets `KilledByOperator`.
//!
//! # Service containers (`service.rs`)
//!
//! [`Pool::start_service`] runs another program (an MCP server) as the main process of a
//! container made from the same hardened spec, with only the environment its [`ServiceSpec`]
//! names (each variable checked like the pool's: no secret-looking names, no credentials in
//! URLs), no scratch or skills mount, and the pool run's labels: the next start reaps a dead
//! daemon's, the shutdown removes this run's. Its stdout and stdin are plain bytes for the
//! caller ([`ServiceIo`]); its stderr goes to the log and a ring ([`Service::logs`]); when it
//! dies, [`Service::exited`] gives the engine's account.
//!
//! # Shutdown
//!
//! [`Pool::shutdown`] refuses new work, fails queued tasks, waits for running ones (each
//! bounded by its hard limit), then removes every container of this pool instance. Dropping a
//! `Pool` without it stops supervision; the containers' stdin closes (`StdinOnce`), they exit,
//! and the next pool of the same name reaps them.
//!
//! # Hardening (`spec.rs`, one place)
//!
//! Non-root user, read-only root, size-limited tmpfs `/tmp` and `/workspace/scratch`,
//! `cap-drop ALL`, `no-new-privileges`, pids/memory (swap = memory)/CPU limits, no init (the
//! subagent is pid 1: the clean room, `subagent/src/scrub.rs`), no log driver (no copy of a
//! task's lines on the engine's disk), skills read-only at `/workspace/skills`, optional OCI
//! runtime, internal network only, no Docker socket, and no secret in env, labels or cmd (the
//! config refuses secret-looking env names and URLs with credentials; secrets travel only on
//! stdin and the serialized line is zeroized after writing).
//!
//! On an internal network a container has no route off the host, but it *can* reach any
//! address of the host itself (traffic to host addresses is not forwarded, so Docker's
//! isolation rules do not see it). The egress firewall (`nexbot-egress`) closes that for the
//! pool's bridge; containers cannot reach each other (ICC off) and have no IPv6. Other host
//! services should still listen on `127.0.0.1`.

pub mod config;
mod connect;
mod egress_node;
mod engine;
pub mod error;
mod hardening;
mod images;
mod lines;
mod link;
mod logs;
mod member;
pub mod network;
mod outage;
mod own_container;
mod pool;
pub mod pool_owner;
mod remote;
mod removal;
mod restart;
mod room;
pub mod runtime;
mod service;
mod skills_copy;
mod slot;
pub mod spec;
mod stats;
mod supervisor;

pub use config::{
    EngineAddress, InvalidField, PoolConfig, RemoteEngine, SandboxConfig, DEFAULT_NODE_IMAGE,
};
pub use connect::{
    connect, connect_reach, engine_root_dir, engine_version, image_present, image_program,
    network_gateway, Docker, EngineReach, EngineUnreachable, ENGINE_TIMEOUT,
};
pub use egress_node::{
    remove_egress_node, start_egress_node, EgressNodeLink, EgressNodeSpec, LABEL_EGRESS_NODE,
};
pub use error::PoolError;
pub use hardening::Hardening;
pub use images::{load_image_file, sync_image, ImageSync};
pub use network::{
    ensure_internal_network, ensure_pool_network, ensure_pool_network_owned, remove_network,
    NetworkInfo,
};
pub use outage::EngineOutage;
pub use own_container::{
    discover_own_container, OwnContainer, SelfDiscovery, DISCOVERY_ATTEMPTS, DISCOVERY_PAUSE,
};
pub use pool::{PingResult, Pool, TaskIo, TaskRun, MAX_TASK_TIMEOUT_SECS};
pub use pool_owner::Owner;
pub use restart::RestartReason;
pub use room::{Room, DEFAULT_ROOM};
pub use runtime::{probe, resolve_runtime, runtime_fix, OciRuntime, Probe};
pub use service::{
    check_mount_target, Service, ServiceIo, ServiceLimits, ServiceMount, ServiceSpec, LABEL_SERVICE,
};
pub use skills_copy::{fill_skills_volume, pack_folder, remove_skills_volume, skills_volume};
pub use slot::{count_by_state, ContainerSnapshot, SlotState};
pub use stats::{PoolStats, RoomCounts, SlotBackoff, TaskCounts};
