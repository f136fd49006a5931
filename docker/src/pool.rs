//! The pool's public face and its dispatch policy: one task per container, a bounded FIFO
//! queue when all are busy, an immediate "pool busy" beyond it, the host's hard limit on every
//! task, cancellation, recycling, and a shutdown that drains before it removes.
//!
//! A container is handed out as a [`Lease`](lease::Lease); whatever happens to the task
//! (answer, timeout, crash, cancellation, or the caller dropping the future), the lease's `Drop`
//! puts the slot back in service or hands it to its supervisor for replacement, so no slot is
//! ever lost.
//!
//! Here: the [`Pool`] itself (start, tasks in, status out, operator actions, shutdown); the
//! dispatch policy over the queue and the rooms is in [`dispatch`], one task's exchange with
//! its container in [`lease`].

use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bollard::query_parameters::KillContainerOptionsBuilder;
use bollard::Docker;
use futures_util::future::join_all;
use nexbot_protocol::request::unix_now;
use nexbot_protocol::TaskFile;
use nexbot_protocol::{Request, RequestType, Response, ResponseBody};
use tokio::sync::{mpsc, Notify};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::config::PoolConfig;
use crate::connect::image_present;
use crate::engine::Engine;
use crate::error::PoolError;
use crate::link::LinkError;
use crate::member::{Member, Retirement};
use crate::network::{ensure_pool_network_owned, NetworkInfo};
use crate::pool_owner::{Owner, RunRegistration};
use crate::restart::RestartReason;
use crate::room::Room;
use crate::slot::{ContainerSnapshot, Slot, SlotState};
use crate::stats::{PoolStats, RoomCounters, SlotBackoff, TaskCounters};
use crate::supervisor;

use dispatch::Dispatch;
pub use lease::TaskIo;
use lease::{check_files, check_line_size};

mod dispatch;
mod lease;
mod pause;

pub(crate) use pause::NeededStart;

/// How long writing one request to a container's stdin may take.
const SEND_TIMEOUT: Duration = Duration::from_secs(10);
/// The longest soft timeout a task may ask for (one day).
pub const MAX_TASK_TIMEOUT_SECS: u64 = 24 * 60 * 60;
/// Progress lines kept for the report of a task that hits the hard limit.
const PROGRESS_KEPT: usize = 6;

/// The outcome of one health ping.
#[derive(Debug)]
pub struct PingResult {
    /// Slot id (`<pool>-<index>`).
    pub id: String,
    /// Short id of the container pinged (none while the slot has no container).
    pub container: Option<String>,
    pub round_trip: Result<Duration, PoolError>,
}

/// One task's answer, and the container that produced it ([`Pool::run_task`]): the task
/// record and the operator's `ps`/`logs` need to know where a task ran, and only the pool
/// knows for sure.
#[derive(Debug)]
pub struct TaskRun {
    /// The subagent's final answer (or the host's `timeout` answer at the hard limit).
    pub response: Response,
    /// Id of the slot that served the task (`<pool>-<index>`).
    pub slot: String,
    /// Full id of the container that served the task.
    pub container_id: String,
    /// Its short (12-character) id, as `ps` shows it.
    pub short_id: String,
    /// `true` when the task took a blank container (the room's first on it), `false` when
    /// it ran on a container its room had used before.
    pub fresh: bool,
    /// The files the task returned (`execute.return_files`), each whole and named in its
    /// `success`; empty otherwise.
    pub files: Vec<TaskFile>,
}

/// A warm pool of hardened subagent containers. Not `Clone`: share it behind an `Arc`.
/// Dropping it without [`Pool::shutdown`] stops supervision and leaves the containers to be
/// reaped by the next pool of the same name (their stdin closes, so they exit).
#[derive(Debug)]
pub struct Pool {
    pub(crate) inner: Arc<Inner>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
    /// Marks this run alive in this process until the pool is dropped.
    /// Alive in this process until the pool is shut down or dropped; another pool of the
    /// same name may start after either.
    run: Mutex<Option<RunRegistration>>,
    /// Where the engine is and how it answers, when the caller said ([`Pool::set_reach`]).
    reach: std::sync::OnceLock<crate::connect::EngineReach>,
}

