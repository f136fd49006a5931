//! `nexbot serve` with its sandboxes on an engine on "another machine"
//! ([`nexbot_tests::remote::RemoteHost`], over mutual TLS): the images copied there by id,
//! the pool made there and nowhere here, the engine's address, certificate and round trip in
//! `doctor`, `health`, `subagents ps` and `/v1/status`; the egress node beside the pool (its
//! hardening, its firewall), a delegated task reaching the model only through it, the node
//! killed and started again, the remote engine restarted; the operator's commands and an MCP
//! server there; the planted key hunted there; nothing left behind on either engine after a
//! stop; a task's fetch there held until the owner answers in Telegram.

use crate::common;

use std::time::Duration;

use common::{base_env, echo, Leftovers, Serving, TempWorkspace};
use nexbot_control::{paths, Client, Health, Status, SubagentList};
use nexbot_tests::remote::RemoteHost;
use nexbot_tests::scripted_llm::{is_main, last_user, tool_results, ScriptedLlm, Step};
use nexbot_tests::telegram::TelegramFixture;
use serde_json::json;

const LIMIT: Duration = Duration::from_secs(120);
const OWNER: i64 = 7301;
/// The provider key, planted: the relay that adds it runs on the daemon's machine, so no form
/// of it may ever be on the remote host.
const KEY: &str = "sk-PLANTED-remote-7c1e55d0b9a24f6e";

/// Delegates on "delegate N"; the sub-agent answers from the remote pool.
fn responder(body: &serde_json::Value) -> Step {
    if !is_main(body) {
        return Step::text("SUB-OK from the remote pool");
    }
    match (tool_results(body), last_user(body).starts_with("delegate")) {
        (0, true) => Step::tool_call("delegate_to_sub_agent", json!({"task": "say ok"})),
        (_, true) => Step::text(&format!("turn done: {}", last_user(body))),
        _ => echo(body),
    }
}

/// Says `text` in the owner's chat and waits for the turn's end.
async fn delegate(tg: &TelegramFixture, text: &str) {
    tg.user_says(OWNER, OWNER, text).await;
    let done = format!("turn done: {text}");
    tg.wait_bot_messages(OWNER, |m| m.iter().any(|m| m.text == done), LIMIT).await;
}

/// The sub-agent's requests the model got (each came through the node and the relay).
fn sub_agent_calls(llm: &ScriptedLlm) -> usize {
    llm.chat_requests().iter().filter(|r| !is_main(&r.body)).count()
}

