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
    exec, host_address_off_network, internal_network, Cleanup, LABEL, LABEL_VALUE,
};
use egress_support::{echo_server, http_server_at, launch_on, wait_audit};
use futures_util::StreamExt;
use nexbot_docker::{Pool, PoolConfig};
use nexbot_host::egress::{Attribution, Cidr, EgressConfig, InternalAllow, LateAttribution};
use nexbot_host::sandbox::{egress_network, PoolAttribution};
use nexbot_tests::container::{ContainerSpec, OwnedContainer};
use nexbot_tests::docker_or_skip;
use nexbot_tests::scripted_llm::{ScriptedLlm, Step};
use secrecy::ExposeSecret;
use serde_json::Value;

/// The subagent image: `NEXBOT_TEST_IMAGE` when set (a branch's own build), else the dev one.
fn image() -> String {
    std::env::var("NEXBOT_TEST_IMAGE").unwrap_or_else(|_| "nexbot-subagent:dev".to_owned())
}
const KEY: &str = "sk-nxe-PLANTED-pool-key-8e2d41";

fn status(raw: &str) -> u16 {
    raw.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0)
}

/// Sends `request` (printf escapes) to the proxy named by the container's own `$HTTP_PROXY`.
fn via_proxy(request: &str) -> String {
    format!("P=${{HTTP_PROXY#http://}}; printf '{request}' | busybox nc -w 10 ${{P%:*}} ${{P##*:}}")
}

