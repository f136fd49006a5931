//! Entry point of `nexbot-subagent`: sets up JSON logging on stderr and a single-threaded
//! tokio runtime (one task at a time needs no more, and it keeps idle memory small), then
//! serves the protocol on stdin/stdout until EOF or SIGTERM.

use std::sync::Arc;

use nexbot_subagent::redaction::Redaction;
use nexbot_subagent::{logging, scrub, server};

fn main() -> std::process::ExitCode {
    // Run as one of the image's small programs (`/bin/pdftotext` links here)?
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if let Some(code) = nexbot_subagent::programs::run_as_program(&args) {
        return code;
    }
    let redaction = Arc::new(Redaction::default());
    logging::init(redaction.clone());
    // Before anything holds a secret: commands of the same user must not read this memory.
    if let Err(err) = scrub::harden_process() {
        tracing::error!(event = "init", error = %err, "process hardening failed");
    }
    match scrub::seal_unscrubbable_ipc() {
        Ok(refused) if refused.is_empty() => {}
        Ok(refused) => tracing::info!(
            event = "init",
            refused = refused.join(","),
            "IPC the scrub cannot list is refused to commands"
        ),
        Err(err) => {
            tracing::error!(event = "init", error = %err, "IPC the scrub cannot list stays open")
        }
    }
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(err) => {
            tracing::error!(event = "init", error = %err, "cannot start the async runtime");
            return std::process::ExitCode::FAILURE;
        }
    };
    let served = runtime.block_on(server::run(redaction));
    // Where stdin is not a pipe, tokio reads it with a blocking read that cannot be cancelled;
    // after a signal it may still be waiting, so do not wait for it when tearing down.
    runtime.shutdown_background();
    match served {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            tracing::error!(event = "shutdown", error = format!("{err:#}"), "subagent failed");
            std::process::ExitCode::FAILURE
        }
    }
}
