//! The owner's self-test (`nexbot-selftest`) wired to this daemon: its attacks run through the
//! delegation (a direct `run_command` task in the self-test's room), the pool answers for the
//! container's hardening, the rooms' folder takes the bait; `/selftest`, `POST /v1/selftest`
//! (`nexbot doctor --attack`) start it, and the last report is kept in the store and shown on
//! the status board (`/status`, the dashboard).

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use nexbot_core::channel::{Channel, ChannelError, MessageId, OutboundMessage};
use nexbot_core::{BoxFuture, ChatRef};
use nexbot_docker::{Hardening, Pool, RestartReason};
use nexbot_selftest::{Bound, Report, Setting, Walls};
use secrecy::SecretString;
use tokio_util::sync::CancellationToken;

use crate::agent::tools::ToolContext;
use crate::agent::turns::TurnOrigin;
use crate::commands::{ChatCommand, CommandContext};
use crate::config::Config;
use crate::store::Store;
use crate::tools::delegate::Delegate;
use crate::vault::{Mode, SecretScope, Vault, VaultState};

/// The status board's line.
pub const STATUS_LINE: &str = "self-test";

/// How long the self-test waits for its room's container to be replaced.
const RETIRE_WAIT: std::time::Duration = std::time::Duration::from_secs(20);

/// The self-test of this daemon: one run at a time, the last report at hand.
pub struct SelfTest {
    walls: DaemonWalls,
    setting: Setting,
    store: Store,
    owner: Option<i64>,
    /// Where a run `/selftest` started sends its report.
    channel: Arc<dyn Channel>,
    last: Arc<Mutex<Option<Report>>>,
    running: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for SelfTest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SelfTest").field("setting", &self.setting).finish_non_exhaustive()
    }
}

impl SelfTest {
    /// Wires the self-test to the pool and the delegation of a running sandbox; the last
    /// report is read from the store.
    pub async fn new(
        config: &Config,
        store: Store,
        pool: Arc<Pool>,
        delegate: Arc<Delegate>,
        vault: Arc<Vault>,
        channel: Arc<dyn Channel>,
    ) -> Self {
        let setting = setting(config, &pool);
        let rooms = nexbot_tools::rooms::rooms_dir(&config.workspace.dir);
        let last = match store.last_selftest().await {
            Ok(Some(json)) => serde_json::from_str(&json).ok(),
            Ok(None) => None,
            Err(e) => {
                tracing::warn!(error = %e, "the last self-test's report could not be read");
                None
            }
        };
        Self {
            walls: DaemonWalls { delegate, pool, rooms, vault },
            setting,
            store,
            owner: config.telegram.owner,
            channel,
            last: Arc::new(Mutex::new(last)),
            running: tokio::sync::Mutex::new(()),
        }
    }

    /// Runs the self-test now, unless one is running (`None`); the report is kept.
    pub async fn run(&self) -> Option<Report> {
        let _one = self.running.try_lock().ok()?;
        tracing::info!("self-test: attacking this install's walls");
        let report = nexbot_selftest::run(&self.walls, &self.setting).await;
        tracing::info!(summary = %report.summary(), wall_ms = report.wall_ms, "self-test done");
        match serde_json::to_string(&report) {
            Ok(json) => {
                if let Err(e) = self.store.record_selftest(report.at, json).await {
                    tracing::warn!(error = %e, "the self-test's report could not be kept");
                }
            }
            Err(e) => tracing::warn!(error = %e, "the self-test's report could not be written"),
        }
        *self.last.lock().unwrap_or_else(|p| p.into_inner()) = Some(report.clone());
        Some(report)
    }

    /// The status board's line: the last run, or how to run one.
    pub fn status_line(&self) -> impl Fn() -> String + Send + Sync + 'static {
        let last = self.last.clone();
        move || match &*last.lock().unwrap_or_else(|p| p.into_inner()) {
            Some(report) => format!("last: {}", report.status_line(nexbot_core::unix_now())),
            None => "never run (/selftest, or nexbot doctor --attack)".to_owned(),
        }
    }

    /// Whether `user` in `chat` is the owner: the owner's private Telegram chat, or a console.
    fn owner_asks(&self, chat: &ChatRef, user: Option<i64>) -> bool {
        crate::commands::owner_in_private(self.owner, chat, user)
            && !nexbot_selftest::is_selftest_room(chat)
    }
}

