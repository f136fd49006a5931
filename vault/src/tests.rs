//! The vault against a real SQLite file: what is on disk, wrong keys, moved rows, rotation.

use super::*;
use nexbot_agent::exits::Exit;

const VALUE: &str = "ghp_PLANTED_vault_value_0123456789";
const MASTER: &str = "master-key-for-tests-0123456789";

fn secret(text: &str) -> SecretString {
    SecretString::from(text.to_owned())
}

fn chat(id: i64) -> SecretScope {
    SecretScope::Chat(ChatRef::Telegram(id))
}

fn temp_dir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("nxh-vault-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

async fn store(dir: &std::path::Path) -> Store {
    Store::open(&dir.join("nexbot.db")).await.unwrap()
}

/// Every byte of the database file, its WAL and shared memory.
fn database_bytes(dir: &std::path::Path) -> Vec<u8> {
    let mut all = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        all.extend(std::fs::read(entry.unwrap().path()).unwrap_or_default());
    }
    all
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle.as_bytes())
}

#[tokio::test]
async fn values_are_stored_sealed_and_read_back_after_a_restart() {
    let dir = temp_dir();
    let master = secret(MASTER);
    let vault = Vault::open(store(&dir).await, Some(&master), None).await.unwrap();
    assert_eq!(vault.state(), &VaultState::On);
    let info = vault
        .set(&chat(1), "GITHUB_TOKEN", secret(VALUE), &["API.github.com".into()], &[], None)
        .await
        .unwrap();
    assert_eq!(info.hosts, ["https://api.github.com:443 header:authorization"]);
    assert_eq!(info.mode, Mode::Proxy);
    let stdin = vault
        .set(&chat(1), "PLAIN", secret("another-value-42"), &[], &[], Some(Mode::Stdin))
        .await
        .unwrap();
    assert_eq!(stdin.mode, Mode::Stdin);
    drop(vault);

    let bytes = database_bytes(&dir);
    assert!(!contains(&bytes, VALUE), "the database holds the value in plain text");
    assert!(!contains(&bytes, MASTER));
    assert!(contains(&bytes, "GITHUB_TOKEN"), "positive control: names are stored plain");

    let vault = Vault::open(store(&dir).await, Some(&master), None).await.unwrap();
    let resolved = vault.resolve(&chat(1), "GITHUB_TOKEN").unwrap();
    assert_eq!(resolved.value.expose_secret(), VALUE);
    assert_eq!(resolved.mode, Mode::Proxy);
    assert!(!format!("{resolved:?}{vault:?}").contains(VALUE));
    // Another chat has none, and the error lists what that chat has (nothing).
    let err = vault.resolve(&chat(2), "GITHUB_TOKEN").unwrap_err().to_string();
    assert!(
        err.contains("no secret named GITHUB_TOKEN in chat telegram:2 (none is stored)"),
        "{err}"
    );
    let err = vault.resolve(&chat(1), "NOPE").unwrap_err().to_string();
    assert!(err.contains("(stored: GITHUB_TOKEN, PLAIN)"), "{err}");
    assert!(vault.delete(&chat(1), "PLAIN").await.unwrap());
    assert!(!vault.delete(&chat(1), "PLAIN").await.unwrap());
    assert_eq!(vault.list(Some(&chat(1))).len(), 1);
}

