//! A chat's file tools — `read_file`, `write_file`, `edit_file`, `list_dir`, `delete_file` —
//! and the confinement they (and `search_files`, `search_text`, `send_file`) all share.
//!
//! Why a room per chat: the model's arguments are untrusted input, and one chat's model must
//! never reach another chat's files, the owner's notes, the operator's instructions or the
//! daemon's own files. The confinement's root IS the chat's room (`<workspace>/chats/<room>`,
//! [`crate::rooms`]), so everything outside it — the database, its WAL, backups, audit logs,
//! sockets, the lock, `config.toml`, other rooms — is unreachable by construction, not by a
//! list of names. Every path must be relative, must not contain `..`, and after resolving
//! symlinks (canonicalization of the path, or of its deepest existing ancestor for a new file)
//! must still lie inside the canonical room.
//!
//! The only ways out are [`Shared`] files, each reached by its exact name at the room's top
//! (`TOOLS.md`, `./TOOLS.md`): the operator's files (`IDENTITY.md`, `AGENTS.md`, `SOUL.md`,
//! `TOOLS.md`, `HEARTBEAT.md`) read-only, and in the owner's chat only, the owner's `USER.md`
//! (writable) and `MEMORY.md` (read-only: it changes through the `memory` tool). Those names
//! are reserved in every room: nothing of the room's own can shadow them, and no chat can
//! write a file that some prompt would read.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, Write};
use std::os::fd::AsRawFd;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;
use serde_json::{json, Value};

use crate::rooms::Rooms;
use nexbot_agent::confirm::Step;
use nexbot_agent::tools::{success, Tool, ToolContext, ToolError, ToolResult, TypedTool};
use nexbot_core::memory::OutsideRead;

/// The longest `delete_file` may take, its confirmation's wait included.
const DELETE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(600);

/// Largest text `read_file` returns; longer files are cut with a marker.
pub const MAX_READ_CHARS: usize = 200_000;
/// Largest content `write_file`/`edit_file` accept.
pub const MAX_WRITE_BYTES: usize = 4 * 1024 * 1024;

/// Whose a [`Shared`] file is, which decides who may reach it and how.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SharedKind {
    /// The operator's instructions: every chat reads them, no chat changes them.
    Operator,
    /// The owner's own notes: only the owner's chat reaches them; `writable` says whether the
    /// file tools may change them (`USER.md`) or only read them (`MEMORY.md`).
    Personal { writable: bool },
}

/// A file outside the room that a chat reaches by its exact name at the room's top.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shared {
    pub name: String,
    /// Where it really is (the workspace root).
    pub path: PathBuf,
    pub kind: SharedKind,
}

/// One chat's room and the shared files it may reach by name.
#[derive(Debug)]
pub struct Confinement {
    root: PathBuf,
    shared: Vec<Shared>,
    /// Whether the chat is the owner's (personal shared files are refused otherwise).
    owner: bool,
}

/// How a path is going to be used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Use {
    Read,
    Change,
    Create,
}

