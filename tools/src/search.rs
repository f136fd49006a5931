//! `search_files` and `search_text` over the chat's room, through `nexbot-fsearch` (the
//! implementation the subagent's tools over scratch use too).
//!
//! Why the same confinement as the file tools: a search reads files, so it must never reach
//! what `read_file` may not. Its root is the chat's room ([`crate::rooms`]), so the daemon's
//! files, the operator's and other chats' rooms are not under it at all; the `path` argument
//! passes [`Confinement::existing`] (the same errors as the file tools) and every entry the
//! walk meets is asked [`Confinement::hidden`]. Symlinks are never followed; every search is
//! bounded ([`nexbot_fsearch::Limits`]).

use std::sync::Arc;

use nexbot_fsearch::{Limits, Scope, TextQuery};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::files::{in_room, Confinement};
use crate::rooms::Rooms;
use nexbot_agent::tools::{success, Tool, ToolContext, ToolError, ToolResult, TypedTool};

/// Both search tools over the chats' rooms.
pub fn search_tools(rooms: Arc<Rooms>) -> Vec<Arc<dyn Tool>> {
    vec![Arc::new(SearchFiles(rooms.clone())), Arc::new(SearchText(rooms))]
}

/// Checks the `path` argument as the file tools do, then runs `work` over the chat's room on
/// the blocking pool with the confinement's filter.
async fn search(
    rooms: &Arc<Rooms>,
    ctx: &ToolContext,
    path: Option<String>,
    work: impl FnOnce(&Scope<'_>) -> Result<String, nexbot_fsearch::SearchError> + Send + 'static,
) -> ToolResult {
    in_room(rooms, ctx, move |confinement: &Confinement| {
        let path = path.filter(|p| !p.trim().is_empty() && p.trim() != ".");
        if let Some(raw) = &path {
            let resolved = confinement.existing(raw)?;
            if !resolved.starts_with(confinement.root()) {
                return Err(ToolError::new(format!(
                    "{raw}: a shared file is read with read_file, not searched"
                )));
            }
        }
        let hidden = |resolved: &std::path::Path| confinement.hidden(resolved);
        let scope = Scope::new(confinement.root()).at(path.as_deref()).hiding(&hidden);
        work(&scope).map(success).map_err(|e| ToolError::new(e.to_string()))
    })
    .await
}

#[derive(Debug)]
pub struct SearchFiles(Arc<Rooms>);

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FilesArgs {
    pattern: String,
    #[serde(default)]
    path: Option<String>,
}

impl TypedTool for SearchFiles {
    type Args = FilesArgs;
    const NAME: &'static str = "search_files";
    const DESCRIPTION: &'static str =
        "Find files of this chat's folder by name with a glob: `*.md` matches names at any depth, a \
         pattern with `/` (`notes/**/*.txt`) matches paths relative to `path`. Returns up to \
         200 paths relative to the folder; symlinks are not followed.";
    fn schema() -> Value {
        json!({"type": "object", "properties": {
            "pattern": {"type": "string", "description": "glob, e.g. **/*.md, *.txt, notes/*.md"},
            "path": {"type": "string", "description": "folder to search in, relative to this chat's folder; default: all of it"}},
            "required": ["pattern"]})
    }
    async fn run(&self, args: FilesArgs, ctx: &ToolContext) -> ToolResult {
        search(&self.0, ctx, args.path, move |scope| {
            Ok(nexbot_fsearch::search_files(scope, &args.pattern, &Limits::default())?.render())
        })
        .await
    }
}

#[derive(Debug)]
pub struct SearchText(Arc<Rooms>);

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TextArgs {
    pattern: String,
    #[serde(default)]
    literal: bool,
    /// `ignore_case` is the seed's (LocalTopSH) name for it.
    #[serde(default, alias = "ignore_case")]
    case_insensitive: bool,
    #[serde(default)]
    path: Option<String>,
    #[serde(default)]
    glob: Option<String>,
}

impl TypedTool for SearchText {
    type Args = TextArgs;
    const NAME: &'static str = "search_text";
    const DESCRIPTION: &'static str =
        "Search the contents of this chat's files for a regex (or, with `literal`, the text as \
         it is). Returns up to 100 matching lines as `path:line: text`; binary files are \
         skipped and at most 1 MiB of a file is read.";
    fn schema() -> Value {
        json!({"type": "object", "properties": {
            "pattern": {"type": "string", "description": "regular expression (Rust regex syntax), or plain text with literal"},
            "literal": {"type": "boolean", "description": "search for the pattern as plain text; default false"},
            "case_insensitive": {"type": "boolean", "description": "default false"},
            "path": {"type": "string", "description": "folder or file to search, relative to this chat's folder; default: all of it"},
            "glob": {"type": "string", "description": "only files matching this glob, e.g. *.md"}},
            "required": ["pattern"]})
    }
    async fn run(&self, args: TextArgs, ctx: &ToolContext) -> ToolResult {
        search(&self.0, ctx, args.path, move |scope| {
            let limits = Limits::default();
            let query = TextQuery {
                pattern: &args.pattern,
                literal: args.literal,
                case_insensitive: args.case_insensitive,
                glob: args.glob.as_deref(),
            };
            Ok(nexbot_fsearch::search_text(scope, &query, &limits)?.render(&limits))
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use nexbot_core::ChatRef;

    use super::*;
    use crate::rooms::Keep;

    struct Fixture {
        base: PathBuf,
        tools: Vec<Arc<dyn Tool>>,
    }

    impl Drop for Fixture {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.base);
        }
    }

    /// A data directory with the daemon's files, an operator's backup, the owner's notes and
    /// the operator's files; chat A's room with a note, chat B's room with its own notes and
    /// symlinks planted at A's room and at the data directory. Every file says "canary".
    fn fixture() -> Fixture {
        let base = std::env::temp_dir().join(format!("nxh-search-{}", uuid::Uuid::new_v4()));
        let ws = base.join("data");
        std::fs::create_dir_all(&ws).unwrap();
        let write = |path: PathBuf, text: &str| {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap()
        };
        write(ws.join("nexbot.db"), "canary in the database");
        write(ws.join("nexbot.db-wal"), "canary in the wal");
        write(ws.join("config.toml"), "canary = \"in the config\"");
        write(ws.join("egress-audit.jsonl.1"), "canary in a rotated audit log");
        write(ws.join("backup.db"), "canary in the operator's backup");
        write(ws.join("nexbot.lock"), "canary in the lock");
        write(ws.join("USER.md"), "canary: the owner lives in Paris");
        write(ws.join("MEMORY.md"), "canary: the owner's bank");
        write(ws.join("TOOLS.md"), "canary in the operator's tools");
        let rooms = Arc::new(Rooms::open(&ws, &ChatRef::Telegram(1), &Keep::default()).unwrap());
        let room_a = rooms.confinement(&ChatRef::Telegram(1), true).unwrap().root().to_owned();
        let room_b = rooms.confinement(&ChatRef::Telegram(2), false).unwrap().root().to_owned();
        write(room_a.join("diary.md"), "canary in A's diary");
        write(room_b.join("notes/todo.md"), "canary shared note");
        write(room_b.join("TOOLS.md"), "canary shadowed by the operator's TOOLS.md");
        std::os::unix::fs::symlink(&room_a, room_b.join("to_a")).unwrap();
        std::os::unix::fs::symlink(&ws, room_b.join("to_data")).unwrap();
        Fixture { base, tools: search_tools(rooms) }
    }

    impl Fixture {
        /// A call in chat B; `owner` makes B the owner's chat.
        async fn call(&self, name: &str, args: Value, owner: bool) -> ToolResult {
            let mut ctx = ToolContext::for_tests();
            ctx.owner = owner;
            ctx.chat = ChatRef::Telegram(2);
            self.tools.iter().find(|t| t.name() == name).unwrap().call(args, &ctx).await
        }
    }

    fn output(result: &nexbot_agent::tools::ToolOutput) -> String {
        result.output().as_str().unwrap().to_owned()
    }

    #[tokio::test]
    async fn a_search_never_leaves_the_chats_room() {
        let f = fixture();
        for owner in [false, true] {
            let names =
                output(&f.call("search_files", json!({"pattern": "*"}), owner).await.unwrap());
            let found =
                output(&f.call("search_text", json!({"pattern": "canary"}), owner).await.unwrap());
            assert_eq!(names, "notes/todo.md\n[2 symlinks not followed]", "{owner}");
            assert_eq!(
                found,
                "notes/todo.md:1: canary shared note\n[1 match in 1 file; 1 file searched; 2 \
                 symlinks not followed]"
            );
            // Named as the folder to search: refused with the file tools' words.
            for (path, why) in [
                ("to_a", "outside this chat's folder"),
                ("to_data", "outside this chat's folder"),
                ("to_data/nexbot.db", "outside this chat's folder"),
                ("../telegram_1", "`..`"),
                ("/etc", "absolute"),
                ("nexbot.db", "no such file"),
                ("TOOLS.md", "read with read_file"),
            ] {
                for tool in ["search_files", "search_text"] {
                    let args = json!({"pattern": "*", "path": path});
                    let err = f.call(tool, args, owner).await.unwrap_err().to_string();
                    assert!(err.contains(why), "{tool} {path}: {err}");
                }
            }
        }
    }

    #[tokio::test]
    async fn the_owners_notes_stay_out_of_another_chats_searches() {
        let f = fixture();
        let err = f
            .call("search_text", json!({"pattern": "x", "path": "USER.md"}), false)
            .await
            .unwrap_err();
        assert!(err.to_string().contains("owner's personal notes"), "{err}");
        let found = output(
            &f.call(
                "search_text",
                json!({"pattern": "paris|bank", "case_insensitive": true}),
                false,
            )
            .await
            .unwrap(),
        );
        assert!(found.starts_with("(no matches)"), "{found}");
    }

    #[tokio::test]
    async fn bad_arguments_name_what_was_wrong() {
        let f = fixture();
        let err = f.call("search_text", json!({"pattern": "a("}), true).await.unwrap_err();
        assert!(err.to_string().starts_with("pattern: invalid regex"), "{err}");
        let err = f.call("search_files", json!({"pattern": "[z"}), true).await.unwrap_err();
        assert!(err.to_string().starts_with("pattern: invalid glob"), "{err}");
        let err = f.call("search_files", json!({"pattern": "*", "depth": 2}), true).await;
        assert!(err.unwrap_err().to_string().contains("invalid arguments for search_files"));
        let ok = f
            .call(
                "search_text",
                json!({"pattern": "a(", "literal": true, "ignore_case": true}),
                true,
            )
            .await
            .unwrap();
        assert!(output(&ok).starts_with("(no matches)"), "{ok}");
    }
}
