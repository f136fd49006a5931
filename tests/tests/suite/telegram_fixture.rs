//! The Telegram fixture itself (`nexbot_tests::telegram`): that its Bot API keeps Telegram's
//! semantics where the emulator behind it does not (getMe, offsets, long polling, HTML
//! parsing, edits, files) and that its faults really happen, so the bot's end-to-end tests can
//! trust what they see. Plain HTTP here: the product's client is not a dependency.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use nexbot_tests::telegram::{ChatType, Fault, MessageKind, TelegramFixture, UserMessage};
use serde_json::{json, Value};

/// One Bot API call with a JSON body: the HTTP status and the parsed answer.
async fn api(fx: &TelegramFixture, method: &str, body: Value) -> (u16, Value) {
    let response = reqwest::Client::new()
        .post(fx.method_url(method))
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(body.to_string())
        .timeout(Duration::from_secs(30))
        .send()
        .await
        .expect("the fixture answers");
    let status = response.status().as_u16();
    let text = response.text().await.expect("a body");
    let value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{method}: {e}: {text}"));
    (status, value)
}

/// `api` for calls that must succeed: the `result`.
async fn ok(fx: &TelegramFixture, method: &str, body: Value) -> Value {
    let (status, answer) = api(fx, method, body).await;
    assert_eq!(status, 200, "{method}: {answer}");
    assert_eq!(answer["ok"], true, "{method}: {answer}");
    answer["result"].clone()
}

fn now_s() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs() as i64
}

fn ids(updates: &Value) -> Vec<i64> {
    updates.as_array().unwrap().iter().map(|u| u["update_id"].as_i64().unwrap()).collect()
}

#[tokio::test]
async fn get_me_is_a_complete_user_and_method_names_are_case_insensitive() {
    let fx = TelegramFixture::start().await;
    let me = ok(&fx, "GetMe", json!({})).await;
    let id: i64 = fx.token().split(':').next().unwrap().parse().unwrap();
    assert_eq!(me["id"], id);
    assert_eq!(me["is_bot"], true);
    assert_eq!(me["username"], "nexbot_test_bot");
    assert!(me["first_name"].as_str().is_some_and(|n| !n.is_empty()));
    for (field, value) in [
        ("can_join_groups", true),
        ("can_read_all_group_messages", false),
        ("supports_inline_queries", false),
        ("can_connect_to_business", false),
        ("has_main_web_app", false),
    ] {
        assert_eq!(me[field], value, "{field} in {me}");
    }
    fx.set_bot_username("other_bot").await;
    assert_eq!(ok(&fx, "getme", json!({})).await["username"], "other_bot");
    let calls = fx.calls("getMe").await;
    assert_eq!(calls.len(), 2);
    assert!(calls.iter().all(|c| c.method == "getme" && c.status == 200));
}

