//! `search_files` and `search_text`: find files by name (a glob) and lines by content (a regex
//! or a plain string) under one root folder — the one implementation the host (over a chat's
//! workspace) and the subagent (over its scratch folder) both use.
//!
//! Why a crate of its own: the two sides must agree on what a pattern means, what is skipped
//! and what a result looks like, and must not drift apart; neither may depend on the other.
//!
//! Why it is careful: the pattern and the path come from a model reading untrusted text. So
//! the walk never follows a symlink (a link is neither listed nor read, wherever it points),
//! the starting `path` must stay inside the root (no `..`, no absolute path elsewhere, no
//! symlink out), files the caller hides (the daemon's database, another person's notes) are
//! never listed nor read, and everything is bounded: names and matches returned, bytes read
//! per file and in total, entries walked, time spent ([`Limits`]). A caller's own tool
//! timeout cannot stop blocking file reads, so the bounds are the real stop.

use std::fmt::Write as _;
use std::fs::File;
use std::io::Read;
use std::path::{Component, Path, PathBuf};
use std::time::{Duration, Instant};

use globset::{Glob, GlobBuilder, GlobMatcher};
use regex::RegexBuilder;
use walkdir::WalkDir;

/// Folders no search goes into unless the search starts inside one: version-control and
/// dependency trees, which drown every result and are never what the model looks for.
pub const SKIPPED_DIRS: &[&str] = &[".git", "node_modules"];

/// A file whose first this-many bytes hold a NUL is binary and not searched.
pub const BINARY_PROBE: usize = 8 * 1024;

/// How much one search may return, read and take.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// `search_files`: names returned; the rest are counted ("… N more").
    pub max_files: usize,
    /// `search_text`: matching lines returned; the search stops at the next one.
    pub max_matches: usize,
    /// `search_text`: bytes read of one file; the rest of a bigger file is not searched.
    pub max_file_bytes: u64,
    /// `search_text`: bytes read over the whole search; then it stops.
    pub max_total_bytes: u64,
    /// A matching line is cut to this many characters (around the match).
    pub max_line_chars: usize,
    /// Directory entries visited (files, folders, links); then the walk stops.
    pub max_entries: usize,
    /// Wall time of one search; then it stops and says so.
    pub max_time: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_files: 200,
            max_matches: 100,
            max_file_bytes: 1024 * 1024,
            max_total_bytes: 32 * 1024 * 1024,
            max_line_chars: 240,
            max_entries: 100_000,
            max_time: Duration::from_secs(10),
        }
    }
}

/// Why a search could not run; each names the argument that was wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SearchError {
    #[error("{argument} is empty")]
    Empty { argument: &'static str },
    #[error("{argument}: invalid glob {pattern:?}: {reason}")]
    Glob { argument: &'static str, pattern: String, reason: String },
    #[error("pattern: invalid regex {pattern:?}: {reason} (set literal to true to search for the text as it is)")]
    Regex { pattern: String, reason: String },
    #[error("path {path:?}: refused, {why}")]
    Refused { path: String, why: String },
    #[error("path {path:?}: no such file or directory")]
    NotFound { path: String },
    #[error("the search root {root} is unusable: {reason}")]
    Root { root: String, reason: String },
}

/// Where a search runs: the root it may not leave, the optional starting point inside it,
/// and what the caller hides.
pub struct Scope<'a> {
    root: &'a Path,
    path: Option<&'a str>,
    hidden: &'a (dyn Fn(&Path) -> bool + Sync),
}

impl std::fmt::Debug for Scope<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scope").field("root", &self.root).field("path", &self.path).finish()
    }
}

fn nothing_hidden(_: &Path) -> bool {
    false
}

impl<'a> Scope<'a> {
    /// The whole of `root` (which must exist), nothing hidden.
    pub fn new(root: &'a Path) -> Self {
        Self { root, path: None, hidden: &nothing_hidden }
    }

    /// Starts at `path` (a folder or a file, relative to the root; an absolute path is
    /// accepted only inside the root). Blank means the root.
    pub fn at(mut self, path: Option<&'a str>) -> Self {
        self.path = path.filter(|p| !p.trim().is_empty());
        self
    }

