//! One task on its leased container: the request written, the answers read until the final
//! one (progress passed on, files returned and checked, MCP calls answered), the host's hard
//! limit, and the lease's `Drop` that settles the slot whatever way the task ended.
//!
//! Why apart: this is the exchange with one container; which container, and what happens to
//! it after, is the dispatch's ([`super::dispatch`]).

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use futures_util::stream::{FuturesUnordered, StreamExt};
use nexbot_protocol::{check_next_file, Assembly, McpAnswer, McpCall, McpCalls, TaskFile};
use nexbot_protocol::{
    RecentMessage, Report, ReportStatus, Request, Response, ResponseBody, MAX_REQUEST_LINE,
};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::error::PoolError;
use crate::link::LinkError;
use crate::member::{CurrentTask, Member, Retirement};
use crate::restart::RestartReason;

use super::{Inner, PROGRESS_KEPT, SEND_TIMEOUT};

/// The right to run one task on one container. Whatever way it ends, `Drop` settles the slot.
#[derive(Debug)]
pub(super) struct Lease {
    pub(super) inner: Arc<Inner>,
    pub(super) index: usize,
    pub(super) member: Arc<Member>,
    /// `false` for a lease that was never handed out (nothing to settle).
    pub(super) armed: bool,
    /// Set once the request was written: abandoning the lease after that recycles.
    pub(super) used: bool,
    /// Set when `run` saw the task to its end (answer, timeout, failure or cancel).
    pub(super) done: bool,
    /// `Some(why)` to recycle the container when the lease ends.
    pub(super) recycle: Option<Retirement>,
}

impl Lease {
    pub(super) fn new(inner: Arc<Inner>, index: usize, member: Arc<Member>) -> Self {
        Self { inner, index, member, armed: true, used: false, done: false, recycle: None }
    }

