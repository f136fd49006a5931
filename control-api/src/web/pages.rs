//! The dashboard's HTML: pure functions from the control API's answers to markup (maud
//! escapes every value), and the fragments the live stream re-sends.

use maud::{html, Markup, DOCTYPE};
use nexbot_control::human::{human_ms, human_secs, human_size, or_dash, short_id, utc_time};
use nexbot_control::{
    ApprovalList, CronJobList, CronRunList, Health, MessageList, PoolSummary, SecretList,
    SkillList, Status, SubagentList, TaskDetail, TaskRow,
};

use super::TaskFilter;
use crate::{ops, ApiError, ControlState};

/// The stylesheet and the script, compiled into the binary (no CDN, no build step).
pub const CSS: &str = include_str!("assets/app.css");
pub const JS: &str = include_str!("assets/app.js");

/// Rows the tasks page shows.
const TASK_ROWS: i64 = 100;
/// Log lines a task's page shows at most.
const TASK_LOG_LINES: usize = 200;

/// The page a link of the navigation is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Nav {
    Overview,
    Tasks,
    Questions,
    Chats,
    Jobs,
    Skills,
    Secrets,
    Memory,
}

const NAV: [(Nav, &str, &str); 8] = [
    (Nav::Overview, "/", "Overview"),
    (Nav::Tasks, "/tasks", "Tasks"),
    (Nav::Questions, "/questions", "Questions"),
    (Nav::Chats, "/chats", "Chats"),
    (Nav::Jobs, "/jobs", "Jobs"),
    (Nav::Skills, "/skills", "Skills"),
    (Nav::Secrets, "/secrets", "Secrets"),
    (Nav::Memory, "/memory", "Memory"),
];

fn head(title: &str) -> Markup {
    html! {
        meta charset="utf-8";
        meta name="viewport" content="width=device-width, initial-scale=1";
        title { (title) " · Nexbot" }
        link rel="stylesheet" href="/static/app.css";
        script src="/static/app.js" defer {}
    }
}

/// The page around every view: navigation, the last action's message (`flash`), a log-out
/// button carrying the session's `csrf` token.
pub fn layout(title: &str, active: Nav, csrf: &str, flash: Option<&str>, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head { (head(title)) }
            body {
                header {
                    a.brand href="/" { "Nexbot" }
                    nav aria-label="Sections" {
                        ul {
                            @for (nav, href, label) in NAV {
                                li {
                                    @if nav == active {
                                        a href=(href) aria-current="page" { (label) }
                                    } @else {
                                        a href=(href) { (label) }
                                    }
                                }
                            }
                            li { a href="/metrics" { "Metrics" } }
                        }
                    }
                    form.inline method="post" action="/logout" {
                        (csrf_field(csrf))
                        button type="submit" { "Log out" }
                    }
                }
                main {
                    @if let Some(flash) = flash {
                        p.flash role="status" { (flash) }
                    }
                    h1 { (title) }
                    (body)
                }
            }
        }
    }
}

/// The page for a request without a session.
pub fn login(problem: Option<&str>) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head { (head("Log in")) }
            body {
                main.narrow {
                    h1 { "Nexbot dashboard" }
                    @if let Some(problem) = problem { p.flash role="status" { (problem) } }
                    p { "Log in with a one-time link. On the daemon's machine run:" }
                    pre { "nexbot-ctl web login" }
                    p { "(with compose: " code { "docker compose exec host nexbot-ctl web login" }
                        ") and open the link it prints within five minutes." }
                }
            }
        }
    }
}

/// A refusal or a missing page, with a way back.
pub fn refused(message: &str) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head { (head("Refused")) }
            body { main.narrow { h1 { "Refused" } p { (message) } p { a href="/" { "Back to the overview" } } } }
        }
    }
}

/// A part of a page that could not be read.
pub fn problem(message: &str) -> Markup {
    html! { p.problem role="alert" { (message) } }
}

pub fn csrf_field(csrf: &str) -> Markup {
    html! { input type="hidden" name="csrf" value=(csrf); }
}

/// Unix seconds as `nexbot-ctl` shows them, marked UTC.
fn time(unix: i64) -> String {
    format!("{} UTC", utc_time(unix))
}

