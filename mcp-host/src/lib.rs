//! The main agent's MCP servers run in the sandbox: their containers, their sessions, their
//! restarts, and the operator's view of them (`nexbot-ctl mcp`, the degraded part `mcp`).
//! [`McpServers`] is the agent's [`nexbot_mcp::Connector`]; `nexbot-mcp` speaks the protocol.
//!
//! Why a crate of its own: nothing of a server runs on the host. Every stdio server runs as the
//! main process of its own service container (made by the pool of `nexbot-docker`, hardened
//! like its containers, on its internal network), and the host speaks MCP to it over the
//! container's attached stdio. A remote server (`url`) is reached over Streamable HTTP through
//! its own door into the egress proxy (`nexbot_egress::Door`): in its identity, under the
//! proxy's policy and audit, its `{{secret:NAME}}` headers filled in by the proxy (operator
//! secrets in proxy mode, bound to the server's host), never by the host. So it reaches Docker
//! only through `nexbot-docker` and the network only through `nexbot-egress`, and knows no
//! channel, no HTTP server and not the daemon: what it needs of the rest (a chat's questions,
//! the operator's secrets) are two small traits the host implements at the wiring
//! ([`ServerQuestions`], [`OperatorSecrets`]).
//!
//! An *instance* is one server's container and session: per chat for `scope = "chat"` (the
//! default: one chat's calls never meet another chat's state), one for every chat for
//! `scope = "shared"`. A chat's instance starts at its first call and stops after
//! `idle_stop_secs` without one; a shared instance starts with the daemon. A server's tool list
//! is learned from a probe instance (a chat-scoped server's, stopped once it answered) so a
//! chat's model knows the tools before the chat's own container exists.
//!
//! A chat-scoped stdio server with `room` gets its chat's room (the folder the chat's file
//! tools work in) mounted at that path, read and written, and runs as the daemon's own user, so
//! what it writes is the chat's file and what the chat wrote it can read; the probe sees an
//! empty folder there. No other chat's room is in its container, and no instance serves two
//! chats. A root daemon's room servers never run as root: they run as the pool's user, and the
//! room is handed over to it before each start and call ([`rooms`]).
//!
//! When an instance's container dies or its session ends, calls in flight fail at once with
//! the reason, and the instance is started again: a shared one in the background, a chat's at
//! its next call; at once the first time, and while restarts keep failing they wait longer
//! each time (1 s doubling to 60 s); a call meanwhile gets the last error and when the next
//! try is.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use nexbot_core::{BoxFuture, ChatRef};
use nexbot_docker::{Pool, Service};
use nexbot_egress::{AttributionTable, Door, Doors};
use nexbot_mcp::catalog::{ServerTool, Skipped};
use nexbot_mcp::tools::CallOutcome;
use nexbot_mcp::{Connector, EndedEarly, McpError, Progress, ServerConfig, ServerScope, Session};
use tokio_util::sync::CancellationToken;

pub mod health;
mod launch;
pub mod rooms;
mod seams;

pub use seams::{OperatorSecret, OperatorSecrets, ServerQuestions};

/// The role label of an MCP server's container.
pub const ROLE: &str = "mcp";
/// Label naming the server a container runs.
pub const LABEL_SERVER: &str = "nexbot.mcp.server";
/// The wait before a second failed start in a row; doubles per failure.
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(60);
/// How often idle chat instances are looked for, at most (more often when a server's
/// `idle_stop_secs` is short).
const IDLE_SWEEP: Duration = Duration::from_secs(15);
/// How long the engine's account of a dead container is awaited.
const DEATH_ACCOUNT_WAIT: Duration = Duration::from_secs(2);
/// How long the daemon's start waits for the servers' first tool lists.
const START_WAIT: Duration = Duration::from_secs(30);

/// Which instance: the server, and the chat for a chat-scoped one (`None`: shared, or the
/// probe of a chat-scoped one).
type Key = (String, Option<ChatRef>);

/// What keeps a secret's value in the exit scan ([`OperatorSecret::hold`]).
type ScanHold = Box<dyn std::fmt::Debug + Send + Sync>;

/// A server's tools: offered, and skipped with why.
type ToolList = (Vec<ServerTool>, Vec<Skipped>);

