//! The MCP conformance suite (`@modelcontextprotocol/conformance`, installed by `make
//! mcp-conformance`) against Nexbot's client on its real path to a remote server: rmcp's
//! Streamable HTTP client through a door into the egress proxy
//! (`src/bin/mcp-conformance-client.rs`). Each scenario's own checks (`checks.json`) are read;
//! what passes and what does not, and why, is asserted, so a change either way shows.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_owned()
}

/// The suite's launcher, or `None` (a failure under `CI=true`) when it is not installed.
fn suite() -> Option<PathBuf> {
    let launcher = repo().join("target/mcp-conformance/conformance");
    if launcher.exists() {
        return Some(launcher);
    }
    let why = "the MCP conformance suite is not installed; `make mcp-conformance` (or `make \
               test`) installs it";
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{why}");
    }
    eprintln!("\n!!! SKIPPED mcp_conformance: {why} !!!\n");
    None
}

/// Runs one client scenario; its checks by id (`status`, `errorMessage`, `details`).
fn scenario(launcher: &Path, name: &str) -> Vec<Value> {
    let out = tempdir(name);
    let run = Command::new(launcher)
        .args(["client", "--command", env!("CARGO_BIN_EXE_mcp-conformance-client")])
        .args(["--scenario", name, "--timeout", "60000", "-o"])
        .arg(&out)
        .output()
        .expect("the conformance suite runs");
    let found = walk(&out).into_iter().find(|p| p.ends_with("checks.json"));
    let Some(checks) = found else {
        panic!(
            "{name}: no checks.json; the suite said:\n{}\n{}",
            String::from_utf8_lossy(&run.stdout),
            String::from_utf8_lossy(&run.stderr)
        )
    };
    let checks: Vec<Value> = serde_json::from_str(&std::fs::read_to_string(checks).unwrap())
        .expect("checks.json is a list");
    let _ = std::fs::remove_dir_all(&out);
    checks
}

fn tempdir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "nxb-conformance-{}-{}",
        std::process::id(),
        name.replace('/', "_")
    ));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        match path.is_dir() {
            true => found.extend(walk(&path)),
            false => found.push(path),
        }
    }
    found
}

fn status<'a>(checks: &'a [Value], id: &str) -> &'a str {
    let check = checks.iter().find(|c| c["id"] == id);
    check.and_then(|c| c["status"].as_str()).unwrap_or_else(|| panic!("no check {id}: {checks:#?}"))
}

fn failures(checks: &[Value]) -> Vec<&str> {
    checks.iter().filter(|c| c["status"] == "FAILURE").filter_map(|c| c["id"].as_str()).collect()
}

/// Calls and reconnection pass; `initialize` passes but for the version the suite expects
/// (rmcp offers a newer one than the suite knows); elicitation is declined by design (the
/// client declares none: a server cannot reach the user or the model through it).
#[test]
fn the_conformance_suites_client_scenarios_through_the_egress_proxy() {
    let Some(launcher) = suite() else { return };

    let calls = scenario(&launcher, "tools_call");
    assert_eq!(status(&calls, "tool-add-numbers"), "SUCCESS", "{calls:#?}");
    assert!(failures(&calls).is_empty(), "{calls:#?}");

    let retry = scenario(&launcher, "sse-retry");
    assert_eq!(status(&retry, "client-sse-graceful-reconnect"), "SUCCESS", "{retry:#?}");
    assert_eq!(status(&retry, "client-sse-last-event-id"), "SUCCESS", "{retry:#?}");
    // The suite times the reconnection itself; late on a loaded machine is its warning.
    assert_ne!(status(&retry, "client-sse-retry-timing"), "FAILURE", "{retry:#?}");

    let init = scenario(&launcher, "initialize");
    assert_eq!(failures(&init), ["mcp-client-initialization"], "{init:#?}");
    let details = &init.iter().find(|c| c["id"] == "mcp-client-initialization").unwrap()["details"];
    assert_eq!(details["clientName"], "nexbot", "{details}");
    assert_eq!(details["versionMatch"], false, "{details}");
    let (sent, expected) =
        (details["protocolVersionSent"].as_str(), details["expectedSpecVersion"].as_str());
    assert!(sent > expected, "only a newer protocol version than the suite's: {details}");

    let elicitation = scenario(&launcher, "elicitation-sep1034-client-defaults");
    let general = elicitation
        .iter()
        .find(|c| c["id"] == "client-elicitation-sep1034-general")
        .expect("the general check");
    assert_eq!(general["status"], "FAILURE");
    assert!(general["errorMessage"].as_str().unwrap().contains("got 'decline'"), "{general}");
}
