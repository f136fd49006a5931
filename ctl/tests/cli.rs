//! `nexbot-ctl` as a process, without the real daemon: the exit-code contract (0 ok, 1 daemon
//! error, 2 usage, 3 not running), `--help`, the socket's resolution from the environment, and,
//! against a small fake daemon on a Unix socket, the requests sent and what is printed.

use nexbot_tests::TempDir;
use std::collections::HashMap;
use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::os::unix::net::UnixListener;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_nexbot-ctl");

/// The binary with the socket variables cleared (the developer's shell must not leak in).
fn ctl() -> Command {
    let mut command = Command::new(BIN);
    command.env_remove("NEXBOT_SOCKET").env_remove("NEXBOT_CONFIG");
    command
}

fn run(args: &[&str]) -> Output {
    ctl().args(args).output().expect("run nexbot-ctl")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Every command that talks to the daemon, with its arguments.
const DAEMON_COMMANDS: &[&[&str]] = &[
    &["status"],
    &["status", "--json"],
    &["subagents", "ps"],
    &["subagents", "ps", "--watch", "--interval", "1"],
    &["subagents", "logs", "main-0"],
    &["subagents", "logs", "main-0", "-n", "5", "--follow"],
    &["subagents", "restart", "main-0"],
    &["subagents", "kill", "main-0"],
    &["tasks"],
    &["tasks", "--limit", "3", "--chat", "telegram:42"],
    &["tasks", "show", "1a2b3c4d"],
    &["messages", "--failed", "--limit", "5"],
    &["reload"],
    &["backup", "copy.db"],
    &["metrics"],
    &["secrets", "ls"],
    &["secrets", "ls", "--chat", "telegram:42"],
    &["secrets", "rm", "GITHUB_TOKEN", "--operator"],
    &["mcp", "ls"],
    &["mcp", "tools", "everything"],
    &["mcp", "restart", "everything"],
    &["mcp", "logs", "everything", "-n", "5"],
];

#[test]
fn every_command_exits_3_when_nothing_listens() {
    let dir = TempDir::new("nbctl");
    let socket = dir.0.join("nexbot.sock");
    for args in DAEMON_COMMANDS {
        let mut all = vec!["--socket", socket.to_str().unwrap()];
        all.extend_from_slice(args);
        let out = run(&all);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(3), "{args:?}: {stderr}");
        assert!(stderr.starts_with("nexbot-ctl: error: "), "{args:?}: {stderr}");
        assert!(stderr.contains("not running"), "{args:?}: {stderr}");
        assert!(stderr.contains(socket.to_str().unwrap()), "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: one line: {stderr}");
        assert!(out.stdout.is_empty(), "{args:?}: {}", text(&out.stdout));
    }
}

#[test]
fn a_stale_socket_file_is_not_running_either() {
    let dir = TempDir::new("nbctl");
    let socket = dir.0.join("nexbot.sock");
    drop(UnixListener::bind(&socket).unwrap());
    assert!(socket.exists());
    let out = run(&["--socket", socket.to_str().unwrap(), "status"]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("not running"));
}

#[test]
fn help_lists_every_command() {
    let out = run(&["--help"]);
    assert_eq!(out.status.code(), Some(0));
    let help = text(&out.stdout);
    for command in
        ["status", "subagents", "tasks", "messages", "reload", "backup", "metrics", "secrets"]
    {
        assert!(help.contains(command), "{command} missing from:\n{help}");
    }
    for word in ["skills", "cron", "mcp", "--socket", "--json", "NEXBOT_SOCKET", "Exit codes"] {
        assert!(help.contains(word), "{word} missing from:\n{help}");
    }
    let out = run(&["subagents", "--help"]);
    assert_eq!(out.status.code(), Some(0));
    let help = text(&out.stdout);
    for command in ["ps", "logs", "restart", "kill"] {
        assert!(help.contains(command), "{command} missing from:\n{help}");
    }
    let out = run(&["tasks", "--help"]);
    assert!(text(&out.stdout).contains("show"));
    // `mcp --help` tells how a server is added: a package built into the image, an entry.
    let help = text(&run(&["mcp", "--help"]).stdout);
    for said in ["MCP_EXTRA_PKGS=", "[[mcp.servers]]", "url", "--operator --host"] {
        assert!(help.contains(said), "{said} missing from:\n{help}");
    }
}

