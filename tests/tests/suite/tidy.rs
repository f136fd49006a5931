//! ARCHITECTURE.md checked against the tree, in the manner of rust-analyzer's tidy tests: the
//! crate graph it draws is `cargo metadata`'s (every arrow, and no arrow missing), and every
//! repository path it names exists. A renamed file or a new dependency between Nexbot crates
//! fails here until the document says so.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the workspace root").to_owned()
}

fn architecture() -> String {
    std::fs::read_to_string(root().join("ARCHITECTURE.md")).expect("ARCHITECTURE.md")
}

type Graph = BTreeMap<String, BTreeSet<String>>;

/// Each workspace crate and the workspace crates it depends on (normal and build
/// dependencies; dev-dependencies are the tests' business), from `cargo metadata`.
fn cargo_graph() -> Graph {
    let out = std::process::Command::new(env!("CARGO"))
        .args(["metadata", "--format-version", "1", "--no-deps", "--offline"])
        .current_dir(root())
        .output()
        .expect("cargo metadata runs");
    assert!(out.status.success(), "cargo metadata: {}", String::from_utf8_lossy(&out.stderr));
    let metadata: serde_json::Value = serde_json::from_slice(&out.stdout).expect("metadata JSON");
    let packages = metadata["packages"].as_array().expect("packages");
    let members: BTreeSet<String> =
        packages.iter().filter_map(|p| p["name"].as_str().map(str::to_owned)).collect();
    packages
        .iter()
        .map(|p| {
            let deps = p["dependencies"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|d| d["kind"].is_null() || d["kind"] == "build")
                .filter_map(|d| d["name"].as_str())
                .filter(|name| members.contains(*name))
                .map(str::to_owned)
                .collect();
            (p["name"].as_str().unwrap_or_default().to_owned(), deps)
        })
        .collect()
}

/// The graph ARCHITECTURE.md states: the fenced block opened by "```text crate-graph", one
/// line per crate, `crate -> dep, dep` (nothing after the arrow: depends on no Nexbot crate);
/// text after `#` is a comment.
fn documented_graph(doc: &str) -> Graph {
    let start = doc
        .lines()
        .position(|l| l.trim() == "```text crate-graph")
        .expect("ARCHITECTURE.md has a ```text crate-graph block");
    let mut graph = Graph::new();
    for line in doc.lines().skip(start + 1).take_while(|l| l.trim() != "```") {
        let line = line.split('#').next().unwrap_or_default().trim();
        if line.is_empty() {
            continue;
        }
        let (name, deps) = line.split_once("->").unwrap_or_else(|| panic!("no arrow: {line:?}"));
        let deps = deps.split(',').map(str::trim).filter(|d| !d.is_empty()).map(str::to_owned);
        let previous = graph.insert(name.trim().to_owned(), deps.collect());
        assert!(previous.is_none(), "{name} is listed twice");
    }
    graph
}

#[test]
fn the_crate_graph_in_architecture_md_is_cargos() {
    let documented = documented_graph(&architecture());
    let actual = cargo_graph();
    let mut wrong = Vec::new();
    for name in actual.keys().chain(documented.keys()).collect::<BTreeSet<_>>() {
        let (is, says) = (actual.get(name), documented.get(name));
        if is != says {
            wrong.push(format!("{name}: Cargo.toml says {is:?}, ARCHITECTURE.md says {says:?}"));
        }
    }
    assert!(wrong.is_empty(), "update the crate-graph block:\n{}", wrong.join("\n"));
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

#[test]
fn the_tidy_scans_see_what_they_look_for() {
    let doc = "```text crate-graph\na -> b, c # why\nb ->\n```\nsee `host/src/app.rs`, `pool.rs`, \
               `/workspace/x`, `docs/protocol.md#lifecycle` and `host/src/<x>.rs`";
    let graph = documented_graph(doc);
    assert_eq!(graph["a"], BTreeSet::from(["b".to_owned(), "c".to_owned()]));
    assert!(graph["b"].is_empty());
    let paths = named_paths(doc);
    assert_eq!(
        paths,
        BTreeSet::from(["host/src/app.rs".to_owned(), "docs/protocol.md".to_owned()])
    );
}
