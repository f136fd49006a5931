//! The subagent sandbox as one unit: the internal network, the egress listener (proxy + LLM
//! relay) on its gateway, and the warm pool whose containers use it — started together and
//! stopped in order.
//!
//! Why one unit: each part needs the one before it (the listener binds the network's gateway,
//! containers are created with the listener's address in their environment, the listener
//! attributes connections through the pool), and the shutdown order matters: running tasks
//! drain while the proxy and relay still serve them, then the tokens die, then the listener.
//!
//! How it is wired (used by `serve`, `chat` and the tests through `app::App`): [`Sandbox::start`]
//! ensures the internal network, starts the listener on its gateway with `[egress]` (the
//! relay's provider defaults to `llm.base_url`, its key to `NEXBOT_LLM_API_KEY`; with several
//! providers each key is taken by its variable's name), starts the pool with the listener's
//! environment, then binds the listener's late attribution to the pool. Each delegated task
//! gets a relay token with `egress.relay.default_token_budget`, revoked by a drop guard however
//! the task ends; what the relay charged fills the task record when the answer carries no
//! usage. [`Sandbox::shutdown`] drains the pool, revokes leftover tokens, then stops the
//! listener and its firewall rules. If the sandbox cannot start (no Docker, no image, no root
//! for the firewall) the agent runs without delegation and the reason is said once.

use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use nexbot_docker::{ensure_pool_network, EngineUnreachable, NetworkInfo, Pool, PoolError};
use nexbot_egress::{
    self as egress, Attributed, Attribution, Egress, EgressError, LateAttribution,
};
use secrecy::SecretString;

use crate::config::Config;
use crate::delegation::{AccessEnd, LlmAccess, SubagentRunner, TaskLlm, TaskSecret};
use crate::egress_node::RemoteNode;
use crate::pool_runner::PoolRunner;
use crate::remote_skills::SkillsCopy;

/// How long the start waits for a remote engine's egress node to come up.
const NODE_START: Duration = Duration::from_secs(20);

/// How often the engine is pinged for the round trip `health` and `ps` show.
const ENGINE_WATCH: Duration = Duration::from_secs(15);

/// `[egress]` as the listener takes it. With a remote engine the listener cannot sit on the
/// pool network's gateway (that is on the other machine): it serves this daemon's own requests
/// on loopback, and no firewall rule is made here for a bridge that is not here.
fn egress_config(config: &Config, remote: bool) -> egress::EgressConfig {
    let mut egress = config.egress_config();
    if remote {
        egress.listen_addr = Some(IpAddr::from([127, 0, 0, 1]));
        egress.port = 0;
        egress.firewall = false;
    }
    egress
}

/// Gives the remote engine the images this daemon runs ([`crate::images::needed`]), by id,
/// from the local engine; progress in the log. Without a local engine, or on failure, the
/// pool's own check says what is missing.
async fn remote_images(config: &Config, remote: &nexbot_docker::Docker, place: &str) {
    use crate::images::Copying;
    let engine = place.to_owned();
    let place = engine.clone();
    let report = Arc::new(move |event: Copying| match event {
        Copying::Percent { image, percent } => {
            tracing::info!(%image, "copying to the remote engine: {percent} %")
        }
        Copying::Same { image, id } => {
            tracing::info!(%image, %id, engine = %place, "the remote engine has the image")
        }
        Copying::Copied { image, id, bytes } => {
            tracing::info!(%image, %id, bytes, engine = %place, "image copied to the remote engine")
        }
        Copying::Failed { image, error } => {
            tracing::warn!(%image, engine = %place, "cannot copy the image: {error}")
        }
    });
    let images = crate::images::needed(config);
    if let Err(e) = crate::images::copy_from_local(remote, &images, report).await {
        tracing::info!(%engine, "{e}");
    }
}

/// How long the listener's open connections get to finish at shutdown.
const EGRESS_GRACE: Duration = Duration::from_secs(5);

/// Why the sandbox did not start; each message says what to do.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error("{0}; start it, or set subagent.enabled = false to run without delegation")]
    Docker(#[from] EngineUnreachable),
    #[error("cannot prepare the subagent network: {0}")]
    Network(PoolError),
    #[error("{0}")]
    Egress(#[from] EgressError),
    #[error(
        "cannot start the subagent pool: {0}; `nexbot doctor` says what is missing, or set \
         subagent.enabled = false"
    )]
    Pool(PoolError),
    #[error(
        "{source}. This daemon runs in a container but cannot tell its compose project ({why}), \
         so it took the default pool name and network, which another running nexbot owns: set \
         NEXBOT_SUBAGENT__POOL_NAME and NEXBOT_SUBAGENT__NETWORK (in compose.yaml's environment, \
         or subagent.pool_name and subagent.network in config.toml) to names of this deployment"
    )]
    DefaultsOwned { why: String, source: Box<SandboxError> },
}

