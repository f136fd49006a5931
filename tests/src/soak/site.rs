//! The install under soak: the daemon's process (killed and started again), its data directory
//! on a small disk of its own, the engine of the test's own, and the faults caused on them.

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::daemon::Daemon;
use crate::disk::SmallDisk;
use crate::engine::TestEngine;
use crate::scripted_llm::ScriptedLlm;
use crate::soak::faults::{Fault, Step, Window};
use crate::soak::model::{Mode, ModelSwitch};
use crate::soak::{SoakConfig, FIRST_USER};
use crate::telegram::TelegramFixture;

/// How long the daemon may take to start (a restart settles what the dead run left).
const START_LIMIT: Duration = Duration::from_secs(120);

/// The pool's (and its network's) name on the test's engine.
pub const POOL: &str = "nxsoak";

/// The daemon's resources at one moment.
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    /// Since the soak began.
    pub at: Duration,
    /// Which run of the daemon (1 = the first).
    pub life: u32,
    pub rss_kb: u64,
    pub open_files: u64,
}

#[derive(Debug)]
pub struct Site {
    nexbot: PathBuf,
    pub workspace: PathBuf,
    env: Vec<(String, String)>,
    daemon: tokio::sync::Mutex<Option<Daemon>>,
    pid: AtomicU32,
    pub lives: AtomicU32,
    /// The logs of the daemon's runs that ended.
    pub logs: Mutex<Vec<String>>,
    pub engine: Arc<Mutex<TestEngine>>,
    pub disk: SmallDisk,
    sampling: AtomicBool,
    rng: Mutex<fastrand::Rng>,
}

impl Site {
    /// The engine (with the subagent image), the disk and the workspace, ready to serve.
    pub async fn prepare(config: &SoakConfig, tg: &TelegramFixture, llm: &ScriptedLlm) -> Self {
        let root = std::env::temp_dir().join(format!("nxsoak-{}", std::process::id()));
        let engine = tokio::task::spawn_blocking(move || {
            // The engine's folder is the run's own: removed with the engine, nothing left in /tmp.
            let engine = TestEngine::start(&root);
            engine.load_image("nexbot-subagent:dev");
            engine
        })
        .await
        .expect("the test's engine");
        let disk =
            SmallDisk::mount("soak", "256m").expect("the soak needs root (it mounts a tmpfs)");
        let workspace = disk.path().join("ws");
        let init = Command::new(&config.nexbot)
            .args(["init", "--dir"])
            .arg(&workspace)
            .output()
            .expect("run nexbot init");
        assert!(init.status.success(), "nexbot init: {}", String::from_utf8_lossy(&init.stderr));
        let others: Vec<String> =
            (1..config.chats as i64).map(|i| (FIRST_USER + i).to_string()).collect();
        let env: Vec<(String, String)> = [
            ("DOCKER_HOST", engine.host()),
            ("NEXBOT_EGRESS__MODE", "open".into()),
            ("NEXBOT_EGRESS__PORT", "0".into()),
            ("NEXBOT_LLM__BASE_URL", llm.base_url()),
            ("NEXBOT_LLM__MODEL", "scripted".into()),
            ("NEXBOT_LLM__RETRY_INITIAL_MS", "10".into()),
            ("NEXBOT_LLM__TIMEOUT_SECS", "5".into()),
            ("NEXBOT_SUBAGENT__ENABLED", "true".into()),
            ("NEXBOT_SUBAGENT__POOL_SIZE", "2".into()),
            ("NEXBOT_SUBAGENT__POOL_NAME", POOL.into()),
            ("NEXBOT_SUBAGENT__NETWORK", POOL.into()),
            ("NEXBOT_TELEGRAM_TOKEN", tg.token().into()),
            ("NEXBOT_TELEGRAM__API_URL", tg.api_url().into()),
            ("NEXBOT_TELEGRAM__OWNER", FIRST_USER.to_string()),
            ("NEXBOT_TELEGRAM__ALLOWED_USERS", format!("[{}]", others.join(","))),
            ("NEXBOT_TELEGRAM__POLL_TIMEOUT_SECS", "5".into()),
            ("NEXBOT_TELEGRAM__PROGRESS_EDIT_INTERVAL_MS", "300".into()),
            ("NEXBOT_TELEGRAM__DELIVERY_DEADLINE_SECS", "60".into()),
        ]
        .map(|(k, v)| (k.to_owned(), v))
        .into();
        Self {
            nexbot: config.nexbot.clone(),
            workspace,
            env,
            daemon: tokio::sync::Mutex::new(None),
            pid: AtomicU32::new(0),
            lives: AtomicU32::new(0),
            logs: Mutex::new(Vec::new()),
            engine: Arc::new(Mutex::new(engine)),
            disk,
            sampling: AtomicBool::new(true),
            rng: Mutex::new(fastrand::Rng::with_seed(config.seed ^ 0xd15c)),
        }
    }

    pub fn config(&self) -> PathBuf {
        self.workspace.join("config.toml")
    }

    pub fn database(&self) -> PathBuf {
        self.workspace.join("nexbot.db")
    }

    /// Starts the daemon and waits until its Telegram channel is on.
    pub async fn start_daemon(&self) {
        let mut slot = self.daemon.lock().await;
        assert!(slot.is_none(), "the daemon already runs");
        let daemon =
            Daemon::serve(&self.nexbot, &self.config(), self.env.clone(), START_LIMIT).await;
        daemon.wait_log("the Telegram channel is on", START_LIMIT).await;
        self.pid.store(daemon.pid(), Ordering::SeqCst);
        self.lives.fetch_add(1, Ordering::SeqCst);
        *slot = Some(daemon);
    }

