//! The exit scan: every text that leaves the host is checked for secret values first.
//!
//! Why one scanner for every exit: a secret leaks through whichever door nobody watched — a
//! provider's 401 that echoed the API key into a chat message, a model that pasted a token
//! into its answer, a log line with a request body. So the host keeps one [`Redactor`] over
//! every value it must never emit — the vault's secrets of every chat and of the operator,
//! and the daemon's own keys (LLM provider keys, the Telegram token, the master key) — and
//! the exits run text through [`Exits::scan`]: chat messages and drafts (`channels::Router`),
//! the main agent's LLM requests (`llm.rs`), task records (`nexbot-delegation`'s `delegate.rs`) and log lines
//! ([`RedactingWriter`]). A hit is replaced by `[REDACTED:NAME]` in every form the redactor
//! knows (raw, base64, hex, percent- and JSON-escaped) and audited by name and exit, never by
//! value.
//!
//! A chat's exits are scanned for that chat's values, the operator's and the daemon's keys,
//! not every chat's: the scan's cost then grows with one chat's secrets, not with every
//! chat's, and a chat never learns anything of another chat's secrets — not even, through a
//! `[REDACTED:NAME]`, a name. (Another chat's value can only be in this chat's text if this
//! chat's user typed it.) The operator's values are redacted as a bare `[REDACTED]`. Logs,
//! the operator's, are scanned for every value and name them all.

use std::borrow::Cow;
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use nexbot_core::ChatRef;
use nexbot_redact::Redactor;
use secrecy::SecretString;

/// The chained audit's events scanned for every value first, as a log line is: a job's words
/// or a held request's path may carry a chat's secret, and the audit file is the operator's.
#[derive(Debug)]
pub struct ScannedTrail {
    trail: Arc<dyn nexbot_core::audit::AuditTrail>,
    exits: Arc<Exits>,
}

impl ScannedTrail {
    pub fn wrap(
        trail: Arc<dyn nexbot_core::audit::AuditTrail>,
        exits: Arc<Exits>,
    ) -> Arc<dyn nexbot_core::audit::AuditTrail> {
        Arc::new(Self { trail, exits })
    }
}

impl nexbot_core::audit::AuditTrail for ScannedTrail {
    fn record(&self, mut event: nexbot_core::audit::AuditEvent) {
        event.subject = self.exits.scan(Exit::Log, None, &event.subject).into_owned();
        event.outcome = self.exits.scan(Exit::Log, None, &event.outcome).into_owned();
        self.trail.record(event);
    }
}

/// Where a text was leaving through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// A message, draft, caption or task update shown in a chat.
    Chat,
    /// A request to the LLM provider from the main agent.
    Llm,
    /// A task record written to the store.
    TaskRecord,
    /// A log line.
    Log,
}

impl Exit {
    pub fn name(self) -> &'static str {
        match self {
            Self::Chat => "chat",
            Self::Llm => "llm",
            Self::TaskRecord => "task_record",
            Self::Log => "log",
        }
    }
}

/// The operator's scope key (the host vault's operator scope).
const OPERATOR_SCOPE: &str = "operator";

/// A vault value to scan for: its scope's key (`telegram:42`, `operator`; `None` when not
/// known, e.g. a retired value), its name, the value.
pub type ScopedSecret<'a> = (Option<&'a str>, &'a str, &'a SecretString);

/// The values to scan for and the counter of what was stopped. Cheap to share.
#[derive(Default)]
pub struct Exits {
    /// The daemon's own keys, by the name they are labelled with.
    daemon: Vec<(String, SecretString)>,
    /// The vault's values as last refreshed, with their scope.
    secrets: RwLock<Vec<(Option<String>, String, SecretString)>>,
    /// Every value, every name shown: logs and exits of no chat.
    redactor: RwLock<Arc<Redactor>>,
    /// Per chat: every value, names shown only for that chat's own secrets; built on first
    /// use after each refresh.
    per_chat: std::sync::Mutex<std::collections::HashMap<String, Arc<Redactor>>>,
    hits: AtomicU64,
}

impl std::fmt::Debug for Exits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.daemon.iter().map(|(n, _)| n.as_str()).collect();
        f.debug_struct("Exits").field("daemon_keys", &names).field("hits", &self.hits()).finish()
    }
}

