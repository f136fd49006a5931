//! `nexbot serve --init`, what the host image runs: on an empty data volume it writes the
//! default workspace and serves; without `--init` a missing config is an error that writes
//! nothing; a SIGTERM that arrives while it starts (`docker stop` right after `up`) still ends
//! in a clean shutdown rather than death by the signal's default action.

use crate::common;

use std::process::Stdio;
use std::time::Duration;

use common::{base_env, nexbot, text};
use nexbot_tests::scripted_llm::ScriptedLlm;
use tokio::io::{AsyncBufReadExt, BufReader};

fn empty_volume(tag: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("nxd-volume-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[tokio::test]
async fn serve_init_writes_a_workspace_into_an_empty_volume_and_serves() {
    let volume = empty_volume("init");
    let config = volume.join("config.toml");
    let llm = ScriptedLlm::start(vec![]).await;
    let mut child = nexbot(&["serve", "--init"], &config, &base_env(&llm.base_url()))
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut seen = String::new();
    let ready = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(line) = stderr.next_line().await.unwrap() {
            seen.push_str(&line);
            seen.push('\n');
            if line.contains("nexbot is serving") {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(ready, Ok(true), "serve --init never became ready:\n{seen}");
    assert!(seen.contains("wrote a fresh workspace"), "{seen}");
    for name in
        ["config.toml", "IDENTITY.md", "AGENTS.md", "SOUL.md", "USER.md", "TOOLS.md", "MEMORY.md"]
    {
        assert!(volume.join(name).is_file(), "{name} missing");
    }
    assert!(volume.join("nexbot.db").is_file(), "the database lives in the volume");
    // The volume and what the daemon wrote into it are its user's alone.
    use std::os::unix::fs::PermissionsExt;
    let mode =
        |name: &str| std::fs::metadata(volume.join(name)).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(""), 0o700, "the data directory (the test made it 0755)");
    for name in ["config.toml", "nexbot.db", "nexbot.lock", "AGENTS.md"] {
        assert_eq!(mode(name) & 0o077, 0, "{name} is {:o}", mode(name));
    }
    let pid = child.id().unwrap().to_string();
    assert!(std::process::Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    let status =
        tokio::time::timeout(Duration::from_secs(30), child.wait()).await.unwrap().unwrap();
    assert!(status.success(), "{status:?}");
    std::fs::remove_dir_all(&volume).unwrap();
}

#[tokio::test]
async fn sigterm_while_starting_is_kept_and_ends_in_a_clean_shutdown() {
    let volume = empty_volume("early-term");
    let llm = ScriptedLlm::start(vec![]).await;
    let mut child =
        nexbot(&["serve", "--init"], &volume.join("config.toml"), &base_env(&llm.base_url()))
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap()).lines();
    // Logged after the signal listeners are installed, before the store, pool and bus start.
    let early = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(line) = stderr.next_line().await.unwrap() {
            if line.contains("wrote a fresh workspace") {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(early, Ok(true), "serve --init never logged the fresh workspace");
    let pid = child.id().unwrap().to_string();
    assert!(std::process::Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    let status =
        tokio::time::timeout(Duration::from_secs(30), child.wait()).await.unwrap().unwrap();
    assert!(status.success(), "killed by the signal instead of shutting down: {status:?}");
    let mut rest = String::new();
    while let Ok(Some(line)) = stderr.next_line().await {
        rest.push_str(&line);
        rest.push('\n');
    }
    assert!(rest.contains("shutting down") && rest.contains("stopped"), "{rest}");
    std::fs::remove_dir_all(&volume).unwrap();
}

#[tokio::test]
async fn serve_without_init_on_a_missing_config_fails_and_writes_nothing() {
    let volume = empty_volume("noinit");
    let llm = ScriptedLlm::start(vec![]).await;
    let out = nexbot(&["serve"], &volume.join("config.toml"), &base_env(&llm.base_url())).output();
    let out = tokio::time::timeout(Duration::from_secs(30), out).await.unwrap().unwrap();
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(stderr.contains("not found: create one with `nexbot init`"), "{stderr}");
    assert!(std::fs::read_dir(&volume).unwrap().next().is_none(), "nothing written");
    std::fs::remove_dir_all(&volume).unwrap();
}

#[tokio::test]
async fn serve_init_refuses_a_config_name_init_would_not_write() {
    let volume = empty_volume("badname");
    let llm = ScriptedLlm::start(vec![]).await;
    let out = nexbot(&["serve", "--init"], &volume.join("nexbot.toml"), &base_env(&llm.base_url()))
        .output();
    let out = tokio::time::timeout(Duration::from_secs(30), out).await.unwrap().unwrap();
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(stderr.contains("nexbot.toml is not named config.toml"), "{stderr}");
    assert!(std::fs::read_dir(&volume).unwrap().next().is_none(), "nothing written");
    std::fs::remove_dir_all(&volume).unwrap();
}

/// `make up`'s wait (docker/wait-ready.sh) on a host container in a crash loop shows the log of
/// its last run only: before, `--tail 40` printed the errors of earlier runs above the current
/// one, so the operator read an old error first. Each run here prints one line of its own.
#[test]
fn make_ups_wait_shows_only_the_last_runs_log_of_a_crash_loop() {
    if std::process::Command::new("docker")
        .arg("info")
        .output()
        .map_or(true, |o| !o.status.success())
    {
        assert!(std::env::var("CI").is_err(), "CI=true: this test needs the Docker engine");
        return;
    }
    let name = format!("nxd-crashloop-{}", std::process::id());
    let docker = |args: &[&str]| common::docker_cli(args);
    let _ = docker(&["rm", "-f", &name]);
    let script = "echo \"run $(cat /proc/sys/kernel/random/uuid)\"; echo 'error: the config is bad' >&2; sleep 1; exit 1";
    docker(&[
        "run",
        "-d",
        "--name",
        &name,
        "--restart",
        "always",
        "--network",
        "none",
        "--entrypoint",
        "/bin/sh",
        "nexbot-subagent:dev",
        "-c",
        script,
    ]);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while docker(&["inspect", "-f", "{{.RestartCount}}", &name]).trim().parse::<u32>().unwrap_or(0)
        < 2
    {
        assert!(std::time::Instant::now() < deadline, "the container did not restart twice");
        std::thread::sleep(Duration::from_millis(200));
    }
    // A stand-in for compose: `ps -q host` names the container.
    let dir = empty_volume("crashloop");
    let compose = dir.join("compose");
    std::fs::write(&compose, format!("#!/bin/sh\ndocker inspect -f '{{{{.Id}}}}' {name}\n"))
        .unwrap();
    std::fs::set_permissions(&compose, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .unwrap();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let out = std::process::Command::new(root.join("docker/wait-ready.sh"))
        .args([compose.to_str().unwrap(), "host", "30"])
        .output()
        .unwrap();
    let _ = docker(&["rm", "-f", &name]);
    let _ = std::fs::remove_dir_all(&dir);
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("make up: the host container"), "{stderr}");
    let runs = stderr.lines().filter(|l| l.starts_with("run ")).count();
    assert!(runs <= 1, "lines of earlier runs are shown: {stderr}");
    let errors = stderr.lines().filter(|l| l.contains("error: the config is bad")).count();
    assert!(errors <= 1, "errors of earlier runs are shown: {stderr}");
}
