//! `cargo bench -p nexbot-egress --bench egress`: what the egress listener costs, in-process on
//! loopback (no Docker): CONNECT set-up and plain-HTTP round trips through the proxy against
//! direct ones, tunnel throughput, and a relay call against a direct call to the same scripted
//! provider, and what a proxy-injected secret adds to a request (the body read whole, the
//! placeholder filled in, the answer scrubbed as it streams). Prints figures (the relay's one
//! goes to the `make bench` summary); asserts nothing about speed.
//!
//! Also the exit scan (`scan`): the redactor every exit and the relay run text through, on a
//! 64 KiB text with 1, 64 and 1,000 secrets, beside the obvious alternative (one substring
//! search per secret and encoding), and the periodic 64 KiB value of issue 25.
//!
//! `ask`: what `egress.mode = "ask"` adds to a request that is allowed (by an `egress.allow`
//! rule, or by the approver at once, as for a destination granted "for this task"), against
//! `open`; and from the answer of a held request to its response's first byte at the client.
//!
//! One section only: `cargo bench -p nexbot-egress --bench egress -- secrets` (any part of a
//! section's name: `tunnel`, `http`, `throughput`, `secrets`, `ask`, `relay`, `scan`).

use nexbot_tests::egress as egress_support;

use std::time::{Duration, Instant};

use egress_support::{connect, echo_server, firehose_server, http_server, start, web_echo_server};
use nexbot_egress::{Binding, Cidr, Credential, EgressConfig, InternalAllow};
use nexbot_tests::bench::{record, Figure, Stats};
use nexbot_tests::scripted_llm::{ScriptedLlm, Step};
use secrecy::{ExposeSecret, SecretString};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const ROUNDS: usize = 500;
const TUNNEL_BYTES: usize = 256 << 20;