impl Confinement {
    /// `root` (the chat's room) must exist. `shared` are the files reached by name (see the
    /// module documentation); `owner` whether the chat is the owner's.
    pub fn new(root: &Path, shared: Vec<Shared>, owner: bool) -> io::Result<Self> {
        Ok(Self { root: root.canonicalize()?, shared, owner })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Whether a search must pass `resolved` by: an entry at the room's top named like a
    /// shared file is shadowed by it (read_file of that name reads the shared one), so a search
    /// does not show what `read_file` would not.
    pub fn hidden(&self, resolved: &Path) -> bool {
        resolved.parent() == Some(self.root.as_path())
            && resolved
                .file_name()
                .is_some_and(|name| self.shared.iter().any(|s| name == s.name.as_str()))
    }

    /// The shared files this chat sees at its room's top, for `list_dir`: each with its line.
    pub fn shared_entries(&self) -> Vec<String> {
        self.shared
            .iter()
            .filter(|s| self.owner || s.kind == SharedKind::Operator)
            .filter(|s| s.path.is_file())
            .map(|s| match s.kind {
                SharedKind::Operator => format!("{} (the operator's, read-only)", s.name),
                SharedKind::Personal { writable: true } => format!("{} (the owner's)", s.name),
                SharedKind::Personal { writable: false } => {
                    format!("{} (the owner's; changes only through the memory tool)", s.name)
                }
            })
            .collect()
    }

    fn check_relative(raw: &str) -> Result<&Path, ToolError> {
        if raw.trim().is_empty() {
            return Err(ToolError::new("path is empty"));
        }
        if raw.contains('\0') {
            return Err(ToolError::new("path contains a NUL byte"));
        }
        let path = Path::new(raw);
        for component in path.components() {
            match component {
                Component::RootDir | Component::Prefix(_) => {
                    return Err(ToolError::new(format!(
                        "{raw}: absolute paths are refused; use a path relative to this chat's \
                         folder"
                    )))
                }
                Component::ParentDir => {
                    return Err(ToolError::new(format!(
                        "{raw}: `..` is refused in paths; this chat's files are all under its \
                         own folder"
                    )))
                }
                Component::CurDir | Component::Normal(_) => {}
            }
        }
        Ok(path)
    }

    /// The shared file `rel` names, when it is one name at the room's top (`./` allowed).
    fn shared_named(&self, rel: &Path) -> Option<&Shared> {
        let mut names = rel.components().filter(|c| !matches!(c, Component::CurDir));
        let (Some(Component::Normal(name)), None) = (names.next(), names.next()) else {
            return None;
        };
        self.shared.iter().find(|s| name == s.name.as_str())
    }

    /// A shared file for `how`, or the refusal that says why not.
    fn shared_for(&self, raw: &str, shared: &Shared, how: Use) -> Result<PathBuf, ToolError> {
        match shared.kind {
            SharedKind::Personal { .. } if !self.owner => {
                return Err(ToolError::new(format!(
                    "{raw}: refused, it holds the owner's personal notes, which only the owner's \
                     private chat may use"
                )))
            }
            SharedKind::Operator if how != Use::Read => {
                return Err(ToolError::new(format!(
                    "{raw}: refused, {} is the operator's file: you may read it but not change \
                     it, and no file of this chat may take its name (use another name, e.g. \
                     notes/{})",
                    shared.name, shared.name
                )))
            }
            SharedKind::Personal { writable: false } if how != Use::Read => {
                return Err(ToolError::new(format!(
                    "{raw}: refused, the agent may read {} but not change it with the file \
                     tools; it changes only through the memory tool",
                    shared.name
                )))
            }
            _ => {}
        }
        if how != Use::Create && shared.path.symlink_metadata().is_err() {
            return Err(ToolError::new(format!("{raw}: no such file or directory")));
        }
        Ok(shared.path.clone())
    }

    /// An existing path, resolved and checked, for reading.
    pub fn existing(&self, raw: &str) -> Result<PathBuf, ToolError> {
        self.resolve(raw, Use::Read)
    }

    /// An existing path the agent may change (edit, delete).
    pub fn changeable(&self, raw: &str) -> Result<PathBuf, ToolError> {
        self.resolve(raw, Use::Change)
    }

    /// A path that may not exist yet (for writing).
    pub fn writable(&self, raw: &str) -> Result<PathBuf, ToolError> {
        self.resolve(raw, Use::Create)
    }

    /// The directory entry itself that `raw` names (not where a symlink leads), for deleting:
    /// call it after [`Self::changeable`] accepted `raw`.
    pub fn entry(&self, raw: &str) -> Result<PathBuf, ToolError> {
        let rel = Self::check_relative(raw)?;
        Ok(match self.shared_named(rel) {
            Some(shared) => shared.path.clone(),
            None => self.root.join(rel),
        })
    }

    /// Opens `resolved` (what [`Self::existing`], [`Self::changeable`] or [`Self::writable`]
    /// accepted for `raw`) to read, or to read and write, then checks that what was opened is
    /// where the check found it: inside the room, or the shared file itself. Something else
    /// that writes in the room while a tool runs (an MCP server given the room) may swap a
    /// folder for a symlink between the check and the open; this catches it, before a byte is
    /// read or written. A file it had to create out there is removed again; an existing one is
    /// never truncated before the check (the caller truncates after).
    pub fn open(&self, raw: &str, resolved: &Path, write: bool) -> Result<File, ToolError> {
        let mut options = OpenOptions::new();
        options.read(true).write(write);
        let (file, created) = match write {
            false => (options.open(resolved), false),
            true => match options.clone().create_new(true).open(resolved) {
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                    (options.open(resolved), false)
                }
                other => (other, true),
            },
        };
        let file = file.map_err(|e| io_error(raw, e))?;
        let real = opened_path(&file).map_err(|e| io_error(raw, e))?;
        let shared = !resolved.starts_with(&self.root);
        let inside = match shared {
            true => real == resolved || resolved.canonicalize().is_ok_and(|c| c == real),
            false => real.starts_with(&self.root) && !self.hidden(&real),
        };
        if !inside {
            if created {
                let _ = std::fs::remove_file(&real);
            }
            return Err(ToolError::new(format!(
                "{raw}: refused, it changed to lead outside this chat's folder while it was \
                 being opened"
            )));
        }
        Ok(file)
    }

    /// The folder `resolved` as an open handle, checked like [`Self::open`]: what a listing or
    /// a deletion works through, so a swapped folder cannot redirect it.
    pub fn open_dir(&self, raw: &str, resolved: &Path) -> Result<File, ToolError> {
        self.open(raw, resolved, false)
    }

