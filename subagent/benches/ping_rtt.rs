//! `make bench`: ping round trips over pipes to the real binary (p50/p99 of 2,000), and the
//! subagent's idle memory (VmRSS from /proc, split into anonymous and file-backed pages) —
//! also for the static binary that goes into the image, when `make image` has built it — and
//! the task loop's overhead per iteration: a 60-iteration task against a scripted model on
//! loopback (each iteration a model call and an `update_todos` call), and in the same run the
//! hooks' own share (the events one such iteration offers, through the four task hooks and
//! through none). `NEXBOT_BENCH_BASELINE_SUBAGENT` names another build of the binary (one from
//! before the hooks) to time the same task with, next to this one.
//! Prints figures; asserts nothing about speed.

use std::hint::black_box;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use nexbot_protocol::Todo;
use nexbot_subagent::hooks::{first_steer, HookEvent, TaskHook, TaskView, TASK_HOOKS};
use nexbot_tests::bench::{record, Figure};
use nexbot_tests::scripted_llm::{ScriptedLlm, Step};
use serde_json::{json, Value};

const ROUND_TRIPS: usize = 2_000;

/// The static binary `make image` puts into the image.
const IMAGE_BINARY: &str = "target/x86_64-unknown-linux-gnu/image/nexbot-subagent";

/// The binary benched over pipes: this build's, or `NEXBOT_BENCH_SUBAGENT`'s.
fn subagent_binary() -> std::path::PathBuf {
    nexbot_tests::bench::binary_from_env(
        nexbot_tests::bench::SUBAGENT_ENV,
        env!("CARGO_BIN_EXE_nexbot-subagent"),
    )
    .into()
}

fn memory(pid: u32) -> String {
    let field = |name| nexbot_tests::bench::proc_status_kib(pid, name);
    match (field("VmRSS:"), field("RssAnon:"), field("RssFile:")) {
        (Some(rss), Some(anon), Some(file)) => format!(
            "{:.1} MiB ({rss} KiB: {anon} KiB anonymous, {file} KiB file-backed)",
            rss as f64 / 1024.0
        ),
        _ => "unknown".to_owned(),
    }
}

/// Idle memory of `binary` after it answered one ping.
fn idle_memory_of(binary: &std::path::Path, scratch: &std::path::Path) -> String {
    let mut child = Command::new(binary)
        .env("NEXBOT_SCRATCH_DIR", scratch)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the image binary");
    let mut stdin = child.stdin.take().expect("stdin");
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
    stdin.write_all(b"{\"type\":\"ping\",\"id\":\"m\"}\n").expect("write");
    let mut line = String::new();
    stdout.read_line(&mut line).expect("read");
    std::thread::sleep(Duration::from_millis(200));
    let figure = memory(child.id());
    drop(stdin);
    let _ = child.wait();
    figure
}

/// Starts `binary` over pipes with its scratch in `scratch`, logging warnings only.
fn start(binary: &Path, scratch: &Path) -> (Child, ChildStdin, BufReader<ChildStdout>) {
    let mut child = Command::new(binary)
        .env("NEXBOT_SCRATCH_DIR", scratch)
        .env("NEXBOT_LOG_LEVEL", "warn")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("start {}: {e}", binary.display()));
    let stdin = child.stdin.take().expect("stdin");
    let stdout = BufReader::new(child.stdout.take().expect("stdout"));
    (child, stdin, stdout)
}

/// Offers the events of one iteration that calls one tool (before iteration, before tool,
/// after tool) to `hooks`, `rounds` times; the time per iteration.
fn hooks_per_iteration(hooks: &[&TaskHook], rounds: u32) -> Duration {
    let todos: Vec<Todo> =
        (0..5).map(|i| Todo { content: format!("step {i}"), status: "pending".into() }).collect();
    let arguments = json!({"todos": [{"content": "step 0", "status": "done"}]});
    let started = Instant::now();
    for iteration in 0..rounds {
        let view = TaskView {
            iteration: black_box(iteration % 60 + 1),
            tokens: black_box(12_000),
            todos: &todos,
            searches: 3,
            search_budget: 20,
            final_answers: 0,
            timeout_secs: 300,
        };
        let events = [
            HookEvent::BeforeIteration { iteration: view.iteration },
            HookEvent::BeforeTool { tool: black_box("update_todos"), arguments: &arguments },
            HookEvent::AfterTool { tool: "update_todos", result: "todo list updated (1 items)" },
        ];
        for event in &events {
            black_box(first_steer(hooks.iter().copied(), event, &view));
        }
    }
    started.elapsed() / rounds
}

/// The time per iteration of a task that runs into the iteration limit (60 model calls, each
/// answered at once with an `update_todos` call), on `binary`; the best of `runs` tasks.
fn loop_per_iteration(binary: &Path, llm_base_url: &str, scratch: &Path, runs: usize) -> Duration {
    let (mut child, mut stdin, mut stdout) = start(binary, scratch);
    let mut best = Duration::MAX;
    for run in 0..runs {
        let request = json!({
            "type": "execute", "id": format!("loop-{run}"), "task": "plan forever",
            "timeout": 600, "llm_api_key": "bench", "llm_base_url": llm_base_url,
            "llm_model": "scripted"
        });
        let started = Instant::now();
        writeln!(stdin, "{request}").expect("write");
        stdin.flush().expect("flush");
        let mut iterations = 0;
        loop {
            let mut line = String::new();
            stdout.read_line(&mut line).expect("read");
            let answer: Value = serde_json::from_str(&line).expect("a JSON line");
            match answer["status"].as_str() {
                Some("progress") => iterations += u32::from(answer["event"] == "iteration"),
                Some("error") => {
                    assert_eq!(answer["error"], "Sub-agent iteration limit reached (60)");
                    break;
                }
                other => panic!("unexpected answer {other:?}: {line}"),
            }
        }
        assert_eq!(iterations, 60);
        best = best.min(started.elapsed() / iterations);
    }
    drop(stdin);
    let _ = child.wait();
    best
}

