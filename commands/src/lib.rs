//! Chat commands: the `/`-words a person types (`/help`, `/stop`, `/new`, `/status`, `/agent`,
//! `/secret`, `/memory`, and those the host adds: `/approvals`, `/voice`, `/audit`, `/selftest`),
//! one registry the bus consults for every inbound message, whatever channel it came from.
//!
//! Why one registry: a command must mean the same on Telegram and in the terminal, `/help`
//! must list exactly what exists, and a channel that shows a command menu (Telegram's
//! `setMyCommands`) reads it from here. Commands run outside the chat's turn queue, so `/stop`
//! reaches a running turn at once.
//!
//! What counts as a command: a message whose first word is `/` followed by 1–32 letters,
//! digits or `_` (Telegram's rule), optionally `@botname`. Anything else starting with `/`
//! (a path such as `/etc/hosts is …`) is an ordinary message for the agent.

//!
//! Why a crate of its own: a command is a small program over the store, the vault and the
//! running turns that answers with text; none of it needs the daemon, a channel crate, Docker or
//! the egress, and the host only registers them (it implements [`ChatCommand`] for its own).
mod agent_mode;
mod memory;
mod secret;
mod status;

use std::fmt;
use std::sync::Arc;

use nexbot_agent::channel::{Button, Channel};
use nexbot_agent::spend::Spend;
use nexbot_agent::turns::Turns;
use nexbot_core::status::StatusBoard;
use nexbot_core::{BoxFuture, ChatRef};
use nexbot_store::Store;
use nexbot_vault::Vault;

pub use agent_mode::Clis;
pub use memory::{status_line as memory_status_line, MemoryCommand};
pub use status::SECRETS_LINE;

/// What a command may act on besides its own state.
pub struct CommandContext<'a> {
    pub chat: &'a ChatRef,
    /// The text after the command word, trimmed.
    pub args: &'a str,
    /// The message's id as its channel gave it (the host bus's `InboundMessage::id`), to delete it.
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
        let status = status::Status::new(store.clone(), model, spend, board, vault.clone());
        registry.add(Arc::new(status));
        registry.add(Arc::new(agent_mode::AgentModeCommand::new(store, clis)));
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

#[cfg(test)]
pub(crate) mod tests {
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

    pub(crate) fn registry() -> CommandRegistry {
        let mut registry = CommandRegistry::default();
        registry.add(Arc::new(Help));
        registry.add(Arc::new(Stop));
        registry.add(Arc::new(Echo));
        registry
    }

    pub(crate) async fn run(registry: &CommandRegistry, text: &str) -> Option<String> {
        let chat = ChatRef::Telegram(1);
        match registry.parse(text)? {
            Parsed::Known { command, args } => {
                let ctx = CommandContext {
                    chat: &chat,
                    args,
                    message: 0,
                    channel: &nexbot_agent::tools::NoChannel,
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
