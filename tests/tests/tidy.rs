//! ARCHITECTURE.md checked against the tree, in the manner of rust-analyzer's tidy tests: the
//! crate graph it draws is `cargo metadata`'s (every arrow, and no arrow missing), so are the
//! outside dependencies it says belong to one place, every workspace crate has its entry in the
//! code map, every repository path it names exists, every test it names (`file.rs::name`) is a
//! function of that file, and every invariant points at what enforces it. A renamed file or
//! test, a new crate or a new dependency between crates fails here until the document says so.
//!
//! A test binary of its own (`cargo test -p nexbot-tests --test tidy`): it needs no Docker, and
//! `tests/run-suites.sh` runs it first, so a stale map fails within seconds.
//!
//! Scans of the product's sources live here too, over the workspace's members as
//! `cargo metadata` lists them (never a hand-kept list of folders), so a new crate is scanned
//! from its first commit: the provider wire read only by `nexbot-llm`, and no product file
//! over 1,000 lines. And the host, the wiring, imports in one direction: no circle among its
//! modules.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

#[path = "tidy/modules.rs"]
mod modules;
#[path = "tidy/sources.rs"]
mod sources;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the workspace root").to_owned()
}

fn architecture() -> String {
    std::fs::read_to_string(root().join("ARCHITECTURE.md")).expect("ARCHITECTURE.md")
}

type Graph = BTreeMap<String, BTreeSet<String>>;

/// A workspace member as `cargo metadata` describes it.
struct Member {
    name: String,
    /// Its folder, relative to the workspace root (`core`, `host`).
    dir: String,
    /// The names of its normal and build dependencies (dev-dependencies are the tests'
    /// business), Nexbot's and outside ones.
    deps: BTreeSet<String>,
}

/// The workspace's members, from `cargo metadata --no-deps`.
fn members() -> Vec<Member> {
    let out = std::process::Command::new(env!("CARGO"))
        .args(["metadata", "--format-version", "1", "--no-deps", "--offline"])
        .current_dir(root())
        .output()
        .expect("cargo metadata runs");
    assert!(out.status.success(), "cargo metadata: {}", String::from_utf8_lossy(&out.stderr));
    let metadata: serde_json::Value = serde_json::from_slice(&out.stdout).expect("metadata JSON");
    let root = root().canonicalize().expect("the root");
    let members: Vec<Member> = metadata["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .map(|p| {
            let manifest = Path::new(p["manifest_path"].as_str().expect("manifest_path"));
            let dir = manifest.parent().expect("a manifest's folder");
            let dir = dir.strip_prefix(&root).expect("a member inside the workspace");
            let deps = p["dependencies"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|d| d["kind"].is_null() || d["kind"] == "build")
                .filter_map(|d| d["name"].as_str().map(str::to_owned))
                .collect();
            Member {
                name: p["name"].as_str().expect("a package name").to_owned(),
                dir: dir.to_string_lossy().into_owned(),
                deps,
            }
        })
        .collect();
    assert!(members.len() > 10, "cargo metadata lists the workspace's members");
    members
}

/// Each workspace crate and the workspace crates it depends on.
fn cargo_graph(members: &[Member]) -> Graph {
    let names: BTreeSet<&str> = members.iter().map(|m| m.name.as_str()).collect();
    members
        .iter()
        .map(|m| {
            let deps = m.deps.iter().filter(|d| names.contains(d.as_str())).cloned().collect();
            (m.name.clone(), deps)
        })
        .collect()
}

/// The lines of the fenced block opened by "```text <tag>", comments (after `#`) and blank
/// lines left out.
fn fenced_block<'a>(doc: &'a str, tag: &str) -> Vec<&'a str> {
    let opening = format!("```text {tag}");
    let start = doc
        .lines()
        .position(|l| l.trim() == opening)
        .unwrap_or_else(|| panic!("ARCHITECTURE.md has a {opening} block"));
    doc.lines()
        .skip(start + 1)
        .take_while(|l| l.trim() != "```")
        .map(|l| l.split('#').next().unwrap_or_default().trim())
        .filter(|l| !l.is_empty())
        .collect()
}

