//! Asking before anything new: the egress modes and the approver the proxy asks.
//!
//! In [`EgressMode::Ask`] a destination (host and port) that passed the deny list and the
//! name rules (a literal address: the address rules too), and that no `egress.allow` rule
//! covers, is *held* before its name is looked up (a lookup carries the name to whoever
//! serves it; the address rules judge what it resolves to after the answer): the client's connection
//! (CONNECT or absolute-form) stays open while the proxy asks an injected [`Approver`]
//! whether this task may reach it. The proxy knows no chat, no user and no button: who is
//! asked, how, and what is remembered (a grant for the task, a rule for the chat) is the
//! approver's. The proxy only guarantees that a held connection never hangs — it is refused
//! when the approver says no, does not answer within `egress.approval_timeout_secs`, the task
//! ends, or the proxy stops.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, RwLock};

use serde::{Deserialize, Serialize};

use super::config::HostPattern;

/// How the proxy treats a destination no rule names (`egress.mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum EgressMode {
    /// Hold the connection and ask (the approver); the default of a new install.
    Ask,
    /// Refuse silently what no `egress.allow` rule allows (for unattended installs).
    Allowlist,
    /// Today's behaviour before modes existed: any host `proxy.allow_domains` matches.
    #[default]
    Open,
}

impl EgressMode {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ask => "ask",
            Self::Allowlist => "allowlist",
            Self::Open => "open",
        }
    }
}

impl fmt::Display for EgressMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a task with nobody to ask (a scheduled job, a heartbeat check) gets in `ask` mode
/// (`egress.unattended`). The proxy does not know who is unattended; the approver applies it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Unattended {
    /// Only `egress.allow` rules: nothing a chat allowed, nothing asked.
    #[default]
    Deny,
    /// `egress.allow` rules and the chat's "always" rules; nothing asked.
    Allowlist,
}

/// One allow rule: a host pattern (as in `proxy.allow_domains`) and a port, 443 unless named:
/// `"api.example.com"`, `"*.example.com:8443"`, `"198.51.100.7:80"`, `"[2001:db8::1]:443"`.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct AllowRule {
    pub host: HostPattern,
    pub port: u16,
}

/// The port a rule means when it names none.
pub const DEFAULT_RULE_PORT: u16 = 443;

impl AllowRule {
    /// Whether the rule covers `host` (lower-case, as the proxy normalised it) on `port`.
    pub fn covers(&self, host: &str, port: u16) -> bool {
        self.port == port && self.host.matches(host)
    }
}

impl TryFrom<String> for AllowRule {
    type Error = String;

    fn try_from(raw: String) -> Result<Self, String> {
        let text = raw.trim();
        // `[v6]:port`, `host:port`, or a bare host / v6 address.
        let (host, port) = if let Some(rest) = text.strip_prefix('[') {
            match rest.split_once(']') {
                Some((addr, "")) => (addr.to_owned(), None),
                Some((addr, tail)) => match tail.strip_prefix(':') {
                    Some(port) => (addr.to_owned(), Some(port)),
                    None => return Err(format!("invalid allow rule {raw:?}")),
                },
                None => return Err(format!("invalid allow rule {raw:?}: no closing ]")),
            }
        } else if text.matches(':').count() == 1 {
            let (host, port) = text.split_once(':').unwrap_or((text, ""));
            (host.to_owned(), Some(port))
        } else {
            (text.to_owned(), None)
        };
        let port = match port {
            Some(port) => match port.parse::<u16>() {
                Ok(port) if port > 0 => port,
                _ => return Err(format!("invalid allow rule {raw:?}: {port:?} is not a port")),
            },
            None => DEFAULT_RULE_PORT,
        };
        let host =
            HostPattern::try_from(host).map_err(|e| format!("invalid allow rule {raw:?}: {e}"))?;
        Ok(Self { host, port })
    }
}

impl From<AllowRule> for String {
    fn from(rule: AllowRule) -> Self {
        rule.to_string()
    }
}

impl fmt::Display for AllowRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let host = self.host.to_string();
        if host.contains(':') {
            write!(f, "[{host}]:{}", self.port)
        } else {
            write!(f, "{host}:{}", self.port)
        }
    }
}

impl fmt::Debug for AllowRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "AllowRule({self})")
    }
}

/// What the proxy asks about one held request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalRequest {
    /// The task whose credential the request carried.
    pub task_id: String,
    /// The destination as the proxy normalised it (lower-case, no trailing dot).
    pub host: String,
    pub port: u16,
    /// `CONNECT`, or the method of an absolute-form request.
    pub method: String,
    /// The path of an absolute-form request, without its query (which may carry anything);
    /// `None` for a tunnel, whose path the proxy cannot see.
    pub path: Option<String>,
    /// Whether a proxy-mode secret of the task would be filled into this request.
    pub secret: bool,
    /// `Some`: not a question about the destination (it is allowed) but about filling this
    /// proxy-mode secret, stored with `--confirm`, into the task's request — asked once per
    /// task and secret. The name only: the value never leaves the proxy's table.
    pub secret_name: Option<String>,
    /// Whether an absolute-form request carries a body (a length over 0, or one sent
    /// chunked); `false` for a tunnel, whose bytes the proxy cannot see.
    pub body: bool,
    /// The length of an absolute-form request's URL (scheme, host, path and query); 0 for a
    /// tunnel.
    pub url_len: usize,
}