/// What the overview shows, read from the daemon's parts.
pub struct OverviewData {
    health: Health,
    status: Status,
    pool: Result<SubagentList, ApiError>,
    hours: Vec<nexbot_store::HourActivity>,
}

impl OverviewData {
    pub async fn gather(s: &ControlState) -> Self {
        let hours = s.0.store.hourly_activity(nexbot_store::unix_now(), 24).await;
        Self {
            health: ops::health(s).await,
            status: ops::status(s).await,
            pool: ops::subagents(s),
            hours: hours.unwrap_or_default(),
        }
    }
}

pub fn overview(v: &OverviewData, csrf: &str) -> Markup {
    let st = &v.status;
    let sp = &st.spend;
    html! {
        section aria-labelledby="pool-h" {
            h2 #pool-h { "Sub-agent pool" }
            div #pool data-live="pool" aria-live="polite" {
                (pool(st.pool.as_ref(), st.delegation_off.as_deref(), v.pool.as_ref().ok(), csrf))
            }
        }
        div.overview {
            section aria-labelledby="health-h" {
                h2 #health-h { "Health" }
                p {
                    @if v.health.ready { span.ok { "Ready" } } @else { span.bad { "Not ready" } }
                    " · version " (st.version) " · up " (human_secs(st.uptime_secs)) " · model " code { (st.model) }
                }
                @for p in &v.health.problems { p.bad { (p) } }
                @if !v.health.degraded.is_empty() {
                    h3 { "Degraded" }
                    ul { @for d in &v.health.degraded { li { (d) } } }
                }
                dl.pairs {
                    @for c in &st.channels { dt { (c.name) } dd { (c.health) } }
                    dt { "scheduler" } dd { (st.scheduler) }
                    dt { "vault" } dd { (st.vault) }
                    dt { "database" } dd { (human_size(st.database_bytes)) }
                }
                form.inline method="post" action="/reload" {
                    (csrf_field(csrf))
                    button type="submit" { "Reload settings" }
                }
            }
            section aria-labelledby="spend-h" {
                h2 #spend-h { "Spend" }
                dl.pairs {
                    dt { "tokens today (" (sp.day) ")" }
                    dd { (sp.tokens_today) (cap(sp.tokens_per_day_cap.map(|c| c.to_string()))) }
                    dt { "cost today" }
                    dd { (format!("${:.4}", sp.cost_today_usd)) (cap(sp.cost_per_day_cap_usd.map(|c| format!("${c:.2}")))) }
                    dt { "cost this month" }
                    dd { (format!("${:.4}", sp.cost_month_usd)) (cap(sp.cost_per_month_cap_usd.map(|c| format!("${c:.2}")))) }
                    @if sp.unpriced_calls_today > 0 {
                        dt { "unpriced calls today" } dd { (sp.unpriced_calls_today) }
                    }
                }
                (chart(&v.hours))
            }
        }
    }
}

fn cap(cap: Option<String>) -> Markup {
    html! { @if let Some(cap) = cap { " of " (cap) } @else { " (no cap)" } }
}

/// Tokens and tasks in each of the last 24 hours, as a bar chart (SVG, no script).
fn chart(hours: &[nexbot_store::HourActivity]) -> Markup {
    let (w, h, pad) = (480.0_f64, 120.0_f64, 4.0_f64);
    let max_tokens = hours.iter().map(|h| h.tokens).max().unwrap_or(0).max(1) as f64;
    let max_tasks = hours.iter().map(|h| h.tasks).max().unwrap_or(0).max(1) as f64;
    let slot = w / hours.len().max(1) as f64;
    let total_tokens: i64 = hours.iter().map(|h| h.tokens).sum();
    let total_tasks: i64 = hours.iter().map(|h| h.tasks).sum();
    html! {
        figure {
            svg.chart viewBox=(format!("0 0 {w} {h}")) role="img"
                aria-label=(format!("The last 24 hours: {total_tokens} tokens, {total_tasks} tasks")) {
                @for (i, hour) in hours.iter().enumerate() {
                    @let th = (h - pad) * hour.tokens as f64 / max_tokens;
                    @let kh = (h - pad) * hour.tasks as f64 / max_tasks;
                    rect.tokens x=(format!("{:.1}", i as f64 * slot + 1.0)) y=(format!("{:.1}", h - th))
                        width=(format!("{:.1}", slot / 2.0 - 1.0)) height=(format!("{th:.1}")) {
                        title { (time(hour.start)) ": " (hour.tokens) " tokens" }
                    }
                    rect.tasks x=(format!("{:.1}", i as f64 * slot + slot / 2.0)) y=(format!("{:.1}", h - kh))
                        width=(format!("{:.1}", slot / 2.0 - 1.0)) height=(format!("{kh:.1}")) {
                        title { (time(hour.start)) ": " (hour.tasks) " tasks" }
                    }
                }
            }
            figcaption {
                "Last 24 hours, by hour: " span.key-tokens { "tokens" } " (main agent, " (total_tokens)
                ") and " span.key-tasks { "tasks" } " (" (total_tasks) ")."
            }
        }
    }
}