#[tokio::test]
async fn a_wrong_master_key_fails_clearly_and_a_moved_row_does_not_decrypt() {
    let dir = temp_dir();
    let store = store(&dir).await;
    let vault = Vault::open(store.clone(), Some(&secret(MASTER)), None).await.unwrap();
    vault.set(&chat(1), "TOKEN", secret(VALUE), &[], &[], Some(Mode::Stdin)).await.unwrap();
    vault
        .set(&chat(2), "OTHER", secret("chat-two-value-99"), &[], &[], Some(Mode::Stdin))
        .await
        .unwrap();
    let hosts = ["api.example".to_owned()];
    vault.set(&chat(2), "BOUND", secret("chat-two-bound-77"), &hosts, &[], None).await.unwrap();
    drop(vault);

    let wrong = Vault::open(store.clone(), Some(&secret("a-different-master-key-000")), None)
        .await
        .unwrap();
    assert_eq!(wrong.state(), &VaultState::WrongKey);
    let err = wrong.resolve(&chat(1), "TOKEN").unwrap_err().to_string();
    assert!(err.contains("NEXBOT_MASTER_KEY is not the key this vault was written with"), "{err}");
    assert!(!err.contains(VALUE));
    // Storing with the wrong key would mix two keys in one vault: refused.
    let err = wrong
        .set(&chat(1), "NEW", secret("new-value-123"), &[], &[], Some(Mode::Stdin))
        .await
        .unwrap_err();
    assert!(matches!(err, VaultError::WrongKey), "{err}");
    // Listing still works, and says why the value is unusable.
    let listed = wrong.list(Some(&chat(1)));
    assert!(listed[0].unreadable.as_deref().unwrap().contains("NEXBOT_MASTER_KEY"));

    // Chat 2's row moved to chat 1 (an attacker with the database file): does not open.
    tamper(&store, "OTHER", |row| {
        row.scope = "telegram:1".into();
        row.name = "STOLEN".into();
    })
    .await;
    let vault = Vault::open(store.clone(), Some(&secret(MASTER)), None).await.unwrap();
    assert_eq!(vault.resolve(&chat(1), "TOKEN").unwrap().value.expose_secret(), VALUE);
    let err = vault.resolve(&chat(1), "STOLEN").unwrap_err().to_string();
    assert!(err.contains("altered, moved to another chat or name, or is corrupt"), "{err}");
    // Switched to stdin mode (which would ship the value into containers) or re-pointed at
    // another host by a write to the file: the binding is sealed in, so it does not open; nor
    // does a binding that does not parse (it fails closed).
    assert_eq!(
        vault.resolve(&chat(2), "BOUND").unwrap().hosts[0].to_string(),
        "https://api.example:443 header:authorization"
    );
    type Change = (&'static str, fn(&mut SealedRow));
    let changes: [Change; 3] = [
        ("mode stdin", |row| row.mode = "stdin".into()),
        ("hosts evil.example", |row| {
            row.mode = "proxy".into();
            row.hosts = "[\"evil.example\"]".into();
        }),
        ("hosts not json", |row| row.hosts = "not json".into()),
    ];
    for (change, how) in changes {
        tamper(&store, "BOUND", how).await;
        let reopened = Vault::open(store.clone(), Some(&secret(MASTER)), None).await.unwrap();
        let resolved = reopened.resolve(&chat(2), "BOUND");
        assert!(matches!(resolved, Err(VaultError::Corrupt { .. })), "{change}: {resolved:?}");
    }
    // A flipped byte: the same.
    tamper(&store, "TOKEN", |row| row.sealed = vec![0; 40]).await;
    let vault = Vault::open(store, Some(&secret(MASTER)), None).await.unwrap();
    assert!(matches!(vault.resolve(&chat(1), "TOKEN"), Err(VaultError::Corrupt { .. })));
}

#[tokio::test]
async fn without_a_usable_master_key_the_vault_is_off_and_says_why() {
    let dir = temp_dir();
    for (master, says) in
        [(None, "NEXBOT_MASTER_KEY is not set"), (Some(secret("short")), "shorter than 16")]
    {
        let vault = Vault::open(store(&dir).await, master.as_ref(), None).await.unwrap();
        let err = vault
            .set(&chat(1), "TOKEN", secret(VALUE), &[], &[], Some(Mode::Stdin))
            .await
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("the secrets vault is off") && err.contains(says), "{err}");
    }
}

