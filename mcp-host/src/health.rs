//! What the operator reads about MCP servers that do not start: the degraded part `mcp` of
//! `health`, `/status`, `make up` and the dashboard, with the whole reason and, where it is
//! known, the command that fixes it. A server that cannot start used to be nearly invisible
//! (`health` ready, `/status` "memory (0 tools)", the reason cut before "No such image").

use std::collections::BTreeMap;
use std::sync::Mutex;

use nexbot_mcp::ServerConfig;

/// The servers whose last start failed, each with its reason; a start that succeeds (of any of
/// the server's instances) takes it off.
#[derive(Debug, Default)]
pub(crate) struct Failing(Mutex<BTreeMap<String, String>>);

impl Failing {
    pub(crate) fn started(&self, server: &str) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).remove(server);
    }

    pub(crate) fn failed(&self, config: &ServerConfig, reason: &str) {
        let said = start_failure(config, reason);
        self.0.lock().unwrap_or_else(|e| e.into_inner()).insert(config.name.clone(), said);
    }

    /// Why `server` does not run, if its last start failed.
    pub(crate) fn reason(&self, server: &str) -> Option<String> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).get(server).cloned()
    }

    /// The degraded part's text: every failing server with its reason (`None`: all start).
    pub(crate) fn problem(&self) -> Option<String> {
        let failing = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if failing.is_empty() {
            return None;
        }
        let each: Vec<String> = failing
            .iter()
            .map(|(name, why)| format!("server {name} does not start: {why}"))
            .collect();
        Some(each.join("; "))
    }
}

/// The whole reason a server did not start, with the fix where the reason names one: an image
/// the engine does not have is built (`make mcp-image` for the bundled one) or pulled.
pub(crate) fn start_failure(config: &ServerConfig, reason: &str) -> String {
    if config.is_remote() || !reason.to_ascii_lowercase().contains("no such image") {
        return reason.to_owned();
    }
    format!("{reason} (the engine has no image {}: {})", config.image(), config.missing_image_fix())
}

/// A chat's `/status` line of the MCP servers it may use: each with its tools, or why it does
/// not start.
pub fn status_line(servers: &[super::ServerLine]) -> String {
    if servers.is_empty() {
        return "none for this chat".to_owned();
    }
    let named: Vec<String> = servers
        .iter()
        .map(|s| match &s.failing {
            Some(why) => format!("{} (does not start: {why})", s.name),
            None => format!("{} ({} tool{})", s.name, s.tools, if s.tools == 1 { "" } else { "s" }),
        })
        .collect();
    named.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(name: &str, image: Option<&str>) -> ServerConfig {
        let toml = match image {
            Some(image) => format!("name = \"{name}\"\ncommand = \"x\"\nimage = \"{image}\""),
            None => format!("name = \"{name}\"\ncommand = \"x\""),
        };
        toml::from_str(&toml).expect("a server's config")
    }

    #[test]
    fn a_missing_image_is_named_with_the_command_that_makes_it() {
        let failing = Failing::default();
        assert_eq!(failing.problem(), None);
        let error = "Docker responded with status code 404: No such image: nexbot-mcp:dev";
        failing.failed(&server("memory", None), error);
        failing.failed(&server("search", Some("ghcr.io/x/search:1")), "no such image: x");
        failing.failed(&server("slow", None), "did not answer initialize within 60 s");
        let problem = failing.problem().expect("degraded");
        assert!(problem.contains(&format!("server memory does not start: {error}")), "{problem}");
        assert!(problem.contains("build it with `make mcp-image`"), "{problem}");
        let fix = "no image ghcr.io/x/search:1: pull or build ghcr.io/x/search:1 on the engine";
        assert!(problem.contains(fix), "{problem}");
        assert!(
            problem.contains("server slow does not start: did not answer initialize within 60 s;")
                || problem
                    .ends_with("server slow does not start: did not answer initialize within 60 s"),
            "{problem}"
        );
        failing.started("memory");
        failing.started("search");
        failing.started("slow");
        assert_eq!(failing.problem(), None);
    }

    #[test]
    fn the_status_line_names_each_server_with_its_tools_or_why_it_does_not_start() {
        use super::super::ServerLine;
        let line = |name: &str, tools, failing: Option<&str>| ServerLine {
            name: name.into(),
            tools,
            failing: failing.map(str::to_owned),
        };
        assert_eq!(status_line(&[]), "none for this chat");
        assert_eq!(status_line(&[line("fs", 0, None)]), "fs (0 tools)");
        assert_eq!(
            status_line(&[line("time", 1, None), line("memory", 0, Some("No such image: m"))]),
            "time (1 tool), memory (does not start: No such image: m)"
        );
    }
}
