//! The main agent: its loop (one user message in, one answer out, with tool calls in between),
//! its hooks, the turns it admits, the tool trait and registry, model access and spending.
//!
//! Why a crate of its own: the agent decides and the host carries out. This crate links no
//! channel (Telegram), no Docker, no egress and no HTTP server, so the compiler — not a text
//! scan — keeps the loop from reaching a chat other than through [`channel::Channel`], or a
//! container other than through a tool the host gives it.
//!
//! - [`config`]: its sections of `config.toml`. [`llm`]: the model as the agent uses it, with
//!   retries, fallback and [`spend`]'s caps. [`exits`]: every text that leaves, scanned for
//!   secret values. [`workspace`]: bootstrap files and the system prompt. [`skills`]: the live
//!   skills the prompt offers. [`tools`]: the tool trait and registry. [`turns`]: one turn per
//!   chat, a global limit, and the registry `/stop` and `/status` read.
//!
//! Why it is shaped like this: a turn must always end with something the user can read —
//! an answer, or a clear sentence saying why there is none (LLM down, limit reached, stopped,
//! timed out) — and must never take the daemon down. Tool failures, unknown tools and tool
//! calls with invalid JSON are returned to the model in the normalized error form so it can
//! correct itself. The turn's [`CancellationToken`] is handed (as child tokens) to every tool,
//! so stopping a turn reaches the subagent tasks it started.

/// The chat operations the agent needs ([`nexbot_core::channel`]).
pub use nexbot_core::channel;
pub mod config;
pub mod confirm;
pub mod exits;
pub mod hooks;
pub mod llm;
pub mod memory;
pub mod skills;
pub mod spend;
pub mod tools;
pub mod turns;
pub mod workspace;

use nexbot_core::BoxFuture;
use nexbot_store as store;

/// Runs a chat's coding CLI in the sandbox when the chat's agent mode is off (`/agent cli
/// <name>`): the host's delegation implements it, so the loop needs no container type.
pub trait CodingCli: Send + Sync + std::fmt::Debug {
    /// The user's `text` as a task for `cli`; the text to answer with, whatever happened.
    fn run_cli<'a>(
        &'a self,
        cli: &'a str,
        text: &'a str,
        ctx: &'a tools::ToolContext,
    ) -> BoxFuture<'a, String>;
}

use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio_util::sync::CancellationToken;

use self::hooks::{run_hooks, Hook, HookContext, HookEvent, HookResult};
use nexbot_core::ChatRef;

use self::channel::Channel;
use crate::config::AgentConfig;
use crate::llm::{ChatMessage, ErrorClass, Model, StreamEvent, ToolCall, Usage};
use crate::store::Store;
use crate::tools::{tool_message, ToolContext, ToolError, ToolRegistry, ToolResult};
use crate::workspace::assemble_context;

/// Tool output longer than this is cut before it goes back to the model.
pub const MAX_TOOL_RESULT_CHARS: usize = 100_000;
/// After a turn's time is up and it has been cancelled, how long it may take to wind down
/// (answering the subagent's `cancel`, recording the task).
const WIND_DOWN: Duration = Duration::from_secs(20);

/// How a turn ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TurnStatus {
    /// The model (or a hook's `Finish`) gave the answer; it is kept in the history.
    Answered,
    /// A hook blocked the turn.
    Blocked,
    LlmFailed,
    /// Its producer cancelled it (the daemon stopping, a turn's budget).
    Cancelled,
    /// The chat stopped it (`/stop`), whoever started it.
    Stopped,
    MaxIterations,
    /// The turn used more tokens than its budget (a scheduled job's run) and was stopped.
    OverBudget,
    TimedOut,
    /// The daemon could not load the turn's state (e.g. the database).
    Failed,
}

/// The answer to show and what the turn cost.
#[derive(Debug, Clone)]
pub struct TurnOutcome {
    pub answer: String,
    pub status: TurnStatus,
    pub usage: Usage,
    pub iterations: u32,
    /// Tool calls the turn made, and how many of them failed (the scheduler reports a run
    /// whose every tool call failed as failed).
    pub tool_calls: u32,
    pub tool_failures: u32,
    /// Tokens of the tasks the turn delegated (not in `usage`, which is the model's).
    pub task_tokens: u64,
}

