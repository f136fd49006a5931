//! Proxy-mode secrets on the wire: placeholders in a task's requests become values on the way
//! out (only towards the hosts each value is bound to), and values become labels on the way
//! back, so the container never sees one in any form.
//!
//! A placeholder is `{{secret:NAME}}`; each of its `{`, `:` and `}` may also be percent-encoded
//! (`%7B`, `%3A`, `%7D`, either hex case, any mix), as a client that builds a URL or a form
//! writes it. The value goes in percent-encoded in the request target, in a form body and
//! wherever the placeholder was percent-encoded; JSON-escaped in a JSON body; as it is in a
//! header (refused when it is no valid header value) and in any other body. A placeholder of
//! a secret the request's destination (host, port, scheme) is not bound to, or in a place its
//! binding does not name (`binding.rs`), refuses the whole request: nothing is sent; so does
//! a placeholder in a path the server could read as another one (a dot segment, `//`, a
//! backslash, a percent-encoded `.` `/` `\` `%`: [`path_flaw`]), whatever its binding.
//! Names the task was not given pass unchanged (they may be meant literally).

use std::collections::BTreeSet;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderValue};
use hyper::body::{Body, Frame, SizeHint};
use nexbot_redact::{is_valid_secret_name, Redactor, StreamRedactor};
use secrecy::ExposeSecret;
use zeroize::Zeroizing;

use super::binding::{path_flaw, Destination, PathFlaw, Spot};
use super::credentials::TaskSecrets;
use super::meter::BoxError;

/// The largest request body of a task with credentials: it is read whole to look for
/// placeholders (and the value put in) before anything is sent. Larger ones are refused (413).
pub const MAX_SECRET_BODY_BYTES: usize = 1 << 20;

/// How a value is written where a placeholder stood.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Escape {
    Raw,
    /// Every byte but `A-Z a-z 0-9 - . _ ~` as `%XX`: safe in any part of a URL and a form.
    Percent,
    /// As inside a JSON string (without the quotes).
    Json,
}

/// A placeholder found in text.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Placeholder {
    pub start: usize,
    pub end: usize,
    pub name: String,
    /// One of its `{`, `:`, `}` was percent-encoded.
    pub encoded: bool,
}

/// Why a request was not sent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Refused {
    #[error("secret_not_bound: secret {name} may not be sent to {host}")]
    NotBound { name: String, host: String },
    /// A legacy binding matches the host but does not take this request
    /// ([`crate::Binding::legacy_refuses`]): the reason, and how to narrow it.
    #[error(
        "secret_legacy_binding: secret {name} may not be sent to {host}: {reason}; set the \
         secret again with --host (nexbot-ctl secrets set {name} --host HOST --in PLACE, or \
         /secret set) to bind it to https and a place"
    )]
    Legacy { name: String, host: String, reason: String },
    #[error(
        "secret_misplaced: secret {name} may not go in {spot} of a request to {host}; its \
         binding allows: {allowed}"
    )]
    Misplaced { name: String, spot: String, host: String, allowed: String },
    #[error(
        "secret_unsafe_path: secret {name} may not go in a request path with {flaw}: the \
         server could read it as another path than its binding names"
    )]
    UnsafePath { name: String, flaw: PathFlaw },
    #[error("secret_not_a_header: the value of secret {name} is not a valid HTTP header value")]
    NotAHeader { name: String },
    #[error("bad_request: the request target with secret {name} put in is no valid URL")]
    BadTarget { name: String },
}

impl Refused {
    pub(crate) fn name(&self) -> &str {
        match self {
            Self::NotBound { name, .. }
            | Self::Legacy { name, .. }
            | Self::Misplaced { name, .. }
            | Self::UnsafePath { name, .. }
            | Self::NotAHeader { name }
            | Self::BadTarget { name } => name,
        }
    }
}

