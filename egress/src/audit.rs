//! The audit trail of everything that left (or tried to leave) a container, and the counters
//! behind the metrics.
//!
//! Each proxied connection and each relayed LLM call becomes exactly one JSON line in the audit
//! file and one `tracing` event, written when the connection ends so the byte counts are final.
//! [`ConnAudit`] is a guard shared by the parts of a connection; the last one to drop writes
//! the line, so a line is written however the connection ends (finished, limit hit, client
//! gone, shutdown).

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Instant, SystemTime};

use serde::Serialize;
use tokio_util::sync::CancellationToken;

use nexbot_core::repeat::{LogDecision, RepeatFilter};
use nexbot_redact::Redactor;

use super::audit_chain as chain;
use super::ledger::{Attach, TaskStats, TaskStatsTable};
use super::scrub::Scrubber;

/// What became of a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Policy allowed it and it was served.
    Allowed,
    /// Policy refused it.
    Denied,
    /// Allowed, but it could not be served (unresolvable, unreachable, bad request).
    Error,
}

/// One line of the audit file.
#[derive(Debug, Clone, Serialize)]
pub struct AuditRecord {
    /// RFC 3339, UTC, when the connection ended.
    pub time: String,
    /// `connect` (CONNECT tunnel), `http` (plain HTTP request), `https` (absolute-form
    /// `https://` request, TLS made by the proxy) or `relay` (LLM call).
    pub kind: &'static str,
    pub task_id: Option<String>,
    pub container: Option<String>,
    /// The client's address (a container on the pool network).
    pub source: IpAddr,
    pub host: String,
    pub port: u16,
    /// The address actually dialled, or the one judged when denied.
    pub resolved: Option<IpAddr>,
    pub verdict: Verdict,
    pub reason: String,
    pub bytes_up: u64,
    pub bytes_down: u64,
    pub duration_ms: u64,
    /// LLM tokens charged (relay calls only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tokens: Option<u64>,
    /// The provider whose answer the container got (relay calls only; `host` and `port`
    /// are that provider's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// The answer came from a provider after the first one failed (relay calls only).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub fallback: bool,
    /// The destination was one of this host's own addresses, opened by an explicit
    /// `ip:port` entry of `egress.proxy.allow_internal`.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub host_address: bool,
    /// Proxy-mode secrets, by name only: those put into an allowed request, the one that
    /// refused a denied one, or those scrubbed out of a relay call.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub secrets: Vec<String>,
    /// The request carried a decoy secret (`decoy.rs`; the one in `secrets`): refused, and
    /// the owner alerted.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub decoy: bool,
}

/// Counters for metrics; read them with [`Metrics::snapshot`].
#[derive(Debug, Default)]
pub struct Metrics {
    allowed: AtomicU64,
    denied: AtomicU64,
    errors: AtomicU64,
    bytes_up: AtomicU64,
    bytes_down: AtomicU64,
    relay_calls: AtomicU64,
    relay_refused: AtomicU64,
    relay_tokens: AtomicU64,
    relay_fallbacks: AtomicU64,
    audit_write_failures: AtomicU64,
    audit_lines_suppressed: AtomicU64,
}

/// A copy of the counters at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct MetricsSnapshot {
    /// Proxy connections allowed and served.
    pub allowed: u64,
    /// Proxy connections refused by policy.
    pub denied: u64,
    /// Proxy connections that failed after the policy check.
    pub errors: u64,
    pub bytes_up: u64,
    pub bytes_down: u64,
    /// Relay calls forwarded to the provider.
    pub relay_calls: u64,
    /// Relay calls refused (token, budget, bad request).
    pub relay_refused: u64,
    /// LLM tokens charged to tasks.
    pub relay_tokens: u64,
    /// Relay calls answered by a provider after the first one failed.
    pub relay_fallbacks: u64,
    /// Audit lines that could not be written to the file (they still went to tracing).
    pub audit_write_failures: u64,
    /// Audit lines left out by the caps (`egress.audit_max_lines_per_task`,
    /// `egress.audit_max_refusals_per_sec`); the connections are counted above all the same.
    pub audit_lines_suppressed: u64,
}

impl Metrics {
    pub fn snapshot(&self) -> MetricsSnapshot {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        MetricsSnapshot {
            allowed: get(&self.allowed),
            denied: get(&self.denied),
            errors: get(&self.errors),
            bytes_up: get(&self.bytes_up),
            bytes_down: get(&self.bytes_down),
            relay_calls: get(&self.relay_calls),
            relay_refused: get(&self.relay_refused),
            relay_tokens: get(&self.relay_tokens),
            relay_fallbacks: get(&self.relay_fallbacks),
            audit_write_failures: get(&self.audit_write_failures),
            audit_lines_suppressed: get(&self.audit_lines_suppressed),
        }
    }

