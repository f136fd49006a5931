//! The operator's view of the MCP servers, through the real `nexbot serve`, its pool and the
//! real `@modelcontextprotocol/server-everything` in `nexbot-mcp:dev` (`make mcp-image`):
//! `nexbot-ctl mcp ls|tools|restart|logs` against the running server's container, the
//! per-server metrics, a chat's `/status` line, and an unknown server refused by name.
//!
//! Needs `nexbot-ctl` built next to `nexbot` (`cargo build -p nexbot-ctl`).

use crate::common;

use std::time::Duration;

use common::{base_env, ctl, echo, Leftovers, Ran, Serving, TempWorkspace};
use nexbot_control::McpServerList;
use nexbot_tests::scripted_llm::ScriptedLlm;
use nexbot_tests::telegram::TelegramFixture;

const LIMIT: Duration = Duration::from_secs(120);
const OWNER: i64 = 7101;
const IMAGE: &str = "nexbot-mcp:dev";

/// `mcp ls --json`, decoded.
async fn servers(ws: &TempWorkspace) -> McpServerList {
    let ran = ctl(ws, &["mcp", "ls", "--json"], "").await;
    assert_eq!(ran.code, Some(0), "{ran:?}");
    serde_json::from_str(&ran.stdout).unwrap_or_else(|e| panic!("{e}: {ran:?}"))
}

