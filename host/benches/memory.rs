//! `make bench`: recall from a chat's memory (`nexbot-store`'s FTS5 search, BM25 weighed by
//! recency) with 100,000 entries in the chat and 20,000 in another, next to the obvious
//! alternative in the same run (a `LIKE '%word%'` scan of the chat's rows, what a store without
//! a full-text index does), and the prompt's added size for the recalled entries. Prints
//! figures; asserts nothing about speed.

use std::time::{Duration, Instant};

use nexbot_core::memory::{prompt_section, MemorySource};
use nexbot_core::ChatRef;
use nexbot_host::store::{MemoryLimits, Store};
use nexbot_tests::bench::{ms, record, Figure, Stats, Target};

const ENTRIES: usize = 100_000;
const OTHER: usize = 20_000;
const QUERIES: usize = 300;
const K: usize = 5;
/// Entries stored through `remember` one by one (timed); the rest are filled in bulk.
const REMEMBERED: usize = 2_000;
const VOCABULARY: usize = 20_000;

/// A deterministic generator (xorshift64*): the same corpus every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A word, common ones far more often (about Zipf's law: the square of a uniform draw).
    fn word(&mut self) -> String {
        let u = (self.next() % 10_000) as f64 / 10_000.0;
        format!("w{}", (u * u * VOCABULARY as f64) as usize)
    }

    fn sentence(&mut self, words: usize) -> String {
        (0..words).map(|_| self.word()).collect::<Vec<_>>().join(" ")
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let dir = std::env::temp_dir().join(format!("nxb-memory-{}", std::process::id()));
    let store = Store::open(&dir.join("db.sqlite")).await.expect("open");
    let chat: ChatRef = "telegram:1".parse().unwrap();
    let other: ChatRef = "telegram:2".parse().unwrap();
    let limits = MemoryLimits { max_entries: 1_000_000, max_chars: 1_000 };
    let source = MemorySource::Message { message: 1, user: Some(1) };
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    // `remember` itself, entry by entry, for its cost; the rest in one transaction of the same
    // rows (a remember counts the chat's entries for its limit: 100,000 of them one by one
    // would be the fill's time, not the recall's).
    let mut remembered = Vec::new();
    for i in 0..REMEMBERED {
        let text = format!("{} r{i}", rng.sentence(12));
        let start = Instant::now();
        store.remember(&chat, &text, &source, limits).await.expect("remember");
        remembered.push(start.elapsed());
    }
    let remembered = Stats::of(remembered);
    let filled = Instant::now();
    fill(&dir.join("db.sqlite"), &mut rng, &[(&chat, ENTRIES - REMEMBERED), (&other, OTHER)]);
    println!(
        "memory: {} entries stored in {:.1} s",
        ENTRIES + OTHER,
        filled.elapsed().as_secs_f64()
    );
    let queries: Vec<String> = (0..QUERIES).map(|_| rng.sentence(6)).collect();

    let mut recall = Vec::new();
    let mut added = Vec::new();
    let mut hits = 0;
    for q in &queries {
        let start = Instant::now();
        let found = store.recall(&chat, q, K, true).await.expect("recall");
        recall.push(start.elapsed());
        added.push(prompt_section(&found).len());
        hits += usize::from(found.len() == K);
    }
    // The bulk rows are found like remembered ones (else the figures would time misses).
    assert!(hits > QUERIES / 2, "only {hits} of {QUERIES} queries found {K} entries");
    let recall = Stats::of(recall);
    let like = like_scan(&dir.join("db.sqlite"), &chat, &queries[..30]);
    added.sort_unstable();
    let bytes = added[added.len() / 2];
    println!("memory: recall p50 {:.2} ms, p99 {:.2} ms", ms(recall.p50), ms(recall.p99));
    record(Figure::promised(
        "memory recall p50 (100k entries, k=5)",
        ms(recall.p50),
        "ms",
        Target::AtMost(5.0),
    ));
    record(Figure::promised(
        "memory recall p99 (100k entries, k=5)",
        ms(recall.p99),
        "ms",
        Target::AtMost(20.0),
    ));
    record(Figure::reference(
        "memory remember p50 / p99 (a chat of 2,000)",
        &format!("{:.2} / {:.2} ms", ms(remembered.p50), ms(remembered.p99)),
        "one entry, its limit checked, indexed",
    ));
    record(Figure::reference(
        "memory recall by a LIKE scan (the alternative) p50",
        &format!("{:.1} ms", ms(like.p50)),
        "the same chat, one word of each query",
    ));
    record(Figure::reference(
        "memory recall: the prompt's added size (median)",
        &format!("{bytes} bytes ≈ {} tokens", bytes / 4),
        "5 entries of 8–28 words, with their sources",
    ));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Stores `n` generated entries in each chat, as `remember` stores them (the row, and its
/// full-text row with the chat's token), in one transaction.
fn fill(db: &std::path::Path, rng: &mut Rng, chats: &[(&ChatRef, usize)]) {
    let mut conn = rusqlite::Connection::open(db).expect("open for the fill");
    let tx = conn.transaction().expect("transaction");
    let source = r#"{"kind":"message","message":1,"user":1}"#;
    for (chat, n) in chats {
        let name = chat.to_string();
        let key: String = name.bytes().map(|b| format!("{b:02x}")).collect();
        for i in 0..*n {
            let words = 8 + (rng.next() % 20) as usize;
            let text = format!("{} {i}", rng.sentence(words));
            tx.execute(
                "INSERT INTO memories (chat_id, text, kind, source, created_at)
                 VALUES (?1, ?2, 'message', ?3, strftime('%s','now'))",
                rusqlite::params![name, text, source],
            )
            .expect("insert");
            let id = tx.last_insert_rowid();
            tx.execute(
                "INSERT INTO memories_fts (rowid, text, chat_key) VALUES (?1, ?2, ?3)",
                rusqlite::params![id, text, key],
            )
            .expect("index");
        }
    }
    tx.commit().expect("commit");
}

/// The alternative: the chat's rows whose text has a query's first word, scanned (a
/// connection of its own to the same file: the product has no such query).
fn like_scan(db: &std::path::Path, chat: &ChatRef, queries: &[String]) -> Stats {
    let conn = rusqlite::Connection::open(db).expect("open for the scan");
    let mut scan = conn
        .prepare(
            "SELECT id, text FROM memories WHERE chat_id = ?1 AND text LIKE ?2
             ORDER BY id DESC LIMIT ?3",
        )
        .expect("prepare");
    let mut took: Vec<Duration> = Vec::new();
    for q in queries {
        let word = q.split_whitespace().next().unwrap_or("w1");
        let start = Instant::now();
        let rows = scan
            .query_map(rusqlite::params![chat.to_string(), format!("% {word} %"), K as i64], |r| {
                r.get::<_, i64>(0)
            })
            .expect("scan")
            .count();
        took.push(start.elapsed());
        std::hint::black_box(rows);
    }
    Stats::of(took)
}
