//! The benches' cleanup guard really removes what a bench left behind on the engine — the
//! containers carrying its label and its network — and nothing else, also when the bench
//! panics halfway.

use nexbot_tests::bench::{containers_labelled, DockerCleanup};
use nexbot_tests::docker_or_skip;

fn docker(args: &[&str]) -> String {
    let out = std::process::Command::new("docker").args(args).output().expect("docker CLI");
    assert!(out.status.success(), "docker {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

fn network_exists(name: &str) -> bool {
    let names = docker(&["network", "ls", "--format", "{{.Name}}"]);
    names.lines().any(|n| n == name)
}

#[tokio::test]
async fn the_guard_removes_labelled_containers_and_the_network_even_after_a_panic() {
    let Some(_docker) = docker_or_skip("bench_cleanup").await else { return };
    let run = format!("nxb-cleanup-{}", std::process::id());
    let network = format!("{run}-net");
    docker(&["network", "create", "--internal", "--label", "nxb.test=cleanup", &network]);
    let mine = docker(&[
        "create",
        "--label",
        &format!("nxb.run={run}"),
        "--network",
        &network,
        "nexbot-subagent:dev",
    ]);
    let other =
        docker(&["create", "--label", &format!("nxb.run={run}-other"), "nexbot-subagent:dev"]);
    assert_eq!(containers_labelled("nxb.run", &run).len(), 1);

    let guarded = std::thread::spawn({
        let (run, network) = (run.clone(), network.clone());
        move || {
            let _cleanup = DockerCleanup::default().label("nxb.run", &run).network(&network);
            panic!("a bench failing halfway");
        }
    });
    assert!(guarded.join().is_err(), "the guarded thread panicked");

    let left = containers_labelled("nxb.run", &run);
    let untouched = containers_labelled("nxb.run", &format!("{run}-other"));
    let network_left = network_exists(&network);
    docker(&["rm", "-f", &other]);
    assert!(left.is_empty(), "container {mine} is still there: {left:?}");
    assert_eq!(untouched.len(), 1, "a container with another label was removed");
    assert!(!network_left, "network {network} is still there");
}
