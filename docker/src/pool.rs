//! The pool's public face and its dispatch policy: one task per container, a bounded FIFO
//! queue when all are busy, an immediate "pool busy" beyond it, the host's hard limit on every
//! task, cancellation, recycling, and a shutdown that drains before it removes.
//!
//! A container is handed out as a [`Lease`]; whatever happens to the task (answer, timeout,
//! crash, cancellation, or the caller dropping the future), the lease's `Drop` puts the slot
//! back in service or hands it to its supervisor for replacement, so no slot is ever lost.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bollard::query_parameters::KillContainerOptionsBuilder;
use bollard::Docker;
use futures_util::future::{join_all, BoxFuture};
use futures_util::stream::{FuturesUnordered, StreamExt};
use nexbot_protocol::request::unix_now;
use nexbot_protocol::{check_next_file, Assembly, McpAnswer, McpCall, McpCalls, TaskFile};
use nexbot_protocol::{
    RecentMessage, Report, ReportStatus, Request, RequestType, Response, ResponseBody,
    MAX_REQUEST_LINE,
};
use tokio::sync::{mpsc, oneshot, Notify};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::config::PoolConfig;
use crate::connect::image_present;
use crate::engine::Engine;
use crate::error::PoolError;
use crate::link::LinkError;
use crate::member::{CurrentTask, Member, Retirement};
use crate::network::{ensure_pool_network_owned, NetworkInfo};
use crate::owner::{Owner, RunRegistration};
use crate::restart::RestartReason;
use crate::room::Room;
use crate::slot::{ContainerSnapshot, Slot, SlotState};
use crate::stats::{PoolStats, RoomCounters, SlotBackoff, TaskCounters};
use crate::supervisor;

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
}

#[derive(Debug, Default)]
struct Dispatch {
    queue: VecDeque<Waiter>,
    shutting_down: bool,
}

/// A task waiting for a container of its room (or a blank its room may take).
#[derive(Debug)]
struct Waiter {
    room: Room,
    tx: oneshot::Sender<Lease>,
}

