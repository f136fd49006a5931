//! The approvals' rows: every question asked (an egress destination, a `--confirm` secret, a
//! file to send or delete) with its answer and who gave it, and the chats' "always" egress
//! rules that survive restarts (tables `egress_questions`, `egress_rules`; migrations 9 and 11).
//!
//! Why a module: the approvals (`nexbot-approvals`, `approvals/src/lib.rs`) are their only
//! writer; kept in one block so the store can move.

use rusqlite::{params, OptionalExtension};

use nexbot_core::ChatRef;

use crate::{unix_now, Store, StoreError};

/// An "always for this chat" egress rule (`egress_rules`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EgressRuleRow {
    pub chat: String,
    pub host: String,
    pub port: u16,
    pub created_at: i64,
    pub created_by: String,
}

/// One question as recorded (`egress_questions`; an egress destination, or since schema 10
/// another kind). A step's row has an empty task, host and method, and port 0.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EgressQuestionRow {
    pub id: i64,
    pub task_id: String,
    pub chat: String,
    pub host: String,
    pub port: u16,
    pub method: String,
    pub path: Option<String>,
    pub secret: bool,
    pub asked_at: i64,
    /// `once`, `task`, `chat`, `deny`, `no answer` or `expired`; `None` while it waits.
    pub answer: Option<String>,
    pub answered_by: Option<String>,
    /// `egress`, `secret`, `send_file` or `delete`.
    pub kind: String,
    /// A `secret` question's secret name; a step's file.
    pub subject: Option<String>,
}

impl Store {
    /// Records a question being asked; returns its id (unique across restarts).
    pub async fn record_egress_question(
        &self,
        question: EgressQuestionRow,
    ) -> Result<i64, StoreError> {
        self.call(move |c| {
            c.execute(
                "INSERT INTO egress_questions
                 (task_id, chat_id, host, port, method, path, secret, asked_at, kind, subject)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
                params![
                    question.task_id,
                    question.chat,
                    question.host,
                    question.port,
                    question.method,
                    question.path,
                    question.secret,
                    question.asked_at,
                    question.kind,
                    question.subject
                ],
            )?;
            Ok(c.last_insert_rowid())
        })
        .await
    }

    /// Records the answer of a waiting question (a question answered already keeps its
    /// first answer); returns whether it was waiting.
    pub async fn answer_egress_question(
        &self,
        id: i64,
        answer: &str,
        by: &str,
    ) -> Result<bool, StoreError> {
        let (answer, by) = (answer.to_owned(), by.to_owned());
        self.call(move |c| {
            c.execute(
                "UPDATE egress_questions SET answer = ?2, answered_by = ?3, answered_at = ?4
                 WHERE id = ?1 AND answer IS NULL",
                params![id, answer, by, unix_now()],
            )
            .map(|n| n > 0)
        })
        .await
    }

    /// Marks every question still waiting as `expired` (the daemon stopped, or stopped
    /// without saying so); returns how many.
    pub async fn expire_egress_questions(&self) -> Result<usize, StoreError> {
        self.call(|c| {
            c.execute(
                "UPDATE egress_questions SET answer = 'expired', answered_by = 'daemon',
                 answered_at = ?1 WHERE answer IS NULL",
                params![unix_now()],
            )
        })
        .await
    }

    /// The questions of one task, oldest first (its receipt lists them).
    pub async fn egress_questions_of(
        &self,
        task_id: &str,
    ) -> Result<Vec<EgressQuestionRow>, StoreError> {
        let task_id = task_id.to_owned();
        self.call(move |c| {
            let mut stmt = c.prepare(
                "SELECT id, task_id, chat_id, host, port, method, path, secret, asked_at,
                 answer, answered_by, kind, subject FROM egress_questions WHERE task_id = ?1
                 ORDER BY id",
            )?;
            let rows = stmt.query_map(params![task_id], |r| {
                Ok(EgressQuestionRow {
                    id: r.get(0)?,
                    task_id: r.get(1)?,
                    chat: r.get(2)?,
                    host: r.get(3)?,
                    port: r.get(4)?,
                    method: r.get(5)?,
                    path: r.get(6)?,
                    secret: r.get(7)?,
                    asked_at: r.get(8)?,
                    answer: r.get(9)?,
                    answered_by: r.get(10)?,
                    kind: r.get(11)?,
                    subject: r.get(12)?,
                })
            })?;
            rows.collect()
        })
        .await
    }

    /// Adds (or renews) a chat's "always" rule.
    pub async fn add_egress_rule(
        &self,
        chat: &ChatRef,
        host: &str,
        port: u16,
        by: &str,
    ) -> Result<(), StoreError> {
        let (chat, host, by) = (chat.to_string(), host.to_owned(), by.to_owned());
        self.call(move |c| {
            c.execute(
                "INSERT INTO egress_rules (chat_id, host, port, created_at, created_by)
                 VALUES (?1, ?2, ?3, ?4, ?5)
                 ON CONFLICT (chat_id, host, port) DO UPDATE SET created_at = excluded.created_at,
                 created_by = excluded.created_by",
                params![chat, host, port, unix_now(), by],
            )
            .map(drop)
        })
        .await
    }

    /// Whether the chat has an "always" rule for `host` on `port`.
    pub async fn has_egress_rule(
        &self,
        chat: &ChatRef,
        host: &str,
        port: u16,
    ) -> Result<bool, StoreError> {
        let (chat, host) = (chat.to_string(), host.to_owned());
        self.call(move |c| {
            c.query_row(
                "SELECT 1 FROM egress_rules WHERE chat_id = ?1 AND host = ?2 AND port = ?3",
                params![chat, host, port],
                |_| Ok(()),
            )
            .optional()
            .map(|found| found.is_some())
        })
        .await
    }

    /// The "always" rules, of one chat or all, by chat then host.
    pub async fn egress_rules(&self, chat: Option<&str>) -> Result<Vec<EgressRuleRow>, StoreError> {
        let chat = chat.map(str::to_owned);
        self.call(move |c| {
            let mut stmt = c.prepare(
                "SELECT chat_id, host, port, created_at, created_by FROM egress_rules
                 WHERE ?1 IS NULL OR chat_id = ?1 ORDER BY chat_id, host, port",
            )?;
            let rows = stmt.query_map(params![chat], |r| {
                Ok(EgressRuleRow {
                    chat: r.get(0)?,
                    host: r.get(1)?,
                    port: r.get(2)?,
                    created_at: r.get(3)?,
                    created_by: r.get(4)?,
                })
            })?;
            rows.collect()
        })
        .await
    }

    /// Removes a chat's "always" rule; returns whether there was one.
    pub async fn remove_egress_rule(
        &self,
        chat: &str,
        host: &str,
        port: u16,
    ) -> Result<bool, StoreError> {
        let (chat, host) = (chat.to_owned(), host.to_owned());
        self.call(move |c| {
            c.execute(
                "DELETE FROM egress_rules WHERE chat_id = ?1 AND host = ?2 AND port = ?3",
                params![chat, host, port],
            )
            .map(|n| n > 0)
        })
        .await
    }
}
