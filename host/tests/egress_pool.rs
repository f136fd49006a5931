//! Egress from inside a real pool container, through the product's own configuration: the
//! pool (nexbot-docker, image `nexbot-subagent:dev`) runs on the internal network with the
//! environment the egress listener hands out, attribution comes from the pool, and the
//! firewall is on. Allowed and denied destinations, bypasses, the relay's tokens and budget,
//! and a hunt for the provider key in everything a container or the engine shows.

mod common;

use std::collections::HashMap;
use std::sync::Arc;

use bollard::models::{ContainerCreateBody, HostConfig};
use bollard::query_parameters::{CreateContainerOptionsBuilder, LogsOptionsBuilder};
use common::docker::{
    exec, host_address_off_network, internal_network, Cleanup, LABEL, LABEL_VALUE, NETWORK,
};
use common::{echo_server, http_server, http_server_at, launch_on, wait_audit};
use futures_util::StreamExt;
use nexbot_docker::{Pool, PoolConfig};
use nexbot_host::egress::{Attribution, Cidr, EgressConfig, InternalAllow, LateAttribution};
use nexbot_tests::docker_or_skip;
use nexbot_tests::scripted_llm::{ScriptedLlm, Step};
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
    let body = r#"B='{"model":"m","messages":[]}'"#;
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
    let (allowed, _) = http_server().await;
    let (bystander, bystander_hits) = echo_server().await;
    let (outside, outside_seen) = http_server_at(host_address_off_network()).await;
    let llm = ScriptedLlm::start(vec![]).await;
    llm.set_responder(|_| Step::text("relayed answer"));

    // The product's wiring: network first, then the listener on its gateway, then the pool
    // with the listener's environment, then attribution bound to the pool.
    let network = internal_network(&docker).await;
    let mut config = EgressConfig::default();
    config.proxy.allow_internal = vec![InternalAllow {
        cidr: Cidr::try_from("127.0.0.1".to_owned()).unwrap(),
        ports: vec![allowed.port()],
    }];
    config.relay.provider_base_url = Some(llm.base_url());
    let late = Arc::new(LateAttribution::default());
    let (egress, _dir) = launch_on(config, &network, late.clone(), Some(KEY)).await;
    let proxy = egress.local_addr();
    let pool_config = PoolConfig {
        name: format!("nxe-pool-{}", std::process::id()),
        network: NETWORK.into(),
        size: 1,
        env: egress.container_env(),
        ..PoolConfig::default()
    };
    let pool = Arc::new(Pool::start(docker.clone(), pool_config).await.expect("pool starts"));
    let as_attribution: Arc<dyn Attribution> = pool.clone();
    assert!(late.bind(&as_attribution));
    let id = pool.snapshot()[0].container_id.clone().expect("a container");
    cleanup.containers.push(id.clone()); // removed even if an assertion fails first

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
    let peer = start_peer(&docker, &mut cleanup).await;
    let (_, out) = exec(&docker, &peer, &format!(
        "printf 'CONNECT {allowed} HTTP/1.1\\r\\nHost: x\\r\\nConnection: close\\r\\n\\r\\n' | busybox nc -w 10 {} {}",
        proxy.ip(), proxy.port()
    ))
    .await;
    assert_ne!(status(&out), 200, "a non-pool container must not tunnel: {out}");

    // The relay with per-task tokens.
    let tokens = egress.tokens();
    let token = tokens.issue("pool-task-1", 20).unwrap();
    let (_, out) = exec(&docker, &id, &relay_call(proxy, token.expose_secret())).await;
    assert!(status(&out) == 200 && out.contains("relayed answer"), "{out}");
    let (_, out) = exec(&docker, &id, &relay_call(proxy, token.expose_secret())).await;
    assert_eq!(status(&out), 200, "{out}");
    let (_, out) = exec(&docker, &id, &relay_call(proxy, token.expose_secret())).await;
    assert!(status(&out) == 429 && out.contains("insufficient_quota"), "over budget: {out}");
    let (_, out) = exec(&docker, &id, &relay_call(proxy, "nxr_not-a-real-token")).await;
    assert_eq!(status(&out), 401, "{out}");
    tokens.revoke("pool-task-1");
    let (_, out) = exec(&docker, &id, &relay_call(proxy, token.expose_secret())).await;
    assert_eq!(status(&out), 401, "finished task: {out}");
    assert_eq!(llm.chat_requests().len(), 2);

    // The audit trail, attributed through the pool.
    let path = egress.audit_path().to_owned();
    let lines = wait_audit(&path, |l| l.iter().filter(|x| x["kind"] == "relay").count() >= 5).await;
    let proxied: Vec<&Value> =
        lines.iter().filter(|l| l["kind"] != "relay" && l["container"] == id.as_str()).collect();
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
    let (_, env) = exec(
        &docker,
        &id,
        "busybox tr '\\0' '\\n' < /proc/$(busybox pidof nexbot-subagent)/environ",
    )
    .await;
    assert!(env.contains("HTTPS_PROXY=") && !env.contains("PLANTED"), "{env}");
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
    egress.shutdown(common::WAIT).await;
    drop(cleanup);
}

/// A container from the same image on Docker's default bridge (not in the pool).
async fn start_peer(docker: &bollard::Docker, cleanup: &mut Cleanup) -> String {
    let name = format!("nxe-peer-{}", std::process::id());
    let body = ContainerCreateBody {
        image: Some(IMAGE.into()),
        entrypoint: Some(vec!["/bin/busybox".into(), "sleep".into(), "600".into()]),
        labels: Some(HashMap::from([(LABEL.to_owned(), LABEL_VALUE.to_owned())])),
        host_config: Some(HostConfig { network_mode: Some("bridge".into()), ..Default::default() }),
        ..Default::default()
    };
    let options = CreateContainerOptionsBuilder::default().name(&name).build();
    let created = docker.create_container(Some(options), body).await.expect("create peer");
    cleanup.containers.push(created.id.clone());
    docker.start_container(&created.id, None).await.expect("start peer");
    created.id
}
