//! Spending caps: tokens per day (overall and per chat), cost per day and per month.
//!
//! Why reservations: a cap checked before a call and charged after lets every concurrent call
//! through. Each call reserves its worst case first — the prompt estimated as bytes ÷ 3
//! ([`nexbot_llm::context::estimate_tokens`]) plus `max_tokens`, and that priced at the
//! dearest provider of the chain — on every cap that applies (`nexbot_llm::budget`); the call
//! is refused, before it is sent, when one would be passed. After the call the reservation
//! becomes what the provider reported. Delegated tasks count too: the relay's per-task budget
//! is cut to what the chat has left today ([`Spend::task_budget`]) and what a task used is
//! charged when it ends ([`Spend::charge_task`]).
//!
//! A provider without prices under a cost cap is "unpriced": refused, or allowed and shown as
//! unpriced (`llm.caps.unpriced`) — never counted as $0. Days and months are those of
//! `llm.caps.time_zone`; every call is also written to the `llm_usage` table, so the counts
//! survive a restart.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use chrono::{Datelike, NaiveDate, Utc};
use chrono_tz::Tz;
use nexbot_core::ChatRef;
use nexbot_llm::budget::{Allowance, Exceeded, Holds};
use nexbot_llm::TaskCost;
use nexbot_llm::Usage;

use crate::config::{CapsConfig, Unpriced};
use crate::store::{Store, UsageRow};
pub use nexbot_core::SpendSummary;

/// Today's and this month's allowances.
#[derive(Debug)]
struct Period {
    day: NaiveDate,
    tokens_day: Arc<Allowance>,
    cost_day: Arc<Allowance>,
    cost_month: Arc<Allowance>,
    chats: HashMap<ChatRef, Arc<Allowance>>,
    unpriced_calls: u64,
}

/// The caps and what counts against them.
#[derive(Debug)]
pub struct Spend {
    caps: CapsConfig,
    tz: Tz,
    store: Store,
    period: Mutex<Option<Period>>,
}

/// A call's reservation: settle it with what the call cost.
#[derive(Debug)]
pub struct Reservation {
    holds: Holds,
    chat: ChatRef,
    day: String,
    /// Which holds are cost holds (settled in micro-dollars).
    costs: usize,
}

impl Reservation {
    /// The call was never answered (providers do not bill failures): nothing is charged.
    pub fn release(self) {
        self.holds.release();
    }
}

fn usd_to_micros(usd: f64) -> u64 {
    (usd * 1e6).round() as u64
}

fn micros_to_usd(micros: u64) -> f64 {
    micros as f64 / 1e6
}

/// A cap as a setting: 0 is none.
fn cap(value: u64) -> Option<u64> {
    (value > 0).then_some(value)
}

impl Spend {
    /// `caps.time_zone` was validated with the config.
    pub fn new(caps: CapsConfig, store: Store) -> Arc<Self> {
        let tz = caps.time_zone.parse().unwrap_or(Tz::UTC);
        Arc::new(Self { caps, tz, store, period: Mutex::new(None) })
    }

