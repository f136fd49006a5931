//! Proxy-mode secrets over real sockets: placeholders filled in for the hosts a secret is bound
//! to (header, query, JSON and form bodies, `https://` through TLS the proxy makes), refused for
//! any other host before anything is dialled, every answer scrubbed (raw, percent, base64),
//! redirects passed back scrubbed and never followed, compressed answers refused, CONNECT to a
//! bound host refused, credentials gone when the task ends, the relay scrubbing a stdin-mode
//! value out of a chat call — and the values hunted for in the logs and the audit file.

use egress_support::allow;
use nexbot_tests::egress as egress_support;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use base64::Engine;
use egress_support::{connect, start, web_echo_app, web_echo_server, Echoed, Started, WAIT};
use nexbot_egress::{Binding, Credential, EgressConfig};
use nexbot_tests::scripted_llm::{ScriptedLlm, Step};
use secrecy::{ExposeSecret, SecretString};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Bound to 127.0.0.1 (the echo server), with characters that need escaping in a URL.
const VALUE: &str = "ghp_PLANTED/secret+value=0123456789";
/// How a URL or form carries it.
const VALUE_PERCENT: &str = "ghp_PLANTED%2Fsecret%2Bvalue%3D0123456789";
/// A stdin-mode secret: never sent, only scrubbed.
const STDIN_VALUE: &str = "stdin-PLANTED-value-abcdef012345";
const LABEL: &str = "[REDACTED:GH_TOKEN]";

/// `GH_TOKEN` has a legacy binding (a bare host, as stored before bindings named places):
/// anywhere in a request to 127.0.0.1, any port and scheme — what these tests exercise is the
/// filling and scrubbing; where a value may go is the last tests'.
fn credentials() -> Vec<Credential> {
    vec![
        Credential::new(
            "GH_TOKEN",
            SecretString::from(VALUE),
            vec![Binding::parse("127.0.0.1").unwrap()],
        ),
        Credential::new("STDIN_SECRET", SecretString::from(STDIN_VALUE), vec![]),
    ]
}

/// The listener with task `t-1` holding [`credentials`], an echo server on 127.0.0.1 (bound)
/// and one on 127.0.0.2 (not bound), both allowed.
async fn setup(mut config: EgressConfig) -> (Started, Echo, Echo) {
    let bound = Echo::start("127.0.0.1").await;
    let other = Echo::start("127.0.0.2").await;
    config.proxy.allow_internal.extend([allow(bound.addr), allow(other.addr)]);
    let started = start(config, None).await;
    started.egress.credentials().grant("t-1", credentials()).unwrap();
    (started, bound, other)
}

struct Echo {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<Echoed>>>,
}

impl Echo {
    async fn start(ip: &str) -> Self {
        let (addr, seen) = web_echo_server(ip.parse().unwrap()).await;
        Self { addr, seen }
    }
    fn seen(&self) -> Vec<Echoed> {
        self.seen.lock().unwrap().clone()
    }
}

fn no_redirects(started: &Started) -> reqwest::Client {
    reqwest::Client::builder()
        .proxy(started.proxy())
        .redirect(reqwest::redirect::Policy::none())
        .timeout(WAIT)
        .build()
        .unwrap()
}

/// The parts of the base64 of [`VALUE`] that only it decides, at each offset in a longer text.
fn base64_cores(value: &str) -> Vec<String> {
    (0..3)
        .map(|offset| {
            let mut data = vec![b'x'; offset];
            data.extend_from_slice(value.as_bytes());
            let encoded = base64::engine::general_purpose::STANDARD.encode(data);
            encoded[4..encoded.len() - 4].to_owned()
        })
        .collect()
}

fn assert_clean(place: &str, text: &str) {
    assert!(!text.contains("PLANTED"), "a value leaked into {place}: {text}");
    for value in [VALUE, STDIN_VALUE] {
        for core in base64_cores(value) {
            assert!(!text.contains(&core), "a base64 form leaked into {place}: {text}");
        }
        let hex: String = value.bytes().map(|b| format!("{b:02x}")).collect();
        assert!(!text.to_ascii_lowercase().contains(&hex), "a hex form leaked into {place}");
    }
}