#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) engine: Arc<Engine>,
    pub(crate) network: NetworkInfo,
    pub(crate) slots: Vec<Slot>,
    dispatch: Mutex<Dispatch>,
    /// Signalled whenever a task ends, so that shutdown can stop waiting.
    drained: Notify,
    ping_seq: AtomicU64,
    /// How tasks ended, for [`Pool::stats`].
    counts: TaskCounters,
    /// Blanks taken, waits for one, containers retired for their room, for [`Pool::stats`].
    rooms: RoomCounters,
    /// When dispatch last ran, for recycling's wait for a pause (`pool/pause.rs`).
    pause: pause::Pause,
}

impl Pool {
    /// Starts a pool owned by this process ([`Owner::current`]): checks the config and the
    /// image, ensures the internal network, removes containers left by an earlier run of a
    /// pool with the same name whose owner is gone, then brings all containers up in parallel
    /// and returns once every one has answered a ping.
    ///
    /// A pool name or network that belongs to another live nexbot instance (in this process
    /// or another) is refused with [`PoolError::Owned`], and nothing of it is touched.
    pub async fn start(docker: Docker, config: PoolConfig) -> Result<Pool, PoolError> {
        Self::start_owned(docker, config, Owner::current().clone()).await
    }

    /// [`Pool::start`] on behalf of `owner`, whose labels go on the containers (and on the
    /// network if this start creates it). Tests stand in for other daemons with it.
    pub async fn start_owned(
        docker: Docker,
        config: PoolConfig,
        owner: Owner,
    ) -> Result<Pool, PoolError> {
        config.validate()?;
        let instance = uuid::Uuid::new_v4().simple().to_string();
        let run = RunRegistration::register(&config.name, &instance, &owner)?;
        // First, as the containers' spec depends on it (gVisor's need more host threads).
        let runtime = crate::runtime::resolve_runtime(&docker, config.runtime.as_deref()).await?;
        let engine = Arc::new(Engine::new(docker, instance, owner, config, runtime));
        let config = &engine.config;
        // Independent preparations, run together: start-up time is the pool's first promise.
        let (network, (), reaped) = tokio::try_join!(
            ensure_pool_network_owned(&engine.docker, &config.network, &engine.owner),
            image_present(&engine.docker, &config.image),
            engine.reap_dead_runs(),
        )?;
        if reaped > 0 {
            tracing::info!(pool = %config.name, reaped, "removed containers left by an earlier run");
        }
        let startup = Duration::from_secs(config.startup_timeout_secs);
        let slots: Vec<Slot> = (0..engine.config.size)
            .map(|i| Slot::new(&engine.config.name, i, engine.config.log_lines_kept))
            .collect();
        let bring_up = join_all(
            slots.iter().map(|slot| engine.bring_up(slot.index, slot.logs.clone(), startup)),
        );
        let members = match tokio::time::timeout(startup, bring_up).await {
            Ok(results) => results.into_iter().collect::<Result<Vec<_>, _>>(),
            Err(_) => Err(PoolError::StartupTimeout {
                secs: engine.config.startup_timeout_secs,
                detail: format!("{} containers were not all ready", engine.config.size),
            }),
        };
        let members = match members {
            Ok(members) => members,
            Err(e) => {
                engine.stop.cancel();
                let _ = engine.reap().await;
                return Err(e);
            }
        };
        let inner = Arc::new(Inner {
            engine,
            network,
            slots,
            dispatch: Mutex::new(Dispatch::default()),
            drained: Notify::new(),
            ping_seq: AtomicU64::new(0),
            counts: TaskCounters::default(),
            rooms: RoomCounters::default(),
            pause: pause::Pause::default(),
        });
        let mut tasks = Vec::with_capacity(members.len() + 1);
        for (slot, member) in inner.slots.iter().zip(members) {
            inner.install(slot.index, member.clone());
            tasks.push(tokio::spawn(supervisor::supervise(inner.clone(), slot.index, member)));
        }
        tasks.push(tokio::spawn(supervisor::watch_events(inner.clone())));
        tracing::info!(
            pool = %inner.engine.config.name,
            size = inner.slots.len(),
            network = %inner.network.name,
            runtime = %inner.engine.runtime.name,
            owner = %inner.engine.owner.describe(),
            "pool ready"
        );
        Ok(Pool {
            inner,
            tasks: Mutex::new(tasks),
            run: Mutex::new(Some(run)),
            reach: std::sync::OnceLock::new(),
        })
    }