/// The sandbox's side of the servers: where their requests leave.
#[derive(Debug, Default)]
pub struct McpEgress {
    /// Where the egress proxy learns whose a service container's request is: each running
    /// stdio instance's address, dedicated to its identity ([`identity`]).
    pub addresses: Arc<AttributionTable>,
    /// `HTTP(S)_PROXY` and `NO_PROXY` of the egress listener, added to every stdio server's
    /// environment (a server's only way out; none without a listener).
    pub proxy_env: BTreeMap<String, String>,
    /// Opens a remote server's door into the proxy (`None`: no proxy, so no remote server).
    pub doors: Option<Doors>,
    /// Where a remote server's `{{secret:NAME}}` values come from (the operator's secrets).
    pub secrets: Option<Arc<dyn OperatorSecrets>>,
}

/// Where the chats' rooms are, for the servers that get one (`room`).
#[derive(Debug, Clone)]
pub struct McpRooms {
    /// The daemon's folder of rooms (`<workspace>/chats`, [`nexbot_tools::rooms::ROOMS_DIR`]).
    pub dir: PathBuf,
    /// The same folder as the Docker engine sees it (a bind source is a path on the engine's
    /// machine: a daemon in a container finds it through its own mounts), or why it is not
    /// known; then a server with `room` does not start for a chat, and says why.
    pub on_engine: Result<PathBuf, String>,
    /// Who a server with a room runs as (`uid:gid`): the daemon's own user; when that is root,
    /// the pool's user instead, the room handed over to it ([`rooms::never_root`]).
    pub user: String,
    /// Whether `on_engine` is a guess to check before a room is given (a daemon in a container
    /// it cannot identify guesses that the engine sees its paths): a throw-away container reads
    /// a marker written into `dir` through the mount, once ([`McpServers`] keeps the answer).
    pub check: bool,
}

impl McpRooms {
    /// The rooms under `dir` as this process sees them, on an engine that sees the same paths,
    /// run as this process's user (unless root: [`rooms::never_root`]).
    pub fn local(dir: PathBuf) -> Self {
        Self { on_engine: Ok(dir.clone()), dir, user: own_user(), check: false }
    }
}

/// This process's `uid:gid`.
pub fn own_user() -> String {
    format!("{}:{}", rustix::process::geteuid().as_raw(), rustix::process::getegid().as_raw())
}

/// One running instance.
#[derive(Debug, Clone)]
struct Running {
    session: Arc<Session>,
    /// A stdio server's container (`None`: a remote server).
    service: Option<Arc<Service>>,
    /// A remote server's way out, with its secrets; closed when the last clone goes.
    _door: Option<Arc<RemoteExit>>,
    started: Instant,
}

/// A remote instance's door and the vault holds of the values it may fill in (kept in the
/// exit scan while it runs, even if changed meanwhile).
#[derive(Debug)]
struct RemoteExit {
    _door: Door,
    _holds: Vec<ScanHold>,
}

impl Running {
    /// Its address and identity are no one's any more (the proxy refuses what still comes
    /// from there), and its questions expire. Called once, by whoever takes it out of its
    /// instance (a stop, a start that found it dead, its watcher), before a newer one of the
    /// same identity registers; an address the engine gave another container meanwhile stays
    /// that container's.
    fn release(&self, key: &Key, servers: &McpServers) {
        if let Some(service) = &self.service {
            if let Some(ip) = service.address() {
                servers.egress.addresses.remove_container(ip, service.name());
            }
        }
        if let (Some(questions), Some(_)) = (servers.questions.get(), &key.1) {
            questions.server_ended(&identity(key));
        }
    }

    /// Why it ended: the engine's account of the container (exit code, OOM) when it has one
    /// within a moment (a session ends first when its container dies), else the session's.
    async fn death(&self) -> String {
        let ended = || self.session.close_reason().unwrap_or_else(|| "its session ended".into());
        let Some(service) = &self.service else { return ended() };
        match tokio::time::timeout(DEATH_ACCOUNT_WAIT, service.exited()).await {
            Ok(reason) => reason,
            Err(_) => ended(),
        }
    }

    /// Whether it can take calls.
    fn is_up(&self) -> bool {
        !self.session.is_closed() && !self.service.as_ref().is_some_and(|s| s.has_exited())
    }

    /// Ends when its container dies (never for a remote server).
    async fn exited(&self) {
        match &self.service {
            Some(service) => drop(service.exited().await),
            None => std::future::pending().await,
        }
    }

    /// Ends its session, gives a stdio server [`STOP_GRACE`] to exit on its own, then removes
    /// its container.
    async fn stop(&self) {
        self.session.close();
        if let Some(service) = &self.service {
            let _ = tokio::time::timeout(STOP_GRACE, service.exited()).await;
            service.stop().await;
        }
    }

