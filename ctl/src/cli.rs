//! The command line, declared with clap's derive API so that `--help` documents every command
//! and a usage error exits 2 (clap's own code, which the exit-code contract keeps).

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// The long help's footer: the exit codes scripts rely on, and where the socket comes from.
const AFTER_HELP: &str = "\
Socket: --socket, else $NEXBOT_SOCKET, else nexbot.sock in the directory of $NEXBOT_CONFIG
(the daemon's own default config), else ./nexbot.sock (the data directory of ./config.toml).

Exit codes: 0 ok, 1 the daemon answered an error (its message is printed), 2 usage error,
3 the daemon is not running (nothing listens on the socket), 4 the daemon is starting (try
again in a moment).";

#[derive(Debug, Parser)]
#[command(
    name = "nexbot-ctl",
    version,
    about = "Operate a running Nexbot daemon over its control socket",
    after_help = AFTER_HELP
)]
pub struct Cli {
    /// The daemon's control socket [default: $NEXBOT_SOCKET, else <dir of $NEXBOT_CONFIG or
    /// ./config.toml>/nexbot.sock]
    #[arg(long, global = true, value_name = "PATH")]
    pub socket: Option<PathBuf>,
    /// Print the daemon's JSON answer (pretty) instead of a table; raw lines for `logs`
    #[arg(long, global = true)]
    pub json: bool,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// The daemon at a glance: version, uptime, model, pool, channels, tokens, database
    Status,
    /// Ready or not (store open, pool warm) and what is degraded; exits 1 when not ready (for
    /// health checks: compose's `healthcheck` runs it)
    Health,
    /// The subagent pool: list containers, read their logs, restart or kill one
    #[command(subcommand)]
    Subagents(SubagentsCommand),
    /// Delegated tasks, newest first; `tasks show ID` for one task in full
    Tasks(TasksArgs),
    /// The Telegram update ledger, newest first
    Messages {
        /// Only updates whose handling failed
        #[arg(long)]
        failed: bool,
        /// How many rows at most
        #[arg(long, short = 'n', default_value_t = 20)]
        limit: u32,
    },
    /// Re-read config.toml; prints what was applied and what needs a restart
    Reload,
    /// Write a consistent copy of the database to FILE (on the daemon's machine)
    Backup {
        /// Destination; a relative path is taken from the current directory
        file: PathBuf,
    },
    /// Print the daemon's Prometheus metrics (text)
    Metrics,
    /// The secrets vault: set (value from stdin), ls, rm; a chat's secrets (--chat) or the
    /// operator's (--operator)
    #[command(subcommand)]
    Secrets(crate::secrets::SecretsCommand),
    /// The egress audit file's hash chain: `audit verify` names the first line that does not
    /// follow the one before it (exit 1) and prints the head to compare with a copy
    #[command(subcommand)]
    Audit(AuditCommand),
    /// Skills: each folder's state (ok, invalid, ineligible, quarantined), reason and hash
    #[command(subcommand)]
    Skills(SkillsCommand),
    /// Scheduled jobs and heartbeat checks: add, ls (with their token cost), rm, runs
    #[command(subcommand)]
    Cron(crate::cron::CronCommand),
    /// A chat's long-term memory: ls, search WORDS, rm ID|--all (each entry with where it came
    /// from)
    #[command(subcommand)]
    Memory(crate::memory::MemoryCommand),
    /// Egress questions waiting (egress.mode = "ask"): ls, allow ID [--for once|task|chat],
    /// deny ID
    #[command(subcommand)]
    Approvals(crate::approvals::ApprovalsCommand),
    /// The egress: the chats' "always" rules (rules ls|rm)
    #[command(subcommand)]
    Egress(crate::approvals::EgressCommand),
    /// MCP servers (run in the sandbox): ls, tools NAME, restart NAME, logs NAME [-n N]
    #[command(subcommand, after_long_help = MCP_ADDING)]
    Mcp(crate::mcp::McpCommand),
    /// The web dashboard (control.web_addr): `web login` prints a one-time login link
    #[command(subcommand)]
    Web(WebCommand),
}

#[derive(Debug, Subcommand)]
pub enum WebCommand {
    /// Print a link that logs a browser into the dashboard: it works once, for five minutes
    Login,
}