/// What this install's walls are, for the attacks.
fn setting(config: &Config, pool: &Pool) -> Setting {
    let gateway = pool.network().gateway;
    let name = |path: PathBuf| path.file_name().map(|n| n.to_string_lossy().into_owned());
    let daemon_files = [
        name(config.database_path()),
        name(config.control_socket()),
        name(config.egress_audit_path()),
        Some(crate::workspace::CONFIG_FILE.to_owned()),
    ];
    Setting {
        version: env!("CARGO_PKG_VERSION").to_owned(),
        runtime: pool.runtime().to_owned(),
        egress_mode: config.egress.effective_mode().to_string(),
        gateway,
        outside: nexbot_selftest::outside_addresses(gateway),
        daemon_files: daemon_files.into_iter().flatten().collect(),
    }
}

/// The daemon's walls as the attacks reach them.
struct DaemonWalls {
    delegate: Arc<Delegate>,
    pool: Arc<Pool>,
    /// The chats' rooms' folder.
    rooms: PathBuf,
    /// Where the self-test's own secret is stored, in its room's scope.
    vault: Arc<Vault>,
}

/// The host the self-test's secret is bound to: one no attack aims at (and no resolver
/// answers).
const BOUND_HOST: &str = "bound.nexbot-selftest.invalid";

impl Walls for DaemonWalls {
    fn run<'a>(
        &'a self,
        room: &'a ChatRef,
        command: &'a str,
        secrets: &'a [String],
    ) -> BoxFuture<'a, Result<String, String>> {
        Box::pin(async move {
            let ctx = context(room);
            let ran = self.delegate.run_direct("run_command", command, secrets.to_vec(), &ctx);
            ran.await.map_err(|e| e.to_string())
        })
    }

    fn bind_secret<'a>(&'a self, room: &'a ChatRef, name: &'a str) -> BoxFuture<'a, Bound> {
        Box::pin(async move {
            match self.vault.state() {
                VaultState::On => {}
                VaultState::Off(why) => return Bound::NoVault(why.clone()),
                VaultState::WrongKey => {
                    return Bound::NoVault("the master key does not open it".to_owned())
                }
            }
            let value = SecretString::from(uuid::Uuid::new_v4().simple().to_string());
            let scope = SecretScope::Chat(room.clone());
            let hosts = [BOUND_HOST.to_owned()];
            match self.vault.set(&scope, name, value, &hosts, &[], Some(Mode::Proxy)).await {
                Ok(_) => Bound::To(BOUND_HOST.to_owned()),
                Err(e) => Bound::Failed(format!("the self-test's secret could not be stored: {e}")),
            }
        })
    }

    fn hardening<'a>(&'a self, room: &'a ChatRef) -> BoxFuture<'a, Result<Hardening, String>> {
        Box::pin(async move {
            self.pool.hardening_of_room(&room.to_string()).await.map_err(|e| e.to_string())
        })
    }

    fn exec_idle<'a>(
        &'a self,
        room: &'a ChatRef,
        command: &'a str,
    ) -> BoxFuture<'a, Result<String, String>> {
        Box::pin(async move {
            let limit = std::time::Duration::from_secs(10);
            let ran = self.pool.exec_in_room(&room.to_string(), command, limit).await;
            ran.map_err(|e| e.to_string())
        })
    }

    fn plant<'a>(&'a self, room: &'a ChatRef, name: &'a str) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            let dir = self.rooms.join(nexbot_tools::rooms::room_name(room));
            tokio::fs::create_dir_all(&dir).await.map_err(|e| format!("{}: {e}", dir.display()))?;
            let file = dir.join(name);
            tokio::fs::write(&file, b"bait").await.map_err(|e| format!("{}: {e}", file.display()))
        })
    }

    fn forget<'a>(&'a self, room: &'a ChatRef) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            let key = room.to_string();
            let serving = || {
                let slots = self.pool.snapshot().into_iter();
                slots.filter(|s| s.room.as_deref() == Some(key.as_str())).collect::<Vec<_>>()
            };
            for slot in serving() {
                let why = "the self-test's attacks ran in it";
                let killed =
                    self.pool.kill_because(&slot.id, RestartReason::SelfTestDone, why).await;
                if let Err(e) = killed {
                    tracing::warn!(slot = %slot.id, error = %e, "self-test: container not retired");
                }
            }
            // Gone before the report says so: its slot is refilled with a blank.
            let deadline = tokio::time::Instant::now() + RETIRE_WAIT;
            while !serving().is_empty() && tokio::time::Instant::now() < deadline {
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
            if !serving().is_empty() {
                tracing::warn!(room = %key, "self-test: its container was not replaced in time");
            }
            // Its secret, when it had one (the vault off: nothing to delete).
            let scope = SecretScope::Chat(room.clone());
            if let Err(e) = self.vault.delete(&scope, nexbot_selftest::SECRET).await {
                tracing::debug!(error = %e, "self-test: no secret of its own deleted");
            }
            let dir = self.rooms.join(nexbot_tools::rooms::room_name(room));
            match tokio::fs::remove_dir_all(&dir).await {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => tracing::warn!(dir = %dir.display(), error = %e, "self-test: room left"),
            }
        })
    }
}

