//! A database of every earlier schema opens with today's code, migrates to the newest schema
//! and keeps its rows. The fixtures (`fixtures/schema-NN.sql`) are what each version wrote: its
//! migrations as they were in git at the time, with a chat, a task, a Telegram update, a job and
//! its run, a sealed secret, an egress rule and a skill hash where that version had the table
//! (`fixtures/generate.py` writes them). A regression guard: migrations never ran against a
//! file of an old version before, only against today's migrations cut short.

use std::path::{Path, PathBuf};

use nexbot_core::ChatRef;
use nexbot_store::jobs::JobCreator;
use nexbot_store::{Store, UpdateState, SCHEMA_VERSION};
use rusqlite::Connection;

fn fixture(version: i64) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/fixtures/schema-{version:02}.sql"))
}

fn temp_db(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("nxh-store-{tag}-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join("nexbot.db")
}

/// Every table, index and trigger as SQLite keeps its text, by name.
fn schema_of(path: &Path) -> Vec<(String, String, Option<String>)> {
    let conn = Connection::open(path).unwrap();
    let mut stmt = conn
        .prepare("SELECT type, name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' ORDER BY name")
        .unwrap();
    let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?))).unwrap();
    rows.map(Result::unwrap).collect()
}

fn user_version(path: &Path) -> i64 {
    Connection::open(path).unwrap().query_row("PRAGMA user_version", [], |r| r.get(0)).unwrap()
}

/// Each earlier schema has its fixture: a new migration needs the previous schema's file.
#[test]
fn every_earlier_schema_has_a_fixture() {
    for version in 1..SCHEMA_VERSION {
        assert!(
            fixture(version).exists(),
            "{} is missing: a database of schema {version} must keep opening; run \
             python3 store/tests/fixtures/generate.py (it writes the schema of the last commit \
             with {version} migrations) and commit the file",
            fixture(version).display()
        );
    }
}

#[tokio::test]
async fn a_database_of_every_earlier_schema_migrates_and_keeps_its_rows() {
    let fresh = temp_db("fresh");
    drop(Store::open(&fresh).await.unwrap());
    let newest = schema_of(&fresh);
    for version in 1..SCHEMA_VERSION {
        let path = temp_db(&format!("schema-{version}"));
        let sql = std::fs::read_to_string(fixture(version)).unwrap();
        Connection::open(&path).unwrap().execute_batch(&sql).unwrap();
        assert_eq!(user_version(&path), version, "the fixture's own version");

        let store = Store::open(&path)
            .await
            .unwrap_or_else(|e| panic!("a database of schema {version} does not open: {e}"));
        check_rows(&store, version).await;
        drop(store);

        assert_eq!(user_version(&path), SCHEMA_VERSION, "schema {version} migrated to the newest");
        assert_eq!(
            schema_of(&path),
            newest,
            "schema {version} migrated: tables as a new database's"
        );
        // Opening again migrates nothing and loses nothing.
        check_rows(&Store::open(&path).await.unwrap(), version).await;
        let _ = std::fs::remove_dir_all(path.parent().unwrap());
    }
    let _ = std::fs::remove_dir_all(fresh.parent().unwrap());
}

/// The fixture's rows, read through the store's API as the daemon reads them.
async fn check_rows(store: &Store, version: i64) {
    let at = |v: i64| version >= v;
    // Schema 1 named the console's chat `console`; migration 2 renamed it.
    let chat: ChatRef = if at(2) { ChatRef::Telegram(42) } else { ChatRef::default_console() };
    let ctx = format!("schema {version}");
    assert_eq!(store.active_session(&chat).await.unwrap(), 1, "{ctx}: the chat's session");
    let history = store.history(1, 10).await.unwrap();
    let texts: Vec<&str> = history.iter().map(|h| h.content.as_str()).collect();
    assert_eq!(texts, ["what is on my calendar?", "Two meetings, at 10 and at 14."], "{ctx}");
    assert_eq!(store.todos(1).await.unwrap()[0].text, "book the train", "{ctx}");
    assert_eq!(store.setting(&chat, "agent_mode").await.unwrap().as_deref(), Some("off"), "{ctx}");

    let tasks = store.tasks(&chat).await.unwrap();
    assert_eq!(tasks.len(), 1, "{ctx}: {tasks:?}");
    assert_eq!((tasks[0].id.as_str(), tasks[0].prompt_tokens), ("3f1c9a2e", 300), "{ctx}");
    assert_eq!(tasks[0].egress.is_some(), at(3), "{ctx}: the egress summary from schema 3");
    assert_eq!(tasks[0].receipt.is_some(), at(13), "{ctx}: the receipt from schema 13");

    if at(4) {
        let answered = store.updates(UpdateState::Answered).await.unwrap();
        assert_eq!(answered.len(), 1, "{ctx}: the Telegram ledger");
        assert_eq!(answered[0].text, "what is on my calendar?", "{ctx}");
        assert_eq!(store.telegram_offset().await.unwrap(), Some(701), "{ctx}: the offset");
    }
    if at(6) {
        let job = store.job(1).await.unwrap().unwrap_or_else(|| panic!("{ctx}: job 1 is gone"));
        assert_eq!((job.name.as_str(), job.cron.as_deref()), ("morning", Some("0 0 9 * * *")));
        let creator = if at(8) { JobCreator::Operator } else { JobCreator::Unknown };
        assert_eq!(job.created_by, creator, "{ctx}");
        let runs = store.job_runs(Some(1), 10).await.unwrap();
        assert_eq!(runs.len(), 1, "{ctx}: the job's run");
        assert_eq!((runs[0].prompt_tokens, runs[0].completion_tokens), (80, 8), "{ctx}");
        assert!(store.active_jobs(Some(&chat)).await.unwrap().iter().any(|j| j.id == 1));
    }
    if at(7) {
        let (meta, secrets) = store.vault_contents().await.unwrap();
        assert_eq!(meta.unwrap().salt, (0..16).collect::<Vec<u8>>(), "{ctx}: the vault's salt");
        assert_eq!(secrets.len(), 1, "{ctx}: the sealed secret");
        let secret = &secrets[0];
        assert_eq!((secret.scope.as_str(), secret.name.as_str()), ("telegram:42", "GITHUB_TOKEN"));
        assert_eq!((secret.sealed.len(), secret.hosts.as_str()), (48, r#"["api.github.com"]"#));
        assert!(!secret.confirm, "{ctx}: a secret stored before --confirm does not ask");
    }
    if at(9) {
        let rules = store.egress_rules(None).await.unwrap();
        assert_eq!(rules.len(), 1, "{ctx}: the egress rule");
        assert_eq!((rules[0].host.as_str(), rules[0].port), ("api.github.com", 443));
    }
    if at(10) {
        let hashes = store.skill_hashes().await.unwrap();
        assert!(hashes.get("weather").is_some_and(|h| h.starts_with("sha256:")), "{ctx}");
    }
}