/// Who holds the pool's containers, counted under the dispatch lock.
#[derive(Debug, Default)]
struct Census {
    /// Containers up per room.
    held: HashMap<Room, usize>,
    /// Blank containers up and idle.
    idle_blanks: usize,
    /// Slots whose next container is on its way (starting, being replaced, backing off):
    /// each will be a blank.
    coming: usize,
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
        let engine = Arc::new(Engine::new(docker, instance, owner, config));
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
            owner = %inner.engine.owner.describe(),
            "pool ready"
        );
        Ok(Pool { inner, tasks: Mutex::new(tasks), run: Mutex::new(Some(run)) })
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
        let slot = self.inner.find(target)?;
        let member = slot.member().ok_or_else(|| PoolError::NoContainer(slot.id.clone()))?;
        // Condemned before the signal: whoever then sees the container die (its waiter, the
        // supervisor) learns the operator did it, not only "exited with code 137".
        member.condemn(Retirement::new(RestartReason::KilledByOperator, WHY));
        let options = KillContainerOptionsBuilder::default().signal("SIGKILL").build();
        let killed =
            self.inner.engine.docker.kill_container(&member.container_id, Some(options)).await;
        // Only now is the waiter woken (if the attach stream has not already ended): a caller
        // told of the kill can rely on the task's processes having been signalled.
        member.link.fail_because(Some(RestartReason::KilledByOperator), WHY);
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
        match member.link.roundtrip(&Request::ping(id), timeout).await {
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

    /// The most containers `room` may hold: the pool's room limit, or the whole pool for
    /// the default room (callers that name no room share it, as they shared the pool before
    /// rooms existed).
    fn room_limit(&self, room: &Room) -> usize {
        if *room == Room::default() {
            self.slots.len()
        } else {
            self.engine.config.room_limit()
        }
    }

    /// Who holds what, every slot but `skip` (whose lock the caller holds). Call it under the
    /// dispatch lock: that lock is what makes it safe to take the slots' locks one by one
    /// while one is held.
    fn census(&self, skip: Option<usize>) -> Census {
        let mut census = Census::default();
        for slot in self.slots.iter().filter(|slot| Some(slot.index) != skip) {
            let s = slot.lock();
            match s.member.as_ref().filter(|m| !m.is_retired() && !m.link.is_closed()) {
                Some(member) => match member.room() {
                    Some(room) => *census.held.entry(room).or_default() += 1,
                    None if s.state == SlotState::Idle => census.idle_blanks += 1,
                    None => {}
                },
                None if s.state != SlotState::Draining => census.coming += 1,
                None => {}
            }
        }
        census
    }

    /// Takes an idle container that `fits`, marking its slot busy. Under the dispatch lock.
    fn take_idle(self: &Arc<Self>, fits: impl Fn(&Member) -> bool) -> Option<Lease> {
        for slot in &self.slots {
            let mut s = slot.lock();
            if s.state != SlotState::Idle {
                continue;
            }
            let Some(member) = s.member.clone() else { continue };
            if member.is_retired() || member.link.is_closed() || !fits(&member) {
                continue;
            }
            s.state = SlotState::Busy;
            return Some(Lease::new(self.clone(), slot.index, member));
        }
        None
    }

    /// Removes the idle container of a room that has waited longest (never one of `keep`),
    /// so a blank takes its place. Under the dispatch lock.
    fn yield_longest_idle(&self, keep: Option<&Room>) {
        let mut oldest: Option<(Instant, &Slot, Arc<Member>)> = None;
        for slot in &self.slots {
            let s = slot.lock();
            if s.state != SlotState::Idle {
                continue;
            }
            let Some(member) = s.member.clone() else { continue };
            let Some(room) = member.room() else { continue };
            if keep == Some(&room) || member.is_retired() || member.link.is_closed() {
                continue;
            }
            let since = member.idle_since();
            if oldest.as_ref().is_none_or(|(at, _, _)| since < *at) {
                oldest = Some((since, slot, member));
            }
        }
        let Some((_, slot, member)) = oldest else { return };
        let room = member.room().map(|r| r.to_string()).unwrap_or_default();
        self.give_way(
            slot.lock(),
            &member,
            RestartReason::RoomYielded,
            format!("room {room}'s idle container gave way to a blank for another room"),
        );
    }

    /// Retires `member`, idle in the slot `s` guards, so that a blank takes its place: the
    /// slot is marked restarting, the retirement counted by its reason, and the member's link
    /// failed (its supervisor hears it at once and brings up a blank). Every way a room's
    /// container makes way goes through here.
    fn give_way(
        &self,
        mut s: std::sync::MutexGuard<'_, crate::slot::SlotInner>,
        member: &Member,
        reason: RestartReason,
        why: String,
    ) {
        s.state = SlotState::Restarting;
        drop(s);
        match reason {
            RestartReason::RoomIdle => self.rooms.record_idle_retired(),
            _ => self.rooms.record_yielded(),
        }
        member.retire(Retirement::new(reason, why));
    }

    /// After a blank was taken: when no blank is left or coming, the longest-idle container of
    /// another room makes way, so the next new room's first task still finds a warm one.
    /// `census` is the one taken before that blank was.
    fn refill_blanks(&self, census: &Census, taken_by: &Room) {
        if census.idle_blanks.saturating_sub(1) + census.coming == 0 {
            self.yield_longest_idle(Some(taken_by));
        }
    }

    /// Retires `member` of slot `index` if it has been idle in its room longer than the
    /// pool's `room_idle_secs`; `true` when it did. Its supervisor then replaces it with a
    /// blank.
    pub(crate) fn retire_if_idle_too_long(&self, index: usize, member: &Arc<Member>) -> bool {
        let _dispatch = self.dispatch();
        let slot = &self.slots[index];
        let s = slot.lock();
        let current = s.member.as_ref().is_some_and(|m| Arc::ptr_eq(m, member));
        let idle_for = member.idle_since().elapsed();
        if !current
            || s.state != SlotState::Idle
            || member.is_blank()
            || member.is_retired()
            || idle_for < self.engine.config.room_idle()
        {
            return false;
        }
        let why = format!(
            "idle in room {} for {} s",
            member.room().unwrap_or_default(),
            idle_for.as_secs()
        );
        self.give_way(s, member, RestartReason::RoomIdle, why);
        true
    }

    /// Takes an idle container of `room`, or a blank (up to the room's limit), or a place in
    /// the queue, or fails with "busy".
    async fn acquire(
        self: &Arc<Self>,
        room: &Room,
        task_id: &str,
        cancel: &CancellationToken,
    ) -> Result<Lease, PoolError> {
        let mut rx = {
            let mut dispatch = self.dispatch();
            if dispatch.shutting_down {
                return Err(PoolError::ShuttingDown);
            }
            if let Some(lease) = self.take_idle(|m| m.in_room(room)) {
                return Ok(lease);
            }
            let census = self.census(None);
            if census.held.get(room).copied().unwrap_or(0) < self.room_limit(room) {
                if let Some(lease) = self.take_idle(|m| m.is_blank() && m.bind(room)) {
                    self.rooms.record_blank_taken();
                    self.refill_blanks(&census, room);
                    return Ok(lease);
                }
                // No blank ready: this task waits for one. One idle container of another
                // room makes way unless enough blanks are on their way for every such waiter.
                self.rooms.record_blank_empty_wait();
                let needing = 1 + dispatch.queue.iter().filter(|w| !w.tx.is_closed()).count();
                if census.coming < needing {
                    self.yield_longest_idle(Some(room));
                }
            }
            dispatch.queue.retain(|w| !w.tx.is_closed());
            let capacity = self.engine.config.queue_capacity;
            if dispatch.queue.len() >= capacity {
                return Err(PoolError::Busy { size: self.slots.len(), queue: capacity });
            }
            let (tx, rx) = oneshot::channel();
            dispatch.queue.push_back(Waiter { room: room.clone(), tx });
            rx
        };
        let queue_timeout = Duration::from_secs(self.engine.config.queue_timeout_secs);
        let gave_up = tokio::select! {
            lease = &mut rx => return lease.map_err(|_| PoolError::ShuttingDown),
            _ = cancel.cancelled() => PoolError::Cancelled { task_id: task_id.to_owned() },
            _ = tokio::time::sleep(queue_timeout) => PoolError::QueueTimeout {
                task_id: task_id.to_owned(),
                waited_secs: queue_timeout.as_secs(),
            },
        };
        // A lease handed over while we were giving up goes back (its Drop releases it).
        rx.close();
        drop(rx.try_recv());
        Err(gave_up)
    }

    /// Makes `member` available again: to the first queued task of its room (a blank: to the
    /// first queued task whose room may take another container), or as idle — or, when it
    /// belongs to a room nobody waits for while other rooms wait for blanks that are not
    /// coming, it makes way for a blank.
    fn release(self: &Arc<Self>, index: usize, member: &Arc<Member>) {
        let mut dispatch = self.dispatch();
        let slot = &self.slots[index];
        let census = self.census(Some(index));
        let mut s = slot.lock();
        let current = s.member.as_ref().is_some_and(|m| Arc::ptr_eq(m, member));
        if !current || member.is_retired() || member.link.is_closed() {
            return;
        }
        if dispatch.shutting_down {
            s.state = SlotState::Draining;
            return;
        }
        let room = member.room();
        let may_take_blank = |waiter: &Waiter| {
            census.held.get(&waiter.room).copied().unwrap_or(0) < self.room_limit(&waiter.room)
        };
        loop {
            dispatch.queue.retain(|w| !w.tx.is_closed());
            let next = match &room {
                Some(room) => dispatch.queue.iter().position(|w| w.room == *room),
                None => dispatch.queue.iter().position(&may_take_blank),
            };
            let Some(position) = next else { break };
            let Some(waiter) = dispatch.queue.remove(position) else { break };
            if room.is_none() {
                if !member.bind(&waiter.room) {
                    dispatch.queue.insert(position, waiter);
                    break;
                }
                self.rooms.record_blank_taken();
            }
            s.state = SlotState::Busy;
            match waiter.tx.send(Lease::new(self.clone(), index, member.clone())) {
                Ok(()) => return,
                Err(mut unwanted) => {
                    unwanted.armed = false;
                    if room.is_none() {
                        // Bound for a task that went away: it served nobody, but a bound
                        // container stays in its room; as idle it gives way first.
                        break;
                    }
                }
            }
        }
        if let Some(room) = &room {
            let waiting_for_blanks = dispatch.queue.iter().filter(|w| may_take_blank(w)).count();
            if waiting_for_blanks > census.idle_blanks + census.coming {
                let why = format!("room {room}'s container gave way to a blank for a waiting room");
                self.give_way(s, member, RestartReason::RoomYielded, why);
                return;
            }
        }
        s.state = SlotState::Idle;
        member.mark_idle();
    }

    /// Called when a lease ends: recycle the container, leave it to its supervisor (it
    /// died), or put it back in service.
    fn finish(self: &Arc<Self>, index: usize, member: &Arc<Member>, recycle: Option<Retirement>) {
        member.set_current_task(None);
        let slot = &self.slots[index];
        if let Some(retirement) = recycle {
            member.retire(retirement);
            slot.wake.notify_one();
        } else if member.is_retired() || member.link.is_closed() {
            slot.wake.notify_one();
        } else {
            self.release(index, member);
        }
        self.drained.notify_waiters();
    }

    fn begin_shutdown(&self) {
        let queued = {
            let mut dispatch = self.dispatch();
            dispatch.shutting_down = true;
            std::mem::take(&mut dispatch.queue)
        };
        drop(queued);
        for slot in &self.slots {
            let mut s = slot.lock();
            if s.state == SlotState::Idle {
                s.state = SlotState::Draining;
            }
        }
    }

    /// Waits until no container serves a task. Every task ends by its hard limit; the wait
    /// is bounded by the latest of those plus a margin.
    async fn drain(&self) {
        loop {
            let latest = self
                .slots
                .iter()
                .filter_map(|s| s.member().and_then(|m| m.current_task()))
                .map(|t| t.hard_deadline)
                .max();
            let Some(latest) = latest else { return };
            if Instant::now() > latest + Duration::from_secs(5) {
                tracing::warn!("tasks still running past their hard limit at shutdown");
                return;
            }
            tokio::select! {
                _ = self.drained.notified() => {}
                _ = tokio::time::sleep(Duration::from_millis(100)) => {}
            }
        }
    }
}

