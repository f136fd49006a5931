//! Where a proxy-mode secret's value may go: a host *and* a place in the request.
//!
//! Why a place: a host binding alone says which server may receive a value, not where in the
//! request. Many hosts store or echo what they receive (an issue comment, a webhook URL, a
//! request bin, a paste): a placeholder written into the body or a query parameter of a
//! request to the bound host would deliver the value into the attacker's own object there. So
//! a binding names the places the value may fill — by default only the `Authorization`
//! header — and a placeholder anywhere else is refused (403, audited by name, never filled).
//!
//! A binding is also https-only on one port (443 unless named): the value crosses the network
//! only inside TLS, except for a binding that says `http://host:port` (a LAN service), and it
//! never names a public suffix (`*.com`, `*.github.io`, `co.uk`): a wildcard over a suffix
//! that anyone can register under is no binding at all.
//!
//! Text form, as the vault stores it: `https://api.github.com:443 header:authorization`, then
//! any more places (`header:x-api-key`, `path:/bot`, `query:key`, `body`). A bare host pattern
//! (`api.github.com`, as bindings were stored before places existed) is a **legacy** binding:
//! the value may go anywhere in a request to that host, on any port, as before;
//! the daemon says so at start, `nexbot doctor` lists each one, and setting the secret again
//! (with `--host`) narrows it. Legacy bindings are deprecated: this release still honours
//! them, the one named in [`LEGACY_BINDINGS_REFUSED_FROM`] refuses them. Two things they no
//! longer do even now ([`Binding::refusal`], [`Binding::legacy_refuses`]): cover a public
//! suffix or `*` (a legacy `*.github.io` is no binding at all, as it never was for a new one),
//! and go over plain http to a public host (the value would cross the Internet in the clear,
//! on a scheme the task — not the operator — picked).
//!
//! A `path:` prefix matches whole segments: `path:/bot` takes `/bot<token>/sendMessage` (the
//! value continues the prefix's last segment) and `/bot/<token>`, never `/bottle/<token>` or
//! `/botx<token>`; `path:/repos/` takes anything under `/repos/`. And a path the server could
//! read as another one — a dot segment, `//`, a backslash, a percent-encoded `.`, `/`, `\` or
//! `%` — never takes a value at all ([`path_flaw`]).

use std::fmt;

use super::config::HostPattern;

/// The places a value may fill when a binding names none.
pub const DEFAULT_PLACE: &str = "header:authorization";

/// The release from which a legacy binding (a bare host, stored before bindings named places)
/// is refused outright: this one still honours them, so that an upgrade breaks no install,
/// and says so (the daemon's start-up warning, `nexbot doctor`) so that each can be narrowed
/// before then. A test fails once the workspace version reaches it, as a reminder to remove
/// the legacy path.
pub const LEGACY_BINDINGS_REFUSED_FROM: &str = "0.2.0";

/// A place in a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Place {
    /// The value of this header (lower case).
    Header(String),
    /// The request path, after this prefix (`/bot` for `/bot<token>/sendMessage`), at a
    /// segment boundary ([`path_continues`]).
    Path(String),
    /// The value of this query parameter.
    Query(String),
    /// Anywhere in the body.
    Body,
}

impl Place {
    fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim();
        let place = match text.split_once(':') {
            None if text.eq_ignore_ascii_case("body") => Self::Body,
            Some((kind, name)) if !name.is_empty() => match kind.to_ascii_lowercase().as_str() {
                "header" if http::HeaderName::from_bytes(name.as_bytes()).is_ok() => {
                    Self::Header(name.to_ascii_lowercase())
                }
                "path" if name.starts_with('/') && !name.contains(char::is_whitespace) => {
                    Self::Path(name.to_owned())
                }
                "query"
                    if name.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b)) =>
                {
                    Self::Query(name.to_owned())
                }
                _ => return Err(bad_place(text)),
            },
            _ => return Err(bad_place(text)),
        };
        Ok(place)
    }
}

fn bad_place(text: &str) -> String {
    format!("invalid place {text:?}: use header:<name>, path:/<prefix>, query:<name> or body")
}

impl fmt::Display for Place {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Header(name) => write!(f, "header:{name}"),
            Self::Path(prefix) => write!(f, "path:{prefix}"),
            Self::Query(name) => write!(f, "query:{name}"),
            Self::Body => f.write_str("body"),
        }
    }
}

