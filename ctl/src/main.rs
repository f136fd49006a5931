//! `nexbot-ctl`: the operator's client of the daemon's control API (HTTP + JSON over the
//! daemon's Unix socket). `main` only parses, runs, and turns errors into the exit-code
//! contract: 0 ok, 1 the daemon answered an error, 2 usage (clap), 3 the daemon is not
//! running. Errors go to stderr as `nexbot-ctl: error: …`.

mod approvals;
mod cli;
mod commands;
mod cron;
mod logs;
mod mcp;
mod memory;
mod render;
mod secrets;
mod socket;
mod views;

use clap::Parser as _;
use nexbot_control::{Client, ClientError};

use crate::cli::Cli;
use crate::commands::Ctx;

fn main() {
    let cli = Cli::parse();
    let code = match run(cli) {
        Ok(()) => 0,
        Err(e) => exit_code(&e),
    };
    std::process::exit(code);
}

fn run(cli: Cli) -> anyhow::Result<()> {
    let ctx = Ctx { client: Client::new(socket::socket_path(cli.socket)), json: cli.json };
    // One thread: a command-line client makes one request at a time.
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    runtime.block_on(commands::run(&ctx, cli.command))
}

/// Prints `error` (unless stdout's reader went away, which is how `… | head` ends) and
/// returns the code to exit with.
fn exit_code(error: &anyhow::Error) -> i32 {
    if let Some(io) = error.downcast_ref::<std::io::Error>() {
        if io.kind() == std::io::ErrorKind::BrokenPipe {
            return 0;
        }
    }
    eprintln!("nexbot-ctl: error: {error:#}");
    error.downcast_ref::<ClientError>().map_or(1, ClientError::exit_code)
}