/// The longest URL a reading allowance lets through without a question: a query long enough
/// to carry a document out is asked about (2 KiB holds any ordinary page's address).
pub const MAX_READ_URL: usize = 2048;

impl ApprovalRequest {
    /// Whether this request only reads (what "allow reading the web for this task" covers):
    /// a `GET` or `HEAD` the proxy sends itself (absolute-form, so it sees the method and the
    /// body; a tunnel could carry anything), with no body, no proxy-mode secret to fill in,
    /// a URL of at most [`MAX_READ_URL`], to a host name (an address written out is not "the
    /// web", and the address rules still judge what a name resolves to).
    pub fn reads_only(&self) -> bool {
        matches!(self.method.as_str(), "GET" | "HEAD")
            && self.path.is_some()
            && !self.body
            && !self.secret
            && self.secret_name.is_none()
            && self.url_len <= MAX_READ_URL
            && self.host.parse::<std::net::IpAddr>().is_err()
    }
}

/// The approver's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Approval {
    /// Proceed as if the destination had been allowed all along.
    Allow,
    /// Refuse; the reason reaches the subagent's tool (the proxy's refusal body) and the
    /// audit line: "denied by the user", "no answer", …
    Refuse(String),
}

/// A future the approver answers with.
pub type ApprovalFuture = Pin<Box<dyn Future<Output = Approval> + Send + 'static>>;

/// Decides about held destinations (the host asks its user), within
/// `egress.approval_timeout_secs` (then it refuses with [`NO_ANSWER`]). The proxy still bounds
/// the wait (a few seconds later), so an approver that never answers cannot hang a client.
pub trait Approver: Send + Sync {
    fn approve(&self, request: ApprovalRequest) -> ApprovalFuture;
}

/// What the host sets once it has built it, after the listener started: the approver (its
/// router, its store answer; until then `ask` mode refuses what it would ask) and the decoy
/// alarm (`decoy.rs`).
pub(crate) struct Late<T: ?Sized>(RwLock<Option<Arc<T>>>);

impl<T: ?Sized> Default for Late<T> {
    fn default() -> Self {
        Self(RwLock::new(None))
    }
}

impl<T: ?Sized> Late<T> {
    pub(crate) fn set(&self, value: Arc<T>) {
        *self.0.write().unwrap_or_else(|p| p.into_inner()) = Some(value);
    }

    pub(crate) fn get(&self) -> Option<Arc<T>> {
        self.0.read().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// The reason a held request gets when its wait ran out.
pub const NO_ANSWER: &str = "no answer";
/// The reason a held request gets when the user pressed Deny.
pub const DENIED_BY_USER: &str = "denied by the user";

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(text: &str) -> Result<AllowRule, String> {
        AllowRule::try_from(text.to_owned())
    }

    #[test]
    fn rules_are_host_and_port_with_443_unless_named() {
        let plain = rule("API.example.com").unwrap();
        assert_eq!(plain.to_string(), "api.example.com:443");
        assert!(plain.covers("api.example.com", 443));
        assert!(!plain.covers("api.example.com", 80), "another port is another destination");
        assert!(!plain.covers("x.api.example.com", 443));
        let wild = rule("*.example.com:8443").unwrap();
        assert!(wild.covers("a.example.com", 8443) && !wild.covers("example.com", 8443));
        assert_eq!(rule("198.51.100.7:80").unwrap().to_string(), "198.51.100.7:80");
        assert_eq!(rule("[2001:db8::1]:8080").unwrap().port, 8080);
        assert_eq!(rule("2001:db8::1").unwrap().port, 443);
        assert!(rule("example.com:0").is_err());
        assert!(rule("example.com:http").is_err());
        assert!(rule("exa mple.com").is_err());
    }

    #[test]
    fn only_a_bodiless_get_or_head_the_proxy_sends_itself_to_a_name_only_reads() {
        let read = ApprovalRequest {
            task_id: "t".into(),
            host: "docs.example.org".into(),
            port: 443,
            method: "GET".into(),
            path: Some("/guide".into()),
            secret: false,
            secret_name: None,
            body: false,
            url_len: 40,
        };
        assert!(read.reads_only());
        assert!(ApprovalRequest { method: "HEAD".into(), ..read.clone() }.reads_only());
        let not = [
            ApprovalRequest { method: "POST".into(), ..read.clone() },
            ApprovalRequest { method: "CONNECT".into(), path: None, ..read.clone() },
            ApprovalRequest { body: true, ..read.clone() },
            ApprovalRequest { secret: true, ..read.clone() },
            ApprovalRequest { secret_name: Some("GH".into()), ..read.clone() },
            ApprovalRequest { url_len: MAX_READ_URL + 1, ..read.clone() },
            ApprovalRequest { host: "10.0.0.7".into(), ..read.clone() },
            ApprovalRequest { host: "2001:db8::1".into(), ..read.clone() },
        ];
        for request in not {
            assert!(!request.reads_only(), "{request:?}");
        }
    }

    #[test]
    fn modes_read_as_lowercase_words() {
        #[derive(Deserialize)]
        struct T {
            mode: EgressMode,
            unattended: Unattended,
        }
        let t: T = serde_json::from_str(r#"{"mode":"ask","unattended":"allowlist"}"#).unwrap();
        assert_eq!((t.mode, t.unattended), (EgressMode::Ask, Unattended::Allowlist));
        assert!(serde_json::from_str::<T>(r#"{"mode":"closed","unattended":"deny"}"#).is_err());
    }
}
