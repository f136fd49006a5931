//! `nexbot-ctl secrets set|ls|rm`, the real binary against the real `nexbot serve` (its
//! socket, its vault, its SQLite file): values piped on stdin are stored sealed, listed by
//! name only, removed; mistakes get the vault's message; and the values are hunted for
//! everywhere they must not be (ctl's output, the daemon's log, the database file and its
//! WAL). Without a master key, storing says to set NEXBOT_MASTER_KEY; with the wrong one the
//! listing says why each secret is unusable.
//!
//! Needs `nexbot-ctl` built next to `nexbot` (`cargo test --workspace` builds both; alone:
//! `cargo build -p nexbot-ctl`).

use crate::common;

use std::path::PathBuf;
use std::time::Duration;

use common::{base_env, ctl, echo, Serving, TempWorkspace};
use nexbot_tests::scripted_llm::ScriptedLlm;

const LIMIT: Duration = Duration::from_secs(60);
const MASTER_KEY: &str = "a-test-master-key-0123456789";
/// Values distinctive enough that finding one anywhere is a leak, not a coincidence.
const CHAT_VALUE: &str = "ctl-chat-value-6d0f3a91be27";
const OPERATOR_VALUE: &str = "ctl-operator-value-c84e17f05a93";

fn env_with(llm: &ScriptedLlm, master_key: Option<&str>) -> Vec<(String, String)> {
    let mut env = base_env(&llm.base_url());
    env.push(("NEXBOT_TELEGRAM__ENABLED".into(), "false".into()));
    // Everything the daemon logs, so the hunt below covers debug lines too.
    env.push(("RUST_LOG".into(), "debug".into()));
    if let Some(key) = master_key {
        env.push(("NEXBOT_MASTER_KEY".into(), key.into()));
    }
    env
}

/// The bytes of the database and its WAL and shared-memory files, as they are now.
fn database_bytes(ws: &TempWorkspace) -> Vec<(String, Vec<u8>)> {
    ["", "-wal", "-shm"]
        .iter()
        .filter_map(|suffix| {
            let path = PathBuf::from(format!("{}{suffix}", ws.database().display()));
            std::fs::read(&path).ok().map(|bytes| (path.display().to_string(), bytes))
        })
        .collect()
}

fn assert_no_value_in(what: &str, haystack: &[u8]) {
    for value in [CHAT_VALUE, OPERATOR_VALUE] {
        let found = haystack.windows(value.len()).any(|w| w == value.as_bytes());
        assert!(!found, "a secret's value is in {what}");
    }
}

