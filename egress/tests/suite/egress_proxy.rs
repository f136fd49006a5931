//! The egress proxy over real sockets: CONNECT tunnels and plain HTTP forwarding to local
//! servers, every internal-address disguise denied with its reason, domain lists, attribution,
//! byte and duration limits, bad requests, and one audit line per connection.

use egress_support::allow;
use nexbot_tests::egress as egress_support;

use std::sync::atomic::Ordering;

use egress_support::{
    connect, echo_server, firehose_server, http_server, request_from, start, Answered, WAIT,
};
use nexbot_egress::{Cidr, EgressConfig, HostPattern, InternalAllow};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn config_allowing(addrs: &[std::net::SocketAddr]) -> EgressConfig {
    let mut config = EgressConfig::default();
    config.proxy.allow_internal = addrs.iter().copied().map(allow).collect();
    config
}

#[tokio::test]
async fn plain_http_to_an_explicitly_allowed_server_is_forwarded_and_audited() {
    let (target, seen) = http_server().await;
    let started = start(config_allowing(&[target]), None).await;
    let client = started.proxy_client();

    let response = client.get(format!("http://{target}/hello")).send().await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.text().await.unwrap(), "hello from the allowed server");

    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1);
    assert!(seen[0].starts_with("GET /hello "), "origin-form upstream: {}", seen[0]);
    assert!(!seen[0].contains("proxy-"), "proxy headers stripped: {}", seen[0]);

    let lines = started.audit_lines(1).await;
    let line = &lines[0];
    assert_eq!(line["kind"], "http");
    assert_eq!(line["task_id"], "t-1");
    assert_eq!(line["container"], "c-test");
    assert_eq!(line["host"], "127.0.0.1");
    assert_eq!(line["port"], target.port());
    assert_eq!(line["resolved"], "127.0.0.1");
    assert_eq!(line["verdict"], "allowed");
    assert_eq!(line["reason"], "status 200");
    assert_eq!(line["bytes_down"], "hello from the allowed server".len());
    assert_eq!(started.egress.metrics().allowed, 1);
}

#[tokio::test]
async fn connect_tunnels_bytes_both_ways_and_audits_the_counts() {
    let (target, _) = echo_server().await;
    let started = start(config_allowing(&[target]), None).await;

    let (code, mut stream) = connect(started.egress.local_addr(), &target.to_string()).await;
    assert_eq!(code, 200);
    stream.write_all(b"ping through the tunnel").await.unwrap();
    let mut buf = [0u8; 23];
    tokio::time::timeout(WAIT, stream.read_exact(&mut buf)).await.unwrap().unwrap();
    assert_eq!(&buf, b"ping through the tunnel");
    stream.shutdown().await.unwrap();
    let mut rest = Vec::new();
    tokio::time::timeout(WAIT, stream.read_to_end(&mut rest)).await.unwrap().unwrap();
    assert!(rest.is_empty());

    let line = &started.audit_lines(1).await[0];
    assert_eq!(line["kind"], "connect");
    assert_eq!(line["task_id"], "t-1");
    assert_eq!(line["verdict"], "allowed");
    assert_eq!(line["reason"], "closed");
    assert_eq!((line["bytes_up"].as_u64(), line["bytes_down"].as_u64()), (Some(23), Some(23)));
}

