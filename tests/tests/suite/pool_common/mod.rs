//! Shared set-up for the pool tests: the engine, the subagent image, a pool name of the
//! test's own (so tests running in parallel never reap each other's containers), the internal
//! test network of this test process, and a look at what containers a pool left behind.

#![allow(dead_code)] // each test file uses its own subset

use std::collections::HashMap;
use std::time::Duration;

use bollard::query_parameters::ListContainersOptionsBuilder;
use bollard::Docker;
use nexbot_docker::spec::LABEL_POOL;
use nexbot_docker::PoolConfig;
use nexbot_tests::docker_or_skip;

/// The subagent image the pool tests run: `NEXBOT_TEST_IMAGE`, else `nexbot-subagent:dev`
/// (what `make image` builds). Overridable so that a branch's image, built under a tag of its
/// own, is tested without retagging the shared `:dev` one other checkouts test against.
pub fn image() -> String {
    std::env::var("NEXBOT_TEST_IMAGE")
        .ok()
        .filter(|image| !image.trim().is_empty())
        .unwrap_or_else(|| "nexbot-subagent:dev".to_owned())
}
/// The prefix of the test network's name; the test process's pid follows.
const NETWORK_PREFIX: &str = "nxp-tests-";

/// One internal network shared by every pool test of this process: creating one per test
/// would exhaust the engine's address pools when tests run in parallel, and a network belongs
/// to the process that made it (a test run in another process, another checkout's say, is
/// refused it while this one lives). It goes when this process has ended ([`remove_at_exit`]);
/// what a watcher could not remove, [`setup`] removes for dead test processes.
pub fn network() -> String {
    remove_at_exit();
    network_name()
}

fn network_name() -> String {
    format!("{NETWORK_PREFIX}{}", std::process::id())
}

/// Once per test process: a watcher, detached into its own process group, that waits until
/// this process has ended — passed, failed, panicked or killed — then removes the images it
/// built (`nexbot-test-<what>:<pid>`, e.g. the clean-room attacks' helper image), the
/// containers of its pools (`nxp-<test>-<pid>`) and its network. The test harness has no hook that runs
/// after the last test; a process outside it does.
fn remove_at_exit() {
    use std::os::unix::process::CommandExt;
    static WATCHER: std::sync::Once = std::sync::Once::new();
    WATCHER.call_once(|| {
        const SCRIPT: &str = r#"
while kill -0 "$1" 2>/dev/null; do sleep 1; done
docker images --format '{{.Repository}}:{{.Tag}}' | grep -E "^nexbot-test-[a-z-]+:$1\$" |
  xargs -r docker rmi -f >/dev/null 2>&1
for try in 1 2 3 4 5 6 7 8 9 10; do
  docker ps -a --filter "label=$3" --format '{{.ID}} {{.Label "'"$3"'"}}' |
    awk -v end="-$1" 'substr($2, length($2) - length(end) + 1) == end { print $1 }' |
    xargs -r docker rm -f >/dev/null 2>&1
  docker network inspect "$2" >/dev/null 2>&1 || exit 0
  docker network rm "$2" >/dev/null 2>&1 && exit 0
  sleep 2
done
"#;
        let pid = std::process::id().to_string();
        let spawned = std::process::Command::new("sh")
            .args(["-c", SCRIPT, "nxp-tests-watcher", &pid, &network_name(), LABEL_POOL])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .process_group(0)
            .spawn();
        if let Err(e) = spawned {
            eprintln!("cannot start the watcher that removes {} at exit: {e}", network_name());
        }
    });
}

/// The engine and a config for a pool named after `test`, or `None` (outside CI) when
/// Docker is missing. The image must exist: `make test` builds it first.
///
/// In the remote leg ([`nexbot_tests::remote::remote_leg`]) the engine returned is the
/// process's shared remote host's (over mutual TLS), with the image copied there by id: the
/// same test code then runs its pools on "another machine".
pub async fn setup(test: &str) -> Option<(Docker, PoolConfig)> {
    let local = docker_or_skip(test).await?;
    let image = image();
    if local.inspect_image(&image).await.is_err() {
        panic!(
            "{test}: image {image} is missing; build it with `make image` (`make test` does), \
             or `make subagent-image IMAGE={image}` for a NEXBOT_TEST_IMAGE of your own"
        );
    }
    let docker = match nexbot_tests::remote::remote_leg() {
        true => on_the_remote_host(&local, &image).await,
        false => local,
    };
    reap_dead_runs(&docker, test).await;
    let config = PoolConfig {
        name: format!("nxp-{test}-{}", std::process::id()),
        image,
        network: network(),
        size: 3,
        ping_interval_ms: 1_000,
        ping_timeout_ms: 2_000,
        runtime: nexbot_tests::test_runtime(),
        ..PoolConfig::default()
    };
    Some((docker, config))
}

/// The test process whose run of `test` pool `name` is (`nxp-<test>-<pid>`), or `None` when it
/// is not one. Only a whole pid counts: `nxp-service-` also begins `nxp-service-reap-<pid>`,
/// the live pool of another test (`service-reap`), which the `service` test once took for a
/// dead run of its own and removed mid-start (its first ping failed, exit 137).
fn process_of_run(test: &str, name: &str) -> Option<u32> {
    let pid = name.strip_prefix("nxp-")?.strip_prefix(test)?.strip_prefix('-')?;
    pid.bytes().all(|b| b.is_ascii_digit()).then(|| pid.parse().ok())?
}

