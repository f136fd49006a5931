//! The first implementation's examples (`docs/protocol-history.md#examples`) round-trip unchanged.

use nexbot_protocol::{Request, RequestType, Response, ResponseBody};
use secrecy::ExposeSecret;
use serde_json::Value;

const REQUESTS: &[&str] = &[
    r#"{"version": "1.0", "type": "ping", "id": "check-123"}"#,
    r#"{
     "version": "1.0",
     "type": "execute",
     "id": "task-uuid",
     "task": "Fetch https://example.com/data",
     "timeout": 60,
     "secrets": {"API_KEY": "secret"},
     "llm_api_key": "zai-key"
   }"#,
];

const RESPONSES: &[&str] = &[
    r#"{"id": "check-123", "status": "pong", "version": "1.0"}"#,
    r#"{"id": "task-uuid", "status": "success", "result": "...", "version": "1.0"}"#,
    r#"{"id": "task-uuid", "status": "error", "error": "...", "version": "1.0"}"#,
];

fn assert_round_trip<T: serde::de::DeserializeOwned + serde::Serialize>(json: &str) -> T {
    let original: Value = serde_json::from_str(json).unwrap();
    let parsed: T = serde_json::from_str(json).unwrap_or_else(|e| panic!("{json}: {e}"));
    let again: Value = serde_json::to_value(&parsed).unwrap();
    assert_eq!(original, again, "round trip changed {json}");
    parsed
}

#[test]
fn seed_requests_round_trip() {
    for json in REQUESTS {
        assert_round_trip::<Request>(json);
    }
}

#[test]
fn seed_responses_round_trip() {
    for json in RESPONSES {
        assert_round_trip::<Response>(json);
    }
}

#[test]
fn seed_execute_fields_land_where_expected() {
    let req: Request = serde_json::from_str(REQUESTS[1]).unwrap();
    assert_eq!(req.kind, RequestType::Execute);
    assert_eq!(req.timeout, Some(60));
    assert_eq!(req.task.as_deref(), Some("Fetch https://example.com/data"));
    let secrets = req.secrets.as_ref().unwrap();
    assert_eq!(secrets.get("API_KEY").unwrap().expose_secret(), "secret");
    assert_eq!(req.llm_api_key.as_ref().unwrap().expose_secret(), "zai-key");
    // The seed's 6-byte example secret still parses, but is refused since secrets must be at
    // least 8 bytes (docs/protocol-history.md, version history): a value that short cannot be
    // redacted.
    let err = req.validate(0).unwrap_err();
    assert_eq!(err.id, "task-uuid");
    assert_eq!(
        err.to_string(),
        "secrets validation: secret API_KEY is too short: 6 bytes (at least 8); \
         a value that short cannot be redacted from output without destroying it"
    );
    let mut long_enough = req.clone();
    let mut secrets = long_enough.secrets.take().unwrap();
    secrets.insert("API_KEY", secrecy::SecretString::from("secret-value".to_owned()));
    long_enough.secrets = Some(secrets);
    assert!(long_enough.validate(0).is_ok());
}

#[test]
fn seed_go_style_responses_with_empty_correlation_id_parse() {
    // The first (Go) implementation always wrote `correlation_id`, empty when unset.
    let line = r#"{"id":"a","correlation_id":"","version":"1.0","status":"success","result":"x"}"#;
    let resp: Response = serde_json::from_str(line).unwrap();
    assert_eq!(resp.correlation_id.as_deref(), Some(""));
    assert!(matches!(resp.body, ResponseBody::Success { ref result, .. } if result == "x"));
}

#[test]
fn full_v1_execute_round_trips() {
    let json = r#"{"version":"1.0","id":"t1","correlation_id":"c1","type":"execute","task":"do",
        "context":"ctx","tools":["web_fetch","run_command"],"timeout":30,"deadline":1999999999,
        "secrets":{"A":"value-of-a","B_2":"value-of-b2"},"llm_base_url":"http://10.0.0.1:8080/v1",
        "llm_model":"m","llm_token":"tok"}"#;
    let req: Request = assert_round_trip(json);
    assert_eq!(req.tools.as_deref().unwrap().len(), 2);
}

#[test]
fn timeout_response_with_report_round_trips() {
    let json = r#"{"id":"t","version":"1.0","status":"timeout","error":"soft timeout after 5s",
      "report":{"status":"timeout","task_id":"t","error":"soft timeout after 5s",
      "note":"Sub-agent did not finish the task. Use partial results below.","timeout_secs":5,
      "tokens":77,"todos":[{"content":"fetch","status":"done"}],
      "recent_messages":[{"role":"assistant","content":"working"}]}}"#;
    assert_round_trip::<Response>(json);
    let pong = r#"{"id":"p","version":"1.0","status":"pong",
      "capabilities":{"tools":["web_fetch"],"busy":true,"task_id":"t"}}"#;
    assert_round_trip::<Response>(pong);
    let progress = r#"{"id":"p","version":"1.0","status":"progress","event":"tool_call","tool":"web_fetch","detail":"GET"}"#;
    assert_round_trip::<Response>(progress);
}

#[test]
fn dropped_tools_on_a_final_answer_round_trip_and_old_answers_still_parse() {
    // The additive field (docs/protocol-history.md, Version history): names the request granted
    // that the subagent does not offer.
    let json = r#"{"id":"t","version":"1.0","status":"success","result":"ok",
      "scrub":{"clean":true,"killed":0,"removed":1},"dropped_tools":["web_search","fetch_url"]}"#;
    let r: Response = assert_round_trip(json);
    assert_eq!(r.dropped_tools, ["web_search", "fetch_url"]);
    let error = r#"{"id":"t","version":"1.0","status":"error","error":"x","dropped_tools":["a"]}"#;
    assert_eq!(assert_round_trip::<Response>(error).dropped_tools, ["a"]);
    // Without the field (every older subagent): none dropped, and nothing is added on the way
    // back out.
    let old: Response =
        assert_round_trip(r#"{"id":"t","version":"1.0","status":"success","result":"ok"}"#);
    assert!(old.dropped_tools.is_empty());
}

#[test]
fn searches_and_open_todos_round_trip_and_old_answers_still_parse() {
    let success = r#"{"id":"t","version":"1.0","status":"success","result":"half",
      "searches":3,"open_todos":[{"content":"summarize","status":"pending"}]}"#;
    let resp: Response = assert_round_trip(success);
    let ResponseBody::Success { searches, open_todos, .. } = resp.body else { panic!() };
    assert_eq!(searches, Some(3));
    assert_eq!(open_todos.len(), 1);
    let report = r#"{"id":"t","version":"1.0","status":"error","error":"e",
      "report":{"status":"error","task_id":"t","error":"e","note":"n","timeout_secs":5,
      "tokens":7,"todos":[],"recent_messages":[],"searches":2}}"#;
    let resp: Response = assert_round_trip(report);
    let ResponseBody::Error { report: Some(report), .. } = resp.body else { panic!() };
    assert_eq!(report.searches, Some(2));
    // An older subagent's answers have neither, and nothing new is written for them.
    let old = r#"{"id":"t","version":"1.0","status":"success","result":"x"}"#;
    let resp: Response = assert_round_trip(old);
    let ResponseBody::Success { searches, open_todos, .. } = resp.body else { panic!() };
    assert_eq!((searches, open_todos.len()), (None, 0));
}
