//! `nexbot-ctl mcp ls|tools|restart|logs`: the MCP servers the daemon runs in the sandbox,
//! each instance's container and state, the tools each offers the model (and the ones left
//! out, with why), a restart, and a server's stderr.

use clap::Subcommand;
use nexbot_control::{mcp_paths, Done, LogLines, McpServerList, McpToolList};

use crate::commands::{encode, get, post, print_log_lines, show, Ctx};
use crate::render::{cut, human_secs, one_line, or_dash, Table};

/// How much of an instance's last error the table shows (`--json` has all of it).
const ERROR_CELL: usize = 60;

#[derive(Debug, Subcommand)]
pub enum McpCommand {
    /// Every configured server and its instances: scope, whom each serves, state, container,
    /// tools, restarts, last error
    #[command(visible_alias = "list")]
    Ls,
    /// The tools a server offers the model (`mcp__<server>__<tool>`, with what the model reads)
    /// and the ones it listed that are left out, with why
    Tools {
        /// The server's name (`[[mcp.servers]] name`, as `mcp ls` shows it)
        name: String,
    },
    /// Stop every instance of a server: a shared one starts again at once, a chat's at its
    /// next call
    Restart {
        /// The server's name, as `mcp ls` shows it
        name: String,
    },
    /// The stderr lines of a server's running instances
    Logs {
        /// The server's name, as `mcp ls` shows it
        name: String,
        /// How many of the last lines
        #[arg(short = 'n', long = "lines", default_value_t = 100)]
        lines: u32,
    },
}

pub async fn run(ctx: &Ctx, command: McpCommand) -> anyhow::Result<()> {
    match command {
        McpCommand::Ls => {
            let answer = get(ctx, mcp_paths::MCP).await?;
            show(ctx, answer, |l: McpServerList| list(&l))
        }
        McpCommand::Tools { name } => {
            let answer = get(ctx, &mcp_paths::server(&encode(&name), "tools")).await?;
            show(ctx, answer, |l: McpToolList| tools(&l))
        }
        McpCommand::Restart { name } => {
            let path = mcp_paths::server(&encode(&name), "restart");
            let answer = post(ctx, &path, &serde_json::json!({})).await?;
            show(ctx, answer, |d: Done| format!("{}\n", one_line(&d.message)))
        }
        McpCommand::Logs { name, lines } => {
            let path = format!("{}?n={lines}", mcp_paths::server(&encode(&name), "logs"));
            let logs: LogLines = serde_json::from_value(get(ctx, &path).await?)
                .map_err(|e| nexbot_control::ClientError::Protocol(e.to_string()))?;
            print_log_lines(ctx, &logs.lines)
        }
    }
}

/// `mcp ls`: one row per instance; a server with none yet has one row saying so.
fn list(l: &McpServerList) -> String {
    if l.servers.is_empty() {
        return "no MCP servers configured ([[mcp.servers]] in config.toml)\n".to_owned();
    }
    let mut t = Table::new(&[
        "server",
        "scope",
        "serves",
        "state",
        "container",
        "tools",
        "uptime",
        "restarts",
        "last error",
    ]);
    for s in &l.servers {
        if s.instances.is_empty() {
            let not_yet = match s.scope.as_str() {
                "chat" => "none yet (a chat's first call starts one)",
                _ => "none yet",
            };
            t.row(vec![
                s.name.clone(),
                s.scope.clone(),
                not_yet.to_owned(),
                "-".to_owned(),
                "-".to_owned(),
                s.tools.to_string(),
                "-".to_owned(),
                "0".to_owned(),
                "-".to_owned(),
            ]);
        }
        for i in &s.instances {
            t.row(vec![
                s.name.clone(),
                s.scope.clone(),
                i.serves.clone(),
                i.state.clone(),
                match (&i.container, &s.url) {
                    (Some(container), _) => container.clone(),
                    (None, Some(_)) => "(remote)".to_owned(),
                    (None, None) => "-".to_owned(),
                },
                i.tools.to_string(),
                or_dash(i.up_secs, human_secs),
                i.restarts.to_string(),
                or_dash(i.last_error.as_deref(), |e| cut(&one_line(e), ERROR_CELL)),
            ]);
        }
    }
    let mut out = t.render();
    // A cut error hides what matters most at its end ("... No such image: nexbot-mcp:dev"):
    // each one cut in the table is also written whole below it.
    let cut_errors: Vec<String> = l
        .servers
        .iter()
        .flat_map(|s| s.instances.iter().map(move |i| (s, i)))
        .filter_map(|(s, i)| {
            let error = one_line(i.last_error.as_deref()?);
            (error.chars().count() > ERROR_CELL)
                .then(|| format!("  {} ({}): {error}\n", one_line(&s.name), one_line(&i.serves)))
        })
        .collect();
    if !cut_errors.is_empty() {
        out.push_str("\nlast errors in full:\n");
        out.extend(cut_errors);
    }
    out
}

