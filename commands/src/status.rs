//! `/status`: the model, this chat's mode and running turn, its memory, the status board's lines
//! (the secrets line counted for this chat only), what is degraded, and the spend.

use std::sync::Arc;

use nexbot_agent::spend::Spend;
use nexbot_core::status::StatusBoard;
use nexbot_core::BoxFuture;
use nexbot_store::Store;
use nexbot_vault::Vault;

use crate::{ChatCommand, CommandContext};

#[derive(Debug)]
pub(crate) struct Status {
    store: Store,
    model: String,
    spend: Arc<Spend>,
    board: StatusBoard,
    /// For this chat's secrets line (the board's counts every scope).
    vault: Arc<Vault>,
}

impl Status {
    pub(crate) fn new(
        store: Store,
        model: String,
        spend: Arc<Spend>,
        board: StatusBoard,
        vault: Arc<Vault>,
    ) -> Self {
        Self { store, model, spend, board, vault }
    }
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
                    SECRETS_LINE => nexbot_vault::chat_status_line(&self.vault, ctx.chat),
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

#[cfg(test)]
mod tests {
    use nexbot_core::ChatRef;
    use nexbot_store::AGENT_CLIS;

    use super::*;
    use crate::agent_mode::AgentModeCommand;
    use crate::Clis;

    #[tokio::test]
    async fn status_names_each_degraded_part_and_agent_offers_only_what_the_image_runs() {
        let dir = std::env::temp_dir().join(format!("nxh-commands-{}", uuid::Uuid::new_v4()));
        let store = Store::open(&dir.join("t.db")).await.unwrap();
        let board = StatusBoard::default();
        board.add("telegram", || "backing off for 12s".to_owned());
        board.add_problem("telegram", || Some("cannot reach the Bot API for 12s".to_owned()));
        board.add_problem("pool", || None);
        let spend = Spend::new(nexbot_agent::config::CapsConfig::default(), store.clone());
        // Secrets of this chat (telegram:1, the one `run` speaks in), of another chat and of
        // the operator: `/status` counts this chat's only.
        let master = secrecy::SecretString::from("master-key-for-tests-0123456789".to_owned());
        let vault = Vault::open(store.clone(), Some(&master), None).await.unwrap();
        board.add(SECRETS_LINE, {
            let vault = vault.clone();
            move || nexbot_vault::status_line(&vault)
        });
        let scope = |n: i64| nexbot_vault::SecretScope::Chat(ChatRef::Telegram(n));
        nexbot_vault::set_stdin(&vault, &scope(1), "MINE", "value-of-mine-123").await;
        nexbot_vault::set_stdin(&vault, &scope(2), "THEIRS", "value-of-theirs-1").await;
        nexbot_vault::set_stdin(&vault, &scope(2), "THEIRS2", "value-of-theirs-2").await;
        let operator = nexbot_vault::SecretScope::Operator;
        nexbot_vault::set_stdin(&vault, &operator, "OPS", "value-of-operator").await;
        // A line worded for the chat asking: the MCP servers it may use.
        board.add_for_chat("MCP servers", |chat| match chat {
            ChatRef::Telegram(1) => Some("everything (13 tools), time (1 tool)".to_owned()),
            _ => None,
        });
        let mut r = crate::tests::registry();
        let status = Status::new(store.clone(), "m".into(), spend, board, vault);
        r.add(Arc::new(status));
        let clis = Clis::of_image("plain:dev", Some(false));
        r.add(Arc::new(AgentModeCommand::new(store, clis)));

        let status = crate::tests::run(&r, "/status").await.unwrap();
        assert!(status.contains("\nDEGRADED: telegram: cannot reach the Bot API"), "{status}");
        assert!(!status.contains("DEGRADED: pool"), "{status}");
        assert!(status.contains("\nSecrets: vault on, 1 stored for this chat\n"), "{status}");
        assert!(!status.contains("4 stored") && !status.contains("THEIRS"), "{status}");
        assert!(
            status.contains("\nMCP servers: everything (13 tools), time (1 tool)\n"),
            "{status}"
        );
        let menu = crate::tests::run(&r, "/agent").await.unwrap();
        assert!(menu.contains("/agent cli <none>"), "{menu}");
        let chosen = crate::tests::run(&r, "/agent cli qwen").await.unwrap();
        assert_eq!(
            chosen,
            "The qwen CLI cannot run here: the subagent image plain:dev has no coding CLI (set \
             subagent.image to the image `make cli-image` builds)."
        );
        // An image that offers the CLI tool (or one whose tools are unknown) runs every CLI.
        assert_eq!(Clis::of_image("cli:dev", Some(true)).offered(), AGENT_CLIS);
        assert_eq!(Clis::of_image("any", None).offered(), AGENT_CLIS);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
