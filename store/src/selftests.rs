//! The owner's self-tests: each run's report, as the `nexbot-selftest` crate wrote it (JSON
//! at this edge; the store does not read it).

use rusqlite::{params, OptionalExtension};

use crate::{Store, StoreError};

/// How many reports are kept (the oldest go first).
const KEPT: i64 = 100;

impl Store {
    /// Keeps a run's report, and the last [`KEPT`] of them only.
    pub async fn record_selftest(&self, ended_at: i64, report: String) -> Result<(), StoreError> {
        self.call(move |c| {
            c.execute(
                "INSERT INTO selftests (ended_at, report) VALUES (?1, ?2)",
                params![ended_at, report],
            )?;
            c.execute(
                "DELETE FROM selftests WHERE id NOT IN \
                 (SELECT id FROM selftests ORDER BY id DESC LIMIT ?1)",
                params![KEPT],
            )?;
            Ok(())
        })
        .await
    }

    /// The last run's report, if there was one.
    pub async fn last_selftest(&self) -> Result<Option<String>, StoreError> {
        self.call(|c| {
            c.query_row("SELECT report FROM selftests ORDER BY id DESC LIMIT 1", [], |r| r.get(0))
                .optional()
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_last_report_is_the_newest_and_only_a_hundred_are_kept() {
        let store = Store::open(&crate::tests::temp_db("selftests")).await.unwrap();
        assert_eq!(store.last_selftest().await.unwrap(), None);
        for i in 0..105 {
            store.record_selftest(i, format!("{{\"n\":{i}}}")).await.unwrap();
        }
        assert_eq!(store.last_selftest().await.unwrap().as_deref(), Some("{\"n\":104}"));
        let kept: i64 = store
            .call(|c| c.query_row("SELECT COUNT(*) FROM selftests", [], |r| r.get(0)))
            .await
            .unwrap();
        assert_eq!(kept, KEPT);
    }
}