/// `raw`, or `%` + the two hex digits (either case) of it, at `i`: its length and whether it
/// was encoded.
fn punct(text: &[u8], i: usize, raw: u8, hex: [u8; 2]) -> Option<(usize, bool)> {
    match *text.get(i)? {
        b if b == raw => Some((1, false)),
        b'%' => {
            let digits = text.get(i + 1..i + 3)?;
            (digits[0] == hex[0] && digits[1].eq_ignore_ascii_case(&hex[1])).then_some((3, true))
        }
        _ => None,
    }
}

fn placeholder_at(text: &[u8], at: usize) -> Option<Placeholder> {
    let (mut i, mut encoded) = (at, false);
    for _ in 0..2 {
        let (len, enc) = punct(text, i, b'{', *b"7B")?;
        i += len;
        encoded |= enc;
    }
    if !text[i..].starts_with(b"secret") {
        return None;
    }
    i += b"secret".len();
    let (len, enc) = punct(text, i, b':', *b"3A")?;
    i += len;
    encoded |= enc;
    let name_start = i;
    while text.get(i).is_some_and(|b| b.is_ascii_alphanumeric() || *b == b'_') {
        i += 1;
    }
    let name = std::str::from_utf8(&text[name_start..i]).ok()?;
    if !is_valid_secret_name(name) {
        return None;
    }
    let name = name.to_owned();
    for _ in 0..2 {
        let (len, enc) = punct(text, i, b'}', *b"7D")?;
        i += len;
        encoded |= enc;
    }
    Some(Placeholder { start: at, end: i, name, encoded })
}

/// Every placeholder in `text`, in order.
pub(crate) fn find(text: &[u8]) -> Vec<Placeholder> {
    let mut found = Vec::new();
    let mut i = 0;
    while let Some(offset) = memchr::memchr2(b'{', b'%', &text[i..]) {
        let at = i + offset;
        match placeholder_at(text, at) {
            Some(placeholder) => {
                i = placeholder.end;
                found.push(placeholder);
            }
            None => i = at + 1,
        }
    }
    found
}

/// The names of the secrets `text` has placeholders for (the proxy's reading of them), each
/// once, in order: what a request made from `text` would need granted.
pub fn placeholder_names(text: &str) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for placeholder in find(text.as_bytes()) {
        if !names.contains(&placeholder.name) {
            names.push(placeholder.name);
        }
    }
    names
}

fn percent_encode(value: &[u8], out: &mut Vec<u8>) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for &b in value {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b);
        } else {
            out.extend_from_slice(&[b'%', HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]]);
        }
    }
}

fn json_escape(value: &[u8], out: &mut Vec<u8>) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    for &b in value {
        match b {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            0..=0x1f | 0x7f => out.extend_from_slice(&[
                b'\\',
                b'u',
                b'0',
                b'0',
                HEX[usize::from(b >> 4)],
                HEX[usize::from(b & 15)],
            ]),
            _ => out.push(b),
        }
    }
}

/// The part of a request a text is.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Part<'a> {
    /// The request target (path and query).
    Target,
    Header(&'a str),
    Body,
}

/// Where in the request target `p` stands: in the path (after what), or in the query (the
/// value of which parameter, if it is one's value).
fn target_spot<'t>(target: &'t str, p: &Placeholder) -> Spot<'t> {
    let start = p.start.min(target.len());
    match target.find('?') {
        Some(q) if q < start => {
            let segment = target[q + 1..start].rsplit('&').next().unwrap_or_default();
            let param = segment.split_once('=').map(|(name, _)| name).filter(|n| !n.is_empty());
            Spot::Query { param }
        }
        _ => Spot::Path { before: &target[..start] },
    }
}

