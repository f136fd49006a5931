//! Pool life cycle against the real engine: start, ping, snapshot, shutdown leaving nothing;
//! a pool dropped without shutdown (a host crash) is reaped by the next one of its name.

mod pool_common;

use std::time::{Duration, Instant};

use nexbot_docker::{Pool, SlotState};
use pool_common::{containers_of, setup};

#[tokio::test]
async fn pool_of_three_starts_answers_pings_and_shutdown_leaves_nothing() {
    let Some((docker, config)) = setup("life").await else { return };
    let name = config.name.clone();
    let started = Instant::now();
    let pool = Pool::start(docker.clone(), config).await.expect("pool starts");
    eprintln!("pool of 3 ready in {:?}", started.elapsed());

    let snapshot = pool.snapshot();
    assert_eq!(snapshot.len(), 3);
    for s in &snapshot {
        assert_eq!(s.state, SlotState::Idle, "{s:?}");
        assert!(s.container.as_ref().is_some_and(|c| c.len() == 12), "{s:?}");
        assert!(s.ip.is_some(), "{s:?}");
    }
    let pings = pool.ping_all().await;
    assert_eq!(pings.len(), 3);
    for p in &pings {
        assert!(p.round_trip.is_ok(), "{p:?}");
    }
    assert_eq!(containers_of(&docker, &name).await.len(), 3);

    tokio::time::timeout(Duration::from_secs(60), pool.shutdown())
        .await
        .expect("shutdown finishes")
        .expect("shutdown succeeds");
    assert!(containers_of(&docker, &name).await.is_empty(), "containers left after shutdown");
}
