//! `nexbot-ctl cron add|ls|rm|runs`: the scheduler's jobs and their run ledger.

use clap::{Args, Subcommand};
use nexbot_control::{cron_paths, CronAdd, CronJob, CronJobList, CronRun, CronRunList, Done};

use crate::commands::{encode, get, post, show, Ctx};
use crate::render::{cut, one_line, or_dash, utc_time, Table};

#[derive(Debug, Subcommand)]
pub enum CronCommand {
    /// Add a job: recurring with --cron, or one-shot with --at
    Add(AddArgs),
    /// The active jobs (heartbeat checks too) with tokens per run and per day
    Ls {
        /// Only jobs of this chat (`telegram:<id>`, `console:<name>`)
        #[arg(long, value_name = "CHATREF")]
        chat: Option<String>,
    },
    /// Cancel a job (its runs stay in the ledger)
    Rm {
        /// Job id, as `cron ls` shows it
        id: i64,
    },
    /// The run ledger, newest first: every run, skip and drop
    Runs {
        /// Only runs of this job
        #[arg(long)]
        job: Option<i64>,
        /// How many rows at most
        #[arg(long, short = 'n', default_value_t = 20)]
        limit: u32,
    },
}

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("when").required(true).args(["cron", "at"])))]
pub struct AddArgs {
    /// The chat the job belongs to and answers in (`telegram:<id>`, `console:<name>`)
    #[arg(long, value_name = "CHATREF")]
    pub chat: String,
    /// Cron expression: six fields with seconds first ("*/30 * * * * *"), or five
    #[arg(long)]
    pub cron: Option<String>,
    /// One-shot: "2026-05-01 09:00" (in the zone), RFC 3339, or a delay ("in 10m")
    #[arg(long)]
    pub at: Option<String>,
    /// IANA time zone [default: the daemon's scheduler.time_zone]
    #[arg(long = "tz", value_name = "ZONE")]
    pub time_zone: Option<String>,
    /// When the daemon was down at the time: skip, or once (run once at start-up)
    #[arg(long, value_parser = ["skip", "once"])]
    pub missed: Option<String>,
    /// A short name [default: the task's beginning]
    #[arg(long)]
    pub name: Option<String>,
    /// Tokens one run may use; a run that passes it is stopped and recorded "over budget"
    /// [default: the daemon's scheduler.job_token_budget]
    #[arg(long, value_name = "TOKENS")]
    pub budget: Option<u64>,
    /// What the agent does at each run
    #[arg(required = true, num_args = 1..)]
    pub task: Vec<String>,
}

pub async fn run(ctx: &Ctx, command: CronCommand) -> anyhow::Result<()> {
    match command {
        CronCommand::Add(a) => {
            let body = CronAdd {
                chat: a.chat,
                task: a.task.join(" "),
                name: a.name,
                cron: a.cron,
                at: a.at,
                time_zone: a.time_zone,
                missed: a.missed,
                token_budget: a.budget,
            };
            let value = post(ctx, cron_paths::CRON, &body).await?;
            show(ctx, value, |j: CronJob| jobs(std::slice::from_ref(&j)))
        }
        CronCommand::Ls { chat } => {
            let mut path = cron_paths::CRON.to_owned();
            if let Some(chat) = chat {
                path.push_str(&format!("?chat={}", encode(&chat)));
            }
            let value = get(ctx, &path).await?;
            show(ctx, value, |l: CronJobList| jobs(&l.jobs))
        }
        CronCommand::Rm { id } => {
            let value = post(ctx, &cron_paths::cron_remove(id), &serde_json::json!({})).await?;
            show(ctx, value, |d: Done| format!("{}\n", d.message))
        }
        CronCommand::Runs { job, limit } => {
            let mut path = format!("{}?limit={limit}", cron_paths::CRON_RUNS);
            if let Some(job) = job {
                path.push_str(&format!("&job={job}"));
            }
            let value = get(ctx, &path).await?;
            show(ctx, value, |l: CronRunList| runs(&l.runs))
        }
    }
}

