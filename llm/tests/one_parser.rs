//! "Nothing else parses provider JSON": the keys of the OpenAI wire appear, as string
//! literals, only in `nexbot-llm` among the product crates. A copy of the wire types (or a
//! hand-rolled usage or error parser) elsewhere fails here with its file and line.

use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The product crates' `src/` folders (tests and the test-fixture crate may build wire JSON).
const PRODUCT: &[&str] =
    &["core", "protocol", "subagent", "docker", "egress", "telegram", "control", "ctl", "host"];

/// Keys only a parser (or builder) of chat-completion JSON needs.
const WIRE_KEYS: &[&str] = &[
    // As string literals or as serde field names.
    "choices",
    "finish_reason",
    "\"completion_tokens\"",
    "\"total_tokens\"",
    "\"delta\"",
    "\"tool_calls\"",
];

fn offending(root: &Path, crates: &[&str]) -> Vec<String> {
    let mut found = Vec::new();
    for krate in crates {
        let mut files = Vec::new();
        rust_files(&root.join(krate).join("src"), &mut files);
        for file in files {
            let text = std::fs::read_to_string(&file).unwrap();
            // Unit tests inside a source file may spell the wire out.
            let code = text.split("#[cfg(test)]").next().unwrap_or("");
            for (n, line) in code.lines().enumerate() {
                let line = line.split("//").next().unwrap_or("");
                if let Some(key) = WIRE_KEYS.iter().find(|k| line.contains(*k)) {
                    found.push(format!("{}:{}: {key}", file.display(), n + 1));
                }
            }
        }
    }
    found
}

#[test]
fn only_nexbot_llm_reads_the_wire() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let found = offending(root, PRODUCT);
    assert!(found.is_empty(), "provider JSON handled outside nexbot-llm:\n{}", found.join("\n"));
    // Positive control: the scan sees the keys where they are.
    assert!(!offending(root, &["llm"]).is_empty());
}
