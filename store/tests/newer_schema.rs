//! A database written by a newer nexbot (a schema above [`SCHEMA_VERSION`]) is refused with
//! both versions and what to do, and left as it was: not one byte of the file changes (no WAL
//! switch, no checkpoint of the newer daemon's WAL, no migration), so the newer version, or the
//! operator's restore, finds it as it was.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use nexbot_store::{Store, StoreError, SCHEMA_VERSION};
use rusqlite::config::DbConfig;
use rusqlite::Connection;

fn temp_db(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("nxh-store-{tag}-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join("nexbot.db")
}

/// The file's bytes and modification time.
fn snapshot(path: &Path) -> (Vec<u8>, SystemTime) {
    (std::fs::read(path).unwrap(), std::fs::metadata(path).unwrap().modified().unwrap())
}

fn wal(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push("-wal");
    name.into()
}

/// Refused with words naming both versions and the way out.
async fn assert_refused(path: &Path, found: i64) {
    let err = Store::open(path).await.unwrap_err();
    assert!(
        matches!(err, StoreError::TooNew { found: f, known, .. } if f == found && known == SCHEMA_VERSION),
        "{err:?}"
    );
    let text = err.to_string();
    for words in [
        format!(
            "written by a newer nexbot (schema {found}; this build knows up to {SCHEMA_VERSION})"
        ),
        "left untouched".to_owned(),
        "run that newer version, or restore a backup made by this one".to_owned(),
    ] {
        assert!(text.contains(&words), "{words:?} not in: {text}");
    }
}

/// A newer database in rollback-journal mode (a copy made by `sqlite3 .backup`, say): the
/// WAL switch alone would rewrite its header.
#[tokio::test]
async fn a_newer_schema_is_refused_and_its_file_left_as_it_was() {
    let path = temp_db("newer-rollback");
    let newer = SCHEMA_VERSION + 2;
    {
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch("CREATE TABLE future (x TEXT); INSERT INTO future VALUES ('kept');")
            .unwrap();
        conn.pragma_update(None, "user_version", newer).unwrap();
    }
    let before = snapshot(&path);
    assert_refused(&path, newer).await;
    // Twice: a daemon restarted in a loop changes nothing either.
    assert_refused(&path, newer).await;
    assert!(snapshot(&path) == before, "the refused file changed");
    assert!(!wal(&path).exists(), "a WAL was left beside the refused file");
    let conn = Connection::open(&path).unwrap();
    let kept: String = conn.query_row("SELECT x FROM future", [], |r| r.get(0)).unwrap();
    assert_eq!(kept, "kept");
    let _ = std::fs::remove_dir_all(path.parent().unwrap());
}

/// A newer daemon stopped with commits still in its WAL (killed, or the schema change not yet
/// checkpointed): the main file says an older schema, the WAL the newer one. Closing a
/// read-write connection would checkpoint that WAL into the main file.
#[tokio::test]
async fn a_newer_schema_still_in_the_wal_is_refused_and_nothing_is_checkpointed() {
    let path = temp_db("newer-wal");
    drop(Store::open(&path).await.unwrap());
    let newer = SCHEMA_VERSION + 1;
    {
        let conn = Connection::open(&path).unwrap();
        conn.set_db_config(DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, true).unwrap();
        conn.execute_batch("CREATE TABLE future (x TEXT); INSERT INTO future VALUES ('kept');")
            .unwrap();
        conn.pragma_update(None, "user_version", newer).unwrap();
    }
    assert!(std::fs::metadata(wal(&path)).unwrap().len() > 0, "the newer commits are in the WAL");
    let (main, wal_bytes) = (snapshot(&path), std::fs::read(wal(&path)).unwrap());
    assert_refused(&path, newer).await;
    assert!(snapshot(&path) == main, "the main file changed (the WAL was checkpointed into it)");
    assert!(std::fs::read(wal(&path)).unwrap() == wal_bytes, "the newer daemon's WAL changed");
    let conn = Connection::open(&path).unwrap();
    let version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0)).unwrap();
    assert_eq!(version, newer, "what the newer daemon committed is still there");
    let _ = std::fs::remove_dir_all(path.parent().unwrap());
}
