//! `nexbot-egress` has one job: it is the sandbox's only way out — a forward proxy and an
//! LLM relay with per-task tokens, an audit line per connection, and the firewall rules that
//! leave the proxy port as the only thing the pool's bridge reaches on the host. It is also the
//! only holder of the LLM provider key. It knows nothing of Docker: the caller says where to
//! listen ([`Network`]) and who sits behind a source address ([`Attribution`]).
//!
//! Subagent containers sit on an internal Docker network: nothing beyond the host, and on the
//! host (with the `iptables` rules of `firewall.rs`) only the proxy port on the network's
//! gateway address. There the host runs one listener ([`Egress`]) that is both
//! - an HTTP forward proxy (CONNECT and absolute-form HTTP) that resolves names itself, denies
//!   internal addresses and unlisted domains, limits bytes and time, and audits every
//!   connection with the container and task it came from; and
//! - an OpenAI-compatible LLM relay that accepts per-task tokens, adds the real key, streams
//!   the answer back, and enforces each task's token budget.
//!
//! Containers get `HTTP(S)_PROXY` pointing at the listener and `NO_PROXY` naming it
//! ([`Egress::container_env`]); execute requests get `llm_base_url` ([`Egress::relay_base_url`])
//! and a per-task `llm_token` ([`TaskTokens::issue`]).

mod attribution;
mod audit;
mod config;
mod firewall;
mod meter;
mod policy;
mod proxy;
mod relay;
mod tokens;
mod usage;

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use secrecy::SecretString;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub use attribution::{Attributed, Attribution, AttributionTable, LateAttribution};
pub use audit::{AuditRecord, MetricsSnapshot, Verdict};
pub use config::{
    Cidr, ConfigError, EgressConfig, HostPattern, InternalAllow, ProxyConfig, RelayConfig,
};
pub use firewall::{
    firewall_check_period, firewall_rules_reinserted, set_firewall_check_period, FirewallError,
    DEFAULT_FIREWALL_CHECK_PERIOD,
};
pub use policy::{classify, AddrClass};
pub use relay::RelaySetupError;
pub use tokens::{TaskTokens, TaskUsage, TokenError, TOKEN_PREFIX};

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
}

/// What every connection handler needs.
pub(crate) struct Shared {
    config: EgressConfig,
    header_timeout: Duration,
    policy: policy::Policy,
    audit: Arc<audit::AuditLog>,
    tokens: Arc<TaskTokens>,
    attribution: Arc<dyn Attribution>,
    relay: relay::Relay,
    local: SocketAddr,
    stop: CancellationToken,
    tracker: TaskTracker,
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
    /// audit log goes to `data_dir/config.audit_file`. `provider_key` is the real LLM key (see
    /// [`RelayConfig::provider_key_from_env`]); `None` for a provider that needs none.
    pub async fn start(
        config: EgressConfig,
        network: &Network,
        data_dir: &Path,
        attribution: Arc<dyn Attribution>,
        provider_key: Option<SecretString>,
    ) -> Result<Self, EgressError> {
        config.validate()?;
        let relay = relay::Relay::new(&config.relay, provider_key)?;
        let path = data_dir.join(&config.audit_file);
        let audit = std::fs::create_dir_all(data_dir)
            .and_then(|()| audit::AuditLog::open(&path))
            .map_err(|source| EgressError::Audit { path: path.clone(), source })?;
        let addr = SocketAddr::new(config.listen_addr.unwrap_or(network.gateway), config.port);
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|source| EgressError::Bind { addr, source })?;
        let local = listener.local_addr().map_err(|source| EgressError::Bind { addr, source })?;
        let firewall = match config.firewall {
            true => {
                Some(firewall::Firewall::install(&network.bridge, local.ip(), local.port()).await?)
            }
            false => None,
        };
        let shared = Arc::new(Shared {
            header_timeout: Duration::from_secs(config.header_timeout_secs),
            policy: policy::Policy::new(config.proxy.clone()),
            config,
            audit: Arc::new(audit),
            tokens: Arc::default(),
            attribution,
            relay,
            local,
            stop: CancellationToken::new(),
            tracker: TaskTracker::new(),
        });
        shared.tracker.spawn(proxy::serve(listener, shared.clone()));
        tracing::info!(%local, audit = %path.display(), "egress proxy and LLM relay listening");
        Ok(Self { shared, firewall })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.shared.local
    }

    /// `http://<ip>:<port>`: the value of `HTTP_PROXY`/`HTTPS_PROXY` in containers.
    pub fn proxy_url(&self) -> String {
        format!("http://{}", self.shared.local)
    }

    /// `http://<ip>:<port>/v1`: the `llm_base_url` of execute requests.
    pub fn relay_base_url(&self) -> String {
        format!("http://{}/v1", self.shared.local)
    }

    /// The (non-secret) environment every pool container needs: both spellings of the proxy
    /// variables, and `NO_PROXY` naming the listener so relay calls go to it directly.
    pub fn container_env(&self) -> BTreeMap<String, String> {
        let proxy = self.proxy_url();
        let no_proxy = format!("{},localhost,127.0.0.1,::1", self.shared.local.ip());
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

    /// Issues a token for `task_id` with the configured default budget.
    pub fn issue_token(&self, task_id: &str) -> Result<SecretString, TokenError> {
        self.shared.tokens.issue(task_id, self.shared.config.relay.default_token_budget)
    }

    pub fn config(&self) -> &EgressConfig {
        &self.shared.config
    }

    pub fn metrics(&self) -> MetricsSnapshot {
        self.shared.audit.metrics().snapshot()
    }

    pub fn audit_path(&self) -> &Path {
        self.shared.audit.path()
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
    }
}

impl Drop for Egress {
    fn drop(&mut self) {
        self.shared.stop.cancel();
    }
}
