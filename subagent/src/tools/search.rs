//! `search_files` and `search_text` over the scratch directory, through `nexbot-fsearch` (the
//! implementation the host's tools over the workspace use too).
//!
//! The scratch dir is the root: the `path` argument may not leave it, symlinks are never
//! followed, and every search is bounded by [`nexbot_fsearch::Limits`]. The search runs on the
//! blocking pool: it reads files, and the subagent's one-thread runtime must keep answering
//! pings meanwhile.

use std::path::{Path, PathBuf};

use nexbot_fsearch::{Limits, Scope, SearchError, TextQuery};
use serde::Deserialize;

use super::{ToolError, ToolOutput};

#[derive(Debug, Deserialize)]
pub struct FilesArgs {
    pub pattern: String,
    #[serde(default)]
    pub path: Option<String>,
}

#[derive(Debug, Deserialize)]
pub struct TextArgs {
    pub pattern: String,
    #[serde(default)]
    pub path: Option<String>,
    #[serde(default)]
    pub glob: Option<String>,
    #[serde(default)]
    pub literal: bool,
    /// `ignore_case` is the seed's (LocalTopSH) name for it.
    #[serde(default, alias = "ignore_case")]
    pub case_insensitive: bool,
}

fn tool_error(err: SearchError) -> ToolError {
    match err {
        SearchError::Refused { .. } => ToolError::Refused(err.to_string()),
        SearchError::NotFound { .. } | SearchError::Root { .. } => {
            ToolError::Failed(err.to_string())
        }
        SearchError::Empty { .. } | SearchError::Glob { .. } | SearchError::Regex { .. } => {
            ToolError::Invalid(err.to_string())
        }
    }
}

/// Runs `work` over the scratch dir on the blocking pool.
async fn blocking<T: Send + 'static>(
    scratch: &Path,
    work: impl FnOnce(&Path) -> Result<T, SearchError> + Send + 'static,
) -> Result<T, ToolError> {
    let root: PathBuf = scratch.to_path_buf();
    tokio::task::spawn_blocking(move || work(&root))
        .await
        .map_err(|e| ToolError::Failed(format!("the search failed: {e}")))?
        .map_err(tool_error)
}

pub async fn search_files(scratch: &Path, args: FilesArgs) -> Result<ToolOutput, ToolError> {
    let found = blocking(scratch, move |root| {
        let scope = Scope::new(root).at(args.path.as_deref());
        nexbot_fsearch::search_files(&scope, &args.pattern, &Limits::default())
    })
    .await?;
    Ok(ToolOutput::plain(found.render()))
}

pub async fn search_text(scratch: &Path, args: TextArgs) -> Result<ToolOutput, ToolError> {
    let source = format!("search_text {}", args.pattern.chars().take(80).collect::<String>());
    let limits = Limits::default();
    let rendered = blocking(scratch, move |root| {
        let scope = Scope::new(root).at(args.path.as_deref());
        let query = TextQuery {
            pattern: &args.pattern,
            literal: args.literal,
            case_insensitive: args.case_insensitive,
            glob: args.glob.as_deref(),
        };
        Ok(nexbot_fsearch::search_text(&scope, &query, &limits)?.render(&limits))
    })
    .await?;
    // File contents are outside text: wrapped as data for the model.
    Ok(ToolOutput::external(source, rendered))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("nxs-search-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("notes")).unwrap();
        std::fs::write(dir.join("notes/a.md"), "alpha\nthe Needle here\n").unwrap();
        std::fs::write(dir.join("b.txt"), "needle (again)\n").unwrap();
        dir
    }

    #[tokio::test]
    async fn both_tools_search_the_scratch_dir() {
        let root = scratch("ok");
        let args = FilesArgs { pattern: "*.md".into(), path: None };
        assert_eq!(search_files(&root, args).await.unwrap().text, "notes/a.md");
        let args: TextArgs = serde_json::from_value(
            serde_json::json!({"pattern": "needle (", "literal": true, "ignore_case": true}),
        )
        .unwrap();
        let out = search_text(&root, args).await.unwrap();
        assert!(out.text.starts_with("b.txt:1: needle (again)\n"), "{}", out.text);
        assert!(out.source.as_deref().is_some_and(|s| s.starts_with("search_text")), "external");
        let args: TextArgs = serde_json::from_value(
            serde_json::json!({"pattern": "needle", "case_insensitive": true, "path": "notes"}),
        )
        .unwrap();
        let out = search_text(&root, args).await.unwrap();
        assert!(out.text.starts_with("notes/a.md:2: the Needle here\n"), "{}", out.text);
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[tokio::test]
    async fn nothing_outside_scratch_is_reached() {
        let root = scratch("out");
        std::os::unix::fs::symlink("/etc", root.join("etc-link")).unwrap();
        for path in ["..", "/etc", "etc-link", "notes/../../x"] {
            let args = FilesArgs { pattern: "*".into(), path: Some(path.into()) };
            let err = search_files(&root, args).await.unwrap_err();
            assert!(matches!(err, ToolError::Refused(_)), "{path}: {err}");
            let args = TextArgs {
                pattern: "root".into(),
                path: Some(path.into()),
                glob: None,
                literal: false,
                case_insensitive: false,
            };
            assert!(matches!(search_text(&root, args).await, Err(ToolError::Refused(_))), "{path}");
        }
        // From the root, the link is passed by: /etc/passwd's "root" is never found.
        let args = TextArgs {
            pattern: "root:".into(),
            path: None,
            glob: None,
            literal: true,
            case_insensitive: false,
        };
        let out = search_text(&root, args).await.unwrap();
        assert!(out.text.starts_with("(no matches)"), "{}", out.text);
        assert!(out.text.contains("1 symlink not followed"), "{}", out.text);
        let bad = FilesArgs { pattern: "[".into(), path: None };
        assert!(matches!(search_files(&root, bad).await, Err(ToolError::Invalid(_))));
        std::fs::remove_dir_all(&root).unwrap();
    }
}
