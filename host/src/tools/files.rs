//! Workspace file tools — `read_file`, `write_file`, `edit_file`, `list_dir`, `delete_file` —
//! and the confinement they all share.
//!
//! Why the confinement is strict: the model's arguments are untrusted input. Every path must
//! be relative, must not contain `..`, and after resolving symlinks (canonicalization of the
//! path, or of its deepest existing ancestor for a new file) must still lie inside the
//! canonical workspace root. The daemon's own files (config, database) are off limits too.

use std::io;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;
use serde_json::{json, Value};

use super::{success, Tool, ToolContext, ToolError, ToolResult, TypedTool};

/// Largest text `read_file` returns; longer files are cut with a marker.
pub const MAX_READ_CHARS: usize = 200_000;
/// Largest content `write_file`/`edit_file` accept.
pub const MAX_WRITE_BYTES: usize = 4 * 1024 * 1024;

/// The confined root and the files inside it the model may not touch.
#[derive(Debug)]
pub struct Confinement {
    root: PathBuf,
    protected: Vec<PathBuf>,
    read_only: Vec<PathBuf>,
}

/// Absolute `paths` (which may not exist yet) with their folder canonicalized, as resolved
/// paths are compared.
fn canonical_names(paths: &[PathBuf]) -> Vec<PathBuf> {
    paths
        .iter()
        .filter_map(|p| {
            let parent = p.parent()?.canonicalize().ok()?;
            Some(parent.join(p.file_name()?))
        })
        .collect()
}

impl Confinement {
    /// `root` must exist. `protected` paths (absolute; may not exist yet) are refused, and so
    /// is every file named like one of them plus a `.` suffix (rotated logs: `audit.jsonl.1`).
    /// `read_only` paths may be read but not written, edited or deleted.
    pub fn new(root: &Path, protected: &[PathBuf], read_only: &[PathBuf]) -> io::Result<Self> {
        let root = root.canonicalize()?;
        Ok(Self {
            root,
            protected: canonical_names(protected),
            read_only: canonical_names(read_only),
        })
    }

    fn is_protected(&self, resolved: &Path) -> bool {
        self.protected.iter().any(|p| {
            if p == resolved {
                return true;
            }
            let (Some(name), Some(rotated)) = (p.file_name(), resolved.file_name()) else {
                return false;
            };
            let prefix = format!("{}.", name.to_string_lossy());
            p.parent() == resolved.parent() && rotated.to_string_lossy().starts_with(&prefix)
        })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Whether a search must pass `resolved` by (neither list nor read it): the daemon's files,
    /// and the owner's personal files in a chat that is not the owner's. The same rules as
    /// [`Self::existing`] and [`Self::check_personal`], asked of every entry a walk meets.
    pub fn hidden(&self, resolved: &Path, owner: bool) -> bool {
        self.is_protected(resolved) || self.check_personal("", resolved, owner).is_err()
    }

    /// Refuses `resolved` (a resolved path) when it is one of the owner's files (`USER.md`,
    /// `MEMORY.md`) and the chat is not the owner's: one person's facts never reach another's
    /// chat, whichever tool or path spelling asks.
    pub fn check_personal(&self, raw: &str, resolved: &Path, owner: bool) -> Result<(), ToolError> {
        let personal = [crate::workspace::USER_FILE, crate::workspace::MEMORY_FILE]
            .iter()
            .any(|name| resolved == self.root.join(name));
        if personal && !owner {
            return Err(ToolError::new(format!(
                "{raw}: refused, it holds the owner's personal notes, which only the owner's \
                 private chat may use"
            )));
        }
        Ok(())
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
                        "{raw}: absolute paths are refused; use a path relative to the workspace"
                    )))
                }
                Component::ParentDir => {
                    return Err(ToolError::new(format!("{raw}: `..` is refused in paths")))
                }
                Component::CurDir | Component::Normal(_) => {}
            }
        }
        Ok(path)
    }

    fn inside(&self, raw: &str, resolved: PathBuf) -> Result<PathBuf, ToolError> {
        if !resolved.starts_with(&self.root) {
            return Err(ToolError::new(format!(
                "{raw}: refused, it leads outside the workspace (through a symlink)"
            )));
        }
        if self.is_protected(&resolved) {
            return Err(ToolError::new(format!("{raw}: refused, this file belongs to the daemon")));
        }
        Ok(resolved)
    }

    fn not_read_only(&self, raw: &str, resolved: PathBuf) -> Result<PathBuf, ToolError> {
        if self.read_only.contains(&resolved) {
            return Err(ToolError::new(format!(
                "{raw}: refused, the agent may read this file but not change it (IDENTITY.md, \
                 AGENTS.md, SOUL.md and HEARTBEAT.md are the operator's; MEMORY.md changes only \
                 through the memory tool)"
            )));
        }
        Ok(resolved)
    }

    /// An existing path, resolved and checked, for reading.
    pub fn existing(&self, raw: &str) -> Result<PathBuf, ToolError> {
        self.resolve(raw, true)
    }

    /// An existing path the agent may change (edit, delete).
    pub fn changeable(&self, raw: &str) -> Result<PathBuf, ToolError> {
        self.not_read_only(raw, self.resolve(raw, true)?)
    }

    /// A path that may not exist yet (for writing).
    pub fn writable(&self, raw: &str) -> Result<PathBuf, ToolError> {
        self.not_read_only(raw, self.resolve(raw, false)?)
    }

    /// The deepest existing ancestor of the path (the path itself when it exists) is
    /// canonicalized and checked; the missing rest, which cannot be a symlink because it does
    /// not exist, is appended. So a path through a symlink that leads out is refused whether
    /// or not its end exists.
    fn resolve(&self, raw: &str, must_exist: bool) -> Result<PathBuf, ToolError> {
        let rel = Self::check_relative(raw)?;
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
        let resolved = self.inside(raw, resolved)?;
        if must_exist && !missing.is_empty() {
            return Err(ToolError::new(format!("{raw}: no such file or directory")));
        }
        Ok(resolved)
    }
}

