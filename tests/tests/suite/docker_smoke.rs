//! Smoke test of the real Docker engine: build a `FROM scratch` image holding busybox (offline,
//! no registry), run a container from it (owned by testcontainers, so it goes however the test
//! ends), read what it printed, and remove both.

use bollard::query_parameters::{BuildImageOptionsBuilder, RemoveImageOptionsBuilder};
use futures_util::StreamExt;
use nexbot_tests::testcontainers::core::wait::ExitWaitStrategy;
use nexbot_tests::testcontainers::core::WaitFor;
use nexbot_tests::testcontainers::runners::AsyncRunner;
use nexbot_tests::testcontainers::ImageExt;
use nexbot_tests::{docker_or_skip, local_image, tar_context};

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
    // Started, then awaited until it exited with 0 (the ready condition).
    let container = local_image(&tag)
        .with_wait_for(WaitFor::exit(ExitWaitStrategy::new().with_exit_code(0)))
        .with_cmd(["/bin/busybox", "sh", "-c", "echo hello from $(id -u)"])
        .with_container_name(&name)
        .start()
        .await
        .expect("run container");
    let id = container.id().to_owned();

    let mut output = String::from_utf8(container.stdout_to_vec().await.expect("stdout")).unwrap();
    output.push_str(&String::from_utf8(container.stderr_to_vec().await.expect("stderr")).unwrap());
    assert_eq!(output.trim(), "hello from 65534");

    container.rm().await.expect("remove container");
    docker
        .remove_image(&tag, Some(RemoveImageOptionsBuilder::default().force(true).build()), None)
        .await
        .expect("remove image");
    let gone = docker.inspect_container(&id, None).await;
    assert!(gone.is_err(), "container still exists after removal");
}