fn percentiles(mut samples: Vec<Duration>) -> String {
    samples.sort();
    let at = |p: f64| samples[((samples.len() as f64 - 1.0) * p).round() as usize];
    format!("p50 {:>8.3} ms  p99 {:>8.3} ms", ms(at(0.5)), ms(at(0.99)))
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

async fn timed<F: std::future::Future<Output = ()>>(f: impl Fn() -> F) -> Vec<Duration> {
    let mut samples = Vec::with_capacity(ROUNDS);
    for _ in 0..ROUNDS {
        let start = Instant::now();
        f().await;
        samples.push(start.elapsed());
    }
    samples
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    // `cargo bench` passes `--bench`; the first other argument picks the sections to run.
    let only = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    let run = |section: &str| only.as_deref().is_none_or(|f| section.contains(f));
    let (echo, _) = echo_server().await;
    let (web_echo, _) = web_echo_server("127.0.0.1".parse().unwrap()).await;
    let (web, _) = http_server().await;
    let firehose = firehose_server(TUNNEL_BYTES).await;
    let llm = ScriptedLlm::start(vec![]).await;
    llm.set_responder(|_| Step::text("ok"));
    let allow = |addr: std::net::SocketAddr| InternalAllow {
        cidr: Cidr::try_from(addr.ip().to_string()).unwrap(),
        ports: vec![addr.port()],
    };
    let mut config = EgressConfig::default();
    config.proxy.allow_internal = vec![allow(echo), allow(web), allow(firehose), allow(web_echo)];
    config.proxy.max_bytes_down = u64::MAX;
    config.relay.provider_base_url = Some(llm.base_url());
    config.max_connections_per_source = 1024;
    let started = start(config, Some("sk-bench")).await;
    let proxy = started.egress.local_addr();

    if run("scan") {
        scan_figures();
    }
    println!("egress listener, in-process on loopback, {ROUNDS} rounds each");
    if run("tunnel") {
        tunnel_figures(echo, proxy).await;
    }
    let direct_client = reqwest::Client::new();
    let url = format!("http://{web}/hello");
    if run("http") {
        let direct = timed(|| async {
            direct_client.get(&url).send().await.unwrap().bytes().await.unwrap();
        })
        .await;
        println!("  HTTP GET (keep-alive), direct           {}", percentiles(direct));
        let proxied_client = started.proxy_client();
        let proxied = timed(|| async {
            proxied_client.get(&url).send().await.unwrap().bytes().await.unwrap();
        })
        .await;
        println!("  HTTP GET (keep-alive), through proxy    {}", percentiles(proxied));
    }
    if run("throughput") {
        throughput(proxy, firehose).await;
    }
    if run("secrets") {
        secret_figures(&started, web_echo).await;
    }
    if run("ask") {
        ask_figures(web, &url).await;
    }
    if !run("relay") {
        return;
    }

    // The task the client's address runs (`egress_support::start`: 127.0.0.1 is container
    // `c-test` running `t-1`): the relay refuses a token of any other task from there.
    let token = started.egress.tokens().issue("t-1", u64::MAX).unwrap();
    let body = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
    let direct = timed(|| async {
        let url = format!("{}/chat/completions", llm.base_url());
        direct_client
            .post(url)
            .bearer_auth("sk-bench")
            .json(&body)
            .send()
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap();
    })
    .await;
    let direct_p50 = p50(&direct);
    println!("  chat call, direct to provider           {}", percentiles(direct));
    let relayed = timed(|| async {
        let url = format!("{}/chat/completions", started.egress.relay_base_url());
        let response = direct_client
            .post(url)
            .bearer_auth(token.expose_secret())
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        response.bytes().await.unwrap();
    })
    .await;
    let relayed_p50 = p50(&relayed);
    println!("  chat call, through the relay            {}", percentiles(relayed));
    record(Figure::reference(
        "  LLM relay: chat call through it / direct, p50",
        &format!("{:.3} / {:.3} ms", ms(relayed_p50), ms(direct_p50)),
        "(loopback; the relay is not yet on the execute path)",
    ));
}

fn p50(samples: &[Duration]) -> Duration {
    Stats::of(samples.to_vec()).p50
}

async fn tunnel_figures(echo: std::net::SocketAddr, proxy: std::net::SocketAddr) {
    let direct = timed(|| async {
        let mut s = tokio::net::TcpStream::connect(echo).await.unwrap();
        s.write_all(b"x").await.unwrap();
        s.read_exact(&mut [0u8; 1]).await.unwrap();
    })
    .await;
    println!("  TCP connect + 1-byte echo, direct       {}", percentiles(direct));
    let tunnel = timed(|| async {
        let (code, mut s) = connect(proxy, &echo.to_string()).await;
        assert_eq!(code, 200);
        s.write_all(b"x").await.unwrap();
        s.read_exact(&mut [0u8; 1]).await.unwrap();
    })
    .await;
    println!("  CONNECT + 1-byte echo, through proxy    {}", percentiles(tunnel));
}

async fn throughput(proxy: std::net::SocketAddr, firehose: std::net::SocketAddr) {
    let (code, mut s) = connect(proxy, &firehose.to_string()).await;
    assert_eq!(code, 200);
    let start = Instant::now();
    let mut buf = vec![0u8; 1 << 16];
    let mut total = 0;
    loop {
        let n = s.read(&mut buf).await.unwrap();
        if n == 0 {
            break;
        }
        total += n;
    }
    let secs = start.elapsed().as_secs_f64();
    println!(
        "  tunnel throughput                       {:.0} MiB/s ({} MiB)",
        total as f64 / secs / (1 << 20) as f64,
        total >> 20
    );
}

/// The same request to an echo server (which sends back what it got, the value included)
/// through the proxy, from the task without credentials and then with its token in a
/// placeholder the proxy fills in: what the secret adds.
async fn secret_figures(started: &egress_support::Started, web_echo: std::net::SocketAddr) {
    let client = started.proxy_client();
    let url = format!("http://{web_echo}/echo?q=1");
    let send = |authorization: &'static str| {
        let request = client.get(&url).header("authorization", authorization);
        async move {
            let response = request.send().await.unwrap();
            assert_eq!(response.status(), 200);
            response.bytes().await.unwrap();
        }
    };
    let plain = timed(|| send("Bearer bench-PLAIN-token-0123456789")).await;
    let credentials = started.egress.credentials();
    let bound = vec![Binding::new(&format!("http://{web_echo}"), &[]).unwrap()];
    let token = SecretString::from("bench-SECRET-token-0123456789");
    credentials.grant("t-1", vec![Credential::new("BENCH_TOKEN", token, bound.clone())]).unwrap();
    let injected = timed(|| send("Bearer {{secret:BENCH_TOKEN}}")).await;
    // The same with four decoys held beside it: the proxy looks for their placeholders in
    // every request of the task before filling anything in.
    let token = SecretString::from("bench-SECRET-token-0123456789");
    let mut held = vec![Credential::new("BENCH_TOKEN", token, bound.clone())];
    held.extend(
        ["OPENAI_API_KEY", "ANTHROPIC_API_KEY", "AWS_SECRET_ACCESS_KEY", "STRIPE_SECRET_KEY"].map(
            |name| Credential::decoy(name, SecretString::from(format!("decoy-{name}-0123456789"))),
        ),
    );
    credentials.grant("t-1", held).unwrap();
    let decoyed = Stats::of(timed(|| send("Bearer {{secret:BENCH_TOKEN}}")).await);
    credentials.revoke("t-1");
    let (plain, injected) = (Stats::of(plain), Stats::of(injected));
    println!("  HTTP GET echo, injected, 4 decoys held  {}", stats(&decoyed));
    record(Figure::reference(
        "  egress: injected secret with / without 4 decoys held, p50",
        &format!("{:.3} / {:.3} ms", ms(decoyed.p50), ms(injected.p50)),
        "(the decoy check: their placeholders looked for first)",
    ));
    println!("  HTTP GET echo, through proxy, no secret {}", stats(&plain));
    println!("  HTTP GET echo, proxy-injected secret    {}", stats(&injected));
    println!(
        "  added by the secret (inject + scrub)    p50 {:>+8.3} ms  p99 {:>+8.3} ms",
        ms(injected.p50) - ms(plain.p50),
        ms(injected.p99) - ms(plain.p99)
    );
    record(Figure::reference(
        "  egress: proxy-injected secret, request p50 with / without",
        &format!("{:.3} / {:.3} ms", ms(injected.p50), ms(plain.p50)),
        "(loopback echo; inject + scrub of the answer)",
    ));
}

