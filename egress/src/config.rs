//! Configuration of the egress listener (proxy + relay), read from the host's TOML.
//!
//! Every field has a default chosen so that an empty `[egress]` table is safe: internal
//! addresses denied, bounded connections, audit on, the provider key read from the environment
//! (never from a file) and never handed to containers.

use std::fmt;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use ipnet::IpNet;
use nexbot_llm::ProviderSpec;
use secrecy::SecretString;
use serde::{Deserialize, Serialize};

use super::literal;

/// The whole `[egress]` table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EgressConfig {
    /// Port of the one listener that serves both the proxy and the relay. `0` picks a free port.
    /// Default `3128`.
    pub port: u16,
    /// Address to listen on instead of the pool network's gateway (an address of this host on
    /// the pool network). Default: none (use the gateway; compose's host networking does too).
    pub listen_addr: Option<IpAddr>,
    /// File name of the JSON-lines audit log inside the data directory.
    /// Default `egress-audit.jsonl`.
    pub audit_file: String,
    /// Size in bytes at which the audit log is rotated (`egress-audit.jsonl` becomes
    /// `egress-audit.jsonl.1`, and so on). At least 4096. Default 16 MiB.
    pub audit_max_bytes: u64,
    /// Audit files kept, the live one included; the oldest is deleted beyond. `1` empties
    /// the file when it is full. Default `5` (at most 80 MiB with the default size).
    pub audit_max_files: usize,
    /// Audit lines written for one task; the rest are counted and left out, and one line
    /// says how many when the task ends. Default `10000`.
    pub audit_max_lines_per_task: u64,
    /// How often the owner is sent the audit chain's head in Telegram (seconds; a copy that
    /// lives off the host). Default `86400` (a day); `0`: never (`/audit` still shows it).
    pub audit_head_secs: u64,
    /// Lines for refused (or failed) connections written in one second; the rest are counted
    /// and left out, and one line says how many after that second. Default `50`.
    pub audit_max_refusals_per_sec: u64,
    /// Refuse proxy requests whose source address is not a known container. Default `true`.
    pub require_attribution: bool,
    /// Install `iptables` rules so that from the pool network's bridge the host accepts only
    /// the proxy port: an internal network otherwise reaches every address and port of the
    /// host itself. Needs root and `iptables` (the compose image carries it and has
    /// `NET_ADMIN`). Default `true`; set `false` only where the bridge is firewalled another way.
    pub firewall: bool,
    /// Seconds a client may take to send a request head. Default `10`.
    pub header_timeout_secs: u64,
    /// Most client connections served at once (proxy and relay together, tunnels included);
    /// further connections wait to be accepted. Default `256`.
    pub max_connections: usize,
    /// Most client connections from one source address (one container). Default `64`.
    pub max_connections_per_source: usize,
    /// Most client connections from the containers of one room (chat) together: one chat can
    /// take only its share of the listener, however many containers it has. Default `128`.
    pub max_connections_per_chat: usize,
    /// What happens to a destination no rule names: `"ask"` holds the connection and asks
    /// the task's chat, `"allowlist"` refuses it silently, `"open"` allows any host
    /// `proxy.allow_domains` matches. Left out (a config from before modes existed): `open`,
    /// today's behaviour, and the daemon says how to turn `ask` on. `nexbot init` writes
    /// `"ask"`. The deny list and the address rules (`proxy.deny_domains`, internal and host
    /// addresses, `proxy.allow_ports`/`port_rules`) are applied first in every mode.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<crate::EgressMode>,
    /// Destinations allowed without a question in `ask` and `allowlist` modes: host patterns
    /// with a port, 443 unless named (`"api.example.com"`, `"*.pypi.org"`,
    /// `"files.example.com:8443"`). `proxy.allow_domains` applies only in `open` mode.
    /// Default empty.
    pub allow: Vec<crate::AllowRule>,
    /// Seconds a held connection waits for an answer before it is refused ("no answer").
    /// Default `120`.
    pub approval_timeout_secs: u64,
    /// Most destinations one task may ask about; the rest are refused (one message says so).
    /// Default `8`.
    pub max_questions_per_task: usize,
    /// Most requests of one chat held for an answer at once (`ask` mode); more are refused
    /// at once. A held request keeps its client connection open, so without a share per chat
    /// one chat's held requests could take the connections every other chat's tasks (and
    /// their model calls through the relay) need. Default `16`.
    pub max_held_per_chat: usize,
    /// Most requests held for an answer at once across all chats; more are refused at once.
    /// `0` (the default): half of `max_connections`, so that held requests can never take
    /// more than half of the listener's connections — the rest stay for the relay and for
    /// what is allowed.
    pub max_held: usize,
    /// In `ask` mode, what a task with nobody to ask gets (a scheduled job, a heartbeat
    /// check): `"deny"` (only `allow` rules) or `"allowlist"` (also the chat's "always"
    /// rules). Default `"deny"`.
    pub unattended: crate::Unattended,
    pub proxy: ProxyConfig,
    pub relay: RelayConfig,
}