    /// `hidden(resolved)` is asked of every entry (its real path under the canonical root,
    /// folders included): a `true` one is neither listed nor read, nor walked into, and is
    /// refused as the starting `path`.
    pub fn hiding(mut self, hidden: &'a (dyn Fn(&Path) -> bool + Sync)) -> Self {
        self.hidden = hidden;
        self
    }

    /// The canonical root and the resolved starting point.
    fn resolve(&self) -> Result<(PathBuf, PathBuf), SearchError> {
        let root = self.root.canonicalize().map_err(|e| SearchError::Root {
            root: self.root.display().to_string(),
            reason: e.to_string(),
        })?;
        let Some(raw) = self.path else { return Ok((root.clone(), root)) };
        let refuse = |why: &str| SearchError::Refused { path: raw.to_owned(), why: why.into() };
        if raw.contains('\0') {
            return Err(refuse("it contains a NUL byte"));
        }
        let requested = Path::new(raw.trim());
        let relative = if requested.is_absolute() {
            requested
                .strip_prefix(&root)
                .map_err(|_| refuse("it is outside the searched folder"))?
                .to_path_buf()
        } else {
            requested.to_path_buf()
        };
        let mut joined = root.clone();
        for component in relative.components() {
            match component {
                Component::Normal(part) => joined.push(part),
                Component::CurDir => {}
                Component::ParentDir => return Err(refuse("`..` is not allowed in paths")),
                Component::RootDir | Component::Prefix(_) => {
                    return Err(refuse("it is outside the searched folder"))
                }
            }
        }
        let real = match joined.canonicalize() {
            Ok(real) => real,
            Err(_) if joined.symlink_metadata().is_ok() => {
                return Err(refuse("it goes through a dangling symlink"))
            }
            Err(_) => return Err(SearchError::NotFound { path: raw.to_owned() }),
        };
        if !real.starts_with(&root) {
            return Err(refuse("it leads outside the searched folder through a symlink"));
        }
        // The start and every folder above it up to the root: a hidden folder hides all in it.
        if real.ancestors().take_while(|a| a.starts_with(&root)).any(|a| (self.hidden)(a)) {
            return Err(refuse("that file is off limits"));
        }
        Ok((root, real))
    }
}

/// A glob as both tools read it: a pattern without `/` matches a file's name at any depth
/// (`*.md`), one with `/` matches the path relative to where the search starts
/// (`src/**/*.rs`); `*` never crosses a `/`, `**` does; `{a,b}` alternates.
#[derive(Debug, Clone)]
pub struct NameGlob {
    matcher: GlobMatcher,
    by_name: bool,
}

impl NameGlob {
    /// `argument` names the tool argument the pattern came from, for the error.
    pub fn new(argument: &'static str, pattern: &str) -> Result<Self, SearchError> {
        let pattern = pattern.trim();
        if pattern.is_empty() {
            return Err(SearchError::Empty { argument });
        }
        let cleaned = pattern.strip_prefix("./").unwrap_or(pattern);
        let glob: Glob = GlobBuilder::new(cleaned)
            .literal_separator(true)
            .backslash_escape(true)
            .build()
            .map_err(|e| SearchError::Glob {
                argument,
                pattern: pattern.to_owned(),
                reason: e.kind().to_string(),
            })?;
        Ok(Self { matcher: glob.compile_matcher(), by_name: !cleaned.contains('/') })
    }

    /// Whether the file at `relative` (to the search's start) matches.
    pub fn is_match(&self, relative: &Path) -> bool {
        if self.by_name {
            relative.file_name().is_some_and(|name| self.matcher.is_match(name))
        } else {
            self.matcher.is_match(relative)
        }
    }
}

/// What stopped a walk early, if anything.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cutoff {
    Entries(usize),
    Time(Duration),
    TotalBytes(u64),
}

impl Cutoff {
    fn describe(self) -> String {
        match self {
            Self::Entries(n) => format!("the search stopped after visiting {n} entries"),
            Self::Time(t) => format!("the search stopped after {} s", t.as_secs()),
            Self::TotalBytes(n) => format!("the search stopped after reading {n} bytes"),
        }
    }
}