    /// A shared file by its name, else: the deepest existing ancestor of the path (the path
    /// itself when it exists) is canonicalized and checked; the missing rest, which cannot be
    /// a symlink because it does not exist, is appended. So a path through a symlink that
    /// leads out is refused whether or not its end exists.
    fn resolve(&self, raw: &str, how: Use) -> Result<PathBuf, ToolError> {
        let rel = Self::check_relative(raw)?;
        if let Some(shared) = self.shared_named(rel) {
            return self.shared_for(raw, shared, how);
        }
        let joined = self.root.join(rel);
        let mut missing = Vec::new();
        let mut ancestor = joined.as_path();
        while ancestor.symlink_metadata().is_err() {
            let (Some(name), Some(parent)) = (ancestor.file_name(), ancestor.parent()) else {
                break;
            };
            missing.push(name.to_owned());
            ancestor = parent;
        }
        let mut resolved = ancestor.canonicalize().map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => {
                ToolError::new(format!("{raw}: refused, it goes through a dangling symlink"))
            }
            _ => ToolError::new(format!("{raw}: {e}")),
        })?;
        resolved.extend(missing.iter().rev());
        if !resolved.starts_with(&self.root) {
            return Err(ToolError::new(format!(
                "{raw}: refused, it leads outside this chat's folder (through a symlink)"
            )));
        }
        if self.hidden(&resolved) {
            // A symlink inside the room to a top-level entry named like a shared file.
            return Err(ToolError::new(format!(
                "{raw}: refused, it leads to a name reserved for a shared file"
            )));
        }
        if how != Use::Create && !missing.is_empty() {
            return Err(ToolError::new(format!("{raw}: no such file or directory")));
        }
        Ok(resolved)
    }
}

/// The file `raw` of the turn's chat's room, read whole to be handed on (a delegated task's
/// input): checked and opened as `read_file` does (the open handle's real place checked), a
/// regular file of at most `max` bytes. Returns its last path part and its bytes.
pub async fn read_whole(
    rooms: &Arc<Rooms>,
    ctx: &ToolContext,
    raw: String,
    max: u64,
) -> Result<(String, Vec<u8>), ToolError> {
    in_room(rooms, ctx, move |confinement| {
        let path = confinement.existing(&raw)?;
        let mut file = confinement.open(&raw, &path, false)?;
        let meta = file.metadata().map_err(|e| io_error(&raw, e))?;
        if !meta.is_file() {
            return Err(ToolError::new(format!("{raw}: not a regular file")));
        }
        if meta.len() > max {
            return Err(ToolError::new(format!(
                "{raw}: the file is {}; at most {} can be handed on",
                nexbot_core::text::human_size(meta.len()),
                nexbot_core::text::human_size(max)
            )));
        }
        let mut bytes = Vec::with_capacity(meta.len() as usize);
        (&mut file).take(max + 1).read_to_end(&mut bytes).map_err(|e| io_error(&raw, e))?;
        if bytes.len() as u64 > max {
            return Err(ToolError::new(format!("{raw}: the file grew past the limit while read")));
        }
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        Ok((name, bytes))
    })
    .await
}

/// Runs a file tool's work on the blocking pool, over the room of the turn's chat.
pub(crate) async fn in_room<T: Send + 'static>(
    rooms: &Arc<Rooms>,
    ctx: &ToolContext,
    work: impl FnOnce(&Confinement) -> Result<T, ToolError> + Send + 'static,
) -> Result<T, ToolError> {
    let rooms = rooms.clone();
    let (chat, owner) = (ctx.chat.clone(), ctx.owner);
    tokio::task::spawn_blocking(move || {
        let confinement = rooms.confinement(&chat, owner).map_err(|e| {
            ToolError::new(format!(
                "this chat's folder cannot be opened ({e}); tell the operator, the data \
                 directory needs attention"
            ))
        })?;
        work(&confinement)
    })
    .await
    .map_err(|e| ToolError::new(format!("tool failed: {e}")))?
}

/// `file`'s whole content becomes `bytes` (it was opened, and checked, without truncating).
fn replace_content(file: &mut File, bytes: &[u8]) -> io::Result<()> {
    file.set_len(0)?;
    file.rewind()?;
    file.write_all(bytes)
}

/// Where the kernel says an open handle is (`/proc/self/fd`): the path as it resolved at
/// the open, whatever has been renamed or swapped since the check.
fn opened_path(file: &File) -> io::Result<PathBuf> {
    std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd()))
}

/// `name` inside the folder `dir` is open as, by the kernel's handle (`/proc/self/fd/<n>/…`
/// resolves through the open folder, not through its path).
fn in_opened(dir: &File, name: &std::ffi::OsStr) -> PathBuf {
    Path::new(&format!("/proc/self/fd/{}", dir.as_raw_fd())).join(name)
}

fn io_error(raw: &str, e: io::Error) -> ToolError {
    ToolError::new(format!("{raw}: {e}"))
}

/// All five file tools over the chats' rooms.
pub fn file_tools(rooms: Arc<Rooms>) -> Vec<Arc<dyn Tool>> {
    vec![
        Arc::new(ReadFile(rooms.clone())),
        Arc::new(WriteFile(rooms.clone())),
        Arc::new(EditFile(rooms.clone())),
        Arc::new(ListDir(rooms.clone())),
        Arc::new(DeleteFile(rooms)),
    ]
}

#[derive(Debug)]
pub struct ReadFile(Arc<Rooms>);

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PathArgs {
    path: String,
}

fn path_schema() -> Value {
    json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]})
}

