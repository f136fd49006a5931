use std::os::unix::fs::symlink;

use super::*;

/// A temporary tree: `root` (searched) and `outside` (next to it, never to be reached).
struct Tree {
    base: PathBuf,
    root: PathBuf,
    outside: PathBuf,
}

impl Drop for Tree {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.base);
    }
}

fn tree(name: &str) -> Tree {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let base = std::env::temp_dir().join(format!("nxf-{name}-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let root = base.join("root");
    let outside = base.join("outside");
    for dir in ["src/deep/er", "docs", ".git", "node_modules/pkg"] {
        std::fs::create_dir_all(root.join(dir)).unwrap();
    }
    std::fs::create_dir_all(&outside).unwrap();
    let write = |rel: &str, text: &str| std::fs::write(root.join(rel), text).unwrap();
    write("README.md", "# Title\nsee src/main.rs\n");
    write("src/main.rs", "fn main() {\n    println!(\"Hello\");\n}\n");
    write("src/lib.rs", "pub fn hello() -> &'static str {\n    \"hello world\"\n}\n");
    write("src/deep/er/x.rs", "// deep hello\n");
    write("docs/guide.md", "Hello again\nnothing here\n");
    write(".git/config", "hello from git\n");
    write("node_modules/pkg/index.js", "hello from npm\n");
    std::fs::write(outside.join("secret.txt"), "hello outside secret\n").unwrap();
    std::fs::write(outside.join("far.rs"), "fn far() {} // hello\n").unwrap();
    Tree { base, root, outside }
}

fn files(scope: &Scope<'_>, pattern: &str) -> Vec<String> {
    search_files(scope, pattern, &Limits::default()).unwrap().paths
}

fn text(scope: &Scope<'_>, query: TextQuery<'_>) -> TextMatches {
    search_text(scope, &query, &Limits::default()).unwrap()
}

fn lines(found: &TextMatches) -> Vec<String> {
    found.matches.iter().map(|m| format!("{}:{}: {}", m.path, m.line, m.text)).collect()
}

#[test]
fn globs_match_names_at_any_depth_or_paths_from_the_start() {
    let t = tree("globs");
    let all = Scope::new(&t.root);
    assert_eq!(files(&all, "*.rs"), ["src/deep/er/x.rs", "src/lib.rs", "src/main.rs"]);
    assert_eq!(files(&all, "**/*.rs"), ["src/deep/er/x.rs", "src/lib.rs", "src/main.rs"]);
    // With a `/`, `*` stays in its folder and the path is matched whole.
    assert_eq!(files(&all, "src/*.rs"), ["src/lib.rs", "src/main.rs"]);
    assert_eq!(files(&all, "*.{md,js}"), ["README.md", "docs/guide.md"], ".git, node_modules");
    // From a sub-folder: patterns are relative to it, results to the root.
    let src = Scope::new(&t.root).at(Some("src"));
    assert_eq!(files(&src, "deep/**/*.rs"), ["src/deep/er/x.rs"]);
    assert_eq!(files(&src, "./main.rs"), ["src/main.rs"]);
    assert!(files(&all, "*.py").is_empty());
    let none = search_files(&all, "*.py", &Limits::default()).unwrap();
    assert_eq!(none.render(), "(no matching files)");
    // Starting inside a skipped folder is asked for, so it is searched.
    let git = Scope::new(&t.root).at(Some(".git"));
    assert_eq!(files(&git, "*"), [".git/config"]);
}

#[test]
fn bad_globs_and_regexes_are_errors_naming_the_argument() {
    let t = tree("bad");
    let scope = Scope::new(&t.root);
    let err = search_files(&scope, "src/[a-", &Limits::default()).unwrap_err().to_string();
    assert!(err.starts_with("pattern: invalid glob \"src/[a-\""), "{err}");
    let err = search_files(&scope, "  ", &Limits::default()).unwrap_err();
    assert_eq!(err.to_string(), "pattern is empty");
    let query = TextQuery { pattern: "fn (", ..Default::default() };
    let err = search_text(&scope, &query, &Limits::default()).unwrap_err().to_string();
    assert!(err.starts_with("pattern: invalid regex \"fn (\""), "{err}");
    assert!(err.contains("literal"), "the way out is named: {err}");
    let query = TextQuery { pattern: "x", glob: Some("{a"), ..Default::default() };
    let err = search_text(&scope, &query, &Limits::default()).unwrap_err().to_string();
    assert!(err.starts_with("glob: invalid glob"), "{err}");
}

#[test]
fn regex_literal_case_and_glob_filter() {
    let t = tree("text");
    let scope = Scope::new(&t.root);
    let found = text(&scope, TextQuery { pattern: r"fn \w+\(", ..Default::default() });
    assert_eq!(
        lines(&found),
        ["src/lib.rs:1: pub fn hello() -> &'static str {", "src/main.rs:1: fn main() {"]
    );
    // Case: only "Hello" unless asked.
    let exact = text(&scope, TextQuery { pattern: "Hello", ..Default::default() });
    assert_eq!(
        lines(&exact),
        ["docs/guide.md:1: Hello again", "src/main.rs:2:     println!(\"Hello\");"]
    );
    let any =
        text(&scope, TextQuery { pattern: "hello", case_insensitive: true, ..Default::default() });
    assert_eq!(any.matches.len(), 5, "{:?}", lines(&any));
    assert!(lines(&any).iter().all(|l| !l.contains("git") && !l.contains("npm")));
    // A literal with regex characters: as a regex `(` is an error, as a literal it is found.
    let literal =
        text(&scope, TextQuery { pattern: "main()", literal: true, ..Default::default() });
    assert_eq!(lines(&literal), ["src/main.rs:1: fn main() {"]);
    let as_regex = text(&scope, TextQuery { pattern: "main()", ..Default::default() });
    assert_eq!(as_regex.matches.len(), 2, "`()` is an empty group: README's \"main.rs\" too");
    // The glob filter, and a path that is a single file.
    let md = text(
        &scope,
        TextQuery {
            pattern: "hello",
            case_insensitive: true,
            glob: Some("*.md"),
            ..Default::default()
        },
    );
    assert_eq!(lines(&md), ["docs/guide.md:1: Hello again"]);
    let one = Scope::new(&t.root).at(Some("src/lib.rs"));
    let found = text(&one, TextQuery { pattern: "world", ..Default::default() });
    assert_eq!(lines(&found), ["src/lib.rs:2:     \"hello world\""]);
    assert_eq!(found.files_searched, 1);
    let rendered = found.render(&Limits::default());
    assert!(rendered.ends_with("[1 match in 1 file; 1 file searched]"), "{rendered}");
}

#[test]
fn limits_bound_names_matches_bytes_and_long_lines() {
    let t = tree("limits");
    for i in 0..30 {
        std::fs::write(t.root.join(format!("docs/n{i:02}.txt")), "needle\nneedle\n").unwrap();
    }
    let scope = Scope::new(&t.root);
    let limits = Limits { max_files: 10, max_matches: 7, ..Limits::default() };
    let names = search_files(&scope, "*.txt", &limits).unwrap();
    assert_eq!((names.paths.len(), names.more), (10, 20));
    assert_eq!(names.paths[0], "docs/n00.txt");
    assert!(names.render().contains("\n… 20 more (narrow the pattern or the path)"));

    let found =
        search_text(&scope, &TextQuery { pattern: "needle", ..Default::default() }, &limits)
            .unwrap();
    assert_eq!(found.matches.len(), 7);
    assert!(found.more);
    assert_eq!(
        found.files_searched, 6,
        "README, guide and n00-n03: the walk stopped at the 8th match"
    );
    assert!(found.render(&limits).contains("stopped at 7 matches"));

    // Bytes per file: a match past the cap is not seen, and the file is said to be cut.
    let big = format!("{}\nlate needle\n", "a".repeat(5_000));
    std::fs::write(t.root.join("big.log"), &big).unwrap();
    let small = Limits { max_file_bytes: 1_000, ..Limits::default() };
    let query = TextQuery { pattern: "late", ..Default::default() };
    let found = search_text(&scope, &query, &small).unwrap();
    assert!(found.matches.is_empty());
    assert_eq!(found.files_cut, 1);
    assert!(found.render(&small).contains("1 file searched only in the first 1000 bytes"));
    assert_eq!(search_text(&scope, &query, &Limits::default()).unwrap().matches.len(), 1);

    // Bytes in total: the search stops and says so.
    let tight = Limits { max_total_bytes: 2_000, ..Limits::default() };
    let found =
        search_text(&scope, &TextQuery { pattern: "zzz", ..Default::default() }, &tight).unwrap();
    assert_eq!(found.cutoff, Some(Cutoff::TotalBytes(2_000)));
    assert!(found.render(&tight).contains("the search stopped after reading 2000 bytes"));

    // Entries walked.
    let few = Limits { max_entries: 5, ..Limits::default() };
    let names = search_files(&scope, "*", &few).unwrap();
    assert_eq!(names.cutoff, Some(Cutoff::Entries(5)));

    // A long line is cut around its match, marked on both sides.
    let line = format!("{}MATCH{}", "x".repeat(1_000), "y".repeat(1_000));
    std::fs::write(t.root.join("long.txt"), &line).unwrap();
    let found = text(&scope, TextQuery { pattern: "MATCH", ..Default::default() });
    let shown = &found.matches[0].text;
    assert!(shown.starts_with('…') && shown.ends_with('…') && shown.contains("MATCH"), "{shown}");
    assert_eq!(shown.chars().count(), Limits::default().max_line_chars + 2);
}

#[test]
fn binary_files_are_skipped_and_counted() {
    let t = tree("binary");
    let mut bytes = b"hello in a binary\0\x01\x02".to_vec();
    bytes.extend_from_slice(b"\nhello again\n");
    std::fs::write(t.root.join("blob.bin"), bytes).unwrap();
    // A NUL after the probe: the file is text as far as the search knows.
    let mut late = vec![b'a'; BINARY_PROBE + 10];
    late.extend_from_slice(b"\0\nhello late\n");
    std::fs::write(t.root.join("late.dat"), late).unwrap();
    let scope = Scope::new(&t.root);
    let found = text(&scope, TextQuery { pattern: "hello", ..Default::default() });
    assert_eq!(found.binary_skipped, 1);
    assert!(found.matches.iter().all(|m| m.path != "blob.bin"), "{:?}", lines(&found));
    assert!(found.matches.iter().any(|m| m.path == "late.dat"));
    assert!(found.render(&Limits::default()).contains("1 binary file skipped"));
    // search_files lists names; content does not matter there.
    assert_eq!(files(&scope, "*.bin"), ["blob.bin"]);
}

#[test]
fn symlinks_are_never_followed_and_paths_cannot_leave_the_root() {
    let t = tree("links");
    symlink(&t.outside, t.root.join("out_dir")).unwrap();
    symlink(t.outside.join("secret.txt"), t.root.join("out_file.txt")).unwrap();
    symlink(t.root.join("src/lib.rs"), t.root.join("inner.rs")).unwrap();
    let scope = Scope::new(&t.root);
    let found = text(&scope, TextQuery { pattern: "secret|far", ..Default::default() });
    assert!(found.matches.is_empty(), "{:?}", lines(&found));
    assert_eq!(found.symlinks_skipped, 3);
    let names = files(&scope, "*");
    assert!(names.iter().all(|n| !n.starts_with("out_") && n != "inner.rs"), "{names:?}");
    assert!(!files(&scope, "*.rs").contains(&"out_dir/far.rs".to_owned()));
    let rendered = search_files(&scope, "*.rs", &Limits::default()).unwrap().render();
    assert!(rendered.ends_with("[3 symlinks not followed]"), "{rendered}");

    let outside = t.outside.display().to_string();
    let inside = t.root.canonicalize().unwrap().join("src").display().to_string();
    for (path, why) in [
        ("../outside", "`..`"),
        ("src/../../outside", "`..`"),
        (outside.as_str(), "outside the searched folder"),
        ("/etc", "outside the searched folder"),
        ("out_dir", "through a symlink"),
        ("out_file.txt", "through a symlink"),
    ] {
        let scope = Scope::new(&t.root).at(Some(path));
        let err = search_files(&scope, "*", &Limits::default()).unwrap_err().to_string();
        assert!(err.starts_with(&format!("path {path:?}: refused")) && err.contains(why), "{err}");
        let query = TextQuery { pattern: "hello", ..Default::default() };
        assert!(search_text(&scope, &query, &Limits::default()).is_err(), "{path}");
    }
    let err =
        search_files(&Scope::new(&t.root).at(Some("nope")), "*", &Limits::default()).unwrap_err();
    assert_eq!(err.to_string(), "path \"nope\": no such file or directory");
    // An absolute path inside the root is the same as the relative one.
    let abs = Scope::new(&t.root).at(Some(inside.as_str()));
    assert_eq!(files(&abs, "main.rs"), ["src/main.rs"]);
}

#[test]
fn hidden_entries_are_neither_listed_read_nor_a_starting_point() {
    let t = tree("hidden");
    std::fs::write(t.root.join("nexbot.db"), "hello from the database").unwrap();
    std::fs::create_dir_all(t.root.join("private")).unwrap();
    std::fs::write(t.root.join("private/notes.md"), "hello private").unwrap();
    let real = t.root.canonicalize().unwrap();
    let hide = move |p: &Path| p == real.join("nexbot.db") || p == real.join("private");
    let scope = Scope::new(&t.root).hiding(&hide);
    assert!(files(&scope, "*.db").is_empty());
    assert!(files(&scope, "*.md").iter().all(|n| !n.starts_with("private")));
    let found = text(&scope, TextQuery { pattern: "database|private", ..Default::default() });
    assert!(found.matches.is_empty(), "{:?}", lines(&found));
    for path in ["nexbot.db", "private", "private/notes.md", "./private"] {
        let err = search_files(
            &Scope::new(&t.root).at(Some(path)).hiding(&hide),
            "*",
            &Limits::default(),
        )
        .unwrap_err();
        assert!(err.to_string().contains("off limits"), "{path}: {err}");
    }
    // Positive control: without the filter both are found.
    let open = Scope::new(&t.root);
    assert_eq!(files(&open, "*.db"), ["nexbot.db"]);
    assert_eq!(
        text(&open, TextQuery { pattern: "database", ..Default::default() }).matches.len(),
        1
    );
}

#[test]
fn the_time_limit_stops_a_walk() {
    let t = tree("time");
    let scope = Scope::new(&t.root);
    let none = Limits { max_time: Duration::ZERO, ..Limits::default() };
    let found = search_files(&scope, "*", &none).unwrap();
    assert_eq!(found.cutoff, Some(Cutoff::Time(Duration::ZERO)));
    assert!(found.paths.is_empty());
}

/// A file opened through a folder that became a link (what a swap after the walker looked
/// leaves) is known by where it really is, and is not the root's.
#[test]
fn an_open_file_is_judged_by_where_it_really_is() {
    let t = tree("opened");
    let root = t.root.canonicalize().unwrap();
    let inside = File::open(root.join("src/main.rs")).unwrap();
    assert!(opened_within(&inside, &root));
    symlink(&t.outside, t.root.join("swapped")).unwrap();
    let through = File::open(root.join("swapped/secret.txt")).unwrap();
    assert!(!opened_within(&through, &root), "a file outside passed for the root's");
}
