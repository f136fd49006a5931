//! `nexbot-ctl secrets set|ls|rm`: the operator's way into the daemon's secrets vault.
//!
//! Why the value comes only from stdin: an argument is visible to every user in `ps` and
//! stays in the shell's history. On a terminal the value is typed with echo off; otherwise it
//! is piped in (`printf %s "$TOKEN" | nexbot-ctl secrets set NAME --operator`). It goes to the
//! daemon in the request body, and nothing here prints it, not even in an error.

use std::io::{BufRead as _, IsTerminal as _, Read as _, Write as _};

use anyhow::Context as _;
use clap::{Args, Subcommand};
use nexbot_control::{
    secrets_paths, Done, SecretEntry, SecretList, SecretRemove, SecretSet, SecretValue,
    OPERATOR_SCOPE,
};
use zeroize::Zeroizing;

use crate::commands::{encode, get, post, show, Ctx};
use crate::render::{one_line, or_dash, utc_time, Table};

/// Read at most this much of stdin: the vault takes 8 KiB; more is surely not one value.
const MAX_INPUT: u64 = 64 * 1024;

#[derive(Debug, Subcommand)]
pub enum SecretsCommand {
    /// Store (or replace) a secret; the value is read from stdin, never from an argument:
    /// `printf %s "$TOKEN" | nexbot-ctl secrets set GITHUB_TOKEN --operator --host api.github.com`
    Set(SetArgs),
    /// The stored secrets (every scope by default): scope, name, mode, hosts, when set, and
    /// why one cannot be used. Never a value
    #[command(visible_alias = "list")]
    Ls(ListScope),
    /// Delete a secret
    Rm {
        /// The secret's name
        name: String,
        #[command(flatten)]
        scope: SecretScopeArgs,
    },
}

/// Whose secret: exactly one of `--chat` and `--operator`.
#[derive(Debug, Args)]
#[group(required = true, multiple = false)]
pub struct SecretScopeArgs {
    /// A chat's secret (`telegram:<id>`, `console:<name>`): tasks of that chat may use it
    #[arg(long, value_name = "CHATREF")]
    pub chat: Option<String>,
    /// The operator's secret (the daemon's own tool backends)
    #[arg(long)]
    pub operator: bool,
}

impl SecretScopeArgs {
    fn key(&self) -> String {
        self.chat.clone().unwrap_or_else(|| OPERATOR_SCOPE.to_owned())
    }
}

/// `secrets ls`: at most one of `--chat` and `--operator`; neither lists every scope.
#[derive(Debug, Args)]
#[group(required = false, multiple = false)]
pub struct ListScope {
    /// Only this chat's secrets
    #[arg(long, value_name = "CHATREF")]
    pub chat: Option<String>,
    /// Only the operator's secrets
    #[arg(long)]
    pub operator: bool,
}

#[derive(Debug, Args)]
pub struct SetArgs {
    /// The secret's name: [A-Z_][A-Z0-9_]*, at most 64 characters
    pub name: String,
    #[command(flatten)]
    pub scope: SecretScopeArgs,
    /// A host the egress proxy may fill the value in for (api.github.com, *.example.com);
    /// repeat for more
    #[arg(long = "host", value_name = "HOST")]
    pub hosts: Vec<String>,
    /// Where in those hosts' requests the value may go: header:NAME, path:/PREFIX,
    /// query:NAME or body; repeat for more [default: header:authorization]
    #[arg(long = "in", value_name = "PLACE")]
    pub places: Vec<String>,
    /// proxy: only the egress proxy sees the value (needs --host); stdin: the task's
    /// container gets it (and holds it) [default: proxy with --host; without, give stdin]
    #[arg(long, value_parser = ["proxy", "stdin"])]
    pub mode: Option<String>,
    /// Ask the chat's user (buttons in the chat, or `nexbot-ctl approvals`) before the egress
    /// fills the value into a task's request, once per task (proxy mode only)
    #[arg(long)]
    pub confirm: bool,
}

