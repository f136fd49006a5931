//! The soak run (`make soak`, and a short form in CI): the real `nexbot serve` with its pool on
//! an engine of the test's own, 20 chats talking to it through the Telegram fixture (plain
//! answers, delegated tasks, files, one-shot jobs confirmed with a button), while a fault
//! injector kills containers, kills and restarts the daemon, restarts the engine, makes the
//! model fail and stall, and fills the data directory's disk, at times drawn from a seed it
//! prints. At the end it checks, from the records, the fixture and the engine, that nothing was
//! lost, doubled or left behind ([`checks`]), and prints the figures.
//!
//! Runs inside network and mount namespaces of its own ([`crate::engine`] says why): the
//! daemon, the fixture, the scripted model and the engine meet on the namespace's loopback.

pub mod chats;
mod checks;
pub mod faults;
pub mod model;
mod site;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::scripted_llm::ScriptedLlm;
use crate::telegram::TelegramFixture;
pub use checks::Report;
use site::Site;

/// What a soak run does.
#[derive(Debug, Clone)]
pub struct SoakConfig {
    /// The `nexbot` binary under test.
    pub nexbot: PathBuf,
    /// How long the chats talk and faults come (the end's settling comes on top).
    pub duration: Duration,
    /// Draws every choice: which chat says what, which fault when.
    pub seed: u64,
    pub chats: usize,
}

impl SoakConfig {
    /// From `NEXBOT_SOAK_SECS` (default 180: CI's short form) and `NEXBOT_SOAK_SEED` (default:
    /// the clock), for `nexbot` at `nexbot`.
    pub fn from_env(nexbot: &Path) -> Self {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        let secs = var("NEXBOT_SOAK_SECS").map_or(180, |v| {
            v.parse()
                .unwrap_or_else(|_| panic!("NEXBOT_SOAK_SECS={v:?} is not a number of seconds"))
        });
        let seed = var("NEXBOT_SOAK_SEED").map_or_else(
            || {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_nanos() as u64
            },
            |v| v.parse().unwrap_or_else(|_| panic!("NEXBOT_SOAK_SEED={v:?} is not a number")),
        );
        Self { nexbot: nexbot.to_owned(), duration: Duration::from_secs(secs), seed, chats: 20 }
    }
}

/// The user ids of the chats: the owner first.
pub const FIRST_USER: i64 = 4001;

/// Runs the soak; returns its report (the caller asserts [`Report::problems`] is empty).
pub async fn run(config: SoakConfig) -> Report {
    println!(
        "soak: seed {} for {} s over {} chats (replay: make soak SEED={} DURATION={})",
        config.seed,
        config.duration.as_secs(),
        config.chats,
        config.seed,
        config.duration.as_secs()
    );
    crate::engine::prepare_namespaces();
    let tg = TelegramFixture::start().await;
    let llm = ScriptedLlm::start(vec![]).await;
    let switch = model::ModelSwitch::default();
    let responder = switch.clone();
    llm.set_responder(move |body| model::respond(&responder, body));
    let site = Arc::new(Site::prepare(&config, &tg, &llm).await);
    site.start_daemon().await;

    let began = Instant::now();
    let users = Arc::new(chats::Users {
        tg,
        began,
        next: AtomicU64::new(1),
        stop: AtomicBool::new(false),
        patience: Duration::from_secs(150),
        think_ms: (2_000, 7_000),
    });
    let mut talking = Vec::new();
    for i in 0..config.chats {
        let chat = FIRST_USER + i as i64;
        talking.push(tokio::spawn(chats::drive(
            users.clone(),
            chat,
            config.seed.wrapping_add(i as u64),
        )));
    }
    let sampler = tokio::spawn(site.clone().sample(began));
    let mut windows = Vec::new();
    for step in faults::plan(config.seed, config.duration) {
        tokio::time::sleep(step.after).await;
        if began.elapsed() >= config.duration {
            break;
        }
        let window = site.cause(step, began, &switch).await;
        println!(
            "soak: {:>6.1} s  {}: {}",
            window.from.as_secs_f64(),
            window.fault.name(),
            window.note
        );
        windows.push(window);
    }
    tokio::time::sleep(config.duration.saturating_sub(began.elapsed())).await;
    users.stop.store(true, Ordering::SeqCst);
    let mut sent = Vec::new();
    for chat in talking {
        sent.extend(chat.await.expect("a chat's loop panicked"));
    }
    // The last one-shot jobs (due 5 s after their confirmation) fire.
    tokio::time::sleep(Duration::from_secs(8)).await;
    site.stop_sampling();
    let samples = sampler.await.expect("the sampler panicked");
    checks::check(&site, &users, sent, windows, samples, began).await
}
