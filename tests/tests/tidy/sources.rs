//! The product's Rust sources as the tidy scans see them: every `.rs` file under a workspace
//! crate's `src/` but the files of its test modules, and of each file every line but those of
//! its test modules (`#[cfg(test)]`, maybe more attributes, then `mod name {` up to its closing
//! brace). A `#[cfg(test)]` item that is not a module, and whatever follows a test module, is
//! product code and scanned.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Rust files under `dir`, recursively, in a stable order.
pub fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    let mut paths: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
    paths.sort();
    for path in paths {
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// A test module's opening: the index of its `#[cfg(test)]` line, the line of its `mod`, and
/// its name, with whether it is inline (`mod name {`) or a file of its own (`mod name;`).
#[derive(Debug)]
struct TestModule<'a> {
    attribute: usize,
    item: usize,
    name: &'a str,
    inline: bool,
}

/// The test modules a file declares, at any depth.
fn test_modules<'a>(lines: &[&'a str]) -> Vec<TestModule<'a>> {
    let mut found = Vec::new();
    for (at, line) in lines.iter().enumerate() {
        if line.trim() != "#[cfg(test)]" {
            continue;
        }
        let Some(item) = (at + 1..lines.len()).find(|&i| !lines[i].trim().starts_with("#[")) else {
            continue;
        };
        let text = lines[item].trim();
        let text = text.trim_start_matches("pub(crate) ").trim_start_matches("pub ");
        let Some(rest) = text.strip_prefix("mod ") else { continue };
        let (name, inline) = match (rest.strip_suffix('{'), rest.strip_suffix(';')) {
            (Some(name), _) => (name.trim(), true),
            (_, Some(name)) => (name.trim(), false),
            _ => continue,
        };
        found.push(TestModule { attribute: at, item, name, inline });
    }
    found
}

fn is_ident(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// The byte offset just past the `}` that closes the first `{` at or after `from`: braces in
/// comments, string literals (raw ones too) and char literals not counted.
fn block_end(text: &str, from: usize) -> Option<usize> {
    let b = text.as_bytes();
    let mut depth = 0usize;
    let mut i = from;
    while i < b.len() {
        match b[i] {
            b'/' if b.get(i + 1) == Some(&b'/') => {
                i = text[i..].find('\n').map_or(b.len(), |n| i + n);
                continue;
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                let mut nested = 0usize;
                while i < b.len() {
                    if b[i..].starts_with(b"/*") {
                        nested += 1;
                        i += 2;
                    } else if b[i..].starts_with(b"*/") {
                        nested -= 1;
                        i += 2;
                        if nested == 0 {
                            break;
                        }
                    } else {
                        i += 1;
                    }
                }
                continue;
            }
            b'r' if i == 0
                || !is_ident(b[i - 1])
                || (b[i - 1] == b'b' && (i < 2 || !is_ident(b[i - 2]))) =>
            {
                let hashes = b[i + 1..].iter().take_while(|&&c| c == b'#').count();
                if b.get(i + 1 + hashes) == Some(&b'"') {
                    let close = format!("\"{}", "#".repeat(hashes));
                    let body = i + 2 + hashes;
                    i = text[body..].find(&close).map_or(b.len(), |n| body + n + close.len());
                    continue;
                }
            }
            b'"' => {
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
            }
            b'\'' => {
                // A char literal ('{', '\'', '\u{7b}') or a lifetime ('a).
                if b.get(i + 1) == Some(&b'\\') {
                    i = text[i + 3..].find('\'').map_or(b.len(), |n| i + 3 + n);
                } else if let Some(c) = text[i + 1..].chars().next() {
                    if b.get(i + 1 + c.len_utf8()) == Some(&b'\'') {
                        i += 1 + c.len_utf8();
                    }
                }
            }
            b'{' => depth += 1,
            b'}' => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return Some(i + 1);
                }
            }
            _ => {}
        }
        i += 1;
    }
    None
}

