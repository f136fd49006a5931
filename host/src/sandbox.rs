//! The subagent sandbox as one unit: the internal network, the egress listener (proxy + LLM
//! relay) on its gateway, and the warm pool whose containers use it — started together and
//! stopped in order.
//!
//! Why one unit: each part needs the one before it (the listener binds the network's gateway,
//! containers are created with the listener's address in their environment, the listener
//! attributes connections through the pool), and the shutdown order matters: running tasks
//! drain while the proxy and relay still serve them, then the tokens die, then the listener.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bollard::Docker;
use nexbot_docker::spec::LABEL_ROLE;
use nexbot_docker::{ensure_internal_network, Pool, PoolError};
use secrecy::SecretString;

use crate::config::Config;
use crate::egress::{self, Attribution, Egress, EgressError, LateAttribution};
use crate::pool_runner::{pool_config, PoolRunner};
use crate::subagent::{SubagentRunner, TaskLlm, TaskTokens};

/// How long the listener's open connections get to finish at shutdown.
const EGRESS_GRACE: Duration = Duration::from_secs(5);
/// How long the engine gets to answer the first ping.
const DOCKER_PING: Duration = Duration::from_secs(10);

/// Why the sandbox did not start; each message says what to do.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error(
        "cannot reach the Docker engine: {0}; start it, or set subagent.enabled = false to run \
         without delegation"
    )]
    Docker(String),
    #[error("cannot prepare the subagent network: {0}")]
    Network(PoolError),
    #[error("{0}")]
    Egress(#[from] EgressError),
    #[error(
        "cannot start the subagent pool: {0}; `nexbot doctor` says what is missing, or set \
         subagent.enabled = false"
    )]
    Pool(PoolError),
}

/// The running sandbox. Call [`Sandbox::shutdown`]; dropping it stops the listener and leaves
/// the containers for the next start to reap.
pub struct Sandbox {
    pool: Arc<Pool>,
    egress: Egress,
    tokens: Arc<RelayTokens>,
    /// The pool as the listener's attribution: the listener holds it only weakly.
    _attribution: Arc<dyn Attribution>,
}

impl std::fmt::Debug for Sandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sandbox")
            .field("pool", &self.pool.config().name)
            .field("egress", &self.egress)
            .finish_non_exhaustive()
    }
}

impl Sandbox {
    /// Network, then the egress listener on its gateway, then the pool with the listener's
    /// environment, then the listener's attribution bound to the pool.
    pub async fn start(config: &Config) -> Result<Self, SandboxError> {
        let docker = Docker::connect_with_local_defaults()
            .map_err(|e| SandboxError::Docker(e.to_string()))?;
        match tokio::time::timeout(DOCKER_PING, docker.ping()).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => return Err(SandboxError::Docker(e.to_string())),
            Err(_) => return Err(SandboxError::Docker("no answer within 10 s".into())),
        }
        // The labels `Pool::start` gives the network, so whichever creates it, it is the same.
        let labels = HashMap::from([(LABEL_ROLE.to_owned(), "subagent-network".to_owned())]);
        let network = ensure_internal_network(&docker, &config.subagent.network, &labels)
            .await
            .map_err(SandboxError::Network)?;
        let late = Arc::new(LateAttribution::default());
        let egress = Egress::start(
            config.egress_config(),
            &network,
            &config.data_dir(),
            late.clone(),
            config.secrets.relay_provider_key.clone(),
        )
        .await?;
        let mut pool_config = pool_config(config);
        pool_config.env.extend(egress.container_env());
        let pool = match Pool::start(docker, pool_config).await {
            Ok(pool) => Arc::new(pool),
            Err(e) => {
                egress.shutdown(EGRESS_GRACE).await;
                return Err(SandboxError::Pool(e));
            }
        };
        let attribution: Arc<dyn Attribution> = pool.clone();
        late.bind(&attribution);
        let tokens = Arc::new(RelayTokens::new(config, &egress));
        Ok(Self { pool, egress, tokens, _attribution: attribution })
    }

    /// What the delegation tool runs tasks on.
    pub fn runner(&self) -> Arc<dyn SubagentRunner> {
        Arc::new(PoolRunner::new(self.pool.clone()))
    }

    /// Each task's LLM access: relay tokens (or, opted in, the provider key).
    pub fn tokens(&self) -> Arc<dyn TaskTokens> {
        self.tokens.clone()
    }

    pub fn pool(&self) -> &Arc<Pool> {
        &self.pool
    }

    pub fn egress(&self) -> &Egress {
        &self.egress
    }

    /// Drains the pool (running tasks finish, still served by the proxy and relay), revokes
    /// every token left, then stops the listener and removes its firewall rules.
    pub async fn shutdown(self) {
        if let Err(e) = self.pool.shutdown().await {
            tracing::warn!(error = %e, "pool shutdown was not clean");
        }
        let left = self.egress.tokens().revoke_all();
        if left > 0 {
            tracing::warn!(left, "relay tokens of unfinished tasks revoked at shutdown");
        }
        self.egress.shutdown(EGRESS_GRACE).await;
    }
}

/// [`TaskTokens`] backed by the egress relay: a fresh token per task with the configured
/// budget, revoked when the task ends. With `egress.relay.send_provider_key_to_subagents`
/// it hands out the provider's URL and key instead (the seed's `llm_api_key`).
#[derive(Debug)]
pub struct RelayTokens {
    tokens: Arc<egress::TaskTokens>,
    relay_base_url: String,
    budget: u64,
    provider_key: Option<ProviderKey>,
}

struct ProviderKey {
    base_url: String,
    key: Option<SecretString>,
}

impl std::fmt::Debug for ProviderKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ProviderKey({}, key set: {})", self.base_url, self.key.is_some())
    }
}

impl RelayTokens {
    pub fn new(config: &Config, egress: &Egress) -> Self {
        let relay = &config.egress.relay;
        let provider_key = relay.send_provider_key_to_subagents.then(|| {
            tracing::warn!(
                "egress.relay.send_provider_key_to_subagents is on: the real LLM key is sent to \
                 every subagent, which calls the provider through the egress proxy"
            );
            ProviderKey {
                base_url: config.subagent_provider_base_url(),
                key: config.secrets.relay_provider_key.clone(),
            }
        });
        Self {
            tokens: egress.tokens(),
            relay_base_url: egress.relay_base_url(),
            budget: relay.default_token_budget,
            provider_key,
        }
    }
}

impl TaskTokens for RelayTokens {
    fn issue(&self, task_id: &str) -> Result<TaskLlm, String> {
        if let Some(direct) = &self.provider_key {
            return Ok(TaskLlm::ProviderKey {
                base_url: direct.base_url.clone(),
                key: direct.key.clone(),
            });
        }
        let token = self.tokens.issue(task_id, self.budget).map_err(|e| e.to_string())?;
        tracing::debug!(task_id, budget = self.budget, "relay token issued");
        Ok(TaskLlm::Relay { base_url: self.relay_base_url.clone(), token })
    }

    fn revoke(&self, task_id: &str) -> Option<u64> {
        self.tokens.revoke(task_id).map(|usage| usage.used)
    }
}