    fn count(&self, record: &AuditRecord) {
        let add = |c: &AtomicU64, n: u64| c.fetch_add(n, Ordering::Relaxed);
        match (record.kind, record.verdict) {
            ("relay", Verdict::Allowed) => add(&self.relay_calls, 1),
            ("relay", _) => add(&self.relay_refused, 1),
            (_, Verdict::Allowed) => add(&self.allowed, 1),
            (_, Verdict::Denied) => add(&self.denied, 1),
            (_, Verdict::Error) => add(&self.errors, 1),
        };
        add(&self.bytes_up, record.bytes_up);
        add(&self.bytes_down, record.bytes_down);
        add(&self.relay_tokens, record.tokens.unwrap_or(0));
        add(&self.relay_fallbacks, u64::from(record.fallback));
    }
}

/// The bounds of the audit log (`egress.audit_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuditLimits {
    /// Size at which the file is rotated.
    pub max_bytes: u64,
    /// Files kept, the live one included (`audit.jsonl`, `audit.jsonl.1`, …).
    pub max_files: usize,
    /// Lines written for one task; beyond, one "N lines suppressed" line when it ends.
    pub max_lines_per_task: u64,
    /// Refusal lines written in one second; beyond, one "N lines suppressed" line after it.
    pub max_refusals_per_sec: u64,
}

impl Default for AuditLimits {
    fn default() -> Self {
        Self {
            max_bytes: 16 << 20,
            max_files: 5,
            max_lines_per_task: 10_000,
            max_refusals_per_sec: 50,
        }
    }
}

/// Longest reason in an audit line; longer ones are cut and marked.
pub const MAX_REASON_CHARS: usize = 1024;

/// The line that stands for lines left out.
#[derive(Debug, Serialize)]
struct SuppressedRecord<'a> {
    time: String,
    kind: &'static str,
    task_id: Option<&'a str>,
    suppressed: u64,
    reason: String,
}

/// An event of another part ([`nexbot_core::audit::AuditEvent`]) as its line.
#[derive(Debug, Serialize)]
struct EventRecord<'a> {
    time: String,
    kind: &'static str,
    event: &'static str,
    actor: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    chat: Option<&'a str>,
    subject: String,
    outcome: String,
}

/// The live file and its size.
#[derive(Debug)]
struct Live {
    file: File,
    size: u64,
    /// Write failures (a full disk fails every line): logged once, then once a minute with a
    /// count, and once more when lines are written again.
    failures: RepeatFilter,
    /// The hash of the newest line written: the next line's link (`audit_chain`).
    head: String,
}

/// Refusal lines of the current second.
#[derive(Debug, Default)]
struct Rate {
    second: u64,
    written: u64,
    suppressed: u64,
}

/// The audit file plus the counters, and the ledger each task's connections count into.
#[derive(Debug)]
pub struct AuditLog {
    path: PathBuf,
    live: Mutex<Live>,
    limits: AuditLimits,
    scrubber: Scrubber,
    rate: Mutex<Rate>,
    started: Instant,
    metrics: Metrics,
    ledger: Arc<TaskStatsTable>,
}