/// The right to run one task on one container. Whatever way it ends, `Drop` settles the slot.
#[derive(Debug)]
struct Lease {
    inner: Arc<Inner>,
    index: usize,
    member: Arc<Member>,
    /// `false` for a lease that was never handed out (nothing to settle).
    armed: bool,
    /// Set once the request was written: abandoning the lease after that recycles.
    used: bool,
    /// Set when `run` saw the task to its end (answer, timeout, failure or cancel).
    done: bool,
    /// `Some(why)` to recycle the container when the lease ends.
    recycle: Option<Retirement>,
}

impl Lease {
    fn new(inner: Arc<Inner>, index: usize, member: Arc<Member>) -> Self {
        Self { inner, index, member, armed: true, used: false, done: false, recycle: None }
    }

    async fn run(
        mut self,
        request: Request,
        cancel: CancellationToken,
        io: TaskIo,
        timeout_secs: u64,
        hard_limit: Duration,
    ) -> Result<(Response, Vec<TaskFile>), PoolError> {
        let TaskIo { progress, mcp, files } = io;
        let takes_files = request.return_files == Some(true);
        let member = self.member.clone();
        if member.on_last_task() {
            // Its successor starts now, while it serves its last task.
            self.inner.slots[self.index].prewarm.notify_one();
        }
        let task_id = request.id.clone();
        let correlation_id = request.correlation_id.clone();
        let started = Instant::now();
        let hard_deadline = tokio::time::Instant::from_std(started + hard_limit);
        member.set_current_task(Some(CurrentTask {
            id: task_id.clone(),
            started,
            hard_deadline: started + hard_limit,
        }));
        // The retirement, set before the link dies, tells an operator's kill from a crash.
        let failed = |reason: String| match member.retirement() {
            Some(r) if r.cause == RestartReason::KilledByOperator => PoolError::KilledByOperator {
                task_id: task_id.clone(),
                container: member.short_id.clone(),
            },
            _ => PoolError::ContainerFailed {
                container: member.short_id.clone(),
                request: format!("task {task_id}"),
                reason,
            },
        };
        let mut answers = member.link.register(&task_id).map_err(|e| match e {
            LinkError::Closed(reason) => failed(reason),
            other => failed(format!("{other:?}")),
        })?;
        self.used = true;
        // Its files first, chunk by chunk (`docs/protocol-files.md#files`); the subagent refuses an
        // `execute` whose files did not all arrive whole.
        let id = task_id.as_str();
        let puts = files.iter().flat_map(|file| {
            let size = file.bytes.len() as u64;
            file.chunks()
                .map(move |(offset, data)| Request::put_file(id, &file.name, offset, size, data))
        });
        for line in puts.chain(std::iter::once(request)) {
            if let Err(LinkError::Closed(reason)) = member.link.send(&line, SEND_TIMEOUT).await {
                member.link.unregister(&task_id);
                return Err(failed(reason));
            }
        }
        drop(files);
        // The files the task returns, as their chunks arrive.
        let mut returned = Returned::default();

        let mut seen: VecDeque<RecentMessage> = VecDeque::new();
        let mut cancel_deadline: Option<tokio::time::Instant> = None;
        // The task's MCP calls being answered; dropped with the loop when the task ends.
        let mut calls: FuturesUnordered<BoxFuture<'static, (String, McpAnswer)>> =
            FuturesUnordered::new();
        let outcome = loop {
            let cancel_at = cancel_deadline;
            let cancel_wait = async move {
                match cancel_at {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                answer = answers.recv() => match answer {
                    Some(response) if !response.is_final() => {
                        if let Some(call) = response.as_mcp_call() {
                            calls.push(answer_call(mcp.as_ref(), call));
                            continue;
                        }
                        if let ResponseBody::File { name, offset, size, data } = &response.body {
                            if takes_files {
                                returned.take(&task_id, name, *offset, *size, data);
                            } else {
                                tracing::warn!(task_id = %task_id, file = %name, "a file from a task that was not asked for files; dropped");
                            }
                            continue;
                        }
                        remember_progress(&mut seen, &response);
                        if let Some(tx) = &progress {
                            let _ = tx.try_send(response);
                        }
                    }
                    Some(response) => {
                        member.mark_proven();
                        if matches!(response.body, ResponseBody::Timeout { .. }) {
                            self.recycle = Some(Retirement::new(
                                RestartReason::TaskTimedOut,
                                "recycled after its task timed out",
                            ));
                        } else if let Some(why) = not_clean(&response) {
                            // A task never sees anything of another: a container the subagent
                            // could not scrub (or that does not say) serves no further task.
                            self.recycle = Some(Retirement::new(
                                RestartReason::NotClean,
                                format!("recycled: {why}"),
                            ));
                        }
                        break Ok(response);
                    }
                    None => break Err(failed(member.link.reason())),
                },
                Some((call_id, answer)) = calls.next(), if !calls.is_empty() => {
                    let line = Request::mcp_result(task_id.clone(), call_id, answer);
                    // A link that cannot take it is dead: the answers channel says so next.
                    let _ = member.link.send(&line, SEND_TIMEOUT).await;
                }
                _ = tokio::time::sleep_until(hard_deadline) => {
                    self.recycle = Some(Retirement::new(
                        RestartReason::TaskTimedOut,
                        format!(
                            "recycled after task {task_id} passed the host's hard limit of {} s",
                            hard_limit.as_secs()
                        ),
                    ));
                    break Ok(hard_timeout_response(
                        &task_id,
                        correlation_id.as_deref(),
                        timeout_secs,
                        hard_limit,
                        seen.drain(..).collect(),
                    ));
                }
                _ = cancel.cancelled(), if cancel_deadline.is_none() => {
                    let grace = Duration::from_millis(self.inner.engine.config.cancel_grace_ms);
                    cancel_deadline = Some(tokio::time::Instant::now() + grace);
                    let _ = member.link.send(&Request::cancel(task_id.clone()), SEND_TIMEOUT).await;
                }
                _ = cancel_wait => {
                    self.recycle = Some(Retirement::new(
                        RestartReason::TaskAbandoned,
                        format!("recycled: task {task_id} did not stop after cancel"),
                    ));
                    break Err(PoolError::Cancelled { task_id: task_id.clone() });
                }
            }
        };
        member.link.unregister(&task_id);
        self.done = true;
        let outcome = outcome.map(|response| {
            let files = returned.finish(&task_id, &response);
            (response, files)
        });
        if outcome.is_ok() && self.recycle.is_none() {
            let served = member.count_task();
            if served >= member.task_budget {
                self.recycle = Some(Retirement::new(
                    RestartReason::Recycled,
                    format!("recycled after serving {served} tasks"),
                ));
            }
        }
        outcome
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let recycle = self.recycle.take().or_else(|| {
            // The caller dropped the future mid-task: the container's state is unknown.
            (self.used && !self.done).then(|| {
                self.inner.counts.record_abandoned();
                Retirement::new(
                    RestartReason::TaskAbandoned,
                    "recycled: its task was abandoned mid-run",
                )
            })
        });
        self.inner.finish(self.index, &self.member, recycle);
    }
}

/// What a task's caller gives it besides the request: where its `progress` lines go, who
/// answers its `mcp_call`s, and the files for its scratch folder.
#[derive(Debug, Default)]
pub struct TaskIo {
    /// Progress lines as they come; a full channel drops them rather than slow the pool.
    pub progress: Option<mpsc::Sender<Response>>,
    /// The task's granted MCP tools' caller (the host's); `None`: it was granted none.
    pub mcp: Option<Arc<dyn McpCalls>>,
    /// Put into the task's scratch folder before it starts (`put_file`); its `execute`
    /// names them. Within the caps of [`nexbot_protocol::files`].
    pub files: Vec<TaskFile>,
}

/// Refuses files the subagent would refuse (a name, a size, too many), before anything is
/// sent.
fn check_files(files: &[TaskFile]) -> Result<(), PoolError> {
    let mut bytes = 0;
    for (i, file) in files.iter().enumerate() {
        check_next_file(&file.name, file.bytes.len() as u64, i, bytes)
            .map_err(PoolError::InvalidRequest)?;
        if files[..i].iter().any(|f| f.name == file.name) {
            return Err(PoolError::InvalidRequest(format!("file {:?} is given twice", file.name)));
        }
        bytes += file.bytes.len() as u64;
    }
    Ok(())
}

/// The files a task returns, put together from their `file` chunks within the caps of
/// [`nexbot_protocol::files`]. A file that breaks a rule is dropped (and logged); the task's
/// answer stands.
#[derive(Debug, Default)]
struct Returned {
    whole: Vec<TaskFile>,
    arriving: Option<Assembly>,
    /// Names of files dropped on the way: later chunks of theirs are ignored.
    dropped: Vec<String>,
}

impl Returned {
    fn take(&mut self, task_id: &str, name: &str, offset: u64, size: u64, data: &str) {
        if self.dropped.iter().any(|d| d == name) {
            return;
        }
        let result = (|| {
            let mut arriving = match self.arriving.take() {
                Some(a) if a.name() == name => a,
                other => {
                    if let Some(unfinished) = other {
                        self.dropped.push(unfinished.name().to_owned());
                        tracing::warn!(task_id, file = %unfinished.name(), "a returned file stopped before it was whole; dropped");
                    }
                    if self.whole.iter().any(|f| f.name == name) {
                        return Err(format!("file {name:?} came twice"));
                    }
                    let before: u64 = self.whole.iter().map(|f| f.bytes.len() as u64).sum();
                    Assembly::start(name, size, self.whole.len(), before)?
                }
            };
            arriving.push(offset, data)?;
            if arriving.is_complete() {
                self.whole.push(arriving.finish()?);
            } else {
                self.arriving = Some(arriving);
            }
            Ok(())
        })();
        if let Err(why) = result {
            tracing::warn!(task_id, file = %name, error = %why, "a returned file broke a rule; dropped");
            self.dropped.push(name.to_owned());
        }
    }

