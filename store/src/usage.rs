//! What the model cost and what the daemon did, counted: the per-day `llm_usage` rows of the
//! spending caps, token sums over the history, and the counts the metrics and the dashboard's
//! activity chart read.
//!
//! Why together: these only read sums over the other tables (or add to `llm_usage`); none of
//! them is a record a chat or a task keeps.

use nexbot_core::{ChatRef, Usage};

use crate::{Store, StoreError};

/// One model call (or one delegated task) to count in `llm_usage`.
#[derive(Debug, Clone, PartialEq)]
pub struct UsageRow {
    /// `YYYY-MM-DD` in the caps' time zone.
    pub day: String,
    pub chat: ChatRef,
    pub provider: String,
    /// `agent` or `task`.
    pub source: &'static str,
    pub usage: Usage,
    /// `None`: the provider has no prices.
    pub cost_micros: Option<u64>,
}

/// Sums over `llm_usage` rows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UsageSums {
    pub tokens: u64,
    pub cost_micros: u64,
    pub unpriced_calls: u64,
}

/// Token usage from a row of two sums (prompt, completion).
fn usage_sums(r: &rusqlite::Row<'_>) -> rusqlite::Result<Usage> {
    Ok(Usage {
        prompt_tokens: r.get::<_, i64>(0)? as u64,
        completion_tokens: r.get::<_, i64>(1)? as u64,
    })
}

/// One hour of [`Store::hourly_activity`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HourActivity {
    /// Unix seconds of the hour's start.
    pub start: i64,
    pub tokens: i64,
    pub tasks: i64,
}

impl Store {
    /// Tokens spent by the chat across all its sessions (prompt, completion).
    pub async fn chat_usage(&self, chat: &ChatRef) -> Result<Usage, StoreError> {
        let chat = chat.to_string();
        self.call(move |c| {
            c.query_row(
                "SELECT COALESCE(SUM(h.prompt_tokens), 0), COALESCE(SUM(h.completion_tokens), 0)
                 FROM history h JOIN sessions s ON s.id = h.session_id WHERE s.chat_id = ?1",
                [&chat],
                usage_sums,
            )
        })
        .await
    }

    /// Telegram updates by state, for metrics.
    pub async fn update_counts(&self) -> Result<Vec<(String, u64)>, StoreError> {
        self.grouped_counts("SELECT state, COUNT(*) FROM telegram_updates GROUP BY state").await
    }

    /// Task records by status, for metrics.
    pub async fn task_counts(&self) -> Result<Vec<(String, u64)>, StoreError> {
        self.grouped_counts("SELECT status, COUNT(*) FROM task_records GROUP BY status").await
    }

    /// The durations (ms) of finished tasks, for the metrics' histogram.
    pub async fn task_durations_ms(&self) -> Result<Vec<i64>, StoreError> {
        self.call(|c| {
            let mut stmt =
                c.prepare("SELECT duration_ms FROM task_records WHERE duration_ms IS NOT NULL")?;
            let rows = stmt.query_map([], |r| r.get(0))?;
            rows.collect()
        })
        .await
    }