#[tokio::test]
async fn get_updates_offset_confirms_and_unconfirmed_updates_come_again() {
    let fx = TelegramFixture::start().await;
    let a = fx.user_says(42, 42, "/start now").await;
    let b = fx.user_says(42, 42, "second").await;
    let c = fx.user_says(-100, 42, "in a group").await;
    assert!(a.update_id < b.update_id && b.update_id < c.update_id);
    assert!(a.message_id < b.message_id && b.message_id < c.message_id);

    let all = ok(&fx, "getUpdates", json!({})).await;
    assert_eq!(ids(&all), [a.update_id, b.update_id, c.update_id]);
    let first = &all[0]["message"];
    assert_eq!(first["message_id"], a.message_id);
    assert_eq!(first["text"], "/start now");
    assert_eq!(
        first["chat"],
        json!({"id": 42, "type": "private", "first_name": "Test", "username": "user42"})
    );
    assert_eq!(first["from"]["id"], 42);
    assert_eq!(first["from"]["is_bot"], false);
    assert!(first["from"]["first_name"].is_string());
    assert!((first["date"].as_i64().unwrap() - now_s()).abs() < 60, "date in seconds: {first}");
    assert_eq!(first["entities"], json!([{"offset": 0, "length": 6, "type": "bot_command"}]));
    assert!(all[1]["message"].get("entities").is_none(), "no command, no entities");
    assert_eq!(all[2]["message"]["chat"]["type"], "group");
    assert_eq!(all[2]["message"]["chat"]["id"], -100);

    // Nothing confirmed yet: the same updates again; limit cuts the answer.
    assert_eq!(ids(&ok(&fx, "getUpdates", json!({})).await), ids(&all));
    assert_eq!(ids(&ok(&fx, "getUpdates", json!({"limit": 1})).await), [a.update_id]);
    // offset confirms every smaller id, for good.
    let rest = ok(&fx, "getUpdates", json!({"offset": b.update_id})).await;
    assert_eq!(ids(&rest), [b.update_id, c.update_id]);
    assert_eq!(ids(&ok(&fx, "getUpdates", json!({})).await), [b.update_id, c.update_id]);
    let none = ok(&fx, "getUpdates", json!({"offset": c.update_id + 1})).await;
    assert_eq!(none, json!([]));
    assert_eq!(ok(&fx, "getUpdates", json!({})).await, json!([]));
    assert!(fx.pending_updates().await.is_empty());
    // Form-encoded bodies (and string numbers) work the same.
    let d = fx.user_says(42, 42, "third").await;
    let form = reqwest::Client::new()
        .post(fx.method_url("getUpdates"))
        .header(reqwest::header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(format!("offset={}&limit=5", d.update_id))
        .send()
        .await
        .unwrap();
    let form: Value = serde_json::from_str(&form.text().await.unwrap()).unwrap();
    assert_eq!(ids(&form["result"]), [d.update_id]);
}

#[tokio::test]
async fn long_polling_waits_for_timeout_and_returns_early_on_a_message() {
    let fx = TelegramFixture::start().await;
    let started = Instant::now();
    assert_eq!(ok(&fx, "getUpdates", json!({"timeout": 1})).await, json!([]));
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(900), "held open for the timeout: {waited:?}");
    assert!(waited < Duration::from_secs(3), "not much longer: {waited:?}");

    let started = Instant::now();
    let poll = {
        let url = fx.method_url("getUpdates");
        tokio::spawn(async move {
            let response = reqwest::Client::new()
                .post(url)
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(json!({"timeout": 20}).to_string())
                .send()
                .await
                .unwrap();
            serde_json::from_str::<Value>(&response.text().await.unwrap()).unwrap()
        })
    };
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(!poll.is_finished(), "the poll waits while there is nothing");
    let sent = fx.user_says(7, 7, "wake up").await;
    let answer = tokio::time::timeout(Duration::from_secs(5), poll).await.unwrap().unwrap();
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(ids(&answer["result"]), [sent.update_id]);
    assert_eq!(answer["result"][0]["message"]["text"], "wake up");
}