impl SandboxError {
    /// Whether another attempt in a moment may succeed: not for an engine that is not there,
    /// an image or runtime it lacks, or a setting the pool refuses; yes for what a daemon that
    /// is still going away (or an engine busy with it) leaves for a moment.
    pub fn may_pass(&self) -> bool {
        match self {
            Self::Docker(_) => false,
            Self::Egress(_) => true,
            Self::Network(e) | Self::Pool(e) => !matches!(
                e,
                PoolError::InvalidConfig(_)
                    | PoolError::ImageMissing { .. }
                    | PoolError::RuntimeMissing { .. }
            ),
            Self::DefaultsOwned { source, .. } => source.may_pass(),
        }
    }
}

/// What a daemon takes from its own container (see [`compose_settings`]).
#[derive(Debug, Clone, PartialEq)]
enum FromContainer {
    /// Nothing: not in a container, in one that is no compose service, or everything set.
    Unchanged,
    /// A compose service: the settings derived from the deployment.
    Compose(Box<Config>),
    /// In a container, but which one cannot be told: the configured names stay; `defaults`
    /// when they are the built-in ones (which another deployment may own).
    CannotTell { why: String, defaults: bool },
}

/// The pool's defaults a daemon running as a compose service takes from its own container:
/// pool name and network from the compose project (so two deployments on one engine never
/// share a pool), and the skills folder's path on the Docker host from its `/skills` mount
/// (subagent containers get it by that path). Settings the operator gave win.
fn compose_settings(config: &Config, found: &nexbot_docker::SelfDiscovery) -> FromContainer {
    use nexbot_docker::SelfDiscovery;
    let defaults = crate::config::SubagentConfig::default();
    let own = match found {
        SelfDiscovery::NotInContainer => return FromContainer::Unchanged,
        SelfDiscovery::Unknown(why) => {
            return FromContainer::CannotTell {
                why: why.clone(),
                defaults: config.subagent.pool_name == defaults.pool_name
                    || config.subagent.network == defaults.network,
            }
        }
        SelfDiscovery::Found(own) => own,
    };
    let Some(project) = own.compose_project() else { return FromContainer::Unchanged };
    let mut derived = config.clone();
    if config.subagent.pool_name == defaults.pool_name {
        derived.subagent.pool_name = project.to_owned();
    }
    if config.subagent.network == defaults.network {
        derived.subagent.network = format!("{project}-subagents");
    }
    if config.subagent.skills_dir.is_none() {
        derived.subagent.skills_dir = own.mount_source("/skills").map(Path::to_path_buf);
    }
    FromContainer::Compose(Box::new(derived))
}

/// [`compose_settings`] for this process, said in the log: which deployment, or at warn
/// level that it cannot tell.
async fn in_compose(
    config: &Config,
    docker: &nexbot_docker::Docker,
) -> (FromContainer, nexbot_docker::SelfDiscovery) {
    let found = nexbot_docker::discover_own_container(
        docker,
        nexbot_docker::DISCOVERY_ATTEMPTS,
        nexbot_docker::DISCOVERY_PAUSE,
    )
    .await;
    let from = compose_settings(config, &found);
    match (&found, &from) {
        (nexbot_docker::SelfDiscovery::Found(own), FromContainer::Compose(derived)) => {
            tracing::info!(
                container = %own.id.chars().take(12).collect::<String>(),
                project = own.compose_project().unwrap_or("-"),
                pool = %derived.subagent.pool_name,
                network = %derived.subagent.network,
                skills = ?derived.subagent.skills_dir,
                "running as a compose service: pool settings from the deployment"
            );
        }
        (nexbot_docker::SelfDiscovery::Found(own), _) => tracing::info!(
            container = %own.id.chars().take(12).collect::<String>(),
            "running in a container that is no compose service: pool settings from the config"
        ),
        (_, FromContainer::CannotTell { why, .. }) => tracing::warn!(
            why = %why,
            pool = %config.subagent.pool_name,
            network = %config.subagent.network,
            "cannot tell whether this daemon runs as a compose service, so the pool takes the \
             configured names and no skills mount; a pool or network of those names that \
             another running nexbot owns is refused. Under compose, set NEXBOT_SUBAGENT__POOL_NAME, \
             NEXBOT_SUBAGENT__NETWORK and NEXBOT_SUBAGENT__SKILLS_DIR in compose.yaml (or \
             subagent.pool_name, .network, .skills_dir in config.toml)"
        ),
        _ => {}
    }
    (from, found)
}

