//! The built subagent image (`make image` → `nexbot-subagent:dev`) on the real Docker engine,
//! run the way the pool runs it: read-only root, tmpfs scratch, no capabilities, non-root,
//! talking JSON lines over attached stdio. `make test` builds the image first. The containers
//! are [`OwnedContainer`]s, so they are removed however a test ends.

use std::collections::HashMap;
use std::pin::Pin;
use std::time::Duration;

use bollard::query_parameters::AttachContainerOptionsBuilder;
use nexbot_tests::container::{ContainerSpec, OwnedContainer};
use nexbot_tests::docker_or_skip;
use nexbot_tests::scripted_llm::{ScriptedLlm, Step};
use serde_json::{json, Value};
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWrite, AsyncWriteExt, Lines};

const WAIT: Duration = Duration::from_secs(60);
const SECRET: &str = "nxs-image-secret-5b1d2c";
/// The line that ends the subagent's input (see [`run_hardened`]).
const EOF: &[u8] = b"EOF\n";

async fn image_or_fail(docker: &bollard::Docker) {
    let image = crate::pool_common::image();
    if let Err(err) = docker.inspect_image(&image).await {
        panic!("{image} is not built ({err}); run `make image` (`make test` does it first)");
    }
}

/// A running container of the image, its attached stdin and its output.
struct Hardened {
    container: OwnedContainer,
    stdin: Pin<Box<dyn AsyncWrite + Send>>,
    stdout: Lines<Pin<Box<dyn AsyncBufRead + Send>>>,
    stderr: Lines<Pin<Box<dyn AsyncBufRead + Send>>>,
}

impl Hardened {
    /// Waits for the container to exit and returns its exit code.
    async fn exit_code(&self) -> i64 {
        self.container.wait_exit(WAIT).await
    }
}

/// The image with the pool's hardening, on `network`. The image's busybox `sh` stands in front
/// of the subagent and copies the attached stdin to it line by line until the line `EOF`,
/// where the subagent's input ends: that is how these tests send end-of-file while their
/// attach stream stays open.
async fn run_hardened(docker: &bollard::Docker, name: &str, network: &str) -> Hardened {
    let relay = r#"while IFS= read -r line; do [ "$line" = EOF ] && break; printf '%s\n' "$line"; done | exec /bin/nexbot-subagent"#;
    let mut spec = ContainerSpec::new(
        &crate::pool_common::image(),
        network,
        ("nexbot.test", "nxs-subagent-image"),
    )
    .run(&["/bin/sh", "-c", relay]);
    spec.body.open_stdin = Some(true);
    let host = spec.host();
    host.readonly_rootfs = Some(true);
    host.cap_drop = Some(vec!["ALL".into()]);
    host.security_opt = Some(vec!["no-new-privileges".into()]);
    host.pids_limit = Some(64);
    host.memory = Some(256 << 20);
    host.tmpfs = Some(HashMap::from([
        ("/workspace/scratch".into(), "rw,size=16m,uid=65532,gid=65532,mode=0700".into()),
        ("/tmp".into(), "rw,size=16m,mode=1777".into()),
    ]));
    let container = OwnedContainer::start(docker, name, spec).await.expect("start the image");
    let attach = AttachContainerOptionsBuilder::default().stdin(true).stream(true).build();
    let attached =
        docker.attach_container(container.id(), Some(attach)).await.expect("attach stdin");
    let stdout = container.follow(true).lines();
    let stderr = container.follow(false).lines();
    Hardened { container, stdin: attached.input, stdout, stderr }
}

#[tokio::test]
async fn the_image_answers_a_ping_and_exits_zero_on_eof() {
    let Some(docker) = docker_or_skip("subagent_image ping").await else { return };
    image_or_fail(&docker).await;
    let name = format!("nxs-ping-{}", std::process::id());
    let mut child = run_hardened(&docker, &name, "none").await;
    let (stdin, stdout) = (&mut child.stdin, &mut child.stdout);
    stdin.write_all(b"{\"type\":\"ping\",\"id\":\"img-1\"}\n").await.unwrap();
    let line = tokio::time::timeout(WAIT, stdout.next_line()).await.expect("pong in time").unwrap();
    let pong: Value = serde_json::from_str(&line.expect("a line")).unwrap();
    assert_eq!(pong["status"], "pong");
    assert_eq!(pong["id"], "img-1");
    assert_eq!(pong["version"], "1.0");
    stdin.write_all(EOF).await.unwrap();
    assert_eq!(child.exit_code().await, 0);
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
    let mut child = run_hardened(&docker, &name, "bridge").await;
    let (stdin, stdout) = (&mut child.stdin, &mut child.stdout);
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
    stdin.write_all(EOF).await.unwrap();
    assert_eq!(child.exit_code().await, 0);
    let mut logs = Vec::new();
    while let Ok(Some(line)) = child.stderr.next_line().await {
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
