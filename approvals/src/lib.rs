//! Approvals: the one question machinery behind `egress.mode = "ask"`, `--confirm` secrets
//! and `agent.confirm` — "ask first": a step waits for a person's yes, asked in the chat it
//! belongs to with buttons, and what outlives a task (a permanent rule) is the owner's alone.
//!
//! Why a crate of its own: the daemon's composition root (`nexbot-host`) only wires it. It
//! answers to the proxy (`nexbot-egress`'s [`Approver`]) and to the tools (`nexbot-agent`'s
//! [`Confirm`]), keeps its questions and rules in `nexbot-store`, and reaches a chat only
//! through [`Channel`] (`nexbot-core`): no channel crate, no Docker, no HTTP server and
//! nothing of the host among its dependencies, so who may press what is decided in one place
//! that can be read and tested alone. The host's commands (`/egress`, `/approve`,
//! `/questions`) are thin: they hand a press to [`Approvals::answer_in_chat`] or
//! [`Approvals::digest`].
//!
//! A question is a pending entry with an id (the row of `egress_questions`, unique across
//! restarts) and a deadline (`egress.approval_timeout_secs`), asked in the chat it belongs to
//! with buttons (commands like any other button, so a press is checked like typing). It can
//! be answered from any channel (a press, a typed command) or from `nexbot-ctl approvals`;
//! whoever answers first wins, and the chat's message is edited to say what was decided and
//! by whom. Its [`Kind`] says what it is about:
//!
//! - `egress`: the proxy (`nexbot-egress`) holds a connection to a destination no rule
//!   covers and asks its [`Approver`] — this. Four buttons (`/egress <id>
//!   once|task|chat|deny`).
//! - `secret`: a task's request would carry a proxy-mode secret stored with `--confirm`; the
//!   proxy holds it and asks (the request names the secret, never its value). Allow for this
//!   task / Deny (`/approve <id> task|deny`).
//! - `send_file`, `delete`: a main-agent tool is about to take a step `agent.confirm` lists
//!   ([`StepConfirm`]). Allow / Deny (`/approve <id> allow|deny`).
//! - `schedule`: the model wants to store a recurring job in the chat (`schedule_task`);
//!   always asked. Allow / Deny.
//!
//! Why here and not in the proxy or a tool: they know no chat, no user and no store; why not
//! in a channel: the same question is answered from several places. What is remembered:
//! "Allow for this task" is a grant kept while the task runs (a destination, or a secret);
//! "Always for this chat" (egress only) is a row of `egress_rules` (per chat, host and port),
//! which survives restarts. Several held requests of one task about one thing wait on one
//! question; a task may ask about at most `egress.max_questions_per_task` destinations.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use nexbot_agent::confirm::{Confirm, ConfirmKind, Refused, Step};
use nexbot_control::PendingApproval;
use nexbot_core::channel::Channel;
use nexbot_core::{BoxFuture, ChatRef};
use nexbot_egress::{
    ApprovalFuture, ApprovalRequest, Approver, EgressConfig, EgressMode, Unattended,
};
use nexbot_store::Store;
use tokio::sync::watch;

mod answer;
mod ask;
mod digest;
mod held;
mod message;
mod owner;

/// The command word of the egress questions' buttons.
pub const COMMAND: &str = "egress";
/// The command word of the other questions' buttons (either word answers any question).
pub const CONFIRM_COMMAND: &str = "approve";

/// An answer to a question.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Choice {
    /// The requests held now go (a confirmation: this step goes); the next asks again.
    Once,
    /// Everything the task sends there (or every use of the secret) goes, until it ends.
    Task,
    /// An "always" rule for the chat: every task of the chat, across restarts (egress only).
    Chat,
    /// The task's reading allowance (egress only): this request, and every later one of the
    /// task that only reads ([`ApprovalRequest::reads_only`]), go without a question.
    Read,
    Deny,
}

impl Choice {
    pub fn parse(word: &str) -> Option<Self> {
        match word.trim().to_ascii_lowercase().as_str() {
            "once" | "o" | "allow" | "yes" => Some(Self::Once),
            "task" | "t" => Some(Self::Task),
            "chat" | "always" | "a" => Some(Self::Chat),
            "read" | "r" => Some(Self::Read),
            "deny" | "d" | "no" => Some(Self::Deny),
            _ => None,
        }
    }

    /// The word stored and shown (`egress_questions.answer`, the metrics' label).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Once => "once",
            Self::Task => "task",
            Self::Chat => "chat",
            Self::Read => "read",
            Self::Deny => "deny",
        }
    }

    fn decided(self, kind: Kind) -> &'static str {
        match (self, kind) {
            (Self::Once, Kind::Egress) => "Allowed once",
            (Self::Once, _) => "Allowed",
            (Self::Task, _) => "Allowed for this task",
            (Self::Chat, _) => "Always allowed for this chat",
            (Self::Read, _) => "Reading the web allowed for this task",
            (Self::Deny, _) => "Denied",
        }
    }
}

/// What a question is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// A destination no egress rule covers.
    Egress,
    /// A `--confirm` secret's use by a task.
    Secret,
    /// A step `agent.confirm` lists.
    Step(ConfirmKind),
}

impl Kind {
    /// As stored (`egress_questions.kind`) and listed (`nexbot-ctl approvals ls`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Egress => "egress",
            Self::Secret => "secret",
            Self::Step(step) => step.as_str(),
        }
    }

    /// Whether `choice` answers a question of this kind.
    fn takes(self, choice: Choice) -> bool {
        match self {
            Self::Egress => true,
            Self::Secret => matches!(choice, Choice::Once | Choice::Task | Choice::Deny),
            Self::Step(_) => matches!(choice, Choice::Once | Choice::Deny),
        }
    }

    /// The answers it takes, in words (an error lists them).
    fn answers(self) -> &'static str {
        match self {
            Self::Egress => "once, task, chat, read or deny",
            Self::Secret => "task (or once) or deny",
            Self::Step(_) => "allow or deny",
        }
    }
}

