//! The tools the subagent offers the model, and the per-task whitelist over them.

use nexbot_protocol::BLOCKED_TOOLS;

/// Every tool this program implements, in the order the model sees them.
pub const TOOL_NAMES: &[&str] = &[
    "web_fetch",
    "http_request",
    "run_command",
    "read_file",
    "write_file",
    "list_dir",
    "read_skill",
];

/// The tools a task may use: the request's whitelist (or all when absent) minus the
/// always-blocked ones, minus names this program does not offer. Empty is an error, naming
/// what was asked for and what exists.
pub fn select(requested: Option<&[String]>) -> Result<Vec<&'static str>, String> {
    let chosen: Vec<&'static str> = match requested {
        None => TOOL_NAMES.to_vec(),
        Some(names) => TOOL_NAMES
            .iter()
            .copied()
            .filter(|tool| names.iter().any(|n| n == tool) && !BLOCKED_TOOLS.contains(tool))
            .collect(),
    };
    if chosen.is_empty() {
        return Err(format!(
            "no usable tools: requested {:?}; this subagent offers {:?} ({:?} are never granted)",
            requested.unwrap_or_default(),
            TOOL_NAMES,
            BLOCKED_TOOLS
        ));
    }
    Ok(chosen)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whitelist_drops_unknown_and_blocked_names() {
        let asked: Vec<String> =
            ["run_command", "spawn", "delegate_to_sub_agent", "nope"].map(String::from).to_vec();
        assert_eq!(select(Some(&asked)).unwrap(), ["run_command"]);
        assert_eq!(select(None).unwrap(), TOOL_NAMES);
    }

    #[test]
    fn nothing_usable_is_an_error_naming_the_request() {
        let asked = vec!["send_file_to_user".to_owned()];
        let err = select(Some(&asked)).unwrap_err();
        assert!(err.contains("send_file_to_user") && err.contains("web_fetch"), "{err}");
        assert!(select(Some(&[])).is_err());
    }
}