fn open_live(path: &Path) -> std::io::Result<File> {
    let mut options = OpenOptions::new();
    options.create(true).append(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options.open(path)
}

impl AuditLog {
    /// Opens (creating, appending) the audit file; only the owner may read it. Rotated files
    /// beyond `limits.max_files` (left by a larger setting) are removed.
    pub(crate) fn open(
        path: &Path,
        limits: AuditLimits,
        scrubber: Scrubber,
    ) -> std::io::Result<Self> {
        let file = open_live(path)?;
        let size = file.metadata()?.len();
        // A restarted daemon goes on with the chain where the newest kept line left it.
        let head = chain::head_of(path, limits.max_files);
        let failures = RepeatFilter::default();
        let log = Self {
            path: path.to_owned(),
            live: Mutex::new(Live { file, size, failures, head }),
            limits,
            scrubber,
            rate: Mutex::default(),
            started: Instant::now(),
            metrics: Metrics::default(),
            ledger: Arc::default(),
        };
        log.remove_extra_files();
        Ok(log)
    }

    pub(crate) fn ledger(&self) -> &Arc<TaskStatsTable> {
        &self.ledger
    }

    /// Walks the chain of the kept files (`audit_chain::verify`), no line written meanwhile.
    pub fn verify(&self) -> Result<chain::Verified, chain::Break> {
        let _live = self.live.lock().unwrap_or_else(|p| p.into_inner());
        chain::verify(&self.path, self.limits.max_files)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// `text` with the provider keys and relay tokens replaced by labels (no length cap).
    pub(crate) fn scrub(&self, text: &str) -> String {
        self.scrubber.scrub(text)
    }

    /// Text from a container as it may be kept: secrets scrubbed, length capped.
    pub(crate) fn clean(&self, text: &str, max: usize) -> String {
        self.scrubber.scrub(&clip(text, max))
    }

    /// `path.N`: the N-th newest rotated file.
    fn rotated(&self, n: usize) -> PathBuf {
        let mut name = self.path.as_os_str().to_owned();
        name.push(format!(".{n}"));
        PathBuf::from(name)
    }

    fn remove_extra_files(&self) {
        let (Some(dir), Some(name)) = (self.path.parent(), self.path.file_name()) else { return };
        let prefix = format!("{}.", name.to_string_lossy());
        let Ok(entries) = std::fs::read_dir(dir) else { return };
        for entry in entries.flatten() {
            let file = entry.file_name();
            let n =
                file.to_string_lossy().strip_prefix(&prefix).and_then(|n| n.parse::<usize>().ok());
            if n.is_some_and(|n| n == 0 || n >= self.limits.max_files) {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }

    /// Counts one record, then writes it (scrubbed, clipped) to `tracing` and the file unless
    /// a cap leaves it out. A failed file write is counted and traced, never fatal: the
    /// connection it describes is already over.
    pub fn write(&self, record: &mut AuditRecord, task: Option<&TaskStats>) {
        self.metrics.count(record);
        record.host = self.clean(&record.host, MAX_HOST_CHARS);
        record.reason = self.clean(&record.reason, MAX_REASON_CHARS);
        if let Some(stats) = task {
            let written = stats.audit_lines.fetch_add(1, Ordering::Relaxed);
            if written >= self.limits.max_lines_per_task {
                stats.audit_suppressed.fetch_add(1, Ordering::Relaxed);
                self.metrics.audit_lines_suppressed.fetch_add(1, Ordering::Relaxed);
                return;
            }
        }
        if record.verdict != Verdict::Allowed && !self.admit_refusal() {
            self.metrics.audit_lines_suppressed.fetch_add(1, Ordering::Relaxed);
            return;
        }
        tracing::info!(
            target: "nexbot::egress::audit",
            kind = record.kind,
            task_id = record.task_id.as_deref(),
            container = record.container.as_deref(),
            source = %record.source,
            host = %record.host,
            port = record.port,
            resolved = record.resolved.map(tracing::field::display),
            verdict = ?record.verdict,
            reason = %record.reason,
            bytes_up = record.bytes_up,
            bytes_down = record.bytes_down,
            duration_ms = record.duration_ms,
            tokens = record.tokens,
            provider = record.provider.as_deref(),
            fallback = record.fallback,
            host_address = record.host_address,
            secrets = ?record.secrets,
            "egress",
        );
        self.append(serde_json::to_vec(record));
    }

    /// Writes `event` as a line of the chain (`"kind":"event"`), its text scrubbed and cut like
    /// a connection's.
    pub fn write_event(&self, event: &nexbot_core::audit::AuditEvent) {
        tracing::info!(
            target: "nexbot::egress::audit",
            event = event.event,
            actor = %event.actor,
            chat = event.chat.as_deref(),
            subject = %event.subject,
            outcome = %event.outcome,
            "audit event",
        );
        self.append(serde_json::to_vec(&EventRecord {
            time: humantime::format_rfc3339_millis(SystemTime::now()).to_string(),
            kind: "event",
            event: event.event,
            actor: &event.actor,
            chat: event.chat.as_deref(),
            subject: self.clean(&event.subject, MAX_REASON_CHARS),
            outcome: self.clean(&event.outcome, MAX_REASON_CHARS),
        }));
    }

    /// Whether one more refusal line fits in this second's budget. A new second first
    /// writes the line for what the last one left out.
    fn admit_refusal(&self) -> bool {
        let second = self.started.elapsed().as_secs();
        let mut rate = self.rate.lock().unwrap_or_else(|p| p.into_inner());
        if rate.second != second {
            let left_out = std::mem::take(&mut rate.suppressed);
            *rate = Rate { second, written: 0, suppressed: 0 };
            drop(rate);
            self.write_suppressed(None, left_out, self.rate_reason(left_out));
            rate = self.rate.lock().unwrap_or_else(|p| p.into_inner());
        }
        if rate.written < self.limits.max_refusals_per_sec {
            rate.written += 1;
            true
        } else {
            rate.suppressed += 1;
            false
        }
    }

    fn rate_reason(&self, left_out: u64) -> String {
        format!(
            "{left_out} lines suppressed: more than {} refusals in one second \
             (egress.audit_max_refusals_per_sec)",
            self.limits.max_refusals_per_sec
        )
    }

    /// Writes the line for refusals a past second left out (the listener calls it every
    /// second, and at shutdown with `now`).
    pub(crate) fn flush_suppressed(&self, now: bool) {
        let second = self.started.elapsed().as_secs();
        let mut rate = self.rate.lock().unwrap_or_else(|p| p.into_inner());
        if (now || rate.second != second) && rate.suppressed > 0 {
            let left_out = std::mem::take(&mut rate.suppressed);
            drop(rate);
            self.write_suppressed(None, left_out, self.rate_reason(left_out));
        }
    }

    /// Writes the line for a task's lines left out by `max_lines_per_task` (when it ends).
    pub(crate) fn task_ended(&self, task_id: &str, stats: &TaskStats) {
        let left_out = stats.audit_suppressed.load(Ordering::Relaxed);
        let reason = format!(
            "{left_out} lines suppressed: task {task_id} wrote more than {} audit lines \
             (egress.audit_max_lines_per_task)",
            self.limits.max_lines_per_task
        );
        self.write_suppressed(Some(task_id), left_out, reason);
    }

    fn write_suppressed(&self, task_id: Option<&str>, left_out: u64, reason: String) {
        if left_out == 0 {
            return;
        }
        tracing::warn!(target: "nexbot::egress::audit", task_id, suppressed = left_out, "{reason}");
        self.append(serde_json::to_vec(&SuppressedRecord {
            time: humantime::format_rfc3339_millis(SystemTime::now()).to_string(),
            kind: "suppressed",
            task_id,
            suppressed: left_out,
            reason,
        }));
    }

    /// Appends one line, rotating first when it would pass `max_bytes`.
    fn append(&self, line: serde_json::Result<Vec<u8>>) {
        let line = match line {
            Ok(line) => line,
            Err(err) => {
                tracing::error!(%err, "egress audit record did not serialise");
                self.metrics.audit_write_failures.fetch_add(1, Ordering::Relaxed);
                return;
            }
        };
        let mut live = self.live.lock().unwrap_or_else(|p| p.into_inner());
        // Linked under the lock: lines are chained in the order they are written.
        let mut line = chain::chained(&line, &live.head);
        let hash = chain::line_hash(&line);
        line.push(b'\n');
        if live.size > 0 && live.size + line.len() as u64 > self.limits.max_bytes {
            self.rotate(&mut live);
        }
        // One write of one whole line on an O_APPEND file keeps lines intact.
        match live.file.write_all(&line) {
            Ok(()) => {
                live.size += line.len() as u64;
                live.head = hash;
                if let Some(repeated) = live.failures.clear(Instant::now()) {
                    tracing::warn!(
                        path = %self.path.display(),
                        "egress audit lines are written again; until now: egress audit line not \
                         written ({}; the metric counts them)",
                        repeated.note()
                    );
                }
            }
            Err(err) => {
                self.metrics.audit_write_failures.fetch_add(1, Ordering::Relaxed);
                let path = self.path.display();
                match live.failures.check(&err.to_string(), Instant::now()) {
                    LogDecision::Log => {
                        tracing::error!(path = %path, %err, "egress audit line not written")
                    }
                    LogDecision::Repeated(r) => tracing::error!(
                        path = %path, %err, "egress audit line not written ({})", r.note()
                    ),
                    LogDecision::Quiet => {}
                }
            }
        }
    }

    /// `file` → `file.1` → … → `file.{max_files-1}` (dropped beyond), then a new `file`. When
    /// that fails, or only one file is kept, the live file is emptied instead: the bound holds.
    fn rotate(&self, live: &mut Live) {
        let shifted = (self.limits.max_files > 1).then(|| -> std::io::Result<File> {
            let last = self.limits.max_files - 1;
            match std::fs::remove_file(self.rotated(last)) {
                Err(err) if err.kind() != std::io::ErrorKind::NotFound => return Err(err),
                _ => {}
            }
            for n in (1..last).rev() {
                match std::fs::rename(self.rotated(n), self.rotated(n + 1)) {
                    Err(err) if err.kind() != std::io::ErrorKind::NotFound => return Err(err),
                    _ => {}
                }
            }
            std::fs::rename(&self.path, self.rotated(1))?;
            open_live(&self.path)
        });
        match shifted {
            Some(Ok(file)) => {
                live.file = file;
                live.size = 0;
            }
            other => {
                if let Some(Err(err)) = other {
                    tracing::error!(path = %self.path.display(), %err, "egress audit log not rotated; emptied instead");
                }
                if let Err(err) = live.file.set_len(0) {
                    tracing::error!(path = %self.path.display(), %err, "egress audit log could not be emptied");
                }
                live.size = 0;
            }
        }
    }
}

/// Longest host name in an audit line or a task summary (the longest DNS name); longer
/// ones are cut and marked.
pub const MAX_HOST_CHARS: usize = 253;

/// `text` cut to at most `max` characters, the cut marked with `…` (the one shared helper).
pub use nexbot_core::text::clip;

/// Who is behind a connection, as far as the host knows.
#[derive(Debug, Clone, Default)]
pub struct Origin {
    pub source: Option<IpAddr>,
    pub container: Option<String>,
    pub task_id: Option<String>,
}

/// The audit line of one connection in the making; written when the last clone drops.
#[derive(Debug)]
pub struct ConnAudit {
    log: Arc<AuditLog>,
    started: Instant,
    kind: &'static str,
    origin: Origin,
    /// Where the connection goes (`host`, `port`); the relay moves it to the provider that
    /// answered.
    destination: Mutex<(String, u16)>,
    state: Mutex<State>,
    /// Bytes from the container ([`ConnAudit::count`] adds to them).
    up: AtomicU64,
    /// Bytes to the container.
    down: AtomicU64,
    /// The task's counters, once the connection is known to be the task's.
    task: OnceLock<Arc<TaskStats>>,
    /// Set when the connection is attributed to a task that has ended.
    ended: Mutex<Option<String>>,
    /// The task's secrets, scrubbed out of the line (and out of refusals sent back).
    redactor: OnceLock<Arc<Redactor>>,
}

/// Which way the bytes go, to pick the counter and name the limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// From the container.
    Up,
    /// To the container.
    Down,
}

impl Direction {
    /// The audit field (and byte limit) of this direction.
    pub fn name(self) -> &'static str {
        match self {
            Self::Up => "bytes_up",
            Self::Down => "bytes_down",
        }
    }
}

#[derive(Debug)]
struct State {
    task_id: Option<String>,
    resolved: Option<IpAddr>,
    verdict: Verdict,
    reason: String,
    tokens: Option<u64>,
    provider: Option<String>,
    fallback: bool,
    host_address: bool,
    secrets: Vec<String>,
    /// The request carried a decoy ([`ConnAudit::decoy`]).
    decoy: bool,
    /// Whether the task's summary has this connection's verdict already.
    summarised: bool,
}

impl ConnAudit {
    pub fn new(
        log: Arc<AuditLog>,
        kind: &'static str,
        origin: Origin,
        host: String,
        port: u16,
    ) -> Arc<Self> {
        let task_id = origin.task_id.clone();
        let audit = Arc::new(Self {
            log,
            started: Instant::now(),
            kind,
            destination: Mutex::new((host, port)),
            state: Mutex::new(State {
                task_id: origin.task_id.clone(),
                resolved: None,
                verdict: Verdict::Error,
                reason: "ended before a verdict".into(),
                tokens: None,
                provider: None,
                fallback: false,
                host_address: false,
                secrets: Vec::new(),
                decoy: false,
                summarised: false,
            }),
            origin,
            up: AtomicU64::new(0),
            down: AtomicU64::new(0),
            task: OnceLock::new(),
            ended: Mutex::new(None),
            redactor: OnceLock::new(),
        });
        if let Some(task_id) = task_id {
            audit.attach(&task_id);
        }
        audit
    }

    /// Counts the connection into the task's summary from now on (or notes that the task
    /// has ended).
    fn attach(&self, task_id: &str) {
        match self.log.ledger.attach(task_id) {
            Attach::Live(stats) => {
                if self.task.set(stats.clone()).is_ok() {
                    stats.opened();
                    stats.add_bytes(true, self.up.load(Ordering::Relaxed));
                    stats.add_bytes(false, self.down.load(Ordering::Relaxed));
                }
            }
            Attach::Ended => {
                if let Ok(mut ended) = self.ended.lock() {
                    *ended = Some(task_id.to_owned());
                }
            }
        }
    }

    /// The task this connection is attributed to, when that task has ended already.
    pub fn ended_task(&self) -> Option<String> {
        self.ended.lock().ok().and_then(|ended| ended.clone())
    }

    /// Cancelled when the connection's task ends (`None`: no task, nothing to cut by).
    pub fn task_cut(&self) -> Option<CancellationToken> {
        self.task.get().map(|stats| stats.cut().clone())
    }

    /// `host:port` as the task's summary lists it.
    fn destination(&self) -> String {
        let (host, port) = self.destination.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let host = self.log.clean(&host, MAX_HOST_CHARS);
        match host.contains(':') {
            true => format!("[{host}]:{port}"),
            false => format!("{host}:{port}"),
        }
    }

    /// The destination is another one (before the verdict): the relay's fallback provider.
    pub fn redirect(&self, host: String, port: u16) {
        *self.destination.lock().unwrap_or_else(|p| p.into_inner()) = (host, port);
    }

    /// Names the provider whose answer the container gets (a relay call), and whether that is
    /// a fallback; the task's summary counts it.
    pub fn provider(&self, name: &str, fallback: bool) {
        if let Ok(mut state) = self.state.lock() {
            state.provider = Some(name.to_owned());
            state.fallback = fallback;
        }
        if let Some(stats) = self.task.get() {
            stats.llm_answer(name, fallback);
        }
    }

    fn counter(&self, direction: Direction) -> &AtomicU64 {
        match direction {
            Direction::Up => &self.up,
            Direction::Down => &self.down,
        }
    }

    /// Counts `bytes` more flowing `direction`; returns the total so far. The one place the
    /// proxy's bodies and tunnels and the relay's request and answer count what they pass.
    pub fn count(&self, direction: Direction, bytes: usize) -> u64 {
        let bytes = bytes as u64;
        if let Some(stats) = self.task.get() {
            stats.add_bytes(direction == Direction::Up, bytes);
        }
        self.counter(direction).fetch_add(bytes, Ordering::Relaxed).saturating_add(bytes)
    }

    /// The bytes counted `direction` so far.
    pub fn counted(&self, direction: Direction) -> u64 {
        self.counter(direction).load(Ordering::Relaxed)
    }

    /// Records the verdict and its reason (later calls refine the reason, e.g. a limit hit).
    /// The first verdict is the one the task's summary counts.
    pub fn verdict(&self, verdict: Verdict, reason: impl Into<String>) {
        if let Ok(mut state) = self.state.lock() {
            state.verdict = verdict;
            state.reason = reason.into();
            if !state.summarised {
                if let Some(stats) = self.task.get() {
                    stats.record(&self.destination(), verdict);
                    state.summarised = true;
                }
            }
        }
    }

    /// Sets the reason without changing the verdict.
    pub fn reason(&self, reason: impl Into<String>) {
        if let Ok(mut state) = self.state.lock() {
            state.reason = reason.into();
        }
    }

    pub fn resolved(&self, ip: IpAddr) {
        if let Ok(mut state) = self.state.lock() {
            state.resolved = Some(ip);
        }
    }

    /// Names the task (the relay learns it from the token, not from the source address).
    pub fn task(&self, task_id: String) {
        self.attach(&task_id);
        if let Ok(mut state) = self.state.lock() {
            state.task_id = Some(task_id);
        }
    }

    /// Marks the destination as one of this host's own addresses (opened explicitly).
    pub fn host_address(&self) {
        if let Ok(mut state) = self.state.lock() {
            state.host_address = true;
        }
    }

    pub fn tokens(&self, tokens: u64) {
        if let Ok(mut state) = self.state.lock() {
            state.tokens = Some(tokens);
        }
    }

    pub fn origin(&self) -> &Origin {
        &self.origin
    }

    /// Scrubs the task's secrets (every form `redactor` knows) out of this line, and out of
    /// [`ConnAudit::scrub_text`]: text from upstream (an error, a host) could carry a value.
    pub(crate) fn scrub_with(&self, redactor: Arc<Redactor>) {
        let _ = self.redactor.set(redactor);
    }

    /// `text` with the task's secrets scrubbed, when [`ConnAudit::scrub_with`] was called.
    pub(crate) fn scrub_text(&self, text: &str) -> String {
        match self.redactor.get() {
            Some(redactor) => redactor.redact(text),
            None => text.to_owned(),
        }
    }

    /// Names the proxy-mode secrets of this connection: put in (`injected`) or the one that
    /// refused it; the task's summary counts them.
    pub(crate) fn secrets(&self, names: Vec<String>, injected: bool) {
        if let Some(stats) = self.task.get() {
            stats.secrets(names.len() as u64, injected);
        }
        if let Ok(mut state) = self.state.lock() {
            state.secrets = names;
        }
    }

    /// Marks the connection's request as carrying the decoy `name` (its line says so).
    pub(crate) fn decoy(&self, name: &str) {
        if let Ok(mut state) = self.state.lock() {
            state.secrets = vec![name.to_owned()];
            state.decoy = true;
        }
    }

    /// Names secrets of this connection without counting them: those scrubbed out of a relay
    /// call, the one that refused a tunnel.
    pub(crate) fn mention_secrets(&self, names: Vec<String>) {
        if let Ok(mut state) = self.state.lock() {
            state.secrets = names;
        }
    }
}

impl nexbot_core::audit::AuditTrail for AuditLog {
    fn record(&self, event: nexbot_core::audit::AuditEvent) {
        self.write_event(&event);
    }
}

impl Drop for ConnAudit {
    fn drop(&mut self) {
        let destination = self.destination();
        let state = match self.state.get_mut() {
            Ok(state) => state,
            Err(poisoned) => poisoned.into_inner(),
        };
        if let Some(stats) = self.task.get() {
            if !state.summarised {
                stats.record(&destination, state.verdict);
            }
            stats.closed();
        }
        let (host, port) =
            std::mem::take(self.destination.get_mut().unwrap_or_else(|p| p.into_inner()));
        let mut record = AuditRecord {
            time: humantime::format_rfc3339_millis(SystemTime::now()).to_string(),
            kind: self.kind,
            task_id: state.task_id.take(),
            container: self.origin.container.clone(),
            source: self.origin.source.unwrap_or(IpAddr::from([0, 0, 0, 0])),
            host,
            port,
            resolved: state.resolved,
            verdict: state.verdict,
            reason: std::mem::take(&mut state.reason),
            bytes_up: *self.up.get_mut(),
            bytes_down: *self.down.get_mut(),
            duration_ms: self.started.elapsed().as_millis().try_into().unwrap_or(u64::MAX),
            tokens: state.tokens,
            provider: state.provider.take(),
            fallback: state.fallback,
            host_address: state.host_address,
            secrets: std::mem::take(&mut state.secrets),
            decoy: state.decoy,
        };
        if let Some(redactor) = self.redactor.get() {
            record.host = redactor.redact(&record.host);
            record.reason = redactor.redact(&record.reason);
        }
        self.log.write(&mut record, self.task.get().map(|stats| &**stats));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_guard_writes_one_line_when_the_last_clone_drops() {
        let dir = std::env::temp_dir().join(format!("nxe-audit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("audit.jsonl");
        let _ = std::fs::remove_file(&path);
        let log =
            Arc::new(AuditLog::open(&path, AuditLimits::default(), Scrubber::default()).unwrap());
        let origin = Origin {
            source: Some("172.30.0.5".parse().unwrap()),
            container: Some("c1".into()),
            task_id: Some("t1".into()),
        };
        let audit = ConnAudit::new(log.clone(), "connect", origin, "example.com".into(), 443);
        let clone = audit.clone();
        audit.verdict(Verdict::Allowed, "closed");
        audit.resolved("93.184.216.34".parse().unwrap());
        audit.count(Direction::Up, 7);
        clone.count(Direction::Down, 11);
        drop(audit);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "", "written before the last drop");
        drop(clone);
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<serde_json::Value> =
            text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!(lines.len(), 1);
        let line = &lines[0];
        assert_eq!(line["task_id"], "t1");
        assert_eq!(line["container"], "c1");
        assert_eq!(line["verdict"], "allowed");
        assert_eq!(line["resolved"], "93.184.216.34");
        assert_eq!((line["bytes_up"].as_u64(), line["bytes_down"].as_u64()), (Some(7), Some(11)));
        assert!(line["time"].as_str().unwrap().ends_with('Z'));
        let metrics = log.metrics().snapshot();
        assert_eq!((metrics.allowed, metrics.bytes_up, metrics.bytes_down), (1, 7, 11));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn record(host: &str) -> AuditRecord {
        AuditRecord {
            time: "2025-01-01T00:00:00.000Z".into(),
            kind: "connect",
            task_id: None,
            container: None,
            source: "172.30.0.5".parse().unwrap(),
            host: host.into(),
            port: 443,
            resolved: None,
            verdict: Verdict::Allowed,
            reason: "closed".into(),
            bytes_up: 0,
            bytes_down: 0,
            duration_ms: 0,
            tokens: None,
            provider: None,
            fallback: false,
            host_address: false,
            secrets: Vec::new(),
            decoy: false,
        }
    }

    #[test]
    fn rotation_keeps_the_file_count_and_one_file_is_emptied_instead() {
        let dir = std::env::temp_dir().join(format!("nxe-rotate-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("a.jsonl");
        for leftover in
            ["a.jsonl.2", "a.jsonl.3", "a.jsonl.9", "a.jsonl.0", "a.jsonl.x", "b.jsonl.5"]
        {
            std::fs::write(dir.join(leftover), "{}\n").unwrap();
        }
        let limits = AuditLimits { max_bytes: 4096, max_files: 3, ..AuditLimits::default() };
        let log = AuditLog::open(&path, limits, Scrubber::default()).unwrap();
        let mut names: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(
            names,
            ["a.jsonl", "a.jsonl.2", "a.jsonl.x", "b.jsonl.5"],
            "beyond max_files removed"
        );
        for i in 0..100 {
            log.write(&mut record(&format!("host-{i}.example")), None);
        }
        for name in ["a.jsonl", "a.jsonl.1", "a.jsonl.2"] {
            let size = std::fs::metadata(dir.join(name)).unwrap().len();
            assert!(size > 0 && size <= 4096, "{name}: {size}");
        }
        assert!(!dir.join("a.jsonl.3").exists());

        let single = dir.join("s.jsonl");
        let limits = AuditLimits { max_bytes: 4096, max_files: 1, ..AuditLimits::default() };
        let log = AuditLog::open(&single, limits, Scrubber::default()).unwrap();
        for i in 0..100 {
            log.write(&mut record(&format!("host-{i}.example")), None);
        }
        assert!(std::fs::metadata(&single).unwrap().len() <= 4096);
        assert!(!dir.join("s.jsonl.1").exists());
        let text = std::fs::read_to_string(&single).unwrap();
        assert!(text.lines().last().unwrap().contains("host-99.example"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_chain_holds_across_rotation_and_a_restart_and_names_the_line_after_a_tampered_one() {
        use crate::audit_chain::{line_hash, verify};
        let dir = std::env::temp_dir().join(format!("nxe-chain-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("a.jsonl");
        // Lines of an install from before the chain: kept, counted as unlinked.
        std::fs::write(&path, "{\"kind\":\"old\"}\n{\"kind\":\"older\"}\n").unwrap();
        let limits = AuditLimits { max_bytes: 4096, max_files: 3, ..AuditLimits::default() };
        let log = AuditLog::open(&path, limits, Scrubber::default()).unwrap();
        for i in 0..5 {
            log.write(&mut record(&format!("host-{i}.example")), None);
        }
        let early = verify(&path, 3).unwrap();
        assert_eq!((early.lines, early.unlinked, early.starts_after_rotation), (7, 2, false));
        for i in 5..60 {
            log.write(&mut record(&format!("host-{i}.example")), None);
        }
        drop(log);
        // A restart goes on with the chain.
        let log = AuditLog::open(&path, limits, Scrubber::default()).unwrap();
        for i in 60..70 {
            log.write(&mut record(&format!("host-{i}.example")), None);
        }
        let held = log.verify().unwrap();
        assert_eq!(held.files, 3);
        assert!(held.starts_after_rotation, "the oldest lines were rotated away");
        let live = std::fs::read_to_string(&path).unwrap();
        assert_eq!(held.head, line_hash(live.lines().last().unwrap().as_bytes()));
        assert!(live.lines().last().unwrap().contains("host-69.example"));

        let middle = dir.join("a.jsonl.1");
        let kept = std::fs::read_to_string(&middle).unwrap();
        let lines: Vec<&str> = kept.lines().collect();
        assert!(lines.len() > 4, "{}", lines.len());
        let tampered = |lines: Vec<String>| {
            std::fs::write(&middle, lines.join("\n") + "\n").unwrap();
            let broken = verify(&path, 3).unwrap_err();
            std::fs::write(&middle, &kept).unwrap();
            assert!(broken.file.ends_with("a.jsonl.1"), "{broken}");
            broken
        };
        let owned = || lines.iter().map(|l| l.to_string()).collect::<Vec<_>>();
        // Edited: the line after it no longer follows.
        let mut edited = owned();
        edited[2] = edited[2].replace("host-", "elsewhere-");
        assert_eq!(tampered(edited).line, 4);
        // Removed.
        let mut removed = owned();
        removed.remove(2);
        assert_eq!(tampered(removed).line, 3);
        // Two lines swapped.
        let mut moved = owned();
        moved.swap(1, 2);
        assert_eq!(tampered(moved).line, 2);
        // A line without a link slipped in.
        let mut inserted = owned();
        inserted.insert(3, "{\"kind\":\"connect\",\"host\":\"forged\"}".into());
        let broken = tampered(inserted);
        assert_eq!(broken.line, 4);
        assert!(broken.reason.contains("inserted"), "{broken}");
        assert_eq!(verify(&path, 3).unwrap(), held, "restored");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn another_parts_events_join_the_chain_and_an_edited_one_is_named() {
        use crate::audit_chain::verify;
        use nexbot_core::audit::{AuditEvent, AuditTrail};
        let dir = std::env::temp_dir().join(format!("nxe-events-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("a.jsonl");
        let log =
            Arc::new(AuditLog::open(&path, AuditLimits::default(), Scrubber::default()).unwrap());
        log.write(&mut record("before.example"), None);
        let trail: Arc<dyn AuditTrail> = log.clone();
        trail.record(AuditEvent {
            event: "approval",
            actor: "telegram:42".into(),
            chat: Some("telegram:42".into()),
            subject: "GET api.example.com:443".into(),
            outcome: "allow once".into(),
        });
        log.write(&mut record("after.example"), None);
        let held = verify(&path, 3).unwrap();
        assert_eq!((held.lines, held.unlinked), (3, 0));
        let text = std::fs::read_to_string(&path).unwrap();
        let event: serde_json::Value = serde_json::from_str(text.lines().nth(1).unwrap()).unwrap();
        assert_eq!(event["kind"], "event");
        assert_eq!(event["event"], "approval");
        assert_eq!(event["outcome"], "allow once");
        // The answer changed afterwards: the line after it no longer follows.
        std::fs::write(&path, text.replace("allow once", "deny")).unwrap();
        assert_eq!(verify(&path, 3).unwrap_err().line, 3);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
