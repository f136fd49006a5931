//! "A task never sees anything of another task", tried as an attacker would on ONE reused pool
//! container (real image, real pool, scripted LLM): task 1 plants a `setsid` loop that collects
//! every process's environment, and files in scratch, `/tmp` and `/dev/shm`; task 2 gets a
//! secret; task 3, unrelated, looks for all of it and for the subagent's own memory. The
//! container is reused throughout (the clean room must not cost the warm pool its speed).

use crate::pool_common;

use std::time::Duration;

use base64::Engine as _;
use nexbot_docker::Pool;
use nexbot_protocol::{ResponseBody, SecretMap};
use nexbot_tests::scripted_llm::{ScriptedLlm, Step};
use pool_common::{llm_on, setup, task};
use secrecy::SecretString;
use serde_json::json;
use tokio_util::sync::CancellationToken;

pub(crate) const LIMIT: Duration = Duration::from_secs(90);
pub(crate) const CANARY: &str = "canary-Qx7vT2pLm9s4Kd8w";

/// Runs one task whose model calls `run_command` with `command`, then answers "done"; returns
/// the command's output as the model saw it, and the scrub the subagent reported.
pub(crate) async fn run_command(
    pool: &Pool,
    llm: &ScriptedLlm,
    id: &str,
    command: &str,
    secrets: Option<SecretMap>,
) -> (String, nexbot_protocol::Scrub) {
    llm.push(Step::tool_call("run_command", json!({"command": command, "timeout_secs": 30})));
    llm.push(Step::text("done"));
    let gateway = pool.network().gateway;
    let mut request = task(id, "run it", llm, gateway);
    request.secrets = secrets;
    let answer = tokio::time::timeout(LIMIT, pool.execute(request, CancellationToken::new()))
        .await
        .expect("answered in time")
        .expect("task ran");
    assert!(matches!(answer.body, ResponseBody::Success { .. }), "{answer:?}");
    let last = llm.chat_requests().pop().expect("the model saw the result");
    let output = last.body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .find(|m| m["role"] == "tool")
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default()
        .to_owned();
    (output, answer.scrub.expect("a final answer carries its scrub"))
}

