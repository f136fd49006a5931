//! Chat commands (`/help`, `/stop`, `/new`, and what later parts add): one registry that the
//! bus consults for every inbound message, whatever channel it came from.
//!
//! Why one registry: a command must mean the same on Telegram and in the terminal, `/help`
//! must list exactly what exists, and a channel that shows a command menu (Telegram's
//! `setMyCommands`) reads it from here. Commands run outside the chat's turn queue, so `/stop`
//! reaches a running turn at once.
//!
//! What counts as a command: a message whose first word is `/` followed by 1–32 letters,
//! digits or `_` (Telegram's rule), optionally `@botname`. Anything else starting with `/`
//! (a path such as `/etc/hosts is …`) is an ordinary message for the agent.

mod secret;

use std::fmt;
use std::sync::Arc;

use nexbot_core::ChatRef;

use crate::agent::channel::Button;
use crate::agent::channel::Channel;
use crate::agent::turns::Turns;
use crate::spend::Spend;
use crate::status::StatusBoard;
use crate::store::{Store, AGENT_CLIS, AGENT_CLI_SETTING, AGENT_MODE_SETTING};
use crate::vault::Vault;
use crate::BoxFuture;

/// What a command may act on besides its own state.
pub struct CommandContext<'a> {
    pub chat: &'a ChatRef,
    /// The text after the command word, trimmed.
    pub args: &'a str,
    /// The message's id as its channel gave it ([`InboundMessage::id`]), to delete it.
    ///
    /// [`InboundMessage::id`]: crate::bus::InboundMessage
    pub message: u64,
    /// The chats' channels (to delete the command's message, say).
    pub channel: &'a dyn Channel,
    /// The running turns, whoever started them (to stop one, to show it).
    pub turns: &'a Turns,
    /// Every registered command (for `/help`).
    pub commands: &'a CommandRegistry,
    /// Who sent the command (pressed its button), where the channel tells users apart.
    pub user: Option<i64>,
}

impl fmt::Debug for CommandContext<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CommandContext").field("chat", self.chat).field("args", &self.args).finish()
    }
}

/// Whether `user` in `chat` is the owner (`owner`, `telegram.owner`) in their own place: the
/// owner's private Telegram chat, pressed or written by the owner, or a console. For the
/// owner's commands (`/audit`, `/selftest`).
pub fn owner_in_private(owner: Option<i64>, chat: &ChatRef, user: Option<i64>) -> bool {
    match chat {
        ChatRef::Telegram(id) => owner.is_some() && Some(*id) == owner && user == owner,
        ChatRef::Console(_) => true,
    }
}

/// What a command shows: its text, and buttons under it (a menu) when it has any.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CommandReply {
    pub text: String,
    /// Rows of buttons; each presses a command of the same chat.
    pub buttons: Vec<Vec<Button>>,
}

impl CommandReply {
    pub fn text(text: String) -> Self {
        Self { text, buttons: Vec::new() }
    }
}

/// One command. Its answer is the text shown in the chat.
pub trait ChatCommand: Send + Sync + fmt::Debug {
    /// The word after `/`, lower case.
    fn name(&self) -> &'static str;
    /// One line for `/help` and command menus.
    fn summary(&self) -> &'static str;
    fn run<'a>(&'a self, ctx: CommandContext<'a>) -> BoxFuture<'a, String>;
    /// The answer with its buttons; a command without a menu answers [`Self::run`]'s text.
    fn reply<'a>(&'a self, ctx: CommandContext<'a>) -> BoxFuture<'a, CommandReply> {
        Box::pin(async move { CommandReply::text(self.run(ctx).await) })
    }
}

/// A message's command, if it is one.
#[derive(Debug)]
pub enum Parsed<'t> {
    Known {
        command: Arc<dyn ChatCommand>,
        args: &'t str,
    },
    /// Command syntax, but no such command.
    Unknown {
        name: &'t str,
    },
}

/// The commands every channel shares.
#[derive(Debug, Clone, Default)]
pub struct CommandRegistry {
    commands: Vec<Arc<dyn ChatCommand>>,
}