    /// Runs one `execute` request on a container of the default room ([`Room::default`])
    /// and returns its final response: a [`Pool::run_task`] that does not say where it ran.
    pub async fn execute(
        &self,
        request: Request,
        cancel: CancellationToken,
    ) -> Result<Response, PoolError> {
        self.run_task(request, &Room::default(), cancel, None).await.map(|run| run.response)
    }

    /// [`Pool::execute`], also forwarding `progress` responses to `progress`: a
    /// [`Pool::run_task`] that does not say where it ran.
    pub async fn execute_with_progress(
        &self,
        request: Request,
        cancel: CancellationToken,
        progress: Option<mpsc::Sender<Response>>,
    ) -> Result<Response, PoolError> {
        let room = Room::default();
        self.run_task(request, &room, cancel, progress).await.map(|run| run.response)
    }

    /// Runs one `execute` request on a container of `room` and returns its final response
    /// with the slot and container that served it. `progress` responses go to `progress`; a
    /// full channel drops progress lines rather than slow the pool down.
    ///
    /// - Rooms: a container that ran a task of one room never runs a task of another. The
    ///   task takes an idle container of its room if there is one, else a blank one (which
    ///   joins the room), up to [`PoolConfig::room_limit`] containers per room (the default
    ///   room has no limit but the pool). When blanks run short, the longest-idle container of
    ///   another room is removed and a blank takes its place.
    /// - A request without `timeout` gets the configured default. The host's hard limit is
    ///   `timeout + hard_limit_grace_secs`: past it the result is a `timeout` response with a
    ///   report of the progress seen, and the container is recycled.
    /// - When all containers are busy the task waits in a FIFO queue; when the queue is full
    ///   the answer is [`PoolError::Busy`] at once.
    /// - Cancelling `cancel` sends `cancel` to the container and returns its answer; without
    ///   an answer within `cancel_grace_ms` the container is recycled and the result is
    ///   [`PoolError::Cancelled`].
    /// - A container that dies or stops answering gives [`PoolError::ContainerFailed`] at once;
    ///   one the operator kills ([`Pool::kill`]) gives [`PoolError::KilledByOperator`].
    ///
    /// Every task is counted by how it ended in [`Pool::stats`].
    pub async fn run_task(
        &self,
        request: Request,
        room: &Room,
        cancel: CancellationToken,
        progress: Option<mpsc::Sender<Response>>,
    ) -> Result<TaskRun, PoolError> {
        self.run_task_with(request, room, cancel, TaskIo { progress, ..TaskIo::default() }).await
    }

    /// [`Pool::run_task`], also answering the task's `mcp_call`s through `io.mcp` while it
    /// runs (`docs/protocol.md#mcp-tools`): each call is handed over as it comes, calls run
    /// side by side, and each answer is written back as an `mcp_result`; calls still running
    /// when the task ends (its answer, its hard limit, a failed container) are dropped. A
    /// task without `io.mcp` is answered that it was granted no MCP tools.
    pub async fn run_task_with(
        &self,
        request: Request,
        room: &Room,
        cancel: CancellationToken,
        io: TaskIo,
    ) -> Result<TaskRun, PoolError> {
        let cancelled = cancel.clone();
        let result = self.dispatch_task(request, room, cancel, io).await;
        let outcome = result.as_ref().map(|run| &run.response);
        self.inner.counts.record(outcome, cancelled.is_cancelled());
        result
    }

