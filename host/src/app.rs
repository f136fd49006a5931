//! The daemon's life cycle: the one owner of what runs, in which order it starts, and in which
//! order it stops. `nexbot serve`, `nexbot chat` and the tests all go through [`App`], so the
//! order lives here once.
//!
//! Start: store → sandbox (network, egress, pool; or the reason delegation is off) → agent →
//! bus (with the outbound router and the command registry) → channels and other parts, which
//! the caller adds ([`App::add_channel`], [`App::spawn`]).
//!
//! Stop ([`App::stop`]), the reverse, and nothing is cut off mid-way:
//! 1. parts of [`Stage::Input`] (channels, the scheduler: whatever feeds the bus) are told to
//!    stop and awaited, so no new message arrives; waiting egress questions expire (their
//!    held connections are refused);
//! 2. the bus: running turns are cancelled (their subagent tasks get `cancel`) and their
//!    answers still go out, within [`TURNS_GRACE`];
//! 3. parts of [`Stage::Service`] (control API, skills watcher) stop;
//! 4. the sandbox drains the pool and closes egress last, because everything above may still
//!    be using it. Channels are unregistered from the router only now, so late answers of
//!    step 2 still reach them.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use nexbot_browser::BrowserCommand;
use nexbot_core::ChannelKind;
use nexbot_docker::PoolError;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::agent::channel::Channel;
use crate::agent::hooks::Hook;
use crate::agent::Agent;
use crate::approvals::{Approvals, McpQuestions};
use crate::bus::{self, BusHandle, InboundMessage};
use crate::commands::{Clis, CommandRegistry};
use crate::config::Config;
use crate::delegation::LlmAccess;
use crate::exits::Exits;
use crate::runtime::{build_agent_with_hooks, open_store, Delegation, Guards};
use crate::sandbox::{Sandbox, SandboxError};
use crate::status::StatusBoard;
use crate::store::Store;
use crate::vault::Vault;
use nexbot_channels::Router;
use nexbot_core::audit::AuditTrail;

/// How long running turns get to end (and answer) once the daemon stops.
pub const TURNS_GRACE: Duration = Duration::from_secs(30);
/// How long a part gets to stop after it was told to.
pub const PART_GRACE: Duration = Duration::from_secs(10);

/// When a long-lived part is stopped, relative to the bus.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Feeds the bus (channels, the scheduler): stopped before the bus.
    Input,
    /// Serves beside the bus (control API, skills watcher): stopped after it, before the
    /// sandbox.
    Service,
}

/// Wraps the sandbox's per-task LLM access.
pub type LlmAccessLayer = Box<dyn FnOnce(Arc<dyn LlmAccess>) -> Arc<dyn LlmAccess> + Send>;

/// What the tests (and later parts) may change in how the app is assembled.
#[derive(Default)]
pub struct AppOptions {
    /// Hooks after the built-in ones.
    pub hooks: Vec<Arc<dyn Hook>>,
    /// Wraps the sandbox's per-task LLM access (a test watches the tokens it issues).
    pub llm_access: Option<LlmAccessLayer>,
    /// The exit scanner the log writer already uses (`cli.rs`); one is made from the
    /// config's keys when absent.
    pub exits: Option<Arc<Exits>>,
}

impl std::fmt::Debug for AppOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppOptions")
            .field("hooks", &self.hooks.len())
            .field("llm_access", &self.llm_access.is_some())
            .field("exits", &self.exits.is_some())
            .finish()
    }
}

#[derive(Debug)]
struct Part {
    name: &'static str,
    stage: Stage,
    stop: CancellationToken,
    task: JoinHandle<()>,
}

