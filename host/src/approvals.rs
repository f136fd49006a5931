//! Approvals: the one question machinery behind `egress.mode = "ask"`, `--confirm` secrets
//! and `agent.confirm`.
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

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use nexbot_agent::confirm::{Confirm, ConfirmKind, Refused, Step};
use nexbot_control::PendingApproval;
use nexbot_core::ChatRef;
use tokio::sync::watch;

use crate::agent::channel::{Button, Channel, MessageId, OutboundMessage};
use crate::egress::{
    Approval, ApprovalFuture, ApprovalRequest, Approver, EgressConfig, EgressMode, Unattended,
    DENIED_BY_USER, NO_ANSWER,
};
use crate::store::{EgressQuestionRow, Store};

/// The command word of the egress questions' buttons.
mod digest;
mod held;
mod owner;
pub use digest::{QuestionsCommand, QUESTIONS_COMMAND};

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
    Deny,
}

impl Choice {
    pub fn parse(word: &str) -> Option<Self> {
        match word.trim().to_ascii_lowercase().as_str() {
            "once" | "o" | "allow" | "yes" => Some(Self::Once),
            "task" | "t" => Some(Self::Task),
            "chat" | "always" | "a" => Some(Self::Chat),
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
            Self::Deny => "deny",
        }
    }

