//! The `nexbot` command line: `init`, precise config errors, `doctor`, and `serve` shutting
//! down cleanly on SIGTERM.

use crate::common;

use std::process::Stdio;
use std::time::Duration;

use common::{base_env, docker_cli, nexbot, text, Leftovers, TempWorkspace, NEXBOT};
use nexbot_tests::scripted_llm::ScriptedLlm;
use tokio::io::{AsyncBufReadExt, BufReader};

#[test]
fn init_writes_the_workspace_and_never_overwrites_without_force() {
    let ws = TempWorkspace::init("init");
    for name in
        ["IDENTITY.md", "AGENTS.md", "SOUL.md", "USER.md", "TOOLS.md", "MEMORY.md", "config.toml"]
    {
        assert!(ws.dir.join(name).is_file(), "{name} missing");
    }
    std::fs::write(ws.dir.join("SOUL.md"), "grumpy").unwrap();
    let again =
        std::process::Command::new(NEXBOT).args(["init", "--dir"]).arg(&ws.dir).output().unwrap();
    assert!(again.status.success());
    assert!(text(&again.stdout).contains("kept"));
    assert_eq!(std::fs::read_to_string(ws.dir.join("SOUL.md")).unwrap(), "grumpy");
    let forced = std::process::Command::new(NEXBOT)
        .args(["init", "--force", "--dir"])
        .arg(&ws.dir)
        .output()
        .unwrap();
    assert!(forced.status.success());
    assert_ne!(std::fs::read_to_string(ws.dir.join("SOUL.md")).unwrap(), "grumpy");
}

async fn chat_error(config: &std::path::Path, env: &[(String, String)]) -> String {
    let out = tokio::time::timeout(
        Duration::from_secs(30),
        nexbot(&["chat"], config, env).stdin(Stdio::null()).output(),
    )
    .await
    .expect("nexbot did not exit")
    .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}\n{}", text(&out.stdout), text(&out.stderr));
    text(&out.stderr)
}

#[tokio::test]
async fn bad_config_is_refused_naming_the_key() {
    let ws = TempWorkspace::init("badcfg");
    let env = base_env("http://127.0.0.1:9/v1");
    let good = std::fs::read_to_string(ws.config()).unwrap();

    std::fs::write(ws.config(), good.replace("max_iterations = 20", "max_iteratons = 20")).unwrap();
    let err = chat_error(&ws.config(), &env).await;
    assert!(err.contains("config key `agent.max_iteratons`: unknown field"), "{err}");

    std::fs::write(
        ws.config(),
        good.replace("retry_max_wait_secs = 30", "retry_max_wait_secs = \"soon\""),
    )
    .unwrap();
    let err = chat_error(&ws.config(), &env).await;
    assert!(err.contains("config key `llm.retry_max_wait_secs`: invalid type"), "{err}");

    std::fs::write(ws.config(), &good).unwrap();
    let mut bad_env = env.clone();
    bad_env.push(("NEXBOT_BUS__PER_CHAT_QUEUE".into(), "0".into()));
    let err = chat_error(&ws.config(), &bad_env).await;
    assert!(
        err.contains(
            "config key `bus.per_chat_queue` (from NEXBOT_BUS__PER_CHAT_QUEUE): 0 is out of range"
        ),
        "{err}"
    );

    let err = chat_error(&ws.dir.join("missing.toml"), &env).await;
    assert!(err.contains("not found") && err.contains("nexbot init"), "{err}");
}

