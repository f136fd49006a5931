//! The schema version this build knows, and the guard that refuses a database written by a
//! newer nexbot before anything is written to it.
//!
//! Why a guard before the open: `Store::open` switches the file to WAL and migrates. Run on a
//! newer database, the WAL switch alone rewrites the file's header (a rollback-journal file),
//! and closing a read-write connection checkpoints whatever WAL the newer daemon left into the
//! main file. Either way the operator, told to run the newer version, would go back to a file
//! this build had changed. The guard reads `user_version` through a read-only connection that
//! never checkpoints, so a refused file keeps its bytes.

use std::path::Path;
use std::time::Duration;

use rusqlite::config::DbConfig;
use rusqlite::{Connection, OpenFlags};

use crate::{classify, StoreError, MIGRATIONS};

/// The newest schema this build writes (`PRAGMA user_version` after every migration).
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// `Err(TooNew)` when the database at `path` has a schema newer than [`SCHEMA_VERSION`]; a
/// missing or empty file (a new database) passes. Writes nothing to the main file.
pub(crate) fn refuse_newer(path: &Path) -> Result<(), StoreError> {
    match std::fs::metadata(path) {
        Ok(meta) if meta.len() > 0 => {}
        // New, or unreadable: the read-write open reports the latter with its reason.
        _ => return Ok(()),
    }
    let fail = |e| classify(path, e);
    let probe = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(fail)?;
    // A read-only connection cannot checkpoint anyway; this says so rather than relying on it.
    probe.set_db_config(DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, true).map_err(fail)?;
    probe.busy_timeout(Duration::from_secs(5)).map_err(fail)?;
    let found: i64 = probe.query_row("PRAGMA user_version", [], |r| r.get(0)).map_err(fail)?;
    if found > SCHEMA_VERSION {
        return Err(StoreError::TooNew { path: path.to_owned(), found, known: SCHEMA_VERSION });
    }
    Ok(())
}
