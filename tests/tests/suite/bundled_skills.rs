//! The skills shipped in `skills/`: each is a well-formed skill folder as `nexbot-skill` reads
//! it (front matter with a `name` matching the folder, a `description`, and `tools` the
//! subagent really has; nothing the content screen flags), and a
//! subagent in a hardened pool container, with the folder mounted read-only the way the
//! deployment mounts it, lists them with their descriptions and reads one in full.

use crate::pool_common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use nexbot_docker::{Pool, PoolConfig};
use nexbot_protocol::ResponseBody;
use nexbot_tests::scripted_llm::Step;
use pool_common::{exec, llm_on, setup, task};
use serde_json::json;
use tokio_util::sync::CancellationToken;

fn skills_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().join("skills")
}

/// Names of the bundled skill folders.
fn bundled() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(skills_dir())
        .expect("skills/ exists")
        .map(|e| e.unwrap())
        .filter(|e| e.file_type().unwrap().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn every_bundled_skill_is_well_formed() {
    // The one parser the host and the subagent use, with its strictness and content screen.
    let names = bundled();
    assert!(names.contains(&"web-research".to_owned()), "{names:?}");
    let entries = nexbot_skill::scan_dir(&skills_dir(), &nexbot_skill::Environment::default())
        .expect("skills/ reads");
    assert_eq!(entries.iter().map(|e| e.name.clone()).collect::<Vec<_>>(), names);
    for entry in entries {
        let name = &entry.name;
        assert_eq!(entry.state, nexbot_skill::State::Ok, "{name}: {:?}", entry.reason);
        assert!(
            name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'),
            "{name}: folder names are plain (a-z, 0-9, -)"
        );
        let description = entry.description().unwrap_or_default();
        assert!(
            !description.is_empty() && description.chars().count() <= 200,
            "{name}: description must be 1..=200 characters (read_skill shows 200)"
        );
    }
}

/// Runs one task in `pool` whose model lists the skills, then reads `skill` with `read_skill`;
/// returns the three chat requests the scripted model received (the listing is in the second,
/// the skill's body in the third).
async fn list_then_read(
    pool: &Pool,
    id: &str,
    text: &str,
    skill: &str,
) -> Vec<nexbot_tests::scripted_llm::Recorded> {
    let gateway = pool.network().gateway;
    let llm = llm_on(
        gateway,
        vec![
            Step::tool_call("read_skill", json!({})),
            Step::tool_call("read_skill", json!({"name": skill})),
            Step::text("done"),
        ],
    )
    .await;
    let answer = tokio::time::timeout(
        Duration::from_secs(90),
        pool.execute(task(id, text, &llm, gateway), CancellationToken::new()),
    )
    .await
    .expect("answered in time")
    .expect("task ran");
    assert!(matches!(answer.body, ResponseBody::Success { .. }), "{answer:?}");
    let chats = llm.chat_requests();
    assert_eq!(chats.len(), 3, "one call per step");
    chats
}

#[tokio::test]
async fn a_pool_subagent_lists_and_reads_the_bundled_skills_read_only() {
    let Some((docker, config)) = setup("skills").await else { return };
    let config = PoolConfig { size: 1, skills_dir: Some(skills_dir()), ..config };
    let pool = Pool::start(docker.clone(), config).await.expect("pool starts");
    let chats = list_then_read(&pool, "skills-1", "Which skills are there?", "web-research").await;
    let listing = chats[1].to_text();
    for name in bundled() {
        assert!(listing.contains(&format!("{name}: ")), "{name} not listed with a description");
    }
    let read = chats[2].to_text();
    assert!(read.contains("# Web research") && read.contains("html.duckduckgo.com"), "{read}");

    let id = pool.snapshot()[0].container_id.clone().expect("a container");
    let (code, output) = exec(&docker, &id, "touch /workspace/skills/x 2>&1").await;
    assert_ne!(code, 0, "the skills mount is writable: {output}");
    pool.shutdown().await.expect("clean shutdown");
}

/// A skill copied into the folder after the pool started is read by the next task through the
/// mount (`/workspace/skills`): nothing is restarted, nothing copied into containers.
#[tokio::test]
async fn a_skill_copied_in_while_the_pool_runs_is_read_by_a_subagent() {
    let Some((docker, config)) = setup("skills-live").await else { return };
    let dir = std::env::temp_dir().join(format!("nxp-skills-live-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let config = PoolConfig { size: 1, skills_dir: Some(dir.clone()), ..config };
    let pool = Pool::start(docker.clone(), config).await.expect("pool starts");

    // Built elsewhere, moved in whole, after the container is up.
    let staging = dir.with_extension("staging");
    std::fs::create_dir_all(staging.join("late-skill")).unwrap();
    std::fs::write(
        staging.join("late-skill/SKILL.md"),
        "---\nname: late-skill\ndescription: \"Arrived while the pool ran\"\ntools: [read_file]\n---\n# Late\nThe secret word is marmalade.\n",
    )
    .unwrap();
    std::fs::rename(staging.join("late-skill"), dir.join("late-skill")).unwrap();

    let chats = list_then_read(&pool, "skills-live-1", "Use the late skill", "late-skill").await;
    assert!(
        chats[1].to_text().contains("late-skill: Arrived while the pool ran"),
        "{}",
        chats[1].to_text()
    );
    assert!(chats[2].to_text().contains("The secret word is marmalade."), "{}", chats[2].to_text());
    pool.shutdown().await.expect("clean shutdown");
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&staging);
}