impl TypedTool for ReadFile {
    type Args = PathArgs;
    const NAME: &'static str = "read_file";
    const DESCRIPTION: &'static str =
        "Read a UTF-8 text file of this chat's folder. `path` is relative to the folder; the \
         operator's files (e.g. `TOOLS.md`) are read by their name too.";
    fn schema() -> Value {
        path_schema()
    }
    async fn run(&self, args: PathArgs, ctx: &ToolContext) -> ToolResult {
        let origin = OutsideRead::tool(Self::NAME).with_detail(format!("file {}", args.path));
        let read = in_room(&self.0, ctx, move |confinement| {
            let path = confinement.existing(&args.path)?;
            if path.is_dir() {
                return Err(ToolError::new(format!("{}: is a directory", args.path)));
            }
            let mut bytes = Vec::new();
            confinement
                .open(&args.path, &path, false)?
                .read_to_end(&mut bytes)
                .map_err(|e| io_error(&args.path, e))?;
            let text = String::from_utf8(bytes)
                .map_err(|_| ToolError::new(format!("{}: not a UTF-8 text file", args.path)))?;
            if text.chars().count() > MAX_READ_CHARS {
                let cut: String = text.chars().take(MAX_READ_CHARS).collect();
                return Ok(success(format!("{cut}\n[TRUNCATED]")));
            }
            Ok(success(text))
        })
        .await?;
        Ok(read.read_from(origin))
    }
}

#[derive(Debug)]
pub struct WriteFile(Arc<Rooms>);

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WriteArgs {
    path: String,
    content: String,
}

impl TypedTool for WriteFile {
    type Args = WriteArgs;
    const NAME: &'static str = "write_file";
    // Its answer is a confirmation, nothing from outside the chat.
    const READS_OUTSIDE: bool = false;
    const DESCRIPTION: &'static str =
        "Create or overwrite a text file in this chat's folder (parent directories are \
         created).";
    fn schema() -> Value {
        json!({"type": "object", "properties": {
            "path": {"type": "string"}, "content": {"type": "string"}},
            "required": ["path", "content"]})
    }
    async fn run(&self, args: WriteArgs, ctx: &ToolContext) -> ToolResult {
        if args.content.len() > MAX_WRITE_BYTES {
            return Err(ToolError::new(format!("content exceeds {MAX_WRITE_BYTES} bytes")));
        }
        in_room(&self.0, ctx, move |confinement| {
            let path = confinement.writable(&args.path)?;
            if path.is_dir() {
                return Err(ToolError::new(format!("{}: is a directory", args.path)));
            }
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent).map_err(|e| io_error(&args.path, e))?;
            }
            let mut file = confinement.open(&args.path, &path, true)?;
            replace_content(&mut file, args.content.as_bytes())
                .map_err(|e| io_error(&args.path, e))?;
            Ok(success(format!("wrote {} bytes to {}", args.content.len(), args.path)))
        })
        .await
    }
}

#[derive(Debug)]
pub struct EditFile(Arc<Rooms>);

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EditArgs {
    path: String,
    old_text: String,
    new_text: String,
    #[serde(default)]
    replace_all: bool,
}

impl TypedTool for EditFile {
    type Args = EditArgs;
    const NAME: &'static str = "edit_file";
    const DESCRIPTION: &'static str =
        "Replace `old_text` with `new_text` in a file of this chat's folder. `old_text` must occur exactly \
         once unless `replace_all` is true.";
    fn schema() -> Value {
        json!({"type": "object", "properties": {
            "path": {"type": "string"}, "old_text": {"type": "string"},
            "new_text": {"type": "string"}, "replace_all": {"type": "boolean"}},
            "required": ["path", "old_text", "new_text"]})
    }
    async fn run(&self, args: EditArgs, ctx: &ToolContext) -> ToolResult {
        if args.old_text.is_empty() {
            return Err(ToolError::new("old_text is empty"));
        }
        in_room(&self.0, ctx, move |confinement| {
            let path = confinement.changeable(&args.path)?;
            let mut file = confinement.open(&args.path, &path, true)?;
            let mut text = String::new();
            file.read_to_string(&mut text).map_err(|e| io_error(&args.path, e))?;
            let count = text.matches(&args.old_text).count();
            if count == 0 {
                return Err(ToolError::new(format!("{}: old_text not found", args.path)));
            }
            if count > 1 && !args.replace_all {
                return Err(ToolError::new(format!(
                    "{}: old_text occurs {count} times; make it unique or set replace_all",
                    args.path
                )));
            }
            let edited = text.replace(&args.old_text, &args.new_text);
            if edited.len() > MAX_WRITE_BYTES {
                return Err(ToolError::new(format!("result exceeds {MAX_WRITE_BYTES} bytes")));
            }
            replace_content(&mut file, edited.as_bytes()).map_err(|e| io_error(&args.path, e))?;
            Ok(success(format!("replaced {count} occurrence(s) in {}", args.path)))
        })
        .await
    }
}

#[derive(Debug)]
pub struct ListDir(Arc<Rooms>);

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListArgs {
    #[serde(default = "dot")]
    path: String,
}

fn dot() -> String {
    ".".into()
}