    fn container(&self) -> Option<&str> {
        self.service.as_ref().map(|s| s.name())
    }
}

/// An instance's state; behind an async mutex so one start runs at a time.
#[derive(Debug, Default)]
struct Instance {
    running: Option<Running>,
    last_used: Option<Instant>,
    /// Unplanned ends and failed starts in a row (reset by a call that answers).
    failures: u32,
    restarts: u32,
    last_error: Option<String>,
    /// No start before this (back-off).
    not_before: Option<Instant>,
}

impl Instance {
    /// Records an unplanned end: a restart, a failure in a row, the reason, and when the next
    /// start may be (at once the first time); returns the wait.
    fn ended(&mut self, reason: String) -> Duration {
        self.restarts += 1;
        self.failures += 1;
        self.last_error = Some(reason);
        let wait = backoff(self.failures);
        self.not_before = Some(Instant::now() + wait);
        wait
    }
}

/// Counters of one server.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ServerCounters {
    pub calls: u64,
    pub tool_errors: u64,
    pub failures: u64,
    pub duration_ms: u64,
}

/// What [`McpServers::restart`] did.
#[derive(Debug)]
pub struct Restarted {
    /// Instances stopped.
    pub stopped: usize,
    /// A shared server's new container (none for a remote server or a chat-scoped one, whose
    /// instances start at their chats' next calls).
    pub container: Option<String>,
}

/// A server as `/status` shows it to a chat.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerLine {
    pub name: String,
    /// The tools last learned.
    pub tools: usize,
    /// Why its last start failed, while it does not run.
    pub failing: Option<String>,
}

/// One instance as the operator sees it (`nexbot-ctl mcp ls`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstanceView {
    pub server: String,
    /// `shared`, `probe` (a chat-scoped server's instance that read its tools), or the chat.
    pub serves: String,
    /// `running`, `starting` (its counts are shown once started), `failed`, `stopped`.
    pub state: &'static str,
    pub container: Option<String>,
    pub tools: usize,
    pub restarts: u32,
    pub last_error: Option<String>,
    pub up_secs: Option<u64>,
    pub idle_secs: Option<u64>,
}

/// How long a stdio server gets to exit on its own once its input closed, before its container
/// is removed (MCP's stdio shutdown: close the input, wait, then end it). A browser writes its
/// profile (the chat's logins) to the room on the way out; a kill would lose the newest
/// cookies.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// The configured servers and their instances; the agent's [`Connector`].
#[derive(Debug)]
pub struct McpServers {
    /// Itself, for the tasks it spawns (a watcher holds it only while it runs).
    me: std::sync::Weak<McpServers>,
    pool: Arc<Pool>,
    servers: Vec<ServerConfig>,
    egress: McpEgress,
    /// Where servers with `room` find their chat's (`None`: such a server does not start).
    rooms: Option<McpRooms>,
    /// Who a root daemon hands a chat's room over to before its room server starts or is
    /// called (the pool's user); `None` when the servers run as the daemon's own user.
    room_owner: Option<rooms::Owner>,
    /// The answer of the one check that the engine sees the rooms where `rooms` guesses.
    rooms_checked: tokio::sync::OnceCell<Result<(), String>>,
    /// Asks a chat before its server reaches a new destination (`egress.mode = "ask"`); set
    /// once the approvals exist ([`McpServers::set_questions`]).
    questions: OnceLock<Arc<dyn ServerQuestions>>,
    instances: Mutex<HashMap<Key, Arc<tokio::sync::Mutex<Instance>>>>,
    /// The last tool list each server gave (any instance), with the skipped ones.
    catalogs: Mutex<HashMap<String, ToolList>>,
    counters: Mutex<HashMap<String, ServerCounters>>,
    /// The servers whose last start failed (the degraded part `mcp`).
    failing: health::Failing,
    /// `true` once the servers started with the daemon gave their first tool lists (or
    /// [`START_WAIT`] passed): what a turn waits for ([`Connector::ready`]).
    first_lists: tokio::sync::watch::Receiver<bool>,
    stop: CancellationToken,
}

