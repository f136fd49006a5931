//! The vault's rows (tables `secrets` and `vault_meta`, migration 3): sealed bytes only. Sealing,
//! opening and what a binding means are the host vault's; the store keeps what it is given.

use rusqlite::{params, OptionalExtension};

use crate::{unix_now, Store, StoreError};

/// One sealed secret as stored: its scope and name in clear (they are the row's key and part of
/// what the value is sealed to), the nonce and ciphertext, and the binding (`hosts` as JSON,
/// `mode`) that was sealed in with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SealedRow {
    pub scope: String,
    pub name: String,
    pub nonce: Vec<u8>,
    pub sealed: Vec<u8>,
    pub hosts: String,
    pub mode: String,
    pub updated_at: i64,
    /// Stored with `--confirm` (schema 10; earlier rows: `false`). Sealed in with the binding
    /// when set, so a write to the database cannot drop it.
    pub confirm: bool,
}

/// The vault's key-derivation parameters and the check value that tells a right master key
/// from a wrong one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VaultMeta {
    pub kdf: String,
    pub salt: Vec<u8>,
    pub check_nonce: Vec<u8>,
    pub check_sealed: Vec<u8>,
}

/// A value sealed again under a new key ([`Store::reseal_vault`]).
#[derive(Debug, Clone)]
pub struct Resealed {
    pub scope: String,
    pub name: String,
    pub nonce: Vec<u8>,
    pub sealed: Vec<u8>,
}

fn read_rows(conn: &rusqlite::Connection) -> rusqlite::Result<Vec<SealedRow>> {
    let mut stmt = conn.prepare(
        "SELECT scope, name, nonce, sealed, hosts, mode, updated_at, confirm FROM secrets
         ORDER BY scope, name",
    )?;
    let rows = stmt.query_map([], |r| {
        Ok(SealedRow {
            scope: r.get(0)?,
            name: r.get(1)?,
            nonce: r.get(2)?,
            sealed: r.get(3)?,
            hosts: r.get(4)?,
            mode: r.get(5)?,
            updated_at: r.get(6)?,
            confirm: r.get(7)?,
        })
    })?;
    rows.collect()
}

fn read_meta(conn: &rusqlite::Connection) -> rusqlite::Result<Option<VaultMeta>> {
    conn.query_row(
        "SELECT kdf, salt, check_nonce, check_sealed FROM vault_meta WHERE id = 1",
        [],
        |r| {
            Ok(VaultMeta {
                kdf: r.get(0)?,
                salt: r.get(1)?,
                check_nonce: r.get(2)?,
                check_sealed: r.get(3)?,
            })
        },
    )
    .optional()
}

impl Store {
    /// The vault's parameters (none before its first key) and every sealed row, read together.
    pub async fn vault_contents(&self) -> Result<(Option<VaultMeta>, Vec<SealedRow>), StoreError> {
        self.call(|c| Ok((read_meta(c)?, read_rows(c)?))).await
    }

    /// Records the vault's parameters when the first master key is set.
    pub async fn create_vault_meta(&self, meta: VaultMeta) -> Result<(), StoreError> {
        self.call(move |c| {
            c.execute(
                "INSERT INTO vault_meta (id, kdf, salt, check_nonce, check_sealed, created_at)
                 VALUES (1, ?1, ?2, ?3, ?4, ?5)",
                params![meta.kdf, meta.salt, meta.check_nonce, meta.check_sealed, unix_now()],
            )
        })
        .await
        .map(drop)
    }

    /// Stores `row` as given (a new secret, or a replacement of its scope and name).
    pub async fn put_sealed(&self, row: SealedRow) -> Result<(), StoreError> {
        self.call(move |c| {
            c.execute(
                "INSERT INTO secrets
                 (scope, name, nonce, sealed, hosts, mode, created_at, updated_at, confirm)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7, ?8)
                 ON CONFLICT (scope, name) DO UPDATE SET nonce = excluded.nonce,
                    sealed = excluded.sealed, hosts = excluded.hosts, mode = excluded.mode,
                    updated_at = excluded.updated_at, confirm = excluded.confirm",
                params![
                    row.scope,
                    row.name,
                    row.nonce,
                    row.sealed,
                    row.hosts,
                    row.mode,
                    row.updated_at,
                    row.confirm
                ],
            )
        })
        .await
        .map(drop)
    }

    /// Deletes a sealed row; `false` when there was none.
    pub async fn delete_sealed(&self, scope: &str, name: &str) -> Result<bool, StoreError> {
        let (scope, name) = (scope.to_owned(), name.to_owned());
        self.call(move |c| {
            c.execute("DELETE FROM secrets WHERE scope = ?1 AND name = ?2", params![scope, name])
        })
        .await
        .map(|n| n > 0)
    }

    /// Replaces the vault's parameters and every listed value in one transaction (a master key
    /// rotation): all of it, or nothing.
    pub async fn reseal_vault(
        &self,
        meta: VaultMeta,
        rows: Vec<Resealed>,
    ) -> Result<(), StoreError> {
        self.call(move |c| {
            let tx = c.transaction()?;
            tx.execute(
                "UPDATE vault_meta SET kdf = ?1, salt = ?2, check_nonce = ?3, check_sealed = ?4 WHERE id = 1",
                params![meta.kdf, meta.salt, meta.check_nonce, meta.check_sealed],
            )?;
            for row in &rows {
                tx.execute(
                    "UPDATE secrets SET nonce = ?1, sealed = ?2 WHERE scope = ?3 AND name = ?4",
                    params![row.nonce, row.sealed, row.scope, row.name],
                )?;
            }
            tx.commit()
        })
        .await
    }

    /// Plants a decoy `name` with `value` unless one of that name exists; the value kept.
    pub async fn plant_decoy(&self, name: &str, value: &str) -> Result<String, StoreError> {
        let (name, value) = (name.to_owned(), value.to_owned());
        self.call(move |c| {
            c.execute(
                "INSERT OR IGNORE INTO decoys (name, value, created_at) VALUES (?1, ?2, ?3)",
                params![name, value, unix_now()],
            )?;
            c.query_row("SELECT value FROM decoys WHERE name = ?1", params![name], |r| r.get(0))
        })
        .await
    }
}