/// The running daemon.
#[derive(Debug)]
pub struct App {
    /// The egress questions, when the sandbox runs.
    approvals: Option<Arc<Approvals>>,
    store: Store,
    sandbox: Option<Sandbox>,
    delegation_off: Option<String>,
    vault: Arc<Vault>,
    exits: Arc<Exits>,
    agent: Arc<Agent>,
    router: Arc<Router>,
    commands: CommandRegistry,
    bus: BusHandle,
    /// Cancels running turns when the daemon stops.
    turns: CancellationToken,
    status: StatusBoard,
    started: std::time::Instant,
    parts: Vec<Part>,
    channels: Vec<ChannelKind>,
    /// The scheduler's counters, when it runs (`scheduler.enabled`).
    scheduler: Option<Arc<crate::scheduler::SchedulerStats>>,
    /// The tasks a dead run left running, settled at start; their progress messages are
    /// edited as their channels are added.
    interrupted: Vec<crate::interrupted::InterruptedTask>,
    /// The owner's self-test (`None` without a sandbox: nothing to attack).
    selftest: Option<Arc<crate::selftest::SelfTest>>,
}

impl App {
    /// Starts store, sandbox (when delegation is on), agent and bus, in this order. A sandbox
    /// that cannot start leaves the agent without delegation, with the reason in
    /// [`App::delegation_off`], rather than no agent at all; anything else that fails stops
    /// what was started and returns the error.
    pub async fn start(config: &Config) -> anyhow::Result<Self> {
        Self::start_with(config, AppOptions::default()).await
    }