/// `text` with the placeholders of the task's secrets replaced by their values written as
/// `escape` says (percent-encoded where the placeholder was), and the names put in added to
/// `used`; `None` when no placeholder names one of them. Refused when one of them may not go
/// to `to`, or not at the spot `spot` says the placeholder stands in.
pub(crate) fn substitute(
    text: &[u8],
    secrets: &TaskSecrets,
    to: &Destination<'_>,
    part: Part<'_>,
    escape: Escape,
    used: &mut BTreeSet<String>,
) -> Result<Option<Zeroizing<Vec<u8>>>, Refused> {
    let mut out: Option<Zeroizing<Vec<u8>>> = None;
    let mut at = 0;
    for placeholder in find(text) {
        let Some(credential) = secrets.get(&placeholder.name) else { continue };
        if !credential.reaches(to) {
            if let Some(reason) = credential.bindings.iter().find_map(|b| b.legacy_refuses(to)) {
                let host = to.host.to_owned();
                return Err(Refused::Legacy { name: placeholder.name, host, reason });
            }
            // Bound to this host but another port or scheme: the error names both.
            let host = if credential.bindings.iter().any(|b| b.host().matches(to.host)) {
                let scheme = if to.https { "https" } else { "http" };
                format!("{scheme}://{}:{}", to.host, to.port)
            } else {
                to.host.to_owned()
            };
            return Err(Refused::NotBound { name: placeholder.name, host });
        }
        let at_spot = match part {
            // The target is a checked URI: ASCII.
            Part::Target => {
                target_spot(std::str::from_utf8(text).unwrap_or_default(), &placeholder)
            }
            Part::Header(name) => Spot::Header(name),
            Part::Body => Spot::Body,
        };
        // The whole path, not only what precedes the placeholder: `/bot{{secret:T}}/../x`
        // puts the value where `/x` goes on the server, as surely as `/bot/../x/` does.
        if let Spot::Path { .. } = at_spot {
            let target = std::str::from_utf8(text).unwrap_or_default();
            let path = target.split_once('?').map_or(target, |(path, _)| path);
            if let Some(flaw) = path_flaw(path) {
                return Err(Refused::UnsafePath { name: placeholder.name, flaw });
            }
        }
        if !credential.allows(to, at_spot) {
            return Err(Refused::Misplaced {
                spot: at_spot.to_string(),
                host: to.host.to_owned(),
                allowed: credential.places(),
                name: placeholder.name,
            });
        }
        let out = out.get_or_insert_with(|| Zeroizing::new(Vec::with_capacity(text.len() + 64)));
        out.extend_from_slice(&text[at..placeholder.start]);
        let value = credential.value.expose_secret().as_bytes();
        match if placeholder.encoded { Escape::Percent } else { escape } {
            Escape::Raw => out.extend_from_slice(value),
            Escape::Percent => percent_encode(value, out),
            Escape::Json => json_escape(value, out),
        }
        at = placeholder.end;
        used.insert(placeholder.name);
    }
    if let Some(out) = out.as_mut() {
        out.extend_from_slice(&text[at..]);
    }
    Ok(out)
}

/// Puts values into the request target and the header values (see [`substitute`]).
pub(crate) fn substitute_head(
    parts: &mut http::request::Parts,
    secrets: &TaskSecrets,
    to: &Destination<'_>,
    used: &mut BTreeSet<String>,
) -> Result<(), Refused> {
    let target = parts.uri.path_and_query().map_or("/", |p| p.as_str()).to_owned();
    let mut names = BTreeSet::new();
    let new =
        substitute(target.as_bytes(), secrets, to, Part::Target, Escape::Percent, &mut names)?;
    if let Some(new) = new {
        let name = names.first().cloned().unwrap_or_default();
        let mut uri = parts.uri.clone().into_parts();
        uri.path_and_query = Some(
            http::uri::PathAndQuery::from_maybe_shared(Bytes::copy_from_slice(&new))
                .map_err(|_| Refused::BadTarget { name: name.clone() })?,
        );
        parts.uri = http::Uri::from_parts(uri).map_err(|_| Refused::BadTarget { name })?;
    }
    used.append(&mut names);
    for (name, value) in parts.headers.iter_mut() {
        let mut names = BTreeSet::new();
        let part = Part::Header(name.as_str());
        let new = substitute(value.as_bytes(), secrets, to, part, Escape::Raw, &mut names)?;
        if let Some(new) = new {
            let name = names.first().cloned().unwrap_or_default();
            let mut header =
                HeaderValue::from_bytes(&new).map_err(|_| Refused::NotAHeader { name })?;
            header.set_sensitive(true);
            *value = header;
        }
        used.append(&mut names);
    }
    Ok(())
}

