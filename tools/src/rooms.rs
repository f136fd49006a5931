//! One room per chat: the folder a chat's file tools work in, `<workspace>/chats/<room>`, and
//! the one-time move of an older install's shared workspace files into the owner's room.
//!
//! Why rooms: before, every chat's tools worked over the one workspace (the data directory),
//! so one chat read another's notes, an operator's backup, and wrote `TOOLS.md` — which is in
//! every chat's system prompt, the owner's included. Now the confinement's root is the chat's
//! own folder ([`crate::files::Confinement`]), so everything else is out of reach by
//! construction; the operator's files and the owner's notes are reached only by their exact
//! names, as [`Shared`] files.
//!
//! The room's name is [`room_name`] of the chat's `ChatRef` text form: the kind, `_`, then the
//! rest with ASCII letters, digits and `-` kept and every other byte written `_xx` (two
//! lower-case hex digits): `telegram:12345` → `telegram_12345`, `telegram:-100200` →
//! `telegram_-100200`, `console:default` → `console_default`, `console:my.bot` →
//! `console_my_2ebot`. Readable, safe as one path component (never `.`, `..`, no `/`), and
//! injective: the kind has no `_`, and `_` in the rest is always an escape.

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use nexbot_core::ChatRef;
use rustix::fs::{Mode, OFlags};

use crate::files::{Confinement, Shared, SharedKind};
use nexbot_agent::workspace::{
    BOOTSTRAP_FILES, CONFIG_FILE, MEMORY_FILE, OPERATOR_FILES, USER_FILE,
};

/// The folder under the workspace that holds every room.
pub const ROOMS_DIR: &str = "chats";
/// Written into [`ROOMS_DIR`] once the shared workspace was moved: its presence means "done".
/// No chat reaches it (it is in no room).
pub const MOVED_MARKER: &str = ".moved-from-shared-workspace";

/// The folder of `workspace`'s rooms, as [`Rooms`] sees it (canonical when it exists): what
/// others that write into a chat's room (received files, an MCP server's mount) start from.
pub fn rooms_dir(workspace: &Path) -> PathBuf {
    workspace.canonicalize().unwrap_or_else(|_| workspace.to_path_buf()).join(ROOMS_DIR)
}

/// The room's folder name of `chat` (see the module documentation).
pub fn room_name(chat: &ChatRef) -> String {
    let text = chat.to_string();
    let (kind, rest) = text.split_once(':').unwrap_or(("chat", text.as_str()));
    let mut name = format!("{kind}_");
    for byte in rest.bytes() {
        if byte.is_ascii_alphanumeric() || byte == b'-' {
            name.push(byte as char);
        } else {
            name.push_str(&format!("_{byte:02x}"));
        }
    }
    name
}

/// The rooms of one workspace, and the shared files every room reaches by name.
#[derive(Debug)]
pub struct Rooms {
    dir: PathBuf,
    shared: Vec<Shared>,
}

/// What the daemon names in the workspace that the move must leave alone, whatever it is
/// (the database and its companions, the audit log, the socket, CA files, the skills folder).
#[derive(Debug, Default, Clone)]
pub struct Keep {
    pub paths: Vec<PathBuf>,
}