#[tokio::test]
async fn placeholders_are_filled_in_for_the_bound_host_and_every_answer_is_scrubbed() {
    let (started, echo, _) = setup(EgressConfig::default()).await;
    let client = no_redirects(&started);
    let base = format!("http://{}", echo.addr);

    // Header (raw) and query (percent-encoded placeholder).
    let response = client
        .get(format!("{base}/echo?token=%7B%7Bsecret%3AGH_TOKEN%7D%7D&raw={{{{secret:GH_TOKEN}}}}"))
        .header("authorization", "Bearer {{secret:GH_TOKEN}}")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["x-echo-authorization"], format!("Bearer {LABEL}"));
    let text = response.text().await.unwrap();
    assert!(text.contains(LABEL), "the answer held the value and it was scrubbed: {text}");
    assert_clean("an answer", &text);
    let got = &echo.seen()[0];
    assert_eq!(got.target, format!("/echo?token={VALUE_PERCENT}&raw={VALUE_PERCENT}"));
    assert_eq!(got.header("authorization"), Some(format!("Bearer {VALUE}").as_str()));
    assert_eq!(got.header("accept-encoding"), Some("identity"));

    // JSON body: JSON-escaped, Content-Length fixed.
    let response = client
        .post(format!("{base}/b64"))
        .json(&json!({"token": "{{secret:GH_TOKEN}}", "note": "a \"quoted\" {{secret:UNKNOWN}}"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert!(response.headers().get("content-length").is_none(), "the scrubbed body streams");
    let text = response.text().await.unwrap();
    assert_clean("a base64 answer", &text);
    let got = &echo.seen()[1];
    let sent: Value = serde_json::from_str(&got.body).unwrap();
    assert_eq!(sent["token"], VALUE);
    assert_eq!(sent["note"], "a \"quoted\" {{secret:UNKNOWN}}", "unknown names pass unchanged");
    assert_eq!(got.header("content-length"), Some(got.body.len().to_string().as_str()));

    // Form body: the client percent-encodes the placeholder, the value goes in encoded.
    let response = client
        .post(format!("{base}/echo"))
        .form(&[("token", "{{secret:GH_TOKEN}}"), ("x", "1")])
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_clean("a form answer", &response.text().await.unwrap());
    assert_eq!(echo.seen()[2].body, format!("token={VALUE_PERCENT}&x=1"));

    // A redirect from the bound host is passed back as it is, Location scrubbed; not followed.
    let response =
        client.get(format!("{base}/redirect?token={{{{secret:GH_TOKEN}}}}")).send().await.unwrap();
    assert_eq!(response.status(), 302);
    assert_eq!(
        response.headers()["location"],
        format!("http://elsewhere.example/collect?token={LABEL}")
    );
    assert_clean("a redirect", &response.text().await.unwrap());
    assert_eq!(echo.seen().len(), 4, "the redirect was not followed");

    // Compressed answers cannot be scrubbed: refused for this task.
    let response = client.get(format!("{base}/gzip")).send().await.unwrap();
    assert_eq!(response.status(), 502);
    let text = response.text().await.unwrap();
    assert!(text.contains("compressed_response") && text.contains("gzip"), "{text}");
    // So are archives a server packs (a stored value inside a zip).
    let response = client.get(format!("{base}/zip")).send().await.unwrap();
    assert_eq!(response.status(), 502);
    assert!(response.text().await.unwrap().contains("application/zip"));

    let lines = started.audit_lines(6).await;
    for line in &lines[..4] {
        assert_eq!(line["verdict"], "allowed", "{line}");
        assert_eq!(line["secrets"], json!(["GH_TOKEN"]), "{line}");
    }
    assert_eq!(lines[4]["verdict"], "denied");
    assert_eq!(lines[5]["verdict"], "denied");
    let summary = started.egress.tokens().summary("t-1").unwrap();
    assert_eq!((summary.secrets_injected, summary.secrets_refused), (4, 0));

    // A task without credentials gets the compressed answer as it is.
    started.run_task("t-2");
    let response = client.get(format!("{base}/gzip")).send().await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-encoding"], "gzip");
}

#[tokio::test]
async fn a_placeholder_for_an_unbound_host_refuses_the_request_before_anything_is_sent() {
    let (started, echo, other) = setup(EgressConfig::default()).await;
    let client = no_redirects(&started);

    let response = client
        .get(format!("http://{}/echo", other.addr))
        .header("x-api-key", "{{secret:GH_TOKEN}}")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 403);
    let text = response.text().await.unwrap();
    assert!(
        text.contains("secret_not_bound: secret GH_TOKEN may not be sent to 127.0.0.2"),
        "{text}"
    );
    // Percent-encoded in a body, and a stdin-mode secret to the bound host: refused alike.
    let response = client
        .post(format!("http://{}/echo", other.addr))
        .body("a=%7b%7Bsecret%3aGH_TOKEN%7D%7d")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 403);
    let response = client
        .get(format!("http://{}/echo?k={{{{secret:STDIN_SECRET}}}}", echo.addr))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 403);
    assert!(other.seen().is_empty() && echo.seen().is_empty(), "nothing reached upstream");

    let lines = started.audit_lines(3).await;
    let audit = std::fs::read_to_string(started.egress.audit_path()).unwrap();
    assert_clean("the audit file", &audit);
    assert_eq!(lines[0]["verdict"], "denied");
    assert_eq!(lines[0]["task_id"], "t-1");
    assert_eq!(lines[0]["host"], "127.0.0.2");
    assert_eq!(lines[0]["secrets"], json!(["GH_TOKEN"]));
    assert_eq!(lines[0]["resolved"], Value::Null, "nothing was dialled");
    assert!(lines[2]["reason"].as_str().unwrap().contains("secret STDIN_SECRET"), "{}", lines[2]);
    let summary = started.egress.tokens().summary("t-1").unwrap();
    assert_eq!((summary.secrets_injected, summary.secrets_refused), (0, 3));
}