    fn today(&self) -> NaiveDate {
        Utc::now().with_timezone(&self.tz).date_naive()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Period>> {
        self.period.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The current period, read back from the database when the day (or the daemon) is new.
    async fn period(&self) -> Result<(), String> {
        let today = self.today();
        if self.lock().as_ref().is_some_and(|p| p.day == today) {
            return Ok(());
        }
        let day = today.to_string();
        let month_start = today.with_day(1).unwrap_or(today).to_string();
        let err = |e: crate::store::StoreError| format!("cannot read today's spending: {e}");
        let today_sums = self.store.usage_between(&day, &day, None).await.map_err(err)?;
        let month_sums = self.store.usage_between(&month_start, &day, None).await.map_err(err)?;
        let caps = &self.caps;
        let usd_cap = |usd: f64| (usd > 0.0).then(|| usd_to_micros(usd));
        let period = Period {
            day: today,
            tokens_day: Allowance::new(cap(caps.tokens_per_day), "llm.caps.tokens_per_day")
                .with_used(today_sums.tokens),
            cost_day: Allowance::new(usd_cap(caps.cost_per_day_usd), "llm.caps.cost_per_day_usd")
                .with_used(today_sums.cost_micros),
            cost_month: Allowance::new(
                usd_cap(caps.cost_per_month_usd),
                "llm.caps.cost_per_month_usd",
            )
            .with_used(month_sums.cost_micros),
            chats: HashMap::new(),
            unpriced_calls: today_sums.unpriced_calls,
        };
        let mut slot = self.lock();
        if slot.as_ref().is_none_or(|p| p.day != today) {
            *slot = Some(period);
        }
        Ok(())
    }

    async fn chat_allowance(&self, chat: &ChatRef) -> Result<Arc<Allowance>, String> {
        self.period().await?;
        if let Some(found) = self.lock().as_ref().and_then(|p| p.chats.get(chat).cloned()) {
            return Ok(found);
        }
        let day = self.today().to_string();
        let used = self
            .store
            .usage_between(&day, &day, Some(chat))
            .await
            .map_err(|e| format!("cannot read today's spending: {e}"))?
            .tokens;
        let mut slot = self.lock();
        let Some(period) = slot.as_mut() else { return Err("no spending period".into()) };
        Ok(period
            .chats
            .entry(chat.to_owned())
            .or_insert_with(|| {
                Allowance::new(cap(self.caps.chat_tokens_per_day), "llm.caps.chat_tokens_per_day")
                    .with_used(used)
            })
            .clone())
    }

    /// Reserves a call's worst case: `tokens` (prompt estimate + `max_tokens`) and, when the
    /// chain is priced, `cost_micros` (`None`: a provider of the chain has no prices). The
    /// error is the sentence the user reads.
    pub async fn reserve(
        &self,
        chat: &ChatRef,
        tokens: u64,
        cost_micros: Option<u64>,
    ) -> Result<Reservation, String> {
        let chat = chat.clone();
        let chat_allowance = self.chat_allowance(&chat).await?;
        let (tokens_day, cost_day, cost_month, day) = {
            let slot = self.lock();
            let p = slot.as_ref().ok_or("no spending period")?;
            (p.tokens_day.clone(), p.cost_day.clone(), p.cost_month.clone(), p.day.to_string())
        };
        let mut wanted = vec![(tokens_day, tokens), (chat_allowance, tokens)];
        let mut costs = 0;
        if self.caps.has_cost_cap() {
            match cost_micros {
                Some(cost) => {
                    wanted.push((cost_day, cost));
                    wanted.push((cost_month, cost));
                    costs = 2;
                }
                None if self.caps.unpriced == Unpriced::Refuse => {
                    return Err(
                        "a cost cap is set and the model has no price (set the provider's \
                         input_price_per_mtok and output_price_per_mtok, or \
                         llm.caps.unpriced = \"allow\")"
                            .into(),
                    );
                }
                None => {}
            }
        }
        let holds = Holds::reserve(wanted).map_err(|e| describe(&e))?;
        Ok(Reservation { holds, chat, day, costs })
    }

    /// The call was answered by `provider` with `usage`, costing `cost_micros` (`None`:
    /// unpriced).
    pub async fn settle(
        &self,
        reservation: Reservation,
        provider: &str,
        usage: Usage,
        cost_micros: Option<u64>,
    ) {
        let Reservation { holds, chat, day, costs } = reservation;
        let tokens = usage.total();
        let cost = cost_micros.unwrap_or(0);
        holds.settle(|i| if i >= 2 && costs > 0 { cost } else { tokens });
        if cost_micros.is_none() {
            if let Some(p) = self.lock().as_mut() {
                p.unpriced_calls += 1;
            }
        }
        self.record(UsageRow {
            day,
            chat,
            provider: provider.to_owned(),
            source: "agent",
            usage,
            cost_micros,
        })
        .await;
    }

    async fn record(&self, row: UsageRow) {
        if let Err(e) = self.store.record_usage(row).await {
            tracing::error!(error = %e, "cannot record LLM usage (the caps still count it until restart)");
        }
    }

    /// The most a delegated task of `chat` may use now: the relay budget `wanted`, cut to
    /// what the token caps have left today.
    pub async fn task_budget(&self, chat: &ChatRef, wanted: u64) -> Result<u64, String> {
        let chat_allowance = self.chat_allowance(chat).await?;
        let tokens_day = self.lock().as_ref().map(|p| p.tokens_day.clone());
        let mut budget = wanted;
        for allowance in [Some(chat_allowance), tokens_day].into_iter().flatten() {
            if let Some(cap) = allowance.cap() {
                let c = allowance.counts();
                budget = budget.min(cap.saturating_sub(c.used + c.reserved));
            }
        }
        if budget == 0 {
            return Err("today's token cap is used up (llm.caps), so no task can start".into());
        }
        Ok(budget)
    }

    /// A delegated task of `chat` used `tokens` through the relay, costing `cost` by the
    /// answering providers' prices (`None`: not through the relay, so unpriced). Its money
    /// counts against `cost_per_day_usd` and the monthly cap like the main agent's.
    pub async fn charge_task(&self, chat: &ChatRef, tokens: u64, cost: Option<TaskCost>) {
        if tokens == 0 {
            return;
        }
        let Ok(chat_allowance) = self.chat_allowance(chat).await else { return };
        chat_allowance.charge(tokens);
        // Priced only when every call of the task was: an unpriced call makes the whole
        // task unpriced (its money is not known), as a call of the main agent would be.
        let micros = cost.filter(|c| c.unpriced_calls == 0).map(|c| c.micros);
        let day = {
            let slot = self.lock();
            let Some(p) = slot.as_ref() else { return };
            p.tokens_day.charge(tokens);
            if let Some(micros) = micros.filter(|m| *m > 0) {
                p.cost_day.charge(micros);
                p.cost_month.charge(micros);
            }
            p.day.to_string()
        };
        self.record(UsageRow {
            day,
            chat: chat.clone(),
            provider: "relay".into(),
            source: "task",
            usage: Usage { prompt_tokens: 0, completion_tokens: tokens },
            cost_micros: micros,
        })
        .await;
    }

    /// Today's figures against the caps; `chat` adds that chat's.
    pub async fn summary(&self, chat: Option<&ChatRef>) -> SpendSummary {
        let chat_tokens = match chat {
            Some(chat) => self.chat_allowance(chat).await.ok(),
            None => {
                let _ = self.period().await;
                None
            }
        };
        let slot = self.lock();
        let Some(p) = slot.as_ref() else { return SpendSummary::default() };
        let caps = &self.caps;
        let usd_cap = |usd: f64| (usd > 0.0).then_some(usd);
        SpendSummary {
            day: p.day.to_string(),
            tokens_today: p.tokens_day.counts().used,
            tokens_per_day_cap: cap(caps.tokens_per_day),
            chat_tokens_today: chat_tokens.map(|a| a.counts().used),
            chat_tokens_per_day_cap: chat.and(cap(caps.chat_tokens_per_day)),
            cost_today_usd: micros_to_usd(p.cost_day.counts().used),
            cost_per_day_cap_usd: usd_cap(caps.cost_per_day_usd),
            cost_month_usd: micros_to_usd(p.cost_month.counts().used),
            cost_per_month_cap_usd: usd_cap(caps.cost_per_month_usd),
            unpriced_calls_today: p.unpriced_calls,
        }
    }
}

/// A refusal in the user's words, money in dollars.
fn describe(e: &Exceeded) -> String {
    let money = e.what.starts_with("llm.caps.cost");
    let amount =
        |v: u64| if money { format!("${:.4}", micros_to_usd(v)) } else { format!("{v} tokens") };
    let period = if e.what.ends_with("month_usd") { "this month's" } else { "today's" };
    format!(
        "{period} cap of {} ({}) would be passed: {} used, {} held by calls in flight, this call may need up to {}",
        amount(e.cap),
        e.what,
        amount(e.used),
        amount(e.reserved),
        amount(e.asked)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_db() -> std::path::PathBuf {
        std::env::temp_dir().join(format!("nxh-spend-{}", uuid::Uuid::new_v4())).join("t.db")
    }

    async fn spend(caps: CapsConfig) -> Arc<Spend> {
        Spend::new(caps, Store::open(&temp_db()).await.unwrap())
    }

    #[tokio::test]
    async fn four_concurrent_calls_at_the_edge() {
        let caps = CapsConfig { chat_tokens_per_day: 1_000, ..CapsConfig::default() };
        let spend = spend(caps).await;
        let chat = ChatRef::Console("c".into());
        let results =
            futures_util::future::join_all((0..4).map(|_| spend.reserve(&chat, 300, None))).await;
        assert_eq!(results.iter().filter(|r| r.is_ok()).count(), 3);
        let refusal = results.iter().find_map(|r| r.as_ref().err()).unwrap();
        assert!(refusal.contains("llm.caps.chat_tokens_per_day"), "{refusal}");
        // Another chat is not affected by this chat's cap.
        assert!(spend.reserve(&ChatRef::Console("other".into()), 300, None).await.is_ok());
    }

    #[tokio::test]
    async fn settled_usage_survives_a_restart_and_unpriced_is_not_zero() {
        let path = temp_db();
        let caps = CapsConfig {
            tokens_per_day: 100,
            cost_per_day_usd: 1.0,
            unpriced: Unpriced::Allow,
            ..CapsConfig::default()
        };
        let chat = ChatRef::Console("c".into());
        {
            let spend = Spend::new(caps.clone(), Store::open(&path).await.unwrap());
            let r = spend.reserve(&chat, 60, Some(500_000)).await.unwrap();
            let usage = Usage { prompt_tokens: 30, completion_tokens: 10 };
            spend.settle(r, "p", usage, Some(250_000)).await;
            let r = spend.reserve(&chat, 10, None).await.unwrap();
            spend.settle(r, "free", Usage { prompt_tokens: 5, completion_tokens: 5 }, None).await;
        }
        let spend = Spend::new(caps.clone(), Store::open(&path).await.unwrap());
        let s = spend.summary(Some(&chat)).await;
        assert_eq!((s.tokens_today, s.chat_tokens_today), (50, Some(50)));
        assert_eq!((s.cost_today_usd, s.unpriced_calls_today), (0.25, 1));
        assert!(s.render().contains("+1 unpriced"), "{}", s.render());
        let err = spend.reserve(&chat, 51, Some(1)).await.unwrap_err();
        assert!(err.contains("llm.caps.tokens_per_day") && err.contains("50 tokens used"), "{err}");
        let err = spend.reserve(&chat, 1, Some(800_000)).await.unwrap_err();
        assert!(err.contains("$") && err.contains("cost_per_day_usd"), "{err}");
        // Refuse mode: an unpriced model under a cost cap is refused.
        let refuse = Spend::new(
            CapsConfig { unpriced: Unpriced::Refuse, ..caps },
            Store::open(&path).await.unwrap(),
        );
        assert!(refuse.reserve(&chat, 1, None).await.unwrap_err().contains("no price"));
        // Tasks: the budget is cut to what is left, and their use is charged.
        assert_eq!(spend.task_budget(&chat, 1_000).await.unwrap(), 50);
        spend.charge_task(&chat, 50, None).await;
        assert!(spend.task_budget(&chat, 1_000).await.is_err());
    }

    /// A delegated task's money, priced by the relay, counts against the cost caps and is
    /// kept across a restart; a task with an unpriced call is counted unpriced instead.
    #[tokio::test]
    async fn a_tasks_relayed_cost_counts_against_the_cost_caps() {
        let path = std::env::temp_dir().join(format!("nxh-spend-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&path).unwrap();
        let path = path.join("t.db");
        let caps = CapsConfig { cost_per_day_usd: 1.0, ..CapsConfig::default() };
        let chat = ChatRef::Telegram(7);
        let spend = Spend::new(caps.clone(), Store::open(&path).await.unwrap());
        let priced = TaskCost { micros: 600_000, unpriced_calls: 0 };
        spend.charge_task(&chat, 1_000, Some(priced)).await;
        let s = spend.summary(Some(&chat)).await;
        assert_eq!((s.cost_today_usd, s.unpriced_calls_today), (0.6, 0));
        // The next call that would pass $1.00 is refused: the task's money counted.
        let err = spend.reserve(&chat, 1, Some(500_000)).await.unwrap_err();
        assert!(err.contains("cost_per_day_usd"), "{err}");
        let mixed = TaskCost { micros: 100_000, unpriced_calls: 1 };
        spend.charge_task(&chat, 10, Some(mixed)).await;
        drop(spend);
        let spend = Spend::new(caps, Store::open(&path).await.unwrap());
        let s = spend.summary(Some(&chat)).await;
        assert_eq!((s.cost_today_usd, s.unpriced_calls_today), (0.6, 1), "kept across a restart");
    }
}