/// A question's subject as it is asked.
#[derive(Debug, Clone)]
enum Question {
    /// A held request of a task: about its destination, or (`secret_name`) a secret.
    Request(ApprovalRequest),
    /// A tool's step in a chat's turn.
    Step(Step),
}

impl Question {
    fn kind(&self) -> Kind {
        match self {
            Self::Request(r) if r.secret_name.is_some() => Kind::Secret,
            Self::Request(_) => Kind::Egress,
            Self::Step(step) => Kind::Step(step.kind()),
        }
    }

    /// What joins waiting askers into one question (besides the task and kind). Not
    /// [`step_subject`], the text listed and stored: a send's size is left out here, so two
    /// sends of one file that grew between them stay one question. An egress request's
    /// method and path are part of it: one answer of "once" releases only requests the
    /// question showed (a `GET /innocent` shown must not let a `POST /exfil` through).
    fn subject(&self) -> String {
        match self {
            Self::Request(r) => match &r.secret_name {
                Some(name) => name.clone(),
                None => {
                    let path = r.path.as_deref().unwrap_or("");
                    format!("{}:{} {} {path}", r.host, r.port, r.method)
                }
            },
            Self::Step(Step::SendFile { path, .. } | Step::Delete { path }) => path.clone(),
            Self::Step(Step::Schedule { job }) => job.clone(),
        }
    }

    /// The task it belongs to (`""`: a chat's turn).
    fn task_id(&self) -> &str {
        match self {
            Self::Request(r) => &r.task_id,
            Self::Step(_) => "",
        }
    }
}

/// One question: its task (or the chat's turn), its kind and subject.
type Key = (String, Kind, String);

/// How a question ended.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Outcome {
    Answered {
        choice: Choice,
        by: String,
    },
    /// No answer within the deadline.
    NoAnswer,
    /// The daemon stopped, or the task ended, first.
    Expired(String),
}

/// A question waiting for its answer.
#[derive(Debug)]
struct Pending {
    id: i64,
    chat: ChatRef,
    question: Question,
    asked: Instant,
    /// When it is refused for want of an answer (set when it is created, before the message
    /// goes out, so a slow channel does not lengthen it).
    deadline: tokio::time::Instant,
    outcome: watch::Sender<Option<Outcome>>,
}

/// The id of a question reserved but not yet recorded (ids are SQLite rowids, from 1): no
/// answer reaches it, no list shows it.
const RESERVED: i64 = 0;

/// A running task as the approvals know it.
#[derive(Debug)]
struct TaskEntry {
    chat: ChatRef,
    /// The first words of the task, for the question.
    words: String,
    /// A scheduled job's or a heartbeat check's: nobody to ask.
    unattended: bool,
    /// Who wrote the message whose turn started the task (a Telegram user): in a group, the
    /// member who may answer its questions besides the owner.
    user: Option<i64>,
    /// "Allow for this task" destinations.
    granted: HashSet<(String, u16)>,
    /// "Allow for this task" `--confirm` secrets, by name.
    secrets: HashSet<String>,
    /// `--confirm` secrets the user denied to this task: its later requests are refused
    /// without asking again (a model retrying must not flood the chat with questions).
    denied_secrets: HashSet<String>,
    /// Destinations asked about (the cap counts them).
    asked: HashSet<(String, u16)>,
    /// "Allow reading the web for this task": its requests that only read go unasked.
    reading: bool,
    /// The destinations its reading allowance let through unasked, for the receipt.
    read: BTreeSet<(String, u16)>,
    /// Whether the chat was told that the cap was reached.
    capped: bool,
}

#[derive(Debug, Default)]
struct State {
    tasks: HashMap<String, TaskEntry>,
    /// Requests held for an answer now, by chat (see [`Approvals::hold`]).
    held: HashMap<ChatRef, usize>,
    /// One question however many requests wait on it.
    pending: HashMap<Key, Pending>,
    stopping: bool,
}

impl State {
    /// The waiting question numbered `id`; never one still being recorded ([`RESERVED`]),
    /// which no one can have been told the number of.
    fn pending_by_id(&self, id: i64) -> Option<&Pending> {
        self.pending.values().find(|p| p.id == id && id != RESERVED)
    }
}

/// Questions counted by how they ended, and the time answers took (for `/metrics`). The
/// named counters (and the answer times) are the egress questions'; the other kinds are
/// counted in `confirmations`.
#[derive(Debug, Default)]
pub struct ApprovalMetrics {
    pub once: AtomicU64,
    pub task: AtomicU64,
    pub chat: AtomicU64,
    pub read: AtomicU64,
    pub deny: AtomicU64,
    pub no_answer: AtomicU64,
    pub expired: AtomicU64,
    /// Sum of the answered questions' answer times, in milliseconds, and how many.
    pub answer_ms_sum: AtomicU64,
    pub answered: AtomicU64,
    /// The other kinds' questions by (kind, how it ended).
    confirmations: Mutex<BTreeMap<(&'static str, &'static str), u64>>,
}

impl ApprovalMetrics {
    /// The `secret`, `send_file` and `delete` questions by (kind, how they ended).
    pub fn confirmations(&self) -> Vec<((&'static str, &'static str), u64)> {
        let counts = self.confirmations.lock().unwrap_or_else(|p| p.into_inner());
        counts.iter().map(|(k, n)| (*k, *n)).collect()
    }