impl CommandRegistry {
    /// `/start`, `/help`, `/new`, `/stop`, `/status`, `/agent` and `/secret`.
    pub fn builtin(
        store: Store,
        model: String,
        spend: Arc<Spend>,
        board: StatusBoard,
        vault: Arc<Vault>,
        clis: Clis,
    ) -> Self {
        let mut registry = Self::default();
        registry.add(Arc::new(Start));
        registry.add(Arc::new(Help));
        registry.add(Arc::new(NewSession { store: store.clone() }));
        registry.add(Arc::new(Stop));
        let status = Status { store: store.clone(), model, spend, board, vault: vault.clone() };
        registry.add(Arc::new(status));
        registry.add(Arc::new(AgentModeCommand { store, clis }));
        registry.add(Arc::new(secret::SecretCommand::new(vault)));
        registry
    }

    /// Adds `command`, replacing one of the same name.
    pub fn add(&mut self, command: Arc<dyn ChatCommand>) {
        self.commands.retain(|c| c.name() != command.name());
        self.commands.push(command);
    }

    /// Name and summary of every command, in registration order.
    pub fn list(&self) -> Vec<(&'static str, &'static str)> {
        self.commands.iter().map(|c| (c.name(), c.summary())).collect()
    }

    /// One `/name — summary` line per command, as `/help` and `/start` show them.
    pub fn lines(&self) -> Vec<String> {
        self.list().iter().map(|(name, summary)| format!("/{name} — {summary}")).collect()
    }

    /// The command `text` invokes, if it has command syntax.
    pub fn parse<'t>(&self, text: &'t str) -> Option<Parsed<'t>> {
        let text = text.trim();
        let rest = text.strip_prefix('/')?;
        let word_end = rest.find(char::is_whitespace).unwrap_or(rest.len());
        let (word, args) = rest.split_at(word_end);
        let name = word.split_once('@').map_or(word, |(name, _bot)| name);
        let valid = (1..=32).contains(&name.len())
            && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        if !valid {
            return None;
        }
        let found = self.commands.iter().find(|c| c.name().eq_ignore_ascii_case(name));
        Some(match found {
            Some(command) => Parsed::Known { command: command.clone(), args: args.trim() },
            None => Parsed::Unknown { name },
        })
    }

    /// The answer to a command of unknown name.
    pub fn unknown(&self, name: &str) -> String {
        let names: Vec<String> = self.list().iter().map(|(n, _)| format!("/{n}")).collect();
        format!("Unknown command /{name}. Commands: {}.", names.join(", "))
    }
}

#[derive(Debug)]
struct Start;

impl ChatCommand for Start {
    fn name(&self) -> &'static str {
        "start"
    }
    fn summary(&self) -> &'static str {
        "say hello and show what I can do"
    }
    fn run<'a>(&'a self, ctx: CommandContext<'a>) -> BoxFuture<'a, String> {
        let commands = ctx.commands.lines();
        Box::pin(async move {
            format!(
                "Hi! I am Nexbot, your personal agent. Write to me as to a person: I can \
                 answer, remember, and run commands or read the web in an isolated sandbox.\n\n{}",
                commands.join("\n")
            )
        })
    }
}

#[derive(Debug)]
struct Help;

impl ChatCommand for Help {
    fn name(&self) -> &'static str {
        "help"
    }
    fn summary(&self) -> &'static str {
        "list the commands"
    }
    fn run<'a>(&'a self, ctx: CommandContext<'a>) -> BoxFuture<'a, String> {
        let lines = ctx.commands.lines();
        Box::pin(async move { lines.join("\n") })
    }
}

#[derive(Debug)]
struct Stop;

impl ChatCommand for Stop {
    fn name(&self) -> &'static str {
        "stop"
    }
    fn summary(&self) -> &'static str {
        "stop the current task"
    }
    fn run<'a>(&'a self, ctx: CommandContext<'a>) -> BoxFuture<'a, String> {
        let stopped = ctx.turns.stop(ctx.chat);
        Box::pin(async move {
            if stopped { "Stopping the current task." } else { "Nothing to stop." }.to_owned()
        })
    }
}