/// The files a walk yields: regular files only, symlinks and hidden entries skipped, in
/// name order, with the walk's own bounds.
struct Walk {
    root: PathBuf,
    start: PathBuf,
    limits: Limits,
    started: Instant,
    visited: usize,
    symlinks: usize,
    cutoff: Option<Cutoff>,
}

impl Walk {
    fn new(root: PathBuf, start: PathBuf, limits: &Limits) -> Self {
        Self {
            root,
            start,
            limits: limits.clone(),
            started: Instant::now(),
            visited: 0,
            symlinks: 0,
            cutoff: None,
        }
    }

    /// Calls `each(path, relative to root, relative to start)` for every file; `each` returns
    /// `false` to stop.
    fn run(
        &mut self,
        hidden: &(dyn Fn(&Path) -> bool + Sync),
        mut each: impl FnMut(&Path, &Path, &Path) -> bool,
    ) {
        let walker = WalkDir::new(&self.start)
            .follow_links(false)
            .follow_root_links(false)
            .sort_by_file_name()
            .into_iter()
            .filter_entry(|entry| {
                let skipped_dir = entry.depth() > 0
                    && entry.file_type().is_dir()
                    && SKIPPED_DIRS.iter().any(|d| entry.file_name() == *d);
                !skipped_dir && !hidden(entry.path())
            });
        for entry in walker {
            self.visited += 1;
            if self.visited > self.limits.max_entries {
                self.cutoff = Some(Cutoff::Entries(self.limits.max_entries));
                return;
            }
            if self.started.elapsed() >= self.limits.max_time {
                self.cutoff = Some(Cutoff::Time(self.limits.max_time));
                return;
            }
            // An unreadable folder is left out, the rest goes on.
            let Ok(entry) = entry else { continue };
            let kind = entry.file_type();
            if kind.is_symlink() {
                self.symlinks += 1;
                continue;
            }
            if !kind.is_file() {
                continue;
            }
            let path = entry.path();
            let (Ok(from_root), Ok(from_start)) =
                (path.strip_prefix(&self.root), path.strip_prefix(&self.start))
            else {
                continue;
            };
            // A file given as the start is matched by its own name.
            let from_start = if from_start.as_os_str().is_empty() {
                Path::new(path.file_name().unwrap_or_default())
            } else {
                from_start
            };
            if !each(path, from_root, from_start) {
                return;
            }
        }
    }

    fn stop_if(&mut self, cutoff: Cutoff) {
        self.cutoff.get_or_insert(cutoff);
    }
}

/// `n` and a noun, in the singular for one (`1 file`, `2 files`).
fn count(n: usize, noun: &str) -> String {
    match n {
        1 => format!("1 {noun}"),
        n if noun.ends_with('h') => format!("{n} {noun}es"),
        n => format!("{n} {noun}s"),
    }
}

/// A path as the tools show it: relative to the root, `/`-separated.
fn shown(relative: &Path) -> String {
    relative.to_string_lossy().replace('\\', "/")
}

/// The result of [`search_files`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileMatches {
    /// Matching files, relative to the root, in walk (name) order; at most `max_files`.
    pub paths: Vec<String>,
    /// Matching files beyond `max_files`.
    pub more: usize,
    /// Symlinks passed by (never followed).
    pub symlinks_skipped: usize,
    pub cutoff: Option<Cutoff>,
}

impl FileMatches {
    /// One path a line, then what was left out.
    pub fn render(&self) -> String {
        let mut text = if self.paths.is_empty() {
            "(no matching files)".to_owned()
        } else {
            self.paths.join("\n")
        };
        if self.more > 0 {
            let _ = write!(text, "\n… {} more (narrow the pattern or the path)", self.more);
        }
        let mut notes = Vec::new();
        if self.symlinks_skipped > 0 {
            notes.push(format!("{} not followed", count(self.symlinks_skipped, "symlink")));
        }
        if let Some(cutoff) = self.cutoff {
            notes.push(cutoff.describe());
        }
        if !notes.is_empty() {
            let _ = write!(text, "\n[{}]", notes.join("; "));
        }
        text
    }
}

