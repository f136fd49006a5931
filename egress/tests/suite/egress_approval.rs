//! `egress.mode`: in `ask` a destination no rule covers is held — the client's connection
//! (CONNECT or absolute-form) stays open — while the approver is asked; allowed, it proceeds
//! as if allowed all along; refused, unanswered in time, its task ended or the proxy stopped,
//! it is refused with a reason the client reads. The deny list and the address rules win
//! first, without a question. `allowlist` refuses what no rule allows, without asking.

use egress_support::allow;
use nexbot_tests::egress as egress_support;

use std::net::SocketAddr;
use std::sync::Arc;

use egress_support::{connect, echo_server, http_server, start, web_echo_server, Started, WAIT};
use nexbot_egress::{
    AllowRule, Approval, ApprovalFuture, ApprovalRequest, Approver, Binding, Credential,
    EgressConfig, EgressMode, HostPattern,
};
use secrecy::SecretString;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot};

/// An approver the test answers by hand: each question arrives with a sender for its answer.
struct ByHand(mpsc::UnboundedSender<(ApprovalRequest, oneshot::Sender<Approval>)>);

impl Approver for ByHand {
    fn approve(&self, request: ApprovalRequest) -> ApprovalFuture {
        let (tx, rx) = oneshot::channel();
        let _ = self.0.send((request, tx));
        // A dropped sender (a test that never answers) is an approver that never answers.
        Box::pin(async move {
            match rx.await {
                Ok(answer) => answer,
                Err(_) => std::future::pending().await,
            }
        })
    }
}

type Questions = mpsc::UnboundedReceiver<(ApprovalRequest, oneshot::Sender<Approval>)>;

async fn ask_mode(
    edit: impl FnOnce(&mut EgressConfig),
    servers: &[SocketAddr],
) -> (Started, Questions) {
    let mut config = EgressConfig { mode: Some(EgressMode::Ask), ..EgressConfig::default() };
    config.proxy.allow_internal = servers.iter().copied().map(allow).collect();
    edit(&mut config);
    let started = start(config, None).await;
    let (tx, rx) = mpsc::unbounded_channel();
    started.egress.set_approver(Arc::new(ByHand(tx)));
    (started, rx)
}

async fn next(questions: &mut Questions) -> (ApprovalRequest, oneshot::Sender<Approval>) {
    tokio::time::timeout(WAIT, questions.recv()).await.expect("a question").expect("open")
}

#[tokio::test]
async fn a_held_tunnel_proceeds_when_allowed_and_a_held_request_is_refused_with_the_reason() {
    let (echo, accepted) = echo_server().await;
    let (web, seen) = http_server().await;
    let (started, mut questions) = ask_mode(|_| {}, &[echo, web]).await;
    let proxy = started.egress.local_addr();

    // CONNECT: held (the echo server has accepted nothing) until the answer.
    let tunnel = tokio::spawn(async move { connect(proxy, &echo.to_string()).await });
    let (asked, answer) = next(&mut questions).await;
    assert_eq!(
        (asked.task_id.as_str(), asked.host.as_str(), asked.port, asked.method.as_str()),
        ("t-1", "127.0.0.1", echo.port(), "CONNECT")
    );
    assert_eq!((asked.path, asked.secret), (None, false));
    assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 0, "held, not dialled");
    answer.send(Approval::Allow).unwrap();
    let (code, mut stream) = tokio::time::timeout(WAIT, tunnel).await.unwrap().unwrap();
    assert_eq!(code, 200);
    stream.write_all(b"ping").await.unwrap();
    let mut echoed = [0u8; 4];
    tokio::time::timeout(WAIT, stream.read_exact(&mut echoed)).await.unwrap().unwrap();
    assert_eq!(&echoed, b"ping");

    // Absolute-form: the approver reads the method and the path without its query.
    let client = started.proxy_client();
    let url = format!("http://{web}/hello/there?token=abc");
    let request = tokio::spawn(async move { client.post(url).body("x").send().await });
    let (asked, answer) = next(&mut questions).await;
    assert_eq!(
        (asked.method.as_str(), asked.path.as_deref(), asked.port),
        ("POST", Some("/hello/there"), web.port())
    );
    answer.send(Approval::Refuse(nexbot_egress::DENIED_BY_USER.to_owned())).unwrap();
    let response = tokio::time::timeout(WAIT, request).await.unwrap().unwrap().unwrap();
    assert_eq!(response.status(), 403);
    let body = response.text().await.unwrap();
    assert!(body.contains("denied by the user"), "{body}");
    assert!(seen.lock().unwrap().is_empty(), "nothing reached the server");
    let lines = started.audit_lines(1).await;
    let line = lines.iter().find(|l| l["port"] == web.port()).expect("audited");
    assert_eq!(line["verdict"], "denied");
    assert!(line["reason"].as_str().unwrap().starts_with("not_approved:"), "{line}");
}