/// Where the chats' rooms of `workspace` are for the servers that get one: the folder as this
/// daemon sees it, and as the engine does (this path on the host, or through this daemon's
/// container's mounts). A workspace on no mount of the container (its own layer) cannot be
/// given to another container, and a container that cannot be told has no known mounts.
fn mcp_rooms(
    workspace: &Path,
    found: &nexbot_docker::SelfDiscovery,
    remote: Option<&str>,
) -> crate::mcp::McpRooms {
    use nexbot_docker::SelfDiscovery;
    let dir = nexbot_tools::rooms::rooms_dir(workspace);
    let mut check = false;
    let on_engine = match found {
        _ if remote.is_some() => Err(format!(
            "the chats' rooms ({}) are on this machine and the engine ({}) on another: a \
             server that needs a room cannot run there",
            dir.display(),
            remote.unwrap_or_default()
        )),
        SelfDiscovery::NotInContainer => Ok(dir.clone()),
        SelfDiscovery::Found(own) => own.host_path(&dir).ok_or_else(|| {
            format!(
                "{} is in this daemon's container's own files, on no volume or bind mount, so \
                 no other container can be given it; put the workspace on a volume (compose.yaml \
                 mounts one at /data)",
                dir.display()
            )
        }),
        // A container it cannot identify: perhaps the engine runs beside it (Docker in the
        // same container) and sees its paths. Checked before the first room is given.
        SelfDiscovery::Unknown(_) => {
            check = true;
            Ok(dir.clone())
        }
    };
    crate::mcp::McpRooms { dir, on_engine, user: crate::mcp::own_user(), check }
}

/// The config a daemon's pool runs with here: `config` with what a compose deployment derives
/// from this process's container (pool name, network, skills folder; see
/// [`compose_settings`]), else `config` itself. For `doctor`, which must check the network the
/// daemon uses, not the built-in default. Asks the engine once, without the log lines the
/// daemon's start writes.
pub async fn deployed_config(config: &Config, docker: &nexbot_docker::Docker) -> Config {
    let found = nexbot_docker::discover_own_container(docker, 1, std::time::Duration::ZERO).await;
    match compose_settings(config, &found) {
        FromContainer::Compose(derived) => *derived,
        FromContainer::Unchanged | FromContainer::CannotTell { .. } => config.clone(),
    }
}

/// `error` with what the operator needs when the daemon could not tell its deployment and
/// the default names it fell back to belong to another running nexbot.
fn refused_defaults(error: SandboxError, cannot_tell: Option<&str>) -> SandboxError {
    let owned = matches!(
        &error,
        SandboxError::Network(PoolError::Owned { .. })
            | SandboxError::Pool(PoolError::Owned { .. })
    );
    match cannot_tell {
        Some(why) if owned => {
            SandboxError::DefaultsOwned { why: why.to_owned(), source: Box::new(error) }
        }
        _ => error,
    }
}

