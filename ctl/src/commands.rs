//! Running each command against the daemon: one request (or a polling loop), then the JSON
//! answer as the daemon sent it (`--json`) or its human view.
//!
//! Answers are read as `serde_json::Value` first: `--json` prints exactly what the daemon
//! returned (fields this client does not know included), and the human views decode the same
//! value into the control types.

use std::io::{IsTerminal as _, Write as _};
use std::path::Path;
use std::time::Duration;

use anyhow::Context as _;
use nexbot_control::{
    paths, AuditCheck, BackupReport, BackupRequest, Client, ClientError, Done, Health, LogLines,
    MessageList, ReloadReport, SkillAllow, SkillList, Status, SubagentList, TaskDetail, TaskList,
    WebLogin,
};
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::cli::{
    AuditCommand, Command, SkillsCommand, SubagentsCommand, TasksArgs, TasksCommand, WebCommand,
};
use crate::{logs, render, views};

/// Clears a terminal and puts the cursor home, for `--watch` refreshes.
const CLEAR_SCREEN: &str = "\x1b[H\x1b[2J";
/// How many lines a `--follow` poll asks for at least: a window wide enough that a second's
/// worth of logging still overlaps the previous poll.
const FOLLOW_WINDOW: u32 = 200;
/// The uuid length: a shorter task id given to `tasks show` may be a prefix.
const FULL_TASK_ID: usize = 36;
/// How many recent tasks a prefix is looked up in.
const PREFIX_SEARCH: u32 = 1000;

/// What a command needs: the client, and whether to print JSON.
#[derive(Debug)]
pub struct Ctx {
    pub client: Client,
    pub json: bool,
}

/// Runs one command.
pub async fn run(ctx: &Ctx, command: Command) -> anyhow::Result<()> {
    match command {
        Command::Status => {
            let value = get(ctx, paths::STATUS).await?;
            show(ctx, value, |s: Status| views::status(&s))
        }
        Command::Health => {
            let value = get(ctx, paths::HEALTH).await?;
            let health: Health =
                serde_json::from_value(value.clone()).context("unexpected health answer")?;
            show(ctx, value, |h: Health| views::health(&h))?;
            if !health.ready {
                anyhow::bail!("the daemon is not ready");
            }
            Ok(())
        }
        Command::Subagents(SubagentsCommand::Ps { watch: false, .. }) => {
            let value = get(ctx, paths::SUBAGENTS).await?;
            show(ctx, value, |l: SubagentList| views::subagent_list(&l))
        }
        Command::Subagents(SubagentsCommand::Ps { watch: true, interval }) => {
            watch_ps(ctx, Duration::from_secs(interval)).await
        }
        Command::Subagents(SubagentsCommand::Logs { id, lines, follow }) => {
            subagent_logs(ctx, &id, lines, follow).await
        }
        Command::Subagents(SubagentsCommand::Restart { id }) => action(ctx, &id, "restart").await,
        Command::Subagents(SubagentsCommand::Kill { id }) => action(ctx, &id, "kill").await,
        Command::Tasks(TasksArgs { command: Some(TasksCommand::Show { id }), .. }) => {
            let value = task(ctx, &id).await?;
            show(ctx, value, |d: TaskDetail| views::task_detail(&d))
        }
        Command::Tasks(TasksArgs { command: None, limit, chat }) => {
            let mut path = format!("{}?limit={limit}", paths::TASKS);
            if let Some(chat) = chat {
                path.push_str(&format!("&chat={}", encode(&chat)));
            }
            let value = get(ctx, &path).await?;
            show(ctx, value, |l: TaskList| views::tasks(&l.tasks))
        }
        Command::Messages { failed, limit } => {
            let mut path = format!("{}?limit={limit}", paths::MESSAGES);
            if failed {
                path.push_str("&failed=true");
            }
            let value = get(ctx, &path).await?;
            show(ctx, value, |l: MessageList| views::messages(&l.messages))
        }
        Command::Reload => {
            let value = post(ctx, paths::RELOAD, &serde_json::json!({})).await?;
            show(ctx, value, |r: ReloadReport| views::reload(&r))
        }
        Command::Backup { file } => {
            let path = absolute(&file)?;
            let request = BackupRequest { path: path.to_string_lossy().into_owned() };
            let value = post(ctx, paths::BACKUP, &request).await?;
            show(ctx, value, |b: BackupReport| views::backup(&b))
        }
        Command::Metrics => {
            let text = ctx.client.get_text(paths::METRICS).await?;
            print(&text)
        }
        Command::Audit(AuditCommand::Verify) => {
            let value = get(ctx, paths::AUDIT_VERIFY).await?;
            let check: AuditCheck =
                serde_json::from_value(value.clone()).context("unexpected audit answer")?;
            show(ctx, value, |c: AuditCheck| views::audit_check(&c))?;
            if let Some(broken) = check.broken {
                anyhow::bail!("the audit chain breaks at {}:{}", broken.file, broken.line);
            }
            Ok(())
        }
        Command::Cron(command) => crate::cron::run(ctx, command).await,
        Command::Memory(command) => crate::memory::run(ctx, command).await,
        Command::Skills(SkillsCommand::Ls) => {
            let value = get(ctx, paths::SKILLS).await?;
            show(ctx, value, |l: SkillList| views::skills(&l))
        }
        Command::Skills(SkillsCommand::Allow { name, hash }) => {
            let value = post(ctx, paths::SKILLS_ALLOW, &SkillAllow { name, hash }).await?;
            show(ctx, value, |d: Done| format!("{}\n", render::one_line(&d.message)))
        }
        Command::Secrets(command) => crate::secrets::run(ctx, command).await,
        Command::Approvals(command) => crate::approvals::run(ctx, command).await,
        Command::Egress(command) => crate::approvals::run_egress(ctx, command).await,
        Command::Mcp(command) => crate::mcp::run(ctx, command).await,
        Command::Web(WebCommand::Login) => {
            let value = post(ctx, paths::WEB_LOGIN, &serde_json::json!({})).await?;
            show(ctx, value, |l: WebLogin| views::web_login(&l))
        }
    }
}