    fn count(&self, kind: Kind, ended: &'static str, answer_ms: Option<u64>) {
        if kind != Kind::Egress {
            let mut counts = self.confirmations.lock().unwrap_or_else(|p| p.into_inner());
            *counts.entry((kind.as_str(), ended)).or_default() += 1;
            return;
        }
        if let Some(ms) = answer_ms {
            self.answered.fetch_add(1, Ordering::Relaxed);
            self.answer_ms_sum.fetch_add(ms, Ordering::Relaxed);
        }
        let counter = match ended {
            "once" => &self.once,
            "task" => &self.task,
            "chat" => &self.chat,
            "read" => &self.read,
            "deny" => &self.deny,
            "no_answer" => &self.no_answer,
            _ => &self.expired,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// Why an answer was not taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AnswerError {
    #[error(
        "no question {0} is waiting (it was answered, its time ran out, or its task ended); \
         `nexbot-ctl approvals ls` lists the waiting ones"
    )]
    NotWaiting(i64),
    /// The chat is not named: a refusal must not tell one chat about another.
    #[error(
        "question {id} is not this chat's; it is answered in its own chat, or by the owner \
         with `nexbot-ctl approvals`"
    )]
    OtherChat { id: i64 },
    #[error("question {id} is a {kind} question; it takes {answers}")]
    WrongAnswer { id: i64, kind: &'static str, answers: &'static str },
    #[error(
        "question {id} is about a request that does more than read (a tunnel, a body, a \
         method other than GET or HEAD, a secret, an address or a long URL): answer once, task, \
         chat or deny"
    )]
    NotARead { id: i64 },
}

/// The approvals of the daemon. Cheap to share (`Arc`).
pub struct Approvals {
    mode: EgressMode,
    /// The owner's Telegram user id: in a group, the owner (and the member who started the
    /// task) answers a question (a private chat's only presser is its user; the console has
    /// one).
    owner: Option<i64>,
    wait: Duration,
    max_per_task: usize,
    /// Held requests at once: per chat (`egress.max_held_per_chat`) and in all
    /// (`EgressConfig::held_capacity`), see [`Approvals::hold`].
    max_held: (usize, usize),
    unattended: Unattended,
    store: Store,
    /// Where questions are asked: the router, set once it exists (it is built after the
    /// sandbox whose proxy asks).
    channel: OnceLock<Arc<dyn Channel>>,
    /// The chained audit each answer is written to (the sandbox's egress), set once.
    trail: OnceLock<Arc<dyn nexbot_core::audit::AuditTrail>>,
    state: Mutex<State>,
    metrics: ApprovalMetrics,
}

impl std::fmt::Debug for Approvals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Approvals").field("mode", &self.mode).finish_non_exhaustive()
    }
}

impl Approvals {
    pub fn new(config: &EgressConfig, store: Store) -> Arc<Self> {
        Self::with_owner(config, store, None)
    }

    /// [`Approvals::new`] knowing the owner's Telegram user id (`telegram.owner`).
    pub fn with_owner(config: &EgressConfig, store: Store, owner: Option<i64>) -> Arc<Self> {
        Arc::new(Self {
            mode: config.effective_mode(),
            owner,
            wait: config.approval_timeout(),
            max_per_task: config.max_questions_per_task,
            max_held: (config.max_held_per_chat, config.held_capacity()),
            unattended: config.unattended,
            store,
            channel: OnceLock::new(),
            trail: OnceLock::new(),
            state: Mutex::default(),
            metrics: ApprovalMetrics::default(),
        })
    }

    /// Sets where questions are asked (the router); later calls change nothing.
    pub fn set_channel(&self, channel: Arc<dyn Channel>) {
        let _ = self.channel.set(channel);
    }

    /// Writes every answer to `trail` (the chained audit) from now on.
    pub fn set_trail(&self, trail: Arc<dyn nexbot_core::audit::AuditTrail>) {
        let _ = self.trail.set(trail);
    }

    pub fn mode(&self) -> EgressMode {
        self.mode
    }

    pub fn metrics(&self) -> &ApprovalMetrics {
        &self.metrics
    }

    /// Questions still waiting from an earlier run (the daemon stopped without saying so)
    /// are expired: their connections are long gone.
    pub async fn expire_leftovers(&self) {
        match self.store.expire_egress_questions().await {
            Ok(0) => {}
            Ok(n) => tracing::info!(n, "questions of an earlier run marked expired"),
            Err(e) => tracing::warn!(error = %e, "cannot expire earlier questions"),
        }
    }

    /// A delegated task starts in `chat` (`unattended`: a job's or a heartbeat check's).
    pub fn start_task(&self, task_id: &str, chat: &ChatRef, task: &str, unattended: bool) {
        let words: String = task.split_whitespace().take(12).collect::<Vec<_>>().join(" ");
        let entry = TaskEntry {
            chat: chat.clone(),
            words,
            unattended,
            user: None,
            granted: HashSet::new(),
            secrets: HashSet::new(),
            denied_secrets: HashSet::new(),
            asked: HashSet::new(),
            reading: false,
            read: BTreeSet::new(),
            capped: false,
        };
        self.lock().tasks.insert(task_id.to_owned(), entry);
    }

    /// Grants a running task `destinations` as if "Allow for this task" had been pressed for
    /// each (the skills its turn read declare them, `skill_grants`). Consulted only in `ask`
    /// mode and only after the proxy's deny list and name rules, like any grant. A task of
    /// an unattended run (a job, a heartbeat check) gets them only under
    /// `egress.unattended = "allowlist"`: with nobody there, reading a skill is nobody's yes.
    /// Returns whether they were granted.
    pub fn grant_for_task(
        &self,
        task_id: &str,
        destinations: &[nexbot_skill::Destination],
    ) -> bool {
        let unattended_may = self.unattended == Unattended::Allowlist;
        match self.lock().tasks.get_mut(task_id) {
            Some(task) if !task.unattended || unattended_may => {
                task.granted.extend(destinations.iter().map(|d| (d.host.clone(), d.port)));
                true
            }
            _ => false,
        }
    }

    /// The task `task_id` was started by `user`'s message (see [`Approvals::may_answer`]).
    pub fn started_by(&self, task_id: &str, user: Option<i64>) {
        if let Some(task) = self.lock().tasks.get_mut(task_id) {
            task.user = user;
        }
    }

