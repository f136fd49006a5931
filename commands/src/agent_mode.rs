//! `/agent`: whether the agent with its tools answers this chat, or (off) a coding CLI in a
//! sandbox or the model alone; and which CLIs the subagent image can run.

use nexbot_agent::channel::Button;
use nexbot_core::{BoxFuture, ChatRef};
use nexbot_store::{Store, AGENT_CLIS, AGENT_CLI_SETTING, AGENT_MODE_SETTING};

use crate::{ChatCommand, CommandContext, CommandReply};

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

    /// What an image can run: `runs_cli` is whether its `pong` offers the delegation's CLI tool
    /// (`None`: its tools are not known, so every CLI is offered and a task says if it fails).
    pub fn of_image(image: &str, runs_cli: Option<bool>) -> Self {
        match runs_cli {
            Some(false) => Self::none(format!(
                "the subagent image {image} has no coding CLI (set subagent.image to the image \
                 `make cli-image` builds)"
            )),
            _ => Self::all(),
        }
    }

    /// The CLIs offered.
    pub fn offered(&self) -> &[&'static str] {
        &self.offered
    }

    fn names(&self) -> String {
        self.offered.iter().map(|n| format!("{n}|")).collect::<String>() + "none"
    }
}

#[derive(Debug)]
pub(crate) struct AgentModeCommand {
    store: Store,
    clis: Clis,
}

impl AgentModeCommand {
    pub(crate) fn new(store: Store, clis: Clis) -> Self {
        Self { store, clis }
    }

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
