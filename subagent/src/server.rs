//! The protocol server: reads request lines from stdin, answers pings and bad requests at
//! once, and runs at most one task at a time on its own tokio task so that the reader never
//! waits behind it (a ping or a cancel is answered while a task runs).
//!
//! Shutdown follows `docs/protocol-limits.md#lifecycle`: on EOF the task in flight is allowed to
//! finish (its soft timeout bounds that); on SIGTERM/SIGINT it is cancelled. Either way it is
//! answered before the process exits 0.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use nexbot_protocol::request::unix_now;
use nexbot_protocol::{
    Assembly, Capabilities, JsonLinesCodec, LineError, Redactor, Request, RequestType, Response,
    Scrub, SecretMap, VersionStatus, DIRECT_TOOLS, PROTOCOL_VERSION,
};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::task::JoinHandle;
use tokio_util::codec::FramedRead;
use tracing::{debug, error, info, warn, Instrument};

use crate::agent;
use crate::llm::LlmState;
use crate::output::Output;
use crate::redaction::Redaction;
use crate::scrub;
use crate::task::{self, Cancel, TaskSpec};
use crate::tools;

/// How long a cancelled task may take to answer before it is aborted and answered for.
const CANCEL_GRACE: Duration = Duration::from_secs(5);

/// Serves the protocol on the process's stdin/stdout until EOF or SIGTERM/SIGINT.
pub async fn run(redaction: Arc<Redaction>) -> anyhow::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    // After the handlers, so a `docker stop` that comes while this runs is not lost (as pid 1
    // the subagent ignores a signal it has no handler for), and before the first ping is
    // answered: a blank container's first task starts warm.
    let _ = crate::warm::prepare();
    let shutdown = async move {
        tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = int.recv() => "SIGINT",
        }
    };
    // As the container's pid 1 (no init), orphans of a running task's commands are this
    // program's children: reap them as they exit rather than only in the scrub.
    if scrub::in_sandbox() && rustix::process::getpid().is_init() {
        let mut child = signal(SignalKind::child())?;
        tokio::spawn(async move {
            while child.recv().await.is_some() {
                scrub::reap_orphans();
            }
        });
    }
    let (input, output) = stdio();
    serve(input, output, redaction, shutdown).await;
    Ok(())
}

/// The protocol's stdin and stdout. When they are pipes (as the engine's attach and the
/// tests make them), the runtime reads and writes them itself, woken by epoll; tokio's own
/// `stdin()`/`stdout()` do every read and write on a blocking thread, so each ping crossed
/// threads three times (a read handed back, a write handed over and back). Anything else (a
/// terminal, a file) keeps tokio's. Nothing else uses fds 0 and 1: commands get their own
/// (`tools/command.rs`), so making the pipes non-blocking affects no one else.
fn stdio() -> (Box<dyn AsyncRead + Unpin + Send>, Box<dyn AsyncWrite + Unpin + Send>) {
    use std::os::fd::AsFd;
    use tokio::net::unix::pipe;
    let input = std::io::stdin()
        .as_fd()
        .try_clone_to_owned()
        .and_then(pipe::Receiver::from_owned_fd)
        .map(|pipe| Box::new(pipe) as Box<dyn AsyncRead + Unpin + Send>)
        .unwrap_or_else(|_| Box::new(tokio::io::stdin()));
    let output = std::io::stdout()
        .as_fd()
        .try_clone_to_owned()
        .and_then(pipe::Sender::from_owned_fd)
        .map(|pipe| Box::new(pipe) as Box<dyn AsyncWrite + Unpin + Send>)
        .unwrap_or_else(|_| Box::new(tokio::io::stdout()));
    (input, output)
}

/// Why the reader stopped.
enum Stop {
    Eof,
    Signal(&'static str),
}

/// The task in flight.
struct Running {
    id: String,
    cancel: Cancel,
    handle: JoinHandle<()>,
    /// Its MCP calls waiting for the host's `mcp_result`.
    mcp: Arc<crate::mcp::Waiting>,
}

/// Serves requests from `input`, writing responses to `output`, until `input` ends or
/// `shutdown` resolves.
pub async fn serve<R, W>(
    input: R,
    output: W,
    redaction: Arc<Redaction>,
    shutdown: impl Future<Output = &'static str>,
) where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (out, writer) = Output::spawn(output, redaction.clone());
    let mut server = Server {
        out,
        redaction,
        llm: LlmState::default(),
        slot: Arc::new(Mutex::new(None)),
        staged: None,
    };
    let mut lines = FramedRead::new(input, JsonLinesCodec::<Request, Response>::new());
    tokio::pin!(shutdown);
    info!(event = "init", version = PROTOCOL_VERSION, tools = %tools::offered().join(","), "subagent ready");