impl McpServers {
    /// Starts what must run from the start: each shared server's instance, and a probe of each
    /// chat-scoped one (its tool list), all at once, in the background; and the idle sweep.
    /// Returns at once: the daemon opens its control socket and channels meanwhile (they
    /// opened up to [`START_WAIT`] late). A turn waits for the first lists at most until
    /// [`START_WAIT`] after this start ([`Connector::ready`]), so the first turn's model knows
    /// the tools of every server that came up; a slower one joins later turns when it is up.
    pub async fn start(
        pool: Arc<Pool>,
        servers: Vec<ServerConfig>,
        egress: McpEgress,
        rooms: Option<McpRooms>,
    ) -> Arc<Self> {
        let (rooms, room_owner) = match rooms {
            Some(rooms) => {
                let (rooms, owner) = rooms::never_root(rooms, pool.config());
                (Some(rooms), owner)
            }
            None => (None, None),
        };
        let (lists_in, first_lists) = tokio::sync::watch::channel(false);
        let this = Arc::new_cyclic(|me| Self {
            me: me.clone(),
            pool,
            servers,
            egress,
            rooms,
            room_owner,
            rooms_checked: tokio::sync::OnceCell::new(),
            questions: OnceLock::new(),
            instances: Mutex::default(),
            catalogs: Mutex::default(),
            counters: Mutex::default(),
            failing: health::Failing::default(),
            first_lists,
            stop: CancellationToken::new(),
        });
        let mut starts = tokio::task::JoinSet::new();
        for server in &this.servers {
            let this = this.clone();
            let name = server.name.clone();
            let probe = server.scope == ServerScope::Chat;
            starts.spawn(async move {
                let key = (name.clone(), None);
                match this.instance(&key).await {
                    Ok(_) if probe => this.stop_instance(&key, "its tool list is read").await,
                    Ok(_) => {}
                    Err(e) => tracing::warn!(server = %name, "MCP server did not start: {e}"),
                }
            });
        }
        tokio::spawn(async move {
            let all = async { while starts.join_next().await.is_some() {} };
            if tokio::time::timeout(START_WAIT, all).await.is_err() {
                tracing::warn!(
                    "MCP servers still starting after {START_WAIT:?}; their tools come later"
                );
                starts.detach_all();
            }
            lists_in.send_replace(true);
        });
        let sweeper = this.clone();
        tokio::spawn(async move { sweeper.sweep_idle().await });
        this
    }

    /// Binds the egress questions: a chat's server asks that chat before it reaches anything
    /// new. Shared servers (and the probes) ask nobody: only `egress.allow` rules open a way.
    pub fn set_questions(&self, questions: Arc<dyn ServerQuestions>) {
        let _ = self.questions.set(questions);
    }

    pub fn servers(&self) -> &[ServerConfig] {
        &self.servers
    }

    /// `server`'s configuration; an unknown name's error lists the configured ones.
    pub fn config(&self, server: &str) -> Result<&ServerConfig, McpError> {
        self.servers.iter().find(|s| s.name == server).ok_or_else(|| {
            let names: Vec<&str> = self.servers.iter().map(|s| s.name.as_str()).collect();
            let configured = match names.as_slice() {
                [] => "none is configured ([[mcp.servers]] in config.toml)".to_owned(),
                names => format!("configured: {}", names.join(", ")),
            };
            McpError::Unavailable(format!("no MCP server is named {server:?} ({configured})"))
        })
    }

    fn key(&self, config: &ServerConfig, chat: &ChatRef) -> Key {
        match config.scope {
            ServerScope::Chat => (config.name.clone(), Some(chat.clone())),
            ServerScope::Shared => (config.name.clone(), None),
        }
    }

    fn slot(&self, key: &Key) -> Arc<tokio::sync::Mutex<Instance>> {
        let mut instances = self.instances.lock().unwrap_or_else(|e| e.into_inner());
        instances.entry(key.clone()).or_default().clone()
    }

