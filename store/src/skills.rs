//! Skills' contents the daemon trusts: the content hash first seen of each skill whose
//! declared `domains` are granted (migration 10), and the contents the operator allowed despite
//! the content screen (migration 14).
//!
//! Why stored: a skill whose content changed after it was first seen grants nothing until the
//! operator accepts the new content (`nexbot-ctl skills allow`), across restarts.

use rusqlite::params;

use crate::{unix_now, Store, StoreError};

impl Store {
    /// Records `hash` for skill `name` unless one is recorded: the first-seen content, whose
    /// declared destinations are granted. Returns the recorded hash (this one or the earlier).
    pub async fn record_first_skill_hash(
        &self,
        name: &str,
        hash: &str,
    ) -> Result<String, StoreError> {
        let (name, hash) = (name.to_owned(), hash.to_owned());
        self.call(move |c| {
            c.execute(
                "INSERT INTO skill_hashes (name, hash, recorded_at, recorded_by)
                 VALUES (?1, ?2, ?3, 'first seen') ON CONFLICT (name) DO NOTHING",
                params![name, hash, unix_now()],
            )?;
            c.query_row("SELECT hash FROM skill_hashes WHERE name = ?1", params![name], |r| {
                r.get(0)
            })
        })
        .await
    }

    /// Records `hash` as skill `name`'s accepted content, replacing any earlier one (the
    /// operator's `nexbot-ctl skills allow`).
    pub async fn set_skill_hash(&self, name: &str, hash: &str, by: &str) -> Result<(), StoreError> {
        let (name, hash, by) = (name.to_owned(), hash.to_owned(), by.to_owned());
        self.call(move |c| {
            c.execute(
                "INSERT INTO skill_hashes (name, hash, recorded_at, recorded_by)
                 VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (name) DO UPDATE SET hash = excluded.hash,
                 recorded_at = excluded.recorded_at, recorded_by = excluded.recorded_by",
                params![name, hash, unix_now(), by],
            )
            .map(drop)
        })
        .await
    }

    /// Records that the operator allowed skill `name`'s content `hash` despite the content
    /// screen (again: nothing changes).
    pub async fn allow_skill_content(
        &self,
        name: &str,
        hash: &str,
        by: &str,
    ) -> Result<(), StoreError> {
        let (name, hash, by) = (name.to_owned(), hash.to_owned(), by.to_owned());
        self.call(move |c| {
            c.execute(
                "INSERT INTO skill_allowances (hash, name, allowed_at, allowed_by)
                 VALUES (?1, ?2, ?3, ?4) ON CONFLICT (hash) DO NOTHING",
                params![hash, name, unix_now(), by],
            )
            .map(drop)
        })
        .await
    }

    /// Every content hash the operator allowed despite the screen, oldest first.
    pub async fn skill_allowances(&self) -> Result<Vec<String>, StoreError> {
        self.call(|c| {
            let mut stmt =
                c.prepare("SELECT hash FROM skill_allowances ORDER BY allowed_at, hash")?;
            let rows = stmt.query_map([], |r| r.get(0))?;
            rows.collect()
        })
        .await
    }

    /// Every recorded skill hash, by name.
    pub async fn skill_hashes(
        &self,
    ) -> Result<std::collections::BTreeMap<String, String>, StoreError> {
        self.call(|c| {
            let mut stmt = c.prepare("SELECT name, hash FROM skill_hashes")?;
            let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?;
            rows.collect()
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use crate::tests::temp_db;
    use crate::Store;

    #[tokio::test]
    async fn a_skills_first_seen_hash_stays_until_the_operator_sets_another() {
        let store = Store::open(&temp_db("skill-hashes")).await.unwrap();
        assert_eq!(store.record_first_skill_hash("meme", "sha256:a").await.unwrap(), "sha256:a");
        // A changed skill seen later does not replace what was recorded.
        assert_eq!(store.record_first_skill_hash("meme", "sha256:b").await.unwrap(), "sha256:a");
        store.set_skill_hash("meme", "sha256:b", "nexbot-ctl").await.unwrap();
        let hashes = store.skill_hashes().await.unwrap();
        assert_eq!(hashes.get("meme").map(String::as_str), Some("sha256:b"));

        // Allowances despite the screen: kept once each, in the order given.
        assert!(store.skill_allowances().await.unwrap().is_empty());
        store.allow_skill_content("evil", "sha256:e", "dashboard").await.unwrap();
        store.allow_skill_content("evil", "sha256:e", "nexbot-ctl").await.unwrap();
        assert_eq!(store.skill_allowances().await.unwrap(), ["sha256:e"]);
    }
}