#[tokio::test]
async fn bad_names_values_hosts_and_modes_are_refused_by_name() {
    let dir = temp_dir();
    let vault = Vault::open(store(&dir).await, Some(&secret(MASTER)), None).await.unwrap();
    let set = |name: &'static str, value: &'static str, hosts: Vec<&'static str>, mode| {
        let vault = vault.clone();
        async move {
            let hosts: Vec<String> = hosts.into_iter().map(str::to_owned).collect();
            vault
                .set(&chat(1), name, secret(value), &hosts, &[], mode)
                .await
                .unwrap_err()
                .to_string()
        }
    };
    assert!(set("lower", VALUE, vec![], None).await.contains("invalid secret name \"lower\""));
    assert!(set("SHORT", "1234567", vec![], None).await.contains("this one is 7 bytes"));
    let long: &'static str = Box::leak("x".repeat(8 * 1024 + 1).into_boxed_str());
    assert!(set("LONG", long, vec![], None).await.contains("8 KiB"));
    assert!(set("HOST", VALUE, vec!["*"], None).await.contains("no binding"));
    assert!(set("HOST", VALUE, vec!["not a host"], None).await.contains("invalid host"));
    for suffix in ["*.com", "*.github.io", "co.uk"] {
        let err = set("HOST", VALUE, vec![suffix], None).await;
        assert!(err.contains("public suffix"), "{suffix}: {err}");
    }
    assert!(set("PROXY", VALUE, vec![], Some(Mode::Proxy)).await.contains("--mode stdin"));
    // No host and no mode: asked for, never silently handed to the container.
    let err = set("UNBOUND", VALUE, vec![], None).await;
    assert!(err.contains("names no host") && err.contains("--mode stdin"), "{err}");
    let err = vault
        .set(
            &chat(1),
            "PLACE",
            secret(VALUE),
            &["api.example.com".into()],
            &["cookie".into()],
            None,
        )
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("invalid place \"cookie\""), "{err}");
    let info = vault
        .set(
            &chat(1),
            "TG",
            secret(VALUE),
            &["api.telegram.org".into()],
            &["path:/bot".into()],
            None,
        )
        .await
        .unwrap();
    assert_eq!(info.hosts, ["https://api.telegram.org:443 path:/bot"]);
}

/// A secret stored before bindings named places (its hosts a bare pattern, sealed with it)
/// still opens and stays a legacy binding — anywhere in a request to its host, as before (the
/// egress's `egress_secrets.rs` runs such a binding through the proxy); the daemon logs a
/// warning naming it when it opens the vault.
#[tokio::test]
async fn a_binding_stored_before_places_keeps_working_as_a_legacy_one() {
    let dir = temp_dir();
    let store = store(&dir).await;
    let vault = Vault::open(store.clone(), Some(&secret(MASTER)), None).await.unwrap();
    vault
        .set(&chat(1), "OLD", secret(VALUE), &["api.example.com".into()], &[], None)
        .await
        .unwrap();
    drop(vault);
    // What an earlier version wrote: the bare host, sealed with it as the binding.
    let key = {
        let meta = store.vault_contents().await.unwrap().0.unwrap();
        crypto::VaultKey::derive(&secret(MASTER), &meta.kdf, &meta.salt).unwrap()
    };
    let hosts_json = "[\"api.example.com\"]".to_owned();
    let (nonce, sealed) = key
        .seal(&chat(1).key(), "OLD", &binding("proxy", &hosts_json, false), VALUE.as_bytes())
        .unwrap();
    tamper(&store, "OLD", move |row| {
        row.hosts = hosts_json;
        row.nonce = nonce;
        row.sealed = sealed;
    })
    .await;
    let vault = Vault::open(store, Some(&secret(MASTER)), None).await.unwrap();
    let old = vault.resolve(&chat(1), "OLD").unwrap();
    assert_eq!(old.value.expose_secret(), VALUE);
    assert_eq!(old.hosts[0].to_string(), "api.example.com");
    assert!(old.hosts[0].is_legacy());
}

