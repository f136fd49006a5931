//! Attribution by the task, not by "whatever runs in that container now": a request from a
//! pool container is served only while the container runs a task, and only when it carries
//! that task's egress credential. A process left over from an earlier task (holding that
//! task's credential or relay token) gets nothing, and its refusal is audited under the task
//! it belongs to — never under the task running now. The client at 127.0.0.1 is the pool
//! container `c-test` (see `nexbot_tests::egress::start`).

use egress_support::allow;
use nexbot_tests::egress as egress_support;

use std::net::SocketAddr;
use std::sync::atomic::Ordering;

use egress_support::{
    connect, connect_with, echo_server, proxy_authorization, start, web_echo_server, Echoed, WAIT,
};
use nexbot_egress::EgressConfig;
use nexbot_tests::scripted_llm::{ScriptedLlm, Step};
use secrecy::ExposeSecret;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const LOCAL: &str = "127.0.0.1";

/// One absolute-form GET sent as written, with `credential` (or none); the status and the
/// whole answer.
async fn get(proxy: SocketAddr, target: SocketAddr, credential: Option<&str>) -> (u16, String) {
    let mut stream = tokio::net::TcpStream::connect(proxy).await.unwrap();
    let auth = credential
        .map(|c| format!("Proxy-Authorization: {}\r\n", proxy_authorization(c)))
        .unwrap_or_default();
    let request = format!(
        "GET http://{target}/late HTTP/1.1\r\nHost: {target}\r\n{auth}Connection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(WAIT, stream.read_to_end(&mut answer)).await.unwrap().unwrap();
    let answer = String::from_utf8_lossy(&answer).into_owned();
    (answer.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0), answer)
}

fn reason(line: &Value) -> &str {
    line["reason"].as_str().unwrap_or_default()
}

#[tokio::test]
async fn a_container_that_runs_no_task_gets_nothing_out_and_is_audited() {
    let (echo, hits) = echo_server().await;
    let (web, seen) = web_echo_server(LOCAL.parse().unwrap()).await;
    let mut config = EgressConfig::default();
    config.proxy.allow_internal = vec![allow(echo), allow(web)];
    let started = start(config, None).await;
    let proxy = started.egress.local_addr();
    let credential = egress_support::credential_for(proxy).unwrap();
    // Between tasks: the container is known, its task is none (t-1's credential still live,
    // as if the host had not ended it yet: the container's state decides first).
    started.table.set_task(LOCAL.parse().unwrap(), None);

    let (code, mut answer) = connect(proxy, &echo.to_string()).await;
    assert_eq!(code, 403);
    let mut body = [0u8; 512];
    let n = tokio::time::timeout(WAIT, answer.read(&mut body)).await.unwrap().unwrap();
    let text = String::from_utf8_lossy(&body[..n]);
    assert!(text.contains("idle_container: container c-test runs no task"), "{text}");
    let (code, answer) = get(proxy, web, Some(credential.expose_secret())).await;
    assert_eq!(code, 403, "{answer}");
    let (code, _) = get(proxy, web, None).await;
    assert_eq!(code, 403, "without a credential alike");
    assert_eq!(hits.load(Ordering::SeqCst), 0, "nothing was dialled");
    assert!(seen.lock().unwrap().is_empty(), "nothing was dialled");

    let lines = started.audit_lines(3).await;
    for line in &lines {
        assert_eq!(line["verdict"], "denied", "{line}");
        assert!(reason(line).starts_with("idle_container"), "{line}");
        assert_eq!((line["container"].as_str(), &line["task_id"]), (Some("c-test"), &Value::Null));
        assert_eq!(line["resolved"], Value::Null, "nothing was resolved or dialled: {line}");
    }
}