/// The exit scan on a 64 KiB text: the redactor (one automaton pass per view) with 1, 64 and
/// 1,000 secrets of 32 bytes, and beside it the obvious alternative, one substring search per
/// secret and encoding (raw, base64 of both alphabets, hex: fewer forms than the redactor
/// knows, so it flatters the alternative). Then the periodic 64 KiB value of issue 25, which
/// took the old per-needle matcher about 80 s.
fn scan_figures() {
    use base64::Engine as _;
    use nexbot_redact::Redactor;

    const TEXT_BYTES: usize = 64 << 10;
    const RUNS: usize = 20;
    println!("exit scan, 64 KiB text, median of {RUNS} runs");
    // A deterministic generator: the same secrets and text every run.
    let mut seed = 0x2545_f491_4f6c_dd1d_u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    const ALNUM: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let mut word = |len: usize| -> String {
        (0..len).map(|_| char::from(ALNUM[(next() % ALNUM.len() as u64) as usize])).collect()
    };
    let values: Vec<String> = (0..1000).map(|_| format!("sk-{}", word(29))).collect();
    let mut text = String::with_capacity(TEXT_BYTES);
    while text.len() < TEXT_BYTES - 64 {
        let len = 2 + (text.len() * 7 % 9);
        text.push_str(&word(len));
        text.push(if text.len() % 80 < 8 { '\n' } else { ' ' });
    }
    // One of the values is in the text (whatever the count, the first is scanned for).
    text.insert_str(TEXT_BYTES / 2, &format!(" {} ", values[0]));
    let median = |f: &mut dyn FnMut()| {
        let mut samples: Vec<Duration> = (0..RUNS)
            .map(|_| {
                let start = Instant::now();
                f();
                start.elapsed()
            })
            .collect();
        samples.sort();
        samples[RUNS / 2]
    };
    for count in [1, 64, 1000] {
        let secrets: Vec<(String, SecretString)> = values[..count]
            .iter()
            .enumerate()
            .map(|(i, v)| (format!("S{i}"), SecretString::from(v.clone())))
            .collect();
        let start = Instant::now();
        let redactor = Redactor::from_pairs(secrets.iter().map(|(n, v)| (n.as_str(), v)));
        let built = start.elapsed();
        let scan = median(&mut || {
            let (clean, names) = redactor.redact_found(&text).expect("the planted value");
            assert!(names == ["S0"] && !clean.contains(&values[0]));
        });
        let forms: Vec<String> = values[..count]
            .iter()
            .flat_map(|v| {
                let hex: String = v.bytes().map(|b| format!("{b:02x}")).collect();
                [
                    v.clone(),
                    base64::engine::general_purpose::STANDARD.encode(v),
                    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v),
                    hex.to_uppercase(),
                    hex,
                ]
            })
            .collect();
        let finders: Vec<memchr::memmem::Finder<'_>> =
            forms.iter().map(|f| memchr::memmem::Finder::new(f.as_bytes())).collect();
        let naive = median(&mut || {
            let found = finders.iter().filter(|f| f.find(text.as_bytes()).is_some()).count();
            assert!(found >= 1);
        });
        println!(
            "  {count:>5} secrets: scan {:>9.3} ms (automata built in {:>8.3} ms); one search \
             per secret and form {:>9.3} ms",
            ms(scan),
            ms(built),
            ms(naive)
        );
        record(Figure::reference(
            &format!("  exit scan of 64 KiB, {count} secrets / one search each"),
            &format!("{:.3} / {:.3} ms", ms(scan), ms(naive)),
            "(the search finds only raw, base64, hex)",
        ));
    }
    // Decoys are secrets to the exit scan: four more values in the same automaton.
    let with_decoys = |count: usize| {
        let secrets: Vec<(String, SecretString)> = values[..count]
            .iter()
            .enumerate()
            .map(|(i, v)| (format!("S{i}"), SecretString::from(v.clone())))
            .collect();
        let redactor = Redactor::from_pairs(secrets.iter().map(|(n, v)| (n.as_str(), v)));
        median(&mut || assert!(redactor.redact_found(&text).is_some()))
    };
    let (without, with) = (with_decoys(64), with_decoys(68));
    println!(
        "  64 secrets and 4 decoys: scan {:>9.3} ms; the 64 alone {:>9.3} ms",
        ms(with),
        ms(without)
    );
    record(Figure::reference(
        "  exit scan of 64 KiB, 64 secrets with / without 4 decoys",
        &format!("{:.3} / {:.3} ms", ms(with), ms(without)),
        "(decoys are secrets: one automaton)",
    ));
    let value = SecretString::from(format!("{}ac", "ab".repeat(32 * 1024 - 1)));
    let periodic = "ab".repeat(32 * 1024);
    let redactor = Redactor::from_pairs([("PERIODIC", &value)]);
    let scan = median(&mut || assert!(redactor.redact_found(&periodic).is_none()));
    println!("  periodic 64 KiB value, 64 KiB text: scan {:>9.3} ms", ms(scan));
    record(Figure::reference(
        "  exit scan, periodic 64 KiB value vs 64 KiB text",
        &format!("{:.3} ms", ms(scan)),
        "(the per-needle matcher before took ~80 s)",
    ));
}

