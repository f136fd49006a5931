//! A stdio server's transport whose messages are cut as they stream in, never held whole.
//!
//! Why: rmcp's stdio transport reads a whole line (one JSON-RPC message, up to 16 MiB) before
//! it parses it, and a result is cut for the model ([`crate::answer::MAX_RESULT_BYTES`]) only
//! after that: one 10 MiB answer took the daemon from 39 to ~106 MB. A server is not trusted,
//! so what it writes is bounded before anything collects it. The SDK keeps the JSON-RPC side
//! (rmcp's `AsyncRwTransport`); only the bytes it reads pass through [`CutLines`] first.
//!
//! Each line (stdio's framing is one message a line) passes through the one cutter of
//! [`crate::cut`], whose rule it follows; a message dropped as over the limit is dropped up to
//! its newline, and the next one is read as ever.

use std::pin::Pin;
use std::task::{ready, Context, Poll};

use rmcp::transport::async_rw::AsyncRwTransport;
use rmcp::RoleClient;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::cut::Cutter;
pub use crate::cut::{MAX_MESSAGE_BYTES, MAX_STRING_BYTES};

/// Bytes read from the server at a time.
const CHUNK: usize = 16 * 1024;

/// The transport of a session over a server's stdio: writes requests to `write`, reads its
/// answers from `read` through [`CutLines`].
pub fn transport<R, W>(read: R, write: W) -> AsyncRwTransport<RoleClient, CutLines<R>, EndOnDrop<W>>
where
    R: AsyncRead + Send + Unpin,
    W: AsyncWrite + Send + Unpin + 'static,
{
    // The SDK's own cap, never reached (every line is at most MAX_MESSAGE_BYTES and a note).
    AsyncRwTransport::new_client(CutLines::new(read), EndOnDrop(Some(write)))
        .with_max_line_length(MAX_MESSAGE_BYTES + 4096)
}

/// A server's input that is shut down (its end sent), not only dropped, when the session lets
/// it go (rmcp's close drops it).
///
/// Why: a container's attached stdin is the write half of a connection whose read half still
/// carries the container's output, and dropping that half sends nothing: the server never sees
/// its input end, cannot end cleanly, and is killed when its container is removed. A browser
/// killed so loses what it had not yet written (the chat's newest cookies: its login).
#[derive(Debug)]
pub struct EndOnDrop<W: AsyncWrite + Send + Unpin + 'static>(Option<W>);

impl<W: AsyncWrite + Send + Unpin + 'static> AsyncWrite for EndOnDrop<W> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match self.0.as_mut() {
            Some(write) => Pin::new(write).poll_write(cx, buf),
            None => Poll::Ready(Err(std::io::ErrorKind::BrokenPipe.into())),
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.0.as_mut() {
            Some(write) => Pin::new(write).poll_flush(cx),
            None => Poll::Ready(Ok(())),
        }
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.0.as_mut() {
            Some(write) => Pin::new(write).poll_shutdown(cx),
            None => Poll::Ready(Ok(())),
        }
    }
}

impl<W: AsyncWrite + Send + Unpin + 'static> Drop for EndOnDrop<W> {
    fn drop(&mut self) {
        let (Some(mut write), Ok(runtime)) = (self.0.take(), tokio::runtime::Handle::try_current())
        else {
            return;
        };
        runtime.spawn(async move {
            use tokio::io::AsyncWriteExt;
            let _ = write.shutdown().await;
        });
    }
}

/// `read` with every line cut as the module says, as it is read.
#[derive(Debug)]
pub struct CutLines<R> {
    read: R,
    cutter: Cutter,
    chunk: Box<[u8]>,
    /// Cut lines ready for the reader, from `at` on.
    out: Vec<u8>,
    at: usize,
    ended: bool,
}

impl<R> CutLines<R> {
    pub fn new(read: R) -> Self {
        Self {
            read,
            cutter: Cutter::default(),
            chunk: vec![0; CHUNK].into_boxed_slice(),
            out: Vec::new(),
            at: 0,
            ended: false,
        }
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for CutLines<R> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        loop {
            if this.at < this.out.len() {
                let n = buf.remaining().min(this.out.len() - this.at);
                buf.put_slice(&this.out[this.at..this.at + n]);
                this.at += n;
                if this.at == this.out.len() {
                    this.out.clear();
                    this.at = 0;
                }
                return Poll::Ready(Ok(()));
            }
            if this.ended {
                return Poll::Ready(Ok(()));
            }
            let mut read = ReadBuf::new(&mut this.chunk);
            ready!(Pin::new(&mut this.read).poll_read(cx, &mut read))?;
            if read.filled().is_empty() {
                this.ended = true;
                this.cutter.finish(&mut this.out);
            } else {
                push_lines(&mut this.cutter, read.filled(), &mut this.out);
            }
        }
    }
}