    let stop = loop {
        tokio::select! {
            biased;
            signal = &mut shutdown => break Stop::Signal(signal),
            item = lines.next() => match item {
                None => break Stop::Eof,
                Some(Err(err)) => {
                    error!(event = "protocol", error = %err, "cannot read stdin");
                    break Stop::Eof;
                }
                Some(Ok(Err(line_error))) => server.bad_line(line_error).await,
                Some(Ok(Ok(request))) => server.handle(request).await,
            },
        }
    };

    let running = server.slot.lock().unwrap_or_else(|e| e.into_inner()).take();
    if let Some(Running { id, cancel, mut handle, .. }) = running {
        match stop {
            Stop::Signal(signal) => {
                info!(event = "shutdown", task_id = %id, signal, "cancelling the task in flight");
                cancel.cancel(format!("task cancelled: subagent shutting down ({signal})"));
            }
            Stop::Eof => {
                info!(event = "shutdown", task_id = %id, "stdin closed; finishing the task in flight");
                tokio::select! {
                    _ = &mut handle => {}
                    signal = &mut shutdown => {
                        info!(event = "shutdown", task_id = %id, signal, "cancelling the task in flight");
                        cancel.cancel(format!("task cancelled: subagent shutting down ({signal})"));
                    }
                }
            }
        }
        if !handle.is_finished() && tokio::time::timeout(CANCEL_GRACE, &mut handle).await.is_err() {
            handle.abort();
            warn!(event = "shutdown", task_id = %id, "task did not stop in time; aborted");
            server.out.send(Response::error(&id, None, cancel.reason(), None)).await;
        }
    }
    let reason = match stop {
        Stop::Eof => "stdin closed",
        Stop::Signal(signal) => signal,
    };
    drop(server);
    let _ = writer.await;
    info!(event = "shutdown", reason, "subagent stopped");
}

struct Server {
    out: Output,
    redaction: Arc<Redaction>,
    llm: LlmState,
    slot: Arc<Mutex<Option<Running>>>,
    /// The files put for the next task (`put_file`), until its `execute` takes them.
    staged: Option<Staged>,
}

/// Files put for task `id` before its `execute` (`docs/protocol-files.md#files`): those that
/// arrived whole (already in the scratch folder), the one arriving, or why the putting
/// failed (its `execute` is then refused with that).
#[derive(Debug)]
struct Staged {
    id: String,
    placed: Vec<(String, u64)>,
    arriving: Option<Assembly>,
    failed: Option<String>,
}

impl Staged {
    /// Removes the placed files from `scratch`: a task never sees files put for another.
    fn discard(self, scratch: &std::path::Path) {
        remove_put(scratch, &self.id, &self.placed);
    }
}

/// Removes the files `placed` for task `id` from `scratch`.
fn remove_put(scratch: &std::path::Path, id: &str, placed: &[(String, u64)]) {
    for (name, _) in placed {
        if let Err(e) = std::fs::remove_file(scratch.join(name)) {
            warn!(event = "files", task_id = %id, file = %name, error = %e, "cannot remove a put file");
        }
    }
}

impl Server {
    async fn bad_line(&self, line_error: LineError) {
        let (id, correlation_id, text) = match line_error {
            LineError::TooLong { len, limit } => {
                (String::new(), None, format!("request line too long: {len} bytes (limit {limit})"))
            }
            LineError::Invalid { message, id, correlation_id } => {
                (id, correlation_id, format!("invalid JSON: {}", hide_quoted(&message)))
            }
        };
        warn!(event = "protocol", task_id = %id, error = %text, "bad request line");
        self.out.send(Response::error(&id, correlation_id.as_deref(), text, None)).await;
    }

