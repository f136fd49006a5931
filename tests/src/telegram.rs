//! Telegram without Telegram: a handle on `tests/telegram-fixture/fixture.js`, a Node process
//! that serves the Bot API with Telegram's semantics in front of the third-party emulator
//! `telegram-test-api` (see that file's header for the full HTTP contract). It is a test
//! fixture, never product behaviour: the product's bot is simply pointed at [`api_url`].
//!
//! A test starts one [`TelegramFixture`] per test (each has its own ports, state and
//! [`token`]), plays users with [`user_says`] / [`user_sends`], reads what the bot sent with
//! [`bot_messages`] and what it called with [`calls`], and injects the failures a real bot
//! meets (429, 409, dropped connections, broken bodies, a revoked token) to check the bot
//! survives them.
//!
//! Every method panics when the fixture itself misbehaves: it is test infrastructure, and a
//! broken fixture is a failed test, not a condition a test should handle.
//!
//! [`api_url`]: TelegramFixture::api_url
//! [`token`]: TelegramFixture::token
//! [`user_says`]: TelegramFixture::user_says
//! [`user_sends`]: TelegramFixture::user_sends
//! [`bot_messages`]: TelegramFixture::bot_messages
//! [`calls`]: TelegramFixture::calls

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};

/// How long the fixture may take to print its ready line (a cold `node` on a loaded CI
/// machine can be slow; a missing line after this is a real failure).
const READY_DEADLINE: Duration = Duration::from_secs(60);

/// A running fixture. Dropping it closes the child's stdin (the fixture exits on EOF) and
/// kills the child, so a failed test never leaves a Node process behind.
#[derive(Debug)]
pub struct TelegramFixture {
    child: Child,
    /// Held only so that it closes when the fixture drops.
    _stdin: ChildStdin,
    api_url: String,
    emulator_url: String,
    token: String,
    http: reqwest::Client,
    stderr: Arc<Mutex<String>>,
}

/// What [`TelegramFixture::user_sends`] produced: the ids the bot will see.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sent {
    pub update_id: i64,
    pub message_id: i64,
}

/// What [`TelegramFixture::user_clicks`] produced: the update and the callback query's id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Clicked {
    pub update_id: i64,
    pub callback_query_id: String,
}

/// The kind of chat a user writes in (Telegram's `chat.type`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ChatType {
    #[default]
    Private,
    Group,
    Supergroup,
}

impl ChatType {
    fn as_str(self) -> &'static str {
        match self {
            Self::Private => "private",
            Self::Group => "group",
            Self::Supergroup => "supergroup",
        }
    }
}

/// What a user's message carries; for the file kinds the text becomes the caption.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum MessageKind {
    #[default]
    Text,
    Photo,
    Document,
    Voice,
}

impl MessageKind {
    fn as_str(self) -> &'static str {
        match self {
            Self::Text => "text",
            Self::Photo => "photo",
            Self::Document => "document",
            Self::Voice => "voice",
        }
    }
}

/// A message from a user, the general case of [`TelegramFixture::user_says`]. In a private
/// chat `chat_id` must equal `user_id`, as in Telegram.
#[derive(Debug, Clone, Default)]
pub struct UserMessage {
    pub chat_id: i64,
    pub chat_type: ChatType,
    pub user_id: i64,
    pub first_name: Option<String>,
    /// The text, or the caption of a file.
    pub text: Option<String>,
    /// A message (the bot's or a user's) in the same chat this one replies to.
    pub reply_to_message_id: Option<i64>,
    pub kind: MessageKind,
    /// For a document: its name (the fixture picks one otherwise).
    pub file_name: Option<String>,
    /// The file's bytes, served back by `getFile` and the file download URL.
    pub file_content: Option<Vec<u8>>,
    /// How long the file's download takes to deliver its bytes (a large file, a slow link).
    pub download_delay_ms: Option<u64>,
}

impl UserMessage {
    /// A text message from `user_id` in their private chat with the bot.
    pub fn private_text(user_id: i64, text: &str) -> Self {
        Self { chat_id: user_id, user_id, text: Some(text.to_owned()), ..Self::default() }
    }
}