/// Scans `bytes` with `cutter`, appending every line they complete, cut, to `out`.
fn push_lines(cutter: &mut Cutter, bytes: &[u8], out: &mut Vec<u8>) {
    for part in bytes.split_inclusive(|b| *b == b'\n') {
        match part.split_last() {
            Some((b'\n', line)) => {
                cutter.scan(line);
                if cutter.end(out) {
                    out.push(b'\n');
                }
            }
            _ => cutter.scan(part),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    /// The write half of a split connection, dropped, sends no end; through [`EndOnDrop`] the
    /// other side reads its end while this side's read half lives on.
    #[tokio::test]
    async fn a_dropped_input_is_ended_not_only_dropped() {
        use tokio::io::AsyncReadExt;
        for wrapped in [false, true] {
            let (ours, mut theirs) = tokio::net::UnixStream::pair().unwrap();
            let (_read, write) = tokio::io::split(ours);
            match wrapped {
                true => drop(EndOnDrop(Some(write))),
                false => drop(write),
            }
            let mut buf = [0u8; 1];
            let read = theirs.read(&mut buf);
            let ended = tokio::time::timeout(std::time::Duration::from_millis(500), read).await;
            assert_eq!(ended.is_ok(), wrapped, "wrapped: {wrapped}: {ended:?}");
        }
    }

    /// `input` through a [`Cutter`] in chunks of `size` bytes.
    fn cut(input: &[u8], size: usize) -> Vec<u8> {
        let mut cutter = Cutter::default();
        let mut out = Vec::new();
        for chunk in input.chunks(size) {
            push_lines(&mut cutter, chunk, &mut out);
        }
        cutter.finish(&mut out);
        out
    }

    fn lines(out: &[u8]) -> Vec<Value> {
        out.split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .map(|l| serde_json::from_slice(l).expect("every line stays JSON"))
            .collect()
    }

    #[test]
    fn small_messages_pass_as_they_are_however_they_are_split() {
        let input = b"{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"a\":\"\\u00e9\\\"x\"}}\r\n\nnot json\n{\"id\":\"s\"}";
        for size in [1, 3, 1000] {
            assert_eq!(cut(input, size), input.to_vec(), "chunks of {size}");
        }
    }

    #[test]
    fn a_huge_string_is_cut_with_its_size_and_the_message_keeps_its_id_after_it() {
        let text = "é".repeat(1 << 20) + "end";
        let message =
            json!({"jsonrpc": "2.0", "result": {"content": [{"type": "text", "text": text}]}});
        let mut input = message.to_string().strip_suffix('}').unwrap().to_owned();
        input.push_str(",\"id\":7}\n{\"jsonrpc\":\"2.0\",\"id\":8,\"result\":{}}\n");
        let out = cut(input.as_bytes(), 4096);
        let answers = lines(&out);
        assert_eq!(answers.len(), 2);
        assert_eq!(answers[0]["id"], 7);
        assert_eq!(answers[1], json!({"jsonrpc": "2.0", "id": 8, "result": {}}));
        let kept = answers[0]["result"]["content"][0]["text"].as_str().unwrap();
        assert!(kept.len() < crate::answer::MAX_RESULT_BYTES, "{}", kept.len());
        assert!(kept.starts_with("éé"));
        let note = format!("\n[cut by Nexbot while reading: {} bytes in all]", text.len());
        assert!(kept.ends_with(&note), "{}", &kept[kept.len() - 100..]);
    }

    #[test]
    fn a_cut_never_splits_an_escape_or_a_surrogate_pair() {
        for unit in ["\\ud83d\\ude00", "\\n", "\\u00e9", "\\\"", "😀", "ab"] {
            for offset in 0..12 {
                let text = format!("{}{}", "x".repeat(offset), unit.repeat(MAX_STRING_BYTES));
                let input = format!("{{\"id\":1,\"result\":\"{text}\"}}\n");
                let out = cut(input.as_bytes(), 777);
                let answer = &lines(&out)[0];
                assert!(answer["result"].as_str().unwrap().contains("[cut by Nexbot"), "{unit}");
            }
        }
    }

    #[test]
    fn a_message_too_big_even_cut_fails_its_request_and_the_next_one_is_read() {
        let many: Vec<String> = (0..MAX_MESSAGE_BYTES / 4).map(|i| i.to_string()).collect();
        let answer = json!({"jsonrpc": "2.0", "id": "call-3", "result": {"parts": many}});
        let request = json!({"jsonrpc": "2.0", "id": 3, "method": "x", "params": {"p": many}});
        let next = json!({"jsonrpc": "2.0", "id": 4, "result": {}});
        let input = format!("{answer}\n{request}\n{next}\n");
        let answers = lines(&cut(input.as_bytes(), CHUNK));
        assert_eq!(answers.len(), 2, "the server's own request is only dropped");
        assert_eq!(answers[0]["id"], "call-3");
        let why = answers[0]["error"]["message"].as_str().unwrap();
        assert!(why.contains("over the limit"), "{why}");
        assert_eq!(answers[1], next);
    }
}