impl Default for EgressConfig {
    fn default() -> Self {
        Self {
            port: 3128,
            listen_addr: None,
            audit_file: "egress-audit.jsonl".into(),
            audit_max_bytes: 16 << 20,
            audit_max_files: 5,
            audit_max_lines_per_task: 10_000,
            audit_head_secs: 86_400,
            audit_max_refusals_per_sec: 50,
            require_attribution: true,
            firewall: true,
            header_timeout_secs: 10,
            max_connections: 256,
            max_connections_per_source: 64,
            max_connections_per_chat: 128,
            mode: None,
            allow: Vec::new(),
            approval_timeout_secs: 120,
            max_questions_per_task: 8,
            max_held_per_chat: 16,
            max_held: 0,
            unattended: crate::Unattended::Deny,
            proxy: ProxyConfig::default(),
            relay: RelayConfig::default(),
        }
    }
}

/// The `[egress.proxy]` table: where containers may go and for how long.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ProxyConfig {
    /// Host patterns a container may reach: `*` (anything), `example.com` (that name),
    /// `*.example.com` (its subdomains, not the name itself), or an IP literal. An empty list
    /// allows nothing. Default `["*"]`: the public internet, never internal addresses.
    pub allow_domains: Vec<HostPattern>,
    /// Host patterns always refused, checked before `allow_domains`. Default empty.
    pub deny_domains: Vec<HostPattern>,
    /// Internal (private, loopback, link-local, metadata, …) destinations that are allowed
    /// anyway, each a CIDR (or a single address) with optional ports (empty = any port):
    /// `{ cidr = "10.0.0.0/8" }`, `{ cidr = "192.168.1.10", ports = [8123] }`, or the short
    /// form `"192.168.1.10:8123"` / `"[fd00::5]:9200"`.
    ///
    /// The host's own addresses (every address of every interface of this machine, the Docker
    /// gateways, loopback) are refused even when a CIDR here covers them: only an entry that
    /// names exactly one address *and* lists the port opens that address, on those ports only
    /// (e.g. a search backend on this server: `"198.51.100.77:9200"`); each use is audited
    /// with `"host_address": true`. Default empty: every internal address is denied.
    pub allow_internal: Vec<InternalAllow>,
    /// Destination ports a container may reach (CONNECT and plain HTTP alike) on any host no
    /// `port_rules` entry names. Default `[80, 443]`: a container cannot reach SSH, SMTP, a
    /// database or a dockerd port anywhere. An `allow_internal` entry that lists ports also
    /// opens those ports for the addresses it covers.
    pub allow_ports: Vec<u16>,
    /// Ports per host pattern, instead of `allow_ports` for the hosts they name (the first
    /// matching rule counts; it may widen or narrow):
    /// `port_rules = [{ hosts = ["git.example.com"], ports = [22, 443] }]`. Default empty.
    pub port_rules: Vec<PortRule>,
    /// Seconds between two reads of the host's own addresses (which are refused as
    /// destinations, see `allow_internal`); the host can also ask for a read at any time.
    /// Default `10`.
    pub host_addresses_refresh_secs: u64,
    /// Seconds allowed for resolving and connecting to a destination. Default `10`.
    pub connect_timeout_secs: u64,
    /// Longest life of one proxied connection or request, in seconds. Default `300`.
    pub max_duration_secs: u64,
    /// Most bytes a container may send through one connection. Default 64 MiB.
    pub max_bytes_up: u64,
    /// Most bytes a container may receive through one connection. Default 512 MiB.
    pub max_bytes_down: u64,
    /// PEM files of CA certificates trusted for `https://` destinations of absolute-form
    /// requests, besides the public web roots (the proxy makes those TLS connections itself,
    /// to put secrets in): for self-hosted HTTPS backends with a private CA. Each file must
    /// hold at least one certificate; the config is refused otherwise, naming the file.
    /// Default empty.
    pub extra_ca_files: Vec<PathBuf>,
}

impl Default for ProxyConfig {
    fn default() -> Self {
        Self {
            allow_domains: vec![HostPattern::any()],
            deny_domains: Vec::new(),
            allow_internal: Vec::new(),
            allow_ports: vec![80, 443],
            port_rules: Vec::new(),
            host_addresses_refresh_secs: 10,
            connect_timeout_secs: 10,
            max_duration_secs: 300,
            max_bytes_up: 64 << 20,
            max_bytes_down: 512 << 20,
            extra_ca_files: Vec::new(),
        }
    }
}

impl ProxyConfig {
    pub fn connect_timeout(&self) -> Duration {
        Duration::from_secs(self.connect_timeout_secs)
    }

    pub fn max_duration(&self) -> Duration {
        Duration::from_secs(self.max_duration_secs)
    }

    pub fn host_addresses_refresh(&self) -> Duration {
        Duration::from_secs(self.host_addresses_refresh_secs)
    }

    /// The ports allowed for a host by name: its first port rule's, else `allow_ports`.
    pub fn ports_for(&self, host: &str) -> &[u16] {
        self.port_rules
            .iter()
            .find(|rule| rule.hosts.iter().any(|p| p.matches(host)))
            .map_or(&self.allow_ports, |rule| &rule.ports)
    }
}

/// One entry of `proxy.port_rules`: the ports the hosts matching `hosts` may be reached on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PortRule {
    /// Host patterns, as in `allow_domains`.
    pub hosts: Vec<HostPattern>,
    pub ports: Vec<u16>,
}