    /// SIGKILL, keeping its log.
    async fn kill_daemon(&self) {
        let daemon = self.daemon.lock().await.take().expect("the daemon runs");
        self.pid.store(0, Ordering::SeqCst);
        let log = daemon.kill();
        self.logs.lock().unwrap().push(log);
    }

    /// The daemon's own clean stop (SIGTERM), asserting a clean exit; keeps its log.
    pub async fn stop_daemon(&self) {
        let daemon = self.daemon.lock().await.take().expect("the daemon runs");
        self.pid.store(0, Ordering::SeqCst);
        let log = daemon.stop(START_LIMIT).await;
        self.logs.lock().unwrap().push(log);
    }

    /// The pool's containers on the test's engine (ids).
    pub fn pool_containers(engine: &TestEngine) -> Vec<String> {
        let filter = format!("label=nexbot.pool={POOL}");
        engine
            .docker(&["ps", "-aq", "--filter", &filter])
            .unwrap_or_default()
            .split_whitespace()
            .map(str::to_owned)
            .collect()
    }

    /// Causes `step`'s fault and undoes it; returns its window.
    pub async fn cause(&self, step: Step, began: Instant, model: &ModelSwitch) -> Window {
        let from = began.elapsed();
        let note = match step.fault {
            Fault::ContainerKilled => self.kill_a_container().await,
            Fault::DaemonKilled => {
                self.kill_daemon().await;
                tokio::time::sleep(Duration::from_secs(1)).await;
                let restarted = Instant::now();
                self.start_daemon().await;
                format!("serving again {:.1} s after the start", restarted.elapsed().as_secs_f64())
            }
            Fault::EngineRestarted => self.restart_engine().await,
            Fault::ModelFailing | Fault::ModelStalling => {
                let mode =
                    if step.fault == Fault::ModelFailing { Mode::Failing } else { Mode::Stalling };
                model.set(mode);
                tokio::time::sleep(step.hold).await;
                model.set(Mode::Normal);
                format!("for {:.1} s", step.hold.as_secs_f64())
            }
            Fault::DiskFull => {
                let filler = self.disk.fill();
                tokio::time::sleep(step.hold).await;
                std::fs::remove_file(&filler).expect("free the disk");
                format!("0 bytes free for {:.1} s", step.hold.as_secs_f64())
            }
        };
        Window { fault: step.fault, from, to: began.elapsed(), note }
    }

    async fn kill_a_container(&self) -> String {
        let engine = self.engine.clone();
        let pick = self.rng.lock().unwrap().u64(..);
        tokio::task::spawn_blocking(move || {
            let engine = engine.lock().unwrap();
            let ids = Self::pool_containers(&engine);
            if ids.is_empty() {
                return "no pool container to kill".to_owned();
            }
            let id = &ids[(pick % ids.len() as u64) as usize];
            let removed = engine.docker(&["rm", "-f", id]).is_some();
            format!("removed {id} of {} (rm -f: {removed})", ids.len())
        })
        .await
        .expect("kill a container")
    }

    /// Stops the engine (SIGTERM), starts it again with `--live-restore` toggled for its next
    /// stop, and says what became of the pool's containers.
    async fn restart_engine(&self) -> String {
        let engine = self.engine.clone();
        let (live, before, survived) = tokio::task::spawn_blocking(move || {
            let mut engine = engine.lock().unwrap();
            let live = engine.live_restore();
            let before = Self::pool_containers(&engine);
            engine.stop();
            engine.set_live_restore(!live);
            engine.restart();
            let running = engine.docker(&["ps", "-q", "--no-trunc"]).unwrap_or_default();
            let survived: Vec<String> =
                before.iter().filter(|id| running.contains(id.as_str())).cloned().collect();
            (live, before, survived)
        })
        .await
        .expect("restart the engine");
        tokio::time::sleep(Duration::from_secs(10)).await;
        let kept = survived.len();
        let engine = self.engine.clone();
        let left = tokio::task::spawn_blocking(move || {
            let engine = engine.lock().unwrap();
            let now = Self::pool_containers(&engine);
            survived.iter().filter(|id| now.iter().any(|n| id.starts_with(n.as_str()))).count()
        })
        .await
        .expect("look at the engine");
        format!(
            "live-restore {}: {} pool containers before the stop, {kept} of them running after \
             the restart, {left} of those still there 10 s later",
            if live { "on" } else { "off" },
            before.len(),
        )
    }

    /// Samples the daemon's RSS and open files every 2 s until [`Self::stop_sampling`].
    pub async fn sample(self: Arc<Self>, began: Instant) -> Vec<Sample> {
        let mut samples = Vec::new();
        while self.sampling.load(Ordering::SeqCst) {
            let pid = self.pid.load(Ordering::SeqCst);
            if pid != 0 {
                if let Some(sample) =
                    sample_of(pid, began.elapsed(), self.lives.load(Ordering::SeqCst))
                {
                    samples.push(sample);
                }
            }
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
        samples
    }

    pub fn stop_sampling(&self) {
        self.sampling.store(false, Ordering::SeqCst);
    }
}

/// RSS and open files of `pid` now (`None` once it is gone).
fn sample_of(pid: u32, at: Duration, life: u32) -> Option<Sample> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let rss_kb = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())?;
    let open_files = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count() as u64;
    Some(Sample { at, life, rss_kb, open_files })
}
