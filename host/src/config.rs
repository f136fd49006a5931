//! The daemon's configuration: one TOML file, overridable key by key from `NEXBOT_*`
//! environment variables, with secrets taken from the environment only.
//!
//! Why it is strict: a typo in a config key silently falling back to a default is how an
//! operator ends up with a sandbox or limit they did not ask for. Unknown keys and bad values
//! are refused at start, and the error names the key (and the variable, when it came from the
//! environment) and the reason.
//!
//! Environment mapping: `NEXBOT_<SECTION>__<KEY>` (double underscore between section and key,
//! case-insensitive) overrides `[section] key`, e.g. `NEXBOT_LLM__MODEL=gpt-4o-mini` or
//! `NEXBOT_AGENT__MAX_ITERATIONS=30`; nested tables add a level per `__`
//! (`NEXBOT_EGRESS__PROXY__ALLOW_DOMAINS` is `[egress.proxy] allow_domains`). The value is read
//! as a TOML literal (`30`, `true`, `["a","b"]`, `[{ cidr = "10.0.0.5" }]`), and as a plain
//! string when it is not one. Secrets have fixed names and no `__`: [`LLM_API_KEY_ENV`],
//! [`TELEGRAM_TOKEN_ENV`], [`MASTER_KEY_ENV`]; the relay's provider key is the variable named
//! by `egress.relay.api_key_env` (by default the same [`LLM_API_KEY_ENV`]).

use std::fmt;
use std::path::{Path, PathBuf};

use secrecy::SecretString;
use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::egress::EgressConfig;
pub use nexbot_agent::config::{
    AgentConfig, CapsConfig, LlmConfig, MemoryConfig, Unpriced, DEFAULT_MAX_TOKENS, LLM_API_KEY_ENV,
};
pub use nexbot_scheduler::SchedulerConfig;
pub use nexbot_telegram::TelegramConfig;
pub use nexbot_vault::VaultConfig;

/// The Telegram bot token.
pub const TELEGRAM_TOKEN_ENV: &str = "NEXBOT_TELEGRAM_TOKEN";
/// The key that encrypts stored per-chat secrets.
pub const MASTER_KEY_ENV: &str = "NEXBOT_MASTER_KEY";
/// Prefix of the per-key overrides (`NEXBOT_SECTION__KEY`).
pub const ENV_PREFIX: &str = "NEXBOT_";

/// The whole configuration. `Default` is the safe configuration the generated file documents.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    pub workspace: WorkspaceConfig,
    pub agent: AgentConfig,
    pub llm: LlmConfig,
    pub storage: StorageConfig,
    pub bus: BusConfig,
    /// Scheduled jobs and the heartbeat.
    pub scheduler: SchedulerConfig,
    pub subagent: SubagentConfig,
    /// Which engine makes the sandboxes, and behind which wall (OCI runtime, e.g. gVisor).
    pub sandbox: nexbot_docker::SandboxConfig,
    /// The sandbox's way out: egress proxy and LLM relay (used only with delegation on).
    pub egress: EgressConfig,
    /// The Telegram channel (it runs when `NEXBOT_TELEGRAM_TOKEN` is set).
    pub telegram: TelegramConfig,
    /// The control API and metrics.
    pub control: ControlConfig,
    /// Skills: where the daemon reads them, and content the operator allowed.
    pub skills: SkillsConfig,
    /// The web search backend of the subagents' `search_web`.
    pub search: SearchConfig,
    /// The secrets vault's limits.
    pub vault: VaultConfig,
    /// MCP servers, each in its own sandbox container (`[[mcp.servers]]`).
    pub mcp: nexbot_mcp::McpConfig,
    /// Each chat's long-term memory.
    pub memory: MemoryConfig,
    pub logging: LoggingConfig,
    /// Filled from the environment only; never read from or written to the file.
    #[serde(skip)]
    pub secrets: Secrets,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WorkspaceConfig {
    /// Directory with the bootstrap files; relative paths are relative to the config file.
    pub dir: PathBuf,
}

impl Default for WorkspaceConfig {
    fn default() -> Self {
        Self { dir: PathBuf::from(".") }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StorageConfig {
    /// SQLite file; relative paths are relative to the workspace.
    pub database: PathBuf,
    /// Days before a settled Telegram update leaves the ledger (0 keeps them forever).
    pub telegram_updates_days: u32,
    /// Days before a finished task record is deleted (0 keeps them forever).
    pub task_records_days: u32,
    /// Days before a history message is deleted (0, the default, keeps the history).
    pub history_days: u32,
    /// Below this much free space (MB) in the data directory, `disk` is a degraded part of
    /// health and `/status` (0: not checked). Why 50: room for a day of history and the
    /// ledger, and enough warning before SQLite refuses writes.
    pub min_free_mb: u64,
}

impl Default for StorageConfig {
    fn default() -> Self {
        Self {
            database: PathBuf::from("nexbot.db"),
            telegram_updates_days: 30,
            task_records_days: 90,
            history_days: 0,
            min_free_mb: 50,
        }
    }
}

impl StorageConfig {
    /// What the daily pruning keeps.
    pub fn retention(&self) -> crate::store::Retention {
        crate::store::Retention {
            telegram_updates_days: self.telegram_updates_days,
            task_records_days: self.task_records_days,
            history_days: self.history_days,
        }
    }
}

/// `[control]`: the operator's control API (`nexbot-ctl`) and metrics.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ControlConfig {
    /// Serve the control API (HTTP + JSON on a Unix socket, mode 0600).
    pub enabled: bool,
    /// The socket; relative paths are relative to the data directory (the database's).
    pub socket: PathBuf,
    /// A TCP address serving `GET /metrics` only (e.g. `127.0.0.1:9464`); unset: off. The
    /// control endpoints are never served on TCP.
    pub metrics_addr: Option<std::net::SocketAddr>,
    /// The operator's web dashboard (e.g. `127.0.0.1:8088`); unset: off. Log in with the
    /// one-time link `nexbot-ctl web login` prints.
    pub web_addr: Option<std::net::SocketAddr>,
    /// Lets `web_addr` be an address other machines reach (not loopback). Off: such an
    /// address is refused at start, so the dashboard is never exposed by a typo. On with such
    /// an address, the session cookie is `Secure`: it is meant to be reached through TLS.
    pub web_remote: bool,
}

impl Default for ControlConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            socket: PathBuf::from("nexbot.sock"),
            metrics_addr: None,
            web_addr: None,
            web_remote: false,
        }
    }
}

/// `[search]`: the backend `search_web` queries, through the egress proxy like any request
/// of a subagent. Empty `url`: `search_web` says it is not configured.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SearchConfig {
    /// `searxng` (default; a self-hosted SearXNG's JSON API, `format=json` enabled) or
    /// `brave` (the Brave Search API, which needs `api_key_secret`).
    pub kind: String,
    /// The search endpoint, e.g. `http://searxng:8080/search` or
    /// `https://api.search.brave.com/res/v1/web/search`. The egress must allow its host (a
    /// SearXNG on this server needs an `egress.proxy.allow_internal` entry).
    pub url: String,
    /// The operator secret (`nexbot-ctl secrets set NAME --operator --host HOST`) holding the
    /// backend's API key, bound to the backend's host: the proxy fills it in, no container
    /// holds it.
    pub api_key_secret: String,
}

