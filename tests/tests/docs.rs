//! The documentation checked against itself, fast and without Docker (issue 45): every relative
//! link in every Markdown file of the repository leads somewhere — the file exists and, when the
//! link names an anchor, a heading of that file makes it by GitHub's rules — and the README
//! fits on a screen (at most 300 lines), ARCHITECTURE.md stays a map (at most 300), and each
//! page under `docs/` stays readable (at most 400 lines).
//!
//! The scan is by hand: links in Markdown are `[text](target)` (and `[name]: target`
//! definitions); fenced code blocks and inline code spans are skipped. External links
//! (`https:`, `mailto:` and any other scheme) are not checked.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the workspace root").to_owned()
}

/// Every Markdown file under `dir`, build output and npm trees left out.
fn markdown_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{dir:?}: {e}")).flatten() {
        let path = entry.path();
        let name = entry.file_name();
        let Ok(kind) = entry.file_type() else { continue };
        if kind.is_dir() {
            if !matches!(name.to_str(), Some("target" | "node_modules" | ".git")) {
                markdown_files(&path, out);
            }
        } else if kind.is_file() && path.extension().is_some_and(|x| x == "md") {
            out.push(path);
        }
    }
}

/// The lines of a Markdown text outside fenced code blocks, with their numbers (from 1).
fn prose_lines(text: &str) -> Vec<(usize, &str)> {
    let mut fence: Option<(char, usize)> = None;
    let mut lines = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        let marker = trimmed.chars().next().filter(|c| *c == '`' || *c == '~');
        let run = marker.map_or(0, |m| trimmed.chars().take_while(|c| *c == m).count());
        match (fence, marker) {
            (None, Some(m)) if run >= 3 => fence = Some((m, run)),
            (Some((m, n)), Some(c)) if c == m && run >= n && trimmed[run..].trim().is_empty() => {
                fence = None
            }
            (None, _) => lines.push((i + 1, line)),
            _ => {}
        }
    }
    lines
}

/// `line` with its inline code spans (`` `x` ``, ``` ``x`y`` ```) blanked out.
fn without_code_spans(line: &str) -> String {
    let chars: Vec<char> = line.chars().collect();
    let mut out = String::with_capacity(line.len());
    let mut i = 0;
    while i < chars.len() {
        if chars[i] != '`' {
            out.push(chars[i]);
            i += 1;
            continue;
        }
        let run = chars[i..].iter().take_while(|c| **c == '`').count();
        // The closing run: the same number of backticks, not part of a longer run.
        let mut j = i + run;
        let mut close = None;
        while j < chars.len() {
            if chars[j] == '`' {
                let other = chars[j..].iter().take_while(|c| **c == '`').count();
                if other == run {
                    close = Some(j + other);
                    break;
                }
                j += other;
            } else {
                j += 1;
            }
        }
        match close {
            Some(end) => {
                out.push(' ');
                i = end;
            }
            // An unmatched run is literal text.
            None => {
                out.extend(&chars[i..i + run]);
                i += run;
            }
        }
    }
    out
}

/// The link targets of a Markdown text, each with its line number: `[text](target)`,
/// `![alt](target)` and `[name]: target`; a title after the target is left out.
fn links(text: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    for (number, line) in prose_lines(text) {
        let line = without_code_spans(line);
        let definition = line.trim_start();
        let close = definition
            .find("]:")
            .filter(|close| definition.starts_with('[') && !definition[1..*close].contains(']'));
        if let Some(close) = close {
            if let Some(target) = definition[close + 2..].split_whitespace().next() {
                found.push((number, target.trim_matches(['<', '>']).to_owned()));
            }
            continue;
        }
        let mut rest = line.as_str();
        while let Some(at) = rest.find("](") {
            rest = &rest[at + 2..];
            let end = rest.find(')').unwrap_or(rest.len());
            let inside = rest[..end].trim();
            let target = if let Some(angled) = inside.strip_prefix('<') {
                angled.split('>').next().unwrap_or_default()
            } else {
                inside.split_whitespace().next().unwrap_or_default()
            };
            if !target.is_empty() {
                found.push((number, target.to_owned()));
            }
            rest = &rest[end..];
        }
    }
    found
}