    /// The instance's session, started when it is not running (unless backing off). A chat's
    /// room server gets the room handed over first, when a root daemon runs it as the pool's
    /// user: for its start, and for each call (the daemon may have written there since).
    async fn instance(&self, key: &Key) -> Result<Arc<Session>, McpError> {
        let config = self.config(&key.0)?.clone();
        if let (Some(chat), Some(owner), Some(rooms)) = (&key.1, self.room_owner, &self.rooms) {
            if config.room.is_some() && rooms.on_engine.is_ok() {
                rooms::hand_over_room(rooms.dir.clone(), chat.clone(), owner).await?;
            }
        }
        let slot = self.slot(key);
        let mut instance = slot.lock().await;
        instance.last_used = Some(Instant::now());
        if let Some(running) = instance.running.as_ref().filter(|r| r.is_up()) {
            return Ok(running.session.clone());
        }
        if self.stop.is_cancelled() {
            return Err(McpError::Unavailable("the daemon is stopping".into()));
        }
        if let Some(at) = instance.not_before.filter(|at| *at > Instant::now()) {
            return Err(McpError::Unavailable(format!(
                "MCP server {} failed ({}); it is tried again in {} s",
                key.0,
                instance.last_error.as_deref().unwrap_or("no reason known"),
                at.saturating_duration_since(Instant::now()).as_secs().max(1)
            )));
        }
        if let Some(dead) = instance.running.take() {
            // Ended before its watcher noticed (a call found it gone first).
            dead.release(key, self);
            instance.ended(dead.death().await);
        }
        match self.launch(&config, key).await {
            Ok(running) => {
                let session = running.session.clone();
                self.catalogs
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(key.0.clone(), (session.tools(), session.skipped()));
                instance.running = Some(running.clone());
                instance.not_before = None;
                drop(instance);
                self.failing.started(&key.0);
                self.watch(key.clone(), running);
                Ok(session)
            }
            Err(e) => {
                self.failing.failed(&config, &e.to_string());
                instance.failures += 1;
                instance.last_error = Some(e.to_string());
                instance.not_before = Some(Instant::now() + backoff(instance.failures));
                Err(e)
            }
        }
    }

