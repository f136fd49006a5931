//! Held connections are shared fairly: the real egress listener (in-process, on loopback) with
//! the host's approvals as its approver and real SQLite. Two "containers" are two loopback
//! source addresses: a flooding chat's (127.0.0.2, task `t-flood`) and the owner's
//! (127.0.0.3, task `t-owner`). The flood holds as many CONNECTs as it can on a destination
//! nobody allowed; the owner's task meanwhile sends requests to a destination an `egress.allow`
//! rule names. A chat may hold only its share (`egress.max_held_per_chat`), the rest of its
//! flood is refused at once, and the owner's requests are served while the flood still waits.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::egress_support::{http_server, launch, proxy_authorization, request_from, Answered};
use nexbot_core::ChatRef;
use nexbot_host::approvals::{Approvals, EgressApprover};
use nexbot_host::egress::InternalAllow;
use nexbot_host::egress::{AllowRule, AttributionTable, Cidr, EgressConfig, EgressMode};
use nexbot_host::store::Store;
use secrecy::ExposeSecret;
use tokio::net::TcpStream;

const FLOOD: &str = "127.0.0.2";
const OWNER: &str = "127.0.0.3";
/// More than a chat's share (16) and fewer than one source may open (64).
const FLOOD_SIZE: usize = 60;

/// The flood's result: how many of its CONNECTs were refused at once, and the connections
/// still held (kept open until the test ends). All are sent at once, as an attacker would;
/// a CONNECT not answered within 2 s is held.
async fn flood(proxy: SocketAddr, token: &str) -> (usize, Vec<TcpStream>) {
    let auth = proxy_authorization(token);
    let request = Arc::new(format!(
        "CONNECT held.example:443 HTTP/1.1\r\nHost: held.example:443\r\n\
         Proxy-Authorization: {auth}\r\n\r\n"
    ));
    let sent: Vec<_> = (0..FLOOD_SIZE)
        .map(|_| {
            let request = request.clone();
            tokio::spawn(async move {
                request_from(FLOOD, proxy, &request, Duration::from_secs(2)).await
            })
        })
        .collect();
    let mut held = Vec::new();
    let mut refused = 0;
    for one in sent {
        match one.await.unwrap() {
            (Answered::Status(403), _) => refused += 1,
            (Answered::Waiting, stream) => held.push(stream),
            (other, _) => panic!("a held CONNECT answered {other:?}"),
        }
    }
    (refused, held)
}

/// Starts the listener with `edit`ed settings; returns it, its approvals and the owner's
/// destination.
async fn setup(
    edit: impl FnOnce(&mut EgressConfig),
) -> (nexbot_tests::egress::Started, Arc<Approvals>, SocketAddr) {
    let (server, _) = http_server().await;
    let mut config = EgressConfig { mode: Some(EgressMode::Ask), ..EgressConfig::default() };
    config.allow = vec![AllowRule::try_from(format!("127.0.0.1:{}", server.port())).unwrap()];
    config.proxy.allow_internal = vec![InternalAllow {
        cidr: Cidr::try_from("127.0.0.1".to_owned()).unwrap(),
        ports: vec![server.port()],
    }];
    edit(&mut config);
    let table = Arc::new(AttributionTable::default());
    for (ip, container, task) in [(FLOOD, "c-flood", "t-flood"), (OWNER, "c-owner", "t-owner")] {
        let ip: IpAddr = ip.parse().unwrap();
        table.set_container(ip, container);
        table.set_task(ip, Some(task.to_owned()));
    }
    let (egress, dir) =
        launch(config.clone(), "127.0.0.1".parse().unwrap(), table.clone(), None).await;
    let store = Store::open(&dir.0.join("nexbot.db")).await.unwrap();
    let approvals = Approvals::with_owner(&config, store, Some(1001));
    approvals.start_task("t-flood", &ChatRef::Telegram(1002), "flood", false);
    approvals.start_task("t-owner", &ChatRef::Telegram(1001), "work", false);
    egress.set_approver(Arc::new(EgressApprover(approvals.clone())));
    let started = nexbot_tests::egress::Started { egress, table, dir };
    (started, approvals, server)
}

