//! The soak's verdict, from the records (the database), the fixture (what each chat got) and
//! the engine (what is left on it): nothing lost, nothing doubled, nothing running, nothing left
//! behind, the database whole, no growth of the daemon's memory or open files after warm-up;
//! and the figures for README (messages, faults by kind, answer times outside the faults).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::bench::Stats;
use crate::soak::chats::{Kind, Outcome, Sent, Users};
use crate::soak::faults::{Fault, Window};
use crate::soak::model::number_after;
use crate::soak::site::{Sample, Site, POOL};
use crate::soak::FIRST_USER;

/// What a soak run found.
#[derive(Debug, Default)]
pub struct Report {
    /// The figures, a line each.
    pub lines: Vec<String>,
    /// Every check that failed, a line each (empty: the run passed).
    pub problems: Vec<String>,
}

impl Report {
    fn say(&mut self, line: String) {
        println!("soak: {line}");
        self.lines.push(line);
    }

    fn problem(&mut self, line: String) {
        println!("soak: PROBLEM: {line}");
        self.problems.push(line);
    }
}

pub(super) async fn check(
    site: &Arc<Site>,
    users: &Users,
    sent: Vec<Sent>,
    windows: Vec<Window>,
    samples: Vec<Sample>,
    began: Instant,
) -> Report {
    let mut report = Report::default();
    outcomes(&mut report, users, &sent, &windows).await;
    let chats = sent.iter().map(|s| s.chat).max().map_or(0, |c| c - FIRST_USER + 1);
    fires(&mut report, users, site, chats).await;
    records(&mut report, site).await;
    site.stop_daemon().await;
    left_behind(&mut report, site).await;
    growth(&mut report, &samples);
    let mut by_kind: BTreeMap<Fault, usize> = BTreeMap::new();
    for w in &windows {
        *by_kind.entry(w.fault).or_default() += 1;
    }
    let faults: Vec<String> = by_kind.iter().map(|(f, n)| format!("{}: {n}", f.name())).collect();
    report.say(format!("faults injected ({}): {}", windows.len(), faults.join(", ")));
    if !report.problems.is_empty() {
        // What the daemon said about it: its warnings and errors, every run.
        for (i, log) in site.logs.lock().unwrap().iter().enumerate() {
            let loud: Vec<&str> =
                log.lines().filter(|l| l.contains("WARN") || l.contains("ERROR")).collect();
            println!(
                "soak: run {} of the daemon: {} warnings and errors, the first 15 and the last 40:",
                i + 1,
                loud.len()
            );
            let first = loud.len().min(15);
            for line in
                loud[..first].iter().chain(&loud[loud.len().saturating_sub(40).max(first)..])
            {
                println!("  {line}");
            }
        }
    }
    report.say(format!(
        "daemon runs: {}; soak took {:.0} s",
        site.lives.load(std::sync::atomic::Ordering::SeqCst),
        began.elapsed().as_secs_f64()
    ));
    report
}

