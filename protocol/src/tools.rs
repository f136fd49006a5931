//! The names of a subagent's tools: the one list both sides read.
//!
//! The subagent offers exactly [`SUBAGENT_TOOLS`] (its registry is checked against this list),
//! plus the planning tool [`PLANNING_TOOL`], which every task has whatever it was granted. The
//! host refuses a delegation that names anything else before it runs, and its prompts and tool
//! descriptions may only mention names that exist (a test reads them). [`BLOCKED_TOOLS`] are
//! never granted, whatever a request says.

/// Every tool a subagent can be granted, in the order the model sees them
/// (`docs/protocol.md`, `execute.tools`).
pub const SUBAGENT_TOOLS: &[&str] = &[
    "web_fetch",
    "http_request",
    "run_command",
    "read_file",
    "write_file",
    "list_dir",
    "use_cli",
    "read_skill",
];

/// The planning tool every task has on top of the granted ones; its list is what a report's
/// `todos` carry.
pub const PLANNING_TOOL: &str = "update_todos";

/// Tools a subagent can never be granted: no recursive delegation, no direct contact with the
/// user (`docs/protocol.md#limits`).
pub const BLOCKED_TOOLS: &[&str] = &["delegate_to_sub_agent", "spawn", "send_file_to_user"];

/// Whether `name` is a tool a subagent has: one of [`SUBAGENT_TOOLS`] or [`PLANNING_TOOL`].
pub fn is_subagent_tool(name: &str) -> bool {
    name == PLANNING_TOOL || SUBAGENT_TOOLS.contains(&name)
}

/// The names in `requested` that are not a subagent's tool (blocked ones included), each once,
/// in the order asked.
pub fn unknown_tools<S: AsRef<str>>(requested: &[S]) -> Vec<&str> {
    let mut unknown: Vec<&str> = Vec::new();
    for name in requested.iter().map(AsRef::as_ref) {
        if !is_subagent_tool(name) && !unknown.contains(&name) {
            unknown.push(name);
        }
    }
    unknown
}

/// The subagent tool a mistaken `name` most likely meant: one sharing a word with it
/// (`fetch_url` → `web_fetch`, `read` → `read_file`), when exactly one does best.
pub fn closest_tool(name: &str) -> Option<&'static str> {
    let words = |s: &str| -> Vec<String> {
        s.split(|c: char| !c.is_ascii_alphanumeric())
            .filter(|w| w.len() > 2)
            .map(str::to_ascii_lowercase)
            .collect()
    };
    let asked = words(name);
    let mut best: Option<(&'static str, usize)> = None;
    let mut tie = false;
    for &tool in SUBAGENT_TOOLS {
        let shared = words(tool).iter().filter(|w| asked.contains(w)).count();
        match best {
            _ if shared == 0 => {}
            Some((_, n)) if shared < n => {}
            Some((_, n)) if shared == n => tie = true,
            _ => {
                best = Some((tool, shared));
                tie = false;
            }
        }
    }
    best.filter(|_| !tie).map(|(tool, _)| tool)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lists_do_not_overlap_and_have_no_duplicates() {
        for (i, tool) in SUBAGENT_TOOLS.iter().enumerate() {
            assert!(!SUBAGENT_TOOLS[..i].contains(tool), "{tool} twice");
            assert!(!BLOCKED_TOOLS.contains(tool), "{tool} is both offered and blocked");
        }
        assert!(!SUBAGENT_TOOLS.contains(&PLANNING_TOOL));
        assert!(!BLOCKED_TOOLS.contains(&PLANNING_TOOL));
    }

    #[test]
    fn known_and_unknown_names() {
        assert!(is_subagent_tool("web_fetch") && is_subagent_tool(PLANNING_TOOL));
        assert!(!is_subagent_tool("fetch_url") && !is_subagent_tool("spawn"));
        assert!(!is_subagent_tool("Web_Fetch"), "names are exact");
        let asked = ["run_command", "fetch_url", "spawn", "fetch_url", "update_todos"];
        assert_eq!(unknown_tools(&asked), ["fetch_url", "spawn"]);
        assert!(unknown_tools::<String>(&[]).is_empty());
    }

    #[test]
    fn a_mistaken_name_finds_the_tool_it_meant() {
        assert_eq!(closest_tool("fetch_url"), Some("web_fetch"));
        assert_eq!(closest_tool("shell_command"), Some("run_command"));
        assert_eq!(closest_tool("http_get"), Some("http_request"));
        // `file` is in two tools and nothing else decides: no guess.
        assert_eq!(closest_tool("file"), None);
        assert_eq!(closest_tool("send_email"), None);
    }
}
