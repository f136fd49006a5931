//! Tasks through the pool, end to end: the subagent in a pool container runs its agent loop
//! against a scripted OpenAI-compatible server on the internal network's gateway. Covers the
//! happy path with progress, the "pool busy" overflow (nothing hangs, nothing lost),
//! cancellation, a container killed mid-task, and an OOM inside a task.

use crate::pool_common;

use std::time::{Duration, Instant};

use futures_util::future::join_all;
use nexbot_docker::{Pool, PoolError, RestartReason, SlotState};
use nexbot_protocol::ResponseBody;
use nexbot_tests::scripted_llm::Step;
use pool_common::{eventually, llm_on, setup, task};
use serde_json::json;
use tokio_util::sync::CancellationToken;

const LIMIT: Duration = Duration::from_secs(90);

/// Waits until some slot serves `task_id` and returns that slot's container id.
async fn busy_with(pool: &Pool, task_id: &str) -> String {
    let found = eventually(Duration::from_secs(30), || async {
        pool.snapshot().iter().any(|s| s.current_task.as_deref() == Some(task_id))
    })
    .await;
    assert!(found, "task {task_id} never became current: {:?}", pool.snapshot());
    let snap = pool.snapshot();
    let slot = snap.iter().find(|s| s.current_task.as_deref() == Some(task_id)).unwrap();
    assert_eq!(slot.state, SlotState::Busy);
    slot.container_id.clone().unwrap()
}

async fn full_strength(pool: &Pool, within: Duration) -> bool {
    eventually(within, || async {
        pool.snapshot().iter().all(|s| s.state == SlotState::Idle && s.container_id.is_some())
    })
    .await
}

#[tokio::test]
async fn a_task_runs_end_to_end_with_progress() {
    let Some((docker, config)) = setup("e2e").await else { return };
    let pool = Pool::start(docker, config).await.expect("pool starts");
    let gateway = pool.network().gateway;
    let llm = llm_on(
        gateway,
        vec![
            Step::tool_call("write_file", json!({"path": "note.txt", "content": "forty-two"})),
            Step::text("The answer is 42."),
        ],
    )
    .await;
    let (progress_tx, mut progress_rx) = tokio::sync::mpsc::channel(64);
    let answer = tokio::time::timeout(
        LIMIT,
        pool.execute_with_progress(
            task("e2e-1", "What is the answer?", &llm, gateway),
            CancellationToken::new(),
            Some(progress_tx),
        ),
    )
    .await
    .expect("answered in time")
    .expect("task ran");
    match &answer.body {
        ResponseBody::Success { result, .. } => assert!(result.contains("42"), "{result}"),
        other => panic!("expected success, got {other:?}"),
    }
    assert_eq!(answer.id, "e2e-1");
    let chats = llm.chat_requests();
    assert_eq!(chats.len(), 2, "one call per step");
    assert!(chats[0].to_text().contains("What is the answer?"));
    assert_eq!(chats[0].header("authorization"), Some("Bearer nxp-token-e2e-1"));
    let mut events = Vec::new();
    while let Ok(p) = progress_rx.try_recv() {
        events.push(p.status());
    }
    assert!(!events.is_empty() && events.iter().all(|s| *s == "progress"), "{events:?}");
    let served: u64 = pool.snapshot().iter().map(|s| s.tasks_served).sum();
    assert_eq!(served, 1);
    assert!(pool.snapshot().iter().all(|s| s.current_task.is_none()));
    pool.shutdown().await.unwrap();
}

#[tokio::test]
async fn more_tasks_than_containers_and_queue_get_pool_busy() {
    let Some((docker, mut config)) = setup("busy").await else { return };
    config.size = 2;
    config.queue_capacity = 2;
    let pool = Pool::start(docker, config).await.expect("pool starts");
    let gateway = pool.network().gateway;
    let llm = llm_on(gateway, vec![]).await;
    llm.set_responder(|_| Step::text("done").delayed(Duration::from_millis(1500)));

    let cancel = CancellationToken::new();
    // join_all polls in order: two take containers, two queue, two find the queue full.
    let runs = (0..6).map(|i| {
        let request = task(&format!("busy-{i}"), "slow task", &llm, gateway);
        let pool = &pool;
        let cancel = cancel.clone();
        async move {
            let result = pool.execute(request, cancel).await;
            (i, result, Instant::now())
        }
    });
    let results = tokio::time::timeout(LIMIT, join_all(runs)).await.expect("nothing hangs");

    let mut busy_at = Vec::new();
    let mut done_at = Vec::new();
    for (i, result, at) in &results {
        match result {
            Ok(answer) => {
                assert_eq!(answer.id, format!("busy-{i}"), "answers reach their own waiter");
                assert_eq!(answer.status(), "success", "{answer:?}");
                done_at.push(*at);
            }
            Err(e @ PoolError::Busy { size: 2, queue: 2 }) => {
                assert!(e.to_string().starts_with("pool busy"), "{e}");
                assert!(*i >= 4, "task {i} was refused although it came early");
                busy_at.push(*at);
            }
            Err(other) => panic!("task {i}: unexpected error {other}"),
        }
    }
    assert_eq!((done_at.len(), busy_at.len()), (4, 2), "{results:?}");
    assert!(busy_at.iter().max() < done_at.iter().min(), "busy must be immediate");
    assert_eq!(llm.chat_requests().len(), 4, "every accepted task reached the LLM once");
    let served: u64 = pool.snapshot().iter().map(|s| s.tasks_served).sum();
    assert_eq!(served, 4);
    pool.shutdown().await.unwrap();
}