/// A legacy binding over a public suffix (a bare `*.github.io`, `*.com`, `co.uk` stored by an
/// earlier version, which skipped the check a new binding gets) is not honoured: using the
/// secret is refused with an error naming it, the binding and the command that narrows it.
/// A fine legacy binding beside it keeps working.
#[tokio::test]
async fn a_legacy_binding_over_a_public_suffix_is_refused_at_use_naming_the_fix() {
    let dir = temp_dir();
    let store = store(&dir).await;
    let master = secret(MASTER);
    for (name, host) in [("PAGES", "*.github.io"), ("DOTCOM", "*.com"), ("UK", "co.uk")] {
        legacy::store_legacy_row(&store, &master, &chat(1), name, VALUE, &[host]).await;
    }
    legacy::store_legacy_row(&store, &master, &chat(1), "FINE", VALUE, &["api.example.com"]).await;
    let vault = Vault::open(store, Some(&master), None).await.unwrap();
    for (name, suffix) in [("PAGES", "github.io"), ("DOTCOM", "com"), ("UK", "co.uk")] {
        let err = vault.resolve(&chat(1), name).unwrap_err();
        assert!(matches!(err, VaultError::LegacyBinding { .. }), "{name}: {err}");
        let text = err.to_string();
        assert!(text.contains(&format!("secret {name} of chat telegram:1")), "{text}");
        assert!(text.contains(&format!("public suffix \"{suffix}\"")), "{text}");
        let fix = format!("nexbot-ctl secrets set {name} --chat telegram:1 --host HOST");
        assert!(text.contains(&fix), "{text}");
        assert!(!text.contains(VALUE), "{text}");
    }
    let fine = vault.resolve(&chat(1), "FINE").unwrap();
    assert_eq!(fine.value.expose_secret(), VALUE);
    assert!(fine.hosts[0].is_legacy());
    let listed = vault.legacy_bindings();
    assert_eq!(listed.len(), 4, "{listed:?}");
    let pages = listed.iter().find(|l| l.name == "PAGES").unwrap();
    assert_eq!(pages.host, "*.github.io");
    assert!(pages.refused.as_deref().is_some_and(|r| r.contains("github.io")), "{pages:?}");
    let fine = listed.iter().find(|l| l.name == "FINE").unwrap();
    assert_eq!(fine.refused, None);
    assert!(fine.narrow.contains("--chat telegram:1 --host api.example.com"), "{fine:?}");
}

/// Setting a legacy secret again with `--host` replaces its bindings: the migration is that
/// one command. The new binding is https on 443 in the `Authorization` header, kept across a
/// restart, and the secret is no longer listed as legacy (nor refused, for one that was).
#[tokio::test]
async fn setting_a_legacy_secret_again_with_a_host_narrows_it() {
    let dir = temp_dir();
    let store = store(&dir).await;
    let master = secret(MASTER);
    legacy::store_legacy_row(
        &store,
        &master,
        &SecretScope::Operator,
        "OLD",
        VALUE,
        &["api.example.com"],
    )
    .await;
    legacy::store_legacy_row(&store, &master, &chat(1), "PAGES", VALUE, &["*.github.io"]).await;
    let vault = Vault::open(store.clone(), Some(&master), None).await.unwrap();
    assert_eq!(vault.legacy_bindings().len(), 2);
    let hosts = ["api.example.com".to_owned()];
    let info =
        vault.set(&SecretScope::Operator, "OLD", secret(VALUE), &hosts, &[], None).await.unwrap();
    assert_eq!(info.hosts, ["https://api.example.com:443 header:authorization"]);
    let pages = ["me.github.io".to_owned()];
    vault.set(&chat(1), "PAGES", secret(VALUE), &pages, &[], None).await.unwrap();
    assert_eq!(vault.legacy_bindings(), []);
    drop(vault);
    let vault = Vault::open(store, Some(&master), None).await.unwrap();
    assert_eq!(vault.legacy_bindings(), []);
    let old = vault.resolve(&SecretScope::Operator, "OLD").unwrap();
    assert!(!old.hosts[0].is_legacy());
    assert_eq!(old.hosts[0].to_string(), "https://api.example.com:443 header:authorization");
    let pages = vault.resolve(&chat(1), "PAGES").unwrap();
    assert_eq!(pages.hosts[0].to_string(), "https://me.github.io:443 header:authorization");
}

/// `--confirm` is kept across a restart, needs proxy mode, and is sealed in: a database
/// write that drops it leaves the value unusable rather than unconfirmed.
#[tokio::test]
async fn confirm_is_stored_sealed_in_and_needs_proxy_mode() {
    let dir = temp_dir();
    let store = store(&dir).await;
    let vault = Vault::open(store.clone(), Some(&secret(MASTER)), None).await.unwrap();
    let hosts = ["api.example.com".to_owned()];
    let bind = Bind { hosts: &hosts, places: &[], mode: None, confirm: true };
    let info = vault.set_bound(&chat(1), "ASKED", secret(VALUE), bind).await.unwrap();
    assert!(info.confirm);
    vault.set(&chat(1), "PLAIN", secret(VALUE), &hosts, &[], None).await.unwrap();
    let stdin = Bind { mode: Some(Mode::Stdin), confirm: true, ..Bind::default() };
    let err = vault.set_bound(&chat(1), "NOPE", secret(VALUE), stdin).await.unwrap_err();
    assert!(matches!(err, VaultError::ConfirmNeedsProxy(_)), "{err}");
    drop(vault);
    let vault = Vault::open(store.clone(), Some(&secret(MASTER)), None).await.unwrap();
    assert!(vault.resolve(&chat(1), "ASKED").unwrap().confirm);
    assert!(!vault.resolve(&chat(1), "PLAIN").unwrap().confirm);
    drop(vault);
    tamper(&store, "ASKED", |row| row.confirm = false).await;
    let vault = Vault::open(store, Some(&secret(MASTER)), None).await.unwrap();
    let err = vault.resolve(&chat(1), "ASKED").unwrap_err();
    assert!(matches!(err, VaultError::Corrupt { .. }), "{err}");
}