/// Runs a file tool's work on the blocking pool, over the shared confinement.
async fn in_workspace(
    confinement: &Arc<Confinement>,
    work: impl FnOnce(&Confinement) -> ToolResult + Send + 'static,
) -> ToolResult {
    let confinement = confinement.clone();
    tokio::task::spawn_blocking(move || work(&confinement))
        .await
        .map_err(|e| ToolError::new(format!("tool failed: {e}")))?
}

fn io_error(raw: &str, e: io::Error) -> ToolError {
    ToolError::new(format!("{raw}: {e}"))
}

/// All five file tools over one confinement.
pub fn file_tools(confinement: Arc<Confinement>) -> Vec<Arc<dyn Tool>> {
    vec![
        Arc::new(ReadFile(confinement.clone())),
        Arc::new(WriteFile(confinement.clone())),
        Arc::new(EditFile(confinement.clone())),
        Arc::new(ListDir(confinement.clone())),
        Arc::new(DeleteFile(confinement)),
    ]
}

#[derive(Debug)]
pub struct ReadFile(Arc<Confinement>);

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
        "Read a UTF-8 text file of the workspace. `path` is relative to the workspace.";
    fn schema() -> Value {
        path_schema()
    }
    async fn run(&self, args: PathArgs, ctx: &ToolContext) -> ToolResult {
        let owner = ctx.owner;
        in_workspace(&self.0, move |confinement| {
            let path = confinement.existing(&args.path)?;
            confinement.check_personal(&args.path, &path, owner)?;
            if path.is_dir() {
                return Err(ToolError::new(format!("{}: is a directory", args.path)));
            }
            let bytes = std::fs::read(&path).map_err(|e| io_error(&args.path, e))?;
            let text = String::from_utf8(bytes)
                .map_err(|_| ToolError::new(format!("{}: not a UTF-8 text file", args.path)))?;
            if text.chars().count() > MAX_READ_CHARS {
                let cut: String = text.chars().take(MAX_READ_CHARS).collect();
                return Ok(success(format!("{cut}\n[TRUNCATED]")));
            }
            Ok(success(text))
        })
        .await
    }
}

#[derive(Debug)]
pub struct WriteFile(Arc<Confinement>);

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WriteArgs {
    path: String,
    content: String,
}

impl TypedTool for WriteFile {
    type Args = WriteArgs;
    const NAME: &'static str = "write_file";
    const DESCRIPTION: &'static str =
        "Create or overwrite a text file in the workspace (parent directories are created).";
    fn schema() -> Value {
        json!({"type": "object", "properties": {
            "path": {"type": "string"}, "content": {"type": "string"}},
            "required": ["path", "content"]})
    }
    async fn run(&self, args: WriteArgs, ctx: &ToolContext) -> ToolResult {
        let owner = ctx.owner;
        if args.content.len() > MAX_WRITE_BYTES {
            return Err(ToolError::new(format!("content exceeds {MAX_WRITE_BYTES} bytes")));
        }
        in_workspace(&self.0, move |confinement| {
            let path = confinement.writable(&args.path)?;
            confinement.check_personal(&args.path, &path, owner)?;
            if path.is_dir() {
                return Err(ToolError::new(format!("{}: is a directory", args.path)));
            }
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent).map_err(|e| io_error(&args.path, e))?;
            }
            std::fs::write(&path, &args.content).map_err(|e| io_error(&args.path, e))?;
            Ok(success(format!("wrote {} bytes to {}", args.content.len(), args.path)))
        })
        .await
    }
}