#[tokio::test]
async fn connect_to_a_bound_host_is_refused_for_the_task_and_credentials_end_with_it() {
    let (started, echo, other) = setup(EgressConfig::default()).await;
    let proxy = started.egress.local_addr();
    let (code, _) = connect(proxy, &echo.addr.to_string()).await;
    assert_eq!(code, 403, "a tunnel to a bound host could carry the value back unseen");
    let (code, _) = connect(proxy, &other.addr.to_string()).await;
    assert_eq!(code, 403, "nor to any other host: a stored value could come back through it");
    started.run_task("t-2");
    let (code, _) = connect(proxy, &echo.addr.to_string()).await;
    assert_eq!(code, 200, "a task without credentials tunnels anywhere allowed");
    let lines = started.audit_lines(3).await;
    let refused = lines.iter().find(|l| l["verdict"] == "denied").unwrap();
    assert_eq!(lines.iter().filter(|l| l["verdict"] == "denied").count(), 2, "{lines:?}");
    assert!(refused["reason"].as_str().unwrap().starts_with("secret_bound_host"), "{refused}");
    assert_eq!(refused["secrets"], json!(["GH_TOKEN"]));

    // The task ends: its credentials go with it.
    started.run_task("t-1");
    let credentials = started.egress.credentials();
    assert!(credentials.has("t-1"));
    started.egress.finish_task("t-1");
    assert!(!credentials.has("t-1") && credentials.redactor("t-1").is_none());
    // The same id in use again (a token issued reopens it): placeholders pass unchanged.
    started.egress.tokens().issue("t-1", 10).unwrap();
    started.issue_credential("t-1");
    let response = no_redirects(&started)
        .get(format!("http://{}/echo?k=%7B%7Bsecret%3AGH_TOKEN%7D%7D", echo.addr))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(echo.seen()[0].target, "/echo?k=%7B%7Bsecret%3AGH_TOKEN%7D%7D");
}