impl TypedTool for ListDir {
    type Args = ListArgs;
    const NAME: &'static str = "list_dir";
    const DESCRIPTION: &'static str =
        "List a directory of this chat's folder (default: the folder itself, with the \
         operator's files it may read).";
    fn schema() -> Value {
        json!({"type": "object", "properties": {"path": {"type": "string"}}})
    }
    async fn run(&self, args: ListArgs, ctx: &ToolContext) -> ToolResult {
        in_room(&self.0, ctx, move |confinement| {
            let path = confinement.existing(&args.path)?;
            let dir = confinement.open_dir(&args.path, &path)?;
            let entries = std::fs::read_dir(in_opened(&dir, std::ffi::OsStr::new("")))
                .map_err(|e| io_error(&args.path, e))?;
            let mut lines = Vec::new();
            for entry in entries {
                let entry = entry.map_err(|e| io_error(&args.path, e))?;
                if confinement.hidden(&path.join(entry.file_name())) {
                    continue;
                }
                let name = entry.file_name().to_string_lossy().into_owned();
                let meta = entry.metadata().map_err(|e| io_error(&name, e))?;
                lines.push(if meta.file_type().is_symlink() {
                    format!("{name} (symlink)")
                } else if meta.is_dir() {
                    format!("{name}/")
                } else {
                    format!("{name} ({} bytes)", meta.len())
                });
            }
            if path == confinement.root() {
                lines.extend(confinement.shared_entries());
            }
            lines.sort();
            Ok(success(lines.join("\n")))
        })
        .await
    }
}

#[derive(Debug)]
pub struct DeleteFile(Arc<Rooms>);