/// Counters a running turn updates, readable after it was cut short.
#[derive(Debug, Default)]
struct TurnMeter {
    prompt_tokens: AtomicU64,
    completion_tokens: AtomicU64,
    iterations: AtomicU32,
    /// Milliseconds the turn has spent waiting for the model.
    model_wait_ms: AtomicU64,
    tool_calls: AtomicU32,
    tool_failures: AtomicU32,
    /// Tokens of the turn's delegated tasks (the delegating tool adds them).
    task_tokens: Arc<AtomicU64>,
    /// The skills read in the turn (`read_skill` adds them, delegation grants from them).
    skills_read: skills::SkillsRead,
}

impl TurnMeter {
    fn add(&self, usage: Usage) {
        self.prompt_tokens.fetch_add(usage.prompt_tokens, Ordering::Relaxed);
        self.completion_tokens.fetch_add(usage.completion_tokens, Ordering::Relaxed);
    }
    /// The model's tokens and the delegated tasks', together.
    fn spent(&self) -> u64 {
        let usage = self.usage();
        usage.prompt_tokens + usage.completion_tokens + self.task_tokens.load(Ordering::Relaxed)
    }
    fn usage(&self) -> Usage {
        Usage {
            prompt_tokens: self.prompt_tokens.load(Ordering::Relaxed),
            completion_tokens: self.completion_tokens.load(Ordering::Relaxed),
        }
    }
}

/// Where the turn's loop ended, before the after-agent hooks.
struct Ending {
    answer: String,
    status: TurnStatus,
}

impl Ending {
    fn new(status: TurnStatus, answer: impl Into<String>) -> Self {
        Self { answer: answer.into(), status }
    }
}

/// What running one tool call produced.
enum ToolStep {
    /// The tool message for the model, whether the tool failed, and its pictures.
    Result {
        message: String,
        failed: bool,
        images: Vec<crate::llm::Image>,
    },
    Finish(String),
}

impl ToolStep {
    /// A call refused before (or instead of) running the tool.
    fn failed(error: String) -> Self {
        let message = tool_message(&Err(ToolError::new(error)));
        Self::Result { message, failed: true, images: Vec::new() }
    }
}

/// Everything a turn needs that does not change between turns.
#[derive(Debug)]
pub struct Agent {
    model: Model,
    /// Chats told that a fallback provider answers them (told once per episode).
    told_fallback: std::sync::Mutex<std::collections::HashSet<ChatRef>>,
    /// Admission of every turn, whoever starts it (the bus, the scheduler, the heartbeat):
    /// one turn at a time per chat, the daemon's limit, and what `/stop` and `/status` see.
    turns: Arc<turns::Turns>,
    tools: ToolRegistry,
    hooks: Vec<Arc<dyn Hook>>,
    store: Store,
    workspace: PathBuf,
    /// The bootstrap files as last read (read again when they change).
    bootstrap: Arc<crate::workspace::BootstrapFiles>,
    config: AgentConfig,
    /// The owner's Telegram user id ([`Agent::with_owner`]).
    owner: Option<i64>,
    /// The live skills listed in the system prompt ([`Agent::with_skills`]).
    skills: Option<crate::skills::Skills>,
    /// Runs a chat's coding CLI when its agent mode is off ([`Agent::with_cli`]); none
    /// without the sandbox.
    cli: Option<Arc<dyn CodingCli>>,
    /// Asks before the risky steps `agent.confirm` lists ([`Agent::with_confirm`]); without
    /// it nothing asks.
    confirm: Arc<dyn crate::confirm::Confirm>,
    /// The chats' memories, and how many entries of a chat's are recalled into each turn's
    /// prompt ([`Agent::with_recall`]); none: nothing is recalled.
    recall: Option<(memory::Memories, usize)>,
}