/// The `[egress.relay]` table: the OpenAI-compatible relay that holds the real provider keys.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RelayConfig {
    /// The providers in order of preference (`[[egress.relay.providers]]`, the same fields as
    /// `[[llm.providers]]`: `name`, `base_url`, `model`, `api_key_env`, prices,
    /// `context_window`). A call goes to the first; when it answers 429, 5xx, 401/403, "no
    /// quota", or cannot be reached, the next one is tried — before any byte of an answer
    /// goes back to the container (once an answer streams, there is no fallback). Each
    /// provider is tried at most once per call, within `timeout_secs`; one that keeps failing
    /// is skipped for a while (its breaker opens after 5 failures in a row, for 30 s). The
    /// primary gets the container's `model`; a fallback gets its own `model`. Each provider's
    /// key comes from its own `api_key_env` (none: a keyless local server).
    ///
    /// Default empty: the relay then forwards to `provider_base_url` with the key from
    /// `api_key_env`, the container's `model` unchanged (a list of one).
    pub providers: Vec<ProviderSpec>,
    /// The provider's OpenAI-compatible base URL, e.g. `https://api.openai.com/v1`, used when
    /// `providers` is empty; calls to `/v1/chat/completions` go to
    /// `{provider_base_url}/chat/completions`. Default: none, and with `providers` empty too
    /// the relay answers 503.
    pub provider_base_url: Option<String>,
    /// Name of the environment variable holding the key of `provider_base_url`. Default
    /// `NEXBOT_LLM_API_KEY`. The key itself is never read from a file.
    pub api_key_env: String,
    /// Token budget of a task when the caller does not give one. Default `200000`.
    ///
    /// A call reserves its worst case before it is sent — the prompt estimate (request bytes
    /// ÷ 3) plus its `max_tokens` — and is refused (403 `task_budget_exhausted`) when that
    /// would pass the budget with what is used and reserved by calls in flight; when its
    /// answer ends the reservation becomes the tokens the provider reported.
    pub default_token_budget: u64,
    /// The `max_tokens` the relay adds to a call that gives neither `max_tokens` nor
    /// `max_completion_tokens`, so every call's worst case is bounded. Default `4096`.
    pub default_max_tokens: u64,
    /// Seconds one relayed call may take, every provider tried and streaming included.
    /// Default `600`.
    pub timeout_secs: u64,
    /// Largest request body accepted from a container, in bytes. Default 8 MiB.
    pub max_request_bytes: usize,
    /// Ask the provider for a final `usage` chunk on streamed calls (`stream_options`), so
    /// they are counted exactly. Default `true`; turn off for providers that reject the field.
    pub request_stream_usage: bool,
    /// The seed's `llm_api_key` request field as an explicit opt-in: when `true` the host may
    /// put the real key into execute requests (it then enters containers, and the provider's
    /// host must be allowed by the proxy). Default `false`: containers only get per-task tokens.
    pub send_provider_key_to_subagents: bool,
    /// The models a container may ask the first provider for. A call that names none of them
    /// is sent with the first (the container's `model` is not trusted: a task could ask for
    /// the provider's most expensive model). Empty: the first provider's own `model`, or —
    /// for the single `provider_base_url`, which has none — the container's. The daemon sets
    /// it to `subagent.llm_model` when it is left empty.
    pub models: Vec<String>,
}

impl Default for RelayConfig {
    fn default() -> Self {
        Self {
            providers: Vec::new(),
            provider_base_url: None,
            api_key_env: "NEXBOT_LLM_API_KEY".into(),
            default_token_budget: 200_000,
            default_max_tokens: 4096,
            timeout_secs: 600,
            max_request_bytes: 8 << 20,
            request_stream_usage: true,
            send_provider_key_to_subagents: false,
            models: Vec::new(),
        }
    }
}

/// A relay provider as the relay runs it: [`RelayConfig::chain`].
#[derive(Debug, Clone, PartialEq)]
pub struct RelayProvider {
    pub spec: ProviderSpec,
    /// Whether the relay puts `spec.model` into the calls it sends there. Not for the legacy
    /// single provider (`provider_base_url`), which has no model of its own.
    pub sets_model: bool,
}

impl RelayConfig {
    /// Reads the provider key from the environment variable `api_key_env`; `None` when it is
    /// unset or empty (a keyless local provider such as Ollama).
    pub fn provider_key_from_env(&self) -> Option<SecretString> {
        std::env::var(&self.api_key_env).ok().filter(|v| !v.is_empty()).map(SecretString::from)
    }

    pub fn timeout(&self) -> Duration {
        Duration::from_secs(self.timeout_secs)
    }

    /// The providers the relay forwards to, in order: `providers`, or else the one of
    /// `provider_base_url` (keyed by `api_key_env`); empty when neither is set.
    pub fn chain(&self) -> Vec<RelayProvider> {
        if !self.providers.is_empty() {
            return self
                .providers
                .iter()
                .map(|spec| RelayProvider { spec: spec.clone(), sets_model: true })
                .collect();
        }
        let Some(base_url) = &self.provider_base_url else { return Vec::new() };
        let mut spec = ProviderSpec::new(base_url, "");
        spec.api_key_env = Some(self.api_key_env.clone());
        vec![RelayProvider { spec, sets_model: false }]
    }