/// How values go into a body of this `Content-Type`.
pub(crate) fn body_escape(headers: &HeaderMap) -> Escape {
    let essence = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .map(|v| v.trim().to_ascii_lowercase())
        .unwrap_or_default();
    if essence == "application/json" || essence.ends_with("+json") {
        Escape::Json
    } else if essence == "application/x-www-form-urlencoded" {
        Escape::Percent
    } else {
        Escape::Raw
    }
}

/// Content types that are compressed archives: a server could pack a stored value into one.
const ARCHIVE_TYPES: &[&str] = &[
    "application/zip",
    "application/gzip",
    "application/x-gzip",
    "application/x-tar",
    "application/x-gtar",
    "application/x-bzip2",
    "application/x-xz",
    "application/x-7z-compressed",
    "application/x-rar-compressed",
    "application/vnd.rar",
    "application/zstd",
    "application/x-compress",
];

/// The content coding of a response other than `identity`, or an archive content type, if
/// any: a compressed body could carry a value the scrubber cannot see.
pub(crate) fn content_coding(headers: &HeaderMap) -> Option<String> {
    let coding = headers
        .get_all(header::CONTENT_ENCODING)
        .iter()
        .chain(headers.get_all(header::TRANSFER_ENCODING).iter())
        .map(|v| v.to_str().unwrap_or("(not text)"))
        .flat_map(|v| v.split(','))
        .map(|c| c.trim().to_ascii_lowercase())
        .find(|c| !c.is_empty() && c != "identity" && c != "chunked");
    coding.or_else(|| {
        let kind = headers.get(header::CONTENT_TYPE)?.to_str().ok()?;
        let kind = kind.split(';').next()?.trim().to_ascii_lowercase();
        ARCHIVE_TYPES.contains(&kind.as_str()).then_some(kind)
    })
}

/// Scrubs a response head for a task with credentials: every header value with a secret form
/// in it redacted (a header that then is no valid value, or whose name holds one, is
/// dropped), and a reason phrase of the server's own left out (it is text from the server
/// too). `Content-Length` goes: the body is scrubbed as it streams.
pub(crate) fn scrub_head(parts: &mut http::response::Parts, redactor: &Redactor) {
    parts.extensions.remove::<hyper::ext::ReasonPhrase>();
    parts.headers.remove(header::CONTENT_LENGTH);
    let old = std::mem::take(&mut parts.headers);
    let mut name = None;
    for (key, value) in old {
        // `HeaderMap`'s owned iterator names a header once for all its values.
        if let Some(key) = key {
            name = Some(key);
        }
        let Some(name) = name.clone() else { continue };
        if redactor.redact_bytes(name.as_str().as_bytes()) != name.as_str().as_bytes() {
            continue;
        }
        let clean = redactor.redact_bytes(value.as_bytes());
        if clean == value.as_bytes() {
            parts.headers.append(name, value);
        } else if let Ok(mut clean) = HeaderValue::from_bytes(&clean) {
            clean.set_sensitive(value.is_sensitive());
            parts.headers.append(name, clean);
        }
    }
}

/// A response body with every secret form replaced as it streams (see
/// [`nexbot_redact::StreamRedactor`]); trailers are dropped (text from the server
/// no one scrubs).
pub(crate) struct ScrubbedBody<B> {
    inner: B,
    stream: StreamRedactor,
    done: bool,
}

