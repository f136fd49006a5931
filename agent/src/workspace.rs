//! The workspace's bootstrap files, which make up the agent's system prompt: their defaults
//! (embedded, so `nexbot init` works from a bare binary and a missing default is a build
//! error), which of them are the operator's, and the prompt assembled from them.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The bootstrap files, in the order they are assembled into the system prompt.
pub const BOOTSTRAP_FILES: [(&str, &str); 6] = [
    ("IDENTITY.md", include_str!("defaults/IDENTITY.md")),
    ("AGENTS.md", include_str!("defaults/AGENTS.md")),
    ("SOUL.md", include_str!("defaults/SOUL.md")),
    ("USER.md", include_str!("defaults/USER.md")),
    ("TOOLS.md", include_str!("defaults/TOOLS.md")),
    ("MEMORY.md", include_str!("defaults/MEMORY.md")),
];

/// The config file's name inside a workspace written by `init`.
pub const CONFIG_FILE: &str = "config.toml";

/// The scheduler's checklist of recurring checks (the operator's file).
pub const HEARTBEAT_FILE: &str = "HEARTBEAT.md";

/// The long-term memory file (the last bootstrap file).
pub const MEMORY_FILE: &str = "MEMORY.md";
/// Who the owner is: like [`MEMORY_FILE`], only in the owner's chat's prompt.
pub const USER_FILE: &str = "USER.md";

/// Files that instruct the agent and are the operator's to change: every chat's file tools may
/// read them by name but never write, edit or delete them (`HEARTBEAT.md` is the scheduler's;
/// `TOOLS.md` is in every chat's prompt, so a chat that could write it would instruct all the
/// others, the owner's included).
pub const OPERATOR_FILES: [&str; 5] =
    ["IDENTITY.md", "AGENTS.md", "SOUL.md", "TOOLS.md", HEARTBEAT_FILE];

/// The bootstrap files' texts as last read, each read again only when its modification time
/// or size changed: a turn stats them instead of reading them all (the operator's edits and
/// the `memory` tool's writes are still seen by the next turn).
#[derive(Debug, Default)]
pub struct BootstrapFiles {
    texts: std::sync::Mutex<std::collections::HashMap<PathBuf, (FileStamp, Arc<str>)>>,
    reads: std::sync::atomic::AtomicU64,
}

type FileStamp = (Option<std::time::SystemTime>, u64);

impl BootstrapFiles {
    /// `path`'s text, `None` when it does not exist.
    pub fn read(&self, path: &Path) -> io::Result<Option<Arc<str>>> {
        let named = |e: io::Error| {
            let name = path.file_name().unwrap_or_default().to_string_lossy().into_owned();
            io::Error::new(e.kind(), format!("reading {name}: {e}"))
        };
        let mut texts = self.texts.lock().unwrap_or_else(|p| p.into_inner());
        let stamp = match std::fs::metadata(path) {
            Ok(meta) => (meta.modified().ok(), meta.len()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                texts.remove(path);
                return Ok(None);
            }
            Err(e) => return Err(named(e)),
        };
        if let Some((seen, text)) = texts.get(path) {
            if *seen == stamp && stamp.0.is_some() {
                return Ok(Some(text.clone()));
            }
        }
        let text: Arc<str> = match std::fs::read_to_string(path) {
            Ok(text) => text.into(),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(named(e)),
        };
        self.reads.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        texts.insert(path.to_owned(), (stamp, text.clone()));
        Ok(Some(text))
    }

