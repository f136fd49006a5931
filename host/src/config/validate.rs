//! Value checks serde cannot express, section by section; each error names the key and the
//! reason (the caller adds the variable when the value came from the environment).

use std::fmt;

use super::{Config, LLM_API_KEY_ENV};

impl Config {
    /// Value checks serde cannot express; the error is (key, reason).
    pub(super) fn validate(&self) -> Result<(), (String, String)> {
        self.validate_sections().map_err(|(key, reason)| (key.to_owned(), reason))?;
        self.mcp.validate().map_err(|reason| ("mcp.servers".to_owned(), reason))?;
        for (i, server) in self.mcp.servers.iter().enumerate() {
            if let Some(room) = &server.room {
                nexbot_docker::check_mount_target(room)
                    .map_err(|why| (format!("mcp.servers[{i}].room"), why))?;
            }
        }
        if let Some((key, reason)) = self.browser.problems(&self.mcp.servers).into_iter().next() {
            return Err((key.to_owned(), reason));
        }
        if let Some((key, reason)) = self.telegram.problems().into_iter().next() {
            return Err((key.to_owned(), reason));
        }
        if let Some((key, reason)) = self.memory.problems().into_iter().next() {
            return Err((key.to_owned(), reason));
        }
        self.validate_egress()
    }

    fn validate_sections(&self) -> Result<(), (&'static str, String)> {
        self.validate_control()?;
        self.validate_agent()?;
        self.validate_llm()?;
        self.validate_search()?;
        self.validate_scheduler()?;
        self.validate_storage_and_bus()?;
        self.validate_subagent()?;
        self.validate_skills_and_logging()
    }

    /// `[control]`: the dashboard listens on loopback unless told, and needs the control API.
    fn validate_control(&self) -> Result<(), (&'static str, String)> {
        if let Some(addr) = self.control.web_addr {
            if !addr.ip().is_loopback() && !self.control.web_remote {
                return Err((
                    "control.web_addr",
                    format!(
                        "{addr} is not a loopback address: the dashboard listens on loopback \
                         only (e.g. 127.0.0.1:{}) unless control.web_remote = true (then put \
                         it behind TLS)",
                        addr.port()
                    ),
                ));
            }
            if !self.control.enabled {
                return Err((
                    "control.web_addr",
                    "the dashboard needs the control API (control.enabled = true): its login \
                     links come from `nexbot-ctl web login`"
                        .into(),
                ));
            }
        }
        Ok(())
    }

    /// `[agent]`'s limits, and the vault's.
    fn validate_agent(&self) -> Result<(), (&'static str, String)> {
        let a = &self.agent;
        range("agent.max_iterations", a.max_iterations, 1, 1000)?;
        range("agent.tool_timeout_secs", a.tool_timeout_secs, 1, 3600)?;
        range("agent.turn_timeout_secs", a.turn_timeout_secs, 1, 86_400)?;
        range("agent.ask_timeout_secs", a.ask_timeout_secs, 1, 86_400)?;
        range("agent.context_max_chars", a.context_max_chars, 1_000, 1_000_000)?;
        range("agent.history_max_messages", a.history_max_messages, 0, 1_000)?;
        range("vault.max_secrets_per_scope", self.vault.max_secrets_per_scope, 1, 10_000)?;
        crate::vault::decoys::check_names(&self.vault.decoys).map_err(|e| ("vault.decoys", e))?;
        Ok(())
    }

