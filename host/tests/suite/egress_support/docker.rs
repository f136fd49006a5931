//! Docker helpers for the egress tests: an internal test network of the test's own, running a
//! command in a container, and removal of what a test created even when it fails.

use std::collections::HashMap;
use std::time::Duration;

use bollard::Docker;
use nexbot_docker::NetworkInfo;

/// Label on everything the egress tests create.
pub const LABEL: &str = "nexbot.test";
pub const LABEL_VALUE: &str = "nxe";

/// An internal network of one test (`nxe-<tag>-<pid>`), removed when dropped — with whatever
/// container is still on it — however the test ends. (Two tests use one; a network per test
/// costs nothing at that count.)
pub struct TestNetwork {
    pub info: NetworkInfo,
}

impl std::ops::Deref for TestNetwork {
    type Target = NetworkInfo;
    fn deref(&self) -> &NetworkInfo {
        &self.info
    }
}

impl Drop for TestNetwork {
    fn drop(&mut self) {
        let docker = crate::common::docker_cli;
        let name = self.info.name.as_str();
        let on_it = docker(&[
            "network",
            "inspect",
            "-f",
            "{{range $id, $_ := .Containers}}{{$id}} {{end}}",
            name,
        ]);
        for id in on_it.split_whitespace() {
            docker(&["rm", "-f", id]);
        }
        docker(&["network", "rm", name]);
    }
}

pub async fn internal_network(docker: &Docker, tag: &str) -> TestNetwork {
    let labels = HashMap::from([(LABEL.to_owned(), LABEL_VALUE.to_owned())]);
    let name = format!("nxe-{tag}-{}", std::process::id());
    let info = nexbot_docker::ensure_internal_network(docker, &name, &labels)
        .await
        .expect("internal test network");
    TestNetwork { info }
}

pub use nexbot_tests::egress::host_address_off_network;

/// Runs `script` with `/bin/busybox sh -c` in container `id`; exit code and combined output.
pub async fn exec(docker: &Docker, id: &str, script: &str) -> (i64, String) {
    nexbot_tests::exec_in(
        docker,
        id,
        &["/bin/busybox", "sh", "-c", script],
        Duration::from_secs(60),
    )
    .await
}

/// Removes containers and images by name when dropped, so a failing test leaves nothing.
/// Uses the CLI because `Drop` cannot await.
#[derive(Default)]
pub struct Cleanup {
    pub containers: Vec<String>,
    pub images: Vec<String>,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        for container in &self.containers {
            let _ = std::process::Command::new("docker").args(["rm", "-f", container]).output();
        }
        for image in &self.images {
            let _ = std::process::Command::new("docker").args(["rmi", "-f", image]).output();
        }
    }
}