    /// Whether `user` may answer question `id` in a group: the owner, or the member whose
    /// message started the question's task. (A step of a turn — a file to send or delete —
    /// is the owner's to answer there. In a private chat the chat is its user; the channel's
    /// allow-list decides who writes there.)
    pub fn may_answer(&self, id: i64, user: Option<i64>) -> bool {
        let Some(user) = user else { return false };
        if self.owner == Some(user) {
            return true;
        }
        let state = self.lock();
        let pending = state.pending_by_id(id);
        let task = pending.map(|p| p.question.task_id()).filter(|t| !t.is_empty());
        task.and_then(|t| state.tasks.get(t)).is_some_and(|t| t.user == Some(user))
    }

    /// The task ended: its grants go, its waiting questions expire.
    pub fn end_task(&self, task_id: &str) {
        let mut state = self.lock();
        state.tasks.remove(task_id);
        for pending in state.pending.values().filter(|p| p.question.task_id() == task_id) {
            pending.outcome.send_if_modified(|o| settle(o, Outcome::Expired("task ended".into())));
        }
    }

    /// The daemon stops: every waiting question expires and its held connections are
    /// refused now, not when their time runs out.
    pub async fn shutdown(&self) {
        let waiting: Vec<watch::Sender<Option<Outcome>>> = {
            let mut state = self.lock();
            state.stopping = true;
            state.pending.values().map(|p| p.outcome.clone()).collect()
        };
        for outcome in &waiting {
            outcome.send_if_modified(|o| settle(o, Outcome::Expired("the daemon stopped".into())));
        }
        if !waiting.is_empty() {
            tracing::info!(
                n = waiting.len(),
                "waiting egress questions expired at stop (confirmations too)"
            );
        }
        // The askers record it; this catches what they did not reach.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let _ = self.store.expire_egress_questions().await;
    }

    /// The questions waiting now, oldest first, as `nexbot-ctl approvals ls` shows them.
    pub fn pending(&self) -> Vec<PendingApproval> {
        let state = self.lock();
        let mut views: Vec<PendingApproval> = state
            .pending
            .values()
            .filter(|p| p.id != RESERVED)
            .map(|p| {
                let kind = p.question.kind().as_str().to_owned();
                let waiting_secs = p.asked.elapsed().as_secs();
                let (id, chat) = (p.id, p.chat.to_string());
                match &p.question {
                    Question::Request(r) => PendingApproval {
                        id,
                        task_id: r.task_id.clone(),
                        chat,
                        host: r.host.clone(),
                        port: r.port,
                        method: r.method.clone(),
                        path: r.path.clone(),
                        secret: r.secret,
                        waiting_secs,
                        kind,
                        subject: r.secret_name.clone(),
                    },
                    Question::Step(step) => PendingApproval {
                        id,
                        task_id: String::new(),
                        chat,
                        host: String::new(),
                        port: 0,
                        method: String::new(),
                        path: None,
                        secret: false,
                        waiting_secs,
                        kind,
                        subject: Some(step_subject(step)),
                    },
                }
            })
            .collect();
        views.sort_by_key(|v| v.id);
        views
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A step's subject as listed and stored: the file and, for a send, its size.
fn step_subject(step: &Step) -> String {
    match step {
        Step::SendFile { path, bytes } => format!("{path} ({bytes} bytes)"),
        Step::Delete { path } => path.clone(),
        Step::Schedule { job } => job.clone(),
    }
}

/// Sets the outcome unless one is set: the first answer wins.
fn settle(slot: &mut Option<Outcome>, outcome: Outcome) -> bool {
    if slot.is_some() {
        return false;
    }
    *slot = Some(outcome);
    true
}

/// The proxy's [`Approver`]: the approvals of a running daemon.
#[derive(Debug, Clone)]
pub struct EgressApprover(pub Arc<Approvals>);

impl Approver for EgressApprover {
    fn approve(&self, request: ApprovalRequest) -> ApprovalFuture {
        Box::pin(self.0.clone().decide(request))
    }
}

/// The tools' [`Confirm`]: asks about the steps `agent.confirm` lists, and only those (a
/// `send_file` only of a file larger than `agent.confirm_send_file_bytes`), and always about
/// a recurring job.
#[derive(Debug)]
pub struct StepConfirm {
    approvals: Arc<Approvals>,
    steps: Vec<ConfirmKind>,
    send_file_bytes: u64,
}

impl StepConfirm {
    pub fn new(approvals: Arc<Approvals>, config: &nexbot_agent::config::AgentConfig) -> Self {
        Self {
            approvals,
            steps: config.confirm.clone(),
            send_file_bytes: config.confirm_send_file_bytes,
        }
    }

    /// Whether `step` is to be asked about (a recurring job always is).
    fn asks(&self, step: &Step) -> bool {
        match step {
            Step::Schedule { .. } => true,
            Step::SendFile { bytes, .. } => {
                self.steps.contains(&step.kind()) && *bytes > self.send_file_bytes
            }
            Step::Delete { .. } => self.steps.contains(&step.kind()),
        }
    }
}

impl Confirm for StepConfirm {
    fn confirm<'a>(&'a self, chat: &'a ChatRef, step: Step) -> BoxFuture<'a, Result<(), Refused>> {
        Box::pin(async move {
            if !self.asks(&step) {
                return Ok(());
            }
            self.approvals.clone().confirm_step(chat, step).await
        })
    }
}

/// What the daemon says once, at start and in `/status`, about the egress mode.
pub fn mode_line(config: &EgressConfig) -> String {
    match config.mode {
        None => "open (this config names no egress.mode, so any public host is allowed, as \
                 before; set `mode = \"ask\"` under [egress] to be asked in the chat before a \
                 task reaches a host no rule allows)"
            .to_owned(),
        Some(EgressMode::Ask) => format!(
            "ask (a task's new destination is held and asked about in its chat; {} allow \
             rules; answers wait {} s)",
            config.allow.len(),
            config.approval_timeout_secs
        ),
        Some(EgressMode::Allowlist) => {
            format!(
                "allowlist (only the {} egress.allow rules; nothing is asked)",
                config.allow.len()
            )
        }
        Some(EgressMode::Open) => "open (any host proxy.allow_domains matches)".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::sync::mpsc;

    use nexbot_core::channel::{ChannelError, MessageId, OutboundMessage};
    use nexbot_egress::Approval;

    /// A chat that records what is sent (every message id 1). It also owns the test's folder
    /// and removes it when the approvals (which hold it) are dropped: every test left its
    /// database folder in /tmp before.
    #[derive(Debug)]
    struct Recorder(mpsc::UnboundedSender<OutboundMessage>, std::path::PathBuf);

    impl Drop for Recorder {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.1);
        }
    }

    impl Channel for Recorder {
        fn send(
            &self,
            message: OutboundMessage,
        ) -> BoxFuture<'_, Result<Option<MessageId>, ChannelError>> {
            let _ = self.0.send(message);
            Box::pin(async { Ok(Some(MessageId(1))) })
        }
    }