    async fn grouped_counts(&self, sql: &'static str) -> Result<Vec<(String, u64)>, StoreError> {
        self.call(move |c| {
            let mut stmt = c.prepare(sql)?;
            let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get::<_, i64>(1)? as u64)))?;
            rows.collect()
        })
        .await
    }

    /// LLM tokens of the main agent's turns recorded since `since` (unix seconds).
    pub async fn tokens_since(&self, since: i64) -> Result<Usage, StoreError> {
        self.call(move |c| {
            c.query_row(
                "SELECT COALESCE(SUM(prompt_tokens), 0), COALESCE(SUM(completion_tokens), 0)
                 FROM history WHERE created_at >= ?1",
                [since],
                usage_sums,
            )
        })
        .await
    }

    /// The `hours` whole hours up to `now`, oldest first: the main agent's tokens (as
    /// [`Store::tokens_since`] counts them) and the delegated tasks started in each.
    pub async fn hourly_activity(
        &self,
        now: i64,
        hours: i64,
    ) -> Result<Vec<HourActivity>, StoreError> {
        let hours = hours.clamp(1, 24 * 31);
        let since = now - now.rem_euclid(3600) - (hours - 1) * 3600;
        self.call(move |c| {
            let mut out: Vec<HourActivity> = (0..hours)
                .map(|i| HourActivity { start: since + i * 3600, tokens: 0, tasks: 0 })
                .collect();
            let mut stmt = c.prepare(
                "SELECT (created_at - ?1) / 3600, SUM(prompt_tokens + completion_tokens)
                 FROM history WHERE created_at >= ?1 GROUP BY 1",
            )?;
            for row in stmt.query_map([since], |r| Ok((r.get::<_, i64>(0)?, r.get(1)?)))? {
                let (hour, tokens) = row?;
                if let Some(slot) = out.get_mut(hour as usize) {
                    slot.tokens = tokens;
                }
            }
            let mut stmt = c.prepare(
                "SELECT (started_at - ?1) / 3600, COUNT(*) FROM task_records
                 WHERE started_at >= ?1 GROUP BY 1",
            )?;
            for row in stmt.query_map([since], |r| Ok((r.get::<_, i64>(0)?, r.get(1)?)))? {
                let (hour, tasks) = row?;
                if let Some(slot) = out.get_mut(hour as usize) {
                    slot.tasks = tasks;
                }
            }
            Ok(out)
        })
        .await
    }

    /// Counts one call (or task) in `llm_usage`.
    pub async fn record_usage(&self, row: UsageRow) -> Result<(), StoreError> {
        self.call(move |c| {
            c.execute(
                "INSERT INTO llm_usage (day, chat_id, provider, source, calls, prompt_tokens,
                     completion_tokens, cost_micros, unpriced_calls)
                 VALUES (?1, ?2, ?3, ?4, 1, ?5, ?6, ?7, ?8)
                 ON CONFLICT (day, chat_id, provider, source) DO UPDATE SET
                     calls = calls + 1,
                     prompt_tokens = prompt_tokens + excluded.prompt_tokens,
                     completion_tokens = completion_tokens + excluded.completion_tokens,
                     cost_micros = cost_micros + excluded.cost_micros,
                     unpriced_calls = unpriced_calls + excluded.unpriced_calls",
                rusqlite::params![
                    row.day,
                    row.chat.to_string(),
                    row.provider,
                    row.source,
                    row.usage.prompt_tokens as i64,
                    row.usage.completion_tokens as i64,
                    row.cost_micros.unwrap_or(0) as i64,
                    i64::from(row.cost_micros.is_none()),
                ],
            )
            .map(drop)
        })
        .await
    }

    /// Sums of `llm_usage` for days in `from..=to` (`YYYY-MM-DD`), for one chat or all.
    pub async fn usage_between(
        &self,
        from: &str,
        to: &str,
        chat: Option<&ChatRef>,
    ) -> Result<UsageSums, StoreError> {
        let (from, to, chat) = (from.to_owned(), to.to_owned(), chat.map(ChatRef::to_string));
        self.call(move |c| {
            c.query_row(
                "SELECT COALESCE(SUM(prompt_tokens + completion_tokens), 0),
                        COALESCE(SUM(cost_micros), 0), COALESCE(SUM(unpriced_calls), 0)
                 FROM llm_usage WHERE day >= ?1 AND day <= ?2 AND (?3 IS NULL OR chat_id = ?3)",
                rusqlite::params![from, to, chat],
                |r| {
                    Ok(UsageSums {
                        tokens: r.get::<_, i64>(0)? as u64,
                        cost_micros: r.get::<_, i64>(1)? as u64,
                        unpriced_calls: r.get::<_, i64>(2)? as u64,
                    })
                },
            )
        })
        .await
    }
}