    /// How many times a file was read (not served from what was read before).
    pub fn reads(&self) -> u64 {
        self.reads.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// Marks where the context was cut, so the model knows something is missing.
const CUT_MARKER: &str = "\n[... cut: the workspace context is longer than its cap ...]\n";
const MEMORY_CUT_MARKER: &str = "[... older memory cut ...]\n";

/// Builds the system prompt from the bootstrap files in `dir`, in order, within `cap`
/// characters. Missing files are skipped (the operator may delete any of them).
///
/// What is cut when over the cap: MEMORY.md gets whatever the first five files leave and
/// keeps its newest (last) part; if the first five alone exceed the cap, the end of that text
/// is cut (TOOLS, then USER, … go first) and memory is left out.
///
/// `personal` is false in any chat but the owner's: then USER.md and MEMORY.md, which describe
/// the owner, are left out.
///
/// The files are read through `files`, which reads a file again only when its time stamp or
/// size changed since the last turn.
pub fn assemble_context(
    files: &BootstrapFiles,
    dir: &Path,
    cap: usize,
    personal: bool,
) -> io::Result<String> {
    let mut fixed = String::new();
    let mut memory = None;
    for (name, _) in BOOTSTRAP_FILES {
        if !personal && (name == USER_FILE || name == MEMORY_FILE) {
            continue;
        }
        let Some(text) = files.read(&dir.join(name))? else { continue };
        let section = format!("## {name}\n\n{}\n\n", text.trim_end());
        if name == MEMORY_FILE {
            memory = Some((section, text.to_string()));
        } else {
            fixed.push_str(&section);
        }
    }
    let fixed_len = fixed.chars().count();
    if fixed_len > cap {
        let keep = cap.saturating_sub(CUT_MARKER.chars().count());
        let mut cut: String = fixed.chars().take(keep).collect();
        cut.push_str(CUT_MARKER);
        return Ok(cut);
    }
    if let Some((section, text)) = memory {
        let room = cap - fixed_len;
        if section.chars().count() <= room {
            fixed.push_str(&section);
        } else {
            let header = format!("## {MEMORY_FILE}\n\n{MEMORY_CUT_MARKER}");
            let keep = room.saturating_sub(header.chars().count() + 2);
            if keep > 0 {
                let text = text.trim_end();
                let skip = text.chars().count().saturating_sub(keep);
                fixed.push_str(&header);
                fixed.extend(text.chars().skip(skip));
                fixed.push_str("\n\n");
            }
        }
    }
    Ok(fixed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bootstrap_files_are_read_again_only_when_they_change() {
        let dir = tempdir("bootstrap-cache");
        for (name, text) in BOOTSTRAP_FILES {
            std::fs::write(dir.join(name), text).unwrap();
        }
        let files = BootstrapFiles::default();
        let first = assemble_context(&files, &dir, 100_000, true).unwrap();
        let read = files.reads();
        assert_eq!(read, BOOTSTRAP_FILES.len() as u64, "each file read once");
        assert_eq!(assemble_context(&files, &dir, 100_000, true).unwrap(), first);
        assert_eq!(files.reads(), read, "an unchanged file is not read again");
        std::fs::write(dir.join("SOUL.md"), "Be brief, and a little longer now.").unwrap();
        let changed = assemble_context(&files, &dir, 100_000, true).unwrap();
        assert!(changed.contains("a little longer now"), "{changed}");
        assert_eq!(files.reads(), read + 1, "only the changed file is read");
        std::fs::remove_file(dir.join("SOUL.md")).unwrap();
        let gone = assemble_context(&files, &dir, 100_000, true).unwrap();
        assert!(!gone.contains("## SOUL.md"), "a deleted file leaves the prompt");
    }

    fn tempdir(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("nxh-ws-{tag}-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn context_is_in_order() {
        let dir = tempdir("order");
        for (i, (name, _)) in BOOTSTRAP_FILES.iter().enumerate() {
            std::fs::write(dir.join(name), format!("part-{i}")).unwrap();
        }
        let context = assemble_context(&BootstrapFiles::default(), &dir, 100_000, true).unwrap();
        let positions: Vec<usize> =
            (0..6).map(|i| context.find(&format!("part-{i}")).unwrap()).collect();
        assert!(positions.windows(2).all(|w| w[0] < w[1]), "{context}");
        assert!(context.find("## IDENTITY.md").unwrap() < context.find("## MEMORY.md").unwrap());
        // Another person's chat gets neither the owner's USER.md nor MEMORY.md.
        let other = assemble_context(&BootstrapFiles::default(), &dir, 100_000, false).unwrap();
        assert!(other.contains("## IDENTITY.md") && other.contains("## TOOLS.md"), "{other}");
        assert!(!other.contains("USER.md") && !other.contains("MEMORY.md"), "{other}");
        let user = BOOTSTRAP_FILES.iter().position(|(n, _)| *n == USER_FILE).unwrap();
        let memory = BOOTSTRAP_FILES.iter().position(|(n, _)| *n == MEMORY_FILE).unwrap();
        assert!(
            !other.contains(&format!("part-{user}")) && !other.contains(&format!("part-{memory}"))
        );
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn memory_is_cut_first_and_keeps_its_newest_part() {
        let dir = tempdir("memcut");
        std::fs::write(dir.join("IDENTITY.md"), "who").unwrap();
        let memory: String = (0..500).map(|i| format!("fact {i}\n")).collect();
        std::fs::write(dir.join("MEMORY.md"), &memory).unwrap();
        let context = assemble_context(&BootstrapFiles::default(), &dir, 1_000, true).unwrap();
        assert!(context.chars().count() <= 1_000, "{}", context.len());
        assert!(context.contains("who"));
        assert!(context.contains("fact 499"));
        assert!(!context.contains("fact 0\n"));
        assert!(context.contains(MEMORY_CUT_MARKER));
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn oversized_fixed_part_is_cut_at_its_end() {
        let dir = tempdir("fixedcut");
        std::fs::write(dir.join("IDENTITY.md"), "start ").unwrap();
        std::fs::write(dir.join("TOOLS.md"), "é".repeat(5_000)).unwrap();
        std::fs::write(dir.join("MEMORY.md"), "remember").unwrap();
        let context = assemble_context(&BootstrapFiles::default(), &dir, 1_000, true).unwrap();
        assert_eq!(context.chars().count(), 1_000);
        assert!(context.contains("start"));
        assert!(context.ends_with(CUT_MARKER));
        assert!(!context.contains("remember"));
        std::fs::remove_dir_all(dir).unwrap();
    }
}