#[derive(Debug)]
struct NewSession {
    store: Store,
}

impl ChatCommand for NewSession {
    fn name(&self) -> &'static str {
        "new"
    }
    fn summary(&self) -> &'static str {
        "start a new conversation (the history starts empty)"
    }
    fn run<'a>(&'a self, ctx: CommandContext<'a>) -> BoxFuture<'a, String> {
        Box::pin(async move {
            match self.store.new_session(ctx.chat).await {
                Ok(_) => "Started a new conversation.".to_owned(),
                Err(e) => format!("Could not start a new conversation: {e}"),
            }
        })
    }
}

#[derive(Debug)]
struct Status {
    store: Store,
    model: String,
    spend: Arc<Spend>,
    board: StatusBoard,
    /// For this chat's secrets line (the board's counts every scope).
    vault: Arc<Vault>,
}

impl ChatCommand for Status {
    fn name(&self) -> &'static str {
        "status"
    }
    fn summary(&self) -> &'static str {
        "model, sandbox pool, this chat's mode and running task, channel health"
    }
    fn run<'a>(&'a self, ctx: CommandContext<'a>) -> BoxFuture<'a, String> {
        let running = ctx.turns.running(ctx.chat);
        Box::pin(async move {
            let mode = if self.store.agent_mode_on(ctx.chat).await { "on" } else { "off" };
            let cli = self.store.agent_cli(ctx.chat).await.unwrap_or_else(|| "none".into());
            let mut lines = vec![
                format!("Model: {}", self.model),
                format!("Agent mode here: {mode} (CLI when off: {cli})"),
                match running {
                    Some(turn) => {
                        format!("Running: {}, for {}s", turn.origin, turn.running_for.as_secs())
                    }
                    None => "Running: nothing".to_owned(),
                },
                crate::memory::status_line(&self.store, ctx.chat).await,
            ];
            for (name, line) in self.board.lines() {
                let line = match name {
                    SECRETS_LINE => crate::vault::chat_status_line(&self.vault, ctx.chat),
                    _ => line,
                };
                lines.push(format!("{}: {line}", capitalized(name)));
            }
            for (name, line) in self.board.chat_lines(ctx.chat) {
                lines.push(format!("{}: {line}", capitalized(name)));
            }
            for (name, problem) in self.board.problems() {
                lines.push(format!("DEGRADED: {name}: {problem}"));
            }
            lines.push(self.spend.summary(Some(ctx.chat)).await.render());
            lines.join("\n")
        })
    }
}

/// The status board's name of the vault's line, which `/status` shows per chat.
pub const SECRETS_LINE: &str = "secrets";

fn capitalized(name: &str) -> String {
    let mut chars = name.chars();
    chars.next().map(|c| c.to_uppercase().chain(chars).collect()).unwrap_or_default()
}

/// The coding CLIs `/agent` offers: those the subagent image can run.
#[derive(Debug, Clone)]
pub struct Clis {
    offered: Vec<&'static str>,
    /// Why the others cannot run (said when one of them is chosen).
    why_not: String,
}

impl Clis {
    /// Every CLI (an image with the CLI, or one whose tools are not known).
    pub fn all() -> Self {
        Self { offered: AGENT_CLIS.to_vec(), why_not: String::new() }
    }

    /// None, because of `why`.
    pub fn none(why: impl Into<String>) -> Self {
        Self { offered: Vec::new(), why_not: why.into() }
    }

    /// What an image that offers `tools` (its `pong`; `None`: not known) can run.
    pub fn of_image(image: &str, tools: Option<&[String]>) -> Self {
        match tools {
            Some(tools) if !tools.iter().any(|t| t == crate::tools::delegate::CLI_TOOL) => {
                Self::none(format!(
                    "the subagent image {image} has no coding CLI (set subagent.image to the \
                     image `make cli-image` builds)"
                ))
            }
            _ => Self::all(),
        }
    }

