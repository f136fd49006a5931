//! Shared set-up for the pool tests: the engine, the subagent image, a pool name of the
//! test's own (so tests running in parallel never reap each other's containers), the shared
//! internal test network, and a look at what containers a pool left behind.

#![allow(dead_code)] // each test file uses its own subset

use std::collections::HashMap;
use std::time::Duration;

use bollard::query_parameters::ListContainersOptionsBuilder;
use bollard::Docker;
use nexbot_docker::spec::LABEL_POOL;
use nexbot_docker::PoolConfig;
use nexbot_tests::docker_or_skip;

pub const IMAGE: &str = "nexbot-subagent:dev";
/// One internal network shared by every pool test: creating one per test would exhaust the
/// engine's address pools when tests run in parallel.
pub const NETWORK: &str = "nxp-tests";

/// The engine and a config for a pool named after `test`, or `None` (outside CI) when
/// Docker is missing. The image must exist: `make test` builds it first.
pub async fn setup(test: &str) -> Option<(Docker, PoolConfig)> {
    let docker = docker_or_skip(test).await?;
    if docker.inspect_image(IMAGE).await.is_err() {
        panic!("{test}: image {IMAGE} is missing; build it with `make image` (`make test` does)");
    }
    let config = PoolConfig {
        name: format!("nxp-{test}-{}", std::process::id()),
        network: NETWORK.into(),
        size: 3,
        ping_interval_ms: 1_000,
        ping_timeout_ms: 2_000,
        ..PoolConfig::default()
    };
    Some((docker, config))
}

/// Ids of the containers (running or not) labelled with pool `name`.
pub async fn containers_of(docker: &Docker, name: &str) -> Vec<String> {
    let filters = HashMap::from([("label", vec![format!("{LABEL_POOL}={name}")])]);
    let options = ListContainersOptionsBuilder::default().all(true).filters(&filters).build();
    docker
        .list_containers(Some(options))
        .await
        .expect("list containers")
        .into_iter()
        .filter_map(|c| c.id)
        .collect()
}

/// Polls `check` every 50 ms until it holds or `within` passes; returns whether it held.
pub async fn eventually<F, Fut>(within: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if check().await {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Runs `script` with `/bin/sh -c` inside container `id` (as the container's user) and
/// returns its exit code and combined output. Bounded by a 30 s timeout.
pub async fn exec(docker: &Docker, id: &str, script: &str) -> (i64, String) {
    use bollard::exec::StartExecResults;
    use bollard::models::ExecConfig;
    use futures_util::StreamExt;

    let config = ExecConfig {
        attach_stdout: Some(true),
        attach_stderr: Some(true),
        cmd: Some(vec!["/bin/sh".into(), "-c".into(), script.into()]),
        ..Default::default()
    };
    let run = async {
        let created = docker.create_exec(id, config).await.expect("create exec");
        let mut output = String::new();
        if let StartExecResults::Attached { output: mut stream, .. } =
            docker.start_exec(&created.id, None).await.expect("start exec")
        {
            while let Some(chunk) = stream.next().await {
                output.push_str(&chunk.expect("exec output").to_string());
            }
        }
        let code = docker.inspect_exec(&created.id).await.expect("inspect exec").exit_code;
        (code.unwrap_or(-1), output)
    };
    tokio::time::timeout(Duration::from_secs(30), run).await.expect("exec finished in time")
}

/// An `execute` request whose LLM is the scripted server `llm`, reached through the internal
/// network's gateway. The bearer is a per-task token, as the host's relay would hand out.
pub fn task(
    id: &str,
    text: &str,
    llm: &nexbot_tests::scripted_llm::ScriptedLlm,
    gateway: std::net::IpAddr,
) -> nexbot_protocol::Request {
    let mut request = nexbot_protocol::Request::execute(id, text);
    request.llm_base_url = Some(llm.base_url_for_host(&gateway.to_string()));
    request.llm_model = Some("scripted".into());
    request.llm_token = Some(secrecy::SecretString::from(format!("nxp-token-{id}")));
    request.timeout = Some(60);
    request
}

/// Starts the scripted LLM on the pool network's gateway, where containers reach the host.
pub async fn llm_on(
    gateway: std::net::IpAddr,
    steps: Vec<nexbot_tests::scripted_llm::Step>,
) -> nexbot_tests::scripted_llm::ScriptedLlm {
    nexbot_tests::scripted_llm::ScriptedLlm::start_on(std::net::SocketAddr::new(gateway, 0), steps)
        .await
}