    /// The whole files the task's `success` names; none for any other answer.
    fn finish(self, task_id: &str, response: &Response) -> Vec<TaskFile> {
        let ResponseBody::Success { files: named, .. } = &response.body else {
            return Vec::new();
        };
        let (kept, unnamed): (Vec<_>, Vec<_>) =
            self.whole.into_iter().partition(|f| named.contains(&f.name));
        for name in named.iter().filter(|n| !kept.iter().any(|f| &&f.name == n)) {
            tracing::warn!(task_id, file = %name, "the answer names a returned file that did not arrive whole");
        }
        for file in unnamed {
            tracing::warn!(task_id, file = %file.name, "a returned file the answer does not name; dropped");
        }
        kept
    }
}

/// The answer to one `mcp_call`, with its call id: from `mcp`, or, for a task granted no MCP
/// tools, a refusal.
fn answer_call(
    mcp: Option<&Arc<dyn McpCalls>>,
    call: McpCall,
) -> BoxFuture<'static, (String, McpAnswer)> {
    let call_id = call.call_id.clone();
    match mcp {
        Some(mcp) => {
            let answer = mcp.call(call);
            Box::pin(async move { (call_id, answer.await) })
        }
        None => {
            let refusal = format!("no MCP tool was granted to this task, so not {}", call.tool);
            Box::pin(std::future::ready((call_id, McpAnswer::Error(refusal))))
        }
    }
}