#[tokio::test]
async fn rotating_the_master_key_re_encrypts_everything_or_nothing() {
    let dir = temp_dir();
    let store = store(&dir).await;
    let (old, new) = (secret(MASTER), secret("the-new-master-key-abcdefgh"));
    let vault = Vault::open(store.clone(), Some(&old), None).await.unwrap();
    vault.set(&chat(1), "A_TOKEN", secret(VALUE), &[], &[], Some(Mode::Stdin)).await.unwrap();
    vault
        .set(
            &SecretScope::Operator,
            "SEARCH_KEY",
            secret("operator-search-key-1"),
            &["search.example.com".into()],
            &[],
            None,
        )
        .await
        .unwrap();
    drop(vault);
    let before = sealed_of(&store, "A_TOKEN").await;

    // A wrong "old" key changes nothing.
    let err = rotate_master_key(&store, &secret("not-the-old-key-at-all"), &new).await.unwrap_err();
    assert!(matches!(err, VaultError::WrongKey));
    assert_eq!(rotate_master_key(&store, &old, &new).await.unwrap(), 2);
    let after = sealed_of(&store, "A_TOKEN").await;
    assert_ne!(before, after);

    let vault = Vault::open(store.clone(), Some(&new), None).await.unwrap();
    assert_eq!(vault.resolve(&chat(1), "A_TOKEN").unwrap().value.expose_secret(), VALUE);
    assert_eq!(
        vault.resolve(&SecretScope::Operator, "SEARCH_KEY").unwrap().hosts[0].to_string(),
        "https://search.example.com:443 header:authorization"
    );
    let stale = Vault::open(store, Some(&old), None).await.unwrap();
    assert_eq!(stale.state(), &VaultState::WrongKey);
}

#[tokio::test]
async fn the_exit_scanner_follows_what_the_vault_holds() {
    let dir = temp_dir();
    let exits = Exits::new([]);
    let vault =
        Vault::open(store(&dir).await, Some(&secret(MASTER)), Some(exits.clone())).await.unwrap();
    vault.set(&chat(1), "TOKEN", secret(VALUE), &[], &[], Some(Mode::Stdin)).await.unwrap();
    let text = format!("here: {VALUE}");
    assert_eq!(exits.scan(nexbot_agent::exits::Exit::Chat, None, &text), "here: [REDACTED:TOKEN]");
    let held = vault.resolve(&chat(1), "TOKEN").unwrap().hold;
    vault.delete(&chat(1), "TOKEN").await.unwrap();
    // A deleted value stays scanned for while a task given it may still run, and not after
    // (a_retired_value_leaves_the_scan_when_the_last_task_holding_it_ends).
    assert_eq!(exits.scan(nexbot_agent::exits::Exit::Chat, None, &text), "here: [REDACTED:TOKEN]");
    drop(held);
    vault.release();
    assert_eq!(exits.scan(nexbot_agent::exits::Exit::Chat, None, &text), text);
    let restarted = Exits::new([]);
    Vault::open(store(&dir).await, Some(&secret(MASTER)), Some(restarted.clone())).await.unwrap();
    assert_eq!(restarted.scan(nexbot_agent::exits::Exit::Chat, None, &text), text);
}