fn stats(stats: &Stats) -> String {
    format!("p50 {:>8.3} ms  p99 {:>8.3} ms", ms(stats.p50), ms(stats.p99))
}

/// An approver that allows at once (a destination the task was granted), or, with a channel,
/// one that waits for the bench to answer (a held request).
struct BenchApprover(Option<tokio::sync::mpsc::UnboundedSender<tokio::sync::oneshot::Sender<()>>>);

impl nexbot_egress::Approver for BenchApprover {
    fn approve(&self, _: nexbot_egress::ApprovalRequest) -> nexbot_egress::ApprovalFuture {
        let Some(asks) = &self.0 else {
            return Box::pin(async { nexbot_egress::Approval::Allow });
        };
        let (tx, rx) = tokio::sync::oneshot::channel();
        let _ = asks.send(tx);
        Box::pin(async move {
            match rx.await {
                Ok(()) => nexbot_egress::Approval::Allow,
                Err(_) => nexbot_egress::Approval::Refuse("bench ended".into()),
            }
        })
    }
}

async fn ask_figures(web: std::net::SocketAddr, url: &str) {
    let listener = |mode: Option<nexbot_egress::EgressMode>, rule: bool| {
        let mut config = EgressConfig { mode, ..EgressConfig::default() };
        config.proxy.allow_internal = vec![InternalAllow {
            cidr: Cidr::try_from(web.ip().to_string()).unwrap(),
            ports: vec![web.port()],
        }];
        if rule {
            config.allow = vec![nexbot_egress::AllowRule::try_from(web.to_string()).unwrap()];
        }
        config.max_connections_per_source = 1024;
        start(config, None)
    };
    let get = |client: reqwest::Client| async move {
        client.get(url).send().await.unwrap().bytes().await.unwrap();
    };
    let open = listener(Some(nexbot_egress::EgressMode::Open), false).await;
    let open_client = open.proxy_client();
    let open_samples = timed(|| get(open_client.clone())).await;
    let ruled = listener(Some(nexbot_egress::EgressMode::Ask), true).await;
    let ruled_client = ruled.proxy_client();
    let ruled_samples = timed(|| get(ruled_client.clone())).await;
    let granted = listener(Some(nexbot_egress::EgressMode::Ask), false).await;
    granted.egress.set_approver(std::sync::Arc::new(BenchApprover(None)));
    let granted_client = granted.proxy_client();
    let granted_samples = timed(|| get(granted_client.clone())).await;
    let (open_p50, ruled_p50, granted_p50) =
        (p50(&open_samples), p50(&ruled_samples), p50(&granted_samples));
    let p99 = |s: &[Duration]| {
        let mut s = s.to_vec();
        s.sort();
        s[((s.len() as f64 - 1.0) * 0.99).round() as usize]
    };
    let (open_p99, ruled_p99, granted_p99) =
        (p99(&open_samples), p99(&ruled_samples), p99(&granted_samples));
    println!("  HTTP GET, mode open                     {}", percentiles(open_samples));
    println!("  HTTP GET, mode ask, an allow rule       {}", percentiles(ruled_samples));
    println!("  HTTP GET, mode ask, granted (approver)  {}", percentiles(granted_samples));
    record(Figure::reference(
        "  egress ask: an allowed request, ask (rule / granted) vs open, p50",
        &format!("{:.3} / {:.3} vs {:.3} ms", ms(ruled_p50), ms(granted_p50), ms(open_p50)),
        "(loopback, keep-alive)",
    ));
    record(Figure::reference(
        "  egress ask: an allowed request, ask (rule / granted) vs open, p99",
        &format!("{:.3} / {:.3} vs {:.3} ms", ms(ruled_p99), ms(granted_p99), ms(open_p99)),
        "(loopback, keep-alive)",
    ));

    // A held request: the time from the answer to the first byte of the response.
    let held = listener(Some(nexbot_egress::EgressMode::Ask), false).await;
    let (tx, mut asks) = tokio::sync::mpsc::unbounded_channel();
    held.egress.set_approver(std::sync::Arc::new(BenchApprover(Some(tx))));
    let client = held.proxy_client();
    let mut samples = Vec::with_capacity(100);
    for _ in 0..100 {
        let client = client.clone();
        let url = url.to_owned();
        let request = tokio::spawn(async move { client.get(url).send().await.unwrap() });
        let answer = asks.recv().await.unwrap();
        let pressed = Instant::now();
        answer.send(()).unwrap();
        let response = request.await.unwrap();
        samples.push(pressed.elapsed());
        response.bytes().await.unwrap();
    }
    let (answer_p50, answer_p99) = (p50(&samples), p99(&samples));
    println!("  held GET, answer -> response head       {}", percentiles(samples));
    record(Figure::reference(
        "  egress ask: answer of a held request -> its response head, p50 / p99",
        &format!("{:.3} / {:.3} ms", ms(answer_p50), ms(answer_p99)),
        "(in-process approver; the Telegram press adds the Bot API's poll)",
    ));
}