    pub(super) async fn run(
        mut self,
        request: Request,
        cancel: CancellationToken,
        io: TaskIo,
        timeout_secs: u64,
        hard_limit: Duration,
    ) -> Result<(Response, Vec<TaskFile>), PoolError> {
        let TaskIo { progress, mcp, files } = io;
        let takes_files = request.return_files == Some(true);
        let member = self.member.clone();
        if member.on_last_task() {
            // Its successor starts now, while it serves its last task.
            self.inner.slots[self.index].prewarm.notify_one();
        }
        let task_id = request.id.clone();
        let correlation_id = request.correlation_id.clone();
        let started = Instant::now();
        let hard_deadline = tokio::time::Instant::from_std(started + hard_limit);
        member.set_current_task(Some(CurrentTask {
            id: task_id.clone(),
            started,
            hard_deadline: started + hard_limit,
        }));
        // The retirement, set before the link dies, tells an operator's kill from a crash.
        let failed = |reason: String| match member.retirement() {
            Some(r) if r.cause == RestartReason::KilledByOperator => PoolError::KilledByOperator {
                task_id: task_id.clone(),
                container: member.short_id.clone(),
            },
            _ => PoolError::ContainerFailed {
                container: member.short_id.clone(),
                request: format!("task {task_id}"),
                reason,
            },
        };
        let mut answers = member.link.register(&task_id).map_err(|e| match e {
            LinkError::Closed(reason) => failed(reason),
            other => failed(format!("{other:?}")),
        })?;
        self.used = true;
        // Its files first, chunk by chunk (`docs/protocol-files.md#files`); the subagent refuses an
        // `execute` whose files did not all arrive whole.
        let id = task_id.as_str();
        let puts = files.iter().flat_map(|file| {
            let size = file.bytes.len() as u64;
            file.chunks()
                .map(move |(offset, data)| Request::put_file(id, &file.name, offset, size, data))
        });
        for line in puts.chain(std::iter::once(request)) {
            if let Err(LinkError::Closed(reason)) = member.link.send(&line, SEND_TIMEOUT).await {
                member.link.unregister(&task_id);
                return Err(failed(reason));
            }
        }
        drop(files);
        // The files the task returns, as their chunks arrive.
        let mut returned = Returned::default();

        let mut seen: VecDeque<RecentMessage> = VecDeque::new();
        let mut cancel_deadline: Option<tokio::time::Instant> = None;
        // The task's MCP calls being answered; dropped with the loop when the task ends.
        let mut calls: FuturesUnordered<BoxFuture<'static, (String, McpAnswer)>> =
            FuturesUnordered::new();
        let outcome = loop {
            let cancel_at = cancel_deadline;
            let cancel_wait = async move {
                match cancel_at {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                answer = answers.recv() => match answer {
                    Some(response) if !response.is_final() => {
                        if let Some(call) = response.as_mcp_call() {
                            calls.push(answer_call(mcp.as_ref(), call));
                            continue;
                        }
                        if let ResponseBody::File { name, offset, size, data } = &response.body {
                            if takes_files {
                                returned.take(&task_id, name, *offset, *size, data);
                            } else {
                                tracing::warn!(task_id = %task_id, file = %name, "a file from a task that was not asked for files; dropped");
                            }
                            continue;
                        }
                        remember_progress(&mut seen, &response);
                        if let Some(tx) = &progress {
                            let _ = tx.try_send(response);
                        }
                    }
                    Some(response) => break self.final_answer(&member, response).map_err(failed),
                    None => break Err(failed(member.link.reason())),
                },
                Some((call_id, answer)) = calls.next(), if !calls.is_empty() => {
                    let line = Request::mcp_result(task_id.clone(), call_id, answer);
                    // A link that cannot take it is dead: the answers channel says so next.
                    let _ = member.link.send(&line, SEND_TIMEOUT).await;
                }
                _ = tokio::time::sleep_until(hard_deadline) => {
                    self.recycle = Some(Retirement::new(
                        RestartReason::TaskTimedOut,
                        format!(
                            "recycled after task {task_id} passed the host's hard limit of {} s",
                            hard_limit.as_secs()
                        ),
                    ));
                    break Ok(hard_timeout_response(
                        &task_id,
                        correlation_id.as_deref(),
                        timeout_secs,
                        hard_limit,
                        seen.drain(..).collect(),
                    ));
                }
                _ = cancel.cancelled(), if cancel_deadline.is_none() => {
                    let grace = Duration::from_millis(self.inner.engine.config.cancel_grace_ms);
                    cancel_deadline = Some(tokio::time::Instant::now() + grace);
                    let _ = member.link.send(&Request::cancel(task_id.clone()), SEND_TIMEOUT).await;
                }
                _ = cancel_wait => {
                    self.recycle = Some(Retirement::new(
                        RestartReason::TaskAbandoned,
                        format!("recycled: task {task_id} did not stop after cancel"),
                    ));
                    break Err(PoolError::Cancelled { task_id: task_id.clone() });
                }
            }
        };
        member.link.unregister(&task_id);
        self.done = true;
        let outcome = outcome.map(|response| {
            let files = returned.finish(&task_id, &response);
            (response, files)
        });
        if outcome.is_ok() && self.recycle.is_none() {
            let served = member.count_task();
            if served >= member.task_budget {
                self.recycle = Some(Retirement::new(
                    RestartReason::Recycled,
                    format!("recycled after serving {served} tasks"),
                ));
            }
        }
        outcome
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let recycle = self.recycle.take().or_else(|| {
            // The caller dropped the future mid-task: the container's state is unknown.
            (self.used && !self.done).then(|| {
                self.inner.counts.record_abandoned();
                Retirement::new(
                    RestartReason::TaskAbandoned,
                    "recycled: its task was abandoned mid-run",
                )
            })
        });
        self.inner.finish(self.index, &self.member, recycle);
    }
}

/// What a task's caller gives it besides the request: where its `progress` lines go, who
/// answers its `mcp_call`s, and the files for its scratch folder.
#[derive(Debug, Default)]
pub struct TaskIo {
    /// Progress lines as they come; a full channel drops them rather than slow the pool.
    pub progress: Option<mpsc::Sender<Response>>,
    /// The task's granted MCP tools' caller (the host's); `None`: it was granted none.
    pub mcp: Option<Arc<dyn McpCalls>>,
    /// Put into the task's scratch folder before it starts (`put_file`); its `execute`
    /// names them. Within the caps of [`nexbot_protocol::files`].
    pub files: Vec<TaskFile>,
}

/// Refuses files the subagent would refuse (a name, a size, too many), before anything is
/// sent.
pub(super) fn check_files(files: &[TaskFile]) -> Result<(), PoolError> {
    let mut bytes = 0;
    for (i, file) in files.iter().enumerate() {
        check_next_file(&file.name, file.bytes.len() as u64, i, bytes)
            .map_err(PoolError::InvalidRequest)?;
        if files[..i].iter().any(|f| f.name == file.name) {
            return Err(PoolError::InvalidRequest(format!("file {:?} is given twice", file.name)));
        }
        bytes += file.bytes.len() as u64;
    }
    Ok(())
}

/// The files a task returns, put together from their `file` chunks within the caps of
/// [`nexbot_protocol::files`]. A file that breaks a rule is dropped (and logged); the task's
/// answer stands.
#[derive(Debug, Default)]
struct Returned {
    whole: Vec<TaskFile>,
    arriving: Option<Assembly>,
    /// Names of files dropped on the way: later chunks of theirs are ignored.
    dropped: Vec<String>,
}

impl Returned {
    fn take(&mut self, task_id: &str, name: &str, offset: u64, size: u64, data: &str) {
        if self.dropped.iter().any(|d| d == name) {
            return;
        }
        let result = (|| {
            let mut arriving = match self.arriving.take() {
                Some(a) if a.name() == name => a,
                other => {
                    if let Some(unfinished) = other {
                        self.dropped.push(unfinished.name().to_owned());
                        tracing::warn!(task_id, file = %unfinished.name(), "a returned file stopped before it was whole; dropped");
                    }
                    if self.whole.iter().any(|f| f.name == name) {
                        return Err(format!("file {name:?} came twice"));
                    }
                    let before: u64 = self.whole.iter().map(|f| f.bytes.len() as u64).sum();
                    Assembly::start(name, size, self.whole.len(), before)?
                }
            };
            arriving.push(offset, data)?;
            if arriving.is_complete() {
                self.whole.push(arriving.finish()?);
            } else {
                self.arriving = Some(arriving);
            }
            Ok(())
        })();
        if let Err(why) = result {
            tracing::warn!(task_id, file = %name, error = %why, "a returned file broke a rule; dropped");
            self.dropped.push(name.to_owned());
        }
    }

