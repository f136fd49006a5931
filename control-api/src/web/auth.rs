//! Who may see the dashboard: one-time login links, sessions and their CSRF tokens.
//!
//! Why this shape: the operator already proves who they are by reaching the control socket
//! (mode 0600), so the socket hands out the login (`nexbot-ctl web login`); the browser trades
//! the link's token, once and within [`LOGIN_TTL`], for a session cookie (HttpOnly,
//! SameSite=Strict, named by the dashboard's port, `Secure` when served to other machines:
//! [`SessionCookie`]) that lasts [`SESSION_TTL`]. Every action also carries the session's CSRF
//! token. Everything lives in memory: a restarted daemon asks for a new login, and nothing
//! here is ever written to disk or logged.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use subtle::ConstantTimeEq as _;

/// How long a login link works (once).
pub const LOGIN_TTL: Duration = Duration::from_secs(300);
/// How long a session lasts from its login.
pub const SESSION_TTL: Duration = Duration::from_secs(12 * 3600);
/// The session cookie's name before its port (`nexbot_session_8088`, see [`SessionCookie`]).
const COOKIE_PREFIX: &str = "nexbot_session";
/// Most logins and sessions kept at once: the oldest go first (a loop asking for links
/// cannot grow the daemon's memory).
const MAX_KEPT: usize = 64;

/// A session: its CSRF token, and a message for the next page (what an action did; taken
/// by [`Logins::take_flash`] only, so a check of the session never loses it).
#[derive(Clone)]
pub struct Session {
    pub csrf: String,
    flash: Option<String>,
    expires: Instant,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session").field("expires", &self.expires).finish_non_exhaustive()
    }
}

/// The live login tokens and sessions.
#[derive(Default)]
pub struct Logins {
    inner: Mutex<Kept>,
}

impl std::fmt::Debug for Logins {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Logins").finish_non_exhaustive()
    }
}

#[derive(Default)]
struct Kept {
    /// Login token → when it stops working.
    links: HashMap<String, Instant>,
    /// Session id → session.
    sessions: HashMap<String, Session>,
}

/// A random token: 32 bytes from the OS, in hex.
fn token() -> Result<String, String> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| format!("no randomness for a token: {e}"))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// The entry of `map` whose key equals `key`, compared in constant time.
fn find<'a, V>(map: &'a HashMap<String, V>, key: &str) -> Option<(&'a String, &'a V)> {
    let mut found = None;
    for (k, v) in map {
        if bool::from(k.as_bytes().ct_eq(key.as_bytes())) {
            found = Some((k, v));
        }
    }
    found
}

/// Drops expired entries, then the soonest to expire until at most [`MAX_KEPT`] remain.
fn prune<V>(map: &mut HashMap<String, V>, expires: impl Fn(&V) -> Instant) {
    let now = Instant::now();
    map.retain(|_, v| expires(v) > now);
    while map.len() >= MAX_KEPT {
        let Some(oldest) = map.iter().min_by_key(|(_, v)| expires(v)).map(|(k, _)| k.clone())
        else {
            break;
        };
        map.remove(&oldest);
    }
}

impl Logins {
    fn kept(&self) -> std::sync::MutexGuard<'_, Kept> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A new one-time login token, good for [`LOGIN_TTL`].
    pub fn new_link(&self) -> Result<String, String> {
        let token = token()?;
        let mut kept = self.kept();
        prune(&mut kept.links, |at| *at);
        kept.links.insert(token.clone(), Instant::now() + LOGIN_TTL);
        Ok(token)
    }

    /// Trades a login token for a new session id; `None` when the token is unknown, used or
    /// expired (it works once either way).
    pub fn log_in(&self, link: &str) -> Option<String> {
        let mut kept = self.kept();
        let key = find(&kept.links, link).map(|(k, _)| k.clone())?;
        let expires = kept.links.remove(&key)?;
        if expires <= Instant::now() {
            return None;
        }
        let (id, csrf) = (token().ok()?, token().ok()?);
        prune(&mut kept.sessions, |s| s.expires);
        kept.sessions.insert(
            id.clone(),
            Session { csrf, flash: None, expires: Instant::now() + SESSION_TTL },
        );
        Some(id)
    }

    /// The live session `id` (an expired one is dropped).
    pub fn session(&self, id: &str) -> Option<Session> {
        let mut kept = self.kept();
        let key = find(&kept.sessions, id).map(|(k, _)| k.clone())?;
        let session = kept.sessions.get(&key)?;
        if session.expires <= Instant::now() {
            kept.sessions.remove(&key);
            return None;
        }
        Some(session.clone())
    }

    /// The session's message for the page being rendered, taken (shown once).
    pub fn take_flash(&self, id: &str) -> Option<String> {
        let mut kept = self.kept();
        let key = find(&kept.sessions, id).map(|(k, _)| k.clone())?;
        kept.sessions.get_mut(&key)?.flash.take()
    }

    /// Leaves a message for the session's next page.
    pub fn flash(&self, id: &str, message: String) {
        let mut kept = self.kept();
        if let Some(key) = find(&kept.sessions, id).map(|(k, _)| k.clone()) {
            if let Some(session) = kept.sessions.get_mut(&key) {
                session.flash = Some(message);
            }
        }
    }

    pub fn log_out(&self, id: &str) {
        let mut kept = self.kept();
        if let Some(key) = find(&kept.sessions, id).map(|(k, _)| k.clone()) {
            kept.sessions.remove(&key);
        }
    }
}

/// Whether `given` is the session's CSRF token (constant time).
pub fn csrf_matches(session: &Session, given: &str) -> bool {
    !given.is_empty() && bool::from(session.csrf.as_bytes().ct_eq(given.as_bytes()))
}