impl Exits {
    /// A scanner for the daemon's own keys (`(label, value)`; unset ones are skipped); the
    /// vault adds its values with [`Exits::refresh`].
    pub fn new(daemon: impl IntoIterator<Item = (String, Option<SecretString>)>) -> Arc<Self> {
        let daemon: Vec<(String, SecretString)> =
            daemon.into_iter().filter_map(|(name, value)| Some((name, value?))).collect();
        let exits = Self { daemon, ..Self::default() };
        exits.refresh(std::iter::empty());
        Arc::new(exits)
    }

    /// Rebuilds the scanner from the daemon's keys and `secrets` (the vault's values of every
    /// scope, names may repeat). Called whenever a secret is set, deleted or rotated.
    pub fn refresh<'a>(&self, secrets: impl Iterator<Item = ScopedSecret<'a>>) {
        let secrets: Vec<(Option<String>, String, SecretString)> = secrets
            .map(|(scope, name, value)| (scope.map(str::to_owned), name.to_owned(), value.clone()))
            .collect();
        let redactor = Arc::new(self.build(&secrets, None));
        let mut held = self.secrets.write().unwrap_or_else(|p| p.into_inner());
        *held = secrets;
        *self.redactor.write().unwrap_or_else(|p| p.into_inner()) = redactor;
        self.per_chat.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }

    /// A redactor over the daemon's keys and `secrets`; with `chat`, over that chat's values
    /// (named), the operator's and those of no known scope (unnamed: `[REDACTED]`) only.
    fn build(
        &self,
        secrets: &[(Option<String>, String, SecretString)],
        chat: Option<&str>,
    ) -> Redactor {
        let mut pairs: Vec<(&str, &SecretString)> =
            self.daemon.iter().map(|(n, v)| (n.as_str(), v)).collect();
        for (scope, name, value) in secrets {
            let scope = scope.as_deref();
            match chat {
                None => pairs.push((name.as_str(), value)),
                Some(chat) if scope == Some(chat) => pairs.push((name.as_str(), value)),
                Some(_) if matches!(scope, None | Some(OPERATOR_SCOPE)) => pairs.push(("", value)),
                // Another chat's value: not this chat's exits' business.
                Some(_) => {}
            }
        }
        Redactor::from_pairs(pairs)
    }

    /// The current redactor, every name shown (for logs and stream scanning).
    pub fn redactor(&self) -> Arc<Redactor> {
        self.redactor.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The redactor for `chat`'s exits: another scope's secret is redacted without its name.
    fn redactor_for(&self, chat: &ChatRef) -> Arc<Redactor> {
        let key = chat.to_string();
        let mut cache = self.per_chat.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(redactor) = cache.get(&key) {
            return redactor.clone();
        }
        let secrets = self.secrets.read().unwrap_or_else(|p| p.into_inner());
        let redactor = Arc::new(self.build(&secrets, Some(&key)));
        cache.insert(key, redactor.clone());
        redactor
    }

    /// Secrets stopped at an exit since start.
    pub fn hits(&self) -> u64 {
        self.hits.load(Ordering::Relaxed)
    }

    /// `text` with every known secret redacted; a hit is audited (names, exit, chat).
    pub fn scan<'t>(&self, exit: Exit, chat: Option<&ChatRef>, text: &'t str) -> Cow<'t, str> {
        let redactor = match chat {
            Some(chat) if exit != Exit::Log => self.redactor_for(chat),
            _ => self.redactor(),
        };
        let Some((clean, names)) = redactor.redact_found(text) else {
            return Cow::Borrowed(text);
        };
        self.hits.fetch_add(names.len() as u64, Ordering::Relaxed);
        let chat = chat.map(ToString::to_string).unwrap_or_default();
        for name in &names {
            let name = if name.is_empty() { "(another scope's secret)" } else { name.as_str() };
            tracing::warn!(
                target: "nexbot::exits",
                secret = %name,
                exit = exit.name(),
                chat = %chat,
                "a secret value was about to leave the host; it was redacted"
            );
        }
        Cow::Owned(clean)
    }

    /// [`Exits::scan`] in place.
    pub fn scan_string(&self, exit: Exit, chat: Option<&ChatRef>, text: &mut String) {
        if let Cow::Owned(clean) = self.scan(exit, chat, text) {
            *text = clean;
        }
    }
}