#[tokio::test]
async fn nothing_of_a_task_reaches_the_next_on_a_reused_container() {
    let Some((docker, mut config)) = setup("cleanroom").await else { return };
    config.size = 1;
    let pool = Pool::start(docker, config).await.expect("pool starts");
    let container = pool.snapshot()[0].container_id.clone().unwrap();
    let llm = llm_on(pool.network().gateway, vec![]).await;

    // Task 1 plants a collector that outlives it (its own session, so the command's process
    // group kill misses it; the screen is passed by spelling `environ` in two halves), and
    // files everywhere it can write.
    let plant = "e=env; e=${e}iron; \
        setsid sh -c \"while true; do cat /proc/[0-9]*/$e 2>/dev/null | tr '\\\\0' '\\\\n' >> /tmp/.loot; sleep 0.05; done\" \
          </dev/null >/dev/null 2>&1 & \
        echo FILEMARK-1a2b > /workspace/scratch/planted.txt; echo FILEMARK-1a2b > /dev/shm/planted; \
        mkdir -p /tmp/locked/deep && echo FILEMARK-1a2b > /tmp/locked/deep/x && chmod 000 /tmp/locked; \
        sleep 0.3; echo started";
    let (out, scrub) = run_command(&pool, &llm, "clean-1", plant, None).await;
    assert!(out.contains("started"), "{out}");
    assert!(scrub.clean, "{scrub:?}");
    assert!(scrub.killed >= 1, "the collector was there to be killed: {scrub:?}");
    assert!(scrub.removed >= 3, "{scrub:?}");
    // Timed in the subagent: killing a process and emptying folders takes some microseconds.
    assert!(scrub.micros > 0, "{scrub:?}");

    // Task 2 holds a secret in its command's environment for a while.
    let mut secrets = SecretMap::new();
    secrets.insert("CANARY", SecretString::from(CANARY.to_owned()));
    let (out, scrub) = run_command(
        &pool,
        &llm,
        "clean-2",
        "test -n \"$CANARY\" && echo have-it; sleep 1",
        Some(secrets),
    )
    .await;
    assert!(out.contains("have-it"), "{out}");
    assert!(scrub.clean, "{scrub:?}");

    // Task 3 hunts for everything above, by every means a command of the same user has.
    let hunt = "e=env; e=${e}iron; \
        echo '== ps'; ps -o pid,args; \
        echo '== files'; ls -la /tmp /workspace/scratch /dev/shm; cat /tmp/.loot /workspace/scratch/planted.txt /dev/shm/planted /tmp/locked/deep/x 2>&1; \
        echo '== environ of all'; cat /proc/[0-9]*/$e 2>/dev/null | tr '\\0' '\\n' | grep -i canary; \
        for p in /proc/[0-9]*; do [ \"$(cat $p/comm 2>/dev/null)\" = nexbot-subagent ] && sub=${p#/proc/}; done; \
        [ \"$(cat /proc/1/comm)\" = nexbot-subagent ] && sub=1; \
        echo \"== subagent pid $sub\"; \
        cat /proc/$sub/$e >/dev/null 2>&1 && echo SUBAGENT-ENVIRON-READABLE || echo subagent-environ-denied; \
        cat /proc/$sub/maps >/dev/null 2>&1 && echo SUBAGENT-MAPS-READABLE || echo subagent-maps-denied; \
        dd if=/proc/$sub/mem bs=1 count=1 >/dev/null 2>&1 && echo SUBAGENT-MEM-READABLE || echo subagent-mem-denied; \
        sleep 30 & own=$!; \
        cat /proc/$own/$e 2>/dev/null | tr '\\0' '\\n' | grep -q '^PATH=' && echo own-environ-readable; \
        cat /proc/$own/maps >/dev/null 2>&1 && echo own-maps-readable; kill $own; \
        echo \"== core $(ulimit -c)\"";
    let (out, scrub) = run_command(&pool, &llm, "clean-3", hunt, None).await;
    assert!(scrub.clean, "{scrub:?}");
    let b64 = base64::engine::general_purpose::STANDARD.encode(CANARY);
    // (Markers the hunt's own command line does not contain: it is echoed in the output.)
    for leak in [CANARY, &b64[..12], "Qx7vT2pLm9s4Kd8w", "FILEMARK-1a2b", "sleep 0.05"] {
        assert!(!out.contains(leak), "task 3 saw {leak:?} of an earlier task:\n{out}");
    }
    // The subagent's memory is closed to commands; the same reads work on the command's own
    // child (the positive control: the check can see a readable file).
    assert!(!out.contains("== subagent pid \n"), "the subagent was found: {out}");
    for line in ["subagent-environ-denied", "subagent-maps-denied", "subagent-mem-denied"] {
        assert!(out.contains(line), "{line}:\n{out}");
    }
    assert!(out.contains("own-environ-readable") && out.contains("own-maps-readable"), "{out}");
    assert!(out.contains("== core 0"), "core dumps are off: {out}");

    // The clean room did not cost the warm container: all three ran on it.
    let snapshot = &pool.snapshot()[0];
    assert_eq!(snapshot.container_id.as_deref(), Some(container.as_str()), "{snapshot:?}");
    assert_eq!(snapshot.tasks_served, 3);
    pool.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_container_not_known_clean_serves_no_further_task() {
    let Some((docker, mut config)) = setup("notclean").await else { return };
    config.size = 1;
    // The image's scrub switch turned off: the subagent says it did not scrub.
    config.env.insert("NEXBOT_SANDBOXED".into(), "0".into());
    let pool = Pool::start(docker, config).await.expect("pool starts");
    let first = pool.snapshot()[0].container_id.clone().unwrap();
    let llm = llm_on(pool.network().gateway, vec![]).await;
    let (out, scrub) =
        run_command(&pool, &llm, "dirty-1", "echo FILEMARK-9z > /tmp/left; echo ok", None).await;
    assert!(out.contains("ok"), "{out}");
    assert!(
        !scrub.clean && scrub.left.as_deref().unwrap_or("").contains("NEXBOT_SANDBOXED"),
        "{scrub:?}"
    );
    // The next task gets a fresh container, where the file does not exist.
    let (out, _) = run_command(&pool, &llm, "dirty-2", "cat /tmp/left 2>&1; echo end", None).await;
    assert!(!out.contains("FILEMARK-9z"), "{out}");
    let second = pool.snapshot()[0].container_id.clone().unwrap();
    assert_ne!(first, second, "the container that was not clean was replaced");
    let last_error = pool.snapshot()[0].last_error.clone().unwrap_or_default();
    assert!(last_error.contains("not clean"), "{last_error}");
    pool.shutdown().await.unwrap();
}
