//! Egress from inside a real pool container, through the product's own configuration: the
//! pool (nexbot-docker, image `nexbot-subagent:dev`) runs on the internal network with the
//! environment the egress listener hands out, attribution comes from the pool, and the
//! firewall is on. A real task (agent loop, LLM through the relay, tools through the proxy),
//! then probes by `docker exec`: allowed and denied destinations, bypasses, the relay's tokens
//! and budget, and a hunt for the provider key in everything a container or the engine shows.

use crate::egress_support;

use std::sync::Arc;

use bollard::query_parameters::LogsOptionsBuilder;
use egress_support::docker::{
    exec, host_address_off_network, internal_network, Cleanup, LABEL, LABEL_VALUE, NETWORK,
};
use egress_support::{echo_server, http_server_at, launch_on, wait_audit};
use futures_util::StreamExt;
use nexbot_docker::{Pool, PoolConfig};
use nexbot_host::egress::{Attribution, Cidr, EgressConfig, InternalAllow, LateAttribution};
use nexbot_host::sandbox::{egress_network, PoolAttribution};
use nexbot_tests::docker_or_skip;
use nexbot_tests::scripted_llm::{ScriptedLlm, Step};
use nexbot_tests::testcontainers::runners::AsyncRunner;
use nexbot_tests::testcontainers::{ContainerAsync, GenericImage, ImageExt};
use secrecy::ExposeSecret;
use serde_json::Value;

const IMAGE: &str = "nexbot-subagent:dev";
const KEY: &str = "sk-nxe-PLANTED-pool-key-8e2d41";

fn status(raw: &str) -> u16 {
    raw.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0)
}

/// Sends `request` (printf escapes) to the proxy named by the container's own `$HTTP_PROXY`.
fn via_proxy(request: &str) -> String {
    format!("P=${{HTTP_PROXY#http://}}; printf '{request}' | busybox nc -w 10 ${{P%:*}} ${{P##*:}}")
}

/// One chat call to the relay (`llm_base_url` minus `/v1`) with `token`. HTTP/1.0 keeps the
/// answer unchunked.
fn relay_call(relay: std::net::SocketAddr, token: &str) -> String {
    let head = format!(
        "POST /v1/chat/completions HTTP/1.0\\r\\nHost: {relay}\\r\\nAuthorization: Bearer {token}\\r\\n\
         Content-Type: application/json\\r\\nContent-Length: %s\\r\\n\\r\\n%s"
    );
    // max_tokens 1: each call reserves its worst case, the body / 3 + max_tokens (16 here).
    let body = r#"B='{"model":"m","messages":[],"max_tokens":1}'"#;
    format!(
        r#"{body}; printf '{head}' "${{#B}}" "$B" | busybox nc -w 10 {} {}"#,
        relay.ip(),
        relay.port()
    )
}

