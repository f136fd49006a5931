//! The sandbox as seen from inside a pool container and through `docker inspect`: non-root,
//! read-only root, writable tmpfs only where meant, no capabilities, limits in force, no
//! Docker socket, no route beyond the internal network, and no secret anywhere in the spec.

use crate::pool_common;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use nexbot_docker::Pool;
use nexbot_protocol::{Request, SecretMap};
use nexbot_tests::container::{ContainerSpec, OwnedContainer};
use pool_common::{exec, setup};
use secrecy::SecretString;
use tokio_util::sync::CancellationToken;

const PLANTED_SECRET: &str = "nxp-planted-secret-value-7d1f";
const PLANTED_KEY: &str = "sk-nxp-planted-api-key-93ab";

#[tokio::test]
async fn inside_a_pool_container_the_sandbox_holds() {
    let Some((docker, mut config)) = setup("hard").await else { return };
    config.size = 1;
    let skills = std::env::temp_dir().join(format!("nxp-skills-{}", std::process::id()));
    std::fs::create_dir_all(skills.join("demo")).unwrap();
    std::fs::write(skills.join("demo/SKILL.md"), "---\nname: demo\n---\n").unwrap();
    config.skills_dir = Some(skills.clone());
    let pids_limit = nexbot_tests::expected_pids_limit(config.pids_limit);
    let pool = Pool::start(docker.clone(), config).await.expect("pool starts");
    let gateway = pool.network().gateway;
    let id = pool.snapshot()[0].container_id.clone().unwrap();

    // Plant a secret and an API key through a real request (stdin), then hunt for them.
    let mut secrets = SecretMap::new();
    secrets.insert("PLANTED", SecretString::from(PLANTED_SECRET));
    let mut request = Request::execute("hard-1", "say hi");
    request.secrets = Some(secrets);
    request.llm_api_key = Some(SecretString::from(PLANTED_KEY));
    request.llm_base_url = Some(format!("http://{gateway}:9/v1"));
    request.llm_model = Some("m".into());
    request.timeout = Some(5);
    let _answer = tokio::time::timeout(
        Duration::from_secs(60),
        pool.execute(request, CancellationToken::new()),
    )
    .await
    .expect("task answered in time");

    // A host listener on all addresses: reachable through the network's gateway only.
    let listener =
        tokio::net::TcpListener::bind(SocketAddr::from(([0, 0, 0, 0], 0))).await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            use tokio::io::AsyncWriteExt;
            let _ = conn.write_all(b"HTTP/1.0 200 OK\r\ncontent-length: 5\r\n\r\nhello").await;
        }
    });

    // A container on the default bridge network: beyond the internal network, so unreachable.
    let (peer, peer_ip) = start_peer(&docker).await;

    let checks: &[(&str, &str)] = &[
        ("uid is not 0", "test \"$(id -u)\" != 0"),
        ("subagent runs as non-root", "grep -E '^Uid:\\s+[1-9]' /proc/$(pidof nexbot-subagent)/status"),
        ("no effective capabilities", "grep -E '^CapEff:\\s+0+$' /proc/$(pidof nexbot-subagent)/status"),
        ("no bounding capabilities", "grep -E '^CapBnd:\\s+0+$' /proc/$(pidof nexbot-subagent)/status"),
        ("no new privileges", "grep -E '^NoNewPrivs:\\s+1$' /proc/$(pidof nexbot-subagent)/status"),
        ("root filesystem is read-only", "! touch /nxp-probe 2>/dev/null && ! touch /bin/nxp-probe 2>/dev/null"),
        ("scratch is writable", "echo ok > /workspace/scratch/probe && test \"$(cat /workspace/scratch/probe)\" = ok"),
        ("/tmp is writable", "echo ok > /tmp/probe"),
        ("scratch is a size-limited tmpfs", "grep -E ' /workspace/scratch tmpfs .*size=(65536k|67108864)' /proc/mounts"),
        ("/tmp is a size-limited tmpfs", "grep -E ' /tmp tmpfs .*size=(16384k|16777216)' /proc/mounts"),
        ("skills are mounted read-only", "test -f /workspace/skills/demo/SKILL.md && ! touch /workspace/skills/x 2>/dev/null"),
        ("no Docker socket", "! ls /var/run/docker.sock /run/docker.sock 2>/dev/null && ! grep -q docker.sock /proc/mounts"),
        ("pids limit is 64", "test \"$(cat /sys/fs/cgroup/pids/pids.max)\" = 64"),
        ("memory limit is 256 MiB", "test \"$(cat /sys/fs/cgroup/memory/memory.limit_in_bytes)\" = 268435456"),
        ("no swap beyond memory", "test \"$(cat /sys/fs/cgroup/memory/memory.memsw.limit_in_bytes 2>/dev/null || echo 268435456)\" = 268435456"),
        ("the gateway is reachable", &format!("printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -w 3 {gateway} {port} | grep -q hello")),
        ("the internet is not", "! nc -w 3 1.1.1.1 80 </dev/null 2>/dev/null"),
        ("a container on another network is not", &format!("! nc -w 3 {peer_ip} 8080 </dev/null 2>/dev/null")),
        ("no secret in the environment", &format!("! cat /proc/$(pidof nexbot-subagent)/environ | tr '\\0' '\\n' | grep -q -e {PLANTED_SECRET} -e {PLANTED_KEY}")),
    ];
    // gVisor's kernel has no cgroup files and no NoNewPrivs line to read from inside: there
    // those settings are checked on the container (`docker inspect`, below) only.
    let host_only = [
        "no new privileges",
        "pids limit is 64",
        "memory limit is 256 MiB",
        "no swap beyond memory",
    ];
    let gvisor = nexbot_tests::expected_runtime() == "runsc";
    let mut failed = Vec::new();
    for (what, script) in checks.iter().filter(|(what, _)| !(gvisor && host_only.contains(what))) {
        let (code, output) = exec(&docker, &id, script).await;
        if code != 0 {
            failed.push(format!("{what}: exit {code}: {output}"));
        }
    }
    assert!(failed.is_empty(), "sandbox checks failed:\n{}", failed.join("\n"));

    let kept_logs = pool.logs("0").unwrap().join("\n");
    assert!(!kept_logs.is_empty());
    let ps = serde_json::to_string(&pool.snapshot()).unwrap();
    let debug = format!("{pool:?}");
    for planted in [PLANTED_SECRET, PLANTED_KEY] {
        assert!(!kept_logs.contains(planted), "{planted} in the kept logs");
        assert!(!ps.contains(planted) && !debug.contains(planted), "{planted} in ps/Debug");
    }

    let inspect = docker.inspect_container(&id, None).await.unwrap();
    let text = serde_json::to_string(&inspect).unwrap();
    for planted in [PLANTED_SECRET, PLANTED_KEY] {
        assert!(!text.contains(planted), "{planted} found in docker inspect");
    }
    assert!(!text.contains("docker.sock"));
    let host = inspect.host_config.unwrap();
    assert_eq!(host.readonly_rootfs, Some(true));
    assert_eq!(host.cap_drop, Some(vec!["ALL".to_owned()]));
    assert_eq!(host.pids_limit, Some(pids_limit));
    assert_eq!(host.memory, Some(256 * 1024 * 1024));
    assert_eq!(host.security_opt, Some(vec!["no-new-privileges:true".to_owned()]));
    assert_eq!(host.memory_swap, host.memory);
    assert_eq!(host.nano_cpus, Some(1_000_000_000));
    assert_eq!(host.init, Some(false), "the subagent is pid 1: no init a task could take over");
    // No engine-side copy of the container's lines: a task's results and logs stay in the
    // pool's memory, not in a json-file on the engine's disk.
    assert_eq!(host.log_config.unwrap().typ.as_deref(), Some("none"));
    let log_path = inspect.log_path.clone().unwrap_or_default();
    assert!(
        log_path.is_empty() || !std::path::Path::new(&log_path).exists(),
        "the engine keeps a log file of the container: {log_path}"
    );
    let env: HashMap<_, _> = inspect
        .config
        .unwrap()
        .env
        .unwrap_or_default()
        .into_iter()
        .filter_map(|e| e.split_once('=').map(|(k, v)| (k.to_owned(), v.to_owned())))
        .collect();
    assert!(env.keys().all(|k| !k.contains("KEY") && !k.contains("TOKEN")), "{env:?}");

    peer.remove().await;
    pool.shutdown().await.unwrap();
    std::fs::remove_dir_all(skills).unwrap();
}

/// Starts a listener container on Docker's default bridge (removed when the handle drops,
/// however the test ends) and returns it and its address.
async fn start_peer(docker: &bollard::Docker) -> (OwnedContainer, String) {
    let name = format!("nxp-hard-peer-{}", std::process::id());
    let spec = ContainerSpec::new(&pool_common::image(), "bridge", ("nexbot.test", "nxp")).run(&[
        "/bin/sh",
        "-c",
        "while true; do echo hi | nc -l -p 8080; done",
    ]);
    let peer = OwnedContainer::start(docker, &name, spec).await.expect("start peer");
    let ip = peer.address_on("bridge").await.to_string();
    // Positive control: the host reaches it, so a failure from the pool container is the network.
    let reached = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            if tokio::net::TcpStream::connect((ip.as_str(), 8080)).await.is_ok() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    assert!(reached.is_ok(), "the peer container is not reachable from the host either");
    (peer, ip)
}