#[tokio::test]
async fn internal_destinations_are_denied_in_every_disguise_and_audited_with_the_reason() {
    // A live server on loopback that nobody allowed: it must never see a connection.
    let (bystander, accepted) = echo_server().await;
    let started = start(EgressConfig::default(), None).await;
    let port = bystander.port();
    let cases = [
        ("169.254.169.254:80".to_owned(), "cloud_metadata"),
        ("10.1.2.3:80".to_owned(), "private"),
        ("192.168.0.1:443".to_owned(), "private"),
        (format!("127.0.0.1:{port}"), "loopback"),
        (format!("localhost:{port}"), "loopback"),
        (format!("[::1]:{port}"), "loopback"),
        (format!("[::ffff:127.0.0.1]:{port}"), "loopback"),
        (format!("[::ffff:7f00:1]:{port}"), "loopback"),
        (format!("[64:ff9b::127.0.0.1]:{port}"), "loopback"),
        (format!("0.0.0.0:{port}"), "unspecified"),
        ("100.64.0.1:80".to_owned(), "shared_cgnat"),
        ("[fd00::1]:80".to_owned(), "unique_local"),
        ("[fe80::1]:80".to_owned(), "link_local"),
        ("224.0.0.1:80".to_owned(), "multicast"),
    ];
    let client = started.proxy_client();
    for (target, _) in &cases {
        let (code, _) = connect(started.egress.local_addr(), target).await;
        assert_eq!(code, 403, "CONNECT {target}");
        let response = client.get(format!("http://{target}/")).send().await.unwrap();
        assert_eq!(response.status(), 403, "GET http://{target}/");
        let body = response.text().await.unwrap();
        assert!(body.contains("denied") || body.contains("address"), "{body}");
    }
    assert_eq!(accepted.load(Ordering::SeqCst), 0, "no denied connection reached the server");

    let lines = started.audit_lines(cases.len() * 2).await;
    for (i, (target, reason)) in cases.iter().enumerate() {
        for line in &lines[i * 2..i * 2 + 2] {
            assert_eq!(line["verdict"], "denied", "{target}: {line}");
            let text = line["reason"].as_str().unwrap();
            assert!(
                text.starts_with(reason),
                "{target}: reason {text:?} should start with {reason}"
            );
            assert_eq!(line["task_id"], "t-1");
            assert_eq!(line["bytes_up"], 0);
        }
    }
    let localhost = &lines[8];
    assert_eq!(localhost["host"], "localhost");
    assert!(
        localhost["resolved"].as_str().unwrap().starts_with("127.")
            || localhost["resolved"] == "::1"
    );
    assert_eq!(started.egress.metrics().denied, (cases.len() * 2) as u64);
}

/// The body of a refusal after its head: one line of text (the connection stays open).
async fn refusal_text(mut stream: tokio::net::TcpStream) -> String {
    let mut body = Vec::new();
    let mut buf = [0u8; 1024];
    while !body.ends_with(b"\n") {
        match tokio::time::timeout(WAIT, stream.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => body.extend_from_slice(&buf[..n]),
            _ => break,
        }
    }
    String::from_utf8_lossy(&body).into_owned()
}

#[tokio::test]
async fn only_web_ports_are_reachable_unless_configured_and_refusals_name_the_port() {
    let (target, accepted) = echo_server().await;
    let mut config = config_allowing(&[target]);
    // The loopback block is allowed too, so nothing but the port policy refuses port 22.
    config.proxy.allow_internal.push(InternalAllow {
        cidr: Cidr::try_from("127.0.0.0/8".to_owned()).unwrap(),
        ports: vec![],
    });
    let started = start(config.clone(), None).await;
    let proxy = started.egress.local_addr();

    assert_eq!(connect(proxy, &target.to_string()).await.0, 200, "its own ip:port is open");
    let (code, stream) = connect(proxy, "127.0.0.1:22").await;
    assert_eq!(code, 403);
    let body = refusal_text(stream).await;
    assert!(body.contains("port_not_allowed: port 22 of 127.0.0.1"), "{body}");
    assert!(body.contains("allowed: 80, 443"), "{body}");
    let response = started.proxy_client().get("http://127.0.0.1:22/").send().await.unwrap();
    assert_eq!(response.status(), 403);
    assert!(response.text().await.unwrap().contains("port 22"));
    assert_eq!(connect(proxy, "[::ffff:127.0.0.1]:8080").await.0, 403);

    // The tunnel's line is written when it closes: after the refusals, or before.
    let lines = started.audit_lines(4).await;
    let denied: Vec<&Value> = lines.iter().filter(|l| l["verdict"] == "denied").collect();
    assert_eq!(denied.len(), 3, "{lines:#?}");
    for line in &denied {
        assert!(line["reason"].as_str().unwrap().starts_with("port_not_allowed: port "), "{line}");
    }
    assert_eq!(
        (denied[0]["kind"].as_str(), denied[0]["port"].as_u64()),
        (Some("connect"), Some(22))
    );
    assert_eq!((denied[1]["kind"].as_str(), denied[1]["port"].as_u64()), (Some("http"), Some(22)));

    // Port 80 passes the port policy, so the host check refuses it; a rule that narrows
    // 127.0.0.1 to port 443 makes the port policy refuse it first.
    assert_eq!(connect(proxy, "127.0.0.1:80").await.0, 403);
    let line = &started.audit_lines(5).await[4];
    assert!(line["reason"].as_str().unwrap().starts_with("host_address"), "{line}");
    config.proxy.port_rules = vec![nexbot_egress::PortRule {
        hosts: vec![HostPattern::try_from("127.0.0.1".to_owned()).unwrap()],
        ports: vec![443],
    }];
    let narrowed = start(config, None).await;
    let (code, stream) = connect(narrowed.egress.local_addr(), "127.0.0.1:80").await;
    assert_eq!(code, 403);
    assert!(refusal_text(stream).await.contains("port_not_allowed: port 80 of 127.0.0.1"));
    assert_eq!(connect(narrowed.egress.local_addr(), &target.to_string()).await.0, 200);
    assert_eq!(accepted.load(Ordering::SeqCst), 2, "only the allowed ip:port was reached");
}

