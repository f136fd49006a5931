//! The README and the pages under `docs/` it links to are the whole set-up (issue 27, item 4;
//! issue 45 moved all but the quick start into `docs/`): the README's quick start names every
//! prerequisite and the first build's time, every `nexbot-ctl` example meant for compose (in
//! the README or any `docs/*.md` page) runs it in the daemon's container, `docs/deploy.md` says
//! where `localhost` points from the sandbox, `docs/skills.md` lists every bundled skill; and
//! `.env.example` describes `NEXBOT_MASTER_KEY` as what it is.

use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("repository root").to_owned()
}

fn readme() -> String {
    std::fs::read_to_string(repo().join("README.md")).expect("README.md")
}

/// A page under `docs/`, by its file name.
fn page(name: &str) -> String {
    std::fs::read_to_string(repo().join("docs").join(name))
        .unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// Every `docs/*.md` page, each with its path (for messages).
fn pages() -> Vec<(PathBuf, String)> {
    let mut pages: Vec<(PathBuf, String)> = std::fs::read_dir(repo().join("docs"))
        .expect("docs/")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .map(|p| {
            let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{p:?}: {e}"));
            (p, text)
        })
        .collect();
    pages.sort();
    assert!(pages.len() > 10, "docs/ holds the pages the README links to: {pages:?}");
    pages
}

/// The text of the `## ` section titled `title` (up to the next `## `).
fn section(text: &str, title: &str) -> String {
    let start = text.find(&format!("\n## {title}\n")).unwrap_or_else(|| panic!("no ## {title}"));
    let rest = &text[start + 1..];
    let end = rest[3..].find("\n## ").map_or(rest.len(), |i| i + 3);
    rest[..end].to_owned()
}

#[test]
fn the_quick_start_names_every_prerequisite_and_the_first_build_time() {
    let quick = section(&readme(), "Quick start");
    for needed in [
        "apt-get install docker.io",
        "apt-get install docker-compose",
        "https://sh.rustup.rs",
        "apt-get install busybox-static",
        "apt-get install iptables",
        "apt-get install gcc libc6-dev",
        "`make up` checks all of it first",
    ] {
        assert!(quick.contains(needed), "the quick start lacks {needed:?}");
    }
    assert!(quick.contains("The first `make up` compiles") && quick.contains(" min"), "{quick}");
}

#[test]
fn every_nexbot_ctl_example_for_compose_runs_in_the_daemons_container() {
    // The README and every page of docs/, each scanned on its own (a code block never spans
    // two files).
    let mut texts = vec![(PathBuf::from("README.md"), readme())];
    let mut by_hand_seen = false;
    for (path, text) in pages() {
        // Running the daemon by hand, the client is called directly.
        let text = if path.ends_with("deploy.md") {
            by_hand_seen = true;
            let by_hand = section(&text, "Try the agent in a terminal");
            text.replace(&by_hand, "")
        } else {
            text
        };
        texts.push((path, text));
    }
    assert!(by_hand_seen, "docs/deploy.md holds \"Try the agent in a terminal\"");
    let mut bare = Vec::new();
    for (path, text) in &texts {
        let shown = path.strip_prefix(repo()).unwrap_or(path).display().to_string();
        bare.extend(bare_ctl_examples(text).into_iter().map(|l| format!("{shown}: {l}")));
    }
    assert!(
        bare.is_empty(),
        "nexbot-ctl examples without `docker-compose exec host` or `make ctl`:\n{}",
        bare.join("\n")
    );
    // The operating page is the `## Operate it` section that was the README's, now its title.
    let ctl = page("operating.md");
    assert!(ctl.starts_with("# Operate it: `nexbot-ctl` and metrics\n"), "docs/operating.md");
    assert!(ctl.contains("`make ctl ARGS=\"...\"`"), "the shortcut is not explained");
}

/// The lines of `text` that run `nexbot-ctl` bare: whole lines in code blocks, and piped
/// commands in inline code.
fn bare_ctl_examples(text: &str) -> Vec<String> {
    let mut bare = Vec::new();
    let mut in_block = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_block = !in_block;
            continue;
        }
        // Commands: whole lines in code blocks, and piped commands in inline code.
        let commands: Vec<&str> = if in_block {
            vec![line]
        } else {
            line.split('`')
                .skip(1)
                .step_by(2)
                .filter(|code| code.contains("| nexbot-ctl"))
                .collect()
        };
        for command in commands {
            for (at, _) in command.match_indices("nexbot-ctl ") {
                let before = command[..at].trim_end();
                let starts_command = before.is_empty()
                    || before.ends_with('$')
                    || before.ends_with('|')
                    || before.ends_with("&&");
                if starts_command {
                    bare.push(line.to_owned());
                }
            }
        }
    }
    bare
}

#[test]
fn the_docs_say_where_localhost_points_and_list_every_bundled_skill() {
    let text = page("deploy.md");
    let localhost = text.find("\n## Where `localhost` points").expect("no localhost section");
    let localhost = &text[localhost..(localhost + 1500).min(text.len())];
    assert!(localhost.contains("**Inside the sandbox**"), "{localhost}");
    assert!(localhost.contains("`localhost` is the subagent container itself"), "{localhost}");
    let mut skills: Vec<String> = std::fs::read_dir(repo().join("skills"))
        .expect("skills/")
        .flatten()
        .filter(|e| e.path().join("SKILL.md").is_file())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    skills.sort();
    assert!(skills.len() >= 5, "{skills:?}");
    let text = page("skills.md");
    for skill in skills {
        assert!(text.contains(&format!("| `{skill}` |")), "docs/skills.md does not list {skill}");
    }
}

#[test]
fn env_example_describes_the_master_key_as_the_vaults_key() {
    let example = std::fs::read_to_string(repo().join(".env.example")).unwrap();
    let at = example.find("\nNEXBOT_MASTER_KEY=").expect("NEXBOT_MASTER_KEY in .env.example");
    // The comment block right above the setting.
    let comment: Vec<&str> =
        example[..at].lines().rev().take_while(|l| l.starts_with('#')).collect();
    let comment = comment.join("\n");
    assert!(comment.contains("secrets vault") && comment.contains("16 characters"), "{comment}");
    assert!(!comment.contains("later version"), "{comment}");
}