/// The pool's summary and table (the overview's live part).
pub fn pool(
    summary: Option<&PoolSummary>,
    off: Option<&str>,
    list: Option<&SubagentList>,
    csrf: &str,
) -> Markup {
    let (Some(p), Some(list)) = (summary, list) else {
        return html! { p { "No pool: " (off.unwrap_or("delegation is off")) } };
    };
    html! {
        p {
            "pool " code { (p.name) } ", " (p.size) " containers"
            @if let Some(runtime) = &p.runtime { " under " code { (runtime) } }
            ": " (p.blank) " blank, "
            (p.bound) " bound to a chat; queue " (p.queue_depth) "; "
            (p.unplanned_restarts) " unplanned restarts"
            @if p.pending_removal > 0 { "; " (p.pending_removal) " pending removal" }
        }
        @if let Some(at) = &p.engine_at { p { "engine at " code { (at) } } }
        @if let Some(engine) = &p.engine { p.bad { "engine: " (engine) } }
        div.scroll {
            table #pool-table {
                thead { tr {
                    th scope="col" { "slot" } th scope="col" { "container" } th scope="col" { "room" }
                    th scope="col" { "state" } th scope="col" { "task" } th scope="col" { "ping" }
                    th scope="col" { "memory" } th scope="col" { "restarts" } th scope="col" { "actions" }
                } }
                tbody {
                    @for s in &list.subagents {
                        tr data-slot=(s.id) {
                            td { (s.id) }
                            td.container { code { (s.container.as_deref().unwrap_or("-")) } }
                            td { (s.room.as_deref().unwrap_or("blank")) }
                            td { span class=(format!("state state-{}", s.state)) { (s.state) } }
                            td {
                                @if let Some(task) = &s.current_task {
                                    a href=(format!("/tasks/{task}")) { code { (short_id(task)) } }
                                    " " (or_dash(s.current_task_age_ms, human_ms))
                                } @else { "-" }
                            }
                            td { (or_dash(s.last_ping_us, |us| format!("{:.2}ms", us as f64 / 1000.0))) }
                            td { (or_dash(s.memory_bytes, human_size)) }
                            td {
                                (s.restarts)
                                @if let Some(why) = &s.last_restart { " (" (why) ")" }
                            }
                            td.actions {
                                form.inline method="post" action=(format!("/subagents/{}/restart", s.id)) {
                                    (csrf_field(csrf))
                                    button type="submit" aria-label=(format!("Restart {}", s.id)) { "Restart" }
                                }
                                form.inline method="post" action=(format!("/subagents/{}/kill", s.id)) {
                                    (csrf_field(csrf))
                                    button.danger type="submit" aria-label=(format!("Kill {}", s.id)) { "Kill" }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// The tasks the page's filter selects, newest first.
pub async fn task_rows(s: &ControlState, filter: &TaskFilter) -> Result<Vec<TaskRow>, ApiError> {
    let chat = filter.chat.as_deref().filter(|c| !c.is_empty());
    let status = filter.status.as_deref().filter(|c| !c.is_empty());
    let list = ops::tasks(s, Some(TASK_ROWS), chat).await?;
    Ok(list.tasks.into_iter().filter(|t| status.is_none_or(|w| t.status == w)).collect())
}

pub fn tasks(filter: &TaskFilter, rows: Result<Vec<TaskRow>, ApiError>) -> Markup {
    // Every outcome a record can have (a new one is offered without an edit here), and "" for any.
    let statuses = std::iter::once("").chain(nexbot_store::TaskStatus::WORDS.iter().copied());
    let chosen = filter.status.as_deref().unwrap_or("");
    html! {
        form.filters method="get" action="/tasks" {
            label for="chat" { "Chat" }
            input #chat type="text" name="chat" placeholder="telegram:42"
                value=(filter.chat.as_deref().unwrap_or(""));
            label for="status" { "Outcome" }
            select #status name="status" {
                @for st in statuses {
                    option value=(st) selected[st == chosen] { @if st.is_empty() { "any" } @else { (st) } }
                }
            }
            button type="submit" { "Filter" }
        }
        div #tasks data-live="tasks" aria-live="polite" { (tasks_table(&rows)) }
    }
}

/// The tasks' table (the tasks page's live part).
pub fn tasks_table(rows: &Result<Vec<TaskRow>, ApiError>) -> Markup {
    let rows = match rows {
        Ok(rows) => rows,
        Err(e) => return problem(&e.message),
    };
    html! {
        @if rows.is_empty() { p { "No tasks." } } @else {
            div.scroll { table #tasks-table {
                thead { tr {
                    th scope="col" { "task" } th scope="col" { "chat" } th scope="col" { "outcome" }
                    th scope="col" { "started" } th scope="col" { "duration" }
                    th scope="col" { "tokens" } th scope="col" { "container" } th scope="col" { "error" }
                } }
                tbody { @for t in rows {
                    tr data-task=(t.id) {
                        td { a href=(format!("/tasks/{}", t.id)) { code { (short_id(&t.id)) } } }
                        td { (t.chat) }
                        td { span class=(format!("state state-{}", t.status)) { (t.status) } }
                        td { (time(t.started_at)) }
                        td { (or_dash(t.duration_ms, |d| human_ms(d.max(0) as u64))) }
                        td { (t.prompt_tokens + t.completion_tokens) }
                        td { code { (t.container.as_deref().unwrap_or("-")) } }
                        td.error { (t.error.as_deref().unwrap_or("")) }
                    }
                } }
            } }
        }
    }
}

/// The log lines of the container that ran the task that name the task (while the pool
/// still has that container's logs).
pub fn task_logs(s: &ControlState, detail: &TaskDetail) -> Result<Vec<String>, String> {
    let Some(container) = &detail.row.container else {
        return Err("no container is recorded for this task".to_owned());
    };
    let list = ops::subagents(s).map_err(|e| e.message)?;
    let slot = list
        .subagents
        .iter()
        .find(|a| a.container.as_deref() == Some(container.as_str()))
        .ok_or_else(|| format!("container {container} is gone, and its logs with it"))?;
    let lines = ops::logs(s, &slot.id, None).map_err(|e| e.message)?.lines;
    let mut mine: Vec<String> =
        lines.into_iter().filter(|l| l.contains(detail.row.id.as_str())).collect();
    ops::keep_last(&mut mine, Some(TASK_LOG_LINES));
    Ok(mine)
}

/// A task's page: its record, receipt, destinations, progress and log lines.
pub fn task(d: &TaskDetail, logs: &Result<Vec<String>, String>) -> Markup {
    let r = &d.row;
    // The record keeps the egress's summary as JSON (the wire); read back as its type.
    let summary: Option<nexbot_egress::TaskSummary> =
        d.egress.clone().and_then(|e| serde_json::from_value(e).ok());
    let destinations = summary.as_ref().map(|s| &s.destinations);
    html! {
        dl.pairs {
            dt { "id" } dd { code { (r.id) } }
            dt { "chat" } dd { (r.chat) }
            dt { "outcome" } dd { span class=(format!("state state-{}", r.status)) { (r.status) } }
            dt { "started" } dd { (time(r.started_at)) }
            dt { "duration" } dd { (or_dash(r.duration_ms, |d| human_ms(d.max(0) as u64))) }
            dt { "tokens" } dd { (r.prompt_tokens + r.completion_tokens) " (" (r.prompt_tokens) " prompt + " (r.completion_tokens) " completion)" }
            dt { "container" } dd { code { (r.container.as_deref().unwrap_or("-")) } }
            @if let Some(e) = &r.error { dt { "error" } dd.error { (e) } }
        }
        h2 { "Task" }
        pre { (d.task) }
        h2 { "Receipt" }
        @match &d.receipt {
            Some(receipt) => pre #receipt { (receipt) },
            None => p { "No receipt recorded (the task is running, or ended before receipts were kept)." },
        }
        h2 { "Destinations" }
        @match destinations {
            Some(map) if !map.is_empty() => div.scroll { table #destinations {
                thead { tr { th scope="col" { "destination" } th scope="col" { "allowed" } th scope="col" { "denied" } th scope="col" { "errors" } } }
                tbody { @for (dest, counts) in map {
                    tr {
                        td { code { (dest) } }
                        td { (counts.allowed) }
                        td { (counts.denied) }
                        td { (counts.errors) }
                    }
                } }
            } },
            _ => p { "No destination recorded." },
        }
        @if let Some(egress) = &d.egress {
            details { summary { "The egress's summary" } pre { (serde_json::to_string_pretty(egress).unwrap_or_default()) } }
        }
        h2 { "Progress" }
        @if d.progress.is_empty() { p { "No progress recorded." } } @else {
            ol.progress { @for line in &d.progress { li { (line) } } }
        }
        h2 { "The sub-agent's log lines" }
        @match logs {
            Ok(lines) if lines.is_empty() => p { "No log line names this task." },
            Ok(lines) => pre.logs { @for l in lines { (l) "\n" } },
            Err(why) => p { (why) },
        }
    }
}

pub fn questions(list: &ApprovalList, csrf: &str) -> Markup {
    html! {
        p { "Egress mode: " (list.mode) }
        @if list.pending.is_empty() { p { "No question is waiting." } } @else {
            ul.cards { @for q in &list.pending {
                li #(format!("question-{}", q.id)) {
                    p {
                        strong { (q.kind) } " · " (q.chat) " · waiting " (q.waiting_secs) " s"
                        @if !q.task_id.is_empty() { " · task " a href=(format!("/tasks/{}", q.task_id)) { code { (short_id(&q.task_id)) } } }
                    }
                    @if !q.host.is_empty() {
                        p { code { (q.method) " " (q.host) ":" (q.port) (q.path.as_deref().unwrap_or("")) }
                            @if q.secret { " (a secret would be filled in)" } }
                    }
                    @if let Some(subject) = &q.subject { p { "about " code { (subject) } } }
                    form.inline method="post" action=(format!("/questions/{}/answer", q.id)) {
                        (csrf_field(csrf))
                        label for=(format!("answer-{}", q.id)) { "Answer" }
                        select id=(format!("answer-{}", q.id)) name="answer" {
                            option value="once" { "Allow once" }
                            option value="task" { "Allow for this task" }
                            option value="chat" { "Always for this chat" }
                            option value="deny" selected { "Deny" }
                        }
                        button type="submit" { "Answer" }
                    }
                }
            } }
        }
    }
}

pub fn chats(list: &MessageList) -> Markup {
    let mut by_chat: std::collections::BTreeMap<&str, Vec<&nexbot_control::MessageRow>> =
        std::collections::BTreeMap::new();
    for m in &list.messages {
        by_chat.entry(m.chat.as_str()).or_default().push(m);
    }
    html! {
        p { "The Telegram ledger: every update fetched and how it ended (newest first, the last 500)." }
        @if by_chat.is_empty() { p { "No update recorded." } }
        @for (chat, rows) in &by_chat {
            section {
                h2 { (chat) }
                @let failed = rows.iter().filter(|r| r.state == "failed").count();
                p { (rows.len()) " updates, " (failed) " failed" }
                div.scroll { table {
                    thead { tr { th scope="col" { "update" } th scope="col" { "user" } th scope="col" { "state" } th scope="col" { "detail" } th scope="col" { "text" } } }
                    tbody { @for m in rows {
                        tr {
                            td { (m.update_id) }
                            td { (or_dash(m.user_id, |u| u.to_string())) }
                            td { span class=(format!("state state-{}", m.state)) { (m.state) } }
                            td { (m.detail.as_deref().unwrap_or("")) }
                            td { details { summary { "text" } (m.text) } }
                        }
                    } }
                } }
            }
        }
    }
}

pub fn jobs(
    jobs: Result<CronJobList, ApiError>,
    runs: Result<CronRunList, ApiError>,
    csrf: &str,
) -> Markup {
    html! {
        @match &jobs {
            Err(e) => (problem(&e.message)),
            Ok(list) if list.jobs.is_empty() => p { "No scheduled job." },
            Ok(list) => div.scroll { table #jobs-table {
                thead { tr { th scope="col" { "id" } th scope="col" { "chat" } th scope="col" { "name" } th scope="col" { "schedule" } th scope="col" { "next run" } th scope="col" { "tokens a run" } th scope="col" { "" } } }
                tbody { @for j in &list.jobs {
                    tr {
                        td { (j.id) } td { (j.chat) } td { (j.name) }
                        td { code { (j.schedule) } " " (j.time_zone) }
                        td { (j.next_run_local.as_deref().unwrap_or("-")) }
                        td { (or_dash(j.tokens_per_run, |t| format!("{t:.0}"))) " of " (j.token_budget) }
                        td {
                            @if !j.heartbeat {
                                form.inline method="post" action=(format!("/jobs/{}/remove", j.id)) {
                                    (csrf_field(csrf))
                                    button.danger type="submit" aria-label=(format!("Remove job {}", j.id)) { "Remove" }
                                }
                            } @else { "heartbeat" }
                        }
                    }
                } }
            } },
        }
        h2 { "Recent runs" }
        @match &runs {
            Err(e) => (problem(&e.message)),
            Ok(list) if list.runs.is_empty() => p { "No run yet." },
            Ok(list) => div.scroll { table {
                thead { tr { th scope="col" { "run" } th scope="col" { "job" } th scope="col" { "scheduled" } th scope="col" { "outcome" } th scope="col" { "tokens" } th scope="col" { "detail" } } }
                tbody { @for r in &list.runs {
                    tr {
                        td { (r.id) } td { (r.job_id) } td { (time(r.scheduled_at)) }
                        td { span class=(format!("state state-{}", r.outcome)) { (r.outcome) } }
                        td { (r.tokens) } td { (r.detail.as_deref().unwrap_or("")) }
                    }
                } }
            } },
        }
    }
}

pub fn skills(list: &SkillList, csrf: &str) -> Markup {
    html! {
        p { "Folder: " code { (list.dir.as_deref().unwrap_or("none configured")) } }
        @if let Some(e) = &list.error { (problem(e)) }
        @if list.skills.is_empty() { p { "No skill." } }
        ul.cards { @for s in &list.skills {
            li {
                p { strong { (s.name) } " · " span class=(format!("state state-{}", s.state)) { (s.state) }
                    @if let Some(r) = &s.reason { " · " (r) } }
                @if let Some(d) = &s.description { p { (d) } }
                @if let Some(h) = &s.hash { p { "hash " code { (h) } } }
                @if !s.domains.is_empty() { p { "destinations: " (s.domains.join(", ")) } }
                @if !s.secrets.is_empty() { p { "secrets: " (s.secrets.join(", ")) } }
                @if !s.findings.is_empty() {
                    ul.findings { @for f in &s.findings {
                        li { code { (f.file) ":" (f.line) } " " (f.rule) ": " code { (f.text) } }
                    } }
                }
                @let changed = s.recorded_hash.is_some() && s.recorded_hash != s.hash;
                @if let Some(hash) = s.hash.as_ref().filter(|_| s.state == "quarantined" || changed) {
                    form.inline method="post" action="/skills/allow" {
                        (csrf_field(csrf))
                        input type="hidden" name="name" value=(s.name);
                        input type="hidden" name="hash" value=(hash);
                        button type="submit" { "Allow this content (" (short_id(hash.trim_start_matches("sha256:"))) "…)" }
                    }
                }
            }
        } }
    }
}

pub fn secrets(list: &SecretList) -> Markup {
    html! {
        p { "Vault: " (list.vault) }
        p { "Names, scopes and bindings only: no value ever reaches this page. Set and remove them with "
            code { "nexbot-ctl secrets" } "." }
        @if list.secrets.is_empty() { p { "No secret." } } @else {
            div.scroll { table #secrets-table {
                thead { tr { th scope="col" { "scope" } th scope="col" { "name" } th scope="col" { "mode" } th scope="col" { "hosts" } th scope="col" { "updated" } } }
                tbody { @for e in &list.secrets {
                    tr {
                        td { (e.scope) } td { code { (e.name) } }
                        td { (e.mode) @if e.confirm { " (asks first)" } }
                        td { (e.hosts.join(", ")) }
                        td { (time(e.updated_at)) }
                    }
                } }
            } }
        }
    }
}