    /// The environment variables holding the keys of [`RelayConfig::chain`], each once, in
    /// order: what the host reads into [`ProviderKeys`].
    pub fn key_envs(&self) -> Vec<String> {
        let mut names: Vec<String> = Vec::new();
        for provider in self.chain() {
            if let Some(name) = provider.spec.api_key_env.filter(|n| !n.is_empty()) {
                if !names.contains(&name) {
                    names.push(name);
                }
            }
        }
        names
    }
}

/// The relay's provider keys by the name of the environment variable they come from
/// (`api_key_env`). `Debug` shows the names only.
#[derive(Clone, Default)]
pub struct ProviderKeys(std::collections::BTreeMap<String, SecretString>);

impl fmt::Debug for ProviderKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.0.keys()).finish()
    }
}

impl ProviderKeys {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds the key read from the variable `env`; an empty key is left out (a keyless
    /// provider).
    pub fn insert(&mut self, env: impl Into<String>, key: SecretString) {
        use secrecy::ExposeSecret;
        if !key.expose_secret().is_empty() {
            self.0.insert(env.into(), key);
        }
    }

    /// The key of `provider_base_url` alone (what [`crate::Egress::start`] is given).
    pub fn single(env: &str, key: Option<SecretString>) -> Self {
        let mut keys = Self::new();
        if let Some(key) = key {
            keys.insert(env, key);
        }
        keys
    }

    /// Reads every variable of [`RelayConfig::key_envs`] from this process's environment.
    pub fn from_env(config: &RelayConfig) -> Self {
        let mut keys = Self::new();
        for name in config.key_envs() {
            if let Ok(value) = std::env::var(&name) {
                keys.insert(name, SecretString::from(value));
            }
        }
        keys
    }

    pub fn get(&self, env: &str) -> Option<&SecretString> {
        self.0.get(env)
    }

    pub fn values(&self) -> impl Iterator<Item = &SecretString> {
        self.0.values()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// A problem in the configuration, naming the field.
#[derive(Debug, thiserror::Error)]
#[error("egress config: {field}: {reason}")]
pub struct ConfigError {
    pub field: &'static str,
    pub reason: String,
}

impl EgressConfig {
    /// The mode in force: `open` when the config names none (see [`EgressConfig::mode`]).
    pub fn effective_mode(&self) -> crate::EgressMode {
        self.mode.unwrap_or(crate::EgressMode::Open)
    }

    /// How long a held connection waits for an answer.
    pub fn approval_timeout(&self) -> Duration {
        Duration::from_secs(self.approval_timeout_secs)
    }

    /// Whether an `egress.allow` rule covers `host` on `port`.
    pub fn allows(&self, host: &str, port: u16) -> bool {
        self.allow.iter().any(|rule| rule.covers(host, port))
    }

    /// The audit log's bounds.
    pub fn audit_limits(&self) -> crate::AuditLimits {
        crate::AuditLimits {
            max_bytes: self.audit_max_bytes,
            max_files: self.audit_max_files,
            max_lines_per_task: self.audit_max_lines_per_task,
            max_refusals_per_sec: self.audit_max_refusals_per_sec,
        }
    }

    /// Requests held for an answer at once across all chats (see [`Self::max_held`]).
    pub fn held_capacity(&self) -> usize {
        match self.max_held {
            0 => (self.max_connections / 2).max(1),
            n => n,
        }
    }

    /// Checks what serde cannot: value ranges and the provider URL.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let positive = [
            ("header_timeout_secs", self.header_timeout_secs),
            ("audit_max_files", self.audit_max_files as u64),
            ("audit_max_lines_per_task", self.audit_max_lines_per_task),
            ("audit_max_refusals_per_sec", self.audit_max_refusals_per_sec),
            ("max_connections", self.max_connections as u64),
            ("max_connections_per_source", self.max_connections_per_source as u64),
            ("max_connections_per_chat", self.max_connections_per_chat as u64),
            ("approval_timeout_secs", self.approval_timeout_secs),
            ("max_questions_per_task", self.max_questions_per_task as u64),
            ("max_held_per_chat", self.max_held_per_chat as u64),
            ("proxy.connect_timeout_secs", self.proxy.connect_timeout_secs),
            ("proxy.max_duration_secs", self.proxy.max_duration_secs),
            ("proxy.host_addresses_refresh_secs", self.proxy.host_addresses_refresh_secs),
            ("relay.timeout_secs", self.relay.timeout_secs),
            ("relay.max_request_bytes", self.relay.max_request_bytes as u64),
            ("relay.default_max_tokens", self.relay.default_max_tokens),
        ];
        for (field, value) in positive {
            if value == 0 {
                return Err(ConfigError { field, reason: "must be greater than 0".into() });
            }
        }
        if self.audit_max_bytes < 4096 {
            return Err(ConfigError {
                field: "audit_max_bytes",
                reason: format!("{} is too small: at least 4096", self.audit_max_bytes),
            });
        }
        let port_lists = std::iter::once(("proxy.allow_ports", &self.proxy.allow_ports))
            .chain(self.proxy.port_rules.iter().map(|r| ("proxy.port_rules", &r.ports)))
            .chain(self.proxy.allow_internal.iter().map(|a| ("proxy.allow_internal", &a.ports)));
        for (field, ports) in port_lists {
            if ports.contains(&0) {
                return Err(ConfigError { field, reason: "port 0 is not a port".into() });
            }
        }
        if self.proxy.port_rules.iter().any(|rule| rule.hosts.is_empty()) {
            return Err(ConfigError {
                field: "proxy.port_rules",
                reason: "a rule needs at least one host pattern".into(),
            });
        }
        if self.audit_file.is_empty() || self.audit_file.contains('/') || self.audit_file == ".." {
            return Err(ConfigError {
                field: "audit_file",
                reason: format!("{:?} must be a plain file name", self.audit_file),
            });
        }
        crate::tls::client_config(&self.proxy.extra_ca_files)?;
        if self.relay.api_key_env.is_empty() {
            return Err(ConfigError { field: "relay.api_key_env", reason: "is empty".into() });
        }
        if let Some(url) = &self.relay.provider_base_url {
            check_base_url(url, "relay.api_key_env")
                .map_err(|reason| ConfigError { field: "relay.provider_base_url", reason })?;
        }
        for (i, spec) in self.relay.providers.iter().enumerate() {
            let field = format!("relay.providers[{i}]");
            let invalid = |reason| ConfigError { field: "relay.providers", reason };
            spec.check(&field).map_err(invalid)?;
            check_base_url(&spec.base_url, &format!("{field}.api_key_env"))
                .map_err(|reason| invalid(format!("{field}.base_url: {reason}")))?;
            if spec.api_key_env.as_deref().is_some_and(|name| name.trim().is_empty()) {
                return Err(invalid(format!(
                    "{field}.api_key_env is empty; leave it out for a provider without a key"
                )));
            }
        }
        Ok(())
    }
}

/// A provider URL: http(s) with a host, no credentials, no query (`key_field` is where the
/// key belongs instead).
fn check_base_url(url: &str, key_field: &str) -> Result<(), String> {
    let parsed = reqwest::Url::parse(url).map_err(|e| format!("{url:?} is not a URL: {e}"))?;
    if !matches!(parsed.scheme(), "http" | "https") || parsed.host().is_none() {
        return Err(format!("{url:?} must be an http:// or https:// URL with a host"));
    }
    if parsed.query().is_some() || !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(format!(
            "must not carry credentials or a query; the key comes from {key_field}"
        ));
    }
    Ok(())
}

