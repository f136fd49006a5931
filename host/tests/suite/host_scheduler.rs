//! The scheduler inside the real app (SQLite, agent, bus, console channel) against the
//! scripted LLM: jobs fire and deliver to their chat, missed runs follow their policy across
//! a restart, the heartbeat is silent on `HEARTBEAT_OK`, and a full queue drops runs as busy.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::{base_env, TempWorkspace};
use nexbot_core::{ChannelKind, ChatRef};
use nexbot_host::agent::channel::{OutboundKind, OutboundMessage};
use nexbot_host::app::App;
use nexbot_host::channels::console::ConsoleChannel;
use nexbot_host::config::Config;
use nexbot_host::scheduler::jobs::JobRun;
use nexbot_host::scheduler::{create_job, JobSpec};
use nexbot_host::store::unix_now;
use nexbot_tests::scripted_llm::{ScriptedLlm, Step};
use serde_json::Value;
use tokio::sync::mpsc;

/// `quiet` checks answer HEARTBEAT_OK, `slow` tasks take 3 s, others get "done: <last line>".
fn responder(body: &Value) -> Step {
    let last = body["messages"].as_array().and_then(|m| m.last()).cloned().unwrap_or_default();
    let text = last["content"].as_str().unwrap_or("").to_owned();
    if last["role"] == "tool" {
        return Step::text("I could not do it.");
    }
    if text.contains("broken tool") {
        return Step::tool_call("read_file", serde_json::json!({"path": "/no/such/dir/file.txt"}));
    }
    if text.contains("quiet") {
        return Step::text("  HEARTBEAT_OK\n");
    }
    let step = Step::text(&format!("done: {}", text.lines().next().unwrap_or("")));
    if text.contains("slow") {
        step.delayed(Duration::from_secs(3))
    } else {
        step
    }
}

struct Harness {
    app: App,
    outbound: mpsc::Receiver<OutboundMessage>,
    config: Config,
}

fn config(ws: &TempWorkspace, llm: &ScriptedLlm, extra: &[(&str, &str)]) -> Config {
    let mut env = base_env(&llm.base_url());
    env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    let text = std::fs::read_to_string(ws.config()).unwrap();
    Config::from_parts(&text, &ws.config(), &ws.dir, env).unwrap()
}

async fn start(config: Config) -> Harness {
    let mut app = App::start(&config).await.unwrap();
    let (console, outbound) = ConsoleChannel::new(256);
    app.add_channel(ChannelKind::Console, Arc::new(console));
    Harness { app, outbound, config }
}

fn chat(name: &str) -> ChatRef {
    ChatRef::console(name).unwrap()
}

