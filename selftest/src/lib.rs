//! The owner's self-test (`/selftest`, `nexbot doctor --attack`): a fixed set of attacks run
//! against the running install, each reported held or broken with one line of evidence.
//!
//! Why: CI proves the walls on our machines with our settings; an install has its own engine,
//! kernel, runtime, firewall and config. The attacks run in a room of their own
//! (`console:selftest-<nonce>`, which no person's chat is), through the path every task takes
//! (a task's token and egress credential, the clean room after it), as one direct
//! `run_command` each: no model is asked, nothing model-chosen decides what runs. What they
//! planted goes with the room's container and folder at the end ([`Walls::forget`]).
//!
//! What it cannot prove: that a wall holds against an attack not on the list, or on another
//! day (a firewall reload, a new kernel); it tests this install's settings as they are now.
//! Network attacks stay on this machine: the host's own addresses, the proxy, the container's
//! resolver, the metadata address (which the proxy refuses before dialling).

pub mod attacks;
mod hardening;
pub mod report;

use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use nexbot_core::{BoxFuture, ChatRef};
use nexbot_docker::Hardening;

pub use report::{Line, Outcome, Report};

/// What the self-test attacks, as the host plugs it in.
pub trait Walls: Send + Sync {
    /// Runs `command` (`sh -c`) as one task of `room`, given the room's `secrets` by name, on
    /// the path every task takes: the `run_command` tool's text (exit code, stdout, stderr),
    /// or why the task did not end in one.
    fn run<'a>(
        &'a self,
        room: &'a ChatRef,
        command: &'a str,
        secrets: &'a [String],
    ) -> BoxFuture<'a, Result<String, String>>;
    /// Stores a secret `name` of `room`, with a random value, bound in proxy mode to a host no
    /// attack aims at; [`Bound::NoVault`] when this install has no vault to store it in.
    fn bind_secret<'a>(&'a self, room: &'a ChatRef, name: &'a str) -> BoxFuture<'a, Bound>;
    /// The hardening of the container serving `room`, as the engine reports it.
    fn hardening<'a>(&'a self, room: &'a ChatRef) -> BoxFuture<'a, Result<Hardening, String>>;
    /// Runs `command` (`sh -c`) in `room`'s container while no task runs there (`docker
    /// exec`, as the container's user): what a process left behind could do.
    fn exec_idle<'a>(
        &'a self,
        room: &'a ChatRef,
        command: &'a str,
    ) -> BoxFuture<'a, Result<String, String>>;
    /// Puts a file named `name` into `room`'s folder on the host (bait another room hunts).
    fn plant<'a>(&'a self, room: &'a ChatRef, name: &'a str) -> BoxFuture<'a, Result<(), String>>;
    /// Removes what `room` has: its container (with what the attacks left) and its folder.
    fn forget<'a>(&'a self, room: &'a ChatRef) -> BoxFuture<'a, ()>;
}

/// What [`Walls::bind_secret`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Bound {
    /// Stored, bound to this host.
    To(String),
    /// No vault: no secret exists to misplace (why).
    NoVault(String),
    /// It could not be stored (why).
    Failed(String),
}

/// The self-test's secret, in its own room only (removed with the room).
pub const SECRET: &str = "NEXBOT_SELFTEST_KEY";

/// The install as the attacks need to know it.
#[derive(Debug, Clone)]
pub struct Setting {
    pub version: String,
    /// The pool's OCI runtime as the engine names it.
    pub runtime: String,
    /// `egress.mode` (`ask`, `allowlist`, `open`).
    pub egress_mode: String,
    /// The pool network's gateway (the host, as the containers see it).
    pub gateway: IpAddr,
    /// Other addresses of the host (its outside address), attacked directly too.
    pub outside: Vec<IpAddr>,
    /// File names of the daemon's own files (database, config, socket, audit) to hunt for.
    pub daemon_files: Vec<String>,
}

/// The self-test's room: a console chat no person has (`selftest-<nonce>`).
pub fn room(nonce: &str, suffix: &str) -> ChatRef {
    ChatRef::Console(format!("selftest-{nonce}{suffix}"))
}

