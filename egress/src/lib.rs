//! `nexbot-egress` has one job: it is the sandbox's only way out — a forward proxy and an
//! LLM relay with per-task tokens, an audit line per connection, and the firewall rules that
//! leave the proxy port as the only thing the pool's bridge reaches on the host. It is also the
//! only holder of the LLM provider keys. It knows nothing of Docker: the caller says where to
//! listen ([`Network`]) and who sits behind a source address ([`Attribution`]).
//!
//! Subagent containers sit on an internal Docker network: nothing beyond the host, and on the
//! host (with the `iptables` rules of `firewall.rs`) only the proxy port on the network's
//! gateway address. There the host runs one listener ([`Egress`]) that is both
//! - an HTTP forward proxy (CONNECT and absolute-form HTTP) that resolves names itself, denies
//!   internal addresses (in every spelling), the host's own addresses (`host_addrs.rs`),
//!   unlisted domains and ports other than the allowed ones, limits bytes and time, and
//!   audits every connection with the container and task it came from (in a bounded,
//!   scrubbed log, `audit.rs`); and
//! - an OpenAI-compatible LLM relay that accepts per-task tokens, adds the real key, streams
//!   the answer back, falls back to the next provider when one fails before answering, and
//!   enforces each task's token budget by reserving a call's worst case before sending it.
//!
//! A task may hold proxy-mode secrets ([`TaskCredentials`]): its absolute-form requests
//! (`https://` too, with TLS made by the proxy) get `{{secret:NAME}}` placeholders filled in
//! for the hosts each secret is bound to, every answer it gets is scrubbed of the values, a
//! CONNECT to a bound host is refused, and its LLM calls are scrubbed before they go out.
//!
//! What each task did (destinations, verdicts, bytes) is kept per task and handed over when
//! it ends ([`TaskTokens::finish`]), which also cuts the task's open connections.
//!
//! Containers get `HTTP(S)_PROXY` pointing at the listener and `NO_PROXY` naming it
//! ([`Egress::container_env`]); execute requests get `llm_base_url` ([`Egress::relay_base_url`])
//! and a per-task `llm_token` ([`TaskTokens::issue`]). A relay call that goes through the proxy
//! anyway is recognised and served by the relay.
//!
//! # The forward proxy (`proxy.rs`, `policy.rs`, `literal.rs`, `host_addrs.rs`)
//!
//! Absolute-form and CONNECT requests. The proxy resolves names itself and dials exactly the
//! address it checked. It denies private, loopback, link-local, metadata and other special
//! addresses unless `egress.proxy.allow_internal` lists them; IP literals are read in every
//! spelling (decimal, hex, octal, IPv4-mapped) and judged as the canonical address, so a deny
//! entry matches them all. It refuses the host's own addresses — every address of every
//! interface, re-read periodically, and the pool network's gateway — unless an exact `ip:port`
//! `allow_internal` entry opens one (audited `host_address`), and every port but those of
//! `egress.proxy.allow_ports` (per host pattern: `port_rules`). Domain allow/deny patterns,
//! byte and time limits apply to every connection; sources that are not pool containers are
//! refused unless `require_attribution` is off (an egress without a pool: tests on loopback).
//! In `ask` and `allowlist` modes a destination no `egress.allow` rule covers passes the gate
//! (`proxy/gate.rs`): refused, or held while the host's approver asks.
//!
//! # Attribution: by the task, never by "whatever runs there now" (`attribution.rs`, `tokens.rs`)
//!
//! The source address says only which pool container sent a request ([`Attribution::lookup`];
//! the host's adapter over the pool). Whose request it is says the task's **egress
//! credential**: 256 random bits (`nxp_…`, `TaskTokens::issue_proxy`, kept as a digest like the
//! relay tokens), issued with the relay token, sent to the subagent on stdin in
//! `execute.egress_token` (never in a container's env, labels or `docker inspect`) and ended
//! with the task. The subagent presents it as `Proxy-Authorization: Basic` (user `task`).
//! Before anything is dialled (`proxy.rs`, `admit`), a request from a pool container that runs
//! no task is refused 403 `idle_container`; one without a credential 407
//! `proxy_credential_missing`; an ended task's credential 407 `task_ended` (the last
//! [`MAX_ENDED_CREDENTIALS`] are remembered); another live task's 407 `task_mismatch`; anything
//! else 407 `proxy_credential_invalid` — each audited under the task whose credential it was,
//! never the container's current task. `Proxy-Authorization` never goes upstream. The relay
//! binds its tokens the same way (403 `task_mismatch` / `idle_container`). A container the
//! attribution marks *dedicated* ([`Attributed::dedicated`]: an MCP server's, one identity for
//! its whole life, `mcp:<server>` or `mcp:<server>@<chat>`) is served under that identity
//! without a credential: nothing else ever runs there, so its address says whose it is.
//!
//! # The LLM relay (`relay.rs`, on `nexbot-llm`)
//!
//! Origin-form `POST /v1/chat/completions` and `GET /v1/models` on the same listener. Each task
//! gets `llm_base_url` (the listener + `/v1`) and an `llm_token` (256 random bits, issued when
//! the task starts, revoked when it ends, with a token budget). The relay swaps the token for
//! the real provider key (held only in the host's memory, each from the environment variable
//! its provider names: `RelayConfig::key_envs`, `Egress::start_with_keys`), streams the answer
//! back and charges the task the `usage` it reports (`nexbot_llm::usage::UsageTap`; an estimate
//! from the bytes when none is reported; error answers cost nothing). Handing the provider key
//! to subagents instead is an explicit opt-in (`egress.relay.send_provider_key_to_subagents`).
//!
//! **Budgets hold under concurrency.** A task's budget is a `nexbot_llm::Allowance`. Before a
//! chat call is sent the relay bounds it (`max_tokens` or `max_completion_tokens` as given,
//! else `egress.relay.default_max_tokens` is added; `n` other than 1 is refused with 400) and
//! reserves its worst case (the request's estimate + `max_tokens`). A call that would pass the
//! budget with what is used and reserved by calls in flight is refused with 403
//! `insufficient_quota` / `task_budget_exhausted` naming the cap, and nothing goes upstream. The
//! reservation is settled when the answer ends (or the client goes away); a call abandoned
//! before any answer is charged in full, and [`TaskTokens::finish`] counts calls still in
//! flight at their reservation (and cuts them).
//!
//! **The provider chain** is `egress.relay.providers` (an empty list means one provider,
//! `provider_base_url` + `api_key_env`). The plan and per-provider breakers are
//! `nexbot_llm::Chain`'s; each provider is tried at most once per call, within
//! `egress.relay.timeout_secs`. An answer whose class (`nexbot_llm::classify`) is retryable or
//! skips the provider (429, 5xx, 401/403, no quota), or no connection at all, moves the call to
//! the next provider — with that provider's key and `model` (the primary keeps the
//! container's) — before any byte goes back; a bad request is passed back as it is, and when
//! every provider fails the container gets the last answer (keys echoed in it replaced). Once
//! an answer streams there is no fallback. The audit line names the `provider` that answered
//! (and `fallback`); the task's summary counts `llm_providers` and `llm_fallbacks`; the metrics
//! count `relay_fallbacks`.
//!
//! # Proxy-mode secrets (`credentials.rs`, `binding.rs`, `inject.rs`, `tls.rs`, `scrub.rs`)
//!
//! A user's secret bound to hosts never enters a container. A [`Binding`] is a host pattern, a
//! port, https (or an explicit `http://host:port`) and the places in the request the value may
//! fill ([`Place`]: `Authorization` by default; `header:`, `path:`, `query:`, `body`); a bare
//! host is a legacy binding (anywhere; never over a public suffix, never plain http to a
//! public host; refused from [`LEGACY_BINDINGS_REFUSED_FROM`]). The host grants a task its [`Credential`]s
//! (`Egress::credentials().grant`); [`TaskTokens::finish`] drops them, values zeroized. The
//! container writes the placeholder `{{secret:NAME}}` (its `{`, `:`, `}` may be
//! percent-encoded, either hex case) and sends the request in **absolute form**, `https://`
//! included: the proxy dials the checked address and makes the TLS connection itself (web
//! roots plus `egress.proxy.extra_ca_files`, server name = the URL's host; audit kind `https`).
//! For a task with credentials the body is read whole (at most [`MAX_SECRET_BODY_BYTES`], else
//! 413) and the value put into the request target (percent-encoded), header values (raw; 400 if
//! not a valid header value) and the body (JSON-escaped for JSON, percent-encoded for forms and
//! wherever the placeholder was, raw otherwise), `Content-Length` fixed. A placeholder of a
//! secret the destination is not bound to (or of one with no hosts, handed over stdin)
//! refuses the request with 403 `secret_not_bound` before anything is dialled, one in a place
//! its binding does not name with 403 `secret_misplaced` (a `path:` prefix matches whole
//! segments), one in a path a server could read as another (`..`, `//`, `%2f`…) with 403
//! `secret_unsafe_path`; unknown names pass unchanged. Audit lines name the secrets (names
//! only); the task summary counts `secrets_injected` / `secrets_refused`.
//!
//! Every forward answer to such a task — not only those that carried a placeholder: a bound
//! host may hand a stored value back later — is **scrubbed** with the task's redactor
//! (`nexbot_redact`): headers (`Location` included; redirects are never followed), the
//! server's reason phrase dropped, the body streamed through `StreamRedactor` without
//! `Content-Length`. The proxy asks for `Accept-Encoding: identity`; an answer still
//! compressed, or typed as an archive, is refused (502 `compressed_response`). A task holding a
//! proxy-mode secret opens **no CONNECT tunnel** at all (403 `secret_bound_host`): a tunnel can
//! be neither filled in nor scrubbed. The Host header sent upstream is the URI's host and port,
//! never its userinfo. The relay scrubs every value of the task (stdin-mode ones included) out
//! of its chat calls before they go upstream, and names the secret (never the value) in a
//! warning and the audit line.
//!
//! # The per-task summary and the audit log (`ledger.rs`, `audit.rs`, `meter.rs`)
//!
//! Per task the egress keeps a [`TaskSummary`] (destinations allowed and denied, bytes,
//! connections cut, which LLM providers answered, secrets injected and refused); when the
//! task's access ends ([`TaskTokens::finish`]) its tunnels, streams and relay calls are cut and
//! the summary goes to the caller (the host's task record and receipt). One JSON audit line per
//! connection (task, container, host, port, address, verdict, reason, bytes) goes to the audit
//! file and to `tracing`. The log is **bounded**: rotated by size (`audit_max_bytes`,
//! `audit_max_files`), capped per task and per second of refusals (one "suppressed" line for
//! the rest), hosts cut to a DNS name's length, provider keys, relay tokens and `nxp_`
//! credentials scrubbed by shape.
//!
//! # The firewall (`firewall.rs`)
//!
//! On an internal network Docker drops what a container sends beyond the host, but not what it
//! sends to the host's own addresses (the gateway, `eth0`, other bridges). With
//! `egress.firewall` on, the listener inserts two `iptables` rules on the host's `INPUT` chain
//! that leave the proxy port on the gateway as the only thing the pool's bridge reaches on the
//! host, checks them periodically ([`DEFAULT_FIREWALL_CHECK_PERIOD`]) and puts back what a
//! firewall reload removed, and removes them when it stops.