/// The anchor GitHub makes of a heading's text: lowercase; letters, digits, `-`, `_` and
/// spaces kept, everything else dropped; spaces turned into `-`. A link in the heading counts
/// by its text.
fn slug(heading: &str) -> String {
    let mut text = String::new();
    let mut rest = heading;
    // `[text](target)` reads as `text`.
    while let Some(at) = rest.find("](") {
        let end = rest[at..].find(')').map_or(rest.len(), |e| at + e + 1);
        text.push_str(&rest[..at]);
        rest = &rest[end..];
    }
    text.push_str(rest);
    text.trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors a Markdown text has: one per ATX heading (`#` to `######`) outside code blocks,
/// a repeated one with `-1`, `-2`, … as GitHub numbers them, and every explicit
/// `<a name="…">` / `id="…"`.
fn anchors(text: &str) -> Vec<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut anchors = Vec::new();
    for (_, line) in prose_lines(text) {
        let hashes = line.chars().take_while(|c| *c == '#').count();
        if (1..=6).contains(&hashes) && line[hashes..].starts_with(' ') {
            let heading = line[hashes..].trim().trim_end_matches('#').trim_end();
            let base = slug(heading);
            let count = seen.entry(base.clone()).or_insert(0);
            anchors.push(if *count == 0 { base.clone() } else { format!("{base}-{count}") });
            *count += 1;
        }
        for attribute in ["name=\"", "id=\""] {
            let mut rest = line;
            while let Some(at) = rest.find(attribute) {
                rest = &rest[at + attribute.len()..];
                if let Some(end) = rest.find('"') {
                    anchors.push(rest[..end].to_owned());
                }
            }
        }
    }
    anchors
}