/// Whether `chat` is a self-test's room (no person's chat is: the console's is `console`).
pub fn is_selftest_room(chat: &ChatRef) -> bool {
    matches!(chat, ChatRef::Console(name) if name.starts_with("selftest-"))
}

/// Runs every attack, then removes what they made. Never fails: an attack that could not run
/// is a line that says so.
pub async fn run(walls: &dyn Walls, setting: &Setting) -> Report {
    let started = Instant::now();
    let nonce = nonce();
    let room = room(&nonce, "");
    let bait_room = room_of_bait(&nonce);
    let listener = Listener::bind().await;
    let mut lines = attack(walls, setting, &nonce, &room, &bait_room, listener.as_ref()).await;
    let mut skipped = Vec::new();
    match misplaced_secret(walls, &room).await {
        Ok(line) => lines.push(line),
        Err(why) => skipped.push(why),
    }
    walls.forget(&room).await;
    walls.forget(&bait_room).await;
    Report {
        at: unix_now(),
        version: setting.version.clone(),
        runtime: setting.runtime.clone(),
        egress_mode: setting.egress_mode.clone(),
        wall_ms: started.elapsed().as_millis() as u64,
        lines,
        skipped,
    }
}

/// A secret of the room's own, bound to another host, sent in a request to `localhost`: the
/// proxy must refuse it as a misplaced secret before anything is dialled. `Err`: skipped (no
/// vault).
async fn misplaced_secret(walls: &dyn Walls, room: &ChatRef) -> Result<Line, String> {
    let (name, attack) = ("egress.placeholder", "a secret's placeholder sent outside its binding");
    match walls.bind_secret(room, SECRET).await {
        Bound::To(_) => {}
        Bound::NoVault(why) => {
            return Err(format!("{attack}: no vault ({why}), so no secret to misplace"))
        }
        Bound::Failed(why) => return Ok(Line::new(name, attack, Outcome::NotRun, why)),
    }
    let secrets = [SECRET.to_owned()];
    Ok(match walls.run(room, &attacks::misplaced(SECRET), &secrets).await {
        Ok(output) => attacks::judge_misplaced(&output),
        Err(why) => Line::new(name, attack, Outcome::NotRun, format!("task failed: {why}")),
    })
}

fn room_of_bait(nonce: &str) -> ChatRef {
    room(nonce, "-bait")
}

async fn attack(
    walls: &dyn Walls,
    setting: &Setting,
    nonce: &str,
    room: &ChatRef,
    bait_room: &ChatRef,
    listener: Result<&Listener, &String>,
) -> Vec<Line> {
    let run = |command: String| async move {
        walls.run(room, &command, &[]).await.unwrap_or_else(|why| format!("task failed: {why}"))
    };
    let planted = run(attacks::plant(nonce)).await;
    // The container serves this room for life: the one that ran the plant is the one asked.
    let mut lines = vec![hardening::judge(walls.hardening(room).await, &setting.runtime)];
    let looked = run(attacks::look_for_plants(nonce)).await;
    lines.extend(attacks::judge_plants(&planted, &looked));
    lines.push(attacks::judge_proc_mem(&run(attacks::PROC_MEM.to_owned()).await));
    match listener {
        Ok(listener) => {
            let mut addrs = vec![setting.gateway];
            addrs.extend(setting.outside.iter().copied().filter(|a| *a != setting.gateway));
            let port = listener.port;
            let output = run(attacks::direct(&addrs, port)).await;
            lines.push(attacks::judge_direct(&output, &addrs, port, listener.take()));
            let output = run(attacks::host_via_proxy(setting.gateway, port)).await;
            lines.push(attacks::judge_host_via_proxy(&output, listener.take()));
        }
        Err(why) => {
            let why = format!("no listener on the host to count arrivals: {why}");
            for (name, attack) in [
                ("egress.direct", "reaching the host without the proxy (direct IP)"),
                ("egress.host_address", "the host's own address through the proxy"),
            ] {
                lines.push(Line::new(name, attack, Outcome::NotRun, why.clone()));
            }
        }
    }
    lines.push(attacks::judge_dns(&run(attacks::dns(nonce)).await));
    lines.push(attacks::judge_metadata(&run(attacks::metadata()).await));
    let output = run(attacks::unallowed_name()).await;
    lines.push(attacks::judge_unallowed_name(&output, &setting.egress_mode));
    lines.push(hunt(walls, setting, nonce, bait_room, run).await);
    // Last: the container is idle after the task that showed its credential.
    let credential = attacks::revealed(&run(attacks::REVEAL.to_owned()).await);
    let command = attacks::idle_request(credential.as_deref());
    lines.push(match walls.exec_idle(room, &command).await {
        Ok(output) => attacks::judge_idle(&output, credential.is_some()),
        Err(why) => Line::new(
            "egress.idle",
            "the proxy from an idle container, with its last task's credential",
            Outcome::NotRun,
            why,
        ),
    });
    lines
}