/// A TLS listener for axum with a certificate for 127.0.0.1.
struct TlsListener {
    tcp: tokio::net::TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
}

impl axum::serve::Listener for TlsListener {
    type Io = tokio_rustls::server::TlsStream<tokio::net::TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let Ok((stream, addr)) = self.tcp.accept().await else { continue };
            if let Ok(tls) = self.acceptor.accept(stream).await {
                return (tls, addr);
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.tcp.local_addr()
    }
}

/// An HTTPS echo server on 127.0.0.1 with a fresh self-signed certificate; its PEM.
async fn https_echo() -> (Echo, String) {
    let certified = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned()]).unwrap();
    let key = rustls::pki_types::PrivatePkcs8KeyDer::from(certified.key_pair.serialize_der());
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![certified.cert.der().clone()], key.into())
        .unwrap();
    let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = tcp.local_addr().unwrap();
    let listener = TlsListener { tcp, acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(config)) };
    let seen = Arc::new(Mutex::new(Vec::new()));
    let app = web_echo_app(seen.clone());
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (Echo { addr, seen }, certified.cert.pem())
}

/// Sends `head` (a whole request head, absolute form) to the proxy in plain HTTP; returns the
/// whole answer.
/// The credential registered for the proxy goes in right after the request line.
async fn raw(proxy: SocketAddr, head: &str) -> String {
    let mut stream = tokio::net::TcpStream::connect(proxy).await.unwrap();
    let head = head.replacen("\r\n", &format!("\r\n{}", egress_support::auth_line(proxy)), 1);
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(WAIT, stream.read_to_end(&mut answer)).await.unwrap().unwrap();
    String::from_utf8_lossy(&answer).into_owned()
}