/// `%20` and the like, decoded (link targets are URLs).
fn percent_decoded(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let escaped = (bytes[i] == b'%')
            .then(|| text.get(i + 1..i + 3).and_then(|hex| u8::from_str_radix(hex, 16).ok()))
            .flatten();
        if let Some(byte) = escaped {
            out.push(byte);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `a/b/../c` as `a/c`, without touching the file system.
fn normalized(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// What is wrong with the relative links of the Markdown file `file` (its text `text`), one
/// line each; `repo` is the repository's root (where a link starting with `/` points).
fn broken_links(repo: &Path, file: &Path, text: &str) -> Vec<String> {
    let mut wrong = Vec::new();
    let shown = file.strip_prefix(repo).unwrap_or(file).display().to_string();
    for (line, target) in links(text) {
        let scheme = target.split_once(':').is_some_and(|(scheme, _)| {
            scheme.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
                && scheme.chars().all(|c| c.is_ascii_alphanumeric() || "+.-".contains(c))
        });
        if scheme {
            continue;
        }
        let (path, anchor) = match target.split_once('#') {
            Some((path, anchor)) => (path, Some(anchor)),
            None => (target.as_str(), None),
        };
        let path = percent_decoded(path.split('?').next().unwrap_or_default());
        let resolved = if path.is_empty() {
            file.to_owned()
        } else if let Some(from_root) = path.strip_prefix('/') {
            repo.join(from_root)
        } else {
            normalized(&file.parent().expect("a file's folder").join(&path))
        };
        if !resolved.exists() {
            wrong.push(format!("{shown}:{line}: ({target}): {path} does not exist"));
            continue;
        }
        let Some(anchor) = anchor.filter(|a| !a.is_empty()) else { continue };
        // Anchors of other files (`#L10` of a source file) are GitHub's, not headings.
        if resolved.extension().is_none_or(|x| x != "md") {
            continue;
        }
        let heads = if resolved == file {
            anchors(text)
        } else {
            anchors(&std::fs::read_to_string(&resolved).unwrap_or_default())
        };
        let anchor = percent_decoded(anchor);
        if !heads.contains(&anchor) {
            wrong.push(format!("{shown}:{line}: ({target}): no heading makes #{anchor}"));
        }
    }
    wrong
}

#[test]
fn every_relative_link_in_the_markdown_files_leads_somewhere() {
    let repo = root();
    let mut files = Vec::new();
    markdown_files(&repo, &mut files);
    files.sort();
    for needed in ["README.md", "ARCHITECTURE.md", "docs/deploy.md", "docs/protocol.md"] {
        assert!(files.contains(&repo.join(needed)), "the scan finds {needed}: {files:?}");
    }
    let mut wrong = Vec::new();
    let mut checked = 0;
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{file:?}: {e}"));
        checked += links(&text).len();
        wrong.extend(broken_links(&repo, file, &text));
    }
    assert!(checked > 100, "the scan sees the links: {checked}");
    assert!(wrong.is_empty(), "broken links:\n{}", wrong.join("\n"));
}

#[test]
fn the_readme_fits_on_a_screen_and_every_docs_page_stays_readable() {
    let repo = root();
    let lines = |path: &Path| std::fs::read_to_string(path).expect("a page").lines().count();
    let readme = lines(&repo.join("README.md"));
    assert!(readme <= 300, "README.md has {readme} lines (at most 300): move a section to docs/");
    // The code map is a map: a crate's details live in its `lib.rs` doc.
    let map = lines(&repo.join("ARCHITECTURE.md"));
    assert!(map <= 300, "ARCHITECTURE.md has {map} lines (at most 300): details go to lib.rs docs");
    let mut pages = Vec::new();
    markdown_files(&repo.join("docs"), &mut pages);
    assert!(pages.len() > 10, "{pages:?}");
    let long: Vec<String> = pages
        .iter()
        .map(|page| (page, lines(page)))
        .filter(|(_, n)| *n > 400)
        .map(|(page, n)| format!("{}: {n} lines (at most 400)", page.display()))
        .collect();
    assert!(long.is_empty(), "split these pages by meaning:\n{}", long.join("\n"));
}

#[test]
fn the_link_scan_sees_what_it_looks_for() {
    let dir = std::env::temp_dir().join(format!("nexbot-docs-links-{}", std::process::id()));
    let docs = dir.join("docs");
    std::fs::create_dir_all(&docs).unwrap();
    std::fs::write(dir.join("README.md"), "# Nexbot\n").unwrap();
    let page = "# A page: `nexbot-ctl` and more\n\
                ## Twice\n## Twice\n\
                [ok](../README.md#nexbot) [ok](#twice-1) [ok](#a-page-nexbot-ctl-and-more)\n\
                [ok](https://example.com/x#y) [ok](mailto:a@b.c) [ok](../README.md)\n\
                ![ok](page.md#twice \"a title\")\n\
                [missing](gone.md) [no anchor](../README.md#other) [no anchor](#twice-2)\n\
                [definition]: /docs/none.md\n\
                `[in code](nowhere.md)` and ``[in `code`](nowhere.md)``\n\
                ```sh\n[in a block](nowhere.md)\n# not a heading\n```\n\
                [a link](<page.md#not-a-heading>)\n";
    let file = docs.join("page.md");
    std::fs::write(&file, page).unwrap();
    let wrong = broken_links(&dir, &file, page);
    std::fs::remove_dir_all(&dir).unwrap();
    let targets: Vec<&str> =
        wrong.iter().map(|w| w.split(" (").nth(1).unwrap().split(')').next().unwrap()).collect();
    assert_eq!(
        targets,
        ["gone.md", "../README.md#other", "#twice-2", "/docs/none.md", "page.md#not-a-heading"],
        "{wrong:#?}"
    );
    assert!(wrong[0].starts_with("docs/page.md:7: "), "{wrong:#?}");
    assert_eq!(slug("Host ⇄ subagent wire protocol (v1.0)"), "host--subagent-wire-protocol-v10");
    assert_eq!(slug("`dropped_tools` (on a final answer)"), "dropped_tools-on-a-final-answer");
    assert_eq!(
        slug("The agent's tools, and where each runs"),
        "the-agents-tools-and-where-each-runs"
    );
}