/// Where in a request a placeholder stands (see [`Binding::allows`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Spot<'a> {
    Header(&'a str),
    /// In the path; what precedes the placeholder.
    Path {
        before: &'a str,
    },
    /// In the query: the value of this parameter (`None`: not a parameter's value).
    Query {
        param: Option<&'a str>,
    },
    Body,
}

impl fmt::Display for Spot<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Header(name) => write!(f, "header {name}"),
            Self::Path { .. } => f.write_str("the path"),
            Self::Query { param: Some(name) } => write!(f, "query parameter {name}"),
            Self::Query { param: None } => f.write_str("the query"),
            Self::Body => f.write_str("the body"),
        }
    }
}

/// A request's destination as a binding checks it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Destination<'a> {
    /// Lower case, no trailing dot, no brackets.
    pub host: &'a str,
    pub port: u16,
    pub https: bool,
}

/// One host (and port, scheme, places) a secret is bound to.
#[derive(Clone, PartialEq, Eq)]
pub struct Binding {
    host: HostPattern,
    /// `None`: a legacy binding (any port, any scheme, any place).
    exact: Option<Exact>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Exact {
    https: bool,
    port: u16,
    places: Vec<Place>,
}

impl Binding {
    /// A binding as the operator asks for it: `host` is `api.example.com`,
    /// `*.example.com`, `https://host[:port]` or `http://host:port` (LAN services; the port
    /// must be named), and `places` where the value may go ([`DEFAULT_PLACE`] when empty).
    /// Public suffixes and wildcards over one are refused.
    pub fn new(host: &str, places: &[String]) -> Result<Self, String> {
        let text = host.trim();
        let (https, rest) = match text.split_once("://") {
            Some((scheme, rest)) if scheme.eq_ignore_ascii_case("https") => (true, rest),
            Some((scheme, rest)) if scheme.eq_ignore_ascii_case("http") => (false, rest),
            Some(_) => return Err(format!("invalid host {text:?}: only https:// or http://")),
            None => (true, text),
        };
        let rest = rest.trim_end_matches('/');
        let (name, port) = match rest.rsplit_once(':') {
            Some((name, port)) if !name.ends_with(':') && !name.starts_with('[') => {
                let port: u16 = port
                    .parse()
                    .ok()
                    .filter(|p| *p > 0)
                    .ok_or_else(|| format!("invalid port in {text:?}"))?;
                (name, Some(port))
            }
            _ => (rest, None),
        };
        if !https && port.is_none() {
            return Err(format!(
                "{text:?}: an http:// binding must name its port (http://host:port), and is \
                 meant for a LAN service the egress allows in allow_internal"
            ));
        }
        let pattern = HostPattern::try_from(name.to_owned())?;
        if pattern == HostPattern::any() {
            return Err("`*` would send the value anywhere: that is no binding".to_owned());
        }
        if let Some(suffix) = public_suffix(&pattern) {
            return Err(format!(
                "{name:?} covers the public suffix {suffix:?}, under which anyone can own a \
                 host: bind the secret to the service's own host name"
            ));
        }
        let mut parsed = Vec::new();
        for place in places {
            let place = Place::parse(place)?;
            if !parsed.contains(&place) {
                parsed.push(place);
            }
        }
        if parsed.is_empty() {
            parsed.push(Place::parse(DEFAULT_PLACE).expect("valid"));
        }
        let port = port.unwrap_or(if https { 443 } else { 80 });
        Ok(Self { host: pattern, exact: Some(Exact { https, port, places: parsed }) })
    }

    /// A stored binding: its text form (see the module's docs), a bare host pattern being a
    /// legacy binding.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut words = text.split_whitespace();
        let first = words.next().ok_or("an empty binding")?;
        if !first.contains("://") {
            let host = HostPattern::try_from(first.to_owned())?;
            return Ok(Self { host, exact: None });
        }
        let places: Vec<String> = words.map(str::to_owned).collect();
        if places.is_empty() {
            return Err(format!("binding {text:?} names no place"));
        }
        Self::new(first, &places)
    }

    /// Bound before places existed: the value may go anywhere in a request to the host.
    pub fn is_legacy(&self) -> bool {
        self.exact.is_none()
    }