pub async fn run(ctx: &Ctx, command: SecretsCommand) -> anyhow::Result<()> {
    match command {
        SecretsCommand::Set(args) => {
            let value = read_value(&args.name)?;
            let body = SecretSet {
                scope: args.scope.key(),
                name: args.name,
                value,
                hosts: args.hosts,
                places: args.places,
                mode: args.mode,
                confirm: args.confirm,
            };
            let answer = post(ctx, secrets_paths::SECRETS, &body).await?;
            show(ctx, answer, |e: SecretEntry| stored(&e))
        }
        SecretsCommand::Ls(ListScope { chat, operator }) => {
            let mut path = secrets_paths::SECRETS.to_owned();
            if let Some(scope) = chat.or(operator.then(|| OPERATOR_SCOPE.to_owned())) {
                path.push_str(&format!("?scope={}", encode(&scope)));
            }
            let answer = get(ctx, &path).await?;
            show(ctx, answer, |l: SecretList| list(&l))
        }
        SecretsCommand::Rm { name, scope } => {
            let body = SecretRemove { scope: scope.key(), name };
            let answer = post(ctx, secrets_paths::SECRETS_REMOVE, &body).await?;
            show(ctx, answer, |d: Done| format!("{}\n", one_line(&d.message)))
        }
    }
}

/// The value from stdin: typed with echo off on a terminal, else piped in.
fn read_value(name: &str) -> anyhow::Result<SecretValue> {
    let stdin = std::io::stdin();
    let raw = if stdin.is_terminal() {
        let mut err = std::io::stderr();
        write!(err, "value for {name} (not shown; Enter to finish): ")?;
        err.flush()?;
        let line = read_line_hidden(&stdin);
        writeln!(err)?;
        line?
    } else {
        let mut bytes = Zeroizing::new(Vec::with_capacity(16 * 1024));
        stdin
            .lock()
            .take(MAX_INPUT + 1)
            .read_to_end(&mut bytes)
            .context("cannot read the value from stdin")?;
        if bytes.len() as u64 > MAX_INPUT {
            anyhow::bail!("stdin holds more than {} KiB: pipe in only the value", MAX_INPUT / 1024);
        }
        bytes
    };
    value_from(raw)
}

/// One line (the line end stripped) as a value; anything else refused without quoting it.
fn value_from(mut raw: Zeroizing<Vec<u8>>) -> anyhow::Result<SecretValue> {
    for end in [b"\r\n".as_slice(), b"\n"] {
        if raw.ends_with(end) {
            let len = raw.len() - end.len();
            raw.truncate(len);
            break;
        }
    }
    if raw.is_empty() {
        anyhow::bail!(
            "no value on stdin: pipe it in, e.g. printf %s \"$TOKEN\" | nexbot-ctl secrets set \
             NAME --operator; nothing was stored"
        );
    }
    if raw.contains(&b'\n') {
        anyhow::bail!(
            "the value on stdin has more than one line; a secret is one line (pipe in only the \
             value); nothing was stored"
        );
    }
    let text = std::str::from_utf8(&raw)
        .map_err(|_| anyhow::anyhow!("the value on stdin is not UTF-8 text; nothing was stored"))?;
    Ok(SecretValue::new(text.to_owned()))
}

/// Reads one line from the terminal with its echo turned off, and turns echo back on however
/// the read ends.
fn read_line_hidden(stdin: &std::io::Stdin) -> anyhow::Result<Zeroizing<Vec<u8>>> {
    use rustix::termios::{tcgetattr, tcsetattr, LocalModes, OptionalActions};
    let saved = tcgetattr(stdin).context("cannot read the terminal's settings")?;
    let mut quiet = saved.clone();
    quiet.local_modes.remove(LocalModes::ECHO);
    tcsetattr(stdin, OptionalActions::Now, &quiet).context("cannot turn the echo off")?;
    let mut line = Zeroizing::new(Vec::new());
    let read = stdin.lock().take(MAX_INPUT).read_until(b'\n', &mut line);
    let restored = tcsetattr(stdin, OptionalActions::Now, &saved);
    read.context("cannot read the value from the terminal")?;
    restored.context("cannot turn the echo back on (run `stty echo`)")?;
    Ok(line)
}

