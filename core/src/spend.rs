//! The LLM spending against the caps, as the spend keeper counts it (`nexbot-agent`) and
//! `/status`, the control API and `nexbot-ctl status` show it.
//!
//! Why here: the agent computes it and the operator's API carries it; neither should depend on
//! the other to agree on one type.

use serde::{Deserialize, Serialize};

/// What `/status` and `nexbot-ctl status` show.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SpendSummary {
    pub day: String,
    pub tokens_today: u64,
    pub tokens_per_day_cap: Option<u64>,
    pub chat_tokens_today: Option<u64>,
    pub chat_tokens_per_day_cap: Option<u64>,
    pub cost_today_usd: f64,
    pub cost_per_day_cap_usd: Option<f64>,
    pub cost_month_usd: f64,
    pub cost_per_month_cap_usd: Option<f64>,
    /// Calls today to providers without prices (their cost is unknown, not zero).
    pub unpriced_calls_today: u64,
}

impl SpendSummary {
    /// One or two lines for a chat.
    pub fn render(&self) -> String {
        let cap = |cap: Option<u64>| cap.map(|c| format!(" of {c}")).unwrap_or_default();
        let usd_cap = |cap: Option<f64>| cap.map(|c| format!(" of ${c:.2}")).unwrap_or_default();
        let mut out = format!(
            "Spend today ({}): {} tokens{}",
            self.day,
            self.tokens_today,
            cap(self.tokens_per_day_cap)
        );
        if let Some(chat) = self.chat_tokens_today {
            out.push_str(&format!("; this chat {chat}{}", cap(self.chat_tokens_per_day_cap)));
        }
        out.push_str(&format!(
            "; ${:.4}{} today, ${:.4}{} this month",
            self.cost_today_usd,
            usd_cap(self.cost_per_day_cap_usd),
            self.cost_month_usd,
            usd_cap(self.cost_per_month_cap_usd)
        ));
        if self.unpriced_calls_today > 0 {
            out.push_str(&format!(" (+{} unpriced calls)", self.unpriced_calls_today));
        }
        out
    }
}