/// The owner's `n` requests to `server` through the proxy, each on a fresh connection:
/// their statuses and times (ms).
async fn owner_requests(
    started: &nexbot_tests::egress::Started,
    server: SocketAddr,
    n: usize,
) -> Vec<(u16, f64)> {
    let proxy = started.egress.local_addr();
    let token = started.egress.issue_proxy_token("t-owner").unwrap();
    let auth = proxy_authorization(token.expose_secret());
    let request = format!(
        "GET http://{server}/hello HTTP/1.1\r\nHost: {server}\r\nProxy-Authorization: {auth}\r\n\
         Connection: close\r\n\r\n"
    );
    let mut out = Vec::new();
    for _ in 0..n {
        let start = Instant::now();
        let (answered, _) = request_from(OWNER, proxy, &request, Duration::from_secs(10)).await;
        let status = match answered {
            Answered::Status(code) => code,
            Answered::Closed | Answered::Waiting => 0,
        };
        out.push((status, start.elapsed().as_secs_f64() * 1000.0));
        if status != 200 {
            break; // not served within 10 s: the rest would wait the same
        }
    }
    out
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

/// At the default settings: the flooding chat holds its share (16) and no more; the rest of
/// its flood is refused at once; the owner's requests are all served meanwhile.
#[tokio::test]
async fn one_chat_holds_only_its_share_and_the_owner_is_served_meanwhile() {
    let (started, approvals, server) = setup(|_| {}).await;
    let proxy = started.egress.local_addr();
    let token = started.egress.issue_proxy_token("t-flood").unwrap();
    let (refused, held) = flood(proxy, token.expose_secret()).await;
    assert_eq!(held.len(), 16, "the chat's share is held ({refused} refused)");
    assert_eq!(refused, FLOOD_SIZE - 16);
    let times = owner_requests(&started, server, 20).await;
    assert!(times.iter().all(|(s, _)| *s == 200), "{times:?}");
    let lines = started.audit();
    let too_many = lines
        .iter()
        .filter(|l| l["reason"].as_str().is_some_and(|r| r.contains("too_many_held")))
        .count();
    assert_eq!(too_many, FLOOD_SIZE - 16, "each refusal is audited with its reason");
    approvals.shutdown().await;
    drop(held);
}

/// The attacker's setting (`max_connections = 48`): before, the flood's held connections took
/// every slot and the owner's requests waited for the flood's questions to time out; now the
/// flood holds its share and the owner's requests are served at once. Prints the owner's
/// latency under the flood (p50/p99), the figure docs/performance-details.md gives.
#[tokio::test]
async fn a_flood_at_a_small_listener_does_not_delay_the_owner() {
    let (started, approvals, server) = setup(|c| c.max_connections = 48).await;
    let proxy = started.egress.local_addr();
    let token = started.egress.issue_proxy_token("t-flood").unwrap();
    let flooding = tokio::spawn(async move { flood(proxy, token.expose_secret()).await });
    // The flood's connections are all in (held, refused, or waiting to be accepted).
    tokio::time::sleep(Duration::from_secs(1)).await;
    let times = owner_requests(&started, server, 50).await;
    assert!(times.iter().all(|(s, _)| *s == 200), "the owner was not served: {times:?}");
    let mut ms: Vec<f64> = times.iter().map(|(_, t)| *t).collect();
    ms.sort_by(f64::total_cmp);
    eprintln!(
        "owner's request under a held flood (max_connections 48): p50 {:.2} ms, p99 {:.2} ms",
        percentile(&ms, 0.5),
        percentile(&ms, 0.99)
    );
    approvals.shutdown().await;
    let _ = flooding.await;
}