/// Refuses a request whose protocol line would be longer than the subagent reads
/// ([`MAX_REQUEST_LINE`]): sent anyway, it would be dropped as a framing error that names no
/// task, and the caller would wait for the hard limit. Measured without copying the request
/// (it may hold secrets).
fn check_line_size(request: &Request) -> Result<(), PoolError> {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    serde_json::to_writer(&mut count, request)
        .map_err(|e| PoolError::InvalidRequest(format!("request could not be encoded: {e}")))?;
    if count.0 > MAX_REQUEST_LINE {
        return Err(PoolError::TooLarge {
            task_id: request.id.clone(),
            bytes: count.0,
            limit: MAX_REQUEST_LINE,
        });
    }
    Ok(())
}

fn remember_progress(seen: &mut VecDeque<RecentMessage>, response: &Response) {
    if let ResponseBody::Progress { event, tool, detail } = &response.body {
        let mut content = format!("{event:?}");
        if let Some(tool) = tool {
            content.push_str(&format!(" {tool}"));
        }
        if let Some(detail) = detail {
            content.push_str(&format!(": {detail}"));
        }
        if seen.len() == PROGRESS_KEPT {
            seen.pop_front();
        }
        seen.push_back(RecentMessage { role: "progress".into(), content });
    }
}

/// The `timeout` answer the host gives when the subagent itself did not answer in time.
fn hard_timeout_response(
    task_id: &str,
    correlation_id: Option<&str>,
    timeout_secs: u64,
    hard_limit: Duration,
    recent: Vec<RecentMessage>,
) -> Response {
    let error = format!(
        "task {task_id} got no answer within the host's hard limit of {} s (timeout {timeout_secs} s + grace); the container was recycled",
        hard_limit.as_secs()
    );
    let mut report = Report::new(
        ReportStatus::Timeout,
        task_id,
        error.clone(),
        timeout_secs,
        0,
        Vec::new(),
        std::iter::empty(),
    );
    report.recent_messages = recent;
    Response::timeout(task_id, correlation_id, error, report)
}

