//! The `nexbot` program: the host daemon (`serve`), the terminal channel (`chat`), `init`,
//! `doctor`, `secrets rotate-key` and `images push`.
//!
//! Here and not in `bin/nexbot.rs` so that its async code (the daemon's start, serve loop and
//! stop) is compiled once, in this crate: an async function's body is compiled where it is
//! polled, so while the binary awaited `App::start_with`, much of the start was compiled twice
//! (the crate and the binary: 67 + 43.5 s at the serial end of a cold image build; 90.6 + 6.5 s
//! from here, 2026-12-05).
//!
//! The runtime is deliberately small (two worker threads, few blocking threads): the host
//! mostly waits on the network, and its idle footprint matters on a small server.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::app::{App, AppOptions};
use crate::channels::console::{self, ConsoleChannel};
use crate::config::Config;
use crate::control_api;
use crate::doctor::{self, CheckStatus};
use crate::exits::{Exits, RedactingWriter};
use crate::instance::DataDirLock;
use crate::reload::Reloader;
use crate::workspace;
use anyhow::Context as _;
use clap::{Parser, Subcommand};
use nexbot_core::{ChannelKind, ChatRef};
use tokio_util::sync::CancellationToken;

/// The target of the program's own log lines: the one they had while they were written by
/// the binary's crate (`nexbot: stopped`, `nexbot: nexbot is serving`), which operators'
/// `RUST_LOG` filters and log searches name.
const LOG_TARGET: &str = "nexbot";

#[derive(Debug, Parser)]
#[command(name = "nexbot", version, about = "Nexbot: a self-hosted personal AI agent")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Write a workspace: bootstrap files and a commented config.toml.
    Init {
        #[arg(long, default_value = ".")]
        dir: PathBuf,
        /// Overwrite existing files.
        #[arg(long)]
        force: bool,
    },
    /// Run the daemon until SIGTERM or Ctrl-C.
    Serve {
        #[command(flatten)]
        config: ConfigArg,
        /// When the config file does not exist, first write a fresh workspace (bootstrap files
        /// and config.toml) in its directory, as `init` would: for an empty data volume.
        #[arg(long)]
        init: bool,
    },
    /// Talk to the agent in the terminal: one line is one message; exits at end of input.
    Chat(ConfigArg),
    /// Check config, workspace, database, LLM, Docker and the subagent image.
    Doctor {
        #[command(flatten)]
        config: ConfigArg,
        /// Instead: attack the running daemon's walls (its self-test, as `/selftest`) and
        /// report each attack held or broken; exits 1 unless all held, 3 without a daemon.
        #[arg(long)]
        attack: bool,
    },
    /// The secrets vault's offline operations (stored secrets: `nexbot-ctl secrets`).
    #[command(subcommand)]
    Secrets(SecretsCommand),
    /// The images the sandboxes run, on the engine `sandbox.engine` names.
    #[command(subcommand)]
    Images(ImagesCommand),
    /// The egress node beside a remote engine's sandboxes (docs/remote.md): started by the
    /// daemon as a container there; tunnels every connection over its stdin/stdout.
    #[command(hide = true)]
    EgressNode {
        /// The pool network's gateway there, and the port containers reach.
        #[arg(long)]
        listen: std::net::SocketAddr,
        /// The network's bridge, confined to `listen` by firewall rules.
        #[arg(long)]
        bridge: Option<String>,
    },
}

#[derive(Debug, Subcommand)]
enum SecretsCommand {
    /// Re-encrypt every stored secret under a new master key, in one transaction. The
    /// current key comes from NEXBOT_MASTER_KEY, the new one from NEXBOT_NEW_MASTER_KEY or
    /// the first line of stdin. The daemon must be stopped; start it again with the new key.
    RotateKey(ConfigArg),
}

#[derive(Debug, Subcommand)]
enum ImagesCommand {
    /// Copy the images the daemon runs (subagent, MCP servers, egress node) from this
    /// machine's engine to a remote one, by id, where missing or different; or, with
    /// `--file`, load a `docker save` archive into the configured engine.
    Push {
        #[command(flatten)]
        config: ConfigArg,
        /// A `docker save` archive to load instead.
        #[arg(long)]
        file: Option<PathBuf>,
    },
}

#[derive(Debug, clap::Args)]
struct ConfigArg {
    #[arg(long, env = "NEXBOT_CONFIG", default_value = "config.toml")]
    config: PathBuf,
}