mod approval;
mod attribution;
mod audit;
pub mod audit_chain;
mod binding;
mod config;
mod credentials;
mod decoy;
mod door;
mod firewall;
mod host_addrs;
mod inject;
mod ledger;
mod literal;
mod meter;
mod node;
mod policy;
mod proxy;
mod relay;
mod scrub;
mod tls;
mod tokens;

pub use node::{run_node, NodeLinks, SOURCE_HEADER};

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use secrecy::SecretString;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub use approval::{
    AllowRule, Approval, ApprovalFuture, ApprovalRequest, Approver, EgressMode, Unattended,
    DEFAULT_RULE_PORT, DENIED_BY_USER, NO_ANSWER,
};
pub use attribution::{Attributed, Attribution, AttributionTable, LateAttribution};
pub use audit::{AuditLimits, AuditRecord, MetricsSnapshot, Verdict};
pub use binding::{Binding, Place, DEFAULT_PLACE, LEGACY_BINDINGS_REFUSED_FROM};
pub use config::{
    Cidr, ConfigError, EgressConfig, HostPattern, InternalAllow, PortRule, ProviderKeys,
    ProxyConfig, RelayConfig, RelayProvider,
};
pub use credentials::{Credential, CredentialError, TaskCredentials};
pub use decoy::{DecoyAlarm, DecoyTrip};
pub use door::{Door, DoorError, Doors, DOOR_CONTAINER};
pub use firewall::{
    firewall_check_period, firewall_rules_reinserted, set_firewall_check_period, FirewallError,
    DEFAULT_FIREWALL_CHECK_PERIOD,
};
pub use inject::{placeholder_names, MAX_SECRET_BODY_BYTES};
pub use ledger::{DestinationCounts, Lend, TaskSummary, MAX_DESTINATIONS, MAX_TASKS};
pub use policy::{classify, AddrClass};
pub use relay::RelaySetupError;
pub use tokens::{
    FinishedTask, ProxyCredential, RelayCounters, TaskCost, TaskTokens, TaskUsage, TokenError,
    MAX_ENDED_CREDENTIALS, PROXY_TOKEN_PREFIX, TOKEN_PREFIX,
};

