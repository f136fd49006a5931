//! A recording name server, and a way to run a process with it as its only resolver: for
//! tests of what a process looks up (a lookup is itself a message to whoever serves the name,
//! so "nothing leaves before the decision" includes DNS).
//!
//! The server listens on UDP port 53 of a loopback address of the test's own (all of
//! 127.0.0.0/8 is the machine's); it records every question's name and answers the names it
//! was given with their IPv4 address, others with NXDOMAIN. [`in_own_resolver`] wraps a
//! program so that it runs in a mount namespace of its own where `/etc/resolv.conf` names only
//! this server (`unshare --mount`, then a bind mount; root only, as the tests run in CI).

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use hickory_proto::op::{Message, MessageType, ResponseCode};
use hickory_proto::rr::{rdata::A, RData, Record, RecordType};
use tokio::net::UdpSocket;

/// A running recording name server (stopped on drop).
#[derive(Debug)]
pub struct DnsRecorder {
    addr: SocketAddr,
    asked: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl DnsRecorder {
    /// Serves on `ip`:53; `answers` maps lower-case names (no trailing dot) to their address.
    pub async fn start(ip: Ipv4Addr, answers: HashMap<String, Ipv4Addr>) -> Self {
        let socket = UdpSocket::bind((ip, 53)).await.expect("bind the recording name server");
        let addr = socket.local_addr().expect("its address");
        let asked = Arc::new(Mutex::new(Vec::new()));
        let seen = asked.clone();
        let task = tokio::spawn(async move {
            let mut buf = vec![0u8; 4096];
            loop {
                let Ok((n, peer)) = socket.recv_from(&mut buf).await else { return };
                let Ok(query) = Message::from_vec(&buf[..n]) else { continue };
                for q in query.queries() {
                    let name = q.name().to_ascii().trim_end_matches('.').to_ascii_lowercase();
                    seen.lock().unwrap_or_else(|p| p.into_inner()).push(name);
                }
                if let Some(answer) = answer(&query, &answers) {
                    let _ = socket.send_to(&answer, peer).await;
                }
            }
        });
        Self { addr, asked, task }
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Every name asked so far, in order (a name asked for A and AAAA appears twice).
    pub fn asked(&self) -> Vec<String> {
        self.asked.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The names asked that end in `suffix` (e.g. `.attacker.test`).
    pub fn asked_under(&self, suffix: &str) -> Vec<String> {
        self.asked().into_iter().filter(|n| n.ends_with(suffix)).collect()
    }
}

impl Drop for DnsRecorder {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The response to `query`: its A question answered from `answers`, other types of a known
/// name answered empty, unknown names NXDOMAIN.
fn answer(query: &Message, answers: &HashMap<String, Ipv4Addr>) -> Option<Vec<u8>> {
    let mut response = Message::new();
    response
        .set_id(query.id())
        .set_message_type(MessageType::Response)
        .set_op_code(query.op_code())
        .set_recursion_desired(query.recursion_desired())
        .set_recursion_available(true);
    let mut code = ResponseCode::NoError;
    for q in query.queries() {
        response.add_query(q.clone());
        let name = q.name().to_ascii().trim_end_matches('.').to_ascii_lowercase();
        match answers.get(&name) {
            Some(ip) if q.query_type() == RecordType::A => {
                response.add_answer(Record::from_rdata(q.name().clone(), 5, RData::A(A(*ip))));
            }
            Some(_) => {}
            None => code = ResponseCode::NXDomain,
        }
    }
    response.set_response_code(code);
    response.to_vec().ok()
}

/// A loopback address for this test process's name server: 127.53.x.y from the process id
/// and `n` (so that runs side by side, and servers of one run, do not meet on port 53).
pub fn loopback_for(n: u8) -> Ipv4Addr {
    let pid = std::process::id();
    Ipv4Addr::new(127, 53, (pid % 250) as u8 + 1, n.max(1))
}

/// Writes, in `dir`, a `resolv.conf` naming only `server` and a script that runs `program`
/// with the script's arguments in a mount namespace of its own with that file as
/// `/etc/resolv.conf`; returns the script's path, to run in place of `program` (the program
/// keeps the script's pid, so a signal to the child reaches it).
pub fn in_own_resolver(dir: &Path, server: SocketAddr, program: &Path) -> PathBuf {
    let resolv = dir.join("resolv.conf");
    let conf = format!("nameserver {}\noptions attempts:1 timeout:2\n", server.ip());
    std::fs::write(&resolv, conf).expect("write resolv.conf");
    let script = dir.join("with-own-resolver.sh");
    let body = format!(
        "#!/bin/sh\nexec unshare --mount --propagation private /bin/sh -c \
         'mount --bind \"$0\" /etc/resolv.conf && exec \"$@\"' '{}' '{}' \"$@\"\n",
        resolv.display(),
        program.display()
    );
    std::fs::write(&script, body).expect("write the resolver script");
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    script
}
