//! Builds the agent (LLM client, tools, hooks, store) from a [`Config`]; [`crate::app::App`]
//! calls it between starting the sandbox and the bus, so `serve`, `chat` and the tests
//! assemble exactly the same thing.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;

use crate::agent::hooks::{Hook, HookContext, HookEvent, HookResult};
use crate::agent::memory::Memories;
use crate::agent::Agent;
use crate::config::Config;
use crate::delegation::{LlmAccess, SubagentRunner};
use crate::exits::Exits;
use crate::llm::Model;
use crate::rooms::{Keep, Rooms};
use crate::sandbox::Sandbox;
use crate::spend::Spend;
use crate::store::Store;
use crate::tools::ask_user::AskUser;
use crate::tools::delegate::{Delegate, DelegateSettings, SecretSource};
use crate::tools::files::file_tools;
use crate::tools::manage_message::ManageMessage;
use crate::tools::memory::MemoryTool;
use crate::tools::send_file::SendFile;
use crate::tools::send_message::SendMessage;
use crate::tools::tasks::ManageTasks;
use crate::tools::{ToolRegistry, ToolSource};
use crate::vault::Vault;
use crate::workspace::{CONFIG_FILE, MEMORY_FILE};

/// Opens the database named by the config; an older install's `MEMORY.md` notes are imported
/// into the owner's memory the first time.
pub async fn open_store(config: &Config) -> anyhow::Result<Store> {
    let store = Store::open(&config.database_path()).await?;
    // An older install's MEMORY.md notes join the owner's memory, once.
    let file = config.workspace.dir.join(MEMORY_FILE);
    let owner = config.owner_chat();
    crate::memory::import_memory_md(&store, &owner, &file, config.memory.limits()).await;
    Ok(store)
}

/// `[llm.embeddings]`'s endpoint, when it is set.
fn embedder(config: &Config) -> anyhow::Result<Option<nexbot_llm::Embedder>> {
    let Some(spec) = config.llm.embeddings.clone() else { return Ok(None) };
    let embedder = nexbot_llm::Embedder::new(spec, config.secrets.embeddings_key.clone())
        .map_err(|e| anyhow::anyhow!("[llm.embeddings]: {e}"))?;
    Ok(Some(embedder))
}

/// What delegated tasks run on, and how each reaches the LLM.
#[derive(Debug, Clone)]
pub struct Delegation {
    pub runner: Arc<dyn SubagentRunner>,
    pub tokens: Arc<dyn LlmAccess>,
    /// The egress questions (`egress.mode = "ask"`): a task is registered with its chat so
    /// the proxy's questions reach it. `None`: nothing asks (tests without a daemon).
    pub approvals: Option<Arc<dyn crate::delegation::TaskQuestions>>,
    /// The MCP servers whose tools the agent gets (`None`: none).
    pub mcp: Option<Arc<crate::mcp::McpServers>>,
    /// The tasks given a decoy secret, for the alarm (`decoys.rs`).
    pub traps: Arc<crate::delegation::decoy_traps::DecoyTraps>,
    /// Where the delegation tool built from this is put: the self-test (`selftest.rs`) runs
    /// its attacks through it, on the path every task takes.
    pub built: Arc<std::sync::OnceLock<Arc<Delegate>>>,
}

impl Delegation {
    /// The pool and the relay's per-task tokens of a running sandbox.
    pub fn on(sandbox: &Sandbox) -> Self {
        Self {
            runner: sandbox.runner(),
            tokens: sandbox.tokens(),
            approvals: None,
            mcp: Some(sandbox.mcp().clone()),
            traps: Arc::default(),
            built: Arc::default(),
        }
    }
}

/// What keeps secrets in: the vault (delegated tasks take secrets from it by name) and the
/// exit scanner (the model's requests and task records pass it).
#[derive(Debug, Clone, Default)]
pub struct Guards {
    pub vault: Option<Arc<Vault>>,
    pub exits: Option<Arc<Exits>>,
    /// Asks the chat's user before the risky steps `agent.confirm` lists; `None`: nothing
    /// asks.
    pub confirm: Option<Arc<dyn nexbot_agent::confirm::Confirm>>,
    /// The chained audit a stored job is written to (`None` without a sandbox: no audit).
    pub trail: Option<Arc<dyn nexbot_core::audit::AuditTrail>>,
}

/// The agent with every tool; delegation is offered only when `delegation` is given.
pub fn build_agent(
    config: &Config,
    store: Store,
    delegation: Option<Delegation>,
) -> anyhow::Result<Agent> {
    build_agent_with_hooks(config, store, delegation, Vec::new(), Guards::default())
}