/// The dashboard's session cookie: its name and whether it is `Secure`.
#[derive(Debug, Clone)]
pub struct SessionCookie {
    name: String,
    secure: bool,
}

impl SessionCookie {
    /// The cookie of the dashboard served on `addr` (`remote`: `control.web_remote`).
    ///
    /// Why the port is in the name: browsers keep cookies by host, not port, so two daemons'
    /// dashboards on one machine (`127.0.0.1:8088` and `:8089`) would overwrite each other's
    /// session under one name. A cookie of the old name (`nexbot_session`) is simply not
    /// read: the browser gets the login page and logs in again.
    ///
    /// Why `Secure` only when served beyond loopback: such a dashboard is meant to be reached
    /// through TLS in front of it (docs/operating.md), so its session must never travel over plain
    /// http (a browser then keeps the cookie off any http:// request). On loopback it is reached
    /// over plain http (the machine itself, an ssh tunnel), where a `Secure` cookie would be
    /// dropped by browsers that do not treat loopback as secure.
    pub fn new(addr: std::net::SocketAddr, remote: bool) -> Self {
        Self {
            name: format!("{COOKIE_PREFIX}_{}", addr.port()),
            secure: remote && !addr.ip().is_loopback(),
        }
    }

    /// The session id in a `Cookie` header's value, if it names one.
    pub fn session<'a>(&self, header: &'a str) -> Option<&'a str> {
        header.split(';').map(str::trim).find_map(|pair| {
            let (name, value) = pair.split_once('=')?;
            (name == self.name && !value.is_empty()).then_some(value)
        })
    }

    /// The `Set-Cookie` value for a new session (and for ending one: `None`).
    pub fn set(&self, session: Option<&str>) -> String {
        let (value, max_age) = match session {
            Some(id) => (id, SESSION_TTL.as_secs()),
            None => ("", 0),
        };
        let secure = if self.secure { "; Secure" } else { "" };
        format!(
            "{}={value}; Path=/; HttpOnly; SameSite=Strict; Max-Age={max_age}{secure}",
            self.name
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_link_works_once_and_its_session_carries_a_csrf_token() {
        let logins = Logins::default();
        let link = logins.new_link().unwrap();
        assert_eq!(link.len(), 64);
        let id = logins.log_in(&link).expect("a fresh link logs in");
        assert!(logins.log_in(&link).is_none(), "a link works once");
        assert!(logins.log_in("").is_none());
        assert!(logins.log_in(&link[..63]).is_none());
        let session = logins.session(&id).unwrap();
        assert!(csrf_matches(&session, &session.csrf.clone()));
        assert!(!csrf_matches(&session, ""));
        assert!(!csrf_matches(&session, &id), "the session id is not the CSRF token");
        assert!(logins.session(&link).is_none(), "a link is not a session");
        logins.flash(&id, "done".into());
        assert!(logins.session(&id).is_some(), "a check of the session keeps the flash");
        assert_eq!(logins.take_flash(&id).as_deref(), Some("done"));
        assert_eq!(logins.take_flash(&id), None, "a flash shows once");
        logins.log_out(&id);
        assert!(logins.session(&id).is_none());
    }

    #[test]
    fn an_expired_link_or_session_is_refused() {
        let logins = Logins::default();
        let link = logins.new_link().unwrap();
        logins.kept().links.insert(link.clone(), Instant::now() - Duration::from_secs(1));
        assert!(logins.log_in(&link).is_none());
        let link = logins.new_link().unwrap();
        let id = logins.log_in(&link).unwrap();
        logins.kept().sessions.get_mut(&id).unwrap().expires = Instant::now();
        assert!(logins.session(&id).is_none());
    }

    #[test]
    fn no_more_than_the_cap_is_kept() {
        let logins = Logins::default();
        let first = logins.new_link().unwrap();
        for _ in 0..(MAX_KEPT * 2) {
            logins.new_link().unwrap();
        }
        assert!(logins.kept().links.len() <= MAX_KEPT);
        assert!(logins.log_in(&first).is_none(), "the oldest link went first");
    }

    #[test]
    fn the_cookie_is_named_by_its_port_read_among_others_and_set_strict() {
        let local = SessionCookie::new("127.0.0.1:8088".parse().unwrap(), false);
        assert_eq!(local.session("a=1; nexbot_session_8088=abc; b=2"), Some("abc"));
        assert_eq!(local.session("nexbot_session_8088="), None);
        assert_eq!(local.session("xnexbot_session_8088=abc"), None);
        assert_eq!(local.session("nexbot_session=abc"), None, "the old name is not read");
        assert_eq!(local.session("nexbot_session_8089=abc"), None, "another port's session");
        let set = local.set(Some("abc"));
        assert!(set.starts_with("nexbot_session_8088=abc;"), "{set}");
        assert!(set.contains("HttpOnly") && set.contains("SameSite=Strict"), "{set}");
        assert!(!set.contains("Secure"), "plain http on loopback: {set}");
        assert!(local.set(None).contains("Max-Age=0"));
    }

    #[test]
    fn the_cookie_is_secure_when_served_beyond_loopback() {
        for addr in ["0.0.0.0:8088", "192.0.2.7:8088", "[::]:8088"] {
            let remote = SessionCookie::new(addr.parse().unwrap(), true);
            for set in [remote.set(Some("abc")), remote.set(None)] {
                assert!(
                    set.starts_with("nexbot_session_8088=") && set.contains("; Secure"),
                    "{set}"
                );
            }
        }
        let tunnelled = SessionCookie::new("127.0.0.1:8088".parse().unwrap(), true);
        assert!(!tunnelled.set(Some("abc")).contains("Secure"));
    }
}