#[test]
fn a_run_of_a_test_is_its_name_and_a_whole_pid_not_a_longer_tags_pool() {
    assert_eq!(process_of_run("service", "nxp-service-4242"), Some(4242));
    assert_eq!(process_of_run("service", "nxp-service-reap-4242"), None);
    assert_eq!(process_of_run("owned", "nxp-owned-down-17"), None);
    assert_eq!(process_of_run("service", "nxp-service-+42"), None);
    assert_eq!(process_of_run("service", "nxp-service-"), None);
    assert_eq!(process_of_run("service", "nxp-services-42"), None);
}

/// Whether test process `pid` (this one, or one in this pid namespace) still runs: what the
/// Docker suite's clean-ups ask before they remove what a test run named after its pid.
pub fn test_process_alive(pid: u32) -> bool {
    pid == std::process::id() || std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// A test that panicked drops its pool without shutdown; its containers (named after a test
/// process that no longer exists) are removed here, so failed runs do not pile up.
async fn reap_dead_runs(docker: &Docker, test: &str) {
    use bollard::query_parameters::RemoveContainerOptionsBuilder;
    let filters = HashMap::from([("label", vec![LABEL_POOL.to_owned()])]);
    let options = ListContainersOptionsBuilder::default().all(true).filters(&filters).build();
    for container in docker.list_containers(Some(options)).await.expect("list containers") {
        let pool = container.labels.as_ref().and_then(|l| l.get(LABEL_POOL));
        let Some(pid) = pool.and_then(|p| process_of_run(test, p)) else { continue };
        if let (false, Some(id)) = (test_process_alive(pid), container.id) {
            let remove = RemoveContainerOptionsBuilder::default().force(true).build();
            let _ = docker.remove_container(&id, Some(remove)).await;
        }
    }
    // The test networks of dead test processes (removal fails while containers of some other
    // test's dead run still sit on one; a later run gets it).
    let networks = docker
        .list_networks(None::<bollard::query_parameters::ListNetworksOptions>)
        .await
        .expect("list networks");
    for network in networks {
        let Some(name) = network.name else { continue };
        let Some(pid) = name.strip_prefix(NETWORK_PREFIX) else { continue };
        let dead = pid.parse::<u32>().is_ok_and(|pid| !test_process_alive(pid));
        if dead {
            let _ = docker.remove_network(&name).await;
        }
    }
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
    nexbot_tests::exec_in(docker, id, &["/bin/sh", "-c", script], Duration::from_secs(30)).await
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
    let listener = listen_beside_the_pool(std::net::SocketAddr::new(gateway, 0));
    nexbot_tests::scripted_llm::ScriptedLlm::start_listening(listener, steps)
}

/// Removes containers and networks by name or id when dropped, so that a failing test leaves
/// nothing behind (the CLI: `Drop` cannot await). Networks go after the containers.
#[derive(Debug, Default)]
pub struct Leftovers {
    pub containers: Vec<String>,
    pub networks: Vec<String>,
}

impl Drop for Leftovers {
    fn drop(&mut self) {
        let docker = |args: &[&str]| {
            let _ = std::process::Command::new("docker").args(args).output();
        };
        for container in &self.containers {
            docker(&["rm", "-f", container]);
        }
        for network in &self.networks {
            docker(&["network", "rm", network]);
        }
    }
}

/// The tool results in a chat-completion request `body`, in order (what the scripted model
/// has seen of its task so far).
pub fn tool_results(body: &serde_json::Value) -> Vec<String> {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    messages
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// The shared remote host's engine ([`nexbot_tests::remote::shared`]), with `image` there.
pub async fn on_the_remote_host(local: &Docker, image: &str) -> Docker {
    let remote = nexbot_tests::remote::shared();
    let docker = nexbot_docker::connect(&remote.sandbox()).await.expect("the remote engine");
    nexbot_docker::sync_image(local, &docker, image, |_, _| {})
        .await
        .unwrap_or_else(|e| panic!("copying {image} to the remote engine: {e}"));
    docker
}

/// A listener on `addr` where the pool's containers are: here, or inside the remote host's
/// namespace in the remote leg (the pool network's gateway is an address of that machine).
pub fn listen_beside_the_pool(addr: std::net::SocketAddr) -> tokio::net::TcpListener {
    let listener = match nexbot_tests::remote::remote_leg() {
        true => nexbot_tests::remote::shared().listen(addr),
        false => std::net::TcpListener::bind(addr).and_then(|l| {
            l.set_nonblocking(true)?;
            Ok(l)
        }),
    };
    let listener = listener.unwrap_or_else(|e| panic!("listening on {addr}: {e}"));
    tokio::net::TcpListener::from_std(listener).expect("a tokio listener")
}

/// A `success`'s result text; any other answer fails the test, naming it.
pub fn success_text(body: &nexbot_protocol::ResponseBody) -> &str {
    match body {
        nexbot_protocol::ResponseBody::Success { result, .. } => result,
        other => panic!("expected success, got {other:?}"),
    }
}