#[tokio::test]
async fn a_leftover_of_an_ended_task_is_refused_and_audited_as_that_task_never_as_the_running_one()
{
    let (echo, hits) = echo_server().await;
    let (web, seen) = web_echo_server(LOCAL.parse().unwrap()).await;
    let llm = ScriptedLlm::start(vec![Step::text("for task 2")]).await;
    let mut config = EgressConfig::default();
    config.proxy.allow_internal = vec![allow(echo), allow(web)];
    config.relay.provider_base_url = Some(llm.base_url());
    config.relay.default_max_tokens = 100;
    let started = start(config, None).await;
    let proxy = started.egress.local_addr();
    // Task 1 ran in the container, with its credential and relay token; it ends, and the
    // pool gives the container task 2.
    let first = egress_support::credential_for(proxy).unwrap();
    let first_token = started.egress.tokens().issue("t-1", 10_000).unwrap();
    started.egress.finish_task("t-1");
    let second = started.run_task("t-2");
    let second_token = started.egress.tokens().issue("t-2", 10_000).unwrap();

    // A process task 1 left behind (it holds task 1's credential and token).
    let (code, answer) = get(proxy, web, Some(first.expose_secret())).await;
    assert_eq!(code, 407, "{answer}");
    assert!(answer.contains("task_ended: task t-1 has ended"), "{answer}");
    assert!(answer.to_ascii_lowercase().contains("proxy-authenticate: basic"), "{answer}");
    let (code, _) = connect_with(proxy, &echo.to_string(), Some(first.expose_secret())).await;
    assert_eq!(code, 407);
    let relay = |token: String| {
        reqwest::Client::new()
            .post(format!("{}/chat/completions", started.egress.relay_base_url()))
            .bearer_auth(token)
            .json(&json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]}))
            .timeout(WAIT)
            .send()
    };
    let refused = relay(first_token.expose_secret().to_owned()).await.unwrap();
    assert_eq!(refused.status(), 401, "an ended task's token is dead");
    // A process with no credential at all (an older subagent) is told what is missing.
    let (code, answer) = get(proxy, web, None).await;
    assert_eq!(code, 407);
    assert!(
        answer.contains("proxy_credential_missing") && answer.contains("egress_token"),
        "{answer}"
    );
    // A forged one.
    let forged = format!("nxp_{}", "A".repeat(43));
    assert_eq!(get(proxy, web, Some(&forged)).await.0, 407);
    assert_eq!(hits.load(Ordering::SeqCst), 0, "nothing left for the leftovers");
    assert!(seen.lock().unwrap().is_empty(), "nothing left for the leftovers");

    // Task 2's own requests are served, through plain HTTP and CONNECT, and its relay token
    // works; the credential never goes upstream.
    let (code, answer) = get(proxy, web, Some(second.expose_secret())).await;
    assert_eq!(code, 200, "{answer}");
    let (code, mut tunnel) = connect(proxy, &echo.to_string()).await;
    assert_eq!(code, 200);
    tunnel.write_all(b"ping").await.unwrap();
    let mut echoed = [0u8; 4];
    tokio::time::timeout(WAIT, tunnel.read_exact(&mut echoed)).await.unwrap().unwrap();
    drop(tunnel);
    let served = relay(second_token.expose_secret().to_owned()).await.unwrap();
    assert_eq!(served.status(), 200);
    served.bytes().await.unwrap();
    let upstream: Vec<Echoed> = seen.lock().unwrap().clone();
    assert_eq!(upstream.len(), 1);
    assert_eq!(upstream[0].header("proxy-authorization"), None, "stripped before forwarding");

    let lines = started.audit_lines(8).await;
    let refused: Vec<&Value> = lines.iter().filter(|l| l["verdict"] == "denied").collect();
    assert_eq!(refused.len(), 5, "{lines:#?}");
    for line in &refused[..2] {
        assert_eq!(line["task_id"], "t-1", "audited as the ended task: {line}");
        assert!(reason(line).starts_with("task_ended: task t-1"), "{line}");
    }
    assert_eq!(refused[2]["task_id"], Value::Null, "a dead token names no task");
    for line in &refused[3..] {
        assert_eq!(line["task_id"], Value::Null, "never task 2: {line}");
        assert!(reason(line).starts_with("proxy_credential_"), "{line}");
    }
    let summary = started.egress.tokens().summary("t-2").unwrap();
    assert_eq!(summary.totals().denied, 0, "task 2 is charged with none of it: {summary:#?}");
    assert_eq!(summary.totals().allowed, 3, "{summary:#?}");
    let audit = std::fs::read_to_string(started.egress.audit_path()).unwrap();
    for secret in [&first, &second, &first_token, &second_token] {
        assert!(!audit.contains(&secret.expose_secret()[4..]), "a credential in the audit");
    }
}