impl Rooms {
    /// The rooms of `workspace` (created if missing). On the first start with rooms, the
    /// older shared workspace's loose files are moved into the room of `owner_chat` once
    /// ([`move_shared_workspace`]).
    pub fn open(workspace: &Path, owner_chat: &ChatRef, keep: &Keep) -> io::Result<Self> {
        let workspace = workspace.canonicalize()?;
        let dir = workspace.join(ROOMS_DIR);
        if !dir.join(MOVED_MARKER).exists() {
            // A failed move does not stop the daemon: the chats work in their rooms anyway,
            // and the move is tried again at the next start (the marker is written last).
            match move_shared_workspace(&workspace, owner_chat, keep) {
                Ok(moved) => tracing::info!(
                    moved = moved.moved.len(),
                    left = moved.left.len(),
                    room = %dir.join(room_name(owner_chat)).display(),
                    "rooms: moved {} file(s) and folder(s) of the shared workspace into the room \
                     of {owner_chat}; left {} in place (the daemon's or the operator's)",
                    moved.moved.len(),
                    moved.left.len()
                ),
                Err(e) => tracing::error!(
                    "rooms: could not move the shared workspace's files into the room of \
                     {owner_chat}: {e}; check that the daemon may write to {} (tried again at \
                     the next start)",
                    workspace.display()
                ),
            }
        }
        let mut shared: Vec<Shared> = OPERATOR_FILES
            .iter()
            .map(|name| Shared {
                name: (*name).to_owned(),
                path: workspace.join(name),
                kind: SharedKind::Operator,
            })
            .collect();
        shared.push(Shared {
            name: USER_FILE.to_owned(),
            path: workspace.join(USER_FILE),
            kind: SharedKind::Personal { writable: true },
        });
        shared.push(Shared {
            name: MEMORY_FILE.to_owned(),
            path: workspace.join(MEMORY_FILE),
            kind: SharedKind::Personal { writable: false },
        });
        Ok(Self { dir, shared })
    }

    /// Where `chat`'s room is (it may not exist yet).
    pub fn room_dir(&self, chat: &ChatRef) -> PathBuf {
        self.dir.join(room_name(chat))
    }

    /// The confinement of `chat`'s tools, its room created when missing. A room that is not a
    /// real folder (a symlink, a file) is refused: nothing in it could be trusted to stay in.
    pub fn confinement(&self, chat: &ChatRef, owner: bool) -> io::Result<Confinement> {
        let room = ensure_room(&self.dir, chat)?;
        Confinement::new(&room, self.shared.clone(), owner)
    }
}

/// `chat`'s room under `rooms` (a workspace's [`ROOMS_DIR`]), created when missing; its
/// folder's name is the returned path's last component. A room that is not a real folder (a
/// symlink, a file) is refused: nothing in it could be trusted to stay in. What the file tools
/// and an MCP server given the chat's room (mounted into its container) both start from.
pub fn ensure_room(rooms: &Path, chat: &ChatRef) -> io::Result<PathBuf> {
    let room = rooms.join(room_name(chat));
    std::fs::create_dir_all(rooms)?;
    match std::fs::create_dir(&room) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    if !room.symlink_metadata()?.is_dir() {
        return Err(io::Error::other(format!("{} is not a folder", room.display())));
    }
    Ok(room)
}

/// What [`move_shared_workspace`] did, by top-level name.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Moved {
    /// (name in the workspace, name in the room).
    pub moved: Vec<(String, String)>,
    /// Left where they are: the daemon's, the operator's, or not something a chat's tools
    /// could have written.
    pub left: Vec<String>,
}

