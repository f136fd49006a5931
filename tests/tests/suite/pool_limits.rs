//! What the pool refuses on the host before anything reaches a container, against the real
//! engine: an `execute` line over the protocol's 1 MiB limit fails at once with the size and
//! the limit (sent, it would be a framing error naming no task, and the caller would wait for
//! the hard limit), and costs the pool nothing.

use crate::pool_common;

use std::time::{Duration, Instant};

use nexbot_docker::{Pool, PoolError, SlotState};
use nexbot_protocol::{Request, MAX_REQUEST_LINE};
use pool_common::setup;
use tokio_util::sync::CancellationToken;

#[tokio::test]
async fn an_execute_line_over_the_protocol_limit_is_refused_before_it_is_sent() {
    let Some((docker, mut config)) = setup("toolarge").await else { return };
    config.size = 1;
    let pool = Pool::start(docker, config).await.expect("pool starts");
    let before = pool.snapshot();

    // A huge task text, and one under 1 MiB that JSON escaping takes over it.
    for (id, text) in
        [("huge-1", "x".repeat(2 * 1024 * 1024)), ("quoted-1", "\"".repeat(600 * 1024))]
    {
        let mut request = Request::execute(id, &text);
        request.timeout = Some(60);
        let started = Instant::now();
        let answer = tokio::time::timeout(
            Duration::from_secs(10),
            pool.execute(request, CancellationToken::new()),
        )
        .await
        .expect("refused at once, not after the hard limit");
        let err = answer.expect_err("too large to send");
        assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
        let PoolError::TooLarge { ref task_id, bytes, limit } = err else { panic!("{err:?}") };
        assert_eq!(task_id, id);
        assert_eq!(limit, MAX_REQUEST_LINE);
        assert!(bytes > MAX_REQUEST_LINE, "{bytes}");
        let message = err.to_string();
        assert!(message.contains(&bytes.to_string()) && message.contains("1048576"), "{message}");
        assert!(message.contains(id) && message.contains("not sent"), "{message}");
    }

    // Nothing was spent on them: same container, idle, no task counted, no restart.
    let after = pool.snapshot();
    assert_eq!(after[0].container_id, before[0].container_id);
    assert_eq!(after[0].state, SlotState::Idle);
    assert_eq!((after[0].tasks_served, after[0].restarts), (0, 0));
    pool.shutdown().await.expect("shutdown");
}