#[derive(Debug)]
pub struct EditFile(Arc<Confinement>);

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
        "Replace `old_text` with `new_text` in a workspace file. `old_text` must occur exactly \
         once unless `replace_all` is true.";
    fn schema() -> Value {
        json!({"type": "object", "properties": {
            "path": {"type": "string"}, "old_text": {"type": "string"},
            "new_text": {"type": "string"}, "replace_all": {"type": "boolean"}},
            "required": ["path", "old_text", "new_text"]})
    }
    async fn run(&self, args: EditArgs, ctx: &ToolContext) -> ToolResult {
        let owner = ctx.owner;
        if args.old_text.is_empty() {
            return Err(ToolError::new("old_text is empty"));
        }
        in_workspace(&self.0, move |confinement| {
            let path = confinement.changeable(&args.path)?;
            confinement.check_personal(&args.path, &path, owner)?;
            let text = std::fs::read_to_string(&path).map_err(|e| io_error(&args.path, e))?;
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
            std::fs::write(&path, edited).map_err(|e| io_error(&args.path, e))?;
            Ok(success(format!("replaced {count} occurrence(s) in {}", args.path)))
        })
        .await
    }
}

#[derive(Debug)]
pub struct ListDir(Arc<Confinement>);

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
    const DESCRIPTION: &'static str = "List a workspace directory (default: the workspace root).";
    fn schema() -> Value {
        json!({"type": "object", "properties": {"path": {"type": "string"}}})
    }
    async fn run(&self, args: ListArgs, _: &ToolContext) -> ToolResult {
        in_workspace(&self.0, move |confinement| {
            let path = confinement.existing(&args.path)?;
            let entries = std::fs::read_dir(&path).map_err(|e| io_error(&args.path, e))?;
            let mut lines = Vec::new();
            for entry in entries {
                let entry = entry.map_err(|e| io_error(&args.path, e))?;
                let name = entry.file_name().to_string_lossy().into_owned();
                let meta = entry.path().symlink_metadata().map_err(|e| io_error(&name, e))?;
                lines.push(if meta.file_type().is_symlink() {
                    format!("{name} (symlink)")
                } else if meta.is_dir() {
                    format!("{name}/")
                } else {
                    format!("{name} ({} bytes)", meta.len())
                });
            }
            lines.sort();
            Ok(success(lines.join("\n")))
        })
        .await
    }
}

#[derive(Debug)]
pub struct DeleteFile(Arc<Confinement>);