/// `name -> a, b` lines as a map (nothing after the arrow: an empty set).
fn arrows(lines: &[&str]) -> Graph {
    let mut graph = Graph::new();
    for line in lines {
        let (name, deps) = line.split_once("->").unwrap_or_else(|| panic!("no arrow: {line:?}"));
        let deps = deps.split(',').map(str::trim).filter(|d| !d.is_empty()).map(str::to_owned);
        let previous = graph.insert(name.trim().to_owned(), deps.collect());
        assert!(previous.is_none(), "{name} is listed twice");
    }
    graph
}

/// Where two graphs differ, one line per name.
fn differences(actual: &Graph, documented: &Graph) -> Vec<String> {
    let mut wrong = Vec::new();
    for name in actual.keys().chain(documented.keys()).collect::<BTreeSet<_>>() {
        let (is, says) = (actual.get(name), documented.get(name));
        if is != says {
            wrong.push(format!("{name}: Cargo.toml says {is:?}, ARCHITECTURE.md says {says:?}"));
        }
    }
    wrong
}

/// The graph ARCHITECTURE.md states: the fenced block opened by "```text crate-graph", one
/// line per crate, `crate -> dep, dep` (nothing after the arrow: depends on no Nexbot crate);
/// text after `#` is a comment.
fn documented_graph(doc: &str) -> Graph {
    arrows(&fenced_block(doc, "crate-graph"))
}

#[test]
fn the_crate_graph_in_architecture_md_is_cargos() {
    let wrong = differences(&cargo_graph(&members()), &documented_graph(&architecture()));
    assert!(wrong.is_empty(), "update the crate-graph block:\n{}", wrong.join("\n"));
}

/// Outside dependencies that belong to one place: the block "```text exclusive-deps", one line
/// per dependency, `dependency -> crate, crate`, naming every workspace crate that depends on
/// it (normal and build dependencies).
fn documented_exclusive_deps(doc: &str) -> Graph {
    arrows(&fenced_block(doc, "exclusive-deps"))
}

#[test]
fn the_exclusive_dependencies_in_architecture_md_are_cargos() {
    let documented = documented_exclusive_deps(&architecture());
    assert!(!documented.is_empty(), "the exclusive-deps block lists dependencies");
    let members = members();
    let actual: Graph = documented
        .keys()
        .map(|dep| {
            let users = members.iter().filter(|m| m.deps.contains(dep)).map(|m| m.name.clone());
            (dep.clone(), users.collect())
        })
        .collect();
    let wrong = differences(&actual, &documented);
    assert!(wrong.is_empty(), "update the exclusive-deps block:\n{}", wrong.join("\n"));
}

/// The text of the section that starts with the heading `heading` (up to the next heading of
/// that level or higher).
fn section<'a>(doc: &'a str, heading: &str) -> &'a str {
    let start = doc.find(&format!("\n{heading}\n")).unwrap_or_else(|| panic!("no {heading:?}"));
    let body = &doc[start + heading.len() + 2..];
    let level = heading.split(' ').next().unwrap_or_default();
    let end = body
        .match_indices('\n')
        .map(|(i, _)| i + 1)
        .find(|&i| {
            let hashes = body[i..].split(' ').next().unwrap_or_default();
            !hashes.is_empty() && hashes.chars().all(|c| c == '#') && hashes.len() <= level.len()
        })
        .unwrap_or(body.len());
    &body[..end]
}