    async fn setup(
        edit: impl FnOnce(&mut EgressConfig),
    ) -> (Arc<Approvals>, mpsc::UnboundedReceiver<OutboundMessage>) {
        setup_owned(None, edit).await
    }

    /// [`setup`] with `owner` as `telegram.owner`.
    async fn setup_owned(
        owner: Option<i64>,
        edit: impl FnOnce(&mut EgressConfig),
    ) -> (Arc<Approvals>, mpsc::UnboundedReceiver<OutboundMessage>) {
        let dir = std::env::temp_dir().join(format!("nxh-approvals-{}", uuid::Uuid::new_v4()));
        let store = Store::open(&dir.join("t.db")).await.unwrap();
        let mut config = EgressConfig { mode: Some(EgressMode::Ask), ..EgressConfig::default() };
        edit(&mut config);
        let approvals = Approvals::with_owner(&config, store, owner);
        let (tx, rx) = mpsc::unbounded_channel();
        approvals.set_channel(Arc::new(Recorder(tx, dir)));
        (approvals, rx)
    }

    fn request(task: &str, host: &str) -> ApprovalRequest {
        ApprovalRequest {
            task_id: task.into(),
            host: host.into(),
            port: 443,
            method: "GET".into(),
            path: Some("/".into()),
            secret: false,
            secret_name: None,
            body: false,
            url_len: 30,
        }
    }

    fn ask(approvals: &Arc<Approvals>, task: &str, host: &str) -> ApprovalFuture {
        EgressApprover(approvals.clone()).approve(request(task, host))
    }

    /// Anything that outlives the task is the owner's: another user's private chat is not
    /// offered "always" and a typed `chat` is refused there; in a group the member who
    /// started the task may allow once or for the task, only the owner always, and only the
    /// owner confirms a `--confirm` secret; the owner's own chat and the console may.
    #[tokio::test]
    async fn only_the_owner_makes_a_rule_that_outlives_the_task() {
        const OWNER: i64 = 1;
        const MEMBER: i64 = 5;
        let (approvals, mut sent) = setup_owned(Some(OWNER), |_| {}).await;
        let labels = |m: &OutboundMessage| -> Vec<String> {
            m.buttons.concat().iter().map(|b| b.label.clone()).collect()
        };
        let private = ChatRef::Telegram(MEMBER);
        approvals.start_task("p", &private, "fetch", false);
        let _held = tokio::spawn(ask(&approvals, "p", "private.example"));
        let question = sent.recv().await.unwrap();
        assert!(!labels(&question).iter().any(|l| l.contains("Always")), "{question:?}");
        assert!(question.text.contains("once|task|read|deny"), "{}", question.text);
        let id = wait_pending(&approvals, 1).await;
        let refused = approvals.may_choose(id, Choice::Chat, &private, Some(MEMBER));
        assert!(refused.unwrap_err().contains("Only the owner"));
        assert!(approvals.may_choose(id, Choice::Task, &private, Some(MEMBER)).is_ok());

        let group = ChatRef::Telegram(-100);
        approvals.start_task("g", &group, "fetch", false);
        approvals.started_by("g", Some(MEMBER));
        let _held = tokio::spawn(ask(&approvals, "g", "group.example"));
        let question = sent.recv().await.unwrap();
        assert!(labels(&question).iter().any(|l| l.contains("Always")), "the owner may press it");
        let id = wait_pending(&approvals, 2).await;
        assert!(approvals.may_answer(id, Some(MEMBER)), "the starter answers");
        assert!(approvals.may_choose(id, Choice::Chat, &group, Some(MEMBER)).is_err());
        assert!(approvals.may_choose(id, Choice::Once, &group, Some(MEMBER)).is_ok());
        assert!(approvals.may_choose(id, Choice::Chat, &group, Some(OWNER)).is_ok());
        let mut secret = request("g", "api.example.com");
        secret.secret_name = Some("GROUP_TOKEN".into());
        let _held = tokio::spawn(EgressApprover(approvals.clone()).approve(secret));
        let _ = sent.recv().await.unwrap();
        let id = wait_pending(&approvals, 3).await;
        let refused = approvals.may_choose(id, Choice::Task, &group, Some(MEMBER)).unwrap_err();
        assert!(refused.contains("only the owner confirms"), "{refused}");
        assert!(approvals.may_choose(id, Choice::Task, &group, Some(OWNER)).is_ok());

        let console = ChatRef::console("main").unwrap();
        assert!(approvals.may_choose(id, Choice::Chat, &console, None).is_ok());
        approvals.shutdown().await;
    }

