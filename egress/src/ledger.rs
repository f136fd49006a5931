//! What each task did through the egress, kept while it runs and handed over when it ends.
//!
//! Every proxied connection and relayed call that is attributed to a task counts into the
//! task's [`TaskStats`] as it happens: its destination (`host:port`) with the verdict, and its
//! bytes as they flow. When the task ends ([`crate::TaskTokens::finish`]) the entry leaves the
//! ledger as a [`TaskSummary`], the task's open tunnels and requests are cut, and later
//! connections still attributed to it (the pool may not have noticed yet) are refused, so a
//! task record never needs the audit log read back and nothing of a task outlives it.
//!
//! The ledger is bounded: at most [`MAX_TASKS`] tasks (the oldest is dropped beyond, with a
//! warning) and [`MAX_DESTINATIONS`] destinations per task (the rest are counted together).

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use super::audit::Verdict;

/// Most tasks tracked at once.
pub const MAX_TASKS: usize = 4096;
/// Most destinations listed one by one in a task's summary.
pub const MAX_DESTINATIONS: usize = 256;
/// How many ended tasks are remembered, to refuse their late connections.
const ENDED_MEMORY: usize = 4096;

/// Connections (or relay calls) to one destination, by verdict.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct DestinationCounts {
    pub allowed: u64,
    pub denied: u64,
    /// Allowed by policy but not served (unresolvable, unreachable, bad request).
    pub errors: u64,
}

impl DestinationCounts {
    fn add(&mut self, verdict: Verdict) {
        match verdict {
            Verdict::Allowed => self.allowed += 1,
            Verdict::Denied => self.denied += 1,
            Verdict::Error => self.errors += 1,
        }
    }
}

/// What one task did through the egress: handed over by [`crate::TaskTokens::finish`], kept
/// in the task record as JSON and read back as this type (the dashboard's task page).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct TaskSummary {
    pub task_id: String,
    /// Per destination `host:port` (the LLM provider's for relay calls), what became of the
    /// task's connections to it.
    pub destinations: BTreeMap<String, DestinationCounts>,
    /// Destinations beyond the first [`MAX_DESTINATIONS`], counted together.
    pub other_destinations: DestinationCounts,
    /// Bytes the task's container sent and received through the proxy and relay.
    pub bytes_up: u64,
    pub bytes_down: u64,
    /// Connections still open when the task ended, and cut then.
    pub cut_at_end: u64,
    /// Audit lines of the task left out by `egress.audit_max_lines_per_task`.
    pub audit_lines_suppressed: u64,
    /// Relay calls by the provider (its configured name) whose answer the container got.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub llm_providers: BTreeMap<String, u64>,
    /// Relay calls answered by a provider after the first one failed.
    #[serde(skip_serializing_if = "is_zero")]
    pub llm_fallbacks: u64,
    /// Proxy-mode secrets put into the task's requests (one per secret per request).
    #[serde(skip_serializing_if = "is_zero")]
    pub secrets_injected: u64,
    /// Requests refused because they named a secret for a host it is not bound to.
    #[serde(skip_serializing_if = "is_zero")]
    pub secrets_refused: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl TaskSummary {
    /// Connections allowed, denied and failed, over every destination.
    pub fn totals(&self) -> DestinationCounts {
        let mut total = self.other_destinations;
        for counts in self.destinations.values() {
            total.allowed += counts.allowed;
            total.denied += counts.denied;
            total.errors += counts.errors;
        }
        total
    }
}

/// The live counters of one task, shared by its connections.
#[derive(Debug)]
pub(crate) struct TaskStats {
    task_id: String,
    started: Instant,
    /// Cancelled when the task ends: its connections stop.
    cut: CancellationToken,
    up: AtomicU64,
    down: AtomicU64,
    open: AtomicU64,
    /// Audit lines written for the task, and left out beyond the cap.
    pub(crate) audit_lines: AtomicU64,
    pub(crate) audit_suppressed: AtomicU64,
    destinations: Mutex<(BTreeMap<String, DestinationCounts>, DestinationCounts)>,
    /// Relay answers by provider name, and how many were fallbacks.
    llm: Mutex<(BTreeMap<String, u64>, u64)>,
    secrets_injected: AtomicU64,
    secrets_refused: AtomicU64,
    /// Tasks this one's destinations also count for while a [`Lend`] lasts (an MCP server's
    /// call made for a delegated task: what it reached is in the task's receipt too).
    borrowers: Mutex<Vec<Arc<TaskStats>>>,
}