    /// Why this binding is not honoured at all, if it is not: a legacy binding over a public
    /// suffix (`*.com`, `co.uk`, `*.github.io`) or `*`. Why: a new binding was always refused
    /// these ([`Binding::new`]), but a stored bare host skipped the check, so a legacy
    /// `*.github.io` sent the value to any page anyone can register there.
    pub fn refusal(&self) -> Option<String> {
        if self.exact.is_some() {
            return None;
        }
        if self.host == HostPattern::any() {
            return Some("is `*`, which would send the value anywhere".to_owned());
        }
        public_suffix(&self.host).map(|suffix| {
            format!("covers the public suffix {suffix:?}, under which anyone can own a host")
        })
    }

    /// Why this legacy binding does not take a request to `to` although its host matches, if
    /// it does not: [`Binding::refusal`], or plain http to a public host. `None` for a binding
    /// that is not legacy or does not match `to`'s host.
    ///
    /// Why plain http is refused only for a public host: a legacy binding was the only way to
    /// bind a LAN service before `http://host:port` existed, and refusing it would break such
    /// an install now rather than at [`LEGACY_BINDINGS_REFUSED_FROM`]; over the Internet the
    /// value would cross every hop in the clear, on a scheme the task picked (a prompt-injected
    /// model writes `http://api.github.com/…`). Judged by name, as the value is filled in
    /// before the name is resolved ([`is_public_host`]).
    pub(crate) fn legacy_refuses(&self, to: &Destination<'_>) -> Option<String> {
        if self.exact.is_some() || !self.host.matches(to.host) {
            return None;
        }
        if let Some(refusal) = self.refusal() {
            return Some(format!("its legacy binding {:?} {refusal}", self.host.to_string()));
        }
        (!to.https && is_public_host(to.host)).then(|| {
            format!(
                "its legacy binding {:?} does not take plain http to a public host (the value \
                 would cross the Internet unencrypted); use https",
                self.host.to_string()
            )
        })
    }

    pub fn host(&self) -> &HostPattern {
        &self.host
    }

    /// Whether a page at `url` may be given the value, typed into one of its fields: the
    /// page's host, port and scheme are where the value may go, and its places include the
    /// body (a form sends what was typed in its body). Anything but an http(s) URL: no.
    pub fn allows_page(&self, url: &str) -> bool {
        let Ok(uri) = url.parse::<http::Uri>() else { return false };
        let https = match uri.scheme_str() {
            Some("https") => true,
            Some("http") => false,
            _ => return false,
        };
        let Some(host) = uri.host() else { return false };
        let host = host.trim_start_matches('[').trim_end_matches(']').trim_end_matches('.');
        let host = host.to_ascii_lowercase();
        let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
        self.allows(&Destination { host: &host, port, https }, Spot::Body)
    }

    /// Whether a request to `to` may carry the value at all (host, port, scheme).
    pub(crate) fn reaches(&self, to: &Destination<'_>) -> bool {
        self.host.matches(to.host)
            && match &self.exact {
                Some(e) => e.port == to.port && e.https == to.https,
                None => self.legacy_refuses(to).is_none(),
            }
    }

    /// Whether the value may fill a placeholder at `spot` of a request to `to`.
    pub(crate) fn allows(&self, to: &Destination<'_>, spot: Spot<'_>) -> bool {
        if !self.reaches(to) {
            return false;
        }
        let Some(exact) = &self.exact else { return true };
        exact.places.iter().any(|place| match (place, spot) {
            (Place::Header(name), Spot::Header(header)) => name.eq_ignore_ascii_case(header),
            (Place::Path(prefix), Spot::Path { before }) => path_continues(prefix, before),
            (Place::Query(name), Spot::Query { param: Some(param) }) => name == param,
            (Place::Body, Spot::Body) => true,
            _ => false,
        })
    }

    /// The places it allows, in words, for an error message.
    pub(crate) fn places(&self) -> String {
        match &self.exact {
            None => "anywhere (legacy binding)".to_owned(),
            Some(e) => e.places.iter().map(ToString::to_string).collect::<Vec<_>>().join(", "),
        }
    }
}

