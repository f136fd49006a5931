//! The self-test's clean-room attacks, aimed at a container with no clean room: its commands
//! run one after the other in one container (`docker exec`, as tasks would run with nothing
//! scrubbed between them), and the lines turn red, naming what survived. The other side —
//! held on the real pool, where the scrub runs between tasks — is
//! `host/tests/suite/host_selftest.rs`. Without this, a check that can never find anything
//! would pass there too.

use std::collections::HashMap;
use std::time::Duration;

use bollard::models::ContainerCreateBody;
use bollard::query_parameters::{CreateContainerOptionsBuilder, RemoveContainerOptionsBuilder};
use nexbot_selftest::Outcome;

use crate::pool_common;

const LIMIT: Duration = Duration::from_secs(30);

#[tokio::test]
async fn without_a_clean_room_the_planted_process_implant_segment_and_files_are_found() {
    let Some(docker) = nexbot_tests::docker_or_skip("selftest_judges").await else { return };
    let name = format!("nxst-judges-{}", std::process::id());
    let body = ContainerCreateBody {
        image: Some(pool_common::image()),
        entrypoint: Some(vec!["/bin/sh".into()]),
        cmd: Some(vec!["-c".into(), "sleep 120".into()]),
        user: Some("65532:65532".into()),
        working_dir: Some("/tmp".into()),
        labels: Some(HashMap::from([("nexbot.test".into(), "nxst".into())])),
        ..Default::default()
    };
    let options = CreateContainerOptionsBuilder::default().name(&name).build();
    let id = docker.create_container(Some(options), body).await.expect("create").id;
    docker.start_container(&id, None).await.expect("start");

    let nonce = "0a1b2c3d4e5f";
    let sh = |command: String| {
        let docker = docker.clone();
        let id = id.clone();
        async move { nexbot_tests::exec_in(&docker, &id, &["/bin/sh", "-c", &command], LIMIT).await.1 }
    };
    let planted = sh(nexbot_selftest::attacks::plant(nonce)).await;
    assert!(planted.contains("implant alive") && planted.contains("segment planted"), "{planted}");
    let looked = sh(nexbot_selftest::attacks::look_for_plants(nonce)).await;
    let [process, files] = nexbot_selftest::attacks::judge_plants(&planted, &looked);
    assert_eq!(process.outcome, Outcome::Broken, "{process:?}");
    assert!(process.evidence.contains("nexbot-selftest-0a1b2c3d4e5f"), "the loop: {process:?}");
    assert!(process.evidence.contains("(the implant)"), "the leader-exited group: {process:?}");
    assert_eq!(files.outcome, Outcome::Broken, "{files:?}");
    for left in ["/dev/shm/", "/tmp/", "./", "System V segment"] {
        assert!(files.evidence.contains(left), "{left}: {files:?}");
    }

    let options = RemoveContainerOptionsBuilder::default().force(true).build();
    docker.remove_container(&id, Some(options)).await.expect("remove");
}