    /// Follows a running instance: when its container dies or its session ends, records why,
    /// removes the container and, for a shared server, starts it again after the back-off.
    fn watch(&self, key: Key, running: Running) {
        let Some(this) = self.me.upgrade() else { return };
        tokio::spawn(async move {
            tokio::select! {
                _ = running.exited() => {}
                _ = running.session.closed() => {}
                _ = this.stop.cancelled() => return,
            };
            let reason = running.death().await;
            running.stop().await;
            let slot = this.slot(&key);
            let mut instance = slot.lock().await;
            let current = instance
                .running
                .as_ref()
                .is_some_and(|r| Arc::ptr_eq(&r.session, &running.session));
            if !current {
                // Stopped on purpose (idle, restart) or found dead by a start: whoever took it
                // released it, maybe before a newer instance of the same identity registered.
                return;
            }
            running.release(&key, &this);
            instance.running = None;
            let wait = instance.ended(reason.clone());
            drop(instance);
            tracing::warn!(server = %key.0, serves = %serves(&key), "MCP server ended: {reason}; started again in {} s", wait.as_secs());
            let shared = this.config(&key.0).is_ok_and(|c| c.scope == ServerScope::Shared);
            // A shared server comes back by itself, trying until it does (or the daemon
            // stops), each wait the back-off's; a chat's comes back at its next call.
            if !shared {
                return;
            }
            let mut wait = wait;
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = this.stop.cancelled() => return,
                }
                match this.instance(&key).await {
                    Ok(_) => return,
                    Err(e) => {
                        tracing::warn!(server = %key.0, "MCP server did not start again: {e}");
                        let next = this.slot(&key).lock().await.not_before;
                        wait = next.map_or(FIRST_BACKOFF, |at| {
                            at.saturating_duration_since(Instant::now()).max(FIRST_BACKOFF)
                        });
                    }
                }
            }
        });
    }

    /// Stops an instance on purpose (not counted as a failure).
    async fn stop_instance(&self, key: &Key, why: &str) {
        if let Some((running, _slot)) = self.take_for_stop(key, why).await {
            running.stop().await;
        }
    }

    /// [`McpServers::stop_instance`] in the background: the slot is taken before this returns
    /// (so the next call waits for the stop), the stop itself runs on. Whether one was running.
    async fn stop_instance_behind(&self, key: Key, why: &'static str) -> bool {
        let Some((running, slot)) = self.take_for_stop(&key, why).await else { return false };
        tokio::spawn(async move {
            running.stop().await;
            drop(slot);
        });
        true
    }

    /// The running instance of `key`, taken out to be stopped (logged with `why`, its address
    /// and identity released), with its slot's lock: while the caller holds it, a call that
    /// comes waits for this instance to end rather than start a second one beside it (a
    /// browser's profile is open in one only).
    async fn take_for_stop(
        &self,
        key: &Key,
        why: &str,
    ) -> Option<(Running, tokio::sync::OwnedMutexGuard<Instance>)> {
        let mut slot = self.slot(key).lock_owned().await;
        let running = slot.running.take()?;
        tracing::info!(server = %key.0, serves = %serves(key), "MCP server stopped: {why}");
        running.release(key, self);
        Some((running, slot))
    }

    /// Stops chat instances idle past their server's `idle_stop_secs`.
    async fn sweep_idle(self: Arc<Self>) {
        let shortest = self.servers.iter().map(|s| Duration::from_secs(s.idle_stop_secs) / 2).min();
        let every = shortest.unwrap_or(IDLE_SWEEP).clamp(Duration::from_millis(500), IDLE_SWEEP);
        loop {
            tokio::select! {
                _ = tokio::time::sleep(every) => {}
                _ = self.stop.cancelled() => return,
            }
            let keys: Vec<(Key, Arc<tokio::sync::Mutex<Instance>>)> = {
                let instances = self.instances.lock().unwrap_or_else(|e| e.into_inner());
                instances.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
            };
            for (key, slot) in keys {
                let Some(_) = key.1 else { continue };
                let Ok(config) = self.config(&key.0) else { continue };
                let idle = Duration::from_secs(config.idle_stop_secs);
                let stale = match slot.try_lock() {
                    Ok(instance) => {
                        instance.running.is_some()
                            && instance.last_used.is_some_and(|at| at.elapsed() >= idle)
                    }
                    Err(_) => false, // starting or in use
                };
                if stale {
                    self.stop_instance(&key, "idle").await;
                }
            }
        }
    }

    /// Stops `chat`'s instance of a chat-scoped `server` when it runs (its next call starts a
    /// fresh one); whether one was running.
    pub async fn stop_for_chat(
        &self,
        server: &str,
        chat: &ChatRef,
        why: &str,
    ) -> Result<bool, McpError> {
        let config = self.config(server)?;
        if config.scope != ServerScope::Chat {
            return Err(McpError::Unavailable(format!(
                "MCP server {server} serves every chat; only the operator restarts it"
            )));
        }
        let key = self.key(config, chat);
        let known = self.instances.lock().unwrap_or_else(|e| e.into_inner()).contains_key(&key);
        if !known {
            return Ok(false);
        }
        let running = self.slot(&key).lock().await.running.as_ref().is_some_and(|r| r.is_up());
        self.stop_instance(&key, why).await;
        Ok(running)
    }

    /// Restarts a server: every instance of it stops; shared ones start again now, chat ones
    /// at their next call (their probe runs again now). The back-off is forgotten.
    pub async fn restart(&self, server: &str) -> Result<Restarted, McpError> {
        let config = self.config(server)?.clone();
        let keys: Vec<Key> = {
            let instances = self.instances.lock().unwrap_or_else(|e| e.into_inner());
            instances.keys().filter(|k| k.0 == server).cloned().collect()
        };
        for key in &keys {
            self.stop_instance(key, "restarted by the operator").await;
            let slot = self.slot(key);
            let mut instance = slot.lock().await;
            instance.not_before = None;
            instance.failures = 0;
        }
        let mut container = None;
        let key = (server.to_owned(), None);
        if config.scope != ServerScope::Shared {
            // A chat-scoped server's probe again, as at the daemon's start: its tool list, and
            // whether it starts at all (after `make mcp-image`, health is clear at once).
            self.instance(&key).await?;
            self.stop_instance(&key, "its tool list is read").await;
        } else {
            self.instance(&key).await?;
            // Read under the slot's lock, which the old instance's watcher may hold a moment
            // (it wakes when the restart ends that session): a non-blocking look could miss it.
            let slot = self.slot(&key);
            let instance = slot.lock().await;
            container = instance.running.as_ref().and_then(|r| r.container()).map(str::to_owned);
        }
        Ok(Restarted { stopped: keys.len(), container })
    }

    /// The tool list of the instance serving `chat`, when it runs (and is not being started);
    /// kept as the server's last known list.
    fn live_tools(&self, config: &ServerConfig, chat: &ChatRef) -> Option<Vec<ServerTool>> {
        let key = self.key(config, chat);
        let slot = self.instances.lock().unwrap_or_else(|e| e.into_inner()).get(&key).cloned()?;
        let instance = slot.try_lock().ok()?;
        let session = &instance.running.as_ref().filter(|r| r.is_up())?.session;
        let tools = session.tools();
        let mut catalogs = self.catalogs.lock().unwrap_or_else(|e| e.into_inner());
        catalogs.insert(config.name.clone(), (tools.clone(), session.skipped()));
        Some(tools)
    }

    /// Every instance, for the operator.
    pub async fn instances(&self) -> Vec<InstanceView> {
        let slots: Vec<(Key, Arc<tokio::sync::Mutex<Instance>>)> = {
            let instances = self.instances.lock().unwrap_or_else(|e| e.into_inner());
            instances.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
        };
        let mut views = Vec::new();
        for (key, slot) in slots {
            let probe =
                key.1.is_none() && self.config(&key.0).is_ok_and(|c| c.scope == ServerScope::Chat);
            let serves = if probe { "probe".to_owned() } else { serves(&key) };
            // A start holds the instance (up to its start timeout): the operator's view does
            // not wait for it.
            let Ok(instance) = slot.try_lock() else {
                views.push(InstanceView {
                    server: key.0.clone(),
                    serves,
                    state: "starting",
                    container: None,
                    tools: 0,
                    restarts: 0,
                    last_error: None,
                    up_secs: None,
                    idle_secs: None,
                });
                continue;
            };
            let running = instance.running.as_ref().filter(|r| !r.session.is_closed());
            views.push(InstanceView {
                server: key.0.clone(),
                serves,
                state: match (running, &instance.not_before) {
                    (Some(_), _) => "running",
                    (None, Some(_)) => "failed",
                    (None, None) => "stopped",
                },
                container: running.and_then(|r| r.container()).map(str::to_owned),
                tools: running.map_or(0, |r| r.session.tools().len()),
                restarts: instance.restarts,
                last_error: instance.last_error.clone(),
                up_secs: running.map(|r| r.started.elapsed().as_secs()),
                idle_secs: instance.last_used.map(|at| at.elapsed().as_secs()),
            });
        }
        views.sort_by(|a, b| (&a.server, &a.serves).cmp(&(&b.server, &b.serves)));
        views
    }

    /// A server's tool list (offered and skipped), as last learned.
    pub fn tool_list(&self, server: &str) -> Result<(Vec<ServerTool>, Vec<Skipped>), McpError> {
        self.config(server)?;
        Ok(self
            .catalogs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(server)
            .cloned()
            .unwrap_or_default())
    }

    /// The stderr lines of a server's running instances (newest instance's last).
    pub async fn logs(&self, server: &str) -> Result<Vec<String>, McpError> {
        self.config(server)?;
        let slots: Vec<Arc<tokio::sync::Mutex<Instance>>> = {
            let instances = self.instances.lock().unwrap_or_else(|e| e.into_inner());
            instances.iter().filter(|(k, _)| k.0 == server).map(|(_, v)| v.clone()).collect()
        };
        let mut lines = Vec::new();
        for slot in slots {
            // A starting instance has no container to read yet.
            if let Ok(instance) = slot.try_lock() {
                if let Some(service) = instance.running.as_ref().and_then(|r| r.service.as_ref()) {
                    lines.extend(service.logs());
                }
            }
        }
        Ok(lines)
    }

    pub fn counters(&self) -> HashMap<String, ServerCounters> {
        self.counters.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The servers `chat` may use, with their state for it (`/status`).
    pub fn for_chat(&self, chat: &ChatRef, owner: bool) -> Vec<ServerLine> {
        let catalogs = self.catalogs.lock().unwrap_or_else(|e| e.into_inner());
        self.servers
            .iter()
            .filter(|s| s.allows(chat, owner))
            .map(|s| ServerLine {
                name: s.name.clone(),
                tools: catalogs.get(&s.name).map_or(0, |c| c.0.len()),
                failing: self.failing.reason(&s.name),
            })
            .collect()
    }

    /// What makes MCP a degraded part now: each server whose last start failed, with the whole
    /// reason and the fix where it is known (`None`: every server started).
    pub fn problem(&self) -> Option<String> {
        self.failing.problem()
    }

    /// Stops every instance (the daemon stops; the pool's shutdown removes the containers
    /// too).
    pub async fn shutdown(&self) {
        self.stop.cancel();
        let keys: Vec<Key> = {
            let instances = self.instances.lock().unwrap_or_else(|e| e.into_inner());
            instances.keys().cloned().collect()
        };
        // At once: each may take its grace.
        let stops = keys.iter().map(|key| self.stop_instance(key, "the daemon stops"));
        futures_util::future::join_all(stops).await;
    }
}

