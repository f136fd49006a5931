//! A chat's memory as the agent uses it: remembering (with the entry's vector, when
//! `[llm.embeddings]` is set) and recalling the entries that best match a text — by its words
//! (the store's FTS5 search) and, with embeddings, by meaning, the two lists merged.
//!
//! Why one owner: the prompt's recall before each turn and the model's `recall` must find the
//! same entries the same way; both call [`Memories::recall`]. Embeddings are a help, never a
//! dependency: an endpoint that fails leaves recall by words, logged.

use std::collections::HashMap;
use std::sync::Arc;

use nexbot_core::memory::{Memory, MemorySource};
use nexbot_core::ChatRef;
use nexbot_llm::{cosine, Embedder};
use nexbot_store::{MemoryLimits, Remembered, Store, StoreError};

/// Candidates each list gives the merge.
const CANDIDATES: usize = 50;
/// Newest entries of a chat compared by meaning (a scan of their vectors; older entries are
/// found by their words).
const MEANING_SCAN: usize = 5_000;
/// Below this cosine an entry is not "about the same thing".
const MIN_COSINE: f32 = 0.3;
/// Reciprocal-rank fusion's constant (the usual 60): a place in either list counts, the first
/// places most.
const FUSION_K: f32 = 60.0;

/// The chats' memories: the store, the limits, and the embeddings endpoint if set.
#[derive(Debug, Clone)]
pub struct Memories {
    store: Store,
    limits: MemoryLimits,
    embedder: Option<Arc<Embedder>>,
}

impl Memories {
    pub fn new(store: Store, limits: MemoryLimits, embedder: Option<Embedder>) -> Self {
        Self { store, limits, embedder: embedder.map(Arc::new) }
    }

    /// The store the entries are in (listing and forgetting need no more).
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Stores `text` in `chat`'s memory from `source`; with embeddings, its vector too (an
    /// endpoint that fails leaves the entry found by its words only).
    pub async fn remember(
        &self,
        chat: &ChatRef,
        text: &str,
        source: &MemorySource,
    ) -> Result<Remembered, StoreError> {
        let done = self.store.remember(chat, text, source, self.limits).await?;
        if let (Remembered::New { id, .. }, Some(embedder)) = (done, &self.embedder) {
            match embedder.embed(&nexbot_store::one_line(text)).await {
                Ok(vector) => self.store.set_memory_vector(id, embedder.model(), &vector).await?,
                Err(e) => tracing::warn!(%chat, id, error = %e, "a memory's vector was not made"),
            }
        }
        Ok(done)
    }

    /// The `k` entries of `chat` that best match `text`, best first; `touch` counts them as
    /// used.
    pub async fn recall(
        &self,
        chat: &ChatRef,
        text: &str,
        k: usize,
        touch: bool,
    ) -> Result<Vec<Memory>, StoreError> {
        let Some(embedder) = &self.embedder else {
            return self.store.recall(chat, text, k, touch).await;
        };
        let by_words = self.store.recall(chat, text, CANDIDATES, false).await?;
        let by_meaning = match embedder.embed(text).await {
            Ok(query) => {
                let stored =
                    self.store.memory_vectors(chat, embedder.model(), MEANING_SCAN).await?;
                closest(&query, &stored)
            }
            Err(e) => {
                tracing::warn!(%chat, error = %e, "recall by words only: the embeddings failed");
                Vec::new()
            }
        };
        let ids = fuse(&by_words.iter().map(|m| m.id).collect::<Vec<_>>(), &by_meaning, k);
        let mut known: HashMap<i64, Memory> = by_words.into_iter().map(|m| (m.id, m)).collect();
        let missing: Vec<i64> = ids.iter().copied().filter(|id| !known.contains_key(id)).collect();
        for m in self.store.memories_by_id(chat, missing).await? {
            known.insert(m.id, m);
        }
        let found: Vec<Memory> = ids.iter().filter_map(|id| known.remove(id)).collect();
        if touch {
            self.store.touch_memories(found.iter().map(|m| m.id).collect()).await?;
        }
        Ok(found)
    }
}

/// The ids of `stored` closest to `query` (at least [`MIN_COSINE`]), closest first.
fn closest(query: &[f32], stored: &[(i64, Vec<f32>)]) -> Vec<i64> {
    let mut scored: Vec<(f32, i64)> = stored
        .iter()
        .map(|(id, v)| (cosine(query, v), *id))
        .filter(|(score, _)| *score >= MIN_COSINE)
        .collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0));
    scored.into_iter().take(CANDIDATES).map(|(_, id)| id).collect()
}

/// Reciprocal-rank fusion of two ranked id lists: the first `k` ids by Σ 1/(K + place).
fn fuse(words: &[i64], meaning: &[i64], k: usize) -> Vec<i64> {
    let mut score: HashMap<i64, f32> = HashMap::new();
    for list in [words, meaning] {
        for (place, id) in list.iter().enumerate() {
            *score.entry(*id).or_default() += 1.0 / (FUSION_K + place as f32 + 1.0);
        }
    }
    let mut ids: Vec<(i64, f32)> = score.into_iter().collect();
    // Ties (an id in one list only, at the same place): the newer entry first.
    ids.sort_by(|a, b| b.1.total_cmp(&a.1).then(b.0.cmp(&a.0)));
    ids.into_iter().take(k).map(|(id, _)| id).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fusion_rewards_both_lists_and_keeps_k() {
        // 7 is second by words and first by meaning: it wins over 5, first by words only.
        assert_eq!(fuse(&[5, 7, 9], &[7, 3], 3), [7, 5, 3]);
        assert_eq!(fuse(&[], &[4, 2], 5), [4, 2]);
        assert!(fuse(&[1], &[], 0).is_empty());
    }

    #[test]
    fn closest_drops_what_is_not_about_the_same_thing() {
        let stored = vec![(1, vec![1.0, 0.0]), (2, vec![0.6, 0.8]), (3, vec![0.0, 1.0])];
        assert_eq!(closest(&[1.0, 0.0], &stored), [1, 2]);
    }
}