#[tokio::test]
async fn from_inside_a_pool_container_only_the_proxy_and_relay_lead_out() {
    let Some(docker) = docker_or_skip("egress_pool").await else { return };
    if docker.inspect_image(IMAGE).await.is_err() {
        panic!(
            "egress_pool: image {IMAGE} is missing; build it with `make image` (`make test` does)"
        );
    }
    let mut cleanup = Cleanup::default();
    // Allowed destination on the host's outside address: "127.0.0.1" inside a container is
    // the container itself (and in NO_PROXY), so a host-loopback server would not do.
    let (allowed, _) = http_server_at(host_address_off_network()).await;
    let (bystander, bystander_hits) = echo_server().await;
    let (outside, outside_seen) = http_server_at(host_address_off_network()).await;
    let llm = ScriptedLlm::start(vec![]).await;

    // The product's wiring: network first, then the listener on its gateway, then the pool
    // with the listener's environment, then attribution bound to the pool.
    let network = internal_network(&docker).await;
    let mut config = EgressConfig::default();
    config.proxy.allow_internal = vec![InternalAllow {
        cidr: Cidr::try_from(allowed.ip().to_string()).unwrap(),
        ports: vec![allowed.port()],
    }];
    config.relay.provider_base_url = Some(llm.base_url());
    let late = Arc::new(LateAttribution::default());
    let (egress, _dir) =
        launch_on(config, &egress_network(&network), late.clone(), Some(KEY)).await;
    let proxy = egress.local_addr();
    let pool_config = PoolConfig {
        name: format!("nxe-pool-{}", std::process::id()),
        network: NETWORK.into(),
        size: 1,
        env: egress.container_env(),
        ..PoolConfig::default()
    };
    let pool = Arc::new(Pool::start(docker.clone(), pool_config).await.expect("pool starts"));
    let as_attribution: Arc<dyn Attribution> = Arc::new(PoolAttribution(pool.clone()));
    assert!(late.bind(&as_attribution));
    let id = pool.snapshot()[0].container_id.clone().expect("a container");
    cleanup.containers.push(id.clone()); // removed even if an assertion fails first

    let finished =
        a_task_reaches_only_what_the_policy_allows(&pool, &egress, &llm, allowed, bystander.port())
            .await;
    llm.set_responder(|_| Step::text("relayed answer"));

    // Allowed destination through the proxy; the audit line names the pool's container.
    let get = format!("GET http://{allowed}/hello HTTP/1.1\\r\\nHost: {allowed}\\r\\nConnection: close\\r\\n\\r\\n");
    let (code, out) = exec(&docker, &id, &via_proxy(&get)).await;
    assert!(
        code == 0 && status(&out) == 200 && out.ends_with("hello from the allowed server"),
        "{out}"
    );

    // Denied destinations.
    let port = bystander.port();
    let denied = [
        ("169.254.169.254".to_owned(), 80, "cloud_metadata"),
        ("192.168.10.10".to_owned(), 80, "private"),
        ("127.0.0.1".to_owned(), port, "loopback"),
        ("localhost".to_owned(), port, "loopback"),
        ("[::1]".to_owned(), port, "loopback"),
        ("[::ffff:127.0.0.1]".to_owned(), port, "loopback"),
    ];
    for (host, port, _) in &denied {
        let connect = format!("CONNECT {host}:{port} HTTP/1.1\\r\\nHost: {host}:{port}\\r\\nConnection: close\\r\\n\\r\\n");
        let (_, out) = exec(&docker, &id, &via_proxy(&connect)).await;
        assert_eq!(status(&out), 403, "CONNECT {host}:{port}: {out}");
    }
    assert_eq!(bystander_hits.load(std::sync::atomic::Ordering::SeqCst), 0);

    // Bypasses: the internet, the host's other address, another port on the gateway.
    let (anywhere, anywhere_seen) = http_server_at("0.0.0.0".parse().unwrap()).await;
    for (ip, port) in [
        ("1.1.1.1".to_owned(), 80),
        (outside.ip().to_string(), outside.port()),
        (network.gateway.to_string(), anywhere.port()),
    ] {
        let (code, out) =
            exec(&docker, &id, &format!("busybox nc -w 3 {ip} {port} </dev/null")).await;
        assert_ne!(code, 0, "direct {ip}:{port} must fail: {out}");
    }
    assert!(outside_seen.lock().unwrap().is_empty() && anywhere_seen.lock().unwrap().is_empty());

    // A container that is not in the pool (default bridge) is not served by the proxy.
    let peer = start_peer().await;
    let (_, out) = exec(&docker, peer.id(), &format!(
        "printf 'CONNECT {allowed} HTTP/1.1\\r\\nHost: x\\r\\nConnection: close\\r\\n\\r\\n' | busybox nc -w 10 {} {}",
        proxy.ip(), proxy.port()
    ))
    .await;
    assert_ne!(status(&out), 200, "a non-pool container must not tunnel: {out}");

    // The relay with per-task tokens.
    let relayed_before = llm.chat_requests().len();
    let tokens = egress.tokens();
    let token = tokens.issue("pool-task-1", 40).unwrap();
    let (_, out) = exec(&docker, &id, &relay_call(proxy, token.expose_secret())).await;
    assert!(status(&out) == 200 && out.contains("relayed answer"), "{out}");
    let (_, out) = exec(&docker, &id, &relay_call(proxy, token.expose_secret())).await;
    assert_eq!(status(&out), 200, "{out}");
    let (_, out) = exec(&docker, &id, &relay_call(proxy, token.expose_secret())).await;
    assert!(status(&out) == 403 && out.contains("insufficient_quota"), "over budget: {out}");
    let (_, out) = exec(&docker, &id, &relay_call(proxy, "nxr_not-a-real-token")).await;
    assert_eq!(status(&out), 401, "{out}");
    tokens.revoke("pool-task-1");
    let (_, out) = exec(&docker, &id, &relay_call(proxy, token.expose_secret())).await;
    assert_eq!(status(&out), 401, "finished task: {out}");
    let (_, out) = exec(&docker, &id, &relay_call(proxy, finished.expose_secret())).await;
    assert_eq!(status(&out), 401, "the real task's token after it ended: {out}");
    assert_eq!(llm.chat_requests().len(), relayed_before + 2, "refused calls never reached it");

    // The audit trail, attributed through the pool.
    let path = egress.audit_path().to_owned();
    // 3 calls of the real task, then 6 by exec (2 served, budget, wrong, 2 finished tokens).
    let lines = wait_audit(&path, |l| l.iter().filter(|x| x["kind"] == "relay").count() >= 9).await;
    // The exec probes ran while no task was running: attributed to the container only.
    let proxied: Vec<&Value> = lines
        .iter()
        .filter(|l| l["kind"] != "relay" && l["container"] == id.as_str() && l["task_id"].is_null())
        .collect();
    assert_eq!(proxied.len(), 1 + denied.len(), "{lines:#?}");
    assert_eq!(proxied[0]["verdict"], "allowed");
    for (line, (host, _, reason)) in proxied[1..].iter().zip(&denied) {
        assert_eq!(line["verdict"], "denied");
        assert!(line["reason"].as_str().unwrap().starts_with(reason), "{host}: {line}");
    }
    let peer_line =
        lines.iter().find(|l| l["reason"].as_str().is_some_and(|r| r.starts_with("unattributed")));
    assert!(peer_line.is_some(), "the non-pool container was refused as unattributed: {lines:#?}");

    // The provider key is nowhere a container or the engine shows.
    let inspect =
        serde_json::to_string(&docker.inspect_container(&id, None).await.unwrap()).unwrap();
    assert!(!inspect.contains(KEY) && !inspect.contains("PLANTED"), "docker inspect");
    assert!(inspect.contains("HTTP_PROXY"), "the proxy environment is there");
    assert!(inspect.contains("HTTPS_PROXY="), "the container's environment, as started");
    // The running subagent's own environment and memory are closed even to a `docker exec` of
    // the container's user (the subagent is not dumpable): the key could not be read there
    // even if it were present.
    let (_, env) = exec(
        &docker,
        &id,
        "busybox tr '\\0' '\\n' < /proc/$(busybox pidof nexbot-subagent)/environ",
    )
    .await;
    assert!(env.contains("Permission denied") && !env.contains("PLANTED"), "{env}");
    let grep = "busybox grep -rl PLANT''ED /bin /etc /tmp /workspace /.dockerenv 2>/dev/null; echo scanned";
    let (_, files) = exec(&docker, &id, grep).await;
    assert_eq!(files.trim(), "scanned", "files holding the key: {files}");
    // Positive control: the same scan finds a marker planted in the scratch tmpfs.
    let control = "echo NXE''-CONTROL > /workspace/scratch/nxe-control; \
                   busybox grep -rl NXE''-CONTROL /bin /etc /tmp /workspace /.dockerenv 2>/dev/null";
    let (_, found) = exec(&docker, &id, control).await;
    assert_eq!(found.trim(), "/workspace/scratch/nxe-control", "the scan reads files");
    let mut logs = String::new();
    let mut stream =
        docker.logs(&id, Some(LogsOptionsBuilder::default().stdout(true).stderr(true).build()));
    while let Some(chunk) = stream.next().await {
        logs.push_str(&chunk.expect("log chunk").to_string());
    }
    logs.push_str(&pool.logs(&id).unwrap_or_default().join("\n"));
    assert!(!logs.contains("PLANTED"), "container stdout/stderr");

    drop(as_attribution);
    let pool = Arc::try_unwrap(pool).expect("only the test owns the pool");
    pool.shutdown().await.expect("pool shuts down");
    egress.shutdown(egress_support::WAIT).await;
    drop(cleanup);
}