    async fn dispatch_task(
        &self,
        mut request: Request,
        room: &Room,
        cancel: CancellationToken,
        io: TaskIo,
    ) -> Result<TaskRun, PoolError> {
        let config = &self.inner.engine.config;
        if request.kind != RequestType::Execute {
            return Err(PoolError::InvalidRequest(format!(
                "only execute requests run as tasks, not {:?}",
                request.kind.as_str()
            )));
        }
        // `0` means "the default" on the wire (docs/protocol.md): give it the pool's default
        // here, so the hard limit is measured from the timeout the subagent will apply.
        if request.timeout == Some(0) {
            request.timeout = None;
        }
        let timeout = *request.timeout.get_or_insert(config.default_task_timeout_secs);
        if timeout > MAX_TASK_TIMEOUT_SECS {
            return Err(PoolError::InvalidRequest(format!(
                "timeout {timeout} s is above the largest allowed, {MAX_TASK_TIMEOUT_SECS} s"
            )));
        }
        // The task's files are put before its `execute`, which names them.
        check_files(&io.files)?;
        request.files =
            (!io.files.is_empty()).then(|| io.files.iter().map(|f| f.name.clone()).collect());
        request.validate(unix_now()).map_err(|e| PoolError::InvalidRequest(e.to_string()))?;
        check_line_size(&request)?;
        let hard_limit = Duration::from_secs(timeout.saturating_add(config.hard_limit_grace_secs));
        let lease = self.inner.acquire(room, &request.id, &cancel).await?;
        let slot = self.inner.slots[lease.index].id.clone();
        let (container_id, short_id) =
            (lease.member.container_id.clone(), lease.member.short_id.clone());
        let fresh = lease.member.tasks_served.load(Ordering::Relaxed) == 0;
        let (response, files) = lease.run(request, cancel, io, timeout, hard_limit).await?;
        Ok(TaskRun { response, slot, container_id, short_id, fresh, files })
    }

    /// Pings every container (busy ones too) and reports each round trip.
    pub async fn ping_all(&self) -> Vec<PingResult> {
        join_all(self.inner.slots.iter().map(|slot| async move {
            let member = slot.member();
            let container = member.as_ref().map(|m| m.short_id.clone());
            let round_trip = match member {
                Some(member) => self.inner.ping(slot, &member).await,
                None => Err(PoolError::NoContainer(slot.id.clone())),
            };
            PingResult { id: slot.id.clone(), container, round_trip }
        }))
        .await
    }

    /// Pings the container named by `target` (see [`Pool::logs`]), busy or not, and returns
    /// the round trip.
    pub async fn ping(&self, target: &str) -> Result<Duration, PoolError> {
        let slot = self.inner.find(target)?;
        let member = slot.member().ok_or_else(|| PoolError::NoContainer(slot.id.clone()))?;
        self.inner.ping(slot, &member).await
    }

    /// What the image says it offers (tools, programs): the capabilities of a fresh pong
    /// from the first container that answers. `None` when none answers, or the image's
    /// subagent sends none.
    pub async fn capabilities(&self) -> Option<nexbot_protocol::Capabilities> {
        let timeout = self.inner.engine.config.ping_timeout();
        for slot in &self.inner.slots {
            let Some(member) = slot.member() else { continue };
            let id =
                format!("nexbot-pool-caps-{}", self.inner.ping_seq.fetch_add(1, Ordering::Relaxed));
            if let Ok(pong) = member.link.roundtrip(&Request::ping(id), timeout).await {
                if let ResponseBody::Pong { capabilities } = pong.body {
                    return capabilities;
                }
            }
        }
        None
    }

    /// Starts a service container (an MCP server) from `spec`, hardened like the pool's and
    /// labelled as this run's: removed by [`Pool::shutdown`], and by the next start when this
    /// daemon dies. See [`crate::Service`].
    pub async fn start_service(
        &self,
        spec: &crate::ServiceSpec,
    ) -> Result<(Arc<crate::Service>, crate::ServiceIo), PoolError> {
        if self.inner.engine.stop.is_cancelled() {
            return Err(PoolError::ShuttingDown);
        }
        self.inner.engine.start_service(spec).await
    }

    /// One entry per slot, for `ps`. Cheap: reads what the supervisors last recorded.
    pub fn snapshot(&self) -> Vec<ContainerSnapshot> {
        self.inner.slots.iter().map(Slot::snapshot).collect()
    }

    /// The OCI runtime the pool's containers run under (`sandbox.runtime`, or the engine's
    /// default when none was set), as the engine named it when the pool started.
    pub fn runtime(&self) -> &str {
        &self.inner.engine.runtime.name
    }

    /// Records where the engine is ([`crate::connect_reach`]); the first call counts.
    pub fn set_reach(&self, reach: crate::connect::EngineReach) {
        let _ = self.reach.set(reach);
    }

    /// Where the engine is, for `health`, `ps` and the dashboard: address, the remote
    /// engine's certificate, the last round trip (`None` unless [`Pool::set_reach`] said).
    pub fn engine_place(&self) -> Option<String> {
        self.reach.get().map(crate::connect::EngineReach::line)
    }