/// The running sandbox. Call [`Sandbox::shutdown`]; dropping it stops the listener and leaves
/// the containers for the next start to reap.
pub struct Sandbox {
    pool: Arc<Pool>,
    /// The engine and the pool's network, removed at shutdown once the pool is gone.
    docker: nexbot_docker::Docker,
    network: String,
    egress: Egress,
    tokens: Arc<RelayAccess>,
    /// The MCP servers' containers (made by the pool).
    mcp: Arc<crate::mcp::McpServers>,
    /// The egress node beside a remote engine's pool (`None`: the engine is on this machine).
    node: Option<RemoteNode>,
    /// The pool as the listener's attribution: the listener holds it only weakly.
    _attribution: Arc<dyn Attribution>,
    /// The engine's round-trip pings ([`nexbot_docker::EngineReach::watch`]), ended at shutdown.
    reach_watch: tokio::task::JoinHandle<()>,
    /// A remote engine's copy of the skills folder (`None`: a local engine mounts the folder).
    skills_copy: Option<Arc<SkillsCopy>>,
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
    /// `secrets`: where remote MCP servers' header values come from (the vault).
    pub async fn start(
        config: &Config,
        secrets: Option<Arc<dyn crate::tools::delegate::SecretSource>>,
    ) -> Result<Self, SandboxError> {
        let (docker, reach) = nexbot_docker::connect_reach(&config.sandbox).await?;
        let remote = reach.remote().then(|| reach.place.clone());
        let (from, found) = match &remote {
            None => in_compose(config, &docker).await,
            // Its own container, if any, is on this machine's engine, not that one.
            Some(_) => (FromContainer::Unchanged, nexbot_docker::SelfDiscovery::NotInContainer),
        };
        let (config, cannot_tell) = match &from {
            FromContainer::Compose(derived) => (&**derived, None),
            FromContainer::CannotTell { why, defaults: true } => (config, Some(why.as_str())),
            _ => (config, None),
        };
        let network = ensure_pool_network(&docker, &config.subagent.network)
            .await
            .map_err(|e| refused_defaults(SandboxError::Network(e), cannot_tell))?;
        if let Some(place) = &remote {
            remote_images(config, &docker, place).await;
        }
        let late = Arc::new(LateAttribution::default());
        let egress = Egress::start_with_keys(
            egress_config(config, remote.is_some()),
            &egress_network(&network),
            &config.data_dir(),
            late.clone(),
            config.secrets.relay_keys.clone(),
        )
        .await?;
        // A remote engine's pool gets out only through the egress node beside it.
        let node = remote.as_ref().map(|place| {
            let node = RemoteNode::start(config, &docker, &network, egress.node_links());
            egress.advertise(node.addr);
            tracing::info!(engine = %place, node = %node.addr, "the pool's way out: the egress node");
            node
        });
        let mut pool_config = config.pool_config();
        pool_config.env.extend(egress.container_env());
        // A remote engine cannot mount this machine's folder: it gets a copy in a volume.
        let mut skills_copy = None;
        if let (Some(_), Some(dir)) = (&remote, config.skills_dir()) {
            pool_config.skills_dir = None;
            let copy = SkillsCopy::new(&pool_config, &docker, dir);
            pool_config.skills_volume = Some(copy.volume().to_owned());
            copy.refresh_logged().await;
            skills_copy = Some(Arc::new(copy));
        }
        let engine = docker.clone();
        let pool = match Pool::start(docker, pool_config).await {
            Ok(pool) => {
                pool.set_reach(reach.clone());
                Arc::new(pool)
            }
            Err(e) => {
                if let Some(node) = node {
                    node.stop().await;
                }
                egress.shutdown(EGRESS_GRACE).await;
                return Err(refused_defaults(SandboxError::Pool(e), cannot_tell));
            }
        };
        if let Some(node) = &node {
            if !node.wait_up(NODE_START).await {
                tracing::warn!("{}", node.watch().down().unwrap_or_default());
            }
        }
        let services = Arc::new(egress::AttributionTable::default());
        let attribution: Arc<dyn Attribution> = Arc::new(SandboxAttribution {
            pool: PoolAttribution(pool.clone()),
            services: services.clone(),
        });
        late.bind(&attribution);
        let mut tokens = RelayAccess::new(config, &egress);
        tokens.node = node.as_ref().map(RemoteNode::watch);
        let tokens = Arc::new(tokens);
        let network = network.name.clone();
        let proxy_env = egress.container_env().into_iter().collect();
        let mcp_egress = crate::mcp::McpEgress {
            addresses: services,
            proxy_env,
            doors: Some(egress.doors()),
            secrets: secrets
                .map(|s| Arc::new(McpSecrets(s)) as Arc<dyn crate::mcp::OperatorSecrets>),
        };
        let rooms = mcp_rooms(&config.workspace.dir, &found, remote.as_deref());
        let mcp = crate::mcp::McpServers::start(
            pool.clone(),
            config.mcp_servers(),
            mcp_egress,
            Some(rooms),
        )
        .await;
        let reach_watch = reach.watch(engine.clone(), ENGINE_WATCH);
        Ok(Self {
            pool,
            docker: engine,
            network,
            egress,
            tokens,
            mcp,
            node,
            _attribution: attribution,
            reach_watch,
            skills_copy,
        })
    }

    /// `/status`'s lines and degraded parts of the sandbox: the engine's disk (when it is on
    /// this machine), the pool, and with a remote engine its egress node while it is down.
    pub async fn add_to(&self, status: &crate::status::StatusBoard, min_free_mb: u64) {
        match &self.node {
            None => {
                if let Some(engine) = crate::disk::engine_disk(&self.docker, min_free_mb).await {
                    engine.add_to(status, "engine disk");
                }
            }
            Some(node) => {
                let watch = node.watch();
                status.add_problem("egress node", move || watch.down());
            }
        }
        let pool = self.pool.clone();
        status
            .add("pool", move || pool_line(&pool.snapshot(), pool.runtime(), pool.engine_place()));
    }

    /// What the delegation tool runs tasks on.
    pub fn runner(&self) -> Arc<dyn SubagentRunner> {
        Arc::new(PoolRunner::new(self.pool.clone()))
    }

    /// Each task's LLM access: relay tokens (or, opted in, the provider key).
    pub fn tokens(&self) -> Arc<dyn LlmAccess> {
        self.tokens.clone()
    }

    /// A remote engine's copy of the skills folder, to follow the folder's changes.
    pub fn skills_copy(&self) -> Option<Arc<SkillsCopy>> {
        self.skills_copy.clone()
    }

    pub fn pool(&self) -> &Arc<Pool> {
        &self.pool
    }

    /// The engine the pool runs on.
    pub fn docker(&self) -> &nexbot_docker::Docker {
        &self.docker
    }

    /// The MCP servers, whose tools the agent gets.
    pub fn mcp(&self) -> &Arc<crate::mcp::McpServers> {
        &self.mcp
    }

    pub fn egress(&self) -> &Egress {
        &self.egress
    }

    /// Relay tokens issued and revoked, for the metrics.
    pub fn relay_counters(&self) -> Arc<crate::egress::RelayCounters> {
        self.tokens.counters.clone()
    }