/// A task's context in the self-test's room: nobody's chat, nothing shown.
fn context(room: &ChatRef) -> ToolContext {
    ToolContext {
        chat: room.clone(),
        session_id: 0,
        cancel: CancellationToken::new(),
        channel: Arc::new(Quiet),
        owner: false,
        turn: TurnOrigin::Heartbeat { name: "self-test".to_owned() },
        task_tokens: Arc::default(),
        skills_read: Default::default(),
        confirm: Arc::new(crate::agent::confirm::NoConfirm),
        reads: Default::default(),
    }
}

/// The self-test room's channel: its tasks' progress is shown nowhere (the report says it all).
#[derive(Debug)]
struct Quiet;

impl Channel for Quiet {
    fn send(&self, _: OutboundMessage) -> BoxFuture<'_, Result<Option<MessageId>, ChannelError>> {
        Box::pin(async { Ok(None) })
    }
}

/// `/selftest`: the owner starts a self-test; the report follows in the chat.
impl nexbot_control_api::RunSelfTest for SelfTest {
    fn run(&self) -> BoxFuture<'_, Option<Report>> {
        Box::pin(SelfTest::run(self))
    }
}

#[derive(Debug)]
pub struct SelfTestCommand(pub Arc<SelfTest>);

impl ChatCommand for SelfTestCommand {
    fn name(&self) -> &'static str {
        "selftest"
    }
    fn summary(&self) -> &'static str {
        "the owner: attack this install's walls and report each held or broken"
    }
    fn run<'a>(&'a self, ctx: CommandContext<'a>) -> BoxFuture<'a, String> {
        Box::pin(async move {
            if !self.0.owner_asks(ctx.chat, ctx.user) {
                return "Only the owner runs the self-test, in their private chat.".to_owned();
            }
            // The run takes seconds: the bus must not wait for it.
            let test = self.0.clone();
            let chat = ctx.chat.clone();
            tokio::spawn(async move {
                let text = match test.run().await {
                    Some(report) => report.render(),
                    None => "A self-test is already running; its report will follow.".to_owned(),
                };
                if let Err(e) = test.channel.send(OutboundMessage::progress(&chat, text)).await {
                    tracing::warn!(error = %e, "the self-test's report could not be sent");
                }
            });
            "🛡 Self-test started: a fixed set of attacks in a room of its own, through the \
             path every task takes. The report follows in a few seconds."
                .to_owned()
        })
    }
}

/// The self-test of a running sandbox whose delegation was built (`built`), reporting to
/// `router`; `None` without one (nothing to attack).
pub async fn start(
    config: &Config,
    store: &Store,
    sandbox: Option<&crate::sandbox::Sandbox>,
    built: Option<Arc<std::sync::OnceLock<Arc<Delegate>>>>,
    vault: &Arc<Vault>,
    router: &Arc<nexbot_channels::Router>,
) -> Option<Arc<SelfTest>> {
    let pool = sandbox?.pool().clone();
    let delegate = built?.get()?.clone();
    let channel = router.clone() as Arc<dyn Channel>;
    let vault = vault.clone();
    Some(Arc::new(SelfTest::new(config, store.clone(), pool, delegate, vault, channel).await))
}

/// Puts `test`'s line on the status board and `/selftest` among the commands.
pub fn add_to(
    test: Arc<SelfTest>,
    status: &crate::status::StatusBoard,
    commands: &mut crate::commands::CommandRegistry,
) -> Arc<SelfTest> {
    status.add(STATUS_LINE, test.status_line());
    commands.add(Arc::new(SelfTestCommand(test.clone())));
    test
}
