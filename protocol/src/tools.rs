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
    "search_files",
    "search_text",
    "use_cli",
    "read_skill",
    "search_web",
];

/// Other names accepted for a subagent tool, as `(alias, canonical)`: the seed's (LocalTopSH)
/// names, so a model or a prompt trained on them still reaches the one tool. Only the
/// canonical name is offered to the model; an alias is read wherever a tool name is read
/// (a delegation's `tools`, a request's `tools`, a model's call).
pub const TOOL_ALIASES: &[(&str, &str)] =
    &[("fetch_page", "web_fetch"), ("list_directory", "list_dir")];

/// The planning tool every task has on top of the granted ones; its list is what a report's
/// `todos` carry.
pub const PLANNING_TOOL: &str = "update_todos";

/// Tools a subagent can never be granted: no recursive delegation, no direct contact with the
/// user (`docs/protocol-limits.md#limits`).
pub const BLOCKED_TOOLS: &[&str] = &["delegate_to_sub_agent", "spawn", "send_file_to_user"];

/// The canonical name of the subagent tool `name` stands for: itself when it is one of
/// [`SUBAGENT_TOOLS`] or [`PLANNING_TOOL`], the tool an alias of [`TOOL_ALIASES`] names, else
/// `None` (blocked and unknown names).
pub fn canonical_tool(name: &str) -> Option<&'static str> {
    if name == PLANNING_TOOL {
        return Some(PLANNING_TOOL);
    }
    SUBAGENT_TOOLS
        .iter()
        .copied()
        .find(|tool| *tool == name)
        .or_else(|| TOOL_ALIASES.iter().find(|(alias, _)| *alias == name).map(|(_, tool)| *tool))
}

/// Whether `name` is a tool a subagent has: one of [`SUBAGENT_TOOLS`], [`PLANNING_TOOL`], or an
/// alias of one ([`TOOL_ALIASES`]).
pub fn is_subagent_tool(name: &str) -> bool {
    canonical_tool(name).is_some()
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
        for (alias, tool) in TOOL_ALIASES {
            assert!(SUBAGENT_TOOLS.contains(tool), "{alias} stands for {tool}, which exists");
            assert!(!SUBAGENT_TOOLS.contains(alias) && !BLOCKED_TOOLS.contains(alias), "{alias}");
        }
    }

    #[test]
    fn aliases_read_as_their_tool_and_nothing_else_does() {
        assert_eq!(canonical_tool("fetch_page"), Some("web_fetch"));
        assert_eq!(canonical_tool("list_directory"), Some("list_dir"));
        assert_eq!(canonical_tool("web_fetch"), Some("web_fetch"));
        assert_eq!(canonical_tool("search_text"), Some("search_text"));
        assert_eq!(canonical_tool(PLANNING_TOOL), Some(PLANNING_TOOL));
        for name in ["send_file_to_user", "send_file", "spawn", "fetch_url", "Fetch_Page", ""] {
            assert_eq!(canonical_tool(name), None, "{name}");
        }
        assert!(is_subagent_tool("fetch_page"));
        assert!(unknown_tools(&["fetch_page", "send_file"]) == ["send_file"]);
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
