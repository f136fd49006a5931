//! The audit log stays bounded whatever a container does: a flood of refused requests is cut
//! to a few lines a second plus one line counting the rest, a task's lines are capped, the
//! file rotates by size and keeps at most N files, long host names are cut, and neither the
//! provider key nor a relay token is ever written, whatever a container puts in a request.

use nexbot_tests::egress as egress_support;

use std::time::Instant;

use egress_support::{connect, read_audit, start, Started, WAIT};
use nexbot_egress::{EgressConfig, HostPattern};
use secrecy::ExposeSecret;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const KEY: &str = "sk-nxe-PLANTED-Audit-Key-0123456789";

/// A config that refuses every host but `allowed.test` by name, so no refusal needs a lookup.
fn refusing() -> EgressConfig {
    let mut config = EgressConfig::default();
    config.proxy.allow_domains = vec![HostPattern::try_from("allowed.test".to_owned()).unwrap()];
    config
}

/// `count` refused plain-HTTP requests, each for another host, on one kept-alive
/// connection (an HTTP client library would open one connection per host).
async fn flood(started: &Started, count: usize) {
    let mut stream = tokio::net::TcpStream::connect(started.egress.local_addr()).await.unwrap();
    for i in 0..count {
        let host = format!("flood-{i}.test");
        let auth = egress_support::auth_line(started.egress.local_addr());
        let request = format!("GET http://{host}/ HTTP/1.1\r\nHost: {host}\r\n{auth}\r\n");
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            tokio::time::timeout(WAIT, stream.read_exact(&mut byte)).await.unwrap().unwrap();
            head.push(byte[0]);
        }
        let head = String::from_utf8(head).unwrap().to_ascii_lowercase();
        assert!(head.starts_with("http/1.1 403"), "{head}");
        let length: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse().ok())
            .expect("a sized answer");
        let mut body = vec![0u8; length];
        tokio::time::timeout(WAIT, stream.read_exact(&mut body)).await.unwrap().unwrap();
    }
}

fn suppressed(lines: &[Value]) -> u64 {
    lines
        .iter()
        .filter(|l| l["kind"] == "suppressed")
        .map(|l| l["suppressed"].as_u64().unwrap())
        .sum()
}

#[tokio::test]
async fn a_flood_of_refusals_is_capped_per_second_and_the_rest_counted_in_one_line() {
    let mut config = refusing();
    config.audit_max_refusals_per_sec = 5;
    let started = start(config, None).await;
    let began = Instant::now();
    flood(&started, 300).await;
    let seconds = began.elapsed().as_secs();
    let metrics = started.egress.metrics();
    let path = started.egress.audit_path().to_owned();
    started.egress.shutdown(WAIT).await;

    let lines = read_audit(&path);
    let written = lines.iter().filter(|l| l["verdict"] == "denied").count() as u64;
    // The flood may straddle one more second boundary than it lasted whole seconds.
    assert!(written <= 5 * (seconds + 2), "{written} refusal lines in {seconds} s");
    assert_eq!(written + suppressed(&lines), 300, "every refusal is a line or counted in one");
    let notes: Vec<&Value> = lines.iter().filter(|l| l["kind"] == "suppressed").collect();
    assert!(!notes.is_empty() && notes.len() as u64 <= seconds + 2, "{notes:#?}");
    let reason = notes[0]["reason"].as_str().unwrap();
    assert!(
        reason.contains("lines suppressed") && reason.contains("more than 5 refusals"),
        "{reason}"
    );
    assert_eq!(metrics.denied, 300, "the metrics count them all");
    assert_eq!(metrics.audit_lines_suppressed, suppressed(&lines));
}

