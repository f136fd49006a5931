//! The scheduler: jobs of a chat (recurring by cron, with seconds, or one-shot) and the
//! `HEARTBEAT.md` checks, run as agent turns for their chat by a bounded pool of workers; and
//! the `schedule_task` tool a turn makes, lists and cancels its chat's jobs with ([`tool`]).
//!
//! Why a crate of its own: when a job runs is a promise kept across restarts (the ledger, the
//! missed-run policy, fairness between chats), and none of it needs the daemon. What it needs
//! is handed in at the wiring ([`SchedulerParts`]): the store, the [`Agent`] whose turn a run
//! is, the [`Channel`] its answer goes out through (the host's outbound router), and a stop
//! token. So it knows no channel crate, no Docker, no egress and no HTTP server, and not the
//! daemon's life cycle; its section of `config.toml` is its own ([`SchedulerConfig`]).
//!
//! Why it is shaped like this:
//! - **Nothing is silently dropped, nothing fires N times.** Every due time ends up in the
//!   run ledger (`job_runs`): run (`ok`/`failed`/`cancelled`), `skipped` (missed while the
//!   daemon was down, by the job's policy) or `dropped: busy` (the queue was full). A job's
//!   next time is moved *before* its run is handed over, so a crash never repeats a run;
//!   after an outage a job runs at most once ([`plan`]).
//! - **Bounded and fair.** At most `workers` turns run and `queue` wait; one more is refused
//!   at once. Chats (and the heartbeat) take turns for the workers and a full queue drops the
//!   newest run of the chat with the most waiting (`queue.rs`), so one chat's fifty jobs
//!   cannot starve another chat or the heartbeat; a job's drops within a minute are one row.
//! - **It feeds turns like a channel**, so the daemon stops it with its inputs, first
//!   ([`Scheduler::run`]'s stop token); runs still going are cancelled and recorded as such.
//! - **The heartbeat is jobs too**: each valid check of `HEARTBEAT.md` is a job of the owner's
//!   chat (`heartbeat` = 1) kept in step with the file, so the ledger, metrics and
//!   `nexbot-ctl cron ls` see it; an answer of exactly `HEARTBEAT_OK` is not sent.
//! - **No polling where a push will do**: the loop sleeps until the next due second and is
//!   woken by `Store::jobs_changed` when a job is added, changed or cancelled, and by a watch
//!   on `HEARTBEAT.md`; the only timed look is a long safety net.

pub mod config;
pub mod heartbeat;
pub use nexbot_store::jobs;
mod queue;
pub mod schedule;
pub mod tool;

pub use config::SchedulerConfig;

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use chrono_tz::Tz;
use nexbot_agent::turns::TurnOrigin;
use nexbot_agent::{Agent, TurnStatus};
use nexbot_core::channel::{Channel, OutboundKind, OutboundMessage};
use nexbot_core::repeat::{LogDecision, RepeatFilter};
use nexbot_core::ChatRef;
use nexbot_store::{unix_now, Store, StoreError};
use tokio_util::sync::CancellationToken;

use self::jobs::{Job, JobCreator, Missed, NewJob, RunEnd, RunOutcome, TickItem};
use self::queue::{FairQueue, LaneKey, Work};
use self::schedule::Schedule;

/// How often `HEARTBEAT.md` is looked at besides its watch (inotify can overflow, the folder
/// may be replaced); re-read only when it changed.
const HEARTBEAT_LOOK: Duration = Duration::from_secs(30);
/// After the database failed, the next try.
const RETRY: Duration = Duration::from_secs(1);
/// How often finished runs past `storage.task_records_days` are deleted.
const PRUNE_EVERY: Duration = Duration::from_secs(3600);
/// Missed runs of one job recorded one by one after an outage; the rest in one row.
const SKIPPED_ROWS: usize = 100;
/// Occurrences counted one by one when planning (beyond, the count says "more than").
const COUNT_LIMIT: u64 = 10_000;

/// Counters for the metrics and `/status`, monotonic for the daemon's life.
#[derive(Debug)]
pub struct SchedulerStats {
    pub submitted: AtomicU64,
    pub completed: AtomicU64,
    pub failed: AtomicU64,
    pub skipped: AtomicU64,
    pub dropped: AtomicU64,
    /// Runs queued or running now.
    pub pending: AtomicUsize,
    /// Times the scheduler woke to look for due jobs: a due time, a job changed, the
    /// heartbeat file changed, or the idle look — not a polling tick.
    pub wakeups: AtomicU64,
    /// Seconds each finished run took.
    pub duration: prometheus_client::metrics::histogram::Histogram,
    /// Valid heartbeat checks, and why the others were left out.
    pub heartbeat_checks: AtomicUsize,
    pub heartbeat_problems: Mutex<Vec<String>>,
}

impl Default for SchedulerStats {
    fn default() -> Self {
        Self {
            submitted: AtomicU64::new(0),
            completed: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            skipped: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            pending: AtomicUsize::new(0),
            wakeups: AtomicU64::new(0),
            duration: prometheus_client::metrics::histogram::Histogram::new([
                0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0,
            ]),
            heartbeat_checks: AtomicUsize::new(0),
            heartbeat_problems: Mutex::new(Vec::new()),
        }
    }
}

