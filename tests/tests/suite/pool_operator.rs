//! What the operator's tools (`nexbot-ctl subagents ps/kill/restart`, the daemon's status)
//! rely on, against the real engine: the pool says which container ran a task; an operator
//! kill stops the task's work at once, tells its caller so in so many words, and counts as an
//! unplanned restart; an operator restart is a planned replacement; and the pool's counters
//! match the tasks it ran.

use crate::pool_common;

use std::time::{Duration, Instant};

use nexbot_docker::{Pool, PoolError, RestartReason, Room, SlotState};
use nexbot_tests::scripted_llm::Step;
use pool_common::{eventually, exec, llm_on, setup, task};
use serde_json::json;
use tokio_util::sync::CancellationToken;

const LIMIT: Duration = Duration::from_secs(90);

/// The slot's container id, once the slot is idle with a container other than `old`.
fn replaced(pool: &Pool, old: &str) -> Option<String> {
    let s = &pool.snapshot()[0];
    (s.state == SlotState::Idle && s.container_id.as_deref().is_some_and(|c| c != old))
        .then(|| s.container_id.clone().unwrap())
}

#[tokio::test]
async fn run_task_names_the_container_that_ran_it() {
    let Some((docker, mut config)) = setup("runtask").await else { return };
    config.size = 1;
    let pool = Pool::start(docker, config).await.expect("pool starts");
    let gateway = pool.network().gateway;
    let llm = llm_on(gateway, vec![Step::text("ran here")]).await;
    let before = pool.snapshot()[0].clone();

    let run = tokio::time::timeout(
        LIMIT,
        pool.run_task(
            task("where-1", "where?", &llm, gateway),
            &Room::default(),
            CancellationToken::new(),
            None,
        ),
    )
    .await
    .expect("in time")
    .expect("the task ran");
    assert_eq!(run.response.status(), "success", "{run:?}");
    assert_eq!(run.response.id, "where-1");
    // The pool's only container ran it, and `ps` names it the same way.
    assert_eq!(Some(run.container_id.as_str()), before.container_id.as_deref(), "{run:?}");
    assert_eq!(Some(run.short_id.as_str()), before.container.as_deref());
    assert_eq!(run.short_id, run.container_id[..12]);
    assert_eq!(run.slot, before.id);
    let after = &pool.snapshot()[0];
    assert_eq!(after.container_id.as_deref(), Some(run.container_id.as_str()));
    assert_eq!(after.tasks_served, 1);
    pool.shutdown().await.unwrap();
}

#[tokio::test]
async fn an_operator_kill_stops_the_running_task_and_its_caller_is_told() {
    let Some((docker, mut config)) = setup("opkill").await else { return };
    config.size = 1;
    let pool = Pool::start(docker.clone(), config).await.expect("pool starts");
    let gateway = pool.network().gateway;
    let old = pool.snapshot()[0].container_id.clone().unwrap();
    let llm = llm_on(
        gateway,
        vec![
            Step::tool_call("run_command", json!({"command": "sleep 60", "timeout_secs": 120})),
            Step::text("the sleep finished"),
        ],
    )
    .await;

    let room = Room::default();
    let run = pool.run_task(
        task("long-1", "sleep a while", &llm, gateway),
        &room,
        CancellationToken::new(),
        None,
    );
    let operator = async {
        // Kill only once the task's command really runs in the container.
        let sleeping = eventually(Duration::from_secs(30), || async {
            exec(&docker, &old, "pidof sleep").await.0 == 0
        })
        .await;
        assert!(sleeping, "the task's `sleep 60` never started");
        let killed = pool.kill(&old[..12]).await.expect("kill");
        assert_eq!(killed, old[..12]);
        Instant::now()
    };
    let (result, killed_at) =
        tokio::time::timeout(LIMIT, async { tokio::join!(run, operator) }).await.expect("no hang");
    let waited = killed_at.elapsed();
    let err = result.expect_err("a killed task is an error for its caller");
    let text = err.to_string();
    let PoolError::KilledByOperator { task_id, container } = &err else {
        panic!("expected KilledByOperator, got {err:?}")
    };
    assert_eq!((task_id.as_str(), container.as_str()), ("long-1", &old[..12]));
    assert!(text.contains("killed by operator") && text.contains("long-1"), "{text}");
    assert!(waited <= Duration::from_secs(2), "the caller heard of the kill after {waited:?}");

    // The slot gets a new container; the killed one, with the task's processes, is gone.
    let fresh =
        eventually(Duration::from_secs(15), || async { replaced(&pool, &old).is_some() }).await;
    assert!(fresh, "the slot was not refilled: {:?}", pool.snapshot());
    let gone = eventually(Duration::from_secs(15), || async {
        docker.inspect_container(&old, None).await.is_err()
    })
    .await;
    assert!(gone, "the killed container was not removed");
    // Its work stopped: the model never heard back from the command.
    assert_eq!(llm.chat_requests().len(), 1, "the task went on after the kill");

    let slot = &pool.snapshot()[0];
    assert_eq!((slot.restarts, slot.planned_replacements), (1, 0), "{slot:?}");
    assert_eq!(slot.last_restart, Some(RestartReason::KilledByOperator), "{slot:?}");
    let stats = pool.stats();
    assert_eq!(stats.tasks.killed, 1, "{stats:?}");
    assert_eq!(stats.tasks.container_failed, 0, "{stats:?}");
    assert_eq!(
        (stats.unplanned_restarts_total, stats.planned_replacements_total),
        (1, 0),
        "{stats:?}"
    );
    assert_eq!(stats.warm, 1, "{stats:?}");
    pool.shutdown().await.unwrap();
}