    /// [`App::start`] with `options`.
    pub async fn start_with(config: &Config, options: AppOptions) -> anyhow::Result<Self> {
        for warning in crate::deadlines::warnings(&config.task_limits()) {
            tracing::warn!("{warning}");
        }
        let store = open_store(config).await?;
        // Before anything of this run can start a task: what a dead run left is settled.
        let interrupted = crate::interrupted::settle(&store).await;
        let exits = options.exits.unwrap_or_else(|| Exits::new(config.secrets.daemon_keys()));
        let vault =
            Vault::open(store.clone(), config.secrets.master_key.as_ref(), Some(exits.clone()))
                .await?;
        vault.set_max_per_scope(config.vault.max_secrets_per_scope);
        crate::decoys::plant(&vault, &config.vault.decoys).await;
        let (sandbox, delegation_off) = start_sandbox(config, &vault).await?;
        // The egress questions (`egress.mode = "ask"`): the proxy asks them, delegated tasks
        // are registered with them, the router (below) shows them, `/egress` answers them.
        // Built without a sandbox too: the tools' confirmations (`agent.confirm`) use them.
        let approvals = Some(start_approvals(config, sandbox.as_ref(), &store, &exits));
        if let Some(approvals) = &approvals {
            approvals.expire_leftovers().await;
        }
        if config.egress.mode.is_none() && sandbox.is_some() {
            tracing::warn!("egress: {}", crate::approvals::mode_line(&config.egress));
        }
        let delegation = sandbox.as_ref().map(|sandbox| {
            let mut delegation = Delegation::on(sandbox);
            delegation.approvals = approvals.clone().map(crate::approvals::task_questions);
            if let Some(questions) = &delegation.approvals {
                sandbox.mcp().set_questions(Arc::new(McpQuestions(questions.clone())));
            }
            if let Some(wrap) = options.llm_access {
                delegation.tokens = wrap(delegation.tokens);
            }
            delegation
        });
        let traps = delegation.as_ref().map(|d| d.traps.clone());
        let built = delegation.as_ref().map(|d| d.built.clone());
        let guards = guards(config, approvals.as_ref(), &vault, &exits, sandbox.as_ref());
        let agent = match build_agent_with_hooks(
            config,
            store.clone(),
            delegation,
            options.hooks,
            guards,
        ) {
            Ok(agent) => Arc::new(agent),
            Err(e) => {
                if let Some(sandbox) = sandbox {
                    sandbox.shutdown().await;
                }
                return Err(e);
            }
        };
        let mut parts = Vec::new();
        // What the image says it has: skills are judged against it, `/agent` offers its CLIs.
        let caps = match &sandbox {
            Some(sandbox) => sandbox.pool().capabilities().await,
            None => None,
        };
        let clis = clis_of(config, sandbox.as_ref(), delegation_off.as_deref(), caps.as_ref());
        if let Some(skills) = agent.skills().cloned() {
            // A remote engine's copy of the folder follows the watcher's new sets.
            if let Some(copy) = sandbox.as_ref().and_then(Sandbox::skills_copy) {
                let stop = CancellationToken::new();
                let task = tokio::spawn(copy.follow(skills.subscribe(), stop.clone()));
                parts.push(Part { name: "skills copy", stage: Stage::Service, stop, task });
            }
            parts.extend(start_skills(skills, &store, caps).await);
        }
        let router = Arc::new(Router::new().with_exits(exits.clone()));
        crate::decoys::set_alarm(sandbox.as_ref(), traps, router.clone(), config.owner_chat());
        let status = StatusBoard::default();
        let disk = crate::disk::DiskSpace::new(config.data_dir(), config.storage.min_free_mb);
        disk.add_to(&status, "disk");
        if let Some(sandbox) = &sandbox {
            sandbox.add_to(&status, config.storage.min_free_mb).await;
        }
        skills_and_pool_lines(&status, &agent, sandbox.is_none(), delegation_off.as_deref());
        let mut commands = CommandRegistry::builtin(
            store.clone(),
            config.llm.primary().1,
            agent.model().spend().clone(),
            status.clone(),
            vault.clone(),
            clis,
        );
        let (voice, audit_head) =
            voice_and_audit(&mut commands, config, &store, &agent, sandbox.as_ref())?;
        let selftest =
            crate::selftest::start(config, &store, sandbox.as_ref(), built, &vault, &router)
                .await
                .map(|test| crate::selftest::add_to(test, &status, &mut commands));
        if let Some(approvals) = &approvals {
            approvals.set_channel(router.clone());
            commands.add(Arc::new(crate::approvals::EgressCommand(approvals.clone())));
            commands.add(Arc::new(crate::approvals::ApproveCommand(approvals.clone())));
            commands.add(Arc::new(crate::approvals::QuestionsCommand(approvals.clone())));
            if sandbox.is_some() {
                let line = crate::approvals::mode_line(&config.egress);
                status.add("egress", move || line.clone());
            }
        }
        let line = vault.clone();
        status.add(crate::commands::SECRETS_LINE, move || crate::vault::status_line(&line));
        if let (true, Some(sandbox)) = (config.browser.enabled, &sandbox) {
            let rooms = nexbot_tools::rooms::rooms_dir(&config.workspace.dir);
            commands.add(Arc::new(BrowserCommand::new(sandbox.mcp().clone(), rooms)));
        }
        if !config.mcp_servers().is_empty() {
            add_mcp_line(&status, sandbox.as_ref(), &agent);
        }
        let turns = CancellationToken::new();
        let inbox = Arc::new(crate::inbox::Inbox::new(
            nexbot_tools::rooms::rooms_dir(&config.workspace.dir),
            transcriber(config)?,
            config.llm.sees_images(),
        ));
        let bus = bus::start(
            agent.clone(),
            router.clone(),
            commands.clone(),
            inbox,
            voice,
            &config.bus,
            turns.clone(),
        );
        let mut app = Self {
            approvals,
            store,
            sandbox,
            delegation_off,
            vault,
            exits,
            agent,
            router,
            commands,
            bus,
            turns,
            status,
            started: std::time::Instant::now(),
            parts,
            channels: Vec::new(),
            scheduler: None,
            interrupted,
            selftest,
        };
        app.spawn("disk", Stage::Service, move |stop| disk.watch(stop));
        app.start_scheduler(config);
        app.send_audit_head(audit_head, config);
        Ok(app)
    }