/// Whose its requests are at the egress proxy (the audit's task id, the approvals' task):
/// `mcp:<server>` for a shared instance or a probe, `mcp:<server>@<chat>` for a chat's.
fn identity(key: &Key) -> String {
    match &key.1 {
        Some(chat) => chat_identity(&key.0, chat),
        None => format!("mcp:{}", key.0),
    }
}

/// The identity of `chat`'s instance of the chat-scoped server `server` at the egress proxy.
pub fn chat_identity(server: &str, chat: &ChatRef) -> String {
    format!("mcp:{server}@{chat}")
}

fn serves(key: &Key) -> String {
    match &key.1 {
        Some(chat) => chat.to_string(),
        None => "shared".to_owned(),
    }
}

/// The wait before the next start after `failures` in a row: none after the first, then 1 s
/// doubling to a minute.
fn backoff(failures: u32) -> Duration {
    if failures <= 1 {
        return Duration::ZERO;
    }
    let exp = (failures - 2).min(6);
    (FIRST_BACKOFF * 2u32.pow(exp)).min(MAX_BACKOFF)
}

impl Connector for McpServers {
    fn ready(&self) -> BoxFuture<'_, ()> {
        let mut lists = self.first_lists.clone();
        Box::pin(async move {
            // Its sender is dropped only after it said `true`, or with the daemon stopping.
            let _ = lists.wait_for(|in_| *in_).await;
        })
    }

    fn catalog(&self, server: &str, chat: &ChatRef) -> Vec<ServerTool> {
        // The list of the chat's own instance while it runs (re-read on `list_changed`), and
        // the last one learned otherwise (every instance runs the same program).
        if let Some(tools) = self.config(server).ok().and_then(|c| self.live_tools(c, chat)) {
            return tools;
        }
        self.catalogs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(server)
            .map(|c| c.0.clone())
            .unwrap_or_default()
    }

    fn session<'a>(
        &'a self,
        server: &'a str,
        chat: &'a ChatRef,
    ) -> BoxFuture<'a, Result<Arc<Session>, McpError>> {
        Box::pin(async move {
            let config = self.config(server)?;
            let key = self.key(config, chat);
            self.instance(&key).await
        })
    }

    fn record(&self, server: &str, chat: &ChatRef, outcome: CallOutcome, took: Duration) {
        if let Ok(config) = self.config(server) {
            let slot = self.slot(&self.key(config, chat));
            if let Ok(mut instance) = slot.try_lock() {
                instance.last_used = Some(Instant::now());
                if outcome != CallOutcome::Failed {
                    instance.failures = 0;
                }
            };
        }
        let mut counters = self.counters.lock().unwrap_or_else(|e| e.into_inner());
        let entry = counters.entry(server.to_owned()).or_default();
        entry.calls += 1;
        entry.duration_ms += took.as_millis() as u64;
        match outcome {
            CallOutcome::Answered => {}
            CallOutcome::ToolError => entry.tool_errors += 1,
            CallOutcome::Failed => entry.failures += 1,
        }
    }

    fn ended_early<'a>(
        &'a self,
        server: &'a str,
        chat: &'a ChatRef,
        how: EndedEarly,
    ) -> BoxFuture<'a, Option<String>> {
        Box::pin(async move {
            // A shared server serves other chats: one chat's call does not end it.
            let config = self.config(server).ok()?;
            if config.scope != ServerScope::Chat {
                return None;
            }
            let key = self.key(config, chat);
            let stopped = match how {
                EndedEarly::PastLimit => {
                    let why = "a call ran past its limit (the server may be stuck on it)";
                    self.stop_for_chat(server, chat, why).await.unwrap_or(false)
                }
                // Behind the turn's "Stopped.", which does not wait for the container; the
                // chat's next call does (the slot is taken now).
                EndedEarly::Stopped => {
                    self.stop_instance_behind(
                        key,
                        "its call was stopped (the server may be busy with it)",
                    )
                    .await
                }
            };
            stopped.then(|| {
                "the server was stopped for this chat; the next call starts it afresh".into()
            })
        })
    }

    fn progress(&self, server: &str, chat: &ChatRef, tool: &str, progress: &Progress) {
        tracing::debug!(
            server,
            %chat,
            tool,
            progress = progress.progress,
            total = ?progress.total,
            message = progress.message.as_deref().unwrap_or(""),
            "MCP progress"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_to_a_minute() {
        let waits: Vec<u64> = (1..=10).map(|n| backoff(n).as_secs()).collect();
        assert_eq!(waits, [0, 1, 2, 4, 8, 16, 32, 60, 60, 60]);
    }
}
