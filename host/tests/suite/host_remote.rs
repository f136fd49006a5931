//! `nexbot serve` with its sandboxes on an engine on "another machine"
//! ([`nexbot_tests::remote::RemoteHost`], over mutual TLS): the image copied there by id,
//! the pool made there and nowhere here, the engine's address, certificate and round trip in
//! `health`, `subagents ps` and `/v1/status`, the missing egress a degraded part, and nothing
//! left behind on either engine after a stop.

use crate::common;

use std::time::Duration;

use common::{base_env, echo, Leftovers, Serving, TempWorkspace};
use nexbot_control::{paths, Client, Health, Status, SubagentList};
use nexbot_tests::remote::RemoteHost;
use nexbot_tests::scripted_llm::ScriptedLlm;
use nexbot_tests::telegram::TelegramFixture;

const LIMIT: Duration = Duration::from_secs(120);
const OWNER: i64 = 7301;

/// The reference MCP server, one container for every chat (no room: the rooms stay here).
const EVERYTHING: &str = r#"
[[mcp.servers]]
name = "everything"
command = "mcp-server-everything"
args = ["stdio"]
scope = "shared"
"#;

#[tokio::test]
async fn the_daemon_runs_its_pool_on_a_remote_engine_and_says_where() {
    let Some(local) = nexbot_tests::docker_or_skip("host_remote").await else { return };
    let remote = RemoteHost::start();
    let llm = ScriptedLlm::start(vec![]).await;
    llm.set_responder(echo);
    let ws = TempWorkspace::init("remote");
    let config = std::fs::read_to_string(ws.config()).unwrap();
    std::fs::write(ws.config(), format!("{config}\n{EVERYTHING}")).unwrap();
    let names = Leftovers::new("remote");
    let tg = TelegramFixture::start().await;
    let mut env = base_env(&llm.base_url());
    env.extend(names.env());
    common::telegram_env(&mut env, &tg, OWNER);
    for (name, value) in [
        ("NEXBOT_SANDBOX__ENGINE", remote.url()),
        ("NEXBOT_SANDBOX__TLS_CA", remote.client.ca.display().to_string()),
        ("NEXBOT_SANDBOX__TLS_CERT", remote.client.cert.display().to_string()),
        ("NEXBOT_SANDBOX__TLS_KEY", remote.client.key.display().to_string()),
    ] {
        env.push((name.to_owned(), value));
    }
    // `doctor` reaches the engine over TLS and says the pool there has no way out.
    let doctor = common::nexbot(&["doctor"], &ws.config(), &env).output().await.unwrap();
    let said = common::text(&doctor.stdout);
    let docker_line = said.lines().find(|l| l.contains("docker:")).unwrap_or_default();
    assert!(docker_line.contains(&remote.server_fingerprint), "{said}");
    assert!(!said.contains("engine disk"), "a remote engine's disk is not read here: {said}");
    assert!(said.contains("is not on the remote engine yet"), "{said}");
    assert!(said.contains("no egress node runs yet"), "{said}");
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
    assert!(log.contains("image copied to the remote engine"), "{log}");
    // Where the engine is, and whom the daemon reached there.
    let at = ps.engine_at.clone().expect("ps names the engine");
    assert!(at.starts_with(&remote.url()) && at.contains(&remote.server_fingerprint), "{at}");
    let health: Health = api.get(paths::HEALTH).await.unwrap();
    assert!(health.engine_at.as_deref().is_some_and(|a| a.contains(&remote.server_fingerprint)));
    assert!(
        health.degraded.iter().any(|d| d.contains("no egress node runs yet")),
        "the missing way out is said: {health:?}"
    );
    // No way out there, so no task could reach the model: delegation is off, said why, and
    // the model is not offered the tool (nor `use_cli`, which runs there too).
    assert!(
        health.degraded.iter().any(|d| d.starts_with(
            "delegation to subagents is off: the pool \
             runs on a remote engine"
        )),
        "{health:?}"
    );
    tg.user_says(OWNER, OWNER, "hello there").await;
    tg.wait_bot_messages(OWNER, |m| m.iter().any(|m| m.text.contains("hello there")), LIMIT).await;
    let offered: Vec<String> = llm
        .chat_requests()
        .iter()
        .flat_map(|r| r.body["tools"].as_array().cloned().unwrap_or_default())
        .filter_map(|t| t["function"]["name"].as_str().map(str::to_owned))
        .collect();
    assert!(!offered.is_empty(), "the model was offered tools");
    for tool in ["delegate_to_sub_agent", "use_cli"] {
        assert!(!offered.iter().any(|t| t == tool), "{tool} offered: {offered:?}");
    }
    let status: Status = api.get(paths::STATUS).await.unwrap();
    assert!(status.pool.and_then(|p| p.engine_at).is_some_and(|a| a.contains(&remote.url())));
    // The container is there, and nothing of the pool is here.
    let id = ps.subagents[0].container.clone().expect("a container");
    let there = remote.docker(&["ps", "-q"]).unwrap_or_default();
    assert!(there.contains(&id), "{id} not on the remote engine: {there}");
    let label = format!("nexbot.pool={}", names.pool);
    let here = common::docker_cli(&["ps", "-aq", "--filter", &format!("label={label}")]);
    assert!(here.is_empty(), "the pool made containers here: {here}");
    let _ = local;
    // The operator's commands reach the containers there: logs, then a kill (replaced there).
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
        if let (Some(container), true) =
            (running.and_then(|i| i.container.clone()), list.servers[0].tools > 0)
        {
            break container;
        }
        assert!(start.elapsed() < LIMIT, "no running MCP server: {list:?}\n{}", serving.log());
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let names_there = remote.docker(&["ps", "--format", "{{.Names}}"]).unwrap_or_default();
    assert!(names_there.contains(&server), "{server} not there: {names_there}");

    let log = serving.stop(LIMIT).await;
    assert!(!log.contains("panicked"), "{log}");
    let left = remote.docker(&["ps", "-aq"]).unwrap_or_default();
    assert!(left.is_empty(), "containers left on the remote engine: {left}");
    let networks =
        remote.docker(&["network", "ls", "-q", "--filter", &format!("name={}", names.network)]);
    assert_eq!(networks.as_deref(), Some(""), "the pool network stays on the remote engine");
}
