//! The deployment for real: the repository's `compose.yaml` brought up with docker-compose
//! (under a project, pool and network name of this test's own), against the real engine and
//! the real images `make test` builds, with a scripted LLM on 127.0.0.1 that the host container
//! reaches through host networking.
//!
//! What it proves: the host container starts from an empty data volume and warms the pool;
//! the secrets it was given by name are where they were put and nowhere else (not in the
//! image, not in any pool container, not in a log); the daemon inside the image reaches the
//! LLM with the key, the Docker socket and the subagent image (`nexbot doctor`, `nexbot chat`);
//! stopping the service makes the daemon itself remove the pool's containers; `down` leaves
//! no container of the project or the pool, and no volume.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::Duration;

use bollard::models::ContainerInspectResponse;
use bollard::query_parameters::{ListContainersOptionsBuilder, LogsOptionsBuilder};
use bollard::Docker;
use futures_util::StreamExt;
use nexbot_tests::docker_or_skip;
use nexbot_tests::scripted_llm::{ScriptedLlm, Step};
use tokio::io::AsyncWriteExt;

const HOST_IMAGE: &str = "nexbot-host:dev";
const SUBAGENT_IMAGE: &str = "nexbot-subagent:dev";
const POOL_LABEL: &str = "nexbot.pool";
const PROJECT_LABEL: &str = "com.docker.compose.project";
const POOL_SIZE: usize = 2;
/// The Telegram user who owns the bot in the compose test.
const TELEGRAM_OWNER: i64 = 4242;

/// The scripted provider: a plain hello for the console; through Telegram, the main agent
/// delegates and the subagent answers.
fn compose_responder(body: &serde_json::Value) -> Step {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let main = body["tools"].as_array().is_some_and(|tools| {
        tools.iter().any(|t| t["function"]["name"] == "delegate_to_sub_agent")
    });
    let last = messages.last().cloned().unwrap_or_default();
    let content = last["content"].as_str().unwrap_or_default();
    if !main
        && messages
            .iter()
            .any(|m| m["content"].as_str().is_some_and(|c| c.contains("say the word")))
    {
        return Step::text("SUBAGENT-COMPOSE-OK");
    }
    match (last["role"].as_str(), content) {
        (Some("user"), "delegate via telegram") => {
            Step::tool_call("delegate_to_sub_agent", serde_json::json!({"task": "say the word"}))
        }
        (Some("tool"), result) if result.contains("SUBAGENT-COMPOSE-OK") => {
            Step::text("compose delegated: SUBAGENT-COMPOSE-OK")
        }
        (Some("tool"), result) => Step::text(&format!("compose delegation failed: {result}")),
        _ => Step::text("compose says hello"),
    }
}
/// Bound of every single compose or docker command.
const COMMAND_LIMIT: Duration = Duration::from_secs(120);

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("repository root").to_owned()
}

