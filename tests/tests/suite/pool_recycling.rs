//! Recycling without a gap, against the real engine: a container that starts the last task of
//! its budget gets its successor brought up while that task runs, and the successor takes the
//! slot when the task ends (the old container is removed in the background), so the pool
//! stays at full strength. (That budgets differ per container is a unit test of
//! `nexbot-docker`.)

use crate::pool_common;

use std::collections::HashSet;
use std::time::Duration;

use nexbot_docker::{Pool, RestartReason, SlotState};
use nexbot_protocol::ResponseBody;
use nexbot_tests::scripted_llm::Step;
use pool_common::{containers_of, eventually, llm_on, setup, task};
use tokio_util::sync::CancellationToken;

const LIMIT: Duration = Duration::from_secs(90);

#[tokio::test]
async fn a_container_at_the_end_of_its_budget_is_replaced_before_its_last_task_ends() {
    let Some((docker, mut config)) = setup("prewarm").await else { return };
    config.size = 1;
    // A budget of exactly 1 (the random share is up to a quarter of 1, which is 0): the first
    // task is the container's last.
    config.max_tasks_per_container = 1;
    let name = config.name.clone();
    let pool = Pool::start(docker.clone(), config).await.expect("pool starts");
    let gateway = pool.network().gateway;
    let first = pool.snapshot()[0].container_id.clone().unwrap();
    assert_eq!(pool.snapshot()[0].task_budget, Some(1));
    assert_eq!(containers_of(&docker, &name).await.len(), 1);

    // The last task of the budget takes a while; its successor comes up meanwhile.
    let llm = llm_on(gateway, vec![Step::text("done").delayed(Duration::from_secs(4))]).await;
    let last = pool.execute(task("prewarm-1", "last", &llm, gateway), CancellationToken::new());
    let last = tokio::time::timeout(LIMIT, last);
    tokio::pin!(last);
    let mut successor: Option<String> = None;
    let answer = loop {
        tokio::select! {
            answer = &mut last => break answer,
            _ = tokio::time::sleep(Duration::from_millis(50)), if successor.is_none() => {
                successor = containers_of(&docker, &name).await.into_iter().find(|c| *c != first);
            }
        }
    };
    let answer = answer.expect("in time").expect("the task ran");
    assert!(matches!(answer.body, ResponseBody::Success { .. }), "{answer:?}");
    let successor = successor.expect("no successor came up while the last task ran");

    // The slot is filled again by that successor, not by a container made after the task
    // ended; the old container goes. (The window is generous: on a loaded machine the
    // successor's first pong can come after the task's end. Which container fills the slot
    // is the claim, not how fast.)
    let filled = eventually(LIMIT, || async {
        let slot = &pool.snapshot()[0];
        slot.state == SlotState::Idle && slot.container_id.as_deref().is_some_and(|c| c != first)
    })
    .await;
    assert!(filled, "the slot was not refilled: {:?}", pool.snapshot());
    let slot = &pool.snapshot()[0];
    assert_eq!(
        slot.container_id.as_deref(),
        Some(successor.as_str()),
        "the slot was filled by another container than the successor made during the task"
    );
    // Routine recycling is a planned replacement, not a restart.
    let slot = &pool.snapshot()[0];
    assert_eq!((slot.restarts, slot.planned_replacements), (0, 1), "{slot:?}");
    assert_eq!(slot.last_restart, Some(RestartReason::Recycled), "{slot:?}");
    let old_gone = eventually(Duration::from_secs(20), || async {
        !containers_of(&docker, &name).await.contains(&first)
    })
    .await;
    assert!(old_gone, "the recycled container was not removed");
    assert_eq!(containers_of(&docker, &name).await.len(), 1, "one container per slot again");
    pool.shutdown().await.expect("shutdown");
}

/// A container whose budget is spent serves no further task, but its successor's start and
/// its removal wait for a pause in dispatch (`recycle_pause_ms`), so that engine work does not
/// compete with a run of quick tasks; a task that needs the capacity (no other container ready,
/// or one queued) starts it at once. (Before, the successor started during the last task and
/// the spent container was removed at once: both competed with every task of the run.)
#[tokio::test]
async fn a_spent_containers_replacement_waits_for_a_pause_unless_a_task_needs_it() {
    let Some((docker, mut config)) = setup("pause").await else { return };
    config.size = 3;
    config.max_tasks_per_container = 2;
    config.recycle_pause_ms = 8_000;
    let name = config.name.clone();
    let pool = Pool::start(docker.clone(), config).await.expect("pool starts");
    let gateway = pool.network().gateway;
    let first: HashSet<String> = containers_of(&docker, &name).await.into_iter().collect();
    assert_eq!(first.len(), 3);
    let llm = llm_on(gateway, Vec::new()).await;
    llm.set_responder(|_| Step::text("done"));
    let pool = &pool;
    let llm = &llm;
    let run = |i: usize| async move {
        let request = task(&format!("pause-{i}"), "quick", llm, gateway);
        let answer = tokio::time::timeout(LIMIT, pool.execute(request, CancellationToken::new()))
            .await
            .expect("in time")
            .expect("the task ran");
        assert!(matches!(answer.body, ResponseBody::Success { .. }), "{answer:?}");
    };

    // Four quick tasks spend two containers' budgets; an idle blank is left, so the
    // two replacements wait: no successor made, nothing removed yet.
    for i in 1..=4 {
        run(i).await;
    }
    let spent = eventually(Duration::from_secs(2), || async {
        pool.snapshot().iter().filter(|s| s.state == SlotState::Restarting).count() == 2
    })
    .await;
    assert!(spent, "{:?}", pool.snapshot());
    let now: HashSet<String> = containers_of(&docker, &name).await.into_iter().collect();
    assert_eq!(now, first, "the replacements did not wait for a pause");

    // The last ready container spends its budget: its successor is needed, and the next task
    // queues for a container, which starts the waiting ones too. It is served.
    for i in 5..=7 {
        run(i).await;
    }

    // All three replaced, the spent ones removed.
    let replaced = eventually(Duration::from_secs(30), || async {
        let now: HashSet<String> = containers_of(&docker, &name).await.into_iter().collect();
        now.len() == 3 && now.is_disjoint(&first)
    })
    .await;
    assert!(replaced, "{:?}", pool.snapshot());
    let planned: u64 = pool.snapshot().iter().map(|s| s.planned_replacements).sum();
    assert_eq!(planned, 3, "{:?}", pool.snapshot());
    pool.shutdown().await.expect("shutdown");
}