    async fn handle(&mut self, request: Request) {
        let correlation = request.correlation_id.clone();
        match request.validate(unix_now()) {
            Err(err) => {
                warn!(event = "protocol", task_id = %err.id, error = %err, "request refused");
                self.out.send(Response::from_request_error(&err)).await;
                return;
            }
            Ok(VersionStatus::Deprecated) => warn!(
                event = "protocol",
                task_id = %request.id,
                version = %request.version,
                "deprecated protocol version; please send 1.0"
            ),
            Ok(VersionStatus::Current) => {}
        }
        match request.kind {
            RequestType::Ping if request.brief => {
                let pong = Response::pong(&request.id, correlation.as_deref(), None);
                self.out.send(pong).await;
            }
            RequestType::Ping => {
                debug!(event = "protocol", "ping");
                let running = self.running_id();
                let capabilities = Capabilities {
                    tools: tools::offered().iter().map(|t| t.to_string()).collect(),
                    busy: running.is_some(),
                    task_id: running,
                    programs: Some(crate::tools::skills::programs().to_vec()),
                };
                let pong = Response::pong(&request.id, correlation.as_deref(), Some(capabilities));
                self.out.send(pong).await;
            }
            RequestType::Cancel => self.cancel(&request).await,
            RequestType::Execute => self.execute(request).await,
            RequestType::McpResult => self.mcp_result(&request),
            RequestType::PutFile => self.put_file(&request).await,
            RequestType::Unknown(ref name) => {
                let text = format!("unknown request type: {name}");
                self.out
                    .send(Response::error(&request.id, correlation.as_deref(), text, None))
                    .await;
            }
        }
    }

    fn running_id(&self) -> Option<String> {
        self.slot.lock().unwrap_or_else(|e| e.into_inner()).as_ref().map(|r| r.id.clone())
    }

    async fn cancel(&self, request: &Request) {
        let cancel = {
            let slot = self.slot.lock().unwrap_or_else(|e| e.into_inner());
            slot.as_ref().filter(|r| r.id == request.id).map(|r| r.cancel.clone())
        };
        match cancel {
            // The task answers for itself, with the reason, under its own id.
            Some(cancel) => {
                info!(event = "task", task_id = %request.id, "cancel requested");
                cancel.cancel("task cancelled");
            }
            None => {
                let text = match self.running_id() {
                    Some(other) => {
                        format!("no running task with id {}; running: {other}", request.id)
                    }
                    None => format!("no running task with id {}", request.id),
                };
                let correlation = request.correlation_id.as_deref();
                self.out.send(Response::error(&request.id, correlation, text, None)).await;
            }
        }
    }

    /// The host's answer to an MCP call of the running task. It has no response of its own:
    /// the task reads it; one that matches no waiting call (a late answer to a call the task
    /// gave up on) is logged and dropped.
    fn mcp_result(&self, request: &Request) {
        let call_id = request.call_id.as_deref().unwrap_or_default();
        let waiting = {
            let slot = self.slot.lock().unwrap_or_else(|e| e.into_inner());
            slot.as_ref().filter(|r| r.id == request.id).map(|r| r.mcp.clone())
        };
        let delivered = match (waiting, request.mcp_answer()) {
            (Some(waiting), Some(answer)) => waiting.answer(call_id, answer),
            _ => false,
        };
        if !delivered {
            warn!(event = "protocol", task_id = %request.id, call_id, "mcp_result for no waiting call; dropped");
        }
    }

    /// One chunk of a file for the next task (`docs/protocol-files.md#files`). It has no response
    /// of its own unless a task runs (then an `error`): a chunk that breaks a rule fails the
    /// putting, and the `execute` that names the files is refused with why.
    async fn put_file(&mut self, request: &Request) {
        if let Some(other) = self.running_id() {
            let text = format!("busy: task {other} is running; files are put before a task starts");
            warn!(event = "files", task_id = %request.id, running = %other, "put_file refused: busy");
            let correlation = request.correlation_id.as_deref();
            self.out.send(Response::error(&request.id, correlation, text, None)).await;
            return;
        }
        let scratch = tools::ToolEnv::from_env().scratch;
        if self.staged.as_ref().is_some_and(|s| s.id != request.id) {
            // Put for a task that never started: nothing of it is left for this one.
            if let Some(old) = self.staged.take() {
                old.discard(&scratch);
            }
        }
        let staged = self.staged.get_or_insert_with(|| Staged {
            id: request.id.clone(),
            placed: Vec::new(),
            arriving: None,
            failed: None,
        });
        if staged.failed.is_some() {
            return;
        }
        if let Err(why) = take_chunk(staged, request, &scratch) {
            warn!(event = "files", task_id = %request.id, error = %why, "put_file failed");
            staged.arriving = None;
            staged.failed = Some(why);
        }
    }

