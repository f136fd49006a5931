//! `make bench`: ping round trips over pipes to the real binary (p50/p99 of 2,000), and the
//! subagent's idle memory (VmRSS from /proc, split into anonymous and file-backed pages) —
//! also for the static binary that goes into the image, when `make image` has built it.
//! Prints figures; asserts nothing about speed.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const ROUND_TRIPS: usize = 2_000;

/// The static binary `make image` puts into the image.
const IMAGE_BINARY: &str = "target/x86_64-unknown-linux-gnu/release/nexbot-subagent";

fn status_kib(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

fn memory(pid: u32) -> String {
    match (status_kib(pid, "VmRSS:"), status_kib(pid, "RssAnon:"), status_kib(pid, "RssFile:")) {
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

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn main() {
    let scratch = std::env::temp_dir().join(format!("nxs-bench-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).expect("scratch");
    let mut child = Command::new(env!("CARGO_BIN_EXE_nexbot-subagent"))
        .env("NEXBOT_SCRATCH_DIR", &scratch)
        .env("NEXBOT_LOG_LEVEL", "warn")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start nexbot-subagent");
    let pid = child.id();
    let mut stdin = child.stdin.take().expect("stdin");
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
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
    let _ = std::fs::remove_dir_all(&scratch);
}