/// Every message answered exactly once or failed with a reason; answer times outside faults.
async fn outcomes(report: &mut Report, users: &Users, sent: &[Sent], windows: &[Window]) {
    let mut answers: HashMap<u64, usize> = HashMap::new();
    let chats: Vec<i64> = {
        let mut c: Vec<i64> = sent.iter().map(|s| s.chat).collect();
        c.sort_unstable();
        c.dedup();
        c
    };
    for chat in &chats {
        for m in users.tg.bot_messages(*chat).await {
            if let Some(n) = number_after(&m.text, "answer m") {
                *answers.entry(n).or_default() += 1;
            }
        }
    }
    let mut kinds: BTreeMap<Kind, usize> = BTreeMap::new();
    let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
    let (mut lost, mut doubled, mut calm) = (0, 0, Vec::new());
    for s in sent {
        *kinds.entry(s.kind).or_default() += 1;
        let times = answers.get(&s.n).copied().unwrap_or(0);
        if times > 1 {
            doubled += 1;
            report.problem(format!(
                "m{} ({:?}, chat {}) answered {times} times",
                s.n, s.kind, s.chat
            ));
        }
        match &s.outcome {
            Outcome::Answered(after) => {
                let to = s.at + *after;
                if !windows.iter().any(|w| w.touches(s.at, to)) {
                    calm.push(*after);
                }
            }
            Outcome::Failed(reason) => {
                let first: String =
                    reason.lines().next().unwrap_or_default().chars().take(90).collect();
                *reasons.entry(first).or_default() += 1;
            }
            Outcome::Lost { seen } => {
                lost += 1;
                report.problem(format!(
                    "m{} ({:?}, chat {}, sent at {:.1} s) got no answer and no reason; the chat saw {seen:?}",
                    s.n,
                    s.kind,
                    s.chat,
                    s.at.as_secs_f64()
                ));
            }
        }
    }
    let kinds: Vec<String> = kinds.iter().map(|(k, n)| format!("{k:?} {n}")).collect();
    report.say(format!(
        "messages: {} ({}) over {} chats",
        sent.len(),
        kinds.join(", "),
        chats.len()
    ));
    let failed: usize = reasons.values().sum();
    report.say(format!(
        "answered {}, failed with a reason {failed}, lost {lost}, doubled {doubled}",
        sent.len() - failed - lost
    ));
    for (reason, n) in &reasons {
        report.say(format!("  failed {n}×: {reason}"));
    }
    if calm.is_empty() {
        report.problem("no message was answered outside a fault window".to_owned());
    } else {
        let stats = Stats::of(calm);
        report.say(format!(
            "answer time outside fault windows: n={} p50={:.0} ms p99={:.0} ms",
            stats.n,
            stats.p50.as_secs_f64() * 1e3,
            stats.p99.as_secs_f64() * 1e3
        ));
    }
}

/// Each confirmed one-shot job ran once, and its chat got its message at most once.
async fn fires(report: &mut Report, users: &Users, site: &Site, chats: i64) {
    let mut fired: HashMap<u64, usize> = HashMap::new();
    // How each job's messages came (for a problem's report): id, time, first text, edits.
    let mut seen: HashMap<u64, Vec<String>> = HashMap::new();
    for chat in FIRST_USER..FIRST_USER + chats {
        for m in users.tg.bot_messages(chat).await {
            if m.text.contains("fired") {
                if let Some(n) = number_after(&m.text, "job m") {
                    *fired.entry(n).or_default() += 1;
                    let edits: Vec<&str> = m.edits.iter().map(|e| e.text.as_str()).collect();
                    seen.entry(n).or_default().push(format!(
                        "message {} at {} ms, sent as {:?}, edits {edits:?}",
                        m.message_id, m.time_ms, m.raw
                    ));
                }
            }
        }
    }
    let db = rusqlite::Connection::open(site.database()).expect("open the database");
    let mut stmt = db
        .prepare(
            "SELECT j.task, (SELECT COUNT(*) FROM job_runs r WHERE r.job_id = j.id),
                    (SELECT group_concat(outcome) FROM job_runs r WHERE r.job_id = j.id)
             FROM jobs j WHERE j.task LIKE 'fire job-m%'",
        )
        .expect("query the jobs");
    let jobs: Vec<(String, i64, Option<String>)> = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .expect("read the jobs")
        .map(Result::unwrap)
        .collect();
    let mut outcomes: BTreeMap<String, usize> = BTreeMap::new();
    for (task, runs, outcome) in &jobs {
        let n = number_after(task, "job-m").unwrap_or(0);
        let times = fired.get(&n).copied().unwrap_or(0);
        let outcome = outcome.clone().unwrap_or_default();
        *outcomes
            .entry(if outcome.is_empty() { "not run".into() } else { outcome.clone() })
            .or_default() += 1;
        // Ran once; its message came at most once, and came if the run is recorded as done. A
        // run cut by a kill is recorded `cancelled` at the next start, its message sent or not.
        if *runs != 1 || times > 1 || (outcome == "ok" && times == 0) {
            let how = seen.get(&n).map(|s| s.join("; ")).unwrap_or_default();
            report.problem(format!(
                "job m{n}: {runs} runs ({outcome}), its message came {times} times: {how}"
            ));
        }
    }
    let outcomes: Vec<String> = outcomes.iter().map(|(o, n)| format!("{o} {n}")).collect();
    report.say(format!("one-shot jobs confirmed: {} (runs: {})", jobs.len(), outcomes.join(", ")));
}