    async fn execute(&mut self, request: Request) {
        let correlation = request.correlation_id.clone();
        let refuse =
            |text: String| Response::error(&request.id, correlation.as_deref(), text, None);
        if let Some(other) = self.running_id() {
            let text = format!("busy: task {other} is running; wait for its answer or cancel it");
            warn!(event = "task", task_id = %request.id, running = %other, "refused: busy");
            self.out.send(refuse(text)).await;
            return;
        }
        // The files put for this task, checked against the ones it names; any put for
        // another task are removed before anything of this one runs.
        let scratch = tools::ToolEnv::from_env().scratch;
        let staged = match self.staged.take() {
            Some(staged) if staged.id == request.id => Some(staged),
            Some(other) => {
                other.discard(&scratch);
                None
            }
            None => None,
        };
        let files_in =
            match check_put_files(staged, request.files.as_deref().unwrap_or_default(), &scratch) {
                Ok(files) => files,
                Err(text) => {
                    warn!(event = "task", task_id = %request.id, error = %text, "refused: files");
                    self.refused(refuse(text)).await;
                    return;
                }
            };
        let discard = |files: &[(String, u64)]| remove_put(&scratch, &request.id, files);
        // Everything this task sends through the egress proxy carries its credential (none
        // from an older host: the container's proxy variables as they are).
        crate::net::set_task_credential(request.egress_token.clone());
        let mcp_tools = request.mcp_tools.clone().unwrap_or_default();
        let selection = match tools::select(request.tools.as_deref(), !mcp_tools.is_empty()) {
            Ok(selection) => selection,
            Err(text) => {
                warn!(event = "task", task_id = %request.id, error = %text, "refused: tools");
                discard(&files_in);
                self.refused(refuse(text)).await;
                return;
            }
        };
        let run_tool = match request.run_tool.as_deref() {
            None => None,
            Some(name) => match DIRECT_TOOLS.iter().find(|t| **t == name) {
                Some(tool) if selection.tools.contains(tool) => Some(*tool),
                Some(tool) => {
                    let text = if selection.dropped.iter().any(|d| d == tool) {
                        format!("{tool} is not available in this subagent's image")
                    } else {
                        format!("run_tool {tool} must be among the granted tools")
                    };
                    warn!(event = "task", task_id = %request.id, error = %text, "refused: run_tool");
                    discard(&files_in);
                    let mut answer = refuse(text);
                    answer.dropped_tools = selection.dropped;
                    self.refused(answer).await;
                    return;
                }
                None => {
                    let text = format!("run_tool {name:?} is not one of {DIRECT_TOOLS:?}");
                    warn!(event = "task", task_id = %request.id, error = %text, "refused: run_tool");
                    discard(&files_in);
                    self.refused(refuse(text)).await;
                    return;
                }
            },
        };
        let llm = match self.llm.resolve(&request) {
            Ok(llm) => llm,
            Err(err) => {
                warn!(event = "task", task_id = %request.id, error = %err, "refused: no LLM");
                discard(&files_in);
                self.refused(refuse(err.to_string())).await;
                return;
            }
        };
        if request.llm_api_key.is_some() && self.llm.api_key().is_none() {
            info!(event = "init", task_id = %request.id, "LLM client initialized");
        }
        self.llm.remember(&request);

        let secrets = request.secrets.clone().unwrap_or_default();
        let mut visible = secrets.clone();
        visible.insert("llm_token", llm.bearer.clone());
        if let Some(credential) = &request.egress_token {
            // It is in the commands' proxy variables: an echo of them never comes back.
            visible.insert("egress_token", credential.clone());
        }
        if let Some(key) = self.llm.api_key() {
            visible.insert("llm_api_key", key.clone());
        }
        let redactor = Arc::new(Redactor::new(&visible));
        drop(visible);
        self.redaction.set(redactor.clone());

        let spec = TaskSpec {
            id: request.id.clone(),
            correlation_id: correlation.clone(),
            task: request.task.clone().unwrap_or_default(),
            context: request.context.clone(),
            tools: selection.tools,
            dropped_tools: selection.dropped,
            run_tool,
            timeout: task::soft_timeout(request.timeout),
            secrets,
            proxy_secrets: request.proxy_secrets.clone().unwrap_or_default(),
            search_backend: request.search_backend.clone(),
            search_budget: nexbot_protocol::search_budget(request.search_budget),
            llm,
            max_blocked_commands: nexbot_protocol::block_limit(request.max_blocked_commands),
            redactor: redactor.clone(),
            mcp_tools,
            mcp: Arc::default(),
            files_in,
            return_files: request.return_files == Some(true),
            skills_allow: request.skills_allow.clone().unwrap_or_default(),
        };
        log_task_start(&spec);
        let cancel = Cancel::default();
        let span = tracing::info_span!(
            "task",
            task_id = %spec.id,
            correlation_id = correlation.as_deref().unwrap_or("")
        );
        let (out, slot, redaction) = (self.out.clone(), self.slot.clone(), self.redaction.clone());
        let after_task = self.base_redactor();
        let task_cancel = cancel.clone();
        let id = spec.id.clone();
        let mcp = spec.mcp.clone();
        let started = Instant::now();
        // Hold the slot while spawning so the task cannot clear it before it is filled.
        let mut guard = self.slot.lock().unwrap_or_else(|e| e.into_inner());
        let handle = tokio::spawn(
            async move {
                let mut response = agent::run(spec, out.clone(), task_cancel).await;
                // Nothing sent after the task carries its credential (the proxy refuses it
                // by then anyway).
                crate::net::set_task_credential(None);
                // The clean room: nothing of this task is left for the next one (processes,
                // files) before the host may send it; the answer says whether that held.
                response.scrub = Some(scrub_after_task().await);
                let status = response.status();
                // The answer carries its own redactor; the process-wide one goes back to the
                // idle set before the slot is freed, so it never clobbers the next task's.
                redaction.set(after_task);
                // Free the slot before answering, so the host may send the next task as soon
                // as it reads this one's answer.
                slot.lock().unwrap_or_else(|e| e.into_inner()).take();
                info!(
                    event = "task",
                    status,
                    duration_ms = started.elapsed().as_millis() as u64,
                    "task finished"
                );
                out.send_redacted(response, redactor).await;
            }
            .instrument(span),
        );
        *guard = Some(Running { id, cancel, handle, mcp });
    }