    /// `[llm]`: the provider(s), the caps, the time-outs and retries, the temperature.
    fn validate_llm(&self) -> Result<(), (&'static str, String)> {
        let l = &self.llm;
        if l.providers.is_empty() {
            check_url("llm.base_url", &l.base_url)?;
            if l.model.trim().is_empty() {
                return Err(("llm.model", "must not be empty".into()));
            }
        }
        for (i, spec) in l.providers.iter().enumerate() {
            spec.check(&format!("llm.providers[{i}]"))
                .map_err(|reason| ("llm.providers", reason))?;
        }
        if let Some(spec) = &l.transcription {
            spec.check("llm.transcription").map_err(|reason| ("llm.transcription", reason))?;
        }
        if let Some(spec) = &l.speech {
            spec.check("llm.speech").map_err(|reason| ("llm.speech", reason))?;
        }
        if let Some(spec) = &l.embeddings {
            spec.check("llm.embeddings").map_err(|reason| ("llm.embeddings", reason))?;
        }
        range("llm.total_timeout_secs", l.total_timeout_secs, 1, 86_400)?;
        range("llm.breaker_failures", l.breaker_failures, 1, 1_000)?;
        range("llm.breaker_cooldown_secs", l.breaker_cooldown_secs, 1, 86_400)?;
        range("llm.max_tokens", l.max_tokens(), 1, 1_000_000)?;
        let caps = &l.caps;
        for (key, usd) in [
            ("llm.caps.cost_per_day_usd", caps.cost_per_day_usd),
            ("llm.caps.cost_per_month_usd", caps.cost_per_month_usd),
        ] {
            if !usd.is_finite() || usd < 0.0 {
                return Err((key, format!("{usd} must be a number ≥ 0")));
            }
        }
        if caps.time_zone.parse::<chrono_tz::Tz>().is_err() {
            return Err((
                "llm.caps.time_zone",
                format!(
                    "{:?} is not an IANA time zone (e.g. \"UTC\", \"Europe/Berlin\")",
                    caps.time_zone
                ),
            ));
        }
        range("llm.timeout_secs", l.timeout_secs, 1, 3600)?;
        range("llm.max_retries", l.max_retries, 0, 10)?;
        range("llm.retry_initial_ms", l.retry_initial_ms, 1, 60_000)?;
        range("llm.retry_max_wait_secs", l.retry_max_wait_secs, 1, 600)?;
        if let Some(t) = l.temperature {
            if !(0.0..=2.0).contains(&t) {
                return Err(("llm.temperature", format!("{t} is out of range (allowed 0..=2)")));
            }
        }
        Ok(())
    }

    /// `[search]`: the backend, its URL and its key's secret name.
    fn validate_search(&self) -> Result<(), (&'static str, String)> {
        let search = &self.search;
        if !search.url.trim().is_empty() {
            check_url("search.url", &search.url)?;
        }
        if !matches!(search.kind.as_str(), "" | "searxng" | "brave") {
            return Err((
                "search.kind",
                format!("{:?}: use \"searxng\" or \"brave\"", search.kind),
            ));
        }
        if search.kind == "brave" && search.api_key_secret.is_empty() && !search.url.is_empty() {
            return Err((
                "search.api_key_secret",
                "the brave backend needs an API key: name an operator secret bound to its host"
                    .into(),
            ));
        }
        if !search.api_key_secret.is_empty()
            && !nexbot_protocol::secrets::is_valid_secret_name(&search.api_key_secret)
        {
            return Err(("search.api_key_secret", "use a secret name, [A-Z_][A-Z0-9_]*".into()));
        }
        Ok(())
    }

    /// `[scheduler]`'s limits and time zone.
    fn validate_scheduler(&self) -> Result<(), (&'static str, String)> {
        let sch = &self.scheduler;
        range("scheduler.workers", sch.workers, 1, 256)?;
        range("scheduler.queue", sch.queue, 0, 100_000)?;
        range("scheduler.late_secs", sch.late_secs, 1, 86_400)?;
        range("scheduler.missed_window_secs", sch.missed_window_secs, 1, 365 * 86_400)?;
        range("scheduler.job_token_budget", sch.job_token_budget, 1, 1_000_000_000)?;
        if !sch.time_zone.is_empty() && sch.time_zone.parse::<chrono_tz::Tz>().is_err() {
            return Err((
                "scheduler.time_zone",
                format!(
                    "{:?} is not an IANA time zone (e.g. \"UTC\", \"Europe/Berlin\")",
                    sch.time_zone
                ),
            ));
        }
        Ok(())
    }

    /// `[storage]`'s database and `[bus]`'s capacities.
    fn validate_storage_and_bus(&self) -> Result<(), (&'static str, String)> {
        if self.storage.database.as_os_str().is_empty() {
            return Err(("storage.database", "must not be empty".into()));
        }
        let b = &self.bus;
        range("bus.inbound_capacity", b.inbound_capacity, 1, 100_000)?;
        range("bus.outbound_capacity", b.outbound_capacity, 1, 100_000)?;
        range("bus.per_chat_queue", b.per_chat_queue, 1, 10_000)?;
        range("bus.max_parallel_turns", b.max_parallel_turns, 1, 1_000)?;
        Ok(())
    }

