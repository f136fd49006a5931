//! The deployment for real, as its users run it: the repository's `compose.yaml` brought up
//! with docker-compose under a project of this test's own, with nothing in the environment but
//! the model and Telegram settings, against the real engine and the images `make test` builds;
//! a scripted LLM on 127.0.0.1 and the Telegram fixture, which the host container reaches
//! through host networking.
//!
//! What it proves: the host container becomes healthy (store open, pool warm) with its pool
//! named after the project and the skills folder found by the daemon itself; an upgrade reads a
//! database of today's schema left in the volume; secrets are where they were put and nowhere
//! else; `doctor`, `chat` and `nexbot-ctl` work inside the image; a skill dropped into
//! `./skills` reaches the pool; a Telegram message gets a delegated answer; a second project
//! runs beside it without touching its pool; `restart` keeps the data; stopping removes the
//! pool, its network and its firewall rules; `down -v` leaves no container and no volume.
//! `up -d` after a changed setting recreates the host container ten times, and each new daemon
//! has the project's pool, network and skills mount (issue 27); a daemon that cannot identify
//! its own container warns, and is refused default names another running daemon owns.

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
/// The default pool size (compose passes none).
const POOL_SIZE: usize = 4;
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
    /// The deployment named `project`, with only `extra` in its environment (the model and
    /// Telegram settings, as a user would set them): the daemon names its pool after the
    /// project and its network `<project>-subagents`, and finds the skills folder itself.
    fn new(compose: Vec<String>, project: &str, extra: &[(&str, &str)]) -> Self {
        let env: Vec<(String, String)> =
            extra.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        let network = format!("{project}-subagents");
        Self { compose, project: project.to_owned(), pool: project.to_owned(), network, env }
    }

    /// Waits until compose's health check says healthy; the pool's running containers then.
    async fn wait_healthy(&self, docker: &Docker) -> (String, Vec<String>) {
        let ps = self.compose(&["ps", "-q", "host"]).await;
        let host = text(&ps.stdout).trim().to_owned();
        assert!(!host.is_empty(), "compose has no host container");
        let pool_label = format!("{POOL_LABEL}={}", self.pool);
        let ready = wait_for(Duration::from_secs(180), || async {
            let state = inspect(docker, &host).await.state.unwrap_or_default();
            assert_eq!(state.restarting, Some(false), "the host container restarts");
            let health = state.health.and_then(|h| h.status).map(|s| s.to_string());
            if health.as_deref() != Some("healthy") {
                return None;
            }
            let pool = containers(docker, &pool_label, false).await;
            (pool.len() == POOL_SIZE).then_some(pool)
        })
        .await;
        let Some(pool) = ready else {
            panic!(
                "{} not healthy in 180 s: pool {:?}; host log:\n{}",
                self.project,
                containers(docker, &pool_label, true).await,
                logs(docker, &host).await
            );
        };
        (host, pool)
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
    // The labels come with the listing: a container of another test in this run may be
    // removed between a listing and an inspect of it (a 404 that failed a CI run).
    let filters = HashMap::from([("label", vec![PROJECT_LABEL.to_owned()])]);
    let options = ListContainersOptionsBuilder::default().all(true).filters(&filters).build();
    let listed = docker.list_containers(Some(options)).await.expect("list containers");
    let mut projects: Vec<String> = Vec::new();
    for labels in listed.into_iter().filter_map(|c| c.labels) {
        if let Some(project) = labels.get(PROJECT_LABEL) {
            if !projects.contains(project) {
                projects.push(project.clone());
            }
        }
    }
    for project in projects {
        let Some(rest) = project.strip_prefix(PROJECT_PREFIX) else { continue };
        let pid = rest.split('-').next().and_then(|p| p.parse::<u32>().ok());
        let alive = pid.is_some_and(crate::pool_common::test_process_alive);
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

/// The gateway address of the network `name`, which must exist.
async fn pool_network_gateway(docker: &Docker, name: &str) -> String {
    nexbot_docker::network_gateway(docker, name)
        .await
        .unwrap_or_else(|e| panic!("network {name}: {e}"))
        .unwrap_or_else(|| panic!("no network {name}"))
        .to_string()
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

/// Removes a skill folder the test added to `./skills`, however the test ends.
struct AddedSkill(PathBuf);

impl Drop for AddedSkill {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The named volume compose would create for `project`, made first and holding the database
/// fixture of today's schema: what an upgrade finds in the volume.
fn seed_volume(project: &str) {
    let volume = format!("{project}_data");
    let created = docker_cli(&[
        "volume",
        "create",
        "--label",
        &format!("com.docker.compose.project={project}"),
        "--label",
        "com.docker.compose.volume=data",
        &volume,
    ])
    .output()
    .expect("docker volume create");
    assert!(created.status.success(), "{}", text(&created.stderr));
    let fixtures = repo().join("tests/tests/fixtures");
    let copied = docker_cli(&[
        "run",
        "--rm",
        "--user",
        "0",
        "--network",
        "none",
        "-v",
        &format!("{volume}:/data"),
        "-v",
        &format!("{}:/fixtures:ro", fixtures.display()),
        "--entrypoint",
        "/bin/cp",
        SUBAGENT_IMAGE,
        "/fixtures/nexbot-schema-4.db",
        "/data/nexbot.db",
    ])
    .output()
    .expect("docker run cp");
    assert!(copied.status.success(), "seeding the volume: {}", text(&copied.stderr));
}

async fn ctl(host: &str, args: &[&str]) -> serde_json::Value {
    let out = tokio::process::Command::new("docker")
        .args(["exec", host, "nexbot-ctl", "--json"])
        .args(args)
        .output()
        .await
        .expect("docker exec nexbot-ctl");
    assert!(out.status.success(), "nexbot-ctl {args:?} in the image: {}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("nexbot-ctl --json")
}

/// The engine and the compose program, with both images built and earlier runs' leftovers
/// reaped; `None` (a loud skip) without Docker or compose outside CI, a failure under CI.
async fn engine_and_compose(test: &str) -> Option<(Docker, Vec<String>)> {
    let docker = docker_or_skip(test).await?;
    let Some(compose) = compose_program() else {
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!(
                "{test}: docker-compose is required under CI=true (apt-get install docker-compose)"
            );
        }
        eprintln!("\n!!! SKIPPED {test}: neither docker-compose nor `docker compose` works !!!\n");
        return None;
    };
    for image in [HOST_IMAGE, SUBAGENT_IMAGE] {
        if docker.inspect_image(image).await.is_err() {
            panic!(
                "{test}: image {image} is missing; build it with `make image` (`make test` does)"
            );
        }
    }
    reap_dead_runs(&docker, &compose).await;
    Some((docker, compose))
}

/// A name for this run's project: the prefix, this process's pid (what tells a dead run's
/// leftovers), and a time stamp.
fn project_name(suffix: &str) -> (String, String) {
    let run = format!(
        "{}-{}",
        std::process::id(),
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis()
            % 1_000_000
    );
    (format!("{PROJECT_PREFIX}{run}{suffix}"), run)
}

// One end-to-end scenario on one expensive setup (containers, a daemon), its steps in
// order; split only by count it would not read better (test code only).
#[tokio::test]
#[allow(clippy::too_many_lines)]
async fn compose_up_serves_keeps_secrets_in_place_and_down_leaves_nothing() {
    let test = "compose_up";
    let Some((docker, compose)) = engine_and_compose(test).await else { return };

    let llm = ScriptedLlm::start(vec![]).await;
    llm.set_responder(compose_responder);
    // The bot's Telegram side: the Bot API fixture (host networking: its loopback address
    // is the daemon's too).
    let tg = nexbot_tests::telegram::TelegramFixture::start().await;
    let (project, run) = project_name("");
    let planted_key = format!("sk-nxd-planted-llm-key-{run}");
    let planted_master = format!("nxd-planted-master-key-{run}");
    let skills = repo().join("skills");
    // Only what a user sets: the model and Telegram (no pool, network or skills variable).
    let owner = TELEGRAM_OWNER.to_string();
    let base_url = llm.base_url();
    let user_env = [
        ("NEXBOT_LLM_API_KEY", planted_key.as_str()),
        ("NEXBOT_MASTER_KEY", planted_master.as_str()),
        ("NEXBOT_LLM_BASE_URL", base_url.as_str()),
        ("NEXBOT_LLM_MODEL", "scripted"),
        ("NEXBOT_TELEGRAM_TOKEN", tg.token()),
        ("NEXBOT_TELEGRAM_API_URL", tg.api_url()),
        ("NEXBOT_TELEGRAM_OWNER", owner.as_str()),
    ];
    let deployment = Deployment::new(compose.clone(), &project, &user_env);
    // An upgrade: the volume already holds a database of today's schema.
    seed_volume(&project);

    deployment.compose(&["up", "-d", "--no-build"]).await;
    let (host, pool) = deployment.wait_healthy(&docker).await;
    let pool_label = format!("{POOL_LABEL}={project}");

    // How the host container runs.
    let host_inspect = inspect(&docker, &host).await;
    let config = host_inspect.config.clone().unwrap();
    assert_eq!(config.image.as_deref(), Some(HOST_IMAGE));
    let host_config = host_inspect.host_config.clone().unwrap();
    assert_eq!(host_config.network_mode.as_deref(), Some("host"));
    let caps = ["NET_ADMIN", "CHOWN", "DAC_OVERRIDE"].map(str::to_owned);
    assert_eq!(host_config.cap_add, Some(caps.to_vec()));
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

    // Secrets: exactly where the test put them (in the host's env), nowhere else.
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
        // Named, its value taken from the shell or `.env`, never written in the file.
        assert!(compose_file.contains(&format!("- {name}=${{{name}:-}}\n")), "{name} not passed");
    }
    for id in &pool {
        let inspected = serde_json::to_string(&inspect(&docker, id).await).unwrap();
        let log = logs(&docker, id).await;
        for planted in [&planted_key, &planted_master] {
            assert!(!inspected.contains(planted.as_str()), "a secret in pool container {id}");
            assert!(!log.contains(planted.as_str()), "a secret in the log of {id}");
        }
        // The bundled skills reach every subagent, read-only, by the path the daemon found.
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
    // A skill dropped into ./skills is visible in a pool container at once.
    // Well formed (the bundled-skills test may list it meanwhile), and moved in whole.
    let skill_name = format!("zz-compose-test-{run}");
    let staged = std::env::temp_dir().join(&skill_name);
    std::fs::create_dir_all(&staged).unwrap();
    let body = "This skill exists only while the compose test runs. ".repeat(12);
    std::fs::write(
        staged.join("SKILL.md"),
        format!(
            "---\nname: {skill_name}\ndescription: added by the compose test\ntools: [web_fetch]\n---\n{body}\n"
        ),
    )
    .unwrap();
    let added = AddedSkill(skills.join(&skill_name));
    if std::fs::rename(&staged, &added.0).is_err() {
        // Another filesystem: copy, then the folder appears in one rename within skills/.
        let near = skills.join(format!(".{skill_name}"));
        std::fs::create_dir_all(&near).unwrap();
        std::fs::copy(staged.join("SKILL.md"), near.join("SKILL.md")).unwrap();
        std::fs::rename(&near, &added.0).unwrap();
        let _ = std::fs::remove_dir_all(&staged);
    }
    let (code, seen) = nexbot_tests::exec_in(
        &docker,
        &pool[0],
        &["/bin/cat", &format!("/workspace/skills/{skill_name}/SKILL.md")],
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(code, 0, "the added skill is not visible: {seen}");
    drop(added);

    // The daemon in the image reaches the LLM (with the key), Docker and the subagent image.
    let doctor = exec_nexbot(&host, &[], &["doctor"], "").await;
    let report = text(&doctor.stdout);
    assert!(doctor.status.success(), "doctor failed:\n{report}{}", text(&doctor.stderr));
    assert!(report.contains("[ok]   llm:"), "{report}");
    assert!(report.contains("[ok]   subagent image: nexbot-subagent:dev"), "{report}");
    // It checks the network this deployment's pool uses, not the built-in default.
    let listener = report.lines().find(|l| l.contains("egress listener")).unwrap_or_default();
    let pool_network = format!("{project}-subagents");
    let gateway = pool_network_gateway(&docker, &pool_network).await;
    assert!(
        listener.contains(&pool_network) || listener.contains(&gateway),
        "doctor checked another network than {pool_network} ({gateway}): {report}"
    );
    let health = ctl(&host, &["health"]).await;
    assert_eq!(health["ready"], true, "{health}");

    // The upgrade: the fixture's records are read by the new image.
    let tasks = ctl(&host, &["tasks"]).await;
    assert!(tasks.to_string().contains("fixture-task-0001"), "{tasks}");
    let messages = ctl(&host, &["messages"]).await;
    assert!(messages.to_string().contains("FIXTURE-LEDGER"), "{messages}");

    // The operator's client in the image reaches the daemon through its socket in /data.
    let listed = ctl(&host, &["subagents", "ps"]).await;
    assert_eq!(listed["subagents"].as_array().map(Vec::len), Some(POOL_SIZE), "{listed}");

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

    // A second deployment on the same engine: its own pool and network; the first is untouched.
    let other_project = format!("{project}-b");
    let other = Deployment::new(compose.clone(), &other_project, &user_env[..4]);
    other.compose(&["up", "-d", "--no-build"]).await;
    let (_, other_pool) = other.wait_healthy(&docker).await;
    assert!(other_pool.iter().all(|id| !pool.contains(id)));
    other.compose(&["down", "-v"]).await;
    let mut still: Vec<String> = containers(&docker, &pool_label, false).await;
    let mut before = pool.clone();
    still.sort();
    before.sort();
    assert_eq!(still, before, "the other deployment touched this one's pool");
    assert!(
        docker.inspect_network(&other.network, None).await.is_err(),
        "the other's network stays"
    );
    drop(other);

    // `restart` keeps the data: the Telegram message and the fixture's records are still there.
    deployment.compose(&["restart", "host"]).await;
    let (host, _) = deployment.wait_healthy(&docker).await;
    let messages = ctl(&host, &["messages"]).await.to_string();
    assert!(
        messages.contains("FIXTURE-LEDGER") && messages.contains("delegate via telegram"),
        "{messages}"
    );
    let host_log = logs(&docker, &host).await;
    for planted in [&planted_key, &planted_master] {
        assert!(!host_log.contains(planted.as_str()), "a secret in the host's log");
    }
    assert!(!host_log.contains(tg.token()), "the Telegram token is in the host's log");

    // Stopping the service: the daemon's own shutdown removes the pool's containers.
    let network = docker.inspect_network(&deployment.network, None).await.expect("pool network");
    let bridge = format!("br-{}", &network.id.unwrap()[..12]);
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
    // The daemon removed its network when it stopped, and no firewall rule of it remains.
    assert!(docker.inspect_network(&deployment.network, None).await.is_err(), "network remains");
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

/// `docker-compose up -d` after a setting changed recreates the host container; the new daemon
/// must know at once that it is this project's, every time (issue 27: in 6 of 11 recreations
/// it took the default pool name and network and gave its subagents no skills). Ten
/// recreations with a pool of one, each checked on the new daemon's first pool container: its
/// pool label, its network and its skills mount. Then `make ctl` reaches the last daemon.
#[tokio::test]
async fn compose_recreated_ten_times_keeps_its_pool_network_and_skills() {
    let test = "compose_recreate";
    let Some((docker, compose)) = engine_and_compose(test).await else { return };
    let started = std::time::Instant::now();
    let (project, _) = project_name("-r");
    let skills = repo().join("skills");
    let mut deployment = Deployment::new(compose, &project, &[("NEXBOT_POOL_SIZE", "1")]);
    let mut previous = String::new();
    for round in 0..=10 {
        // A changed setting: compose recreates the container (`up -d`, as the README says).
        deployment.env.retain(|(k, _)| k != "NEXBOT_LLM_MODEL");
        deployment.env.push(("NEXBOT_LLM_MODEL".into(), format!("recreated-{round}")));
        deployment.compose(&["up", "-d", "--no-build"]).await;
        let host = text(&deployment.compose(&["ps", "-q", "host"]).await.stdout).trim().to_owned();
        assert!(!host.is_empty() && host != previous, "round {round}: compose did not recreate");
        let env = inspect(&docker, &host).await.config.and_then(|c| c.env).unwrap_or_default();
        let model = format!("NEXBOT_LLM__MODEL=recreated-{round}");
        assert!(env.contains(&model), "round {round}: the setting did not arrive: {env:?}");
        // The first pool container this daemon made, whatever it named its pool.
        let owned_by = format!("{}={host}", nexbot_docker::pool_owner::LABEL_OWNER_CONTAINER);
        let made = wait_for(Duration::from_secs(120), || async {
            containers(&docker, &owned_by, true).await.into_iter().next()
        })
        .await;
        let Some(member) = made else {
            panic!(
                "round {round}: the daemon made no pool container in 120 s; its log:\n{}",
                logs(&docker, &host).await
            )
        };
        let seen = inspect(&docker, &member).await;
        let labels = seen.config.clone().and_then(|c| c.labels).unwrap_or_default();
        let networks: Vec<String> = seen
            .network_settings
            .clone()
            .and_then(|n| n.networks)
            .map(|n| n.into_keys().collect())
            .unwrap_or_default();
        let skills_source = seen.mounts.clone().unwrap_or_default().into_iter().find_map(|m| {
            (m.destination.as_deref() == Some("/workspace/skills")).then_some(m.source).flatten()
        });
        let got = (labels.get(POOL_LABEL).cloned(), networks, skills_source);
        let want = (
            Some(project.clone()),
            vec![deployment.network.clone()],
            skills.to_str().map(str::to_owned),
        );
        if got != want {
            panic!(
                "round {round}: the new daemon's pool (name, networks, skills mount) is {got:?}, \
                 not {want:?}; its log:\n{}",
                logs(&docker, &host).await
            );
        }
        previous = host;
    }
    eprintln!("{test}: 11 starts, 10 recreations checked in {:?}", started.elapsed());

    // The operator's shortcut reaches the last daemon (its socket appears once it is up).
    let listed = wait_for(Duration::from_secs(120), || async {
        let mut make = std::process::Command::new("make");
        make.args(["--no-print-directory", "-C"])
            .arg(repo())
            .args(["ctl", "ARGS=--json subagents ps"])
            .env("COMPOSE_PROJECT_NAME", &project)
            .stdin(Stdio::null());
        let out = tokio::process::Command::from(make).output().await.expect("run make ctl");
        out.status.success().then(|| text(&out.stdout))
    })
    .await
    .expect("`make ctl ARGS=\"--json subagents ps\"` never answered");
    let listed: serde_json::Value = serde_json::from_str(&listed).expect("nexbot-ctl --json");
    assert_eq!(listed["subagents"].as_array().map(Vec::len), Some(1), "{listed}");
    deployment.compose(&["down", "-v", "-t", "30"]).await;
    drop(deployment);
}

/// Host-image daemons of [`a_daemon_that_cannot_tell_its_container_warns_and_owned_defaults_are_refused`]:
/// stopped (their shutdown removes their pool and network) and removed however the test ends,
/// with what a killed one left: pool containers and the default network recorded as theirs.
struct Unidentified {
    names: Vec<String>,
    fakes: Vec<String>,
    dir: PathBuf,
}

impl Drop for Unidentified {
    fn drop(&mut self) {
        for name in &self.names {
            run_bounded(docker_cli(&["stop", "-t", "20", name]));
            run_bounded(docker_cli(&["rm", "-f", name]));
        }
        for fake in &self.fakes {
            let label =
                format!("label={}={fake}", nexbot_docker::pool_owner::LABEL_OWNER_CONTAINER);
            if let Ok(out) = docker_cli(&["ps", "-aq", "--filter", &label]).output() {
                for id in text(&out.stdout).split_whitespace() {
                    run_bounded(docker_cli(&["rm", "-f", id]));
                }
            }
        }
        let owner = format!(
            "{{{{index .Labels \"{}\"}}}}",
            nexbot_docker::pool_owner::LABEL_OWNER_CONTAINER
        );
        if let Ok(out) =
            docker_cli(&["network", "inspect", "-f", &owner, "nexbot-subagents"]).output()
        {
            if self.fakes.iter().any(|f| text(&out.stdout).trim() == f) {
                run_bounded(docker_cli(&["network", "rm", "nexbot-subagents"]));
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Unidentified {
    /// Starts `nexbot serve` from the host image with host networking, the socket, a pool of
    /// one and the default pool name and network, in a container whose `/etc/hostname`,
    /// `hosts` and `resolv.conf` come from `…/containers/<fake>/`: the id it reads names a
    /// container the engine does not know. Returns the container's name.
    fn start(&mut self, n: usize) -> String {
        let nanos =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
        // 64 hex digits, as a container id, that no container of this engine has.
        let fake = format!("{:016x}{nanos:032x}{n:016x}", std::process::id());
        let files = self.dir.join("containers").join(&fake);
        std::fs::create_dir_all(&files).unwrap();
        std::fs::write(files.join("hostname"), "unidentified\n").unwrap();
        std::fs::write(files.join("hosts"), "127.0.0.1 localhost\n").unwrap();
        std::fs::write(files.join("resolv.conf"), "").unwrap();
        let name = format!("nxd-cannot-tell-{}-{n}", std::process::id());
        self.names.push(name.clone());
        self.fakes.push(fake);
        let mut run = docker_cli(&["run", "-d", "--name", &name, "--network", "host"]);
        run.args(["--tmpfs", "/data", "-v", "/var/run/docker.sock:/var/run/docker.sock"]);
        for file in ["hostname", "hosts", "resolv.conf"] {
            run.arg("-v").arg(format!("{}:/etc/{file}:ro", files.join(file).display()));
        }
        run.args(["-e", "NEXBOT_SUBAGENT__POOL_SIZE=1", "-e", "NEXBOT_EGRESS__FIREWALL=false"]);
        let out = run.arg(HOST_IMAGE).output().expect("docker run the host image");
        assert!(out.status.success(), "docker run: {}", text(&out.stderr));
        name
    }
}

/// A daemon in a container it cannot identify (here its `/etc/hostname`, `hosts` and
/// `resolv.conf` name a container the engine does not know) says so at warn level and keeps
/// the configured names; a second one, on the default names the first one owns, is refused
/// them with what to set (issue 27).
#[tokio::test]
async fn a_daemon_that_cannot_tell_its_container_warns_and_owned_defaults_are_refused() {
    let test = "cannot_tell";
    let Some((docker, _)) = engine_and_compose(test).await else { return };
    let mut daemons = Unidentified {
        names: Vec::new(),
        fakes: Vec::new(),
        dir: std::env::temp_dir().join(format!("nxd-cannot-tell-{}", std::process::id())),
    };
    let first = daemons.start(1);
    let owned_by =
        format!("{}={}", nexbot_docker::pool_owner::LABEL_OWNER_CONTAINER, daemons.fakes[0]);
    let pool = wait_for(Duration::from_secs(120), || async {
        containers(&docker, &owned_by, false).await.into_iter().next()
    })
    .await;
    let log = logs(&docker, &first).await;
    let Some(pool) = pool else {
        panic!("the first daemon made no pool container; its log:\n{log}")
    };
    let warned = log
        .lines()
        .find(|l| l.contains("cannot tell whether this daemon runs as a compose service"));
    let warned = warned.unwrap_or_else(|| panic!("no warning; the log:\n{log}"));
    assert!(warned.contains("WARN") && warned.contains("does not know its container"), "{warned}");
    assert!(warned.contains("NEXBOT_SUBAGENT__POOL_NAME"), "{warned}");
    let labels = inspect(&docker, &pool).await.config.and_then(|c| c.labels).unwrap_or_default();
    assert_eq!(labels.get(POOL_LABEL).map(String::as_str), Some("nexbot"), "the configured name");

    // A second one on the same default names: refused them, told why and what to set.
    let second = daemons.start(2);
    let refusal = "cannot tell its compose project";
    let refused = wait_for(Duration::from_secs(120), || async {
        let log = logs(&docker, &second).await;
        log.contains(refusal).then_some(log)
    })
    .await;
    let Some(log) = refused else {
        panic!("the second daemon was not refused; its log:\n{}", logs(&docker, &second).await)
    };
    for part in [
        "network \"nexbot-subagents\" belongs to another running nexbot",
        "NEXBOT_SUBAGENT__POOL_NAME and NEXBOT_SUBAGENT__NETWORK",
    ] {
        assert!(log.contains(part), "{part:?} missing:\n{log}");
    }
    assert_eq!(containers(&docker, &owned_by, false).await, vec![pool], "the first pool changed");
    drop(daemons);
}

/// Settings come from a `.env` file beside the compose file as well as from the shell, and a
/// compose command needs no variable at all (`config` resolves the file as `up` would).
#[tokio::test]
async fn compose_reads_settings_from_a_dot_env_file_and_needs_no_variable() {
    let test = "compose_dot_env";
    let Some(compose) = compose_program() else {
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("{test}: docker-compose is required under CI=true");
        }
        eprintln!("\n!!! SKIPPED {test}: neither docker-compose nor `docker compose` works !!!\n");
        return;
    };
    let dir = std::env::temp_dir().join(format!("nxd-dotenv-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(repo().join("compose.yaml"), dir.join("compose.yaml")).unwrap();
    let config = |env_file: Option<&str>| {
        match env_file {
            Some(text) => std::fs::write(dir.join(".env"), text).unwrap(),
            None => {
                let _ = std::fs::remove_file(dir.join(".env"));
            }
        }
        let mut cmd = std::process::Command::new(&compose[0]);
        cmd.args(&compose[1..]).args(["-p", "nxd-dotenv", "config"]).current_dir(&dir);
        cmd.env_clear().env("PATH", std::env::var("PATH").unwrap_or_default());
        let out = cmd.output().expect("compose config");
        assert!(out.status.success(), "compose config failed: {}", text(&out.stderr));
        text(&out.stdout)
    };
    // An empty environment works, and leaves every setting empty (= unset for the daemon).
    let bare = config(None);
    assert!(bare.contains("NEXBOT_LLM__MODEL: ''"), "{bare}");
    assert!(bare.contains(&format!("{}:/skills:ro", dir.join("skills").display())), "{bare}");
    let from_file = config(Some("NEXBOT_LLM_MODEL=from-dotenv\nNEXBOT_TELEGRAM_OWNER=777\n"));
    assert!(from_file.contains("NEXBOT_LLM__MODEL: from-dotenv"), "{from_file}");
    assert!(from_file.contains("NEXBOT_TELEGRAM__OWNER: '777'"), "{from_file}");
    let _ = std::fs::remove_dir_all(&dir);
}