/// The code map's crate entries: its `###` headings of the form `` `dir/` (`name`) ``, as
/// (folder, crate name).
fn code_map_entries(doc: &str) -> BTreeSet<(String, String)> {
    section(doc, "## Code map")
        .lines()
        .filter_map(|l| l.strip_prefix("### "))
        .filter_map(|heading| {
            let pieces: Vec<&str> = heading.split('`').collect();
            // "", "dir/", " (", "name", ")"
            match pieces.as_slice() {
                ["", dir, " (", name, ")"] if dir.ends_with('/') => {
                    Some((dir.trim_end_matches('/').to_owned(), (*name).to_owned()))
                }
                _ => None,
            }
        })
        .collect()
}

#[test]
fn every_workspace_crate_is_in_the_code_map() {
    let documented = code_map_entries(&architecture());
    let actual: BTreeSet<(String, String)> =
        members().into_iter().map(|m| (m.dir, m.name)).collect();
    let missing: Vec<_> = actual.difference(&documented).collect();
    let unknown: Vec<_> = documented.difference(&actual).collect();
    assert!(
        missing.is_empty() && unknown.is_empty(),
        "the code map needs a \"### `dir/` (`name`)\" entry per workspace crate: missing \
         {missing:?}, not a workspace crate {unknown:?}"
    );
}

/// Backticked repository paths (`host/src/app.rs`, `docs/protocol.md`, `docker/`): those
/// whose first part is a top-level entry of the repository, so that a path relative to a
/// section's crate (`pool.rs`) or inside a container (`/workspace`) is not taken for one.
fn named_paths(doc: &str) -> BTreeSet<String> {
    let top: BTreeSet<String> = std::fs::read_dir(root())
        .expect("the root")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| name != "target")
        .collect();
    let mut paths = BTreeSet::new();
    for (i, piece) in doc.split('`').enumerate() {
        // Odd pieces are inside backticks.
        if i % 2 == 0 || piece.contains(char::is_whitespace) || piece.is_empty() {
            continue;
        }
        let path = piece.split(['#', ':']).next().unwrap_or_default();
        if path.contains(['<', '>', '*', '{', '}', '…']) {
            continue;
        }
        let first = path.split('/').next().unwrap_or_default();
        let is_path = path.contains('/') || path.ends_with(".md") || path.ends_with(".yaml");
        if is_path && top.contains(first) {
            paths.insert(path.to_owned());
        }
    }
    paths
}

#[test]
fn every_path_architecture_md_names_exists() {
    let paths = named_paths(&architecture());
    assert!(paths.len() > 50, "the scan finds the document's paths: {paths:?}");
    let missing: Vec<&String> = paths.iter().filter(|p| !root().join(p).exists()).collect();
    assert!(missing.is_empty(), "ARCHITECTURE.md names paths that do not exist: {missing:#?}");
}

/// Backticked tests, `path/to/file.rs::function_name`, as (path, function).
fn named_tests(doc: &str) -> BTreeSet<(String, String)> {
    doc.split('`')
        .skip(1)
        .step_by(2)
        .filter_map(|piece| piece.split_once(".rs::"))
        .filter(|(path, name)| {
            !path.contains(char::is_whitespace)
                && !name.is_empty()
                && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        })
        .map(|(path, name)| (format!("{path}.rs"), name.to_owned()))
        .collect()
}

#[test]
fn every_test_architecture_md_names_exists() {
    let tests = named_tests(&architecture());
    assert!(tests.len() > 10, "the scan finds the document's tests: {tests:?}");
    let missing: Vec<String> = tests
        .iter()
        .filter(|(path, name)| {
            let text = std::fs::read_to_string(root().join(path)).unwrap_or_default();
            !text.contains(&format!("fn {name}("))
        })
        .map(|(path, name)| format!("{path}::{name}"))
        .collect();
    assert!(missing.is_empty(), "ARCHITECTURE.md names tests that do not exist: {missing:#?}");
}

