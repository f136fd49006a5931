//! `search_files` and `search_text` over the chat's workspace, through `nexbot-fsearch` (the
//! implementation the subagent's tools over scratch use too).
//!
//! Why the same confinement as the file tools: a search reads files, so it must never reach
//! what `read_file` may not. The `path` argument passes [`Confinement::existing`] and
//! [`Confinement::check_personal`] (the same errors as the file tools), and every entry the
//! walk meets is asked [`Confinement::hidden`]: the daemon's database, config and logs, and in
//! another person's chat the owner's `USER.md`/`MEMORY.md`, are neither listed nor read.
//! Symlinks are never followed; every search is bounded ([`nexbot_fsearch::Limits`]).

use std::sync::Arc;

use nexbot_fsearch::{Limits, Scope, TextQuery};
use serde::Deserialize;
use serde_json::{json, Value};

use super::files::Confinement;
use super::{success, Tool, ToolContext, ToolError, ToolResult, TypedTool};

/// Both search tools over one confinement.
pub fn search_tools(confinement: Arc<Confinement>) -> Vec<Arc<dyn Tool>> {
    vec![Arc::new(SearchFiles(confinement.clone())), Arc::new(SearchText(confinement))]
}

/// Checks the `path` argument as the file tools do, then runs `work` over the workspace on
/// the blocking pool with the confinement's filter.
async fn search(
    confinement: &Arc<Confinement>,
    path: Option<String>,
    owner: bool,
    work: impl FnOnce(&Scope<'_>) -> Result<String, nexbot_fsearch::SearchError> + Send + 'static,
) -> ToolResult {
    let confinement = confinement.clone();
    tokio::task::spawn_blocking(move || {
        let path = path.filter(|p| !p.trim().is_empty() && p.trim() != ".");
        if let Some(raw) = &path {
            let resolved = confinement.existing(raw)?;
            confinement.check_personal(raw, &resolved, owner)?;
        }
        let hidden = |resolved: &std::path::Path| confinement.hidden(resolved, owner);
        let scope = Scope::new(confinement.root()).at(path.as_deref()).hiding(&hidden);
        work(&scope).map(success).map_err(|e| ToolError::new(e.to_string()))
    })
    .await
    .map_err(|e| ToolError::new(format!("tool failed: {e}")))?
}

#[derive(Debug)]
pub struct SearchFiles(Arc<Confinement>);

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
        "Find workspace files by name with a glob: `*.md` matches names at any depth, a \
         pattern with `/` (`notes/**/*.txt`) matches paths relative to `path`. Returns up to \
         200 paths relative to the workspace; symlinks are not followed.";
    fn schema() -> Value {
        json!({"type": "object", "properties": {
            "pattern": {"type": "string", "description": "glob, e.g. **/*.md, *.txt, notes/*.md"},
            "path": {"type": "string", "description": "folder to search in, relative to the workspace; default: all of it"}},
            "required": ["pattern"]})
    }
    async fn run(&self, args: FilesArgs, ctx: &ToolContext) -> ToolResult {
        search(&self.0, args.path, ctx.owner, move |scope| {
            Ok(nexbot_fsearch::search_files(scope, &args.pattern, &Limits::default())?.render())
        })
        .await
    }
}