// One end-to-end scenario on one expensive setup (containers, a daemon), its steps in
// order; split only by count it would not read better (test code only).
#[tokio::test]
#[allow(clippy::too_many_lines)]
async fn secrets_set_ls_rm_through_nexbot_ctl_keep_values_sealed_and_out_of_every_output() {
    let llm = ScriptedLlm::start(vec![]).await;
    llm.set_responder(echo);
    let ws = TempWorkspace::init("ctl-secrets");
    let env = env_with(&llm, Some(MASTER_KEY));
    let serving = Serving::start(&ws.config(), &env, LIMIT).await;
    serving.wait_log("the control API is on", LIMIT).await;
    let mut outputs = Vec::new();

    // A chat's secret bound to a host (proxy mode by default), the value with a line end.
    let ran = ctl(
        &ws,
        &["secrets", "set", "GH_TOKEN", "--chat", "telegram:42", "--host", "api.github.com"],
        &format!("{CHAT_VALUE}\n"),
    )
    .await;
    assert_eq!(ran.code, Some(0), "{ran:?}");
    assert_eq!(
        ran.stdout,
        "secret GH_TOKEN stored in telegram:42 (proxy mode, for https://api.github.com:443 \
         header:authorization)\n"
    );
    outputs.push(ran);
    // The operator's, piped without a line end (`printf %s`): stdin mode, bound to no host
    // (asked for by name: without a host and a mode nothing is stored, see below).
    let ran = ctl(
        &ws,
        &["secrets", "set", "SEARCH_KEY", "--operator", "--mode", "stdin"],
        OPERATOR_VALUE,
    )
    .await;
    assert_eq!(ran.code, Some(0), "{ran:?}");
    assert_eq!(ran.stdout, "secret SEARCH_KEY stored in operator (stdin mode)\n");
    outputs.push(ran);

    // The listing: every scope, names, modes and hosts, never a value.
    let ran = ctl(&ws, &["secrets", "ls"], "").await;
    assert_eq!(ran.code, Some(0), "{ran:?}");
    let lines: Vec<&str> = ran.stdout.lines().collect();
    // The decoys `nexbot init`'s config plants are counted, never listed.
    assert_eq!(lines[0], "vault: vault on, 2 stored, 4 decoys planted", "{ran:?}");
    assert!(lines[1].starts_with("SCOPE ") && lines[1].contains("HOSTS"), "{ran:?}");
    let row = |name: &str| lines.iter().find(|l| l.contains(name)).copied().unwrap_or_default();
    let gh: Vec<&str> = row("GH_TOKEN").split_whitespace().collect();
    assert_eq!(
        gh[..5],
        ["telegram:42", "GH_TOKEN", "proxy", "https://api.github.com:443", "header:authorization"],
        "{ran:?}"
    );
    assert_eq!(gh.last(), Some(&"yes"), "{ran:?}");
    let search: Vec<&str> = row("SEARCH_KEY").split_whitespace().collect();
    assert_eq!(search[..4], ["operator", "SEARCH_KEY", "stdin", "-"], "{ran:?}");
    outputs.push(ran);
    // `status` tells the vault as it is, once, not as a channel.
    let ran = ctl(&ws, &["status"], "").await;
    assert_eq!(ran.code, Some(0), "{ran:?}");
    let vault: Vec<&str> = ran.stdout.lines().filter(|l| l.contains("vault")).collect();
    assert_eq!(vault.len(), 1, "{ran:?}");
    assert!(
        vault[0].starts_with("vault:")
            && vault[0].ends_with("vault on, 2 stored, 4 decoys planted"),
        "{ran:?}"
    );
    outputs.push(ran);
    let ran = ctl(&ws, &["secrets", "ls", "--operator", "--json"], "").await;
    assert_eq!(ran.code, Some(0), "{ran:?}");
    let json: serde_json::Value = serde_json::from_str(&ran.stdout).expect("--json is JSON");
    assert_eq!(json["vault_on"], true);
    let listed = json["secrets"].as_array().expect("a list");
    assert_eq!(listed.len(), 1, "{ran:?}");
    assert_eq!(listed[0]["name"], "SEARCH_KEY");
    assert_eq!(listed[0]["mode"], "stdin");
    assert!(listed[0].get("value").is_none(), "{ran:?}");
    outputs.push(ran);

    // Mistakes: the vault's message (exit 1), clap's usage errors (exit 2), nothing stored.
    for (args, stdin, code, needle) in [
        (&["secrets", "set", "gh-token", "--operator"][..], CHAT_VALUE, 1, "invalid secret name"),
        (
            &["secrets", "set", "A_B", "--operator", "--host", "exa mple.com"],
            CHAT_VALUE,
            1,
            "invalid host",
        ),
        (
            &["secrets", "set", "A_B", "--operator", "--host", "*.github.io"],
            CHAT_VALUE,
            1,
            "public suffix",
        ),
        (&["secrets", "set", "A_B", "--operator"], CHAT_VALUE, 1, "names no host"),
        (
            &["secrets", "set", "A_B", "--operator", "--mode", "proxy"],
            CHAT_VALUE,
            1,
            "bound to no host",
        ),
        (&["secrets", "set", "A_B", "--chat", "nonsense"], CHAT_VALUE, 1, "invalid scope"),
        (&["secrets", "set", "A_B", "--operator"], "short\n", 1, "value must be 8 bytes"),
        (&["secrets", "set", "A_B", "--operator"], "", 1, "no value on stdin"),
        (&["secrets", "set", "A_B", "--operator"], "\n", 1, "no value on stdin"),
        (
            &["secrets", "set", "A_B", "--operator", "--chat", "telegram:42"],
            CHAT_VALUE,
            2,
            "cannot be used with",
        ),
        (&["secrets", "set", "A_B"], CHAT_VALUE, 2, "--operator"),
        (&["secrets", "rm", "A_B"], "", 2, "--operator"),
    ] {
        let ran = ctl(&ws, args, stdin).await;
        assert_eq!(ran.code, Some(code), "{args:?}: {ran:?}");
        assert!(ran.stderr.contains(needle), "{args:?}: {needle:?} missing: {ran:?}");
        assert!(ran.stdout.is_empty(), "{args:?}: {ran:?}");
        outputs.push(ran);
    }
    let ran = ctl(&ws, &["secrets", "ls", "--json"], "").await;
    let json: serde_json::Value = serde_json::from_str(&ran.stdout).expect("--json is JSON");
    assert_eq!(json["secrets"].as_array().map(Vec::len), Some(2), "nothing more stored: {ran:?}");

    // The hunt, while the daemon runs (the WAL holds the latest writes).
    let sealed: Vec<u8> = rusqlite::Connection::open(ws.database())
        .unwrap()
        .query_row("SELECT sealed FROM secrets WHERE name = 'SEARCH_KEY'", [], |r| r.get(0))
        .expect("the operator's secret is stored");
    assert!(sealed.len() > OPERATOR_VALUE.len(), "sealed with a tag");
    for (path, bytes) in database_bytes(&ws) {
        assert_no_value_in(&path, &bytes);
    }

    // Remove: gone from the listing; again is a 404 naming what is stored.
    let ran = ctl(&ws, &["secrets", "rm", "GH_TOKEN", "--chat", "telegram:42"], "").await;
    assert_eq!(ran.code, Some(0), "{ran:?}");
    assert_eq!(ran.stdout, "secret GH_TOKEN of chat telegram:42 deleted\n");
    let ran = ctl(&ws, &["secrets", "rm", "GH_TOKEN", "--chat", "telegram:42"], "").await;
    assert_eq!(ran.code, Some(1), "{ran:?}");
    assert!(
        ran.stderr.contains("no secret named GH_TOKEN in chat telegram:42 (none is stored)"),
        "{ran:?}"
    );
    let ran = ctl(&ws, &["secrets", "ls"], "").await;
    assert!(!ran.stdout.contains("GH_TOKEN") && ran.stdout.contains("SEARCH_KEY"), "{ran:?}");
    outputs.push(ran);

    let log = serving.stop(LIMIT).await;
    assert!(log.contains("secret stored"), "the vault logs what it stored, by name:\n{log}");
    assert_no_value_in("the daemon's log", log.as_bytes());
    for ran in &outputs {
        assert_no_value_in("nexbot-ctl's output", ran.stdout.as_bytes());
        assert_no_value_in("nexbot-ctl's output", ran.stderr.as_bytes());
    }
    // After a clean stop the WAL is checkpointed into the file: still sealed.
    for (path, bytes) in database_bytes(&ws) {
        assert_no_value_in(&path, &bytes);
    }

    // Another master key: the secret is listed as unusable, saying why; nothing is stored.
    let env = env_with(&llm, Some("another-master-key-9876543210"));
    let serving = Serving::start(&ws.config(), &env, LIMIT).await;
    serving.wait_log("the control API is on", LIMIT).await;
    let ran = ctl(&ws, &["secrets", "ls"], "").await;
    assert_eq!(ran.code, Some(0), "{ran:?}");
    assert!(ran.stdout.starts_with("vault: vault LOCKED"), "{ran:?}");
    assert!(
        ran.stdout.contains("SEARCH_KEY (operator): NEXBOT_MASTER_KEY is not the key"),
        "{ran:?}"
    );
    let ran = ctl(&ws, &["secrets", "set", "OTHER", "--operator"], OPERATOR_VALUE).await;
    assert_eq!(ran.code, Some(1), "{ran:?}");
    assert!(ran.stderr.contains("NEXBOT_MASTER_KEY is not the key"), "{ran:?}");
    assert_no_value_in("nexbot-ctl's output", ran.stderr.as_bytes());
    // Deleting needs no key (the way out the message offers).
    let ran = ctl(&ws, &["secrets", "rm", "SEARCH_KEY", "--operator"], "").await;
    assert_eq!(ran.code, Some(0), "{ran:?}");
    let log = serving.stop(LIMIT).await;
    assert_no_value_in("the daemon's log", log.as_bytes());
}