impl TaskStats {
    fn new(task_id: &str) -> Self {
        Self {
            task_id: task_id.to_owned(),
            started: Instant::now(),
            cut: CancellationToken::new(),
            up: AtomicU64::new(0),
            down: AtomicU64::new(0),
            open: AtomicU64::new(0),
            audit_lines: AtomicU64::new(0),
            audit_suppressed: AtomicU64::new(0),
            destinations: Mutex::new((BTreeMap::new(), DestinationCounts::default())),
            llm: Mutex::default(),
            secrets_injected: AtomicU64::new(0),
            secrets_refused: AtomicU64::new(0),
            borrowers: Mutex::default(),
        }
    }

    /// Cancelled when the task ends.
    pub(crate) fn cut(&self) -> &CancellationToken {
        &self.cut
    }

    pub(crate) fn add_bytes(&self, up: bool, bytes: u64) {
        let counter = if up { &self.up } else { &self.down };
        counter.fetch_add(bytes, Ordering::Relaxed);
    }

    /// Counts one connection to `destination` with its verdict, for the tasks it is lent to
    /// as well.
    pub(crate) fn record(&self, destination: &str, verdict: Verdict) {
        self.count(destination, verdict);
        let borrowers = self.borrowers.lock().unwrap_or_else(|p| p.into_inner()).clone();
        for borrower in borrowers {
            borrower.count(destination, verdict);
        }
    }

    fn count(&self, destination: &str, verdict: Verdict) {
        let mut guard = self.destinations.lock().unwrap_or_else(|p| p.into_inner());
        let (listed, other) = &mut *guard;
        if listed.contains_key(destination) || listed.len() < MAX_DESTINATIONS {
            listed.entry(destination.to_owned()).or_default().add(verdict);
        } else {
            other.add(verdict);
        }
    }

    /// A relay call of the task was answered by `provider` (configured names only, so the
    /// map stays as small as the provider list).
    pub(crate) fn llm_answer(&self, provider: &str, fallback: bool) {
        let mut llm = self.llm.lock().unwrap_or_else(|p| p.into_inner());
        *llm.0.entry(provider.to_owned()).or_default() += 1;
        llm.1 += u64::from(fallback);
    }

    /// `count` secrets were put into a request of the task (`injected`), or refused one.
    pub(crate) fn secrets(&self, count: u64, injected: bool) {
        let counter = if injected { &self.secrets_injected } else { &self.secrets_refused };
        counter.fetch_add(count, Ordering::Relaxed);
    }