/// `mcp tools NAME`: each offered tool with the description the model reads, then the
/// skipped ones with why.
fn tools(l: &McpToolList) -> String {
    let mut out = format!(
        "{}: {} tool(s) offered, {} skipped\n",
        one_line(&l.server),
        l.tools.len(),
        l.skipped.len()
    );
    for tool in &l.tools {
        out.push_str(&format!(
            "\n{} ({})\n  {}\n",
            one_line(&tool.function),
            one_line(&tool.tool),
            one_line(&tool.description)
        ));
    }
    if !l.skipped.is_empty() {
        let mut t = Table::new(&["skipped", "why"]);
        for s in &l.skipped {
            t.row(vec![s.tool.clone(), s.why.clone()]);
        }
        out.push('\n');
        out.push_str(&t.render());
    }
    out
}

#[cfg(test)]
mod tests {
    use nexbot_control::{McpInstance, McpServer, McpSkippedTool, McpTool};

    use super::*;

    fn server(name: &str, scope: &str, instances: Vec<McpInstance>) -> McpServer {
        McpServer {
            name: name.into(),
            scope: scope.into(),
            image: "nexbot-mcp:dev".into(),
            command: vec!["mcp-server-everything".into(), "stdio".into()],
            url: None,
            tools: 13,
            instances,
        }
    }

    fn instance(serves: &str, state: &str, container: Option<&str>) -> McpInstance {
        McpInstance {
            serves: serves.into(),
            state: state.into(),
            container: container.map(Into::into),
            tools: if container.is_some() { 13 } else { 0 },
            restarts: 0,
            last_error: None,
            up_secs: container.map(|_| 75),
            idle_secs: Some(3),
        }
    }

    /// A table line's cells (they hold no double space).
    fn cells(line: &str) -> Vec<&str> {
        line.split("  ").filter(|c| !c.is_empty()).map(str::trim).collect()
    }

    #[test]
    fn ls_shows_a_row_per_instance_and_a_server_with_none_yet() {
        let failed = McpInstance {
            restarts: 3,
            last_error: Some(format!("exited with 1:\n{}", "x".repeat(100))),
            ..instance("telegram:42", "failed", None)
        };
        let list = McpServerList {
            servers: vec![
                server(
                    "everything",
                    "shared",
                    vec![instance("shared", "running", Some("nxb-mcp-1"))],
                ),
                server("fs", "chat", vec![failed]),
                server("memory", "chat", vec![]),
            ],
        };
        let text = super::list(&list);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 7, "{text}");
        // The cut error is written whole below the table.
        assert_eq!(lines[4..6], ["", "last errors in full:"], "{text}");
        assert_eq!(lines[6], format!("  fs (telegram:42): exited with 1: {}", "x".repeat(100)));
        assert!(lines[0].starts_with("SERVER      SCOPE   SERVES"), "{text}");
        assert!(lines[0].ends_with("RESTARTS  LAST ERROR"), "{text}");
        assert_eq!(
            cells(lines[1]),
            ["everything", "shared", "shared", "running", "nxb-mcp-1", "13", "1m15s", "0", "-"]
        );
        let fs = cells(lines[2]);
        assert_eq!(fs[..8], ["fs", "chat", "telegram:42", "failed", "-", "0", "-", "3"]);
        // The error is on one line and cut.
        assert!(fs[8].starts_with("exited with 1: xxx") && fs[8].ends_with('…'), "{text}");
        assert_eq!(fs[8].chars().count(), ERROR_CELL);
        assert_eq!(
            cells(lines[3]),
            [
                "memory",
                "chat",
                "none yet (a chat's first call starts one)",
                "-",
                "-",
                "13",
                "-",
                "0",
                "-"
            ]
        );
        assert_eq!(
            super::list(&McpServerList { servers: vec![] }),
            "no MCP servers configured ([[mcp.servers]] in config.toml)\n"
        );
    }

    #[test]
    fn tools_show_what_the_model_reads_and_why_others_are_left_out() {
        let list = McpToolList {
            server: "everything".into(),
            tools: vec![McpTool {
                function: "mcp__everything__echo".into(),
                tool: "echo".into(),
                description: "Tool of MCP server `everything`. Echoes\nback".into(),
            }],
            skipped: vec![McpSkippedTool {
                tool: "bad.name".into(),
                why: "its name holds characters other than letters, digits, _ and -".into(),
            }],
        };
        assert_eq!(
            tools(&list),
            "everything: 1 tool(s) offered, 1 skipped\n\
             \n\
             mcp__everything__echo (echo)\n  Tool of MCP server `everything`. Echoes back\n\
             \n\
             SKIPPED   WHY\n\
             bad.name  its name holds characters other than letters, digits, _ and -\n"
        );
    }
}
