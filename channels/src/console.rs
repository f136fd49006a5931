//! The console channel behind `nexbot chat`: the same agent and bus as the daemon, over
//! stdin/stdout, so the agent can be tried (and tested) without Telegram.
//!
//! One line is one user message. Answers are printed as they come. Reading stops while
//! `max_in_flight` messages await their answer (back-pressure), and at EOF the console waits
//! for the answer to every message it sent before returning — so `echo hi | nexbot chat`
//! prints the answer and exits.
//!
//! Answers are written by an LLM that may have read hostile web pages, and a terminal obeys
//! what it prints: escape sequences recolour, retitle the window or move the cursor, a
//! carriage return overwrites the line, bidi overrides reorder it. So every answer goes
//! through [`printable`], which shows such characters instead of sending them.

use std::borrow::Cow;
use std::fmt::Write as _;

use nexbot_core::{ChannelKind, ChatRef};
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use nexbot_agent::channel::InboundMessage;
use nexbot_agent::channel::{
    Channel, ChannelError, Draft, MessageId, OutboundFile, OutboundKind, OutboundMessage,
};
use nexbot_core::BoxFuture;

/// The console's side of the outbound router: what is sent to a console chat is queued for
/// [`run`] to print. Bounded, so a flood of progress waits instead of growing memory.
#[derive(Debug, Clone)]
pub struct ConsoleChannel {
    sink: Sink,
}

#[derive(Debug, Clone)]
enum Sink {
    /// Messages only (what tests read).
    Messages(mpsc::Sender<OutboundMessage>),
    /// Messages and drafts, in one queue so a draft never overtakes an earlier answer.
    Terminal(mpsc::Sender<ConsoleOut>),
}

/// What [`run`] prints: a message, or a piece of a streamed answer.
#[derive(Debug, Clone)]
pub enum ConsoleOut {
    Message(OutboundMessage),
    Draft(Draft),
}

impl ConsoleChannel {
    /// The channel and the queue of what it is sent (drafts are not queued).
    pub fn new(capacity: usize) -> (Self, mpsc::Receiver<OutboundMessage>) {
        let (tx, rx) = mpsc::channel(capacity.max(1));
        (Self { sink: Sink::Messages(tx) }, rx)
    }

    /// The channel of a terminal and the queue [`run`] prints from, streamed drafts included.
    pub fn terminal(capacity: usize) -> (Self, mpsc::Receiver<ConsoleOut>) {
        let (tx, rx) = mpsc::channel(capacity.max(1));
        (Self { sink: Sink::Terminal(tx) }, rx)
    }
}

impl Channel for ConsoleChannel {
    fn send(
        &self,
        message: OutboundMessage,
    ) -> BoxFuture<'_, Result<Option<MessageId>, ChannelError>> {
        Box::pin(async move {
            let sent = match &self.sink {
                Sink::Messages(tx) => tx.send(message).await.is_ok(),
                Sink::Terminal(tx) => tx.send(ConsoleOut::Message(message)).await.is_ok(),
            };
            if !sent {
                return Err(ChannelError::Closed(ChannelKind::Console));
            }
            Ok(None)
        })
    }

    /// A terminal cannot receive a file, and the user sits at the machine that has it: the
    /// console prints where the file is (and its caption).
    fn send_file(
        &self,
        file: OutboundFile,
    ) -> BoxFuture<'_, Result<Option<MessageId>, ChannelError>> {
        let mut text = format!("[file] {}", file.path.display());
        if let Some(caption) = &file.caption {
            text.push_str(" — ");
            text.push_str(caption);
        }
        self.send(OutboundMessage::progress(&file.chat, text))
    }

    fn draft<'a>(&'a self, _chat: &'a ChatRef, draft: Draft) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            if let Sink::Terminal(tx) = &self.sink {
                let _ = tx.send(ConsoleOut::Draft(draft)).await;
            }
        })
    }
}

