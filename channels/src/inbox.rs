//! Files users send (a document, a photo, a voice note): written into the chat's room under
//! `inbox/` with a safe name, and told to the model; voice notes and audio files are
//! transcribed first when `[llm.transcription]` is set.
//!
//! Why so: a file is untrusted bytes under an untrusted name. Nothing here reads what is in
//! it (no document, image or audio decoder runs on the host); its bytes are written as they
//! came, into the one folder the chat's own tools reach, never another chat's. The name is
//! never a path: only its last component is kept, without control, invisible or
//! direction-changing characters, without a leading dot, at most [`MAX_NAME_BYTES`] long, and
//! a name already taken gets `-2`, `-3`, …. The folder is opened without following symlinks
//! and the file created relative to it, exclusively: something else in the room (an MCP
//! server given the room) cannot redirect the write elsewhere by swapping `inbox` for a link.

use std::path::PathBuf;
use std::sync::Arc;

use nexbot_core::channel::{FileKind, InboundFile};
use nexbot_core::ChatRef;
use nexbot_llm::Transcriber;
use nexbot_tools::rooms::store_file;

/// The folder of a chat's room that received files go into.
pub const INBOX_DIR: &str = "inbox";
/// The longest stored name, bytes.
pub const MAX_NAME_BYTES: usize = 100;
/// How much of a transcript the chat is shown back, characters.
const HEARD_CHARS: usize = 300;

/// Where received files go, and how voice is heard.
#[derive(Debug)]
pub struct Inbox {
    /// The workspace's folder of rooms (`<workspace>/chats`).
    rooms: PathBuf,
    transcriber: Option<Arc<Transcriber>>,
    /// The primary model sees images: photos go to it as images, not only as files.
    vision: bool,
}

/// What became of a message's files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Arrived {
    /// The user's message as the model reads it: what arrived, then the caption (or what
    /// was heard).
    pub text: String,
    /// Said to the chat before the answer: what was heard (`🎤 …`), or why it was not.
    pub notice: Option<String>,
    /// Whether there is anything for the model (a voice note that could not be heard, with
    /// no caption, leaves nothing to answer but the notice).
    pub turn: bool,
    /// Photos for a model that sees images, shown with `text` (the history keeps the text).
    pub images: Vec<nexbot_llm::Image>,
}

/// One file written into the room.
struct Stored {
    /// Relative to the room: `inbox/<name>`.
    path: String,
}

impl Inbox {
    pub fn new(rooms: PathBuf, transcriber: Option<Transcriber>, vision: bool) -> Self {
        Self { rooms, transcriber: transcriber.map(Arc::new), vision }
    }

    /// Stores `files` in `chat`'s room and says what the model and the chat are told.
    pub async fn receive(&self, chat: &ChatRef, files: Vec<InboundFile>, caption: &str) -> Arrived {
        let mut lines = Vec::new();
        let mut notices = Vec::new();
        let mut heard = Vec::new();
        let mut images = Vec::new();
        let mut unheard_only = !files.is_empty();
        for file in files {
            // Up to 20 MB written and synced: on the blocking pool, not the runtime's threads.
            let (rooms, owner) = (self.rooms.clone(), chat.clone());
            let stored = tokio::task::spawn_blocking(move || {
                let stored = store(&rooms, &owner, &file);
                (file, stored)
            })
            .await;
            let (file, stored) = match stored {
                Ok(pair) => pair,
                Err(e) => {
                    tracing::error!(%chat, error = %e, "storing a received file failed");
                    notices.push("I could not keep a file you sent; please send it again.".into());
                    lines.push("[The user sent a file, which could not be stored.]".into());
                    continue;
                }
            };
            let stored = match stored {
                Ok(stored) => stored,
                Err(e) => {
                    tracing::error!(%chat, error = %e, "cannot store a received file");
                    notices.push(format!(
                        "I could not keep {} you sent ({e}); please send it again.",
                        file.kind.described()
                    ));
                    lines.push(format!(
                        "[The user sent {}, which could not be stored.]",
                        file.kind.described()
                    ));
                    continue;
                }
            };
            let what = describe(&file, &stored);
            match file.kind {
                FileKind::Voice | FileKind::Audio => match self.hear(&file, &stored).await {
                    Ok(text) => {
                        unheard_only = false;
                        notices.push(format!("🎤 {}", one_line(&text, HEARD_CHARS)));
                        lines.push(format!("[The user sent {what}; transcribed below.]"));
                        heard.push(text);
                    }
                    Err(why) => {
                        notices.push(why.clone());
                        lines
                            .push(format!("[The user sent {what}. It was not transcribed: {why}]"));
                    }
                },
                FileKind::Photo if self.vision => {
                    unheard_only = false;
                    lines.push(format!("[The user sent {what}; it is shown below.]"));
                    let mime = file.mime.clone().unwrap_or_else(|| "image/jpeg".to_owned());
                    images.push(nexbot_llm::Image { mime, data: Arc::new(file.bytes.clone()) });
                }
                FileKind::Photo => {
                    unheard_only = false;
                    lines.push(format!(
                        "[The user sent {what}. You cannot see images here (no vision model is \
                         configured); say so if they ask about what it shows.]"
                    ));
                }
                FileKind::Document => {
                    unheard_only = false;
                    lines.push(format!(
                        "[The user sent {what}. A text file can be read with read_file.]"
                    ));
                }
            }
        }
        let mut text = lines.join("\n");
        for part in heard.iter().map(String::as_str).chain(Some(caption)) {
            if !part.trim().is_empty() {
                text.push_str("\n\n");
                text.push_str(part);
            }
        }
        let turn = !(unheard_only && caption.trim().is_empty());
        let notice = (!notices.is_empty()).then(|| notices.join("\n"));
        Arrived { text, notice, turn, images }
    }