impl<B> ScrubbedBody<B> {
    pub(crate) fn new(inner: B, redactor: Arc<Redactor>) -> Self {
        Self { inner, stream: StreamRedactor::new(redactor), done: false }
    }
}

impl<B> Body for ScrubbedBody<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        loop {
            if self.done {
                return Poll::Ready(None);
            }
            match Pin::new(&mut self.inner).poll_frame(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Err(err))) => return Poll::Ready(Some(Err(err.into()))),
                Poll::Ready(Some(Ok(frame))) => {
                    let Ok(data) = frame.into_data() else { continue };
                    let out = self.stream.push(&data);
                    if !out.is_empty() {
                        return Poll::Ready(Some(Ok(Frame::data(Bytes::from(out)))));
                    }
                }
                Poll::Ready(None) => {
                    self.done = true;
                    let out = self.stream.finish();
                    if !out.is_empty() {
                        return Poll::Ready(Some(Ok(Frame::data(Bytes::from(out)))));
                    }
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::credentials::{Credential, TaskCredentials};
    use secrecy::SecretString;

    fn secrets(value: &str) -> Arc<TaskSecrets> {
        let table = TaskCredentials::default();
        let places = ["header:x-token".to_owned(), "query:q".to_owned(), "body".to_owned()];
        let hosts = vec![crate::Binding::new("api.example.com", &places).unwrap()];
        table
            .grant(
                "t",
                vec![
                    Credential::new("TOKEN", SecretString::from(value.to_owned()), hosts),
                    Credential::new(
                        "STDIN",
                        SecretString::from("stdin-value-1".to_owned()),
                        vec![],
                    ),
                ],
            )
            .unwrap();
        table.for_task("t").unwrap()
    }

    #[test]
    fn placeholders_are_found_raw_and_percent_encoded_in_any_case_mix() {
        let text = b"a {{secret:TOKEN}} b %7B%7bsecret%3aTOKEN%7d%7D c {%7Bsecret:X_1}%7D \
                     {{secret:lower}} {{secret:TOKEN} {{Secret:TOKEN}} %7B{secret%3ATOKEN}}";
        let found = find(text);
        let names: Vec<(&str, bool)> = found.iter().map(|p| (p.name.as_str(), p.encoded)).collect();
        assert_eq!(names, [("TOKEN", false), ("TOKEN", true), ("X_1", true), ("TOKEN", true)]);
        assert_eq!(&text[found[0].start..found[0].end], b"{{secret:TOKEN}}");
        let long = format!("{{{{secret:{}}}}}", "A".repeat(65));
        assert!(find(long.as_bytes()).is_empty(), "names are at most 64 characters");
        let names = placeholder_names(std::str::from_utf8(text).unwrap());
        assert_eq!(names, ["TOKEN", "X_1"]);
    }

    #[test]
    fn values_are_escaped_for_where_they_go_and_unbound_hosts_refused() {
        let secrets = secrets("va\"l ue/+&=\\x");
        let mut used = BTreeSet::new();
        let to = Destination { host: "api.example.com", port: 443, https: true };
        let sub = |text: &str, escape, used: &mut BTreeSet<String>| {
            substitute(text.as_bytes(), &secrets, &to, Part::Body, escape, used)
                .map(|o| o.map(|v| String::from_utf8(v.to_vec()).unwrap()))
        };
        assert_eq!(
            sub("{{secret:TOKEN}}", Escape::Raw, &mut used).unwrap().unwrap(),
            "va\"l ue/+&=\\x"
        );
        assert_eq!(
            sub("q=%7B%7Bsecret%3ATOKEN%7D%7D&x", Escape::Raw, &mut used).unwrap().unwrap(),
            "q=va%22l%20ue%2F%2B%26%3D%5Cx&x"
        );
        assert_eq!(
            sub(r#"{"t":"{{secret:TOKEN}}"}"#, Escape::Json, &mut used).unwrap().unwrap(),
            r#"{"t":"va\"l ue/+&=\\x"}"#
        );
        assert_eq!(sub("{{secret:OTHER}} plain", Escape::Raw, &mut used).unwrap(), None);
        assert_eq!(std::mem::take(&mut used).into_iter().collect::<Vec<_>>(), ["TOKEN"]);
        let body = Part::Body;
        let evil = Destination { host: "evil.example.org", ..to };
        let err = substitute(b"{{secret:TOKEN}}", &secrets, &evil, body, Escape::Raw, &mut used)
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "secret_not_bound: secret TOKEN may not be sent to evil.example.org"
        );
        let plain = Destination { port: 80, https: false, ..to };
        let err = substitute(b"{{secret:TOKEN}}", &secrets, &plain, body, Escape::Raw, &mut used)
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "secret_not_bound: secret TOKEN may not be sent to http://api.example.com:80"
        );
        let err = substitute(b"{{secret:STDIN}}", &secrets, &to, body, Escape::Raw, &mut used)
            .unwrap_err();
        assert_eq!(err.name(), "STDIN", "a secret without hosts is never sent");
    }

    #[test]
    fn a_value_that_is_no_header_value_is_refused_in_a_header() {
        let secrets = secrets("line-one\nline-two");
        let (mut parts, ()) = http::Request::builder()
            .uri("http://api.example.com/a?q={{secret:TOKEN}}")
            .header("x-token", "{{secret:TOKEN}}")
            .body(())
            .unwrap()
            .into_parts();
        let to = Destination { host: "api.example.com", port: 80, https: false };
        let err = substitute_head(&mut parts, &secrets, &to, &mut BTreeSet::new()).unwrap_err();
        assert!(matches!(err, Refused::NotBound { .. }), "http is not https: {err}");
        let to = Destination { port: 443, https: true, ..to };
        let err = substitute_head(&mut parts, &secrets, &to, &mut BTreeSet::new()).unwrap_err();
        assert!(matches!(err, Refused::NotAHeader { .. }), "{err}");
    }

    /// A legacy binding refused for this request says why and how to narrow it, not only
    /// "not bound".
    #[test]
    fn a_refused_legacy_binding_names_the_reason_and_the_fix() {
        let table = TaskCredentials::default();
        let value = SecretString::from("legacy-value-0123456789".to_owned());
        let hosts = vec![
            crate::Binding::parse("api.example.com").unwrap(),
            crate::Binding::parse("*.com").unwrap(),
        ];
        table.grant("t", vec![Credential::new("OLD", value, hosts)]).unwrap();
        let secrets = table.for_task("t").unwrap();
        let (mut parts, ()) = http::Request::builder()
            .uri("http://api.example.com/a")
            .header("authorization", "{{secret:OLD}}")
            .body(())
            .unwrap()
            .into_parts();
        for (host, port, https, why) in [
            ("api.example.com", 80, false, "plain http to a public host"),
            ("attacker.com", 443, true, "public suffix \"com\""),
        ] {
            let to = Destination { host, port, https };
            let err = substitute_head(&mut parts.clone(), &secrets, &to, &mut BTreeSet::new())
                .unwrap_err();
            assert!(matches!(err, Refused::Legacy { .. }), "{err}");
            let text = err.to_string();
            assert!(text.contains(why) && text.contains("nexbot-ctl secrets set OLD"), "{text}");
            assert!(!text.contains("legacy-value"), "{text}");
        }
        let to = Destination { host: "api.example.com", port: 443, https: true };
        substitute_head(&mut parts, &secrets, &to, &mut BTreeSet::new()).unwrap();
        let filled = parts.headers.get("authorization").unwrap();
        assert_eq!(filled, "legacy-value-0123456789");
    }

    #[test]
    fn a_placeholder_goes_only_where_the_binding_names() {
        let secrets = secrets("value-0123456789");
        let to = Destination { host: "api.example.com", port: 443, https: true };
        let head = |uri: &str, header: &str| {
            let (mut parts, ()) = http::Request::builder()
                .uri(uri)
                .header(header, "{{secret:TOKEN}}")
                .body(())
                .unwrap()
                .into_parts();
            let mut used = BTreeSet::new();
            let value = parts.headers.get(header).cloned();
            substitute_head(&mut parts, &secrets, &to, &mut used).map(|()| (parts, value))
        };
        // Named places: the x-token header, the q parameter.
        let (parts, _) =
            head("https://api.example.com/a?q={{secret:TOKEN}}&z=1", "x-token").unwrap();
        assert_eq!(parts.uri.query(), Some("q=value-0123456789&z=1"));
        assert_eq!(parts.headers["x-token"], "value-0123456789");
        for (uri, header, spot) in [
            ("https://api.example.com/{{secret:TOKEN}}", "x-ok", "the path"),
            (
                "https://api.example.com/a?comment={{secret:TOKEN}}",
                "x-ok",
                "query parameter comment",
            ),
            ("https://api.example.com/a?{{secret:TOKEN}}", "x-ok", "the query"),
            ("https://api.example.com/a", "authorization", "header authorization"),
        ] {
            let err = head(uri, header).unwrap_err();
            assert!(matches!(err, Refused::Misplaced { .. }), "{uri}: {err}");
            let text = err.to_string();
            assert!(text.contains(spot) && text.contains("header:x-token"), "{text}");
        }
        let body = Part::Body;
        let mut used = BTreeSet::new();
        let new = substitute(b"{{secret:TOKEN}}", &secrets, &to, body, Escape::Raw, &mut used);
        assert!(new.unwrap().is_some(), "the body is named");
    }

    #[test]
    fn a_path_a_server_could_read_as_another_takes_no_value() {
        let table = TaskCredentials::default();
        let hosts = vec![crate::Binding::new("api.example.com", &["path:/bot".into()]).unwrap()];
        let value = SecretString::from("value-0123456789".to_owned());
        table.grant("t", vec![Credential::new("TOKEN", value, hosts)]).unwrap();
        let secrets = table.for_task("t").unwrap();
        let to = Destination { host: "api.example.com", port: 443, https: true };
        let target = |text: &str| {
            let mut used = BTreeSet::new();
            substitute(text.as_bytes(), &secrets, &to, Part::Target, Escape::Percent, &mut used)
                .map(|o| String::from_utf8(o.unwrap().to_vec()).unwrap())
        };
        assert_eq!(
            target("/bot{{secret:TOKEN}}/sendMessage?next=/../x").unwrap(),
            "/botvalue-0123456789/sendMessage?next=/../x",
            "the query is no part of the path"
        );
        for (text, flaw) in [
            ("/bot{{secret:TOKEN}}/../store", "a dot segment `..`"),
            ("/bot/../store/{{secret:TOKEN}}", "a dot segment `..`"),
            ("/bot%2F..%2Fstore/{{secret:TOKEN}}", "a percent-encoded `/`"),
            ("/bot{{secret:TOKEN}}%5c..", "a percent-encoded `\\`"),
            ("/bot\\..\\{{secret:TOKEN}}", "a backslash"),
            ("/bot//{{secret:TOKEN}}", "an empty segment `//`"),
        ] {
            let err = target(text).unwrap_err();
            assert!(matches!(err, Refused::UnsafePath { .. }), "{text}: {err}");
            let text = err.to_string();
            assert!(text.starts_with("secret_unsafe_path: secret TOKEN may not go"), "{text}");
            assert!(text.contains(flaw) && !text.contains("value-0123"), "{text}");
        }
        let err = target("/bottle/{{secret:TOKEN}}").unwrap_err();
        assert!(matches!(err, Refused::Misplaced { .. }), "{err}");
    }
}