/// Plants bait in a second room's folder, then hunts for it and the daemon's files.
async fn hunt<F, Fut>(
    walls: &dyn Walls,
    setting: &Setting,
    nonce: &str,
    bait_room: &ChatRef,
    run: F,
) -> Line
where
    F: Fn(String) -> Fut,
    Fut: std::future::Future<Output = String>,
{
    let bait = format!("{}-bait", attacks::marker(nonce));
    if let Err(why) = walls.plant(bait_room, &bait).await {
        let why = format!("the bait could not be planted: {why}");
        return Line::new(
            "files.other_rooms",
            "another room's files and the daemon's files",
            Outcome::NotRun,
            why,
        );
    }
    let mut names = vec![bait.clone()];
    names.extend(setting.daemon_files.iter().cloned());
    attacks::judge_hunt(&run(attacks::hunt(&names)).await, &bait)
}

/// A TCP listener on every address of the host, counting the connections that reach it: the
/// direct attacks' evidence is what arrived, not what the container's tool said.
struct Listener {
    port: u16,
    arrived: Arc<AtomicUsize>,
    accept: tokio::task::JoinHandle<()>,
}

impl Listener {
    async fn bind() -> Result<Self, String> {
        let socket = tokio::net::TcpListener::bind(("0.0.0.0", 0))
            .await
            .map_err(|e| format!("cannot listen on the host: {e}"))?;
        let port = socket.local_addr().map_err(|e| e.to_string())?.port();
        let arrived = Arc::new(AtomicUsize::new(0));
        let count = arrived.clone();
        let accept = tokio::spawn(async move {
            while let Ok((stream, _)) = socket.accept().await {
                count.fetch_add(1, Ordering::SeqCst);
                drop(stream);
            }
        });
        Ok(Self { port, arrived, accept })
    }

    /// Connections since the last call.
    fn take(&self) -> usize {
        self.arrived.swap(0, Ordering::SeqCst)
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// The host's outside addresses as the containers could aim at them: its IPv4 interface
/// addresses but loopback, the gateway and Docker's bridges (the gateway stands for those).
pub fn outside_addresses(gateway: IpAddr) -> Vec<IpAddr> {
    let bridge = |name: &str| ["docker", "br-", "veth", "nxr-"].iter().any(|p| name.starts_with(p));
    let Ok(interfaces) = if_addrs::get_if_addrs() else { return Vec::new() };
    let mut found: Vec<IpAddr> = interfaces
        .into_iter()
        .filter(|i| !i.is_loopback() && !bridge(&i.name))
        .map(|i| i.ip())
        .filter(|ip| ip.is_ipv4() && *ip != gateway)
        .collect();
    found.dedup();
    found.truncate(2);
    found
}

fn nonce() -> String {
    let mut bytes = [0u8; 6];
    if getrandom::fill(&mut bytes).is_err() {
        // Unique enough for a room name: the time's nanoseconds.
        let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        return format!("{:012x}", nanos & 0xffff_ffff_ffff);
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unix_now() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64)
}