/// Whether a placeholder after `before` (the path text that precedes it) stands where
/// `path:<prefix>` allows: `before` is the prefix itself (the value continues its last
/// segment, `/bot<token>`) or continues it at a segment boundary (the prefix ends with `/`,
/// or `/` follows it), and holds nothing a server could read as another path.
///
/// Why whole segments: a raw prefix test let `path:/bot` fill `/bottle/<token>` and
/// `/botx<token>`, other resources on the same host that may store what they receive. Why
/// the flaw check here too: `/bot/../store/` starts with `/bot/` yet reaches `/store/` on the
/// server. (The proxy also checks the whole path, not only this part: see `inject.rs`.)
fn path_continues(prefix: &str, before: &str) -> bool {
    if path_flaw(before).is_some() {
        return false;
    }
    match before.strip_prefix(prefix) {
        Some("") => true,
        Some(rest) => prefix.ends_with('/') || rest.starts_with('/'),
        None => false,
    }
}

/// What in a request path a server could read as another path than its text says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum PathFlaw {
    /// `.` or `..` as a whole segment, or before a `;` (`..;/`, as Tomcat reads it).
    #[error("a dot segment `{0}`")]
    DotSegment(&'static str),
    /// `%2e`, `%2f`, `%5c` or `%25` (either case): decoded, a dot, slash, backslash, or a
    /// percent sign that a server decoding twice reads as one of them.
    #[error("a percent-encoded `{0}`")]
    Encoded(char),
    #[error("a backslash")]
    Backslash,
    #[error("an empty segment `//`")]
    EmptySegment,
}

/// The first thing in `path` (a request path, no query) a server could read as another path
/// than its text says, if any: a dot segment, a percent-encoded `.` `/` `\` or `%`, a
/// backslash, or an empty segment. Such a path is never filled with a path-bound value.
///
/// Why refuse rather than normalise: the proxy cannot know how the server resolves these
/// (some decode `%2f` to a separator, some treat `\` as one, some decode twice, some keep
/// `//`), and a value written after `/bot/../store/` or before `/../x` lands in another
/// resource than the binding names. No real API needs them next to a credential.
pub(crate) fn path_flaw(path: &str) -> Option<PathFlaw> {
    if path.contains('\\') {
        return Some(PathFlaw::Backslash);
    }
    let bytes = path.as_bytes();
    for (i, _) in path.match_indices('%') {
        let hex = bytes.get(i + 1..i + 3).filter(|h| h.iter().all(u8::is_ascii_hexdigit));
        let decoded = hex.and_then(|h| u8::from_str_radix(std::str::from_utf8(h).ok()?, 16).ok());
        if let Some(b @ (b'.' | b'/' | b'\\' | b'%')) = decoded {
            return Some(PathFlaw::Encoded(char::from(b)));
        }
    }
    for segment in path.split('/') {
        match segment.split(';').next().unwrap_or_default() {
            "." => return Some(PathFlaw::DotSegment(".")),
            ".." => return Some(PathFlaw::DotSegment("..")),
            _ => {}
        }
    }
    path.contains("//").then_some(PathFlaw::EmptySegment)
}

/// The public suffix `pattern` covers, if it does: a wildcard whose parent is one
/// (`*.com`, `*.github.io`), or a host that is one of the list's known suffixes (`co.uk`).
fn public_suffix(pattern: &HostPattern) -> Option<String> {
    let text = pattern.to_string();
    let (wildcard, name) = match text.strip_prefix("*.") {
        Some(parent) => (true, parent),
        None => (false, text.as_str()),
    };
    if crate::literal::parse_ip(name).is_some() {
        return None;
    }
    let suffix = psl::suffix(name.as_bytes())?;
    let is_suffix = suffix.as_bytes() == name.as_bytes();
    (is_suffix && (wildcard || suffix.is_known())).then(|| name.to_owned())
}

/// Whether `host` (a request's, lower case) is on the Internet as far as its name says: a
/// global address, or a name under a known public suffix that is no LAN name (`.lan`,
/// `.local`, `.internal`, `.home.arpa`, a single label). A split-horizon name that resolves to
/// a LAN address counts as public: the name is all the binding sees.
fn is_public_host(host: &str) -> bool {
    if let Some(ip) = crate::literal::parse_ip(host) {
        return crate::policy::classify(ip).is_none();
    }
    const LAN: [&str; 5] = ["lan", "local", "internal", "localhost", "home.arpa"];
    let lan = LAN
        .iter()
        .any(|s| host == *s || host.strip_suffix(s).is_some_and(|head| head.ends_with('.')));
    if lan || !host.contains('.') {
        return false;
    }
    psl::suffix(host.as_bytes()).is_some_and(|suffix| suffix.is_known())
}