#[tokio::test]
async fn doctor_passes_with_a_reachable_llm_and_fails_naming_the_fix() {
    let ws = TempWorkspace::init("doctor");
    let llm = ScriptedLlm::start(vec![]).await;
    let run = |env: Vec<(String, String)>| {
        let config = ws.config();
        async move {
            tokio::time::timeout(
                Duration::from_secs(60),
                nexbot(&["doctor"], &config, &env).output(),
            )
            .await
            .expect("doctor did not finish")
            .unwrap()
        }
    };
    let out = run(base_env(&llm.base_url())).await;
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(stdout.contains("[ok]   llm:") && stdout.contains("lists scripted"), "{stdout}");
    assert!(stdout.contains("[warn] llm key"), "{stdout}");
    assert!(llm.requests().iter().any(|r| r.path == "/v1/models"));
    let free = format!(" free in {}", ws.dir.display());
    assert!(
        stdout.lines().any(|l| l.starts_with("[ok]   disk: ") && l.contains(&free)),
        "{stdout}"
    );

    // Less free space in the data directory than storage.min_free_mb asks: a failure, named.
    let mut env = base_env(&llm.base_url());
    env.push(("NEXBOT_STORAGE__MIN_FREE_MB".into(), "1000000000".into()));
    let out = run(env).await;
    let stdout = text(&out.stdout);
    assert!(!out.status.success(), "{stdout}");
    assert!(stdout.contains("[FAIL] disk: ") && stdout.contains("(below 954 TB)"), "{stdout}");
    assert!(stdout.contains("fix: free space there"), "{stdout}");

    let out = run(base_env("http://127.0.0.1:9/v1")).await;
    let stdout = text(&out.stdout);
    assert!(!out.status.success());
    assert!(stdout.contains("[FAIL] llm: cannot reach http://127.0.0.1:9/v1/models"), "{stdout}");
    assert!(stdout.contains("fix: check llm.base_url"), "{stdout}");

    // With delegation on, a missing image is named with its fix (needs the engine).
    if nexbot_tests::docker_or_skip("doctor_image_check").await.is_some() {
        let mut env = base_env(&llm.base_url());
        env.push(("NEXBOT_SUBAGENT__ENABLED".into(), "true".into()));
        env.push(("NEXBOT_SUBAGENT__IMAGE".into(), "nxh-no-such-image:none".into()));
        let out = run(env).await;
        let stdout = text(&out.stdout);
        assert!(!out.status.success());
        assert!(stdout.contains("[ok]   docker: engine"), "{stdout}");
        assert!(stdout.contains("[FAIL] subagent image: nxh-no-such-image:none"), "{stdout}");
        assert!(stdout.contains("make image"), "{stdout}");
        // The engine's data directory is visible here: its free space is checked too.
        assert!(stdout.lines().any(|l| l.starts_with("[ok]   engine disk: ")), "{stdout}");
        let mut env = base_env(&llm.base_url());
        env.push(("NEXBOT_SUBAGENT__ENABLED".into(), "true".into()));
        env.push(("NEXBOT_STORAGE__MIN_FREE_MB".into(), "1000000000".into()));
        let stdout = text(&run(env).await.stdout);
        assert!(
            stdout.contains("[FAIL] engine disk: ") && stdout.contains("(below 954 TB)"),
            "{stdout}"
        );
        assert!(stdout.contains("docker system prune"), "{stdout}");
    }
}

/// Each configured MCP server: its image on the engine and its command a program of that image,
/// found along the image's PATH, without running it; what is wrong is named with its fix, and
/// the container made to look is gone.
#[tokio::test]
async fn doctor_checks_each_mcp_servers_image_and_command() {
    if nexbot_tests::docker_or_skip("doctor_mcp").await.is_none() {
        return;
    }
    let ws = TempWorkspace::init("doctor-mcp");
    let llm = ScriptedLlm::start(vec![]).await;
    let leftover = Leftovers::new("doctor-mcp");
    let pid = std::process::id();
    let (missing, wrong) = (format!("nxh-no-such-mcp-{pid}:none"), format!("nx-no-program-{pid}"));
    let mut env = delegation_env(&llm, &leftover);
    env.push((
        "NEXBOT_MCP__SERVERS".into(),
        format!(
            r#"[{{ name = "everything", command = "mcp-server-everything", args = ["stdio"] }},
                {{ name = "absent", command = "x", image = "{missing}" }},
                {{ name = "typo", command = "{wrong}" }},
                {{ name = "far", url = "https://mcp.example.com/mcp" }}]"#
        ),
    ));
    let out = tokio::time::timeout(
        Duration::from_secs(120),
        nexbot(&["doctor"], &ws.config(), &env).output(),
    )
    .await
    .expect("doctor did not finish")
    .unwrap();
    let stdout = text(&out.stdout);
    assert!(!out.status.success(), "{stdout}");
    assert!(
        stdout.contains(
            "[ok]   mcp everything: image nexbot-mcp:dev, command mcp-server-everything (/"
        ),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!("[FAIL] mcp absent: the engine has no image {missing}")),
        "{stdout}"
    );
    assert!(stdout.contains(&format!("fix: pull or build {missing} on the engine")), "{stdout}");
    assert!(
        stdout
            .contains(&format!("[FAIL] mcp typo: the image nexbot-mcp:dev has no program {wrong}")),
        "{stdout}"
    );
    assert!(stdout.contains("[ok]   mcp far: remote, https://mcp.example.com/mcp"), "{stdout}");
    let left = common::docker_cli(&[
        "ps",
        "-a",
        "--filter",
        "label=nexbot.role=doctor",
        "--format",
        "{{.Command}}",
    ]);
    assert!(!left.contains(&wrong) && !left.contains("mcp-server-everything"), "{left}");
}

