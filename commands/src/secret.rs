//! `/secret set|list|delete`: the user's way to put secrets into the vault from a chat.
//!
//! Private chats only (a group would show the value to everyone; Telegram's policy refuses
//! it before it gets here, and this checks again). The message holding a value is deleted
//! right after it is handled, stored or not; when the channel cannot delete it the answer
//! tells the user to. The Telegram ledger keeps the command with its value redacted
//! (`nexbot_telegram::policy::ledger_text`), and commands never reach the history or a log.

use std::sync::Arc;

use nexbot_core::ChatRef;
use secrecy::SecretString;

use crate::{ChatCommand, CommandContext};
use nexbot_core::BoxFuture;
use nexbot_vault::{Bind, Mode, SecretInfo, SecretScope, Vault, VaultError, VaultState};

const USAGE: &str = "Usage:\n\
/secret set NAME value --host HOST [--host HOST ...] [--in PLACE ...] [--confirm]\n\
/secret set NAME value --mode stdin\n\
/secret list\n\
/secret delete NAME\n\
A secret bound to a host (--host api.github.com, --host *.example.com) is filled in by the \
egress proxy over https for that host only, in the Authorization header unless --in names \
other places (header:NAME, path:/PREFIX, query:NAME, body), and never enters a sandbox \
(proxy mode); with --confirm each task asks you (buttons) before its first use. --mode stdin hands the value to the task's container itself. Tasks get secrets \
by name; the model never sees a value.";

/// Said when a value goes to the container: it then holds it.
const STDIN_WARNING: &str = "Note: in stdin mode the task's container holds the value; a \
    command it runs can read and send it anywhere the egress allows.";

#[derive(Debug)]
pub struct SecretCommand {
    vault: Arc<Vault>,
}

impl SecretCommand {
    pub fn new(vault: Arc<Vault>) -> Self {
        Self { vault }
    }
}

/// `/secret set`'s arguments.
struct SetArgs {
    name: String,
    value: SecretString,
    hosts: Vec<String>,
    places: Vec<String>,
    mode: Option<Mode>,
    confirm: bool,
}

fn parse_set(args: &str) -> Result<SetArgs, String> {
    let mut words = args.split_whitespace();
    let name = words.next().ok_or("give a name and a value")?.to_owned();
    let value = words.next().ok_or("give a value after the name")?;
    let value = SecretString::from(value.to_owned());
    let (mut hosts, mut places, mut mode, mut confirm) = (Vec::new(), Vec::new(), None, false);
    while let Some(word) = words.next() {
        match word {
            "--host" => hosts.push(words.next().ok_or("--host needs a host")?.to_owned()),
            "--in" => places.push(words.next().ok_or("--in needs a place")?.to_owned()),
            "--confirm" => confirm = true,
            "--mode" => {
                let text = words.next().ok_or("--mode needs proxy or stdin")?;
                mode = Some(Mode::parse(text).map_err(|e| e.to_string())?);
            }
            // Never echo the word: a value with a space in it would show its second half.
            _ => {
                return Err("unexpected words after the value (a value cannot contain spaces; \
                             options are --host HOST, --in PLACE, --confirm and --mode proxy|stdin)"
                    .to_owned())
            }
        }
    }
    Ok(SetArgs { name, value, hosts, places, mode, confirm })
}

/// One line of `/secret list` (`nexbot-ctl secrets ls` shows the same fields as a table).
pub fn describe(info: &SecretInfo) -> String {
    let when = chrono::DateTime::from_timestamp(info.updated_at, 0)
        .map(|t| t.format("%Y-%m-%d %H:%M UTC").to_string())
        .unwrap_or_default();
    let binding = match info.mode {
        Mode::Proxy => format!("proxy → {}", info.hosts.join(", ")),
        Mode::Stdin if info.hosts.is_empty() => "stdin".to_owned(),
        Mode::Stdin => format!("stdin, hosts {}", info.hosts.join(", ")),
    };
    let confirm = if info.confirm { " — asks first (--confirm)" } else { "" };
    let mut line = format!("{} — {binding}{confirm} — set {when}", info.name);
    if let Some(why) = &info.unreadable {
        line.push_str(&format!(" — UNUSABLE: {why}"));
    }
    line
}

