//! Smoke test of the real Docker engine: build a `FROM scratch` image holding busybox (offline,
//! no registry), run a container from it, read what it printed, and remove both.

use bollard::models::ContainerCreateBody;
use bollard::query_parameters::{
    BuildImageOptionsBuilder, CreateContainerOptionsBuilder, LogsOptionsBuilder,
    RemoveContainerOptionsBuilder, RemoveImageOptionsBuilder,
};
use futures_util::StreamExt;
use nexbot_tests::{docker_or_skip, tar_context};

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
    let config = ContainerCreateBody {
        image: Some(tag.clone()),
        cmd: Some(vec![
            "/bin/busybox".into(),
            "sh".into(),
            "-c".into(),
            "echo hello from $(id -u)".into(),
        ]),
        ..Default::default()
    };
    let created = docker
        .create_container(
            Some(CreateContainerOptionsBuilder::default().name(&name).build()),
            config,
        )
        .await
        .expect("create container");
    docker.start_container(&created.id, None).await.expect("start container");
    let mut wait = docker.wait_container(&created.id, None);
    while let Some(status) = wait.next().await {
        assert_eq!(status.expect("container exit").status_code, 0);
    }

    let mut output = String::new();
    let mut logs = docker
        .logs(&created.id, Some(LogsOptionsBuilder::default().stdout(true).stderr(true).build()));
    while let Some(chunk) = logs.next().await {
        output.push_str(&chunk.expect("log chunk").to_string());
    }
    assert_eq!(output.trim(), "hello from 65534");

    docker
        .remove_container(
            &created.id,
            Some(RemoveContainerOptionsBuilder::default().force(true).build()),
        )
        .await
        .expect("remove container");
    docker
        .remove_image(&tag, Some(RemoveImageOptionsBuilder::default().force(true).build()), None)
        .await
        .expect("remove image");
    let gone = docker.inspect_container(&created.id, None).await;
    assert!(gone.is_err(), "container still exists after removal");
}