#[tokio::test]
async fn serve_runs_until_sigterm_and_exits_cleanly() {
    let ws = TempWorkspace::init("serve");
    let llm = ScriptedLlm::start(vec![]).await;
    let mut child = nexbot(&["serve"], &ws.config(), &base_env(&llm.base_url()))
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap()).lines();
    let ready = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(line) = stderr.next_line().await.unwrap() {
            if line.contains("nexbot is serving") {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(ready, Ok(true), "serve never became ready");
    let pid = child.id().unwrap().to_string();
    let killed = std::process::Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    assert!(killed.success());
    let status =
        tokio::time::timeout(Duration::from_secs(30), child.wait()).await.unwrap().unwrap();
    assert!(status.success(), "{status:?}");
    let mut rest = String::new();
    while let Ok(Some(line)) = stderr.next_line().await {
        rest.push_str(&line);
    }
    assert!(rest.contains("stopped"), "{rest}");
}

fn delegation_env(llm: &ScriptedLlm, leftover: &Leftovers) -> Vec<(String, String)> {
    let mut env = base_env(&llm.base_url());
    env.extend(
        [
            ("NEXBOT_SUBAGENT__ENABLED", "true"),
            ("NEXBOT_SUBAGENT__POOL_SIZE", "1"),
            ("NEXBOT_SUBAGENT__POOL_NAME", &leftover.pool),
            ("NEXBOT_SUBAGENT__NETWORK", &leftover.network),
        ]
        .map(|(k, v)| (k.to_owned(), v.to_owned())),
    );
    env
}

#[tokio::test]
async fn doctor_checks_the_egress_listener_and_firewall_prerequisites() {
    let Some(docker) = nexbot_tests::docker_or_skip("doctor_egress").await else { return };
    let ws = TempWorkspace::init("nxw-doctor");
    let llm = ScriptedLlm::start(vec![]).await;
    let leftover = Leftovers::new("doctor");
    let run = |extra: &[(&str, &str)]| {
        let mut env = delegation_env(&llm, &leftover);
        env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        let config = ws.config();
        async move {
            let out = tokio::time::timeout(
                Duration::from_secs(60),
                nexbot(&["doctor"], &config, &env).output(),
            )
            .await
            .expect("doctor did not finish")
            .unwrap();
            text(&out.stdout)
        }
    };

    // Defaults, as root with iptables, the network not created yet (and doctor creates none).
    let stdout = run(&[]).await;
    let network = &leftover.network;
    assert!(
        stdout.contains(&format!(
            "[ok]   egress listener: the network {network} is created at start"
        )),
        "{stdout}"
    );
    assert!(stdout.contains("[ok]   egress firewall: iptables v"), "{stdout}");
    assert!(stdout.contains(" as root"), "{stdout}");
    let relay =
        format!("[ok]   egress relay: subagents reach {} through the relay", llm.base_url());
    assert!(stdout.contains(&relay), "{stdout}");
    assert!(docker.inspect_network(network, None).await.is_err(), "doctor created the network");

    // No iptables on the PATH: the firewall cannot be installed, and the fix says so.
    let empty = ws.dir.join("empty-path");
    std::fs::create_dir_all(&empty).unwrap();
    let stdout = run(&[("PATH", empty.to_str().unwrap())]).await;
    assert!(stdout.contains("[FAIL] egress firewall: iptables cannot be run"), "{stdout}");
    assert!(stdout.contains("fix: install iptables"), "{stdout}");
    assert!(stdout.contains("egress.firewall = false"), "{stdout}");

    // The network exists and something holds the port on its gateway.
    let labels = [("nexbot.test".to_owned(), "nxw".to_owned())].into();
    let info =
        nexbot_docker::ensure_internal_network(&docker, network, &labels).await.expect("network");
    let squatter = tokio::net::TcpListener::bind((info.gateway, 0)).await.unwrap();
    let taken = squatter.local_addr().unwrap();
    let stdout = run(&[("NEXBOT_EGRESS__PORT", &taken.port().to_string())]).await;
    assert!(stdout.contains(&format!("[warn] egress listener: {taken} is in use")), "{stdout}");
    assert!(stdout.contains("set egress.port"), "{stdout}");
    drop(squatter);
    let stdout = run(&[("NEXBOT_EGRESS__PORT", &taken.port().to_string())]).await;
    assert!(stdout.contains(&format!("[ok]   egress listener: {taken} is free")), "{stdout}");

    // Opting out of the safe defaults is reported with the way back.
    let stdout = run(&[
        ("NEXBOT_EGRESS__FIREWALL", "false"),
        ("NEXBOT_EGRESS__RELAY__SEND_PROVIDER_KEY_TO_SUBAGENTS", "true"),
    ])
    .await;
    assert!(stdout.contains("[warn] egress firewall: off"), "{stdout}");
    assert!(stdout.contains("[warn] egress relay: the real LLM key is sent"), "{stdout}");
    drop(leftover);
}

/// The wall (`sandbox.runtime`): doctor starts one container as the pool would and waits for
/// its pong under the runtime, then removes it; a runtime the engine lacks is a failure with
/// the lines that register it, and `serve` refuses to start rather than run without it.
#[tokio::test]
async fn doctor_probes_the_runtime_and_serve_refuses_one_the_engine_lacks() {
    let Some(_docker) = nexbot_tests::docker_or_skip("doctor_runtime").await else { return };
    let ws = TempWorkspace::init("nxw-runtime");
    let llm = ScriptedLlm::start(vec![]).await;
    let leftover = Leftovers::new("runtime");
    let run = |program: &'static str, extra: &[(&str, &str)]| {
        let mut env = delegation_env(&llm, &leftover);
        env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        let config = ws.config();
        async move {
            tokio::time::timeout(
                Duration::from_secs(90),
                nexbot(&[program], &config, &env).output(),
            )
            .await
            .expect("it did not finish")
            .unwrap()
        }
    };
    let out = run("doctor", &[]).await;
    let stdout = text(&out.stdout);
    let expected = format!(
        "[ok]   sandbox runtime: {}: a container of nexbot-subagent:dev answered its first ping",
        nexbot_tests::expected_runtime()
    );
    assert!(stdout.contains(&expected), "{stdout}");
    let probes = docker_cli(&["ps", "-aq", "--filter", &format!("name={}-probe", leftover.pool)]);
    assert_eq!(probes, "", "the probe container was removed");

    let missing = [("NEXBOT_SANDBOX__RUNTIME", "nxw-no-such-runtime")];
    let out = run("doctor", &missing).await;
    let stdout = text(&out.stdout);
    assert!(!out.status.success(), "{stdout}");
    assert!(
        stdout.contains(
            "[FAIL] sandbox runtime: the engine has no runtime \"nxw-no-such-runtime\" (it has: "
        ),
        "{stdout}"
    );
    assert!(stdout.contains("/etc/docker/daemon.json") && stdout.contains("kill -HUP"), "{stdout}");

    let out = run("serve", &missing).await;
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "serve ran without the runtime asked for: {stderr}");
    assert!(
        stderr.contains("sandbox.runtime") && stderr.contains("nxw-no-such-runtime"),
        "{stderr}"
    );
    assert!(stderr.contains("/etc/docker/daemon.json"), "{stderr}");
    let left =
        docker_cli(&["ps", "-aq", "--filter", &format!("label=nexbot.pool={}", leftover.pool)]);
    assert_eq!(left, "", "nothing of the pool was made");
    drop(leftover);
}