    /// A connection of the task opened; [`TaskStats::closed`] when it ends.
    pub(crate) fn opened(&self) {
        self.open.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn closed(&self) {
        self.open.fetch_sub(1, Ordering::Relaxed);
    }

    fn summary(&self) -> TaskSummary {
        let guard = self.destinations.lock().unwrap_or_else(|p| p.into_inner());
        let llm = self.llm.lock().unwrap_or_else(|p| p.into_inner()).clone();
        TaskSummary {
            task_id: self.task_id.clone(),
            destinations: guard.0.clone(),
            other_destinations: guard.1,
            bytes_up: self.up.load(Ordering::Relaxed),
            bytes_down: self.down.load(Ordering::Relaxed),
            cut_at_end: 0,
            audit_lines_suppressed: self.audit_suppressed.load(Ordering::Relaxed),
            llm_providers: llm.0,
            llm_fallbacks: llm.1,
            secrets_injected: self.secrets_injected.load(Ordering::Relaxed),
            secrets_refused: self.secrets_refused.load(Ordering::Relaxed),
        }
    }
}

/// A lender's destinations counting for a task too ([`TaskStatsTable::lend`]), until dropped.
#[derive(Debug)]
pub struct Lend {
    lender: Arc<TaskStats>,
    task: Arc<TaskStats>,
}

impl Drop for Lend {
    fn drop(&mut self) {
        let mut borrowers = self.lender.borrowers.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(at) = borrowers.iter().position(|b| Arc::ptr_eq(b, &self.task)) {
            borrowers.remove(at);
        }
    }
}

/// What [`TaskStatsTable::attach`] found.
#[derive(Debug)]
pub(crate) enum Attach {
    Live(Arc<TaskStats>),
    /// The task has ended: nothing more may be done in its name.
    Ended,
}

#[derive(Debug, Default)]
struct Inner {
    live: HashMap<String, Arc<TaskStats>>,
    ended: HashSet<String>,
    ended_order: VecDeque<String>,
}

/// Every task's counters. Cheap to share behind an `Arc`.
#[derive(Debug, Default)]
pub(crate) struct TaskStatsTable {
    inner: Mutex<Inner>,
}

impl TaskStatsTable {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// While the returned [`Lend`] lasts, what `lender` (an MCP server's identity) reaches
    /// also counts for `task_id`; `None` when either has ended.
    pub(crate) fn lend(&self, lender: &str, task_id: &str) -> Option<Lend> {
        let (Attach::Live(lender), Attach::Live(task)) =
            (self.attach(lender), self.attach(task_id))
        else {
            return None;
        };
        lender.borrowers.lock().unwrap_or_else(|p| p.into_inner()).push(task.clone());
        Some(Lend { lender, task })
    }

    /// The counters of a running task (created on first use), or `Ended`.
    pub(crate) fn attach(&self, task_id: &str) -> Attach {
        let mut inner = self.lock();
        if inner.ended.contains(task_id) {
            return Attach::Ended;
        }
        if let Some(stats) = inner.live.get(task_id) {
            return Attach::Live(stats.clone());
        }
        if inner.live.len() >= MAX_TASKS {
            let oldest = inner.live.values().min_by_key(|s| s.started).map(|s| s.task_id.clone());
            if let Some(oldest) = oldest {
                tracing::warn!(task_id = %oldest, "egress: too many tasks never ended; dropping the oldest one's summary");
                inner.live.remove(&oldest);
            }
        }
        let stats = Arc::new(TaskStats::new(task_id));
        inner.live.insert(task_id.to_owned(), stats.clone());
        Attach::Live(stats)
    }

    /// A task id in use again (a token issued for it): no longer ended.
    pub(crate) fn reopen(&self, task_id: &str) {
        let mut inner = self.lock();
        if inner.ended.remove(task_id) {
            inner.ended_order.retain(|id| id != task_id);
        }
    }

    /// The summary of a running task so far.
    pub(crate) fn peek(&self, task_id: &str) -> Option<TaskSummary> {
        self.lock().live.get(task_id).map(|stats| stats.summary())
    }

    /// Ends the task: cuts its open connections, remembers it as ended, and returns what it
    /// did (empty when it did nothing through the egress).
    pub(crate) fn finish(&self, task_id: &str) -> (TaskSummary, Option<Arc<TaskStats>>) {
        let stats = {
            let mut inner = self.lock();
            if inner.ended.insert(task_id.to_owned()) {
                inner.ended_order.push_back(task_id.to_owned());
                if inner.ended_order.len() > ENDED_MEMORY {
                    if let Some(forgotten) = inner.ended_order.pop_front() {
                        inner.ended.remove(&forgotten);
                    }
                }
            }
            inner.live.remove(task_id)
        };
        let Some(stats) = stats else {
            return (TaskSummary { task_id: task_id.to_owned(), ..TaskSummary::default() }, None);
        };
        let mut summary = stats.summary();
        summary.cut_at_end = stats.open.load(Ordering::Relaxed);
        stats.cut.cancel();
        (summary, Some(stats))
    }