impl ChatCommand for SecretCommand {
    fn name(&self) -> &'static str {
        "secret"
    }
    fn summary(&self) -> &'static str {
        "store, list or delete a secret for tasks (private chats)"
    }
    fn run<'a>(&'a self, ctx: CommandContext<'a>) -> BoxFuture<'a, String> {
        Box::pin(async move {
            let (sub, rest) = ctx.args.split_once(char::is_whitespace).unwrap_or((ctx.args, ""));
            let private = !matches!(ctx.chat, ChatRef::Telegram(id) if *id < 0);
            let scope = SecretScope::Chat(ctx.chat.clone());
            match sub.to_ascii_lowercase().as_str() {
                "set" => {
                    // Deleted whatever happens next: the message holds a value.
                    let deleted = ctx.channel.forget_inbound(ctx.chat, ctx.message).await;
                    let mut answer = if !private {
                        "/secret works only in a private chat with me; nothing was stored."
                            .to_owned()
                    } else {
                        match parse_set(rest) {
                            Err(why) => format!("Nothing was stored: {why}.\n\n{USAGE}"),
                            Ok(args) => match self
                                .vault
                                .set_bound(
                                    &scope,
                                    &args.name,
                                    args.value,
                                    Bind {
                                        hosts: &args.hosts,
                                        places: &args.places,
                                        mode: args.mode,
                                        confirm: args.confirm,
                                    },
                                )
                                .await
                            {
                                Ok(info) if info.mode == Mode::Stdin => {
                                    format!("{}\n{STDIN_WARNING}", stored(&info))
                                }
                                Ok(info) => stored(&info),
                                // Never quoted back: a value typed where the name goes.
                                Err(VaultError::BadName(_)) => format!(
                                    "Nothing was stored: a name is [A-Z_][A-Z0-9_]* (at most 64 \
                                     characters) and comes before the value.\n\n{USAGE}"
                                ),
                                Err(e) => format!("Nothing was stored: {e}."),
                            },
                        }
                    };
                    match deleted {
                        Ok(()) => answer.push_str("\nYour message with the value was deleted."),
                        Err(e) => {
                            tracing::warn!(chat = %ctx.chat, error = %e, "cannot delete a /secret message");
                            answer.push_str(
                                "\nI could not delete your message: delete it yourself now, it \
                                 holds the value.",
                            )
                        }
                    }
                    answer
                }
                "list" | "ls" => {
                    let listed = self.vault.list(Some(&scope));
                    let mut lines = Vec::new();
                    if let VaultState::Off(why) = self.vault.state() {
                        lines.push(format!("The secrets vault is off: {why}"));
                    }
                    if listed.is_empty() {
                        lines.push("No secrets are stored for this chat.".to_owned());
                    } else {
                        lines.push(format!("Secrets of this chat ({}):", listed.len()));
                        lines.extend(listed.iter().map(describe));
                    }
                    lines.join("\n")
                }
                "delete" | "rm" => {
                    let name = rest.trim();
                    if name.is_empty() {
                        return format!("Give the name to delete.\n\n{USAGE}");
                    }
                    match self.vault.delete(&scope, name).await {
                        Ok(true) => format!("Deleted {name}."),
                        Ok(false) => format!("No secret named {name} is stored for this chat."),
                        Err(e) => format!("Could not delete {name}: {e}"),
                    }
                }
                _ => {
                    // `/secret GH ghp_…` (no sub-command) may hold a value too: deleted.
                    if ctx.args.split_whitespace().count() >= 2 {
                        let deleted = ctx.channel.forget_inbound(ctx.chat, ctx.message).await;
                        let note = match deleted {
                            Ok(()) => "Your message was deleted in case it held a value.",
                            Err(_) => "If your message held a value, delete it now.",
                        };
                        return format!("{USAGE}\n\n{note}");
                    }
                    USAGE.to_owned()
                }
            }
        })
    }
}

fn stored(info: &SecretInfo) -> String {
    match info.mode {
        Mode::Proxy => format!(
            "Stored {} (proxy mode): the egress proxy fills it in for {} only; it never enters a \
             sandbox.{}",
            info.name,
            info.hosts.join(", "),
            match info.confirm {
                true => " Each task asks you before its first use.",
                false => "",
            }
        ),
        Mode::Stdin => format!(
            "Stored {} (stdin mode): tasks that are given it get the value in their sandbox.",
            info.name
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use secrecy::ExposeSecret;

    #[test]
    fn set_arguments_are_parsed_and_never_echoed() {
        let args = parse_set("GH ghp_abc123456 --host api.github.com --mode proxy").unwrap();
        assert_eq!((args.name.as_str(), args.value.expose_secret()), ("GH", "ghp_abc123456"));
        assert_eq!(args.hosts, ["api.github.com"]);
        assert_eq!(args.mode, Some(Mode::Proxy));
        assert!(!args.confirm);
        let asked = parse_set("GH ghp_abc123456 --host api.github.com --confirm").unwrap();
        assert!(asked.confirm && asked.mode.is_none());
        let err = parse_set("GH first-half second-half").err().unwrap();
        assert!(!err.contains("second-half") && !err.contains("first-half"), "{err}");
        assert!(parse_set("GH").is_err());
        assert!(parse_set("GH v --mode nope").err().unwrap().contains("invalid mode"));
    }
}