/// [`via_proxy`] presenting the egress credential `token`: its header goes in after the
/// request line, as a task's processes send it.
fn via_proxy_as(request: &str, token: &str) -> String {
    let auth = nexbot_tests::egress::proxy_authorization(token);
    let with_auth =
        request.replacen("\\r\\n", &format!("\\r\\nProxy-Authorization: {auth}\\r\\n"), 1);
    via_proxy(&with_auth)
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

// One end-to-end scenario on one expensive setup (containers, a daemon), its steps in
// order; split only by count it would not read better (test code only).
#[tokio::test]
#[allow(clippy::too_many_lines)]
async fn from_inside_a_pool_container_only_the_proxy_and_relay_lead_out() {
    let Some(docker) = docker_or_skip("egress_pool").await else { return };
    let image = image();
    if docker.inspect_image(&image).await.is_err() {
        panic!(
            "egress_pool: image {image} is missing; build it with `make image` (`make test` does)"
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
    let network = internal_network(&docker, "pool").await;
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
        network: network.name.clone(),
        size: 1,
        env: egress.container_env(),
        image: image.clone(),
        runtime: nexbot_tests::test_runtime(),
        ..PoolConfig::default()
    };
    let pool = Arc::new(Pool::start(docker.clone(), pool_config).await.expect("pool starts"));
    let as_attribution: Arc<dyn Attribution> = Arc::new(PoolAttribution(pool.clone()));
    assert!(late.bind(&as_attribution));
    let id = pool.snapshot()[0].container_id.clone().expect("a container");
    cleanup.containers.push(id.clone()); // removed even if an assertion fails first

    let (finished, first_credential) =
        a_task_reaches_only_what_the_policy_allows(&pool, &egress, &llm, allowed, bystander.port())
            .await;

    // Between tasks the container gets nothing out, whatever it asks and whatever credential
    // it shows (task 1's is dead): refused before anything is dialled, audited.
    let get = format!("GET http://{allowed}/hello HTTP/1.1\\r\\nHost: {allowed}\\r\\nConnection: close\\r\\n\\r\\n");
    let (code, out) = exec(&docker, &id, &via_proxy(&get)).await;
    assert!(code == 0 && status(&out) == 403 && out.contains("idle_container"), "{out}");

    // Denied destinations (refused as idle before the policy is asked).
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
    // Nor a name server of the host's: one on the gateway address hears no query (a lookup
    // carries its name out, so a sandbox resolves nothing itself; the proxy resolves, after
    // the decision).
    let std::net::IpAddr::V4(gateway) = network.gateway else { panic!("an IPv4 gateway") };
    let dns = nexbot_tests::dns::DnsRecorder::start(gateway, Default::default()).await;
    let lookup = format!("busybox timeout 10 busybox nslookup probe-leak.nexbot.test {gateway}");
    let (code, out) = exec(&docker, &id, &lookup).await;
    assert_ne!(code, 0, "a lookup at the gateway must fail: {out}");
    assert_eq!(dns.asked(), Vec::<String>::new(), "a query reached the host's name server");

    // A container that is not in the pool (default bridge) is not served by the proxy.
    let peer = start_peer(&docker).await;
    let (_, out) = exec(&docker, peer.id(), &format!(
        "printf 'CONNECT {allowed} HTTP/1.1\\r\\nHost: x\\r\\nConnection: close\\r\\n\\r\\n' | busybox nc -w 10 {} {}",
        proxy.ip(), proxy.port()
    ))
    .await;
    assert_ne!(status(&out), 200, "a non-pool container must not tunnel: {out}");

    // The relay with per-task tokens: a live token of a task this container does not run
    // (it runs none) is refused like the proxy's requests.
    let relayed_before = llm.chat_requests().len();
    let tokens = egress.tokens();
    let token = tokens.issue("pool-task-1", 40).unwrap();
    let (_, out) = exec(&docker, &id, &relay_call(proxy, token.expose_secret())).await;
    assert!(status(&out) == 403 && out.contains("idle_container"), "{out}");
    let (_, out) = exec(&docker, &id, &relay_call(proxy, "nxr_not-a-real-token")).await;
    assert_eq!(status(&out), 401, "{out}");
    tokens.revoke("pool-task-1");
    let (_, out) = exec(&docker, &id, &relay_call(proxy, token.expose_secret())).await;
    assert_eq!(status(&out), 401, "finished task: {out}");
    let (_, out) = exec(&docker, &id, &relay_call(proxy, finished.expose_secret())).await;
    assert_eq!(status(&out), 401, "the real task's token after it ended: {out}");
    assert_eq!(llm.chat_requests().len(), relayed_before, "refused calls never reached it");

    // The audit trail, attributed through the pool.
    let path = egress.audit_path().to_owned();
    // 3 calls of the real task, then 4 by exec (idle, wrong, 2 finished tokens).
    let lines = wait_audit(&path, |l| l.iter().filter(|x| x["kind"] == "relay").count() >= 7).await;
    // The exec probes ran while no task was running: refused as idle, attributed to the
    // container only, nothing resolved.
    let proxied: Vec<&Value> = lines
        .iter()
        .filter(|l| l["kind"] != "relay" && l["container"] == id.as_str() && l["task_id"].is_null())
        .collect();
    assert_eq!(proxied.len(), 1 + denied.len(), "{lines:#?}");
    for (line, (host, _, _)) in
        proxied.iter().zip([("allowed".to_owned(), 0, "")].iter().chain(&denied))
    {
        assert_eq!(line["verdict"], "denied", "{host}: {line}");
        assert!(line["reason"].as_str().unwrap().starts_with("idle_container"), "{host}: {line}");
        assert!(line["resolved"].is_null(), "{host}: {line}");
    }

    // Task 2 runs (its LLM call held a few seconds); a process with task 1's credential gets
    // nothing and is audited as task 1, never as task 2; task 2's own requests go out.
    let second = a_leftover_of_task_one_gets_nothing_while_task_two_runs(
        &docker,
        &pool,
        &egress,
        &llm,
        &id,
        allowed,
        first_credential.expose_secret(),
    )
    .await;
    let peer_line =
        lines.iter().find(|l| l["reason"].as_str().is_some_and(|r| r.starts_with("unattributed")));
    assert!(peer_line.is_some(), "the non-pool container was refused as unattributed: {lines:#?}");

    // The provider key is nowhere a container or the engine shows.
    let inspect =
        serde_json::to_string(&docker.inspect_container(&id, None).await.unwrap()).unwrap();
    assert!(!inspect.contains(KEY) && !inspect.contains("PLANTED"), "docker inspect");
    // Nor are the tasks' egress credentials and relay tokens (they go on stdin).
    let audit = std::fs::read_to_string(&path).unwrap();
    for secret in [&first_credential, &finished, &second.0, &second.1] {
        let body = &secret.expose_secret()[4..];
        assert!(!inspect.contains(body), "a task credential in docker inspect");
        assert!(!audit.contains(body), "a task credential in the audit");
    }
    assert!(!inspect.contains("nxp_") && !inspect.contains("nxr_"), "docker inspect");
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
    // gVisor does not close a non-dumpable process's `environ` (measured; docs/runtimes.md):
    // there it is read, and holds nothing of the secrets (they come on stdin).
    let closed = nexbot_tests::expected_runtime() != "runsc";
    assert!(!closed || env.contains("Permission denied"), "{env}");
    assert!(!env.contains("PLANTED") && !env.contains(KEY), "{env}");
    // `-F`: a fixed string (busybox's regex scan of the 30 MB subagent binary took 23 s on a
    // quiet machine, past the exec's minute under CI's load; `-F` takes 0.6 s).
    let grep = "busybox grep -rlF PLANT''ED /bin /etc /tmp /workspace /.dockerenv 2>/dev/null; echo scanned";
    let (_, files) = exec(&docker, &id, grep).await;
    assert_eq!(files.trim(), "scanned", "files holding the key: {files}");
    // Positive control: the same scan finds a marker planted in the scratch tmpfs.
    let control = "echo NXE''-CONTROL > /workspace/scratch/nxe-control; \
                   busybox grep -rlF NXE''-CONTROL /bin /etc /tmp /workspace /.dockerenv 2>/dev/null";
    let (_, found) = exec(&docker, &id, control).await;
    assert_eq!(found.trim(), "/workspace/scratch/nxe-control", "the scan reads files");
    // The engine keeps no copy of the container's lines (no log driver): it refuses to read
    // any. What the pool kept of its stderr is hunted instead.
    let mut stream =
        docker.logs(&id, Some(LogsOptionsBuilder::default().stdout(true).stderr(true).build()));
    let engine_copy = stream.next().await;
    assert!(
        matches!(engine_copy, Some(Err(_)) | None),
        "the engine kept the container's lines: {engine_copy:?}"
    );
    let logs = pool.logs(&id).unwrap_or_default().join("\n");
    assert!(!logs.is_empty(), "positive control: the pool kept the container's stderr lines");
    assert!(!logs.contains("PLANTED"), "container stdout/stderr");
    for secret in [&first_credential, &finished, &second.0, &second.1] {
        assert!(!logs.contains(&secret.expose_secret()[4..]), "a task credential in the logs");
    }

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
) -> (secrecy::SecretString, secrecy::SecretString) {
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
    // busybox wget takes the task's credential from the userinfo of `http_proxy` (the
    // subagent puts it there for the task's commands); the raw CONNECT probes send it from
    // the same variable, as the header.
    let command = format!(
        "wget -q -O- http://{allowed}/hello; echo; U=${{HTTP_PROXY#http://}}; P=${{U#*@}}; \
         A=$(printf %s \"${{U%@*}}\" | base64); for t in {}; do printf \"CONNECT $t HTTP/1.1\\r\\nHost: x\\r\\nProxy-Authorization: Basic $A\\r\\nConnection: close\\r\\n\\r\\n\" | nc -w 10 ${{P%:*}} ${{P##*:}} | head -n 1; done",
        targets.join(" ")
    );
    llm.push(Step::tool_call(
        "web_fetch",
        serde_json::json!({"url": format!("http://{allowed}/hello")}),
    ));
    llm.push(Step::tool_call("run_command", serde_json::json!({"command": command})));
    llm.push(Step::text("all done"));

    let token = egress.tokens().issue(task_id, 10_000).unwrap();
    let credential = egress.issue_proxy_token(task_id).unwrap();
    let mut request = nexbot_protocol::Request::execute(task_id, "fetch the page, then probe");
    request.llm_base_url = Some(egress.relay_base_url());
    request.llm_model = Some("scripted".into());
    request.llm_token = Some(token.clone());
    request.egress_token = Some(credential.clone());
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
    assert!(probe_output.contains("hello from the allowed server"), "wget: {probe_output}");

    let lines = wait_audit(egress.audit_path(), |lines| {
        lines.iter().filter(|l| l["task_id"] == task_id).count() >= 3 + 2 + probes.len()
    })
    .await;
    let mine: Vec<&Value> = lines.iter().filter(|l| l["task_id"] == task_id).collect();
    let relayed: Vec<&&Value> = mine.iter().filter(|l| l["kind"] == "relay").collect();
    assert_eq!(relayed.len(), 3);
    assert!(relayed.iter().all(|l| l["verdict"] == "allowed" && l["tokens"] == 15));
    let proxied: Vec<&&Value> = mine.iter().filter(|l| l["kind"] != "relay").collect();
    // The two fetches of the allowed page (web_fetch, then wget): a plain request's line is
    // written when its connection ends, which under gVisor came after the first probe's
    // refusal; the probes, one connection each after the other, are in their order.
    let (fetched, refused): (Vec<&&&Value>, Vec<&&&Value>) =
        proxied.iter().partition(|l| l["kind"] == "http");
    assert_eq!(fetched.len(), 2, "{proxied:#?}");
    for line in &fetched {
        assert_eq!(line["verdict"], "allowed", "{line}");
        assert_eq!(line["resolved"], allowed.ip().to_string(), "{line}");
    }
    assert_eq!(refused.len(), probes.len(), "{proxied:#?}");
    for (line, (target, reason)) in refused.iter().zip(&probes) {
        assert_eq!(line["verdict"], "denied", "{target}: {line}");
        assert!(line["reason"].as_str().unwrap().starts_with(reason), "{target}: {line}");
    }
    // The pool's part at the end of a task: its credential dies with it too (revoke above).
    (token, credential)
}

/// Task 2 runs in the same container, its one LLM call held long enough for the probes; by
/// `docker exec` (what a process left over from task 1 could do, had the clean room missed
/// it) task 1's credential is refused and audited as task 1; task 2's credential goes out by
/// plain HTTP and CONNECT, audited as task 2. Returns task 2's credential and relay token.
async fn a_leftover_of_task_one_gets_nothing_while_task_two_runs(
    docker: &bollard::Docker,
    pool: &Arc<Pool>,
    egress: &nexbot_host::egress::Egress,
    llm: &ScriptedLlm,
    id: &str,
    allowed: std::net::SocketAddr,
    first_credential: &str,
) -> (secrecy::SecretString, secrecy::SecretString) {
    let task_id = "nxe-task-2";
    let calls_before = llm.chat_requests().len();
    llm.push(Step::text("task 2 done").delayed(std::time::Duration::from_secs(8)));
    let token = egress.tokens().issue(task_id, 10_000).unwrap();
    let credential = egress.issue_proxy_token(task_id).unwrap();
    let mut request = nexbot_protocol::Request::execute(task_id, "think for a while");
    request.llm_base_url = Some(egress.relay_base_url());
    request.llm_model = Some("scripted".into());
    request.llm_token = Some(token.clone());
    request.egress_token = Some(credential.clone());
    request.timeout = Some(60);
    let running = {
        let pool = pool.clone();
        tokio::spawn(async move {
            pool.execute(request, tokio_util::sync::CancellationToken::new()).await
        })
    };
    // Task 2 is running once its LLM call has arrived.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
    while llm.chat_requests().len() == calls_before {
        assert!(tokio::time::Instant::now() < deadline, "task 2 never called its LLM");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }

    let get = format!("GET http://{allowed}/late HTTP/1.1\\r\\nHost: {allowed}\\r\\nConnection: close\\r\\n\\r\\n");
    let (_, out) = exec(docker, id, &via_proxy_as(&get, first_credential)).await;
    assert!(status(&out) == 407 && out.contains("task_ended: task nxe-task-1"), "{out}");
    let connect = format!("CONNECT {allowed} HTTP/1.1\\r\\nHost: {allowed}\\r\\n\\r\\n");
    let (_, out) = exec(docker, id, &via_proxy_as(&connect, first_credential)).await;
    assert_eq!(status(&out), 407, "{out}");
    let (_, out) = exec(docker, id, &via_proxy(&get)).await;
    assert!(status(&out) == 407 && out.contains("proxy_credential_missing"), "{out}");
    // Task 2's own, by plain HTTP and through a tunnel (HTTP/1.0 inside, so it closes).
    let own = get.replace("/late", "/hello");
    let (_, out) = exec(docker, id, &via_proxy_as(&own, credential.expose_secret())).await;
    assert!(status(&out) == 200 && out.contains("hello from the allowed server"), "{out}");
    let tunnelled = format!(
        "CONNECT {allowed} HTTP/1.1\\r\\nHost: {allowed}\\r\\n\\r\\nGET /hello HTTP/1.0\\r\\nHost: {allowed}\\r\\n\\r\\n"
    );
    // The client's side stays open a moment: the server would take its early EOF (passed
    // through the tunnel) as the end of the connection before answering.
    let held = via_proxy_as(&tunnelled, credential.expose_secret())
        .replacen("printf '", "{ printf '", 1)
        .replacen("' | busybox nc", "'; sleep 2; } | busybox nc", 1);
    let (_, out) = exec(docker, id, &held).await;
    assert!(status(&out) == 200 && out.contains("hello from the allowed server"), "{out}");

    let answer = tokio::time::timeout(std::time::Duration::from_secs(120), running)
        .await
        .expect("task 2 answered in time")
        .expect("task 2 joined")
        .expect("task 2 ran");
    assert!(
        matches!(&answer.body, nexbot_protocol::ResponseBody::Success { result, .. } if result.contains("task 2 done")),
        "{:?}",
        answer.body
    );
    let summary = egress.finish_task(task_id).egress;
    assert_eq!(summary.totals().denied, 0, "none of the leftovers' refusals is task 2's");
    assert_eq!(summary.totals().allowed, 3, "its LLM call, its GET, its tunnel: {summary:#?}");

    let lines = wait_audit(egress.audit_path(), |lines| {
        lines
            .iter()
            .filter(|l| {
                l["reason"].as_str().is_some_and(|r| r.starts_with("task_ended: task nxe-task-1"))
            })
            .count()
            >= 2
    })
    .await;
    let leftovers: Vec<&Value> = lines
        .iter()
        .filter(|l| {
            l["reason"].as_str().is_some_and(|r| r.starts_with("task_ended: task nxe-task-1"))
        })
        .collect();
    for line in &leftovers {
        assert_eq!(
            (line["task_id"].as_str(), line["verdict"].as_str()),
            (Some("nxe-task-1"), Some("denied"))
        );
        assert_eq!(line["container"], id);
    }
    assert!(
        !lines.iter().any(|l| l["task_id"] == task_id && l["verdict"] != "allowed"),
        "nothing refused is audited as task 2: {lines:#?}"
    );
    (credential, token)
}

/// A container from the same image on Docker's default bridge (not in the pool), removed when
/// the handle drops, however the test ends.
async fn start_peer(docker: &bollard::Docker) -> OwnedContainer {
    let name = format!("nxe-peer-{}", std::process::id());
    let spec = ContainerSpec::new(&image(), "bridge", (LABEL, LABEL_VALUE)).run(&[
        "/bin/busybox",
        "sleep",
        "600",
    ]);
    OwnedContainer::start(docker, &name, spec).await.expect("start peer")
}