    /// Drains the pool (running tasks finish, still served by the proxy and relay), revokes
    /// every token left, then stops the listener and removes its firewall rules.
    pub async fn shutdown(self) {
        self.reach_watch.abort();
        self.mcp.shutdown().await;
        if let Err(e) = self.pool.shutdown().await {
            tracing::warn!(error = %e, "pool shutdown was not clean");
        }
        let left = self.egress.tokens().revoke_all();
        if left > 0 {
            tracing::warn!(left, "relay tokens of unfinished tasks revoked at shutdown");
        }
        if let Some(node) = self.node {
            node.stop().await;
        }
        let local = self.egress.local_addr();
        let reinserted = egress::firewall_rules_reinserted();
        if reinserted > 0 {
            tracing::warn!(
                reinserted,
                "egress firewall: rules removed by something else were put back during this run"
            );
        }
        self.egress.shutdown(EGRESS_GRACE).await;
        tracing::info!(%local, "egress listener stopped");
        // The pool's containers are gone: its network goes too, so a stopped deployment leaves
        // nothing behind (the engine refuses while anything is still attached).
        match nexbot_docker::remove_network(&self.docker, &self.network).await {
            Ok(()) => tracing::info!(network = %self.network, "pool network removed"),
            Err(e) => tracing::debug!(network = %self.network, error = %e, "pool network kept"),
        }
        if let Some(copy) = self.skills_copy {
            copy.remove().await;
        }
    }
}

/// `/status`'s pool line: containers by state, the wall they run behind (and, for a remote
/// engine, where), running tasks.
fn pool_line(
    snapshot: &[nexbot_docker::ContainerSnapshot],
    runtime: &str,
    engine_at: Option<String>,
) -> String {
    let states: Vec<String> =
        nexbot_docker::count_by_state(snapshot).iter().map(|(s, n)| format!("{n} {s}")).collect();
    let running: Vec<String> = snapshot
        .iter()
        .filter_map(|s| {
            let age = s.current_task_age_ms? / 1000;
            Some(format!("{} for {age}s", s.id))
        })
        .collect();
    let mut line =
        format!("{} containers ({}), runtime {runtime}", snapshot.len(), states.join(", "));
    if let Some(at) = engine_at.filter(|at| at.starts_with("tcp://")) {
        line.push_str(&format!(", engine {at}"));
    }
    if !running.is_empty() {
        line.push_str(&format!("; tasks running on {}", running.join(", ")));
    }
    line
}

/// What the egress listener needs of the pool network: its gateway and its bridge.
pub fn egress_network(network: &NetworkInfo) -> egress::Network {
    egress::Network { gateway: network.gateway, bridge: network.bridge_interface() }
}

/// The secrets as the MCP servers see them ([`crate::mcp::OperatorSecrets`]): the
/// operator's only, for a remote server's headers. Why a wrapper: the servers' crate names no
/// vault type.
#[derive(Debug)]
pub struct McpSecrets(pub Arc<dyn crate::tools::delegate::SecretSource>);

impl crate::mcp::OperatorSecrets for McpSecrets {
    fn resolve_operator(&self, name: &str) -> Result<crate::mcp::OperatorSecret, String> {
        let resolved = self.0.resolve_operator(name)?;
        Ok(crate::mcp::OperatorSecret {
            value: resolved.value,
            hosts: resolved.hosts,
            proxy: resolved.mode == crate::vault::Mode::Proxy,
            confirm: resolved.confirm,
            hold: Box::new(resolved.hold),
        })
    }
}

/// The pool as the listener's [`Attribution`]: which container has a source address on the
/// pool network, and which task it runs. (A newtype: both the trait and the pool are foreign
/// here, and neither crate knows the other.)
#[derive(Debug, Clone)]
pub struct PoolAttribution(pub Arc<Pool>);

impl Attribution for PoolAttribution {
    fn lookup(&self, source: IpAddr) -> Option<Attributed> {
        let (container, task_id, room) = self.0.attribution_of(source.to_canonical())?;
        Some(Attributed { container, task_id, dedicated: false, room })
    }
}

/// The listener's [`Attribution`] in the daemon: the pool's containers, then the service
/// containers (MCP servers), each dedicated to its identity for life.
#[derive(Debug)]
struct SandboxAttribution {
    pool: PoolAttribution,
    services: Arc<egress::AttributionTable>,
}

impl Attribution for SandboxAttribution {
    fn lookup(&self, source: IpAddr) -> Option<Attributed> {
        self.pool.lookup(source).or_else(|| self.services.lookup(source))
    }
}

/// [`LlmAccess`] backed by the egress relay: a fresh token per task with the configured
/// budget, revoked when the task ends. With `egress.relay.send_provider_key_to_subagents`
/// it hands out the provider's URL and key instead (the seed's `llm_api_key`).
#[derive(Debug)]
pub struct RelayAccess {
    counters: Arc<crate::egress::RelayCounters>,
    tokens: Arc<egress::TaskTokens>,
    relay_base_url: String,
    budget: u64,
    provider_key: Option<ProviderKey>,
    /// With a remote engine, its egress node: no task starts while it is down.
    pub node: Option<crate::egress_node::NodeWatch>,
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

impl RelayAccess {
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
            counters: Arc::default(),
            tokens: egress.tokens(),
            relay_base_url: egress.relay_base_url(),
            budget: relay.default_token_budget,
            provider_key,
            node: None,
        }
    }
}