/// Issue 25: a scope holds at most `vault.max_secrets_per_scope` secrets; one more is refused
/// with an error that names the scope, the cap and the setting. Replacing one is allowed, and
/// other scopes are not affected.
#[tokio::test]
async fn a_scope_holds_at_most_its_cap_of_secrets() {
    let dir = temp_dir();
    let vault = Vault::open(store(&dir).await, Some(&secret(MASTER)), None).await.unwrap();
    vault.set_max_per_scope(2);
    for name in ["ONE", "TWO"] {
        vault
            .set(&chat(1), name, secret("value-long-enough-1"), &[], &[], Some(crate::Mode::Stdin))
            .await
            .unwrap();
    }
    let err = vault
        .set(&chat(1), "THREE", secret("value-long-enough-3"), &[], &[], Some(crate::Mode::Stdin))
        .await;
    let err = err.unwrap_err();
    assert!(matches!(err, VaultError::TooMany { cap: 2, .. }), "{err:?}");
    let text = err.to_string();
    for part in ["chat telegram:1", "2 secrets", "vault.max_secrets_per_scope"] {
        assert!(text.contains(part), "{part} missing: {text}");
    }
    assert!(!text.contains("value-long-enough"), "{text}");
    assert_eq!(vault.list(Some(&chat(1))).len(), 2, "nothing stored");
    crate::set_stdin(&vault, &chat(1), "TWO", "value-long-enough-2b").await;
    crate::set_stdin(&vault, &chat(2), "THREE", "value-long-enough-3").await;
    crate::set_stdin(&vault, &SecretScope::Operator, "OPS", "value-long-enough-4").await;
    // The default lets an existing configuration go on as before.
    assert_eq!(VaultConfig::default().max_secrets_per_scope, 256);
}

/// Issue 25: a changed or deleted value stays in the exit scan while a running task holds it
/// (its process may still print it), and leaves when the last one lets go: before, every
/// retired value stayed in every scan for the daemon's life. One no task holds leaves at once.
#[tokio::test]
async fn a_retired_value_leaves_the_scan_when_the_last_task_holding_it_ends() {
    let dir = temp_dir();
    let exits = nexbot_agent::exits::Exits::new(std::iter::empty());
    let vault =
        Vault::open(store(&dir).await, Some(&secret(MASTER)), Some(exits.clone())).await.unwrap();
    let seven = ChatRef::Telegram(7);
    let scanned =
        |value: &str| exits.scan(nexbot_agent::exits::Exit::Chat, Some(&seven), value) != value;
    let (old, new) = ("tok-PLANTED-old-value-111", "tok-PLANTED-new-value-222");
    vault.set(&chat(7), "TOKEN", secret(old), &[], &[], Some(crate::Mode::Stdin)).await.unwrap();
    // Two tasks hold the old value.
    let first = vault.resolve(&chat(7), "TOKEN").unwrap();
    let second = vault.resolve(&chat(7), "TOKEN").unwrap();
    vault.set(&chat(7), "TOKEN", secret(new), &[], &[], Some(crate::Mode::Stdin)).await.unwrap();
    assert!(scanned(old) && scanned(new));
    assert_eq!(exits.scan(nexbot_agent::exits::Exit::Chat, Some(&seven), old), "[REDACTED:TOKEN]");
    drop(first.hold);
    vault.release();
    assert!(scanned(old), "the second task still holds it");
    drop(second.hold);
    vault.release();
    assert!(!scanned(old), "no task holds the old value: it left the scan");
    assert!(scanned(new));
    // Deleted and held by nobody: gone at once.
    vault.delete(&chat(7), "TOKEN").await.unwrap();
    assert!(!scanned(new));
}

/// Issue 25: what the relay scans a task's LLM calls for: every value of the task's chat
/// (named) and of the operator (unnamed), never another chat's.
#[tokio::test]
async fn a_chats_watched_values_are_its_own_and_the_operators() {
    let dir = temp_dir();
    let vault = Vault::open(store(&dir).await, Some(&secret(MASTER)), None).await.unwrap();
    crate::set_stdin(&vault, &chat(7), "MINE", "mine-PLANTED-value-1").await;
    crate::set_stdin(&vault, &chat(8), "THEIRS", "theirs-PLANTED-value-2").await;
    crate::set_stdin(&vault, &SecretScope::Operator, "OPS", "ops-PLANTED-value-3").await;
    let mut watched: Vec<(String, String)> = vault
        .watched(&ChatRef::Telegram(7))
        .into_iter()
        .map(|(name, value)| (name, value.expose_secret().to_owned()))
        .collect();
    watched.sort();
    assert_eq!(
        watched,
        [
            (String::new(), "ops-PLANTED-value-3".to_owned()),
            ("MINE".to_owned(), "mine-PLANTED-value-1".to_owned())
        ]
    );
}