/// The Invariants section's items (a `- ` line and its indented continuation lines, joined).
fn invariants(doc: &str) -> Vec<String> {
    let mut items: Vec<String> = Vec::new();
    for line in section(doc, "## Invariants").lines() {
        if let Some(item) = line.strip_prefix("- ") {
            items.push(item.to_owned());
        } else if let (Some(rest), Some(last)) = (line.strip_prefix("  "), items.last_mut()) {
            last.push(' ');
            last.push_str(rest.trim());
        }
    }
    items
}

#[test]
fn every_invariant_points_at_what_enforces_it() {
    let items = invariants(&architecture());
    assert!(items.len() > 10, "the scan finds the invariants: {items:?}");
    let unenforced: Vec<&String> = items
        .iter()
        .filter(|item| match item.rsplit_once('→') {
            Some((_, enforcer)) => named_paths(enforcer).is_empty(),
            None => true,
        })
        .collect();
    assert!(
        unenforced.is_empty(),
        "each invariant ends \"→ `the crate's Cargo.toml`, `its clippy.toml` or `the test`\": \
         {unenforced:#?}"
    );
}

/// Keys only a parser (or builder) of chat-completion JSON needs, as string literals or as
/// serde field names.
const WIRE_KEYS: &[&str] = &[
    "choices",
    "finish_reason",
    "\"completion_tokens\"",
    "\"total_tokens\"",
    "\"delta\"",
    "\"tool_calls\"",
];

/// The product sources of `members` (see [`sources`]), the test-fixture crate's left out.
fn product_sources(members: &[&Member]) -> Vec<sources::Source> {
    members
        .iter()
        .filter(|m| m.name != "nexbot-tests")
        .flat_map(|m| sources::product_files(&root(), &m.dir))
        .collect()
}

/// Product lines of `members` (outside test modules and comments) that hold a key of the
/// provider wire.
fn wire_keys_in(members: &[&Member]) -> Vec<String> {
    let mut found = Vec::new();
    for file in product_sources(members) {
        for (n, line) in file.product_lines() {
            let line = line.split("//").next().unwrap_or("");
            if let Some(key) = WIRE_KEYS.iter().find(|k| line.contains(*k)) {
                found.push(format!("{}:{n}: {key}", file.path));
            }
        }
    }
    found
}

/// "Nothing else parses provider JSON": the keys of the OpenAI wire appear only in
/// `nexbot-llm` among the product crates — every workspace member but the test-fixture crate,
/// which may build wire JSON. A copy of the wire types (or a hand-rolled usage or error
/// parser) elsewhere fails here with its file and line.
#[test]
fn only_nexbot_llm_reads_the_provider_wire() {
    let members = members();
    let (llm, others): (Vec<&Member>, Vec<&Member>) =
        members.iter().filter(|m| m.name != "nexbot-tests").partition(|m| m.name == "nexbot-llm");
    assert!(others.len() > 10, "the scan covers the product crates");
    let found = wire_keys_in(&others);
    assert!(found.is_empty(), "provider JSON handled outside nexbot-llm:\n{}", found.join("\n"));
    // Positive control: the scan sees the keys where they are.
    assert!(!wire_keys_in(&llm).is_empty());
}

/// The most lines a product source file may have, its unit tests not counted (issue 45): a
/// file past it holds more than one thing and is split by meaning, not by count.
const MAX_PRODUCT_LINES: usize = 1_000;

/// No product source file is over [`MAX_PRODUCT_LINES`] lines (its test modules not counted);
/// each offender is named with its count.
#[test]
fn no_product_source_file_is_over_a_thousand_lines() {
    let members = members();
    let files = product_sources(&members.iter().collect::<Vec<_>>());
    assert!(files.len() > 100, "the scan sees the product's sources: {}", files.len());
    let over: Vec<String> = files
        .iter()
        .map(|f| (&f.path, f.product_lines().len()))
        .filter(|(_, lines)| *lines > MAX_PRODUCT_LINES)
        .map(|(file, lines)| format!("{file}: {lines} product lines"))
        .collect();
    assert!(
        over.is_empty(),
        "product source files over {MAX_PRODUCT_LINES} lines (outside their test modules); split \
         them by meaning into modules:\n{}",
        over.join("\n")
    );
}

