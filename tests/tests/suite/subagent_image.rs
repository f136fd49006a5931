//! The built subagent image (`make image` → `nexbot-subagent:dev`) on the real Docker engine,
//! run the way the pool runs it: read-only root, tmpfs scratch, no capabilities, non-root,
//! talking JSON lines over attached stdio. `make test` builds the image first.

use std::process::Stdio;
use std::time::Duration;

use nexbot_tests::docker_or_skip;
use nexbot_tests::scripted_llm::{ScriptedLlm, Step};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

const IMAGE: &str = "nexbot-subagent:dev";
const WAIT: Duration = Duration::from_secs(60);
const SECRET: &str = "nxs-image-secret-5b1d2c";

/// Removes the named container (ours only) however the test ends.
struct ContainerGuard(String);

impl Drop for ContainerGuard {
    fn drop(&mut self) {
        let _ = std::process::Command::new("docker")
            .args(["rm", "-f", &self.0])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

async fn image_or_fail(docker: &bollard::Docker) {
    if let Err(err) = docker.inspect_image(IMAGE).await {
        panic!("{IMAGE} is not built ({err}); run `make image` (`make test` does it first)");
    }
}

/// `docker run -i` of the image with the pool's hardening, on `network`.
fn run_hardened(name: &str, network: &str) -> tokio::process::Child {
    tokio::process::Command::new("docker")
        .args(["run", "-i", "--rm", "--name", name, "--label", "nexbot.test=nxs-subagent-image"])
        .args(["--network", network, "--read-only", "--cap-drop", "ALL"])
        .args(["--security-opt", "no-new-privileges", "--pids-limit", "64", "--memory", "256m"])
        .args(["--tmpfs", "/workspace/scratch:rw,size=16m,uid=65532,gid=65532,mode=0700"])
        .args(["--tmpfs", "/tmp:rw,size=16m,mode=1777"])
        .arg(IMAGE)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("docker run")
}

#[tokio::test]
async fn the_image_answers_a_ping_and_exits_zero_on_eof() {
    let Some(docker) = docker_or_skip("subagent_image ping").await else { return };
    image_or_fail(&docker).await;
    let name = format!("nxs-ping-{}", std::process::id());
    let _guard = ContainerGuard(name.clone());
    let mut child = run_hardened(&name, "none");
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
    stdin.write_all(b"{\"type\":\"ping\",\"id\":\"img-1\"}\n").await.unwrap();
    let line = tokio::time::timeout(WAIT, stdout.next_line()).await.expect("pong in time").unwrap();
    let pong: Value = serde_json::from_str(&line.expect("a line")).unwrap();
    assert_eq!(pong["status"], "pong");
    assert_eq!(pong["id"], "img-1");
    assert_eq!(pong["version"], "1.0");
    drop(stdin);
    let status = tokio::time::timeout(WAIT, child.wait()).await.expect("exit in time").unwrap();
    assert_eq!(status.code(), Some(0));
}

#[tokio::test]
async fn the_image_runs_a_task_end_to_end() {
    let Some(docker) = docker_or_skip("subagent_image task").await else { return };
    image_or_fail(&docker).await;
    let bridge = docker.inspect_network("bridge", None).await.expect("inspect the bridge network");
    // The default bridge often lists only its subnet; its gateway is then the first address.
    let config = bridge.ipam.and_then(|ipam| ipam.config).unwrap_or_default();
    let gateway = config
        .iter()
        .find_map(|c| c.gateway.clone())
        .or_else(|| {
            let subnet = config.iter().find_map(|c| c.subnet.clone())?;
            let net: std::net::Ipv4Addr = subnet.split('/').next()?.parse().ok()?;
            Some(std::net::Ipv4Addr::from(u32::from(net) + 1).to_string())
        })
        .expect("bridge gateway address");
    let llm = ScriptedLlm::start_on(
        "0.0.0.0:0".parse().unwrap(),
        vec![
            Step::tool_call(
                "run_command",
                json!({"command": "id -u; printf %s \"$TOKEN\" > t.txt; wc -c < t.txt; echo tok=$TOKEN; touch /bin/x 2>&1 || echo root-is-read-only"}),
            ),
            Step::tool_call("read_file", json!({"path": "t.txt"})),
            Step::text("done in the container"),
        ],
    )
    .await;

    let name = format!("nxs-task-{}", std::process::id());
    let _guard = ContainerGuard(name.clone());
    let mut child = run_hardened(&name, "bridge");
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut stderr = BufReader::new(child.stderr.take().unwrap()).lines();
    let request = json!({
        "type": "execute", "id": "img-task", "task": "check the sandbox", "timeout": 60,
        "secrets": {"TOKEN": SECRET},
        "llm_api_key": "img-llm-key", "llm_base_url": llm.base_url_for_host(&gateway),
        "llm_model": "scripted"
    });
    stdin.write_all(format!("{request}\n").as_bytes()).await.unwrap();
    let mut lines = Vec::new();
    let done = tokio::time::timeout(WAIT, async {
        loop {
            let line = stdout.next_line().await.unwrap().expect("stdout ended early");
            lines.push(line.clone());
            let value: Value = serde_json::from_str(&line).unwrap();
            if value["status"] != "progress" {
                return value;
            }
        }
    })
    .await
    .expect("final answer in time");
    assert_eq!(done["status"], "success", "{done}");
    assert_eq!(done["result"], "done in the container");
    drop(stdin);
    let status = tokio::time::timeout(WAIT, child.wait()).await.expect("exit in time").unwrap();
    assert_eq!(status.code(), Some(0));
    let mut logs = Vec::new();
    while let Ok(Some(line)) = stderr.next_line().await {
        logs.push(line);
    }

    let chats = llm.chat_requests();
    assert_eq!(chats.len(), 3);
    let command_output = chats[1].body["messages"].to_string();
    assert!(command_output.contains("65532"), "runs as the non-root user: {command_output}");
    assert!(command_output.contains(&SECRET.len().to_string()), "{command_output}");
    assert!(command_output.contains("tok=[REDACTED:TOKEN]"), "{command_output}");
    assert!(command_output.contains("root-is-read-only"), "{command_output}");
    let file_output = chats[2].body["messages"].to_string();
    assert!(file_output.contains("[REDACTED:TOKEN]"), "{file_output}");
    for chat in &chats {
        assert!(!chat.body.to_string().contains(SECRET), "secret reached the LLM");
    }
    assert!(!lines.concat().contains(SECRET), "secret on stdout");
    assert!(!logs.concat().contains(SECRET), "secret on stderr");
    assert!(logs.iter().any(|l| l.contains("\"task_id\":\"img-task\"")), "{logs:?}");
}