/// `docker-compose` (1.29 here) when present, else the `docker compose` plugin; `None` when
/// neither answers.
fn compose_program() -> Option<Vec<String>> {
    let works = |cmd: &[&str]| {
        std::process::Command::new(cmd[0])
            .args(&cmd[1..])
            .arg("version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    [&["docker-compose"][..], &["docker", "compose"][..]]
        .into_iter()
        .find(|cmd| works(cmd))
        .map(|cmd| cmd.iter().map(|s| (*s).to_owned()).collect())
}

/// One compose deployment of this test; `Drop` tears down whatever is left, so a failed
/// assertion leaves nothing running on the shared engine.
struct Deployment {
    compose: Vec<String>,
    project: String,
    pool: String,
    network: String,
    env: Vec<(String, String)>,
}

/// Test deployments are named `nxd-compose-<pid>-<n>`: the pid tells a dead run's leftovers.
const PROJECT_PREFIX: &str = "nxd-compose-";

impl Deployment {
    /// The deployment named `project`, with the environment compose.yaml needs (`extra` adds
    /// the secrets and the LLM); pool and network are named after the project.
    fn new(compose: Vec<String>, project: &str, extra: &[(&str, &str)]) -> Self {
        let network = format!("{project}-net");
        let skills = repo().join("skills");
        let env: Vec<(String, String)> = [
            ("NEXBOT_POOL_NAME", project),
            ("NEXBOT_POOL_NETWORK", network.as_str()),
            ("NEXBOT_POOL_SIZE", &POOL_SIZE.to_string()),
            ("NEXBOT_SKILLS_DIR", skills.to_str().unwrap()),
        ]
        .iter()
        .chain(extra)
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
        Self { compose, project: project.to_owned(), pool: project.to_owned(), network, env }
    }

    /// `compose -p <project> -f compose.yaml <args>` with this deployment's environment only:
    /// no operator NEXBOT_* or compose settings leak in, and every command (`down` included)
    /// sees the variables compose.yaml requires.
    fn std_command(&self, args: &[&str]) -> std::process::Command {
        let mut cmd = std::process::Command::new(&self.compose[0]);
        cmd.args(&self.compose[1..])
            .args(["-p", &self.project, "-f"])
            .arg(repo().join("compose.yaml"))
            .args(args)
            .current_dir(repo());
        for (key, _) in std::env::vars() {
            if key.starts_with("NEXBOT_") || key.starts_with("COMPOSE_") || key == "RUST_LOG" {
                cmd.env_remove(key);
            }
        }
        cmd.envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        cmd
    }

    async fn compose(&self, args: &[&str]) -> Output {
        let mut cmd = tokio::process::Command::from(self.std_command(args));
        let out = cmd.stdin(Stdio::null()).kill_on_drop(true).output();
        let out = tokio::time::timeout(COMMAND_LIMIT, out)
            .await
            .unwrap_or_else(|_| panic!("compose {args:?} did not finish in {COMMAND_LIMIT:?}"))
            .expect("run compose");
        assert!(
            out.status.success(),
            "compose {args:?} failed: {}{}",
            text(&out.stdout),
            text(&out.stderr)
        );
        out
    }
}

/// Runs `cmd` to its end, or kills it after 60 s (a `Drop` cannot use tokio's timeouts).
fn run_bounded(mut cmd: std::process::Command) {
    let Ok(mut child) =
        cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null()).spawn()
    else {
        return;
    };
    for _ in 0..600 {
        if child.try_wait().ok().flatten().is_some() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = child.kill();
    let _ = child.wait();
}

fn docker_cli(args: &[&str]) -> std::process::Command {
    let mut cmd = std::process::Command::new("docker");
    cmd.args(args);
    cmd
}

impl Drop for Deployment {
    fn drop(&mut self) {
        // A clean stop first: the daemon removes its pool and its firewall rules itself.
        run_bounded(self.std_command(&["down", "-v", "-t", "10"]));
        let label = format!("label={POOL_LABEL}={}", self.pool);
        if let Ok(out) = docker_cli(&["ps", "-aq", "--filter", &label]).output() {
            for id in text(&out.stdout).split_whitespace() {
                run_bounded(docker_cli(&["rm", "-f", id]));
            }
        }
        run_bounded(docker_cli(&["network", "rm", &self.network]));
    }
}

/// Tears down the deployments of earlier runs whose test process no longer exists (killed by
/// a timeout, so their `Drop` never ran): they would hold pool containers and a network.
async fn reap_dead_runs(docker: &Docker, compose: &[String]) {
    let mut projects: Vec<String> = Vec::new();
    for id in containers(docker, PROJECT_LABEL, true).await {
        let labels = inspect(docker, &id).await.config.and_then(|c| c.labels).unwrap_or_default();
        if let Some(project) = labels.get(PROJECT_LABEL) {
            if !projects.contains(project) {
                projects.push(project.clone());
            }
        }
    }
    for project in projects {
        let Some(rest) = project.strip_prefix(PROJECT_PREFIX) else { continue };
        let pid = rest.split('-').next().and_then(|p| p.parse::<u32>().ok());
        let alive = pid.is_some_and(|pid| {
            pid == std::process::id() || Path::new(&format!("/proc/{pid}")).exists()
        });
        if !alive {
            eprintln!("compose_up: removing {project}, left by a test run that no longer exists");
            let reap = Deployment::new(compose.to_vec(), &project, &[]);
            tokio::task::spawn_blocking(move || drop(reap)).await.expect("reaped");
        }
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

async fn containers(docker: &Docker, label: &str, all: bool) -> Vec<String> {
    let filters = HashMap::from([("label", vec![label.to_owned()])]);
    let options = ListContainersOptionsBuilder::default().all(all).filters(&filters).build();
    docker
        .list_containers(Some(options))
        .await
        .expect("list containers")
        .into_iter()
        .filter_map(|c| c.id)
        .collect()
}

async fn logs(docker: &Docker, id: &str) -> String {
    let options = LogsOptionsBuilder::default().stdout(true).stderr(true).build();
    let mut stream = docker.logs(id, Some(options));
    let mut out = String::new();
    let read = async {
        while let Some(Ok(chunk)) = stream.next().await {
            out.push_str(&chunk.to_string());
        }
    };
    tokio::time::timeout(Duration::from_secs(30), read).await.expect("logs read in time");
    out
}

async fn inspect(docker: &Docker, id: &str) -> ContainerInspectResponse {
    docker.inspect_container(id, None).await.expect("inspect container")
}

/// Polls `check` every 250 ms until it returns `Some` or `within` passes.
async fn wait_for<T, F, Fut>(within: Duration, mut check: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if let Some(value) = check().await {
            return Some(value);
        }
        if tokio::time::Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// `docker exec` of `nexbot args` in the host container, with `stdin` and extra `env`.
async fn exec_nexbot(container: &str, env: &[&str], args: &[&str], stdin: &str) -> Output {
    let mut cmd = tokio::process::Command::new("docker");
    cmd.args(["exec", "-i"]);
    for var in env {
        cmd.args(["-e", var]);
    }
    cmd.arg(container)
        .arg("/bin/nexbot")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = cmd.spawn().expect("spawn docker exec");
    let mut input = child.stdin.take().expect("stdin");
    input.write_all(stdin.as_bytes()).await.expect("write stdin");
    drop(input);
    tokio::time::timeout(COMMAND_LIMIT, child.wait_with_output())
        .await
        .expect("docker exec finished in time")
        .expect("docker exec output")
}

#[tokio::test]
async fn compose_up_serves_keeps_secrets_in_place_and_down_leaves_nothing() {
    let test = "compose_up";
    let Some(docker) = docker_or_skip(test).await else { return };
    let Some(compose) = compose_program() else {
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!(
                "{test}: docker-compose is required under CI=true (apt-get install docker-compose)"
            );
        }
        eprintln!("\n!!! SKIPPED {test}: neither docker-compose nor `docker compose` works !!!\n");
        return;
    };
    for image in [HOST_IMAGE, SUBAGENT_IMAGE] {
        if docker.inspect_image(image).await.is_err() {
            panic!(
                "{test}: image {image} is missing; build it with `make image` (`make test` does)"
            );
        }
    }

    reap_dead_runs(&docker, &compose).await;

    let llm = ScriptedLlm::start(vec![]).await;
    llm.set_responder(compose_responder);
    // The bot's Telegram side: the Bot API fixture (host networking: its loopback address
    // is the daemon's too).
    let tg = nexbot_tests::telegram::TelegramFixture::start().await;
    let run = format!(
        "{}-{}",
        std::process::id(),
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis()
            % 1_000_000
    );
    let project = format!("{PROJECT_PREFIX}{run}");
    let planted_key = format!("sk-nxd-planted-llm-key-{run}");
    let planted_master = format!("nxd-planted-master-key-{run}");
    let skills = repo().join("skills");
    let deployment = Deployment::new(
        compose,
        &project,
        &[
            ("NEXBOT_LLM_API_KEY", planted_key.as_str()),
            ("NEXBOT_MASTER_KEY", planted_master.as_str()),
            ("NEXBOT_LLM_BASE_URL", &llm.base_url()),
            ("NEXBOT_LLM_MODEL", "scripted"),
            ("NEXBOT_TELEGRAM_TOKEN", tg.token()),
            ("NEXBOT_TELEGRAM__API_URL", tg.api_url()),
            ("NEXBOT_TELEGRAM__OWNER", &TELEGRAM_OWNER.to_string()),
        ],
    );

    deployment.compose(&["up", "-d", "--no-build"]).await;
    let ps = deployment.compose(&["ps", "-q", "host"]).await;
    let host = text(&ps.stdout).trim().to_owned();
    assert!(!host.is_empty(), "compose has no host container");

    // Ready: the daemon says so, and the pool's containers run.
    let pool_label = format!("{POOL_LABEL}={project}");
    let ready = wait_for(Duration::from_secs(90), || async {
        let state = inspect(&docker, &host).await.state.unwrap_or_default();
        assert_eq!(state.restarting, Some(false), "the host container restarts");
        if state.running != Some(true) {
            return None;
        }
        let serving = logs(&docker, &host).await.contains("nexbot is serving");
        let pool = containers(&docker, &pool_label, false).await;
        (serving && pool.len() == POOL_SIZE).then_some(pool)
    })
    .await;
    let Some(pool) = ready else {
        panic!(
            "not ready in 90 s: pool {:?}; host log:\n{}",
            containers(&docker, &pool_label, true).await,
            logs(&docker, &host).await
        );
    };

    // How the host container runs.
    let host_inspect = inspect(&docker, &host).await;
    let config = host_inspect.config.clone().unwrap();
    assert_eq!(config.image.as_deref(), Some(HOST_IMAGE));
    let host_config = host_inspect.host_config.clone().unwrap();
    assert_eq!(host_config.network_mode.as_deref(), Some("host"));
    assert_eq!(host_config.cap_add, Some(vec!["NET_ADMIN".to_owned()]));
    assert_eq!(host_config.cap_drop, Some(vec!["ALL".to_owned()]));
    assert_eq!(host_config.readonly_rootfs, Some(true));
    assert_eq!(host_config.log_config.unwrap().config.unwrap()["max-size"], "10m");
    let mounts = host_inspect.mounts.clone().unwrap();
    let mount = |dest: &str| {
        mounts
            .iter()
            .find(|m| m.destination.as_deref() == Some(dest))
            .unwrap_or_else(|| panic!("no mount at {dest}: {mounts:?}"))
    };
    assert_eq!(mount("/skills").source.as_deref(), skills.to_str());
    assert_eq!(mount("/skills").rw, Some(false), "skills are read-only");
    assert_eq!(mount("/data").name.as_deref(), Some(format!("{project}_data").as_str()));
    assert_eq!(mount("/var/run/docker.sock").source.as_deref(), Some("/var/run/docker.sock"));

    // Secrets: exactly where the test put them (by name, in the host's env), nowhere else.
    let env = config.env.clone().unwrap_or_default();
    let holding = |value: &str| -> Vec<String> {
        env.iter().filter(|e| e.contains(value)).cloned().collect()
    };
    assert_eq!(holding(&planted_key), vec![format!("NEXBOT_LLM_API_KEY={planted_key}")]);
    assert_eq!(holding(&planted_master), vec![format!("NEXBOT_MASTER_KEY={planted_master}")]);
    assert_eq!(holding(tg.token()), vec![format!("NEXBOT_TELEGRAM_TOKEN={}", tg.token())]);
    let image = docker.inspect_image(HOST_IMAGE).await.unwrap();
    let image_env = image.config.and_then(|c| c.env).unwrap_or_default();
    for name in ["NEXBOT_LLM_API_KEY", "NEXBOT_TELEGRAM_TOKEN", "NEXBOT_MASTER_KEY"] {
        assert!(
            !image_env.iter().any(|e| e.starts_with(name)),
            "{name} in the image: {image_env:?}"
        );
    }
    let compose_file = std::fs::read_to_string(repo().join("compose.yaml")).unwrap();
    for name in ["NEXBOT_LLM_API_KEY", "NEXBOT_TELEGRAM_TOKEN", "NEXBOT_MASTER_KEY"] {
        assert!(compose_file.contains(&format!("- {name}\n")), "{name} not passed by name");
        assert!(!compose_file.contains(&format!("{name}=")), "compose.yaml sets {name}");
    }
    for id in &pool {
        let inspected = serde_json::to_string(&inspect(&docker, id).await).unwrap();
        let log = logs(&docker, id).await;
        for planted in [&planted_key, &planted_master] {
            assert!(!inspected.contains(planted.as_str()), "a secret in pool container {id}");
            assert!(!log.contains(planted.as_str()), "a secret in the log of {id}");
        }
        // The bundled skills reach every subagent, read-only, through the daemon's config.
        let (code, listing) = nexbot_tests::exec_in(
            &docker,
            id,
            &[
                "/bin/sh",
                "-c",
                "cat /workspace/skills/web-research/SKILL.md && ! touch /workspace/skills/x",
            ],
            Duration::from_secs(30),
        )
        .await;
        assert_eq!(code, 0, "skills not mounted read-only in pool container {id}: {listing}");
        assert!(listing.contains("name: web-research"), "{listing}");
    }

    // The daemon in the image reaches the LLM (with the key), Docker and the subagent image.
    let doctor = exec_nexbot(&host, &[], &["doctor"], "").await;
    let report = text(&doctor.stdout);
    assert!(doctor.status.success(), "doctor failed:\n{report}{}", text(&doctor.stderr));
    assert!(report.contains("[ok]   llm:"), "{report}");
    assert!(report.contains("[ok]   subagent image: nexbot-subagent:dev"), "{report}");
    let chat =
        exec_nexbot(&host, &["NEXBOT_SUBAGENT__ENABLED=false"], &["chat"], "hello from compose\n")
            .await;
    assert!(chat.status.success(), "chat failed: {}", text(&chat.stderr));
    assert!(text(&chat.stdout).contains("compose says hello"), "{}", text(&chat.stdout));
    let asked = llm
        .chat_requests()
        .into_iter()
        .find(|r| r.to_text().contains("hello from compose"))
        .expect("the chat reached the scripted LLM");
    assert_eq!(asked.header("authorization"), Some(format!("Bearer {planted_key}").as_str()));
    let host_log = logs(&docker, &host).await;
    for planted in [&planted_key, &planted_master] {
        assert!(!host_log.contains(planted.as_str()), "a secret in the host's log");
    }

    // A Telegram message to the bot in the stack gets a delegated answer.
    tg.user_says(TELEGRAM_OWNER, TELEGRAM_OWNER, "delegate via telegram").await;
    let answered = tg
        .wait_bot_messages(
            TELEGRAM_OWNER,
            |m| m.iter().any(|m| m.text.contains("compose delegated: SUBAGENT-COMPOSE-OK")),
            Duration::from_secs(120),
        )
        .await;
    assert!(answered.iter().any(|m| m.raw.contains("Working on")), "{answered:#?}");
    let host_log = logs(&docker, &host).await;
    assert!(!host_log.contains(tg.token()), "the Telegram token is in the host's log");

    // The operator's client in the image reaches the daemon through its socket in /data.
    let ps = tokio::process::Command::new("docker")
        .args(["exec", &host, "nexbot-ctl", "--json", "subagents", "ps"])
        .output()
        .await
        .expect("docker exec nexbot-ctl");
    assert!(ps.status.success(), "nexbot-ctl in the image: {}", text(&ps.stderr));
    let listed: serde_json::Value = serde_json::from_slice(&ps.stdout).expect("ps --json");
    assert_eq!(listed["subagents"].as_array().map(Vec::len), Some(POOL_SIZE), "{listed}");

    // Stopping the service: the daemon's own shutdown removes the pool's containers.
    deployment.compose(&["stop", "host"]).await;
    let stopped_log = logs(&docker, &host).await;
    assert!(stopped_log.contains("nexbot: stopped"), "no clean shutdown:\n{stopped_log}");
    let left = containers(&docker, &pool_label, true).await;
    assert!(left.is_empty(), "the daemon left pool containers: {left:?}\n{stopped_log}");

    deployment.compose(&["down", "-v"]).await;
    let project_label = format!("{PROJECT_LABEL}={project}");
    assert!(
        containers(&docker, &project_label, true).await.is_empty(),
        "compose containers remain"
    );
    assert!(containers(&docker, &pool_label, true).await.is_empty(), "pool containers remain");
    assert!(
        docker.inspect_volume(&format!("{project}_data")).await.is_err(),
        "the data volume remains after down -v"
    );
    // The pool network is the daemon's, not compose's: it outlives `down` (`make down` removes
    // it), but no firewall rule of the daemon on its bridge may.
    let network = docker.inspect_network(&deployment.network, None).await.expect("pool network");
    let bridge = format!("br-{}", &network.id.unwrap()[..12]);
    match std::process::Command::new("iptables").args(["-w", "5", "-S", "INPUT"]).output() {
        Ok(out) if out.status.success() => {
            let rules = text(&out.stdout);
            let left: Vec<&str> =
                rules.lines().filter(|r| r.contains(&format!("-i {bridge} "))).collect();
            assert!(left.is_empty(), "firewall rules on {bridge} remain: {left:?}");
        }
        other if std::env::var("CI").is_ok_and(|v| v == "true") => {
            panic!("{test}: cannot list iptables rules under CI=true: {other:?}")
        }
        other => eprintln!("{test}: firewall rules not checked (iptables -S: {other:?})"),
    }
    drop(deployment);
}