#[tokio::test]
async fn serve_with_delegation_starts_the_sandbox_and_stops_it_in_order() {
    let Some(docker) = nexbot_tests::docker_or_skip("serve_with_delegation").await else { return };
    if docker.inspect_image("nexbot-subagent:dev").await.is_err() {
        panic!("the image nexbot-subagent:dev is missing: build it with `make image`");
    }
    let ws = TempWorkspace::init("nxw-serve");
    let llm = ScriptedLlm::start(vec![]).await;
    // A network of its own: a pool network belongs to one daemon, and this one is a separate
    // process. Other listeners never share the bridge, yet only this listener's own rule is
    // checked, as before.
    let leftover = Leftovers::new("serve");
    let mut env = delegation_env(&llm, &leftover);
    env.push(("NEXBOT_EGRESS__PORT".into(), "0".into()));
    let mut child = nexbot(&["serve"], &ws.config(), &env).stderr(Stdio::piped()).spawn().unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut log = String::new();
    let ready = tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(line) = stderr.next_line().await.unwrap() {
            log.push_str(&line);
            log.push('\n');
            if line.contains("nexbot is serving") {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(ready, Ok(true), "serve never became ready: {log}");
    assert!(!log.contains("delegation to subagents is off"), "{log}");
    // Where the listener is, from its own log line (`local=ip:port`).
    let listener: std::net::SocketAddr = log
        .lines()
        .find(|l| l.contains("egress proxy and LLM relay listening"))
        .and_then(|l| l.split("local=").nth(1))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|addr| addr.parse().ok())
        .unwrap_or_else(|| panic!("no listener address logged: {log}"));
    let net = docker.inspect_network(&leftover.network, None).await.expect("network");
    let bridge = format!("br-{}", &net.id.unwrap_or_default()[..12]);
    // Read under the listeners' own lock (see the egress firewall), so no other listener on
    // the shared bridge is caught between installing its DROP and its ACCEPT.
    let rules = || {
        let out = std::process::Command::new("flock")
            .args(["/run/nexbot-egress-firewall.lock", "iptables", "-w", "5", "-S", "INPUT"])
            .output();
        let listing = String::from_utf8_lossy(&out.unwrap().stdout).into_owned();
        listing.lines().filter(|l| l.contains(&bridge)).map(str::to_owned).collect::<Vec<_>>()
    };
    let running = rules();
    assert!(
        running.iter().any(|r| r.contains(&format!("--dport {}", listener.port()))),
        "{running:?}"
    );
    assert!(running.iter().any(|r| r.ends_with("-j DROP")), "{running:?}");
    assert!(tokio::net::TcpStream::connect(listener).await.is_ok(), "the listener is up");
    let containers = || {
        let filter = format!("label=nexbot.pool={}", leftover.pool);
        let out =
            std::process::Command::new("docker").args(["ps", "-aq", "--filter", &filter]).output();
        String::from_utf8_lossy(&out.unwrap().stdout).split_whitespace().count()
    };
    assert_eq!(containers(), 1);

    let pid = child.id().unwrap().to_string();
    assert!(std::process::Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    let status =
        tokio::time::timeout(Duration::from_secs(60), child.wait()).await.unwrap().unwrap();
    while let Ok(Some(line)) = stderr.next_line().await {
        log.push_str(&line);
        log.push('\n');
    }
    assert!(status.success(), "{status:?}: {log}");
    // Pool drained and removed, then the listener (and its firewall rules), then the end.
    let at = |needle: &str| log.find(needle).unwrap_or_else(|| panic!("no {needle:?} in {log}"));
    assert!(at("pool shut down") < at("egress listener stopped"), "{log}");
    assert!(at("egress listener stopped") < at("stopped\n"), "{log}");
    assert_eq!(containers(), 0, "the pool's containers are gone");
    let port = format!("--dport {} ", listener.port());
    let after = rules();
    let left: Vec<&String> = after.iter().filter(|r| r.contains(&port)).collect();
    assert!(left.is_empty(), "the listener's firewall rule is gone: {after:?}");
    // The bridge's DROP goes with the last listener on it.
    let listeners = after.iter().filter(|r| r.ends_with("-j ACCEPT")).count();
    assert!(listeners > 0 || !after.iter().any(|r| r.ends_with("-j DROP")), "{after:?}");
    assert!(tokio::net::TcpStream::connect(listener).await.is_err(), "the listener is closed");
    drop(leftover);
}

/// `nexbot secrets rotate-key`: every secret re-encrypted under the new key (read from
/// stdin), the old key no longer opens the vault; refused while a daemon holds the data
/// directory, and with a wrong current key nothing changes.
#[tokio::test]
async fn rotate_key_re_encrypts_the_vault_and_refuses_while_the_daemon_runs() {
    use nexbot_host::store::Store;
    use nexbot_host::vault::{SecretScope, Vault, VaultState};
    use secrecy::{ExposeSecret, SecretString};
    use tokio::io::AsyncWriteExt;
    const OLD: &str = "the-old-master-key-0123456789";
    const NEW: &str = "the-new-master-key-9876543210";
    const VALUE: &str = "rotated-PLANTED-value-2a9f";
    let ws = TempWorkspace::init("rotate");
    let secret = |s: &str| SecretString::from(s.to_owned());
    let scope = SecretScope::Operator;
    {
        let store = Store::open(&ws.database()).await.unwrap();
        let vault = Vault::open(store, Some(&secret(OLD)), None).await.unwrap();
        vault
            .set(&scope, "KEY", secret(VALUE), &[], &[], Some(nexbot_host::vault::Mode::Stdin))
            .await
            .unwrap();
    }
    let rotate = |current: &str| {
        let env = vec![("NEXBOT_MASTER_KEY".to_owned(), current.to_owned())];
        let mut cmd = nexbot(&["secrets", "rotate-key"], &ws.config(), &env);
        cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
        cmd
    };
    let run = |mut cmd: tokio::process::Command| async move {
        let mut child = cmd.spawn().unwrap();
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(format!("{NEW}\n").as_bytes()).await.unwrap();
        drop(stdin);
        tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
            .await
            .unwrap()
            .unwrap()
    };

    // A daemon holding the data directory: refused, nothing touched.
    let lock =
        nexbot_host::instance::DataDirLock::acquire(ws.database().parent().unwrap()).unwrap();
    let out = run(rotate(OLD)).await;
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("another nexbot daemon"), "{}", text(&out.stderr));
    drop(lock);
    // A wrong current key: refused, nothing changed.
    let out = run(rotate("not-the-current-key-000000")).await;
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("NEXBOT_MASTER_KEY is not the key"),
        "{}",
        text(&out.stderr)
    );

    let out = run(rotate(OLD)).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("re-encrypted 1 secret(s)"), "{}", text(&out.stdout));
    let all = [text(&out.stdout), text(&out.stderr)].concat();
    assert!(!all.contains(VALUE) && !all.contains(NEW), "{all}");
    let store = Store::open(&ws.database()).await.unwrap();
    let vault = Vault::open(store.clone(), Some(&secret(NEW)), None).await.unwrap();
    assert_eq!(vault.resolve(&scope, "KEY").unwrap().value.expose_secret(), VALUE);
    let stale = Vault::open(store, Some(&secret(OLD)), None).await.unwrap();
    assert_eq!(stale.state(), &VaultState::WrongKey);
}
