//! Egress approvals: the one question machinery behind `egress.mode = "ask"`.
//!
//! The proxy (`nexbot-egress`) holds a connection to a destination no rule covers and asks
//! its [`Approver`] — this. A question is a pending entry with an id (the row of
//! `egress_questions`, unique across restarts) and a deadline (`egress.approval_timeout_secs`),
//! asked in the chat that owns the task, with four buttons (`/egress <id> once|task|chat|deny`,
//! commands like any other button, so a press is checked like typing). It can be answered
//! from any channel (a press, a typed command) or from `nexbot-ctl approvals`; whoever answers
//! first wins, and the chat's message is edited to say what was decided and by whom.
//!
//! Why here and not in the proxy: the proxy knows no chat, no user and no store; why not in a
//! channel: the same question is answered from several places. What is remembered:
//! "Allow for this task" is a grant kept while the task runs; "Always for this chat" is a row
//! of `egress_rules` (per chat, host and port), which survives restarts. Several held
//! requests of one task to one destination wait on one question; a task may ask about at
//! most `egress.max_questions_per_task` destinations.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use nexbot_control::PendingApproval;
use nexbot_core::ChatRef;
use tokio::sync::watch;

use crate::agent::channel::{Button, Channel, MessageId, OutboundMessage};
use crate::egress::{
    Approval, ApprovalFuture, ApprovalRequest, Approver, EgressConfig, EgressMode, Unattended,
    DENIED_BY_USER, NO_ANSWER,
};
use crate::store::{EgressQuestionRow, Store};

/// The command word of the questions' buttons.
pub const COMMAND: &str = "egress";

/// An answer to a question.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Choice {
    /// The requests held now go; the next request to it asks again.
    Once,
    /// Everything the task sends there goes, until it ends.
    Task,
    /// An "always" rule for the chat: every task of the chat, across restarts.
    Chat,
    Deny,
}

impl Choice {
    pub fn parse(word: &str) -> Option<Self> {
        match word.trim().to_ascii_lowercase().as_str() {
            "once" | "o" => Some(Self::Once),
            "task" | "t" => Some(Self::Task),
            "chat" | "always" | "a" => Some(Self::Chat),
            "deny" | "d" => Some(Self::Deny),
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

    fn decided(self) -> &'static str {
        match self {
            Self::Once => "Allowed once",
            Self::Task => "Allowed for this task",
            Self::Chat => "Always allowed for this chat",
            Self::Deny => "Denied",
        }
    }
}

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
    task_id: String,
    chat: ChatRef,
    host: String,
    port: u16,
    method: String,
    path: Option<String>,
    secret: bool,
    asked: Instant,
    /// When it is refused for want of an answer (set when it is created, before the message
    /// goes out, so a slow channel does not lengthen it).
    deadline: tokio::time::Instant,
    outcome: watch::Sender<Option<Outcome>>,
}

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
    /// Destinations asked about (the cap counts them).
    asked: HashSet<(String, u16)>,
    /// Whether the chat was told that the cap was reached.
    capped: bool,
}

#[derive(Debug, Default)]
struct State {
    tasks: HashMap<String, TaskEntry>,
    /// By (task, host, port): one question however many requests wait on it.
    pending: HashMap<(String, String, u16), Pending>,
    stopping: bool,
}

/// Questions counted by how they ended, and the time answers took (for `/metrics`).
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
}

/// Why an answer was not taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AnswerError {
    #[error(
        "no egress question {0} is waiting (it was answered, its time ran out, or its task \
         ended); `nexbot-ctl approvals ls` lists the waiting ones"
    )]
    NotWaiting(i64),
    #[error("egress question {id} belongs to another chat; only {chat} can answer it there")]
    OtherChat { id: i64, chat: String },
}