impl Turn<'_> {
    /// The ending of a turn that has used more than its budget, if it has.
    fn over_budget(&self) -> Option<Ending> {
        let budget = self.budget?;
        let spent = self.meter.spent();
        (spent > budget).then(|| {
            Ending::new(
                TurnStatus::OverBudget,
                format!(
                    "I stopped: this run used {spent} tokens, more than its budget of {budget}."
                ),
            )
        })
    }

    /// What a tool call of this turn gets: the chat, a child of the turn's cancellation.
    fn tool_context(&self) -> ToolContext {
        ToolContext {
            chat: self.chat.clone(),
            session_id: self.session_id,
            cancel: self.cancel.child_token(),
            channel: self.channel.clone(),
            owner: self.owner,
            turn: self.origin.clone(),
            task_tokens: self.meter.task_tokens.clone(),
            skills_read: self.meter.skills_read.clone(),
            confirm: self.confirm.clone(),
            reads: self.reads.clone(),
        }
    }
}

/// The turn being run: who asked, and the per-turn handles.
struct Turn<'a> {
    chat: &'a ChatRef,
    /// The tools of this turn: the agent's and what its sources offer this chat.
    tools: &'a ToolRegistry,
    session_id: i64,
    cancel: &'a CancellationToken,
    channel: &'a Arc<dyn Channel>,
    meter: &'a TurnMeter,
    origin: &'a turns::TurnOrigin,
    /// Tokens the turn may use, its delegated tasks' included (a scheduled job's budget).
    budget: Option<u64>,
    /// The owner's chat: USER.md and MEMORY.md are in its prompt and its tools' reach.
    owner: bool,
    /// The chat's agent mode (`/agent`): off, the model answers without tools.
    tools_on: bool,
    /// Asks the chat's user before a risky step (`agent.confirm`).
    confirm: &'a Arc<dyn crate::confirm::Confirm>,
    /// What outside the chat's own words the turn has read.
    reads: crate::tools::TurnReads,
}

impl Agent {
    pub fn new(
        model: Model,
        tools: ToolRegistry,
        hooks: Vec<Arc<dyn Hook>>,
        store: Store,
        workspace: PathBuf,
        config: AgentConfig,
    ) -> Self {
        Self {
            model,
            told_fallback: Default::default(),
            turns: Arc::new(turns::Turns::new(turns::DEFAULT_MAX_PARALLEL_TURNS)),
            tools,
            hooks,
            store,
            workspace,
            bootstrap: Arc::default(),
            config,
            owner: None,
            skills: None,
            cli: None,
            confirm: Arc::new(crate::confirm::NoConfirm),
            recall: None,
        }
    }

    /// Recalls up to `entries` of the chat's memory that best match each message into its
    /// turn's prompt, each marked with its source (`memory.recall`).
    pub fn with_recall(mut self, memories: memory::Memories, entries: usize) -> Self {
        self.recall = (entries > 0).then_some((memories, entries));
        self
    }

    /// At most `max_parallel` turns run at once across all chats (`bus.max_parallel_turns`).
    pub fn with_parallel_turns(mut self, max_parallel: usize) -> Self {
        self.turns = Arc::new(turns::Turns::new(max_parallel));
        self
    }

    /// The running turns: `/stop` and `/status` read them.
    pub fn turns(&self) -> &Arc<turns::Turns> {
        &self.turns
    }

    /// Lets a chat whose agent mode is off and which chose a coding CLI (`/agent cli`) be
    /// answered by that CLI through `delegation` (a direct `use_cli` task).
    pub fn with_cli(mut self, cli: Arc<dyn CodingCli>) -> Self {
        self.cli = Some(cli);
        self
    }

    /// Lets the tools ask the chat's user before a risky step (the host's questions).
    pub fn with_confirm(mut self, confirm: Arc<dyn crate::confirm::Confirm>) -> Self {
        self.confirm = confirm;
        self
    }

    /// Lists the offered skills in every turn's system prompt (the set as it is when the turn
    /// starts).
    pub fn with_skills(mut self, skills: crate::skills::Skills) -> Self {
        self.skills = Some(skills);
        self
    }

    pub fn skills(&self) -> Option<&crate::skills::Skills> {
        self.skills.as_ref()
    }

    pub fn tools(&self) -> &ToolRegistry {
        &self.tools
    }

    /// The main agent's model (its providers, counters and spending, for the metrics).
    pub fn model(&self) -> &Model {
        &self.model
    }