    /// The transcript of a voice note or audio file, or why there is none (for the user).
    async fn hear(&self, file: &InboundFile, stored: &Stored) -> Result<String, String> {
        let Some(transcriber) = &self.transcriber else {
            return Err(format!(
                "I kept your recording as {} but cannot listen to it: transcription is off (the \
                 operator sets [llm.transcription] in config.toml).",
                stored.path
            ));
        };
        if let Err(too_long) = transcriber.admits(file.bytes.len() as u64, file.duration_secs) {
            return Err(format!(
                "I kept your recording as {} but did not transcribe it: {too_long}.",
                stored.path
            ));
        }
        let name = stored.path.rsplit('/').next().unwrap_or("audio");
        let mime = file.mime.as_deref().unwrap_or("application/octet-stream");
        match transcriber.transcribe(&file.bytes, name, mime).await {
            Ok(text) if !text.trim().is_empty() => Ok(text),
            Ok(_) => {
                Err(format!("I kept your recording as {} but heard no words in it.", stored.path))
            }
            Err(e) => {
                tracing::warn!(error = %e, "transcription failed");
                Err(format!(
                    "I kept your recording as {} but could not transcribe it ({}).",
                    stored.path, e.class
                ))
            }
        }
    }
}

/// Writes `file` into `chat`'s `inbox/` under `rooms` (see the module documentation).
fn store(rooms: &std::path::Path, chat: &ChatRef, file: &InboundFile) -> std::io::Result<Stored> {
    let room = nexbot_tools::rooms::ensure_room(rooms, chat)?;
    let path = store_file(&room, INBOX_DIR, &safe_name(file), &file.bytes)?;
    Ok(Stored { path })
}

/// `a document: inbox/report.pdf (application/pdf, 1.2 MB)`.
fn describe(file: &InboundFile, stored: &Stored) -> String {
    let size = nexbot_core::text::human_size(file.bytes.len() as u64);
    let mime = file.mime.as_deref().map(|m| format!("{}, ", one_line(m, 80))).unwrap_or_default();
    format!("{}: {} ({mime}{size}), in this chat's folder", file.kind.described(), stored.path)
}

/// `text` on one line, cut to `max` characters with `…` ([`nexbot_core::text::clip`]).
fn one_line(text: &str, max: usize) -> String {
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    nexbot_core::text::clip(&flat, max).into_owned()
}

/// The name a received file is stored under (see the module documentation): core's one
/// rule for names from outside ([`nexbot_core::text::clean_file_name`]); a file without a
/// usable name is named for its kind and the time (`voice-20261126-163000.ogg`).
pub fn safe_name(file: &InboundFile) -> String {
    nexbot_core::text::clean_file_name(file.name.as_deref().unwrap_or(""), MAX_NAME_BYTES)
        .unwrap_or_else(|| {
            let when = chrono::Utc::now().format("%Y%m%d-%H%M%S");
            let kind = file.kind.as_str();
            format!("{kind}-{when}.{}", extension(file.mime.as_deref(), file.kind))
        })
}