    /// The ids of the running tasks.
    pub(crate) fn live_tasks(&self) -> Vec<String> {
        self.lock().live.keys().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_summary_read_back_from_its_json_is_the_same_and_an_older_one_reads_too() {
        let mut summary =
            TaskSummary { task_id: "t1".into(), bytes_up: 7, ..TaskSummary::default() };
        summary.destinations.insert(
            "example.org:443".into(),
            DestinationCounts { allowed: 2, denied: 1, errors: 0 },
        );
        summary.secrets_injected = 3;
        let json = serde_json::to_value(&summary).unwrap();
        assert_eq!(serde_json::from_value::<TaskSummary>(json).unwrap(), summary);
        // A record written before a field existed (or without the skipped zero ones).
        let old = serde_json::json!({"task_id": "t0", "destinations": {"a:80": {"allowed": 1}}});
        let read: TaskSummary = serde_json::from_value(old).unwrap();
        assert_eq!(read.destinations["a:80"].allowed, 1);
        assert_eq!(read.secrets_injected, 0);
    }

    #[test]
    fn a_lenders_destinations_count_for_the_task_while_lent_and_no_longer() {
        let ledger = TaskStatsTable::default();
        let Attach::Live(server) = ledger.attach("mcp:browser@telegram:1") else { panic!() };
        server.record("before.example:80", Verdict::Allowed);
        let lend = ledger.lend("mcp:browser@telegram:1", "t").expect("both live");
        server.record("site.example:80", Verdict::Allowed);
        server.record("denied.example:80", Verdict::Denied);
        drop(lend);
        server.record("after.example:80", Verdict::Allowed);
        let (task, _) = ledger.finish("t");
        let named: Vec<&str> = task.destinations.keys().map(String::as_str).collect();
        assert_eq!(named, ["denied.example:80", "site.example:80"]);
        assert_eq!(task.destinations["denied.example:80"].denied, 1);
        // The server keeps its own count of all of it; an ended task is lent nothing.
        assert_eq!(ledger.peek("mcp:browser@telegram:1").unwrap().destinations.len(), 4);
        assert!(ledger.lend("mcp:browser@telegram:1", "t").is_none());
    }

    #[test]
    fn a_task_is_counted_until_it_ends_then_refused() {
        let ledger = TaskStatsTable::default();
        let Attach::Live(stats) = ledger.attach("t") else { panic!("new task") };
        stats.opened();
        stats.record("example.com:443", Verdict::Allowed);
        stats.record("example.com:443", Verdict::Allowed);
        stats.record("10.0.0.1:80", Verdict::Denied);
        stats.add_bytes(true, 10);
        stats.add_bytes(false, 200);
        let peeked = ledger.peek("t").unwrap();
        assert_eq!(peeked.destinations["example.com:443"].allowed, 2);
        let (summary, _) = ledger.finish("t");
        assert!(stats.cut().is_cancelled());
        assert_eq!((summary.bytes_up, summary.bytes_down, summary.cut_at_end), (10, 200, 1));
        assert_eq!(summary.totals(), DestinationCounts { allowed: 2, denied: 1, errors: 0 });
        assert!(matches!(ledger.attach("t"), Attach::Ended));
        assert_eq!(ledger.finish("t").0, TaskSummary { task_id: "t".into(), ..Default::default() });
        ledger.reopen("t");
        assert!(matches!(ledger.attach("t"), Attach::Live(_)));
    }

    #[test]
    fn destinations_and_tasks_are_bounded() {
        let ledger = TaskStatsTable::default();
        let Attach::Live(stats) = ledger.attach("t") else { panic!() };
        for i in 0..MAX_DESTINATIONS + 10 {
            stats.record(&format!("h{i}:443"), Verdict::Denied);
        }
        let summary = ledger.peek("t").unwrap();
        assert_eq!(summary.destinations.len(), MAX_DESTINATIONS);
        assert_eq!(summary.other_destinations.denied, 10);
        for i in 0..MAX_TASKS + 1 {
            let _ = ledger.attach(&format!("task-{i}"));
        }
        assert!(ledger.lock().live.len() <= MAX_TASKS);
        assert!(ledger.peek("t").is_none(), "the oldest went first");
    }
}