/// A `tracing-subscriber` writer that scans each formatted log line before it is written.
///
/// A hit is redacted and followed by one JSON audit line naming the secret — written here,
/// not through `tracing`, which would re-enter the writer.
#[derive(Clone, Debug)]
pub struct RedactingWriter<W> {
    exits: Arc<Exits>,
    make: W,
}

impl<W> RedactingWriter<W> {
    pub fn new(exits: Arc<Exits>, make: W) -> Self {
        Self { exits, make }
    }
}

/// One log line being formatted.
pub struct LineWriter<W: Write> {
    exits: Arc<Exits>,
    inner: W,
    line: Vec<u8>,
}

impl<W: Write> std::fmt::Debug for LineWriter<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LineWriter").field("buffered", &self.line.len()).finish()
    }
}

impl<W: Write> Write for LineWriter<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.line.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.emit()?;
        self.inner.flush()
    }
}

impl<W: Write> LineWriter<W> {
    fn emit(&mut self) -> std::io::Result<()> {
        if self.line.is_empty() {
            return Ok(());
        }
        let line = std::mem::take(&mut self.line);
        let text = String::from_utf8_lossy(&line);
        match self.exits.redactor().redact_found(&text) {
            None => self.inner.write_all(&line),
            Some((clean, names)) => {
                self.exits.hits.fetch_add(names.len() as u64, Ordering::Relaxed);
                self.inner.write_all(clean.as_bytes())?;
                let audit = serde_json::json!({
                    "level": "WARN",
                    "target": "nexbot::exits",
                    "fields": {
                        "message": "a secret value was about to be logged; it was redacted",
                        "secret": names.join(","),
                        "exit": Exit::Log.name(),
                    }
                });
                writeln!(self.inner, "{audit}")
            }
        }
    }
}

impl<W: Write> Drop for LineWriter<W> {
    fn drop(&mut self) {
        let _ = self.emit();
    }
}

