//! Files into a task's scratch folder and back (`docs/protocol-files.md#files`), over pipes: the
//! real binary, the scripted model, real commands.

use crate::common;

use base64::Engine as _;
use common::Subagent;
use nexbot_protocol::{Request, TaskFile};
use nexbot_tests::scripted_llm::{ScriptedLlm, Step};
use serde_json::{json, Value};

const TOKEN: &str = "tok-5e4d3c2b1a09-file-secret";

fn execute(id: &str, llm: &ScriptedLlm) -> Value {
    json!({
        "version": "1.0", "type": "execute", "id": id, "task": "work on the files", "timeout": 60,
        "llm_api_key": "sk-files-key-0123456789", "llm_base_url": llm.base_url(),
        "llm_model": "scripted"
    })
}

/// Sends `file` as `put_file` lines for task `id`.
async fn put(sub: &mut Subagent, id: &str, file: &TaskFile) {
    for (offset, data) in file.chunks() {
        let line = Request::put_file(id, &file.name, offset, file.bytes.len() as u64, data);
        sub.send(&serde_json::to_value(&line).unwrap()).await;
    }
}

/// The tool results the model saw, in order (the last request holds them all).
fn tool_texts(llm: &ScriptedLlm) -> Vec<String> {
    let requests = llm.chat_requests();
    let last = requests.last().expect("the model was called");
    last.body["messages"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap_or("").to_owned())
        .collect()
}

/// The returned files among `lines`, put back together by name.
fn returned(lines: &[Value]) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<(String, Vec<u8>)> = Vec::new();
    for line in lines.iter().filter(|l| l["status"] == "file") {
        let name = line["name"].as_str().unwrap().to_owned();
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(line["data"].as_str().unwrap())
            .unwrap();
        match files.iter_mut().find(|(n, _)| *n == name) {
            Some((_, all)) => {
                assert_eq!(line["offset"].as_u64().unwrap(), all.len() as u64);
                all.extend(bytes);
            }
            None => files.push((name, bytes)),
        }
    }
    files
}