/// The first message id of a console session: the time in microseconds since 1970, so the
/// ids of each session lie above those of every earlier one.
fn session_base() -> u64 {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    since.map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX / 2))
}

/// Pumps lines from `input` into the bus as messages of `chat` (of the console kind), and
/// what the [`ConsoleChannel`] queued to `output`, until EOF has been reached and everything
/// was answered, or `shutdown` fires.
pub async fn run(
    chat: ChatRef,
    input: impl AsyncBufRead + Unpin,
    mut output: impl AsyncWrite + Unpin,
    inbound: mpsc::Sender<InboundMessage>,
    mut outbound: mpsc::Receiver<ConsoleOut>,
    max_in_flight: usize,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let mut lines = input.lines();
    let mut pending = 0usize;
    // Not from 0: an id of this session must not repeat one of an earlier session, since
    // what a turn stores is told apart by its message (`schedule_task`'s jobs).
    let mut next_id = session_base();
    let mut eof = false;
    // What was printed of the answer being streamed.
    let mut drafted = String::new();
    let mut keys = Keys::default();
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
                // A key of the last question's buttons presses that button.
                let text = match keys.press(&line) {
                    Some(command) => command,
                    None => line,
                };
                next_id += 1;
                let message = InboundMessage { chat: chat.clone(), id: next_id, text, user: None, files: Vec::new() };
                if inbound.send(message).await.is_err() {
                    break;
                }
                pending += 1;
            }
            out = outbound.recv() => {
                let message = match out {
                    None => break,
                    Some(ConsoleOut::Draft(Draft::Text(text))) => {
                        output.write_all(printable(&text).as_bytes()).await?;
                        output.flush().await?;
                        drafted.push_str(&text);
                        continue;
                    }
                    Some(ConsoleOut::Draft(Draft::Restart)) => {
                        if !drafted.is_empty() {
                            output.write_all(b"\n").await?;
                            drafted.clear();
                        }
                        continue;
                    }
                    Some(ConsoleOut::Message(message)) => message,
                };
                if message.kind == OutboundKind::Final && !drafted.is_empty() {
                    // The draft already shows the answer's start; print what it lacks.
                    let text = std::mem::take(&mut drafted);
                    let rest = match message.text.strip_prefix(&text) {
                        Some(rest) => rest.to_owned(),
                        None => format!("\n{}", message.text),
                    };
                    output.write_all(printable(&rest).as_bytes()).await?;
                    output.write_all(b"\n").await?;
                    output.flush().await?;
                } else if message.kind != OutboundKind::Taken {
                    output.write_all(printable(&message.text).as_bytes()).await?;
                    output.write_all(b"\n").await?;
                    if let Some(prompt) = keys.offer(&message.buttons) {
                        output.write_all(printable(&prompt).as_bytes()).await?;
                        output.write_all(b"\n").await?;
                    }
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

/// The buttons of the last question printed, each pressed by typing its key: a terminal has
/// nothing to press, so a question's buttons become a one-letter prompt ("[o] Allow once ·
/// [t] Allow for this task · …"). A typed key is the button's command, exactly what a press
/// sends in Telegram (and checked like typing); anything else typed is an ordinary message.
/// Only the last question's keys count: a later question replaces them, one use spends them.
#[derive(Debug, Default)]
struct Keys(Vec<(String, String)>);

impl Keys {
    /// Remembers `buttons` and returns the prompt that names their keys (the button's own
    /// [`Button::key`](nexbot_agent::channel::Button::key), else its number from 1).
    fn offer(&mut self, buttons: &[Vec<nexbot_agent::channel::Button>]) -> Option<String> {
        let buttons: Vec<_> = buttons.iter().flatten().collect();
        if buttons.is_empty() {
            return None;
        }
        let mut keys: Vec<(String, String)> = Vec::with_capacity(buttons.len());
        let mut shown = Vec::with_capacity(buttons.len());
        for (n, button) in buttons.iter().enumerate() {
            let own = button.key.map(|k| k.to_string());
            // A key two buttons share (or none) falls back to the button's number.
            let key = match own {
                Some(k) if !keys.iter().any(|(taken, _)| *taken == k) => k,
                _ => (n + 1).to_string(),
            };
            shown.push(format!("[{key}] {}", button.label));
            keys.push((key, button.command.clone()));
        }
        self.0 = keys;
        Some(format!("  {} (type the key)", shown.join(" · ")))
    }

    /// The command of the button whose key `line` is, spending the keys.
    fn press(&mut self, line: &str) -> Option<String> {
        let typed = line.trim().to_ascii_lowercase();
        let found = self.0.iter().find(|(key, _)| *key == typed).map(|(_, c)| c.clone());
        if found.is_some() {
            self.0.clear();
        }
        found
    }
}

/// `text` with every character a terminal would act on instead of showing replaced by a
/// visible escape, so an answer can neither inject terminal commands nor hide or reorder
/// what it prints. Newlines and tabs are kept (they only lay text out); so is every other
/// character, emoji and all other scripts included.
///
/// Notation: ESC is shown as `\e` (so a colour code reads `\e[31m`, as in shell scripts), a
/// carriage return as `\r`, and any other control as its code point `\u{7}` (the hex of
/// Rust's `char::escape_unicode`). Escaped are the C0 controls but `\n` and `\t`, DEL, the
/// C1 controls (U+0080–U+009F, the 8-bit CSI U+009B among them) and the bidi embeddings,
/// overrides and isolates (U+202A–U+202E, U+2066–U+2069). A backslash in the text is left
/// alone: this is for reading, not for parsing back.
///
/// Text with nothing to escape, nearly every answer, is returned borrowed.
pub fn printable(text: &str) -> Cow<'_, str> {
    let Some(first) = text.find(needs_escape) else {
        return Cow::Borrowed(text);
    };
    let mut out = String::with_capacity(text.len() + 16);
    out.push_str(&text[..first]);
    for c in text[first..].chars() {
        match c {
            '\x1b' => out.push_str("\\e"),
            '\r' => out.push_str("\\r"),
            c if needs_escape(c) => {
                // Writing to a String cannot fail.
                let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// Whether a terminal may act on `c` rather than show it; see [`printable`].
fn needs_escape(c: char) -> bool {
    match c {
        '\n' | '\t' => false,
        '\0'..='\x1f' | '\x7f'..='\u{9f}' => true,
        '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' => true,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colour_codes_are_shown_not_applied() {
        assert_eq!(printable("\x1b[31mred\x1b[0m"), "\\e[31mred\\e[0m");
        assert_eq!(printable("\x1b[2J\x1b[H\x1b[1A"), "\\e[2J\\e[H\\e[1A");
    }

    #[test]
    fn an_osc_title_change_is_shown_not_applied() {
        assert_eq!(printable("\x1b]0;pwned\x07after"), "\\e]0;pwned\\u{7}after");
        assert_eq!(printable("\x1b]8;;https://evil\x1b\\link"), "\\e]8;;https://evil\\e\\link");
    }

    #[test]
    fn a_carriage_return_cannot_overwrite_the_line() {
        assert_eq!(printable("rm -rf ~\rls"), "rm -rf ~\\rls");
        assert_eq!(printable("abc\x08\x08\x08xyz"), "abc\\u{8}\\u{8}\\u{8}xyz");
        assert_eq!(printable("nul\0del\x7f"), "nul\\u{0}del\\u{7f}");
    }

    #[test]
    fn c1_controls_are_escaped() {
        assert_eq!(printable("\u{9b}31mred"), "\\u{9b}31mred");
        assert_eq!(printable("\u{80}\u{85}\u{9d}"), "\\u{80}\\u{85}\\u{9d}");
    }

    #[test]
    fn bidi_overrides_are_escaped() {
        assert_eq!(printable("file\u{202e}fdp.exe"), "file\\u{202e}fdp.exe");
        assert_eq!(printable("\u{2066}a\u{2069}\u{202a}"), "\\u{2066}a\\u{2069}\\u{202a}");
    }

    #[test]
    fn ordinary_text_is_borrowed_unchanged() {
        for text in [
            "",
            "plain",
            "line one\n\tindented",
            "héllo wörld, 你好, 😀👍🏽, \\e not ESC",
            "\u{a0}\u{200d}\u{2028}",
        ] {
            assert!(matches!(printable(text), Cow::Borrowed(t) if t == text), "{text:?}");
        }
    }

    #[tokio::test]
    async fn run_prints_answers_escaped() {
        let chat = ChatRef::console("test").unwrap();
        let (channel, outbound) = ConsoleChannel::terminal(4);
        let (inbound, mut inbound_rx) = mpsc::channel(4);
        let answer = OutboundMessage::answer(&chat, 1, "\x1b[31mred\x1b[0m\rok".into());
        let mut output = Vec::new();
        let run =
            run(chat, &b"hi\n"[..], &mut output, inbound, outbound, 4, CancellationToken::new());
        let answer_it = async {
            let question = inbound_rx.recv().await.unwrap();
            assert_eq!(question.text, "hi");
            channel.send(answer).await.unwrap();
        };
        let (result, ()) = tokio::join!(run, answer_it);
        result.unwrap();
        assert_eq!(String::from_utf8(output).unwrap(), "\\e[31mred\\e[0m\\rok\n");
    }

    /// Each session's message ids lie above every earlier session's: what a turn stored is
    /// told apart by its message, and a new session's first message is not an old one's.
    #[tokio::test]
    async fn a_new_sessions_ids_do_not_repeat_an_earlier_sessions() {
        let mut last = 0;
        for _ in 0..2 {
            let chat = ChatRef::console("test").unwrap();
            let (_channel, outbound) = ConsoleChannel::terminal(4);
            let (inbound, mut inbound_rx) = mpsc::channel(4);
            let stop = CancellationToken::new();
            let session =
                run(chat, &b"one\ntwo\n"[..], Vec::new(), inbound, outbound, 4, stop.clone());
            let read = async {
                let (a, b) = (inbound_rx.recv().await.unwrap(), inbound_rx.recv().await.unwrap());
                stop.cancel();
                (a.id, b.id)
            };
            let (_, (a, b)) = tokio::join!(session, read);
            assert!(a > last && b > a, "ids {a}, {b} after {last}");
            last = b;
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        }
    }

    /// A question's buttons become a one-letter prompt; the typed letter is the button's
    /// command (once), numbers stand in for missing or shared keys, anything else is text.
    #[tokio::test]
    async fn a_questions_buttons_are_pressed_by_typing_their_key() {
        use nexbot_agent::channel::Button;
        use tokio::io::{AsyncReadExt, AsyncWriteExt as _};
        let chat = ChatRef::console("test").unwrap();
        let (channel, outbound) = ConsoleChannel::terminal(8);
        let (inbound, mut inbound_rx) = mpsc::channel(8);
        let (mut typing, input) = tokio::io::duplex(1024);
        let (output, mut screen) = tokio::io::duplex(64 * 1024);
        let stop = CancellationToken::new();
        let console = tokio::spawn(run(
            chat.clone(),
            tokio::io::BufReader::new(input),
            output,
            inbound,
            outbound,
            8,
            stop.clone(),
        ));
        let mut seen = String::new();
        let mut shown = async |until: &str| {
            let mut buf = [0u8; 4096];
            while !seen.contains(until) {
                let n = screen.read(&mut buf).await.unwrap();
                assert!(n > 0, "the console ended before {until:?}: {seen}");
                seen.push_str(std::str::from_utf8(&buf[..n]).unwrap());
            }
            seen.clone()
        };
        let mut question =
            OutboundMessage::progress(&chat, "🔒 A task wants to reach x:443".into());
        question.buttons = vec![
            vec![
                Button::new("Allow once", "/egress 7 once").with_key('o'),
                Button::new("Allow for this task", "/egress 7 task").with_key('t'),
            ],
            vec![
                Button::new("Always for this chat", "/egress 7 chat").with_key('a'),
                Button::new("Deny", "/egress 7 deny").with_key('d'),
            ],
        ];
        channel.send(question).await.unwrap();
        let screen_now = shown("(type the key)").await;
        assert!(
            screen_now.contains(
                "[o] Allow once · [t] Allow for this task · [a] Always for this chat · [d] Deny"
            ),
            "{screen_now}"
        );
        typing.write_all(b" T \n").await.unwrap();
        assert_eq!(inbound_rx.recv().await.unwrap().text, "/egress 7 task");
        // Spent: the same letter again is a message of its own.
        typing.write_all(b"t\n").await.unwrap();
        assert_eq!(inbound_rx.recv().await.unwrap().text, "t");

        // Options without keys (or sharing one) are numbered; the label is shown escaped.
        let mut choice = OutboundMessage::progress(&chat, "Which city?".into());
        choice.buttons = vec![
            vec![Button::new("Paris\x1b[2J", "/choose n1 0")],
            vec![Button::new("Rome", "/choose n1 1").with_key('r')],
            vec![Button::new("Riga", "/choose n1 2").with_key('r')],
        ];
        channel.send(choice).await.unwrap();
        let screen_now = shown("Riga").await;
        assert!(screen_now.contains("[1] Paris\\e[2J · [r] Rome · [3] Riga"), "{screen_now}");
        typing.write_all(b"3\n").await.unwrap();
        assert_eq!(inbound_rx.recv().await.unwrap().text, "/choose n1 2");
        stop.cancel();
        console.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn a_streamed_answer_is_printed_as_it_grows_and_not_twice() {
        let chat = ChatRef::console("test").unwrap();
        let (channel, outbound) = ConsoleChannel::terminal(8);
        let (inbound, mut inbound_rx) = mpsc::channel(4);
        let mut output = Vec::new();
        let run = run(
            chat.clone(),
            &b"hi\nagain\n"[..],
            &mut output,
            inbound,
            outbound,
            4,
            CancellationToken::new(),
        );
        let answer_it = async {
            inbound_rx.recv().await.unwrap();
            // A cut stream, asked again, then the whole answer.
            channel.draft(&chat, Draft::Text("Hel".into())).await;
            channel.draft(&chat, Draft::Restart).await;
            channel.draft(&chat, Draft::Text("Hello ".into())).await;
            channel.draft(&chat, Draft::Text("\x1b[2Jworld".into())).await;
            channel
                .send(OutboundMessage::answer(&chat, 1, "Hello \x1b[2Jworld".into()))
                .await
                .unwrap();
            // An answer that differs from its draft (a hook changed it) is printed whole.
            inbound_rx.recv().await.unwrap();
            channel.draft(&chat, Draft::Text("draft".into())).await;
            channel.send(OutboundMessage::answer(&chat, 2, "final".into())).await.unwrap();
        };
        let (result, ()) = tokio::join!(run, answer_it);
        result.unwrap();
        assert_eq!(String::from_utf8(output).unwrap(), "Hel\nHello \\e[2Jworld\ndraft\nfinal\n");
    }

    #[tokio::test]
    async fn a_file_is_shown_as_its_place_with_its_caption() {
        let chat = ChatRef::console("test").unwrap();
        let (channel, mut sent) = ConsoleChannel::new(4);
        let file = OutboundFile {
            chat: chat.clone(),
            path: "/srv/ws/report.csv".into(),
            caption: Some("Q3".into()),
            contents: None,
        };
        assert_eq!(channel.send_file(file).await.unwrap(), None, "the console has no ids");
        let shown = sent.recv().await.unwrap();
        assert_eq!(
            (shown.text.as_str(), shown.kind),
            ("[file] /srv/ws/report.csv — Q3", OutboundKind::Progress)
        );
    }
}
