//! The console channel behind `nexbot chat`: the same agent and bus as the daemon, over
//! stdin/stdout, so the agent can be tried (and tested) without Telegram.
//!
//! One line is one user message. Answers are printed as they come. Reading stops while
//! `max_in_flight` messages await their answer (back-pressure), and at EOF the console waits
//! for the answer to every message it sent before returning — so `echo hi | nexbot chat`
//! prints the answer and exits.

use nexbot_core::{ChannelKind, ChatRef};
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::agent::channel::{Channel, ChannelError, MessageId, OutboundKind, OutboundMessage};
use crate::bus::InboundMessage;
use crate::BoxFuture;

/// The console's side of the outbound router: what is sent to a console chat is queued for
/// [`run`] to print. Bounded, so a flood of progress waits instead of growing memory.
#[derive(Debug, Clone)]
pub struct ConsoleChannel {
    tx: mpsc::Sender<OutboundMessage>,
}

impl ConsoleChannel {
    /// The channel and the queue [`run`] prints from.
    pub fn new(capacity: usize) -> (Self, mpsc::Receiver<OutboundMessage>) {
        let (tx, rx) = mpsc::channel(capacity.max(1));
        (Self { tx }, rx)
    }
}

impl Channel for ConsoleChannel {
    fn send(
        &self,
        message: OutboundMessage,
    ) -> BoxFuture<'_, Result<Option<MessageId>, ChannelError>> {
        Box::pin(async move {
            self.tx.send(message).await.map_err(|_| ChannelError::Closed(ChannelKind::Console))?;
            Ok(None)
        })
    }
}

/// Pumps lines from `input` into the bus as messages of `chat` (of the console kind), and
/// what the [`ConsoleChannel`] queued to `output`, until EOF has been reached and everything
/// was answered, or `shutdown` fires.
pub async fn run(
    chat: ChatRef,
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
                let message = InboundMessage { chat: chat.clone(), id: next_id, text: line };
                if inbound.send(message).await.is_err() {
                    break;
                }
                pending += 1;
            }
            message = outbound.recv() => {
                let Some(message) = message else { break };
                if message.kind != OutboundKind::Taken {
                    output.write_all(message.text.as_bytes()).await?;
                    output.write_all(b"\n").await?;
                    output.flush().await?;
                }
                if matches!(message.kind, OutboundKind::Final | OutboundKind::Taken) {
                    pending = pending.saturating_sub(1);
                }
            }
        }
    }
    Ok(())
}
