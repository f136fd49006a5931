//! A task's egress as one unit: what it did (destinations with their verdicts, bytes) is kept
//! while it runs and handed over when it ends, by the same call that revokes its relay token;
//! its open tunnels and requests are cut then, and nothing more leaves in its name.

use egress_support::allow;
use nexbot_tests::egress as egress_support;

use egress_support::{connect, echo_server, http_server, start, WAIT};
use nexbot_egress::{DestinationCounts, EgressConfig};
use nexbot_tests::scripted_llm::{ScriptedLlm, Step};
use secrecy::ExposeSecret;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[tokio::test]
async fn a_task_is_summarised_when_it_ends_and_its_tunnels_are_cut_then() {
    let (echo, _) = echo_server().await;
    let (web, _) = http_server().await;
    let llm = ScriptedLlm::start(vec![Step::text("relayed")]).await;
    let mut config = EgressConfig::default();
    config.proxy.allow_internal = vec![allow(echo), allow(web)];
    config.relay.provider_base_url = Some(llm.base_url());
    let started = start(config, Some("sk-nxe-summary-key")).await;
    let proxy = started.egress.local_addr();
    // The test client is attributed to task t-1 (see `start`).
    let token = started.egress.issue_token("t-1").unwrap();

    // A tunnel that stays open, a plain request, two refusals and a relay call.
    let (code, mut tunnel) = connect(proxy, &echo.to_string()).await;
    assert_eq!(code, 200);
    tunnel.write_all(b"12345").await.unwrap();
    let mut echoed = [0u8; 5];
    tokio::time::timeout(WAIT, tunnel.read_exact(&mut echoed)).await.unwrap().unwrap();
    let body = started.proxy_client().get(format!("http://{web}/hello")).send().await.unwrap();
    assert_eq!(body.text().await.unwrap(), "hello from the allowed server");
    assert_eq!(connect(proxy, "10.1.2.3:80").await.0, 403);
    assert_eq!(connect(proxy, "127.0.0.1:22").await.0, 403);
    let answer = reqwest::Client::new()
        .post(format!("{}/chat/completions", started.egress.relay_base_url()))
        .bearer_auth(token.expose_secret())
        .json(&json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    answer.bytes().await.unwrap();
    started.audit_lines(4).await; // every line but the open tunnel's

    let tokens = started.egress.tokens();
    let running = tokens.summary("t-1").expect("a running task has a summary");
    assert_eq!(running.destinations[&echo.to_string()].allowed, 1);

    // Ending the task: one call revokes the token and hands everything over.
    let finished = started.egress.finish_task("t-1");
    assert_eq!(finished.usage.map(|u| u.used), Some(15), "the relay's usage");
    let summary = finished.egress;
    assert_eq!(summary.task_id, "t-1");
    let allowed = DestinationCounts { allowed: 1, denied: 0, errors: 0 };
    let denied = DestinationCounts { allowed: 0, denied: 1, errors: 0 };
    let provider = llm.base_url().trim_start_matches("http://").trim_end_matches("/v1").to_owned();
    assert_eq!(summary.destinations[&echo.to_string()], allowed, "{summary:#?}");
    assert_eq!(summary.destinations[&web.to_string()], allowed);
    assert_eq!(summary.destinations[&provider], allowed);
    assert_eq!(summary.destinations["10.1.2.3:80"], denied);
    assert_eq!(summary.destinations["127.0.0.1:22"], denied);
    assert_eq!(summary.destinations.len(), 5);
    assert_eq!(summary.totals(), DestinationCounts { allowed: 3, denied: 2, errors: 0 });
    assert_eq!(summary.cut_at_end, 1, "the tunnel was still open");

    // The tunnel is cut, and its line says why.
    let mut rest = Vec::new();
    tokio::time::timeout(WAIT, tunnel.read_to_end(&mut rest)).await.expect("tunnel cut").ok();
    let lines = started.audit_lines(5).await;
    let tunnel_line = lines.iter().find(|l| l["port"] == echo.port()).unwrap();
    assert_eq!(tunnel_line["reason"], "cut: task ended");
    // The summary's bytes are the audit lines' bytes, without reading the audit back.
    let sum = |field: &str| lines.iter().map(|l| l[field].as_u64().unwrap()).sum::<u64>();
    assert_eq!((summary.bytes_up, summary.bytes_down), (sum("bytes_up"), sum("bytes_down")));
    assert!(summary.bytes_up >= 5 && summary.bytes_down >= 5 + 29, "{summary:#?}");

    // Nothing more leaves in the task's name (its egress credential is dead too: 407), its
    // token is dead, and it is handed over once.
    let (code, _) = connect(proxy, &echo.to_string()).await;
    assert_eq!(code, 407);
    let line = &started.audit_lines(6).await[5];
    assert!(line["reason"].as_str().unwrap().starts_with("task_ended: task t-1"), "{line}");
    assert!(tokens.authorize(&token).is_err());
    let again = started.egress.finish_task("t-1");
    assert_eq!((again.usage, again.egress.destinations.len()), (None, 0));
    assert!(tokens.summary("t-1").is_none());

    // A new token and credential for the id start it again.
    let _token = tokens.issue("t-1", 10).unwrap();
    started.issue_credential("t-1");
    assert_eq!(connect(proxy, &echo.to_string()).await.0, 200);
    let line: &Value = &started.audit_lines(7).await[6];
    assert_eq!(
        (line["task_id"].as_str(), line["verdict"].as_str()),
        (Some("t-1"), Some("allowed"))
    );
}

#[tokio::test]
async fn a_plain_request_in_flight_is_cut_when_its_task_ends() {
    // A server that answers the head at once and then dribbles the body forever.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let slow = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 1024];
                let _ = stream.read(&mut buf).await;
                let head = "HTTP/1.1 200 OK\r\ncontent-length: 1000000\r\n\r\n";
                let _ = stream.write_all(head.as_bytes()).await;
                loop {
                    if stream.write_all(b"x").await.is_err() {
                        return;
                    }
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
            });
        }
    });
    let mut config = EgressConfig::default();
    config.proxy.allow_internal = vec![allow(slow)];
    let started = start(config, None).await;
    let mut response = started.proxy_client().get(format!("http://{slow}/")).send().await.unwrap();
    assert_eq!(response.status(), 200);
    assert!(response.chunk().await.unwrap().is_some(), "the body flows");

    let summary = started.egress.finish_task("t-1").egress;
    assert_eq!(summary.cut_at_end, 1);
    let ended = tokio::time::timeout(WAIT, async {
        loop {
            match response.chunk().await {
                Ok(Some(_)) => continue,
                other => return other.is_err(),
            }
        }
    })
    .await
    .expect("the body stops");
    assert!(ended, "cut, not finished");
    let line = &started.audit_lines(1).await[0];
    assert_eq!(line["reason"], "cut: task ended (bytes_down)");
}
