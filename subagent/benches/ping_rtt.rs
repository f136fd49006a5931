//! `make bench`: ping round trips over pipes to the real binary (p50/p99 of 2,000), and the
//! subagent's idle memory (VmRSS from /proc) before and after them. Prints figures; asserts
//! nothing about speed.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const ROUND_TRIPS: usize = 2_000;

fn vm_rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
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
    let idle_rss = vm_rss_kib(pid);
    let mut samples: Vec<Duration> = (1..=ROUND_TRIPS).map(&mut ping).collect();
    let after_rss = vm_rss_kib(pid);
    samples.sort();

    let total: Duration = samples.iter().sum();
    println!("subagent ping round trip over pipes ({ROUND_TRIPS} pings, release build):");
    println!("  p50  {:>8.1} µs", percentile(&samples, 0.50).as_secs_f64() * 1e6);
    println!("  p99  {:>8.1} µs", percentile(&samples, 0.99).as_secs_f64() * 1e6);
    println!("  max  {:>8.1} µs", samples.last().unwrap().as_secs_f64() * 1e6);
    println!("  mean {:>8.1} µs", total.as_secs_f64() * 1e6 / ROUND_TRIPS as f64);
    let show = |v: Option<u64>| {
        v.map_or("unknown".to_owned(), |k| format!("{:.1} MiB ({k} KiB)", k as f64 / 1024.0))
    };
    println!("subagent idle RSS (VmRSS): {}", show(idle_rss));
    println!("subagent RSS after the pings: {}", show(after_rss));

    drop(stdin);
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&scratch);
}