/// Moves the user's work out of an older install's shared workspace into `owner_chat`'s room,
/// then writes [`MOVED_MARKER`] so it never runs again (a later `nexbot-ctl backup` into the
/// data directory stays where the operator put it).
///
/// Conservative on purpose: only what a chat's tools could have written is moved — a regular
/// file of at most [`MAX_WRITE_BYTES`](crate::files::MAX_WRITE_BYTES) that is UTF-8
/// text without NUL bytes and not a SQLite file, or a folder holding at least one such file
/// and nothing but such files and folders (an empty folder is nobody's work worth moving). Never moved: the bootstrap files and `HEARTBEAT.md`, `config.toml*`, hidden
/// names, whatever `keep` names (or a folder holding it), names of daemon kinds (`*.db`,
/// `*.db-*`, `*.sqlite*`, `*.jsonl` and its rotations, `*.log`, `*.sock`, `*.lock`, `*.pid`,
/// `*.pem`, `*.crt`, `*.key`, `*.toml`), symlinks and anything else. A name already in the
/// room is kept and the moved one renamed (`notes.moved.txt`, `notes.moved-2.txt`). A
/// `chats` entry from before rooms (a user's folder of that name) is renamed aside to
/// `chats.before-rooms` with a warning, so no room inherits files nobody chose for it.
/// Interrupted half-way, the next start moves the rest: the marker is written last.
pub fn move_shared_workspace(
    workspace: &Path,
    owner_chat: &ChatRef,
    keep: &Keep,
) -> io::Result<Moved> {
    let dir = workspace.join(ROOMS_DIR);
    if dir.symlink_metadata().is_ok() {
        let aside = (1..)
            .map(|n| match n {
                1 => workspace.join(format!("{ROOMS_DIR}.before-rooms")),
                n => workspace.join(format!("{ROOMS_DIR}.before-rooms-{n}")),
            })
            .find(|p| p.symlink_metadata().is_err())
            .expect("some name is free");
        std::fs::rename(&dir, &aside)?;
        tracing::warn!(
            "rooms: {} existed before rooms did; renamed it to {} (no chat reaches it; look \
             at it and move what you want to keep into a room under {})",
            dir.display(),
            aside.display(),
            dir.display()
        );
    }
    let keep: Vec<PathBuf> =
        keep.paths.iter().map(|p| canonical_name(&workspace.join(p))).collect();
    let mut report = Moved::default();
    let mut names: Vec<_> = std::fs::read_dir(workspace)?
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    let room = dir.join(room_name(owner_chat));
    std::fs::create_dir_all(&room)?;
    for name in names {
        let path = workspace.join(&name);
        if name == ROOMS_DIR || !movable_name(&name) || kept(&path, &keep) || !movable(&path) {
            report.left.push(name);
            continue;
        }
        let target = free_name(&room, &name);
        if let Err(e) = std::fs::rename(&path, &target) {
            // A mount point or another file system: left for the operator, said once.
            tracing::warn!("rooms: {} stays where it is: cannot move it ({e})", path.display());
            report.left.push(name);
            continue;
        }
        let new_name = target.file_name().unwrap_or_default().to_string_lossy().into_owned();
        report.moved.push((name, new_name));
    }
    let note = format!(
        "Nexbot moved {} entries of the shared workspace into {} on first start with rooms.\n{}",
        report.moved.len(),
        room.display(),
        report.moved.iter().map(|(from, to)| format!("{from} -> {to}\n")).collect::<String>()
    );
    std::fs::write(dir.join(MOVED_MARKER), note)?;
    Ok(report)
}

/// `path` with its folder canonicalized (the path itself may not exist).
fn canonical_name(path: &Path) -> PathBuf {
    match (path.parent().and_then(|p| p.canonicalize().ok()), path.file_name()) {
        (Some(parent), Some(name)) => parent.join(name),
        _ => path.to_path_buf(),
    }
}

/// Whether `path` is something the daemon names, or a folder holding one.
fn kept(path: &Path, keep: &[PathBuf]) -> bool {
    let path = canonical_name(path);
    keep.iter().any(|k| k.starts_with(&path))
}

/// Whether a top-level name may be the user's (see [`move_shared_workspace`]).
fn movable_name(name: &str) -> bool {
    const DAEMON_KINDS: [&str; 12] = [
        ".db", ".sqlite", ".sqlite3", ".jsonl", ".log", ".sock", ".lock", ".pid", ".pem", ".crt",
        ".key", ".toml",
    ];
    let lower = name.to_ascii_lowercase();
    !name.starts_with('.')
        && !name.starts_with(CONFIG_FILE)
        && !name.starts_with(&format!("{ROOMS_DIR}.before-rooms"))
        && name != nexbot_agent::workspace::HEARTBEAT_FILE
        && !BOOTSTRAP_FILES.iter().any(|(n, _)| *n == name)
        && !DAEMON_KINDS.iter().any(|kind| lower.ends_with(kind))
        && !lower.contains(".db-")
        && !lower.contains(".sqlite")
        && !lower.contains(".jsonl.")
}

/// Whether `path` is what a chat's tools could have written: a text file of at most the
/// file tools' size, or a folder of only such files and folders (no symlink, socket, …).
fn movable(path: &Path) -> bool {
    let Ok(meta) = path.symlink_metadata() else { return false };
    if meta.is_file() {
        return text_file(path, meta.len());
    }
    if !meta.is_dir() {
        return false;
    }
    let (mut seen, mut files) = (0usize, 0usize);
    folder_movable(path, 0, &mut seen, &mut files) && files > 0
}