#[test]
fn usage_errors_exit_2() {
    for args in [
        &["bogus"][..],
        &[],
        &["tasks", "--limit", "many"],
        &["subagents", "logs"],
        &["subagents", "ps", "--interval", "5"],
        &["backup"],
        &["secrets"],
        &["secrets", "set", "A"],
        &["secrets", "set", "A", "--chat", "telegram:1", "--operator"],
        &["secrets", "set", "A", "--operator", "value-as-argument"],
        &["secrets", "rm", "A"],
    ] {
        let out = run(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", text(&out.stderr));
    }
}

#[test]
fn secrets_set_refuses_an_empty_stdin_before_connecting() {
    let dir = TempDir::new("nbctl");
    let socket = dir.0.join("nexbot.sock");
    // `output()` gives the child an empty stdin: no value, so nothing to send.
    let out = run(&["--socket", socket.to_str().unwrap(), "secrets", "set", "A", "--operator"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.starts_with("nexbot-ctl: error: no value on stdin"), "{stderr}");
    assert!(stderr.contains("printf %s"), "says how to pipe it: {stderr}");
    assert!(out.stdout.is_empty());
}

#[test]
fn skills_ls_is_built_and_asks_the_daemon() {
    let dir = TempDir::new("nbctl");
    let socket = dir.0.join("nexbot.sock");
    for verb in ["ls", "list"] {
        let out = run(&["--socket", socket.to_str().unwrap(), "skills", verb]);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(3), "no daemon listens: {stderr}");
        assert!(!stderr.contains("not built"), "{stderr}");
    }
    assert_eq!(run(&["skills", "frobnicate"]).status.code(), Some(2));
}

#[test]
fn the_socket_comes_from_nexbot_socket_then_the_config_directory() {
    let dir = TempDir::new("nbctl");
    let from_env = dir.0.join("env.sock");
    let out = ctl().env("NEXBOT_SOCKET", &from_env).arg("status").output().unwrap();
    assert_eq!(out.status.code(), Some(3));
    assert!(text(&out.stderr).contains(from_env.to_str().unwrap()), "{}", text(&out.stderr));

    let out =
        ctl().env("NEXBOT_CONFIG", dir.0.join("data/config.toml")).arg("status").output().unwrap();
    let expected = dir.0.join("data/nexbot.sock");
    assert!(text(&out.stderr).contains(expected.to_str().unwrap()), "{}", text(&out.stderr));

    let out = ctl().current_dir(&dir.0).arg("status").output().unwrap();
    assert!(text(&out.stderr).contains("./nexbot.sock"), "{}", text(&out.stderr));

    let flag = dir.0.join("flag.sock");
    let out = ctl()
        .env("NEXBOT_SOCKET", &from_env)
        .args(["--socket", flag.to_str().unwrap(), "status"])
        .output()
        .unwrap();
    assert!(text(&out.stderr).contains(flag.to_str().unwrap()), "{}", text(&out.stderr));
}

/// One request the fake daemon received.
#[derive(Debug, Clone)]
struct Request {
    method: String,
    target: String,
    body: String,
}

/// A fake control API: canned answers by `"METHOD target"`, every request recorded. Good
/// enough for a client that sends one request per connection.
struct FakeDaemon {
    dir: TempDir,
    requests: Arc<Mutex<Vec<Request>>>,
}

impl FakeDaemon {
    fn start(routes: &[(&str, u16, &str)]) -> Self {
        let dir = TempDir::new("nbctl");
        let listener = UnixListener::bind(dir.0.join("nexbot.sock")).unwrap();
        let routes: HashMap<String, (u16, String)> =
            routes.iter().map(|(k, s, b)| (k.to_string(), (*s, b.to_string()))).collect();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let seen = requests.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { return };
                let request = read_request(&stream);
                let (status, body) = routes
                    .get(&format!("{} {}", request.method, request.target))
                    .cloned()
                    .unwrap_or((404, r#"{"error":"no such route"}"#.to_owned()));
                seen.lock().unwrap().push(request);
                let mut stream = stream;
                let _ = write!(
                    stream,
                    "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\n\
                     content-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
        });
        Self { dir, requests }
    }

    fn socket(&self) -> String {
        self.dir.0.join("nexbot.sock").to_str().unwrap().to_owned()
    }

    fn run(&self, args: &[&str]) -> Output {
        self.run_in(&self.dir.0, args)
    }

    fn run_in(&self, cwd: &Path, args: &[&str]) -> Output {
        let mut all = vec!["--socket".to_owned(), self.socket()];
        all.extend(args.iter().map(|a| a.to_string()));
        ctl().current_dir(cwd).args(all).output().unwrap()
    }

    fn requests(&self) -> Vec<Request> {
        self.requests.lock().unwrap().clone()
    }
}

fn read_request(stream: &std::os::unix::net::UnixStream) -> Request {
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or_default().to_owned();
    let target = parts.next().unwrap_or_default().to_owned();
    let mut length = 0;
    loop {
        let mut header = String::new();
        reader.read_line(&mut header).unwrap();
        if header.trim().is_empty() {
            break;
        }
        if let Some((name, value)) = header.split_once(':') {
            if name.eq_ignore_ascii_case("content-length") {
                length = value.trim().parse().unwrap();
            }
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).unwrap();
    Request { method, target, body: String::from_utf8(body).unwrap() }
}

#[test]
fn an_empty_listing_prints_its_header_or_the_daemons_json() {
    let daemon = FakeDaemon::start(&[("GET /v1/subagents", 200, r#"{"subagents":[]}"#)]);
    let out = daemon.run(&["subagents", "ps"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        "ID  CONTAINER  STATE  ROOM  UPTIME  TASKS  CURRENT  PING  RESTARTS  MEMORY\n"
    );
    let out = daemon.run(&["subagents", "ps", "--json"]);
    assert_eq!(text(&out.stdout), "{\n  \"subagents\": []\n}\n");
}

#[test]
fn a_daemon_error_exits_1_with_the_daemons_message() {
    let daemon = FakeDaemon::start(&[(
        "GET /v1/subagents",
        409,
        r#"{"error":"delegation is off: subagent.enabled is false"}"#,
    )]);
    let out = daemon.run(&["subagents", "ps"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stderr),
        "nexbot-ctl: error: delegation is off: subagent.enabled is false\n"
    );
}

#[test]
fn queries_carry_the_flags() {
    let daemon = FakeDaemon::start(&[
        ("GET /v1/tasks?limit=5&chat=console:a%20b", 200, r#"{"tasks":[]}"#),
        ("GET /v1/messages?limit=3&failed=true", 200, r#"{"messages":[]}"#),
        ("GET /v1/subagents/main-0/logs?n=2", 200, r#"{"id":"main-0","lines":["plain"]}"#),
    ]);
    let out = daemon.run(&["tasks", "--limit", "5", "--chat", "console:a b"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let out = daemon.run(&["messages", "--failed", "-n", "3"]);
    assert_eq!(text(&out.stdout), "UPDATE  CHAT  USER  STATE  DETAIL  TEXT\n");
    let out = daemon.run(&["subagents", "logs", "main-0", "-n", "2"]);
    assert_eq!(text(&out.stdout), "plain\n");
}

#[test]
fn backup_sends_an_absolute_path_and_prints_the_report() {
    let daemon = FakeDaemon::start(&[(
        "POST /v1/backup",
        200,
        r#"{"path":"/somewhere/copy.db","bytes":4096}"#,
    )]);
    let cwd = TempDir::new("nbctl");
    let out = daemon.run_in(&cwd.0, &["backup", "copy.db"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "backup written to /somewhere/copy.db (4.0 KB, 4096 bytes)\n");
    let sent: serde_json::Value = serde_json::from_str(&daemon.requests()[0].body).unwrap();
    let cwd = std::fs::canonicalize(&cwd.0).unwrap();
    let sent = std::fs::canonicalize(Path::new(sent["path"].as_str().unwrap()).parent().unwrap())
        .unwrap()
        .join("copy.db");
    assert_eq!(sent, cwd.join("copy.db"));
}

#[test]
fn restart_prints_the_daemons_sentence() {
    let daemon = FakeDaemon::start(&[(
        "POST /v1/subagents/main-0/restart",
        200,
        r#"{"message":"main-0: replacing container 3f2a1b0c9d8e"}"#,
    )]);
    let out = daemon.run(&["subagents", "restart", "main-0"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "main-0: replacing container 3f2a1b0c9d8e\n");
    assert_eq!(daemon.requests()[0].method, "POST");
}

#[test]
fn mcp_commands_ask_for_the_named_server_and_an_unknown_one_exits_1_with_the_daemons_words() {
    let daemon = FakeDaemon::start(&[
        ("GET /v1/mcp/everything/logs?n=2", 200, r#"{"id":"everything","lines":["Starting"]}"#),
        ("POST /v1/mcp/everything/restart", 200, r#"{"message":"restarted: container c2"}"#),
        ("GET /v1/mcp/nope/tools", 404, r#"{"error":"no MCP server is named \"nope\""}"#),
    ]);
    let out = daemon.run(&["mcp", "logs", "everything", "-n", "2"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "Starting\n");
    let out = daemon.run(&["mcp", "restart", "everything"]);
    assert_eq!(text(&out.stdout), "restarted: container c2\n");
    assert_eq!(daemon.requests()[1].method, "POST");
    let out = daemon.run(&["mcp", "tools", "nope"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(text(&out.stderr), "nexbot-ctl: error: no MCP server is named \"nope\"\n");
}

#[test]
fn tasks_show_finds_a_task_by_its_short_id() {
    let id = "1a2b3c4d-0000-4000-8000-000000000000";
    let row = format!(
        r#"{{"id":"{id}","chat":"telegram:42","status":"success","started_at":0,"duration_ms":5,"prompt_tokens":1,"completion_tokens":2,"container":null,"error":null}}"#
    );
    let detail = format!(r#"{}, "task":"do it","egress":null}}"#, row.trim_end_matches('}'));
    let daemon = FakeDaemon::start(&[
        ("GET /v1/tasks/1a2b3c4d", 404, r#"{"error":"no such task"}"#),
        ("GET /v1/tasks?limit=1000", 200, &format!(r#"{{"tasks":[{row}]}}"#)),
        (&format!("GET /v1/tasks/{id}"), 200, &detail),
        ("GET /v1/tasks/ffff", 404, r#"{"error":"no such task"}"#),
    ]);
    let out = daemon.run(&["tasks", "show", "1a2b3c4d"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.contains(&format!("id:         {id}\n")), "{stdout}");
    assert!(stdout.contains("task:\n  do it\n"), "{stdout}");
    let out = daemon.run(&["tasks", "show", "ffff"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(text(&out.stderr), "nexbot-ctl: error: no such task\n");
}

#[test]
fn metrics_are_printed_as_they_come() {
    let daemon = FakeDaemon::start(&[("GET /metrics", 200, "nexbot_up 1\n")]);
    let out = daemon.run(&["metrics"]);
    assert_eq!(text(&out.stdout), "nexbot_up 1\n");
}

#[test]
fn watch_without_a_terminal_separates_refreshes_with_a_blank_line() {
    let daemon = FakeDaemon::start(&[("GET /v1/subagents", 200, r#"{"subagents":[]}"#)]);
    let mut child = ctl()
        .args(["--socket", &daemon.socket(), "subagents", "ps", "--watch", "--interval", "1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1600));
    child.kill().unwrap();
    let out = child.wait_with_output().unwrap();
    let stdout = text(&out.stdout);
    let header = "ID  CONTAINER  STATE  ROOM  UPTIME  TASKS  CURRENT  PING  RESTARTS  MEMORY\n";
    assert!(stdout.starts_with(&format!("{header}\n{header}")), "{stdout:?}");
    assert!(!stdout.contains('\x1b'), "no escapes without a terminal: {stdout:?}");
}

#[test]
fn cron_asks_the_daemon_and_checks_its_arguments_first() {
    let dir = TempDir::new("nbctl");
    let socket = dir.0.join("nexbot.sock");
    let s = socket.to_str().unwrap();
    // Built: it needs the daemon (exit 3 when none runs), not "not built".
    for args in [&["cron", "ls"][..], &["cron", "runs", "--job", "1"], &["cron", "rm", "4"]] {
        let mut all = vec!["--socket", s];
        all.extend_from_slice(args);
        let out = run(&all);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(3), "{args:?}: {stderr}");
        assert!(!stderr.contains("not built"), "{stderr}");
    }
    for args in [
        &["cron"][..],
        &["cron", "add", "--chat", "console:x", "no time given"],
        &["cron", "add", "--chat", "console:x", "--cron", "* * * * * *", "--at", "in 1m", "t"],
        &["cron", "add", "--chat", "console:x", "--at", "in 1m", "--missed", "sometimes", "t"],
        &["cron", "add", "--chat", "console:x", "--at", "in 1m"],
        &["cron", "rm", "one"],
    ] {
        let mut all = vec!["--socket", s];
        all.extend_from_slice(args);
        let out = run(&all);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", text(&out.stderr));
    }
}

#[test]
fn secrets_set_sends_the_piped_value_in_the_body_and_never_prints_it() {
    const VALUE: &str = "piped-value-4f1c9a77";
    let daemon = FakeDaemon::start(&[
        (
            "POST /v1/secrets",
            200,
            r#"{"scope":"telegram:42","name":"GH","mode":"proxy","hosts":["api.github.com"],"updated_at":0}"#,
        ),
        (
            "GET /v1/secrets?scope=operator",
            200,
            r#"{"vault":"vault on, 0 stored","vault_on":true,"secrets":[]}"#,
        ),
    ]);
    let mut child = ctl()
        .args(["--socket", &daemon.socket(), "secrets", "set", "GH", "--chat", "telegram:42"])
        .args(["--host", "api.github.com", "--mode", "proxy"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(format!("{VALUE}\n").as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(stdout, "secret GH stored in telegram:42 (proxy mode, for api.github.com)\n");
    assert!(!stdout.contains(VALUE) && !stderr.contains(VALUE));
    let request = &daemon.requests()[0];
    assert_eq!((request.method.as_str(), request.target.as_str()), ("POST", "/v1/secrets"));
    let body: serde_json::Value = serde_json::from_str(&request.body).unwrap();
    assert_eq!(
        body,
        serde_json::json!({"scope": "telegram:42", "name": "GH", "value": VALUE,
                           "hosts": ["api.github.com"], "mode": "proxy"})
    );

    let out = daemon.run(&["secrets", "ls", "--operator"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        "vault: vault on, 0 stored\nSCOPE  NAME  MODE  HOSTS  UPDATED  USABLE\n"
    );
}