/// Where the listener sits: the network the sandbox containers are on, as seen from the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Network {
    /// The host's address on the network (its gateway): the listener binds it unless
    /// `listen_addr` says otherwise, and containers reach it there.
    pub gateway: IpAddr,
    /// The network's bridge interface on the host (e.g. `br-0123456789ab`), which the firewall
    /// rules confine to the proxy port.
    pub bridge: String,
}

/// Why the egress listener did not start.
#[derive(Debug, thiserror::Error)]
pub enum EgressError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("egress: cannot listen on {addr}: {source}")]
    Bind { addr: SocketAddr, source: std::io::Error },
    #[error("egress: cannot open the audit log {path}: {source}")]
    Audit { path: PathBuf, source: std::io::Error },
    #[error("egress: {0}")]
    Relay(#[from] RelaySetupError),
    #[error("egress: {0}")]
    Firewall(#[from] FirewallError),
    #[error("egress: cannot read this host's own addresses (getifaddrs): {0}")]
    HostAddresses(std::io::Error),
}

/// What every connection handler needs.
pub(crate) struct Shared {
    config: EgressConfig,
    header_timeout: Duration,
    policy: policy::Policy,
    host_addrs: Arc<host_addrs::HostAddrs>,
    audit: Arc<audit::AuditLog>,
    tokens: Arc<TaskTokens>,
    /// The tasks' proxy-mode secrets (the same table `tokens` drops them from).
    credentials: Arc<TaskCredentials>,
    /// TLS to `https://` destinations of absolute-form requests.
    tls: Arc<rustls::ClientConfig>,
    attribution: Arc<dyn Attribution>,
    /// Who decides about held destinations in `ask` mode (set by the host after start).
    approver: approval::Late<dyn Approver>,
    /// Told when a task's request carries a decoy secret (set by the host after start).
    decoys: approval::Late<dyn DecoyAlarm>,
    relay: relay::Relay,
    local: SocketAddr,
    /// Where containers reach the listener when that is not `local`: an egress node's
    /// address on a remote engine's network (`node.rs`).
    advertised: std::sync::OnceLock<SocketAddr>,
    /// The connections served now, and each source's and room's share.
    intake: proxy::Intake,
    stop: CancellationToken,
    tracker: TaskTracker,
}

impl Shared {
    /// Where containers reach the listener ([`Egress::advertise`]).
    fn public(&self) -> SocketAddr {
        self.advertised.get().copied().unwrap_or(self.local)
    }
}

/// The running proxy + relay listener. Dropping it stops it; [`Egress::shutdown`] also waits
/// for open connections to finish (cutting tunnels).
pub struct Egress {
    shared: Arc<Shared>,
    firewall: Option<firewall::Firewall>,
}

impl std::fmt::Debug for Egress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Egress")
            .field("local", &self.shared.local)
            .field("relay", &self.shared.relay)
            .finish_non_exhaustive()
    }
}

