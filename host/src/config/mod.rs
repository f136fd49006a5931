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

mod validate;

use std::fmt;
use std::path::{Path, PathBuf};

use secrecy::SecretString;
use serde::{Deserialize, Serialize};
use thiserror::Error;

use nexbot_docker::PoolConfig;

use crate::deadlines::TaskLimits;
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
    /// The agent's web browser (an MCP server of the project's own, one per chat).
    pub browser: nexbot_browser::BrowserConfig,
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

/// What the pool and a delegated task's deadlines are given, derived from the config.
impl Config {
    /// The MCP servers the daemon runs: the operator's `[[mcp.servers]]`, then the browser's
    /// when `[browser]` is on (never written back as an `[[mcp.servers]]` entry).
    pub fn mcp_servers(&self) -> Vec<nexbot_mcp::ServerConfig> {
        self.mcp.servers.iter().cloned().chain(self.browser.server()).collect()
    }

    /// The pool's settings derived from `[subagent]` and `[sandbox]`'s runtime; its queue wait from the deadlines
    /// (`crate::deadlines`).
    pub fn pool_config(&self) -> PoolConfig {
        let config = self;
        let s = &config.subagent;
        let mut pool = PoolConfig {
            name: s.pool_name.clone(),
            image: s.image.clone(),
            size: s.pool_size,
            network: s.network.clone(),
            default_task_timeout_secs: s.task_timeout_secs,
            skills_dir: s.skills_dir.clone(),
            max_containers_per_room: s.max_containers_per_chat,
            room_idle_secs: s.chat_idle_secs,
            runtime: config.sandbox.runtime.clone(),
            ..PoolConfig::default()
        };
        pool.queue_timeout_secs = crate::deadlines::queue_wait(&config.task_limits()).as_secs();
        if !config.skills.allow_hashes.is_empty() {
            // The subagent's read_skill applies the same allowances (it knows no config).
            pool.env.insert("NEXBOT_SKILLS_ALLOW".into(), config.skills.allow_hashes.join(","));
        }
        pool
    }

    /// The numbers a delegated task's deadlines are planned with (`crate::deadlines`): the
    /// configured turn and task timeouts, and the graces of the pool [`Config::pool_config`] builds.
    pub fn task_limits(&self) -> TaskLimits {
        let config = self;
        let pool = PoolConfig::default();
        TaskLimits {
            turn_timeout_secs: config.agent.turn_timeout_secs,
            task_timeout_secs: config.subagent.task_timeout_secs,
            hard_limit_grace_secs: pool.hard_limit_grace_secs,
            cancel_grace_ms: pool.cancel_grace_ms,
        }
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
mod tests;