/// A plain-HTTP request in absolute form, sent as written (an HTTP client library would
/// rewrite the host); returns the status code and the whole answer.
async fn raw_get(proxy: std::net::SocketAddr, authority: &str) -> (u16, String) {
    let mut stream = tokio::net::TcpStream::connect(proxy).await.unwrap();
    let auth = egress_support::auth_line(proxy);
    let request = format!(
        "GET http://{authority}/ HTTP/1.1\r\nHost: {authority}\r\n{auth}Connection: \
         close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(WAIT, stream.read_to_end(&mut answer)).await.unwrap().unwrap();
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let code = answer.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    (code, answer)
}

#[tokio::test]
async fn a_denied_address_is_denied_in_every_spelling_by_connect_and_by_plain_http() {
    let (target, accepted) = echo_server().await;
    let port = target.port();
    // The parser reads these as 127.0.0.1: without a deny entry they reach the server.
    let open = start(config_allowing(&[target]), None).await;
    for spelling in ["2130706433", "0x7f.1", "0177.0.0.1", "[::ffff:7f00:1]", "127.0.0.1."] {
        let authority = format!("{spelling}:{port}");
        assert_eq!(connect(open.egress.local_addr(), &authority).await.0, 200, "{authority}");
    }
    let reached = accepted.load(Ordering::SeqCst);

    let mut config = config_allowing(&[target]);
    config.proxy.deny_domains = vec![HostPattern::try_from("127.0.0.1".to_owned()).unwrap()];
    let started = start(config, None).await;
    let proxy = started.egress.local_addr();
    let spellings = [
        "127.0.0.1",
        "127.0.0.1.",
        "2130706433",
        "0x7f000001",
        "0X7F.0.0.1",
        "0x7f.1",
        "0177.0.0.1",
        "0177.0000.0000.0001",
        "017700000001",
        "127.1",
        "127.0.1",
        "[::ffff:127.0.0.1]",
        "[::FFFF:7F00:1]",
        "[0:0:0:0:0:ffff:7f00:1]",
        "[0000:0000:0000:0000:0000:ffff:7f00:0001]",
        "[::127.0.0.1]",
        "[64:ff9b::7f00:1]",
    ];
    for spelling in spellings {
        let authority = format!("{spelling}:{port}");
        let (code, stream) = connect(proxy, &authority).await;
        assert_eq!(code, 403, "CONNECT {authority}");
        let body = refusal_text(stream).await;
        assert!(
            body.contains("domain_denied") && body.contains("127.0.0.1"),
            "{authority}: {body}"
        );
        let (code, answer) = raw_get(proxy, &authority).await;
        assert_eq!(code, 403, "GET http://{authority}/: {answer}");
        assert!(answer.contains("domain_denied"), "{authority}: {answer}");
    }
    // A name that resolves to it is refused too.
    assert_eq!(connect(proxy, &format!("localhost:{port}")).await.0, 403);
    assert_eq!(accepted.load(Ordering::SeqCst), reached, "no spelling reached the server");

    let lines = started.audit_lines(spellings.len() * 2 + 1).await;
    for line in &lines[..spellings.len() * 2] {
        assert_eq!(line["verdict"], "denied", "{line}");
        assert!(line["reason"].as_str().unwrap().starts_with("domain_denied"), "{line}");
    }
}

#[tokio::test]
async fn domain_lists_are_applied_before_any_lookup() {
    let mut config = EgressConfig::default();
    let pattern = |s: &str| HostPattern::try_from(s.to_owned()).unwrap();
    config.proxy.allow_domains = vec![pattern("*.allowed.test")];
    config.proxy.deny_domains = vec![pattern("bad.allowed.test")];
    let started = start(config, None).await;
    let proxy = started.egress.local_addr();

    assert_eq!(connect(proxy, "bad.allowed.test:443").await.0, 403);
    assert_eq!(connect(proxy, "elsewhere.test:443").await.0, 403);
    assert_eq!(connect(proxy, "1.1.1.1:443").await.0, 403, "IP literals need an allow pattern too");
    // Allowed by name, but the name does not resolve: an error, not a denial.
    assert_eq!(connect(proxy, "www.allowed.test:443").await.0, 502);

    let lines = started.audit_lines(4).await;
    let reasons: Vec<&str> = lines.iter().map(|l| l["reason"].as_str().unwrap()).collect();
    assert!(reasons[0].starts_with("domain_denied"), "{reasons:?}");
    assert!(reasons[1].starts_with("domain_not_allowed"), "{reasons:?}");
    assert!(reasons[2].starts_with("domain_not_allowed"), "{reasons:?}");
    assert!(reasons[3].starts_with("dns:"), "{reasons:?}");
    assert_eq!(lines[3]["verdict"], "error");
}

#[tokio::test]
async fn sources_that_are_not_known_containers_are_refused() {
    let (target, accepted) = echo_server().await;
    let started = start(config_allowing(&[target]), None).await;
    started.table.remove("127.0.0.1".parse().unwrap());

    let (code, _) = connect(started.egress.local_addr(), &target.to_string()).await;
    assert_eq!(code, 403);
    assert_eq!(accepted.load(Ordering::SeqCst), 0);
    let line = &started.audit_lines(1).await[0];
    assert!(line["reason"].as_str().unwrap().starts_with("unattributed"), "{line}");
    assert_eq!(line["container"], Value::Null);

    let mut open = config_allowing(&[target]);
    open.require_attribution = false;
    let started = start(open, None).await;
    started.table.remove("127.0.0.1".parse().unwrap());
    // Not a pool container: no egress credential is asked for.
    egress_support::present_credential(started.egress.local_addr(), None);
    assert_eq!(connect(started.egress.local_addr(), &target.to_string()).await.0, 200);
}

#[tokio::test]
async fn the_byte_limit_cuts_a_tunnel_and_a_download_at_exactly_the_limit() {
    let firehose = firehose_server(100_000).await;
    let (web, _) = http_server().await;
    let mut config = config_allowing(&[firehose, web]);
    config.proxy.max_bytes_down = 1000;
    let started = start(config, None).await;

    let (code, mut stream) = connect(started.egress.local_addr(), &firehose.to_string()).await;
    assert_eq!(code, 200);
    let mut got = Vec::new();
    tokio::time::timeout(WAIT, stream.read_to_end(&mut got)).await.unwrap().ok();
    assert_eq!(got.len(), 1000);

    let client = started.proxy_client();
    let download = async { client.get(format!("http://{web}/big")).send().await?.bytes().await };
    // The cut may land before or after the response head went out; either way no body.
    assert!(download.await.is_err(), "the body is cut, not delivered whole");

    let lines = started.audit_lines(2).await;
    for line in &lines {
        let reason = line["reason"].as_str().unwrap();
        assert!(reason.contains("byte limit") && reason.contains("bytes_down"), "{line}");
    }
    assert_eq!(lines[0]["bytes_down"], 1000);
}

#[tokio::test]
async fn the_duration_limit_closes_an_idle_tunnel() {
    let (target, _) = echo_server().await;
    let mut config = config_allowing(&[target]);
    config.proxy.max_duration_secs = 1;
    let started = start(config, None).await;
    let (code, mut stream) = connect(started.egress.local_addr(), &target.to_string()).await;
    assert_eq!(code, 200);
    let mut rest = Vec::new();
    tokio::time::timeout(WAIT, stream.read_to_end(&mut rest))
        .await
        .expect("tunnel closed by the proxy")
        .ok();
    let line = &started.audit_lines(1).await[0];
    assert_eq!(line["reason"], "cut: duration limit reached");
}

#[tokio::test]
async fn bad_requests_get_clear_errors_and_the_listener_keeps_serving() {
    let (target, _) = http_server().await;
    let started = start(config_allowing(&[target]), None).await;
    let proxy = started.egress.local_addr();

    // Garbage instead of HTTP.
    let mut raw = tokio::net::TcpStream::connect(proxy).await.unwrap();
    raw.write_all(b"\x16\x03\x01 not http at all\r\n\r\n").await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(WAIT, raw.read_to_end(&mut answer)).await.unwrap().ok();
    assert!(String::from_utf8_lossy(&answer).starts_with("HTTP/1.1 400"), "{answer:?}");

    // CONNECT without a port, and a scheme the proxy does not speak in absolute form.
    assert_eq!(connect(proxy, "example.com").await.0, 400);
    let mut raw = tokio::net::TcpStream::connect(proxy).await.unwrap();
    let auth = egress_support::auth_line(proxy);
    let ftp = format!(
        "GET ftp://example.com/ HTTP/1.1\r\nHost: example.com\r\n{auth}Connection: close\r\n\r\n"
    );
    raw.write_all(ftp.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(WAIT, raw.read_to_end(&mut answer)).await.unwrap().unwrap();
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 400") && answer.contains("use CONNECT"), "{answer}");

    // Still serving.
    let response =
        started.proxy_client().get(format!("http://{target}/hello")).send().await.unwrap();
    assert_eq!(response.status(), 200);
}

#[tokio::test]
async fn shutdown_cuts_open_tunnels_and_their_audit_lines_are_written() {
    let (target, _) = echo_server().await;
    let started = start(config_allowing(&[target]), None).await;
    let (code, mut stream) = connect(started.egress.local_addr(), &target.to_string()).await;
    assert_eq!(code, 200);
    stream.write_all(b"abc").await.unwrap();
    let mut buf = [0u8; 3];
    tokio::time::timeout(WAIT, stream.read_exact(&mut buf)).await.unwrap().unwrap();

    let path = started.egress.audit_path().to_owned();
    started.egress.shutdown(WAIT).await;
    let mut rest = Vec::new();
    tokio::time::timeout(WAIT, stream.read_to_end(&mut rest)).await.expect("tunnel cut").ok();
    let text = std::fs::read_to_string(path).unwrap();
    let line: Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    assert_eq!(line["reason"], "cut: proxy shutting down");
    assert_eq!(line["bytes_up"], 3);
}

#[tokio::test]
async fn idle_and_slow_clients_are_disconnected_after_the_header_timeout() {
    let (target, _) = http_server().await;
    let mut config = config_allowing(&[target]);
    config.header_timeout_secs = 1;
    let started = start(config, None).await;
    let proxy = started.egress.local_addr();

    // Connected, never says anything.
    let mut silent = tokio::net::TcpStream::connect(proxy).await.unwrap();
    let mut buf = Vec::new();
    tokio::time::timeout(WAIT, silent.read_to_end(&mut buf))
        .await
        .expect("silent client dropped")
        .ok();

    // Half a request head, then nothing.
    let mut slow = tokio::net::TcpStream::connect(proxy).await.unwrap();
    slow.write_all(b"GET http://example.com/ HTTP/1.1\r\nHost: exa").await.unwrap();
    let mut buf = Vec::new();
    tokio::time::timeout(WAIT, slow.read_to_end(&mut buf)).await.expect("slow client dropped").ok();

    // One request on a keep-alive connection, then idle.
    let mut idle = tokio::net::TcpStream::connect(proxy).await.unwrap();
    let auth = egress_support::auth_line(proxy);
    let request = format!("GET http://{target}/hello HTTP/1.1\r\nHost: {target}\r\n{auth}\r\n");
    idle.write_all(request.as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    tokio::time::timeout(WAIT, idle.read_to_end(&mut buf))
        .await
        .expect("idle keep-alive client dropped")
        .ok();
    assert!(String::from_utf8_lossy(&buf).contains("hello from the allowed server"));
}

#[tokio::test]
async fn one_source_cannot_hold_more_than_its_share_of_connections_tunnels_included() {
    let (target, _) = echo_server().await;
    let mut config = config_allowing(&[target]);
    config.max_connections_per_source = 2;
    let started = start(config, None).await;
    let proxy = started.egress.local_addr();

    let (code, first) = connect(proxy, &target.to_string()).await;
    assert_eq!(code, 200);
    let (code, _second) = connect(proxy, &target.to_string()).await;
    assert_eq!(code, 200);
    // Both slots are held by open tunnels: a third connection is closed unanswered.
    let mut third = tokio::net::TcpStream::connect(proxy).await.unwrap();
    let _ = third.write_all(b"CONNECT x:1 HTTP/1.1\r\n\r\n").await;
    let mut answer = Vec::new();
    tokio::time::timeout(WAIT, third.read_to_end(&mut answer)).await.expect("closed").ok();
    assert!(answer.is_empty(), "{:?}", String::from_utf8_lossy(&answer));

    // Ending a tunnel frees its slot.
    drop(first);
    started.audit_lines(1).await;
    assert_eq!(connect(proxy, &target.to_string()).await.0, 200);
}

/// A `CONNECT target` from the loopback address `source` (a container of the test's table),
/// presenting task `t-1`'s credential.
async fn connect_from(
    source: &str,
    proxy: std::net::SocketAddr,
    target: std::net::SocketAddr,
) -> (Answered, tokio::net::TcpStream) {
    let auth = egress_support::auth_line(proxy);
    let request = format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n{auth}\r\n");
    request_from(source, proxy, &request, WAIT).await
}

/// The containers of one room (chat) share `max_connections_per_chat`, whatever their
/// addresses: a chat with several containers cannot take more of the listener than its share,
/// while another chat's container is still served.
#[tokio::test]
async fn one_chats_containers_together_hold_only_the_chats_share_of_connections() {
    let (target, _) = echo_server().await;
    let mut config = config_allowing(&[target]);
    config.max_connections_per_chat = 3;
    let started = start(config, None).await;
    let proxy = started.egress.local_addr();
    for (ip, container, room) in [
        ("127.0.0.1", "c-test", "telegram:5"),
        ("127.0.0.2", "c-two", "telegram:5"),
        ("127.0.0.3", "c-other", "telegram:6"),
    ] {
        let ip: std::net::IpAddr = ip.parse().unwrap();
        started.table.set_container(ip, container);
        started.table.set_task(ip, Some("t-1".into()));
        assert!(started.table.set_room(ip, Some(room.into())));
    }
    let (code, first) = connect_from("127.0.0.1", proxy, target).await;
    assert_eq!(code, Answered::Status(200));
    let (code, _second) = connect_from("127.0.0.1", proxy, target).await;
    assert_eq!(code, Answered::Status(200));
    let (code, _third) = connect_from("127.0.0.2", proxy, target).await;
    assert_eq!(code, Answered::Status(200), "another container of the chat, within the share");
    // The chat's share is taken, from either of its containers.
    let (code, _) = connect_from("127.0.0.2", proxy, target).await;
    assert_eq!(code, Answered::Closed, "closed unanswered: the chat's share is taken");
    // Another chat is served.
    let (code, _other) = connect_from("127.0.0.3", proxy, target).await;
    assert_eq!(code, Answered::Status(200));
    // Ending a tunnel frees the chat's place.
    drop(first);
    started.audit_lines(1).await;
    assert_eq!(connect_from("127.0.0.2", proxy, target).await.0, Answered::Status(200));
}