/// [`build_agent`] with `extra` hooks after the built-in ones, and `guards`.
pub fn build_agent_with_hooks(
    config: &Config,
    store: Store,
    delegation: Option<Delegation>,
    extra: Vec<Arc<dyn Hook>>,
    guards: Guards,
) -> anyhow::Result<Agent> {
    let workspace = &config.workspace.dir;
    if !workspace.is_dir() {
        anyhow::bail!(
            "workspace {} does not exist: create it with `nexbot init --dir {}`",
            workspace.display(),
            workspace.display()
        );
    }
    // Each chat's file tools work in its own room; on the first start with rooms an older
    // install's loose files move into the owner's room (the owner's private Telegram chat, else
    // the console's).
    let owner_chat = config.owner_chat();
    let rooms = Rooms::open(workspace, &owner_chat, &daemon_files(config))
        .with_context(|| format!("the chats' rooms in workspace {}", workspace.display()))?;
    let rooms = Arc::new(rooms);
    let mut tools = ToolRegistry::default();
    for tool in file_tools(rooms.clone()) {
        tools.add(tool);
    }
    for tool in crate::tools::search::search_tools(rooms.clone()) {
        tools.add(tool);
    }
    let memories = Memories::new(store.clone(), config.memory.limits(), embedder(config)?);
    tools.add(Arc::new(MemoryTool::new(memories.clone(), workspace.join(MEMORY_FILE))));
    tools.add(Arc::new(ManageTasks::new(store.clone())));
    tools.add(Arc::new(SendMessage));
    tools.add(Arc::new(SendFile::new(rooms.clone())));
    tools.add(Arc::new(ManageMessage));
    tools.add(Arc::new(AskUser::new(Duration::from_secs(config.agent.ask_timeout_secs))));
    if config.scheduler.enabled {
        let zone = config.scheduler.default_zone(&config.llm.caps);
        tools.add(Arc::new(
            crate::tools::schedule::ScheduleTask::new(
                store.clone(),
                zone,
                config.scheduler.job_token_budget,
                Duration::from_secs(config.egress.approval_timeout_secs),
            )
            .with_trail(guards.trail.clone()),
        ));
    }
    let skills = crate::skills::Skills::load(
        config.skills_dir(),
        config.skills.allow_hashes.clone(),
        std::time::Duration::from_millis(config.skills.debounce_ms),
    );
    tools.add(Arc::new(crate::tools::skills::ReadSkill::new(skills.clone())));
    let spend = Spend::new(config.llm.caps.clone(), store.clone());
    let mut cli = None;
    if let Some(Delegation { runner, tokens, approvals, mcp, traps, built }) = delegation {
        // The chat's MCP tools: offered to its model, and grantable to its delegated tasks.
        let mcp = mcp.map(|mcp| {
            let servers = mcp.servers().to_vec();
            let mut tools = nexbot_mcp::McpTools::new(servers, mcp);
            // The browser types a chat's secret only where its binding allows.
            if let (true, Some(vault)) = (config.browser.enabled, &guards.vault) {
                let typing = Arc::new(nexbot_browser::SecretTyping::new(vault.clone()));
                tools = tools.with_filter(nexbot_browser::SERVER, typing);
            }
            Arc::new(tools) as Arc<dyn ToolSource>
        });
        if let Some(source) = &mcp {
            tools.add_source(source.clone());
        }
        let settings = DelegateSettings {
            longest: crate::deadlines::TaskDeadlines::plan(&config.task_limits(), None),
            llm_model: config.subagent_llm_model(),
            llm_context_window: config.llm.provider_list().iter().map(|p| p.context_window()).min(),
            spend: Some(spend.clone()),
            exits: guards.exits.clone(),
            search: config.search.backend(),
            max_blocked_commands: config.subagent.max_blocked_commands,
            search_budget: config.subagent.search_budget,
            approvals,
            traps: Some(traps),
        };
        let secrets = guards.vault.clone().map(|vault| vault as Arc<dyn SecretSource>);
        let delegate = Delegate::new(runner, store.clone(), secrets, tokens, settings);
        let delegate = Arc::new(delegate.with_mcp(mcp).with_rooms(rooms.clone()));
        let _ = built.set(delegate.clone());
        tools.add(delegate.clone());
        cli = Some(delegate);
    }
    let llm = Model::new(&config.llm, &config.secrets.provider_keys, spend)
        .context("cannot set up the LLM providers")?
        .with_exits(guards.exits);
    let mut hooks: Vec<Arc<dyn Hook>> = vec![Arc::new(TimeoutAdvice)];
    hooks.extend(extra);
    let agent = Agent::new(llm, tools, hooks, store, workspace.clone(), config.agent.clone())
        .with_owner(config.telegram.owner)
        .with_recall(memories, config.memory.recall)
        .with_parallel_turns(config.bus.max_parallel_turns)
        .with_skills(skills);
    let agent = match guards.confirm {
        Some(confirm) => agent.with_confirm(confirm),
        None => agent,
    };
    Ok(match cli {
        Some(delegate) => agent.with_cli(delegate),
        None => agent,
    })
}

/// What the daemon names that the move into rooms must leave where it is, wherever the config
/// puts it: the database and its companions, the config, the audit log, the socket and the
/// lock, the proxy's CA files, the skills folder.
fn daemon_files(config: &Config) -> Keep {
    let database = config.database_path();
    let mut paths: Vec<std::path::PathBuf> = ["", "-wal", "-shm", "-journal"]
        .iter()
        .map(|suffix| {
            let mut name = database.clone().into_os_string();
            name.push(suffix);
            name.into()
        })
        .collect();
    paths.extend([
        config.workspace.dir.join(CONFIG_FILE),
        config.egress_audit_path(),
        config.control_socket(),
        config.data_dir().join(crate::instance::LOCK_FILE),
    ]);
    paths.extend(config.egress.proxy.extra_ca_files.iter().cloned());
    if let Some(dir) = &config.skills.dir {
        paths.push(dir.clone());
    }
    if let Some(dir) = &config.subagent.skills_dir {
        paths.push(dir.clone());
    }
    Keep { paths }
}

/// Built-in hook: when a tool times out, tells the model how to recover instead of retrying
/// the same long call.
#[derive(Debug)]
pub struct TimeoutAdvice;

impl Hook for TimeoutAdvice {
    fn name(&self) -> &'static str {
        "timeout_advice"
    }
    fn handle(&self, event: &HookEvent<'_>, _: &HookContext<'_>) -> HookResult {
        match event {
            HookEvent::Timeout { tool: Some(_) } => HookResult::InjectContext(
                "Do not repeat the same call: split the work into smaller steps, or delegate it \
                 to a sub-agent with a suitable timeout_secs."
                    .into(),
            ),
            _ => HookResult::Continue,
        }
    }
}