#[tokio::test]
async fn https_absolute_form_goes_through_tls_the_proxy_makes_and_bad_certificates_are_refused() {
    let (trusted, pem) = https_echo().await;
    let (untrusted, _) = https_echo().await;
    let dir = egress_support::DataDir::new("ca");
    std::fs::create_dir_all(&dir.0).unwrap();
    let ca = dir.0.join("ca.pem");
    std::fs::write(&ca, &pem).unwrap();
    let mut config = EgressConfig::default();
    config.proxy.extra_ca_files = vec![ca];
    config.proxy.allow_internal = vec![allow(trusted.addr), allow(untrusted.addr)];
    let started = start(config, None).await;
    started.egress.credentials().grant("t-1", credentials()).unwrap();
    let proxy = started.egress.local_addr();

    let answer = raw(
        proxy,
        &format!(
            "GET https://{0}/echo?t={{{{secret:GH_TOKEN}}}} HTTP/1.1\r\nHost: {0}\r\n\
             Authorization: Bearer {{{{secret:GH_TOKEN}}}}\r\nConnection: close\r\n\r\n",
            trusted.addr
        ),
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains(LABEL), "{answer}");
    assert_clean("an https answer", &answer);
    let got = &trusted.seen()[0];
    assert_eq!(got.target, format!("/echo?t={VALUE_PERCENT}"));
    assert_eq!(got.header("authorization"), Some(format!("Bearer {VALUE}").as_str()));

    let answer = raw(
        proxy,
        &format!(
            "GET https://{0}/echo HTTP/1.1\r\nHost: {0}\r\nConnection: close\r\n\r\n",
            untrusted.addr
        ),
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 502"), "{answer}");
    assert!(answer.contains("upstream_tls") && answer.contains("certificate"), "{answer}");
    assert!(untrusted.seen().is_empty());

    let lines = started.audit_lines(2).await;
    assert!(lines.iter().all(|l| l["kind"] == "https"), "{lines:?}");
    assert_eq!(lines[0]["secrets"], json!(["GH_TOKEN"]));
    assert_eq!(lines[1]["verdict"], "error");

    // The CA file is checked when the config is, naming the file.
    let mut config = EgressConfig::default();
    let missing = dir.0.join("missing.pem");
    config.proxy.extra_ca_files = vec![missing];
    let err = config.validate().unwrap_err().to_string();
    assert!(err.contains("proxy.extra_ca_files") && err.contains("missing.pem"), "{err}");
    let empty = dir.0.join("empty.pem");
    std::fs::write(&empty, "no certificate here\n").unwrap();
    config.proxy.extra_ca_files = vec![empty];
    let err = config.validate().unwrap_err().to_string();
    assert!(err.contains("empty.pem") && err.contains("no PEM certificate"), "{err}");
}

#[tokio::test]
async fn a_stdin_mode_value_in_a_chat_call_reaches_the_provider_redacted() {
    let llm = ScriptedLlm::start(vec![Step::text("ok")]).await;
    let mut config = EgressConfig::default();
    config.relay.provider_base_url = Some(llm.base_url());
    config.relay.default_max_tokens = 100;
    let started = start(config, Some("sk-nxe-provider-key-0123456789")).await;
    started.run_task("task-r");
    let token = started.egress.tokens().issue("task-r", 100_000).unwrap();
    started.egress.credentials().grant("task-r", credentials()).unwrap();
    let encoded = base64::engine::general_purpose::STANDARD.encode(STDIN_VALUE);
    let body = json!({"model": "m", "messages": [
        {"role": "tool", "content": format!("the value is {STDIN_VALUE}")},
        {"role": "user", "content": format!("and encoded {encoded}")},
    ]});
    let response = reqwest::Client::new()
        .post(format!("{}/chat/completions", started.egress.relay_base_url()))
        .bearer_auth(token.expose_secret())
        .json(&body)
        .timeout(WAIT)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let sent = llm.chat_requests()[0].body.clone();
    assert_eq!(sent["messages"][0]["content"], "the value is [REDACTED:STDIN_SECRET]");
    assert_eq!(sent["messages"][1]["content"], "and encoded [REDACTED:STDIN_SECRET]");
    assert_clean("the provider's request", &sent.to_string());
    let line = &started.audit_lines(1).await[0];
    assert_eq!(line["kind"], "relay");
    assert_eq!(line["secrets"], json!(["STDIN_SECRET"]));
}

/// The values are hunted for in every `tracing` event (at TRACE, hyper's included) and the
/// audit file while requests carry them out and answers carry them back. The capture is this
/// thread's (a current-thread runtime runs the listener here too), so it does not clash with
/// the process-wide one of `egress_secret_hunt`.
#[tokio::test]
async fn the_values_appear_in_no_log_or_audit_line() {
    let capture = nexbot_tests::LogCapture::default();
    let subscriber = capture.subscriber();
    let _guard = tracing::subscriber::set_default(subscriber);

    let (started, echo, other) = setup(EgressConfig::default()).await;
    let client = no_redirects(&started);
    for url in [
        format!("http://{}/echo?t={{{{secret:GH_TOKEN}}}}", echo.addr),
        format!("http://{}/redirect?t={{{{secret:GH_TOKEN}}}}", echo.addr),
        format!("http://{}/b64?t={{{{secret:GH_TOKEN}}}}", echo.addr),
        format!("http://{}/echo?t={{{{secret:GH_TOKEN}}}}", other.addr),
        format!("http://{}/echo?s={{{{secret:STDIN_SECRET}}}}", echo.addr),
    ] {
        let response = client
            .post(url)
            .header("authorization", "token {{secret:GH_TOKEN}}")
            .body(format!("{{{{secret:GH_TOKEN}}}} and {STDIN_VALUE}"))
            .send()
            .await
            .unwrap();
        assert_clean("an answer", &response.text().await.unwrap());
    }
    started.audit_lines(5).await;
    assert!(echo.seen()[0].body.starts_with(VALUE), "the value did go out");
    let debug = format!("{:?} {:?}", started.egress, started.egress.credentials());
    started.egress.finish_task("t-1");
    let logs = capture.text();
    assert!(logs.contains("nexbot::egress::audit"), "the capture works");
    let audit = std::fs::read_to_string(started.egress.audit_path()).unwrap();
    for (place, text) in [("logs", &logs), ("audit", &audit), ("debug", &debug)] {
        assert_clean(place, text);
    }
}

/// A multi-tenant host (it keeps whatever it receives — a comment, a query, a body, any other
/// header — and would hand it back to whoever asks, in any transformation) reached over https
/// with a secret bound the default way (that host, port 443-or-named, the `Authorization`
/// header only): every attempt to put the placeholder into a part the host keeps is refused
/// before anything is sent, the same over plain http, and the one named place is filled.
/// Nothing the host received holds the value in any form. Before bindings named places,
/// every one of these requests was filled and sent.
#[tokio::test]
async fn a_value_goes_only_into_the_place_its_binding_names_over_tls() {
    let (host, pem) = https_echo().await;
    let plain = Echo::start("127.0.0.1").await;
    let dir = egress_support::DataDir::new("ca-bound");
    std::fs::create_dir_all(&dir.0).unwrap();
    let ca = dir.0.join("ca.pem");
    std::fs::write(&ca, &pem).unwrap();
    let mut config = EgressConfig::default();
    config.proxy.extra_ca_files = vec![ca];
    config.proxy.allow_internal = vec![allow(host.addr), allow(plain.addr)];
    let started = start(config, None).await;
    let binding = Binding::new(&format!("https://{}", host.addr), &[]).unwrap();
    assert_eq!(binding.to_string(), format!("https://{} header:authorization", host.addr));
    let bound = Credential::new("GH_TOKEN", SecretString::from(VALUE), vec![binding]);
    started.egress.credentials().grant("t-1", vec![bound]).unwrap();
    let proxy = started.egress.local_addr();
    let send = |head: String| async move { raw(proxy, &head).await };
    let addr = host.addr;
    let attempts = [
        {
            let body = "{\"body\":\"{{secret:GH_TOKEN}}\"}";
            format!(
                "POST https://{addr}/repos/me/issues HTTP/1.1\r\nHost: {addr}\r\nContent-Type: \
                 application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            )
        },
        format!(
            "GET https://{addr}/hook?url=%7B%7Bsecret%3AGH_TOKEN%7D%7D HTTP/1.1\r\nHost: {addr}\r\n\
             Connection: close\r\n\r\n"
        ),
        format!(
            "GET https://{addr}/bin/{{{{secret:GH_TOKEN}}}} HTTP/1.1\r\nHost: {addr}\r\n\
             Connection: close\r\n\r\n"
        ),
        format!(
            "GET https://{addr}/c HTTP/1.1\r\nHost: {addr}\r\nX-Comment: {{{{secret:GH_TOKEN}}}}\r\n\
             Connection: close\r\n\r\n"
        ),
    ];
    for (attempt, spot) in
        attempts.iter().zip(["the body", "query parameter url", "the path", "header x-comment"])
    {
        let answer = send(attempt.clone()).await;
        assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
        assert!(answer.contains("secret_misplaced") && answer.contains(spot), "{spot}: {answer}");
        assert!(answer.contains("its binding allows: header:authorization"), "{answer}");
    }
    // The right place, but plain http to the same name: refused too (https only).
    let answer = send(format!(
        "GET http://{0}/echo HTTP/1.1\r\nHost: {0}\r\nAuthorization: Bearer {{{{secret:GH_TOKEN}}}}\r\n\
         Connection: close\r\n\r\n",
        plain.addr
    ))
    .await;
    assert!(answer.starts_with("HTTP/1.1 403") && answer.contains("secret_not_bound"), "{answer}");
    assert!(host.seen().is_empty() && plain.seen().is_empty(), "nothing reached a host");
    // The named place: filled and sent, the answer scrubbed.
    let answer = send(format!(
        "GET https://{addr}/user HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {{{{secret:GH_TOKEN}}}}\r\n\
         Connection: close\r\n\r\n"
    ))
    .await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert_clean("the answer", &answer);
    let seen = host.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].header("authorization"), Some(format!("Bearer {VALUE}").as_str()));
    // What the host keeps of everyone's requests (all but the credential header) holds no
    // form of the value: not raw, percent-encoded, reversed, base64 or hex.
    let reversed: String = VALUE.chars().rev().collect();
    for got in &seen {
        let mut kept = format!("{} {}\n{}", got.method, got.target, got.body);
        for (name, value) in got.headers.iter().filter(|(n, _)| n != "authorization") {
            kept.push_str(&format!("\n{name}: {value}"));
        }
        assert_clean("what the host keeps", &kept);
        assert!(!kept.contains(VALUE_PERCENT) && !kept.contains(&reversed), "{kept}");
    }
    let lines = started.audit_lines(6).await;
    let denied = lines.iter().filter(|l| l["verdict"] == "denied").count();
    assert_eq!(denied, 5, "{lines:?}");
    assert!(lines.iter().all(|l| l["secrets"] == json!(["GH_TOKEN"])), "{lines:?}");
    let summary = started.egress.tokens().summary("t-1").unwrap();
    assert_eq!((summary.secrets_injected, summary.secrets_refused), (1, 5));
}