    /// A task refused before anything of it ran: its proxy credential unset, and the scrub
    /// run as after any task (the files put for it are gone, nothing else of it ran), so the
    /// host keeps this container; without a scrub report it replaced the container after
    /// every refusal (a container start, ~300 ms here, for a misconfigured request).
    async fn refused(&self, mut answer: Response) {
        crate::net::set_task_credential(None);
        answer.scrub = Some(scrub_after_task().await);
        self.out.send(answer).await;
    }

    /// The redactor for what stays alive between tasks: the remembered LLM key.
    fn base_redactor(&self) -> Arc<Redactor> {
        let mut map = SecretMap::new();
        if let Some(key) = self.llm.api_key() {
            map.insert("llm_api_key", key.clone());
        }
        Arc::new(Redactor::new(&map))
    }
}

/// Adds `request`'s chunk to `staged`; a file whose last byte arrived is written into
/// `scratch`.
fn take_chunk(
    staged: &mut Staged,
    request: &Request,
    scratch: &std::path::Path,
) -> Result<(), String> {
    let (Some(name), Some(offset), Some(size), Some(data)) =
        (request.name.as_deref(), request.offset, request.size, request.data.as_deref())
    else {
        return Err("put_file without name, offset, size and data".to_owned());
    };
    if staged.arriving.as_ref().is_some_and(|a| a.name() != name) {
        let open = staged.arriving.as_ref().map(|a| a.name().to_owned()).unwrap_or_default();
        return Err(format!("file {name:?} started before file {open:?} was whole"));
    }
    if staged.placed.iter().any(|(placed, _)| placed == name) {
        return Err(format!("file {name:?} was put twice"));
    }
    let mut arriving = match staged.arriving.take() {
        Some(arriving) => arriving,
        None => {
            let before: u64 = staged.placed.iter().map(|(_, size)| size).sum();
            Assembly::start(name, size, staged.placed.len(), before)?
        }
    };
    arriving.push(offset, data)?;
    if !arriving.is_complete() {
        staged.arriving = Some(arriving);
        return Ok(());
    }
    let file = arriving.finish()?;
    tools::files::place(scratch, &file)
        .map_err(|e| format!("file {name:?} cannot be written into the scratch folder: {e}"))?;
    info!(event = "files", task_id = %staged.id, file = %file.name, bytes = file.bytes.len(), "file put");
    staged.placed.push((file.name, size));
    Ok(())
}

