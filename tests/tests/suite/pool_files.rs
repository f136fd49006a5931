//! Files into a task's container and back through a real pool (`docs/protocol-files.md#files`):
//! 5 MB go in whole over the task's own link, a file the task made comes back whole, the
//! next task of the same room finds nothing of them, and a task of another room never does.

use crate::pool_common;

use std::time::Duration;

use base64::Engine as _;
use nexbot_docker::{Pool, PoolConfig, Room, TaskIo};
use nexbot_protocol::TaskFile;
use nexbot_tests::scripted_llm::{last_user, Step};
use pool_common::{llm_on, setup, success_text, task, tool_results};
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

const LIMIT: Duration = Duration::from_secs(90);

/// "digest": checks the file and returns a reversed copy; "look": lists the scratch folder.
fn responder(body: &Value) -> Step {
    let results = tool_results(body);
    if last_user(body).contains("digest") {
        return match results.len() {
            0 => Step::tool_call(
                "run_command",
                json!({"command": "sha256sum big.bin && wc -c < big.bin && \
                                   tail -c 100 big.bin > tail.bin && ls -A && \
                                   imgconv dot.png dot.jpg 50 && imgconv dot.jpg"}),
            ),
            1 => Step::tool_call("return_file", json!({"path": "tail.bin"})),
            2 => Step::tool_call("return_file", json!({"path": "dot.jpg"})),
            _ => Step::text(&format!("digest: {}", results.join(" | "))),
        };
    }
    match results.len() {
        0 => Step::tool_call(
            "run_command",
            json!({"command": "ls -A /workspace/scratch /tmp; find / -name 'big.bin' 2>/dev/null; \
                               echo looked"}),
        ),
        _ => Step::text(&format!("look: {}", results.join(" | "))),
    }
}

#[tokio::test]
async fn a_tasks_files_go_in_and_come_back_whole_and_the_next_task_finds_none_of_them() {
    let Some((docker, config)) = setup("files").await else { return };
    let pool = Pool::start(docker, PoolConfig { size: 2, ..config }).await.expect("pool starts");
    let llm = llm_on(pool.network().gateway, Vec::new()).await;
    llm.set_responder(responder);
    let alice = Room::new("telegram:1");
    let bob = Room::new("telegram:2");
    let big = TaskFile {
        name: "big.bin".into(),
        bytes: (0..5 * 1024 * 1024u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
            .collect(),
    };
    // A 1×1 PNG: the image's `imgconv` makes a JPEG of it in the sandbox.
    let dot = TaskFile {
        name: "dot.png".into(),
        bytes: base64::engine::general_purpose::STANDARD
            .decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII=")
            .unwrap(),
    };
    let digest = {
        use sha2::Digest as _;
        format!("{:x}", sha2::Sha256::digest(&big.bytes))
    };

    let mut request = task("files-1", "digest the file", &llm, pool.network().gateway);
    request.return_files = Some(true);
    let io = TaskIo { files: vec![big.clone(), dot], ..TaskIo::default() };
    let run = pool.run_task_with(request, &alice, CancellationToken::new(), io);
    let done = tokio::time::timeout(LIMIT, run).await.expect("in time").expect("ran");
    let said = success_text(&done.response.body);
    assert!(said.contains(&digest), "the file changed on the way in: {said}");
    assert!(said.contains("5242880"), "{said}");
    assert!(said.contains("1x1 -> 1x1 dot.jpg") && said.contains("jpg 1x1"), "imgconv: {said}");
    assert_eq!(done.files.len(), 2, "{:?}", done.files);
    assert_eq!(done.files[0].name, "tail.bin");
    assert!(done.files[0].bytes == big.bytes[big.bytes.len() - 100..], "the returned file changed");
    assert_eq!(done.files[1].name, "dot.jpg");
    assert!(done.files[1].bytes.starts_with(&[0xff, 0xd8, 0xff]), "not a JPEG");
    let used = done.container_id.clone();

    // The room's next task, on the same container: nothing of the last task's files.
    let request = task("files-2", "look around", &llm, pool.network().gateway);
    let run = pool.run_task_with(request, &alice, CancellationToken::new(), TaskIo::default());
    let next = tokio::time::timeout(LIMIT, run).await.expect("in time").expect("ran");
    assert_eq!(next.container_id, used, "the room's container was not reused");
    let said = success_text(&next.response.body);
    assert!(said.contains("looked"), "{said}");
    for name in ["big.bin", "tail.bin", "dot.png", "dot.jpg"] {
        assert!(!said.contains(name), "{name} was left for the next task: {said}");
    }
    assert!(next.files.is_empty());

    // Another room's task: a container that never held them.
    let request = task("files-3", "look around", &llm, pool.network().gateway);
    let run = pool.run_task_with(request, &bob, CancellationToken::new(), TaskIo::default());
    let other = tokio::time::timeout(LIMIT, run).await.expect("in time").expect("ran");
    assert_ne!(other.container_id, used);
    assert!(!success_text(&other.response.body).contains("big.bin"));

    // Files the subagent would refuse are refused before anything is sent.
    let bad = TaskFile { name: "../x".into(), bytes: b"x".to_vec() };
    let request = task("files-4", "digest the file", &llm, pool.network().gateway);
    let io = TaskIo { files: vec![bad], ..TaskIo::default() };
    let refused = pool.run_task_with(request, &alice, CancellationToken::new(), io).await;
    let error = refused.expect_err("a path as a file name was sent").to_string();
    assert!(error.contains("not a plain file name"), "{error}");
    pool.shutdown().await.expect("shutdown");
}