impl SchedulerStats {
    fn observe(&self, seconds: f64) {
        self.duration.observe(seconds);
    }

    /// `/status`'s line.
    pub fn line(&self) -> String {
        let n = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let problems = self.heartbeat_problems.lock().unwrap_or_else(|p| p.into_inner()).len();
        let mut line = format!(
            "on: {} runs submitted, {} completed, {} failed, {} skipped, {} dropped (busy), {} \
             pending; heartbeat: {} checks",
            n(&self.submitted),
            n(&self.completed),
            n(&self.failed),
            n(&self.skipped),
            n(&self.dropped),
            self.pending.load(Ordering::Relaxed),
            self.heartbeat_checks.load(Ordering::Relaxed),
        );
        if problems > 0 {
            line.push_str(&format!(", {problems} bad entries in {}", heartbeat::FILE));
        }
        line
    }
}

/// What to do with a due job now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Run now: the scheduled time, and a note when it is a missed run run late.
    pub fire: Option<(i64, Option<String>)>,
    /// Times recorded as skipped, with why.
    pub skipped: Vec<(i64, String)>,
    /// Skipped beyond those rows (an outage longer than [`SKIPPED_ROWS`] runs).
    pub more_skipped: u64,
    /// The job's next time; `None`: it is done.
    pub next: Option<i64>,
}

/// Plans a job due at `due` (≤ `now`): the latest due time runs if it is at most `late`
/// seconds old, or, when it is older (missed), if the policy is `once` and it is at most
/// `window` seconds old; every other due time is skipped.
pub fn plan(
    schedule: &Schedule,
    missed: Missed,
    due: i64,
    now: i64,
    late: i64,
    window: i64,
) -> Plan {
    let mut earlier = Vec::new();
    let mut more = 0u64;
    let mut last = due;
    let mut counted = 0u64;
    while let Some(next) = schedule.next_after(last).filter(|n| *n <= now) {
        counted += 1;
        if earlier.len() < SKIPPED_ROWS {
            earlier.push(last);
        } else {
            more += 1;
        }
        last = next;
        if counted >= COUNT_LIMIT {
            // Jump to the latest due time; the ones between are counted as one more.
            if let Some(latest) = schedule.latest_at_or_before(now).filter(|l| *l > last) {
                more += 1;
                last = latest;
            }
            break;
        }
    }
    let age = now - last;
    let mut skipped: Vec<(i64, String)> = earlier
        .into_iter()
        .map(|t| (t, "missed: a later run of the job was due by then".to_owned()))
        .collect();
    let fire = if age <= late {
        Some((last, None))
    } else if missed == Missed::Once && age <= window {
        Some((last, Some(format!("missed by {age}s (the daemon was not running); run once"))))
    } else {
        let why = match missed {
            Missed::Skip => format!("missed by {age}s (the daemon was not running); policy skip"),
            Missed::Once => format!("missed by {age}s, more than the {window}s window"),
        };
        skipped.push((last, why));
        None
    };
    Plan { fire, skipped, more_skipped: more, next: schedule.next_after(now.max(last)) }
}

/// A job's schedule from its row.
pub fn job_schedule(job: &Job) -> Result<Schedule, schedule::ScheduleError> {
    let zone = schedule::zone(&job.time_zone)?;
    match (&job.cron, job.at) {
        (Some(cron), _) => Schedule::cron(cron, zone),
        (None, Some(at)) => Ok(Schedule::at(at, zone)),
        (None, None) => Err(schedule::ScheduleError::BadTime { text: String::new() }),
    }
}

