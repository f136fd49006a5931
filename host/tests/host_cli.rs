//! The `nexbot` command line: `init`, precise config errors, `doctor`, and `serve` shutting
//! down cleanly on SIGTERM.

mod common;

use std::process::Stdio;
use std::time::Duration;

use common::{base_env, nexbot, text, TempWorkspace, NEXBOT};
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
    }
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