#[tokio::test]
async fn secrets_set_without_a_master_key_says_to_set_nexbot_master_key() {
    let llm = ScriptedLlm::start(vec![]).await;
    llm.set_responder(echo);
    let ws = TempWorkspace::init("ctl-secrets-nokey");
    let serving = Serving::start(&ws.config(), &env_with(&llm, None), LIMIT).await;
    serving.wait_log("the control API is on", LIMIT).await;
    let ran = ctl(&ws, &["secrets", "set", "SEARCH_KEY", "--operator"], OPERATOR_VALUE).await;
    assert_eq!(ran.code, Some(1), "{ran:?}");
    assert!(ran.stderr.starts_with("nexbot-ctl: error: the secrets vault is off"), "{ran:?}");
    assert!(ran.stderr.contains("NEXBOT_MASTER_KEY is not set"), "{ran:?}");
    assert_no_value_in("nexbot-ctl's output", ran.stderr.as_bytes());
    let ran = ctl(&ws, &["secrets", "ls"], "").await;
    assert_eq!(ran.code, Some(0), "{ran:?}");
    assert!(ran.stdout.starts_with("vault: vault off (NEXBOT_MASTER_KEY is not set"), "{ran:?}");
    let log = serving.stop(LIMIT).await;
    assert_no_value_in("the daemon's log", log.as_bytes());
    for (path, bytes) in database_bytes(&ws) {
        assert_no_value_in(&path, &bytes);
    }
}
