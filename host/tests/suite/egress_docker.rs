//! The egress listener seen from a real container on an internal Docker network: a throwaway
//! FROM-scratch busybox container gets the proxy environment the listener hands out, and its
//! `wget`/`nc` reach an allowed server only through the proxy; internal destinations are
//! denied and audited with the task named; nothing bypasses the proxy; the relay answers the
//! task's token only, and refuses beyond the budget.

use crate::egress_support;
use egress_support::allow;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use bollard::query_parameters::BuildImageOptionsBuilder;
use egress_support::docker::{
    exec, host_address_off_network, internal_network, Cleanup, LABEL, LABEL_VALUE,
};
use egress_support::{echo_server, http_server, http_server_at, launch_on, wait_audit};
use futures_util::StreamExt;
use nexbot_host::egress::{AttributionTable, EgressConfig};
use nexbot_host::sandbox::egress_network;
use nexbot_tests::container::{ContainerSpec, OwnedContainer};
use nexbot_tests::docker_or_skip;
use nexbot_tests::scripted_llm::{ScriptedLlm, Step};
use secrecy::ExposeSecret;
use serde_json::Value;

const KEY: &str = "sk-nxe-PLANTED-busybox-key-5150";

async fn build_busybox_image(docker: &bollard::Docker, tag: &str) {
    let busybox = std::fs::read("/bin/busybox").expect("/bin/busybox (busybox-static) is needed");
    let dockerfile = b"FROM scratch\nCOPY busybox /bin/busybox\nUSER 65534:65534\n";
    let context = nexbot_tests::tar_context(&[
        ("Dockerfile", dockerfile, 0o644),
        ("busybox", &busybox, 0o755),
    ])
    .expect("tar context");
    let labels = HashMap::from([(LABEL, LABEL_VALUE)]);
    let options = BuildImageOptionsBuilder::default()
        .dockerfile("Dockerfile")
        .t(tag)
        .rm(true)
        .labels(&labels)
        .build();
    let mut build = docker.build_image(options, None, Some(bollard::body_full(context.into())));
    while let Some(step) = build.next().await {
        let step = step.expect("image build step");
        assert!(step.error_detail.is_none(), "build failed: {step:?}");
    }
}

/// A shell line sending `request` (printf escapes) to the proxy named by `$HTTP_PROXY`, the
/// variable the listener handed to the container.
fn via_proxy(request: &str) -> String {
    format!("P=${{HTTP_PROXY#http://}}; printf '{request}' | busybox nc -w 10 ${{P%:*}} ${{P##*:}}")
}

/// [`via_proxy`] presenting the egress credential `token` (its header right after the
/// request line), as a task's processes send it.
fn via_proxy_as(request: &str, token: &str) -> String {
    let auth = egress_support::proxy_authorization(token);
    via_proxy(&request.replacen("\\r\\n", &format!("\\r\\nProxy-Authorization: {auth}\\r\\n"), 1))
}