#[tokio::test]
async fn cancelling_a_task_sends_cancel_and_keeps_the_container() {
    let Some((docker, mut config)) = setup("cancel").await else { return };
    config.size = 1;
    let pool = Pool::start(docker, config).await.expect("pool starts");
    let gateway = pool.network().gateway;
    let llm = llm_on(gateway, vec![Step::text("too late").delayed(Duration::from_secs(60))]).await;
    let cancel = CancellationToken::new();
    let run = pool.execute(task("cancel-1", "slow", &llm, gateway), cancel.clone());
    let container = async {
        let container = busy_with(&pool, "cancel-1").await;
        let rtt = pool.ping(&container[..12]).await;
        assert!(rtt.is_ok(), "a busy container answers pings: {rtt:?}");
        cancel.cancel();
        container
    };
    let (answer, container) = tokio::time::timeout(LIMIT, async { tokio::join!(run, container) })
        .await
        .expect("cancel ends the task");
    let answer = answer.expect("the subagent answers a cancel");
    match &answer.body {
        ResponseBody::Error { error, .. } => assert!(error.contains("cancel"), "{error}"),
        other => panic!("expected a cancelled error, got {other:?}"),
    }
    assert!(full_strength(&pool, Duration::from_secs(10)).await);
    assert_eq!(
        pool.snapshot()[0].container_id.as_deref(),
        Some(container.as_str()),
        "not recycled"
    );
    pool.shutdown().await.unwrap();
}

/// A request the subagent refuses before anything of it runs (no LLM settings, a tool it does
/// not have) is answered with the scrub a task's answer carries, so its container stays: it
/// used to be replaced after every refusal (a container start each, ~300 ms, and the pool a
/// container short meanwhile).
#[tokio::test]
async fn a_refused_request_keeps_its_container() {
    let Some((docker, mut config)) = setup("refused").await else { return };
    config.size = 1;
    let pool = Pool::start(docker, config).await.expect("pool starts");
    let gateway = pool.network().gateway;
    let llm = llm_on(gateway, vec![Step::text("done")]).await;
    let first = pool.snapshot()[0].container_id.clone().expect("a container");
    let mut no_tool = task("refused-2", "x", &llm, gateway);
    no_tool.tools = Some(vec!["no_such_tool".into()]);
    for request in [nexbot_protocol::Request::execute("refused-1", "no LLM settings"), no_tool] {
        let answer = tokio::time::timeout(LIMIT, pool.execute(request, CancellationToken::new()))
            .await
            .expect("answered")
            .expect("execute");
        assert!(matches!(answer.body, ResponseBody::Error { .. }), "{answer:?}");
        let scrub = answer.scrub.as_ref().expect("a refusal carries the scrub");
        assert!(scrub.clean, "{scrub:?}");
    }
    let answer = tokio::time::timeout(
        LIMIT,
        pool.execute(task("after-1", "go", &llm, gateway), CancellationToken::new()),
    )
    .await
    .expect("answered")
    .expect("execute");
    assert!(matches!(answer.body, ResponseBody::Success { .. }), "{answer:?}");
    let slot = &pool.snapshot()[0];
    assert_eq!(slot.container_id.as_deref(), Some(first.as_str()), "replaced: {slot:?}");
    assert_eq!((slot.restarts, slot.planned_replacements), (0, 0), "{slot:?}");
    pool.shutdown().await.unwrap();
}