/// Why a job cannot be created.
#[derive(Debug, thiserror::Error)]
pub enum JobError {
    #[error(transparent)]
    Schedule(#[from] schedule::ScheduleError),
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A job as asked for (by `nexbot-ctl cron add` or the agent's `schedule_task`).
#[derive(Debug, Clone, Default)]
pub struct JobSpec {
    pub name: Option<String>,
    pub task: String,
    /// Recurring: a cron expression (five fields, or six with seconds first).
    pub cron: Option<String>,
    /// One-shot: a time (RFC 3339 or local `YYYY-MM-DD HH:MM[:SS]`) or a delay (`in 10m`).
    pub at: Option<String>,
    /// An IANA zone; `None`: the configured default.
    pub time_zone: Option<String>,
    /// `skip` or `once`; `None`: `once` for one-shot jobs, `skip` for recurring ones.
    pub missed: Option<String>,
    /// Tokens one run may use; `None`: `scheduler.job_token_budget` at each run.
    pub token_budget: Option<u64>,
    /// Who asks for it.
    pub created_by: JobCreator,
}

/// The longest task a job may carry.
pub const MAX_TASK_CHARS: usize = 4000;

/// The shortest time between two runs of a recurring job a chat's assistant stores: an
/// unattended job must not spin (the operator's own jobs may run every second).
pub const CHAT_JOB_MIN_INTERVAL_SECS: i64 = 60;

/// Runs of a schedule looked at to find its shortest interval (cron repeats within a year;
/// a day's worth of minute runs is enough to see any second-field pattern).
const INTERVAL_SAMPLES: usize = 1_500;

/// The shortest time between two of `schedule`'s next [`INTERVAL_SAMPLES`] runs after `now`.
fn shortest_interval(schedule: &Schedule, now: i64) -> Option<i64> {
    let mut previous = schedule.next_after(now)?;
    let mut shortest: Option<i64> = None;
    for _ in 0..INTERVAL_SAMPLES {
        let Some(next) = schedule.next_after(previous) else { break };
        let gap = next - previous;
        shortest = Some(shortest.map_or(gap, |s| s.min(gap)));
        if gap < CHAT_JOB_MIN_INTERVAL_SECS {
            break;
        }
        previous = next;
    }
    shortest
}

/// Checks `spec` and stores it as a job of `chat`.
pub async fn create_job(
    store: &Store,
    chat: &ChatRef,
    spec: JobSpec,
    default_zone: Tz,
) -> Result<Job, JobError> {
    let job = prepare_job(chat, spec, default_zone)?;
    store_job(store, job).await
}

/// Stores a job [`prepare_job`] checked.
pub async fn store_job(store: &Store, job: NewJob) -> Result<Job, JobError> {
    let id = store.add_job(job).await?;
    store.job(id).await?.ok_or_else(|| JobError::Invalid("the job vanished".into()))
}

/// Checks `spec` for `chat` and makes the job to store, without storing it (a chat's
/// recurring job is confirmed by its user in between).
pub fn prepare_job(chat: &ChatRef, spec: JobSpec, default_zone: Tz) -> Result<NewJob, JobError> {
    let task = spec.task.trim().to_owned();
    if task.is_empty() {
        return Err(JobError::Invalid("the task is empty".into()));
    }
    if task.chars().count() > MAX_TASK_CHARS {
        return Err(JobError::Invalid(format!(
            "the task is longer than {MAX_TASK_CHARS} characters"
        )));
    }
    let zone = match spec.time_zone.as_deref().map(str::trim).filter(|z| !z.is_empty()) {
        Some(name) => schedule::zone(name)?,
        None => default_zone,
    };
    let now = unix_now();
    let (schedule, cron, at) = match (spec.cron.as_deref(), spec.at.as_deref()) {
        (Some(cron), None) => (Schedule::cron(cron, zone)?, Some(cron.trim().to_owned()), None),
        (None, Some(at)) => {
            let at = schedule::parse_at(at, zone, now)?;
            if at < now - 1 {
                return Err(JobError::Invalid(format!(
                    "{} is in the past",
                    schedule::local(at, zone)
                )));
            }
            (Schedule::at(at, zone), None, Some(at))
        }
        _ => return Err(JobError::Invalid("give either a cron expression or a time (at)".into())),
    };
    let missed = match spec.missed.as_deref() {
        Some(text) => Missed::parse(text.trim()).ok_or_else(|| {
            JobError::Invalid(format!("missed must be skip or once, not {text:?}"))
        })?,
        None if schedule.is_recurring() => Missed::Skip,
        None => Missed::Once,
    };
    let name = spec
        .name
        .map(|n| n.trim().to_owned())
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| task.chars().take(40).collect());
    if matches!(spec.created_by, JobCreator::Chat { .. }) && schedule.is_recurring() {
        if let Some(gap) = shortest_interval(&schedule, now) {
            if gap < CHAT_JOB_MIN_INTERVAL_SECS {
                return Err(JobError::Invalid(format!(
                    "this schedule runs {gap} s apart; a recurring job from a chat may run at \
                     most once a minute (the operator can add faster ones with nexbot-ctl)"
                )));
            }
        }
    }
    if spec.token_budget == Some(0) {
        return Err(JobError::Invalid("the token budget must be at least 1".into()));
    }
    let next_run = schedule.first_from(now + 1);
    Ok(NewJob {
        chat: chat.clone(),
        name,
        task,
        cron,
        at,
        time_zone: zone.name().to_owned(),
        missed,
        next_run,
        heartbeat: false,
        created_by: spec.created_by,
        token_budget: spec.token_budget,
        origin: None,
    })
}

/// What a job's run tells the model: the job's task as it was stored — when and by whom —
/// and not as the user's fresh instruction (a chat's own turn may have stored it, from
/// whatever that turn read).
pub fn job_prompt(job: &Job) -> String {
    let zone = schedule::zone(&job.time_zone).unwrap_or(Tz::UTC);
    format!(
        "Scheduled job #{} «{}» is due. It was stored on {} by {}; it is not a new message \
         from the user. Do the stored task now: «{}»",
        job.id,
        job.name,
        schedule::local(job.created_at, zone),
        job.created_by.describe(),
        job.task
    )
}

/// `due` in lane turns (each chat's jobs, and the heartbeat's, one at a time), each lane's
/// in their own order: when the queue fills within one tick, every lane got its first run in.
fn interleave(due: Vec<Job>) -> Vec<Job> {
    let mut lanes: Vec<(LaneKey, std::collections::VecDeque<Job>)> = Vec::new();
    for job in due {
        let key = LaneKey::of(&job);
        match lanes.iter_mut().find(|(k, _)| *k == key) {
            Some((_, jobs)) => jobs.push_back(job),
            None => lanes.push((key, std::collections::VecDeque::from([job]))),
        }
    }
    let mut out = Vec::new();
    while !lanes.is_empty() {
        lanes.retain_mut(|(_, jobs)| {
            out.extend(jobs.pop_front());
            !jobs.is_empty()
        });
    }
    out
}

/// The scheduler; [`Scheduler::run`] until its stop token fires.
#[derive(Debug)]
pub struct Scheduler {
    store: Store,
    agent: Arc<Agent>,
    channel: Arc<dyn Channel>,
    workers: usize,
    queue: usize,
    late: i64,
    window: i64,
    zone: Tz,
    heartbeat_file: PathBuf,
    owner_chat: ChatRef,
    stats: Arc<SchedulerStats>,
    /// Finished runs older than this many days are deleted (`storage.task_records_days`;
    /// 0 keeps them).
    keep_days: u32,
    /// `scheduler.job_token_budget`.
    budget: u64,
    /// Runs waiting for a worker, shared fairly between chats.
    waiting: Arc<FairQueue>,
}

/// What the daemon hands the scheduler at the wiring, besides its section.
#[derive(Debug)]
pub struct SchedulerParts {
    pub store: Store,
    /// Whose turns the runs are: admitted like a message's turn.
    pub agent: Arc<Agent>,
    /// Where a run's answer is sent (the daemon's outbound router).
    pub channel: Arc<dyn Channel>,
    /// The folder of `HEARTBEAT.md`.
    pub workspace: PathBuf,
    /// The chat heartbeat answers go to.
    pub owner_chat: ChatRef,
    /// The jobs' default time zone ([`SchedulerConfig::default_zone`]).
    pub zone: Tz,
    /// Finished runs older than this many days are deleted (`storage.task_records_days`;
    /// 0 keeps them).
    pub keep_days: u32,
}

impl Scheduler {
    pub fn new(config: &SchedulerConfig, parts: SchedulerParts) -> Self {
        let SchedulerParts { store, agent, channel, workspace, owner_chat, zone, keep_days } =
            parts;
        Self {
            store,
            agent,
            channel,
            workers: config.workers.max(1),
            queue: config.queue,
            late: config.late_secs as i64,
            window: config.missed_window_secs as i64,
            zone,
            heartbeat_file: workspace.join(heartbeat::FILE),
            owner_chat,
            stats: Arc::new(SchedulerStats::default()),
            keep_days,
            budget: config.job_token_budget,
            waiting: Arc::default(),
        }
    }

    pub fn stats(&self) -> Arc<SchedulerStats> {
        self.stats.clone()
    }

    /// Runs until `stop` fires; then cancels running turns and waits for their records.
    pub async fn run(self, stop: CancellationToken) {
        match self.store.settle_open_job_runs("the daemon stopped before the run ended").await {
            Ok(0) => {}
            Ok(n) => tracing::warn!(
                runs = n,
                "job runs left open by the last daemon recorded as cancelled"
            ),
            Err(e) => tracing::error!(error = %e, "cannot settle open job runs"),
        }
        let cancel = CancellationToken::new();
        let mut workers = tokio::task::JoinSet::new();
        for _ in 0..self.workers {
            let worker = Worker {
                budget: self.budget,
                store: self.store.clone(),
                agent: self.agent.clone(),
                channel: self.channel.clone(),
                stats: self.stats.clone(),
                cancel: cancel.clone(),
            };
            let waiting = self.waiting.clone();
            workers.spawn(async move {
                while let Some(work) = waiting.take().await {
                    let chat = work.job.chat.clone();
                    worker.run(work).await;
                    waiting.done(&chat);
                }
            });
        }
        let mut watch = HeartbeatWatch::default();
        let heartbeat_changed = Arc::new(tokio::sync::Notify::new());
        // Dropped with this function: the watch ends with the scheduler.
        let _heartbeat_watch = watch_file(&self.heartbeat_file, heartbeat_changed.clone());
        let mut pruned: Option<Instant> = None;
        let mut sleep = Duration::ZERO;
        let mut tick_failures = RepeatFilter::default();
        loop {
            // Sleeps until the next due time, a job changing, or the heartbeat file changing:
            // nothing is polled.
            tokio::select! {
                () = stop.cancelled() => break,
                () = tokio::time::sleep(sleep) => {}
                () = self.store.jobs_changed().notified() => {}
                () = heartbeat_changed.notified() => watch.looked = None,
            }
            self.stats.wakeups.fetch_add(1, Ordering::Relaxed);
            if self.keep_days > 0 && pruned.is_none_or(|t| t.elapsed() >= PRUNE_EVERY) {
                pruned = Some(Instant::now());
                let before = unix_now() - i64::from(self.keep_days) * 86_400;
                match self.store.prune_job_runs(before).await {
                    Ok(0) => {}
                    Ok(n) => tracing::info!(runs = n, "old job runs pruned"),
                    Err(e) => tracing::warn!(error = %e, "cannot prune old job runs"),
                }
            }
            if watch.looked.is_none_or(|t| t.elapsed() >= HEARTBEAT_LOOK) {
                watch.looked = Some(Instant::now());
                self.sync_heartbeat(&mut watch).await;
            }
            let now = unix_now();
            let due = match self.store.due_jobs(now).await {
                Ok(due) => due,
                Err(e) => {
                    tracing::error!(error = %e, "cannot read due jobs");
                    sleep = RETRY;
                    continue;
                }
            };
            if let Err(e) = self.handle_all(due, now).await {
                // Nothing of the tick was stored (a full disk, say): the same jobs are due
                // again at once, so wait before trying, and log the failure once a minute.
                log_tick_failure(&mut tick_failures, &e.to_string());
                sleep = RETRY;
                continue;
            }
            if let Some(repeated) = tick_failures.clear(Instant::now()) {
                tracing::warn!(
                    error = %repeated.message,
                    "the due jobs are recorded again; until now: cannot record the due jobs ({})",
                    repeated.note()
                );
            }
            // Every wake-up that matters is pushed (a job changed, the heartbeat file changed)
            // or due; the heartbeat's look is the longest sleep, a safety net.
            sleep = match self.store.next_due().await {
                Ok(next) => until_due(next, SystemTime::now()).unwrap_or(HEARTBEAT_LOOK),
                Err(e) => {
                    tracing::error!(error = %e, "cannot read the next due time");
                    RETRY
                }
            };
            sleep = sleep.min(HEARTBEAT_LOOK);
            if self.keep_days > 0 {
                let since = pruned.map_or(Duration::ZERO, |t| t.elapsed());
                sleep = sleep.min(PRUNE_EVERY.saturating_sub(since));
            }
        }
        // Stop: no new runs; running turns cancelled; queued ones recorded as cancelled.
        cancel.cancel();
        self.waiting.close();
        while workers.join_next().await.is_some() {}
    }

    /// Plans every due job and writes the whole tick in one transaction (next times, skipped
    /// and dropped runs, queued runs), then hands the queued runs to the workers.
    async fn handle_all(&self, due: Vec<Job>, now: i64) -> Result<(), StoreError> {
        let cap = self.workers + self.queue;
        let mut reserved = 0usize;
        let mut items = Vec::with_capacity(due.len());
        let mut jobs = Vec::with_capacity(due.len());
        let (mut skipped, mut dropped) = (0u64, 0u64);
        // Runs that waited and give way to this tick's runs of emptier lanes.
        let mut gave_way = Vec::new();
        for job in interleave(due) {
            let Some(at) = job.next_run else { continue };
            let mut item = TickItem {
                job_id: job.id,
                next: None,
                cancel: false,
                rows: Vec::new(),
                fire: None,
            };
            match job_schedule(&job) {
                Err(e) => {
                    tracing::error!(job = job.id, error = %e, "a job's schedule is unusable; cancelled");
                    item.cancel = true;
                    item.rows.push((at, RunOutcome::Failed, Some(e.to_string())));
                }
                Ok(schedule) => {
                    let plan = plan(&schedule, job.missed, at, now, self.late, self.window);
                    item.next = plan.next;
                    skipped += plan.skipped.len() as u64 + plan.more_skipped;
                    let last = plan.skipped.last().map_or(at, |s| s.0);
                    for (t, why) in plan.skipped {
                        item.rows.push((t, RunOutcome::Skipped, Some(why)));
                    }
                    if plan.more_skipped > 0 {
                        let why = format!(
                            "missed: {} more runs while the daemon was not running",
                            plan.more_skipped
                        );
                        item.rows.push((last, RunOutcome::Skipped, Some(why)));
                    }
                    if let Some((t, note)) = plan.fire {
                        let full = self.stats.pending.load(Ordering::Relaxed) + reserved >= cap;
                        let room =
                            full.then(|| self.waiting.make_room_for(&LaneKey::of(&job))).flatten();
                        if full && room.is_none() {
                            tracing::warn!(job = job.id, "scheduler queue full: run dropped");
                            dropped += 1;
                            item.rows.push((t, RunOutcome::DroppedBusy, note));
                        } else {
                            if let Some(work) = room {
                                self.stats.pending.fetch_sub(1, Ordering::Relaxed);
                                gave_way.push(work.run_id);
                            }
                            reserved += 1;
                            item.fire = Some((t, note));
                        }
                    }
                }
            }
            items.push(item);
            jobs.push(job);
        }
        if items.is_empty() {
            return Ok(());
        }
        let run_ids = self.store.apply_tick(items).await?;
        for run_id in &gave_way {
            let why = "the queue was full: gave way to a run of a chat with fewer waiting";
            if let Err(e) = self.store.drop_queued_run(*run_id, why).await {
                tracing::error!(run = run_id, error = %e, "cannot record a run that gave way");
            }
        }
        dropped += gave_way.len() as u64;
        self.stats.skipped.fetch_add(skipped, Ordering::Relaxed);
        self.stats.dropped.fetch_add(dropped, Ordering::Relaxed);
        if skipped > 0 {
            tracing::info!(skipped, "missed runs recorded as skipped");
        }
        for (job, run_id) in jobs.into_iter().zip(run_ids) {
            let Some(run_id) = run_id else { continue };
            self.stats.pending.fetch_add(1, Ordering::Relaxed);
            self.stats.submitted.fetch_add(1, Ordering::Relaxed);
            self.waiting.push(Work { job, run_id });
        }
        Ok(())
    }

    /// Keeps the heartbeat's jobs in step with `HEARTBEAT.md` when the file changed.
    async fn sync_heartbeat(&self, watch: &mut HeartbeatWatch) {
        let stamp = tokio::fs::metadata(&self.heartbeat_file)
            .await
            .ok()
            .map(|m| (m.modified().ok(), m.len()));
        if watch.synced && stamp == watch.stamp {
            return;
        }
        let text = tokio::fs::read_to_string(&self.heartbeat_file).await.unwrap_or_default();
        let parsed = heartbeat::parse(&text, self.zone);
        for problem in &parsed.problems {
            tracing::warn!("heartbeat entry left out: {problem}");
        }
        let existing = match self.store.active_jobs(None).await {
            Ok(jobs) => jobs.into_iter().filter(|j| j.heartbeat).collect::<Vec<_>>(),
            Err(e) => {
                tracing::error!(error = %e, "cannot read the heartbeat's jobs");
                return;
            }
        };
        let now = unix_now();
        let zone = self.zone.name().to_owned();
        for check in &parsed.checks {
            let Ok(schedule) = Schedule::cron(&check.cron, self.zone) else { continue };
            let next = schedule.next_after(now);
            let found = existing.iter().find(|j| j.name == check.name);
            let result = match found {
                Some(j)
                    if j.cron.as_deref() == Some(check.cron.as_str())
                        && j.task == check.task
                        && j.chat == self.owner_chat
                        && j.time_zone == zone =>
                {
                    Ok(())
                }
                Some(j) => {
                    self.store
                        .update_job(j.id, &self.owner_chat, &check.cron, &check.task, &zone, next)
                        .await
                }
                None => self
                    .store
                    .add_job(NewJob {
                        chat: self.owner_chat.clone(),
                        name: check.name.clone(),
                        task: check.task.clone(),
                        cron: Some(check.cron.clone()),
                        at: None,
                        time_zone: zone.clone(),
                        missed: Missed::Skip,
                        next_run: next,
                        heartbeat: true,
                        created_by: JobCreator::Heartbeat,
                        token_budget: None,
                        origin: None,
                    })
                    .await
                    .map(drop),
            };
            if let Err(e) = result {
                tracing::error!(check = %check.name, error = %e, "cannot store a heartbeat check");
            }
        }
        for gone in existing.iter().filter(|j| parsed.checks.iter().all(|c| c.name != j.name)) {
            let _ = self.store.cancel_job(gone.id, None).await;
        }
        if !watch.synced
            || parsed.checks.len() != self.stats.heartbeat_checks.load(Ordering::Relaxed)
        {
            tracing::info!(
                checks = parsed.checks.len(),
                problems = parsed.problems.len(),
                "heartbeat read"
            );
        }
        self.stats.heartbeat_checks.store(parsed.checks.len(), Ordering::Relaxed);
        *self.stats.heartbeat_problems.lock().unwrap_or_else(|p| p.into_inner()) = parsed.problems;
        watch.stamp = stamp;
        watch.synced = true;
    }
}

/// How long from `now` until the unix second `next` begins (zero when it has); `None` when
/// nothing is due.
fn until_due(next: Option<i64>, now: SystemTime) -> Option<Duration> {
    let at = std::time::UNIX_EPOCH + Duration::from_secs(u64::try_from(next?).unwrap_or(0));
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// Notifies `changed` when something happens to `file` (written, replaced, removed), through
/// a watch on its folder; `None` (and a warning) when the folder cannot be watched — the
/// scheduler then still looks every [`HEARTBEAT_LOOK`].
fn watch_file(
    file: &std::path::Path,
    changed: Arc<tokio::sync::Notify>,
) -> Option<notify::RecommendedWatcher> {
    use notify::Watcher as _;
    let dir = file.parent()?.to_owned();
    let name = file.file_name()?.to_owned();
    let watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        let ours = event.map_or(true, |e| e.paths.iter().any(|p| p.file_name() == Some(&name)));
        if ours {
            changed.notify_one();
        }
    });
    let mut watcher = match watcher {
        Ok(watcher) => watcher,
        Err(e) => {
            tracing::warn!(file = %file.display(), error = %e, "cannot watch the heartbeat file; looking every {} s", HEARTBEAT_LOOK.as_secs());
            return None;
        }
    };
    if let Err(e) = watcher.watch(&dir, notify::RecursiveMode::NonRecursive) {
        tracing::warn!(file = %file.display(), error = %e, "cannot watch the heartbeat file; looking every {} s", HEARTBEAT_LOOK.as_secs());
        return None;
    }
    Some(watcher)
}

#[derive(Default)]
struct HeartbeatWatch {
    looked: Option<Instant>,
    stamp: Option<(Option<SystemTime>, u64)>,
    synced: bool,
}

struct Worker {
    /// Tokens a run may use when its job names no budget (`scheduler.job_token_budget`).
    budget: u64,
    store: Store,
    agent: Arc<Agent>,
    channel: Arc<dyn Channel>,
    stats: Arc<SchedulerStats>,
    cancel: CancellationToken,
}

impl Worker {
    async fn run(&self, Work { job, run_id }: Work) {
        let started = Instant::now();
        let end = if self.cancel.is_cancelled() {
            RunEnd {
                outcome: RunOutcome::Cancelled,
                detail: Some("the daemon stopped before the run started".into()),
                ..RunEnd::default()
            }
        } else {
            if let Err(e) = self.store.start_job_run(run_id).await {
                tracing::warn!(job = job.id, error = %e, "cannot mark a job run started");
            }
            self.turn(&job).await
        };
        let seconds = started.elapsed().as_secs_f64();
        match end.outcome {
            RunOutcome::Ok => self.stats.completed.fetch_add(1, Ordering::Relaxed),
            _ => self.stats.failed.fetch_add(1, Ordering::Relaxed),
        };
        self.stats.observe(seconds);
        tracing::info!(job = job.id, run = run_id, outcome = %end.outcome, seconds, "job run ended");
        if let Err(e) = self.store.finish_job_run(run_id, end).await {
            tracing::error!(job = job.id, error = %e, "cannot record a job run's end");
        }
        self.stats.pending.fetch_sub(1, Ordering::Relaxed);
    }