    /// The pool in numbers: containers up, queue depth, tasks by outcome, slots backing off,
    /// replacements. Cheap, like [`Pool::snapshot`]; the counters only grow.
    pub fn stats(&self) -> PoolStats {
        let queue_depth = self.inner.dispatch().queue.iter().filter(|w| !w.tx.is_closed()).count();
        let now = Instant::now();
        let mut stats = PoolStats {
            size: self.inner.engine.config.size,
            warm: 0,
            busy: 0,
            queue_depth,
            tasks: self.inner.counts.sample(),
            backoff: Vec::new(),
            unplanned_restarts_total: 0,
            planned_replacements_total: 0,
            blank: 0,
            bound: 0,
            rooms: self.inner.rooms.sample(),
            pending_removal: self.pending_removals(),
        };
        for slot in &self.inner.slots {
            let s = slot.lock();
            let up = s.member.as_ref().is_some_and(|m| !m.is_retired() && !m.link.is_closed());
            stats.warm += usize::from(up);
            stats.busy += usize::from(up && s.state == SlotState::Busy);
            if let Some(member) = s.member.as_ref().filter(|_| up) {
                if member.is_blank() {
                    stats.blank += 1;
                } else {
                    stats.bound += 1;
                }
            }
            stats.unplanned_restarts_total += s.restarts;
            stats.planned_replacements_total += s.planned;
            if let Some(backoff) = s.backoff.filter(|b| b.until > now) {
                stats.backoff.push(SlotBackoff {
                    slot: slot.id.clone(),
                    failures: backoff.failures,
                    wait_ms: backoff.until.duration_since(now).as_millis() as u64,
                    last_error: s.last_error.clone(),
                });
            }
        }
        stats
    }

    /// The last log lines (JSON, oldest first) of the slot named by `target`: slot id, slot
    /// index, or container id (prefix of at least 4). Lines of replaced containers are kept,
    /// followed by the pool's note of why they were replaced.
    pub fn logs(&self, target: &str) -> Result<Vec<String>, PoolError> {
        Ok(self.inner.find(target)?.logs.snapshot())
    }

    /// Replaces the container named by `target` (see [`Pool::logs`]); a task it was running
    /// gets an error. Returns the short id of the container being replaced. A planned
    /// replacement ([`RestartReason::RestartedByOperator`]): it does not count as a restart.
    pub fn restart(&self, target: &str) -> Result<String, PoolError> {
        let slot = self.inner.find(target)?;
        let member = slot.member().ok_or_else(|| PoolError::NoContainer(slot.id.clone()))?;
        member.retire(Retirement::new(
            RestartReason::RestartedByOperator,
            "restarted by the operator",
        ));
        slot.wake.notify_one();
        Ok(member.short_id.clone())
    }

    /// Sends SIGKILL to the container named by `target`, which stops every process of the
    /// task it was running; the pool replaces it (an unplanned restart,
    /// [`RestartReason::KilledByOperator`]). The task's caller gets
    /// [`PoolError::KilledByOperator`], once the signal was sent. Returns the short id of the
    /// killed container.
    ///
    /// Should the engine refuse the signal, the container is still retired: its supervisor
    /// removes it by force and starts a new one; the error says what the engine answered.
    pub async fn kill(&self, target: &str) -> Result<String, PoolError> {
        const WHY: &str = "killed by the operator (SIGKILL)";
        self.kill_because(target, RestartReason::KilledByOperator, WHY).await
    }

    /// [`Pool::kill`] for `cause`; `why` is what the task's caller reads (the container
    /// failed, unless `cause` is the operator's kill).
    pub async fn kill_because(
        &self,
        target: &str,
        cause: RestartReason,
        why: &str,
    ) -> Result<String, PoolError> {
        let slot = self.inner.find(target)?;
        let member = slot.member().ok_or_else(|| PoolError::NoContainer(slot.id.clone()))?;
        // Condemned before the signal: whoever then sees the container die (its waiter, the
        // supervisor) learns why, not only "exited with code 137".
        member.condemn(Retirement::new(cause.clone(), why));
        let options = KillContainerOptionsBuilder::default().signal("SIGKILL").build();
        let killed =
            self.inner.engine.docker.kill_container(&member.container_id, Some(options)).await;
        // Only now is the waiter woken (if the attach stream has not already ended): a caller
        // told of the kill can rely on the task's processes having been signalled.
        member.link.fail_because(Some(cause), why);
        killed.map_err(|e| PoolError::docker(format!("kill container {}", member.short_id), e))?;
        Ok(member.short_id.clone())
    }