/// Rewrites the stored row of `name` as an attacker with the database file would.
async fn tamper(store: &Store, name: &str, change: impl FnOnce(&mut SealedRow)) {
    let (_, rows) = store.vault_contents().await.unwrap();
    let mut row = rows.into_iter().find(|r| r.name == name).unwrap();
    let (scope, old_name) = (row.scope.clone(), row.name.clone());
    change(&mut row);
    store.delete_sealed(&scope, &old_name).await.unwrap();
    store.put_sealed(row).await.unwrap();
}

/// The ciphertext stored for `name`.
async fn sealed_of(store: &Store, name: &str) -> Vec<u8> {
    let (_, rows) = store.vault_contents().await.unwrap();
    rows.into_iter().find(|r| r.name == name).unwrap().sealed
}

#[tokio::test]
async fn decoys_are_offered_to_chats_beside_their_secrets_kept_across_restarts_and_step_aside() {
    let dir = temp_dir();
    let master = secret(MASTER);
    let names: Vec<String> =
        vec!["OPENAI_API_KEY".into(), "GITHUB_TOKEN".into(), "ACME_DEPLOY_TOKEN:stripe".into()];
    let exits = Exits::new(Vec::new());
    let vault = Vault::open(store(&dir).await, Some(&master), Some(exits.clone())).await.unwrap();
    assert_eq!(vault.plant_decoys(&names).await.unwrap(), 3);
    let own = vault.resolve(&chat(1), "ACME_DEPLOY_TOKEN").unwrap();
    assert!(own.value.expose_secret().starts_with("sk_live_"), "a name of the operator's");
    let decoy = vault.resolve(&chat(1), "OPENAI_API_KEY").unwrap();
    let value = decoy.value.expose_secret().to_owned();
    assert!(value.starts_with("sk-proj-"), "shaped like the provider's: {value}");
    assert_eq!(decoy.mode, Mode::Proxy);
    assert!(decoy.hosts.is_empty(), "bound nowhere");
    assert_eq!(
        decoy.decoy.as_deref(),
        Some("https://api.openai.com:443 header:authorization"),
        "shown bound where a real one would be"
    );
    assert!(!format!("{decoy:?}").contains(&value), "Debug shows no value");
    // Listed among a chat's names as its own are, indistinguishable.
    vault
        .set(&chat(1), "MINE", secret("my-own-value-123456"), &[], &[], Some(Mode::Stdin))
        .await
        .unwrap();
    let err = vault.resolve(&chat(1), "NOPE").unwrap_err().to_string();
    assert!(
        err.contains("(stored: ACME_DEPLOY_TOKEN, GITHUB_TOKEN, MINE, OPENAI_API_KEY)"),
        "{err}"
    );
    // Never the operator's; scanned for at the exits and in a chat's tasks' LLM calls.
    assert!(vault.resolve(&SecretScope::Operator, "OPENAI_API_KEY").is_err());
    assert!(vault.watched(&ChatRef::Telegram(1)).iter().any(|(n, _)| n == "OPENAI_API_KEY"));
    let said = exits.scan(Exit::Log, None, &format!("leaked {value}")).into_owned();
    assert!(!said.contains(&value), "{said}");
    assert!(status_line(&vault).ends_with("3 decoys planted"), "{}", status_line(&vault));
    // A chat's own secret of the same name wins.
    vault.set(&chat(2), "GITHUB_TOKEN", secret(VALUE), &[], &[], Some(Mode::Stdin)).await.unwrap();
    assert!(vault.resolve(&chat(2), "GITHUB_TOKEN").unwrap().decoy.is_none());
    drop(vault);

    // A restart keeps the values (a value taken before it is known after it); none planted
    // when the list is empty.
    let vault = Vault::open(store(&dir).await, Some(&master), None).await.unwrap();
    vault.plant_decoys(&names).await.unwrap();
    let again = vault.resolve(&chat(3), "OPENAI_API_KEY").unwrap();
    assert_eq!(again.value.expose_secret(), value);
    assert_eq!(vault.plant_decoys(&[]).await.unwrap(), 0);
    assert!(vault.resolve(&chat(3), "OPENAI_API_KEY").is_err());
    assert!(vault.plant_decoys(&["MY_KEY".into()]).await.is_err(), "an unknown kind is refused");
}