/// The egress approvals of the daemon. Cheap to share (`Arc`).
pub struct Approvals {
    mode: EgressMode,
    /// The owner's Telegram user id: in a group, the owner and the member who started the
    /// task answer a question (a private chat's only presser is its user; the console has one).
    owner: Option<i64>,
    wait: Duration,
    max_per_task: usize,
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
            Ok(n) => tracing::info!(n, "egress questions of an earlier run marked expired"),
            Err(e) => tracing::warn!(error = %e, "cannot expire earlier egress questions"),
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
            asked: HashSet::new(),
            capped: false,
        };
        self.lock().tasks.insert(task_id.to_owned(), entry);
    }

    /// Grants a running task `destinations` as if "Allow for this task" had been pressed for
    /// each (the skills its turn read declare them, `skill_grants`). Consulted only in `ask`
    /// mode and only after the proxy's deny list and address rules, like any grant.
    pub fn grant_for_task(&self, task_id: &str, destinations: &[nexbot_skill::Destination]) {
        if let Some(task) = self.lock().tasks.get_mut(task_id) {
            task.granted.extend(destinations.iter().map(|d| (d.host.clone(), d.port)));
        }
    }

    /// The task `task_id` was started by `user`'s message (see [`Approvals::may_answer`]).
    pub fn started_by(&self, task_id: &str, user: Option<i64>) {
        if let Some(task) = self.lock().tasks.get_mut(task_id) {
            task.user = user;
        }
    }

    /// Whether `user` may answer question `id` in a group: the owner, or the member whose
    /// message started the task. (In a private chat the chat is its user; the channel's
    /// allow-list decides who writes there.)
    pub fn may_answer(&self, id: i64, user: Option<i64>) -> bool {
        let Some(user) = user else { return false };
        if self.owner == Some(user) {
            return true;
        }
        let state = self.lock();
        let task = state.pending.values().find(|p| p.id == id).map(|p| p.task_id.as_str());
        task.and_then(|t| state.tasks.get(t)).is_some_and(|t| t.user == Some(user))
    }

    /// The task ended: its grants go, its waiting questions expire.
    pub fn end_task(&self, task_id: &str) {
        let mut state = self.lock();
        state.tasks.remove(task_id);
        for pending in state.pending.values().filter(|p| p.task_id == task_id) {
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
            tracing::info!(n = waiting.len(), "waiting egress questions expired at stop");
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
            .map(|p| PendingApproval {
                id: p.id,
                task_id: p.task_id.clone(),
                chat: p.chat.to_string(),
                host: p.host.clone(),
                port: p.port,
                method: p.method.clone(),
                path: p.path.clone(),
                secret: p.secret,
                waiting_secs: p.asked.elapsed().as_secs(),
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
    ) -> Result<(), AnswerError> {
        let mut state = self.lock();
        let pending = state.pending.values().find(|p| p.id == id);
        let Some(pending) = pending else { return Err(AnswerError::NotWaiting(id)) };
        if from.is_some_and(|chat| *chat != pending.chat) {
            return Err(AnswerError::OtherChat { id, chat: pending.chat.to_string() });
        }
        let outcome = Outcome::Answered { choice, by: by.to_owned() };
        if !pending.outcome.send_if_modified(|o| settle(o, outcome)) {
            return Err(AnswerError::NotWaiting(id));
        }
        // Granted before anyone waiting is let go: the task's next request to the same
        // destination must find it, not ask again.
        if matches!(choice, Choice::Task | Choice::Chat) {
            let task_id = pending.task_id.clone();
            let destination = (pending.host.clone(), pending.port);
            if let Some(task) = state.tasks.get_mut(&task_id) {
                task.granted.insert(destination);
            }
        }
        Ok(())
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
            if task.granted.contains(&destination) {
                return Approval::Allow;
            }
            (task.chat.clone(), task.unattended)
        };
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
        let mut outcome = match self.clone().join_or_ask(request, chat).await {
            Ok(outcome) => outcome,
            Err(refusal) => return refusal,
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

    /// The question this request waits on: one already asked about its task and
    /// destination, or a new one (asked by a task of its own, so that it ends — answered,
    /// timed out, expired — even if every waiting request went away).
    async fn join_or_ask(
        self: Arc<Self>,
        request: ApprovalRequest,
        chat: ChatRef,
    ) -> Result<watch::Receiver<Option<Outcome>>, Approval> {
        let key = (request.task_id.clone(), request.host.clone(), request.port);
        let capped = {
            let mut state = self.lock();
            if state.stopping {
                return Err(Approval::Refuse("no answer: the daemon is stopping".into()));
            }
            if let Some(pending) = state.pending.get(&key) {
                return Ok(pending.outcome.subscribe());
            }
            let max = self.max_per_task;
            let Some(task) = state.tasks.get_mut(&request.task_id) else {
                return Err(Approval::Refuse("the task ended".into()));
            };
            let destination = (request.host.clone(), request.port);
            if task.asked.len() >= max && !task.asked.contains(&destination) {
                let tell = !task.capped;
                task.capped = true;
                Some(tell)
            } else {
                task.asked.insert(destination);
                None
            }
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
        let row = EgressQuestionRow {
            id: 0,
            task_id: request.task_id.clone(),
            chat: chat.to_string(),
            host: request.host.clone(),
            port: request.port,
            method: request.method.clone(),
            path: request.path.clone(),
            secret: request.secret,
            asked_at: crate::store::unix_now(),
            answer: None,
            answered_by: None,
        };
        let id = match self.store.record_egress_question(row).await {
            Ok(id) => id,
            Err(e) => {
                tracing::error!(error = %e, "cannot record an egress question; refused");
                return Err(Approval::Refuse(format!("the question could not be recorded: {e}")));
            }
        };
        let (tx, rx) = watch::channel(None);
        {
            let mut state = self.lock();
            if let Some(pending) = state.pending.get(&key) {
                // Another request of the same task and destination got there first.
                return Ok(pending.outcome.subscribe());
            }
            state.pending.insert(
                key.clone(),
                Pending {
                    id,
                    task_id: request.task_id.clone(),
                    chat: chat.clone(),
                    host: request.host.clone(),
                    port: request.port,
                    method: request.method.clone(),
                    path: request.path.clone(),
                    secret: request.secret,
                    asked: Instant::now(),
                    deadline: tokio::time::Instant::now() + self.wait,
                    outcome: tx,
                },
            );
        }
        tokio::spawn(self.ask(id, key, request, chat));
        Ok(rx)
    }

    /// Asks question `id` in `chat` and sees it to its end: the answer (or its absence)
    /// recorded, the grant or rule kept, the message edited, the metrics counted.
    async fn ask(
        self: Arc<Self>,
        id: i64,
        key: (String, String, u16),
        request: ApprovalRequest,
        chat: ChatRef,
    ) {
        let (mut outcome, deadline, words) = {
            let state = self.lock();
            let words = state.tasks.get(&request.task_id).map(|t| t.words.clone());
            match state.pending.get(&key) {
                Some(p) => (p.outcome.subscribe(), p.deadline, words.unwrap_or_default()),
                None => return,
            }
        };
        let asked = Instant::now();
        let destination = format!("{}:{}", request.host, request.port);
        let what = match &request.path {
            Some(path) => format!("{} {path}", request.method),
            None => "a tunnel (CONNECT)".to_owned(),
        };
        let secret = match request.secret {
            true => "\nA stored secret would be filled into this request.",
            false => "",
        };
        let text = format!(
            "🔒 A task wants to reach {destination}\nTask: «{words}»\nRequest: {what}{secret}\n\n\
             Allow it? No answer within {} s denies it. (Or type /{COMMAND} {id} \
             once|task|chat|deny.)",
            self.wait.as_secs()
        );
        let mut message = OutboundMessage::progress(&chat, text.clone());
        message.buttons = vec![
            vec![
                Button::new("Allow once", format!("/{COMMAND} {id} once")).with_key('o'),
                Button::new("Allow for this task", format!("/{COMMAND} {id} task")).with_key('t'),
            ],
            vec![
                Button::new("Always for this chat", format!("/{COMMAND} {id} chat")).with_key('a'),
                Button::new("Deny", format!("/{COMMAND} {id} deny")).with_key('d'),
            ],
        ];
        let sent: Option<MessageId> = match self.channel.get() {
            Some(channel) => match channel.send(message).await {
                Ok(sent) => sent,
                Err(e) => {
                    tracing::warn!(id, error = %e, "cannot ask an egress question in its chat");
                    None
                }
            },
            None => None,
        };
        tracing::info!(id, task_id = %request.task_id, %chat, %destination, "egress question asked");
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
                let m = &self.metrics;
                let counter = match choice {
                    Choice::Once => &m.once,
                    Choice::Task => &m.task,
                    Choice::Chat => &m.chat,
                    Choice::Deny => &m.deny,
                };
                counter.fetch_add(1, Ordering::Relaxed);
                m.answered.fetch_add(1, Ordering::Relaxed);
                m.answer_ms_sum.fetch_add(asked.elapsed().as_millis() as u64, Ordering::Relaxed);
                if *choice == Choice::Chat {
                    if let Err(e) =
                        self.store.add_egress_rule(&chat, &request.host, request.port, by).await
                    {
                        tracing::error!(error = %e, "cannot store the chat's egress rule");
                    }
                }
                (choice.as_str().to_owned(), by.clone(), format!("{} by {by}", choice.decided()))
            }
            Outcome::NoAnswer => {
                self.metrics.no_answer.fetch_add(1, Ordering::Relaxed);
                (
                    "no answer".to_owned(),
                    "daemon".to_owned(),
                    format!("Denied: no answer within {} s", self.wait.as_secs()),
                )
            }
            Outcome::Expired(why) => {
                self.metrics.expired.fetch_add(1, Ordering::Relaxed);
                ("expired".to_owned(), "daemon".to_owned(), format!("Expired: {why}"))
            }
        };
        if let Err(e) = self.store.answer_egress_question(id, &word, &by).await {
            tracing::warn!(id, error = %e, "cannot record an egress question's answer");
        }
        tracing::info!(id, %destination, answer = %word, %by, "egress question settled");
        if let (Some(channel), Some(message)) = (self.channel.get(), sent) {
            let first = text.lines().next().unwrap_or_default();
            let edited = format!("{first}\nTask: «{words}»\nRequest: {what}\n\n→ {decided}.");
            if let Err(e) = channel.edit(&chat, message, &edited).await {
                tracing::debug!(id, error = %e, "cannot edit the egress question");
            }
        }
    }

    /// The receipt's lines of a task: what was asked, answered and by whom.
    pub async fn asked_lines(&self, task_id: &str) -> Vec<String> {
        let rows = self.store.egress_questions_of(task_id).await.unwrap_or_default();
        rows.into_iter()
            .map(|q| {
                let answer = q.answer.as_deref().unwrap_or("waiting");
                match q.answered_by.as_deref() {
                    Some(by) if by != "daemon" => {
                        format!("{}:{} → {answer} by {by}", q.host, q.port)
                    }
                    _ => format!("{}:{} → {answer}", q.host, q.port),
                }
            })
            .collect()
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

    fn grant(&self, task_id: &str, destinations: &[nexbot_skill::Destination]) {
        self.grant_for_task(task_id, destinations);
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

/// `/egress <id> once|task|chat|deny`: the questions' buttons (or typed).
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
        Box::pin(async move {
            let mut words = ctx.args.split_whitespace();
            let id = words.next().and_then(|w| w.parse::<i64>().ok());
            let choice = words.next().and_then(Choice::parse);
            let (Some(id), Some(choice)) = (id, choice) else {
                return format!("Usage: /{COMMAND} <question id> once|task|chat|deny");
            };
            // In a group anyone the allow-list admits may press; the owner and the member
            // who started the task decide.
            let group = matches!(ctx.chat, ChatRef::Telegram(chat_id) if *chat_id < 0);
            if group && !self.0.may_answer(id, ctx.user) {
                return "Only the member who started the task, or the owner, can answer this \
                        question in a group; nothing was changed (`nexbot-ctl approvals` \
                        answers it too)."
                    .to_owned();
            }
            // Who: the Telegram user who pressed (in a private chat the same as the chat).
            let by = match (ctx.chat, ctx.user) {
                (ChatRef::Telegram(_), Some(user)) => format!("telegram:{user}"),
                _ => ctx.chat.to_string(),
            };
            match self.0.answer(id, choice, &by, Some(ctx.chat)) {
                Ok(()) => format!("{}.", choice.decided()),
                Err(e) => e.to_string(),
            }
        })
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
        let dir = std::env::temp_dir().join(format!("nxh-approvals-{}", uuid::Uuid::new_v4()));
        let store = Store::open(&dir.join("t.db")).await.unwrap();
        let mut config = EgressConfig { mode: Some(EgressMode::Ask), ..EgressConfig::default() };
        edit(&mut config);
        let approvals = Approvals::new(&config, store);
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
        }
    }

    fn ask(approvals: &Arc<Approvals>, task: &str, host: &str) -> ApprovalFuture {
        EgressApprover(approvals.clone()).approve(request(task, host))
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
        assert_eq!(question.buttons.concat().len(), 4);
        // Wait until both wait, then answer once.
        while approvals.pending().is_empty() {
            tokio::task::yield_now().await;
        }
        let id = approvals.pending()[0].id;
        let other = ChatRef::Telegram(8);
        let err = approvals.answer(id, Choice::Task, "telegram:8", Some(&other)).unwrap_err();
        assert!(matches!(err, AnswerError::OtherChat { .. }), "{err}");
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
}
