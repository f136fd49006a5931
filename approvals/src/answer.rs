//! Answers: a press of a question's buttons or the command typed (`/egress`, `/approve`) in a
//! chat, checked (who may answer in a group, who may choose "always"), or the operator's
//! `nexbot-ctl approvals`; the first answer wins, and a grant is kept before anyone waiting is
//! let go.
//!
//! Why apart: every way in for an answer ends in [`Approvals::answer`]; the question's side
//! is [`super::ask`]. The commands that carry a press here are the host's (its command
//! registry); what a press means is [`Approvals::answer_in_chat`]'s.

use nexbot_core::ChatRef;

use super::{settle, AnswerError, Approvals, Choice, Kind, Outcome, Pending, Question};

impl Approvals {
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
        let reads = matches!(&pending.question, Question::Request(r) if r.reads_only());
        if choice == Choice::Read && !reads {
            return Err(AnswerError::NotARead { id });
        }
        let outcome = Outcome::Answered { choice, by: by.to_owned() };
        if !pending.outcome.send_if_modified(|o| settle(o, outcome)) {
            return Err(AnswerError::NotWaiting(id));
        }
        // Written to the chained audit once the answer is settled (the first answer wins),
        // with a line for each other question the same press settles.
        let mut events = vec![answered(pending, by, choice.as_str().to_owned())];
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
                    (None, Choice::Read) => {
                        task.reading = true;
                        true
                    }
                    _ => false,
                };
            }
            // The same press answers the task's other questions it covers: with the reading
            // allowance, those about requests that only read; with the destination allowed for
            // the task (or always), those about it (other methods or paths).
            let covers = |o: &nexbot_egress::ApprovalRequest| {
                o.task_id == r.task_id
                    && o.secret_name.is_none()
                    && match choice {
                        Choice::Read => o.reads_only(),
                        Choice::Task | Choice::Chat => o.host == r.host && o.port == r.port,
                        _ => false,
                    }
            };
            if r.secret_name.is_none() {
                let outcome = Outcome::Answered { choice, by: by.to_owned() };
                let by_press = format!("{} (by {id})", choice.as_str());
                for other in state.pending.values().filter(|p| p.id != id) {
                    let Question::Request(o) = &other.question else { continue };
                    if covers(o) && other.outcome.send_if_modified(|s| settle(s, outcome.clone())) {
                        events.push(answered(other, by, by_press.clone()));
                    }
                }
            }
        }
        drop(state);
        if let Some(trail) = self.trail.get() {
            events.into_iter().for_each(|event| trail.record(event));
        }
        Ok(kind)
    }

    /// Answers a question from a chat: a press of its buttons, or the command typed
    /// (`/{command} <id> <answer>`, `args` the words after the command). `user`: who pressed
    /// (the Telegram user), where the channel tells users apart. Returns what to tell them.
    pub fn answer_in_chat(
        &self,
        chat: &ChatRef,
        user: Option<i64>,
        args: &str,
        command: &str,
    ) -> String {
        let mut words = args.split_whitespace();
        let id = words.next().and_then(|w| w.parse::<i64>().ok());
        let choice = words.next().and_then(Choice::parse);
        let (Some(id), Some(choice)) = (id, choice) else {
            return format!("Usage: /{command} <question id> once|allow|task|chat|deny");
        };
        // In a group anyone the allow-list admits may press; the owner and the member who
        // started the task decide.
        let group = matches!(chat, ChatRef::Telegram(chat_id) if *chat_id < 0);
        if group && !self.may_answer(id, user) {
            return "Only the member who started the task, or the owner, can answer this \
                    question in a group; nothing was changed (`nexbot-ctl approvals` answers it \
                    too)."
                .to_owned();
        }
        if let Err(refusal) = self.may_choose(id, choice, chat, user) {
            return refusal;
        }
        // Who: the Telegram user who pressed (in a private chat the same as the chat).
        let by = match (chat, user) {
            (ChatRef::Telegram(_), Some(user)) => format!("telegram:{user}"),
            _ => chat.to_string(),
        };
        // The owner answers any chat's question from their private chat (`/questions`).
        let from = (!self.answers_anywhere(chat, user)).then_some(chat);
        match self.answer(id, choice, &by, from) {
            Ok(kind) => format!("{}.", choice.decided(kind)),
            Err(e) => e.to_string(),
        }
    }
}

/// The audit's line for question `pending` answered by `by` (`outcome`: the answer).
fn answered(pending: &Pending, by: &str, outcome: String) -> nexbot_core::audit::AuditEvent {
    let kind = pending.question.kind();
    nexbot_core::audit::AuditEvent {
        event: "approval",
        actor: by.to_owned(),
        chat: Some(pending.chat.to_string()),
        subject: format!(
            "question {} ({}): {}",
            pending.id,
            kind.as_str(),
            pending.question.subject()
        ),
        outcome,
    }
}