/// A host pattern of the allow/deny lists, validated when the config is read.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct HostPattern(Pattern);

#[derive(Clone, PartialEq, Eq)]
enum Pattern {
    Any,
    Exact(String),
    Suffix(String),
    /// An address, canonical (IPv4-mapped IPv6 as IPv4), matched in any spelling.
    Ip(IpAddr),
}

impl HostPattern {
    pub fn any() -> Self {
        Self(Pattern::Any)
    }

    /// Whether `host` (already lower-case, without a trailing dot) matches. An address
    /// pattern matches the address in any spelling (`0x7f.1`, `[::ffff:7f00:1]`, …).
    pub fn matches(&self, host: &str) -> bool {
        match &self.0 {
            Pattern::Any => true,
            Pattern::Ip(ip) => literal::parse_ip(host) == Some(*ip),
            Pattern::Exact(name) => host == name,
            Pattern::Suffix(parent) => host
                .strip_suffix(parent.as_str())
                .is_some_and(|head| head.len() > 1 && head.ends_with('.')),
        }
    }
}

impl HostPattern {
    /// Whether this is an address pattern for `ip`, or for the IPv4 address an IPv6 form of
    /// `ip` carries (mapped, compatible, NAT64, 6to4): how a deny entry for an address also
    /// refuses names that resolve to it and every disguise of it.
    pub(crate) fn denies_ip(&self, ip: IpAddr) -> bool {
        let Pattern::Ip(denied) = self.0 else { return false };
        let ip = ip.to_canonical();
        ip == denied
            || matches!(ip, IpAddr::V6(v6) if crate::host_addrs::embedded_v4(v6).map(IpAddr::V4) == Some(denied))
    }
}

impl TryFrom<String> for HostPattern {
    type Error = String;

    fn try_from(raw: String) -> Result<Self, String> {
        let text = raw.trim().trim_end_matches('.').to_ascii_lowercase();
        if text == "*" {
            return Ok(Self::any());
        }
        let (suffix, name) = match text.strip_prefix("*.") {
            Some(rest) => (true, rest),
            None => (false, text.as_str()),
        };
        if !suffix {
            if let Some(ip) = literal::parse_ip(name) {
                return Ok(Self(Pattern::Ip(ip)));
            }
        }
        let valid = !name.is_empty()
            && !literal::ends_in_number(name)
            && name.len() <= 253
            && name.split('.').all(|label| {
                !label.is_empty()
                    && label.len() <= 63
                    && label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            });
        if !valid {
            return Err(format!(
                "invalid host pattern {raw:?}: use `*`, `example.com`, `*.example.com` or an IP"
            ));
        }
        let name = name.to_owned();
        Ok(Self(if suffix { Pattern::Suffix(name) } else { Pattern::Exact(name) }))
    }
}