/// Every definition of each type name in `names` in the product code of `members`, as
/// `file:line`.
fn type_definitions(members: &[&Member], names: &[&str]) -> BTreeMap<String, Vec<String>> {
    let mut found: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for file in product_sources(members) {
        for (n, line) in file.product_lines() {
            for name in sources::defined_types(line).into_iter().filter(|t| names.contains(t)) {
                found.entry(name.to_owned()).or_default().push(format!("{}:{n}", file.path));
            }
        }
    }
    found
}

/// Product lines of `members` that hold one of `words` as a whole word or path (not part of a
/// longer name), comments left out.
fn forbidden_in(members: &[&Member], words: &[&str]) -> Vec<String> {
    let is_ident = |c: char| c.is_alphanumeric() || c == '_';
    let mut found = Vec::new();
    for file in product_sources(members) {
        for (n, line) in file.product_lines() {
            let code = line.split("//").next().unwrap_or_default();
            for word in words {
                let whole = code.match_indices(word).any(|(at, _)| {
                    !code[..at].ends_with(is_ident)
                        && !code[at + word.len()..].starts_with(is_ident)
                });
                if whole {
                    found.push(format!("{}:{n}: {word}", file.path));
                }
            }
        }
    }
    found
}

/// One meaning per name (issue 45): each type name of the "```text unique-type-names" block
/// is defined (`struct`, `enum`, `union`, `trait` or `type`) at most once in the product code
/// of the workspace, and no name of the "```text forbidden-names" block (old names of what was
/// renamed) appears in it at all. The Glossary says what each name means.
#[test]
fn each_listed_type_name_has_one_meaning() {
    let doc = architecture();
    let unique: Vec<&str> = fenced_block(&doc, "unique-type-names")
        .into_iter()
        .flat_map(str::split_whitespace)
        .collect();
    assert!(unique.len() > 3, "the unique-type-names block lists names: {unique:?}");
    let members = members();
    let members: Vec<&Member> = members.iter().collect();
    let definitions = type_definitions(&members, &unique);
    // Positive control: the scan finds the definitions there are.
    assert!(definitions.contains_key("Scope"), "the scan finds `Scope`: {definitions:?}");
    let doubled: Vec<String> = definitions
        .iter()
        .filter(|(_, places)| places.len() > 1)
        .map(|(name, places)| format!("{name}: {}", places.join(", ")))
        .collect();
    assert!(
        doubled.is_empty(),
        "each of these names means one thing (ARCHITECTURE.md, Glossary); rename all but one by \
         what it is:\n{}",
        doubled.join("\n")
    );
    let forbidden: Vec<&str> =
        fenced_block(&doc, "forbidden-names").into_iter().flat_map(str::split_whitespace).collect();
    let found = forbidden_in(&members, &forbidden);
    assert!(found.is_empty(), "old names that were renamed came back:\n{}", found.join("\n"));
}

/// The host is wiring: its modules import in one direction (`app` names what it starts, nothing
/// it starts names `app`'s parts back), so no circle runs through them.
#[test]
fn the_hosts_modules_import_in_one_direction() {
    let members = members();
    let host: Vec<&Member> = members.iter().filter(|m| m.name == "nexbot-host").collect();
    let files = product_sources(&host);
    let graph = modules::graph(&files, "host/src");
    assert!(
        graph.len() > 10 && graph["app"].contains("sandbox"),
        "the scan sees the host: {graph:?}"
    );
    assert_eq!(modules::circle(&graph), None, "a circle among the host's modules");
    // And stays wiring: a subsystem grown inside it moves to a crate of its own.
    let code: usize = files
        .iter()
        .flat_map(|f| f.product_lines())
        .filter(|(_, line)| !line.trim().is_empty() && !line.trim_start().starts_with("//"))
        .count();
    assert!(
        code <= 5_000,
        "the host has {code} lines of product code (at most 5,000): move a subsystem out"
    );
}

