//! A crate's modules and the modules of the same crate each one names (`crate::name`), in
//! product lines outside comments: the graph the host's one-direction check walks.

use std::collections::{BTreeMap, BTreeSet};

use crate::sources::Source;

/// Module (the first path component under `src_dir`, a file's stem or a folder) → the
/// modules of the same crate it names. `lib.rs`, `main.rs` and `bin/` are the roots, left out.
pub fn graph(files: &[Source], src_dir: &str) -> BTreeMap<String, BTreeSet<String>> {
    let module_of = |path: &str| -> Option<String> {
        let rest = path.strip_prefix(src_dir)?.trim_start_matches('/');
        let first = rest.split('/').next()?;
        let name = first.strip_suffix(".rs").unwrap_or(first);
        (!matches!(name, "lib" | "main" | "bin")).then(|| name.to_owned())
    };
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in files {
        let Some(module) = module_of(&file.path) else { continue };
        let named = graph.entry(module.clone()).or_default();
        for (_, line) in file.product_lines() {
            let code = line.split("//").next().unwrap_or("");
            for (at, _) in code.match_indices("crate::") {
                let word: String = code[at + "crate::".len()..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if word != module && !word.is_empty() {
                    named.insert(word);
                }
            }
        }
    }
    let modules: BTreeSet<String> = graph.keys().cloned().collect();
    for named in graph.values_mut() {
        named.retain(|m| modules.contains(m));
    }
    graph
}

/// A circle of `graph` (its modules in order, the first repeated last), if it has one.
pub fn circle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn walk<'g>(
        at: &'g str,
        graph: &'g BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<&'g str>,
        done: &mut BTreeSet<&'g str>,
    ) -> Option<Vec<String>> {
        if let Some(start) = path.iter().position(|m| *m == at) {
            let mut circle: Vec<String> = path[start..].iter().map(|m| (*m).to_owned()).collect();
            circle.push(at.to_owned());
            return Some(circle);
        }
        if !done.insert(at) {
            return None;
        }
        path.push(at);
        for next in graph.get(at).into_iter().flatten() {
            if let Some(circle) = walk(next, graph, path, done) {
                return Some(circle);
            }
        }
        path.pop();
        None
    }
    let mut done = BTreeSet::new();
    graph.keys().find_map(|m| walk(m, graph, &mut Vec::new(), &mut done))
}