    async fn turn(&self, job: &Job) -> RunEnd {
        let prompt =
            if job.heartbeat { heartbeat::prompt(&job.name, &job.task) } else { job_prompt(job) };
        let budget = job.token_budget.unwrap_or(self.budget);
        let channel = self.channel.clone();
        let origin = if job.heartbeat {
            TurnOrigin::Heartbeat { name: job.name.clone() }
        } else {
            TurnOrigin::Job { id: job.id, name: job.name.clone() }
        };
        // Admitted like a message's turn: after the chat's running turn, within the daemon's
        // limit, and visible to the chat's `/status` and `/stop` while it runs.
        let cancel = self.cancel.child_token();
        let outcome = self.agent.run_turn_within(
            &job.chat,
            &prompt,
            Vec::new(),
            origin,
            cancel,
            channel,
            Some(budget),
        );
        let outcome = outcome.await;
        let mut end = RunEnd {
            outcome: RunOutcome::Ok,
            usage: outcome.usage,
            task_tokens: outcome.task_tokens,
            ..RunEnd::default()
        };
        match outcome.status {
            TurnStatus::Answered => {}
            TurnStatus::OverBudget => {
                end.outcome = RunOutcome::OverBudget;
                end.detail = Some(format!(
                    "stopped after {} tokens; the budget per run is {budget}",
                    outcome.usage.prompt_tokens
                        + outcome.usage.completion_tokens
                        + outcome.task_tokens
                ));
            }
            TurnStatus::Cancelled => {
                end.outcome = RunOutcome::Cancelled;
                end.detail = Some("the daemon stopped during the run".into());
                return end;
            }
            TurnStatus::Stopped => {
                end.outcome = RunOutcome::Cancelled;
                end.detail = Some("stopped in the chat with /stop".into());
                return end;
            }
            other => {
                end.outcome = RunOutcome::Failed;
                end.detail = Some(format!("turn ended {other:?}"));
            }
        }
        if end.outcome == RunOutcome::Ok && outcome.tool_calls > 0 {
            if outcome.tool_failures == outcome.tool_calls {
                end.outcome = RunOutcome::Failed;
                end.detail = Some(format!("every tool call failed ({})", outcome.tool_calls));
            } else if outcome.tool_failures > 0 {
                end.detail = Some(format!(
                    "{} of {} tool calls failed",
                    outcome.tool_failures, outcome.tool_calls
                ));
            }
        }
        if job.heartbeat && end.outcome == RunOutcome::Ok && heartbeat::is_ok(&outcome.answer) {
            end.detail = Some(format!("{}: not sent", heartbeat::OK));
            return end;
        }
        let failed = match end.outcome {
            RunOutcome::Failed => " failed",
            RunOutcome::OverBudget => " stopped (over its token budget)",
            _ => "",
        };
        let text = if job.heartbeat {
            format!("Heartbeat «{}»{failed}:\n{}", job.name, outcome.answer)
        } else {
            format!("Scheduled «{}»{failed}:\n{}", job.name, outcome.answer)
        };
        let message = OutboundMessage {
            chat: job.chat.clone(),
            text: text.clone(),
            reply_to: None,
            kind: OutboundKind::Final,
            buttons: Vec::new(),
        };
        match self.channel.send(message).await {
            Ok(id) => {
                end.message = Some(text);
                end.message_id = id.map(|m| m.0);
            }
            Err(e) => {
                end.outcome = RunOutcome::Failed;
                let why = format!("not delivered: {e}");
                end.detail = Some(match end.detail {
                    Some(d) => format!("{d}; {why}"),
                    None => why,
                });
            }
        }
        end
    }
}

/// Logs that a tick could not be recorded: the first time, then once a minute with how often
/// it failed meanwhile (it is retried every [`RETRY`]).
fn log_tick_failure(filter: &mut RepeatFilter, error: &str) {
    match filter.check(error, Instant::now()) {
        LogDecision::Log => {
            tracing::error!(error, "cannot record the due jobs; tried again in {RETRY:?}")
        }
        LogDecision::Repeated(repeated) => tracing::error!(
            error,
            "cannot record the due jobs; tried again in {RETRY:?} ({})",
            repeated.note()
        ),
        LogDecision::Quiet => tracing::debug!(error, "cannot record the due jobs (again)"),
    }
}

#[cfg(test)]
mod wake_tests {
    use super::*;