    /// The whole files the task's `success` names; none for any other answer.
    fn finish(self, task_id: &str, response: &Response) -> Vec<TaskFile> {
        let ResponseBody::Success { files: named, .. } = &response.body else {
            return Vec::new();
        };
        let (kept, unnamed): (Vec<_>, Vec<_>) =
            self.whole.into_iter().partition(|f| named.contains(&f.name));
        for name in named.iter().filter(|n| !kept.iter().any(|f| &&f.name == n)) {
            tracing::warn!(task_id, file = %name, "the answer names a returned file that did not arrive whole");
        }
        for file in unnamed {
            tracing::warn!(task_id, file = %file.name, "a returned file the answer does not name; dropped");
        }
        kept
    }
}

/// The answer to one `mcp_call`, with its call id: from `mcp`, or, for a task granted no MCP
/// tools, a refusal.
fn answer_call(
    mcp: Option<&Arc<dyn McpCalls>>,
    call: McpCall,
) -> BoxFuture<'static, (String, McpAnswer)> {
    let call_id = call.call_id.clone();
    match mcp {
        Some(mcp) => {
            let answer = mcp.call(call);
            Box::pin(async move { (call_id, answer.await) })
        }
        None => {
            let refusal = format!("no MCP tool was granted to this task, so not {}", call.tool);
            Box::pin(std::future::ready((call_id, McpAnswer::Error(refusal))))
        }
    }
}

/// Refuses a request whose protocol line would be longer than the subagent reads
/// ([`MAX_REQUEST_LINE`]): sent anyway, it would be dropped as a framing error that names no
/// task, and the caller would wait for the hard limit. Measured without copying the request
/// (it may hold secrets).
pub(super) fn check_line_size(request: &Request) -> Result<(), PoolError> {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    serde_json::to_writer(&mut count, request)
        .map_err(|e| PoolError::InvalidRequest(format!("request could not be encoded: {e}")))?;
    if count.0 > MAX_REQUEST_LINE {
        return Err(PoolError::TooLarge {
            task_id: request.id.clone(),
            bytes: count.0,
            limit: MAX_REQUEST_LINE,
        });
    }
    Ok(())
}