/// Whether every entry under `dir` is a folder or a movable text file (at most 100,000
/// entries, 64 levels: more is not a chat's work); `files` counts the files.
fn folder_movable(dir: &Path, depth: usize, seen: &mut usize, files: &mut usize) -> bool {
    if depth > 64 {
        return false;
    }
    let Ok(entries) = std::fs::read_dir(dir) else { return false };
    for entry in entries {
        *seen += 1;
        let Ok(entry) = entry else { return false };
        let path = entry.path();
        let Ok(meta) = path.symlink_metadata() else { return false };
        let ok = if meta.is_dir() {
            folder_movable(&path, depth + 1, seen, files)
        } else {
            *files += 1;
            meta.is_file() && text_file(&path, meta.len())
        };
        if !ok || *seen > 100_000 {
            return false;
        }
    }
    true
}

fn text_file(path: &Path, len: u64) -> bool {
    if len > crate::files::MAX_WRITE_BYTES as u64 {
        return false;
    }
    let Ok(bytes) = std::fs::read(path) else { return false };
    !bytes.starts_with(b"SQLite format 3\0")
        && !bytes.contains(&0)
        && std::str::from_utf8(&bytes).is_ok()
}

/// `dir/name` if free, else `dir/<stem>.moved[-N].<ext>`.
fn free_name(dir: &Path, name: &str) -> PathBuf {
    let first = dir.join(name);
    if first.symlink_metadata().is_err() {
        return first;
    }
    let (stem, ext) = match name.rsplit_once('.') {
        Some((stem, ext)) if !stem.is_empty() => (stem, format!(".{ext}")),
        _ => (name, String::new()),
    };
    (1..)
        .map(|n| match n {
            1 => dir.join(format!("{stem}.moved{ext}")),
            n => dir.join(format!("{stem}.moved-{n}{ext}")),
        })
        .find(|p| p.symlink_metadata().is_err())
        .expect("some name is free")
}

/// Writes `bytes` into `folder` (made if missing) of the chat's `room` as a new file named
/// `name` (an already clean name), or `name-2`, `name-3`, … when taken; returns its path in
/// the room (`inbox/report.pdf`). Never follows a symlink, never writes over a file: the
/// folder and the file are opened relative to the room's open handle with `O_NOFOLLOW`, the
/// file created with `O_EXCL`, so something else writing in the room (an MCP server given
/// it) cannot redirect the write. The one way files from outside (Telegram, a task's
/// returned files) land in a room.
pub fn store_file(room: &Path, folder: &str, name: &str, bytes: &[u8]) -> io::Result<String> {
    let dir_flags = OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::RDONLY | OFlags::CLOEXEC;
    let room = rustix::fs::open(room, dir_flags, Mode::empty())?;
    match rustix::fs::mkdirat(&room, folder, Mode::from_raw_mode(0o700)) {
        Ok(()) | Err(rustix::io::Errno::EXIST) => {}
        Err(e) => return Err(e.into()),
    }
    let dir = rustix::fs::openat(&room, folder, dir_flags, Mode::empty())?;
    let file_flags =
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    for n in 1..=1000 {
        let candidate = numbered(name, n);
        match rustix::fs::openat(&dir, candidate.as_str(), file_flags, Mode::from_raw_mode(0o600)) {
            Ok(fd) => {
                let mut out = std::fs::File::from(fd);
                out.write_all(bytes)?;
                out.sync_all()?;
                return Ok(format!("{folder}/{candidate}"));
            }
            Err(rustix::io::Errno::EXIST) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Err(io::Error::other(format!("a thousand files named like {name} are already in {folder}/")))
}

/// `name` with `-n` before its extension (`n` = 1: the name itself).
fn numbered(name: &str, n: u32) -> String {
    if n == 1 {
        return name.to_owned();
    }
    match name.rsplit_once('.') {
        Some((stem, ext)) if !stem.is_empty() => format!("{stem}-{n}.{ext}"),
        _ => format!("{name}-{n}"),
    }
}

#[cfg(test)]
mod tests;