    #[test]
    fn sleeps_until_the_due_second_begins() {
        let now = std::time::UNIX_EPOCH + Duration::from_millis(1_000_250);
        assert_eq!(until_due(Some(1_002), now), Some(Duration::from_millis(1_750)));
        assert_eq!(until_due(Some(1_000), now), Some(Duration::ZERO), "overdue: at once");
        assert_eq!(until_due(Some(-5), now), Some(Duration::ZERO));
        assert_eq!(until_due(None, now), None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn every_second() -> Schedule {
        Schedule::cron("* * * * * *", Tz::UTC).unwrap()
    }

    #[test]
    fn an_on_time_run_fires_and_moves_on() {
        let p = plan(&every_second(), Missed::Skip, 100, 100, 30, 3600);
        assert_eq!(p.fire, Some((100, None)));
        assert!(p.skipped.is_empty());
        assert_eq!(p.next, Some(101));
    }

    #[test]
    fn a_recurring_job_after_an_outage_records_skips_and_fires_nothing_late() {
        let hourly = Schedule::cron("0 0 * * * *", Tz::UTC).unwrap();
        // Due at 3600, the daemon back at 3 * 3600 + 120: 3600, 7200, 10800 missed.
        let p = plan(&hourly, Missed::Skip, 3600, 3 * 3600 + 120, 30, 86_400);
        assert_eq!(p.fire, None);
        let times: Vec<i64> = p.skipped.iter().map(|s| s.0).collect();
        assert_eq!(times, vec![3600, 7200, 10800]);
        assert!(p.skipped[2].1.contains("policy skip"));
        assert_eq!(p.next, Some(4 * 3600));
    }

    #[test]
    fn once_runs_the_latest_missed_time_a_single_time() {
        let hourly = Schedule::cron("0 0 * * * *", Tz::UTC).unwrap();
        let p = plan(&hourly, Missed::Once, 3600, 3 * 3600 + 120, 30, 86_400);
        assert_eq!(p.fire.as_ref().map(|f| f.0), Some(10800));
        assert_eq!(p.skipped.len(), 2);
        // Beyond the window: skipped too.
        let p = plan(&hourly, Missed::Once, 3600, 3 * 3600 + 120, 30, 60);
        assert_eq!(p.fire, None);
        assert_eq!(p.skipped.len(), 3);
    }

    #[test]
    fn a_one_shot_missed_runs_once_and_is_done() {
        let at = Schedule::at(1000, Tz::UTC);
        let p = plan(&at, Missed::Once, 1000, 1500, 30, 3600);
        assert_eq!(p.fire.as_ref().map(|f| f.0), Some(1000));
        assert!(p.fire.unwrap().1.unwrap().contains("missed by 500s"));
        assert_eq!(p.next, None);
        let p = plan(&at, Missed::Skip, 1000, 1500, 30, 3600);
        assert_eq!(p.fire, None);
        assert_eq!(p.skipped.len(), 1);
    }

    #[test]
    fn a_long_outage_of_an_every_second_job_is_bounded() {
        let day = 86_400;
        let p = plan(&every_second(), Missed::Skip, 0, 30 * day, 30, 3600);
        // The run of this very second is on time; the 2.6 million before it are skipped in
        // a bounded number of rows.
        assert_eq!(p.fire, Some((30 * day, None)));
        assert_eq!(p.skipped.len(), SKIPPED_ROWS);
        assert!(p.more_skipped > 0);
        assert_eq!(p.next, Some(30 * day + 1));
    }
}