/// Files under the scope whose name (or path, see [`NameGlob`]) matches `pattern`.
pub fn search_files(
    scope: &Scope<'_>,
    pattern: &str,
    limits: &Limits,
) -> Result<FileMatches, SearchError> {
    let glob = NameGlob::new("pattern", pattern)?;
    let (root, start) = scope.resolve()?;
    let mut walk = Walk::new(root, start, limits);
    let mut paths = Vec::new();
    let mut more = 0;
    walk.run(scope.hidden, |_, from_root, from_start| {
        if glob.is_match(from_start) {
            if paths.len() < limits.max_files {
                paths.push(shown(from_root));
            } else {
                more += 1;
            }
        }
        true
    });
    Ok(FileMatches { paths, more, symlinks_skipped: walk.symlinks, cutoff: walk.cutoff })
}

/// What [`search_text`] looks for.
#[derive(Debug, Clone, Default)]
pub struct TextQuery<'a> {
    /// A regex (Rust `regex` syntax), or the text itself when `literal`.
    pub pattern: &'a str,
    pub literal: bool,
    pub case_insensitive: bool,
    /// Only files matching this glob ([`NameGlob`]) are searched.
    pub glob: Option<&'a str>,
}

/// One matching line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TextMatch {
    /// Relative to the root.
    pub path: String,
    /// 1-based.
    pub line: usize,
    /// The line, cut around the match to `max_line_chars`.
    pub text: String,
}

/// The result of [`search_text`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TextMatches {
    pub matches: Vec<TextMatch>,
    /// The search stopped at `max_matches`; there may be more.
    pub more: bool,
    pub files_searched: usize,
    /// Files with a NUL byte in their first [`BINARY_PROBE`] bytes.
    pub binary_skipped: usize,
    /// Files bigger than `max_file_bytes`, of which only the start was searched.
    pub files_cut: usize,
    pub symlinks_skipped: usize,
    pub cutoff: Option<Cutoff>,
}

impl TextMatches {
    /// `path:line: text` a line, then a summary in brackets.
    pub fn render(&self, limits: &Limits) -> String {
        let mut text = String::new();
        for m in &self.matches {
            let _ = writeln!(text, "{}:{}: {}", m.path, m.line, m.text);
        }
        if self.matches.is_empty() {
            text.push_str("(no matches)\n");
        }
        let files = self.matches.iter().map(|m| &m.path).collect::<std::collections::BTreeSet<_>>();
        let mut notes = vec![format!(
            "{} in {}; {} searched",
            count(self.matches.len(), "match"),
            count(files.len(), "file"),
            count(self.files_searched, "file")
        )];
        if self.more {
            notes.push(format!(
                "stopped at {} matches, there may be more (narrow the pattern, path or glob)",
                limits.max_matches
            ));
        }
        if self.binary_skipped > 0 {
            notes.push(format!("{} skipped", count(self.binary_skipped, "binary file")));
        }
        if self.files_cut > 0 {
            notes.push(format!(
                "{} searched only in the first {} bytes",
                count(self.files_cut, "file"),
                limits.max_file_bytes
            ));
        }
        if self.symlinks_skipped > 0 {
            notes.push(format!("{} not followed", count(self.symlinks_skipped, "symlink")));
        }
        if let Some(cutoff) = self.cutoff {
            notes.push(cutoff.describe());
        }
        let _ = write!(text, "[{}]", notes.join("; "));
        text
    }
}