/// A file extension for what the sender's app says the file is.
fn extension(mime: Option<&str>, kind: FileKind) -> &'static str {
    match mime.unwrap_or("") {
        "image/jpeg" => "jpg",
        "image/png" => "png",
        "audio/ogg" | "audio/opus" => "ogg",
        "audio/mpeg" => "mp3",
        "audio/mp4" | "audio/m4a" | "audio/x-m4a" => "m4a",
        "application/pdf" => "pdf",
        "text/plain" => "txt",
        "text/csv" => "csv",
        _ => match kind {
            FileKind::Photo => "jpg",
            FileKind::Voice => "ogg",
            FileKind::Audio | FileKind::Document => "bin",
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(kind: FileKind, name: Option<&str>) -> InboundFile {
        InboundFile {
            kind,
            name: name.map(str::to_owned),
            mime: None,
            bytes: b"hello".to_vec(),
            duration_secs: None,
        }
    }

    #[test]
    fn a_name_is_never_a_path_nor_hides_what_it_is() {
        for (given, stored) in [
            ("report.pdf", "report.pdf"),
            ("../../etc/passwd", "passwd"),
            ("..\\..\\boot.ini", "boot.ini"),
            ("/abs/path/notes.txt", "notes.txt"),
            ("evil\u{202E}fdp.exe", "evilfdp.exe"),
            ("nul\0byte.txt", "nulbyte.txt"),
            ("new\nline.md", "newline.md"),
            (".bashrc", "bashrc"),
            ("...", ""),
            ("..", ""),
            ("trailing. . ", "trailing"),
            ("zero\u{200B}width.csv", "zerowidth.csv"),
        ] {
            let name = safe_name(&file(FileKind::Document, Some(given)));
            if stored.is_empty() {
                assert!(
                    name.starts_with("document-") && name.ends_with(".bin"),
                    "{given:?}: {name}"
                );
            } else {
                assert_eq!(name, stored, "{given:?}");
            }
        }
        let long = format!("{}.pdf", "ж".repeat(200));
        let name = safe_name(&file(FileKind::Document, Some(&long)));
        assert!(name.len() <= MAX_NAME_BYTES && name.ends_with(".pdf"), "{name}");
        let voice = InboundFile { mime: Some("audio/ogg".into()), ..file(FileKind::Voice, None) };
        let name = safe_name(&voice);
        assert!(name.starts_with("voice-") && name.ends_with(".ogg"), "{name}");
    }

    #[tokio::test]
    async fn files_land_in_the_chats_own_inbox_and_never_follow_a_planted_link() {
        let dir = temp_dir("inbox");
        let rooms = dir.join("chats");
        let inbox = Inbox::new(rooms.clone(), None, false);
        let chat = ChatRef::Telegram(7);
        let doc = InboundFile {
            mime: Some("text/plain".into()),
            ..file(FileKind::Document, Some("a.txt"))
        };
        let arrived = inbox.receive(&chat, vec![doc.clone(), doc], "summarise").await;
        let room = rooms.join("telegram_7");
        assert_eq!(std::fs::read(room.join("inbox/a.txt")).unwrap(), b"hello");
        assert_eq!(std::fs::read(room.join("inbox/a-2.txt")).unwrap(), b"hello");
        assert!(arrived.text.contains("inbox/a.txt (text/plain, 5 B)"), "{}", arrived.text);
        assert!(arrived.text.ends_with("\n\nsummarise"), "{}", arrived.text);
        assert!(arrived.turn && arrived.notice.is_none());

        // Another chat's inbox replaced by a link to this one: nothing is written through it.
        let other = ChatRef::Telegram(8);
        let other_room = nexbot_tools::rooms::ensure_room(&rooms, &other).unwrap();
        std::os::unix::fs::symlink(room.join("inbox"), other_room.join(INBOX_DIR)).unwrap();
        let arrived =
            inbox.receive(&other, vec![file(FileKind::Document, Some("b.txt"))], "").await;
        assert!(!room.join("inbox/b.txt").exists(), "written through the link");
        assert!(arrived.notice.unwrap().contains("could not keep"));

        // A voice note without transcription: kept, the user told how to turn it on, no turn.
        let voice = InboundFile { mime: Some("audio/ogg".into()), ..file(FileKind::Voice, None) };
        let arrived = inbox.receive(&chat, vec![voice], "").await;
        let notice = arrived.notice.unwrap();
        assert!(
            notice.contains("[llm.transcription]") && notice.contains("inbox/voice-"),
            "{notice}"
        );
        assert!(!arrived.turn);
        let _ = std::fs::remove_dir_all(&dir);
    }

    fn temp_dir(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("nxh-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }
}