impl LlmAccess for RelayAccess {
    fn issue(&self, task_id: &str, budget_cap: Option<u64>) -> Result<TaskLlm, String> {
        if let Some(down) = self.node.as_ref().and_then(crate::egress_node::NodeWatch::down) {
            return Err(down);
        }
        if let Some(direct) = &self.provider_key {
            return Ok(TaskLlm::ProviderKey {
                base_url: direct.base_url.clone(),
                key: direct.key.clone(),
            });
        }
        let budget = budget_cap.map_or(self.budget, |cap| cap.min(self.budget));
        let token = self.tokens.issue(task_id, budget).map_err(|e| e.to_string())?;
        self.counters.issued.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        tracing::debug!(task_id, budget, "relay token issued");
        Ok(TaskLlm::Relay { base_url: self.relay_base_url.clone(), token })
    }

    /// Whatever way the task reaches its LLM, everything else it sends leaves through the
    /// proxy, which serves it only with this credential of the task.
    fn egress_token(&self, task_id: &str) -> Result<Option<SecretString>, String> {
        self.tokens.issue_proxy(task_id).map(Some).map_err(|e| e.to_string())
    }

    fn grant_secrets(
        &self,
        task_id: &str,
        secrets: Vec<TaskSecret>,
        watched: Vec<(String, SecretString)>,
    ) -> Result<(), String> {
        let mut credentials = Vec::with_capacity(secrets.len());
        for secret in secrets {
            let credential = match secret.decoy {
                true => egress::Credential::decoy(secret.name, secret.value),
                false => egress::Credential::new(secret.name, secret.value, secret.hosts),
            };
            credentials.push(match secret.confirm {
                true => credential.confirmed_first(),
                false => credential,
            });
        }
        self.tokens
            .credentials()
            .grant_watching(task_id, credentials, watched)
            .map_err(|e| e.to_string())
    }

    fn lend(
        &self,
        server: &str,
        chat: &nexbot_core::ChatRef,
        task_id: &str,
    ) -> Option<Box<dyn std::any::Any + Send>> {
        let lender = nexbot_mcp_host::chat_identity(server, chat);
        let lent = self.tokens.lend(&lender, task_id)?;
        Some(Box::new(lent))
    }

