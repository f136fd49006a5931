//! The host's own addresses through the proxy: an address added to an interface of this
//! machine while the listener runs is refused once the listener re-reads its addresses (on its
//! own timer, or when asked), even though the config allows its range; only an exact
//! `ip:port` entry opens it, on that port only, and the use is audited.
//!
//! The test adds an interface in this machine's own network namespace (an empty bridge: the
//! `dummy` kind is not available everywhere) with an address from a documentation range, and
//! removes it at the end, also when an assertion fails. Every connection goes to that local
//! address or to loopback; nothing leaves the machine.

use nexbot_tests::egress as egress_support;

use std::net::{IpAddr, SocketAddr};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use egress_support::{connect, start, Started};
use nexbot_egress::EgressConfig;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

const ADDRESS: &str = "198.51.100.77";

/// Whether this process may add interfaces (root in this network namespace).
fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .map(|s| {
            s.lines().any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}

fn ip(args: &[&str]) -> std::process::Output {
    Command::new("ip").args(args).output().expect("the `ip` command runs")
}

/// An interface of this test's own, holding one address; removed on drop (panics included).
struct TestInterface {
    name: String,
}

impl TestInterface {
    fn add(address: &str) -> Self {
        // A killed earlier run may have left its interface behind.
        let stale = ip(&["-o", "addr", "show", "to", &format!("{address}/32")]);
        for line in String::from_utf8_lossy(&stale.stdout).lines() {
            if let Some(name) = line.split_whitespace().nth(1).filter(|n| n.starts_with("nxe")) {
                let _ = ip(&["link", "del", name]);
            }
        }
        let name = format!("nxe{}", std::process::id() % 1_000_000);
        let interface = Self { name: name.clone() };
        for kind in ["dummy", "bridge"] {
            if ip(&["link", "add", &name, "type", kind]).status.success() {
                break;
            }
        }
        for args in [
            vec!["addr", "add", &format!("{address}/32"), "dev", &name],
            vec!["link", "set", &name, "up"],
        ] {
            let out = ip(&args);
            assert!(out.status.success(), "ip {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        }
        interface
    }
}

impl Drop for TestInterface {
    fn drop(&mut self) {
        let out = ip(&["link", "del", &self.name]);
        if !out.status.success() {
            eprintln!("could not remove {}: {}", self.name, String::from_utf8_lossy(&out.stderr));
        }
    }
}

/// A port free on every address: held on loopback (a wildcard listener would hold it there
/// too), so binding it on the test address cannot clash.
async fn free_port() -> (TcpListener, u16) {
    let holder = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = holder.local_addr().unwrap().port();
    (holder, port)
}

/// A tiny HTTP server at `addr` answering every request with "hello", counting connections.
async fn hello_server(addr: SocketAddr) -> Arc<AtomicUsize> {
    let listener = TcpListener::bind(addr).await.unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let counter = accepted.clone();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            counter.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let answer =
                    "HTTP/1.1 200 OK\r\ncontent-length: 5\r\nconnection: close\r\n\r\nhello";
                let _ = stream.write_all(answer.as_bytes()).await;
            });
        }
    });
    accepted
}

async fn get(started: &Started, target: SocketAddr) -> (u16, String) {
    let response =
        started.proxy_client().get(format!("http://{target}/hello")).send().await.unwrap();
    (response.status().as_u16(), response.text().await.unwrap())
}

fn config(toml_text: &str) -> EgressConfig {
    toml::from_str(toml_text).unwrap()
}

#[tokio::test]
async fn the_hosts_own_addresses_are_refused_after_a_refresh_and_opened_only_by_an_exact_ip_port_entry(
) {
    if !is_root() {
        eprintln!("SKIPPED: adding an interface needs root");
        return;
    }
    let address: IpAddr = ADDRESS.parse().unwrap();
    let ((_hold_a, port), (_hold_b, other_port)) = (free_port().await, free_port().await);
    let (server, other) = (SocketAddr::new(address, port), SocketAddr::new(address, other_port));
    // Its whole range is an ordinary allowed destination, on both ports.
    let open = format!(
        "[proxy]\nallow_ports = [{port}, {other_port}]\nallow_internal = [{{ cidr = \"198.51.100.0/24\" }}]\n"
    );
    let periodic = start(config(&format!("{open}host_addresses_refresh_secs = 1\n")), None).await;
    let on_demand =
        start(config(&format!("{open}host_addresses_refresh_secs = 3600\n")), None).await;
    assert!(!on_demand.egress.host_addresses().contains(&address));

    let interface = TestInterface::add(ADDRESS);
    let seen = hello_server(server).await;
    let other_seen = hello_server(other).await;

    // The listener that has not re-read its addresses yet still takes it for any other.
    assert_eq!(get(&on_demand, server).await, (200, "hello".to_owned()));

    // The one with a 1 s period refuses it on its own within a few seconds.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while !periodic.egress.host_addresses().contains(&address) {
        assert!(tokio::time::Instant::now() < deadline, "never re-read its addresses");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (code, body) = get(&periodic, server).await;
    assert_eq!(code, 403, "{body}");
    assert!(body.contains("host_address") && body.contains(&interface.name), "{body}");

    // The other refuses it as soon as it is asked to re-read.
    assert!(on_demand.egress.refresh_host_addresses().unwrap() > 0);
    assert_eq!(get(&on_demand, server).await.0, 403);
    assert_eq!(connect(on_demand.egress.local_addr(), &server.to_string()).await.0, 403);
    let lines = on_demand.audit_lines(3).await;
    assert_eq!(lines[0]["verdict"], "allowed");
    for line in &lines[1..] {
        assert_eq!(line["verdict"], "denied", "{line}");
        let reason = line["reason"].as_str().unwrap();
        assert!(reason.starts_with(&format!("host_address: {ADDRESS} is an address")), "{reason}");
        assert!(reason.contains(&format!("interface {}", interface.name)), "{reason}");
    }

    // An exact entry opens exactly that address and port, and its use is audited.
    let exact = open.replace("}]", &format!("}}, \"{server}\"]"));
    let exact = start(config(&exact), None).await;
    assert_eq!(get(&exact, server).await, (200, "hello".to_owned()));
    assert_eq!(get(&exact, other).await.0, 403);
    assert_eq!(connect(exact.egress.local_addr(), &other.to_string()).await.0, 403);
    let lines = exact.audit_lines(3).await;
    assert_eq!(lines[0]["verdict"], "allowed");
    assert_eq!(lines[0]["host_address"], true, "{}", lines[0]);
    for line in &lines[1..] {
        assert!(line["reason"].as_str().unwrap().starts_with("host_address"), "{line}");
        assert!(line.get("host_address").is_none(), "only an opened use is marked: {line}");
    }
    assert_eq!(seen.load(Ordering::SeqCst), 2, "the stale listener's and the exact entry's");
    assert_eq!(other_seen.load(Ordering::SeqCst), 0, "the other port was never reached");

    // Removed again, the address leaves the set at the next read.
    drop(interface);
    exact.egress.refresh_host_addresses().unwrap();
    assert!(!exact.egress.host_addresses().contains(&address));
}