/// A failure the fixture answers instead of doing the call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// 429 `Too Many Requests: retry after N` with `parameters.retry_after`.
    RateLimit { retry_after: u32 },
    /// 409 `Conflict: terminated by other getUpdates request; ...`.
    Conflict,
    /// HTTP 200 with a body that is not JSON (what a proxy in the way may send).
    BadJson,
    /// [`Fault::BadJson`] with a body of `size` bytes.
    BadJsonOfSize { size: u64 },
    /// 500 `Internal Server Error`.
    ServerError,
    /// Answered as usual, after `delay` (a Bot API server that is slow to answer a method).
    Slow { delay: Duration },
}

impl Fault {
    fn to_json(self) -> Value {
        match self {
            Self::RateLimit { retry_after } => {
                json!({"kind": "rate_limit", "retry_after": retry_after})
            }
            Self::Conflict => json!({"kind": "conflict"}),
            Self::BadJson => json!({"kind": "bad_json"}),
            Self::BadJsonOfSize { size } => json!({"kind": "bad_json", "size": size}),
            Self::ServerError => json!({"kind": "server_error"}),
            Self::Slow { delay } => json!({"kind": "slow", "delay_ms": millis(delay)}),
        }
    }
}

/// One edit of a bot message, in the order they happened.
#[derive(Debug, Clone, PartialEq)]
pub struct Edit {
    /// The visible text after the edit (tags removed, entities decoded, trimmed).
    pub text: String,
    /// The text as the bot sent it.
    pub raw: String,
    pub parse_mode: Option<String>,
    pub time_ms: u64,
}

/// A file the bot sent (`sendDocument` and the other media methods).
#[derive(Debug, Clone, PartialEq)]
pub struct SentFile {
    pub file_name: Option<String>,
    pub size: u64,
    pub mime_type: Option<String>,
}

/// A message the bot sent to a chat, as the fixture recorded it.
#[derive(Debug, Clone, PartialEq)]
pub struct BotMessage {
    pub message_id: i64,
    pub chat_id: i64,
    /// `text`, or the media field for files (`document`, `photo`, ...).
    pub kind: String,
    /// What the user sees now: the visible text after the last edit (the caption for files).
    pub text: String,
    /// The text (or caption) as first sent, HTML and all.
    pub raw: String,
    pub parse_mode: Option<String>,
    pub edits: Vec<Edit>,
    pub deleted: bool,
    /// Unix seconds, as Telegram's `date`.
    pub date: i64,
    /// Milliseconds since the fixture started.
    pub time_ms: u64,
    pub reply_to_message_id: Option<i64>,
    pub file: Option<SentFile>,
    /// The whole record (entities, reply markup, ...).
    pub json: Value,
}

impl BotMessage {
    /// The buttons of its inline keyboard: (label, callback data), row by row.
    pub fn buttons(&self) -> Vec<(String, String)> {
        let rows = self.json["reply_markup"]["inline_keyboard"].as_array().cloned();
        rows.unwrap_or_default()
            .iter()
            .flat_map(|row| row.as_array().cloned().unwrap_or_default())
            .map(|b| {
                let text = |k: &str| b[k].as_str().unwrap_or_default().to_owned();
                (text("text"), text("callback_data"))
            })
            .collect()
    }
}

/// One Bot API call the fixture received.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    /// Lower case, whatever case the client used.
    pub method: String,
    /// The parsed parameters; multipart files appear as `{file_name, size, mime_type}`.
    pub params: Value,
    /// Milliseconds since the fixture started.
    pub time_ms: u64,
    /// The HTTP status answered; 0 when the connection was cut (a "down" window).
    pub status: u16,
}

impl TelegramFixture {
    /// Starts a fixture (installing its npm dependencies first if they are missing) and waits
    /// for it to be ready.
    pub async fn start() -> Self {
        let dir = fixture_dir();
        let install_dir = dir.clone();
        tokio::task::spawn_blocking(move || ensure_node_modules(&install_dir))
            .await
            .expect("npm install task")
            .unwrap_or_else(|err| panic!("telegram fixture: {err}"));

        let mut child = Command::new("node")
            .arg(dir.join("fixture.js"))
            .current_dir(&dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|err| {
                panic!("telegram fixture: cannot run `node` (is Node.js installed?): {err}")
            });
        let stdin = child.stdin.take().expect("piped stdin");
        let stdout = child.stdout.take().expect("piped stdout");
        let stderr_pipe = child.stderr.take().expect("piped stderr");

        // Drain stderr for the whole life of the child, so it can never block on a full
        // pipe, and keep it for the failure messages.
        let stderr = Arc::new(Mutex::new(String::new()));
        let sink = Arc::clone(&stderr);
        tokio::spawn(async move {
            let mut lines = BufReader::new(stderr_pipe).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                eprintln!("telegram-fixture: {line}");
                let mut all = sink.lock().unwrap_or_else(|e| e.into_inner());
                all.push_str(&line);
                all.push('\n');
            }
        });