    fn names(&self) -> String {
        self.offered.iter().map(|n| format!("{n}|")).collect::<String>() + "none"
    }
}

#[derive(Debug)]
struct AgentModeCommand {
    store: Store,
    clis: Clis,
}

impl AgentModeCommand {
    /// The chat's mode and CLI, as the menu shows them.
    async fn current(&self, chat: &ChatRef) -> (bool, Option<String>) {
        (self.store.agent_mode_on(chat).await, self.store.agent_cli(chat).await)
    }

    /// The menu: on / off, the CLI choice, cancel. The current choices are ticked.
    fn menu(&self, on: bool, cli: Option<&str>) -> Vec<Vec<Button>> {
        let tick = |label: &str, chosen: bool| {
            if chosen {
                format!("✅ {label}")
            } else {
                label.to_owned()
            }
        };
        let mut clis: Vec<Button> = self
            .clis
            .offered
            .iter()
            .map(|name| {
                Button::new(
                    tick(&format!("CLI: {name}"), cli == Some(*name)),
                    format!("/agent cli {name}"),
                )
            })
            .collect();
        clis.push(Button::new(tick("CLI: none", cli.is_none()), "/agent cli none"));
        vec![
            vec![
                Button::new(tick("Agent on", on), "/agent on"),
                Button::new(tick("Agent off", !on), "/agent off"),
            ],
            clis,
            vec![Button::new("Cancel", "/agent cancel")],
        ]
    }

    fn describe(on: bool, cli: Option<&str>) -> String {
        let off = match cli {
            Some(name) => format!("the {name} coding CLI in a sandbox answers"),
            None => "the model answers alone, without tools".to_owned(),
        };
        let mode = if on { "on" } else { "off" };
        format!("Agent mode is {mode} here. On: I answer with my tools and sandbox; off: {off}.")
    }

    async fn answer(&self, chat: &ChatRef, args: &str) -> CommandReply {
        let args = args.to_ascii_lowercase();
        let words: Vec<&str> = args.split_whitespace().collect();
        let change = match words.as_slice() {
            [] => None,
            ["on"] => Some((AGENT_MODE_SETTING, "on")),
            ["off"] => Some((AGENT_MODE_SETTING, "off")),
            ["cli", "none"] => Some((AGENT_CLI_SETTING, "none")),
            ["cli", name] => match self.clis.offered.iter().find(|c| *c == name) {
                Some(name) => Some((AGENT_CLI_SETTING, *name)),
                None if AGENT_CLIS.contains(name) => {
                    return CommandReply::text(format!(
                        "The {name} CLI cannot run here: {}.",
                        self.clis.why_not
                    ))
                }
                None => {
                    return CommandReply::text(format!(
                        "There is no coding CLI named {name:?}; choose {}.",
                        self.clis.names().replace('|', " or ")
                    ))
                }
            },
            ["cancel"] => {
                let (on, cli) = self.current(chat).await;
                let mode = if on { "on" } else { "off" };
                let cli = cli.as_deref().unwrap_or("none");
                return CommandReply::text(format!(
                    "Nothing changed: agent mode {mode}, CLI {cli}."
                ));
            }
            _ => {
                return CommandReply::text(format!(
                    "/agent takes on, off, cli <{}> or cancel, not {args:?}.",
                    self.clis.names()
                ))
            }
        };
        let Some((key, value)) = change else {
            let (on, cli) = self.current(chat).await;
            let text = format!(
                "{} Choose below, or type /agent on, /agent off, /agent cli <{}>.",
                Self::describe(on, cli.as_deref()),
                self.clis.names()
            );
            return CommandReply { text, buttons: self.menu(on, cli.as_deref()) };
        };
        if let Err(e) = self.store.set_setting(chat, key, value).await {
            return CommandReply::text(format!("Could not change the agent mode: {e}"));
        }
        let (on, cli) = self.current(chat).await;
        let text = match (key, value) {
            (AGENT_MODE_SETTING, "on") => {
                "Agent mode on: I answer with my tools and sandbox.".to_owned()
            }
            (AGENT_MODE_SETTING, _) => match cli.as_deref() {
                Some(name) => format!(
                    "Agent mode off: your messages go to the {name} coding CLI in a sandbox."
                ),
                None if self.clis.offered.is_empty() => {
                    "Agent mode off: the model answers alone, without tools.".to_owned()
                }
                None => "Agent mode off: the model answers alone, without tools (choose a \
                         coding CLI with /agent cli)."
                    .to_owned(),
            },
            (_, "none") => format!(
                "CLI none: with agent mode off the model answers alone. {}",
                Self::describe(on, None)
            ),
            (_, name) => {
                format!("CLI {name} chosen for agent mode off. {}", Self::describe(on, Some(name)))
            }
        };
        CommandReply::text(text)
    }
}