#[tokio::test]
async fn no_answer_in_time_refuses_and_the_deny_list_and_address_rules_never_ask() {
    let (web, _) = http_server().await;
    let (started, mut questions) = ask_mode(
        |config| {
            config.approval_timeout_secs = 1;
            config.proxy.deny_domains =
                vec![HostPattern::try_from("127.0.0.2".to_owned()).unwrap()];
        },
        &[web],
    )
    .await;
    let proxy = started.egress.local_addr();
    // The approver takes the question and never answers.
    let client = started.proxy_client();
    let response = client.get(format!("http://{web}/")).send().await.unwrap();
    assert_eq!(response.status(), 403);
    let body = response.text().await.unwrap();
    assert!(body.contains("no answer"), "{body}");
    let (_asked, _never) = next(&mut questions).await;

    // Internal addresses, a port no rule opens, a denied pattern: refused by
    // the rules that always win, with no question.
    for target in ["10.1.2.3:443", "127.0.0.1:22", "127.0.0.2:443"] {
        let (code, _) = connect(proxy, target).await;
        assert_eq!(code, 403, "{target}");
    }
    assert!(questions.try_recv().is_err(), "nothing was asked about them");
}

#[tokio::test]
async fn allow_rules_pass_without_a_question_and_allowlist_refuses_the_rest_silently() {
    let (echo, _) = echo_server().await;
    let (web, _) = http_server().await;
    let rule = AllowRule::try_from(format!("127.0.0.1:{}", echo.port())).unwrap();
    let (started, mut questions) = ask_mode(|c| c.allow = vec![rule.clone()], &[echo, web]).await;
    let (code, _) = connect(started.egress.local_addr(), &echo.to_string()).await;
    assert_eq!(code, 200, "a rule covers it");
    assert!(questions.try_recv().is_err());
    drop(started);

    let (started, mut questions) = ask_mode(
        |c| {
            c.mode = Some(EgressMode::Allowlist);
            c.allow = vec![rule];
        },
        &[echo, web],
    )
    .await;
    let proxy = started.egress.local_addr();
    assert_eq!(connect(proxy, &echo.to_string()).await.0, 200);
    let response = started.proxy_client().get(format!("http://{web}/")).send().await.unwrap();
    assert_eq!(response.status(), 403);
    let body = response.text().await.unwrap();
    assert!(body.contains("not_allowed") && body.contains("allowlist"), "{body}");
    assert!(questions.try_recv().is_err(), "allowlist never asks");
}