#[tokio::test]
async fn files_put_for_a_task_are_in_its_scratch_and_the_files_it_returns_come_back_whole() {
    // Three chunks and a bit, every byte value: nothing is lost or changed on the way.
    let data = TaskFile {
        name: "data.bin".into(),
        bytes: (0..(3 * nexbot_protocol::FILE_CHUNK_BYTES + 1000))
            .map(|i| (i * 7 % 256) as u8)
            .collect(),
    };
    let csv =
        TaskFile { name: "sales.csv".into(), bytes: b"month,amount\njan,3\nfeb,5\n".to_vec() };
    let llm = ScriptedLlm::start(vec![
        Step::tool_call(
            "run_command",
            json!({"command": "cmp data.bin data.bin && wc -c < data.bin && cat sales.csv && \
                               cat data.bin sales.csv > joined.bin && echo '<svg/>' > chart.svg"}),
        ),
        Step::tool_call("return_file", json!({"path": "joined.bin"})),
        Step::tool_call("return_file", json!({"path": "./chart.svg"})),
        Step::text("Joined and charted."),
    ])
    .await;
    let mut sub = Subagent::spawn(&[]);
    put(&mut sub, "t-files", &data).await;
    put(&mut sub, "t-files", &csv).await;
    let mut request = execute("t-files", &llm);
    request["files"] = json!(["data.bin", "sales.csv"]);
    request["return_files"] = json!(true);
    sub.send(&request).await;
    let (done, before) = sub.recv_final().await;
    assert_eq!(done["status"], "success", "{done}");
    assert_eq!(done["files"], json!(["joined.bin", "chart.svg"]));

    // The model was told what it has, and its command read the files whole.
    let first = &llm.chat_requests()[0].body;
    let told = nexbot_tests::scripted_llm::last_user(first);
    assert!(told.contains("data.bin (1.5 MB)") && told.contains("sales.csv (25 B)"), "{told}");
    let offered: Vec<&str> = first["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["function"]["name"].as_str())
        .collect();
    assert!(offered.contains(&"return_file"), "{offered:?}");
    let texts = tool_texts(&llm).join("\n");
    assert!(texts.contains(&(data.bytes.len()).to_string()) && texts.contains("feb,5"), "{texts}");

    // What came back is exactly what the task made, and it came before the answer.
    let mut joined = data.bytes.clone();
    joined.extend_from_slice(&csv.bytes);
    let files = returned(&before);
    assert_eq!(files.len(), 2);
    assert_eq!(files[0].0, "joined.bin");
    assert!(files[0].1 == joined, "joined.bin came back changed");
    assert_eq!(files[1], ("chart.svg".to_owned(), b"<svg/>\n".to_vec()));
    for line in &sub.stdout_lines {
        assert!(line.len() < 16 * 1024 * 1024);
    }
}

#[tokio::test]
async fn a_file_holding_a_secret_or_outside_the_scratch_folder_is_never_returned() {
    let llm = ScriptedLlm::start(vec![
        Step::tool_call(
            "run_command",
            json!({"command": "printf 'key=%s\\n' \"$TOKEN\" > leak.txt && \
                               printf %s \"$TOKEN\" | base64 > leak64.txt && \
                               ln -s /etc/passwd link.txt && echo fine > ok.txt"}),
        ),
        Step::tool_call("return_file", json!({"path": "leak.txt"})),
        Step::tool_call("return_file", json!({"path": "leak64.txt"})),
        Step::tool_call("return_file", json!({"path": "../../etc/passwd"})),
        Step::tool_call("return_file", json!({"path": "/etc/passwd"})),
        Step::tool_call("return_file", json!({"path": "link.txt"})),
        Step::tool_call("return_file", json!({"path": "."})),
        Step::tool_call("return_file", json!({"path": "ok.txt"})),
        Step::tool_call("return_file", json!({"path": "ok.txt"})),
        Step::text("Tried."),
    ])
    .await;
    let mut sub = Subagent::spawn(&[]);
    let mut request = execute("t-leak", &llm);
    request["secrets"] = json!({"TOKEN": TOKEN});
    request["return_files"] = json!(true);
    sub.send(&request).await;
    let (done, before) = sub.recv_final().await;
    assert_eq!(done["status"], "success", "{done}");
    assert_eq!(done["files"], json!(["ok.txt"]));
    assert_eq!(returned(&before), vec![("ok.txt".to_owned(), b"fine\n".to_vec())]);
    let texts = tool_texts(&llm);
    let results: Vec<&String> = texts.iter().skip(1).collect();
    assert!(results[0].contains("holds one of this task's secrets"), "{}", results[0]);
    assert!(results[1].contains("holds one of this task's secrets"), "{}", results[1]);
    assert!(results[2].contains("'..'"), "{}", results[2]);
    assert!(results[3].contains("outside the scratch dir"), "{}", results[3]);
    assert!(results[4].contains("through a symlink"), "{}", results[4]);
    assert!(results[5].contains("not a regular file"), "{}", results[5]);
    assert!(results[6].contains("will be returned"), "{}", results[6]);
    assert!(results[7].contains("already returned"), "{}", results[7]);
    sub.close_stdin();
    sub.wait_exit().await;
    let b64 = base64::engine::general_purpose::STANDARD.encode(TOKEN);
    let stdout = sub.stdout_lines.join("\n");
    assert!(!stdout.contains(TOKEN) && !stdout.contains(&b64), "a secret on stdout");
}

#[tokio::test]
async fn files_put_for_another_task_or_broken_on_the_way_never_reach_a_task() {
    let llm = ScriptedLlm::start(vec![
        Step::tool_call("run_command", json!({"command": "ls -A; echo listed"})),
        Step::text("Looked."),
    ])
    .await;
    let mut sub = Subagent::spawn(&[]);
    let other = TaskFile { name: "other-chat.txt".into(), bytes: b"not yours".to_vec() };
    put(&mut sub, "t-never-started", &other).await;
    // Lines are handled in order: once the pong is here, the file is placed.
    sub.send(&json!({"type": "ping", "id": "p1"})).await;
    assert_eq!(sub.recv().await["status"], "pong");
    assert!(sub.scratch.join("other-chat.txt").exists(), "the put file was not placed");

    // Another task starts: the file put for the one that never started is gone first.
    sub.send(&execute("t-next", &llm)).await;
    let (done, _) = sub.recv_final().await;
    assert_eq!(done["status"], "success", "{done}");
    let listing = tool_texts(&llm).join("\n");
    assert!(listing.contains("listed") && !listing.contains("other-chat"), "{listing}");
    assert!(!sub.scratch.join("other-chat.txt").exists());
    // No return_file without the host asking for files back.
    let offered = llm.chat_requests()[0].body["tools"].to_string();
    assert!(!offered.contains("return_file"), "{offered}");

    // A chunk out of order fails the putting; the task naming the file is refused, and what
    // arrived of it is removed.
    let good = TaskFile { name: "a.txt".into(), bytes: b"whole".to_vec() };
    put(&mut sub, "t-broken", &good).await;
    let b64 = base64::engine::general_purpose::STANDARD.encode(b"late");
    let skip = Request::put_file("t-broken", "b.txt", 10, 20, b64);
    sub.send(&serde_json::to_value(&skip).unwrap()).await;
    let mut request = execute("t-broken", &llm);
    request["files"] = json!(["a.txt", "b.txt"]);
    sub.send(&request).await;
    let (refused, _) = sub.recv_final().await;
    assert_eq!(refused["status"], "error");
    assert!(refused["error"].as_str().unwrap().contains("offset 10"), "{refused}");
    assert!(!sub.scratch.join("a.txt").exists(), "a refused task's file was left");

    // Named but never put; a name with a path in it; a file larger than a task may take.
    let mut request = execute("t-missing", &llm);
    request["files"] = json!(["ghost.pdf"]);
    sub.send(&request).await;
    let (refused, _) = sub.recv_final().await;
    assert!(refused["error"].as_str().unwrap().contains("never put"), "{refused}");
    for (name, size, expect) in [
        ("../escape.txt", 4, "not a plain file name"),
        ("x\u{202E}fdp.exe", 4, "not a plain file name"),
    ] {
        let line = json!({"type": "put_file", "id": "t-evil", "name": name, "offset": 0,
                          "size": size, "data": "AAAA"});
        sub.send(&line).await;
        let answer = sub.recv().await;
        assert_eq!(answer["status"], "error");
        assert!(answer["error"].as_str().unwrap().contains(expect), "{answer}");
    }
    let huge = Request::put_file(
        "t-huge",
        "big.bin",
        0,
        nexbot_protocol::MAX_FILE_BYTES + 1,
        String::new(),
    );
    sub.send(&serde_json::to_value(&huge).unwrap()).await;
    let mut request = execute("t-huge", &llm);
    request["files"] = json!(["big.bin"]);
    sub.send(&request).await;
    let (refused, _) = sub.recv_final().await;
    assert!(refused["error"].as_str().unwrap().contains("at most 20971520"), "{refused}");
    let left: Vec<_> = std::fs::read_dir(&sub.scratch).unwrap().collect();
    assert!(left.is_empty(), "files left in scratch: {left:?}");
}
