//! The audit file's hash chain: every line carries `"prev"`, the SHA-256 of the whole line
//! before it (across rotated files, and across restarts), so a line edited, removed, inserted
//! or moved breaks the chain at the line after it, and [`verify`] names that line.
//!
//! Why a chain and not a signature: the daemon's key lives on the same host as the file, so
//! whoever can rewrite the file can re-sign it; a chain whose head the owner has a copy of
//! off the host (what [`verify`] prints as `head`) cannot be rewritten without the copies
//! disagreeing. The last line alone can be changed unseen by the chain; the head shows it.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use serde::Serialize;
use sha2::{Digest, Sha256};

/// The key of the link.
pub const PREV_KEY: &str = "prev";

/// The link of a chain's first line ever (no line before it).
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// The hex SHA-256 of one whole line, without its newline.
pub fn line_hash(line: &[u8]) -> String {
    hex(&Sha256::digest(line))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// `line` (a JSON object, no newline) with `"prev":"<prev>"` as its first key.
pub(crate) fn chained(line: &[u8], prev: &str) -> Vec<u8> {
    let rest = line.strip_prefix(b"{").unwrap_or(line);
    let mut out = Vec::with_capacity(line.len() + 80);
    out.extend_from_slice(format!("{{\"{PREV_KEY}\":\"{prev}\"").as_bytes());
    if rest != b"}" {
        out.push(b',');
    }
    out.extend_from_slice(rest);
    out
}

/// The files of an audit log at `path` keeping `max_files`, oldest first (those that exist).
pub fn files_oldest_first(path: &Path, max_files: usize) -> Vec<PathBuf> {
    let rotated = |n: usize| {
        let mut name = path.as_os_str().to_owned();
        name.push(format!(".{n}"));
        PathBuf::from(name)
    };
    let mut files: Vec<PathBuf> = (1..max_files.max(1)).rev().map(rotated).collect();
    files.push(path.to_owned());
    files.retain(|f| f.exists());
    files
}

/// Where a restarted writer continues: the hash of the newest line of the log at `path`
/// ([`GENESIS`] when there is none).
pub(crate) fn head_of(path: &Path, max_files: usize) -> String {
    for file in files_oldest_first(path, max_files).iter().rev() {
        let Ok(text) = std::fs::read(file) else { continue };
        let last = text.split(|b| *b == b'\n').rfind(|l| !l.is_empty());
        if let Some(last) = last {
            return line_hash(last);
        }
    }
    GENESIS.to_owned()
}

/// A chain that holds: its lines, its files, and its head (the hash of its newest line: what
/// the owner keeps a copy of).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Verified {
    pub lines: u64,
    pub files: usize,
    pub head: String,
    /// Lines before the first linked one (written before the chain existed).
    pub unlinked: u64,
    /// The oldest kept line links to a line no longer kept (rotated away): the chain is
    /// checked from there.
    pub starts_after_rotation: bool,
}

/// The first line that does not fit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, thiserror::Error)]
#[error("{file}:{line}: {reason}")]
pub struct Break {
    pub file: String,
    /// 1-based, within `file`.
    pub line: u64,
    pub reason: String,
}

/// Walks the log at `path` (`max_files` kept) oldest line first and checks every link.
pub fn verify(path: &Path, max_files: usize) -> Result<Verified, Break> {
    let files = files_oldest_first(path, max_files);
    let mut seen = Verified {
        lines: 0,
        files: files.len(),
        head: GENESIS.to_owned(),
        unlinked: 0,
        starts_after_rotation: false,
    };
    // The previous line's hash, and whether any line so far carried a link.
    let mut previous: Option<String> = None;
    let mut linked = false;
    for file in &files {
        let name = file.display().to_string();
        let broken = |line: u64, reason: String| Break { file: name.clone(), line, reason };
        let reader =
            std::fs::File::open(file).map_err(|e| broken(0, format!("cannot read: {e}")))?;
        for (i, line) in BufReader::new(reader).split(b'\n').enumerate() {
            let n = i as u64 + 1;
            let line = line.map_err(|e| broken(n, format!("cannot read: {e}")))?;
            if line.is_empty() {
                continue;
            }
            let prev = link_of(&line).map_err(|why| broken(n, why))?;
            match (prev, &previous) {
                (None, _) if linked => {
                    return Err(broken(n, "has no link, after linked lines: inserted".into()));
                }
                (None, _) => seen.unlinked += 1,
                (Some(prev), None) => {
                    linked = true;
                    seen.starts_after_rotation = prev != GENESIS;
                }
                (Some(prev), Some(expected)) => {
                    linked = true;
                    if &prev != expected {
                        return Err(broken(
                            n,
                            "does not follow the line before it: that line was changed, or \
                             lines between them removed, added or moved"
                                .into(),
                        ));
                    }
                }
            }
            let hash = line_hash(&line);
            previous = Some(hash.clone());
            seen.head = hash;
            seen.lines += 1;
        }
    }
    Ok(seen)
}

/// The link a line carries (`None`: none), or why the line is not an audit line.
fn link_of(line: &[u8]) -> Result<Option<String>, String> {
    let value: serde_json::Value =
        serde_json::from_slice(line).map_err(|e| format!("is not a JSON line ({e})"))?;
    let object = value.as_object().ok_or("is not a JSON object")?;
    match object.get(PREV_KEY) {
        None => Ok(None),
        Some(serde_json::Value::String(prev)) if prev.len() == 64 => Ok(Some(prev.clone())),
        Some(other) => Err(format!("has a malformed link: {other}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_link_is_the_first_key_and_the_line_stays_json() {
        let line = chained(br#"{"kind":"proxy","host":"a"}"#, GENESIS);
        let value: serde_json::Value = serde_json::from_slice(&line).unwrap();
        assert_eq!(value["prev"], GENESIS);
        assert_eq!(value["host"], "a");
        assert_eq!(chained(b"{}", "ab"), br#"{"prev":"ab"}"#);
        assert_eq!(line_hash(b"").len(), 64);
    }
}