#[tokio::test]
async fn the_audit_log_rotates_by_size_and_keeps_at_most_n_files() {
    let mut config = refusing();
    config.audit_max_bytes = 4096;
    config.audit_max_files = 3;
    config.audit_max_refusals_per_sec = 1_000_000;
    let started = start(config, None).await;
    flood(&started, 200).await;
    started.audit_lines(1).await;

    let dir = &started.dir.0;
    let mut files: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    assert_eq!(files, ["egress-audit.jsonl", "egress-audit.jsonl.1", "egress-audit.jsonl.2"]);
    let mut kept = Vec::new();
    for name in files.iter().rev() {
        let path = dir.join(name);
        let size = std::fs::metadata(&path).unwrap().len();
        assert!(size <= 4096, "{name} is {size} bytes");
        kept.extend(read_audit(&path)); // every line whole JSON
    }
    // The newest lines are kept, in order, up to the last request.
    let hosts: Vec<&str> = kept.iter().map(|l| l["host"].as_str().unwrap()).collect();
    assert_eq!(hosts.last(), Some(&"flood-199.test"));
    let first: usize =
        hosts[0].trim_start_matches("flood-").trim_end_matches(".test").parse().unwrap();
    let expected: Vec<String> = (first..200).map(|i| format!("flood-{i}.test")).collect();
    assert_eq!(hosts, expected.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(first > 100, "older lines were dropped with the oldest file");
}

#[tokio::test]
async fn a_tasks_lines_are_capped_and_the_rest_counted_in_one_line_when_it_ends() {
    let mut config = refusing();
    config.audit_max_lines_per_task = 5;
    config.audit_max_refusals_per_sec = 1_000_000;
    let started = start(config, None).await;
    flood(&started, 30).await;
    let summary = started.egress.finish_task("t-1").egress;
    assert_eq!(summary.totals().denied, 30, "the summary counts every request");
    assert_eq!(summary.audit_lines_suppressed, 25);

    let lines = started.audit_lines(6).await;
    assert_eq!(lines.len(), 6, "{lines:#?}");
    assert!(lines[..5].iter().all(|l| l["verdict"] == "denied" && l["task_id"] == "t-1"));
    assert_eq!(
        (lines[5]["kind"].as_str(), lines[5]["task_id"].as_str()),
        (Some("suppressed"), Some("t-1"))
    );
    assert_eq!(lines[5]["suppressed"], 25);
    assert!(lines[5]["reason"].as_str().unwrap().starts_with("25 lines suppressed: task t-1"));
}

#[tokio::test]
async fn long_hosts_are_cut_and_no_key_or_relay_token_is_ever_written() {
    let started = start(refusing(), Some(KEY)).await;
    let proxy = started.egress.local_addr();
    let token = started.egress.issue_token("t-1").unwrap();
    let long = format!("{}.test", "a".repeat(1000));
    let lower_token = token.expose_secret().to_ascii_lowercase();
    let hosts = [
        long.clone(),
        format!("{KEY}.test"),
        format!("x.{}.test", KEY.to_ascii_uppercase()),
        format!("{}.test", token.expose_secret()),
        format!("{lower_token}.test"),
    ];
    for host in &hosts {
        let (code, _) = connect(proxy, &format!("{host}:443")).await;
        assert!(code == 400 || code == 403, "{host}: {code}");
    }
    let lines = started.audit_lines(hosts.len()).await;
    assert!(lines[0]["host"].as_str().unwrap().chars().count() <= 253, "{}", lines[0]);
    assert!(lines[0]["host"].as_str().unwrap().ends_with('…'));
    assert!(lines[0]["reason"].as_str().unwrap().chars().count() <= 1024);
    let summary = started.egress.finish_task("t-1").egress;
    assert!(summary.destinations.keys().all(|d| d.chars().count() <= 253 + 6), "{summary:#?}");

    let audit = std::fs::read_to_string(started.egress.audit_path()).unwrap();
    let summary = format!("{summary:?}");
    let body = &token.expose_secret()[4..];
    for (place, text) in [("audit", audit.as_str()), ("summary", summary.as_str())] {
        let lowered = text.to_ascii_lowercase();
        assert!(!lowered.contains("planted"), "the provider key leaked into the {place}");
        assert!(
            !lowered.contains(&body.to_ascii_lowercase()),
            "a relay token leaked into the {place}"
        );
    }
    assert!(
        audit.contains("[REDACTED:LLM_PROVIDER_KEY]") && audit.contains("[REDACTED:relay_token]")
    );
}