#[tokio::test]
async fn a_second_get_updates_ends_the_held_one_with_409() {
    let fx = TelegramFixture::start().await;
    let url = fx.method_url("getUpdates");
    let held = tokio::spawn(async move {
        let response = reqwest::Client::new()
            .post(url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(json!({"timeout": 20}).to_string())
            .send()
            .await
            .unwrap();
        (response.status().as_u16(), response.text().await.unwrap())
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(ok(&fx, "getUpdates", json!({})).await, json!([]));
    let (status, body) = tokio::time::timeout(Duration::from_secs(5), held).await.unwrap().unwrap();
    assert_eq!(status, 409, "{body}");
    let body: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body["ok"], false);
    assert_eq!(body["error_code"], 409);
    assert!(body["description"].as_str().unwrap().starts_with("Conflict: terminated by other"));
}

#[tokio::test]
async fn send_message_parses_html_like_telegram() {
    let fx = TelegramFixture::start().await;
    fx.user_says(5, 5, "hi").await;
    let html = "  <b>Bold</b> &lt;tag&gt; &amp; &quot;q&quot; &#65;&#x1F600; \
                <a href=\"https://example.com/?a=1&amp;b=2\">link</a> \
                <span class=\"tg-spoiler\">s</span> <pre><code class=\"language-rust\">fn x()</code></pre>\n";
    let sent =
        ok(&fx, "sendMessage", json!({"chat_id": 5, "text": html, "parse_mode": "HTML"})).await;
    let visible = "Bold <tag> & \"q\" A\u{1F600} link s fn x()";
    assert_eq!(sent["text"], visible);
    assert_eq!(sent["chat"]["id"], 5);
    assert_eq!(sent["chat"]["type"], "private");
    assert_eq!(sent["from"]["is_bot"], true);
    assert!((sent["date"].as_i64().unwrap() - now_s()).abs() < 60, "date in seconds: {sent}");
    let entities = sent["entities"].as_array().unwrap();
    assert_eq!(entities[0], json!({"offset": 0, "length": 4, "type": "bold"}));
    // Offsets count UTF-16 code units: the emoji is two.
    let link = entities.iter().find(|e| e["type"] == "text_link").unwrap();
    assert_eq!(link["url"], "https://example.com/?a=1&b=2");
    assert_eq!(link["offset"], visible.encode_utf16().count() - "link s fn x()".len());
    assert!(entities.iter().any(|e| e["type"] == "pre" && e["language"] == "rust"));

    let recorded = fx.bot_messages(5).await;
    assert_eq!(recorded.len(), 1);
    assert_eq!(recorded[0].message_id, sent["message_id"].as_i64().unwrap());
    assert_eq!(recorded[0].text, visible);
    assert_eq!(recorded[0].raw, html);
    assert_eq!(recorded[0].parse_mode.as_deref(), Some("HTML"));

    for bad in [
        "<br>line",
        "<b>unclosed",
        "<b>x<i>y</b></i>",
        "1 < 2",
        "a &nbsp; b",
        "<span>no class</span>",
        "x</b>",
        "<a href=\"x\">unclosed attr",
    ] {
        let (status, answer) =
            api(&fx, "sendMessage", json!({"chat_id": 5, "text": bad, "parse_mode": "HTML"})).await;
        assert_eq!(status, 400, "{bad}: {answer}");
        assert_eq!(answer["ok"], false);
        assert_eq!(answer["error_code"], 400);
        let description = answer["description"].as_str().unwrap();
        assert!(description.starts_with("Bad Request: can't parse entities: "), "{description}");
    }
    // Without parse_mode, the same text is just text.
    let plain = ok(&fx, "sendMessage", json!({"chat_id": 5, "text": "1 < 2 <br>"})).await;
    assert_eq!(plain["text"], "1 < 2 <br>");
    assert_eq!(fx.bot_messages(5).await.len(), 2, "rejected messages are not recorded");
}

#[tokio::test]
async fn send_message_limits_length_in_utf16_units_and_rejects_empty_text() {
    let fx = TelegramFixture::start().await;
    let too_long = |text: String| json!({"chat_id": 9, "text": text});
    ok(&fx, "sendMessage", too_long("a".repeat(4096))).await;
    // 2048 emoji are 4096 UTF-16 units: accepted; one more is too long.
    ok(&fx, "sendMessage", too_long("\u{1F600}".repeat(2048))).await;
    for text in ["a".repeat(4097), "\u{1F600}".repeat(2049)] {
        let (status, answer) = api(&fx, "sendMessage", too_long(text)).await;
        assert_eq!(status, 400);
        assert_eq!(answer["description"], "Bad Request: message is too long");
    }
    // Tags do not count, only what the user sees.
    let html = format!("<b>{}</b>", "a".repeat(4096));
    ok(&fx, "sendMessage", json!({"chat_id": 9, "text": html, "parse_mode": "HTML"})).await;
    for body in [
        json!({"chat_id": 9, "text": ""}),
        json!({"chat_id": 9, "text": "  \n "}),
        json!({"chat_id": 9, "text": "<b></b>", "parse_mode": "HTML"}),
    ] {
        let (status, answer) = api(&fx, "sendMessage", body).await;
        assert_eq!(status, 400);
        assert_eq!(answer["description"], "Bad Request: message text is empty");
    }
}

#[tokio::test]
async fn edit_answers_the_message_is_recorded_and_delete_answers_true() {
    let fx = TelegramFixture::start().await;
    fx.user_says(3, 3, "hello").await;
    let sent = ok(&fx, "sendMessage", json!({"chat_id": 3, "text": "thinking…"})).await;
    let id = sent["message_id"].as_i64().unwrap();
    let edited = ok(
        &fx,
        "editMessageText",
        json!({"chat_id": 3, "message_id": id, "text": "<i>done</i>", "parse_mode": "HTML"}),
    )
    .await;
    assert_eq!(edited["message_id"], id);
    assert_eq!(edited["text"], "done");
    assert_eq!(edited["entities"], json!([{"offset": 0, "length": 4, "type": "italic"}]));
    assert!(edited["edit_date"].is_i64());

    let (status, answer) = api(
        &fx,
        "editMessageText",
        json!({"chat_id": 3, "message_id": id, "text": "<i>done</i>", "parse_mode": "HTML"}),
    )
    .await;
    assert_eq!(status, 400);
    assert!(answer["description"]
        .as_str()
        .unwrap()
        .starts_with("Bad Request: message is not modified"));
    let (status, answer) =
        api(&fx, "editMessageText", json!({"chat_id": 3, "message_id": id + 1000, "text": "x"}))
            .await;
    assert_eq!(status, 400);
    assert_eq!(answer["description"], "Bad Request: message to edit not found");
    let (status, answer) = api(
        &fx,
        "editMessageText",
        json!({"chat_id": 3, "message_id": id, "text": "<b>bad", "parse_mode": "HTML"}),
    )
    .await;
    assert_eq!(status, 400, "{answer}");

    ok(&fx, "editMessageText", json!({"chat_id": 3, "message_id": id, "text": "final"})).await;
    let recorded = fx.bot_messages(3).await;
    assert_eq!(recorded[0].text, "final");
    assert_eq!(recorded[0].raw, "thinking…");
    let edits: Vec<_> = recorded[0].edits.iter().map(|e| e.text.as_str()).collect();
    assert_eq!(edits, ["done", "final"]);
    assert_eq!(recorded[0].edits[0].raw, "<i>done</i>");

    assert_eq!(ok(&fx, "deleteMessage", json!({"chat_id": 3, "message_id": id})).await, true);
    assert!(fx.bot_messages(3).await[0].deleted);
    let (status, _) = api(&fx, "deleteMessage", json!({"chat_id": 3, "message_id": id})).await;
    assert_eq!(status, 400, "deleted twice");
    let (status, _) =
        api(&fx, "editMessageText", json!({"chat_id": 3, "message_id": id, "text": "y"})).await;
    assert_eq!(status, 400, "a deleted message cannot be edited");
}

#[tokio::test]
async fn faults_429_409_and_bad_json_happen_as_many_times_as_asked() {
    let fx = TelegramFixture::start().await;
    fx.fail_next("sendMessage", Fault::RateLimit { retry_after: 7 }, 2).await;
    let body = json!({"chat_id": 1, "text": "x"});
    for _ in 0..2 {
        let (status, answer) = api(&fx, "SendMessage", body.clone()).await;
        assert_eq!(status, 429);
        assert_eq!(
            answer,
            json!({"ok": false, "error_code": 429,
                   "description": "Too Many Requests: retry after 7",
                   "parameters": {"retry_after": 7}})
        );
    }
    ok(&fx, "sendMessage", body.clone()).await;
    assert_eq!(fx.bot_messages(1).await.len(), 1, "only the call that passed sent");
    let statuses: Vec<u16> = fx.calls("sendmessage").await.iter().map(|c| c.status).collect();
    assert_eq!(statuses, [429, 429, 200]);
    // Other methods were not affected.
    ok(&fx, "getMe", json!({})).await;

    fx.fail_next("*", Fault::BadJson, 1).await;
    let response = reqwest::Client::new().post(fx.method_url("getMe")).send().await.unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let text = response.text().await.unwrap();
    assert!(serde_json::from_str::<Value>(&text).is_err(), "not JSON: {text}");
    ok(&fx, "getMe", json!({})).await;

    fx.conflict_for(Duration::from_millis(800)).await;
    let (status, answer) = api(&fx, "getUpdates", json!({})).await;
    assert_eq!(status, 409);
    assert_eq!(
        answer["description"],
        "Conflict: terminated by other getUpdates request; make sure that only one bot \
         instance is running"
    );
    ok(&fx, "sendMessage", body.clone()).await;
    tokio::time::sleep(Duration::from_millis(900)).await;
    ok(&fx, "getUpdates", json!({})).await;

    fx.fail_next("getMe", Fault::ServerError, 1).await;
    fx.clear_faults().await;
    ok(&fx, "getMe", json!({})).await;
}

#[tokio::test]
async fn a_down_window_cuts_connections_including_held_long_polls() {
    let fx = TelegramFixture::start().await;
    let url = fx.method_url("getUpdates");
    let held = tokio::spawn(async move {
        reqwest::Client::new()
            .post(url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(json!({"timeout": 20}).to_string())
            .send()
            .await
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    fx.down_for(Duration::from_millis(1500)).await;
    let cut = tokio::time::timeout(Duration::from_secs(5), held).await.unwrap().unwrap();
    assert!(cut.is_err(), "the held poll was cut: {cut:?}");
    let during = reqwest::Client::new().post(fx.method_url("getMe")).send().await;
    assert!(during.is_err(), "no answer while down: {during:?}");
    // The control API still answers while the Bot API is down.
    let calls = fx.calls("").await;
    assert!(calls.iter().any(|c| c.method == "getme" && c.status == 0), "{calls:?}");
    tokio::time::sleep(Duration::from_millis(1600)).await;
    ok(&fx, "getMe", json!({})).await;
}

#[tokio::test]
async fn an_invalid_token_gets_401_on_every_method() {
    let fx = TelegramFixture::start().await;
    ok(&fx, "getMe", json!({})).await;
    fx.set_token_valid(false).await;
    let unauthorized = json!({"ok": false, "error_code": 401, "description": "Unauthorized"});
    for method in ["getMe", "getUpdates", "sendMessage", "sendChatAction"] {
        let (status, answer) = api(&fx, method, json!({"chat_id": 1, "text": "x"})).await;
        assert_eq!((status, &answer), (401, &unauthorized), "{method}");
    }
    fx.set_token_valid(true).await;
    ok(&fx, "getMe", json!({})).await;
    let response = reqwest::Client::new()
        .get(format!("{}/botinvalid/getMe", fx.api_url()))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 401);
}

#[tokio::test]
async fn cosmetic_methods_succeed_with_their_shapes_and_are_recorded() {
    let fx = TelegramFixture::start().await;
    assert_eq!(ok(&fx, "sendChatAction", json!({"chat_id": 1, "action": "typing"})).await, true);
    let commands = json!([{"command": "start", "description": "Start"}]);
    assert_eq!(ok(&fx, "setMyCommands", json!({"commands": commands})).await, true);
    assert_eq!(ok(&fx, "getMyCommands", json!({})).await, commands);
    assert_eq!(ok(&fx, "deleteMyCommands", json!({})).await, true);
    assert_eq!(ok(&fx, "getMyCommands", json!({})).await, json!([]));
    assert_eq!(
        ok(&fx, "getWebhookInfo", json!({})).await,
        json!({"url": "", "has_custom_certificate": false, "pending_update_count": 0})
    );
    assert_eq!(ok(&fx, "deleteWebhook", json!({})).await, true);
    assert_eq!(ok(&fx, "someFutureMethod", json!({"x": 1})).await, true);
    let actions = fx.calls("sendchataction").await;
    assert_eq!(actions.len(), 1);
    assert_eq!(actions[0].params, json!({"chat_id": 1, "action": "typing"}));
    assert_eq!(actions[0].status, 200);
    let methods: Vec<String> = fx.calls("").await.into_iter().map(|c| c.method).collect();
    assert_eq!(methods.len(), 8);
    assert!(methods.contains(&"somefuturemethod".to_owned()));
}

#[tokio::test]
async fn send_document_multipart_is_recorded_with_name_size_and_caption() {
    let fx = TelegramFixture::start().await;
    let boundary = "XfixtureBoundary";
    let content = b"col1,col2\n1,2\n";
    let mut body = Vec::new();
    for (name, value) in [("chat_id", "77"), ("caption", "<b>report</b>"), ("parse_mode", "HTML")] {
        body.extend_from_slice(
            format!(
                "--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n{value}\r\n"
            )
            .as_bytes(),
        );
    }
    body.extend_from_slice(
        format!(
            "--{boundary}\r\nContent-Disposition: form-data; name=\"document\"; \
             filename=\"report.csv\"\r\nContent-Type: text/csv\r\n\r\n"
        )
        .as_bytes(),
    );
    body.extend_from_slice(content);
    body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    let response = reqwest::Client::new()
        .post(fx.method_url("SendDocument"))
        .header(reqwest::header::CONTENT_TYPE, format!("multipart/form-data; boundary={boundary}"))
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let answer: Value = serde_json::from_str(&response.text().await.unwrap()).unwrap();
    let message = &answer["result"];
    assert_eq!(message["chat"]["id"], 77);
    assert_eq!(message["caption"], "report");
    assert_eq!(message["document"]["file_name"], "report.csv");
    assert_eq!(message["document"]["file_size"], content.len());
    assert!(message["document"]["file_id"].is_string());

    let calls = fx.calls("sendDocument").await;
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].params["chat_id"], 77);
    assert_eq!(calls[0].params["caption"], "<b>report</b>");
    assert_eq!(calls[0].params["document"]["file_name"], "report.csv");
    assert_eq!(calls[0].params["document"]["size"], content.len());
    let sent = fx.bot_messages(77).await;
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].kind, "document");
    assert_eq!(sent[0].text, "report");
    let file = sent[0].file.as_ref().unwrap();
    assert_eq!(file.file_name.as_deref(), Some("report.csv"));
    assert_eq!(file.size, content.len() as u64);
}

