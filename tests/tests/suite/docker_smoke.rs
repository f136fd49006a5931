//! Smoke test of the real Docker engine: build a `FROM scratch` image holding busybox (offline,
//! no registry), run a container from it (an [`OwnedContainer`], so it goes however the test
//! ends), read what it printed, and remove both.

use bollard::query_parameters::{BuildImageOptionsBuilder, RemoveImageOptionsBuilder};
use futures_util::StreamExt;
use nexbot_tests::container::{ContainerSpec, OwnedContainer};
use nexbot_tests::{docker_or_skip, tar_context};
use std::time::Duration;

#[tokio::test]
async fn scratch_busybox_image_builds_runs_and_is_removed() {
    let Some(docker) = docker_or_skip("docker_smoke").await else {
        return;
    };
    let busybox = std::fs::read("/bin/busybox")
        .expect("/bin/busybox (Debian's busybox-static) is needed to build the smoke image");
    let dockerfile = b"FROM scratch\nCOPY busybox /bin/busybox\nUSER 65534:65534\n";
    let context = tar_context(&[("Dockerfile", dockerfile, 0o644), ("busybox", &busybox, 0o755)])
        .expect("tar context");
    let tag = format!("nexbot-smoke:{}", std::process::id());

    let options =
        BuildImageOptionsBuilder::default().dockerfile("Dockerfile").t(&tag).rm(true).build();
    let mut build = docker.build_image(options, None, Some(bollard::body_full(context.into())));
    while let Some(step) = build.next().await {
        let step = step.expect("image build step");
        assert!(step.error_detail.is_none(), "build failed: {step:?}");
    }

    let name = format!("nexbot-smoke-{}", std::process::id());
    // Started, then awaited until it exited with 0.
    let spec = ContainerSpec::new(&tag, "bridge", ("nexbot.test", "smoke")).run(&[
        "/bin/busybox",
        "sh",
        "-c",
        "echo hello from $(id -u)",
    ]);
    let container = OwnedContainer::start(&docker, &name, spec).await.expect("run container");
    let id = container.id().to_owned();
    assert_eq!(container.wait_exit(Duration::from_secs(60)).await, 0);

    let (stdout, stderr) = container.output().await;
    assert_eq!(format!("{stdout}{stderr}").trim(), "hello from 65534");

    container.remove().await;
    docker
        .remove_image(&tag, Some(RemoveImageOptionsBuilder::default().force(true).build()), None)
        .await
        .expect("remove image");
    let gone = docker.inspect_container(&id, None).await;
    assert!(gone.is_err(), "container still exists after removal");
}

/// A test that fails leaves no container behind: the handle removes its container when the
/// panic unwinds through it (on the test's own runtime, which the removal must not need).
#[tokio::test]
async fn a_test_that_panics_leaves_no_container_behind() {
    let Some(docker) = docker_or_skip("docker_smoke panic").await else {
        return;
    };
    let name = format!("nexbot-smoke-panic-{}", std::process::id());
    let spec = ContainerSpec::new(&crate::pool_common::image(), "none", ("nexbot.test", "smoke"))
        .run(&["/bin/sh", "-c", "sleep 600"]);
    let started = docker.clone();
    let (name_in, id_out) = (name.clone(), std::sync::Arc::new(std::sync::Mutex::new(None)));
    let id_seen = std::sync::Arc::clone(&id_out);
    let failing = tokio::spawn(async move {
        let container =
            OwnedContainer::start(&started, &name_in, spec).await.expect("start the container");
        *id_seen.lock().unwrap() = Some(container.id().to_owned());
        assert!(container.exit_code().await.is_none(), "the container runs");
        panic!("the test fails while it holds the container");
    });
    let outcome = failing.await;
    assert!(outcome.is_err_and(|e| e.is_panic()), "the task panicked");
    let id = id_out.lock().unwrap().clone().expect("the container was started");
    let gone = docker.inspect_container(&id, None).await;
    assert!(gone.is_err(), "container {name} ({id}) left behind by a failed test");
}