/// The task loop's overhead per iteration, with the hooks and (in the same run) without.
fn loop_overhead(scratch: &Path) {
    let (url_tx, url_rx) = std::sync::mpsc::channel();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async move {
            let llm = ScriptedLlm::start(vec![]).await;
            llm.set_responder(|_| {
                Step::tool_call(
                    "update_todos",
                    json!({"todos": [{"content": "a", "status": "pending"}]}),
                )
            });
            url_tx.send(llm.base_url()).unwrap();
            let _ = stop_rx.await;
        });
    });
    let url = url_rx.recv().expect("the scripted model's address");

    const ROUNDS: u32 = 1_000_000;
    let with = hooks_per_iteration(&TASK_HOOKS, ROUNDS);
    let without = hooks_per_iteration(&[], ROUNDS);
    let this = subagent_binary();
    let per_iteration = loop_per_iteration(&this, &url, scratch, 5);
    println!(
        "subagent task loop, per iteration (best of 5 tasks of 60 iterations, release build):"
    );
    println!(
        "  whole iteration (model call on loopback + update_todos) {:>9.1} µs",
        per_iteration.as_secs_f64() * 1e6
    );
    println!(
        "  the four hooks, the events of one iteration           {:>9.1} ns",
        with.as_secs_f64() * 1e9
    );
    println!(
        "  the same events through no hooks (bypassed)           {:>9.1} ns",
        without.as_secs_f64() * 1e9
    );
    let share = (with.saturating_sub(without)).as_secs_f64() / per_iteration.as_secs_f64() * 100.0;
    println!("  the hooks' share of an iteration                      {share:>9.4} %");
    record(Figure::reference(
        "subagent loop: one iteration (scripted model on loopback)",
        &format!("{:.1} µs", per_iteration.as_secs_f64() * 1e6),
        &format!(
            "hooks {:.0} ns of it, none {:.0} ns",
            with.as_secs_f64() * 1e9,
            without.as_secs_f64() * 1e9
        ),
    ));
    match std::env::var_os("NEXBOT_BENCH_BASELINE_SUBAGENT") {
        Some(baseline) => {
            let before = loop_per_iteration(Path::new(&baseline), &url, scratch, 5);
            println!("  whole iteration, baseline binary ({})      {:>9.1} µs", Path::new(&baseline).display(), before.as_secs_f64() * 1e6);
            record(Figure::reference(
                "subagent loop: one iteration, baseline build",
                &format!("{:.1} µs", before.as_secs_f64() * 1e6),
                "NEXBOT_BENCH_BASELINE_SUBAGENT",
            ));
        }
        None => println!("  (set NEXBOT_BENCH_BASELINE_SUBAGENT to a build from before the hooks to time it too)"),
    }
    let _ = stop_tx.send(());
    server.join().expect("the scripted model's thread");
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn main() {
    let scratch = std::env::temp_dir().join(format!("nxs-bench-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).expect("scratch");
    let (mut child, mut stdin, mut stdout) = start(&subagent_binary(), &scratch);
    let pid = child.id();
    let mut line = String::new();

    let mut ping = |i: usize| -> Duration {
        let request = format!("{{\"type\":\"ping\",\"id\":\"b{i}\"}}\n");
        let start = Instant::now();
        stdin.write_all(request.as_bytes()).expect("write");
        stdin.flush().expect("flush");
        line.clear();
        stdout.read_line(&mut line).expect("read");
        let elapsed = start.elapsed();
        assert!(line.contains("\"pong\""), "unexpected answer: {line}");
        elapsed
    };

    ping(0);
    std::thread::sleep(Duration::from_millis(200));
    let idle = memory(pid);
    let mut samples: Vec<Duration> = (1..=ROUND_TRIPS).map(&mut ping).collect();
    let after = memory(pid);
    samples.sort();

    let total: Duration = samples.iter().sum();
    println!("subagent ping round trip over pipes ({ROUND_TRIPS} pings, release build):");
    println!("  p50  {:>8.1} µs", percentile(&samples, 0.50).as_secs_f64() * 1e6);
    println!("  p99  {:>8.1} µs", percentile(&samples, 0.99).as_secs_f64() * 1e6);
    println!("  max  {:>8.1} µs", samples.last().unwrap().as_secs_f64() * 1e6);
    println!("  mean {:>8.1} µs", total.as_secs_f64() * 1e6 / ROUND_TRIPS as f64);
    println!("subagent idle RSS, host build: {idle}");
    println!("subagent RSS after the pings, host build: {after}");
    drop(stdin);
    let _ = child.wait();

    let image_binary =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(IMAGE_BINARY);
    if image_binary.exists() {
        let figure = idle_memory_of(&image_binary, &scratch);
        println!("subagent idle RSS, static image binary: {figure}");
    } else {
        println!("subagent idle RSS, static image binary: not built (run `make image` first)");
    }
    loop_overhead(&scratch);
    let _ = std::fs::remove_dir_all(&scratch);
}