/// A shell line making one chat call to the relay at `relay` with `token`, directly or (as a
/// client that ignores NO_PROXY would) through the proxy. HTTP/1.0 keeps the body unchunked.
fn relay_call(relay: SocketAddr, token: &str, through_proxy: bool) -> String {
    let target = if through_proxy {
        format!("http://{relay}/v1/chat/completions")
    } else {
        "/v1/chat/completions".to_owned()
    };
    let head = format!(
        "POST {target} HTTP/1.0\\r\\nHost: {relay}\\r\\nAuthorization: Bearer {token}\\r\\n\
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

/// The status code on the first line of a raw HTTP answer (0 when there is none).
fn status(raw: &str) -> u16 {
    raw.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0)
}

// One end-to-end scenario on one expensive setup (containers, a daemon), its steps in
// order; split only by count it would not read better (test code only).
#[tokio::test]
#[allow(clippy::too_many_lines)]
async fn a_container_on_the_internal_network_gets_out_only_through_the_proxy_and_relay() {
    let Some(docker) = docker_or_skip("egress_docker").await else { return };
    let run = format!("nxe-bb-{}", std::process::id());
    let mut cleanup = Cleanup::default();
    let image = format!("{run}:img");
    cleanup.images.push(image.clone());
    build_busybox_image(&docker, &image).await;

    // The "internet": an allowed server on the host's loopback, a bystander nobody allowed,
    // a host server outside the internal network, and the scripted provider.
    let (allowed, _) = http_server().await;
    let (echo, _) = echo_server().await;
    let (bystander, bystander_hits) = echo_server().await;
    let outside_ip = host_address_off_network();
    let (outside, outside_seen) = http_server_at(outside_ip).await;
    let (anywhere, anywhere_seen) = http_server_at("0.0.0.0".parse().unwrap()).await;
    let llm = ScriptedLlm::start(vec![]).await;
    llm.set_responder(|_| Step::text("relayed answer"));

    let network = internal_network(&docker, "docker").await;
    let gateway = network.gateway;
    let mut config = EgressConfig::default();
    config.proxy.allow_internal = vec![allow(allowed), allow(echo)];
    config.relay.provider_base_url = Some(llm.base_url());
    let table = Arc::new(AttributionTable::default());
    let (egress, _dir) =
        launch_on(config, &egress_network(&network), table.clone(), Some(KEY)).await;
    let proxy = egress.local_addr();

    let env: Vec<String> = egress.container_env().iter().map(|(k, v)| format!("{k}={v}")).collect();
    assert!(env.iter().any(|e| e == &format!("HTTP_PROXY=http://{proxy}")), "{env:?}");
    assert!(
        env.iter().any(|e| e.starts_with("NO_PROXY=") && e.contains(&gateway.to_string())),
        "{env:?}"
    );
    // The container is removed when `container` drops, however the test ends.
    let mut spec = ContainerSpec::new(&image, &network.name, (LABEL, LABEL_VALUE)).run(&[
        "/bin/busybox",
        "sleep",
        "600",
    ]);
    for (key, value) in egress.container_env() {
        spec = spec.env(&key, &value);
    }
    let container = OwnedContainer::start(&docker, &run, spec).await.expect("start container");
    let id = container.id().to_owned();
    let ip = container.address_on(&network.name).await;
    table.set_container(ip, run.clone());
    table.set_task(ip, Some("task-42".into()));
    // The task's processes present its egress credential (the subagent does it for them).
    let credential = egress.issue_proxy_token("task-42").unwrap();
    let credential = credential.expose_secret();

    // Allowed destination, through the proxy the environment names.
    let (code, out) = exec(&docker, &id, &via_proxy_as(&format!("GET http://{allowed}/hello HTTP/1.1\\r\\nHost: {allowed}\\r\\nConnection: close\\r\\n\\r\\n"), credential)).await;
    assert!(
        code == 0 && status(&out) == 200 && out.ends_with("hello from the allowed server"),
        "allowed GET: {code} {out}"
    );
    // A tunnel to an allowed echo server (TLS would ride on it the same way).
    let tunnel =
        format!("CONNECT {echo} HTTP/1.1\\r\\nHost: {echo}\\r\\n\\r\\nping through the tunnel");
    let (code, out) = exec(&docker, &id, &via_proxy_as(&tunnel, credential)).await;
    assert!(
        code == 0 && status(&out) == 200 && out.ends_with("\r\n\r\nping through the tunnel"),
        "CONNECT: {code} {out:?}"
    );

    // Denied destinations, by plain HTTP and by CONNECT.
    let port = bystander.port();
    let denied = [
        ("169.254.169.254".to_owned(), 80, "cloud_metadata"),
        ("10.20.30.40".to_owned(), 80, "private"),
        ("127.0.0.1".to_owned(), port, "loopback"),
        ("localhost".to_owned(), port, "loopback"),
        ("[::1]".to_owned(), port, "loopback"),
        ("[::ffff:127.0.0.1]".to_owned(), port, "loopback"),
    ];
    for (host, port, _) in &denied {
        let get = format!("GET http://{host}:{port}/ HTTP/1.1\\r\\nHost: {host}:{port}\\r\\nConnection: close\\r\\n\\r\\n");
        let (_, out) = exec(&docker, &id, &via_proxy_as(&get, credential)).await;
        assert!(status(&out) == 403, "GET {host}:{port} should be refused: {out}");
        let connect = format!("CONNECT {host}:{port} HTTP/1.1\\r\\nHost: {host}:{port}\\r\\nConnection: close\\r\\n\\r\\n");
        let (_, out) = exec(&docker, &id, &via_proxy_as(&connect, credential)).await;
        assert!(status(&out) == 403, "CONNECT {host}:{port} should be refused: {out}");
    }
    assert_eq!(bystander_hits.load(std::sync::atomic::Ordering::SeqCst), 0);

    // Nothing bypasses the proxy: not the internet, and (thanks to the egress firewall) not
    // the host's other addresses, nor other ports on the gateway.
    let rules = String::from_utf8(
        std::process::Command::new("iptables").args(["-S", "INPUT"]).output().unwrap().stdout,
    )
    .unwrap();
    let interface = format!("br-{}", &network.id[..12]);
    assert!(
        rules.contains(&format!(
            "-A INPUT -d {}/32 -i {interface} -p tcp -m tcp --dport {} ",
            proxy.ip(),
            proxy.port()
        )),
        "{rules}"
    );
    let bypasses = [
        (outside.ip().to_string(), outside.port()),
        (gateway.to_string(), anywhere.port()),
        ("1.1.1.1".to_owned(), 80),
    ];
    for (ip, port) in bypasses {
        let script =
            format!("printf 'GET /hello HTTP/1.0\\r\\n\\r\\n' | busybox nc -w 3 {ip} {port}");
        let (code, out) = exec(&docker, &id, &script).await;
        assert_ne!(code, 0, "a direct connection to {ip}:{port} must fail: {out}");
    }
    assert!(outside_seen.lock().unwrap().is_empty(), "the outside server saw nothing");
    assert!(anywhere_seen.lock().unwrap().is_empty(), "the 0.0.0.0 server saw nothing");

    // The relay: the task's token works (direct and through the proxy), others do not.
    let tokens = egress.tokens();
    let token = tokens.issue("task-42", 40).unwrap();
    let call = |token: &str, through_proxy: bool| relay_call(proxy, token, through_proxy);
    let (code, out) = exec(&docker, &id, &call(token.expose_secret(), false)).await;
    assert!(
        code == 0 && status(&out) == 200 && out.contains("relayed answer"),
        "relay call: {out}"
    );
    let (_, out) = exec(&docker, &id, &call(token.expose_secret(), true)).await;
    assert!(
        status(&out) == 200 && out.contains("relayed answer"),
        "relay call through the proxy: {out}"
    );
    let (_, out) = exec(&docker, &id, &call(token.expose_secret(), false)).await;
    assert!(
        status(&out) == 403 && out.contains("task_budget_exhausted"),
        "beyond the budget: {out}"
    );
    let (_, out) = exec(&docker, &id, &call("nxr_wrong", false)).await;
    assert!(status(&out) == 401 && out.contains("invalid_api_key"), "wrong token: {out}");
    tokens.revoke("task-42");
    let other = tokens.issue("task-43", 1000).unwrap();
    let (_, out) = exec(&docker, &id, &call(token.expose_secret(), false)).await;
    assert!(status(&out) == 401, "finished task's token: {out}");
    let (_, out) = exec(&docker, &id, &call(other.expose_secret(), false)).await;
    assert!(
        status(&out) == 403 && out.contains("task_mismatch"),
        "a live token of a task this container does not run: {out}"
    );
    table.set_task(ip, Some("task-43".into()));
    let (_, out) = exec(&docker, &id, &call(other.expose_secret(), false)).await;
    assert!(status(&out) == 200, "the live token of the task the container runs: {out}");
    assert_eq!(llm.chat_requests().len(), 3, "refused calls never reached the provider");
    assert!(llm
        .chat_requests()
        .iter()
        .all(|r| r.header("authorization") == Some(&format!("Bearer {KEY}"))));

    // Every connection was audited, with the container and the task.
    let path = egress.audit_path().to_owned();
    let lines =
        wait_audit(&path, |lines| lines.iter().filter(|l| l["kind"] != "relay").count() >= 14)
            .await;
    let proxied: Vec<&Value> = lines.iter().filter(|l| l["kind"] != "relay").collect();
    assert_eq!(proxied[0]["verdict"], "allowed");
    assert_eq!(proxied[0]["task_id"], "task-42");
    assert_eq!(proxied[0]["container"], run.as_str());
    assert_eq!(proxied[0]["source"], ip.to_string());
    assert_eq!(proxied[1]["kind"], "connect");
    for (i, (host, _, reason)) in denied.iter().enumerate() {
        for line in &proxied[2 + i * 2..4 + i * 2] {
            assert_eq!(line["verdict"], "denied", "{host}: {line}");
            assert_eq!(line["task_id"], "task-42");
            assert!(line["reason"].as_str().unwrap().starts_with(reason), "{host}: {line}");
        }
    }
    drop(container); // before its image goes
    drop(cleanup);
    egress.shutdown(egress_support::WAIT).await;
    let rules = String::from_utf8(
        std::process::Command::new("iptables").args(["-S", "INPUT"]).output().unwrap().stdout,
    )
    .unwrap();
    assert!(
        !rules.contains(&format!("--dport {} ", proxy.port())),
        "rules removed on shutdown: {rules}"
    );
}

/// A test's network goes with its guard however the test ends: here a test that fails (panics)
/// with a container still on its network leaves neither behind.
#[tokio::test]
async fn a_failing_test_leaves_no_network_behind() {
    let Some(docker) = docker_or_skip("egress_docker").await else { return };
    let network = internal_network(&docker, "fails").await;
    let name = network.name.clone();
    let container = crate::common::docker_cli(&[
        "run",
        "-di",
        "--network",
        &name,
        "--label",
        &format!("{LABEL}={LABEL_VALUE}"),
        "nexbot-subagent:dev",
    ]);
    assert!(!container.is_empty(), "a container on {name}");
    let failed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
        let _network = network;
        panic!("the test fails with a container on its network");
    }));
    assert!(failed.is_err());
    let left =
        crate::common::docker_cli(&["network", "ls", "-q", "--filter", &format!("name={name}")]);
    assert!(left.is_empty(), "network {name} left behind: {left}");
    let gone = crate::common::docker_cli(&["ps", "-aq", "--filter", &format!("id={container}")]);
    assert!(gone.is_empty(), "container {container} left behind");
}
