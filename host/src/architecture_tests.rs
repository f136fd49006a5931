//! An invariant of the crate's structure that the compiler cannot see yet (ARCHITECTURE.md,
//! "Invariants"): the host's tools reach chats only through `Channel`. The agent's loop is in
//! `nexbot-agent`, which links no channel; when the tools move into a crate of their own, this
//! scan becomes that crate's dependency list. Starting a process is refused by the clippy
//! config of this crate and of `nexbot-agent` (`clippy.toml`), not by a scan.

use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read the source folder") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Lines of the sources under `folders` (relative to `host/src`) that contain any of `needles`,
/// outside comments.
fn offending(folders: &[&str], needles: &[&str]) -> Vec<String> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    for folder in folders {
        let path = src.join(folder);
        if path.is_dir() {
            rust_files(&path, &mut files);
        } else {
            files.push(path.with_extension("rs"));
        }
    }
    assert!(!files.is_empty(), "no sources found under {folders:?}");
    let mut found = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).expect("read a source file");
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            if let Some(needle) = needles.iter().find(|needle| code.contains(*needle)) {
                found.push(format!("{}:{}: uses {needle}", file.display(), n + 1));
            }
        }
    }
    found
}

#[test]
fn the_host_tools_know_no_channel() {
    let found = offending(
        &["tools"],
        &[
            "crate::channels",
            "crate::bus",
            "crate::app",
            "crate::commands",
            "teloxide",
            "nexbot_telegram",
        ],
    );
    assert!(
        found.is_empty(),
        "the host's tools reach chats only through Channel:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_scan_finds_what_it_looks_for() {
    // Positive control: the scanner sees imports where they are (the bus uses the router).
    assert!(!offending(&["bus"], &["crate::channels"]).is_empty());
}
