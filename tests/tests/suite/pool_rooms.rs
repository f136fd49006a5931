//! Rooms against the real engine: a container that ran a task of one room (chat) never runs a
//! task of another; a room reuses its own warm container, takes a blank when it has none,
//! stays within its limit, gives way when blanks are short, and loses its container when it
//! leaves it idle. Container ids come from the pool's own answer (`TaskRun`), as the host's
//! task records take them.

use crate::pool_common;

use std::time::Duration;

use nexbot_docker::{Pool, RestartReason, Room, TaskRun};
use nexbot_protocol::ResponseBody;
use nexbot_tests::scripted_llm::{ScriptedLlm, Step};
use pool_common::{eventually, llm_on, setup, task};
use tokio_util::sync::CancellationToken;

const LIMIT: Duration = Duration::from_secs(90);

async fn run(pool: &Pool, llm: &ScriptedLlm, id: &str, room: &Room) -> TaskRun {
    let gateway = pool.network().gateway;
    let run =
        pool.run_task(task(id, "room task", llm, gateway), room, CancellationToken::new(), None);
    let run = tokio::time::timeout(LIMIT, run).await.expect("in time").expect("the task ran");
    assert!(matches!(run.response.body, ResponseBody::Success { .. }), "{:?}", run.response);
    run
}

fn replies(n: usize) -> Vec<Step> {
    (0..n).map(|_| Step::text("done")).collect()
}

#[tokio::test]
async fn a_container_never_crosses_rooms_and_each_room_keeps_its_own_warm() {
    let Some((docker, mut config)) = setup("rooms").await else { return };
    config.size = 3;
    let pool = Pool::start(docker, config).await.expect("pool starts");
    let llm = llm_on(pool.network().gateway, replies(8)).await;
    let (a, b) = (Room::new("telegram:1001"), Room::new("telegram:1002"));
    assert!(pool.snapshot().iter().all(|s| s.room.is_none()), "every container starts blank");

    let a1 = run(&pool, &llm, "rooms-a1", &a).await;
    let b1 = run(&pool, &llm, "rooms-b1", &b).await;
    assert!(a1.fresh && b1.fresh, "each room's first task took a blank");
    assert_ne!(a1.container_id, b1.container_id, "B's first task ran where A's had run");
    let a2 = run(&pool, &llm, "rooms-a2", &a).await;
    let b2 = run(&pool, &llm, "rooms-b2", &b).await;
    assert_eq!(a2.container_id, a1.container_id, "A's next task on A's warm container");
    assert_eq!(b2.container_id, b1.container_id, "B's next task on B's warm container");
    assert!(!a2.fresh && !b2.fresh);

    // `ps` shows each container's room; the stats count them.
    let rooms: Vec<(Option<String>, Option<String>)> =
        pool.snapshot().into_iter().map(|s| (s.container_id, s.room)).collect();
    assert!(rooms.contains(&(Some(a1.container_id.clone()), Some("telegram:1001".into()))));
    assert!(rooms.contains(&(Some(b1.container_id.clone()), Some("telegram:1002".into()))));
    let stats = pool.stats();
    assert_eq!((stats.bound, stats.blank), (2, 1), "{stats:?}");
    assert_eq!(stats.rooms.blanks_taken, 2, "{stats:?}");
    pool.shutdown().await.expect("shutdown");
}

#[tokio::test]
async fn a_room_stays_within_its_limit_while_another_room_takes_a_blank() {
    let Some((docker, mut config)) = setup("roomlimit").await else { return };
    config.size = 2;
    config.max_containers_per_room = 1;
    let pool = Pool::start(docker, config).await.expect("pool starts");
    let gateway = pool.network().gateway;
    let llm = llm_on(
        gateway,
        vec![Step::text("slow").delayed(Duration::from_secs(3)), Step::text("a"), Step::text("b")],
    )
    .await;
    let (a, b) = (Room::new("console:a"), Room::new("console:b"));
    let slow =
        pool.run_task(task("limit-a1", "slow", &llm, gateway), &a, CancellationToken::new(), None);
    tokio::pin!(slow);
    // While A's first task runs, A's second waits (A may hold one container) ...
    let second = async {
        tokio::time::sleep(Duration::from_millis(500)).await;
        run(&pool, &llm, "limit-a2", &a).await
    };
    // ... and B's first task takes the blank at once: it ends before A's slow first task.
    let other = async {
        tokio::time::sleep(Duration::from_millis(700)).await;
        let run = run(&pool, &llm, "limit-b1", &b).await;
        (run, std::time::Instant::now())
    };
    let first = async {
        let run = tokio::time::timeout(LIMIT, &mut slow).await.expect("in time").expect("ran");
        (run, std::time::Instant::now())
    };
    let ((first, a1_done), second, (b1, b1_done)) = tokio::join!(first, second, other);
    assert_eq!(second.container_id, first.container_id, "A's second task waited for A's own");
    assert_ne!(b1.container_id, first.container_id);
    assert!(b1_done < a1_done, "B waited for A's slow task instead of taking the blank");
    pool.shutdown().await.expect("shutdown");
}

#[tokio::test]
async fn when_blanks_run_short_the_longest_idle_room_gives_way_and_idle_rooms_are_retired() {
    let Some((docker, mut config)) = setup("roomshort").await else { return };
    config.size = 2;
    config.room_idle_secs = 3;
    let pool = Pool::start(docker, config).await.expect("pool starts");
    let llm = llm_on(pool.network().gateway, replies(6)).await;
    let (a, b, c) = (Room::new("telegram:1"), Room::new("telegram:2"), Room::new("telegram:3"));
    let a1 = run(&pool, &llm, "short-a1", &a).await;
    let b1 = run(&pool, &llm, "short-b1", &b).await;
    // B took the last blank: A's idle container made way, and a blank replaces it.
    let refilled = eventually(Duration::from_secs(30), || async {
        pool.stats().blank == 1
            && !pool.snapshot().iter().any(|s| s.container_id.as_ref() == Some(&a1.container_id))
    })
    .await;
    assert!(refilled, "no blank came back: {:?} {:?}", pool.stats(), pool.snapshot());
    assert!(pool.stats().rooms.yielded >= 1, "{:?}", pool.stats());
    assert!(pool.snapshot().iter().any(|s| s.last_restart == Some(RestartReason::RoomYielded)));
    // C's first task takes that blank: never A's nor B's container.
    let c1 = run(&pool, &llm, "short-c1", &c).await;
    assert!(c1.fresh);
    assert_ne!(c1.container_id, a1.container_id);
    assert_ne!(c1.container_id, b1.container_id);
    // A comes back: a container that is new to it, never B's or C's.
    let a2 = run(&pool, &llm, "short-a2", &a).await;
    assert!(a2.fresh, "A's old container is gone, so A took a blank");
    assert!(![&a1.container_id, &b1.container_id, &c1.container_id].contains(&&a2.container_id));

    // Left idle past room_idle_secs, the rooms' containers are removed; blanks take over.
    let retired = eventually(Duration::from_secs(40), || async {
        pool.stats().blank == 2 && pool.snapshot().iter().all(|s| s.room.is_none())
    })
    .await;
    assert!(retired, "idle rooms kept their containers: {:?}", pool.snapshot());
    assert!(pool.stats().rooms.idle_retired >= 1, "{:?}", pool.stats());
    pool.shutdown().await.expect("shutdown");
}
