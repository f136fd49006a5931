//! `[scheduler]` of the daemon's `config.toml`: the scheduler's own section (the host's
//! config holds it and checks its ranges when it loads).

use nexbot_agent::config::CapsConfig;
use serde::{Deserialize, Serialize};

/// `[scheduler]`: jobs (recurring and one-shot) and the `HEARTBEAT.md` checks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SchedulerConfig {
    /// Run due jobs and heartbeat checks.
    pub enabled: bool,
    /// The time zone of jobs created without one; empty: `llm.caps.time_zone`.
    pub time_zone: String,
    /// Job runs (agent turns) at once.
    pub workers: usize,
    /// Runs waiting for a worker; one more is recorded as `dropped: busy`.
    pub queue: usize,
    /// A run found this many seconds after its time counts as missed (the daemon was down
    /// or stalled) and follows the job's policy (`skip` or `once`).
    pub late_secs: u64,
    /// `once`: a missed run older than this is skipped too.
    pub missed_window_secs: u64,
    /// Tokens one run of a job may use (the agent's and its delegated tasks') when the job
    /// names no budget of its own; a run that passes it is stopped and recorded
    /// `over budget`. A chat's assistant may give its jobs less, never more.
    pub job_token_budget: u64,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            time_zone: String::new(),
            workers: 2,
            queue: 32,
            late_secs: 30,
            missed_window_secs: 86_400,
            job_token_budget: 100_000,
        }
    }
}

impl SchedulerConfig {
    /// The jobs' default time zone (validated with the config).
    pub fn default_zone(&self, caps: &CapsConfig) -> chrono_tz::Tz {
        let name = if self.time_zone.is_empty() { &caps.time_zone } else { &self.time_zone };
        name.parse().unwrap_or(chrono_tz::Tz::UTC)
    }
}
