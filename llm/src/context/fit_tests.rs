//! What [`super::fit`] keeps when a turn's own tool result is too big: the question, the call
//! and a cut result that is still what it was (JSON stays JSON), before any history goes.

use serde_json::{json, Value};

use super::*;
use crate::wire::{FunctionCall, ToolCall, ToolSpec};

fn call(ids: &[&str], name: &str) -> ChatMessage {
    ChatMessage {
        role: "assistant".into(),
        content: None,
        tool_calls: ids
            .iter()
            .map(|id| ToolCall {
                id: (*id).into(),
                kind: "function".into(),
                function: FunctionCall { name: name.into(), arguments: r#"{"q":"x"}"#.into() },
            })
            .collect(),
        tool_call_id: None,
        images: Vec::new(),
    }
}

fn tokens(messages: &[ChatMessage]) -> u64 {
    messages.iter().map(message_tokens).sum()
}

/// 50 MCP tools with schemas of a realistic size, as the main agent offers them.
fn fifty_tools() -> Vec<ToolSpec> {
    (0..50)
        .map(|i| {
            let parameters = json!({
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": "What to look for, in words."},
                    "limit": {"type": "integer", "description": "At most this many results."},
                    "cursor": {"type": "string", "description": "Where the last page ended."},
                },
                "required": ["query"],
            });
            let description = format!("mcp server tool {i}: searches the records of the server");
            ToolSpec::function(&format!("mcp__server__tool_{i}"), &description, parameters)
        })
        .collect()
}

/// A JSON document of about `bytes` bytes, as an MCP server answers a search.
fn json_result(bytes: usize) -> String {
    let mut items = Vec::new();
    let mut size = 0;
    let mut i = 0;
    loop {
        let item =
            json!({"id": i, "title": format!("record \"{i}\""), "body": "lorem ipsum ".repeat(20)});
        size += item.to_string().len() + 1;
        if size > bytes {
            break;
        }
        items.push(item);
        i += 1;
    }
    json!({"results": items, "total": i}).to_string()
}

#[test]
fn the_reported_case_keeps_the_question_and_a_json_result_that_says_it_was_cut() {
    // The main agent's budget: the default window less the answer's room and 50 tools' schema.
    let tools = serde_json::to_vec(&fifty_tools()).unwrap().len();
    let budget = 32_768 - 4_096 - estimate_tokens(tools);
    let question = "Which records of the server mention the invoice from March?";
    let result = json_result(64 * 1024 - 40);
    assert!(result.len() > 63 * 1024 && result.len() <= 64 * 1024);
    let mut m = vec![
        ChatMessage::system("You are Nexbot. ".repeat(300)),
        ChatMessage::user("hello"),
        ChatMessage::assistant("Hello! How can I help?"),
        ChatMessage::user(question),
        call(&["c1"], "mcp__server__tool_7"),
        ChatMessage::tool("c1", result.clone()),
    ];
    let f = fit(&mut m, budget);
    assert!(f.tokens <= budget && tokens(&m) <= budget, "{f:?} budget {budget}");
    // Nothing had to go: cutting the result made room.
    assert_eq!((f.dropped, m.len()), (0, 6), "{f:?}");
    assert!(m.iter().any(|x| x.role == "user" && x.content_str() == question), "{m:?}");
    assert_eq!(m[4].tool_calls[0].id, "c1");
    let cut: Value = serde_json::from_str(m[5].content_str()).expect("the cut result is JSON");
    assert_eq!(cut["original_bytes"], result.len(), "{cut}");
    let shown = cut["shown_bytes"].as_u64().unwrap() as usize;
    assert!(shown > 30_000 && shown < result.len(), "only as much as needed is cut: {cut}");
    assert!(cut["cut"].as_str().unwrap().contains("tool result cut"), "{cut}");
    assert_eq!(cut["head"].as_str().unwrap(), &result[..shown]);
}

#[test]
fn the_largest_result_is_cut_first_and_only_as_far_as_needed() {
    let big = "é".repeat(15_000); // 30,000 bytes, two a character
    let mut m = vec![
        ChatMessage::system("sys"),
        ChatMessage::user("q"),
        call(&["a", "b", "c"], "f"),
        ChatMessage::tool("a", big.clone()),
        ChatMessage::tool("b", "b".repeat(5_000)),
        ChatMessage::tool("c", "c".repeat(2_000)),
    ];
    let budget = tokens(&m) - 3_000; // about 9,000 bytes too many
    let f = fit(&mut m, budget);
    assert!(f.tokens <= budget && f.dropped == 0 && f.cut == 1, "{f:?}");
    assert_eq!(m[4].content_str().len(), 5_000, "the smaller results are whole");
    assert_eq!(m[5].content_str().len(), 2_000);
    let a = m[3].content_str();
    let (kept, note) = a.split_once('\n').unwrap();
    assert!(big.starts_with(kept) && kept.len() > 20_000, "cut at a character boundary");
    assert_eq!(note, format!("[tool result cut: {} of 30000 bytes shown]", kept.len()));
}