#[tokio::test]
async fn users_send_files_replies_groups_and_button_presses() {
    let fx = TelegramFixture::start().await;
    fx.user_says(11, 11, "hi").await;
    let bot_msg = ok(
        &fx,
        "sendMessage",
        json!({"chat_id": 11, "text": "pick",
               "reply_markup": {"inline_keyboard": [[{"text": "A", "callback_data": "a"}]]}}),
    )
    .await;
    let bot_id = bot_msg["message_id"].as_i64().unwrap();
    let reply = fx
        .user_sends(UserMessage {
            reply_to_message_id: Some(bot_id),
            ..UserMessage::private_text(11, "this one")
        })
        .await;
    let photo = fx
        .user_sends(UserMessage {
            kind: MessageKind::Photo,
            text: Some("look".into()),
            file_content: Some(b"\x89PNG fake".to_vec()),
            ..UserMessage::private_text(11, "")
        })
        .await;
    let voice = fx
        .user_sends(UserMessage {
            kind: MessageKind::Voice,
            text: None,
            ..UserMessage::private_text(11, "")
        })
        .await;
    let group = fx
        .user_sends(UserMessage {
            chat_id: -500,
            chat_type: ChatType::Supergroup,
            user_id: 11,
            first_name: Some("Ann".into()),
            text: Some("/help@nexbot_test_bot".into()),
            ..UserMessage::default()
        })
        .await;
    let click = fx.user_clicks(11, 11, bot_id, "a").await;

    let updates = ok(&fx, "getUpdates", json!({"offset": reply.update_id})).await;
    let updates = updates.as_array().unwrap();
    assert_eq!(updates.len(), 5);
    let by_id = |id: i64| updates.iter().find(|u| u["update_id"] == id).unwrap();

    let r = &by_id(reply.update_id)["message"];
    assert_eq!(r["reply_to_message"]["message_id"], bot_id);
    assert_eq!(r["reply_to_message"]["from"]["is_bot"], true);
    assert_eq!(r["reply_to_message"]["text"], "pick");

    let p = &by_id(photo.update_id)["message"];
    assert_eq!(p["caption"], "look");
    assert!(p.get("text").is_none());
    let file_id = p["photo"][0]["file_id"].as_str().unwrap().to_owned();
    let file = ok(&fx, "getFile", json!({"file_id": file_id})).await;
    let path = file["file_path"].as_str().unwrap();
    let download = reqwest::Client::new()
        .get(format!("{}/file/bot{}/{path}", fx.api_url(), fx.token()))
        .send()
        .await
        .unwrap();
    assert_eq!(download.bytes().await.unwrap().as_ref(), b"\x89PNG fake");

    let v = &by_id(voice.update_id)["message"];
    assert_eq!(v["voice"]["mime_type"], "audio/ogg");
    assert!(v["voice"]["duration"].is_i64());

    let g = &by_id(group.update_id)["message"];
    assert_eq!(g["chat"]["type"], "supergroup");
    assert_eq!(g["chat"]["id"], -500);
    assert!(g["chat"]["title"].is_string());
    assert_eq!(g["from"]["first_name"], "Ann");
    assert_eq!(g["entities"][0]["type"], "bot_command");
    assert_eq!(g["entities"][0]["length"], "/help@nexbot_test_bot".len());

    let q = &by_id(click.update_id)["callback_query"];
    assert_eq!(q["id"], click.callback_query_id.as_str());
    assert_eq!(q["data"], "a");
    assert!(q["chat_instance"].is_string());
    assert_eq!(q["message"]["message_id"], bot_id);
    assert_eq!(q["from"]["id"], 11);
    // A notice over 200 characters is refused; a press is answered once (Telegram's limits).
    let long = json!({"callback_query_id": q["id"], "text": "é".repeat(201)});
    let (status, refused) = api(&fx, "answerCallbackQuery", long).await;
    assert_eq!(status, 400, "{refused}");
    assert!(refused["description"].as_str().unwrap().contains("MESSAGE_TOO_LONG"), "{refused}");
    let notice = json!({"callback_query_id": q["id"], "text": "é".repeat(200)});
    assert_eq!(ok(&fx, "answerCallbackQuery", notice).await, true);
    let (status, again) =
        api(&fx, "answerCallbackQuery", json!({"callback_query_id": q["id"]})).await;
    assert_eq!(status, 400, "{again}");
    assert!(again["description"].as_str().unwrap().contains("query is too old"), "{again}");
    let unknown = json!({"callback_query_id": "no-such-press"});
    assert_eq!(api(&fx, "answerCallbackQuery", unknown).await.0, 400);
}

#[tokio::test]
async fn reset_forgets_everything_and_wait_bot_messages_sees_late_messages() {
    let fx = TelegramFixture::start().await;
    fx.user_says(2, 2, "one").await;
    ok(&fx, "sendMessage", json!({"chat_id": 2, "text": "reply"})).await;
    fx.set_token_valid(false).await;
    fx.reset().await;
    assert!(fx.pending_updates().await.is_empty());
    assert!(fx.bot_messages(2).await.is_empty());
    assert!(fx.calls("").await.is_empty());
    ok(&fx, "getMe", json!({})).await;

    let url = fx.method_url("sendMessage");
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        reqwest::Client::new()
            .post(url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(json!({"chat_id": 2, "text": "late"}).to_string())
            .send()
            .await
            .unwrap();
    });
    let seen = fx
        .wait_bot_messages(2, |m| m.iter().any(|m| m.text == "late"), Duration::from_secs(10))
        .await;
    assert_eq!(seen.len(), 1);
}