impl Egress {
    /// Starts the listener on `config.listen_addr`, or else on the pool network's gateway, at
    /// `config.port`, and (with `config.firewall`) confines the network's bridge to it. The
    /// audit log goes to `data_dir/config.audit_file`. `provider_key` is the real LLM key of
    /// the variable `relay.api_key_env` (see [`RelayConfig::provider_key_from_env`]); `None`
    /// for a provider that needs none. With several `relay.providers`, each with its own key,
    /// use [`Egress::start_with_keys`].
    pub async fn start(
        config: EgressConfig,
        network: &Network,
        data_dir: &Path,
        attribution: Arc<dyn Attribution>,
        provider_key: Option<SecretString>,
    ) -> Result<Self, EgressError> {
        let keys = ProviderKeys::single(&config.relay.api_key_env, provider_key);
        Self::start_with_keys(config, network, data_dir, attribution, keys).await
    }

    /// [`Egress::start`] with the key of every relay provider, by the name of the variable it
    /// comes from (`api_key_env`; see [`RelayConfig::key_envs`] for the names needed). A
    /// provider whose variable has no key here calls without one (a warning says so).
    pub async fn start_with_keys(
        config: EgressConfig,
        network: &Network,
        data_dir: &Path,
        attribution: Arc<dyn Attribution>,
        keys: ProviderKeys,
    ) -> Result<Self, EgressError> {
        config.validate()?;
        let tls = tls::client_config(&config.proxy.extra_ca_files)?;
        let credentials = Arc::new(TaskCredentials::new(keys.values()));
        let scrubber = scrub::Scrubber::new(keys.values());
        let relay = relay::Relay::new(&config.relay, &keys)?;
        let path = data_dir.join(&config.audit_file);
        let audit = std::fs::create_dir_all(data_dir)
            .and_then(|()| audit::AuditLog::open(&path, config.audit_limits(), scrubber))
            .map_err(|source| EgressError::Audit { path: path.clone(), source })?;
        let addr = SocketAddr::new(config.listen_addr.unwrap_or(network.gateway), config.port);
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|source| EgressError::Bind { addr, source })?;
        let local = listener.local_addr().map_err(|source| EgressError::Bind { addr, source })?;
        // Fail closed: without the host's own addresses the proxy could dial this machine.
        let host_addrs = Arc::new(host_addrs::HostAddrs::default());
        host_addrs.refresh().map_err(EgressError::HostAddresses)?;
        host_addrs.set_named("the pool network's gateway", [network.gateway]);
        host_addrs.set_named("the egress listener", [local.ip()]);
        let firewall = match config.firewall {
            true => {
                Some(firewall::Firewall::install(&network.bridge, local.ip(), local.port()).await?)
            }
            false => None,
        };
        let audit = Arc::new(audit);
        let intake = proxy::Intake::new(config.max_connections);
        let shared = Arc::new(Shared {
            header_timeout: Duration::from_secs(config.header_timeout_secs),
            policy: policy::Policy::new(
                config.proxy.clone(),
                host_addrs.clone(),
                config.effective_mode() == EgressMode::Open,
            ),
            host_addrs,
            config,
            tokens: Arc::new(TaskTokens::with_audit(audit.clone(), credentials.clone())),
            credentials,
            tls,
            audit,
            attribution,
            approver: approval::Late::default(),
            decoys: approval::Late::default(),
            relay,
            local,
            advertised: std::sync::OnceLock::new(),
            intake,
            stop: CancellationToken::new(),
            tracker: TaskTracker::new(),
        });
        shared.tracker.spawn(proxy::serve(listener, shared.clone()));
        shared.tracker.spawn(upkeep(shared.clone()));
        tracing::info!(%local, audit = %path.display(), "egress proxy and LLM relay listening");
        Ok(Self { shared, firewall })
    }

    /// Opens doors for requests the host makes itself in a fixed name (`door.rs`).
    pub fn doors(&self) -> Doors {
        Doors::new(self.shared.clone())
    }

    /// Sets who is asked about held destinations in `ask` mode (see [`Approver`]). Until it
    /// is set, `ask` refuses what it would ask about, saying that nobody can be asked.
    pub fn set_approver(&self, approver: Arc<dyn Approver>) {
        self.shared.approver.set(approver);
    }

    /// The audit trail other parts write their events into: the same chained file.
    pub fn trail(&self) -> Arc<dyn nexbot_core::audit::AuditTrail> {
        self.shared.audit.clone()
    }

    /// Sets who is told when a task's request carries a decoy secret ([`DecoyAlarm`]). Until
    /// it is set such a request is still refused, audited and logged.
    pub fn set_decoy_alarm(&self, alarm: Arc<dyn DecoyAlarm>) {
        self.shared.decoys.set(alarm);
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.shared.local
    }

    /// Containers reach the listener at `addr` (an egress node's, `node.rs`), not at its own
    /// address: what [`Egress::proxy_url`], [`Egress::relay_base_url`] and
    /// [`Egress::container_env`] say from now on. The first call counts.
    pub fn advertise(&self, addr: SocketAddr) {
        let _ = self.shared.advertised.set(addr);
    }

    /// `http://<ip>:<port>`: the value of `HTTP_PROXY`/`HTTPS_PROXY` in containers.
    pub fn proxy_url(&self) -> String {
        format!("http://{}", self.shared.public())
    }

    /// `http://<ip>:<port>/v1`: the `llm_base_url` of execute requests.
    pub fn relay_base_url(&self) -> String {
        format!("http://{}/v1", self.shared.public())
    }

    /// The (non-secret) environment every pool container needs: both spellings of the proxy
    /// variables, and `NO_PROXY` naming the listener so relay calls go to it directly.
    pub fn container_env(&self) -> BTreeMap<String, String> {
        let proxy = self.proxy_url();
        let no_proxy = format!("{},localhost,127.0.0.1,::1", self.shared.public().ip());
        [
            ("HTTP_PROXY", &proxy),
            ("HTTPS_PROXY", &proxy),
            ("http_proxy", &proxy),
            ("https_proxy", &proxy),
            ("NO_PROXY", &no_proxy),
            ("no_proxy", &no_proxy),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.clone()))
        .collect()
    }

    /// The per-task relay tokens: `issue` when a task starts, `revoke` when it ends.
    pub fn tokens(&self) -> Arc<TaskTokens> {
        self.shared.tokens.clone()
    }

    /// The per-task proxy-mode secrets: [`TaskCredentials::grant`] when a task starts; they go
    /// when it ends ([`TaskTokens::finish`]).
    pub fn credentials(&self) -> Arc<TaskCredentials> {
        self.shared.credentials.clone()
    }

    /// Ends a task (see [`TaskTokens::finish`]): its token is revoked, its credentials
    /// dropped, its open tunnels and requests are cut, and what it did through the egress is
    /// handed over.
    pub fn finish_task(&self, task_id: &str) -> FinishedTask {
        self.shared.tokens.finish(task_id)
    }

    /// Issues the task's egress credential (see [`TaskTokens::issue_proxy`]).
    pub fn issue_proxy_token(&self, task_id: &str) -> Result<SecretString, TokenError> {
        self.shared.tokens.issue_proxy(task_id)
    }

    /// Issues a token for `task_id` with the configured default budget.
    pub fn issue_token(&self, task_id: &str) -> Result<SecretString, TokenError> {
        self.shared.tokens.issue(task_id, self.shared.config.relay.default_token_budget)
    }

    /// Reads the host's own addresses now (they are also read every
    /// `egress.proxy.host_addresses_refresh_secs`); returns how many interface addresses
    /// there are. On an error the addresses read before stay in force.
    pub fn refresh_host_addresses(&self) -> std::io::Result<usize> {
        self.shared.host_addrs.refresh()
    }

    /// Names the gateways of the Docker networks on this host (replacing those named
    /// before): they are the host's own addresses too, refused like its interfaces' (the
    /// pool network's gateway always is).
    pub fn set_docker_gateways(&self, gateways: impl IntoIterator<Item = IpAddr>) {
        self.shared.host_addrs.set_named("a docker network gateway", gateways);
    }

    /// Every address the proxy refuses as this host's own (loopback aside), sorted.
    pub fn host_addresses(&self) -> Vec<IpAddr> {
        self.shared.host_addrs.snapshot()
    }

    pub fn config(&self) -> &EgressConfig {
        &self.shared.config
    }

    pub fn metrics(&self) -> MetricsSnapshot {
        self.shared.audit.metrics().snapshot()
    }

    /// Reads [`Egress::metrics`] later, without holding the listener (for a metrics endpoint
    /// that outlives a borrow of it).
    pub fn metrics_source(&self) -> impl Fn() -> MetricsSnapshot + Send + Sync + 'static {
        let shared = self.shared.clone();
        move || shared.audit.metrics().snapshot()
    }

    pub fn audit_path(&self) -> &Path {
        self.shared.audit.path()
    }

    /// Checks the audit file's hash chain ([`audit_chain::verify`]) later, without holding
    /// the listener (as [`Self::metrics_source`]).
    pub fn audit_verifier(
        &self,
    ) -> impl Fn() -> Result<audit_chain::Verified, audit_chain::Break> + Send + Sync + 'static
    {
        let shared = self.shared.clone();
        move || shared.audit.verify()
    }

    /// Stops accepting, cuts open tunnels and waits (at most `grace`) for handlers to finish
    /// writing their audit lines.
    pub async fn shutdown(mut self, grace: Duration) {
        if let Some(firewall) = self.firewall.take() {
            firewall.remove().await;
        }
        self.shared.stop.cancel();
        self.shared.tracker.close();
        if tokio::time::timeout(grace, self.shared.tracker.wait()).await.is_err() {
            tracing::warn!("egress: connections still open after the shutdown grace period");
        }
        self.shared.audit.flush_suppressed(true);
    }
}

/// The listener's periodic chores until it stops: re-reading the host's own addresses, and
/// writing the line for refusals a past second left out of the audit.
async fn upkeep(shared: Arc<Shared>) {
    let mut refresh = tokio::time::interval(shared.config.proxy.host_addresses_refresh());
    refresh.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    refresh.tick().await; // the first tick is now; the addresses were read at start
    let mut second = tokio::time::interval(Duration::from_secs(1));
    second.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = refresh.tick() => {
                if let Err(err) = shared.host_addrs.refresh() {
                    tracing::warn!(%err, "egress: cannot re-read this host's addresses; keeping the last ones");
                }
            }
            _ = second.tick() => shared.audit.flush_suppressed(false),
            () = shared.stop.cancelled() => return,
        }
    }
}

impl Drop for Egress {
    fn drop(&mut self) {
        self.shared.stop.cancel();
    }
}