impl fmt::Display for Binding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.exact {
            None => write!(f, "{}", self.host),
            Some(e) => {
                let scheme = if e.https { "https" } else { "http" };
                write!(f, "{scheme}://{}:{}", self.host, e.port)?;
                for place in &e.places {
                    write!(f, " {place}")?;
                }
                Ok(())
            }
        }
    }
}

impl fmt::Debug for Binding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Binding({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn to(host: &str, port: u16, https: bool) -> Destination<'_> {
        Destination { host, port, https }
    }

    #[test]
    fn a_new_binding_is_https_on_443_in_the_authorization_header_by_default() {
        let b = Binding::new("API.GitHub.com", &[]).unwrap();
        assert_eq!(b.to_string(), "https://api.github.com:443 header:authorization");
        assert_eq!(Binding::parse(&b.to_string()).unwrap(), b, "the text form round-trips");
        let github = to("api.github.com", 443, true);
        assert!(b.allows(&github, Spot::Header("Authorization")));
        for spot in [
            Spot::Header("x-comment"),
            Spot::Path { before: "/repos/me/issues/" },
            Spot::Query { param: Some("body") },
            Spot::Query { param: None },
            Spot::Body,
        ] {
            assert!(!b.allows(&github, spot), "{spot}");
        }
        assert!(!b.allows(&to("api.github.com", 80, false), Spot::Header("authorization")));
        assert!(!b.allows(&to("api.github.com", 8443, true), Spot::Header("authorization")));
        assert!(!b.allows(&to("github.com", 443, true), Spot::Header("authorization")));
    }

    #[test]
    fn a_page_is_given_a_value_only_at_the_bindings_origin_with_the_body_allowed() {
        let form = Binding::new("https://bank.example", &["body".into()]).unwrap();
        assert!(form.allows_page("https://bank.example/login?next=/"));
        assert!(form.allows_page("https://BANK.example.:443/login"));
        for elsewhere in [
            "http://bank.example/login",
            "https://bank.example:8443/login",
            "https://evil.example/?https://bank.example",
            "https://bank.example.evil.example/",
            "file:///room/x.html",
            "about:blank",
            "not a url",
        ] {
            assert!(!form.allows_page(elsewhere), "{elsewhere}");
        }
        // A token for an API header is not a form's value.
        let header = Binding::new("https://bank.example", &[]).unwrap();
        assert!(!header.allows_page("https://bank.example/login"));
        let lan = Binding::new("http://192.0.2.2:8080", &["body".into()]).unwrap();
        assert!(lan.allows_page("http://192.0.2.2:8080/login"));
    }

    #[test]
    fn places_ports_and_schemes_are_as_named() {
        let places = ["path:/bot".to_owned(), "query:key".to_owned(), "body".to_owned()];
        let b = Binding::new("https://api.telegram.org:8443", &places).unwrap();
        let tg = to("api.telegram.org", 8443, true);
        assert!(b.allows(&tg, Spot::Path { before: "/bot" }));
        assert!(!b.allows(&tg, Spot::Path { before: "/x/bot" }));
        assert!(b.allows(&tg, Spot::Query { param: Some("key") }));
        assert!(!b.allows(&tg, Spot::Query { param: Some("keys") }));
        assert!(b.allows(&tg, Spot::Body));
        assert!(!b.allows(&tg, Spot::Header("authorization")), "not named, so not allowed");
        let lan = Binding::new("http://nas.lan:8080", &["header:x-api-key".into()]).unwrap();
        assert!(lan.allows(&to("nas.lan", 8080, false), Spot::Header("X-Api-Key")));
        assert!(!lan.allows(&to("nas.lan", 8080, true), Spot::Header("x-api-key")));
        let err = Binding::new("http://nas.lan", &[]).unwrap_err();
        assert!(err.contains("must name its port"), "{err}");
    }

    #[test]
    fn a_path_prefix_matches_whole_segments_only() {
        let bot = Binding::new("api.telegram.org", &["path:/bot".into()]).unwrap();
        let repos = Binding::new("api.github.com", &["path:/repos/".into()]).unwrap();
        let tg = to("api.telegram.org", 443, true);
        let gh = to("api.github.com", 443, true);
        let at = |before| Spot::Path { before };
        // The value continues the prefix's last segment, or starts a segment after it.
        assert!(bot.allows(&tg, at("/bot")), "/bot<token>/sendMessage");
        assert!(bot.allows(&tg, at("/bot/")));
        assert!(repos.allows(&gh, at("/repos/")));
        assert!(repos.allows(&gh, at("/repos/me/app/hooks/")));
        for before in [
            "/bottle/",
            "/bottle",
            "/botx",
            "/Bot",
            "/BOT/",
            "/bo",
            "/x/bot",
            "/bot/../store/",
            "/bot/./",
            "/bot/..;/store/",
            "/bot%2f..%2fstore/",
            "/bot%2F..%2Fstore/",
            "/bot/%2e%2e/store/",
            "/bot/%2E./store/",
            "/bot%5cstore/",
            "/bot\\..\\store/",
            "/bot//",
            "/bot/%252e%252e/",
        ] {
            assert!(!bot.allows(&tg, at(before)), "path:/bot took {before:?}");
        }
        for before in ["/reposx/", "/repos", "/Repos/", "/repos/../user/", "/repos//", "/repo/"] {
            assert!(!repos.allows(&gh, at(before)), "path:/repos/ took {before:?}");
        }
    }

    #[test]
    fn a_path_a_server_could_read_as_another_is_flawed() {
        for path in ["/bot123/sendMessage", "/repos/me/app", "/", "/a.b/c..d/.e/f./x;y", "/%41%7B"]
        {
            assert_eq!(path_flaw(path), None, "{path}");
        }
        for (path, flaw) in [
            ("/bot/../store/", "a dot segment `..`"),
            ("/bot{{secret:T}}/../x", "a dot segment `..`"),
            ("/bot/..", "a dot segment `..`"),
            ("/./bot", "a dot segment `.`"),
            ("/bot/..;x=1/store", "a dot segment `..`"),
            ("/bot%2f..%2fstore/", "a percent-encoded `/`"),
            ("/bot%2F", "a percent-encoded `/`"),
            ("/bot/%2e%2E/", "a percent-encoded `.`"),
            ("/bot%5Cx", "a percent-encoded `\\`"),
            ("/bot%255c", "a percent-encoded `%`"),
            ("/bot\\x", "a backslash"),
            ("//bot", "an empty segment `//`"),
            ("/bot//x", "an empty segment `//`"),
        ] {
            assert_eq!(path_flaw(path).map(|f| f.to_string()).as_deref(), Some(flaw), "{path}");
        }
    }

    #[test]
    fn public_suffixes_and_wildcards_over_them_are_refused() {
        for host in ["*.com", "*.co.uk", "*.github.io", "co.uk", "github.io", "*", "*.lan"] {
            assert!(Binding::new(host, &[]).is_err(), "{host}");
        }
        for host in ["api.github.com", "*.example.com", "me.github.io", "nas.lan", "10.0.0.5"] {
            Binding::new(host, &[]).unwrap_or_else(|e| panic!("{host}: {e}"));
        }
        let err = Binding::new("*.github.io", &[]).unwrap_err();
        assert!(err.contains("public suffix \"github.io\""), "{err}");
        assert!(Binding::new("api.example.com", &["cookie".into()]).is_err());
    }

    #[test]
    fn a_bare_host_is_a_legacy_binding_that_allows_anywhere() {
        let b = Binding::parse("api.github.com").unwrap();
        assert!(b.is_legacy());
        assert_eq!(b.refusal(), None);
        assert_eq!(b.to_string(), "api.github.com");
        assert!(b.allows(&to("api.github.com", 443, true), Spot::Body));
        assert!(b.allows(&to("api.github.com", 443, true), Spot::Query { param: None }));
        assert!(b.allows(&to("api.github.com", 8443, true), Spot::Header("x-comment")));
        assert!(!b.allows(&to("evil.example", 443, true), Spot::Body));
        assert!(Binding::parse("https://api.github.com:443").is_err(), "new form names places");
    }

    /// The hole an attacker's test found: a stored bare host skipped the public-suffix check
    /// that [`Binding::new`] makes, so a legacy `*.github.io` filled the value into a request
    /// to any page anyone can put up there.
    #[test]
    fn a_legacy_binding_over_a_public_suffix_is_refused() {
        for (pattern, host, suffix) in [
            ("*.com", "attacker.com", "com"),
            ("co.uk", "co.uk", "co.uk"),
            ("*.co.uk", "shop.co.uk", "co.uk"),
            ("*.github.io", "attacker.github.io", "github.io"),
            ("github.io", "github.io", "github.io"),
        ] {
            let b = Binding::parse(pattern).unwrap();
            assert!(b.is_legacy(), "{pattern}");
            for dest in [to(host, 443, true), to(host, 80, false)] {
                assert!(!b.reaches(&dest), "{pattern} reached {host}");
                assert!(!b.allows(&dest, Spot::Header("authorization")), "{pattern}: {host}");
            }
            let refusal = b.refusal().unwrap_or_else(|| panic!("{pattern} is honoured"));
            assert!(refusal.contains(&format!("public suffix \"{suffix}\"")), "{refusal}");
            let reason = b.legacy_refuses(&to(host, 443, true)).unwrap();
            assert!(reason.contains(pattern) && reason.contains(suffix), "{reason}");
        }
        let any = Binding::parse("*").unwrap();
        assert!(!any.allows(&to("evil.example", 443, true), Spot::Header("authorization")));
        assert!(any.refusal().is_some());
        // A legacy binding to a host under such a suffix is a service's own host: honoured.
        for (pattern, host) in
            [("me.github.io", "me.github.io"), ("*.example.com", "a.example.com")]
        {
            let b = Binding::parse(pattern).unwrap();
            assert_eq!(b.refusal(), None, "{pattern}");
            assert!(b.allows(&to(host, 443, true), Spot::Body), "{pattern}");
        }
    }

    /// Plain http is refused to a public host only: a legacy binding was the one way to bind
    /// a LAN service before `http://host:port`, and that install keeps working until
    /// [`LEGACY_BINDINGS_REFUSED_FROM`].
    #[test]
    fn a_legacy_binding_takes_plain_http_only_to_a_lan_host() {
        let github = Binding::parse("api.github.com").unwrap();
        let plain = to("api.github.com", 80, false);
        assert!(!github.reaches(&plain));
        assert!(!github.allows(&plain, Spot::Header("authorization")));
        let reason = github.legacy_refuses(&plain).unwrap();
        assert!(reason.contains("plain http to a public host"), "{reason}");
        assert_eq!(github.legacy_refuses(&to("api.github.com", 443, true)), None);
        assert_eq!(github.legacy_refuses(&to("evil.example", 80, false)), None, "not its host");
        for (pattern, host) in [
            ("nas.lan", "nas.lan"),
            ("printer.local", "printer.local"),
            ("nas", "nas"),
            ("nas.home.arpa", "nas.home.arpa"),
            ("10.0.0.5", "10.0.0.5"),
            ("127.0.0.1", "127.0.0.1"),
            ("192.168.1.2", "192.168.1.2"),
        ] {
            let b = Binding::parse(pattern).unwrap();
            assert!(b.allows(&to(host, 8080, false), Spot::Body), "{pattern} over http");
        }
        for (pattern, host) in [("8.8.8.8", "8.8.8.8"), ("*.example.com", "a.example.com")] {
            let b = Binding::parse(pattern).unwrap();
            assert!(!b.allows(&to(host, 80, false), Spot::Body), "{pattern} over http");
            assert!(b.allows(&to(host, 443, true), Spot::Body), "{pattern} over https");
        }
    }

    /// The deadline is a promise in docs/secrets.md and the daemon's warnings: once the workspace
    /// reaches that release, legacy bindings must be refused outright (and this test, with the
    /// legacy path, removed).
    #[test]
    fn legacy_bindings_are_honoured_only_before_their_deadline() {
        let release = |text: &str| -> Vec<u32> {
            text.split('.').map(|n| n.parse().expect("a numeric version")).collect()
        };
        assert!(
            release(env!("CARGO_PKG_VERSION")) < release(LEGACY_BINDINGS_REFUSED_FROM),
            "version {} reached {LEGACY_BINDINGS_REFUSED_FROM}: refuse legacy bindings now",
            env!("CARGO_PKG_VERSION")
        );
    }
}
