//! A root daemon's MCP `room` servers (the tests' CI, the compose service), through the real
//! daemon: they never run as uid 0, and the chat's room is handed over to the pool's user they
//! run as (`mcp-host/src/rooms.rs`).

use std::sync::Arc;
use std::time::Duration;

use nexbot_core::ChatRef;
use nexbot_tests::docker_or_skip;
use serde_json::json;

use crate::mcp::{assert_daemon_left_nothing, daemon_test};

/// Through a daemon running as root (the tests' CI, the compose service): its room server runs
/// as the pool's non-root user, never uid 0 (`docker inspect`), and the daemon hands the room
/// over to that user before the start and before each call: the server reads a received file
/// the daemon kept before it started (`0600` in a `0700` folder, root's), rewrites a file the
/// daemon's file tool wrote after it started, and what it writes is not root's on the host;
/// the daemon still reads it.
#[tokio::test]
async fn a_root_daemons_room_server_never_runs_as_root_and_is_handed_the_room() {
    use crate::common::{chat, text};
    use nexbot_tests::scripted_llm::{ScriptedLlm, Step};
    use std::os::unix::fs::MetadataExt;
    if !rustix::process::geteuid().is_root() {
        eprintln!("skipped: the daemon runs as root only when the tests do");
        return;
    }
    let Some((ws, leftovers)) = daemon_test("mcp-room-uid").await else { return };
    let docker = docker_or_skip("mcp-room-uid").await.unwrap();
    let chat_ref = ChatRef::default_console();
    let rooms = nexbot_tools::rooms::rooms_dir(&ws.dir);
    let room = nexbot_tools::rooms::ensure_room(&rooms, &chat_ref).unwrap();
    // Rooms already in use: no older shared workspace to move (which would set `chats` aside).
    std::fs::write(rooms.join(nexbot_tools::rooms::MOVED_MARKER), "").unwrap();
    // Kept the way a file from Telegram is, by root, before any server runs.
    let sent =
        nexbot_host::rooms::store_file(&room, "inbox", "sent.txt", b"sent-before-PLANTED").unwrap();
    let llm = ScriptedLlm::start(vec![
        Step::tool_call("mcp__files__read_text_file", json!({"path": format!("/room/{sent}")})),
        Step::tool_call(
            "write_file",
            json!({"path": "notes/from-the-daemon.txt", "content": "the-daemon-wrote-this"}),
        ),
        Step::tool_call(
            "mcp__files__write_file",
            json!({"path": "/room/notes/from-the-daemon.txt", "content": "rewritten-by-the-server"}),
        ),
        Step::tool_call(
            "mcp__files__write_file",
            json!({"path": "/room/from-the-server.txt", "content": "made-in-the-sandbox"}),
        ),
        Step::tool_call("read_file", json!({"path": "notes/from-the-daemon.txt"})),
        Step::text("handed over"),
    ])
    .await;
    let mut env = crate::common::base_env(&llm.base_url());
    env.extend(leftovers.env());
    env.push((
        "NEXBOT_MCP__SERVERS".into(),
        r#"[{ name = "files", command = "mcp-server-filesystem", args = ["/room"], room = "/room" }]"#.into(),
    ));
    // The daemon removes its containers when it stops: their users are read while it runs.
    let users = Arc::new(std::sync::Mutex::new(std::collections::BTreeMap::new()));
    let watching = tokio::spawn({
        let (docker, users, pool) = (docker.clone(), users.clone(), leftovers.pool.clone());
        async move {
            let labels = vec![format!("nexbot.pool={pool}"), "nexbot.mcp.server=files".into()];
            let filters = std::collections::HashMap::from([("label", labels)]);
            loop {
                let options = bollard::query_parameters::ListContainersOptionsBuilder::default()
                    .all(true)
                    .filters(&filters)
                    .build();
                for found in docker.list_containers(Some(options)).await.unwrap_or_default() {
                    let id = found.id.unwrap_or_default();
                    if let Ok(inspect) = docker.inspect_container(&id, None).await {
                        let user = inspect.config.and_then(|c| c.user).unwrap_or_default();
                        users.lock().unwrap().insert(id, user);
                    }
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    });
    let out = chat(&ws.config(), &env, &["hand it over"], Duration::from_secs(240)).await;
    watching.abort();
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert_eq!(stdout.trim(), "handed over", "{stderr}");

    let users = users.lock().unwrap().clone();
    assert!(!users.is_empty(), "the server's containers were seen");
    for (id, user) in &users {
        let uid = user.split(':').next().unwrap_or_default();
        assert!(!uid.is_empty() && uid != "0" && uid != "root", "{id} runs as {user:?}");
        assert_eq!(user, "65532:65532", "the pool's user: {users:?}");
    }
    let requests = llm.chat_requests();
    let answer = |i: usize| {
        let message = requests[i].body["messages"].as_array().unwrap().last().cloned().unwrap();
        assert_eq!(message["role"], "tool", "{message}");
        message["content"].as_str().unwrap().to_owned()
    };
    assert!(answer(1).contains("sent-before-PLANTED"), "{}\n{stderr}", answer(1));
    assert!(answer(3).contains("Successfully"), "{}\n{stderr}", answer(3));
    assert!(answer(4).contains("Successfully"), "{}\n{stderr}", answer(4));
    assert!(answer(5).contains("rewritten-by-the-server"), "{}", answer(5));
    for name in ["from-the-server.txt", "notes/from-the-daemon.txt", "notes", "inbox", ""] {
        let meta = std::fs::metadata(room.join(name)).unwrap();
        assert_ne!(meta.uid(), 0, "{name} is root's");
        assert_eq!((meta.uid(), meta.gid()), (65532, 65532), "{name}");
    }
    let made = std::fs::read_to_string(room.join("from-the-server.txt")).unwrap();
    assert_eq!(made, "made-in-the-sandbox");
    assert_daemon_left_nothing(&leftovers);
}