pub(crate) async fn get(ctx: &Ctx, path: &str) -> Result<Value, ClientError> {
    ctx.client.get::<Value>(path).await
}

pub(crate) async fn post<B: serde::Serialize>(
    ctx: &Ctx,
    path: &str,
    body: &B,
) -> Result<Value, ClientError> {
    ctx.client.post::<B, Value>(path, body).await
}

/// Prints `value` as pretty JSON with `--json`, else decoded as `T` through `view`.
pub(crate) fn show<T: DeserializeOwned>(
    ctx: &Ctx,
    value: Value,
    view: impl FnOnce(T) -> String,
) -> anyhow::Result<()> {
    if ctx.json {
        return print(&pretty(&value));
    }
    print(&view(decode(value)?))
}

fn decode<T: DeserializeOwned>(value: Value) -> Result<T, ClientError> {
    serde_json::from_value(value).map_err(|e| ClientError::Protocol(e.to_string()))
}

fn pretty(value: &Value) -> String {
    let mut text = serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string());
    text.push('\n');
    text
}

/// Writes to stdout and flushes (a closed pipe surfaces as an error that `main` treats as
/// the reader being done).
fn print(text: &str) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    out.flush()?;
    Ok(())
}

/// `subagents restart|kill ID`: the daemon's sentence.
async fn action(ctx: &Ctx, id: &str, action: &str) -> anyhow::Result<()> {
    let value = post(ctx, &paths::subagent(&encode(id), action), &serde_json::json!({})).await?;
    show(ctx, value, |d: Done| format!("{}\n", render::one_line(&d.message)))
}

/// `subagents ps --watch`: the table again every `interval` until Ctrl-C. A first failure
/// ends the command (a wrong socket must not look like a watch); later ones are shown in place
/// of the table and the watch goes on, so a daemon restart does not end it.
async fn watch_ps(ctx: &Ctx, interval: Duration) -> anyhow::Result<()> {
    let terminal = std::io::stdout().is_terminal();
    let frame = |value: Result<Value, ClientError>| -> anyhow::Result<String> {
        Ok(match value {
            Ok(value) if ctx.json => pretty(&value),
            Ok(value) => views::subagent_list(&decode::<SubagentList>(value)?),
            Err(e) => format!("nexbot-ctl: error: {e}\n"),
        })
    };
    let first = get(ctx, paths::SUBAGENTS).await?;
    let watch = async {
        let mut text = frame(Ok(first))?;
        let mut refreshes = 0u64;
        loop {
            if terminal {
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs() as i64);
                print(&format!(
                    "{CLEAR_SCREEN}Every {}s: nexbot-ctl subagents ps    {} UTC\n\n{text}",
                    interval.as_secs(),
                    render::utc_time(now)
                ))?;
            } else {
                print(&format!("{}{text}", if refreshes > 0 { "\n" } else { "" }))?;
            }
            refreshes += 1;
            tokio::time::sleep(interval).await;
            text = frame(get(ctx, paths::SUBAGENTS).await)?;
        }
    };
    until_ctrl_c(watch).await
}