/// `secrets set`: what was stored, in a sentence.
fn stored(e: &SecretEntry) -> String {
    let binding =
        if e.hosts.is_empty() { String::new() } else { format!(", for {}", e.hosts.join(", ")) };
    let confirm = if e.confirm { "; a task's first use asks the chat first" } else { "" };
    format!(
        "secret {} stored in {} ({} mode{binding}{confirm})\n",
        one_line(&e.name),
        one_line(&e.scope),
        e.mode
    )
}

/// `secrets ls`: the vault's state, one row per secret, then why an unusable one is.
pub fn list(l: &SecretList) -> String {
    let mut out = format!("vault: {}\n", one_line(&l.vault));
    let mut t = Table::new(&["scope", "name", "mode", "hosts", "updated", "usable"]);
    for e in &l.secrets {
        t.row(vec![
            e.scope.clone(),
            e.name.clone(),
            if e.confirm { format!("{}+confirm", e.mode) } else { e.mode.clone() },
            or_dash((!e.hosts.is_empty()).then_some(&e.hosts), |h| h.join(",")),
            utc_time(e.updated_at),
            if e.unreadable.is_some() { "NO" } else { "yes" }.to_owned(),
        ]);
    }
    out.push_str(&t.render());
    for e in &l.secrets {
        if let Some(why) = &e.unreadable {
            out.push_str(&format!(
                "\n{} ({}): {}\n",
                one_line(&e.name),
                one_line(&e.scope),
                one_line(why)
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(bytes: &[u8]) -> anyhow::Result<SecretValue> {
        value_from(Zeroizing::new(bytes.to_vec()))
    }

    #[test]
    fn one_line_is_a_value_and_its_line_end_is_dropped() {
        assert_eq!(value(b"abc def\n").unwrap().expose(), "abc def");
        assert_eq!(value(b"abc\r\n").unwrap().expose(), "abc");
        assert_eq!(value(b" spaced ").unwrap().expose(), " spaced ");
    }

    #[test]
    fn empty_or_several_lines_are_refused_without_quoting() {
        for input in [&b""[..], b"\n", b"\r\n"] {
            let e = value(input).unwrap_err().to_string();
            assert!(e.contains("no value on stdin"), "{e}");
        }
        let e = value(b"first-secret\nsecond-secret\n").unwrap_err().to_string();
        assert!(e.contains("more than one line") && !e.contains("secret\n"), "{e}");
        assert!(!e.contains("first-secret"), "{e}");
        let e = value(b"\xff\xfe-bytes").unwrap_err().to_string();
        assert!(e.contains("not UTF-8"), "{e}");
    }

    #[test]
    fn the_listing_shows_bindings_and_why_one_is_unusable() {
        let l = SecretList {
            vault: "vault LOCKED: NEXBOT_MASTER_KEY does not open it, 2 stored".into(),
            vault_on: false,
            secrets: vec![
                SecretEntry {
                    scope: "telegram:42".into(),
                    name: "GITHUB_TOKEN".into(),
                    mode: "proxy".into(),
                    hosts: vec!["api.github.com".into(), "*.github.com".into()],
                    updated_at: 0,
                    unreadable: None,
                    confirm: false,
                },
                SecretEntry {
                    scope: "operator".into(),
                    name: "SEARCH_KEY".into(),
                    mode: "stdin".into(),
                    hosts: vec![],
                    updated_at: 0,
                    unreadable: Some("NEXBOT_MASTER_KEY is not the key".into()),
                    confirm: false,
                },
            ],
        };
        let text = list(&l);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with("vault: vault LOCKED"), "{text}");
        assert!(lines[1].starts_with("SCOPE ") && lines[1].ends_with("USABLE"), "{text}");
        assert!(lines[2].contains("api.github.com,*.github.com") && lines[2].contains("yes"));
        assert!(lines[3].contains("SEARCH_KEY") && lines[3].contains(" - "), "{text}");
        assert!(text.contains("SEARCH_KEY (operator): NEXBOT_MASTER_KEY is not the key"));
    }
}