/// Why a container may not serve another task after `response`, if it may not: its subagent
/// did not report a clean scrub (docs/protocol.md, `scrub`).
fn not_clean(response: &Response) -> Option<String> {
    match &response.scrub {
        Some(scrub) if scrub.clean => None,
        Some(scrub) => Some(format!(
            "not clean after its task ({})",
            scrub.left.as_deref().unwrap_or("no reason given")
        )),
        None => Some("its subagent did not report a scrub after the task".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_of_exactly_the_limit_is_sent_and_one_byte_more_is_not() {
        let with = |len: usize| Request::execute("t-1", "x".repeat(len));
        let overhead = serde_json::to_vec(&with(1)).unwrap().len() - 1;
        let exact = with(MAX_REQUEST_LINE - overhead);
        assert_eq!(serde_json::to_vec(&exact).unwrap().len(), MAX_REQUEST_LINE);
        check_line_size(&exact).unwrap();
        let err = check_line_size(&with(MAX_REQUEST_LINE - overhead + 1)).unwrap_err();
        let PoolError::TooLarge { task_id, bytes, limit } = &err else { panic!("{err:?}") };
        assert_eq!((task_id.as_str(), *bytes, *limit), ("t-1", MAX_REQUEST_LINE + 1, 1_048_576));
        let text = err.to_string();
        assert!(text.contains("1048577 bytes") && text.contains("1048576 bytes"), "{text}");
    }
}