impl Harness {
    /// The next final message, within `secs`.
    async fn next_final(&mut self, secs: u64) -> Option<OutboundMessage> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
        loop {
            let m = tokio::time::timeout_at(deadline, self.outbound.recv()).await.ok()??;
            if m.kind == OutboundKind::Final {
                return Some(m);
            }
        }
    }

    async fn runs(&self, job: i64) -> Vec<JobRun> {
        self.app.store().job_runs(Some(job), 10_000).await.unwrap()
    }

    async fn wait_runs(
        &self,
        job: i64,
        secs: u64,
        done: impl Fn(&[JobRun]) -> bool,
    ) -> Vec<JobRun> {
        let deadline = std::time::Instant::now() + Duration::from_secs(secs);
        loop {
            let runs = self.runs(job).await;
            if done(&runs) {
                return runs;
            }
            assert!(std::time::Instant::now() < deadline, "runs never got there: {runs:#?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

fn spec(task: &str, cron: Option<&str>, at: Option<&str>) -> JobSpec {
    JobSpec {
        task: task.into(),
        cron: cron.map(str::to_owned),
        at: at.map(str::to_owned),
        ..JobSpec::default()
    }
}

fn count(runs: &[JobRun], outcome: &str) -> usize {
    runs.iter().filter(|r| r.outcome.as_str() == outcome).count()
}

#[tokio::test]
async fn an_every_second_job_fires_and_delivers_to_its_chat() {
    let ws = TempWorkspace::init("sched-every");
    let llm = ScriptedLlm::start(vec![]).await;
    llm.set_responder(responder);
    let mut h = start(config(&ws, &llm, &[])).await;
    let zone = chrono_tz::Tz::UTC;
    let job =
        create_job(h.app.store(), &chat("jobs"), spec("say tick", Some("* * * * * *"), None), zone)
            .await
            .unwrap();
    assert_eq!(job.missed.as_str(), "skip", "recurring jobs skip missed runs by default");
    for _ in 0..2 {
        let m = h.next_final(15).await.expect("the job delivered nothing");
        assert_eq!(m.chat, chat("jobs"));
        assert!(m.text.starts_with("Scheduled «say tick»:"), "{}", m.text);
        assert!(m.text.contains("done: Scheduled job #"), "{}", m.text);
    }
    let runs = h.wait_runs(job.id, 15, |r| count(r, "ok") >= 2).await;
    let ok: Vec<&JobRun> = runs.iter().filter(|r| r.outcome.as_str() == "ok").collect();
    for run in &ok {
        assert!(run.prompt_tokens + run.completion_tokens > 0, "{run:?}");
        assert!(run.message.as_deref().unwrap_or("").contains("done:"), "{run:?}");
        let (start, end) = (run.started_at.unwrap(), run.ended_at.unwrap());
        assert!(run.scheduled_at <= start && start <= end, "{run:?}");
    }
    // One run per second: distinct scheduled times.
    assert_ne!(ok[0].scheduled_at, ok[1].scheduled_at);
    assert!(h.app.store().cancel_job(job.id, None).await.unwrap());
    h.app.stop().await;
}

/// A run whose every tool call failed is recorded failed and says so in the chat, even though
/// the model wrote an answer.
#[tokio::test]
async fn a_run_whose_tools_failed_is_failed_not_a_success() {
    let ws = TempWorkspace::init("sched-toolfail");
    let llm = ScriptedLlm::start(vec![]).await;
    llm.set_responder(responder);
    let mut h = start(config(&ws, &llm, &[])).await;
    let job = create_job(
        h.app.store(),
        &chat("tf"),
        spec("use the broken tool", None, Some("in 1s")),
        chrono_tz::Tz::UTC,
    )
    .await
    .unwrap();
    let m = h.next_final(15).await.expect("nothing delivered");
    assert!(m.text.starts_with("Scheduled «use the broken tool» failed:"), "{}", m.text);
    let runs = h.wait_runs(job.id, 10, |r| r.iter().any(|r| r.ended_at.is_some())).await;
    assert_eq!(runs[0].outcome.as_str(), "failed", "{runs:#?}");
    assert!(runs[0].detail.as_deref().unwrap_or("").contains("every tool call failed"));
    assert_eq!(h.app.scheduler().unwrap().failed.load(std::sync::atomic::Ordering::Relaxed), 1);
    h.app.stop().await;
}

/// The agent's own tool: a user asks, the model calls `schedule_task`, the user confirms the
/// one-shot job, it runs later as a turn of that chat and its answer arrives there.
#[tokio::test]
async fn the_agent_schedules_a_reminder_for_the_chat_that_asks() {
    let ws = TempWorkspace::init("sched-tool");
    let llm = ScriptedLlm::start(vec![
        Step::tool_call(
            "schedule_task",
            serde_json::json!({"action": "create", "task": "remind about tea", "at": "in 2s", "name": "tea"}),
        ),
        Step::text("I will remind you."),
    ])
    .await;
    llm.set_responder(responder);
    let mut h = start(config(&ws, &llm, &[])).await;
    h.app
        .inbound()
        .send(nexbot_host::bus::InboundMessage {
            chat: chat("asker"),
            id: 1,
            text: "remind me about tea in 2 seconds".into(),
            user: None,
            files: Vec::new(),
        })
        .await
        .unwrap();
    // Nothing is stored until the chat's user says yes (here through the approvals, as
    // `nexbot-ctl approvals answer` does).
    let approvals = h.app.approvals().unwrap().clone();
    let waiting = wait_pending(&approvals, "schedule").await;
    assert!(h.app.store().active_jobs(None).await.unwrap().is_empty(), "stored before the yes");
    let allow = nexbot_host::approvals::Choice::parse("allow").unwrap();
    approvals.answer(waiting, allow, "test", None).unwrap();
    let first = h.next_final(15).await.unwrap();
    assert_eq!((first.chat.clone(), first.text.as_str()), (chat("asker"), "I will remind you."));
    let jobs = h.app.store().active_jobs(Some(&chat("asker"))).await.unwrap();
    assert_eq!(jobs.len(), 1, "{jobs:#?}");
    assert_eq!((jobs[0].name.as_str(), jobs[0].missed.as_str()), ("tea", "once"));
    let reminder = h.next_final(15).await.expect("the reminder never came");
    assert_eq!(reminder.chat, chat("asker"));
    assert!(reminder.text.starts_with("Scheduled «tea»:"), "{}", reminder.text);
    assert!(reminder.text.contains("remind about tea"), "{}", reminder.text);
    h.wait_runs(jobs[0].id, 10, |r| count(r, "ok") == 1).await;
    assert_eq!(h.app.store().job(jobs[0].id).await.unwrap().unwrap().state.as_str(), "done");
    h.app.stop().await;
}

/// The id of the first waiting question of `kind`, once there is one (at most 15 s).
async fn wait_pending(approvals: &nexbot_host::approvals::Approvals, kind: &str) -> i64 {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        if let Some(p) = approvals.pending().into_iter().find(|p| p.kind == kind) {
            return p.id;
        }
        assert!(tokio::time::Instant::now() < deadline, "no {kind} question came");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A job's run that tries to schedule the next one (the self-renewing chain) is refused with
/// a clear reason, and nothing is stored or asked.
#[tokio::test]
async fn a_jobs_run_that_schedules_again_is_refused_and_nothing_is_stored() {
    let ws = TempWorkspace::init("sched-renew");
    let llm = ScriptedLlm::start(vec![]).await;
    llm.set_responder(|body| {
        let last = body["messages"].as_array().and_then(|m| m.last()).cloned().unwrap_or_default();
        if last["role"] == "tool" {
            let said = last["content"].as_str().unwrap_or_default().to_owned();
            return Step::text(&format!("tool said: {said}"));
        }
        Step::tool_call(
            "schedule_task",
            serde_json::json!({"action": "create", "task": "run me again", "at": "in 3s"}),
        )
    });
    let mut h = start(config(&ws, &llm, &[])).await;
    let zone = chrono_tz::Tz::UTC;
    let job =
        create_job(h.app.store(), &chat("renew"), spec("run me again", None, Some("in 1s")), zone)
            .await
            .unwrap();
    let answer = h.next_final(20).await.expect("the job's answer");
    assert!(answer.text.contains("may not store jobs"), "{}", answer.text);
    h.wait_runs(job.id, 10, |r| r.iter().any(|r| r.ended_at.is_some())).await;
    let active = h.app.store().active_jobs(None).await.unwrap();
    assert!(active.is_empty(), "the chain's next link was stored: {active:#?}");
    assert!(h.app.approvals().unwrap().pending().is_empty(), "nobody was asked");
    h.app.stop().await;
}

#[tokio::test]
async fn a_one_shot_due_while_stopped_runs_once_after_restart_and_a_recurring_one_skips() {
    let ws = TempWorkspace::init("sched-restart");
    let llm = ScriptedLlm::start(vec![]).await;
    llm.set_responder(responder);
    let cfg = config(&ws, &llm, &[("NEXBOT_SCHEDULER__LATE_SECS", "1")]);
    let h = start(cfg.clone()).await;
    let zone = chrono_tz::Tz::UTC;
    let once = create_job(h.app.store(), &chat("r"), spec("remind me", None, Some("in 2s")), zone)
        .await
        .unwrap();
    assert_eq!(once.missed.as_str(), "once");
    let every =
        create_job(h.app.store(), &chat("r"), spec("every", Some("* * * * * *"), None), zone)
            .await
            .unwrap();
    // Stop at once: the one-shot is due while the daemon is down.
    h.app.stop().await;
    let stopped_at = unix_now();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let restarted_at = unix_now();
    let mut h = start(cfg).await;
    let m = h.next_final(20).await.expect("the missed one-shot did not run");
    let first = if m.text.contains("remind me") {
        m
    } else {
        // The recurring job's on-time run may come first.
        loop {
            let m = h.next_final(20).await.expect("the missed one-shot did not run");
            if m.text.contains("remind me") {
                break m;
            }
        }
    };
    assert!(first.text.starts_with("Scheduled «remind me»:"), "{}", first.text);
    let runs = h.wait_runs(once.id, 10, |r| count(r, "ok") == 1).await;
    assert_eq!(runs.len(), 1, "exactly one run: {runs:#?}");
    assert!(runs[0].detail.as_deref().unwrap_or("").contains("missed by"), "{runs:#?}");
    let job = h.app.store().job(once.id).await.unwrap().unwrap();
    assert_eq!(job.state.as_str(), "done");
    // The recurring job: the seconds it was down are recorded skipped, none of them ran.
    let runs = h.wait_runs(every.id, 10, |r| count(r, "skipped") >= 3).await;
    for run in &runs {
        if run.scheduled_at > stopped_at && run.scheduled_at < restarted_at {
            assert_eq!(run.outcome.as_str(), "skipped", "a missed run ran late: {run:?}");
        }
    }
    assert!(h.app.store().cancel_job(every.id, None).await.unwrap());
    // Nothing more for the one-shot, ever.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(h.runs(once.id).await.len(), 1);
    h.app.stop().await;
}

#[tokio::test]
async fn the_heartbeat_is_silent_when_ok_and_delivers_anything_else_to_the_owner() {
    let ws = TempWorkspace::init("sched-heartbeat");
    let llm = ScriptedLlm::start(vec![]).await;
    llm.set_responder(responder);
    let mut h = start(config(&ws, &llm, &[])).await;
    let file = h.config.workspace.dir.join("HEARTBEAT.md");
    std::fs::write(
        &file,
        "# Heartbeat\n\n### Quiet\n- Schedule: \"* * * * * *\"\n- Task: \"quiet check\"\n\n\
         ### Loud\n- Schedule: \"* * * * * *\"\n- Task: \"disk check\"\n\n\
         ### Bad\n- Schedule: \"sometimes\"\n- Task: \"x\"\n",
    )
    .unwrap();
    let m = h.next_final(20).await.expect("the loud check delivered nothing");
    assert_eq!(m.chat, ChatRef::default_console(), "the owner chat without Telegram");
    assert!(m.text.starts_with("Heartbeat «Loud»:"), "{}", m.text);
    let jobs = h.app.store().active_jobs(None).await.unwrap();
    assert_eq!(jobs.len(), 2, "the bad entry is left out: {jobs:#?}");
    assert!(jobs.iter().all(|j| j.heartbeat));
    let quiet = jobs.iter().find(|j| j.name == "Quiet").unwrap().id;
    let runs = h.wait_runs(quiet, 15, |r| count(r, "ok") >= 2).await;
    for run in runs.iter().filter(|r| r.outcome.as_str() == "ok") {
        assert_eq!(run.message, None, "{run:?}");
        assert!(run.detail.as_deref().unwrap_or("").contains("not sent"));
        assert!(run.prompt_tokens > 0);
    }
    let problems = h.app.scheduler().unwrap().heartbeat_problems.lock().unwrap().clone();
    assert_eq!(problems.len(), 1, "{problems:?}");
    // Emptying the file turns the heartbeat off.
    std::fs::write(&file, "# Heartbeat\n").unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !h.app.store().active_jobs(None).await.unwrap().is_empty() {
        assert!(std::time::Instant::now() < deadline, "checks still active");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    h.app.stop().await;
    // Nothing delivered ever said HEARTBEAT_OK.
    while let Ok(m) = h.outbound.try_recv() {
        assert!(!m.text.contains("HEARTBEAT_OK"), "{}", m.text);
    }
}

#[tokio::test]
async fn a_full_queue_records_runs_as_dropped_busy() {
    let ws = TempWorkspace::init("sched-busy");
    let llm = ScriptedLlm::start(vec![]).await;
    llm.set_responder(responder);
    let h = start(config(
        &ws,
        &llm,
        &[("NEXBOT_SCHEDULER__WORKERS", "1"), ("NEXBOT_SCHEDULER__QUEUE", "0")],
    ))
    .await;
    let job = create_job(
        h.app.store(),
        &chat("busy"),
        spec("slow work", Some("* * * * * *"), None),
        chrono_tz::Tz::UTC,
    )
    .await
    .unwrap();
    let dropped = |runs: &[JobRun]| {
        runs.iter().filter(|r| r.outcome.as_str() == "dropped: busy").map(|r| r.times).sum::<i64>()
    };
    let runs = h.wait_runs(job.id, 20, |r| dropped(r) >= 2 && count(r, "ok") >= 1).await;
    // The drops of one minute are one row that counts them.
    assert_eq!(count(&runs, "dropped: busy"), 1, "{runs:#?}");
    // One worker, no queue: never two runs at once.
    let running = runs
        .iter()
        .filter(|r| r.outcome.as_str() == "running" || r.outcome.as_str() == "queued")
        .count();
    assert!(running <= 1, "{runs:#?}");
    let stats = h.app.scheduler().unwrap();
    assert!(stats.dropped.load(std::sync::atomic::Ordering::Relaxed) >= 2);
    let store = h.app.store().clone();
    h.app.stop().await;
    // Stopping recorded the run it cut short; nothing is left open.
    let runs = store.job_runs(Some(job.id), 10_000).await.unwrap();
    assert!(
        runs.iter().all(|r| r.outcome.as_str() != "running" && r.outcome.as_str() != "queued"),
        "{runs:#?}"
    );
}

/// `nexbot serve` with the Telegram emulator: a job added through the control API (what
/// `nexbot-ctl cron add` sends) delivers to its Telegram chat; `cron ls` shows its measured
/// cost and a heartbeat check; `cron runs` the ledger with the message ids; the metrics count
/// the runs; `cron rm` cancels.
#[tokio::test]
async fn cron_through_the_control_api_delivers_over_telegram() {
    use nexbot_control::{
        cron_paths, Client, ClientError, CronAdd, CronJob, CronJobList, CronRunList, Done,
    };
    use nexbot_tests::telegram::TelegramFixture;
    const OWNER: i64 = 7001;
    let limit = Duration::from_secs(60);
    let tg = TelegramFixture::start().await;
    let llm = ScriptedLlm::start(vec![]).await;
    llm.set_responder(responder);
    let ws = TempWorkspace::init("sched-ctl");
    let mut env = base_env(&llm.base_url());
    common::telegram_env(&mut env, &tg, OWNER);
    std::fs::write(
        ws.dir.join("HEARTBEAT.md"),
        "### Nightly\n- Schedule: \"0 0 3 * * *\"\n- Task: \"quiet check\"\n",
    )
    .unwrap();
    let serving = common::Serving::start(&ws.config(), &env, limit).await;
    serving.wait_log("the control API is on", limit).await;
    let api = Client::new(ws.dir.join("nexbot.sock"));
    let bad = CronAdd {
        chat: format!("telegram:{OWNER}"),
        task: "x".into(),
        cron: Some("every minute".into()),
        ..CronAdd::default()
    };
    let err = api.post::<_, CronJob>(cron_paths::CRON, &bad).await.unwrap_err();
    assert!(matches!(err, ClientError::Daemon { status: 400, .. }), "{err}");
    assert!(err.to_string().contains("not a cron expression"), "{err}");
    let add = CronAdd {
        chat: format!("telegram:{OWNER}"),
        task: "report the weather".into(),
        name: Some("weather".into()),
        cron: Some("* * * * * *".into()),
        time_zone: Some("Europe/Berlin".into()),
        ..CronAdd::default()
    };
    let job: CronJob = api.post(cron_paths::CRON, &add).await.unwrap();
    assert_eq!((job.missed.as_str(), job.time_zone.as_str()), ("skip", "Europe/Berlin"));
    assert_eq!(job.runs_per_day, 86_400);
    tg.wait_bot_messages(
        OWNER,
        |m| m.iter().filter(|m| m.text.contains("weather")).count() >= 2,
        limit,
    )
    .await;
    let runs: CronRunList =
        api.get(&format!("{}?job={}&limit=50", cron_paths::CRON_RUNS, job.id)).await.unwrap();
    let ok: Vec<_> = runs.runs.iter().filter(|r| r.outcome.as_str() == "ok").collect();
    assert!(ok.len() >= 2, "{runs:#?}");
    assert!(ok.iter().all(|r| r.message_id.is_some() && r.tokens > 0), "{runs:#?}");
    let list: CronJobList = api.get(cron_paths::CRON).await.unwrap();
    let listed = list.jobs.iter().find(|j| j.id == job.id).unwrap();
    assert!(listed.tokens_per_run.unwrap() > 0.0, "{listed:?}");
    assert!(listed.tokens_per_day.unwrap() >= listed.tokens_per_run.unwrap() * 86_000.0);
    let nightly = list.jobs.iter().find(|j| j.heartbeat).expect("the heartbeat check is listed");
    assert_eq!((nightly.name.as_str(), nightly.runs_per_day), ("Nightly", 1));
    assert_eq!(nightly.chat, format!("telegram:{OWNER}"), "the owner's chat");
    let err = api
        .post::<_, Done>(&cron_paths::cron_remove(nightly.id), &serde_json::json!({}))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("HEARTBEAT.md"), "{err}");
    let metrics = api.get_text(nexbot_control::paths::METRICS).await.unwrap();
    assert!(metrics.contains("nexbot_scheduler_runs_submitted_total"), "{metrics}");
    assert!(metrics.contains("nexbot_scheduler_run_duration_seconds_count"), "{metrics}");
    let done: Done =
        api.post(&cron_paths::cron_remove(job.id), &serde_json::json!({})).await.unwrap();
    assert!(done.message.contains("cancelled"));
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let before: CronRunList =
        api.get(&format!("{}?job={}&limit=1000", cron_paths::CRON_RUNS, job.id)).await.unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after: CronRunList =
        api.get(&format!("{}?job={}&limit=1000", cron_paths::CRON_RUNS, job.id)).await.unwrap();
    assert_eq!(before.runs.len(), after.runs.len(), "a cancelled job ran");
    let err = api.post::<_, Done>(&cron_paths::cron_remove(job.id), &serde_json::json!({})).await;
    assert!(matches!(err, Err(ClientError::Daemon { status: 404, .. })));
    serving.stop(limit).await;
}

/// A job of a chat whose user turn is running waits for it: one turn at a time per chat,
/// whoever starts it, so a chat's history never interleaves.
#[tokio::test]
async fn a_job_waits_for_the_running_turn_of_its_chat() {
    let ws = TempWorkspace::init("sched-oneturn");
    let llm = ScriptedLlm::start(vec![]).await;
    llm.set_responder(responder);
    let mut h = start(config(&ws, &llm, &[])).await;
    let message = nexbot_host::bus::InboundMessage {
        chat: chat("shared"),
        id: 1,
        text: "a slow question".into(),
        user: None,
        files: Vec::new(),
    };
    h.app.inbound().send(message).await.unwrap();
    // Due in a second, while the user's turn (3 s) still runs.
    create_job(
        h.app.store(),
        &chat("shared"),
        spec("note it", None, Some("in 1s")),
        chrono_tz::Tz::UTC,
    )
    .await
    .unwrap();
    let first = h.next_final(20).await.expect("no answer");
    assert_eq!(first.text, "done: a slow question", "the job ran inside the user's turn");
    let second = h.next_final(20).await.expect("the job delivered nothing");
    assert!(second.text.starts_with("Scheduled «note it»:"), "{}", second.text);
    h.app.stop().await;
}

/// A scheduled run is a turn of its chat like a message's: `/status` shows it, `/stop` ends it
/// (recorded cancelled, saying so), the chat's next message is answered after it, and it
/// counts against `bus.max_parallel_turns` (with a limit of one, another chat's message waits
/// while it runs).
#[tokio::test]
async fn stop_and_status_reach_a_scheduled_run_which_counts_against_the_turn_limit() {
    let ws = TempWorkspace::init("sched-admission");
    let llm = ScriptedLlm::start(vec![]).await;
    llm.set_responder(|body| {
        let step = responder(body);
        let last = body["messages"].as_array().and_then(|m| m.last()).cloned();
        let text = last.and_then(|m| m["content"].as_str().map(str::to_owned)).unwrap_or_default();
        // Longer than the whole test: only `/stop` ends it.
        if text.contains("long report") {
            step.delayed(Duration::from_secs(120))
        } else {
            step
        }
    });
    let extra = [("NEXBOT_BUS__MAX_PARALLEL_TURNS", "1")];
    let mut h = start(config(&ws, &llm, &extra)).await;
    let jobs = chat("jobs");
    let job = create_job(
        h.app.store(),
        &jobs,
        spec("long report", None, Some("in 1s")),
        chrono_tz::Tz::UTC,
    )
    .await
    .unwrap();
    let send = |chat: &ChatRef, id: u64, text: &str| nexbot_host::bus::InboundMessage {
        chat: chat.clone(),
        id,
        text: text.into(),
        user: None,
        files: Vec::new(),
    };
    // `/status` in the job's chat shows the run once it has started.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let status = loop {
        h.app.inbound().send(send(&jobs, 1, "/status")).await.unwrap();
        let answer = h.next_final(10).await.expect("/status answered");
        if answer.text.contains("Running: scheduled job") {
            break answer.text;
        }
        assert!(std::time::Instant::now() < deadline, "/status never showed the run: {answer:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(status.contains(&format!("scheduled job #{} «", job.id)), "{status}");

    // Another chat's message waits for the one permit; the job's chat's next message waits
    // for its turn. Neither is answered while the run goes on.
    let other = chat("other");
    h.app.inbound().send(send(&other, 2, "hello")).await.unwrap();
    h.app.inbound().send(send(&jobs, 3, "and now?")).await.unwrap();
    let early = tokio::time::timeout(Duration::from_secs(2), h.next_final(2)).await;
    assert!(
        matches!(early, Ok(None) | Err(_)),
        "answered while the scheduled run held the only permit and the chat: {early:?}"
    );

    // `/stop` in the job's chat ends the run.
    h.app.inbound().send(send(&jobs, 4, "/stop")).await.unwrap();
    let mut answers = Vec::new();
    while answers.len() < 3 {
        let m = h.next_final(20).await.unwrap_or_else(|| panic!("missing answers: {answers:?}"));
        answers.push((m.chat.clone(), m.text.clone()));
    }
    assert_eq!(answers[0], (jobs.clone(), "Stopping the current task.".to_owned()));
    assert!(answers.contains(&(other.clone(), "done: hello".to_owned())), "{answers:?}");
    assert!(answers.contains(&(jobs.clone(), "done: and now?".to_owned())), "{answers:?}");
    let runs = h.wait_runs(job.id, 20, |r| r.iter().any(|r| r.ended_at.is_some())).await;
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(runs[0].outcome.as_str(), "cancelled", "{runs:?}");
    assert_eq!(runs[0].detail.as_deref(), Some("stopped in the chat with /stop"), "{runs:?}");
    assert!(runs[0].message.is_none(), "a stopped run delivers nothing: {runs:?}");
    h.app.stop().await;
}

/// The scheduler sleeps until something is due and is woken when a job changes: idle, it
/// does not wake on a tick; a job added meanwhile fires on its second.
#[tokio::test]
async fn an_idle_scheduler_sleeps_and_a_new_job_wakes_it() {
    let ws = TempWorkspace::init("sched-push");
    let llm = ScriptedLlm::start(vec![]).await;
    llm.set_responder(responder);
    let mut h = start(config(&ws, &llm, &[])).await;
    let stats = h.app.scheduler().unwrap().clone();
    let wakeups = || stats.wakeups.load(std::sync::atomic::Ordering::Relaxed);
    tokio::time::sleep(Duration::from_secs(3)).await;
    // Its first look, and at most one for the heartbeat's first sync; a 200 ms tick made 15.
    assert!(wakeups() <= 2, "an idle scheduler woke {} times in 3 s", wakeups());
    let before = wakeups();
    let job = create_job(
        h.app.store(),
        &chat("woken"),
        spec("say woken", None, Some("in 2s")),
        chrono_tz::Tz::UTC,
    )
    .await
    .unwrap();
    // Well before the scheduler's longest sleep (the heartbeat's look, 30 s) would find it.
    let m = h.next_final(10).await.expect("the new job never ran");
    assert!(m.text.starts_with("Scheduled «say woken»:"), "{}", m.text);
    let runs = h.wait_runs(job.id, 10, |r| count(r, "ok") == 1).await;
    assert!(runs[0].started_at.unwrap() >= runs[0].scheduled_at, "{runs:?}");
    assert!(wakeups() - before <= 4, "woke {} times for one job", wakeups() - before);
    h.app.stop().await;
}

/// A job's run tells the model it is a stored task (when, by whom, from which turn), not the
/// user's fresh message; and a run that would go on past the job's token budget is stopped,
/// recorded `over budget` with what it used, and says so in the chat.
#[tokio::test]
async fn a_run_is_marked_as_a_stored_task_and_stops_at_its_token_budget() {
    use nexbot_host::scheduler::jobs::JobCreator;
    let ws = TempWorkspace::init("sched-budget");
    let llm = ScriptedLlm::start(vec![]).await;
    // The model never stops calling tools (15 tokens a call, the fixture's usage).
    llm.set_responder(|_| Step::tool_call("schedule_task", serde_json::json!({"action": "list"})));
    let mut h = start(config(&ws, &llm, &[])).await;
    let mut job = spec("compile the digest", None, Some("in 1s"));
    job.created_by = JobCreator::Chat { turn: "scheduled job #3 «x»".into() };
    job.token_budget = Some(20);
    let job = create_job(h.app.store(), &chat("budget"), job, chrono_tz::Tz::UTC).await.unwrap();
    let runs = h.wait_runs(job.id, 20, |r| count(r, "over budget") == 1).await;
    let run = runs.iter().find(|r| r.outcome.as_str() == "over budget").unwrap();
    assert_eq!(run.prompt_tokens + run.completion_tokens, 30, "stopped after the second call");
    let detail = run.detail.as_deref().unwrap_or_default();
    assert!(detail.contains("30 tokens") && detail.contains("budget per run is 20"), "{detail}");
    let calls = llm.chat_requests();
    assert_eq!(calls.len(), 2, "no model call past the budget");
    let prompt = nexbot_tests::scripted_llm::last_user(&calls[0].body);
    for needle in [
        "It was stored on",
        "not a new message from the user",
        "this chat's assistant, in a turn started by scheduled job #3 «x»",
        "«compile the digest»",
    ] {
        assert!(prompt.contains(needle), "{needle:?} in {prompt}");
    }
    let told = h.next_final(10).await.expect("the chat is told");
    assert!(told.text.contains("stopped (over its token budget)"), "{}", told.text);
    assert!(told.text.contains("more than its budget of 20"), "{}", told.text);
    h.app.stop().await;
}

/// A recurring job the model wants is stored only when the chat's user presses Allow under
/// the question — one of the approvals' questions (through the real bot, the emulator and its
/// callback queries): Deny, and a stale button, store nothing; `nexbot-ctl approvals` lists
/// and answers it too.
#[tokio::test]
async fn a_chats_recurring_job_waits_for_the_users_confirmation_in_telegram() {
    use nexbot_control::{cron_paths, Client, CronJobList};
    use nexbot_tests::telegram::TelegramFixture;
    const OWNER: i64 = 7002;
    let limit = Duration::from_secs(60);
    let tg = TelegramFixture::start().await;
    let llm = ScriptedLlm::start(vec![]).await;
    llm.set_responder(|body| {
        let last = body["messages"].as_array().and_then(|m| m.last()).cloned().unwrap_or_default();
        let text = last["content"].as_str().unwrap_or("").to_owned();
        if last["role"] == "tool" {
            return Step::text(&format!("tool said: {text}"));
        }
        Step::tool_call(
            "schedule_task",
            serde_json::json!({"action": "create", "task": "send the morning digest",
                               "cron": "0 0 9 * * *"}),
        )
    });
    let ws = TempWorkspace::init("sched-confirm");
    let mut env = base_env(&llm.base_url());
    common::telegram_env(&mut env, &tg, OWNER);
    let serving = common::Serving::start(&ws.config(), &env, limit).await;
    serving.wait_log("the control API is on", limit).await;
    let api = Client::new(ws.dir.join("nexbot.sock"));
    let jobs = || async {
        let list: CronJobList = api.get(cron_paths::CRON).await.unwrap();
        list.jobs
    };
    let question = |n: usize| {
        let tg = &tg;
        async move {
            let messages = tg
                .wait_bot_messages(
                    OWNER,
                    |m| m.iter().filter(|m| m.text.contains("wants to schedule")).count() >= n,
                    limit,
                )
                .await;
            let asked = messages.into_iter().rev().find(|m| m.text.contains("wants to schedule"));
            let asked = asked.unwrap();
            let rows = asked.json["reply_markup"]["inline_keyboard"].as_array().cloned();
            let buttons: Vec<(String, String)> = rows
                .unwrap_or_default()
                .iter()
                .flat_map(|row| row.as_array().cloned().unwrap_or_default())
                .map(|b| {
                    let text = |k: &str| b[k].as_str().unwrap_or_default().to_owned();
                    (text("text"), text("callback_data"))
                })
                .collect();
            (asked, buttons)
        }
    };

    tg.user_says(OWNER, OWNER, "send me a digest every morning").await;
    let (asked, buttons) = question(1).await;
    assert!(asked.text.contains("«send the morning digest»"), "{}", asked.text);
    assert!(asked.text.contains("0 0 9 * * *") && asked.text.contains("100000 tokens"));
    let labels: Vec<&str> = buttons.iter().map(|(label, _)| label.as_str()).collect();
    assert_eq!(labels, ["Allow", "Deny"], "{buttons:?}");
    let waiting: nexbot_control::ApprovalList =
        api.get(nexbot_control::approvals_paths::APPROVALS).await.unwrap();
    assert_eq!(waiting.pending.len(), 1, "{waiting:?}");
    assert_eq!(waiting.pending[0].kind, "schedule", "{waiting:?}");
    // A button that is not this question's answers nothing.
    let pressed = tg.user_clicks(OWNER, OWNER, asked.message_id, "/approve 999999 allow").await;
    let stale = "is waiting (it was answered";
    let said = tg.press_answer(&pressed, limit).await;
    assert!(said.contains(stale), "{said}");
    assert!(jobs().await.is_empty(), "a stale button stored the job");
    tg.user_clicks(OWNER, OWNER, asked.message_id, &buttons[1].1).await;
    tg.wait_bot_messages(OWNER, |m| m.iter().any(|m| m.text.contains("refused")), limit).await;
    assert!(jobs().await.is_empty(), "a refused job was stored");
    // The old question's buttons are stale once it was answered.
    let pressed = tg.user_clicks(OWNER, OWNER, asked.message_id, &buttons[0].1).await;
    let said = tg.press_answer(&pressed, limit).await;
    assert!(said.contains(stale), "{said}");
    assert!(jobs().await.is_empty(), "an answered question's button stored the job");

    tg.user_says(OWNER, OWNER, "send me a digest every morning, please").await;
    let (asked, buttons) = question(2).await;
    tg.user_clicks(OWNER, OWNER, asked.message_id, &buttons[0].1).await;
    let said = tg.wait_bot_messages(
        OWNER,
        |m| m.iter().filter(|m| m.text.contains("tool said: {")).count() >= 2,
        limit,
    );
    let said = said.await;
    let last = said.iter().rev().find(|m| m.text.contains("tool said: {")).unwrap();
    assert!(last.text.contains("\"success\":true"), "{}", last.text);
    let stored = jobs().await;
    assert_eq!(stored.len(), 1, "{stored:?}");
    assert_eq!(stored[0].chat, format!("telegram:{OWNER}"));
    assert_eq!((stored[0].token_budget, stored[0].token_budget_default), (100_000, true));
    assert!(
        stored[0].created_by.starts_with("this chat's assistant, in a turn started by a message"),
        "{:?}",
        stored[0].created_by
    );
    serving.stop(limit).await;
}

/// One chat's many due jobs cannot starve another chat: with one worker and a short queue, a
/// greedy chat's every-second slow jobs keep the queue full, yet another chat's run takes the
/// place of the greedy chat's newest and runs next; and each greedy job's drops within a
/// minute are one ledger row that counts them.
#[tokio::test]
async fn a_chat_with_many_jobs_gets_its_share_and_the_others_still_run() {
    let ws = TempWorkspace::init("sched-fair");
    let llm = ScriptedLlm::start(vec![]).await;
    llm.set_responder(responder);
    let h = start(config(
        &ws,
        &llm,
        &[("NEXBOT_SCHEDULER__WORKERS", "1"), ("NEXBOT_SCHEDULER__QUEUE", "2")],
    ))
    .await;
    let mut greedy = Vec::new();
    for i in 0..4 {
        let job = spec(&format!("slow work {i}"), Some("* * * * * *"), None);
        let job = create_job(h.app.store(), &chat("greedy"), job, chrono_tz::Tz::UTC).await;
        greedy.push(job.unwrap().id);
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let other = spec("a quick note", None, Some("in 1s"));
    let other = create_job(h.app.store(), &chat("other"), other, chrono_tz::Tz::UTC).await.unwrap();
    let runs = h.wait_runs(other.id, 20, |r| count(r, "ok") == 1).await;
    assert_eq!(runs.len(), 1, "{runs:#?}");
    let mut dropped_rows = 0;
    let mut dropped_runs = 0;
    for job in &greedy {
        for run in h.runs(*job).await.iter().filter(|r| r.outcome.as_str() == "dropped: busy") {
            dropped_rows += 1;
            dropped_runs += run.times;
        }
    }
    assert!(
        dropped_runs > dropped_rows,
        "drops of a minute are one row: {dropped_runs} in {dropped_rows}"
    );
    assert!(dropped_rows <= 2 * greedy.len() as i64, "{dropped_rows} rows");
    h.app.stop().await;
}