impl From<HostPattern> for String {
    fn from(pattern: HostPattern) -> Self {
        pattern.to_string()
    }
}

impl fmt::Display for HostPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Pattern::Any => f.write_str("*"),
            Pattern::Exact(name) => f.write_str(name),
            Pattern::Suffix(parent) => write!(f, "*.{parent}"),
            Pattern::Ip(ip) => write!(f, "{ip}"),
        }
    }
}

impl fmt::Debug for HostPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "HostPattern({self})")
    }
}

/// One entry of `proxy.allow_internal`: `{ cidr = "172.30.0.1/32", ports = [8080] }`, or the
/// short form `"172.30.0.1:8080"` (one address, one port).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "RawInternalAllow")]
pub struct InternalAllow {
    pub cidr: Cidr,
    #[serde(default)]
    pub ports: Vec<u16>,
}

impl InternalAllow {
    pub fn matches(&self, ip: IpAddr, port: u16) -> bool {
        self.cidr.0.contains(&ip.to_canonical())
            && (self.ports.is_empty() || self.ports.contains(&port))
    }

    /// Whether this entry names exactly `ip` (a single address, not a wider block) and lists
    /// `port`: the only kind of entry that opens one of the host's own addresses.
    pub fn opens_exactly(&self, ip: IpAddr, port: u16) -> bool {
        let net = self.cidr.0;
        net.prefix_len() == net.max_prefix_len()
            && net.addr() == ip.to_canonical()
            && self.ports.contains(&port)
    }
}

/// The table form of an `allow_internal` entry, with serde's own error messages.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct InternalAllowTable {
    cidr: Cidr,
    #[serde(default)]
    ports: Vec<u16>,
}

/// Either form of an `allow_internal` entry, as written.
enum RawInternalAllow {
    Table(InternalAllowTable),
    Short(String),
}

