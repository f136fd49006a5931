//! The `schedule_task` tool: the chat's scheduled jobs — create (recurring by cron, with
//! seconds, or one-shot at a time or after a delay), list, cancel. Each run is a turn of this
//! chat whose answer is sent here; the jobs of other chats are neither seen nor touched.

use chrono_tz::Tz;
use serde::Deserialize;
use serde_json::{json, Value};

use std::sync::Arc;
use std::time::Duration;

use crate::jobs::{JobCreator, JobState, NewJob};
use crate::{prepare_job, schedule, store_job, JobError, JobSpec};
use nexbot_agent::confirm::Step;
use nexbot_agent::tools::{success, ToolContext, ToolError, ToolResult, TypedTool};
use nexbot_agent::turns::TurnOrigin;
use nexbot_store::Store;

/// Active jobs one chat may have (a job's own turn may create jobs too).
pub const MAX_JOBS_PER_CHAT: usize = 50;
/// Time the tool's own limit leaves above the confirmation's wait.
const MARGIN: Duration = Duration::from_secs(5);

/// Why every job a chat's model stores waits for its user (the owner, in the owner's chats):
/// the model may have been talked into it by what it read (a page, a file, a sub-agent's
/// answer), and a job runs that instruction later, unattended, as a full turn of the chat. A
/// one-shot job is no exception: a chain of them (each run storing the next) is a recurring
/// job nobody confirmed, which is also why a job's own run may store no job at all. The
/// operator's jobs (`nexbot-ctl cron add`) need no confirmation.
#[derive(Debug)]
pub struct ScheduleTask {
    store: Store,
    zone: Tz,
    /// `scheduler.job_token_budget`: the budget of a job that names none, and the most one
    /// may name.
    budget: u64,
    /// How long the user has to answer the confirmation (`egress.approval_timeout_secs`,
    /// the deadline of every question of the approvals).
    confirm_wait: Duration,
    /// The chained audit each stored job is written to.
    trail: Option<Arc<dyn nexbot_core::audit::AuditTrail>>,
}

impl ScheduleTask {
    /// Jobs created without a zone get `zone`; without a budget, `budget`.
    pub fn new(store: Store, zone: Tz, budget: u64, confirm_wait: Duration) -> Self {
        let confirm_wait = confirm_wait.max(Duration::from_secs(1));
        Self { store, zone, budget, confirm_wait, trail: None }
    }

    /// Writes each stored job to `trail` (the chained audit).
    pub fn with_trail(mut self, trail: Option<Arc<dyn nexbot_core::audit::AuditTrail>>) -> Self {
        self.trail = trail;
        self
    }