/// A real task: the subagent's agent loop talks to the scripted LLM only through the relay
/// (with its per-task token), and the LLM has it fetch an allowed page and then probe
/// internal addresses (in disguises the subagent's own screens do not catch) through the
/// proxy. Every connection's audit line names the task.
async fn a_task_reaches_only_what_the_policy_allows(
    pool: &Pool,
    egress: &nexbot_host::egress::Egress,
    llm: &ScriptedLlm,
    allowed: std::net::SocketAddr,
    bystander_port: u16,
) -> secrecy::SecretString {
    let task_id = "nxe-task-1";
    let probes = [
        ("[::ffff:a9fe:a9fe]:80".to_owned(), "cloud_metadata"),
        ("2852039166:80".to_owned(), "cloud_metadata"),
        ("10.1.2.3:80".to_owned(), "private"),
        (format!("127.0.0.1:{bystander_port}"), "loopback"),
        (format!("localhost:{bystander_port}"), "loopback"),
        (format!("[::1]:{bystander_port}"), "loopback"),
        (format!("[::ffff:127.0.0.1]:{bystander_port}"), "loopback"),
    ];
    let targets: Vec<String> = probes.iter().map(|(t, _)| format!("'{t}'")).collect();
    let command = format!(
        "P=${{HTTP_PROXY#http://}}; for t in {}; do printf \"CONNECT $t HTTP/1.1\\r\\nHost: x\\r\\nConnection: close\\r\\n\\r\\n\" | nc -w 10 ${{P%:*}} ${{P##*:}} | head -n 1; done",
        targets.join(" ")
    );
    llm.push(Step::tool_call(
        "web_fetch",
        serde_json::json!({"url": format!("http://{allowed}/hello")}),
    ));
    llm.push(Step::tool_call("run_command", serde_json::json!({"command": command})));
    llm.push(Step::text("all done"));

    let token = egress.tokens().issue(task_id, 10_000).unwrap();
    let mut request = nexbot_protocol::Request::execute(task_id, "fetch the page, then probe");
    request.llm_base_url = Some(egress.relay_base_url());
    request.llm_model = Some("scripted".into());
    request.llm_token = Some(token.clone());
    request.timeout = Some(60);
    let answer = tokio::time::timeout(
        std::time::Duration::from_secs(120),
        pool.execute(request, tokio_util::sync::CancellationToken::new()),
    )
    .await
    .expect("answered in time")
    .expect("task ran");
    match &answer.body {
        nexbot_protocol::ResponseBody::Success { result, .. } => {
            assert!(result.contains("all done"), "{result}")
        }
        other => panic!("expected success, got {other:?}"),
    }
    // The pool's part at the end of a task: the token dies with it.
    assert_eq!(egress.tokens().revoke(task_id).map(|u| u.used), Some(45), "3 calls x 15 tokens");

    let chats = llm.chat_requests();
    assert_eq!(chats.len(), 3, "one LLM call per step, all through the relay");
    for chat in &chats {
        assert_eq!(chat.header("authorization"), Some(format!("Bearer {KEY}").as_str()));
    }
    assert!(
        chats[1].to_text().contains("hello from the allowed server"),
        "web_fetch result: {}",
        chats[1].to_text()
    );
    let probe_output = chats[2].to_text();
    assert_eq!(probe_output.matches("HTTP/1.1 403").count(), probes.len(), "{probe_output}");

    let lines = wait_audit(egress.audit_path(), |lines| {
        lines.iter().filter(|l| l["task_id"] == task_id).count() >= 3 + 1 + probes.len()
    })
    .await;
    let mine: Vec<&Value> = lines.iter().filter(|l| l["task_id"] == task_id).collect();
    let relayed: Vec<&&Value> = mine.iter().filter(|l| l["kind"] == "relay").collect();
    assert_eq!(relayed.len(), 3);
    assert!(relayed.iter().all(|l| l["verdict"] == "allowed" && l["tokens"] == 15));
    let proxied: Vec<&&Value> = mine.iter().filter(|l| l["kind"] != "relay").collect();
    assert_eq!(proxied[0]["kind"], "http");
    assert_eq!(proxied[0]["verdict"], "allowed");
    assert_eq!(proxied[0]["resolved"], allowed.ip().to_string());
    for (line, (target, reason)) in proxied[1..].iter().zip(&probes) {
        assert_eq!(line["verdict"], "denied", "{target}: {line}");
        assert!(line["reason"].as_str().unwrap().starts_with(reason), "{target}: {line}");
    }
    assert_eq!(proxied.len(), 1 + probes.len());
    token
}

/// A container from the same image on Docker's default bridge (not in the pool); it is
/// testcontainers', removed when the handle drops, however the test ends.
async fn start_peer() -> ContainerAsync<GenericImage> {
    let name = format!("nxe-peer-{}", std::process::id());
    nexbot_tests::local_image(IMAGE)
        .with_entrypoint("/bin/busybox")
        .with_cmd(["sleep", "600"])
        .with_label(LABEL, LABEL_VALUE)
        .with_network("bridge")
        .with_container_name(name)
        .start()
        .await
        .expect("start peer")
}
