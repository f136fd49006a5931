//! The scripted LLM fixture itself behaves as the other tests rely on: steps in order,
//! errors with headers, malformed bodies, recording, and a 500 once the script is exhausted.

use nexbot_tests::scripted_llm::{ScriptedLlm, Step};
use serde_json::{json, Value};

/// A minimal HTTP/1.1 POST over a raw socket, so the fixture is tested without any product
/// client.
async fn post(url: &str, body: Value) -> (u16, Vec<(String, String)>, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let rest = url.strip_prefix("http://").unwrap();
    let (host, path) = rest.split_once('/').unwrap();
    let mut stream = tokio::net::TcpStream::connect(host).await.unwrap();
    let body = body.to_string();
    let request = format!(
        "POST /{path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer tok\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut raw = String::new();
    stream.read_to_string(&mut raw).await.unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap();
    let mut lines = head.lines();
    let code = lines.next().unwrap().split(' ').nth(1).unwrap().parse().unwrap();
    let headers = lines
        .filter_map(|l| l.split_once(": "))
        .map(|(k, v)| (k.to_ascii_lowercase(), v.to_owned()))
        .collect();
    (code, headers, body.to_owned())
}

#[tokio::test]
async fn steps_play_in_order_and_requests_are_recorded() {
    let llm = ScriptedLlm::start(vec![
        Step::tool_call("web_fetch", json!({"url": "http://x"})),
        Step::Status {
            code: 429,
            headers: vec![("Retry-After".into(), "1".into())],
            body: "{}".into(),
        },
        Step::Malformed("{not json".into()),
        Step::text("done"),
    ])
    .await;
    let url = format!("{}/chat/completions", llm.base_url());

    let (code, _, body) = post(&url, json!({"model": "m", "messages": []})).await;
    assert_eq!(code, 200);
    let body: Value = serde_json::from_str(body.trim()).unwrap_or_default();
    let call = &body["choices"][0]["message"]["tool_calls"][0]["function"];
    assert_eq!(call["name"], "web_fetch");
    assert_eq!(call["arguments"], r#"{"url":"http://x"}"#);

    let (code, headers, _) = post(&url, json!({})).await;
    assert_eq!(code, 429);
    assert!(headers.iter().any(|(k, v)| k == "retry-after" && v == "1"));

    let (code, _, body) = post(&url, json!({})).await;
    assert_eq!(code, 200);
    assert!(body.contains("{not json"));

    let (_, _, body) = post(&url, json!({"secret": "marker"})).await;
    assert!(body.contains("done"));

    let (code, _, body) = post(&url, json!({})).await;
    assert_eq!(code, 500);
    assert!(body.contains("script exhausted"));

    let recorded = llm.chat_requests();
    assert_eq!(recorded.len(), 5);
    assert_eq!(recorded[0].header("authorization"), Some("Bearer tok"));
    assert_eq!(recorded[3].body["secret"], "marker");
}

#[tokio::test]
async fn responder_answers_after_the_script() {
    let llm = ScriptedLlm::start(vec![]).await;
    llm.set_responder(|body| Step::text(&format!("echo {}", body["n"])));
    let url = format!("{}/chat/completions", llm.base_url());
    for n in 0..3 {
        let (_, _, body) = post(&url, json!({"n": n})).await;
        assert!(body.contains(&format!("echo {n}")), "{body}");
    }
}

#[tokio::test]
async fn handling_time_is_recorded_and_includes_a_scripted_delay() {
    let delay = std::time::Duration::from_millis(300);
    let llm =
        ScriptedLlm::start(vec![Step::text("slow").delayed(delay), Step::text("quick")]).await;
    let url = format!("{}/chat/completions", llm.base_url());

    // While the delayed request is being answered its handling time is not known yet.
    let slow = tokio::spawn({
        let url = url.clone();
        async move { post(&url, json!({"n": 1})).await }
    });
    let in_flight = async {
        while llm.chat_handling_times().is_empty() {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    };
    tokio::time::timeout(std::time::Duration::from_secs(10), in_flight).await.unwrap();
    assert_eq!(llm.chat_handling_times(), [None]);
    let (_, _, body) =
        tokio::time::timeout(std::time::Duration::from_secs(10), slow).await.unwrap().unwrap();
    assert!(body.contains("slow"), "{body}");
    let (_, _, body) = post(&url, json!({"n": 2})).await;
    assert!(body.contains("quick"), "{body}");

    let times = llm.chat_handling_times();
    assert_eq!(times.len(), 2);
    assert!(times[0].unwrap() >= delay, "the scripted delay is the server's own time: {times:?}");
    assert!(times[1].is_some());
    // The same figures are on the full records; other routes are timed too.
    let recorded = llm.chat_requests();
    assert_eq!(recorded.iter().map(|r| r.handling).collect::<Vec<_>>(), times);
    let models = get(&format!("{}/models", llm.base_url())).await;
    assert!(models.contains("scripted"), "{models}");
    let all = llm.requests();
    assert_eq!(all.len(), 3);
    assert!(all[2].path.ends_with("/models") && all[2].handling.is_some());
}

/// A minimal HTTP/1.1 GET over a raw socket (see [`post`]).
async fn get(url: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let rest = url.strip_prefix("http://").unwrap();
    let (host, path) = rest.split_once('/').unwrap();
    let mut stream = tokio::net::TcpStream::connect(host).await.unwrap();
    let request = format!("GET /{path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut raw = String::new();
    stream.read_to_string(&mut raw).await.unwrap();
    raw
}