impl SearchConfig {
    /// The backend for the `execute` request, when one is configured.
    pub fn backend(&self) -> Option<nexbot_protocol::SearchBackend> {
        (!self.url.trim().is_empty()).then(|| nexbot_protocol::SearchBackend {
            kind: if self.kind.is_empty() { "searxng".to_owned() } else { self.kind.clone() },
            url: self.url.trim().to_owned(),
            key_secret: (!self.api_key_secret.is_empty()).then(|| self.api_key_secret.clone()),
        })
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BusConfig {
    pub inbound_capacity: usize,
    pub outbound_capacity: usize,
    pub per_chat_queue: usize,
    pub max_parallel_turns: usize,
}

impl Default for BusConfig {
    fn default() -> Self {
        Self {
            inbound_capacity: 64,
            outbound_capacity: 64,
            per_chat_queue: 8,
            max_parallel_turns: nexbot_agent::turns::DEFAULT_MAX_PARALLEL_TURNS,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SubagentConfig {
    /// Offer delegation (and start the container pool). Off: no Docker needed.
    pub enabled: bool,
    pub image: String,
    pub pool_size: usize,
    /// Scopes the pool's containers and labels (two daemons need different names).
    pub pool_name: String,
    /// The internal Docker network of the containers (created if missing).
    pub network: String,
    pub task_timeout_secs: u64,
    /// Model for subagents; `llm.model` when unset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub llm_model: Option<String>,
    /// Skills folder handed to every subagent container read-only, by its path on the Docker
    /// host (the engine resolves bind paths there, not in this process's file system).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skills_dir: Option<PathBuf>,
    /// Commands a task's blocked-pattern screen may refuse before the subagent ends the task
    /// (sent as `execute.max_blocked_commands`): a model probing the screen stops there.
    pub max_blocked_commands: u32,
    /// Search and fetch calls (`search_web`, `web_fetch`, commands running `curl`/`wget`) one
    /// task may make (sent as `execute.search_budget`); the next is refused and the model told
    /// to answer with what it has. A delegation may ask for another budget, up to
    /// `nexbot_protocol::MAX_SEARCH_BUDGET` (100).
    pub search_budget: u32,
    /// The most containers one chat may hold at once (its room), so one chat cannot take the
    /// whole pool; `0`: half the pool, rounded up.
    pub max_containers_per_chat: usize,
    /// A chat's container left idle this long is removed and a blank one takes its place.
    pub chat_idle_secs: u64,
}

impl Default for SubagentConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            image: "nexbot-subagent:dev".into(),
            pool_size: 4,
            pool_name: "nexbot".into(),
            network: "nexbot-subagents".into(),
            task_timeout_secs: 300,
            llm_model: None,
            skills_dir: None,
            max_blocked_commands: nexbot_protocol::DEFAULT_MAX_BLOCKED_COMMANDS,
            search_budget: nexbot_protocol::DEFAULT_SEARCH_BUDGET,
            max_containers_per_chat: 0,
            chat_idle_secs: 900,
        }
    }
}

/// `[skills]`: the folder the daemon watches (the same one subagents see, read-only, at
/// `/workspace/skills`) and what the operator allowed despite the content screen.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SkillsConfig {
    /// The skills folder as this process sees it (absolute); unset: `subagent.skills_dir`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dir: Option<PathBuf>,
    /// Content hashes (`sha256:<64 hex>`, as `nexbot-ctl skills ls` shows them) of flagged
    /// skills the operator read and allows.
    pub allow_hashes: Vec<String>,
    /// Quiet time after the last change in the folder before it is read again.
    pub debounce_ms: u64,
}

impl Default for SkillsConfig {
    fn default() -> Self {
        Self { dir: None, allow_hashes: Vec::new(), debounce_ms: 200 }
    }
}

impl Config {
    /// The skills folder the daemon reads: `skills.dir`, else `subagent.skills_dir` (the same
    /// path when the daemon runs on the Docker host itself).
    pub fn skills_dir(&self) -> Option<PathBuf> {
        self.skills.dir.clone().or_else(|| self.subagent.skills_dir.clone())
    }

    /// The owner's chat: the Telegram owner's, else the default console chat (heartbeat
    /// answers go there, and the owner's files are its room's).
    pub fn owner_chat(&self) -> nexbot_core::ChatRef {
        match self.telegram.owner {
            Some(owner) => nexbot_core::ChatRef::Telegram(owner),
            None => nexbot_core::ChatRef::default_console(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LoggingConfig {
    /// A `tracing` filter (`info`, `warn`, `nexbot_host=debug`…); `RUST_LOG` wins when set.
    pub level: String,
    /// `text` or `json`.
    pub format: String,
}

impl Default for LoggingConfig {
    fn default() -> Self {
        Self { level: "info".into(), format: "text".into() }
    }
}

/// Secrets, from the environment only. `Debug` shows whether each is set, never a value.
#[derive(Clone, Default)]
pub struct Secrets {
    pub llm_api_key: Option<SecretString>,
    pub telegram_token: Option<SecretString>,
    pub master_key: Option<SecretString>,
    /// The key the LLM relay adds for subagents: the variable `egress.relay.api_key_env`
    /// names, which by default is [`LLM_API_KEY_ENV`] (then this equals `llm_api_key`).
    pub relay_provider_key: Option<SecretString>,
    /// One key per [`LlmConfig::provider_list`] entry, from the variable it names.
    pub provider_keys: Vec<Option<SecretString>>,
    /// The relay's keys, by the variable each of its providers names.
    pub relay_keys: nexbot_egress::ProviderKeys,
    /// `[llm.transcription]`'s key, from the variable it names.
    pub transcription_key: Option<SecretString>,
    /// `[llm.speech]`'s key, from the variable it names.
    pub speech_key: Option<SecretString>,
    /// `[llm.embeddings]`'s key, from the variable it names.
    pub embeddings_key: Option<SecretString>,
}

impl fmt::Debug for Secrets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let set = |s: &Option<SecretString>| if s.is_some() { "[set]" } else { "[unset]" };
        f.debug_struct("Secrets")
            .field("llm_api_key", &set(&self.llm_api_key))
            .field("telegram_token", &set(&self.telegram_token))
            .field("master_key", &set(&self.master_key))
            .field("relay_provider_key", &set(&self.relay_provider_key))
            .field("provider_keys", &self.provider_keys.iter().map(set).collect::<Vec<_>>())
            .field("relay_keys", &self.relay_keys)
            .field("transcription_key", &set(&self.transcription_key))
            .field("speech_key", &set(&self.speech_key))
            .field("embeddings_key", &set(&self.embeddings_key))
            .finish()
    }
}

impl Secrets {
    /// The daemon's own keys, labelled for the exit scanner (`exits.rs`): none of them may
    /// leave the host in any text. Unset ones are `None`.
    pub fn daemon_keys(&self) -> Vec<(String, Option<SecretString>)> {
        let mut keys = vec![
            (LLM_API_KEY_ENV.to_owned(), self.llm_api_key.clone()),
            (TELEGRAM_TOKEN_ENV.to_owned(), self.telegram_token.clone()),
            (MASTER_KEY_ENV.to_owned(), self.master_key.clone()),
            ("LLM_RELAY_PROVIDER_KEY".to_owned(), self.relay_provider_key.clone()),
        ];
        keys.extend(self.provider_keys.iter().map(|k| ("LLM_PROVIDER_KEY".to_owned(), k.clone())));
        keys.push(("LLM_TRANSCRIPTION_KEY".to_owned(), self.transcription_key.clone()));
        keys.push(("LLM_SPEECH_KEY".to_owned(), self.speech_key.clone()));
        keys.push(("LLM_EMBEDDINGS_KEY".to_owned(), self.embeddings_key.clone()));
        keys.extend(
            self.relay_keys
                .values()
                .map(|k| ("LLM_RELAY_PROVIDER_KEY".to_owned(), Some(k.clone()))),
        );
        keys
    }
}

impl PartialEq for Secrets {
    /// Secrets never take part in comparing configurations.
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

/// Why the configuration was refused.
#[derive(Debug, Error)]
pub enum ConfigError {
    #[error("config file {path} not found: create one with `nexbot init` or pass --config")]
    NotFound { path: PathBuf },
    #[error("cannot read config file {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("config file {path} is not valid TOML: {message}")]
    Syntax { path: PathBuf, message: String },
    #[error("config key `{key}`{origin}: {reason}")]
    Key { key: String, origin: String, reason: String },
    #[error("environment variable {var}: {reason}")]
    Env { var: String, reason: String },
}

impl Config {
    /// Reads `path`, applies the process environment, validates.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| match source.kind() {
            std::io::ErrorKind::NotFound => ConfigError::NotFound { path: path.to_owned() },
            _ => ConfigError::Read { path: path.to_owned(), source },
        })?;
        let base = path.parent().map(Path::to_path_buf).unwrap_or_default();
        Self::from_parts(&text, path, &base, std::env::vars())
    }

