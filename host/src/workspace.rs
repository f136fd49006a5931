//! The workspace directory: `nexbot init`, which writes the bootstrap files (their defaults and
//! the prompt built from them are `nexbot-agent`'s [`nexbot_agent::workspace`], re-exported
//! here) and the commented `config.toml`, both embedded in the binary.
//!
//! Why embedded: `nexbot init` must work from a bare binary (no install tree), and a missing
//! default is a build error instead of a surprise at run time.

use std::io;
use std::path::{Path, PathBuf};

pub use nexbot_agent::workspace::*;

/// The commented `config.toml` that documents every key and its default.
pub const CONFIG_TEMPLATE: &str = include_str!("defaults/config.toml");

/// What `init` did with each file.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct InitReport {
    pub written: Vec<PathBuf>,
    /// Existing files left alone (no `--force`).
    pub kept: Vec<PathBuf>,
}

/// Writes the bootstrap files and `config.toml` into `dir` (created if needed). An existing
/// file is kept unless `force`.
pub fn init(dir: &Path, force: bool) -> io::Result<InitReport> {
    std::fs::create_dir_all(dir)?;
    let mut report = InitReport::default();
    let files = BOOTSTRAP_FILES.iter().copied().chain([(CONFIG_FILE, CONFIG_TEMPLATE)]);
    for (name, contents) in files {
        let path = dir.join(name);
        let exists = path.symlink_metadata().is_ok();
        if exists && !force {
            report.kept.push(path);
            continue;
        }
        std::fs::write(&path, contents)?;
        report.written.push(path);
    }
    Ok(report)
}

/// For `serve --init`: when the config file `config` does not exist yet (a fresh data volume),
/// writes the whole workspace into its directory and returns what was written. An existing
/// config means the workspace is the operator's: nothing is touched and `None` is returned,
/// even when bootstrap files were deleted on purpose.
pub fn init_if_missing(config: &Path) -> io::Result<Option<InitReport>> {
    if config.symlink_metadata().is_ok() {
        return Ok(None);
    }
    let dir = match config.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    if config.file_name().is_none_or(|name| name != CONFIG_FILE) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{} is not named {CONFIG_FILE}: init writes {CONFIG_FILE}, so the daemon would \
                 not find it",
                config.display()
            ),
        ));
    }
    init(dir, false).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tempdir(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("nxh-init-{tag}-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn init_writes_everything_then_keeps_existing_files_unless_forced() {
        let dir = tempdir("init");
        let report = init(&dir, false).unwrap();
        assert_eq!(report.written.len(), 7);
        std::fs::write(dir.join("USER.md"), "mine").unwrap();
        let again = init(&dir, false).unwrap();
        assert!(again.written.is_empty());
        assert_eq!(again.kept.len(), 7);
        assert_eq!(std::fs::read_to_string(dir.join("USER.md")).unwrap(), "mine");
        let forced = init(&dir, true).unwrap();
        assert_eq!(forced.written.len(), 7);
        assert_ne!(std::fs::read_to_string(dir.join("USER.md")).unwrap(), "mine");
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn init_if_missing_writes_a_fresh_workspace_once() {
        let dir = tempdir("ifmissing").join("data");
        let config = dir.join(CONFIG_FILE);
        let report = init_if_missing(&config).unwrap().expect("fresh workspace written");
        assert_eq!(report.written.len(), 7);
        assert!(config.is_file() && dir.join("IDENTITY.md").is_file());
        // The operator's workspace afterwards: edits and deletions are kept.
        std::fs::write(&config, "[llm]\nmodel = \"mine\"\n").unwrap();
        std::fs::remove_file(dir.join("SOUL.md")).unwrap();
        assert_eq!(init_if_missing(&config).unwrap(), None);
        assert_eq!(std::fs::read_to_string(&config).unwrap(), "[llm]\nmodel = \"mine\"\n");
        assert!(!dir.join("SOUL.md").exists());
        std::fs::remove_dir_all(dir.parent().unwrap()).unwrap();
    }

    #[test]
    fn init_if_missing_refuses_a_config_name_it_would_not_write() {
        let dir = tempdir("ifmissing-name");
        let err = init_if_missing(&dir.join("nexbot.toml")).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
        assert!(err.to_string().contains("nexbot.toml"), "{err}");
        assert!(std::fs::read_dir(&dir).unwrap().next().is_none(), "nothing written");
        std::fs::remove_dir_all(dir).unwrap();
    }
}