#[tokio::test]
async fn the_daemon_runs_its_pool_on_a_remote_engine_through_its_egress_node() {
    let Some(local) = nexbot_tests::docker_or_skip("host_remote").await else { return };
    let mut remote = RemoteHost::start();
    let llm = ScriptedLlm::start(vec![]).await;
    llm.set_responder(responder);
    let ws = TempWorkspace::init("remote");
    let config = std::fs::read_to_string(ws.config()).unwrap();
    std::fs::write(ws.config(), format!("{config}\n{}", common::MCP_EVERYTHING_SHARED)).unwrap();
    let names = Leftovers::new("remote");
    let tg = TelegramFixture::start().await;
    let mut env = base_env(&llm.base_url());
    env.extend(names.env());
    common::telegram_env(&mut env, &tg, OWNER);
    env.retain(|(name, _)| name != "NEXBOT_LLM_API_KEY");
    env.push(("NEXBOT_LLM_API_KEY".to_owned(), KEY.to_owned()));
    env.extend(remote.daemon_env());
    let skills = ws.dir.join("skills");
    crate::host_skills::skill(&skills, "alpha", "Alpha things", "# Alpha\nAlpha steps here.");
    env.push(("NEXBOT_SKILLS__DIR".to_owned(), skills.display().to_string()));
    // `doctor` reaches the engine over TLS, names it, and says how the pool there gets out.
    let doctor = common::nexbot(&["doctor"], &ws.config(), &env).output().await.unwrap();
    let said = common::text(&doctor.stdout);
    let docker_line = said.lines().find(|l| l.contains("docker:")).unwrap_or_default();
    assert!(docker_line.contains(&remote.server_fingerprint), "{said}");
    assert!(!said.contains("engine disk"), "a remote engine's disk is not read here: {said}");
    assert!(said.contains("is not on the remote engine yet"), "{said}");
    assert!(said.contains("egress node the daemon starts beside it"), "{said}");

    images_pushed(&ws, &env, &remote).await;
    // One image taken away again: the start copies it back.
    remote.docker(&["rmi", "-f", "nexbot-host:dev"]).expect("the node's image removed");

    let serving = Serving::start(&ws.config(), &env, LIMIT).await;
    serving.wait_log("the control API is on", LIMIT).await;
    let api = Client::new(ws.dir.join("nexbot.sock"));
    let start = std::time::Instant::now();
    let ps = loop {
        let list: SubagentList = api.get(paths::SUBAGENTS).await.unwrap();
        if list.subagents.iter().any(|s| s.state == "idle") {
            break list;
        }
        assert!(start.elapsed() < LIMIT, "no idle container: {list:?}\n{}", serving.log());
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let log = serving.log();
    assert!(log.contains("image copied to the remote engine image=nexbot-host:dev"), "{log}");
    assert!(log.contains("the remote engine has the image image=nexbot-subagent:dev"), "{log}");
    assert!(log.contains("egress node started"), "{log}");
    // Where the engine is, and whom the daemon reached there.
    let at = ps.engine_at.clone().expect("ps names the engine");
    assert!(at.starts_with(&remote.url()) && at.contains(&remote.server_fingerprint), "{at}");
    let health: Health = api.get(paths::HEALTH).await.unwrap();
    assert!(health.engine_at.as_deref().is_some_and(|a| a.contains(&remote.server_fingerprint)));
    assert!(!health.degraded.iter().any(|d| d.contains("egress node")), "{health:?}");
    let status: Status = api.get(paths::STATUS).await.unwrap();
    assert!(status.pool.and_then(|p| p.engine_at).is_some_and(|a| a.contains(&remote.url())));
    // The pool's container is there, and nothing of the pool is here.
    let id = ps.subagents[0].container.clone().expect("a container");
    let there = remote.docker(&["ps", "-q"]).unwrap_or_default();
    assert!(there.contains(&id), "{id} not on the remote engine: {there}");
    let label = format!("nexbot.pool={}", names.pool);
    let here = common::docker_cli(&["ps", "-aq", "--filter", &format!("label={label}")]);
    assert!(here.is_empty(), "the pool made containers here: {here}");
    let _ = local;
    skills_copied_there(&remote, &id, &skills, &serving).await;

    let node = format!("{}-egress-node", names.pool);
    node_is_hardened(&remote, &node);

    // A delegated task runs there and reaches the model only through the node; the model
    // gets the key (added by the relay here), the remote host never does.
    delegate(&tg, "delegate 1").await;
    assert!(sub_agent_calls(&llm) >= 1, "the sub-agent reached the model through the node");
    let keyed = llm
        .chat_requests()
        .iter()
        .filter(|r| !is_main(&r.body))
        .all(|r| r.header("authorization").is_some_and(|a| a.ends_with(KEY)));
    assert!(keyed, "the relay called the model with the key");
    let served = pool_cannot_reach_the_remote_host(&remote, &api, &names.network).await;

    // The node killed: started again, and tasks get out again.
    remote.docker(&["rm", "-f", &node]).expect("the node removed");
    let start = std::time::Instant::now();
    loop {
        let back = remote.docker(&["ps", "-q", "--filter", &format!("name={node}")]);
        let health: Health = api.get(paths::HEALTH).await.unwrap();
        let up = !health.degraded.iter().any(|d| d.contains("egress node"));
        if back.is_some_and(|b| !b.is_empty()) && up {
            break;
        }
        assert!(start.elapsed() < LIMIT, "the node did not come back: {health:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let before = sub_agent_calls(&llm);
    delegate(&tg, "delegate 2").await;
    assert!(sub_agent_calls(&llm) > before, "tasks get out again through the new node");
    engine_restarted(&mut remote, &api, &tg, &llm).await;

    // The operator's commands reach the containers there: logs, then a kill (replaced there).
    let ps: SubagentList = api.get(paths::SUBAGENTS).await.unwrap();
    let id = ps.subagents[0].container.clone().expect("a container");
    let logs = common::ctl(&ws, &["subagents", "logs", &ps.subagents[0].id, "-n", "5"], "").await;
    assert_eq!(logs.code, Some(0), "{logs:?}");
    assert!(!logs.stdout.trim().is_empty(), "the subagent's log lines: {logs:?}");
    let kill = common::ctl(&ws, &["subagents", "kill", &ps.subagents[0].id], "").await;
    assert_eq!(kill.code, Some(0), "{kill:?}");
    let start = std::time::Instant::now();
    loop {
        let list: SubagentList = api.get(paths::SUBAGENTS).await.unwrap();
        let now = list.subagents[0].container.clone().filter(|_| list.subagents[0].state == "idle");
        if let Some(new) = now.filter(|c| *c != id) {
            let there = remote.docker(&["ps", "-q"]).unwrap_or_default();
            assert!(there.contains(&new) && !there.contains(&id), "{there}");
            break;
        }
        assert!(start.elapsed() < LIMIT, "not replaced: {list:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The MCP server's container runs there too, its tools listed.
    let start = std::time::Instant::now();
    let server = loop {
        let ran = common::ctl(&ws, &["mcp", "ls", "--json"], "").await;
        let list: nexbot_control::McpServerList = serde_json::from_str(&ran.stdout).unwrap();
        let running = list.servers[0].instances.iter().find(|i| i.state == "running");
        let container = running.and_then(|i| i.container.clone());
        if let (Some(container), true) = (container, list.servers[0].tools > 0) {
            break container;
        }
        assert!(start.elapsed() < LIMIT, "no running MCP server: {list:?}\n{}", serving.log());
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let names_there = remote.docker(&["ps", "--format", "{{.Names}}"]).unwrap_or_default();
    assert!(names_there.contains(&server), "{server} not there: {names_there}");

    hunt_the_key(&remote);

    let log = serving.stop(LIMIT).await;
    assert!(!log.contains("panicked"), "{log}");
    remote.docker(&["rm", "-f", &served]);
    let left = remote.docker(&["ps", "-aq"]).unwrap_or_default();
    assert!(left.is_empty(), "containers left on the remote engine: {left}");
    let networks =
        remote.docker(&["network", "ls", "-q", "--filter", &format!("name={}", names.network)]);
    assert_eq!(networks.as_deref(), Some(""), "the pool network stays on the remote engine");
    let volumes = remote.docker(&["volume", "ls", "-q"]).unwrap_or_default();
    assert!(volumes.trim().is_empty(), "volumes left on the remote engine: {volumes}");
}

/// The skills folder reaches container `id` on the remote engine as a read-only copy, and
/// the copy follows the folder: a skill added appears there, a skill removed goes.
async fn skills_copied_there(
    remote: &RemoteHost,
    id: &str,
    skills: &std::path::Path,
    serving: &Serving,
) {
    let read = |name: &str| {
        remote.docker(&["exec", id, "cat", &format!("/workspace/skills/{name}/SKILL.md")])
    };
    let alpha = read("alpha").unwrap_or_default();
    let listed = remote.docker(&["exec", id, "ls", "-lR", "/workspace/skills"]);
    let log = serving.log();
    assert!(alpha.contains("Alpha steps here."), "the skill there: {alpha:?} in {listed:?}\n{log}");
    let planted = remote.docker(&["exec", id, "touch", "/workspace/skills/planted"]);
    assert!(planted.is_none(), "a task cannot write the skills' copy");
    crate::host_skills::skill(skills, "beta", "Beta things", "# Beta\nBeta steps here.");
    std::fs::remove_dir_all(skills.join("alpha")).unwrap();
    let start = std::time::Instant::now();
    while !(read("beta").is_some_and(|b| b.contains("Beta steps")) && read("alpha").is_none()) {
        assert!(start.elapsed() < LIMIT, "the copy did not follow the folder");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// `egress.mode = "ask"` with the pool on the remote engine: a task's fetch there is held
/// (nothing reaches the server) while the owner is asked in the emulated Telegram; a Deny
/// keeps it in, an Allow once lets exactly that request out, through the node.
#[tokio::test]
async fn a_remote_tasks_fetch_is_held_until_the_owner_answers_in_telegram() {
    use crate::host_approvals::{ask_env, fetching_model, press, results_when, wait_question};
    use crate::telegram::{has_text, OWNER as ASKED};
    let Some(_) = nexbot_tests::docker_or_skip("host_remote_ask").await else { return };
    let remote = RemoteHost::start();
    let tg = TelegramFixture::start().await;
    let host = crate::host_approvals::host();
    let (denied, denied_seen) = crate::egress_support::http_server_at(host).await;
    let (allowed, allowed_seen) = crate::egress_support::http_server_at(host).await;
    let llm = ScriptedLlm::start(vec![]).await;
    let urls = [denied, allowed].map(|s| format!("http://{s}/hello")).to_vec();
    let results = fetching_model(&llm, "collect two pages", urls);
    let ws = TempWorkspace::init("remote-ask");
    let names = Leftovers::new("remask");
    let mut env = ask_env(&llm, &tg, &names, &[denied, allowed]);
    env.extend(remote.daemon_env());
    let serving = Serving::start(&ws.config(), &env, LIMIT).await;
    serving.wait_log("the Telegram channel is on", LIMIT).await;
    tg.user_says(ASKED, ASKED, "collect them").await;

    let first = wait_question(&tg, ASKED, 0).await;
    assert!(first.text.contains(&denied.to_string()), "{}", first.text);
    assert!(denied_seen.lock().unwrap().is_empty(), "held: nothing reached the server yet");
    tg.user_clicks(ASKED, ASKED, first.message_id, &press(&first, "Deny")).await;
    let second = wait_question(&tg, ASKED, 1).await;
    assert!(second.text.contains(&allowed.to_string()), "{}", second.text);
    assert!(allowed_seen.lock().unwrap().is_empty(), "held: nothing reached the server yet");
    tg.user_clicks(ASKED, ASKED, second.message_id, &press(&second, "Allow once")).await;

    let got = results_when(&results, 2).await;
    let said: Vec<String> = got.iter().map(serde_json::Value::to_string).collect();
    assert!(said[0].contains("denied by the user"), "the task reads why: {}", said[0]);
    assert!(said[1].contains("hello from the allowed server"), "{}", said[1]);
    assert!(denied_seen.lock().unwrap().is_empty(), "the denied request never left");
    assert_eq!(allowed_seen.lock().unwrap().len(), 1, "exactly the allowed request left");
    tg.wait_bot_messages(ASKED, |m| has_text(m, "done with the task"), LIMIT).await;
    // It ran there, and got out through the node.
    let log = serving.log();
    assert!(log.contains("egress node started"), "{log}");
    let label = format!("label=nexbot.pool={}", names.pool);
    let there = remote.docker(&["ps", "-q", "--filter", &label]).unwrap_or_default();
    assert!(!there.trim().is_empty(), "the pool is on the remote engine");
    let here = common::docker_cli(&["ps", "-aq", "--filter", &label]);
    assert!(here.is_empty(), "the pool made containers here: {here}");
    let log = serving.stop(LIMIT).await;
    assert!(!log.contains("panicked"), "{log}");
}

/// The node: on that machine's network, root with NET_ADMIN and NET_RAW only, read-only.
fn node_is_hardened(remote: &RemoteHost, node: &str) {
    let inspect = remote.docker(&["inspect", node]).expect("the egress node runs there");
    let inspected: serde_json::Value = serde_json::from_str(&inspect).unwrap();
    let host = &inspected[0]["HostConfig"];
    assert_eq!(host["NetworkMode"], "host", "{host}");
    assert_eq!(host["CapDrop"], json!(["ALL"]), "{host}");
    assert_eq!(host["CapAdd"], json!(["NET_ADMIN", "NET_RAW"]), "{host}");
    assert_eq!(host["ReadonlyRootfs"], true, "{host}");
    assert!(!inspect.contains("BEGIN") && !inspect.contains("KEY"), "no key in the node's spec");
}

/// The node's firewall: a service on the remote host (started here; its container returned)
/// is not reachable from the pool there, and is on that host itself (the positive control).
async fn pool_cannot_reach_the_remote_host(
    remote: &RemoteHost,
    api: &Client,
    network: &str,
) -> String {
    let image = "nexbot-subagent:dev";
    let web = ["run", "-d", "--network", "host", "--entrypoint", "busybox", image];
    let web = [&web[..], &["httpd", "-f", "-p", "9917"]].concat();
    let served = remote.docker(&web).expect("a web server on the remote host");
    let gateway = remote
        .docker(&["network", "inspect", network, "-f", "{{(index .IPAM.Config 0).Gateway}}"])
        .expect("the pool network's gateway");
    // (busybox's wget crashes in this static image; nc speaks the request by hand.)
    let probe = |container: &str, ip: &str| {
        let script =
            format!("printf 'GET / HTTP/1.0\\r\\n\\r\\n' | busybox nc -w 3 {ip} 9917 2>&1; true");
        remote.docker(&["exec", container, "/bin/sh", "-c", &script]).unwrap_or_default()
    };
    let control = probe(&served, "127.0.0.1");
    assert!(control.contains("HTTP/1"), "the server answers on its own host: {control}");
    let ps: SubagentList = api.get(paths::SUBAGENTS).await.unwrap();
    let id = ps.subagents[0].container.clone().expect("a container");
    let direct = probe(&id, &gateway);
    assert!(!direct.contains("HTTP/1"), "the pool reached a service of the remote host: {direct}");
    served
}

/// The hunt: no form of the key in any container's spec there, or on the remote disk.
fn hunt_the_key(remote: &RemoteHost) {
    use base64::Engine as _;
    let all = remote.docker(&["ps", "-aq"]).unwrap_or_default();
    for id in all.split_whitespace() {
        let inspect = remote.docker(&["inspect", id]).unwrap_or_default();
        assert!(!inspect.contains(KEY) && !inspect.contains("PLANTED"), "{id}'s spec");
    }
    // The positive control: the containers' environment is on that disk, and found.
    assert!(!remote.files_containing(b"HTTP_PROXY=http://").is_empty(), "the hunt reads nothing");
    let hex: String = KEY.bytes().map(|b| format!("{b:02x}")).collect();
    let base64 = base64::engine::general_purpose::STANDARD.encode(KEY);
    for form in [KEY.to_owned(), hex, base64] {
        let found = remote.files_containing(form.as_bytes());
        assert!(found.is_empty(), "the key ({form}) on the remote host's disk: {found:?}");
    }
}

/// `nexbot images push`: every image copied by id, then nothing to copy; `--file` loads an
/// archive (the subagent's, removed there first) as it is.
async fn images_pushed(ws: &TempWorkspace, env: &[(String, String)], remote: &RemoteHost) {
    let push = |args: &'static [&'static str]| {
        let mut all = vec!["images", "push"];
        all.extend_from_slice(args);
        common::nexbot(&all, &ws.config(), env).output()
    };
    let first = push(&[]).await.unwrap();
    let said = common::text(&first.stdout);
    assert!(first.status.success(), "{said}{}", common::text(&first.stderr));
    assert!(said.contains(&remote.server_fingerprint), "the engine named: {said}");
    for image in ["nexbot-subagent:dev", "nexbot-mcp:dev", "nexbot-host:dev"] {
        assert!(said.contains(&format!("{image}: copied")), "{image}: {said}");
        assert!(said.contains(&format!("{image}: 100 %")), "progress of {image}: {said}");
    }
    let again = common::text(&push(&[]).await.unwrap().stdout);
    assert_eq!(again.matches(": already there (sha256:").count(), 3, "{again}");
    let archive = ws.dir.join("subagent.tar");
    let archive_arg = archive.display().to_string();
    let saved = common::docker_cli(&["save", "nexbot-subagent:dev", "-o", &archive_arg]);
    assert!(archive.exists(), "docker save: {saved}");
    remote.docker(&["rmi", "-f", "nexbot-subagent:dev"]).expect("removed there");
    let args = ["images", "push", "--file", &archive_arg];
    let loaded = common::nexbot(&args, &ws.config(), env).output().await.unwrap();
    let said = common::text(&loaded.stdout);
    assert!(loaded.status.success() && said.contains("loaded nexbot-subagent:dev"), "{said}");
    let id = |inspect: Option<String>| inspect.unwrap_or_default();
    let here =
        id(Some(common::docker_cli(&["image", "inspect", "-f", "{{.Id}}", "nexbot-subagent:dev"])));
    let there = id(remote.docker(&["image", "inspect", "-f", "{{.Id}}", "nexbot-subagent:dev"]));
    assert!(!here.is_empty() && here == there, "{here} / {there}");
    let _ = std::fs::remove_file(&archive);
}

/// The remote engine restarted (its containers stopped with it): the pool refills and the
/// node comes back by themselves, and the next task gets out again.
async fn engine_restarted(
    remote: &mut RemoteHost,
    api: &Client,
    tg: &TelegramFixture,
    llm: &ScriptedLlm,
) {
    remote.stop();
    remote.restart();
    let start = std::time::Instant::now();
    loop {
        let health: Health = api.get(paths::HEALTH).await.unwrap();
        let list: SubagentList = api.get(paths::SUBAGENTS).await.unwrap();
        let idle = list.subagents.iter().all(|s| s.state == "idle");
        if idle
            && health.degraded.iter().all(|d| !d.contains("egress node") && !d.contains("engine"))
        {
            break;
        }
        assert!(
            start.elapsed() < LIMIT,
            "not back after the engine's restart: {health:?} {list:?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let before = sub_agent_calls(llm);
    delegate(tg, "delegate 3").await;
    assert!(sub_agent_calls(llm) > before, "tasks get out after the engine's restart");
}
