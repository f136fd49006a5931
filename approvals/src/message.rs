//! What a question says: its text and buttons in the chat (each with the letter a console
//! types for it), and the task receipt's lines of what was asked and answered.
//!
//! Why apart: the words the user reads, kept apart from the flow that sends them.

use nexbot_agent::confirm::Step;

use nexbot_core::channel::Button;

use super::{Approvals, Question, COMMAND, CONFIRM_COMMAND};

impl Approvals {
    /// The question's message: its text and buttons, and its first lines (kept when it is
    /// edited to what was decided).
    /// `always`: whether the "Always for this chat" answer is offered (see
    /// [`Approvals::always_shown`]).
    pub(super) fn message(
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
                "read" => button.with_key('r'),
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
                // Offered only for a request that itself only reads (the answer covers the
                // task's later reads, never more than this request does).
                let reads = request.reads_only();
                let words = match (always, reads) {
                    (true, true) => "once|task|read|chat|deny",
                    (true, false) => "once|task|chat|deny",
                    (false, true) => "once|task|read|deny",
                    (false, false) => "once|task|deny",
                };
                let text = format!(
                    "{head}{secret}\n\nAllow it? No answer within {secs} s denies it. (Or type \
                     /{COMMAND} {id} {words}.)"
                );
                let mut last = vec![button("Deny", COMMAND, "deny")];
                if always {
                    last.insert(0, button("Always for this chat", COMMAND, "chat"));
                }
                let mut buttons = vec![vec![
                    button("Allow once", COMMAND, "once"),
                    button("Allow for this task", COMMAND, "task"),
                ]];
                if reads {
                    let label = "Allow reading the web for this task";
                    buttons.push(vec![button(label, COMMAND, "read")]);
                }
                buttons.push(last);
                (head, text, buttons)
            }
            Question::Step(step) => {
                let head = match step {
                    Step::SendFile { path, bytes } => format!(
                        "📤 The assistant wants to send you the file {path} ({})",
                        nexbot_core::text::human_size(*bytes)
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

    /// The receipt's lines of a task: what was asked, answered and by whom, then what its
    /// reading allowance let through unasked.
    pub async fn asked_lines(&self, task_id: &str) -> Vec<String> {
        let read: Vec<String> = {
            let state = self.lock();
            let read = state.tasks.get(task_id).map(|t| t.read.iter()).into_iter().flatten();
            read.map(|(host, port)| format!("{host}:{port}")).collect()
        };
        let rows = self.store.egress_questions_of(task_id).await.unwrap_or_default();
        let mut lines: Vec<String> = rows
            .into_iter()
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
            .collect();
        if !read.is_empty() {
            lines.push(format!("read unasked ({}): {}", read.len(), read.join(" ")));
        }
        lines
    }
}
