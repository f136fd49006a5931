//! Shared helpers for the end-to-end tests in `tests/tests/`: reaching the Docker engine (and
//! failing loudly under `CI=true` when it is missing), building throwaway images offline, and
//! the scripted OpenAI-compatible server ([`scripted_llm`]) that stands in for a model, the
//! third-party mock LLMock run as a child process ([`llmock`]), a started egress listener
//! with local servers to be the "internet" ([`egress`]), the Telegram Bot API fixture that
//! plays Telegram and its users ([`telegram`]), the shared parts of the `make bench`
//! benchmarks ([`bench`]); [`container`] is a container a test starts for itself, removed
//! however the test ends; [`daemon`] is the one harness for `nexbot init` and `nexbot serve`;
//! [`browser`] is a headless Chromium for the dashboard's tests; [`dns`] is a recording name
//! server and a `resolv.conf` of a process's own, for what a daemon looks up; [`disk`] is a
//! small tmpfs to fill, [`engine`] a Docker engine of the test's own to stop and restart, and
//! [`soak`] the soak run with faults (`make soak`).

pub mod bench;
pub mod browser;
pub mod container;
pub mod daemon;
pub mod disk;
pub mod dns;
pub mod egress;
pub mod engine;
pub mod gvisor;
pub mod llmock;
pub mod ogg;
pub mod pdf;
pub mod remote;
pub mod scripted_llm;
pub mod site;
pub mod soak;
pub mod telegram;

use bollard::Docker;

/// A loopback address no one listens on now (the OS's pick of a free port, released at
/// once): for a server a test starts later, or for an address that must refuse.
pub fn free_loopback_addr() -> std::net::SocketAddr {
    let probe = std::net::TcpListener::bind("127.0.0.1:0").expect("a free loopback port");
    probe.local_addr().expect("its address")
}

/// Connects to the local Docker engine and checks that it answers.
///
/// Under `CI=true` a missing engine is a test failure: the Docker tests are the point of CI.
/// Elsewhere the caller gets `None` and should return early; a loud message says the test
/// did not really run.
pub async fn docker_or_skip(test: &str) -> Option<Docker> {
    let reason = match Docker::connect_with_local_defaults() {
        Ok(docker) => match docker.ping().await {
            Ok(_) => return Some(docker),
            Err(err) => format!("the Docker engine does not answer: {err}"),
        },
        Err(err) => format!("cannot connect to Docker: {err}"),
    };
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{test}: Docker is required under CI=true, but {reason}");
    }
    eprintln!("\n!!! SKIPPED {test}: Docker is required and {reason} !!!\n");
    None
}

/// The variable that puts every sandbox a test makes behind another wall: the OCI runtime the
/// pools of the Docker suite and of the daemons the tests start run under (`runsc` in CI's
/// gVisor leg, `.ci/run`). Unset: the engine's default (runc).
pub const TEST_RUNTIME_ENV: &str = "NEXBOT_TEST_RUNTIME";

/// The runtime [`TEST_RUNTIME_ENV`] names, if any: the same tests run on each wall.
pub fn test_runtime() -> Option<String> {
    std::env::var(TEST_RUNTIME_ENV).ok().filter(|r| !r.trim().is_empty())
}

/// The runtime the engine reports the tests' containers running under: [`test_runtime`], or
/// runc (the engine's default here).
pub fn expected_runtime() -> String {
    test_runtime().unwrap_or_else(|| "runc".to_owned())
}

/// The pids limit the engine should show on a container of a pool whose `pids_limit` is
/// `limit`: itself under runc; under gVisor room for its kernel (64) and about twelve host
/// threads per process of the task (docs/runtimes.md, measured), written out here rather
/// than asked of the code under test.
pub fn expected_pids_limit(limit: i64) -> i64 {
    if expected_runtime() == "runsc" {
        64 + 12 * limit
    } else {
        limit
    }
}

/// Packs `files` (path in the archive, contents, mode) into a tar stream, the form the
/// Docker build API takes its context in.
pub fn tar_context(files: &[(&str, &[u8], u32)]) -> std::io::Result<Vec<u8>> {
    let mut builder = tar::Builder::new(Vec::new());
    for (path, contents, mode) in files {
        let mut header = tar::Header::new_gnu();
        header.set_size(contents.len() as u64);
        header.set_mode(*mode);
        header.set_cksum();
        builder.append_data(&mut header, path, *contents)?;
    }
    builder.into_inner()
}

/// Runs `argv` inside container `id` (as the container's user) and returns its exit code
/// (-1 when the engine reports none) and combined stdout/stderr. Panics if it takes longer
/// than `limit`, so a stuck exec fails the test instead of hanging it.
pub async fn exec_in(
    docker: &Docker,
    id: &str,
    argv: &[&str],
    limit: std::time::Duration,
) -> (i64, String) {
    use bollard::exec::StartExecResults;
    use bollard::models::ExecConfig;
    use futures_util::StreamExt;

    let config = ExecConfig {
        attach_stdout: Some(true),
        attach_stderr: Some(true),
        cmd: Some(argv.iter().map(|a| a.to_string()).collect()),
        ..Default::default()
    };
    let run = async {
        let created = docker.create_exec(id, config).await.expect("create exec");
        let mut output = String::new();
        if let StartExecResults::Attached { output: mut stream, .. } =
            docker.start_exec(&created.id, None).await.expect("start exec")
        {
            while let Some(chunk) = stream.next().await {
                output.push_str(&chunk.expect("exec output").to_string());
            }
        }
        let code = docker.inspect_exec(&created.id).await.expect("inspect exec").exit_code;
        (code.unwrap_or(-1), output)
    };
    tokio::time::timeout(limit, run).await.expect("exec finished in time")
}

/// Collects everything written to it (a `tracing` subscriber's output, say), for a test to
/// hunt through. Clones share one buffer.
#[derive(Debug, Clone, Default)]
pub struct LogCapture(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl LogCapture {
    /// A subscriber that writes every event, at TRACE and plain (no colours), here.
    pub fn subscriber(&self) -> impl tracing::Subscriber + Send + Sync {
        let writer = self.clone();
        tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .finish()
    }

    /// What was written so far, as text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap_or_else(|p| p.into_inner())).into_owned()
    }
}

impl std::io::Write for LogCapture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A fresh, empty directory for one test, removed however the test ends. Its name is short
/// (`<tmp>/<prefix>-<pid>-<n>`): Unix socket paths inside it must stay under ~100 bytes.
#[derive(Debug)]
pub struct TempDir(pub std::path::PathBuf);

impl TempDir {
    pub fn new(prefix: &str) -> Self {
        static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("{prefix}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("a temporary directory");
        Self(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
