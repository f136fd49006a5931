//! The README is the whole set-up (issue 27, item 4): its quick start names every prerequisite
//! and the first build's time, every `nexbot-ctl` example meant for compose runs it in the
//! daemon's container, it says where `localhost` points from the sandbox, it lists every
//! bundled skill; and `.env.example` describes `NEXBOT_MASTER_KEY` as what it is.

use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("repository root").to_owned()
}

fn readme() -> String {
    std::fs::read_to_string(repo().join("README.md")).expect("README.md")
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
    let text = readme();
    // Running the daemon by hand, the client is called directly.
    let by_hand = section(&text, "Try the agent in a terminal");
    let text = text.replace(&by_hand, "");
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
    assert!(
        bare.is_empty(),
        "nexbot-ctl examples without `docker-compose exec host` or `make ctl`:\n{}",
        bare.join("\n")
    );
    let ctl = section(&text, "Operate it: `nexbot-ctl` and metrics");
    assert!(ctl.contains("`make ctl ARGS=\"...\"`"), "the shortcut is not explained");
}

#[test]
fn the_readme_says_where_localhost_points_and_lists_every_bundled_skill() {
    let text = readme();
    let localhost = text.find("### Where `localhost` points").expect("no localhost section");
    let localhost = &text[localhost..localhost + 1500];
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
    for skill in skills {
        assert!(text.contains(&format!("| `{skill}` |")), "README does not list {skill}");
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