    fn revoke(&self, task_id: &str) -> AccessEnd {
        // Ends the task for the whole egress: token, open tunnels, and its summary.
        let finished = self.tokens.finish(task_id);
        if self.provider_key.is_none() {
            self.counters.revoked.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        let (egress, totals) = (&finished.egress, finished.egress.totals());
        tracing::info!(
            task_id,
            allowed = totals.allowed,
            denied = totals.denied,
            bytes_up = egress.bytes_up,
            bytes_down = egress.bytes_down,
            cut = egress.cut_at_end,
            "task egress"
        );
        AccessEnd {
            relay_tokens: finished.usage.map(|usage| usage.used),
            relay_cost: finished.cost,
            egress: Some(finished.egress),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use secrecy::ExposeSecret;

    /// A real listener on loopback (no network to firewall) for the tokens to come from.
    async fn listener(config: &Config, dir: &std::path::Path) -> Egress {
        let network =
            egress::Network { gateway: "127.0.0.1".parse().unwrap(), bridge: "lo".into() };
        let late: Arc<dyn Attribution> = Arc::new(LateAttribution::default());
        let keys = config.secrets.relay_keys.clone();
        Egress::start_with_keys(config.egress_config(), &network, dir, late, keys).await.unwrap()
    }

    fn config_with(env: &[(&str, &str)]) -> Config {
        let mut env: Vec<(String, String)> =
            env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        env.extend([
            ("NEXBOT_EGRESS__PORT".into(), "0".into()),
            ("NEXBOT_EGRESS__FIREWALL".into(), "false".into()),
            ("NEXBOT_LLM__BASE_URL".into(), "http://provider.example/v1".into()),
            ("NEXBOT_LLM_API_KEY".into(), "sk-nxw-unit-key".into()),
        ]);
        let base = std::path::Path::new("/tmp");
        Config::from_parts("", &base.join("c.toml"), base, env).unwrap()
    }

    fn own(project: Option<&str>) -> nexbot_docker::SelfDiscovery {
        let mut labels = std::collections::BTreeMap::new();
        if let Some(project) = project {
            labels.insert("com.docker.compose.project".to_owned(), project.to_owned());
        }
        let mounts = [("/skills", "/home/me/nexbot/skills"), ("/data", "/var/lib/docker/v/_data")]
            .into_iter()
            .map(|(d, s)| (d.to_owned(), std::path::PathBuf::from(s)))
            .collect();
        nexbot_docker::SelfDiscovery::Found(nexbot_docker::OwnContainer {
            id: "c".repeat(64),
            labels,
            mounts,
        })
    }

    #[test]
    fn a_compose_service_takes_its_project_and_skills_mount_unless_the_operator_set_them() {
        let config = config_with(&[]);
        let FromContainer::Compose(derived) = compose_settings(&config, &own(Some("shop"))) else {
            panic!("a compose service keeps the defaults")
        };
        assert_eq!(derived.subagent.pool_name, "shop");
        assert_eq!(derived.subagent.network, "shop-subagents");
        assert_eq!(
            derived.subagent.skills_dir.as_deref(),
            Some(Path::new("/home/me/nexbot/skills"))
        );
        let set = config_with(&[
            ("NEXBOT_SUBAGENT__POOL_NAME", "mine"),
            ("NEXBOT_SUBAGENT__NETWORK", "mine-net"),
        ]);
        let FromContainer::Compose(derived) = compose_settings(&set, &own(Some("shop"))) else {
            panic!("a compose service")
        };
        assert_eq!(
            (derived.subagent.pool_name.as_str(), derived.subagent.network.as_str()),
            ("mine", "mine-net")
        );
        // A plain container, and no container: nothing changes.
        assert_eq!(compose_settings(&config, &own(None)), FromContainer::Unchanged);
        let outside = nexbot_docker::SelfDiscovery::NotInContainer;
        assert_eq!(compose_settings(&config, &outside), FromContainer::Unchanged);
    }

    #[test]
    fn the_rooms_are_found_on_the_engine_through_the_daemons_own_mounts() {
        let rooms = |found| mcp_rooms(Path::new("/data"), &found, None);
        assert_eq!(
            rooms(own(Some("shop"))).on_engine,
            Ok(std::path::PathBuf::from("/var/lib/docker/v/_data/chats"))
        );
        let on_host = rooms(nexbot_docker::SelfDiscovery::NotInContainer);
        assert_eq!(on_host.on_engine.as_ref(), Ok(&on_host.dir));
        assert!(!on_host.check, "a daemon on the host knows the engine sees its paths");
        let unknown = rooms(nexbot_docker::SelfDiscovery::Unknown("no".into()));
        assert!(unknown.check, "a guess, checked before a room is given");
        assert_eq!(unknown.on_engine.as_ref(), Ok(&unknown.dir));
        let layer = mcp_rooms(Path::new("/srv/ws"), &own(Some("shop")), None);
        assert!(layer.on_engine.unwrap_err().contains("no volume or bind mount"));
        let far = mcp_rooms(Path::new("/data"), &own(None), Some("tcp://10.0.0.2:2376"));
        let why = far.on_engine.unwrap_err();
        assert!(why.contains("/data/chats") && why.contains("tcp://10.0.0.2:2376"), "{why}");
    }

    #[test]
    fn a_daemon_that_cannot_tell_keeps_its_names_and_refuses_owned_defaults_with_the_fix() {
        let unknown = nexbot_docker::SelfDiscovery::Unknown("the engine said no".into());
        let config = config_with(&[]);
        assert_eq!(
            compose_settings(&config, &unknown),
            FromContainer::CannotTell { why: "the engine said no".into(), defaults: true }
        );
        let set = config_with(&[
            ("NEXBOT_SUBAGENT__POOL_NAME", "mine"),
            ("NEXBOT_SUBAGENT__NETWORK", "mine-net"),
        ]);
        assert!(matches!(
            compose_settings(&set, &unknown),
            FromContainer::CannotTell { defaults: false, .. }
        ));
        let owned = || {
            SandboxError::Network(PoolError::Owned {
                what: "network \"nexbot-subagents\"".into(),
                owner: "instance 1234 (pid 7)".into(),
                why: "its container 0123 is running".into(),
                fix: "stop that daemon".into(),
            })
        };
        let text = refused_defaults(owned(), Some("the engine said no")).to_string();
        for part in [
            "nexbot-subagents",
            "cannot tell its compose project",
            "the engine said no",
            "NEXBOT_SUBAGENT__POOL_NAME",
        ] {
            assert!(text.contains(part), "{part} missing: {text}");
        }
        // Only with defaults it could not tell, and only an ownership refusal gets the note.
        assert!(!refused_defaults(owned(), None).to_string().contains("cannot tell"));
        let other = SandboxError::Pool(PoolError::ShuttingDown);
        assert!(!refused_defaults(other, Some("why")).to_string().contains("cannot tell"));
    }

    /// Issue 25: a task's model calls through the real relay are scanned for every value of
    /// its chat and of the operator, not only those the task was given. Here the task holds
    /// one secret; a value of its chat it was not given (picked up elsewhere) and an
    /// operator's value reach the scripted provider redacted — the chat's named, the
    /// operator's not. Before, the relay knew only the task's own values and both went out.
    #[tokio::test]
    async fn the_relay_scans_a_tasks_calls_for_every_value_of_its_chat_and_the_operator() {
        use nexbot_tests::scripted_llm::{ScriptedLlm, Step};
        const HELD: &str = "held-PLANTED-stdin-value-0001";
        const UNHELD: &str = "unheld-PLANTED-chat-value-0002";
        const OPERATOR: &str = "operator-PLANTED-value-0003";
        let llm = ScriptedLlm::start(vec![Step::text("ok")]).await;
        let dir = std::env::temp_dir().join(format!("nxw-sandbox-{}", uuid::Uuid::new_v4()));
        let mut config = config_with(&[]);
        config.llm.base_url = llm.base_url();
        config.egress.relay.provider_base_url = Some(llm.base_url());
        let egress = listener(&config, &dir).await;
        let tokens = RelayAccess::new(&config, &egress);
        let TaskLlm::Relay { base_url, token } = tokens.issue("t1", None).unwrap() else {
            panic!("the default is the relay")
        };
        let held = TaskSecret {
            name: "HELD".into(),
            value: SecretString::from(HELD.to_owned()),
            hosts: Vec::new(),
            confirm: false,
            decoy: false,
        };
        let watched = vec![
            ("UNHELD".to_owned(), SecretString::from(UNHELD.to_owned())),
            (String::new(), SecretString::from(OPERATOR.to_owned())),
        ];
        tokens.grant_secrets("t1", vec![held], watched).unwrap();
        let body = serde_json::json!({"model": "m", "messages": [
            {"role": "user", "content": format!("{HELD} {UNHELD} {OPERATOR}")},
        ]});
        let response = reqwest::Client::new()
            .post(format!("{base_url}/chat/completions"))
            .bearer_auth(token.expose_secret())
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        let sent = llm.chat_requests()[0].body.to_string();
        for value in [HELD, UNHELD, OPERATOR] {
            assert!(!sent.contains(value), "{value} reached the provider: {sent}");
        }
        assert!(sent.contains("[REDACTED:HELD] [REDACTED:UNHELD] [REDACTED]"), "{sent}");
        tokens.revoke("t1");
    }

    #[tokio::test]
    async fn tasks_get_relay_tokens_and_never_the_key_unless_opted_in() {
        let dir = std::env::temp_dir().join(format!("nxw-sandbox-{}", uuid::Uuid::new_v4()));
        let config = config_with(&[]);
        let egress = listener(&config, &dir).await;
        let tokens = RelayAccess::new(&config, &egress);
        let TaskLlm::Relay { base_url, token } = tokens.issue("t1", None).unwrap() else {
            panic!("the default is the relay")
        };
        assert_eq!(base_url, egress.relay_base_url());
        assert!(token.expose_secret().starts_with(egress::TOKEN_PREFIX));
        assert_ne!(token.expose_secret(), "sk-nxw-unit-key");
        assert_eq!(egress.tokens().authorize(&token).unwrap(), "t1");
        let usage = egress.tokens().usage("t1").unwrap();
        assert_eq!(usage.budget, config.egress.relay.default_token_budget);
        egress.tokens().charge("t1", 12);
        let credential = tokens.egress_token("t1").unwrap().expect("a credential per task");
        assert!(credential.expose_secret().starts_with(egress::PROXY_TOKEN_PREFIX));
        let live = egress::ProxyCredential::Live("t1".into());
        assert_eq!(egress.tokens().proxy_task(credential.expose_secret()), live);
        assert_eq!(tokens.revoke("t1").relay_tokens, Some(12));
        assert!(egress.tokens().authorize(&token).is_err(), "dead after the task");
        let ended = egress::ProxyCredential::Ended("t1".into());
        assert_eq!(egress.tokens().proxy_task(credential.expose_secret()), ended);
        assert_eq!(tokens.revoke("t1").relay_tokens, None);
        // What the chat's caps leave today caps the task's budget.
        tokens.issue("t3", Some(50)).unwrap();
        assert_eq!(egress.tokens().usage("t3").unwrap().budget, 50);
        tokens.revoke("t3");

        let config =
            config_with(&[("NEXBOT_EGRESS__RELAY__SEND_PROVIDER_KEY_TO_SUBAGENTS", "true")]);
        let tokens = RelayAccess::new(&config, &egress);
        let TaskLlm::ProviderKey { base_url, key } = tokens.issue("t2", None).unwrap() else {
            panic!("opted in")
        };
        assert_eq!(base_url, "http://provider.example/v1");
        assert_eq!(key.unwrap().expose_secret(), "sk-nxw-unit-key");
        assert!(egress.tokens().usage("t2").is_none(), "no relay token for a direct task");
        assert_eq!(tokens.revoke("t2").relay_tokens, None);
        egress.shutdown(Duration::from_secs(1)).await;
        let _ = std::fs::remove_dir_all(dir);
    }
}