#[tokio::test]
async fn a_held_request_is_refused_when_its_task_ends_or_the_proxy_stops() {
    let (web, _) = http_server().await;
    let (echo, _) = echo_server().await;
    let (started, mut questions) = ask_mode(|_| {}, &[web, echo]).await;
    let client = started.proxy_client();
    let url = format!("http://{web}/");
    let request = tokio::spawn(async move { client.get(url).send().await });
    let (_asked, _answer) = next(&mut questions).await;
    started.egress.finish_task("t-1");
    let response = tokio::time::timeout(WAIT, request).await.unwrap().unwrap().unwrap();
    assert_eq!(response.status(), 403);
    assert!(response.text().await.unwrap().contains("task ended"));

    started.run_task("t-2");
    let proxy = started.egress.local_addr();
    let held = tokio::spawn(async move { connect(proxy, &echo.to_string()).await.0 });
    let (asked, _answer) = next(&mut questions).await;
    assert_eq!(asked.task_id, "t-2");
    let Started { egress, .. } = started;
    let stopping = tokio::spawn(egress.shutdown(WAIT));
    let code = tokio::time::timeout(WAIT, held).await.expect("never a hang").unwrap();
    assert_eq!(code, 403);
    stopping.await.unwrap();
}

/// A proxy-mode secret stored with `--confirm`: the request that would carry it is held at
/// the point it would be filled in and the approver is asked, naming the secret (never its
/// value); a refusal refuses the request (it is never sent, with or without the value), an
/// allow fills it in. A request that carries no placeholder asks nothing.
#[tokio::test]
async fn a_confirm_secret_is_filled_in_only_after_the_approver_allows_it() {
    const VALUE: &str = "ghp_CONFIRM-planted-value-0123456789";
    let (web, seen) = web_echo_server("127.0.0.1".parse().unwrap()).await;
    // `open`: the destination itself asks nothing; only the secret does.
    let (started, mut questions) = ask_mode(|c| c.mode = Some(EgressMode::Open), &[web]).await;
    let bound = vec![Binding::parse("127.0.0.1").unwrap()];
    let token = Credential::new("GH_TOKEN", SecretString::from(VALUE), bound).confirmed_first();
    started.egress.credentials().grant("t-1", vec![token]).unwrap();
    let client = started.proxy_client();
    let send = |client: reqwest::Client, path: &'static str| {
        let request =
            client.get(format!("http://{web}{path}")).header("x-token", "{{secret:GH_TOKEN}}");
        tokio::spawn(request.send())
    };

    // Denied: refused with the reason, nothing reached the server.
    let denied = send(client.clone(), "/denied");
    let (asked, answer) = next(&mut questions).await;
    assert_eq!(asked.secret_name.as_deref(), Some("GH_TOKEN"));
    assert_eq!((asked.task_id.as_str(), asked.port, asked.secret), ("t-1", web.port(), true));
    assert_eq!(asked.path.as_deref(), Some("/denied"));
    assert!(!format!("{asked:?}").contains(VALUE), "the question never holds the value");
    assert!(seen.lock().unwrap().is_empty(), "held, not sent");
    answer.send(Approval::Refuse(nexbot_egress::DENIED_BY_USER.to_owned())).unwrap();
    let response = tokio::time::timeout(WAIT, denied).await.unwrap().unwrap().unwrap();
    assert_eq!(response.status(), 403);
    let body = response.text().await.unwrap();
    assert!(body.contains("secret_not_confirmed") && body.contains("GH_TOKEN"), "{body}");
    assert!(body.contains("denied by the user") && !body.contains(VALUE), "{body}");
    assert!(seen.lock().unwrap().is_empty(), "never sent without the value either");

    // Allowed: the value goes in.
    let allowed = send(client.clone(), "/allowed");
    let (_, answer) = next(&mut questions).await;
    answer.send(Approval::Allow).unwrap();
    let response = tokio::time::timeout(WAIT, allowed).await.unwrap().unwrap().unwrap();
    assert_eq!(response.status(), 200);
    let got = seen.lock().unwrap().clone();
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].header("x-token"), Some(VALUE));

    // No placeholder: nothing to fill, nothing asked.
    let plain = client.get(format!("http://{web}/plain")).send().await.unwrap();
    assert_eq!(plain.status(), 200);
    assert!(questions.try_recv().is_err(), "no question without the secret");
    let audit = std::fs::read_to_string(started.egress.audit_path()).unwrap_or_default();
    assert!(!audit.contains(VALUE), "the audit never holds the value");
}