impl TypedTool for DeleteFile {
    type Args = PathArgs;
    const NAME: &'static str = "delete_file";
    const DESCRIPTION: &'static str = "Delete a file of the workspace (not a directory).";
    fn schema() -> Value {
        path_schema()
    }
    async fn run(&self, args: PathArgs, ctx: &ToolContext) -> ToolResult {
        let owner = ctx.owner;
        in_workspace(&self.0, move |confinement| {
            // Resolving checks where a symlink leads; the link itself is what is removed.
            let resolved = confinement.changeable(&args.path)?;
            confinement.check_personal(&args.path, &resolved, owner)?;
            if resolved.is_dir() {
                return Err(ToolError::new(format!("{}: is a directory", args.path)));
            }
            let link = confinement.root().join(&args.path);
            std::fs::remove_file(&link).map_err(|e| io_error(&args.path, e))?;
            Ok(success(format!("deleted {}", args.path)))
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fixture {
        base: PathBuf,
        root: PathBuf,
        outside: PathBuf,
        tools: Vec<Arc<dyn Tool>>,
        ctx: ToolContext,
    }

    impl Drop for Fixture {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.base);
        }
    }

    fn fixture() -> Fixture {
        let base = std::env::temp_dir().join(format!("nxh-files-{}", uuid::Uuid::new_v4()));
        let root = base.join("ws");
        let outside = base.join("outside");
        std::fs::create_dir_all(root.join("sub")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("secret.txt"), "outside-secret").unwrap();
        std::fs::write(root.join("note.txt"), "hello world").unwrap();
        std::fs::write(root.join("config.toml"), "[llm]").unwrap();
        std::os::unix::fs::symlink(&outside, root.join("escape_dir")).unwrap();
        std::os::unix::fs::symlink(outside.join("secret.txt"), root.join("escape_file")).unwrap();
        std::os::unix::fs::symlink(root.join("note.txt"), root.join("inner_link")).unwrap();
        std::os::unix::fs::symlink(outside.join("gone"), root.join("dangling")).unwrap();
        std::fs::write(root.join("IDENTITY.md"), "I am Nexbot").unwrap();
        std::fs::write(root.join("audit.jsonl.2"), "old audit").unwrap();
        std::os::unix::fs::symlink(root.join("IDENTITY.md"), root.join("identity_link")).unwrap();
        let confinement = Confinement::new(
            &root,
            &[root.join("config.toml"), root.join("audit.jsonl")],
            &[root.join("IDENTITY.md")],
        )
        .unwrap();
        let ctx = ToolContext::for_tests();
        Fixture { base, root, outside, tools: file_tools(Arc::new(confinement)), ctx }
    }

    impl Fixture {
        async fn call(&self, name: &str, args: Value) -> ToolResult {
            let tool = self.tools.iter().find(|t| t.name() == name).unwrap();
            tool.call(args, &self.ctx).await
        }
    }

    /// Arguments for `tool` aimed at `path`.
    fn args_for(tool: &str, path: &str) -> Value {
        match tool {
            "write_file" => json!({"path": path, "content": "pwned"}),
            "edit_file" => json!({"path": path, "old_text": "outside", "new_text": "pwned"}),
            _ => json!({"path": path}),
        }
    }

    const TOOLS: [&str; 5] = ["read_file", "write_file", "edit_file", "list_dir", "delete_file"];

    #[tokio::test]
    async fn the_operators_files_are_read_only_and_rotated_daemon_files_off_limits() {
        let f = fixture();
        assert_eq!(
            f.call("read_file", json!({"path": "IDENTITY.md"})).await.unwrap(),
            success("I am Nexbot")
        );
        for tool in ["write_file", "edit_file", "delete_file"] {
            for path in ["IDENTITY.md", "./IDENTITY.md", "sub/../IDENTITY.md", "identity_link"] {
                let args = match tool {
                    "edit_file" => json!({"path": path, "old_text": "Nexbot", "new_text": "evil"}),
                    _ => args_for(tool, path),
                };
                let err = f.call(tool, args).await.expect_err(&format!("{tool} changed {path}"));
                assert!(
                    err.0.contains("`..`")
                        || err.0.contains("may read this file but not change it"),
                    "{tool} {path}: {err}"
                );
            }
        }
        assert_eq!(std::fs::read_to_string(f.root.join("IDENTITY.md")).unwrap(), "I am Nexbot");
        for tool in TOOLS {
            for path in ["audit.jsonl", "audit.jsonl.2", "audit.jsonl.9"] {
                let err =
                    f.call(tool, args_for(tool, path)).await.expect_err(&format!("{tool} {path}"));
                assert!(err.0.contains("belongs to the daemon"), "{tool} {path}: {err}");
            }
        }
        // A name that only starts like a daemon file is the agent's.
        f.call("write_file", json!({"path": "audit.jsonl-notes", "content": "x"})).await.unwrap();
    }

    #[tokio::test]
    async fn every_tool_refuses_traversal_absolute_paths_and_symlink_escapes() {
        let f = fixture();
        let absolute = f.outside.join("secret.txt").display().to_string();
        let cases = [
            ("../outside/secret.txt", "`..`"),
            ("sub/../../outside/secret.txt", "`..`"),
            ("..", "`..`"),
            (absolute.as_str(), "absolute"),
            ("/etc/passwd", "absolute"),
            ("escape_file", "outside the workspace"),
            ("escape_dir/secret.txt", "outside the workspace"),
            ("escape_dir/new.txt", "outside the workspace"),
            ("dangling/x.txt", "dangling symlink"),
            ("config.toml", "belongs to the daemon"),
            ("", "empty"),
        ];
        for tool in TOOLS {
            for (path, why) in cases {
                let err = f
                    .call(tool, args_for(tool, path))
                    .await
                    .expect_err(&format!("{tool} accepted {path:?}"));
                assert!(err.0.contains(why), "{tool} {path:?}: {err}");
            }
        }
        assert_eq!(
            std::fs::read_to_string(f.outside.join("secret.txt")).unwrap(),
            "outside-secret"
        );
        assert!(!f.outside.join("new.txt").exists());
        assert!(f.root.join("escape_file").symlink_metadata().is_ok(), "the link was deleted");
        assert_eq!(std::fs::read_to_string(f.root.join("config.toml")).unwrap(), "[llm]");
    }

    #[tokio::test]
    async fn tools_work_inside_the_workspace() {
        let f = fixture();
        let out = f.call("read_file", json!({"path": "note.txt"})).await.unwrap();
        assert_eq!(out, success("hello world"));
        let out = f.call("read_file", json!({"path": "./inner_link"})).await.unwrap();
        assert_eq!(out, success("hello world"));
        f.call("write_file", json!({"path": "a/b/c.txt", "content": "x y x"})).await.unwrap();
        assert_eq!(std::fs::read_to_string(f.root.join("a/b/c.txt")).unwrap(), "x y x");
        let err = f
            .call("edit_file", json!({"path": "a/b/c.txt", "old_text": "x", "new_text": "z"}))
            .await
            .unwrap_err();
        assert!(err.0.contains("occurs 2 times"), "{err}");
        f.call(
            "edit_file",
            json!({"path": "a/b/c.txt", "old_text": "x", "new_text": "z", "replace_all": true}),
        )
        .await
        .unwrap();
        assert_eq!(std::fs::read_to_string(f.root.join("a/b/c.txt")).unwrap(), "z y z");
        let listing = f.call("list_dir", json!({})).await.unwrap();
        for expected in ["a/", "note.txt (11 bytes)", "escape_dir (symlink)", "sub/"] {
            assert!(listing.contains(expected), "{listing}");
        }
        f.call("delete_file", json!({"path": "a/b/c.txt"})).await.unwrap();
        assert!(!f.root.join("a/b/c.txt").exists());
        let err = f.call("delete_file", json!({"path": "sub"})).await.unwrap_err();
        assert!(err.0.contains("is a directory"), "{err}");
        let err = f.call("read_file", json!({"path": "note.txt", "extra": 1})).await.unwrap_err();
        assert!(err.0.contains("invalid arguments for read_file") && err.0.contains("extra"));
    }

    #[tokio::test]
    async fn the_owners_files_stay_out_of_other_chats_however_they_are_named() {
        let dir = std::env::temp_dir().join(format!("nxh-personal-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        std::fs::write(dir.join("USER.md"), "owner: Alice, lives in Paris").unwrap();
        std::fs::write(dir.join("MEMORY.md"), "- Alice's bank is X").unwrap();
        std::fs::write(dir.join("notes.md"), "shared").unwrap();
        std::os::unix::fs::symlink(dir.join("USER.md"), dir.join("sub/link.md")).unwrap();
        let tools = file_tools(Arc::new(Confinement::new(&dir, &[], &[]).unwrap()));
        let tool = |name: &str| tools.iter().find(|t| t.name() == name).unwrap().clone();
        let mut stranger = ToolContext::for_tests();
        stranger.chat = nexbot_core::ChatRef::Telegram(42);
        stranger.owner = false;
        for path in ["USER.md", "./MEMORY.md", "sub/link.md"] {
            let read = tool("read_file").call(json!({"path": path}), &stranger).await.unwrap_err();
            assert!(read.to_string().contains("owner"), "{path}: {read}");
        }
        let write = json!({"path": "MEMORY.md", "content": "planted"});
        assert!(tool("write_file").call(write, &stranger).await.is_err());
        let edit = json!({"path": "USER.md", "old_text": "Paris", "new_text": "Rome"});
        assert!(tool("edit_file").call(edit, &stranger).await.is_err());
        assert!(tool("delete_file").call(json!({"path": "USER.md"}), &stranger).await.is_err());
        assert_eq!(
            std::fs::read_to_string(dir.join("USER.md")).unwrap(),
            "owner: Alice, lives in Paris"
        );
        // Other files are shared, and the owner reaches everything.
        let shared = tool("read_file").call(json!({"path": "notes.md"}), &stranger).await.unwrap();
        assert!(shared.contains("shared"));
        let owner = ToolContext::for_tests();
        let own = tool("read_file").call(json!({"path": "USER.md"}), &owner).await.unwrap();
        assert!(own.contains("Alice"));
        let _ = std::fs::remove_dir_all(dir);
    }
}