/// Lines under the scope that match the query.
pub fn search_text(
    scope: &Scope<'_>,
    query: &TextQuery<'_>,
    limits: &Limits,
) -> Result<TextMatches, SearchError> {
    if query.pattern.is_empty() {
        return Err(SearchError::Empty { argument: "pattern" });
    }
    let source =
        if query.literal { regex::escape(query.pattern) } else { query.pattern.to_owned() };
    let regex = RegexBuilder::new(&source)
        .case_insensitive(query.case_insensitive)
        // A pattern is the model's; its compiled size is bounded like everything else.
        .size_limit(1 << 20)
        .dfa_size_limit(1 << 22)
        .build()
        .map_err(|e| SearchError::Regex {
            pattern: query.pattern.to_owned(),
            reason: e.to_string(),
        })?;
    let glob = query.glob.filter(|g| !g.trim().is_empty()).map(|g| NameGlob::new("glob", g));
    let glob = glob.transpose()?;
    let (root, start) = scope.resolve()?;
    let mut walk = Walk::new(root, start, limits);
    let mut found = TextMatches {
        matches: Vec::new(),
        more: false,
        files_searched: 0,
        binary_skipped: 0,
        files_cut: 0,
        symlinks_skipped: 0,
        cutoff: None,
    };
    let mut total: u64 = 0;
    let mut budget_out = false;
    let mut buffer = Vec::new();
    let real_root = walk.root.canonicalize().unwrap_or_else(|_| walk.root.clone());
    walk.run(scope.hidden, |path, from_root, from_start| {
        if glob.as_ref().is_some_and(|g| !g.is_match(from_start)) {
            return true;
        }
        let room = limits.max_total_bytes.saturating_sub(total);
        if room == 0 {
            budget_out = true;
            return false;
        }
        let take = limits.max_file_bytes.min(room);
        buffer.clear();
        // Read one byte past the cap to know whether the file was cut. An unreadable file
        // (permissions, gone meanwhile) is passed by.
        let Ok(file) = File::open(path) else { return true };
        // What was opened, not only the path walked: a folder swapped for a link after the
        // walker looked at it (something else writing under the root) is passed by.
        if !opened_within(&file, &real_root) {
            found.symlinks_skipped += 1;
            return true;
        }
        if file.take(take + 1).read_to_end(&mut buffer).is_err() {
            return true;
        }
        let cut = buffer.len() as u64 > take;
        buffer.truncate(take as usize);
        total += buffer.len() as u64;
        if buffer[..buffer.len().min(BINARY_PROBE)].contains(&0) {
            found.binary_skipped += 1;
            return true;
        }
        found.files_searched += 1;
        if cut {
            found.files_cut += 1;
            if take < limits.max_file_bytes {
                budget_out = true;
            }
        }
        let shown_path = shown(from_root);
        for (index, line) in buffer.split(|b| *b == b'\n').enumerate() {
            let line = String::from_utf8_lossy(line);
            let line = line.strip_suffix('\r').unwrap_or(&line);
            let Some(hit) = regex.find(line) else { continue };
            if found.matches.len() >= limits.max_matches {
                found.more = true;
                return false;
            }
            found.matches.push(TextMatch {
                path: shown_path.clone(),
                line: index + 1,
                text: excerpt(line, hit.start(), limits.max_line_chars),
            });
        }
        true
    });
    if budget_out {
        walk.stop_if(Cutoff::TotalBytes(limits.max_total_bytes));
    }
    found.symlinks_skipped = walk.symlinks;
    found.cutoff = walk.cutoff;
    Ok(found)
}

/// `line` cut to `max` characters, starting a little before the match at byte `at` so the
/// match is shown; `…` marks what was left out on either side.
fn excerpt(line: &str, at: usize, max: usize) -> String {
    let chars = line.chars().count();
    if chars <= max {
        return line.to_owned();
    }
    let before = line[..at].chars().count();
    let first = before.saturating_sub(max / 6).min(chars - max);
    let text: String = line.chars().skip(first).take(max).collect();
    let head = if first > 0 { "…" } else { "" };
    let tail = if first + max < chars { "…" } else { "" };
    format!("{head}{text}{tail}")
}

/// Whether the open `file` is under `root` by the kernel's account (`/proc/self/fd`): the
/// path it was opened by may have led elsewhere by then. Where that cannot be read (no
/// `/proc`), the walk's own checks stand alone.
fn opened_within(file: &File, root: &Path) -> bool {
    use std::os::fd::AsRawFd;
    match std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd())) {
        Ok(real) => real.starts_with(root),
        Err(_) => true,
    }
}

#[cfg(test)]
mod tests;