/// The running shared instance's container, waiting for one (up to `LIMIT`).
async fn running_container(ws: &TempWorkspace, not: Option<&str>) -> String {
    let start = std::time::Instant::now();
    loop {
        let list = servers(ws).await;
        let running = list.servers[0]
            .instances
            .iter()
            .find(|i| i.state == "running")
            .and_then(|i| i.container.clone())
            .filter(|c| Some(c.as_str()) != not);
        if let Some(container) = running {
            return container;
        }
        assert!(start.elapsed() < LIMIT, "no running instance: {list:?}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

fn assert_ok(ran: &Ran) {
    assert_eq!(ran.code, Some(0), "{ran:?}");
}

#[tokio::test]
async fn mcp_ls_tools_restart_logs_metrics_and_status_show_the_running_server() {
    let Some(docker) = nexbot_tests::docker_or_skip("mcp_ops").await else { return };
    if docker.inspect_image(IMAGE).await.is_err() {
        panic!("the image {IMAGE} is missing: build it with `make mcp-image`");
    }
    let tg = TelegramFixture::start().await;
    let llm = ScriptedLlm::start(vec![]).await;
    llm.set_responder(echo);
    let ws = TempWorkspace::init("mcp-ops");
    let config = std::fs::read_to_string(ws.config()).unwrap();
    std::fs::write(ws.config(), format!("{config}\n{}", common::MCP_EVERYTHING_SHARED)).unwrap();
    let names = Leftovers::new("mcpops");
    let mut env = base_env(&llm.base_url());
    env.extend(names.env());
    common::telegram_env(&mut env, &tg, OWNER);
    let serving = Serving::start(&ws.config(), &env, LIMIT).await;
    serving.wait_log("the control API is on", LIMIT).await;

    // ls: the configured server, running in a container of this daemon's pool, with tools.
    let first = running_container(&ws, None).await;
    assert!(first.starts_with(&format!("{}-mcp-everything-", names.pool)), "{first}");
    let list = servers(&ws).await;
    let everything = &list.servers[0];
    assert_eq!((everything.name.as_str(), everything.scope.as_str()), ("everything", "shared"));
    assert_eq!(everything.command, ["mcp-server-everything", "stdio"]);
    assert!(everything.tools > 0, "{list:?}");
    let ls = ctl(&ws, &["mcp", "ls"], "").await;
    assert_ok(&ls);
    let row = ls.stdout.lines().nth(1).unwrap_or_default();
    for cell in ["everything", "shared", "running", first.as_str()] {
        assert!(row.contains(cell), "{cell} not in {ls:?}");
    }
    let by_docker = common::docker_cli(&["ps", "-q", "--filter", &format!("name={first}")]);
    assert!(!by_docker.is_empty(), "docker does not run {first}");

    // tools: the model's names, with the server's words.
    let tools = ctl(&ws, &["mcp", "tools", "everything"], "").await;
    assert_ok(&tools);
    assert!(tools.stdout.contains("\nmcp__everything__echo (echo)\n"), "{tools:?}");
    assert!(tools.stdout.starts_with(&format!("everything: {} tool(s)", everything.tools)));

    // A chat's /status names the server it may use and its tool count (the owner may).
    tg.user_says(OWNER, OWNER, "/status").await;
    let line = format!("MCP servers: everything ({} tools)", everything.tools);
    tg.wait_bot_messages(OWNER, |m| m.iter().any(|m| m.text.contains(&line)), LIMIT).await;

    // logs: the server's stderr (it says it started).
    let logs = ctl(&ws, &["mcp", "logs", "everything", "-n", "50"], "").await;
    assert_ok(&logs);
    assert!(logs.stdout.contains("Starting"), "{logs:?}");

    // restart: a new container, named in the answer; the old one is gone.
    let restart = ctl(&ws, &["mcp", "restart", "everything"], "").await;
    assert_ok(&restart);
    let second = running_container(&ws, Some(&first)).await;
    assert!(restart.stdout.contains(&second), "{restart:?} does not name {second}");
    let old = common::docker_cli(&["ps", "-aq", "--filter", &format!("name={first}")]);
    assert!(old.is_empty(), "{first} is still there");

    // A container that dies is replaced; ls counts the restart and says why.
    common::docker_cli(&["kill", &second]);
    let third = running_container(&ws, Some(&second)).await;
    let instance = servers(&ws).await.servers[0].instances[0].clone();
    assert_eq!(instance.container.as_deref(), Some(third.as_str()));
    let restarts = instance.restarts;
    assert!(restarts >= 1, "{instance:?}");
    assert!(instance.last_error.is_some(), "{instance:?}");
    let ls = ctl(&ws, &["mcp", "ls"], "").await;
    let row = ls.stdout.lines().nth(1).unwrap_or_default().to_owned();
    assert!(row.contains(&format!("  {restarts}  ")), "restarts {restarts} not in {ls:?}");

    // metrics: per server.
    let metrics = ctl(&ws, &["metrics"], "").await;
    assert_ok(&metrics);
    for line in [
        "nexbot_mcp_instances_running{server=\"everything\"} 1".to_owned(),
        format!("nexbot_mcp_restarts_total{{server=\"everything\"}} {restarts}"),
        "nexbot_mcp_calls_total{server=\"everything\"} 0".to_owned(),
    ] {
        assert!(metrics.stdout.lines().any(|l| l == line), "{line} not in {}", metrics.stdout);
    }

    // An unknown server: exit 1, named, for each command.
    for args in
        [&["mcp", "tools", "nope"][..], &["mcp", "restart", "nope"], &["mcp", "logs", "nope"]]
    {
        let ran = ctl(&ws, args, "").await;
        assert_eq!(ran.code, Some(1), "{args:?}: {ran:?}");
        assert!(ran.stderr.contains("no MCP server is named \"nope\""), "{args:?}: {ran:?}");
        assert!(ran.stderr.contains("configured: everything"), "{args:?}: {ran:?}");
    }

    serving.stop(LIMIT).await;
    let left = common::docker_cli(&["ps", "-aq", "--filter", &format!("name={third}")]);
    assert!(left.is_empty(), "{third} outlived the daemon");
}

#[tokio::test]
async fn without_the_sandbox_mcp_says_it_needs_it() {
    let llm = ScriptedLlm::start(vec![]).await;
    llm.set_responder(echo);
    let ws = TempWorkspace::init("mcp-nosandbox");
    let config = std::fs::read_to_string(ws.config()).unwrap();
    std::fs::write(ws.config(), format!("{config}\n{}", common::MCP_EVERYTHING_SHARED)).unwrap();
    let mut env = base_env(&llm.base_url()); // subagent.enabled = false
    env.push(("NEXBOT_TELEGRAM__ENABLED".into(), "false".into()));
    let serving = Serving::start(&ws.config(), &env, LIMIT).await;
    serving.wait_log("the control API is on", LIMIT).await;
    for args in [&["mcp", "ls"][..], &["mcp", "tools", "everything"]] {
        let ran = ctl(&ws, args, "").await;
        assert_eq!(ran.code, Some(1), "{args:?}: {ran:?}");
        assert!(ran.stderr.contains("MCP servers run in the sandbox"), "{args:?}: {ran:?}");
        assert!(ran.stderr.contains("subagent.enabled = false"), "{args:?}: {ran:?}");
    }
    serving.stop(LIMIT).await;
}

/// A server that is slow to start (it never answers `initialize`; it gives up after
/// `start_timeout_secs`) holds up neither the control socket nor Telegram: while it is still
/// starting the control API answers and shows it `starting` (before, the daemon opened its
/// doors only once the start had ended). The first message's turn waits for the start to end,
/// so the model is offered whatever came up; then `health` names the server that did not start.
#[tokio::test]
async fn a_slow_server_holds_up_neither_the_control_socket_nor_telegram() {
    if nexbot_tests::docker_or_skip("mcp_slow_start").await.is_none() {
        return;
    }
    let tg = TelegramFixture::start().await;
    let llm = ScriptedLlm::start(vec![]).await;
    llm.set_responder(echo);
    let ws = TempWorkspace::init("mcp-slow");
    let config = std::fs::read_to_string(ws.config()).unwrap();
    let mute = r#"
[[mcp.servers]]
name = "mute"
command = "node"
args = ["-e", "setTimeout(() => {}, 600000)"]
scope = "shared"
start_timeout_secs = 25
"#;
    std::fs::write(ws.config(), format!("{config}\n{mute}")).unwrap();
    let names = Leftovers::new("mcpslow");
    let mut env = base_env(&llm.base_url());
    env.extend(names.env());
    common::telegram_env(&mut env, &tg, OWNER);
    let serving = Serving::start(&ws.config(), &env, LIMIT).await;
    serving.wait_log("the control API is on", LIMIT).await;
    let list = servers(&ws).await;
    let states: Vec<&str> = list.servers[0].instances.iter().map(|i| i.state.as_str()).collect();
    assert_eq!(states, ["starting"], "the doors opened only after the start ended: {list:?}");

    tg.user_says(OWNER, OWNER, "hello there").await;
    tg.wait_bot_messages(OWNER, |m| m.iter().any(|m| m.text == "echo: hello there"), LIMIT).await;
    // The turn waited for the start, which had ended (failed) by the time it answered.
    let list = servers(&ws).await;
    let states: Vec<&str> = list.servers[0].instances.iter().map(|i| i.state.as_str()).collect();
    assert_eq!(states, ["failed"], "{list:?}");
    let health = ctl(&ws, &["health"], "").await;
    assert!(health.stdout.contains("server mute does not start: "), "{health:?}");
    assert!(health.stdout.contains("initialize"), "{health:?}");
    serving.stop(LIMIT).await;
}

/// `nexbot serve` (no Telegram, an echoing model, a pool of its own named after `tag`) with the
/// reference server `mcp-server-everything` configured under each (name, image).
async fn serving_with(
    tag: &str,
    servers: &[(&str, &str)],
) -> (ScriptedLlm, TempWorkspace, Leftovers, Serving) {
    let llm = ScriptedLlm::start(vec![]).await;
    llm.set_responder(echo);
    let ws = TempWorkspace::init(tag);
    let mut config = std::fs::read_to_string(ws.config()).unwrap();
    for (name, image) in servers {
        config.push_str(&format!(
            "\n[[mcp.servers]]\nname = \"{name}\"\ncommand = \"mcp-server-everything\"\nargs = [\"stdio\"]\nimage = \"{image}\"\n"
        ));
    }
    std::fs::write(ws.config(), config).unwrap();
    let names = Leftovers::new(&tag.replace('-', ""));
    let mut env = base_env(&llm.base_url());
    env.extend(names.env());
    env.push(("NEXBOT_TELEGRAM__ENABLED".into(), "false".into()));
    let serving = Serving::start(&ws.config(), &env, LIMIT).await;
    serving.wait_log("the control API is on", LIMIT).await;
    (llm, ws, names, serving)
}

/// A chat-scoped server whose image the engine lacks: `health` names it as the degraded part
/// `mcp` with the whole reason, `mcp ls` shows the error whole (the table cut it before "No
/// such image"); once the image exists, `mcp restart` probes it again and health is clear.
#[tokio::test]
async fn a_server_whose_image_is_missing_is_named_until_a_restart_finds_it() {
    let Some(docker) = nexbot_tests::docker_or_skip("mcp_missing_image").await else { return };
    if docker.inspect_image(IMAGE).await.is_err() {
        panic!("the image {IMAGE} is missing: build it with `make mcp-image`");
    }
    let image = format!("nxh-late-mcp-{}:none", std::process::id());
    let (_llm, ws, _names, serving) = serving_with("mcp-late", &[("late", &image)]).await;
    let start = std::time::Instant::now();
    let health = loop {
        let health = ctl(&ws, &["health"], "").await;
        if health.stdout.contains("server late does not start") {
            break health;
        }
        assert!(start.elapsed() < LIMIT, "no degraded mcp part: {health:?}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    assert!(health.stdout.contains(&format!("No such image: {image}")), "{health:?}");
    let fix = format!("the engine has no image {image}: pull or build {image} on the engine");
    assert!(health.stdout.contains(&fix), "{health:?}");
    let ls = ctl(&ws, &["mcp", "ls"], "").await;
    assert!(ls.stdout.contains("last errors in full:"), "{ls:?}");
    assert!(ls.stdout.contains(&format!("No such image: {image}")), "{ls:?}");

    let tagged =
        std::process::Command::new("docker").args(["tag", IMAGE, &image]).status().unwrap();
    assert!(tagged.success());
    let restarted = ctl(&ws, &["mcp", "restart", "late"], "").await;
    let _ = std::process::Command::new("docker").args(["rmi", &image]).output();
    assert_ok(&restarted);
    let health = ctl(&ws, &["health"], "").await;
    assert!(!health.stdout.contains("does not start"), "{health:?}");
    let list = servers(&ws).await;
    assert!(list.servers[0].tools > 0, "the probe read its tools: {list:?}");
    serving.stop(LIMIT).await;
}

/// `make up`'s MCP step (docker/mcp-images.sh): a configured server running the bundled image
/// the engine lacks gets the image built and is restarted, so health clears without the
/// operator; a server on another missing image is left to the operator (still named), and a
/// second run, with the image there, does nothing. The build command is a stand-in (tagging
/// the bundled image under the test's name): `make mcp-image` itself is what CI builds.
#[tokio::test]
async fn make_ups_mcp_step_builds_a_missing_bundled_image_and_restarts_its_servers() {
    let Some(docker) = nexbot_tests::docker_or_skip("mcp_up_image").await else { return };
    if docker.inspect_image(IMAGE).await.is_err() {
        panic!("the image {IMAGE} is missing: build it with `make mcp-image`");
    }
    let bundled = format!("nxh-up-mcp-{}:dev", std::process::id());
    let other = format!("nxh-up-other-{}:none", std::process::id());
    let (_llm, ws, _names, serving) =
        serving_with("mcp-up", &[("bundled", &bundled), ("theirs", &other)]).await;
    let start = std::time::Instant::now();
    while !ctl(&ws, &["health"], "").await.stdout.contains("server bundled does not start") {
        assert!(start.elapsed() < LIMIT, "no degraded mcp part");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let ctl_command = format!(
        "{} --socket {}",
        common::ctl_binary().display(),
        ws.dir.join("nexbot.sock").display()
    );
    let step = || {
        std::process::Command::new(root.join("docker/mcp-images.sh"))
            .args([&ctl_command, &bundled, &format!("docker tag {IMAGE} {bundled}")])
            .output()
            .unwrap()
    };
    let first = step();
    let said = format!("{}{}", common::text(&first.stdout), common::text(&first.stderr));
    let built = docker.inspect_image(&bundled).await.is_ok();
    let health = ctl(&ws, &["health"], "").await;
    let second = step();
    let _ = std::process::Command::new("docker").args(["rmi", &bundled]).output();
    assert!(first.status.success(), "{said}");
    assert!(said.contains("MCP server(s) bundled run") && said.contains("building it"), "{said}");
    assert!(said.contains("MCP server bundled restarted"), "{said}");
    assert!(built, "the image was built: {said}");
    assert!(!health.stdout.contains("server bundled does not start"), "{health:?}");
    assert!(health.stdout.contains("server theirs does not start"), "left alone: {health:?}");
    let again = format!("{}{}", common::text(&second.stdout), common::text(&second.stderr));
    assert!(second.status.success() && again.trim().is_empty(), "the image is there: {again}");
    serving.stop(LIMIT).await;
}