#[tokio::test]
async fn killing_a_busy_container_fails_its_waiter_fast_and_the_pool_recovers() {
    let Some((docker, config)) = setup("kill").await else { return };
    let pool = Pool::start(docker.clone(), config).await.expect("pool starts");
    let gateway = pool.network().gateway;
    let llm = llm_on(gateway, vec![Step::text("never").delayed(Duration::from_secs(120))]).await;
    let run = pool.execute(task("kill-1", "slow", &llm, gateway), CancellationToken::new());
    let killer = async {
        let container = busy_with(&pool, "kill-1").await;
        docker.kill_container(&container, None).await.expect("docker kill");
        (Instant::now(), container)
    };
    let (result, (killed_at, container)) =
        tokio::time::timeout(LIMIT, async { tokio::join!(run, killer) }).await.expect("no hang");
    let waited = killed_at.elapsed();
    let err = result.expect_err("the waiter gets an error");
    let text = err.to_string();
    assert!(matches!(err, PoolError::ContainerFailed { .. }), "{text}");
    assert!(text.contains(&container[..12]) && text.contains("kill-1"), "{text}");
    assert!(text.contains("exited with code 137"), "{text}");
    assert!(waited <= Duration::from_secs(2), "the error took {waited:?}");
    assert!(full_strength(&pool, Duration::from_secs(10)).await, "{:?}", pool.snapshot());
    assert!(pool.snapshot().iter().all(|s| s.container_id.as_deref() != Some(container.as_str())));
    // Killed behind the pool's back: a crash, not an operator kill.
    let slot = pool.snapshot().into_iter().find(|s| s.restarts == 1).expect("one restart");
    assert_eq!(slot.last_restart, Some(RestartReason::Exited { code: 137 }), "{slot:?}");
    assert_eq!(pool.stats().tasks.container_failed, 1, "{:?}", pool.stats());
    assert!(pool.ping_all().await.iter().all(|p| p.round_trip.is_ok()));
    pool.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_memory_hog_inside_a_task_is_oom_killed_and_replaced() {
    let Some((docker, mut config)) = setup("oom").await else { return };
    config.size = 1;
    let pool = Pool::start(docker, config).await.expect("pool starts");
    let gateway = pool.network().gateway;
    let old = pool.snapshot()[0].container_id.clone().unwrap();
    // 400 MiB in one buffer against a 256 MiB limit with no extra swap.
    let llm = llm_on(
        gateway,
        vec![
            Step::tool_call(
                "run_command",
                json!({"command": "dd if=/dev/zero of=/dev/null bs=400M count=1", "timeout_secs": 60}),
            ),
            Step::text("survived?"),
        ],
    )
    .await;
    let result = tokio::time::timeout(
        LIMIT,
        pool.execute(task("oom-1", "use a lot of memory", &llm, gateway), CancellationToken::new()),
    )
    .await
    .expect("no hang");
    let err = result.expect_err("an OOM kill is an error for the waiter");
    assert!(err.to_string().contains("OOM-killed"), "{err}");
    let replaced = eventually(Duration::from_secs(15), || async {
        let s = &pool.snapshot()[0];
        s.state == SlotState::Idle && s.container_id.as_deref().is_some_and(|c| c != old)
    })
    .await;
    assert!(replaced, "{:?}", pool.snapshot());
    assert!(pool.snapshot()[0].last_error.as_deref().unwrap().contains("OOM"));
    assert_eq!(pool.snapshot()[0].last_restart, Some(RestartReason::OomKilled));
    assert_eq!(pool.snapshot()[0].restarts, 1);
    pool.shutdown().await.unwrap();
}

#[tokio::test]
async fn soft_timeouts_and_the_task_count_recycle_the_container() {
    let Some((docker, mut config)) = setup("recycle").await else { return };
    config.size = 1;
    config.max_tasks_per_container = 2;
    let pool = Pool::start(docker, config).await.expect("pool starts");
    let gateway = pool.network().gateway;
    let llm = llm_on(gateway, vec![]).await;
    llm.set_responder(|_| Step::text("ok"));
    let container = || pool.snapshot()[0].container_id.clone().unwrap();

    let first = container();
    for i in 0..2 {
        let answer = tokio::time::timeout(
            LIMIT,
            pool.execute(
                task(&format!("count-{i}"), "quick", &llm, gateway),
                CancellationToken::new(),
            ),
        )
        .await
        .expect("in time")
        .expect("runs");
        assert_eq!(answer.status(), "success");
    }
    assert!(full_strength(&pool, Duration::from_secs(15)).await);
    let second = container();
    assert_ne!(first, second, "recycled after 2 tasks");
    assert!(pool.snapshot()[0].last_error.as_deref().unwrap().contains("after serving 2 tasks"));

    // The subagent's own (soft) timeout: it answers `timeout`, the pool recycles anyway.
    llm.set_responder(|_| Step::text("late").delayed(Duration::from_secs(30)));
    let mut request = task("soft-1", "slow", &llm, gateway);
    request.timeout = Some(1);
    let answer = tokio::time::timeout(LIMIT, pool.execute(request, CancellationToken::new()))
        .await
        .expect("in time")
        .expect("a timeout is an answer");
    assert_eq!(answer.status(), "timeout", "{answer:?}");
    assert!(full_strength(&pool, Duration::from_secs(15)).await);
    assert_ne!(container(), second, "recycled after a timeout");
    assert!(pool.snapshot()[0].last_error.as_deref().unwrap().contains("timed out"));
    // Both recycles were planned: no restart.
    let slot = &pool.snapshot()[0];
    assert_eq!((slot.restarts, slot.planned_replacements), (0, 2), "{slot:?}");
    assert_eq!(slot.last_restart, Some(RestartReason::TaskTimedOut));
    assert_eq!((pool.stats().tasks.succeeded, pool.stats().tasks.timed_out), (2, 1));
    pool.shutdown().await.unwrap();
}

#[tokio::test]
async fn queued_and_abandoned_tasks_never_lose_a_container() {
    let Some((docker, mut config)) = setup("abandon").await else { return };
    config.size = 1;
    config.queue_capacity = 1;
    let pool = Pool::start(docker, config).await.expect("pool starts");
    let gateway = pool.network().gateway;
    let llm = llm_on(gateway, vec![]).await;
    llm.set_responder(|_| Step::text("slow").delayed(Duration::from_secs(60)));
    let first = pool.snapshot()[0].container_id.clone().unwrap();

    // A task holds the container; a second waits in the queue and is cancelled there.
    let holder = pool.execute(task("hold-1", "slow", &llm, gateway), CancellationToken::new());
    let queued_cancel = CancellationToken::new();
    let queued = pool.execute(task("queued-1", "slow", &llm, gateway), queued_cancel.clone());
    let scenario = async {
        busy_with(&pool, "hold-1").await;
        queued_cancel.cancel();
    };
    // Dropping `holder` after the scenario abandons its task mid-run.
    let outcome = tokio::time::timeout(LIMIT, async {
        tokio::select! {
            biased; // the holder is polled first, so it is the one that gets the container
            _ = holder => panic!("the holder must still be running"),
            (queued, ()) = async { tokio::join!(queued, scenario) } => queued,
        }
    })
    .await
    .expect("no hang");
    assert!(matches!(outcome, Err(PoolError::Cancelled { .. })), "{outcome:?}");

    // The abandoned task's container is recycled and the pool serves again.
    assert!(full_strength(&pool, Duration::from_secs(15)).await, "{:?}", pool.snapshot());
    assert_ne!(pool.snapshot()[0].container_id.as_deref(), Some(first.as_str()));
    assert!(pool.snapshot()[0].last_error.as_deref().unwrap().contains("abandoned"));
    llm.set_responder(|_| Step::text("fine"));
    let answer = tokio::time::timeout(
        LIMIT,
        pool.execute(task("after-1", "quick", &llm, gateway), CancellationToken::new()),
    )
    .await
    .expect("in time")
    .expect("runs");
    assert_eq!(answer.status(), "success");
    pool.shutdown().await.unwrap();
}

#[tokio::test]
async fn shutdown_drains_running_tasks_and_refuses_queued_ones() {
    let Some((docker, mut config)) = setup("drain").await else { return };
    config.size = 1;
    config.queue_capacity = 4;
    let pool = Pool::start(docker.clone(), config).await.expect("pool starts");
    let name = pool.config().name.clone();
    let gateway = pool.network().gateway;
    let llm = llm_on(gateway, vec![]).await;
    llm.set_responder(|_| Step::text("finished while draining").delayed(Duration::from_secs(2)));

    let running = pool.execute(task("drain-1", "slow", &llm, gateway), CancellationToken::new());
    let queued = pool.execute(task("drain-2", "slow", &llm, gateway), CancellationToken::new());
    let shutdown = async {
        busy_with(&pool, "drain-1").await;
        pool.shutdown().await
    };
    let (running, queued, shutdown) =
        tokio::time::timeout(LIMIT, async { tokio::join!(running, queued, shutdown) })
            .await
            .expect("no hang");
    shutdown.expect("shutdown succeeds");
    let running = running.expect("the running task finishes");
    assert_eq!(running.status(), "success", "{running:?}");
    assert!(matches!(queued, Err(PoolError::ShuttingDown)), "{queued:?}");
    assert!(pool_common::containers_of(&docker, &name).await.is_empty());
}