#[derive(Debug, Subcommand)]
pub enum SubagentsCommand {
    /// One line per pool slot, like `docker ps`
    Ps {
        /// Refresh until Ctrl-C (in place on a terminal)
        #[arg(long, short = 'w')]
        watch: bool,
        /// Seconds between refreshes with --watch
        #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..),
              requires = "watch")]
        interval: u64,
    },
    /// A container's stderr log lines (JSON from the subagent's logger), pretty-printed
    Logs {
        /// Slot id, as `subagents ps` shows it
        id: String,
        /// How many of the last lines
        #[arg(short = 'n', long = "lines", default_value_t = 100)]
        lines: u32,
        /// Keep polling every second and print new lines until Ctrl-C
        #[arg(long, short = 'f')]
        follow: bool,
    },
    /// Replace a slot's container with a fresh one
    Restart {
        /// Slot id, as `subagents ps` shows it
        id: String,
    },
    /// Kill a slot's container now (the pool starts a replacement)
    Kill {
        /// Slot id, as `subagents ps` shows it
        id: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum AuditCommand {
    /// Walk the chain, oldest line first
    Verify,
}

#[derive(Debug, Subcommand)]
pub enum SkillsCommand {
    /// Every skill folder: name, state, content hash, reason; the flagged lines of a
    /// quarantined one (allow it with `skills allow NAME HASH`)
    #[command(visible_alias = "list")]
    Ls,
    /// Accept a skill's current content: the destinations its SKILL.md declares (`domains`)
    /// are allowed again, without a question, to tasks of a turn that read it. Needed after
    /// the skill changed (`skills ls` shows "changed"); a quarantined skill, given HASH, is
    /// allowed despite the content screen
    Allow {
        /// The skill's folder name
        name: String,
        /// The content hash you reviewed (`skills ls`); refused if the skill changed since
        hash: Option<String>,
    },
}

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct TasksArgs {
    #[command(subcommand)]
    pub command: Option<TasksCommand>,
    /// How many rows at most
    #[arg(long, short = 'n', default_value_t = 20)]
    pub limit: u32,
    /// Only tasks of this chat (`telegram:<id>`, `console:<name>`)
    #[arg(long, value_name = "CHATREF")]
    pub chat: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum TasksCommand {
    /// Every field of one task, its text and its egress summary
    Show {
        /// Task id, or a unique prefix of one (as the table shows it)
        id: String,
    },
}

/// How an operator adds an MCP server (`nexbot-ctl mcp --help`).
const MCP_ADDING: &str = "\
Adding a server:
  A stdio server runs as the main process of its own container. The image nexbot-mcp:dev
  (make mcp-image) has Node and the reference servers (server-everything, server-filesystem,
  server-memory). Add an npm package to it when it is built (nothing is fetched at run time):
      make mcp-image MCP_EXTRA_PKGS='some-mcp-server@1.2.3'
  its programs land on PATH; or name an image of your own with `image`. Then add an entry to
  config.toml and restart the daemon:
      [[mcp.servers]]
      name = \"some\"
      command = \"some-mcp-server\"
      args = []
  A chat's own files: `room = \"/room\"` on a chat-scoped server mounts that chat's room there
  (e.g. command = \"mcp-server-filesystem\", args = [\"/room\"]), and nothing else of the host.
  A remote server (Streamable HTTP) names `url` instead, reached through the egress proxy
  (allow its host), and may send `headers` whose {{secret:NAME}} is an operator secret bound
  to that host (nexbot-ctl secrets set NAME --operator --host HOST).";

#[cfg(test)]
mod tests {
    use clap::CommandFactory as _;

    use super::*;

    #[test]
    fn the_cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn tasks_takes_flags_or_show() {
        let cli = Cli::try_parse_from(["nexbot-ctl", "tasks", "--limit", "5"]).unwrap();
        assert!(matches!(cli.command, Command::Tasks(TasksArgs { limit: 5, command: None, .. })));
        let cli = Cli::try_parse_from(["nexbot-ctl", "tasks", "show", "abc"]).unwrap();
        assert!(matches!(
            cli.command,
            Command::Tasks(TasksArgs { command: Some(TasksCommand::Show { .. }), .. })
        ));
    }

    #[test]
    fn interval_needs_watch_and_is_positive() {
        assert!(Cli::try_parse_from(["nexbot-ctl", "subagents", "ps", "--interval", "3"]).is_err());
        assert!(Cli::try_parse_from(["x", "subagents", "ps", "-w", "--interval", "0"]).is_err());
        assert!(Cli::try_parse_from(["x", "subagents", "ps", "-w", "--interval", "3"]).is_ok());
    }

    #[test]
    fn global_flags_go_anywhere() {
        let cli = Cli::try_parse_from(["x", "tasks", "--json", "--socket", "/s"]).unwrap();
        assert!(cli.json);
        assert_eq!(cli.socket.as_deref(), Some(std::path::Path::new("/s")));
    }

    #[test]
    fn secrets_take_exactly_one_scope_to_set_or_remove_and_at_most_one_to_list() {
        let ok = |args: &[&str]| Cli::try_parse_from(args).is_ok();
        assert!(ok(&["x", "secrets", "set", "A", "--chat", "telegram:1"]));
        assert!(ok(&["x", "secrets", "set", "A", "--operator", "--host", "a.b", "--host", "c.d"]));
        assert!(ok(&["x", "secrets", "rm", "A", "--operator"]));
        assert!(ok(&["x", "secrets", "ls"]));
        assert!(ok(&["x", "secrets", "list", "--chat", "console:me"]));
        for bad in [
            &["x", "secrets", "set", "A"][..],
            &["x", "secrets", "set", "A", "--operator", "--chat", "telegram:1"],
            &["x", "secrets", "set", "A", "--operator", "--mode", "env"],
            &["x", "secrets", "set", "A", "--operator", "the-value"],
            &["x", "secrets", "rm", "A"],
            &["x", "secrets", "ls", "--operator", "--chat", "telegram:1"],
        ] {
            assert!(Cli::try_parse_from(bad).is_err(), "{bad:?}");
        }
    }
}
