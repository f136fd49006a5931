//! The `schedule_task` tool: the chat's scheduled jobs — create (recurring by cron, with
//! seconds, or one-shot at a time or after a delay), list, cancel. Each run is a turn of this
//! chat whose answer is sent here; the jobs of other chats are neither seen nor touched.

use chrono_tz::Tz;
use serde::Deserialize;
use serde_json::{json, Value};

use super::{success, ToolContext, ToolError, ToolResult, TypedTool};
use crate::scheduler::{create_job, schedule, JobError, JobSpec};
use crate::store::Store;

/// Active jobs one chat may have (a job's own turn may create jobs too).
pub const MAX_JOBS_PER_CHAT: usize = 50;

#[derive(Debug)]
pub struct ScheduleTask {
    store: Store,
    zone: Tz,
}

impl ScheduleTask {
    /// Jobs created without a zone get `zone`.
    pub fn new(store: Store, zone: Tz) -> Self {
        Self { store, zone }
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
    },
    List,
    Cancel {
        id: i64,
    },
}

impl TypedTool for ScheduleTask {
    type Args = Args;
    const NAME: &'static str = "schedule_task";
    const DESCRIPTION: &'static str = "Scheduled jobs of this chat: at each run you get the \
        task as a message and your answer is sent here. action=create (task, and cron — six \
        fields with seconds first, e.g. \"0 0 9 * * 1-5\" — or at — \"2026-05-01 09:00\", \
        RFC 3339 or a delay such as \"in 20m\"; optional name, time_zone, missed=skip|once) | \
        list | cancel (id).";
    fn schema() -> Value {
        json!({"type": "object", "properties": {
            "action": {"type": "string", "enum": ["create", "list", "cancel"]},
            "task": {"type": "string"}, "cron": {"type": "string"}, "at": {"type": "string"},
            "name": {"type": "string"}, "time_zone": {"type": "string"},
            "missed": {"type": "string", "enum": ["skip", "once"]},
            "id": {"type": "integer"}}, "required": ["action"]})
    }
    async fn run(&self, args: Args, ctx: &ToolContext) -> ToolResult {
        let store_error = |e: crate::store::StoreError| ToolError::new(e.to_string());
        match args {
            Args::Create { task, cron, at, name, time_zone, missed } => {
                let active = self.store.active_jobs(Some(&ctx.chat)).await.map_err(store_error)?;
                if active.len() >= MAX_JOBS_PER_CHAT {
                    return Err(ToolError::new(format!(
                        "this chat has {MAX_JOBS_PER_CHAT} jobs already; cancel one first"
                    )));
                }
                let spec = JobSpec { name, task, cron, at, time_zone, missed };
                let job = create_job(&self.store, &ctx.chat, spec, self.zone).await.map_err(
                    |e| match e {
                        JobError::Store(e) => store_error(e),
                        other => ToolError::new(other.to_string()),
                    },
                )?;
                Ok(success(describe(&job)))
            }
            Args::List => {
                let jobs = self.store.active_jobs(Some(&ctx.chat)).await.map_err(store_error)?;
                Ok(success(jobs.iter().map(describe).collect::<Vec<_>>()))
            }
            Args::Cancel { id } => {
                let job = self.store.job(id).await.map_err(store_error)?;
                match job {
                    Some(j) if j.chat == ctx.chat && j.heartbeat && j.state == "active" => {
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

fn describe(job: &crate::scheduler::jobs::Job) -> Value {
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
        ScheduleTask::new(Store::open(&dir.join("db")).await.unwrap(), Tz::UTC)
    }

    fn args(v: Value) -> Args {
        serde_json::from_value(v).unwrap()
    }

    #[tokio::test]
    async fn create_list_and_cancel_stay_within_the_chat() {
        let tool = tool("chat").await;
        let ctx = ToolContext::for_tests();
        let made = tool
            .run(args(json!({"action": "create", "task": "water the plants", "cron": "0 0 8 * * *", "time_zone": "Europe/Berlin"})), &ctx)
            .await
            .unwrap();
        let made: Value = serde_json::from_str(&made).unwrap_or_else(|_| json!(made));
        let text = made.to_string();
        assert!(text.contains("Europe/Berlin") && text.contains("skip"), "{text}");
        let other = ChatRef::console("other").unwrap();
        let theirs = create_job(
            &tool.store,
            &other,
            JobSpec { task: "x".into(), at: Some("in 1h".into()), ..JobSpec::default() },
            Tz::UTC,
        )
        .await
        .unwrap();
        let listed = tool.run(args(json!({"action": "list"})), &ctx).await.unwrap();
        assert!(listed.contains("water the plants") && !listed.contains("\"x\""), "{listed}");
        let err =
            tool.run(args(json!({"action": "cancel", "id": theirs.id})), &ctx).await.unwrap_err();
        assert!(err.0.contains("no active job"), "{}", err.0);
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
            assert!(err.0.contains(needle), "{v}: {}", err.0);
        }
    }
}