/// A source file's product lines with their numbers (from 1): every line but those of its
/// inline test modules, from the `#[cfg(test)]` to the module's closing brace.
pub fn product_lines(text: &str) -> Vec<(usize, &str)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut starts = Vec::with_capacity(lines.len());
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        starts.push(offset);
        offset += line.len();
    }
    let mut test_lines = BTreeSet::new();
    for module in test_modules(&lines).into_iter().filter(|m| m.inline) {
        let end = block_end(text, starts[module.item]).unwrap_or(text.len());
        let last = starts.partition_point(|&s| s < end).saturating_sub(1);
        test_lines.extend(module.attribute..=last);
    }
    lines
        .into_iter()
        .enumerate()
        .filter(|(i, _)| !test_lines.contains(i))
        .map(|(i, line)| (i + 1, line))
        .collect()
}

/// The files a crate's test modules are kept in: declared `#[cfg(test)] mod name;` (as
/// `name.rs` or `name/mod.rs` beside the declaring file, or in its folder when it is not a
/// `lib.rs`, `main.rs` or `mod.rs`), and every file under such a module's folder.
fn test_module_files(files: &[(PathBuf, String)]) -> BTreeSet<PathBuf> {
    let mut test_files = BTreeSet::new();
    for (file, text) in files {
        let lines: Vec<&str> = text.lines().collect();
        let stem = file.file_stem().and_then(|s| s.to_str()).unwrap_or_default();
        let dir = file.parent().unwrap_or(Path::new("")).to_owned();
        let dir = if matches!(stem, "lib" | "main" | "mod") { dir } else { dir.join(stem) };
        for module in test_modules(&lines).into_iter().filter(|m| !m.inline) {
            test_files.insert(dir.join(format!("{}.rs", module.name)));
            let folder = dir.join(module.name);
            let mut inside = Vec::new();
            rust_files(&folder, &mut inside);
            test_files.extend(inside);
        }
    }
    test_files
}

/// A product source file: its path relative to the workspace root, and its text.
#[derive(Debug)]
pub struct Source {
    pub path: String,
    pub text: String,
}

impl Source {
    /// Its product lines with their numbers (see [`product_lines`]).
    pub fn product_lines(&self) -> Vec<(usize, &str)> {
        product_lines(&self.text)
    }
}

/// The product source files under `crate_dir/src`: every `.rs` file but its test modules'
/// files and those named `tests.rs` or in a `tests/` folder.
pub fn product_files(root: &Path, crate_dir: &str) -> Vec<Source> {
    let mut paths = Vec::new();
    rust_files(&root.join(crate_dir).join("src"), &mut paths);
    let files: Vec<(PathBuf, String)> = paths
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{p:?}: {e}"));
            (p, text)
        })
        .collect();
    let test_files = test_module_files(&files);
    files
        .into_iter()
        .filter(|(file, _)| {
            let relative = file.strip_prefix(root).unwrap_or(file);
            let in_tests = relative.components().any(|c| c.as_os_str() == "tests");
            let named_tests = file.file_stem().is_some_and(|s| s == "tests");
            !(test_files.contains(file) || in_tests || named_tests)
        })
        .map(|(file, text)| {
            let path = file.strip_prefix(root).unwrap_or(&file).display().to_string();
            Source { path, text }
        })
        .collect()
}

/// The names a line of code defines as types: the word after `struct`, `enum`, `union`,
/// `trait` or `type` (a comment after `//` left out).
pub fn defined_types(line: &str) -> Vec<&str> {
    let code = line.split("//").next().unwrap_or_default();
    let words: Vec<&str> = code
        .split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .filter(|w| !w.is_empty())
        .collect();
    words
        .windows(2)
        .filter(|w| matches!(w[0], "struct" | "enum" | "union" | "trait" | "type"))
        .map(|w| w[1])
        .collect()
}