impl ChatCommand for AgentModeCommand {
    fn name(&self) -> &'static str {
        "agent"
    }
    fn summary(&self) -> &'static str {
        "on|off|cli <name> — on: the agent with its tools answers; off: a coding CLI or the model"
    }
    fn run<'a>(&'a self, ctx: CommandContext<'a>) -> BoxFuture<'a, String> {
        Box::pin(async move { self.answer(ctx.chat, ctx.args).await.text })
    }
    fn reply<'a>(&'a self, ctx: CommandContext<'a>) -> BoxFuture<'a, CommandReply> {
        Box::pin(async move { self.answer(ctx.chat, ctx.args).await })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_owner_is_the_owner_only_in_their_private_chat_or_a_console() {
        let owner = Some(7);
        let private = ChatRef::Telegram(7);
        assert!(owner_in_private(owner, &private, Some(7)));
        assert!(!owner_in_private(owner, &private, Some(8)), "another user there");
        assert!(!owner_in_private(owner, &ChatRef::Telegram(-100), Some(7)), "a group");
        assert!(!owner_in_private(None, &private, None), "no owner configured");
        assert!(owner_in_private(None, &ChatRef::console("default").unwrap(), None));
    }

    #[derive(Debug)]
    struct Echo;

    impl ChatCommand for Echo {
        fn name(&self) -> &'static str {
            "echo"
        }
        fn summary(&self) -> &'static str {
            "say it back"
        }
        fn run<'a>(&'a self, ctx: CommandContext<'a>) -> BoxFuture<'a, String> {
            Box::pin(async move { format!("{}: {}", ctx.chat, ctx.args) })
        }
    }

    fn registry() -> CommandRegistry {
        let mut registry = CommandRegistry::default();
        registry.add(Arc::new(Help));
        registry.add(Arc::new(Stop));
        registry.add(Arc::new(Echo));
        registry
    }

    async fn run(registry: &CommandRegistry, text: &str) -> Option<String> {
        let chat = ChatRef::Telegram(1);
        match registry.parse(text)? {
            Parsed::Known { command, args } => {
                let ctx = CommandContext {
                    chat: &chat,
                    args,
                    message: 0,
                    channel: &crate::channels::Router::new(),
                    turns: &Turns::new(1),
                    commands: registry,
                    user: None,
                };
                Some(command.run(ctx).await)
            }
            Parsed::Unknown { name } => Some(registry.unknown(name)),
        }
    }

    #[tokio::test]
    async fn commands_parse_like_telegram_and_paths_stay_messages() {
        let r = registry();
        assert_eq!(run(&r, "/echo  a b ").await.unwrap(), "telegram:1: a b");
        assert_eq!(run(&r, "/echo@nexbot_bot hi").await.unwrap(), "telegram:1: hi");
        assert_eq!(run(&r, "  /ECHO x").await.unwrap(), "telegram:1: x");
        assert_eq!(run(&r, "/stop").await.unwrap(), "Nothing to stop.");
        for message in ["/etc/hosts is broken", "/ look", "hello /stop", "/", "//x"] {
            assert!(r.parse(message).is_none(), "{message:?} is a message");
        }
        let unknown = run(&r, "/frobnicate now").await.unwrap();
        assert_eq!(unknown, "Unknown command /frobnicate. Commands: /help, /stop, /echo.");
    }

    #[tokio::test]
    async fn status_names_each_degraded_part_and_agent_offers_only_what_the_image_runs() {
        let dir = std::env::temp_dir().join(format!("nxh-commands-{}", uuid::Uuid::new_v4()));
        let store = Store::open(&dir.join("t.db")).await.unwrap();
        let board = StatusBoard::default();
        board.add("telegram", || "backing off for 12s".to_owned());
        board.add_problem("telegram", || Some("cannot reach the Bot API for 12s".to_owned()));
        board.add_problem("pool", || None);
        let spend = Spend::new(crate::config::CapsConfig::default(), store.clone());
        // Secrets of this chat (telegram:1, the one `run` speaks in), of another chat and of
        // the operator: `/status` counts this chat's only.
        let master = secrecy::SecretString::from("master-key-for-tests-0123456789".to_owned());
        let vault = Vault::open(store.clone(), Some(&master), None).await.unwrap();
        board.add(SECRETS_LINE, {
            let vault = vault.clone();
            move || crate::vault::status_line(&vault)
        });
        let scope = |n: i64| crate::vault::SecretScope::Chat(ChatRef::Telegram(n));
        crate::vault::set_stdin(&vault, &scope(1), "MINE", "value-of-mine-123").await;
        crate::vault::set_stdin(&vault, &scope(2), "THEIRS", "value-of-theirs-1").await;
        crate::vault::set_stdin(&vault, &scope(2), "THEIRS2", "value-of-theirs-2").await;
        let operator = crate::vault::SecretScope::Operator;
        crate::vault::set_stdin(&vault, &operator, "OPS", "value-of-operator").await;
        // A line worded for the chat asking: the MCP servers it may use.
        board.add_for_chat("MCP servers", |chat| match chat {
            ChatRef::Telegram(1) => {
                let line = |name: &str, tools| crate::mcp::ServerLine {
                    name: name.into(),
                    tools,
                    failing: None,
                };
                Some(crate::mcp::health::status_line(&[line("everything", 13), line("time", 1)]))
            }
            _ => None,
        });
        let mut r = registry();
        let status = Status { store: store.clone(), model: "m".into(), spend, board, vault };
        r.add(Arc::new(status));
        let tools = ["run_command".to_owned(), "web_fetch".to_owned()];
        let clis = Clis::of_image("plain:dev", Some(&tools));
        r.add(Arc::new(AgentModeCommand { store, clis }));

        let status = run(&r, "/status").await.unwrap();
        assert!(status.contains("\nDEGRADED: telegram: cannot reach the Bot API"), "{status}");
        assert!(!status.contains("DEGRADED: pool"), "{status}");
        assert!(status.contains("\nSecrets: vault on, 1 stored for this chat\n"), "{status}");
        assert!(!status.contains("4 stored") && !status.contains("THEIRS"), "{status}");
        assert!(
            status.contains("\nMCP servers: everything (13 tools), time (1 tool)\n"),
            "{status}"
        );
        let menu = run(&r, "/agent").await.unwrap();
        assert!(menu.contains("/agent cli <none>"), "{menu}");
        let chosen = run(&r, "/agent cli qwen").await.unwrap();
        assert_eq!(
            chosen,
            "The qwen CLI cannot run here: the subagent image plain:dev has no coding CLI (set \
             subagent.image to the image `make cli-image` builds)."
        );
        // An image that offers `use_cli` (or one whose tools are unknown) runs every CLI.
        let with_cli = [crate::tools::delegate::CLI_TOOL.to_owned()];
        assert_eq!(Clis::of_image("cli:dev", Some(&with_cli)).offered, AGENT_CLIS);
        assert_eq!(Clis::of_image("any", None).offered, AGENT_CLIS);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[tokio::test]
    async fn help_lists_what_is_registered() {
        let mut r = registry();
        r.add(Arc::new(Echo)); // replaces, not doubles
        let help = run(&r, "/help").await.unwrap();
        assert_eq!(
            help,
            "/help — list the commands\n/stop — stop the current task\n/echo — say it back"
        );
    }
}