#[tokio::test]
async fn an_operator_restart_of_an_idle_container_is_a_planned_replacement() {
    let Some((docker, mut config)) = setup("oprestart").await else { return };
    config.size = 1;
    let pool = Pool::start(docker, config).await.expect("pool starts");
    let old = pool.snapshot()[0].container_id.clone().unwrap();
    assert_eq!(pool.restart(&old).unwrap(), old[..12]);
    let fresh =
        eventually(Duration::from_secs(15), || async { replaced(&pool, &old).is_some() }).await;
    assert!(fresh, "not replaced: {:?}", pool.snapshot());
    let slot = &pool.snapshot()[0];
    assert_eq!((slot.restarts, slot.planned_replacements), (0, 1), "{slot:?}");
    assert_eq!(slot.last_restart, Some(RestartReason::RestartedByOperator), "{slot:?}");
    assert!(slot.last_error.as_deref().unwrap().contains("restarted by the operator"));
    let stats = pool.stats();
    assert_eq!(
        (stats.unplanned_restarts_total, stats.planned_replacements_total),
        (0, 1),
        "{stats:?}"
    );
    // `ps --json` shows the reason as a value.
    let ps = serde_json::to_value(pool.snapshot()).unwrap();
    assert_eq!(ps[0]["last_restart"], json!({"kind": "restarted_by_operator"}), "{ps}");
    assert_eq!(ps[0]["state"], "idle", "{ps}");
    pool.shutdown().await.unwrap();
}

#[tokio::test]
async fn stats_count_the_tasks_the_pool_ran() {
    let Some((docker, mut config)) = setup("stats").await else { return };
    config.size = 1;
    config.queue_capacity = 0;
    let pool = Pool::start(docker, config).await.expect("pool starts");
    let gateway = pool.network().gateway;
    let llm = llm_on(gateway, vec![]).await;
    llm.set_responder(|_| Step::text("ok"));
    let fresh = pool.stats();
    assert_eq!((fresh.size, fresh.warm, fresh.busy, fresh.queue_depth), (1, 1, 0, 0), "{fresh:?}");
    assert_eq!(fresh.tasks, Default::default());

    for i in 0..3 {
        let answer = tokio::time::timeout(
            LIMIT,
            pool.execute(
                task(&format!("ok-{i}"), "quick", &llm, gateway),
                CancellationToken::new(),
            ),
        )
        .await
        .expect("in time")
        .expect("runs");
        assert_eq!(answer.status(), "success");
    }
    // One slow task holds the only container; with no queue, the next is refused at once.
    llm.set_responder(|_| Step::text("slow").delayed(Duration::from_secs(2)));
    let slow = pool.execute(task("slow-1", "slow", &llm, gateway), CancellationToken::new());
    let refused = async {
        let busy = eventually(Duration::from_secs(30), || async { pool.stats().busy == 1 }).await;
        assert!(busy, "{:?}", pool.stats());
        pool.execute(task("refused-1", "no room", &llm, gateway), CancellationToken::new()).await
    };
    let (slow, refused) =
        tokio::time::timeout(LIMIT, async { tokio::join!(slow, refused) }).await.expect("no hang");
    assert_eq!(slow.expect("runs").status(), "success");
    assert!(matches!(refused, Err(PoolError::Busy { .. })), "{refused:?}");

    let stats = pool.stats();
    assert_eq!(stats.tasks.succeeded, 4, "{stats:?}");
    assert_eq!(stats.tasks.busy_refused, 1, "{stats:?}");
    let t = stats.tasks;
    assert_eq!(t.failed + t.timed_out + t.cancelled + t.killed + t.container_failed, 0, "{t:?}");
    assert!(stats.backoff.is_empty(), "{stats:?}");
    let json = serde_json::to_value(&stats).unwrap();
    assert_eq!(json["tasks"]["succeeded"], 4, "{json}");
    pool.shutdown().await.unwrap();
}