    /// The audit chain's head to the Telegram owner every `egress.audit_head_secs`.
    fn send_audit_head(&mut self, head: Option<crate::audit_head::AuditHead>, config: &Config) {
        let every = config.egress.audit_head_secs;
        let (Some(head), Some(owner), true) = (head, config.telegram.owner, every > 0) else {
            return;
        };
        let channel: Arc<dyn Channel> = self.router.clone();
        let (owner, every) = (nexbot_core::ChatRef::Telegram(owner), Duration::from_secs(every));
        self.spawn("audit head", Stage::Input, move |stop| {
            head.send_every(every, owner, channel, stop)
        });
    }

    /// The scheduler, when `scheduler.enabled`: its status line, its counters, its loop.
    fn start_scheduler(&mut self, config: &Config) {
        if config.scheduler.enabled {
            let parts = crate::scheduler::SchedulerParts {
                store: self.store.clone(),
                agent: self.agent.clone(),
                channel: self.router.clone(),
                workspace: config.workspace.dir.clone(),
                owner_chat: config.owner_chat(),
                zone: config.scheduler.default_zone(&config.llm.caps),
                keep_days: config.storage.task_records_days,
            };
            let scheduler = crate::scheduler::Scheduler::new(&config.scheduler, parts);
            let stats = scheduler.stats();
            let line = stats.clone();
            self.status.add("scheduler", move || line.line());
            self.scheduler = Some(stats);
            self.spawn("scheduler", Stage::Input, move |stop| scheduler.run(stop));
        } else {
            self.status.add("scheduler", || "off (scheduler.enabled = false)".to_owned());
        }
    }

    /// The scheduler's counters; `None` when it is off.
    pub fn scheduler(&self) -> Option<&Arc<crate::scheduler::SchedulerStats>> {
        self.scheduler.as_ref()
    }

    /// When the app started.
    pub fn started(&self) -> std::time::Instant {
        self.started
    }

    /// The lines `/status` shows: parts add theirs here.
    pub fn status(&self) -> &StatusBoard {
        &self.status
    }

    /// Why delegation to subagents is off (`subagent.enabled = false`, Docker unreachable, …).
    pub fn delegation_off(&self) -> Option<&str> {
        self.delegation_off.as_deref()
    }