#[derive(Debug)]
pub struct SearchText(Arc<Confinement>);

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
        "Search the contents of workspace files for a regex (or, with `literal`, the text as \
         it is). Returns up to 100 matching lines as `path:line: text`; binary files are \
         skipped and at most 1 MiB of a file is read.";
    fn schema() -> Value {
        json!({"type": "object", "properties": {
            "pattern": {"type": "string", "description": "regular expression (Rust regex syntax), or plain text with literal"},
            "literal": {"type": "boolean", "description": "search for the pattern as plain text; default false"},
            "case_insensitive": {"type": "boolean", "description": "default false"},
            "path": {"type": "string", "description": "folder or file to search, relative to the workspace; default: all of it"},
            "glob": {"type": "string", "description": "only files matching this glob, e.g. *.md"}},
            "required": ["pattern"]})
    }
    async fn run(&self, args: TextArgs, ctx: &ToolContext) -> ToolResult {
        search(&self.0, args.path, ctx.owner, move |scope| {
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

    use super::*;

    struct Fixture {
        base: PathBuf,
        tools: Vec<Arc<dyn Tool>>,
    }

    impl Drop for Fixture {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.base);
        }
    }

    /// A workspace with the daemon's files in it (as when the data dir is the workspace), the
    /// owner's notes, a symlink out, and ordinary files; every file says "canary".
    fn fixture() -> Fixture {
        let base = std::env::temp_dir().join(format!("nxh-search-{}", uuid::Uuid::new_v4()));
        let root = base.join("ws");
        let outside = base.join("outside");
        std::fs::create_dir_all(root.join("notes")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        let write = |path: PathBuf, text: &str| std::fs::write(path, text).unwrap();
        write(root.join("nexbot.db"), "canary in the database");
        write(root.join("nexbot.db-wal"), "canary in the wal");
        write(root.join("config.toml"), "canary = \"in the config\"");
        write(root.join("audit.jsonl.1"), "canary in a rotated audit log");
        write(root.join("USER.md"), "canary: the owner lives in Paris");
        write(root.join("MEMORY.md"), "canary: the owner's bank");
        write(root.join("notes/todo.md"), "canary shared note");
        write(outside.join("secret.md"), "canary outside");
        std::os::unix::fs::symlink(&outside, root.join("out")).unwrap();
        let protected = [
            root.join("nexbot.db"),
            root.join("nexbot.db-wal"),
            root.join("config.toml"),
            root.join("audit.jsonl"),
        ];
        let confinement = Confinement::new(&root, &protected, &[]).unwrap();
        Fixture { base, tools: search_tools(Arc::new(confinement)) }
    }

    impl Fixture {
        async fn call(&self, name: &str, args: Value, owner: bool) -> ToolResult {
            let mut ctx = ToolContext::for_tests();
            ctx.owner = owner;
            if !owner {
                ctx.chat = nexbot_core::ChatRef::Telegram(42);
            }
            self.tools.iter().find(|t| t.name() == name).unwrap().call(args, &ctx).await
        }
    }

    fn output(result: &str) -> String {
        let value: Value = serde_json::from_str(result).unwrap();
        assert_eq!(value["success"], true, "{result}");
        value["output"].as_str().unwrap().to_owned()
    }

    #[tokio::test]
    async fn a_protected_file_is_never_listed_or_read_by_either_tool() {
        let f = fixture();
        let names = output(&f.call("search_files", json!({"pattern": "*"}), true).await.unwrap());
        let found =
            output(&f.call("search_text", json!({"pattern": "canary"}), true).await.unwrap());
        for daemon in ["nexbot.db", "config.toml", "audit.jsonl.1", "out/"] {
            assert!(!names.contains(daemon), "{daemon} listed: {names}");
            assert!(!found.contains(daemon), "{daemon} read: {found}");
        }
        for text in ["database", "in the config", "rotated audit", "canary outside", "wal"] {
            assert!(!found.contains(text), "{text}: {found}");
        }
        // Positive control: the owner sees the workspace's own files, notes included.
        for expected in ["USER.md", "MEMORY.md", "notes/todo.md"] {
            assert!(names.contains(expected), "{expected}: {names}");
            assert!(found.contains(expected), "{expected}: {found}");
        }
        assert!(found.contains("notes/todo.md:1: canary shared note"), "{found}");
        // Named directly, or as the folder to search: refused with the file tools' words.
        for (path, why) in [
            ("config.toml", "belongs to the daemon"),
            ("nexbot.db", "belongs to the daemon"),
            ("out", "outside the workspace"),
            ("../outside", "`..`"),
            ("/etc", "absolute"),
        ] {
            for tool in ["search_files", "search_text"] {
                let args = json!({"pattern": "*", "path": path});
                let err = f.call(tool, args, true).await.unwrap_err().to_string();
                assert!(err.contains(why), "{tool} {path}: {err}");
            }
        }
    }

    #[tokio::test]
    async fn the_owners_notes_stay_out_of_another_chats_searches() {
        let f = fixture();
        let names =
            output(&f.call("search_files", json!({"pattern": "*.md"}), false).await.unwrap());
        assert_eq!(names, "notes/todo.md\n[1 symlink not followed]");
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
        let err = f
            .call("search_text", json!({"pattern": "x", "path": "USER.md"}), false)
            .await
            .unwrap_err();
        assert!(err.to_string().contains("owner"), "{err}");
        let mine = output(
            &f.call("search_text", json!({"pattern": "Paris", "path": "USER.md"}), true)
                .await
                .unwrap(),
        );
        assert!(mine.contains("USER.md:1:"), "the owner's own chat reads it: {mine}");
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