    /// Every answer is a line of the chained audit — and so is each other question the same
    /// press settles (here: the destination allowed for the task answers its other path).
    #[tokio::test]
    async fn each_question_a_press_settles_is_a_line_of_the_audit() {
        use nexbot_core::audit::{AuditEvent, AuditTrail};
        #[derive(Debug, Default)]
        struct Kept(std::sync::Mutex<Vec<AuditEvent>>);
        impl AuditTrail for Kept {
            fn record(&self, event: AuditEvent) {
                self.0.lock().unwrap().push(event);
            }
        }
        let (approvals, _sent) = setup(|_| {}).await;
        let kept = Arc::new(Kept::default());
        approvals.set_trail(kept.clone());
        let chat = ChatRef::Telegram(21);
        approvals.start_task("t", &chat, "fetch", false);
        let first = tokio::spawn(ask(&approvals, "t", "api.example.com"));
        let mut other = request("t", "api.example.com");
        other.path = Some("/other".into());
        let second = tokio::spawn(EgressApprover(approvals.clone()).approve(other));
        wait_pending(&approvals, 2).await;
        let pressed = approvals.pending().into_iter().map(|p| p.id).min().unwrap();
        approvals.answer(pressed, Choice::Task, "telegram:21", Some(&chat)).unwrap();
        assert!(matches!(first.await.unwrap(), Approval::Allow));
        assert!(matches!(second.await.unwrap(), Approval::Allow));
        let events = kept.0.lock().unwrap().clone();
        assert_eq!(events.len(), 2, "{events:?}");
        assert!(events.iter().all(|e| e.event == "approval" && e.actor == "telegram:21"));
        assert!(events[0].subject.starts_with(&format!("question {pressed} ")), "{events:?}");
        assert_eq!(events[1].outcome, format!("task (by {pressed})"), "{events:?}");
        assert!(events.iter().any(|e| e.subject.contains("/other")), "{events:?}");
        approvals.shutdown().await;
    }

    /// A chat holds at most `max_held_per_chat` requests at once and all chats together at
    /// most `max_held`; beyond, a request is refused at once, and a place comes back when a
    /// held request stops waiting.
    #[tokio::test]
    async fn held_requests_have_a_share_per_chat_and_in_all() {
        let (approvals, _sent) = setup(|c| {
            c.max_held_per_chat = 2;
            c.max_held = 3;
        })
        .await;
        approvals.start_task("a", &ChatRef::Telegram(11), "flood", false);
        approvals.start_task("b", &ChatRef::Telegram(12), "work", false);
        let a1 = tokio::spawn(ask(&approvals, "a", "one.example"));
        let _a2 = tokio::spawn(ask(&approvals, "a", "two.example"));
        wait_pending(&approvals, 2).await;
        let refused = ask(&approvals, "a", "three.example").await;
        let Approval::Refuse(why) = refused else { panic!("held beyond the chat's share") };
        assert!(why.contains("too_many_held") && why.contains("max_held_per_chat = 2"), "{why}");
        // Another chat still has its share, up to the total.
        let _b1 = tokio::spawn(ask(&approvals, "b", "one.example"));
        wait_pending(&approvals, 3).await;
        let Approval::Refuse(why) = ask(&approvals, "b", "two.example").await else {
            panic!("held beyond the total")
        };
        assert!(why.contains("egress.max_held = 3"), "{why}");
        // An answer frees a place.
        let first = approvals
            .pending()
            .into_iter()
            .find(|p| p.host == "one.example" && p.chat == "telegram:11");
        approvals.answer(first.unwrap().id, Choice::Deny, "telegram:11", None).unwrap();
        assert!(matches!(a1.await.unwrap(), Approval::Refuse(_)));
        let _b2 = tokio::spawn(ask(&approvals, "b", "two.example"));
        wait_pending(&approvals, 3).await;
        approvals.shutdown().await;
    }

    /// What a skill declares is granted only to tasks of a turn a person started: a job's
    /// (or heartbeat's) task that read the skill gets nothing from it, unless
    /// `egress.unattended = "allowlist"`.
    #[tokio::test]
    async fn a_skills_destinations_are_not_granted_to_an_unattended_task() {
        let declared = [nexbot_skill::Destination { host: "api.example.com".into(), port: 443 }];
        let (approvals, _sent) = setup(|_| {}).await;
        approvals.start_task("job", &ChatRef::Telegram(7), "the job", true);
        assert!(!approvals.grant_for_task("job", &declared));
        let Approval::Refuse(why) = ask(&approvals, "job", "api.example.com").await else {
            panic!("an unattended task reached a skill's host")
        };
        assert!(why.contains("nobody to ask"), "{why}");
        approvals.start_task("turn", &ChatRef::Telegram(7), "a person's", false);
        assert!(approvals.grant_for_task("turn", &declared));
        assert_eq!(ask(&approvals, "turn", "api.example.com").await, Approval::Allow);

        let (approvals, _sent) = setup(|c| c.unattended = Unattended::Allowlist).await;
        approvals.start_task("job", &ChatRef::Telegram(7), "the job", true);
        assert!(approvals.grant_for_task("job", &declared));
        assert_eq!(ask(&approvals, "job", "api.example.com").await, Approval::Allow);
    }

    /// One question per request shown: a `POST /exfil` held beside a `GET /innocent` to the
    /// same destination is its own question, so "once" for the GET does not let the POST go;
    /// "for this task" for one releases the task's others to that destination too.
    #[tokio::test]
    async fn allow_once_releases_only_the_request_the_question_shows() {
        let (approvals, _sent) = setup(|_| {}).await;
        approvals.start_task("t", &ChatRef::Telegram(7), "fetch", false);
        let held = |method: &str, path: &str| {
            let mut r = request("t", "api.example.com");
            (r.method, r.path) = (method.into(), Some(path.into()));
            tokio::spawn(EgressApprover(approvals.clone()).approve(r))
        };
        let innocent = held("GET", "/innocent");
        let exfil = held("POST", "/exfil");
        wait_pending(&approvals, 2).await;
        let pending = approvals.pending();
        let shown =
            |path: &str| pending.iter().find(|p| p.path.as_deref() == Some(path)).unwrap().id;
        approvals.answer(shown("/innocent"), Choice::Once, "telegram:7", None).unwrap();
        assert_eq!(innocent.await.unwrap(), Approval::Allow);
        tokio::task::yield_now().await;
        assert!(!exfil.is_finished(), "the POST went with the GET's answer");
        assert_eq!(approvals.pending().len(), 1);
        // "For this task" on one question lets every request of the task there go.
        let get_again = held("GET", "/other");
        wait_pending(&approvals, 2).await;
        let pending = approvals.pending();
        let other = pending.iter().find(|p| p.path.as_deref() == Some("/other")).unwrap().id;
        approvals.answer(other, Choice::Task, "telegram:7", None).unwrap();
        assert_eq!(get_again.await.unwrap(), Approval::Allow);
        assert_eq!(exfil.await.unwrap(), Approval::Allow);
        assert!(approvals.pending().is_empty());
    }