/// The `nexbot` program: its arguments parsed, its command run; exits 1 on an error.
pub fn main() {
    let cli = Cli::parse();
    if let Err(e) = run(cli) {
        eprintln!("nexbot: error: {e:#}");
        std::process::exit(1);
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    // Every file the daemon writes (config, database and its WAL, backups, audit logs, the
    // control socket, chats' files) is its user's alone: 0600, folders 0700.
    rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o077));
    if let Command::Init { dir, force } = &cli.command {
        return init(dir, *force);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .max_blocking_threads(8)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async {
        match cli.command {
            Command::Init { .. } => Ok(()),
            Command::Serve { config, init } => serve(&config.config, init).await,
            Command::Chat(arg) => chat(&arg.config).await,
            Command::Doctor { config, attack: false } => doctor(&config.config).await,
            Command::Doctor { config, attack: true } => attack(&config.config).await,
            Command::Secrets(SecretsCommand::RotateKey(arg)) => rotate_key(&arg.config).await,
            Command::Images(ImagesCommand::Push { config, file }) => {
                let config = Config::load(&config.config)?;
                crate::images::push(&config, file.as_deref()).await
            }
            Command::EgressNode { listen, bridge } => {
                // Stdout is the link: every log line goes to stderr.
                tracing_subscriber::fmt().with_writer(std::io::stderr).init();
                nexbot_egress::run_node(listen, bridge.as_deref()).await?;
                Ok(())
            }
        }
    })
}

fn init(dir: &Path, force: bool) -> anyhow::Result<()> {
    let report = workspace::init(dir, force)
        .with_context(|| format!("cannot write the workspace {}", dir.display()))?;
    for path in &report.written {
        println!("wrote {}", path.display());
    }
    for path in &report.kept {
        println!("kept  {} (exists; --force overwrites)", path.display());
    }
    println!(
        "\nNext: export NEXBOT_LLM_API_KEY=..., review {}, then `nexbot chat --config {}`",
        dir.join(workspace::CONFIG_FILE).display(),
        dir.join(workspace::CONFIG_FILE).display()
    );
    Ok(())
}

/// Logs go through the exit scan (`exits.rs`): returns the scanner, for the app to share.
fn init_logging(config: &Config, default_level: Option<&str>) -> Arc<Exits> {
    let filter = std::env::var("RUST_LOG")
        .ok()
        .filter(|f| !f.is_empty())
        .or(default_level.map(str::to_owned))
        .unwrap_or_else(|| config.logging.level.clone());
    let exits = Exits::new(config.secrets.daemon_keys());
    let filter = tracing_subscriber::EnvFilter::try_new(&filter)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    use std::io::IsTerminal as _;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(RedactingWriter::new(exits.clone(), std::io::stderr));
    if config.logging.format == "json" {
        builder.json().init();
    } else {
        builder.init();
    }
    exits
}

async fn rotate_key(path: &Path) -> anyhow::Result<()> {
    let config = Config::load(path)?;
    let old = config
        .secrets
        .master_key
        .clone()
        .context("NEXBOT_MASTER_KEY is not set: it must hold the current key to rotate from")?;
    let new = match std::env::var("NEXBOT_NEW_MASTER_KEY") {
        Ok(key) if !key.is_empty() => key,
        _ => {
            let mut line = String::new();
            std::io::stdin().read_line(&mut line).context("cannot read the new key from stdin")?;
            line.trim_end_matches(['\r', '\n']).to_owned()
        }
    };
    let new = secrecy::SecretString::from(new);
    let _lock = DataDirLock::acquire(&config.data_dir())?;
    let store = crate::store::Store::open(&config.database_path()).await?;
    let count = crate::vault::rotate_master_key(&store, &old, &new).await?;
    println!(
        "re-encrypted {count} secret(s) under the new master key; set NEXBOT_MASTER_KEY to it \
         before the daemon starts again"
    );
    Ok(())
}