        let mut stdout_lines = BufReader::new(stdout).lines();
        let ready = tokio::time::timeout(READY_DEADLINE, stdout_lines.next_line()).await;
        let line = match ready {
            Ok(Ok(Some(line))) => line,
            other => {
                let _ = child.start_kill();
                // Give the stderr reader a moment to collect the child's last words.
                tokio::time::sleep(Duration::from_millis(300)).await;
                let err = stderr.lock().unwrap_or_else(|e| e.into_inner()).clone();
                panic!("telegram fixture did not get ready ({other:?}); its stderr:\n{err}");
            }
        };
        tokio::spawn(async move { while let Ok(Some(_)) = stdout_lines.next_line().await {} });
        let ready: Value = serde_json::from_str(&line)
            .unwrap_or_else(|err| panic!("telegram fixture ready line {line:?}: {err}"));
        let field = |name: &str| {
            ready[name]
                .as_str()
                .unwrap_or_else(|| panic!("telegram fixture ready line lacks {name}: {line}"))
                .to_owned()
        };
        let api_url = field("api_url");
        let emulator_url = field("emulator");
        // Idle connections are dropped here long before the fixture's server closes them
        // (its keep-alive: 30 s), so a request never goes out on a connection the server is
        // closing at that moment ("error sending request", seen once in the soak).
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .pool_idle_timeout(Duration::from_secs(5))
            .build()
            .expect("reqwest client");
        Self { child, _stdin: stdin, api_url, emulator_url, token: fresh_token(), http, stderr }
    }

    /// The Bot API base URL: the bot calls `<api_url>/bot<token>/<method>`.
    pub fn api_url(&self) -> &str {
        &self.api_url
    }

    /// The emulator's own URL (its client API), for a test that wants to look behind the
    /// fixture.
    pub fn emulator_url(&self) -> &str {
        &self.emulator_url
    }

    /// A valid-looking token, fresh for this fixture: `<digits>:<35 characters>`.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// The bytes of the file the bot sent in `message` (a document, a voice message), as a
    /// client would get them: `getFile`, then the download.
    pub async fn sent_file_bytes(&self, message: &BotMessage) -> Vec<u8> {
        let file_id = message.json["file_object"]["file_id"].as_str().expect("a sent file");
        let url = self.method_url("getFile");
        let request = self
            .http
            .post(&url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(json!({ "file_id": file_id }).to_string());
        let body = request.send().await.expect("getFile").text().await.expect("getFile's body");
        let answer: Value = serde_json::from_str(&body).expect("getFile's JSON");
        let path = answer["result"]["file_path"].as_str().expect("a file path");
        let url = format!("{}/file/bot{}/{path}", self.api_url, self.token);
        let response = self.http.get(&url).send().await.expect("file download");
        assert!(response.status().is_success(), "download {url}: {}", response.status());
        response.bytes().await.expect("file bytes").to_vec()
    }

    /// The URL of one Bot API method for [`Self::token`].
    pub fn method_url(&self, method: &str) -> String {
        format!("{}/bot{}/{method}", self.api_url, self.token)
    }

    /// What the fixture wrote to stderr so far (also echoed to the test's stderr).
    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// `user_id` writes `text` to the bot in `chat_id` (private when they are equal, a group
    /// otherwise).
    pub async fn user_says(&self, chat_id: i64, user_id: i64, text: &str) -> Sent {
        let chat_type = if chat_id == user_id { ChatType::Private } else { ChatType::Group };
        self.user_sends(UserMessage {
            chat_id,
            chat_type,
            user_id,
            text: Some(text.to_owned()),
            ..UserMessage::default()
        })
        .await
    }

    /// A user's message of any kind; it becomes the next update of [`Self::token`].
    pub async fn user_sends(&self, message: UserMessage) -> Sent {
        let mut body = json!({
            "token": self.token,
            "chat_id": message.chat_id,
            "chat_type": message.chat_type.as_str(),
            "user_id": message.user_id,
            "kind": message.kind.as_str(),
        });
        let set = |body: &mut Value, key: &str, value: Value| {
            body.as_object_mut().expect("object").insert(key.to_owned(), value);
        };
        if let Some(name) = message.first_name {
            set(&mut body, "first_name", json!(name));
        }
        if let Some(text) = message.text {
            set(&mut body, "text", json!(text));
        }
        if let Some(id) = message.reply_to_message_id {
            set(&mut body, "reply_to_message_id", json!(id));
        }
        if let Some(name) = message.file_name {
            set(&mut body, "file_name", json!(name));
        }
        if let Some(content) = message.file_content {
            set(&mut body, "file_base64", json!(base64_encode(&content)));
        }
        if let Some(delay) = message.download_delay_ms {
            set(&mut body, "download_delay_ms", json!(delay));
        }
        let sent = self.control_post("messages", body).await;
        Sent { update_id: int(&sent, "update_id"), message_id: int(&sent, "message_id") }
    }

    /// `user_id` presses an inline button with `data` under the bot's message `message_id`.
    pub async fn user_clicks(
        &self,
        chat_id: i64,
        user_id: i64,
        message_id: i64,
        data: &str,
    ) -> Clicked {
        let body = json!({
            "token": self.token, "chat_id": chat_id, "user_id": user_id,
            "message_id": message_id, "data": data,
        });
        let sent = self.control_post("callbacks", body).await;
        Clicked {
            update_id: int(&sent, "update_id"),
            callback_query_id: sent["callback_query_id"].as_str().unwrap_or_default().to_owned(),
        }
    }

    /// What the bot sent to `chat_id` (deleted ones included, flagged), oldest first.
    pub async fn bot_messages(&self, chat_id: i64) -> Vec<BotMessage> {
        let path = format!("bot_messages?chat_id={chat_id}&token={}", encode(&self.token));
        let list = self.control_get(&path).await;
        list.as_array().expect("a list of bot messages").iter().map(bot_message).collect()
    }

    /// Polls [`Self::bot_messages`] until `done` holds, and returns them; panics with what the
    /// bot did send when `deadline` passes first.
    pub async fn wait_bot_messages(
        &self,
        chat_id: i64,
        done: impl Fn(&[BotMessage]) -> bool,
        deadline: Duration,
    ) -> Vec<BotMessage> {
        let start = Instant::now();
        loop {
            let messages = self.bot_messages(chat_id).await;
            if done(&messages) {
                return messages;
            }
            if start.elapsed() >= deadline {
                panic!(
                    "the bot's messages to chat {chat_id} did not match within {deadline:?}; \
                     they are: {messages:#?}"
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The answer to the press `click` (`answerCallbackQuery`, status 200): the notice it
    /// showed (`""` for none). Polls until it comes; panics with the answers seen when
    /// `deadline` passes first.
    pub async fn press_answer(&self, click: &Clicked, deadline: Duration) -> String {
        let start = Instant::now();
        loop {
            let answers = self.calls("answerCallbackQuery").await;
            let answer = answers.iter().find(|c| {
                c.status == 200 && c.params["callback_query_id"] == click.callback_query_id.as_str()
            });
            if let Some(answer) = answer {
                return answer.params["text"].as_str().unwrap_or_default().to_owned();
            }
            if start.elapsed() >= deadline {
                let seen: Vec<&Value> = answers.iter().map(|c| &c.params).collect();
                panic!("press {click:?} not answered within {deadline:?}; answers: {seen:#?}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The calls of `method` (any case), oldest first; `""` for every call.
    pub async fn calls(&self, method: &str) -> Vec<Call> {
        let path = format!("calls?method={}&token={}", encode(method), encode(&self.token));
        let list = self.control_get(&path).await;
        list.as_array()
            .expect("a list of calls")
            .iter()
            .map(|c| Call {
                method: c["method"].as_str().unwrap_or_default().to_owned(),
                params: c["params"].clone(),
                time_ms: c["time_ms"].as_u64().unwrap_or_default(),
                status: c["status"].as_u64().and_then(|s| u16::try_from(s).ok()).unwrap_or(0),
            })
            .collect()
    }

    /// The updates not yet confirmed by an `offset`, as `getUpdates` would hand them out.
    pub async fn pending_updates(&self) -> Vec<Value> {
        let list = self.control_get(&format!("updates?token={}", encode(&self.token))).await;
        list.as_array().cloned().unwrap_or_default()
    }

    /// The next `count` calls of `method` (any case; `"*"` for any method) answer `fault`.
    pub async fn fail_next(&self, method: &str, fault: Fault, count: u32) {
        let mut body = fault.to_json();
        body["method"] = json!(method);
        body["count"] = json!(count);
        self.control_post("faults", body).await;
    }

    /// Every call of `method` (`"*"` for any) answers `fault` for `duration`.
    pub async fn fail_for(&self, method: &str, fault: Fault, duration: Duration) {
        let mut body = fault.to_json();
        body["method"] = json!(method);
        body["duration_ms"] = json!(millis(duration));
        self.control_post("faults", body).await;
    }

    /// `getUpdates` answers 409 Conflict for `duration`, as when another instance of the bot
    /// polls; a long poll held open now is ended with 409 too.
    pub async fn conflict_for(&self, duration: Duration) {
        self.fail_for("getUpdates", Fault::Conflict, duration).await;
    }

    /// Forgets every fault not yet used up.
    pub async fn clear_faults(&self) {
        let url = format!("{}/__fixture/faults", self.api_url);
        let response = self.http.delete(&url).send().await.expect("DELETE /__fixture/faults");
        assert!(response.status().is_success(), "DELETE /__fixture/faults: {response:?}");
    }

    /// Telegram is unreachable for `duration`: every Bot API request gets its connection
    /// closed without an answer, long polls held open now included.
    pub async fn down_for(&self, duration: Duration) {
        self.control_post("down", json!({"duration_ms": millis(duration)})).await;
    }

    /// Revokes (`false`) or restores (`true`) [`Self::token`]: a revoked token gets 401
    /// `Unauthorized` on every method.
    pub async fn set_token_valid(&self, valid: bool) {
        self.control_post("tokens", json!({"token": self.token, "valid": valid})).await;
    }

    /// The bot's `username` in `getMe` (default `nexbot_test_bot`).
    pub async fn set_bot_username(&self, username: &str) {
        self.control_post("config", json!({"bot_username": username})).await;
    }

    /// `false`: `getUpdates` ignores its `timeout` and answers at once, empty or not, as some
    /// Bot API servers do (`true`, the default: Telegram's long polling).
    pub async fn set_long_polling(&self, on: bool) {
        self.control_post("config", json!({"long_polling": on})).await;
    }

    /// Forgets updates, messages, calls, faults, the down window and revoked tokens.
    pub async fn reset(&self) {
        self.control_post("reset", json!({})).await;
    }

    async fn control_post(&self, path: &str, body: Value) -> Value {
        let url = format!("{}/__fixture/{path}", self.api_url);
        let request = self
            .http
            .post(&url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body.to_string());
        self.control(&url, request).await
    }

    async fn control_get(&self, path: &str) -> Value {
        let url = format!("{}/__fixture/{path}", self.api_url);
        let request = self.http.get(&url);
        self.control(&url, request).await
    }

    async fn control(&self, url: &str, request: reqwest::RequestBuilder) -> Value {
        let response = request.send().await.unwrap_or_else(|err| {
            panic!("telegram fixture {url}: {err} ({err:?}); its stderr:\n{}", self.stderr())
        });
        let status = response.status();
        let text = response.text().await.unwrap_or_default();
        if !status.is_success() {
            panic!("telegram fixture {url}: {status} {text}");
        }
        serde_json::from_str(&text)
            .unwrap_or_else(|err| panic!("telegram fixture {url}: {err} in {text}"))
    }
}

impl Drop for TelegramFixture {
    fn drop(&mut self) {
        // stdin closes with the struct (the fixture exits on EOF); kill it too, in case it
        // is stuck.
        let _ = self.child.start_kill();
    }
}

fn bot_message(m: &Value) -> BotMessage {
    let opt_str = |v: &Value| v.as_str().map(str::to_owned);
    BotMessage {
        message_id: int(m, "message_id"),
        chat_id: int(m, "chat_id"),
        kind: m["kind"].as_str().unwrap_or_default().to_owned(),
        text: m["text"].as_str().unwrap_or_default().to_owned(),
        raw: m["raw"].as_str().unwrap_or_default().to_owned(),
        parse_mode: opt_str(&m["parse_mode"]),
        edits: m["edits"]
            .as_array()
            .map(|edits| {
                edits
                    .iter()
                    .map(|e| Edit {
                        text: e["text"].as_str().unwrap_or_default().to_owned(),
                        raw: e["raw"].as_str().unwrap_or_default().to_owned(),
                        parse_mode: opt_str(&e["parse_mode"]),
                        time_ms: e["time_ms"].as_u64().unwrap_or_default(),
                    })
                    .collect()
            })
            .unwrap_or_default(),
        deleted: m["deleted"].as_bool().unwrap_or_default(),
        date: int(m, "date"),
        time_ms: m["time_ms"].as_u64().unwrap_or_default(),
        reply_to_message_id: m["reply_to_message_id"].as_i64(),
        file: m.get("file").filter(|f| f.is_object()).map(|f| SentFile {
            file_name: opt_str(&f["file_name"]),
            size: f["size"].as_u64().unwrap_or_default(),
            mime_type: opt_str(&f["mime_type"]),
        }),
        json: m.clone(),
    }
}

fn int(v: &Value, key: &str) -> i64 {
    v[key].as_i64().unwrap_or_else(|| panic!("telegram fixture: no integer {key} in {v}"))
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// Percent-encodes a query value (tokens carry `:`; method names are plain).
fn encode(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn base64_encode(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n =
            chunk.iter().enumerate().fold(0u32, |n, (i, b)| n | (u32::from(*b) << (16 - 8 * i)));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// A token of Telegram's shape, different for every fixture of this process and across
/// processes (time, pid and a counter feed it).
fn fresh_token() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    let mut state = (nanos as u64)
        ^ (u64::from(std::process::id()) << 32)
        ^ COUNTER.fetch_add(1, Ordering::Relaxed).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let mut next = || {
        // xorshift64*: plenty for names that only need to differ.
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        state.wrapping_mul(0x2545_F491_4F6C_DD1D)
    };
    const CHARS: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-";
    let id = 100_000_000 + next() % 900_000_000;
    let secret: String = (0..35).map(|_| CHARS[(next() % 64) as usize] as char).collect();
    format!("{id}:{secret}")
}

fn fixture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("telegram-fixture")
}

/// Runs `npm ci` (or `npm install` without a lock file) in the fixture's directory when its
/// `node_modules` is missing, once: a mutex orders the threads of this process and a lock
/// directory (made atomically by `mkdir`) the test processes running side by side.
fn ensure_node_modules(dir: &Path) -> Result<(), String> {
    static IN_PROCESS: Mutex<()> = Mutex::new(());
    let _guard = IN_PROCESS.lock().unwrap_or_else(|e| e.into_inner());
    let marker = dir.join("node_modules/telegram-test-api/package.json");
    if marker.exists() {
        return Ok(());
    }
    let lock = std::env::temp_dir().join("nexbot-telegram-fixture-npm.lock");
    let waited = Instant::now();
    loop {
        match std::fs::create_dir(&lock) {
            Ok(()) => break,
            Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => {
                if marker.exists() {
                    return Ok(());
                }
                // A lock older than any install is left over from a killed run.
                let stale = std::fs::metadata(&lock)
                    .and_then(|m| m.modified())
                    .ok()
                    .and_then(|t| t.elapsed().ok())
                    .is_some_and(|age| age > Duration::from_secs(600));
                if stale {
                    let _ = std::fs::remove_dir(&lock);
                } else if waited.elapsed() > Duration::from_secs(900) {
                    return Err(format!("waited too long for {}", lock.display()));
                }
                std::thread::sleep(Duration::from_millis(500));
            }
            Err(err) => return Err(format!("cannot create {}: {err}", lock.display())),
        }
    }
    struct Unlock(PathBuf);
    impl Drop for Unlock {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir(&self.0);
        }
    }
    let _unlock = Unlock(lock);
    if marker.exists() {
        return Ok(());
    }
    let args: &[&str] = if dir.join("package-lock.json").exists() {
        &["ci", "--no-audit", "--no-fund"]
    } else {
        &["install", "--no-audit", "--no-fund"]
    };
    eprintln!("telegram fixture: running npm {} in {}", args.join(" "), dir.display());
    let output = std::process::Command::new("npm")
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .map_err(|err| format!("cannot run npm (is it installed?): {err}"))?;
    if !output.status.success() || !marker.exists() {
        return Err(format!(
            "npm {} failed ({}):\n{}\n{}",
            args.join(" "),
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    Ok(())
}
