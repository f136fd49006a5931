//! The console channel behind `nexbot chat`: the same agent and bus as the daemon, over
//! stdin/stdout, so the agent can be tried (and tested) without Telegram.
//!
//! One line is one user message. Answers are printed as they come. Reading stops while
//! `max_in_flight` messages await their answer (back-pressure), and at EOF the console waits
//! for the answer to every message it sent before returning — so `echo hi | nexbot chat`
//! prints the answer and exits.

use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::bus::{InboundMessage, OutboundKind, OutboundMessage};

/// The chat id of the console.
pub const CONSOLE_CHAT: &str = "console";

/// Pumps lines from `input` into the bus and answers to `output` until EOF has been reached
/// and everything was answered, or `shutdown` fires.
pub async fn run(
    input: impl AsyncBufRead + Unpin,
    mut output: impl AsyncWrite + Unpin,
    inbound: mpsc::Sender<InboundMessage>,
    mut outbound: mpsc::Receiver<OutboundMessage>,
    max_in_flight: usize,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let mut lines = input.lines();
    let mut pending = 0usize;
    let mut next_id = 0u64;
    let mut eof = false;
    while !(eof && pending == 0) {
        tokio::select! {
            () = shutdown.cancelled() => break,
            line = lines.next_line(), if !eof && pending < max_in_flight => {
                let Some(line) = line? else {
                    eof = true;
                    continue;
                };
                if line.trim().is_empty() {
                    continue;
                }
                next_id += 1;
                let message = InboundMessage { chat_id: CONSOLE_CHAT.into(), id: next_id, text: line };
                if inbound.send(message).await.is_err() {
                    break;
                }
                pending += 1;
            }
            message = outbound.recv() => {
                let Some(message) = message else { break };
                output.write_all(message.text.as_bytes()).await?;
                output.write_all(b"\n").await?;
                output.flush().await?;
                if message.kind == OutboundKind::Final {
                    pending = pending.saturating_sub(1);
                }
            }
        }
    }
    Ok(())
}