impl<'de> Deserialize<'de> for RawInternalAllow {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = RawInternalAllow;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(r#"`{ cidr = "...", ports = [...] }` or `"ip:port"`"#)
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(RawInternalAllow::Short(v.to_owned()))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                map: A,
            ) -> Result<Self::Value, A::Error> {
                let table = InternalAllowTable::deserialize(
                    serde::de::value::MapAccessDeserializer::new(map),
                )?;
                Ok(RawInternalAllow::Table(table))
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

impl TryFrom<RawInternalAllow> for InternalAllow {
    type Error = String;

    fn try_from(raw: RawInternalAllow) -> Result<Self, String> {
        match raw {
            RawInternalAllow::Table(InternalAllowTable { cidr, ports }) => Ok(Self { cidr, ports }),
            RawInternalAllow::Short(text) => {
                let addr: std::net::SocketAddr = text.trim().parse().map_err(|_| {
                    format!(
                        "invalid allow_internal entry {text:?}: use `\"ip:port\"`, \
                         `\"[v6]:port\"` or `{{ cidr = \"10.0.0.0/8\", ports = [80] }}`"
                    )
                })?;
                Ok(Self {
                    cidr: Cidr(IpNet::from(addr.ip().to_canonical())),
                    ports: vec![addr.port()],
                })
            }
        }
    }
}

/// A CIDR block; a bare address means just that address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Cidr(pub IpNet);

impl TryFrom<String> for Cidr {
    type Error = String;

    fn try_from(raw: String) -> Result<Self, String> {
        let text = raw.trim();
        let net = match text.parse::<IpNet>() {
            Ok(net) => net.trunc(),
            Err(_) => text.parse::<IpAddr>().map(IpNet::from).map_err(|_| {
                format!("invalid CIDR {raw:?}: use e.g. `10.0.0.0/8` or `192.0.2.7`")
            })?,
        };
        Ok(Self(canonical_net(net)))
    }
}

/// An IPv4-mapped IPv6 block (`::ffff:10.0.0.0/104`) as the IPv4 block it stands for, since
/// addresses are always judged in their IPv4 form.
fn canonical_net(net: IpNet) -> IpNet {
    match net {
        IpNet::V6(v6) if v6.prefix_len() >= 96 => match v6.addr().to_ipv4_mapped() {
            Some(v4) => ipnet::Ipv4Net::new(v4, v6.prefix_len() - 96).map_or(net, IpNet::V4),
            None => net,
        },
        other => other,
    }
}

impl From<Cidr> for String {
    fn from(cidr: Cidr) -> Self {
        cidr.0.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<EgressConfig, toml::de::Error> {
        toml::from_str(text)
    }

    #[test]
    fn empty_table_gives_the_safe_defaults() {
        let config = parse("").unwrap();
        assert_eq!(config, EgressConfig::default());
        assert!(config.require_attribution && config.firewall);
        assert!(config.proxy.allow_internal.is_empty());
        assert!(!config.relay.send_provider_key_to_subagents);
        assert_eq!(config.audit_limits(), crate::AuditLimits::default());
        config.validate().unwrap();
    }

    /// The `[egress]` section of the config template `nexbot init` writes documents these
    /// defaults: it must be them.
    #[test]
    fn the_hosts_config_template_states_these_defaults() {
        let template: toml::Table =
            toml::from_str(include_str!("../../host/src/defaults/config.toml")).unwrap();
        let section = template["egress"].clone();
        let config: EgressConfig = section.try_into().unwrap();
        // A new install asks; a config without `mode` (an earlier version's) stays open.
        let new_install =
            EgressConfig { mode: Some(crate::EgressMode::Ask), ..EgressConfig::default() };
        assert_eq!(config, new_install);
        assert_eq!(EgressConfig::default().effective_mode(), crate::EgressMode::Open);
    }

    #[test]
    fn full_table_parses() {
        let config = parse(
            r#"
            port = 0
            listen_addr = "172.30.0.1"
            [proxy]
            allow_domains = ["*.example.com", "api.github.com"]
            deny_domains = ["evil.example.com"]
            allow_internal = [{ cidr = "10.1.0.0/16", ports = [8080] }, { cidr = "127.0.0.1" }]
            max_bytes_down = 1000
            [relay]
            provider_base_url = "https://api.example.com/v1"
            default_token_budget = 5
            "#,
        )
        .unwrap();
        config.validate().unwrap();
        assert_eq!(config.proxy.allow_domains.len(), 2);
        let internal = &config.proxy.allow_internal;
        assert!(internal[0].matches("10.1.2.3".parse().unwrap(), 8080));
        assert!(!internal[0].matches("10.1.2.3".parse().unwrap(), 8081));
        assert!(internal[1].matches("127.0.0.1".parse().unwrap(), 1));
        assert!(!internal[1].matches("127.0.0.2".parse().unwrap(), 1));
    }

    #[test]
    fn unknown_fields_and_bad_values_are_named() {
        let err = parse("[proxy]\nallow_domain = []").unwrap_err().to_string();
        assert!(err.contains("allow_domain"), "{err}");
        let err = parse("[proxy]\nallow_domains = [\"exa mple.com\"]").unwrap_err().to_string();
        assert!(err.contains("invalid host pattern"), "{err}");
        let err = parse("[proxy]\nallow_internal = [{ cidr = \"10.0.0.0/33\" }]")
            .unwrap_err()
            .to_string();
        assert!(err.contains("invalid CIDR"), "{err}");
        let config = parse("[relay]\nprovider_base_url = \"ftp://x\"").unwrap();
        let err = config.validate().unwrap_err().to_string();
        assert!(err.contains("relay.provider_base_url"), "{err}");
        let config = parse("[relay]\nprovider_base_url = \"https://h/v1?key=sk\"").unwrap();
        assert!(config.validate().is_err());
        let config = parse("[proxy]\nmax_duration_secs = 0").unwrap();
        assert!(config.validate().unwrap_err().to_string().contains("proxy.max_duration_secs"));
        let config = parse("audit_file = \"../x\"").unwrap();
        assert!(config.validate().is_err());
        let config = parse("audit_max_bytes = 100").unwrap();
        assert!(config.validate().unwrap_err().to_string().contains("audit_max_bytes"));
        let config = parse("audit_max_files = 0").unwrap();
        assert!(config.validate().unwrap_err().to_string().contains("audit_max_files"));
    }

    #[test]
    fn relay_providers_form_the_chain_and_the_old_fields_a_list_of_one() {
        let config = parse("[relay]\nprovider_base_url = \"https://one.example/v1\"").unwrap();
        let chain = config.relay.chain();
        assert_eq!(chain.len(), 1);
        assert_eq!(chain[0].spec.base_url, "https://one.example/v1");
        assert_eq!(chain[0].spec.api_key_env.as_deref(), Some("NEXBOT_LLM_API_KEY"));
        assert!(!chain[0].sets_model, "the container's model goes to the old single provider");
        assert_eq!(config.relay.key_envs(), ["NEXBOT_LLM_API_KEY"]);
        assert_eq!(config.relay.default_max_tokens, 4096);

        let config = parse(
            r#"
            [relay]
            provider_base_url = "https://ignored.example/v1"
            default_max_tokens = 512
            [[relay.providers]]
            name = "main"
            base_url = "https://api.example.com/v1"
            model = "big"
            api_key_env = "MAIN_KEY"
            [[relay.providers]]
            base_url = "http://localhost:11434/v1"
            model = "small"
            [[relay.providers]]
            base_url = "https://backup.example/v1"
            model = "other"
            api_key_env = "MAIN_KEY"
            "#,
        )
        .unwrap();
        config.validate().unwrap();
        let chain = config.relay.chain();
        let names: Vec<String> = chain.iter().map(|p| p.spec.display_name()).collect();
        assert_eq!(names, ["main", "localhost", "backup.example"]);
        assert!(chain.iter().all(|p| p.sets_model));
        assert_eq!(config.relay.key_envs(), ["MAIN_KEY"], "each variable once; none for local");
        assert_eq!(config.relay.default_max_tokens, 512);
    }

    #[test]
    fn relay_provider_problems_are_named() {
        let problem = |providers: &str| {
            let text = format!("[relay]\n{providers}");
            parse(&text).unwrap().validate().unwrap_err().to_string()
        };
        let err = problem("providers = [{ base_url = \"https://a.example/v1\", model = \"\" }]");
        assert!(err.contains("relay.providers[0].model is empty"), "{err}");
        let err = problem(
            "providers = [{ base_url = \"https://a.example/v1\", model = \"m\" }, \
             { base_url = \"https://k@b.example/v1\", model = \"m\" }]",
        );
        assert!(err.contains("relay.providers[1].base_url"), "{err}");
        assert!(err.contains("relay.providers[1].api_key_env"), "{err}");
        let err = problem(
            "providers = [{ base_url = \"https://a.example/v1\", model = \"m\", api_key_env = \" \" }]",
        );
        assert!(err.contains("relay.providers[0].api_key_env is empty"), "{err}");
        let err = parse(
            "[relay]\nproviders = [{ base_url = \"https://a/v1\", model = \"m\", key = \"sk\" }]",
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("key"), "a key is never read from the file: {err}");
        let err = problem("default_max_tokens = 0");
        assert!(err.contains("relay.default_max_tokens"), "{err}");
    }

    #[test]
    fn provider_keys_show_names_only() {
        let mut keys = ProviderKeys::single("A_KEY", Some(SecretString::from("sk-dbg-0123456789")));
        keys.insert("EMPTY_KEY", SecretString::from(""));
        assert!(keys.get("A_KEY").is_some() && keys.get("EMPTY_KEY").is_none());
        let debug = format!("{keys:?}");
        assert_eq!(debug, r#"{"A_KEY"}"#);
    }

    #[test]
    fn allow_internal_takes_the_short_ip_port_form_and_mapped_blocks_as_ipv4() {
        let config = parse(
            r#"
            [proxy]
            allow_internal = ["198.51.100.77:9200", "[fd00::5]:443", { cidr = "::ffff:10.0.0.0/104" }]
            "#,
        )
        .unwrap();
        let internal = &config.proxy.allow_internal;
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert!(internal[0].opens_exactly(ip("198.51.100.77"), 9200));
        assert!(internal[0].opens_exactly(ip("::ffff:198.51.100.77"), 9200));
        assert!(!internal[0].opens_exactly(ip("198.51.100.77"), 9201));
        assert!(internal[1].opens_exactly(ip("fd00::5"), 443));
        assert!(internal[2].matches(ip("10.1.2.3"), 1));
        assert!(!internal[2].opens_exactly(ip("10.0.0.0"), 1), "a block is not one address");
        let err = parse("[proxy]\nallow_internal = [\"198.51.100.77\"]").unwrap_err().to_string();
        assert!(err.contains("invalid allow_internal entry"), "{err}");
        let err = parse("[proxy]\nallow_internal = [{ cidr = \"10.0.0.1\", port = 1 }]")
            .unwrap_err()
            .to_string();
        assert!(err.contains("port"), "{err}");
    }

    #[test]
    fn ports_default_to_web_ports_and_rules_replace_them_per_host() {
        let config = parse("").unwrap();
        assert_eq!(config.proxy.ports_for("example.com"), [80, 443]);
        let config = parse(
            r#"
            [proxy]
            allow_ports = [443]
            port_rules = [
                { hosts = ["git.example.com"], ports = [22, 443] },
                { hosts = ["*.example.com", "10.0.0.1"], ports = [8443] },
            ]
            "#,
        )
        .unwrap();
        config.validate().unwrap();
        assert_eq!(config.proxy.ports_for("git.example.com"), [22, 443], "the first rule counts");
        assert_eq!(config.proxy.ports_for("www.example.com"), [8443]);
        assert_eq!(config.proxy.ports_for("10.0.0.1"), [8443]);
        assert_eq!(config.proxy.ports_for("example.org"), [443]);
        let config = parse("[proxy]\nallow_ports = [0]").unwrap();
        assert!(config.validate().unwrap_err().to_string().contains("proxy.allow_ports"));
        let config = parse("[proxy]\nport_rules = [{ hosts = [], ports = [1] }]").unwrap();
        assert!(config.validate().unwrap_err().to_string().contains("proxy.port_rules"));
    }

    #[test]
    fn host_patterns_match_names_and_subdomains() {
        let pattern = |s: &str| HostPattern::try_from(s.to_owned()).unwrap();
        assert!(pattern("*").matches("anything.org"));
        assert!(pattern("Example.COM.").matches("example.com"));
        assert!(!pattern("example.com").matches("www.example.com"));
        let sub = pattern("*.example.com");
        assert!(sub.matches("www.example.com"));
        assert!(sub.matches("a.b.example.com"));
        assert!(!sub.matches("example.com"));
        assert!(!sub.matches("badexample.com"));
        assert!(pattern("[::1]").matches("::1"));
        assert!(pattern("10.0.0.1").matches("10.0.0.1"));
        assert!(pattern("10.0.0.1").matches("167772161"));
        assert!(pattern("[::ffff:a00:1]").matches("0xa.1"));
        assert_eq!(pattern("[::FFFF:10.0.0.1]").to_string(), "10.0.0.1");
        assert!(HostPattern::try_from("1.2.3.4.5".to_owned()).is_err());
        assert!(HostPattern::try_from("*.1.2.3".to_owned()).is_err());
        assert_eq!(pattern("*.example.com").to_string(), "*.example.com");
    }
}
