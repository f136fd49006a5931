//! `nexbot-ctl approvals ls|allow|deny` and `nexbot-ctl egress rules ls|rm`: the operator's
//! way to answer the egress questions (`egress.mode = "ask"`) from a shell, and to see and
//! remove the chats' "always" rules.

use clap::{Subcommand, ValueEnum};
use nexbot_control::{
    approvals_paths, ApprovalAnswer, ApprovalList, Done, EgressRuleList, EgressRuleRemove,
};

use crate::commands::{encode, get, post, show, Ctx};
use crate::render::{one_line, or_dash, utc_time, Table};

#[derive(Debug, Subcommand)]
pub enum ApprovalsCommand {
    /// The egress mode and the questions waiting: id, chat, task, destination, request
    #[command(visible_alias = "list")]
    Ls,
    /// Let a held request (or a confirmation's step) through: once (default; a confirmation's
    /// Allow), for the task, or always for its chat (egress only)
    Allow {
        /// The question's id (`approvals ls`)
        id: i64,
        #[arg(long = "for", value_enum, default_value_t = For::Once)]
        scope: For,
    },
    /// Refuse a held request ("denied by the user")
    Deny {
        /// The question's id (`approvals ls`)
        id: i64,
    },
}

/// How far an allow reaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum For {
    /// The requests held now
    Once,
    /// Everything the task sends there, until it ends
    Task,
    /// Every task of the chat, across restarts (an "always" rule)
    Chat,
}

#[derive(Debug, Subcommand)]
pub enum EgressCommand {
    /// The chats' "always" rules (host and port), kept in the database
    #[command(subcommand)]
    Rules(RulesCommand),
}

#[derive(Debug, Subcommand)]
pub enum RulesCommand {
    /// The rules, of every chat or one
    #[command(visible_alias = "list")]
    Ls {
        /// Only this chat's (`telegram:<id>`, `console:<name>`)
        #[arg(long, value_name = "CHATREF")]
        chat: Option<String>,
    },
    /// Remove a chat's rule: the next request there is asked about again
    Rm {
        /// The chat (`telegram:<id>`, `console:<name>`)
        #[arg(long, value_name = "CHATREF")]
        chat: String,
        /// HOST:PORT, as `rules ls` shows it (443 when no port is given)
        destination: String,
    },
}

pub async fn run(ctx: &Ctx, command: ApprovalsCommand) -> anyhow::Result<()> {
    let (id, answer) = match command {
        ApprovalsCommand::Ls => {
            let answer = get(ctx, approvals_paths::APPROVALS).await?;
            return show(ctx, answer, |l: ApprovalList| list(&l));
        }
        ApprovalsCommand::Allow { id, scope } => {
            let word = match scope {
                For::Once => "once",
                For::Task => "task",
                For::Chat => "chat",
            };
            (id, word)
        }
        ApprovalsCommand::Deny { id } => (id, "deny"),
    };
    let body = ApprovalAnswer { id, answer: answer.to_owned() };
    let answer = post(ctx, approvals_paths::APPROVALS_ANSWER, &body).await?;
    show(ctx, answer, |d: Done| format!("{}\n", one_line(&d.message)))
}

pub async fn run_egress(ctx: &Ctx, command: EgressCommand) -> anyhow::Result<()> {
    match command {
        EgressCommand::Rules(RulesCommand::Ls { chat }) => {
            let mut path = approvals_paths::EGRESS_RULES.to_owned();
            if let Some(chat) = chat {
                path.push_str(&format!("?chat={}", encode(&chat)));
            }
            let answer = get(ctx, &path).await?;
            show(ctx, answer, |l: EgressRuleList| rules(&l))
        }
        EgressCommand::Rules(RulesCommand::Rm { chat, destination }) => {
            let (host, port) = split_destination(&destination)?;
            let body = EgressRuleRemove { chat, host, port };
            let answer = post(ctx, approvals_paths::EGRESS_RULES_REMOVE, &body).await?;
            show(ctx, answer, |d: Done| format!("{}\n", one_line(&d.message)))
        }
    }
}

/// `host:port`, `[v6]:port`, or a bare host (port 443).
fn split_destination(text: &str) -> anyhow::Result<(String, u16)> {
    let bad = || anyhow::anyhow!("{text:?} is not HOST:PORT (e.g. api.example.com:443)");
    if let Some(rest) = text.strip_prefix('[') {
        let (host, tail) = rest.split_once(']').ok_or_else(bad)?;
        let port = match tail.strip_prefix(':') {
            Some(port) => port.parse().map_err(|_| bad())?,
            None if tail.is_empty() => 443,
            None => return Err(bad()),
        };
        return Ok((host.to_owned(), port));
    }
    match text.rsplit_once(':') {
        Some((host, port)) if !host.contains(':') => {
            Ok((host.to_owned(), port.parse().map_err(|_| bad())?))
        }
        Some(_) => Ok((text.to_owned(), 443)),
        None if text.is_empty() => Err(bad()),
        None => Ok((text.to_owned(), 443)),
    }
}

fn list(l: &ApprovalList) -> String {
    let mut out = format!("egress mode: {}\n", one_line(&l.mode));
    if l.pending.is_empty() {
        out.push_str("no questions waiting\n");
        return out;
    }
    let mut t =
        Table::new(&["id", "kind", "chat", "task", "destination", "request", "secret", "waiting"]);
    for p in &l.pending {
        // A step's question (send_file, delete) has no task or request: its file is it.
        let step = p.host.is_empty();
        let secret = match (&p.subject, p.kind.as_str()) {
            (Some(name), "secret") => name.clone(),
            _ if p.secret => "yes".to_owned(),
            _ => "no".to_owned(),
        };
        t.row(vec![
            p.id.to_string(),
            p.kind.clone(),
            p.chat.clone(),
            if p.task_id.is_empty() { "-".to_owned() } else { p.task_id.clone() },
            match step {
                true => or_dash(p.subject.as_ref(), |s| s.clone()),
                false => format!("{}:{}", p.host, p.port),
            },
            match step {
                true => "-".to_owned(),
                false => format!("{} {}", p.method, or_dash(p.path.as_ref(), |p| p.clone())),
            },
            secret,
            format!("{}s", p.waiting_secs),
        ]);
    }
    out.push_str(&t.render());
    out
}

fn rules(l: &EgressRuleList) -> String {
    let mut t = Table::new(&["chat", "destination", "since", "by"]);
    for r in &l.rules {
        t.row(vec![
            r.chat.clone(),
            format!("{}:{}", r.host, r.port),
            utc_time(r.created_at),
            r.created_by.clone(),
        ]);
    }
    t.render()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn destinations_are_host_and_port_443_unless_named() {
        assert_eq!(
            split_destination("api.example.com:8443").unwrap(),
            ("api.example.com".into(), 8443)
        );
        assert_eq!(split_destination("api.example.com").unwrap(), ("api.example.com".into(), 443));
        assert_eq!(split_destination("[2001:db8::1]:80").unwrap(), ("2001:db8::1".into(), 80));
        assert!(split_destination("host:port").is_err());
        assert!(split_destination("").is_err());
    }
}