async fn serve(path: &Path, init: bool) -> anyhow::Result<()> {
    let written = if init {
        workspace::init_if_missing(path)
            .with_context(|| format!("cannot write a workspace for {}", path.display()))?
    } else {
        None
    };
    let config = Config::load(path)?;
    let exits = init_logging(&config, None);
    let signals = shutdown_signals()?;
    if let Some(report) = written {
        tracing::info!(target: LOG_TARGET, config = %path.display(), files = report.written.len(), "no config found: wrote a fresh workspace");
    }
    // One daemon per data directory, held until the process ends.
    let _lock = DataDirLock::acquire(&config.data_dir())?;
    // The control socket first: while the parts below start, `nexbot-ctl` hears "starting"
    // rather than finding no daemon.
    let early = config.control.enabled.then(|| config.control_socket()).and_then(|path| {
        control_api::early::EarlySocket::open(&path)
            .inspect_err(|e| tracing::warn!(target: LOG_TARGET, socket = %path.display(), error = %e, "cannot open the control socket early; it opens when the daemon is up"))
            .ok()
    });
    let options = AppOptions { exits: Some(exits), ..AppOptions::default() };
    let mut app = App::start_with(&config, options).await?;
    if let Some(why) = app.delegation_off() {
        tracing::warn!(target: LOG_TARGET, "delegation to subagents is off: {why}");
    }
    let mut degraded = Vec::new();
    let telegram = match crate::channels::telegram::attach(&mut app, &config) {
        Ok(telegram) => {
            tracing::info!(target: LOG_TARGET, api = %config.telegram.api_url, "the Telegram channel is on");
            Some(telegram)
        }
        Err(why) => {
            tracing::warn!(
                target: LOG_TARGET,
                "degraded: the Telegram channel is off: {why}; nobody can reach the bot"
            );
            degraded.push(format!("the Telegram channel is off: {why}"));
            None
        }
    };
    let reloader = Arc::new(Reloader::new(path.to_owned(), config.clone(), telegram));
    match control_api::attach(&mut app, &config, Some(reloader.clone()), degraded, early).await {
        Ok(socket) => {
            tracing::info!(target: LOG_TARGET, socket = %socket.display(), "the control API is on (nexbot-ctl)")
        }
        Err(why) => tracing::warn!(target: LOG_TARGET, "the control API is off: {why}"),
    }
    tracing::info!(target: LOG_TARGET, config = %path.display(), workspace = %config.workspace.dir.display(), "nexbot is serving");
    let mut hangups = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
        .context("cannot listen for SIGHUP")?;
    tokio::pin!(signals);
    loop {
        tokio::select! {
            () = &mut signals => break,
            _ = hangups.recv() => match reloader.reload().await {
                Ok(report) => tracing::info!(target: LOG_TARGET, applied = ?report.applied, needs_restart = ?report.needs_restart, "SIGHUP: settings reloaded"),
                Err(e) => tracing::error!(target: LOG_TARGET, "SIGHUP: {e}"),
            },
        }
    }
    tracing::info!(target: LOG_TARGET, "shutting down");
    app.stop().await;
    tracing::info!(target: LOG_TARGET, "stopped");
    Ok(())
}

/// Listens for SIGTERM and SIGINT from the moment it is called, not from the first await:
/// a signal that arrives while the daemon starts (e.g. `docker stop` right after `up`) is then
/// kept for later instead of killing the process without cleanup (pool containers, firewall).
fn shutdown_signals() -> anyhow::Result<impl std::future::Future<Output = ()>> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).context("cannot listen for SIGTERM")?;
    let mut interrupt = signal(SignalKind::interrupt()).context("cannot listen for SIGINT")?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = interrupt.recv() => {}
        }
    })
}

async fn chat(path: &Path) -> anyhow::Result<()> {
    let config = Config::load(path)?;
    let exits = init_logging(&config, Some("warn"));
    let signals = shutdown_signals()?;
    let options = AppOptions { exits: Some(exits), ..AppOptions::default() };
    let mut app = App::start_with(&config, options).await?;
    if let Some(why) = app.delegation_off() {
        // Once, before the conversation, on stderr (stdout carries only answers).
        eprintln!("nexbot: delegation to subagents is off: {why}");
    }
    let (channel, outbound) = ConsoleChannel::terminal(config.bus.outbound_capacity);
    app.add_channel(ChannelKind::Console, Arc::new(channel));
    let stdin = tokio::io::BufReader::new(tokio::io::stdin());
    let in_flight = config.bus.per_chat_queue;
    let stop = CancellationToken::new();
    let console = console::run(
        ChatRef::default_console(),
        stdin,
        tokio::io::stdout(),
        app.inbound(),
        outbound,
        in_flight,
        stop.clone(),
    );
    let result = tokio::select! {
        result = console => result.context("console I/O failed"),
        () = signals => Ok(()),
    };
    app.stop().await;
    result
}

/// `doctor --attack`: the running daemon's self-test, through its control socket.
async fn attack(path: &Path) -> anyhow::Result<()> {
    let config = Config::load(path).context("the configuration is not usable")?;
    let client = nexbot_control::Client::new(config.control_socket());
    let path = nexbot_control::paths::SELFTEST;
    let report: nexbot_selftest::Report = match client.post(path, &()).await {
        Ok(report) => report,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(e.exit_code());
        }
    };
    print!("{}", report.render());
    if !report.all_held() {
        anyhow::bail!("the self-test did not hold: {}", report.summary());
    }
    Ok(())
}

async fn doctor(path: &Path) -> anyhow::Result<()> {
    let config = match Config::load(path) {
        Ok(config) => {
            println!("[ok]   config: {}", path.display());
            config
        }
        Err(e) => {
            println!("[FAIL] config: {e}");
            anyhow::bail!("the configuration is not usable");
        }
    };
    let checks = doctor::run(&config).await;
    for check in &checks {
        println!("{}", check.render());
    }
    let failed = checks.iter().filter(|c| c.status == CheckStatus::Fail).count();
    if failed > 0 {
        anyhow::bail!("{failed} check(s) failed");
    }
    println!("all checks passed");
    Ok(())
}