    fn decided(self, kind: Kind) -> &'static str {
        match (self, kind) {
            (Self::Once, Kind::Egress) => "Allowed once",
            (Self::Once, _) => "Allowed",
            (Self::Task, _) => "Allowed for this task",
            (Self::Chat, _) => "Always allowed for this chat",
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
            Self::Secret => choice != Choice::Chat,
            Self::Step(_) => matches!(choice, Choice::Once | Choice::Deny),
        }
    }

    /// The answers it takes, in words (an error lists them).
    fn answers(self) -> &'static str {
        match self {
            Self::Egress => "once, task, chat or deny",
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
            state: Mutex::default(),
            metrics: ApprovalMetrics::default(),
        })
    }

    /// Sets where questions are asked (the router); later calls change nothing.
    pub fn set_channel(&self, channel: Arc<dyn Channel>) {
        let _ = self.channel.set(channel);
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

    /// Answers question `id` as `by` (`telegram:42`, `nexbot-ctl`). `from`: the chat the
    /// answer came from, which must be the question's (`None`: the operator's `nexbot-ctl`).
    pub fn answer(
        &self,
        id: i64,
        choice: Choice,
        by: &str,
        from: Option<&ChatRef>,
    ) -> Result<Kind, AnswerError> {
        let mut state = self.lock();
        let pending = state.pending_by_id(id);
        let Some(pending) = pending else { return Err(AnswerError::NotWaiting(id)) };
        if from.is_some_and(|chat| *chat != pending.chat) {
            return Err(AnswerError::OtherChat { id });
        }
        let kind = pending.question.kind();
        if !kind.takes(choice) {
            return Err(AnswerError::WrongAnswer {
                id,
                kind: kind.as_str(),
                answers: kind.answers(),
            });
        }
        let outcome = Outcome::Answered { choice, by: by.to_owned() };
        if !pending.outcome.send_if_modified(|o| settle(o, outcome)) {
            return Err(AnswerError::NotWaiting(id));
        }
        // Granted before anyone waiting is let go: the task's next request to the same
        // destination (or with the same secret) must find it, not ask again.
        if let Question::Request(r) = &pending.question {
            let r = r.clone();
            if let Some(task) = state.tasks.get_mut(&r.task_id) {
                match (r.secret_name.clone(), choice) {
                    (Some(name), Choice::Task) => task.secrets.insert(name),
                    (Some(name), Choice::Deny) => task.denied_secrets.insert(name),
                    (None, Choice::Task | Choice::Chat) => {
                        task.granted.insert((r.host.clone(), r.port))
                    }
                    _ => false,
                };
            }
            // The destination allowed for the task (or always): the task's other questions
            // about it (other methods or paths) are answered by the same press.
            if r.secret_name.is_none() && matches!(choice, Choice::Task | Choice::Chat) {
                let outcome = Outcome::Answered { choice, by: by.to_owned() };
                for other in state.pending.values().filter(|p| p.id != id) {
                    if let Question::Request(o) = &other.question {
                        let same = o.task_id == r.task_id && o.host == r.host && o.port == r.port;
                        if same && o.secret_name.is_none() {
                            other.outcome.send_if_modified(|o| settle(o, outcome.clone()));
                        }
                    }
                }
            }
        }
        Ok(kind)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The decision about one held request (see the module's docs).
    async fn decide(self: Arc<Self>, request: ApprovalRequest) -> Approval {
        let destination = (request.host.clone(), request.port);
        let (chat, unattended) = {
            let state = self.lock();
            let Some(task) = state.tasks.get(&request.task_id) else {
                return Approval::Refuse(
                    "the daemon knows no running task of this request to ask about".into(),
                );
            };
            let granted = match &request.secret_name {
                Some(name) => task.secrets.contains(name),
                None => task.granted.contains(&destination),
            };
            if granted {
                return Approval::Allow;
            }
            if request.secret_name.as_ref().is_some_and(|n| task.denied_secrets.contains(n)) {
                return Approval::Refuse(format!("{DENIED_BY_USER} (earlier, for this task)"));
            }
            (task.chat.clone(), task.unattended)
        };
        if let Some(name) = &request.secret_name {
            // A `--confirm` secret: no rule stands for the user's yes.
            if unattended {
                return Approval::Refuse(format!(
                    "nobody to ask: the secret {name} was stored with --confirm, and the task \
                     runs for a scheduled job or a heartbeat check"
                ));
            }
            return self.wait_answer(Question::Request(request), chat).await;
        }
        let chat_rule = || self.store.has_egress_rule(&chat, &request.host, request.port);
        if unattended {
            if self.unattended == Unattended::Allowlist && chat_rule().await.unwrap_or(false) {
                return Approval::Allow;
            }
            return Approval::Refuse(format!(
                "nobody to ask: the task runs for a scheduled job or a heartbeat check \
                 (egress.unattended = \"{}\"); add {}:{} to egress.allow, or allow it always \
                 for the chat from a task the chat started",
                match self.unattended {
                    Unattended::Deny => "deny",
                    Unattended::Allowlist => "allowlist",
                },
                request.host,
                request.port
            ));
        }
        match chat_rule().await {
            Ok(true) => return Approval::Allow,
            Ok(false) => {}
            Err(e) => tracing::warn!(error = %e, "cannot read the chat's egress rules; asking"),
        }
        self.wait_answer(Question::Request(request), chat).await
    }

    /// Asks (or joins the question already asked) and waits for how it ended.
    async fn wait_answer(self: Arc<Self>, question: Question, chat: ChatRef) -> Approval {
        let _held = match self.hold(&chat) {
            Ok(held) => held,
            Err(refused) => return refused,
        };
        let mut outcome = match self.clone().join_or_ask(question, chat).await {
            Ok(outcome) => outcome,
            Err(decided) => return decided,
        };
        let ended = outcome.wait_for(Option::is_some).await.map(|o| o.clone());
        match ended {
            Ok(Some(Outcome::Answered { choice: Choice::Deny, .. })) => {
                Approval::Refuse(DENIED_BY_USER.into())
            }
            Ok(Some(Outcome::Answered { .. })) => Approval::Allow,
            Ok(Some(Outcome::NoAnswer)) | Ok(None) | Err(_) => Approval::Refuse(NO_ANSWER.into()),
            Ok(Some(Outcome::Expired(why))) => Approval::Refuse(format!("no answer: {why}")),
        }
    }

    /// Asks the chat's user to confirm a tool's `step` (see [`StepConfirm`]).
    pub async fn confirm_step(self: Arc<Self>, chat: &ChatRef, step: Step) -> Result<(), Refused> {
        let question = Question::Step(step);
        let key: Key = (format!("turn:{chat}"), question.kind(), question.subject());
        let mut outcome = match self.clone().join_or_ask(question, chat.clone()).await {
            Ok(outcome) => outcome,
            Err(Approval::Refuse(why)) => return Err(Refused::Other(why)),
            Err(Approval::Allow) => return Ok(()),
        };
        // A turn stopped (or timed out) while it waits drops this future: its question
        // expires then, rather than waiting out its deadline with live buttons.
        let _expire = ExpireOnDrop { approvals: self.clone(), key };
        let ended = outcome.wait_for(Option::is_some).await.map(|o| o.clone());
        match ended {
            Ok(Some(Outcome::Answered { choice: Choice::Deny, by })) => Err(Refused::Denied { by }),
            Ok(Some(Outcome::Answered { .. })) => Ok(()),
            Ok(Some(Outcome::NoAnswer)) | Ok(None) | Err(_) => {
                Err(Refused::NoAnswer { secs: self.wait.as_secs() })
            }
            Ok(Some(Outcome::Expired(why))) => Err(Refused::Other(format!("no answer: {why}"))),
        }
    }

    /// The question this asker waits on: one already asked about the same task (or chat
    /// turn), kind and subject, or a new one (asked by a task of its own, so that it ends —
    /// answered, timed out, expired — even if every waiting asker went away). `Err`: the
    /// decision without a question (granted meanwhile, or refused).
    async fn join_or_ask(
        self: Arc<Self>,
        question: Question,
        chat: ChatRef,
    ) -> Result<watch::Receiver<Option<Outcome>>, Approval> {
        let kind = question.kind();
        let scope = match &question {
            Question::Request(r) => r.task_id.clone(),
            Question::Step(_) => format!("turn:{chat}"),
        };
        let key: Key = (scope, kind, question.subject());
        let (tx, rx) = watch::channel(None);
        let capped = {
            let mut state = self.lock();
            if state.stopping {
                return Err(Approval::Refuse("no answer: the daemon is stopping".into()));
            }
            if let Some(pending) = state.pending.get(&key) {
                return Ok(pending.outcome.subscribe());
            }
            let capped = match &question {
                Question::Request(request) if kind == Kind::Egress => {
                    let max = self.max_per_task;
                    let Some(task) = state.tasks.get_mut(&request.task_id) else {
                        return Err(Approval::Refuse("the task ended".into()));
                    };
                    let destination = (request.host.clone(), request.port);
                    // Granted while this request looked at the chat's rules: the question
                    // that granted it is gone, and no new one is needed.
                    if task.granted.contains(&destination) {
                        return Err(Approval::Allow);
                    }
                    if task.asked.len() >= max && !task.asked.contains(&destination) {
                        let tell = !task.capped;
                        task.capped = true;
                        Some(tell)
                    } else {
                        task.asked.insert(destination);
                        None
                    }
                }
                Question::Request(request) => {
                    let Some(task) = state.tasks.get(&request.task_id) else {
                        return Err(Approval::Refuse("the task ended".into()));
                    };
                    if request.secret_name.as_ref().is_some_and(|n| task.secrets.contains(n)) {
                        return Err(Approval::Allow);
                    }
                    None
                }
                Question::Step(_) => None,
            };
            if capped.is_none() {
                // Reserved before the question is recorded (an await), so a request of the
                // same task and subject arriving meanwhile joins this question, and an answer
                // to it cannot fall between a look and a new question.
                let pending = Pending {
                    id: RESERVED,
                    chat: chat.clone(),
                    question: question.clone(),
                    asked: Instant::now(),
                    deadline: tokio::time::Instant::now() + self.wait,
                    outcome: tx,
                };
                state.pending.insert(key.clone(), pending);
            }
            capped
        };
        if let Some(tell) = capped {
            if tell {
                let text = format!(
                    "This task has asked about {} destinations already \
                     (egress.max_questions_per_task); the rest it tries are refused without a \
                     question.",
                    self.max_per_task
                );
                if let Some(channel) = self.channel.get() {
                    let _ = channel.send(OutboundMessage::progress(&chat, text)).await;
                }
            }
            return Err(Approval::Refuse(format!(
                "too many questions: this task asked about {} destinations already \
                 (egress.max_questions_per_task)",
                self.max_per_task
            )));
        }
        let row = question_row(&question, &chat);
        let recorded = self.store.record_egress_question(row).await;
        let id = match recorded {
            Ok(id) => id,
            Err(e) => {
                tracing::error!(error = %e, "cannot record a question; refused");
                let why = format!("the question could not be recorded: {e}");
                if let Some(pending) = self.lock().pending.remove(&key) {
                    pending.outcome.send_if_modified(|o| settle(o, Outcome::Expired(why.clone())));
                }
                return Err(Approval::Refuse(why));
            }
        };
        // Settled while it was being recorded (the task ended, the daemon stops): nothing to
        // ask; the row is marked like every question of a stopped run.
        let settled = {
            let mut state = self.lock();
            match state.pending.get_mut(&key) {
                Some(pending) if pending.outcome.borrow().is_none() => {
                    pending.id = id;
                    false
                }
                Some(_) => {
                    state.pending.remove(&key);
                    true
                }
                None => true,
            }
        };
        if settled {
            let _ = self.store.answer_egress_question(id, "expired", "daemon").await;
            return Ok(rx);
        }
        tokio::spawn(self.ask(id, key, chat));
        Ok(rx)
    }

    /// The question's message: its text and buttons, and its first lines (kept when it is
    /// edited to what was decided).
    /// `always`: whether the "Always for this chat" answer is offered (see
    /// [`Approvals::always_shown`]).
    fn message(
        &self,
        id: i64,
        question: &Question,
        words: &str,
        always: bool,
    ) -> (String, String, Vec<Vec<Button>>) {
        let secs = self.wait.as_secs();
        // Each button also has the letter a console types for it (`Button::key`).
        let button = |label: &str, command: &str, word: &str| {
            let button = Button::new(label, format!("/{command} {id} {word}"));
            match word {
                "once" => button.with_key('o'),
                "task" => button.with_key('t'),
                "chat" | "allow" => button.with_key('a'),
                "deny" => button.with_key('d'),
                _ => button,
            }
        };
        match question {
            Question::Request(request) => {
                let destination = format!("{}:{}", request.host, request.port);
                let what = match &request.path {
                    Some(path) => format!("{} {path}", request.method),
                    None => "a tunnel (CONNECT)".to_owned(),
                };
                if let Some(name) = &request.secret_name {
                    let head = format!(
                        "🔑 A task wants to use the secret {name}\nTask: «{words}»\n\
                         Request: {what} to {destination}"
                    );
                    let text = format!(
                        "{head}\n\nThe secret was stored with --confirm: it is filled in only \
                         if you allow it for this task. No answer within {secs} s denies it. \
                         (Or type /{CONFIRM_COMMAND} {id} task|deny.)"
                    );
                    let buttons = vec![vec![
                        button("Allow for this task", CONFIRM_COMMAND, "task"),
                        button("Deny", CONFIRM_COMMAND, "deny"),
                    ]];
                    return (head, text, buttons);
                }
                let secret = match request.secret {
                    true => "\nA stored secret would be filled into this request.",
                    false => "",
                };
                let head = format!(
                    "🔒 A task wants to reach {destination}\nTask: «{words}»\nRequest: {what}"
                );
                let words = if always { "once|task|chat|deny" } else { "once|task|deny" };
                let text = format!(
                    "{head}{secret}\n\nAllow it? No answer within {secs} s denies it. (Or type \
                     /{COMMAND} {id} {words}.)"
                );
                let mut last = vec![button("Deny", COMMAND, "deny")];
                if always {
                    last.insert(0, button("Always for this chat", COMMAND, "chat"));
                }
                let buttons = vec![
                    vec![
                        button("Allow once", COMMAND, "once"),
                        button("Allow for this task", COMMAND, "task"),
                    ],
                    last,
                ];
                (head, text, buttons)
            }
            Question::Step(step) => {
                let head = match step {
                    Step::SendFile { path, bytes } => format!(
                        "📤 The assistant wants to send you the file {path} ({})",
                        human_bytes(*bytes)
                    ),
                    Step::Delete { path } => {
                        format!("🗑 The assistant wants to delete the file {path}")
                    }
                    Step::Schedule { job } => {
                        format!("🗓 The assistant wants to schedule a job in this chat:\n{job}")
                    }
                };
                let text = format!(
                    "{head}\n\nAllow it? No answer within {secs} s refuses it. (Or type \
                     /{CONFIRM_COMMAND} {id} allow|deny.)"
                );
                let buttons = vec![vec![
                    button("Allow", CONFIRM_COMMAND, "allow"),
                    button("Deny", CONFIRM_COMMAND, "deny"),
                ]];
                (head, text, buttons)
            }
        }
    }

    /// Asks question `id` in `chat` and sees it to its end: the answer (or its absence)
    /// recorded, the grant or rule kept, the message edited, the metrics counted.
    async fn ask(self: Arc<Self>, id: i64, key: Key, chat: ChatRef) {
        let (mut outcome, deadline, question, words) = {
            let state = self.lock();
            let Some(p) = state.pending.get(&key) else { return };
            let words = state.tasks.get(p.question.task_id()).map(|t| t.words.clone());
            (p.outcome.subscribe(), p.deadline, p.question.clone(), words.unwrap_or_default())
        };
        let kind = question.kind();
        let asked = Instant::now();
        let (head, text, buttons) = self.message(id, &question, &words, self.always_shown(&chat));
        let mut message = OutboundMessage::progress(&chat, text);
        message.buttons = buttons;
        let sent: Option<MessageId> = match self.channel.get() {
            Some(channel) => match channel.send(message).await {
                Ok(sent) => sent,
                Err(e) => {
                    tracing::warn!(id, error = %e, "cannot ask a question in its chat");
                    None
                }
            },
            None => None,
        };
        let subject = question.subject();
        let task_id = question.task_id();
        tracing::info!(id, kind = kind.as_str(), %task_id, %chat, %subject, "question asked");
        let waited = tokio::time::timeout_at(deadline, outcome.wait_for(Option::is_some)).await;
        let ended = waited.map(|seen| seen.map(|seen| seen.clone()));
        let ended = match ended {
            Ok(Ok(seen)) => seen.unwrap_or(Outcome::NoAnswer),
            Ok(Err(_)) => Outcome::Expired("the question was dropped".into()),
            Err(_) => Outcome::NoAnswer,
        };
        // Settle it for everyone waiting (a timeout is seen here first).
        let removed = {
            let mut state = self.lock();
            let removed = state.pending.remove(&key);
            if let Some(p) = &removed {
                p.outcome.send_if_modified(|o| settle(o, ended.clone()));
            }
            removed
        };
        drop(removed);
        let (word, by, decided) = match &ended {
            Outcome::Answered { choice, by } => {
                let ms = asked.elapsed().as_millis() as u64;
                self.metrics.count(kind, choice.as_str(), Some(ms));
                if let (Choice::Chat, Question::Request(request)) = (choice, &question) {
                    if let Err(e) =
                        self.store.add_egress_rule(&chat, &request.host, request.port, by).await
                    {
                        tracing::error!(error = %e, "cannot store the chat's egress rule");
                    }
                }
                let decided = format!("{} by {by}", choice.decided(kind));
                (choice.as_str().to_owned(), by.clone(), decided)
            }
            Outcome::NoAnswer => {
                self.metrics.count(kind, "no_answer", None);
                (
                    "no answer".to_owned(),
                    "daemon".to_owned(),
                    format!("Denied: no answer within {} s", self.wait.as_secs()),
                )
            }
            Outcome::Expired(why) => {
                self.metrics.count(kind, "expired", None);
                ("expired".to_owned(), "daemon".to_owned(), format!("Expired: {why}"))
            }
        };
        if let Err(e) = self.store.answer_egress_question(id, &word, &by).await {
            tracing::warn!(id, error = %e, "cannot record a question's answer");
        }
        tracing::info!(id, kind = kind.as_str(), %subject, answer = %word, %by, "question settled");
        if let (Some(channel), Some(message)) = (self.channel.get(), sent) {
            let edited = format!("{head}\n\n→ {decided}.");
            if let Err(e) = channel.edit(&chat, message, &edited).await {
                tracing::debug!(id, error = %e, "cannot edit the question");
            }
        }
    }

    /// The receipt's lines of a task: what was asked, answered and by whom.
    pub async fn asked_lines(&self, task_id: &str) -> Vec<String> {
        let rows = self.store.egress_questions_of(task_id).await.unwrap_or_default();
        rows.into_iter()
            .map(|q| {
                let answer = q.answer.as_deref().unwrap_or("waiting");
                let what = match (q.kind.as_str(), &q.subject) {
                    ("secret", Some(name)) => format!("secret {name} to {}:{}", q.host, q.port),
                    _ => format!("{}:{}", q.host, q.port),
                };
                match q.answered_by.as_deref() {
                    Some(by) if by != "daemon" => format!("{what} → {answer} by {by}"),
                    _ => format!("{what} → {answer}"),
                }
            })
            .collect()
    }
}

/// Expires a step's question when the turn that waits on it goes away (a settled question
/// is left as it is: the first outcome wins).
struct ExpireOnDrop {
    approvals: Arc<Approvals>,
    key: Key,
}

impl Drop for ExpireOnDrop {
    fn drop(&mut self) {
        let state = self.approvals.lock();
        if let Some(pending) = state.pending.get(&self.key) {
            let ended = Outcome::Expired("the turn ended".into());
            pending.outcome.send_if_modified(|o| settle(o, ended));
        }
    }
}

/// The row recorded when `question` is asked in `chat`.
fn question_row(question: &Question, chat: &ChatRef) -> EgressQuestionRow {
    let (task_id, host, port, method, path, secret, subject) = match question {
        Question::Request(r) => (
            r.task_id.clone(),
            r.host.clone(),
            r.port,
            r.method.clone(),
            r.path.clone(),
            r.secret,
            r.secret_name.clone(),
        ),
        Question::Step(step) => {
            (String::new(), String::new(), 0, String::new(), None, false, Some(step_subject(step)))
        }
    };
    EgressQuestionRow {
        id: 0,
        task_id,
        chat: chat.to_string(),
        host,
        port,
        method,
        path,
        secret,
        asked_at: crate::store::unix_now(),
        answer: None,
        answered_by: None,
        kind: question.kind().as_str().to_owned(),
        subject,
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

/// `12.3 MB`, `512 KB`, `900 bytes`.
fn human_bytes(bytes: u64) -> String {
    const MB: u64 = 1024 * 1024;
    match bytes {
        b if b >= MB => format!("{:.1} MB", b as f64 / MB as f64),
        b if b >= 1024 => format!("{} KB", b / 1024),
        b => format!("{b} bytes"),
    }
}

impl crate::delegation::TaskQuestions for Approvals {
    fn task_started(
        &self,
        task_id: &str,
        chat: &ChatRef,
        task: &str,
        unattended: bool,
        user: Option<i64>,
    ) {
        self.start_task(task_id, chat, task, unattended);
        self.started_by(task_id, user);
    }

    fn task_ended(&self, task_id: &str) {
        self.end_task(task_id);
    }

    fn grant(&self, task_id: &str, destinations: &[nexbot_skill::Destination]) -> bool {
        self.grant_for_task(task_id, destinations)
    }

    fn receipt_lines<'a>(&'a self, task_id: &'a str) -> crate::BoxFuture<'a, Vec<String>> {
        Box::pin(self.asked_lines(task_id))
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
    fn confirm<'a>(
        &'a self,
        chat: &'a ChatRef,
        step: Step,
    ) -> crate::BoxFuture<'a, Result<(), Refused>> {
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

/// Answers a question from a chat: a press of its buttons, or the command typed.
async fn answer_in_chat(
    approvals: &Approvals,
    ctx: crate::commands::CommandContext<'_>,
    command: &str,
) -> String {
    let mut words = ctx.args.split_whitespace();
    let id = words.next().and_then(|w| w.parse::<i64>().ok());
    let choice = words.next().and_then(Choice::parse);
    let (Some(id), Some(choice)) = (id, choice) else {
        return format!("Usage: /{command} <question id> once|allow|task|chat|deny");
    };
    // In a group anyone the allow-list admits may press; the owner and the member who
    // started the task decide.
    let group = matches!(ctx.chat, ChatRef::Telegram(chat_id) if *chat_id < 0);
    if group && !approvals.may_answer(id, ctx.user) {
        return "Only the member who started the task, or the owner, can answer this question \
                in a group; nothing was changed (`nexbot-ctl approvals` answers it too)."
            .to_owned();
    }
    if let Err(refusal) = approvals.may_choose(id, choice, ctx.chat, ctx.user) {
        return refusal;
    }
    // Who: the Telegram user who pressed (in a private chat the same as the chat).
    let by = match (ctx.chat, ctx.user) {
        (ChatRef::Telegram(_), Some(user)) => format!("telegram:{user}"),
        _ => ctx.chat.to_string(),
    };
    // The owner answers any chat's question from their private chat (`/questions`).
    let from = (!approvals.answers_anywhere(ctx.chat, ctx.user)).then_some(ctx.chat);
    match approvals.answer(id, choice, &by, from) {
        Ok(kind) => format!("{}.", choice.decided(kind)),
        Err(e) => e.to_string(),
    }
}

/// `/egress <id> once|task|chat|deny`: the egress questions' buttons (or typed); it answers
/// any question, as it did before there were other kinds.
#[derive(Debug)]
pub struct EgressCommand(pub Arc<Approvals>);

impl crate::commands::ChatCommand for EgressCommand {
    fn name(&self) -> &'static str {
        COMMAND
    }

    fn summary(&self) -> &'static str {
        "answer an egress question: /egress <id> once|task|chat|deny (its buttons do it)"
    }

    fn run<'a>(&'a self, ctx: crate::commands::CommandContext<'a>) -> crate::BoxFuture<'a, String> {
        Box::pin(answer_in_chat(&self.0, ctx, COMMAND))
    }
}

/// `/approve <id> allow|task|deny`: the other questions' buttons (a `--confirm` secret's
/// use, `agent.confirm`'s steps), or typed.
#[derive(Debug)]
pub struct ApproveCommand(pub Arc<Approvals>);

impl crate::commands::ChatCommand for ApproveCommand {
    fn name(&self) -> &'static str {
        CONFIRM_COMMAND
    }

    fn summary(&self) -> &'static str {
        "answer a confirmation: /approve <id> allow|task|deny (its buttons do it)"
    }

    fn run<'a>(&'a self, ctx: crate::commands::CommandContext<'a>) -> crate::BoxFuture<'a, String> {
        Box::pin(answer_in_chat(&self.0, ctx, CONFIRM_COMMAND))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::sync::mpsc;

    use crate::channels::tests::Recorder;

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
        approvals.set_channel(Arc::new(Recorder(tx)));
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
        assert!(question.text.contains("once|task|deny"), "{}", question.text);
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

    #[tokio::test]
    async fn requests_of_one_task_to_one_destination_wait_on_one_question() {
        let (approvals, mut sent) = setup(|_| {}).await;
        let chat = ChatRef::Telegram(7);
        approvals.start_task("t1", &chat, "fetch the forecast for Lisbon", false);
        let first = tokio::spawn(ask(&approvals, "t1", "api.example.com"));
        let second = tokio::spawn(ask(&approvals, "t1", "api.example.com"));
        let question = sent.recv().await.unwrap();
        assert!(question.text.contains("api.example.com:443"), "{}", question.text);
        // Not the owner's chat (no owner here): "always" is not offered.
        assert_eq!(question.buttons.concat().len(), 3);
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
        assert!(question.text.contains("big.bin (4 KB)"), "{}", question.text);
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
