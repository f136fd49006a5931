//! The soak's users: one closed loop per chat that sends a message, waits for its outcome (the
//! answer that names it, or a reply that says why it failed), presses the buttons a real user
//! would, and thinks a while before the next one.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::soak::model::number_after;
use crate::telegram::{BotMessage, MessageKind, TelegramFixture, UserMessage};

/// What a message asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// Answered by the model at once.
    Plain,
    /// Delegated to a sandboxed subagent (the pool, on the test's engine).
    Task,
    /// A document the daemon downloads into the chat's inbox.
    File,
    /// A one-shot job in 5 s, confirmed with the question's "Allow" button.
    Job,
}

impl Kind {
    fn pick(rng: &mut fastrand::Rng) -> Self {
        match rng.u8(0..100) {
            0..45 => Self::Plain,
            45..70 => Self::Task,
            70..85 => Self::File,
            _ => Self::Job,
        }
    }

    fn marker(self) -> &'static str {
        match self {
            Self::Plain => "[plain]",
            Self::Task => "[task]",
            Self::File => "[file]",
            Self::Job => "[job]",
        }
    }
}

/// How a message ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Its answer came, this long after it was sent.
    Answered(Duration),
    /// A reply said why it could not be answered.
    Failed(String),
    /// Nothing within the wait.
    Lost { seen: Vec<String> },
}

/// One message a user sent.
#[derive(Debug, Clone)]
pub struct Sent {
    pub n: u64,
    pub chat: i64,
    pub kind: Kind,
    /// Since the soak began.
    pub at: Duration,
    pub outcome: Outcome,
}

/// What the chats share: the fixture, the clock, the message numbers and the stop flag.
#[derive(Debug)]
pub struct Users {
    pub tg: TelegramFixture,
    pub began: Instant,
    pub next: AtomicU64,
    pub stop: AtomicBool,
    /// How long a message may wait for its outcome (past every fault's window).
    pub patience: Duration,
    /// Pause between a chat's messages, at least and at most (ms).
    pub think_ms: (u64, u64),
}

/// A reply that says the message failed, with its reason (not an interim word).
fn failure(text: &str) -> bool {
    if text.contains("Task interrupted") {
        return text.contains("not retried");
    }
    if text.starts_with("⚠️ Task") {
        // A delegated task's receipt (it failed: a container killed, the engine gone); the
        // main agent's answer follows.
        return false;
    }
    text.starts_with("Sorry") || text.starts_with("⚠️") || text.contains("failed")
}

/// Runs one chat's loop until [`Users::stop`]; returns what it sent.
pub async fn drive(users: Arc<Users>, chat: i64, seed: u64) -> Vec<Sent> {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut sent = Vec::new();
    let mut pressed = HashSet::new();
    while !users.stop.load(Ordering::SeqCst) {
        let kind = Kind::pick(&mut rng);
        let n = users.next.fetch_add(1, Ordering::SeqCst);
        let before = users.tg.bot_messages(chat).await.iter().map(|m| m.message_id).max();
        let at = users.began.elapsed();
        let text = format!("{} m{n}", kind.marker());
        let mut message = UserMessage::private_text(chat, &text);
        if kind == Kind::File {
            message.kind = MessageKind::Document;
            message.file_name = Some(format!("notes-{n}.txt"));
            message.file_content = Some(format!("the notes of m{n}\n").repeat(64).into_bytes());
        }
        users.tg.user_sends(message).await;
        let outcome = outcome(&users, chat, n, before.unwrap_or(0), &mut pressed).await;
        sent.push(Sent { n, chat, kind, at, outcome });
        let (low, high) = users.think_ms;
        tokio::time::sleep(Duration::from_millis(rng.u64(low..=high))).await;
    }
    sent
}

async fn outcome(
    users: &Users,
    chat: i64,
    n: u64,
    before: i64,
    pressed: &mut HashSet<i64>,
) -> Outcome {
    let sent = Instant::now();
    loop {
        let messages = users.tg.bot_messages(chat).await;
        if messages.iter().any(|m| number_after(&m.text, "answer m") == Some(n)) {
            return Outcome::Answered(sent.elapsed());
        }
        let newer: Vec<&BotMessage> = messages.iter().filter(|m| m.message_id > before).collect();
        for question in newer.iter().filter(|m| m.text.contains("wants to schedule")) {
            if pressed.insert(question.message_id) {
                if let Some((_, data)) = question.buttons().into_iter().next() {
                    users.tg.user_clicks(chat, chat, question.message_id, &data).await;
                }
            }
        }
        let failed = newer.iter().find(|m| {
            failure(&m.text)
                && number_after(&m.text, "answer m").is_none()
                && number_after(&m.text, "job m").is_none()
                && number_after(&m.text, "job-m").is_none()
        });
        if let Some(failed) = failed {
            return Outcome::Failed(failed.text.clone());
        }
        if sent.elapsed() > users.patience {
            return Outcome::Lost { seen: newer.iter().map(|m| m.text.clone()).collect() };
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::failure;

    #[test]
    fn interim_words_are_not_failures() {
        assert!(!failure("⏳ Working on: work for m3"));
        assert!(!failure(
            "⚠️ Task interrupted: x\nThe daemon stopped. Your request is being handled again."
        ));
        assert!(failure(
            "⚠️ Task interrupted: x\nIt is not retried: ask again if you still need it."
        ));
        assert!(!failure("⚠️ Task error in 4.0s, 428 tokens"));
        assert!(failure("Scheduled «fire job-m99» failed: the model"), "told apart by its job");
        assert!(failure("Sorry, something is wrong on my side: the model is down"));
    }
}