#[test]
fn the_tidy_scans_see_what_they_look_for() {
    let doc = "```text crate-graph\na -> b, c # why\nb ->\n```\nsee `host/src/app.rs`, `pool.rs`, \
               `/workspace/x`, `docs/protocol.md#lifecycle` and `host/src/<x>.rs`\n\
               ```text exclusive-deps\nrusqlite -> s\n```\n\
               ## Code map\n\n### `core/` (`nexbot-core`)\n\n### Outside the crates\n\n\
               ## Invariants\n\n**A group**\n- one → `host/src/app.rs::a_test`, the rest\n  \
               wrapped\n- two, by no one\n\n## Glossary\n\n### `x/` (`not-in-the-map`)\n";
    let graph = documented_graph(doc);
    assert_eq!(graph["a"], BTreeSet::from(["b".to_owned(), "c".to_owned()]));
    assert!(graph["b"].is_empty());
    assert_eq!(documented_exclusive_deps(doc)["rusqlite"], BTreeSet::from(["s".to_owned()]));
    let paths = named_paths(doc);
    assert_eq!(
        paths,
        BTreeSet::from(["host/src/app.rs", "docs/protocol.md", "core/"].map(str::to_owned))
    );
    assert_eq!(
        code_map_entries(doc),
        BTreeSet::from([("core".to_owned(), "nexbot-core".to_owned())])
    );
    assert_eq!(
        named_tests(doc),
        BTreeSet::from([("host/src/app.rs".to_owned(), "a_test".to_owned())])
    );
    assert_eq!(
        invariants(doc),
        ["one → `host/src/app.rs::a_test`, the rest wrapped", "two, by no one"]
    );
    // Product lines leave out the test module only, by its braces (not those in strings, chars
    // or comments), and go on after it; another `#[cfg(test)]` item is product code.
    let source = "fn a() {}\n#[cfg(test)]\nfn helper() {}\n#[cfg(test)]\n#[allow(dead_code)]\n\
                  mod tests {\n    fn t() { let _ = (\"}\", '}', r#\"}\"#); } // }\n    /* } */\n}\n\
                  fn b<'a>(x: &'a str) {}\n";
    let lines: Vec<usize> = sources::product_lines(source).iter().map(|(n, _)| *n).collect();
    assert_eq!(lines, [1, 2, 3, 10]);
    assert_eq!(sources::product_lines("fn a() {}\n#[cfg(test)]\nmod tests;\n").len(), 3);
    assert!(sources::product_lines("").is_empty());
    assert_eq!(sources::defined_types("pub(crate) struct Scope<'a> { // enum Not"), ["Scope"]);
    assert_eq!(sources::defined_types("    type Output = Ledger;"), ["Output"]);
    // A circle through two modules, seen by the graph (a comment's name is not an import).
    let file = |path: &str, text: &str| sources::Source { path: path.into(), text: text.into() };
    let files = [
        file("h/src/config.rs", "use crate::pool::x; // crate::app\n"),
        file("h/src/pool/mod.rs", "fn f() { crate::config::load(); }\n"),
        file("h/src/app.rs", "use crate::pool::y;\n"),
        file("h/src/lib.rs", "pub use crate::app::App;\n"),
    ];
    let graph = modules::graph(&files, "h/src");
    assert_eq!(graph.len(), 3, "{graph:?}");
    assert!(!graph["config"].contains("app"), "{graph:?}");
    let circle = modules::circle(&graph).expect("the circle");
    assert_eq!(circle.first(), circle.last());
    assert_eq!(circle.len(), 3, "{circle:?}");
    let files = [file("h/src/app.rs", "use crate::pool::y;\n"), file("h/src/pool.rs", "")];
    assert_eq!(modules::circle(&modules::graph(&files, "h/src")), None);
}