    /// Asks the chat's user whether `job` may be stored — a question of the approvals
    /// ([`Step::Schedule`], always asked), answered by its buttons, a typed `/approve`, or
    /// `nexbot-ctl approvals`; an error unless they allow it.
    async fn confirmed(&self, job: &NewJob, ctx: &ToolContext) -> Result<(), ToolError> {
        let budget = job.token_budget.unwrap_or(self.budget);
        let (kind, when) = match (&job.cron, job.at) {
            (Some(cron), _) => ("recurring job", cron.clone()),
            (None, Some(at)) => {
                let zone = schedule::zone(&job.time_zone).unwrap_or(Tz::UTC);
                ("one-shot job", format!("once at {}", schedule::local(at, zone)))
            }
            (None, None) => ("job", String::new()),
        };
        let text = format!(
            "«{}»\nSchedule: {when} ({}), up to {budget} tokens per run.",
            job.task, job.time_zone
        );
        match ctx.confirm.confirm(&ctx.chat, Step::Schedule { job: text }).await {
            Ok(()) => Ok(()),
            Err(refused) => {
                Err(ToolError::new(format!("this {kind} was not scheduled: {refused}")))
            }
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "lowercase", tag = "action")]
pub enum Args {
    Create {
        task: String,
        #[serde(default)]
        cron: Option<String>,
        #[serde(default)]
        at: Option<String>,
        #[serde(default)]
        name: Option<String>,
        #[serde(default)]
        time_zone: Option<String>,
        #[serde(default)]
        missed: Option<String>,
        #[serde(default)]
        token_budget: Option<u64>,
    },
    List,
    Cancel {
        id: i64,
    },
}

impl TypedTool for ScheduleTask {
    type Args = Args;
    const NAME: &'static str = "schedule_task";
    // Its answer is about the job it stored, nothing from outside the chat.
    const READS_OUTSIDE: bool = false;
    const DESCRIPTION: &'static str = "Scheduled jobs of this chat: at each run you get the \
        task as a message and your answer is sent here. action=create (task, and cron — six \
        fields with seconds first, e.g. \"0 0 9 * * 1-5\" — or at — \"2026-05-01 09:00\", \
        RFC 3339 or a delay such as \"in 20m\"; optional name, time_zone, missed=skip|once, \
        token_budget per run) | list | cancel (id). A recurring job runs at most once a minute. \
        Every job is stored only once the user confirms it, and a job's own run cannot \
        schedule jobs.";
    fn timeout(&self) -> Option<Duration> {
        Some(self.confirm_wait + MARGIN)
    }
    fn schema() -> Value {
        json!({"type": "object", "properties": {
            "action": {"type": "string", "enum": ["create", "list", "cancel"]},
            "task": {"type": "string"}, "cron": {"type": "string"}, "at": {"type": "string"},
            "name": {"type": "string"}, "time_zone": {"type": "string"},
            "missed": {"type": "string", "enum": ["skip", "once"]},
            "token_budget": {"type": "integer", "minimum": 1,
                "description": "Tokens one run may use; at most the operator's default, \
                                which applies when this is left out."},
            "id": {"type": "integer"}}, "required": ["action"]})
    }
    async fn run(&self, args: Args, ctx: &ToolContext) -> ToolResult {
        let store_error = |e: nexbot_store::StoreError| ToolError::new(e.to_string());
        match args {
            Args::Create { task, cron, at, name, time_zone, missed, token_budget } => {
                if let Some(run) = unattended_run(&ctx.turn) {
                    return Err(ToolError::new(format!(
                        "not scheduled: this turn is {run}, and a job's or a heartbeat check's \
                         run may not store jobs (nobody is there to confirm them); say in the \
                         answer what should be scheduled, and the chat's user can ask for it"
                    )));
                }
                let active = self.store.active_jobs(Some(&ctx.chat)).await.map_err(store_error)?;
                if active.len() >= MAX_JOBS_PER_CHAT {
                    return Err(ToolError::new(format!(
                        "this chat has {MAX_JOBS_PER_CHAT} jobs already; cancel one first"
                    )));
                }
                if let Some(asked) = token_budget.filter(|b| *b > self.budget) {
                    return Err(ToolError::new(format!(
                        "token_budget {asked} is more than the operator allows per run ({}); \
                         leave it out to get that",
                        self.budget
                    )));
                }
                let job_error = |e| match e {
                    JobError::Store(e) => store_error(e),
                    other => ToolError::new(other.to_string()),
                };
                // The same message handled again (the daemon stopped during its turn): what
                // its first turn stored is not stored, nor asked about, a second time.
                let origin = match ctx.turn {
                    TurnOrigin::Message { message, .. } => Some(format!("message {message}")),
                    _ => None,
                };
                if let Some(origin) = &origin {
                    let stored = self.store.job_stored_by(&ctx.chat, origin, task.trim()).await;
                    if let Some(job) = stored.map_err(store_error)? {
                        return Ok(success(json!({
                            "already_stored": "this message's job was stored before the \
                                               daemon restarted; it is not stored again",
                            "job": describe(&job),
                        })));
                    }
                }
                let created_by = JobCreator::Chat { turn: ctx.turn.to_string() };
                let spec =
                    JobSpec { name, task, cron, at, time_zone, missed, token_budget, created_by };
                let mut job = prepare_job(&ctx.chat, spec, self.zone).map_err(job_error)?;
                job.origin = origin;
                self.confirmed(&job, ctx).await?;
                let job = store_job(&self.store, job).await.map_err(job_error)?;
                if let Some(trail) = &self.trail {
                    trail.record(nexbot_core::audit::AuditEvent {
                        event: "job",
                        actor: ctx.chat.to_string(),
                        chat: Some(ctx.chat.to_string()),
                        subject: format!("job {} {:?}: {}", job.id, job.name, job.task),
                        outcome: "stored (the chat's user allowed it)".to_owned(),
                    });
                }
                Ok(success(describe(&job)))
            }
            Args::List => {
                let jobs = self.store.active_jobs(Some(&ctx.chat)).await.map_err(store_error)?;
                Ok(success(jobs.iter().map(describe).collect::<Vec<_>>()))
            }
            Args::Cancel { id } => {
                let job = self.store.job(id).await.map_err(store_error)?;
                match job {
                    Some(j) if j.chat == ctx.chat && j.heartbeat && j.state == JobState::Active => {
                        Err(ToolError::new(format!(
                            "job {id} is the heartbeat check {:?}; it is removed by editing HEARTBEAT.md",
                            j.name
                        )))
                    }
                    _ => match self.store.cancel_job(id, Some(&ctx.chat)).await {
                        Ok(true) => Ok(success(format!("job {id} cancelled"))),
                        Ok(false) => Err(ToolError::new(format!("this chat has no active job {id}"))),
                        Err(e) => Err(store_error(e)),
                    },
                }
            }
        }
    }
}

/// What an unattended turn is, in words (`None`: a person's message started it).
fn unattended_run(turn: &TurnOrigin) -> Option<String> {
    match turn {
        TurnOrigin::Message { .. } => None,
        TurnOrigin::Job { id, name } => Some(format!("the run of scheduled job {id} ({name:?})")),
        TurnOrigin::Heartbeat { name } => Some(format!("the heartbeat check {name:?}")),
    }
}

fn describe(job: &crate::jobs::Job) -> Value {
    let zone = schedule::zone(&job.time_zone).unwrap_or(Tz::UTC);
    json!({
        "id": job.id,
        "name": job.name,
        "task": job.task,
        "cron": job.cron,
        "at": job.at.map(|t| schedule::local(t, zone)),
        "time_zone": job.time_zone,
        "missed": job.missed.as_str(),
        "next_run": job.next_run.map(|t| schedule::local(t, zone)),
        "heartbeat": job.heartbeat,
        "token_budget": job.token_budget,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use nexbot_core::ChatRef;

    async fn tool(name: &str) -> ScheduleTask {
        let dir =
            std::env::temp_dir().join(format!("nexbot-schedtool-{name}-{}", uuid::Uuid::new_v4()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let store = Store::open(&dir.join("db")).await.unwrap();
        ScheduleTask::new(store, Tz::UTC, 100_000, Duration::from_secs(2))
    }

    fn args(v: Value) -> Args {
        serde_json::from_value(v).unwrap()
    }

    /// A chat whose user answers every confirmation with `answer` (`None`: never answers);
    /// it keeps the jobs asked about.
    #[derive(Debug)]
    struct User {
        answer: Option<bool>,
        asked: std::sync::Mutex<Vec<String>>,
    }

    impl nexbot_agent::confirm::Confirm for User {
        fn confirm<'a>(
            &'a self,
            _: &'a ChatRef,
            step: Step,
        ) -> nexbot_core::BoxFuture<'a, Result<(), nexbot_agent::confirm::Refused>> {
            use nexbot_agent::confirm::Refused;
            let Step::Schedule { job } = step else { panic!("asked about {step:?}") };
            self.asked.lock().unwrap().push(job);
            Box::pin(async move {
                match self.answer {
                    Some(true) => Ok(()),
                    Some(false) => Err(Refused::Denied { by: "telegram:7".into() }),
                    None => Err(Refused::NoAnswer { secs: 2 }),
                }
            })
        }
    }

    fn answering(answer: Option<bool>) -> (ToolContext, std::sync::Arc<User>) {
        let user = std::sync::Arc::new(User { answer, asked: Default::default() });
        let mut ctx = ToolContext::for_tests();
        ctx.confirm = user.clone();
        (ctx, user)
    }

    #[tokio::test]
    async fn a_recurring_job_is_stored_only_once_the_user_confirms_it() {
        let tool = tool("confirm").await;
        let create = || {
            args(json!({"action": "create", "task": "post the digest", "cron": "0 0 9 * * *",
                        "token_budget": 5000}))
        };
        for (answer, needle) in [(Some(false), "refused"), (None, "did not confirm")] {
            let (ctx, user) = answering(answer);
            let err = tool.run(create(), &ctx).await.unwrap_err();
            assert!(
                err.message().contains(needle) && err.message().contains("not scheduled"),
                "{}",
                err.message()
            );
            let asked = user.asked.lock().unwrap().clone();
            assert_eq!(asked.len(), 1);
            assert!(asked[0].contains("post the digest") && asked[0].contains("5000"), "{asked:?}");
            assert!(tool.store.active_jobs(None).await.unwrap().is_empty(), "nothing stored");
        }
        let (ctx, _) = answering(Some(true));
        tool.run(create(), &ctx).await.unwrap();
        let jobs = tool.store.active_jobs(None).await.unwrap();
        assert_eq!(jobs.len(), 1);
        assert_eq!(jobs[0].token_budget, Some(5000));
        assert_eq!(jobs[0].created_by, JobCreator::Chat { turn: "a message".into() });
    }

    /// A one-shot job is confirmed too: unconfirmed one-shots chained by their own runs would
    /// be a recurring job nobody confirmed.
    #[tokio::test]
    async fn a_one_shot_job_is_stored_only_once_the_user_confirms_it() {
        let tool = tool("oneshot").await;
        let create = || args(json!({"action": "create", "task": "remind me", "at": "in 3s"}));
        let (ctx, user) = answering(None);
        let err = tool.run(create(), &ctx).await.unwrap_err();
        assert!(err.message().contains("one-shot job was not scheduled"), "{}", err.message());
        let asked = user.asked.lock().unwrap().clone();
        assert!(asked.len() == 1 && asked[0].contains("remind me"), "{asked:?}");
        assert!(asked[0].contains("once at"), "the question says when: {asked:?}");
        assert!(tool.store.active_jobs(None).await.unwrap().is_empty(), "nothing stored");
        let (ctx, _) = answering(Some(true));
        tool.run(create(), &ctx).await.unwrap();
        assert_eq!(tool.store.active_jobs(None).await.unwrap().len(), 1);
    }

    /// A message handled again after a restart (the same message id) does not store its job a
    /// second time, nor ask again (the soak's daemon kills doubled a job this way: the user
    /// confirmed twice); another message, or another task of the same message, does.
    #[tokio::test]
    async fn the_same_message_handled_again_stores_its_job_once() {
        let tool = tool("again").await;
        let create = |task: &str| args(json!({"action": "create", "task": task, "at": "in 1h"}));
        let from = |message: u64| {
            let (mut ctx, user) = answering(Some(true));
            ctx.turn = TurnOrigin::Message { user: None, message };
            (ctx, user)
        };
        let (ctx, _) = from(812);
        tool.run(create("water the plants"), &ctx).await.unwrap();
        let (again, user) = from(812);
        let answer = tool.run(create(" water the plants "), &again).await.unwrap();
        assert!(answer.to_string().contains("already_stored"), "{answer}");
        assert!(user.asked.lock().unwrap().is_empty(), "asked again");
        assert_eq!(tool.store.active_jobs(None).await.unwrap().len(), 1);
        tool.run(create("feed the cat"), &again).await.unwrap();
        let (other, _) = from(813);
        tool.run(create("water the plants"), &other).await.unwrap();
        assert_eq!(tool.store.active_jobs(None).await.unwrap().len(), 3);
    }

    /// A job's run (or a heartbeat check's) may store no job, confirmed or not: the chain of
    /// self-renewing jobs is refused at its first link, before anyone is asked.
    #[tokio::test]
    async fn a_jobs_own_run_cannot_schedule_jobs() {
        let tool = tool("renew").await;
        let runs = [
            TurnOrigin::Job { id: 7, name: "daily".into() },
            TurnOrigin::Heartbeat { name: "inbox".into() },
        ];
        for turn in runs {
            let (mut ctx, user) = answering(Some(true));
            ctx.turn = turn;
            let v = json!({"action": "create", "task": "again", "at": "in 3s"});
            let err = tool.run(args(v), &ctx).await.unwrap_err();
            let message = err.message();
            assert!(message.contains("may not store jobs"), "{message}");
            assert!(user.asked.lock().unwrap().is_empty(), "nobody asked");
            // Listing and cancelling stay open to a job's run.
            tool.run(args(json!({"action": "list"})), &ctx).await.unwrap();
        }
        assert!(tool.store.active_jobs(None).await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn a_chat_job_runs_at_most_once_a_minute_within_the_operators_budget() {
        let tool = tool("floor").await;
        let (ctx, user) = answering(Some(true));
        for (cron, gap) in [("*/30 * * * * *", "30 s"), ("0,10 0 9 * * *", "10 s")] {
            let v = json!({"action": "create", "task": "t", "cron": cron});
            let err = tool.run(args(v), &ctx).await.unwrap_err();
            assert!(
                err.message().contains(gap) && err.message().contains("once a minute"),
                "{cron}: {}",
                err.message()
            );
        }
        let v = json!({"action": "create", "task": "t", "cron": "0 * * * * *", "token_budget": 100_001});
        let err = tool.run(args(v), &ctx).await.unwrap_err();
        assert!(
            err.message().contains("100001") && err.message().contains("100000"),
            "{}",
            err.message()
        );
        assert!(user.asked.lock().unwrap().is_empty(), "refused before anyone is asked");
        tool.run(args(json!({"action": "create", "task": "t", "cron": "0 * * * * *"})), &ctx)
            .await
            .unwrap();
        // The operator's own jobs may run every second.
        let spec =
            JobSpec { task: "x".into(), cron: Some("* * * * * *".into()), ..JobSpec::default() };
        crate::create_job(&tool.store, &ctx.chat, spec, Tz::UTC).await.unwrap();
    }

    #[tokio::test]
    async fn create_list_and_cancel_stay_within_the_chat() {
        let tool = tool("chat").await;
        let (ctx, _) = answering(Some(true));
        let made = tool
            .run(args(json!({"action": "create", "task": "water the plants", "cron": "0 0 8 * * *", "time_zone": "Europe/Berlin"})), &ctx)
            .await
            .unwrap();
        let text = made.text();
        assert!(text.contains("Europe/Berlin") && text.contains("skip"), "{text}");
        let other = ChatRef::console("other").unwrap();
        let theirs = crate::create_job(
            &tool.store,
            &other,
            JobSpec { task: "x".into(), at: Some("in 1h".into()), ..JobSpec::default() },
            Tz::UTC,
        )
        .await
        .unwrap();
        let listed = tool.run(args(json!({"action": "list"})), &ctx).await.unwrap();
        let listed = listed.text();
        assert!(listed.contains("water the plants") && !listed.contains("\"x\""), "{listed}");
        let err =
            tool.run(args(json!({"action": "cancel", "id": theirs.id})), &ctx).await.unwrap_err();
        assert!(err.message().contains("no active job"), "{}", err.message());
        let mine = tool.store.active_jobs(Some(&ctx.chat)).await.unwrap()[0].id;
        tool.run(args(json!({"action": "cancel", "id": mine})), &ctx).await.unwrap();
        assert!(tool.store.active_jobs(Some(&ctx.chat)).await.unwrap().is_empty());
        assert_eq!(tool.store.active_jobs(Some(&other)).await.unwrap().len(), 1);
    }

    #[tokio::test]
    async fn bad_schedules_are_explained() {
        let tool = tool("bad").await;
        let ctx = ToolContext::for_tests();
        for (v, needle) in [
            (
                json!({"action": "create", "task": "t", "cron": "every day"}),
                "not a cron expression",
            ),
            (json!({"action": "create", "task": "t"}), "either a cron expression or a time"),
            (json!({"action": "create", "task": "t", "at": "2001-01-01 00:00"}), "in the past"),
            (
                json!({"action": "create", "task": "t", "at": "in 5m", "time_zone": "Mars/Base"}),
                "IANA",
            ),
            (json!({"action": "create", "task": " ", "at": "in 5m"}), "empty"),
        ] {
            let err = tool.run(args(v.clone()), &ctx).await.unwrap_err();
            assert!(err.message().contains(needle), "{v}: {}", err.message());
        }
    }
}