    /// The testable core of [`Config::load`]: `text` is the file (named `path` in errors),
    /// `base` the directory relative paths start from, `env` the environment to apply.
    pub fn from_parts(
        text: &str,
        path: &Path,
        base: &Path,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Self, ConfigError> {
        let mut table: toml::Table = toml::from_str(text)
            .map_err(|e| ConfigError::Syntax { path: path.to_owned(), message: e.to_string() })?;
        let mut secrets = Secrets::default();
        let mut overridden = Vec::new();
        // Kept until the config says which variable holds the relay's provider key.
        let env: Vec<(String, String)> = env.into_iter().collect();
        for (var, value) in &env {
            let value = value.clone();
            match var.as_str() {
                LLM_API_KEY_ENV => secrets.llm_api_key = secret_from(var, value)?,
                TELEGRAM_TOKEN_ENV => secrets.telegram_token = secret_from(var, value)?,
                MASTER_KEY_ENV => secrets.master_key = secret_from(var, value)?,
                _ => {
                    if let Some(key) = apply_override(&mut table, var, &value)? {
                        overridden.push((key, var.clone()));
                    }
                }
            }
        }
        let origin = |key: &str| {
            overridden
                .iter()
                .find(|(k, _)| within(key, k) || within(k, key))
                .map(|(_, var)| format!(" (from {var})"))
                .unwrap_or_default()
        };
        let mut config: Config = serde_path_to_error::deserialize(toml::Value::Table(table))
            .map_err(|e| {
                let key = e.path().to_string();
                // toml appends "in `section`"; the key already says where.
                let inner = e.inner().to_string();
                let reason = inner.lines().next().unwrap_or_default().to_owned();
                ConfigError::Key { origin: origin(&key), key, reason }
            })?;
        // A key by the name of the variable holding it.
        let llm_api_key = secrets.llm_api_key.clone();
        let key_of = |name: &str| -> Result<Option<SecretString>, ConfigError> {
            if name == LLM_API_KEY_ENV {
                return Ok(llm_api_key.clone());
            }
            Ok(env
                .iter()
                .find(|(var, _)| var == name)
                .map(|(var, value)| secret_from(var, value.clone()))
                .transpose()?
                .flatten())
        };
        let mut provider_keys = Vec::new();
        for spec in config.llm.provider_list() {
            provider_keys.push(match spec.api_key_env.as_deref() {
                None => None,
                Some(name) => key_of(name)?,
            });
        }
        secrets.relay_provider_key = if !config.llm.providers.is_empty()
            && config.egress.relay.provider_base_url.is_none()
        {
            // The relay's (and the opt-in key mode's) first provider is `[llm]`'s.
            provider_keys.first().cloned().flatten()
        } else {
            key_of(&config.egress.relay.api_key_env)?
        };
        let mut relay_keys = nexbot_egress::ProviderKeys::new();
        for name in config.egress_config().relay.key_envs() {
            if let Some(key) = key_of(&name)? {
                relay_keys.insert(name, key);
            }
        }
        secrets.relay_keys = relay_keys;
        secrets.provider_keys = provider_keys;
        if let Some(name) = config.llm.transcription.as_ref().and_then(|t| t.api_key_env.as_deref())
        {
            secrets.transcription_key = key_of(name)?;
        }
        if let Some(name) = config.llm.speech.as_ref().and_then(|t| t.api_key_env.as_deref()) {
            secrets.speech_key = key_of(name)?;
        }
        if let Some(name) = config.llm.embeddings.as_ref().and_then(|t| t.api_key_env.as_deref()) {
            secrets.embeddings_key = key_of(name)?;
        }
        config.secrets = secrets;
        config.validate().map_err(|(key, reason)| ConfigError::Key {
            origin: origin(&key),
            key,
            reason,
        })?;
        if config.workspace.dir.is_relative() {
            config.workspace.dir = base.join(&config.workspace.dir);
        }
        Ok(config)
    }

    /// The database file, resolved against the workspace.
    pub fn database_path(&self) -> PathBuf {
        self.workspace.dir.join(&self.storage.database)
    }

    /// Where the daemon keeps files of its own (the egress audit log): the database's
    /// directory.
    pub fn data_dir(&self) -> PathBuf {
        let database = self.database_path();
        database.parent().map(Path::to_path_buf).unwrap_or_else(|| self.workspace.dir.clone())
    }

    /// The control API's socket (`control.socket` in [`Config::data_dir`]).
    pub fn control_socket(&self) -> PathBuf {
        self.data_dir().join(&self.control.socket)
    }

    /// The egress audit log (`egress.audit_file` in [`Config::data_dir`]).
    pub fn egress_audit_path(&self) -> PathBuf {
        self.data_dir().join(&self.egress.audit_file)
    }

    /// `[egress]` as the listener runs it: the relay forwards to `llm.base_url` unless
    /// `egress.relay.provider_base_url` names another provider.
    pub fn egress_config(&self) -> EgressConfig {
        let mut egress = self.egress.clone();
        if egress.relay.providers.is_empty() && egress.relay.provider_base_url.is_none() {
            // The relay follows `[llm]`'s provider list for subagents, in the same order.
            egress.relay.providers = self.llm.providers.clone();
        }
        egress.relay.provider_base_url.get_or_insert_with(|| self.llm.primary().0);
        if egress.relay.models.is_empty() {
            // The model the daemon tells subagents to use is the one a call may name.
            egress.relay.models = vec![self.subagent_llm_model()];
        }
        // The operator's search backend is the operator's choice: `search_web` reaches it
        // without a question in `ask` and `allowlist`.
        if let Some(rule) = self.search.backend().and_then(|b| search_rule(&b.url)) {
            if !egress.allow.contains(&rule) {
                egress.allow.push(rule);
            }
        }
        egress
    }

    /// The provider URL subagents' LLM calls end up at (through the relay, or directly with
    /// the opt-in `egress.relay.send_provider_key_to_subagents`).
    pub fn subagent_provider_base_url(&self) -> String {
        self.egress.relay.provider_base_url.clone().unwrap_or_else(|| self.llm.primary().0)
    }

    pub fn subagent_llm_model(&self) -> String {
        self.subagent.llm_model.clone().unwrap_or_else(|| self.llm.primary().1)
    }

    /// Value checks serde cannot express; the error is (key, reason).
    fn validate(&self) -> Result<(), (String, String)> {
        self.validate_sections().map_err(|(key, reason)| (key.to_owned(), reason))?;
        self.mcp.validate().map_err(|reason| ("mcp.servers".to_owned(), reason))?;
        for (i, server) in self.mcp.servers.iter().enumerate() {
            if let Some(room) = &server.room {
                nexbot_docker::check_mount_target(room)
                    .map_err(|why| (format!("mcp.servers[{i}].room"), why))?;
            }
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
        if let Err(invalid) = crate::pool_runner::pool_config(self).check() {
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

/// Whether dotted `key` is `outer` or lies inside it (`outer.x`, `outer[0]`).
fn within(key: &str, outer: &str) -> bool {
    key.strip_prefix(outer).is_some_and(|rest| rest.is_empty() || rest.starts_with(['.', '[']))
}

fn non_empty_secret(value: String) -> Option<SecretString> {
    (!value.is_empty()).then(|| SecretString::from(value))
}

/// A secret from variable `var`: empty is unset; shorter than the protocol's minimum is
/// refused, because a value that short cannot be redacted from output without destroying it
/// (docs/protocol-files.md, "Secrets").
fn secret_from(var: &str, value: String) -> Result<Option<SecretString>, ConfigError> {
    let min = nexbot_protocol::secrets::MIN_SECRET_VALUE_BYTES;
    if !value.is_empty() && value.len() < min {
        return Err(ConfigError::Env {
            var: var.to_owned(),
            reason: format!(
                "the value is {} bytes; a secret must have at least {min}, since a shorter one \
                 cannot be kept out of logs and output (use the provider's real key)",
                value.len()
            ),
        });
    }
    Ok(non_empty_secret(value))
}

/// Applies `NEXBOT_SECTION__KEY=value` (or `NEXBOT_SECTION__TABLE__KEY=value` for a nested
/// table); returns the dotted key it set, or `None` when the variable is not an override.
/// Which keys exist is left to deserialization, so an unknown override is refused exactly like
/// an unknown key in the file.
fn apply_override(
    table: &mut toml::Table,
    var: &str,
    value: &str,
) -> Result<Option<String>, ConfigError> {
    let Some(rest) = var.strip_prefix(ENV_PREFIX) else { return Ok(None) };
    // An empty override is no override: compose passes `${NAME:-}` for settings the operator
    // left unset, and the file's value (or the default) must stay.
    if !rest.contains("__") || value.is_empty() {
        return Ok(None);
    }
    let parts: Vec<String> = rest.split("__").map(str::to_ascii_lowercase).collect();
    let Some((key, tables)) = parts.split_last().filter(|_| parts.iter().all(|p| !p.is_empty()))
    else {
        return Err(ConfigError::Env {
            var: var.to_owned(),
            reason: "overrides are named NEXBOT_<SECTION>__<KEY>, e.g. NEXBOT_LLM__MODEL, or \
                     NEXBOT_<SECTION>__<TABLE>__<KEY> for a nested table"
                .into(),
        });
    };
    let parsed = toml::from_str::<toml::Table>(&format!("v = {value}"))
        .ok()
        .and_then(|mut t| t.remove("v"))
        .unwrap_or_else(|| toml::Value::String(value.to_owned()));
    let mut current = table;
    for (depth, name) in tables.iter().enumerate() {
        let entry =
            current.entry(name.clone()).or_insert_with(|| toml::Value::Table(toml::Table::new()));
        let toml::Value::Table(next) = entry else {
            return Err(ConfigError::Env {
                var: var.to_owned(),
                reason: format!("`{}` is not a section", parts[..=depth].join(".")),
            });
        };
        current = next;
    }
    current.insert(key.clone(), parsed);
    Ok(Some(parts.join(".")))
}

/// The `egress.allow` rule of a search backend's URL (its host and port).
fn search_rule(url: &str) -> Option<crate::egress::AllowRule> {
    let url = reqwest::Url::parse(url).ok()?;
    let port = url.port_or_known_default()?;
    // An IPv6 host comes in brackets, as a rule writes it.
    crate::egress::AllowRule::try_from(format!("{}:{port}", url.host_str()?)).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use secrecy::ExposeSecret;

    fn load(text: &str, env: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let env = env.iter().map(|(k, v)| (k.to_string(), v.to_string()));
        Config::from_parts(text, Path::new("test.toml"), Path::new("/base"), env)
    }

    #[test]
    fn search_settings_are_checked_naming_the_key() {
        let backend = load("[search]\nurl = \"http://searx:8080/search\"\n", &[]).unwrap();
        let backend = backend.search.backend().unwrap();
        assert_eq!((backend.kind.as_str(), backend.key_secret), ("searxng", None));
        assert!(load("", &[]).unwrap().search.backend().is_none(), "off by default");
        let err = load("[search]\nurl = \"https://u:p@api.example/s\"\n", &[]).unwrap_err();
        assert!(
            err.to_string().contains("search.url")
                && err.to_string().contains("search.api_key_secret"),
            "{err}"
        );
        let err = load("[search]\nkind = \"bing\"\n", &[]).unwrap_err().to_string();
        assert!(err.contains("search.kind") && err.contains("searxng"), "{err}");
        let brave = "[search]\nkind = \"brave\"\nurl = \"https://api.search.brave.com/res/v1/web/search\"\n";
        let err = load(brave, &[]).unwrap_err().to_string();
        assert!(err.contains("search.api_key_secret"), "{err}");
        let err =
            load(&format!("{brave}api_key_secret = \"lower\"\n"), &[]).unwrap_err().to_string();
        assert!(err.contains("search.api_key_secret"), "{err}");
    }

    #[test]
    fn the_block_limit_has_a_default_a_range_and_an_override() {
        // Absent (an older config.toml): the protocol's default.
        assert_eq!(load("", &[]).unwrap().subagent.max_blocked_commands, 3);
        let config = load("[subagent]\nmax_blocked_commands = 5\n", &[]).unwrap();
        assert_eq!(config.subagent.max_blocked_commands, 5);
        let env = [("NEXBOT_SUBAGENT__MAX_BLOCKED_COMMANDS", "7")];
        assert_eq!(load("", &env).unwrap().subagent.max_blocked_commands, 7);
        let err = load("[subagent]\nmax_blocked_commands = 0\n", &[]).unwrap_err().to_string();
        assert!(err.contains("subagent.max_blocked_commands") && err.contains("0 is out of range"));
    }

    #[test]
    fn the_search_budget_has_a_default_a_range_and_an_override() {
        // Absent (an older config.toml): the protocol's default.
        assert_eq!(load("", &[]).unwrap().subagent.search_budget, 20);
        let config = load("[subagent]\nsearch_budget = 5\n", &[]).unwrap();
        assert_eq!(config.subagent.search_budget, 5);
        let env = [("NEXBOT_SUBAGENT__SEARCH_BUDGET", "7")];
        assert_eq!(load("", &env).unwrap().subagent.search_budget, 7);
        for wrong in [0, 101] {
            let err = load(&format!("[subagent]\nsearch_budget = {wrong}\n"), &[])
                .unwrap_err()
                .to_string();
            assert!(err.contains("subagent.search_budget"), "{err}");
        }
    }

    #[test]
    fn rooms_have_defaults_an_override_and_reach_the_pool() {
        // Absent (an older config.toml): half the pool per chat, 15 minutes idle.
        let config = load("", &[]).unwrap();
        let pool = crate::pool_runner::pool_config(&config);
        assert_eq!((pool.max_containers_per_room, pool.room_idle_secs), (0, 900));
        assert_eq!(pool.room_limit(), 2);
        let env = [("NEXBOT_SUBAGENT__MAX_CONTAINERS_PER_CHAT", "3")];
        let config = load("[subagent]\nchat_idle_secs = 60\n", &env).unwrap();
        let pool = crate::pool_runner::pool_config(&config);
        assert_eq!((pool.room_limit(), pool.room_idle_secs), (3, 60));
        let err = load("[subagent]\nchat_idle_secs = 0\n", &[]).unwrap_err().to_string();
        assert!(err.contains("subagent.chat_idle_secs"), "{err}");
    }

    #[test]
    fn an_invalid_pool_setting_names_its_subagent_key_and_its_variable() {
        let err = load("[subagent]\npool_name = \"bad name!\"\n", &[]).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("subagent.pool_name") && text.contains("bad name!"), "{text}");
        let err = load("", &[("NEXBOT_SUBAGENT__POOL_SIZE", "0")]).unwrap_err().to_string();
        assert!(
            err.contains("subagent.pool_size") && err.contains("NEXBOT_SUBAGENT__POOL_SIZE"),
            "{err}"
        );
        let err = load("[subagent]\nskills_dir = \"relative/skills\"\n", &[]).unwrap_err();
        assert!(err.to_string().contains("subagent.skills_dir"), "{err}");
    }

    #[test]
    fn an_empty_override_keeps_the_files_value() {
        let config = load("[llm]\nmodel = \"from-file\"\n", &[("NEXBOT_LLM__MODEL", "")]).unwrap();
        assert_eq!(config.llm.model, "from-file");
        let config = load("[telegram]\nowner = 42\n", &[("NEXBOT_TELEGRAM__OWNER", "")]).unwrap();
        assert_eq!(config.telegram.owner, Some(42));
        assert!(load("", &[("NEXBOT_LLM_API_KEY", "")]).unwrap().secrets.llm_api_key.is_none());
    }

    #[test]
    fn empty_file_gives_safe_defaults() {
        let config = load("", &[]).unwrap();
        assert_eq!(config.agent.max_iterations, 20);
        assert_eq!(config.workspace.dir, Path::new("/base/."));
        assert!(config.secrets.llm_api_key.is_none());
    }

    #[test]
    fn the_search_backend_is_allowed_without_a_question() {
        let mut config = Config::default();
        config.search.url = "http://searxng.lan:8080/search".into();
        let allow = config.egress_config().allow;
        assert_eq!(allow.iter().map(ToString::to_string).collect::<Vec<_>>(), ["searxng.lan:8080"]);
        config.search.url = "https://[2001:db8::5]/search".into();
        assert_eq!(config.egress_config().allow[0].to_string(), "[2001:db8::5]:443");
        assert!(Config::default().egress_config().allow.is_empty());
    }

    #[test]
    fn generated_template_parses_to_the_defaults_and_names_every_key() {
        let template = crate::workspace::CONFIG_TEMPLATE;
        let config = load(template, &[]).unwrap();
        let mut expected = Config::default();
        expected.workspace.dir = PathBuf::from("/base/.");
        // A new install (the template) asks; a config without the key keeps `open`.
        expected.egress.mode = Some(crate::egress::EgressMode::Ask);
        // A new install plants decoys; a config without the key plants none.
        expected.vault.decoys =
            crate::vault::decoys::DEFAULT_DECOYS.iter().map(|n| n.to_string()).collect();
        assert_eq!(config, expected);
        assert_eq!(Config::default().egress.effective_mode(), crate::egress::EgressMode::Open);
        // Every key of the defaults (nested tables included), and the optional ones, appears
        // (maybe commented) in it, under its own table header.
        fn documented(template: &str, section: &str, keys: &toml::Table) {
            assert!(template.contains(&format!("\n[{section}]\n")), "[{section}] undocumented");
            for (key, value) in keys {
                match value.as_table() {
                    Some(table) => documented(template, &format!("{section}.{key}"), table),
                    None => assert!(
                        template.contains(&format!("\n{key} = ")),
                        "{section}.{key} undocumented"
                    ),
                }
            }
        }
        let defaults = toml::Table::try_from(Config::default()).unwrap();
        for (section, keys) in &defaults {
            documented(template, section, keys.as_table().unwrap());
        }
        let optional =
            ["max_tokens", "temperature", "llm_model", "listen_addr", "provider_base_url", "dir"];
        for key in optional {
            assert!(template.contains(&format!("# {key} = ")), "{key} undocumented");
        }
    }

    #[test]
    fn mcp_servers_are_read_from_the_file_or_the_environment_and_checked() {
        let file = "[[mcp.servers]]\nname = \"memory\"\ncommand = \"mcp-server-memory\"\n\
                    env = { MEMORY_FILE_PATH = \"/tmp/m.jsonl\" }\nscope = \"shared\"\n";
        let config = load(file, &[]).unwrap();
        let server = &config.mcp.servers[0];
        assert_eq!(server.command_line(), ["mcp-server-memory"]);
        assert_eq!(server.scope, nexbot_mcp::ServerScope::Shared);
        assert_eq!(server.env["MEMORY_FILE_PATH"], "/tmp/m.jsonl");
        // Appended to a generated file (whose `[mcp]` holds only comments), as people do.
        let appended = format!("{}\n{file}", crate::workspace::CONFIG_TEMPLATE);
        assert_eq!(load(&appended, &[]).unwrap().mcp.servers.len(), 1);
        let env =
            [("NEXBOT_MCP__SERVERS", r#"[{ name = "e", command = "mcp-server-everything" }]"#)];
        let config = load("", &env).unwrap();
        assert_eq!(config.mcp.servers[0].name, "e");
        let err = load("[[mcp.servers]]\nname = \"a__b\"\ncommand = \"x\"\n", &[]).unwrap_err();
        assert!(err.to_string().contains("mcp.servers[0].name"), "{err}");
        // A remote server: a url, and headers that may name secrets; credentials in the URL are
        // refused.
        let remote = "[[mcp.servers]]\nname = \"a\"\nurl = \"https://x/mcp\"\nheaders = { \
                      Authorization = \"Bearer {{secret:TOKEN}}\" }\n";
        let config = load(remote, &[]).unwrap();
        assert_eq!(config.mcp.servers[0].url.as_deref(), Some("https://x/mcp"));
        let err = load("[[mcp.servers]]\nname = \"a\"\nurl = \"https://u:p@x/mcp\"\n", &[]);
        assert!(err.unwrap_err().to_string().contains("mcp.servers[0].url"));
        let room = |path: &str| {
            load(
                &format!("[[mcp.servers]]\nname = \"f\"\ncommand = \"x\"\nroom = \"{path}\"\n"),
                &[],
            )
        };
        assert_eq!(room("/room").unwrap().mcp.servers[0].room.as_deref(), Some("/room"));
        for bad in ["room", "/tmp", "/a/../etc", "/room:ro"] {
            let err = room(bad).unwrap_err().to_string();
            assert!(err.contains("mcp.servers[0].room"), "{bad}: {err}");
        }
    }

    #[test]
    fn skills_settings_are_checked_and_the_folder_falls_back_to_the_subagents() {
        let hash = format!("sha256:{}", "ab".repeat(32));
        let config = load(&format!("[skills]\nallow_hashes = [\"{hash}\"]\n"), &[]).unwrap();
        assert_eq!(config.skills.allow_hashes, vec![hash.clone()]);
        assert_eq!(config.skills_dir(), None);
        let pool = crate::pool_runner::pool_config(&config);
        assert_eq!(pool.env.get("NEXBOT_SKILLS_ALLOW"), Some(&hash));
        let err = load("[skills]\nallow_hashes = [\"sha256:XYZ\"]\n", &[]).unwrap_err();
        assert!(err.to_string().contains("skills.allow_hashes"), "{err}");
        let err = load("[skills]\ndir = \"rel\"\n", &[]).unwrap_err();
        assert!(err.to_string().contains("skills.dir"), "{err}");
        let config = load("[subagent]\nskills_dir = \"/srv/skills\"\n", &[]).unwrap();
        assert_eq!(config.skills_dir(), Some(PathBuf::from("/srv/skills")));
        let config = load("", &[("NEXBOT_SKILLS__DIR", "/skills")]).unwrap();
        assert_eq!(config.skills_dir(), Some(PathBuf::from("/skills")));
    }

    #[test]
    fn unknown_key_is_refused_naming_it() {
        let err = load("[llm]\nmodle = \"x\"\n", &[]).unwrap_err().to_string();
        assert!(err.contains("`llm.modle`"), "{err}");
        assert!(err.contains("unknown field"), "{err}");
        let err = load("[lmm]\n", &[]).unwrap_err().to_string();
        assert!(err.contains("`lmm`"), "{err}");
    }

    #[test]
    fn wrong_type_is_refused_naming_key_and_reason() {
        let err = load("[agent]\nmax_iterations = \"many\"\n", &[]).unwrap_err().to_string();
        assert!(err.contains("`agent.max_iterations`"), "{err}");
        assert!(err.contains("invalid type"), "{err}");
    }

    #[test]
    fn bad_values_are_refused_naming_key_and_reason() {
        let err = load("[agent]\nmax_iterations = 0\n", &[]).unwrap_err().to_string();
        assert_eq!(err, "config key `agent.max_iterations`: 0 is out of range (allowed 1..=1000)");
        let err = load("[agent]\nask_timeout_secs = 0\n", &[]).unwrap_err().to_string();
        assert!(err.contains("`agent.ask_timeout_secs`") && err.contains("out of range"), "{err}");
        let err = load("[llm]\nbase_url = \"ftp://x\"\n", &[]).unwrap_err().to_string();
        assert!(err.contains("`llm.base_url`") && err.contains("http://"), "{err}");
        let err = load("[llm]\nbase_url = \"https://u:p@x\"\n", &[]).unwrap_err().to_string();
        assert!(err.contains("credentials") && !err.contains("u:p"), "{err}");
        let err = load("[logging]\nformat = \"xml\"\n", &[]).unwrap_err().to_string();
        assert!(err.contains("`logging.format`"), "{err}");
    }

    #[test]
    fn syntax_errors_name_the_file() {
        let err = load("[llm\n", &[]).unwrap_err().to_string();
        assert!(err.starts_with("config file test.toml is not valid TOML"), "{err}");
    }

    #[test]
    fn env_overrides_win_and_are_typed() {
        let config = load(
            "[llm]\nmodel = \"a\"\n",
            &[
                ("NEXBOT_LLM__MODEL", "b"),
                ("NEXBOT_AGENT__MAX_ITERATIONS", "7"),
                ("NEXBOT_SUBAGENT__ENABLED", "false"),
                ("NEXBOT_CONFIG", "ignored.toml"),
                ("HOME", "/root"),
            ],
        )
        .unwrap();
        assert_eq!(config.llm.model, "b");
        assert_eq!(config.agent.max_iterations, 7);
        assert!(!config.subagent.enabled);
    }

    #[test]
    fn skills_dir_reaches_the_pool_config() {
        let config = load("", &[("NEXBOT_SUBAGENT__SKILLS_DIR", "/srv/nexbot/skills")]).unwrap();
        let pool = crate::pool_runner::pool_config(&config);
        assert_eq!(pool.skills_dir.as_deref(), Some(Path::new("/srv/nexbot/skills")));
        assert_eq!(crate::pool_runner::pool_config(&load("", &[]).unwrap()).skills_dir, None);
    }

    #[test]
    fn bad_env_override_names_the_variable() {
        let err = load("", &[("NEXBOT_AGENT__MAX_ITERATIONS", "0")]).unwrap_err().to_string();
        assert!(
            err.contains("`agent.max_iterations` (from NEXBOT_AGENT__MAX_ITERATIONS)"),
            "{err}"
        );
        let err = load("", &[("NEXBOT_LLM__NOPE", "1")]).unwrap_err().to_string();
        assert!(err.contains("`llm.nope` (from NEXBOT_LLM__NOPE)"), "{err}");
        let err = load("", &[("NEXBOT_A__B__C", "1")]).unwrap_err().to_string();
        assert!(err.contains("NEXBOT_A__B__C"), "{err}");
    }

    #[test]
    fn a_secret_too_short_to_redact_is_refused_naming_its_variable() {
        for var in [LLM_API_KEY_ENV, TELEGRAM_TOKEN_ENV, MASTER_KEY_ENV] {
            let err = load("", &[(var, "short")]).unwrap_err().to_string();
            assert!(err.contains(var) && err.contains("at least 8"), "{err}");
            assert!(!err.contains("short\""), "the value is not echoed: {err}");
        }
        assert!(load("", &[(LLM_API_KEY_ENV, "")]).is_ok(), "empty means unset");
        assert!(load("", &[(LLM_API_KEY_ENV, "12345678")]).is_ok());
    }

    #[test]
    fn secrets_come_from_env_and_never_show_in_debug() {
        let config = load(
            "",
            &[
                (LLM_API_KEY_ENV, "sk-planted-123"),
                (TELEGRAM_TOKEN_ENV, "tg-planted-456"),
                (MASTER_KEY_ENV, "mk-planted-789"),
            ],
        )
        .unwrap();
        assert_eq!(config.secrets.llm_api_key.as_ref().unwrap().expose_secret(), "sk-planted-123");
        let debug = format!("{config:?} {config:#?}");
        for planted in ["sk-planted-123", "tg-planted-456", "mk-planted-789"] {
            assert!(!debug.contains(planted), "{planted} in {debug}");
        }
        assert!(debug.contains("[set]"));
    }

    #[test]
    fn nested_env_overrides_reach_egress_tables() {
        let config = load(
            "[egress.proxy]\nallow_domains = [\"example.com\"]\n",
            &[
                ("NEXBOT_EGRESS__PORT", "0"),
                ("NEXBOT_EGRESS__FIREWALL", "false"),
                ("NEXBOT_EGRESS__PROXY__ALLOW_DOMAINS", r#"["*.example.org"]"#),
                (
                    "NEXBOT_EGRESS__PROXY__ALLOW_INTERNAL",
                    r#"[{ cidr = "10.9.8.7", ports = [81] }]"#,
                ),
                ("NEXBOT_EGRESS__RELAY__SEND_PROVIDER_KEY_TO_SUBAGENTS", "true"),
            ],
        )
        .unwrap();
        let egress = &config.egress;
        assert_eq!((egress.port, egress.firewall), (0, false));
        assert_eq!(egress.proxy.allow_domains[0].to_string(), "*.example.org");
        assert!(egress.proxy.allow_internal[0].matches("10.9.8.7".parse().unwrap(), 81));
        assert!(egress.relay.send_provider_key_to_subagents);

        let err = load("", &[("NEXBOT_EGRESS__PROXY__ALLOW_DOMAIN", "[]")]).unwrap_err();
        let err = err.to_string();
        assert!(
            err.contains("`egress.proxy.allow_domain` (from NEXBOT_EGRESS__PROXY__ALLOW_DOMAIN)"),
            "{err}"
        );
        let err = load("", &[("NEXBOT_EGRESS__PROXY__ALLOW_INTERNAL", "[{ cidr = \"nope\" }]")])
            .unwrap_err()
            .to_string();
        assert!(err.contains("(from NEXBOT_EGRESS__PROXY__ALLOW_INTERNAL)"), "{err}");
        assert!(err.contains("invalid CIDR"), "{err}");
        let err = load("", &[("NEXBOT_EGRESS__PORT__X", "1")]).unwrap_err().to_string();
        assert!(err.contains("NEXBOT_EGRESS__PORT__X") && err.contains("`egress.port`"), "{err}");
        let err = load("", &[("NEXBOT_EGRESS____PORT", "1")]).unwrap_err().to_string();
        assert!(err.contains("NEXBOT_EGRESS____PORT"), "{err}");
    }

    #[test]
    fn egress_defaults_are_safe_and_follow_the_main_llm() {
        let config = load("[llm]\nbase_url = \"http://llm.example:8080/v1\"\n", &[]).unwrap();
        let egress = config.egress_config();
        assert!(egress.firewall && egress.require_attribution);
        assert!(egress.proxy.allow_internal.is_empty());
        assert!(!egress.relay.send_provider_key_to_subagents);
        assert_eq!(egress.relay.provider_base_url.as_deref(), Some("http://llm.example:8080/v1"));
        assert_eq!(config.subagent_provider_base_url(), "http://llm.example:8080/v1");
        assert_eq!(config.egress_audit_path(), Path::new("/base/./egress-audit.jsonl"));
        let config = load(
            "[egress.relay]\nprovider_base_url = \"https://other.example/v1\"\n",
            &[("NEXBOT_STORAGE__DATABASE", "state/db.sqlite")],
        )
        .unwrap();
        assert_eq!(
            config.egress_config().relay.provider_base_url.as_deref(),
            Some("https://other.example/v1")
        );
        assert_eq!(config.egress_audit_path(), Path::new("/base/./state/egress-audit.jsonl"));
    }

    #[test]
    fn bad_egress_values_are_refused_naming_the_key() {
        let err = load("[egress.proxy]\nmax_duration_secs = 0\n", &[]).unwrap_err().to_string();
        assert!(err.contains("`egress.proxy.max_duration_secs`"), "{err}");
        let err = load("[egress.relay]\nprovider_base_url = \"https://h/v1?key=sk-x\"\n", &[])
            .unwrap_err()
            .to_string();
        assert!(err.contains("`egress.relay.provider_base_url`"), "{err}");
        // The relay forwards to llm.base_url by default, so that key is named.
        let err = load("[llm]\nbase_url = \"https://h/v1?x=1\"\n", &[]).unwrap_err().to_string();
        assert!(err.contains("`llm.base_url`") && err.contains("relay"), "{err}");
        let err = load("[egress]\naudit_file = \"../log\"\n", &[]).unwrap_err().to_string();
        assert!(err.contains("`egress.audit_file`"), "{err}");
        let err = load("[egress]\nfirewal = true\n", &[]).unwrap_err().to_string();
        assert!(err.contains("`egress.firewal`") && err.contains("unknown field"), "{err}");
        let err = load("[egress.relay]\napi_key_env = \"NEXBOT_LLM__KEY\"\n", &[])
            .unwrap_err()
            .to_string();
        assert!(err.contains("`egress.relay.api_key_env`"), "{err}");
        // The old per-subagent URL is gone: subagents reach the LLM through the relay.
        let err = load("[subagent]\nllm_base_url = \"http://x/v1\"\n", &[]).unwrap_err();
        assert!(err.to_string().contains("`subagent.llm_base_url`"), "{err}");
    }

    #[test]
    fn the_relay_key_is_the_llm_key_unless_another_variable_is_named() {
        let config = load("", &[(LLM_API_KEY_ENV, "sk-main-1")]).unwrap();
        let key = config.secrets.relay_provider_key.as_ref().unwrap();
        assert_eq!(key.expose_secret(), "sk-main-1");
        let config = load(
            "[egress.relay]\napi_key_env = \"NXW_PROVIDER_KEY\"\n",
            &[(LLM_API_KEY_ENV, "sk-main-1"), ("NXW_PROVIDER_KEY", "sk-relay-2")],
        )
        .unwrap();
        let key = config.secrets.relay_provider_key.as_ref().unwrap();
        assert_eq!(key.expose_secret(), "sk-relay-2");
        assert!(!format!("{config:?}").contains("sk-relay-2"));
        let config = load("[egress.relay]\napi_key_env = \"NXW_UNSET\"\n", &[]).unwrap();
        assert!(config.secrets.relay_provider_key.is_none());
    }

    /// The `config.toml` that `nexbot init` wrote on 2026-11-22 (v1). Operators have it on disk,
    /// so it must keep loading, and meaning the same, after every later change. Never edit the
    /// fixture: a change that needs it edited breaks their files too.
    const CONFIG_V1: &str = include_str!("../tests/fixtures/config-v1.toml");

    fn load_v1(env: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let env = env.iter().map(|(k, v)| (k.to_string(), v.to_string()));
        Config::from_parts(CONFIG_V1, Path::new("config-v1.toml"), Path::new("/srv/nexbot"), env)
    }

    #[test]
    fn config_written_by_v1_init_still_loads() {
        let config = load_v1(&[]).expect("the v1 config.toml must keep loading");
        assert_eq!(config.workspace.dir, Path::new("/srv/nexbot/."));
        assert_eq!(config.database_path(), Path::new("/srv/nexbot/./nexbot.db"));
        assert_eq!(config.agent.max_iterations, 20);
        // Added later: an old file without it gets the default.
        assert_eq!(config.agent.ask_timeout_secs, 300);
        assert_eq!(config.llm.base_url, "https://api.z.ai/api/paas/v4");
        assert_eq!(config.llm.model, "glm-4.7-flash");
        assert_eq!((config.llm.max_tokens, config.llm.temperature), (None, None));
        let bus = &config.bus;
        assert_eq!((bus.inbound_capacity, bus.outbound_capacity, bus.per_chat_queue), (64, 64, 8));
        assert_eq!(bus.max_parallel_turns, 4);
        let subagent = &config.subagent;
        assert!(subagent.enabled);
        assert_eq!(subagent.pool_name, "nexbot");
        assert_eq!((subagent.pool_size, subagent.task_timeout_secs), (4, 300));
        assert_eq!(subagent.max_blocked_commands, 3, "a key the v1 file lacks: its default");
        assert_eq!(subagent.search_budget, 20, "a key the v1 file lacks: its default");
        assert_eq!(
            (subagent.image.as_str(), subagent.network.as_str()),
            ("nexbot-subagent:dev", "nexbot-subagents")
        );
        assert_eq!(config.subagent_llm_model(), "glm-4.7-flash");
        let egress = config.egress_config();
        assert_eq!((egress.port, egress.listen_addr), (3128, None));
        assert!(egress.firewall && egress.require_attribution);
        assert_eq!(config.egress_audit_path(), Path::new("/srv/nexbot/./egress-audit.jsonl"));
        let allow: Vec<String> = egress.proxy.allow_domains.iter().map(|d| d.to_string()).collect();
        assert_eq!(allow, ["*"]);
        assert!(egress.proxy.deny_domains.is_empty() && egress.proxy.allow_internal.is_empty());
        let relay = &egress.relay;
        assert_eq!(relay.provider_base_url.as_deref(), Some("https://api.z.ai/api/paas/v4"));
        assert_eq!(relay.api_key_env, "NEXBOT_LLM_API_KEY");
        assert_eq!(relay.default_token_budget, 200_000);
        assert!(!relay.send_provider_key_to_subagents);
        assert_eq!(
            (config.logging.level.as_str(), config.logging.format.as_str()),
            ("info", "text")
        );
        assert!(config.secrets.llm_api_key.is_none());
    }

    #[test]
    fn v1_environment_names_still_apply_to_the_v1_config() {
        // Spelled out, not taken from the constants: these are the names in operators'
        // environments and compose files.
        let config = load_v1(&[
            ("NEXBOT_LLM__MODEL", "gpt-4o-mini"),
            ("NEXBOT_LLM__BASE_URL", "http://localhost:11434/v1"),
            ("NEXBOT_AGENT__MAX_ITERATIONS", "30"),
            ("NEXBOT_BUS__PER_CHAT_QUEUE", "2"),
            ("NEXBOT_SUBAGENT__POOL_SIZE", "2"),
            ("NEXBOT_SUBAGENT__ENABLED", "false"),
            ("NEXBOT_EGRESS__PROXY__ALLOW_DOMAINS", r#"["*.example.org"]"#),
            ("NEXBOT_EGRESS__RELAY__DEFAULT_TOKEN_BUDGET", "1000"),
            ("NEXBOT_LOGGING__FORMAT", "json"),
            ("NEXBOT_LLM_API_KEY", "sk-v1-key"),
            ("NEXBOT_TELEGRAM_TOKEN", "tg-v1-token"),
            ("NEXBOT_MASTER_KEY", "mk-v1-key"),
        ])
        .expect("the v1 config.toml with v1 overrides must keep loading");
        assert_eq!(config.llm.model, "gpt-4o-mini");
        assert_eq!(config.llm.base_url, "http://localhost:11434/v1");
        assert_eq!(config.agent.max_iterations, 30);
        assert_eq!(config.bus.per_chat_queue, 2);
        assert_eq!(config.subagent.pool_size, 2);
        assert!(!config.subagent.enabled);
        assert_eq!(config.subagent_llm_model(), "gpt-4o-mini");
        let egress = config.egress_config();
        let allow: Vec<String> = egress.proxy.allow_domains.iter().map(|d| d.to_string()).collect();
        assert_eq!(allow, ["*.example.org"]);
        assert_eq!(egress.relay.default_token_budget, 1000);
        assert_eq!(egress.relay.provider_base_url.as_deref(), Some("http://localhost:11434/v1"));
        assert_eq!(config.logging.format, "json");
        let secret = |s: &Option<SecretString>| s.as_ref().map(|s| s.expose_secret().to_owned());
        assert_eq!(secret(&config.secrets.llm_api_key).as_deref(), Some("sk-v1-key"));
        assert_eq!(secret(&config.secrets.relay_provider_key).as_deref(), Some("sk-v1-key"));
        assert_eq!(secret(&config.secrets.telegram_token).as_deref(), Some("tg-v1-token"));
        assert_eq!(secret(&config.secrets.master_key).as_deref(), Some("mk-v1-key"));
    }

    #[test]
    fn secrets_in_the_file_are_refused() {
        let err = load("[llm]\napi_key = \"sk-x\"\n", &[]).unwrap_err().to_string();
        assert!(err.contains("`llm.api_key`") && !err.contains("sk-x"), "{err}");
    }
}