/// The files an `execute` names (`named`) against those put for it: each must have arrived
/// whole, and a put one it does not name is removed. `Err`: why the task is refused (its put
/// files removed).
fn check_put_files(
    staged: Option<Staged>,
    named: &[String],
    scratch: &std::path::Path,
) -> Result<Vec<(String, u64)>, String> {
    let Some(mut staged) = staged else {
        return match named.first() {
            Some(name) => Err(format!("file {name:?} was named but never put")),
            None => Ok(Vec::new()),
        };
    };
    let problem = staged
        .failed
        .take()
        .or_else(|| {
            staged.arriving.as_ref().map(|a| format!("file {:?} did not arrive whole", a.name()))
        })
        .or_else(|| {
            named
                .iter()
                .find(|n| !staged.placed.iter().any(|(placed, _)| placed == *n))
                .map(|n| format!("file {n:?} was named but never put"))
        });
    if let Some(problem) = problem {
        staged.discard(scratch);
        return Err(problem);
    }
    let (kept, unnamed): (Vec<_>, Vec<_>) =
        staged.placed.drain(..).partition(|(name, _)| named.contains(name));
    Staged { placed: unnamed, ..staged }.discard(scratch);
    Ok(kept)
}

/// Hides quoted fragments of a JSON parser message: they echo the request's own text, which
/// may hold a secret of a request that could not be parsed.
fn hide_quoted(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut inside = false;
    for c in message.chars() {
        if c == '"' {
            if !inside {
                out.push_str("\"…");
            }
            inside = !inside;
            if !inside {
                out.push('"');
            }
        } else if !inside {
            out.push(c);
        }
    }
    out
}

/// The log line of a task that starts (never its secrets' values: their count), and a
/// warning for the tools it asked for that this image does not offer.
fn log_task_start(spec: &TaskSpec) {
    info!(
        event = "task",
        task_id = %spec.id,
        correlation_id = spec.correlation_id.as_deref().unwrap_or(""),
        secret_count = spec.secrets.len(),
        tools = %spec.tools.join(","),
        mcp_tools = %spec.mcp_tools.iter().map(|t| t.name.as_str()).collect::<Vec<_>>().join(","),
        timeout_secs = spec.timeout.as_secs(),
        "task started"
    );
    if !spec.dropped_tools.is_empty() {
        warn!(
            event = "task",
            task_id = %spec.id,
            dropped_tools = %spec.dropped_tools.join(","),
            "requested tools this subagent does not offer were dropped"
        );
    }
}

/// The scrub after a task (its processes killed, its files removed), logged; a scrub that
/// could not run is not clean.
async fn scrub_after_task() -> Scrub {
    let dirs = scrub::wiped_dirs(&tools::ToolEnv::from_env().scratch);
    let started = Instant::now();
    let mut scrub =
        tokio::task::spawn_blocking(move || scrub::after_task(&dirs)).await.unwrap_or_else(|e| {
            Scrub { clean: false, left: Some(format!("the scrub failed: {e}")), ..Scrub::default() }
        });
    scrub.micros = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
    scrub.oom_kills = crate::oom::kills_since_last();
    if scrub.clean {
        info!(
            event = "scrub",
            killed = scrub.killed,
            removed = scrub.removed,
            micros = scrub.micros,
            "scrubbed after the task"
        );
    } else {
        warn!(
            event = "scrub",
            left = scrub.left.as_deref().unwrap_or(""),
            "not clean after the task"
        );
    }
    scrub
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoted_fragments_are_hidden() {
        assert_eq!(
            hide_quoted(r#"invalid type: string "hunter2", expected u64 at line 1"#),
            r#"invalid type: string "…", expected u64 at line 1"#
        );
        assert_eq!(
            hide_quoted("expected value at line 1 column 2"),
            "expected value at line 1 column 2"
        );
    }
}