fn remember_progress(seen: &mut VecDeque<RecentMessage>, response: &Response) {
    if let ResponseBody::Progress { event, tool, detail } = &response.body {
        let mut content = format!("{event:?}");
        if let Some(tool) = tool {
            content.push_str(&format!(" {tool}"));
        }
        if let Some(detail) = detail {
            content.push_str(&format!(": {detail}"));
        }
        if seen.len() == PROGRESS_KEPT {
            seen.pop_front();
        }
        seen.push_back(RecentMessage { role: "progress".into(), content });
    }
}

/// The `timeout` answer the host gives when the subagent itself did not answer in time.
fn hard_timeout_response(
    task_id: &str,
    correlation_id: Option<&str>,
    timeout_secs: u64,
    hard_limit: Duration,
    recent: Vec<RecentMessage>,
) -> Response {
    let error = format!(
        "task {task_id} got no answer within the host's hard limit of {} s (timeout {timeout_secs} s + grace); the container was recycled",
        hard_limit.as_secs()
    );
    let mut report = Report::new(
        ReportStatus::Timeout,
        task_id,
        error.clone(),
        timeout_secs,
        0,
        Vec::new(),
        std::iter::empty(),
    );
    report.recent_messages = recent;
    Response::timeout(task_id, correlation_id, error, report)
}

impl Lease {
    /// A task's final answer: what it says of its container. A memory kill during the task
    /// fails it (the engine's `oom` event may come after the answer; the task's state is lost
    /// all the same: `subagent/src/oom.rs`); a timeout or an unclean scrub retires the
    /// container after it.
    fn final_answer(&mut self, member: &Member, response: Response) -> Result<Response, String> {
        member.mark_proven();
        if response.scrub.as_ref().is_some_and(|s| s.oom_kills > 0) {
            let reason = self.inner.engine.oom_reason();
            member.retire(Retirement::new(RestartReason::OomKilled, reason.clone()));
            return Err(reason);
        }
        if matches!(response.body, ResponseBody::Timeout { .. }) {
            self.recycle = Some(Retirement::new(
                RestartReason::TaskTimedOut,
                "recycled after its task timed out",
            ));
        } else if let Some(why) = not_clean(&response) {
            // A task never sees anything of another: a container the subagent could not
            // scrub (or that does not say) serves no further task.
            self.recycle =
                Some(Retirement::new(RestartReason::NotClean, format!("recycled: {why}")));
        }
        Ok(response)
    }
}

/// Why a container may not serve another task after `response`, if it may not: its subagent
/// did not report a clean scrub (docs/protocol.md, `scrub`).
fn not_clean(response: &Response) -> Option<String> {
    match &response.scrub {
        Some(scrub) if scrub.clean => None,
        Some(scrub) => Some(format!(
            "not clean after its task ({})",
            scrub.left.as_deref().unwrap_or("no reason given")
        )),
        None => Some("its subagent did not report a scrub after the task".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_of_exactly_the_limit_is_sent_and_one_byte_more_is_not() {
        let with = |len: usize| Request::execute("t-1", "x".repeat(len));
        let overhead = serde_json::to_vec(&with(1)).unwrap().len() - 1;
        let exact = with(MAX_REQUEST_LINE - overhead);
        assert_eq!(serde_json::to_vec(&exact).unwrap().len(), MAX_REQUEST_LINE);
        check_line_size(&exact).unwrap();
        let err = check_line_size(&with(MAX_REQUEST_LINE - overhead + 1)).unwrap_err();
        let PoolError::TooLarge { task_id, bytes, limit } = &err else { panic!("{err:?}") };
        assert_eq!((task_id.as_str(), *bytes, *limit), ("t-1", MAX_REQUEST_LINE + 1, 1_048_576));
        let text = err.to_string();
        assert!(text.contains("1048577 bytes") && text.contains("1048576 bytes"), "{text}");
    }
}