impl TypedTool for DeleteFile {
    type Args = PathArgs;
    const NAME: &'static str = "delete_file";
    // Its answer is a confirmation, nothing from outside the chat.
    const READS_OUTSIDE: bool = false;
    const DESCRIPTION: &'static str = "Delete a file of this chat's folder (not a directory).";
    fn schema() -> Value {
        path_schema()
    }
    /// Above the confirmation's wait (`agent.confirm`; `egress.approval_timeout_secs`, 120 s
    /// by default): the deletion itself is instant, the user may take their time.
    fn timeout(&self) -> Option<std::time::Duration> {
        Some(DELETE_TIMEOUT)
    }
    async fn run(&self, args: PathArgs, ctx: &ToolContext) -> ToolResult {
        // Checked before anyone is asked (a question about a file that cannot be deleted
        // wastes the user's time), and again after (it may have changed meanwhile).
        let checked = |confinement: &Confinement, path: &str| {
            // Resolving checks where a symlink leads; the link itself is what is removed.
            let resolved = confinement.changeable(path)?;
            if resolved.is_dir() {
                return Err(ToolError::new(format!("{path}: is a directory")));
            }
            confinement.entry(path)
        };
        let path = args.path.clone();
        in_room(&self.0, ctx, move |confinement| checked(confinement, &path).map(drop)).await?;
        let step = Step::Delete { path: args.path.clone() };
        if let Err(refused) = ctx.confirm.confirm(&ctx.chat, step).await {
            return Err(ToolError::new(format!("{}: not deleted: {refused}", args.path)));
        }
        in_room(&self.0, ctx, move |confinement| {
            let link = checked(confinement, &args.path)?;
            // Through the checked folder's handle: a folder swapped since cannot redirect it.
            let (Some(parent), Some(name)) = (link.parent(), link.file_name()) else {
                return Err(ToolError::new(format!("{}: not a file", args.path)));
            };
            let dir = confinement.open_dir(&args.path, parent)?;
            std::fs::remove_file(in_opened(&dir, name)).map_err(|e| io_error(&args.path, e))?;
            Ok(success(format!("deleted {}", args.path)))
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rooms::Keep;
    use nexbot_core::ChatRef;

    /// A data directory as an install has it — the daemon's files, an operator's backup, the
    /// operator's and the owner's files — and two chats: A (`telegram:1`) with a file of its
    /// own, B (`telegram:2`) whose room holds symlinks planted at A's room, the data directory
    /// and the daemon's files (no tool makes symlinks; they stand for anything that might).
    struct Fixture {
        base: PathBuf,
        ws: PathBuf,
        room_a: PathBuf,
        room_b: PathBuf,
        tools: Vec<Arc<dyn Tool>>,
        _socket: std::os::unix::net::UnixListener,
    }

    impl Drop for Fixture {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.base);
        }
    }

    const A: ChatRef = ChatRef::Telegram(1);
    const B: ChatRef = ChatRef::Telegram(2);

    /// The daemon's files and an operator's backup, with what each holds.
    const DAEMON: [(&str, &str); 6] = [
        ("nexbot.db", "SQLite format 3\0 the database"),
        ("nexbot.db-wal", "the wal"),
        ("nexbot.lock", "4242"),
        ("config.toml", "[llm]"),
        ("egress-audit.jsonl", "{\"audit\": 1}"),
        ("backup-2026-11-24.db", "SQLite format 3\0 the operator's backup"),
    ];

    fn fixture() -> Fixture {
        let base = std::env::temp_dir().join(format!("nxh-files-{}", uuid::Uuid::new_v4()));
        let ws = base.join("data");
        std::fs::create_dir_all(&ws).unwrap();
        for (name, text) in DAEMON {
            std::fs::write(ws.join(name), text).unwrap();
        }
        let socket = std::os::unix::net::UnixListener::bind(ws.join("nexbot.sock")).unwrap();
        for name in nexbot_agent::workspace::OPERATOR_FILES {
            std::fs::write(ws.join(name), format!("operator's {name}")).unwrap();
        }
        std::fs::write(ws.join("USER.md"), "owner: Alice, lives in Paris").unwrap();
        std::fs::write(ws.join("MEMORY.md"), "- Alice's bank is X").unwrap();
        let rooms = Arc::new(Rooms::open(&ws, &A, &Keep::default()).unwrap());
        let room_a = rooms.confinement(&A, false).unwrap().root().to_owned();
        let room_b = rooms.confinement(&B, false).unwrap().root().to_owned();
        std::fs::write(room_a.join("a-secret.txt"), "A's secret").unwrap();
        std::fs::create_dir_all(room_b.join("sub")).unwrap();
        std::fs::write(room_b.join("note.txt"), "hello world").unwrap();
        let link = |to: &Path, name: &str| std::os::unix::fs::symlink(to, room_b.join(name));
        link(&room_a, "to_a").unwrap();
        link(&room_a.join("a-secret.txt"), "to_a_file").unwrap();
        link(&ws, "to_data").unwrap();
        link(&ws.join("nexbot.db"), "to_db").unwrap();
        link(&ws.join("TOOLS.md"), "to_tools").unwrap();
        link(&ws.join("gone"), "dangling").unwrap();
        link(&room_b.join("note.txt"), "inner_link").unwrap();
        let tools = file_tools(rooms);
        Fixture { base, ws, room_a, room_b, tools, _socket: socket }
    }

    /// Something else in B's room (an MCP server given it) swaps a checked folder for a link
    /// to A's room between the check and the open: the read, the write, the listing and the
    /// deletion are all refused, and nothing of A's is read, made, changed or removed.
    #[test]
    fn a_folder_swapped_for_a_link_after_the_check_is_caught_at_the_open() {
        let f = fixture();
        let confinement = Confinement::new(&f.room_b, Vec::new(), false).unwrap();
        std::fs::write(f.room_b.join("sub/a-secret.txt"), "B's own").unwrap();
        let read = confinement.existing("sub/a-secret.txt").unwrap();
        let write = confinement.writable("sub/new.txt").unwrap();
        let edit = confinement.changeable("sub/a-secret.txt").unwrap();
        let list = confinement.existing("sub").unwrap();
        // The swap.
        std::fs::rename(f.room_b.join("sub"), f.room_b.join("sub-was")).unwrap();
        std::os::unix::fs::symlink(&f.room_a, f.room_b.join("sub")).unwrap();
        // The checked path alone (how the tools opened it before) now reads A's file.
        assert_eq!(std::fs::read_to_string(&read).unwrap(), "A's secret");
        for (what, path, write) in
            [("read", &read, false), ("write", &write, true), ("edit", &edit, true)]
        {
            let err = confinement.open("sub/x", path, write).unwrap_err().to_string();
            assert!(err.contains("refused"), "{what}: {err}");
        }
        let err = confinement.open_dir("sub", &list).unwrap_err().to_string();
        assert!(err.contains("refused"), "list: {err}");
        assert_eq!(std::fs::read_to_string(f.room_a.join("a-secret.txt")).unwrap(), "A's secret");
        assert!(!f.room_a.join("new.txt").exists(), "a file was left in A's room");
    }

    fn ctx(chat: ChatRef, owner: bool) -> ToolContext {
        let mut ctx = ToolContext::for_tests();
        ctx.chat = chat;
        ctx.owner = owner;
        ctx
    }

    impl Fixture {
        async fn call_as(&self, ctx: &ToolContext, name: &str, args: Value) -> ToolResult {
            let tool = self.tools.iter().find(|t| t.name() == name).unwrap();
            tool.call(args, ctx).await
        }

        /// B's call.
        async fn call(&self, name: &str, args: Value) -> ToolResult {
            self.call_as(&ctx(B, false), name, args).await
        }

        /// Every file outside B's room still holds what it held.
        fn untouched(&self) {
            for (name, text) in DAEMON {
                assert_eq!(std::fs::read_to_string(self.ws.join(name)).unwrap(), text, "{name}");
            }
            assert!(self
                .ws
                .join("nexbot.sock")
                .symlink_metadata()
                .unwrap()
                .file_type()
                .is_socket());
            for name in nexbot_agent::workspace::OPERATOR_FILES {
                let text = std::fs::read_to_string(self.ws.join(name)).unwrap();
                assert_eq!(text, format!("operator's {name}"), "{name}");
            }
            let user = std::fs::read_to_string(self.ws.join("USER.md")).unwrap();
            assert_eq!(user, "owner: Alice, lives in Paris");
            let a = std::fs::read_to_string(self.room_a.join("a-secret.txt")).unwrap();
            assert_eq!(a, "A's secret");
        }
    }

    use std::os::unix::fs::FileTypeExt;

    /// Arguments for `tool` aimed at `path`.
    fn args_for(tool: &str, path: &str) -> Value {
        match tool {
            "write_file" => json!({"path": path, "content": "pwned"}),
            "edit_file" => json!({"path": path, "old_text": "s", "new_text": "pwned"}),
            _ => json!({"path": path}),
        }
    }

    const TOOLS: [&str; 5] = ["read_file", "write_file", "edit_file", "list_dir", "delete_file"];

    #[tokio::test]
    async fn a_chat_reaches_nothing_outside_its_room_however_the_path_is_spelled() {
        let f = fixture();
        let abs = |p: PathBuf| p.display().to_string();
        let cases = [
            ("../telegram_1/a-secret.txt".to_owned(), "`..`"),
            ("sub/../../../nexbot.db".to_owned(), "`..`"),
            ("..".to_owned(), "`..`"),
            (abs(f.room_a.join("a-secret.txt")), "absolute"),
            (abs(f.ws.join("nexbot.db")), "absolute"),
            (abs(f.ws.join("nexbot.sock")), "absolute"),
            ("/etc/passwd".to_owned(), "absolute"),
            ("to_a".to_owned(), "outside this chat's folder"),
            ("to_a/a-secret.txt".to_owned(), "outside this chat's folder"),
            ("to_a/new.txt".to_owned(), "outside this chat's folder"),
            ("to_a_file".to_owned(), "outside this chat's folder"),
            ("to_data/nexbot.db".to_owned(), "outside this chat's folder"),
            ("to_data/nexbot.sock".to_owned(), "outside this chat's folder"),
            ("to_data/nexbot.lock".to_owned(), "outside this chat's folder"),
            ("to_data/backup-2026-11-24.db".to_owned(), "outside this chat's folder"),
            ("to_data/TOOLS.md".to_owned(), "outside this chat's folder"),
            ("to_data/chats/telegram_1/a-secret.txt".to_owned(), "outside this chat's folder"),
            ("to_db".to_owned(), "outside this chat's folder"),
            ("to_tools".to_owned(), "outside this chat's folder"),
            ("dangling/x.txt".to_owned(), "dangling symlink"),
            (String::new(), "empty"),
        ];
        for tool in TOOLS {
            for (path, why) in &cases {
                let err = f
                    .call(tool, args_for(tool, path))
                    .await
                    .expect_err(&format!("{tool} accepted {path:?}"));
                assert!(err.message().contains(why), "{tool} {path:?}: {err}");
            }
        }
        // The daemon's names are simply not in the room: nothing to read, list or change...
        for tool in ["read_file", "edit_file", "list_dir", "delete_file"] {
            for (name, _) in DAEMON.iter().chain(&[("nexbot.sock", "")]) {
                let err = f.call(tool, args_for(tool, name)).await.expect_err(name);
                assert!(
                    err.message().contains("no such file or directory"),
                    "{tool} {name}: {err}"
                );
            }
        }
        // ...and a file of that name written by the chat is its own, nothing of the daemon's.
        f.call("write_file", json!({"path": "nexbot.lock", "content": "mine"})).await.unwrap();
        assert_eq!(std::fs::read_to_string(f.room_b.join("nexbot.lock")).unwrap(), "mine");
        f.untouched();
        assert!(!f.room_a.join("new.txt").exists());
        assert!(f.room_b.join("to_a_file").symlink_metadata().is_ok(), "the link was deleted");
    }

    #[tokio::test]
    async fn a_chat_never_sees_another_chats_room() {
        let f = fixture();
        let a = ctx(A, false);
        f.call_as(&a, "write_file", json!({"path": "plans.md", "content": "A's plans"}))
            .await
            .unwrap();
        assert_eq!(std::fs::read_to_string(f.room_a.join("plans.md")).unwrap(), "A's plans");
        let listing = f.call("list_dir", json!({})).await.unwrap();
        assert!(
            !listing.text().contains("plans.md") && !listing.text().contains("a-secret"),
            "{listing}"
        );
        assert!(listing.text().contains("note.txt (11 bytes)"), "{listing}");
        for path in ["plans.md", "a-secret.txt"] {
            let err = f.call("read_file", json!({"path": path})).await.unwrap_err();
            assert_eq!(err.message(), format!("{path}: no such file or directory"));
        }
        // B writing the same name writes B's own file.
        f.call("write_file", json!({"path": "plans.md", "content": "B's"})).await.unwrap();
        let mine = f.call_as(&a, "read_file", json!({"path": "plans.md"})).await.unwrap();
        assert_eq!(mine.text(), "A's plans");
        // What a file said is outside the chat's words: named, for what the turn remembers.
        let read = OutsideRead::tool("read_file").with_detail("file plans.md");
        assert_eq!(mine.origins(), [read]);
        // The room's folder is named after the chat.
        assert!(f.room_a.ends_with("chats/telegram_1") && f.room_b.ends_with("chats/telegram_2"));
    }

    #[tokio::test]
    async fn the_operators_files_are_read_by_name_and_no_chat_writes_them() {
        let f = fixture();
        for chat in [ctx(B, false), ctx(A, true)] {
            let out = f.call_as(&chat, "read_file", json!({"path": "./TOOLS.md"})).await.unwrap();
            assert_eq!(out.text(), "operator's TOOLS.md");
            for name in nexbot_agent::workspace::OPERATOR_FILES {
                for path in [name.to_owned(), format!("./{name}")] {
                    for tool in ["write_file", "edit_file", "delete_file"] {
                        let args = match tool {
                            "edit_file" => json!({"path": path, "old_text": "operator",
                                "new_text": "evil"}),
                            _ => args_for(tool, &path),
                        };
                        let err = f
                            .call_as(&chat, tool, args)
                            .await
                            .expect_err(&format!("{tool} changed {path}"));
                        assert!(
                            err.message().contains("is the operator's file"),
                            "{tool} {path}: {err}"
                        );
                    }
                }
            }
            let listing = f.call_as(&chat, "list_dir", json!({"path": "."})).await.unwrap();
            assert!(listing.text().contains("TOOLS.md (the operator's, read-only)"), "{listing}");
        }
        f.untouched();
        assert!(!f.room_b.join("TOOLS.md").exists() && !f.room_a.join("TOOLS.md").exists());
        // Deeper in the room the name is the chat's own.
        f.call("write_file", json!({"path": "drafts/TOOLS.md", "content": "x"})).await.unwrap();
    }

    #[tokio::test]
    async fn tools_work_inside_the_room() {
        let f = fixture();
        let out = f.call("read_file", json!({"path": "note.txt"})).await.unwrap();
        assert_eq!(out.text(), "hello world");
        let out = f.call("read_file", json!({"path": "./inner_link"})).await.unwrap();
        assert_eq!(out.text(), "hello world");
        f.call("write_file", json!({"path": "a/b/c.txt", "content": "x y x"})).await.unwrap();
        assert_eq!(std::fs::read_to_string(f.room_b.join("a/b/c.txt")).unwrap(), "x y x");
        let err = f
            .call("edit_file", json!({"path": "a/b/c.txt", "old_text": "x", "new_text": "z"}))
            .await
            .unwrap_err();
        assert!(err.message().contains("occurs 2 times"), "{err}");
        f.call(
            "edit_file",
            json!({"path": "a/b/c.txt", "old_text": "x", "new_text": "z", "replace_all": true}),
        )
        .await
        .unwrap();
        assert_eq!(std::fs::read_to_string(f.room_b.join("a/b/c.txt")).unwrap(), "z y z");
        let listing = f.call("list_dir", json!({})).await.unwrap();
        for expected in ["a/", "note.txt (11 bytes)", "to_a (symlink)", "sub/"] {
            assert!(listing.text().contains(expected), "{listing}");
        }
        f.call("delete_file", json!({"path": "a/b/c.txt"})).await.unwrap();
        assert!(!f.room_b.join("a/b/c.txt").exists());
        let err = f.call("delete_file", json!({"path": "sub"})).await.unwrap_err();
        assert!(err.message().contains("is a directory"), "{err}");
        let err = f.call("read_file", json!({"path": "note.txt", "extra": 1})).await.unwrap_err();
        assert!(
            err.message().contains("invalid arguments for read_file")
                && err.message().contains("extra")
        );
    }

    #[tokio::test]
    async fn the_owners_files_stay_out_of_other_chats_however_they_are_named() {
        let f = fixture();
        let stranger = ctx(B, false);
        std::os::unix::fs::symlink(f.ws.join("USER.md"), f.room_b.join("sub/link.md")).unwrap();
        for path in ["USER.md", "./MEMORY.md"] {
            let read = f.call_as(&stranger, "read_file", json!({"path": path})).await.unwrap_err();
            assert!(read.message().contains("owner's personal notes"), "{path}: {read}");
        }
        let read = f.call_as(&stranger, "read_file", json!({"path": "sub/link.md"})).await;
        assert!(read.unwrap_err().message().contains("outside this chat's folder"));
        for (tool, args) in [
            ("write_file", json!({"path": "MEMORY.md", "content": "planted"})),
            ("write_file", json!({"path": "USER.md", "content": "planted"})),
            ("edit_file", json!({"path": "USER.md", "old_text": "Paris", "new_text": "Rome"})),
            ("delete_file", json!({"path": "USER.md"})),
        ] {
            let err = f.call_as(&stranger, tool, args).await.unwrap_err();
            assert!(err.message().contains("owner's personal notes"), "{tool}: {err}");
        }
        let listing = f.call_as(&stranger, "list_dir", json!({})).await.unwrap();
        assert!(
            !listing.text().contains("USER.md") && !listing.text().contains("MEMORY.md"),
            "{listing}"
        );
        f.untouched();
        // The owner's chat reads both, rewrites USER.md, and changes MEMORY.md only through
        // the memory tool.
        let owner = ctx(A, true);
        let own = f.call_as(&owner, "read_file", json!({"path": "USER.md"})).await.unwrap();
        assert!(own.text().contains("Alice"));
        let memory = f.call_as(&owner, "read_file", json!({"path": "MEMORY.md"})).await.unwrap();
        assert!(memory.text().contains("bank"));
        let err = f
            .call_as(&owner, "write_file", json!({"path": "MEMORY.md", "content": "x"}))
            .await
            .unwrap_err();
        assert!(err.message().contains("memory tool"), "{err}");
        let listing = f.call_as(&owner, "list_dir", json!({})).await.unwrap();
        assert!(listing.text().contains("USER.md (the owner's)"), "{listing}");
        f.call_as(
            &owner,
            "edit_file",
            json!({"path": "USER.md", "old_text": "Paris",
            "new_text": "Rome"}),
        )
        .await
        .unwrap();
        let user = std::fs::read_to_string(f.ws.join("USER.md")).unwrap();
        assert_eq!(user, "owner: Alice, lives in Rome");
    }
}
