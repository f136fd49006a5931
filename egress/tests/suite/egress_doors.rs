//! Doors: requests the host itself makes in a fixed name (a remote MCP server's session) go
//! through a private Unix socket into the same proxy: served in the door's name, its own
//! secrets filled in only where they are bound, answers scrubbed, the policy applied, audited;
//! no tunnel; gone (socket and secrets) when the door drops.

use egress_support::allow;
use nexbot_tests::egress as egress_support;

use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use egress_support::{start, web_echo_server};
use nexbot_egress::{Binding, Credential, EgressConfig, DOOR_CONTAINER};
use secrecy::SecretString;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;

const VALUE: &str = "mcp_PLANTED_door_value_0123456789";
const IDENTITY: &str = "mcp:remote";

fn token(host: &str) -> Vec<Credential> {
    vec![Credential::new(
        "REMOTE_TOKEN",
        SecretString::from(VALUE),
        vec![Binding::parse(host).unwrap()],
    )]
}

/// One raw HTTP/1.1 exchange through the door's socket; the status and the whole answer.
async fn exchange(door: &Path, request_line: &str, extra: &str) -> (u16, String) {
    let mut stream = UnixStream::connect(door).await.expect("the door's socket accepts");
    let request = format!("{request_line}\r\nHost: x\r\n{extra}Connection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(egress_support::WAIT, stream.read_to_end(&mut answer))
        .await
        .expect("answered in time")
        .unwrap();
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let code = answer.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    (code, answer)
}

#[tokio::test]
async fn a_doors_requests_are_its_names_with_its_secrets_only_where_bound() {
    let (bound, seen) = web_echo_server("127.0.0.1".parse().unwrap()).await;
    let (other, other_seen) = web_echo_server("127.0.0.2".parse().unwrap()).await;
    let mut config = EgressConfig::default();
    config.proxy.allow_internal = vec![allow(bound), allow(other)];
    let started = start(config, None).await;
    let door = started.egress.doors().open(IDENTITY, token("127.0.0.1")).expect("opens");

    // Only this user may reach the socket.
    let mode = std::fs::metadata(door.path().parent().unwrap()).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o700, "{mode:o}");
    assert!(!format!("{door:?}").contains(VALUE));

    // Filled in at its bound host, and scrubbed on the way back (the echo repeats it).
    let header = "Authorization: Bearer {{secret:REMOTE_TOKEN}}\r\n";
    let (code, answer) =
        exchange(door.path(), &format!("GET http://{bound}/mcp HTTP/1.1"), header).await;
    assert_eq!(code, 200, "{answer}");
    let got = seen.lock().unwrap().pop().expect("the bound host was reached");
    assert_eq!(got.header("authorization"), Some(format!("Bearer {VALUE}").as_str()));
    assert!(!answer.contains(VALUE), "the answer was not scrubbed: {answer}");
    assert!(answer.contains("[REDACTED:REMOTE_TOKEN]"), "{answer}");

    // Anywhere else the placeholder is refused before anything is dialled.
    let (code, answer) =
        exchange(door.path(), &format!("GET http://{other}/mcp HTTP/1.1"), header).await;
    assert_eq!(code, 403, "{answer}");
    assert!(other_seen.lock().unwrap().is_empty());

    // The policy is the proxy's: a port nobody allowed is refused.
    let closed = SocketAddr::new(bound.ip(), bound.port() + 1);
    let (code, answer) = exchange(door.path(), &format!("GET http://{closed}/ HTTP/1.1"), "").await;
    assert_eq!(code, 403, "{answer}");

    // No tunnel: it could be neither filled in nor scrubbed.
    let (code, answer) = exchange(door.path(), &format!("CONNECT {bound} HTTP/1.1"), "").await;
    assert_eq!(code, 405, "{answer}");

    // Audited in the door's name, from the host.
    let lines = started.audit_lines(3).await;
    let ours: Vec<_> = lines.iter().filter(|l| l["task_id"] == IDENTITY).collect();
    assert!(ours.len() >= 3, "{lines:?}");
    assert!(ours.iter().all(|l| l["container"] == DOOR_CONTAINER), "{ours:?}");
    assert!(ours.iter().any(|l| l["verdict"] == "allowed" && l["port"] == bound.port()));
    assert!(ours.iter().any(|l| l["verdict"] == "denied" && l["port"] == other.port()));
    let audit = std::fs::read_to_string(started.egress.audit_path()).unwrap();
    assert!(!audit.contains(VALUE));

    // Closed when dropped: the socket, its directory and its secrets go.
    let path = door.path().to_owned();
    drop(door);
    assert!(!path.exists() && !path.parent().unwrap().exists());
    assert!(UnixStream::connect(&path).await.is_err());
    assert!(!started.egress.credentials().has(IDENTITY));
}

/// A newer door of the same name keeps its secrets when the older one closes after it opened
/// (an instance replaced while the old one's last references drain).
#[tokio::test]
async fn an_older_door_closing_late_leaves_the_newer_ones_secrets() {
    let started = start(EgressConfig::default(), None).await;
    let doors = started.egress.doors();
    let old = doors.open(IDENTITY, token("127.0.0.1")).unwrap();
    let new = doors.open(IDENTITY, token("127.0.0.1")).unwrap();
    assert_ne!(old.path(), new.path());
    drop(old);
    assert!(started.egress.credentials().has(IDENTITY));
    assert!(new.path().exists());
    drop(new);
    assert!(!started.egress.credentials().has(IDENTITY));
}
