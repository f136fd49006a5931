//! `make bench`: skill pick-up delay, from the moment a skill is written into the skills
//! folder to the moment the daemon's live skill set lists it (what the next turn's prompt and
//! `nexbot-ctl skills ls` read). The real `Skills` watcher (`notify`, the default
//! `skills.debounce_ms`) on a real folder; each sample alternates the two ways skills arrive:
//! a folder built elsewhere and renamed in, and a `SKILL.md` written in place into a new
//! folder. Then an edit of a listed skill (temp file renamed over it) until the new
//! description is seen. Prints p50/p99 and hands them to the summary; asserts nothing.

// The daemon's tests and benches drive `nexbot` (and docker, kill) as processes; the crate's
// clippy config refuses that to the daemon's own code only.
#![allow(clippy::disallowed_methods)]

use std::path::Path;
use std::time::{Duration, Instant};

use nexbot_host::config::SkillsConfig;
use nexbot_host::skills::Skills;
use nexbot_tests::bench::{record, Figure, Stats, Target};
use tokio_util::sync::CancellationToken;

const SAMPLES: usize = 60;
const LIMIT: Duration = Duration::from_secs(30);

fn skill_text(name: &str, description: &str) -> String {
    format!("---\nname: {name}\ndescription: \"{description}\"\ntools: [web_fetch]\n---\n# {name}\nSteps.\n")
}

async fn until(skills: &Skills, check: impl Fn(&Skills) -> bool) -> Duration {
    let start = Instant::now();
    while !check(skills) {
        assert!(start.elapsed() < LIMIT, "not picked up within {LIMIT:?}");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    start.elapsed()
}

fn write_new(root: &Path, staging: &Path, name: &str, renamed: bool) {
    if renamed {
        std::fs::create_dir_all(staging.join(name)).unwrap();
        std::fs::write(staging.join(name).join("SKILL.md"), skill_text(name, "new")).unwrap();
        std::fs::rename(staging.join(name), root.join(name)).unwrap();
    } else {
        std::fs::create_dir_all(root.join(name)).unwrap();
        std::fs::write(root.join(name).join("SKILL.md"), skill_text(name, "new")).unwrap();
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let base = std::env::temp_dir().join(format!("nxb-skills-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let (root, staging) = (base.join("skills"), base.join("staging"));
    std::fs::create_dir_all(&root).unwrap();
    std::fs::create_dir_all(&staging).unwrap();
    let debounce = Duration::from_millis(SkillsConfig::default().debounce_ms);
    let skills = Skills::load(Some(root.clone()), Vec::new(), debounce);
    let stop = CancellationToken::new();
    let watcher = tokio::spawn(skills.clone().watch(stop.clone()));
    tokio::time::sleep(Duration::from_millis(500)).await;

    let mut added = Vec::new();
    for i in 0..SAMPLES {
        let name = format!("skill-{i}");
        let start = Instant::now();
        write_new(&root, &staging, &name, i % 2 == 0);
        let seen = until(&skills, |s| s.current().get(&name).is_some()).await;
        added.push(seen.max(start.elapsed()));
        // Let the folder go quiet so samples do not overlap.
        tokio::time::sleep(debounce + Duration::from_millis(50)).await;
    }
    let mut edited = Vec::new();
    for i in 0..SAMPLES / 2 {
        let description = format!("edit {i}");
        let tmp = root.join("skill-0/.SKILL.md.tmp");
        let start = Instant::now();
        std::fs::write(&tmp, skill_text("skill-0", &description)).unwrap();
        std::fs::rename(&tmp, root.join("skill-0/SKILL.md")).unwrap();
        until(&skills, |s| {
            s.current().get("skill-0").and_then(|e| e.description()) == Some(description.as_str())
        })
        .await;
        edited.push(start.elapsed());
        tokio::time::sleep(debounce + Duration::from_millis(50)).await;
    }
    stop.cancel();
    let _ = watcher.await;
    let _ = std::fs::remove_dir_all(&base);

    let added = Stats::of(added);
    let edited = Stats::of(edited);
    println!("skills folder with up to {SAMPLES} skills, debounce {} ms", debounce.as_millis());
    println!("{}", added.line("skill written → listed"));
    println!("{}", edited.line("skill edited (temp file renamed) → seen"));
    record(Figure::promised(
        "skill pick-up, written → listed, p99",
        added.p99.as_secs_f64(),
        "s",
        Target::AtMost(2.0),
    ));
    record(Figure::reference(
        "  p50 / edit seen p50 / p99",
        &format!(
            "{:.0} / {:.0} / {:.0} ms",
            nexbot_tests::bench::ms(added.p50),
            nexbot_tests::bench::ms(edited.p50),
            nexbot_tests::bench::ms(edited.p99)
        ),
        &format!("(debounce {} ms)", debounce.as_millis()),
    ));
}