    /// Which container has address `ip` on the internal network, and the task it is serving:
    /// the egress proxy attributes connections by source address with this.
    pub fn container_for_address(&self, ip: IpAddr) -> Option<(String, Option<String>)> {
        self.attribution_of(ip).map(|(container, task, _)| (container, task))
    }

    /// [`Pool::container_for_address`] with the room (chat) the container belongs to, if any.
    pub fn attribution_of(&self, ip: IpAddr) -> Option<(String, Option<String>, Option<String>)> {
        self.inner.slots.iter().find_map(|slot| {
            let member = slot.member()?;
            (member.ip == Some(ip) && !member.is_retired()).then(|| {
                let room = member.room().map(|r| r.to_string());
                (member.container_id.clone(), member.current_task().map(|t| t.id), room)
            })
        })
    }

    /// The internal network the containers sit on (its gateway is the host's address there).
    pub fn network(&self) -> &NetworkInfo {
        &self.inner.network
    }

    pub fn config(&self) -> &PoolConfig {
        &self.inner.engine.config
    }

    /// Stops taking work, lets in-flight tasks finish (each is bounded by its hard limit),
    /// then removes every container this pool created. Queued tasks get
    /// [`PoolError::ShuttingDown`].
    ///
    /// Takes `&self` so that a pool shared behind an `Arc` can be shut down while tasks still
    /// hold it; later calls find nothing left to do.
    pub async fn shutdown(&self) -> Result<(), PoolError> {
        let inner = self.inner.clone();
        inner.begin_shutdown();
        inner.drain().await;
        inner.engine.stop.cancel();
        let tasks = std::mem::take(&mut *self.tasks.lock().unwrap_or_else(|e| e.into_inner()));
        for task in tasks {
            let _ = tokio::time::timeout(Duration::from_secs(5), task).await;
        }
        inner.engine.reap().await?;
        let left = inner.engine.list().await?;
        if !left.is_empty() {
            // A creation that was in flight when supervision stopped may land late.
            tokio::time::sleep(Duration::from_millis(500)).await;
            inner.engine.reap().await?;
        }
        // Its containers are gone: the name is free for a next pool of this process.
        self.run.lock().unwrap_or_else(|e| e.into_inner()).take();
        tracing::info!(pool = %inner.engine.config.name, "pool shut down");
        Ok(())
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.inner.engine.stop.cancel();
    }
}

impl Inner {
    fn dispatch(&self) -> MutexGuard<'_, Dispatch> {
        self.dispatch.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn find(&self, target: &str) -> Result<&Slot, PoolError> {
        self.slots
            .iter()
            .find(|slot| slot.matches(target))
            .ok_or_else(|| PoolError::UnknownContainer(target.to_owned()))
    }

    /// Pings `member` and records the round trip on its slot.
    pub(crate) async fn ping(&self, slot: &Slot, member: &Member) -> Result<Duration, PoolError> {
        let id = format!("nexbot-pool-ping-{}", self.ping_seq.fetch_add(1, Ordering::Relaxed));
        let timeout = self.engine.config.ping_timeout();
        let started = Instant::now();
        match member.link.roundtrip(&Request::brief_ping(id), timeout).await {
            Ok(_) => {
                let rtt = started.elapsed();
                member.mark_proven();
                let mut s = slot.lock();
                s.last_ping = Some(rtt);
                s.last_ping_at = Some(Instant::now());
                drop(s);
                Ok(rtt)
            }
            Err(LinkError::Timeout) => Err(PoolError::PingTimeout {
                container: member.short_id.clone(),
                timeout_ms: self.engine.config.ping_timeout_ms,
            }),
            Err(LinkError::Closed(reason) | LinkError::Duplicate(reason)) => {
                Err(PoolError::ContainerFailed {
                    container: member.short_id.clone(),
                    request: "a ping".into(),
                    reason,
                })
            }
        }
    }

    /// Puts a freshly started member into its slot and makes it available.
    pub(crate) fn install(self: &Arc<Self>, index: usize, member: Arc<Member>) {
        self.slots[index].lock().member = Some(member.clone());
        self.release(index, &member);
        supervisor::sample_memory(self.clone(), index, member);
    }
}