#[test]
fn results_are_cut_before_history_goes_and_the_question_never_goes() {
    let mut m = vec![ChatMessage::system("sys")];
    for i in 0..10 {
        m.push(ChatMessage::user(format!("old question {i} {}", "x".repeat(1_000))));
        m.push(ChatMessage::assistant(format!("old answer {i} {}", "y".repeat(1_000))));
    }
    m.push(ChatMessage::user("the question"));
    m.push(call(&["c1"], "f"));
    m.push(ChatMessage::tool("c1", "r".repeat(20_000)));
    m.push(call(&["c2"], "f"));
    m.push(ChatMessage::tool("c2", "z".repeat(100_000)));
    let f = fit(&mut m, 8_000);
    assert!(f.tokens <= 8_000 && f.dropped > 0, "{f:?}");
    let q = m.iter().position(|x| x.content_str() == "the question").expect("the question");
    assert_eq!(m[q].role, "user");
    let n = m.len();
    assert_eq!(m[n - 2].tool_calls[0].id, "c2", "{m:?}");
    // The last result was cut down to a quarter of the budget, not further, before history
    // went; the oldest history went first.
    let last = m[n - 1].content_str();
    assert!(last.starts_with("zzz") && last.contains("of 100000 bytes shown]"), "{last:.80}");
    assert!(last.len() >= 5_900, "{}", last.len());
    assert!(m.iter().all(|x| !x.content_str().starts_with("old question 0 ")), "{m:?}");
    for i in 1..n {
        if m[i].role == "tool" {
            assert!(!m[i - 1].tool_calls.is_empty() || m[i - 1].role == "tool", "{m:?}");
        }
    }
}

#[test]
fn as_a_last_resort_the_question_is_cut_only_when_it_alone_is_too_big() {
    // Only kept messages left: the system prompt and the result are cut, the question is not.
    let question = format!("the question {}", "q".repeat(900));
    let mut m = vec![
        ChatMessage::system("s".repeat(2_000)),
        ChatMessage::user(question.clone()),
        call(&["c"], "f"),
        ChatMessage::tool("c", json_result(200_000)),
    ];
    let f = fit(&mut m, 600);
    assert!(f.tokens <= 600 && f.dropped == 0, "{f:?}");
    assert_eq!(m[1].content_str(), question);
    let cut: Value = serde_json::from_str(m[3].content_str()).expect("still JSON");
    assert!(cut["shown_bytes"].as_u64().unwrap() < 256, "{cut}");
    // A question bigger than the whole budget is cut, with a note.
    let mut m = vec![ChatMessage::system("sys"), ChatMessage::user("u".repeat(100_000))];
    let f = fit(&mut m, 2_000);
    assert!(f.tokens <= 2_000, "{f:?}");
    assert!(m[1].content_str().ends_with(" of 100000 bytes shown]"), "{:?}", m[1]);
    assert!(m[1].content_str().len() > 5_000, "the question takes what is left");
}

#[test]
fn a_result_cut_again_still_names_its_original_size() {
    let result = json_result(50_000);
    let mut m = vec![
        ChatMessage::system("sys"),
        ChatMessage::user("q"),
        call(&["c"], "f"),
        ChatMessage::tool("c", result.clone()),
    ];
    fit(&mut m, 10_000);
    let first: Value = serde_json::from_str(m[3].content_str()).unwrap();
    fit(&mut m, 3_000);
    let second: Value = serde_json::from_str(m[3].content_str()).unwrap();
    assert_eq!(second["original_bytes"], result.len(), "{second}");
    assert!(second["shown_bytes"].as_u64() < first["shown_bytes"].as_u64(), "{second}");
    assert!(result.starts_with(second["head"].as_str().unwrap()));
    // Text too: the second note counts from the original.
    let text = "t".repeat(1_000);
    assert_eq!(
        cut_text(&cut_text(&text, 100, "x"), 50, "x"),
        format!("{}\n[x cut: 50 of 1000 bytes shown]", &text[..50])
    );
}

#[test]
fn the_question_is_the_users_message_not_the_pictures_tool_answers_returned() {
    let picture = crate::wire::Image { mime: "image/png".into(), data: Default::default() };
    let m = vec![
        ChatMessage::system("You are Nexbot."),
        ChatMessage::user("what does the page look like?"),
        call(&["c1"], "mcp__browser__browser_take_screenshot"),
        ChatMessage::tool("c1", "saved"),
        ChatMessage::tool_pictures(vec![picture]),
    ];
    assert!(m[4].is_tool_pictures() && !m[1].is_tool_pictures());
    assert_eq!(m[4].images.len(), 1);
    assert_eq!(question(&m), Some(1));
    let kept = kept_messages(&m, 1);
    assert_eq!(
        kept,
        [true, true, true, true, true],
        "the question, the call, its answer, the last"
    );
    let kept = kept_messages(&m[..4], 0);
    assert!(kept[1], "{kept:?}");
}