    pub fn agent(&self) -> &Arc<Agent> {
        &self.agent
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The secrets vault (off without a master key; it says why).
    pub fn vault(&self) -> &Arc<Vault> {
        &self.vault
    }

    /// The chained audit the operator's actions are written to (none without a sandbox).
    pub fn trail(&self) -> Option<Arc<dyn AuditTrail>> {
        trail(self.sandbox.as_ref(), &self.exits)
    }

    /// The exit scanner every outbound text passes.
    pub fn exits(&self) -> &Arc<Exits> {
        &self.exits
    }

    pub fn sandbox(&self) -> Option<&Sandbox> {
        self.sandbox.as_ref()
    }

    /// Where channels put what users send.
    pub fn inbound(&self) -> mpsc::Sender<InboundMessage> {
        self.bus.inbound.clone()
    }

    /// The outbound router (answers, progress, tool messages → the chat's channel).
    pub fn router(&self) -> &Arc<Router> {
        &self.router
    }

    /// The commands every channel shares (a channel may show them as a menu).
    pub fn commands(&self) -> &CommandRegistry {
        &self.commands
    }

    /// Makes `channel` serve chats of `kind` until the app stops. A channel that also runs a
    /// loop of its own (polling) starts it with [`App::spawn`] at [`Stage::Input`]. The
    /// progress messages a dead run left in its chats are edited to say "interrupted".
    pub fn add_channel(&mut self, kind: ChannelKind, channel: Arc<dyn Channel>) {
        crate::interrupted::tell_chats(&self.interrupted, kind, &channel);
        self.router.register(kind, channel);
        self.channels.push(kind);
    }

    /// Runs a long-lived part until the app stops: `run` gets a token that fires when the
    /// part must end, and must then return within [`PART_GRACE`] (it is aborted after).
    pub fn spawn<F, Fut>(&mut self, name: &'static str, stage: Stage, run: F)
    where
        F: FnOnce(CancellationToken) -> Fut,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let stop = CancellationToken::new();
        let task = tokio::spawn(run(stop.clone()));
        self.parts.push(Part { name, stage, stop, task });
    }

    /// The egress questions (`egress.mode = "ask"`); `None` without a sandbox.
    pub fn approvals(&self) -> Option<&Arc<Approvals>> {
        self.approvals.as_ref()
    }

    /// The owner's self-test, when the sandbox runs.
    pub fn selftest(&self) -> Option<&Arc<crate::selftest::SelfTest>> {
        self.selftest.as_ref()
    }

    /// Stops everything in order (see the module documentation).
    pub async fn stop(mut self) {
        stop_parts(&mut self.parts, Stage::Input).await;
        // Held connections are refused now and their questions marked expired: a turn waiting
        // on its task must not wait out a question nobody will answer.
        if let Some(approvals) = &self.approvals {
            approvals.shutdown().await;
        }
        // The bus: no new messages (the inbound side closes with the last sender), running
        // turns cancelled, their answers delivered.
        self.turns.cancel();
        let BusHandle { inbound, task } = self.bus;
        drop(inbound);
        if tokio::time::timeout(TURNS_GRACE, task).await.is_err() {
            tracing::warn!("turns did not stop within {}s", TURNS_GRACE.as_secs());
        }
        stop_parts(&mut self.parts, Stage::Service).await;
        for kind in self.channels {
            self.router.unregister(kind);
        }
        if let Some(sandbox) = self.sandbox {
            sandbox.shutdown().await;
        }
    }
}

/// The skills' line, and the pool's when delegation is off (`why`).
fn skills_and_pool_lines(status: &StatusBoard, agent: &Agent, no_sandbox: bool, why: Option<&str>) {
    if let Some(skills) = agent.skills().cloned() {
        status.add("skills", move || match skills.dir() {
            None => "no skills folder ([skills] dir)".to_owned(),
            Some(_) => crate::skills::status_line(&skills.current()),
        });
    }
    if let (true, Some(why)) = (no_sandbox, why) {
        let why = why.to_owned();
        status.add("pool", move || format!("off ({why})"));
    }
}

/// The status board's name of the MCP servers' line (per chat).
const MCP_LINE: &str = "MCP servers";

/// The chats' voice (`/voice`) and, with a sandbox, the audit chain's head (`/audit`), their
/// commands added to `commands` with `/memory`.
fn voice_and_audit(
    commands: &mut CommandRegistry,
    config: &Config,
    store: &Store,
    agent: &Agent,
    sandbox: Option<&Sandbox>,
) -> anyhow::Result<(crate::voice::Voice, Option<crate::audit_head::AuditHead>)> {
    let spend = agent.model().spend().clone();
    let voice = crate::voice::Voice::new(speaker(config)?, store.clone(), spend);
    commands.add(Arc::new(crate::voice::VoiceCommand(voice.clone())));
    let memory = crate::commands::MemoryCommand::new(store.clone(), config.telegram.owner);
    commands.add(Arc::new(memory));
    let head = sandbox.map(|s| {
        let verify = Arc::new(s.egress().audit_verifier());
        crate::audit_head::AuditHead::new(verify, config.telegram.owner)
    });
    if let Some(head) = &head {
        commands.add(Arc::new(crate::audit_head::AuditCommand(head.clone())));
    }
    Ok((voice, head))
}

/// `[llm.speech]`'s endpoint, when it is set.
fn speaker(config: &Config) -> anyhow::Result<Option<nexbot_llm::Speaker>> {
    let Some(spec) = config.llm.speech.clone() else { return Ok(None) };
    let speaker = nexbot_llm::Speaker::new(spec, config.secrets.speech_key.clone())
        .map_err(|e| anyhow::anyhow!("[llm.speech]: {e}"))?;
    Ok(Some(speaker))
}

/// `[llm.transcription]`'s endpoint, when it is set.
fn transcriber(config: &Config) -> anyhow::Result<Option<nexbot_llm::Transcriber>> {
    let Some(spec) = config.llm.transcription.clone() else { return Ok(None) };
    let key = config.secrets.transcription_key.clone();
    let transcriber = nexbot_llm::Transcriber::new(spec, key)
        .map_err(|e| anyhow::anyhow!("[llm.transcription]: {e}"))?;
    Ok(Some(transcriber))
}

/// The sandbox (pool, egress, MCP services), or why delegation is off. A `sandbox.runtime` the
/// engine lacks refuses the start: the operator asked for a wall the engine does not have, and
/// running without it (or without delegation, which they may not notice) is not what they asked.
async fn start_sandbox(
    config: &Config,
    vault: &Arc<Vault>,
) -> anyhow::Result<(Option<Sandbox>, Option<String>)> {
    if !config.subagent.enabled {
        return Ok((None, Some("subagent.enabled = false".to_owned())));
    }
    let mut attempt = 1;
    loop {
        match Sandbox::start(config, Some(vault.clone())).await {
            Ok(sandbox) => return Ok((Some(sandbox), None)),
            Err(e @ SandboxError::Pool(PoolError::RuntimeMissing { .. })) => {
                anyhow::bail!("sandbox.runtime: {e}")
            }
            Err(e) if attempt <= SANDBOX_RETRIES.len() && e.may_pass() => {
                let wait = SANDBOX_RETRIES[attempt - 1];
                tracing::warn!(
                    attempt,
                    error = %e,
                    "the sandbox did not start; trying again in {} s",
                    wait.as_secs()
                );
                tokio::time::sleep(wait).await;
                attempt += 1;
            }
            Err(e) => return Ok((None, Some(e.to_string()))),
        }
    }
}

/// The waits before the sandbox's second and third attempts. Why try again: a daemon that
/// starts while the one before it is still going away (killed, its containers exiting; the
/// engine restarting) meets a network or containers in that state for a moment, and without a
/// sandbox it would run the whole time without delegation.
const SANDBOX_RETRIES: [Duration; 2] = [Duration::from_secs(1), Duration::from_secs(2)];

async fn stop_parts(parts: &mut Vec<Part>, stage: Stage) {
    let (now, later): (Vec<_>, Vec<_>) = parts.drain(..).partition(|p| p.stage == stage);
    *parts = later;
    for part in &now {
        part.stop.cancel();
    }
    for mut part in now {
        match tokio::time::timeout(PART_GRACE, &mut part.task).await {
            Ok(Ok(())) => tracing::debug!(part = part.name, "stopped"),
            Ok(Err(e)) => tracing::error!(part = part.name, error = %e, "ended abnormally"),
            Err(_) => {
                tracing::warn!(
                    part = part.name,
                    "did not stop within {}s; aborted",
                    PART_GRACE.as_secs()
                );
                part.task.abort();
            }
        }
    }
}

/// What keeps secrets in and the steps asked about: the vault, the exit scan, the
/// confirmations of `agent.confirm` (through the approvals) and the chained audit (the
/// sandbox's egress; none without one).
fn guards(
    config: &Config,
    approvals: Option<&Arc<Approvals>>,
    vault: &Arc<Vault>,
    exits: &Arc<Exits>,
    sandbox: Option<&Sandbox>,
) -> Guards {
    let confirm = approvals.cloned().map(|approvals| {
        let confirm = crate::approvals::StepConfirm::new(approvals, &config.agent);
        Arc::new(confirm) as Arc<dyn nexbot_agent::confirm::Confirm>
    });
    let trail = trail(sandbox, exits);
    Guards { vault: Some(vault.clone()), exits: Some(exits.clone()), confirm, trail }
}

/// The chained audit other parts write to (the sandbox's egress log; none without one), its
/// events scanned for every secret first.
fn trail(sandbox: Option<&Sandbox>, exits: &Arc<Exits>) -> Option<Arc<dyn AuditTrail>> {
    sandbox.map(|s| crate::exits::ScannedTrail::wrap(s.egress().trail(), exits.clone()))
}

/// The approvals of this run: the sandbox's egress settings (or the config's without a
/// sandbox), the owner, and the proxy's approver set when the sandbox runs.
fn start_approvals(
    config: &Config,
    sandbox: Option<&Sandbox>,
    store: &Store,
    exits: &Arc<Exits>,
) -> Arc<Approvals> {
    let owner = config.telegram.owner;
    let egress = match sandbox {
        Some(sandbox) => sandbox.egress().config().clone(),
        None => config.egress_config(),
    };
    let approvals = Approvals::with_owner(&egress, store.clone(), owner);
    if let Some(sandbox) = sandbox {
        let approver = Arc::new(crate::approvals::EgressApprover(approvals.clone()));
        sandbox.egress().set_approver(approver);
        if let Some(trail) = trail(Some(sandbox), exits) {
            approvals.set_trail(trail);
        }
    }
    approvals
}

/// The skills' services: the operator's allowances applied and the image's capabilities
/// set before the first turn, then the folder's watcher and the first-seen hashes' recorder.
async fn start_skills(
    skills: crate::skills::Skills,
    store: &Store,
    caps: Option<nexbot_protocol::Capabilities>,
) -> [Part; 2] {
    // The contents the operator allowed despite the screen, before the first turn.
    crate::skill_grants::apply_allowances(&skills, store).await;
    if let Some(caps) = caps {
        let skills = skills.clone();
        let _ = tokio::task::spawn_blocking(move || {
            skills.set_capabilities(Some(caps.tools), caps.programs)
        })
        .await;
    }
    let stop = CancellationToken::new();
    let task = tokio::spawn(skills.clone().watch(stop.clone()));
    let watch = Part { name: "skills", stage: Stage::Service, stop, task };
    // The content hashes whose declared domains are granted (`skill_grants`).
    let stop = CancellationToken::new();
    let recording = crate::skill_grants::record_first_seen(skills, store.clone(), stop.clone());
    let task = tokio::spawn(recording);
    [watch, Part { name: "skill hashes", stage: Stage::Service, stop, task }]
}

/// The coding CLIs `/agent` offers: the image's, or none while the sandbox is not running
/// (`off`: why).
fn clis_of(
    config: &Config,
    sandbox: Option<&Sandbox>,
    off: Option<&str>,
    caps: Option<&nexbot_protocol::Capabilities>,
) -> Clis {
    match sandbox {
        None => Clis::none(format!(
            "the sandbox is not running ({})",
            off.unwrap_or("no subagent pool")
        )),
        Some(_) => {
            let runs_cli =
                caps.map(|c| c.tools.iter().any(|t| t == crate::tools::delegate::CLI_TOOL));
            Clis::of_image(&config.subagent.image, runs_cli)
        }
    }
}

/// `/status`'s MCP line of a chat (its servers, or why there are none), and the degraded part
/// `mcp` (the servers that do not start, with why).
fn add_mcp_line(status: &StatusBoard, sandbox: Option<&Sandbox>, agent: &Arc<Agent>) {
    match sandbox {
        Some(sandbox) => {
            let mcp = sandbox.mcp().clone();
            status.add_problem("mcp", move || mcp.problem());
            let (mcp, agent) = (sandbox.mcp().clone(), agent.clone());
            status.add_for_chat(MCP_LINE, move |chat| {
                let servers = mcp.for_chat(chat, agent.is_owner_chat(chat));
                Some(crate::mcp::health::status_line(&servers))
            });
        }
        None => status.add_for_chat(MCP_LINE, |_| {
            Some("off (they run in the sandbox, which is not running)".to_owned())
        }),
    }
}