fn tokens(t: Option<f64>) -> String {
    t.map_or_else(|| "-".to_owned(), |t| format!("{t:.0}"))
}

/// `cron ls`: one row per job.
pub fn jobs(list: &[CronJob]) -> String {
    let mut t = Table::new(&[
        "id", "kind", "chat", "name", "schedule", "zone", "missed", "next", "tok/run", "budget",
        "runs/day", "tok/day", "by",
    ]);
    for j in list {
        t.row(vec![
            j.id.to_string(),
            if j.heartbeat { "heartbeat" } else { "job" }.to_owned(),
            j.chat.clone(),
            cut(&one_line(&j.name), 30),
            j.schedule.clone(),
            j.time_zone.clone(),
            j.missed.clone(),
            j.next_run_local.clone().unwrap_or_else(|| "-".into()),
            tokens(j.tokens_per_run),
            if j.token_budget_default {
                format!("{} (default)", j.token_budget)
            } else {
                j.token_budget.to_string()
            },
            j.runs_per_day.to_string(),
            tokens(j.tokens_per_day),
            cut(&one_line(&j.created_by), 40),
        ]);
    }
    t.render()
}

fn time(t: Option<i64>) -> String {
    or_dash(t, utc_time)
}

/// `cron runs`: one row per ledger entry.
pub fn runs(list: &[CronRun]) -> String {
    let mut t = Table::new(&[
        "run",
        "job",
        "scheduled",
        "started",
        "ended",
        "outcome",
        "tokens",
        "detail",
        "message",
    ]);
    for r in list {
        t.row(vec![
            r.id.to_string(),
            r.job_id.to_string(),
            time(Some(r.scheduled_at)),
            time(r.started_at),
            time(r.ended_at),
            if r.times > 1 { format!("{} (×{})", r.outcome, r.times) } else { r.outcome.clone() },
            r.tokens.to_string(),
            r.detail.as_deref().map_or_else(|| "-".into(), |d| cut(&one_line(d), 60)),
            r.message.as_deref().map_or_else(|| "-".into(), |m| cut(&one_line(m), 60)),
        ]);
    }
    t.render()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jobs_show_their_cost_and_kind() {
        let job = CronJob {
            id: 7,
            chat: "telegram:1".into(),
            name: "Disk".into(),
            task: "check".into(),
            schedule: "0 */5 * * * *".into(),
            time_zone: "Europe/Berlin".into(),
            missed: "skip".into(),
            heartbeat: true,
            next_run: Some(0),
            next_run_local: Some("2026-01-01 00:05:00 CET".into()),
            tokens_per_run: Some(120.4),
            runs_measured: 3,
            tokens_per_day: Some(34_675.2),
            runs_per_day: 288,
            token_budget: 5_000,
            token_budget_default: true,
            created_by: "HEARTBEAT.md".into(),
        };
        let text = jobs(&[job]);
        let row = text.lines().nth(1).unwrap();
        for cell in [
            "heartbeat",
            "0 */5 * * * *",
            "Europe/Berlin",
            "120",
            "5000 (default)",
            "288",
            "34675",
            "HEARTBEAT.md",
        ] {
            assert!(row.contains(cell), "{cell} in {row}");
        }
        assert!(text.lines().next().unwrap().contains("TOK/DAY"));
    }

    #[test]
    fn runs_show_skips_and_drops_with_their_reason() {
        let run = |id, outcome: &str, detail: Option<&str>| CronRun {
            id,
            job_id: 1,
            scheduled_at: 0,
            started_at: None,
            ended_at: Some(0),
            outcome: outcome.into(),
            detail: detail.map(str::to_owned),
            tokens: 0,
            times: 1,
            message: None,
            message_id: None,
        };
        let text = runs(&[run(2, "dropped: busy", None), run(1, "skipped", Some("missed by 90s"))]);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(lines[1].contains("dropped: busy"));
        assert!(lines[2].contains("skipped") && lines[2].contains("missed by 90s"));
        assert!(lines[2].contains("1970-01-01 00:00:00"), "{}", lines[2]);
    }
}