#[tokio::test]
async fn a_live_tasks_credential_or_token_is_good_only_in_the_container_running_it() {
    let (web, seen) = web_echo_server(LOCAL.parse().unwrap()).await;
    let llm = ScriptedLlm::start(vec![]).await;
    let mut config = EgressConfig::default();
    config.proxy.allow_internal = vec![allow(web)];
    config.relay.provider_base_url = Some(llm.base_url());
    let started = start(config, None).await;
    let proxy = started.egress.local_addr();
    // Task t-9 runs in another container; its credential and token show up in c-test.
    let other = started.egress.issue_proxy_token("t-9").unwrap();
    let token = started.egress.tokens().issue("t-9", 10_000).unwrap();

    let (code, answer) = get(proxy, web, Some(other.expose_secret())).await;
    assert_eq!(code, 407);
    assert!(answer.contains("task_mismatch: the credential is task t-9's"), "{answer}");
    let answer = reqwest::Client::new()
        .post(format!("{}/chat/completions", started.egress.relay_base_url()))
        .bearer_auth(token.expose_secret())
        .json(&json!({"model": "m", "messages": []}))
        .timeout(WAIT)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 403);
    let body: Value = answer.json().await.unwrap();
    assert_eq!(body["error"]["code"], "task_mismatch", "{body}");
    assert!(seen.lock().unwrap().is_empty() && llm.chat_requests().is_empty(), "nothing sent");

    let lines = started.audit_lines(2).await;
    for line in &lines {
        assert_eq!(
            (line["task_id"].as_str(), line["verdict"].as_str()),
            (Some("t-9"), Some("denied"))
        );
        assert!(reason(line).contains("task_mismatch"), "{line}");
    }
    // The relay's refusal is charged to nobody's budget.
    assert_eq!(started.egress.tokens().usage("t-9").map(|u| u.used), Some(0));
}

/// A container dedicated to one identity for life (an MCP server's) needs no credential: its
/// address says whose its requests are, and the audit names that identity.
#[tokio::test]
async fn a_dedicated_container_is_served_under_its_identity_without_a_credential() {
    let (web, seen) = web_echo_server(LOCAL.parse().unwrap()).await;
    let mut config = EgressConfig::default();
    config.proxy.allow_internal = vec![allow(web)];
    let started = start(config, None).await;
    let proxy = started.egress.local_addr();
    started.table.set_dedicated(LOCAL.parse().unwrap(), "mcp-everything-1", "mcp:everything");
    let (code, answer) = get(proxy, web, None).await;
    assert_eq!(code, 200, "{answer}");
    assert_eq!(seen.lock().unwrap().len(), 1);
    let lines = started.audit_lines(1).await;
    assert_eq!(lines[0]["task_id"], "mcp:everything", "{}", lines[0]);
    assert_eq!(lines[0]["container"], "mcp-everything-1");
    // The same address as a pool container again: a credential is asked once more.
    started.table.set_container(LOCAL.parse().unwrap(), "c-test");
    started.table.set_task(LOCAL.parse().unwrap(), Some("t-9".into()));
    let (code, _) = get(proxy, web, None).await;
    assert_eq!(code, 407);
}