/// The ledger settled, no task running.
async fn records(report: &mut Report, site: &Site) {
    let db = rusqlite::Connection::open(site.database()).expect("open the database");
    let count = |sql: &str| db.query_row(sql, [], |r| r.get::<_, i64>(0)).expect(sql);
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut pending = count("SELECT COUNT(*) FROM telegram_updates WHERE state = 'pending'");
    while pending > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(500)).await;
        pending = count("SELECT COUNT(*) FROM telegram_updates WHERE state = 'pending'");
    }
    if pending > 0 {
        report.problem(format!("{pending} Telegram updates still pending"));
    }
    let running = count("SELECT COUNT(*) FROM task_records WHERE status = 'running'");
    if running > 0 {
        report.problem(format!("{running} task records still running"));
    }
    let states = tally(&db, "telegram_updates", "state");
    let tasks = tally(&db, "task_records", "status");
    report.say(format!("updates: {}; task records: {}", states.join(", "), tasks.join(", ")));
}

/// "value count" for each value of `column` in `table` (fixed names, never input).
fn tally(db: &rusqlite::Connection, table: &str, column: &str) -> Vec<String> {
    let sql = format!("SELECT {column}, COUNT(*) FROM {table} GROUP BY {column} ORDER BY {column}");
    db.prepare(&sql)
        .and_then(|mut s| {
            s.query_map([], |r| Ok(format!("{} {}", r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))?
                .collect::<Result<Vec<_>, _>>()
        })
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

/// After the daemon's clean stop: the database whole, no panic in any run's log, nothing on
/// the engine or in the firewall that the daemon does not own.
async fn left_behind(report: &mut Report, site: &Site) {
    let db = rusqlite::Connection::open(site.database()).expect("open the database");
    let integrity: String =
        db.query_row("PRAGMA integrity_check", [], |r| r.get(0)).expect("integrity_check");
    if integrity != "ok" {
        report.problem(format!("the database's integrity check says {integrity:?}"));
    }
    let logs = site.logs.lock().unwrap().clone();
    let mut loudest = (0, String::new());
    for (i, log) in logs.iter().enumerate() {
        if let Some(line) = log.lines().find(|l| l.contains("panicked")) {
            report.problem(format!("run {} of the daemon panicked: {line}", i + 1));
        }
        // The same error again and again (a loop that retries at once) floods the log; a
        // repeat is logged once with its count.
        let mut repeats: HashMap<&str, usize> = HashMap::new();
        for line in log.lines().filter(|l| l.contains(" ERROR ")) {
            let text = line.split_once(' ').map_or(line, |(_, rest)| rest);
            *repeats.entry(text).or_default() += 1;
        }
        if let Some((text, n)) = repeats.into_iter().max_by_key(|(_, n)| *n) {
            if n > loudest.0 {
                loudest = (n, text.chars().take(160).collect());
            }
        }
    }
    // Every run must have its sandbox: a run without delegation answers tasks in words only,
    // and leaves what the run before it left (its containers, its firewall rules).
    for (i, log) in logs.iter().enumerate() {
        if let Some(line) = log.lines().find(|l| l.contains("delegation to subagents is off")) {
            report.problem(format!("run {} of the daemon had no sandbox: {line}", i + 1));
        }
        for line in log.lines().filter(|l| l.contains("the sandbox did not start; trying again")) {
            report.say(format!("run {}: {line}", i + 1));
        }
    }
    if loudest.0 > 0 {
        report
            .say(format!("the most repeated error line, {}× in one run: {}", loudest.0, loudest.1));
    }
    if loudest.0 > 100 {
        report.problem(format!("an error line was logged {} times in one run", loudest.0));
    }
    let engine = site.engine.clone();
    let (containers, networks) = tokio::task::spawn_blocking(move || {
        let engine = engine.lock().unwrap();
        let containers = engine.docker(&["ps", "-a", "--format", "{{.Names}} {{.Status}}"]);
        let networks = engine.docker(&["network", "ls", "--format", "{{.Name}}"]);
        (containers.unwrap_or_default(), networks.unwrap_or_default())
    })
    .await
    .expect("look at the engine");
    if !containers.trim().is_empty() {
        report.problem(format!(
            "containers left on the engine after the daemon stopped: {containers}"
        ));
    }
    let foreign: Vec<&str> = networks
        .split_whitespace()
        .filter(|n| !["bridge", "host", "none", POOL].contains(n))
        .collect();
    if !foreign.is_empty() {
        report.problem(format!("networks left on the engine: {foreign:?}"));
    }
    let rules = std::process::Command::new("iptables-save").output().expect("run iptables-save");
    let rules = String::from_utf8_lossy(&rules.stdout);
    let ours: Vec<&str> = rules.lines().filter(|l| l.contains("nexbot-egress")).collect();
    if !ours.is_empty() {
        // What each run of the daemon said of its rules: whose rule stayed, and why.
        let said: Vec<String> = logs
            .iter()
            .enumerate()
            .flat_map(|(i, log)| {
                log.lines()
                    .filter(|l| {
                        l.contains("egress firewall")
                            || l.contains("egress proxy and LLM relay listening")
                    })
                    .map(move |l| format!("run {}: {l}", i + 1))
            })
            .collect();
        report.problem(format!(
            "firewall rules left after the daemon stopped: {ours:?}; the daemon said:\n{}",
            said.join("\n")
        ));
    }
    report.say(format!(
        "left behind after the clean stop: {} containers, {} foreign networks, {} firewall rules; database: {integrity}",
        containers.lines().filter(|l| !l.trim().is_empty()).count(),
        foreign.len(),
        ours.len()
    ));
}

/// RSS and open files: the longest run of the daemon, its first and last thirds after 30 s of
/// warm-up; and the whole soak's start → end.
fn growth(report: &mut Report, samples: &[Sample]) {
    let warm = Duration::from_secs(30);
    let mut lives: BTreeMap<u32, Vec<Sample>> = BTreeMap::new();
    for s in samples {
        lives.entry(s.life).or_default().push(*s);
    }
    let Some(longest) =
        lives.values().max_by_key(|l| l.last().map(|s| s.at).unwrap_or_default() - l[0].at)
    else {
        report.problem("no sample of the daemon's resources".to_owned());
        return;
    };
    let settled: Vec<&Sample> = longest.iter().filter(|s| s.at >= longest[0].at + warm).collect();
    let median = |part: &[&Sample], f: fn(&Sample) -> u64| {
        let mut v: Vec<u64> = part.iter().map(|s| f(s)).collect();
        v.sort_unstable();
        v.get(v.len() / 2).copied().unwrap_or(0)
    };
    let first = samples.iter().find(|s| s.at >= samples[0].at + warm).unwrap_or(&samples[0]);
    let last = samples.last().expect("samples");
    report.say(format!(
        "daemon RSS {:.1} MB → {:.1} MB, open files {} → {} (first run after warm-up → the end)",
        first.rss_kb as f64 / 1024.0,
        last.rss_kb as f64 / 1024.0,
        first.open_files,
        last.open_files
    ));
    if settled.len() < 9 {
        report.say(format!(
            "longest run of the daemon too short for a trend ({} samples after warm-up)",
            settled.len()
        ));
        return;
    }
    let third = settled.len() / 3;
    let (early, late) = (&settled[..third], &settled[settled.len() - third..]);
    let (rss0, rss1) = (median(early, |s| s.rss_kb), median(late, |s| s.rss_kb));
    let (fd0, fd1) = (median(early, |s| s.open_files), median(late, |s| s.open_files));
    report.say(format!(
        "longest run ({} samples after warm-up): RSS median {:.1} → {:.1} MB, open files {fd0} → {fd1}",
        settled.len(),
        rss0 as f64 / 1024.0,
        rss1 as f64 / 1024.0
    ));
    // Generous bounds: a leak grows without end, a warm cache levels off.
    if rss1 > rss0 + rss0 / 2 + 10 * 1024 {
        report.problem(format!("the daemon's RSS grew from {rss0} kB to {rss1} kB after warm-up"));
    }
    if fd1 > fd0 + 32 {
        report.problem(format!("the daemon's open files grew from {fd0} to {fd1} after warm-up"));
    }
}