    /// The id of the newest waiting question, once `n` are waiting.
    async fn wait_pending(approvals: &Approvals, n: usize) -> i64 {
        loop {
            let pending = approvals.pending();
            if pending.len() >= n && pending.iter().all(|p| p.id != RESERVED) {
                return pending.iter().map(|p| p.id).max().unwrap();
            }
            tokio::task::yield_now().await;
        }
    }

    /// "Allow reading the web for this task": the held read goes, the task's later reads to
    /// any host name go unasked (and are in its receipt), a POST is still asked (and cannot
    /// be answered "read"), another task is asked as before.
    #[tokio::test]
    async fn a_reading_allowance_lets_the_tasks_later_reads_go_and_asks_the_rest() {
        let (approvals, mut sent) = setup(|_| {}).await;
        let chat = ChatRef::Telegram(7);
        let offers_reading =
            |m: &OutboundMessage| m.buttons.concat().iter().any(|b| b.label.contains("reading"));
        approvals.start_task("t1", &chat, "research", false);
        let first = tokio::spawn(ask(&approvals, "t1", "one.example"));
        assert!(offers_reading(&sent.recv().await.unwrap()));
        let id = wait_pending(&approvals, 1).await;
        approvals.answer(id, Choice::Read, "telegram:7", Some(&chat)).unwrap();
        assert_eq!(first.await.unwrap(), Approval::Allow);
        assert_eq!(ask(&approvals, "t1", "two.example").await, Approval::Allow, "unasked");
        assert_eq!(ask(&approvals, "t1", "three.example").await, Approval::Allow, "unasked");

        let post =
            ApprovalRequest { method: "POST".into(), body: true, ..request("t1", "two.example") };
        let held = tokio::spawn(EgressApprover(approvals.clone()).approve(post));
        assert!(!offers_reading(&sent.recv().await.unwrap()), "a POST is not offered it");
        let id = wait_pending(&approvals, 1).await;
        let wrong = approvals.answer(id, Choice::Read, "telegram:7", Some(&chat)).unwrap_err();
        assert!(matches!(wrong, AnswerError::NotARead { .. }), "{wrong}");
        approvals.answer(id, Choice::Deny, "telegram:7", Some(&chat)).unwrap();
        assert!(matches!(held.await.unwrap(), Approval::Refuse(_)));

        approvals.start_task("t2", &chat, "another", false);
        let other = tokio::spawn(ask(&approvals, "t2", "two.example"));
        loop {
            let next = sent.recv().await.unwrap();
            if next.text.contains("A task wants to reach two.example") {
                break;
            }
        }
        let lines = approvals.asked_lines("t1").await;
        assert_eq!(
            lines.last().map(String::as_str),
            Some("read unasked (2): three.example:443 two.example:443"),
            "{lines:?}"
        );
        assert!(lines[0].contains("one.example:443 → read by telegram:7"), "{lines:?}");
        approvals.shutdown().await;
        assert!(matches!(other.await.unwrap(), Approval::Refuse(_)));
    }

    #[tokio::test]
    async fn requests_of_one_task_to_one_destination_wait_on_one_question() {
        let (approvals, mut sent) = setup(|_| {}).await;
        let chat = ChatRef::Telegram(7);
        approvals.start_task("t1", &chat, "fetch the forecast for Lisbon", false);
        let first = tokio::spawn(ask(&approvals, "t1", "api.example.com"));
        let second = tokio::spawn(ask(&approvals, "t1", "api.example.com"));
        let question = sent.recv().await.unwrap();
        assert!(question.text.contains("api.example.com:443"), "{}", question.text);
        // Not the owner's chat (no owner here): "always" is not offered; a GET may read on.
        assert_eq!(question.buttons.concat().len(), 4);
        // Wait until both wait, then answer once.
        while approvals.pending().is_empty() {
            tokio::task::yield_now().await;
        }
        let id = approvals.pending()[0].id;
        let other = ChatRef::Telegram(8);
        let err = approvals.answer(id, Choice::Task, "telegram:8", Some(&other)).unwrap_err();
        assert!(matches!(err, AnswerError::OtherChat { .. }), "{err}");
        assert!(!err.to_string().contains("telegram:7"), "names the other chat: {err}");
        approvals.answer(id, Choice::Task, "telegram:7", Some(&chat)).unwrap();
        assert_eq!(first.await.unwrap(), Approval::Allow);
        assert_eq!(second.await.unwrap(), Approval::Allow);
        // Granted for the task: the next request is not asked about.
        assert_eq!(ask(&approvals, "t1", "api.example.com").await, Approval::Allow);
        assert!(sent.try_recv().is_err(), "one question");
        // Its end takes the grant away.
        approvals.end_task("t1");
        let gone = ask(&approvals, "t1", "api.example.com").await;
        assert!(matches!(gone, Approval::Refuse(_)), "{gone:?}");
    }