impl<'a, M> tracing_subscriber::fmt::MakeWriter<'a> for RedactingWriter<M>
where
    M: tracing_subscriber::fmt::MakeWriter<'a>,
{
    type Writer = LineWriter<M::Writer>;

    fn make_writer(&'a self) -> Self::Writer {
        LineWriter { exits: self.exits.clone(), inner: self.make.make_writer(), line: Vec::new() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "sk-daemon-PLANTED-llm-key-000111";
    const TOKEN: &str = "ghp_chat_PLANTED_token_222333";

    fn exits() -> Arc<Exits> {
        let exits = Exits::new([
            ("NEXBOT_LLM_API_KEY".to_owned(), Some(SecretString::from(KEY.to_owned()))),
            ("NEXBOT_TELEGRAM_TOKEN".to_owned(), None),
        ]);
        let token = SecretString::from(TOKEN.to_owned());
        exits.refresh([(Some("telegram:7"), "GITHUB_TOKEN", &token)].into_iter());
        exits
    }

    #[test]
    fn an_audit_events_words_are_scanned_before_the_chain_gets_them() {
        use nexbot_core::audit::{AuditEvent, AuditTrail};
        #[derive(Debug, Default)]
        struct Kept(std::sync::Mutex<Vec<AuditEvent>>);
        impl AuditTrail for Kept {
            fn record(&self, event: AuditEvent) {
                self.0.lock().unwrap().push(event);
            }
        }
        let kept = Arc::new(Kept::default());
        let trail = ScannedTrail::wrap(kept.clone(), exits());
        trail.record(AuditEvent {
            event: "job",
            actor: "telegram:7".into(),
            chat: Some("telegram:7".into()),
            subject: format!("job 3 \"sync\": curl -H 'token: {TOKEN}' …"),
            outcome: format!("stored {KEY}"),
        });
        let event = kept.0.lock().unwrap().remove(0);
        assert!(!event.subject.contains(TOKEN) && event.subject.contains("[REDACTED"), "{event:?}");
        assert!(!event.outcome.contains(KEY), "{event:?}");
        assert_eq!(event.actor, "telegram:7");
    }

    #[test]
    fn a_chats_exits_name_only_its_own_secrets() {
        use secrecy::ExposeSecret;
        let exits = exits();
        let (other, operator) = (
            SecretString::from("other-chat-PLANTED-value-444".to_owned()),
            SecretString::from("operator-PLANTED-value-555".to_owned()),
        );
        let token = SecretString::from(TOKEN.to_owned());
        exits.refresh(
            [
                (Some("telegram:7"), "GITHUB_TOKEN", &token),
                (Some("telegram:8"), "BANK_PIN_OF_CHAT_8", &other),
                (Some("operator"), "OPS_DEPLOY_KEY", &operator),
                (Some("telegram:8"), "RETIRED_ONE", &other),
            ]
            .into_iter(),
        );
        let text = format!("{TOKEN} / {} / {}", other.expose_secret(), operator.expose_secret());
        let seven = ChatRef::Telegram(7);
        // Chat 7's exits: its own value named, the operator's unnamed, chat 8's not scanned
        // for at all (so nothing of it, not its name, is told to chat 7).
        let other_value = other.expose_secret();
        for exit in [Exit::Chat, Exit::Llm, Exit::TaskRecord] {
            let clean = exits.scan(exit, Some(&seven), &text);
            let want = format!("[REDACTED:GITHUB_TOKEN] / {other_value} / [REDACTED]");
            assert_eq!(clean, want, "{exit:?}");
        }
        let eight = exits.scan(Exit::Chat, Some(&ChatRef::Telegram(8)), &text);
        assert!(eight.contains("[REDACTED:BANK_PIN_OF_CHAT_8]"), "{eight}");
        assert!(eight.contains(TOKEN), "chat 7's value is not chat 8's to scan: {eight}");
        assert!(!eight.contains("GITHUB_TOKEN") && !eight.contains("OPS_DEPLOY_KEY"), "{eight}");
        // The operator's logs name them all.
        let logged = exits.scan(Exit::Log, Some(&seven), &text);
        assert!(logged.contains("[REDACTED:OPS_DEPLOY_KEY]"), "{logged}");
        // The daemon's own keys keep their names everywhere.
        assert_eq!(exits.scan(Exit::Chat, Some(&seven), KEY), "[REDACTED:NEXBOT_LLM_API_KEY]");
    }

    #[test]
    fn daemon_keys_and_vault_values_are_stopped_in_any_form() {
        let exits = exits();
        let chat = ChatRef::Telegram(7);
        let text = format!("key {KEY} and {}", hex_of(TOKEN));
        let clean = exits.scan(Exit::Chat, Some(&chat), &text);
        assert_eq!(clean, "key [REDACTED:NEXBOT_LLM_API_KEY] and [REDACTED:GITHUB_TOKEN]");
        assert_eq!(exits.hits(), 2);
        assert!(matches!(exits.scan(Exit::Chat, Some(&chat), "plain text"), Cow::Borrowed(_)));
        // A refresh without the value: it is no longer scanned for (deleted secret).
        exits.refresh(std::iter::empty());
        assert_eq!(exits.scan(Exit::Llm, None, TOKEN), TOKEN);
        assert!(!format!("{exits:?}").contains(KEY));
    }

    fn hex_of(text: &str) -> String {
        text.bytes().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn log_lines_are_scanned_and_the_hit_is_audited_by_name() {
        let exits = exits();
        let sink = nexbot_tests::LogCapture::default();
        let out = sink.clone();
        let writer = RedactingWriter::new(exits.clone(), move || out.clone());
        let subscriber = tracing_subscriber::fmt().json().with_writer(writer).finish();
        tracing::subscriber::with_default(subscriber, || {
            tracing::info!(body = %format!("Authorization: Bearer {TOKEN}"), "sending");
            tracing::info!("nothing to see");
        });
        let logged = sink.text();
        assert!(!logged.contains(TOKEN), "{logged}");
        assert!(logged.contains("[REDACTED:GITHUB_TOKEN]"), "{logged}");
        assert!(logged.contains("\"secret\":\"GITHUB_TOKEN\""), "{logged}");
        assert!(logged.contains("nothing to see"), "{logged}");
        assert_eq!(exits.hits(), 1);
    }
}
