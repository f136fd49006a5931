//! The question flow: a held request (or a tool's step) decided by a grant or a rule at once,
//! or asked — joining the question already asked about the same thing, or a new one recorded
//! and asked in its chat by a task of its own — and seen to its end: answered, no answer by
//! the deadline, or expired; the grant or the chat's rule kept, the chat's message edited to
//! what was decided, the metrics counted.
//!
//! Why apart: this is the path of one question through time; the presses that answer it are
//! [`super::answer`]'s, the words and buttons it shows [`super::message`]'s.

use std::sync::Arc;
use std::time::Instant;

use nexbot_agent::confirm::{Refused, Step};
use nexbot_core::ChatRef;
use tokio::sync::watch;

use nexbot_core::channel::{MessageId, OutboundMessage};
use nexbot_egress::{Approval, ApprovalRequest, Unattended, DENIED_BY_USER, NO_ANSWER};
use nexbot_store::EgressQuestionRow;

use super::{
    settle, step_subject, Approvals, Choice, Key, Kind, Outcome, Pending, Question, RESERVED,
};

/// Why a request the reading allowance was chosen for does not go.
const NOT_A_READ: &str = "the reading allowance covers only GET and HEAD requests the proxy \
     sends itself, without a body or a secret, to a host name, with a URL of at most 2048 \
     characters; this request is none of that, so it was not sent";

impl Approvals {
    /// The decision about one held request (see the module's docs).
    pub(super) async fn decide(self: Arc<Self>, request: ApprovalRequest) -> Approval {
        let destination = (request.host.clone(), request.port);
        let (chat, unattended) = {
            let mut state = self.lock();
            let Some(task) = state.tasks.get_mut(&request.task_id) else {
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
            // The task's reading allowance: a request that only reads goes unasked (and is
            // kept for the receipt); anything else is asked as before.
            if task.reading && request.reads_only() {
                task.read.insert(destination.clone());
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
        // A reading allowance lets only what reads go, this request included.
        let reads = matches!(&question, Question::Request(r) if r.reads_only());
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
            Ok(Some(Outcome::Answered { choice: Choice::Read, .. })) if !reads => {
                Approval::Refuse(NOT_A_READ.into())
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
        asked_at: nexbot_store::unix_now(),
        answer: None,
        answered_by: None,
        kind: question.kind().as_str().to_owned(),
        subject,
    }
}