/// `subagents logs ID`: the last lines, then with `--follow` the new ones every second. A
/// poll's error ends the command with that error (as `docker logs -f` ends with its
/// container).
async fn subagent_logs(ctx: &Ctx, id: &str, lines: u32, follow: bool) -> anyhow::Result<()> {
    let path = |n: u32| format!("{}?n={n}", paths::subagent(&encode(id), "logs"));
    let first: LogLines = decode(get(ctx, &path(lines)).await?)?;
    print_log_lines(ctx, &first.lines)?;
    if !follow {
        return Ok(());
    }
    let poll = async {
        let mut previous = first.lines;
        loop {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let current: LogLines = decode(get(ctx, &path(lines.max(FOLLOW_WINDOW))).await?)?;
            print_log_lines(ctx, logs::new_lines(&previous, &current.lines))?;
            previous = current.lines;
        }
    };
    until_ctrl_c(poll).await
}

/// Raw lines with `--json` (they are JSON already), else pretty ones.
pub(crate) fn print_log_lines(ctx: &Ctx, lines: &[String]) -> anyhow::Result<()> {
    let mut text = String::new();
    for line in lines {
        if ctx.json {
            text.push_str(line);
        } else {
            text.push_str(&logs::pretty_line(line));
        }
        text.push('\n');
    }
    print(&text)
}

/// Runs `work` until it fails or Ctrl-C (which is success: it is how a watch ends).
async fn until_ctrl_c(
    work: impl std::future::Future<Output = anyhow::Result<()>>,
) -> anyhow::Result<()> {
    tokio::select! {
        result = work => result,
        _ = tokio::signal::ctrl_c() => Ok(()),
    }
}

/// `GET /v1/tasks/{id}`; when the daemon does not know a short id, the one recent task whose
/// id starts with it (the tables show 8 chars, and those are what an operator copies).
async fn task(ctx: &Ctx, id: &str) -> anyhow::Result<Value> {
    let error = match get(ctx, &paths::task(&encode(id))).await {
        Ok(value) => return Ok(value),
        Err(e @ ClientError::Daemon { status: 404, .. }) if id.len() < FULL_TASK_ID => e,
        Err(e) => return Err(e.into()),
    };
    let list: TaskList =
        decode(get(ctx, &format!("{}?limit={PREFIX_SEARCH}", paths::TASKS)).await?)?;
    let matches: Vec<&str> =
        list.tasks.iter().map(|t| t.id.as_str()).filter(|t| t.starts_with(id)).collect();
    match matches.as_slice() {
        [] => Err(error.into()),
        [one] => Ok(get(ctx, &paths::task(&encode(one))).await?),
        many => Err(ClientError::Daemon {
            status: 400,
            message: format!(
                "task id {id:?} is ambiguous: {} (give more characters)",
                many.join(", ")
            ),
        }
        .into()),
    }
}

/// `file` made absolute against the current directory: the daemon writes the copy, and its
/// working directory is not the operator's.
fn absolute(file: &Path) -> anyhow::Result<std::path::PathBuf> {
    if file.is_absolute() {
        return Ok(file.to_owned());
    }
    let cwd = std::env::current_dir().context("cannot read the current directory")?;
    Ok(cwd.join(file))
}

pub use nexbot_control::encode;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chat_refs_and_ids_are_encoded_for_urls() {
        assert_eq!(encode("telegram:-100123"), "telegram:-100123");
        assert_eq!(encode("console:a b/c&d"), "console:a%20b%2Fc%26d");
        assert_eq!(encode("é"), "%C3%A9");
    }

    #[test]
    fn relative_backup_paths_are_taken_from_the_current_directory() {
        let cwd = std::env::current_dir().unwrap();
        assert_eq!(absolute(Path::new("b.db")).unwrap(), cwd.join("b.db"));
        assert_eq!(absolute(Path::new("/x/b.db")).unwrap(), Path::new("/x/b.db"));
    }
}