    /// `[subagent]`: the image and the pool's limits (as the pool checks them, named by
    /// `[subagent]`'s keys).
    fn validate_subagent(&self) -> Result<(), (&'static str, String)> {
        let s = &self.subagent;
        if s.image.trim().is_empty() {
            return Err(("subagent.image", "must not be empty".into()));
        }
        range("subagent.pool_size", s.pool_size, 1, 64)?;
        range("subagent.task_timeout_secs", s.task_timeout_secs, 1, 86_400)?;
        range("subagent.max_blocked_commands", s.max_blocked_commands, 1, 100)?;
        let most = nexbot_protocol::MAX_SEARCH_BUDGET;
        range("subagent.search_budget", s.search_budget, 1, most)?;
        range("subagent.max_containers_per_chat", s.max_containers_per_chat, 0, 64)?;
        range("subagent.chat_idle_secs", s.chat_idle_secs, 1, 7 * 86_400)?;
        if let Err(invalid) = self.sandbox.check() {
            return Err(match invalid.field.as_str() {
                "runtime" => ("sandbox.runtime", invalid.reason),
                _ => ("sandbox.engine", invalid.reason),
            });
        }
        if let Err(invalid) = self.pool_config().check() {
            // The pool's fields that `[subagent]` sets have their own key names there.
            let key = match invalid.field.as_str() {
                "name" => Some("subagent.pool_name"),
                "size" => Some("subagent.pool_size"),
                "network" => Some("subagent.network"),
                "image" => Some("subagent.image"),
                "skills_dir" => Some("subagent.skills_dir"),
                "default_task_timeout_secs" => Some("subagent.task_timeout_secs"),
                _ => None,
            };
            return Err(match key {
                Some(key) => (key, invalid.reason),
                // A pool field `[subagent]` does not set (a default): named as the pool's.
                None => ("subagent", invalid.to_string()),
            });
        }
        Ok(())
    }

    /// `[skills]`' folder, allowed hashes and debounce; `[logging]`'s format and level.
    fn validate_skills_and_logging(&self) -> Result<(), (&'static str, String)> {
        let k = &self.skills;
        if k.dir.as_ref().is_some_and(|dir| !dir.is_absolute()) {
            return Err(("skills.dir", "must be an absolute path".into()));
        }
        if let Some(bad) = k.allow_hashes.iter().find(|h| {
            !h.strip_prefix("sha256:").is_some_and(|hex| {
                hex.len() == 64 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
            })
        }) {
            return Err((
                "skills.allow_hashes",
                format!("{bad:?} is not \"sha256:<64 lower-case hex>\""),
            ));
        }
        range("skills.debounce_ms", k.debounce_ms, 10, 10_000)?;
        if !matches!(self.logging.format.as_str(), "text" | "json") {
            return Err((
                "logging.format",
                format!("{:?} is not one of \"text\", \"json\"", self.logging.format),
            ));
        }
        if self.logging.level.parse::<tracing_subscriber::EnvFilter>().is_err() {
            return Err((
                "logging.level",
                format!("{:?} is not a valid filter", self.logging.level),
            ));
        }
        Ok(())
    }

    /// `[egress]` as it will run (the provider URL filled in from `[llm]`).
    fn validate_egress(&self) -> Result<(), (String, String)> {
        let relay = &self.egress.relay;
        if relay.api_key_env.contains("__") {
            return Err((
                "egress.relay.api_key_env".into(),
                format!(
                    "{:?} looks like a config override (NEXBOT_SECTION__KEY); name a plain \
                     variable such as {LLM_API_KEY_ENV}",
                    relay.api_key_env
                ),
            ));
        }
        self.egress_config().validate().map_err(|e| match (e.field, &relay.provider_base_url) {
            // The URL came from `[llm]`: name that key rather than one that is not set.
            ("relay.provider_base_url", None) => (
                "llm.base_url".to_owned(),
                format!("cannot be the LLM relay's provider: {}", e.reason),
            ),
            ("relay.providers", None) if relay.providers.is_empty() => (
                "llm.providers".to_owned(),
                format!(
                    "cannot be the LLM relay's providers: {}",
                    e.reason.replace("relay.providers", "llm.providers")
                ),
            ),
            (field, _) => (format!("egress.{field}"), e.reason),
        })
    }
}

/// `Err` unless `min <= value <= max`, naming `key`.
fn range<T: PartialOrd + fmt::Display + Copy>(
    key: &'static str,
    value: T,
    min: T,
    max: T,
) -> Result<(), (&'static str, String)> {
    if value < min || value > max {
        return Err((key, format!("{value} is out of range (allowed {min}..={max})")));
    }
    Ok(())
}

fn check_url(key: &'static str, url: &str) -> Result<(), (&'static str, String)> {
    let parsed =
        reqwest::Url::parse(url).map_err(|e| (key, format!("{url:?} is not a URL: {e}")))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err((key, format!("{url:?} must start with http:// or https://")));
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        let instead = if key.starts_with("search.") {
            "name an operator secret in search.api_key_secret".to_owned()
        } else {
            format!("put the key in {LLM_API_KEY_ENV}")
        };
        return Err((key, format!("must not carry credentials; {instead}")));
    }
    Ok(())
}