    /// Makes the Telegram user `owner` the owner: their private chat (whose id is their user
    /// id) gets USER.md and MEMORY.md. Console chats are the operator's, so always the owner's.
    pub fn with_owner(mut self, owner: Option<i64>) -> Self {
        self.owner = owner;
        self
    }

    /// Whether `chat` is the owner's.
    pub fn is_owner_chat(&self, chat: &ChatRef) -> bool {
        match chat {
            ChatRef::Console(_) => true,
            ChatRef::Telegram(id) => self.owner == Some(*id),
        }
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Runs one turn for `chat`. Never fails: every problem becomes the answer's text. The
    /// answer is returned, not sent; `channel` is where tools reach the chat meanwhile.
    ///
    /// The turn first waits for admission ([`turns::Turns::admit`]): the chat's one turn slot,
    /// then one of the daemon's permits; `origin` is what `/status` shows meanwhile.
    pub async fn run_turn(
        &self,
        chat: &ChatRef,
        text: &str,
        origin: turns::TurnOrigin,
        cancel: CancellationToken,
        channel: Arc<dyn Channel>,
    ) -> TurnOutcome {
        self.run_turn_within(chat, text, Vec::new(), origin, cancel, channel, None).await
    }

    /// [`Self::run_turn`] with `images` shown with the user's message (a photo) to a model
    /// that sees images; the history keeps only `text`.
    pub async fn run_turn_with_images(
        &self,
        chat: &ChatRef,
        text: &str,
        images: Vec<crate::llm::Image>,
        origin: turns::TurnOrigin,
        cancel: CancellationToken,
        channel: Arc<dyn Channel>,
    ) -> TurnOutcome {
        self.run_turn_within(chat, text, images, origin, cancel, channel, None).await
    }

    /// [`Self::run_turn`] stopped once it has used more than `budget` tokens (the model's
    /// and its delegated tasks'), checked before every model call and before a reply's tool
    /// calls run.
    #[allow(clippy::too_many_arguments)]
    pub async fn run_turn_within(
        &self,
        chat: &ChatRef,
        text: &str,
        images: Vec<crate::llm::Image>,
        origin: turns::TurnOrigin,
        cancel: CancellationToken,
        channel: Arc<dyn Channel>,
        budget: Option<u64>,
    ) -> TurnOutcome {
        let Some(admitted) = self.turns.admit(chat, origin.clone(), &cancel).await else {
            return TurnOutcome {
                answer: "Stopped.".into(),
                status: TurnStatus::Cancelled,
                usage: Usage::default(),
                iterations: 0,
                tool_calls: 0,
                tool_failures: 0,
                task_tokens: 0,
            };
        };
        let cancel = admitted.cancel().clone();
        let meter = TurnMeter::default();
        let session_id = match self.store.active_session(chat).await {
            Ok(id) => id,
            Err(e) => {
                tracing::error!(%chat, error = %e, "cannot load the session");
                return TurnOutcome {
                    answer: format!("Sorry, I cannot reach my memory right now: {e}"),
                    status: TurnStatus::Failed,
                    usage: Usage::default(),
                    iterations: 0,
                    tool_calls: 0,
                    tool_failures: 0,
                    task_tokens: 0,
                };
            }
        };
        let owner = self.is_owner_chat(chat);
        let tools_on = self.store.agent_mode_on(chat).await;
        // A source still learning its tools (MCP servers starting with the daemon) is waited
        // for, within its own bound, or until the turn is stopped.
        tokio::select! {
            _ = self.tools.sources_ready() => {}
            _ = cancel.cancelled() => {}
        }
        let tools = self.tools.for_chat(chat, owner);
        let turn = Turn {
            chat,
            tools: &tools,
            session_id,
            cancel: &cancel,
            channel: &channel,
            meter: &meter,
            origin: &origin,
            budget,
            owner,
            tools_on,
            confirm: &self.confirm,
            reads: crate::tools::TurnReads::default(),
        };
        let budget = Duration::from_secs(self.config.turn_timeout_secs);
        let inner = self.run_loop(&turn, text, images);
        tokio::pin!(inner);
        let ending = tokio::select! {
            ending = &mut inner => ending,
            () = tokio::time::sleep(budget) => {
                cancel.cancel();
                // Let tools answer the cancellation (subagents get `cancel`, records are kept).
                let _ = tokio::time::timeout(WIND_DOWN, &mut inner).await;
                let context = self.hook_context(&turn);
                let mut answer = format!(
                    "This took longer than {}s, so I stopped. Ask again with a smaller request.",
                    budget.as_secs()
                );
                match run_hooks(&self.hooks, &HookEvent::Timeout { tool: None }, &context) {
                    HookResult::Finish(text) => answer = text,
                    HookResult::InjectContext(text) => answer = format!("{answer}\n{text}"),
                    HookResult::Continue | HookResult::Block { .. } => {}
                }
                Ending::new(TurnStatus::TimedOut, answer)
            }
        };
        let Ending { mut answer, mut status } = ending;
        if status == TurnStatus::Cancelled && admitted.stopped_by_chat() {
            status = TurnStatus::Stopped;
        }
        if !matches!(status, TurnStatus::Cancelled | TurnStatus::Stopped) {
            let context = self.hook_context(&turn);
            match run_hooks(&self.hooks, &HookEvent::AfterAgent { answer: &answer }, &context) {
                HookResult::Block { reason } => answer = reason,
                HookResult::Finish(text) => answer = text,
                HookResult::InjectContext(text) => answer = format!("{answer}\n{text}"),
                HookResult::Continue => {}
            }
        }
        let usage = meter.usage();
        if status == TurnStatus::Answered {
            // An answer too large for the window is kept cut: it is in every later prompt.
            let kept =
                nexbot_llm::context::cut_text(&answer, self.model.history_room_bytes(), "answer");
            if let Err(e) = self.store.append_turn(session_id, text, &kept, usage).await {
                tracing::error!(%chat, error = %e, "cannot save the turn to the history");
            }
        }
        tracing::info!(
            %chat,
            ?status,
            iterations = meter.iterations.load(Ordering::Relaxed),
            prompt_tokens = usage.prompt_tokens,
            completion_tokens = usage.completion_tokens,
            "turn ended"
        );
        TurnOutcome {
            answer,
            status,
            usage,
            iterations: meter.iterations.load(Ordering::Relaxed),
            tool_calls: meter.tool_calls.load(Ordering::Relaxed),
            tool_failures: meter.tool_failures.load(Ordering::Relaxed),
            task_tokens: meter.task_tokens.load(Ordering::Relaxed),
        }
    }

    fn hook_context<'a>(&self, turn: &Turn<'a>) -> HookContext<'a> {
        let usage = turn.meter.usage();
        HookContext {
            chat: turn.chat,
            tokens: usage.prompt_tokens + usage.completion_tokens,
            iteration: turn.meter.iterations.load(Ordering::Relaxed),
        }
    }

    async fn build_messages(
        &self,
        turn: &Turn<'_>,
        text: &str,
        images: Vec<crate::llm::Image>,
    ) -> Result<Vec<ChatMessage>, String> {
        let dir = self.workspace.clone();
        let cap = self.config.context_max_chars;
        let personal = turn.owner;
        let files = self.bootstrap.clone();
        let assemble = move || assemble_context(&files, &dir, cap, personal);
        let mut system = tokio::task::spawn_blocking(assemble)
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| format!("cannot read the workspace: {e}"))?;
        if let Some(section) = self.skills.as_ref().and_then(|s| s.current().prompt_section()) {
            system.push_str("\n\n");
            system.push_str(&section);
        }
        let history = self
            .store
            .history(turn.session_id, self.config.history_max_messages)
            .await
            .map_err(|e| e.to_string())?;
        let mut messages = vec![ChatMessage::system(system)];
        messages.extend(history.into_iter().map(|h| ChatMessage::text(&h.role, h.content)));
        let recalled = self.recalled(turn, text).await;
        if !recalled.is_empty() {
            // Beside the message, not in the system prompt: the prompt's cached prefix stays.
            messages.push(ChatMessage::system(recalled));
        }
        messages.push(ChatMessage { images, ..ChatMessage::user(text) });
        Ok(messages)
    }

    /// The prompt's section of the chat's entries that match `text` ([`Self::with_recall`]).
    /// An outside entry recalled counts as read by the turn: what the turn remembers after
    /// it is from outside too. A memory that cannot be read is logged, and the turn goes on.
    async fn recalled(&self, turn: &Turn<'_>, text: &str) -> String {
        let Some((memories, k)) = &self.recall else {
            return String::new();
        };
        let entries = match memories.recall(turn.chat, text, *k, true).await {
            Ok(entries) => entries,
            Err(e) => {
                tracing::warn!(chat = %turn.chat, error = %e, "cannot recall the chat's memory");
                return String::new();
            }
        };
        for entry in &entries {
            if let nexbot_core::memory::MemorySource::Outside { origins } = &entry.source {
                origins.iter().cloned().for_each(|o| turn.reads.note(o));
            }
        }
        nexbot_core::memory::prompt_section(&entries)
    }

    async fn run_loop(
        &self,
        turn: &Turn<'_>,
        text: &str,
        images: Vec<crate::llm::Image>,
    ) -> Ending {
        let mut messages = match self.build_messages(turn, text, images).await {
            Ok(messages) => messages,
            Err(e) => {
                tracing::error!(chat = %turn.chat, error = %e, "cannot build the prompt");
                return Ending::new(
                    TurnStatus::Failed,
                    format!("Sorry, something is wrong on my side: {e}"),
                );
            }
        };
        let event = HookEvent::BeforeAgent { user_message: text };
        match run_hooks(&self.hooks, &event, &self.hook_context(turn)) {
            HookResult::Block { reason } => return Ending::new(TurnStatus::Blocked, reason),
            HookResult::Finish(text) => return Ending::new(TurnStatus::Answered, text),
            HookResult::InjectContext(text) => messages.push(ChatMessage::system(text)),
            HookResult::Continue => {}
        }
        // Agent mode off: the chat's coding CLI when it chose one, else the model alone.
        if !turn.tools_on {
            if let Some(cli) = self.store.agent_cli(turn.chat).await {
                return self.run_cli(turn, &cli, text).await;
            }
        }
        let specs = if turn.tools_on { turn.tools.specs() } else { Vec::new() };
        for iteration in 1..=self.config.max_iterations {
            turn.meter.iterations.store(iteration, Ordering::Relaxed);
            let event = HookEvent::BeforeIteration { iteration };
            match run_hooks(&self.hooks, &event, &self.hook_context(turn)) {
                HookResult::Block { reason } => return Ending::new(TurnStatus::Blocked, reason),
                HookResult::Finish(text) => return Ending::new(TurnStatus::Answered, text),
                HookResult::InjectContext(text) => messages.push(ChatMessage::system(text)),
                HookResult::Continue => {}
            }
            // Delegated tasks may have spent the rest of the budget since the last call.
            if let Some(ending) = turn.over_budget() {
                return ending;
            }
            let completion = match self.call_model(turn, &mut messages, &specs).await {
                Ok(completion) => completion,
                Err(e) if e.class == ErrorClass::Cancelled => {
                    return Ending::new(TurnStatus::Cancelled, "Stopped.")
                }
                Err(e) => {
                    tracing::warn!(chat = %turn.chat, error = %e, "LLM call failed");
                    return Ending::new(TurnStatus::LlmFailed, e.user_message());
                }
            };
            turn.meter.add(completion.usage.unwrap_or_default());
            let notice = self.fallback_notice(turn.chat, &completion);
            let message = completion.message;
            let calls = message.tool_calls.clone();
            if calls.is_empty() {
                let answer = message.content.unwrap_or_default();
                let answer = if answer.trim().is_empty() {
                    "(The model returned an empty answer.)".to_owned()
                } else {
                    answer
                };
                let answer = match notice {
                    Some(notice) => format!("{answer}\n\n{notice}"),
                    None => answer,
                };
                return Ending::new(TurnStatus::Answered, answer);
            }
            // The model wants to go on: not past the turn's budget. An answer is kept
            // whatever it cost (the tokens are spent); going on would spend more.
            if let Some(ending) = turn.over_budget() {
                return ending;
            }
            messages.push(ChatMessage {
                role: "assistant".into(),
                content: message.content,
                tool_calls: calls.clone(),
                tool_call_id: None,
                images: Vec::new(),
            });
            // Pictures the answers carried: after every tool message (a provider wants those
            // right after the call), in one user message, which is how images reach a model.
            let mut pictures = Vec::new();
            for call in &calls {
                if turn.cancel.is_cancelled() {
                    return Ending::new(TurnStatus::Cancelled, "Stopped.");
                }
                match self.run_tool(turn, call).await {
                    ToolStep::Result { message, failed, images } => {
                        turn.meter.tool_calls.fetch_add(1, Ordering::Relaxed);
                        if failed {
                            turn.meter.tool_failures.fetch_add(1, Ordering::Relaxed);
                        }
                        messages.push(ChatMessage::tool(&call.id, cut(message)));
                        pictures.extend(images);
                    }
                    ToolStep::Finish(text) => return Ending::new(TurnStatus::Answered, text),
                }
            }
            if !pictures.is_empty() {
                messages.push(ChatMessage::tool_pictures(pictures));
            }
            if turn.cancel.is_cancelled() {
                return Ending::new(TurnStatus::Cancelled, "Stopped.");
            }
        }
        Ending::new(
            TurnStatus::MaxIterations,
            format!(
                "I stopped after {} steps without a final answer. Tell me how to go on, or ask \
                 for a smaller piece.",
                self.config.max_iterations
            ),
        )
    }

    /// The turn's message as a task for the chat's coding CLI, in a sandbox container.
    async fn run_cli(&self, turn: &Turn<'_>, cli: &str, text: &str) -> Ending {
        let Some(delegation) = &self.cli else {
            return Ending::new(
                TurnStatus::Failed,
                format!(
                    "This chat uses the {cli} coding CLI (agent mode off), but the sandbox is \
                     not running here, so nothing ran. Use /agent on, or /agent cli none for \
                     the model alone."
                ),
            );
        };
        tracing::info!(chat = %turn.chat, cli, "agent mode off: the message goes to the coding CLI");
        let ctx = turn.tool_context();
        let answer = delegation.run_cli(cli, text, &ctx).await;
        if turn.cancel.is_cancelled() {
            return Ending::new(TurnStatus::Cancelled, "Stopped.");
        }
        Ending::new(TurnStatus::Answered, answer)
    }

    /// One model call; a streamed answer is shown as a draft in the chat as it grows.
    async fn call_model(
        &self,
        turn: &Turn<'_>,
        messages: &mut Vec<ChatMessage>,
        specs: &[crate::llm::ToolSpec],
    ) -> Result<crate::llm::Completion, crate::llm::LlmError> {
        use self::channel::Draft;
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Draft>();
        let channel = turn.channel.clone();
        let chat = turn.chat.clone();
        // Drafts reach the chat in order and before the answer (the turn awaits this).
        let forward = tokio::spawn(async move {
            while let Some(draft) = rx.recv().await {
                channel.draft(&chat, draft).await;
            }
        });
        let on_event = move |event: StreamEvent<'_>| {
            let _ = tx.send(match event {
                StreamEvent::Text(text) => Draft::Text(text.to_owned()),
                StreamEvent::Restart => Draft::Restart,
            });
        };
        let waited = Duration::from_millis(turn.meter.model_wait_ms.load(Ordering::Relaxed));
        let wait_left = self.model.turn_wait().saturating_sub(waited);
        let started = std::time::Instant::now();
        let result = self
            .model
            .complete(turn.chat, messages, specs, turn.cancel, &on_event, wait_left)
            .await;
        turn.meter.model_wait_ms.fetch_add(started.elapsed().as_millis() as u64, Ordering::Relaxed);
        drop(on_event);
        let _ = forward.await;
        // Tool calls follow: the streamed text (if any) was not the answer.
        if result.as_ref().is_ok_and(|c| !c.message.tool_calls.is_empty()) {
            turn.channel.draft(turn.chat, Draft::Restart).await;
        }
        result
    }

    /// The line that tells `chat` once that a fallback provider answered, until the primary
    /// answers it again.
    fn fallback_notice(
        &self,
        chat: &ChatRef,
        completion: &crate::llm::Completion,
    ) -> Option<String> {
        let mut told = self.told_fallback.lock().unwrap_or_else(|p| p.into_inner());
        if !completion.fallback {
            told.remove(chat);
            return None;
        }
        told.insert(chat.clone()).then(|| {
            format!(
                "(The main model is not answering right now; {} answered instead.)",
                completion.provider
            )
        })
    }

    async fn run_tool(&self, turn: &Turn<'_>, call: &ToolCall) -> ToolStep {
        let name = call.function.name.as_str();
        let raw = call.function.arguments.trim();
        let args: Value = match serde_json::from_str(if raw.is_empty() { "{}" } else { raw }) {
            Ok(value @ Value::Object(_)) => value,
            Ok(_) => {
                return ToolStep::failed(format!("arguments for {name} must be a JSON object"))
            }
            Err(e) => return ToolStep::failed(format!("invalid JSON arguments for {name}: {e}")),
        };
        let Some(tool) = turn.tools.get(name) else {
            return ToolStep::failed(format!(
                "unknown tool {name}; available: {}",
                turn.tools.names().join(", ")
            ));
        };
        let mut note = None;
        let event = HookEvent::BeforeTool { tool: name, arguments: &args };
        match run_hooks(&self.hooks, &event, &self.hook_context(turn)) {
            HookResult::Block { reason } => return ToolStep::failed(format!("blocked: {reason}")),
            HookResult::Finish(text) => return ToolStep::Finish(text),
            HookResult::InjectContext(text) => note = Some(text),
            HookResult::Continue => {}
        }
        tracing::info!(chat = %turn.chat, tool = name, "tool call");
        let limit = tool.timeout().unwrap_or(Duration::from_secs(self.config.tool_timeout_secs));
        let ctx = turn.tool_context();
        let (mut result, timeout_note) = match tokio::time::timeout(limit, tool.call(args, &ctx))
            .await
        {
            Ok(result) => {
                note_reads(&turn.reads, tool.as_ref(), &result);
                (result, None)
            }
            Err(_) => {
                ctx.cancel.cancel();
                tracing::warn!(chat = %turn.chat, tool = name, "tool timed out");
                let error = ToolError::new(format!("{name} timed out after {}s", limit.as_secs()));
                let event = HookEvent::Timeout { tool: Some(name) };
                match run_hooks(&self.hooks, &event, &self.hook_context(turn)) {
                    HookResult::Finish(text) => return ToolStep::Finish(text),
                    HookResult::InjectContext(text) => (Err(error), Some(text)),
                    HookResult::Continue | HookResult::Block { .. } => (Err(error), None),
                }
            }
        };
        // The one place a tool's answer becomes JSON.
        let mut message = tool_message(&result);
        if let Some(text) = timeout_note {
            message = format!("{message}\n\n[note] {text}");
        }
        let event = HookEvent::AfterTool { tool: name, result: &message };
        match run_hooks(&self.hooks, &event, &self.hook_context(turn)) {
            HookResult::Block { reason } => {
                result = Err(ToolError::new(format!("blocked: {reason}")));
                message = tool_message(&result);
            }
            HookResult::Finish(text) => return ToolStep::Finish(text),
            HookResult::InjectContext(text) => message = format!("{message}\n\n[note] {text}"),
            HookResult::Continue => {}
        }
        if let Some(text) = note {
            message = format!("{message}\n\n[note] {text}");
        }
        let images = result.as_ref().map(|out| out.images().to_vec()).unwrap_or_default();
        ToolStep::Result { message, failed: result.is_err(), images }
    }
}

/// Notes in `reads` what outside the chat a tool's answer carried: the origins it named, or
/// the tool itself when it [`reads_outside`](crate::tools::Tool::reads_outside) and named none
/// (a failure's words may be outside words too).
fn note_reads(reads: &crate::tools::TurnReads, tool: &dyn crate::tools::Tool, result: &ToolResult) {
    let named = result.as_ref().map(|out| out.origins()).unwrap_or_default();
    for origin in named {
        reads.note(origin.clone());
    }
    if named.is_empty() && tool.reads_outside() {
        reads.note(nexbot_core::memory::OutsideRead::tool(tool.name()));
    }
}

fn cut(text: String) -> String {
    if text.chars().count() <= MAX_TOOL_RESULT_CHARS {
        return text;
    }
    let mut cut: String = text.chars().take(MAX_TOOL_RESULT_CHARS).collect();
    cut.push_str("\n[TRUNCATED]");
    cut
}