/// A Telegram-style secret (`path:/bot`, the value right after `/bot`) over plain http to a
/// LAN-style binding: a path that only starts with the prefix's text (`/bottle/`) or climbs
/// out of it (`/bot/../store/`, `%2F..%2F`, or `..` after the value) is refused before
/// anything is sent, naming what was wrong; `/bot<token>/sendMessage` is filled. Before
/// bindings matched whole segments, the first two were filled and sent.
#[tokio::test]
async fn a_path_bound_value_goes_only_after_the_whole_prefix_in_a_plain_path() {
    let echo = Echo::start("127.0.0.1").await;
    let mut config = EgressConfig::default();
    config.proxy.allow_internal = vec![allow(echo.addr)];
    let started = start(config, None).await;
    let binding = Binding::new(&format!("http://{}", echo.addr), &["path:/bot".into()]).unwrap();
    let bound = Credential::new("TG_BOT", SecretString::from(VALUE), vec![binding]);
    started.egress.credentials().grant("t-1", vec![bound]).unwrap();
    let proxy = started.egress.local_addr();
    let addr = echo.addr;
    let get = |path: &str| {
        format!("GET http://{addr}{path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n")
    };
    for (path, reason) in [
        ("/bottle/{{secret:TG_BOT}}", "secret_misplaced: secret TG_BOT may not go in the path"),
        ("/botx{{secret:TG_BOT}}", "secret_misplaced: secret TG_BOT may not go in the path"),
        ("/bot/../store/{{secret:TG_BOT}}", "a request path with a dot segment `..`"),
        ("/bot%2F..%2Fstore/{{secret:TG_BOT}}", "a request path with a percent-encoded `/`"),
        ("/bot{{secret:TG_BOT}}/../store", "a request path with a dot segment `..`"),
    ] {
        let answer = raw(proxy, &get(path)).await;
        assert!(answer.starts_with("HTTP/1.1 403"), "{path}: {answer}");
        assert!(answer.contains(reason), "{path}: {answer}");
        assert_clean("a refusal", &answer);
    }
    assert!(echo.seen().is_empty(), "nothing reached the host: {:?}", echo.seen());
    let answer = raw(proxy, &get("/bot{{secret:TG_BOT}}/sendMessage")).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert_clean("the answer", &answer);
    let seen = echo.seen();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(seen[0].target, format!("/bot{VALUE_PERCENT}/sendMessage"));
    let lines = started.audit_lines(6).await;
    assert_eq!(lines.iter().filter(|l| l["verdict"] == "denied").count(), 5, "{lines:?}");
    assert!(lines.iter().all(|l| l["secrets"] == json!(["TG_BOT"])), "{lines:?}");
    let summary = started.egress.tokens().summary("t-1").unwrap();
    assert_eq!((summary.secrets_injected, summary.secrets_refused), (1, 5));
}