    #[tokio::test]
    async fn a_task_past_its_cap_is_refused_and_told_once_and_unattended_tasks_are_not_asked() {
        let (approvals, mut sent) = setup(|c| c.max_questions_per_task = 1).await;
        let chat = ChatRef::Telegram(7);
        approvals.start_task("t1", &chat, "crawl", false);
        let waiting = tokio::spawn(ask(&approvals, "t1", "a.example.com"));
        sent.recv().await.unwrap();
        for host in ["b.example.com", "c.example.com"] {
            match ask(&approvals, "t1", host).await {
                Approval::Refuse(why) => assert!(why.contains("too many questions"), "{why}"),
                other => panic!("{other:?}"),
            }
        }
        let told = sent.recv().await.unwrap();
        assert!(told.text.contains("egress.max_questions_per_task"), "{}", told.text);
        assert!(sent.try_recv().is_err(), "told once");
        approvals.shutdown().await;
        match waiting.await.unwrap() {
            Approval::Refuse(why) => assert!(why.contains("the daemon stopped"), "{why}"),
            other => panic!("{other:?}"),
        }

        let (approvals, mut sent) = setup(|c| c.unattended = Unattended::Allowlist).await;
        approvals.start_task("job", &chat, "nightly report", true);
        match ask(&approvals, "job", "new.example.com").await {
            Approval::Refuse(why) => assert!(why.contains("nobody to ask"), "{why}"),
            other => panic!("{other:?}"),
        }
        // With `allowlist`, the chat's "always" rules apply to its jobs too.
        approvals.store.add_egress_rule(&chat, "new.example.com", 443, "test").await.unwrap();
        assert_eq!(ask(&approvals, "job", "new.example.com").await, Approval::Allow);
        assert!(sent.try_recv().is_err(), "nothing was asked");
    }

    #[tokio::test]
    async fn steps_ask_only_when_listed_and_over_the_size_and_the_answer_decides() {
        let (approvals, mut sent) = setup(|_| {}).await;
        let chat = ChatRef::Telegram(7);
        let config = nexbot_agent::config::AgentConfig {
            confirm: vec![ConfirmKind::SendFile],
            confirm_send_file_bytes: 100,
            ..Default::default()
        };
        let confirm = Arc::new(StepConfirm::new(approvals.clone(), &config));
        // Not listed, or not over the size: no question.
        let small = Step::SendFile { path: "a.txt".into(), bytes: 100 };
        assert_eq!(confirm.confirm(&chat, small).await, Ok(()));
        assert_eq!(confirm.confirm(&chat, Step::Delete { path: "a.txt".into() }).await, Ok(()));
        assert!(sent.try_recv().is_err(), "nothing asked");

        let asking = confirm.clone();
        let big = Step::SendFile { path: "big.bin".into(), bytes: 5000 };
        let waiting = tokio::spawn(async move { asking.confirm(&ChatRef::Telegram(7), big).await });
        let question = sent.recv().await.unwrap();
        assert!(question.text.contains("big.bin (4.9 KB)"), "{}", question.text);
        let labels: Vec<String> = question.buttons.concat().into_iter().map(|b| b.label).collect();
        assert_eq!(labels, ["Allow", "Deny"]);
        let listed = approvals.pending();
        assert_eq!(
            (listed[0].kind.as_str(), listed[0].subject.as_deref()),
            ("send_file", Some("big.bin (5000 bytes)"))
        );
        let id = listed[0].id;
        let wrong = approvals.answer(id, Choice::Task, "telegram:7", Some(&chat)).unwrap_err();
        assert!(matches!(wrong, AnswerError::WrongAnswer { .. }), "{wrong}");
        approvals.answer(id, Choice::Deny, "telegram:7", Some(&chat)).unwrap();
        let refused = waiting.await.unwrap().unwrap_err();
        assert_eq!(refused, Refused::Denied { by: "telegram:7".into() });
        assert!(refused.to_string().contains("the user refused"), "{refused}");

        // The turn goes away while it waits (a /stop drops the tool's future): the question
        // expires at once instead of keeping its buttons until the deadline.
        let asking = confirm.clone();
        let big = Step::SendFile { path: "big.bin".into(), bytes: 5000 };
        let waiting = tokio::spawn(async move { asking.confirm(&ChatRef::Telegram(7), big).await });
        sent.recv().await.unwrap();
        while approvals.pending().is_empty() {
            tokio::task::yield_now().await;
        }
        waiting.abort();
        let _ = waiting.await;
        for _ in 0..100 {
            if approvals.pending().is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(approvals.pending().is_empty(), "expired when the turn went away");
    }

    #[tokio::test]
    async fn a_secret_is_asked_about_once_per_task_and_a_deny_holds_for_the_task() {
        let (approvals, mut sent) = setup(|_| {}).await;
        let chat = ChatRef::Telegram(7);
        approvals.start_task("t1", &chat, "call the API", false);
        let secret = |task: &str| ApprovalRequest {
            secret_name: Some("GH_TOKEN".into()),
            secret: true,
            ..request(task, "api.example.com")
        };
        let approve = |task: &str| EgressApprover(approvals.clone()).approve(secret(task));
        let waiting = tokio::spawn(approve("t1"));
        let question = sent.recv().await.unwrap();
        assert!(question.text.contains("the secret GH_TOKEN"), "{}", question.text);
        assert_eq!(question.buttons.concat().len(), 2);
        let id = approvals.pending()[0].id;
        let always = approvals.answer(id, Choice::Chat, "telegram:7", Some(&chat)).unwrap_err();
        assert!(matches!(always, AnswerError::WrongAnswer { .. }), "{always}");
        approvals.answer(id, Choice::Deny, "telegram:7", Some(&chat)).unwrap();
        assert!(matches!(waiting.await.unwrap(), Approval::Refuse(_)));
        // Denied for the task: its next request is refused without a second question.
        match approve("t1").await {
            Approval::Refuse(why) => assert!(why.contains("earlier, for this task"), "{why}"),
            other => panic!("{other:?}"),
        }
        assert!(sent.try_recv().is_err(), "asked once");
        // Another task asks again; allowed for it, its later requests go without a question.
        approvals.start_task("t2", &chat, "call the API again", false);
        let waiting = tokio::spawn(approve("t2"));
        sent.recv().await.unwrap();
        let id = approvals.pending()[0].id;
        approvals.answer(id, Choice::Task, "telegram:7", Some(&chat)).unwrap();
        assert_eq!(waiting.await.unwrap(), Approval::Allow);
        assert_eq!(approve("t2").await, Approval::Allow);
        assert!(sent.try_recv().is_err(), "one question for t2");
    }
}
