//! The agent's browser end to end (issue 49): the real `nexbot serve`, the real pool and egress
//! proxy, Chromium and Playwright's MCP server in `nexbot-browser:dev`, the Telegram fixture,
//! a website the test serves ([`nexbot_tests::site`]) and the scripted model, which reads the
//! browser's answers (its element references) as a model would.

use crate::common;
use crate::host_approvals::{press, questions, wait_question};
use crate::telegram::{has_text, start, telegram_env, FRIEND, LIMIT, OWNER};

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use base64::Engine as _;
use common::{Leftovers, TempWorkspace};
use nexbot_tests::scripted_llm::{is_tool_pictures, last_user, ScriptedLlm, Step};
use nexbot_tests::site::{self, TestSite};
use nexbot_tests::telegram::TelegramFixture;
use serde_json::{json, Value};

/// What the browser answered, per chat message that started a turn ("chat: text"), in order.
type Answers = Arc<Mutex<HashMap<String, Vec<String>>>>;

/// One action of a plan: the model's next step from the browser's answers so far.
type Action<'a> = &'a dyn Fn(&[String]) -> Step;

/// The reference of the element of `role` named `name` in a snapshot (`textbox "User"
/// [ref=e12]`), from the newest answer that has it.
fn element(answers: &[String], role: &str, name: &str) -> String {
    let needle = format!("{role} \"{name}\"");
    for answer in answers.iter().rev() {
        for line in answer.lines().filter(|l| l.contains(&needle)) {
            if let Some(at) = line.find("[ref=") {
                let rest = &line[at + 5..];
                return rest[..rest.find(']').unwrap()].to_owned();
            }
        }
    }
    panic!("no {needle} in the browser's answers: {answers:#?}")
}

/// This turn's tool results as text: each tool message is JSON, the tool's output or its error.
fn this_turns_results(body: &Value) -> Vec<String> {
    common::this_turns_results(body)
        .into_iter()
        .map(|content| match serde_json::from_str::<Value>(&content) {
            Ok(v) => v["output"].as_str().or(v["error"].as_str()).map_or(content, str::to_owned),
            Err(_) => content,
        })
        .collect()
}

fn call(tool: &str, args: Value) -> Step {
    Step::tool_call(&format!("mcp__browser__{tool}"), args)
}

/// The model: each user message is a plan of browser actions on `site`, each action chosen
/// from what the browser answered so far (so references are the browser's own), then a text
/// answer. Every answer the browser gave is kept in `answers` under the message's text.
fn browsing_model(llm: &ScriptedLlm, site: &TestSite) -> Answers {
    let answers: Answers = Arc::default();
    let kept = answers.clone();
    let site = site.clone();
    llm.set_responder(move |body| {
        // A delegated task's model reads its task after "Task:".
        let said = last_user(body);
        let said = said.strip_prefix("Task:\n").map_or(said.clone(), str::to_owned);
        let got = this_turns_results(body);
        kept.lock().unwrap().insert(said.clone(), got.clone());
        match next_step(&said, &site, &got) {
            Some(step) => step,
            None => Step::text(&format!("browsed: {said}")),
        }
    });
    answers
}

/// The next action of the plan `said` names, from what the browser answered so far (`got`);
/// none when the plan is done or there is none.
fn next_step(said: &str, site: &TestSite, got: &[String]) -> Option<Step> {
    pages_plan(said, site, got).or_else(|| walls_plan(said, site, got))
}

/// Plans that use the site's pages: reading, logging in, forms, files, secrets, screenshots.
fn pages_plan(said: &str, site: &TestSite, got: &[String]) -> Option<Step> {
    let plan: &[Action<'_>] = match said {
        "read the orders page" => {
            &[&|_| call("browser_navigate", json!({"url": site.url("/")})), &|_| {
                call("browser_snapshot", json!({}))
            }]
        }
        // The password typed as it is, or as the chat's secret's placeholder.
        "log in" | "log in with the secret" => &[
            &|_| call("browser_navigate", json!({"url": site.url("/login")})),
            &|_| call("browser_snapshot", json!({})),
            &|got| {
                let user = element(got, "textbox", "User");
                call("browser_type", json!({"element": "User", "target": user, "text": "alice"}))
            },
            &|got| {
                let password = element(got, "textbox", "Password");
                let text = match said {
                    "log in" => site::PASSWORD,
                    _ => "{{secret:SITE_PW}}",
                };
                call(
                    "browser_type",
                    json!({"element": "Password", "target": password, "text": text,
                           "submit": true}),
                )
            },
            &|_| call("browser_snapshot", json!({})),
        ],
        "place the order" => &[
            &|_| call("browser_navigate", json!({"url": site.url("/order")})),
            &|_| call("browser_snapshot", json!({})),
            &|got| {
                let item = element(got, "textbox", "Item");
                call(
                    "browser_type",
                    json!({"element": "Item", "target": item, "text": "blue mug", "submit": true}),
                )
            },
            &|_| call("browser_snapshot", json!({})),
            &|got| {
                let quantity = element(got, "textbox", "Quantity");
                call(
                    "browser_type",
                    json!({"element": "Quantity", "target": quantity, "text": "3",
                           "submit": true}),
                )
            },
            &|_| call("browser_snapshot", json!({})),
        ],
        "get the report" => &[
            &|_| call("browser_navigate", json!({"url": site.url("/files")})),
            &|_| call("browser_snapshot", json!({})),
            &|got| {
                let link = element(got, "link", "Download the report");
                call("browser_click", json!({"element": "the report", "target": link}))
            },
            &|_| call("browser_wait_for", json!({"time": 1})),
        ],
        "get the odd file" => &[
            &|_| call("browser_navigate", json!({"url": site.url("/files")})),
            &|_| call("browser_snapshot", json!({})),
            &|got| {
                let link = element(got, "link", "Download the odd one");
                call("browser_click", json!({"element": "the odd one", "target": link}))
            },
            &|_| call("browser_wait_for", json!({"time": 1})),
        ],
        "read the deals" => {
            &[&|_| call("browser_navigate", json!({"url": site.url("/hostile")})), &|_| {
                call("browser_snapshot", json!({}))
            }]
        }
        "show the note" => &[
            &|_| call("browser_navigate", json!({"url": site.url("/echo")})),
            &|_| call("browser_snapshot", json!({})),
            &|got| {
                let note = element(got, "textbox", "Note");
                call(
                    "browser_type",
                    json!({"element": "Note", "target": note, "text": "{{secret:SITE_PW}}"}),
                )
            },
            &|_| call("browser_snapshot", json!({})),
            &|_| call("browser_evaluate", json!({"function": "() => document.body.innerText"})),
            &|_| call("browser_take_screenshot", json!({"type": "png"})),
        ],
        "screenshots of the orders and the key" => &[
            &|_| call("browser_navigate", json!({"url": site.url("/")})),
            &|_| call("browser_take_screenshot", json!({"type": "png"})),
            &|_| call("browser_navigate", json!({"url": site.url("/reveal")})),
            &|_| call("browser_take_screenshot", json!({"type": "png"})),
        ],
        "send me a screenshot of the orders" => &[
            &|_| call("browser_navigate", json!({"url": site.url("/")})),
            &|_| {
                call(
                    "browser_take_screenshot",
                    json!({"type": "png", "filename": "downloads/orders.png"}),
                )
            },
            &|_| {
                Step::tool_call(
                    "send_file",
                    json!({"path": "downloads/orders.png", "caption": "The orders page"}),
                )
            },
        ],
        _ => &[],
    };
    plan.get(got.len()).map(|action| action(got))
}

/// Plans that try the browser's walls, and a delegated task's.
fn walls_plan(said: &str, site: &TestSite, got: &[String]) -> Option<Step> {
    let plan: &[Action<'_>] = match said {
        "save outside the room" => &[
            &|_| call("browser_take_screenshot", json!({"filename": "/tmp/outside.png"})),
            &|_| call("browser_navigate", json!({"url": site.url("/upload")})),
            &|_| call("browser_snapshot", json!({})),
            &|got| {
                let line = got[2].lines().find(|l| l.contains("Attach") && l.contains("[ref="));
                let line = line.unwrap_or_else(|| panic!("no file input: {got:#?}"));
                let at = line.find("[ref=").unwrap() + 5;
                let target = &line[at..at + line[at..].find(']').unwrap()];
                call("browser_click", json!({"element": "Attach", "target": target}))
            },
            &|_| call("browser_file_upload", json!({"paths": ["/etc/passwd"]})),
            // No paths: the file chooser is cancelled (it would hold every later action).
            &|_| call("browser_file_upload", json!({})),
        ],
        "look at the orders page" => {
            &[&|_| call("browser_navigate", json!({"url": site.url("/")})), &|_| {
                call("browser_take_screenshot", json!({"type": "png"}))
            }]
        }
        "hang" => &[&|_| call("browser_navigate", json!({"url": site.url("/loop")}))],
        "eat" => &[&|_| call("browser_navigate", json!({"url": site.url("/eat")}))],
        // A delegated task granted the browser's tools: its model's requests come here
        // too, as "open my account".
        "delegate opening my account" => &[&|_| {
            let tools = ["mcp__browser__browser_navigate", "mcp__browser__browser_snapshot"];
            Step::tool_call(
                "delegate_to_sub_agent",
                json!({"task": "open my account", "tools": tools}),
            )
        }],
        "open my account" => {
            &[&|_| call("browser_navigate", json!({"url": site.url("/account")})), &|_| {
                call("browser_snapshot", json!({}))
            }]
        }
        _ => &[],
    };
    plan.get(got.len()).map(|action| action(got))
}

fn answers_to(answers: &Answers, said: &str) -> Vec<String> {
    answers.lock().unwrap().get(said).cloned().unwrap_or_default()
}

/// What every browser test starts from: the Telegram emulator, the site, the scripted model
/// browsing it (and what the browser answered it), a workspace, Docker names of the test's
/// own, and the daemon's environment, not yet started.
struct Browsing {
    tg: TelegramFixture,
    site: TestSite,
    llm: ScriptedLlm,
    answers: Answers,
    ws: TempWorkspace,
    names: Leftovers,
    env: Vec<(String, String)>,
}

impl Browsing {
    /// `tag` names the workspace, and the Docker names without its dashes.
    async fn start(tag: &str) -> Self {
        let tg = TelegramFixture::start().await;
        let site = TestSite::start(crate::host_approvals::host()).await;
        let llm = ScriptedLlm::start(vec![]).await;
        let answers = browsing_model(&llm, &site);
        let ws = TempWorkspace::init(tag);
        let names = Leftovers::new(&tag.replace('-', ""));
        let env = browser_env(&llm, &tg, &names, &site);
        Self { tg, site, llm, answers, ws, names, env }
    }
}

/// The daemon's environment: Telegram, a pool of its own, the browser on for every allowed
/// chat, and the site's address opened to the proxy (`egress.mode` stays `open`).
fn browser_env(
    llm: &ScriptedLlm,
    tg: &TelegramFixture,
    names: &Leftovers,
    site: &TestSite,
) -> Vec<(String, String)> {
    let mut env = telegram_env(llm, tg);
    env.extend(names.env());
    env.extend(
        [
            ("NEXBOT_BROWSER__ENABLED", "true".to_owned()),
            ("NEXBOT_BROWSER__ALLOWED_CHATS", r#"["*"]"#.to_owned()),
            (
                "NEXBOT_EGRESS__PROXY__ALLOW_INTERNAL",
                format!(r#"[{{ cidr = "{}", ports = [{}] }}]"#, site.addr.ip(), site.addr.port()),
            ),
        ]
        .map(|(k, v)| (k.to_owned(), v)),
    );
    env
}

/// Says `text` in `chat` and waits for the model's answer to it (a new one, when the same
/// words were said before).
async fn say_and_wait(tg: &TelegramFixture, chat: i64, text: &str) {
    let done = format!("browsed: {text}");
    let answered = |m: &[nexbot_tests::telegram::BotMessage]| {
        m.iter().filter(|m| m.text.contains(&done)).count()
    };
    let before = answered(&tg.bot_messages(chat).await);
    tg.user_says(chat, chat, text).await;
    tg.wait_bot_messages(chat, |m| answered(m) > before, LIMIT * 3).await;
}

/// The owner's chat reads a page its script writes, logs in, fills a two-step form, gets a
/// download into its room and reads a hostile page as data; after a restart of the daemon it
/// is still logged in. A friend's chat, on the same site, is not, and its browser sees only
/// its own room.
#[tokio::test]
async fn a_chats_browser_logs_in_fills_forms_downloads_and_keeps_its_login_across_a_restart() {
    let Some(_docker) = nexbot_tests::docker_or_skip("browser").await else { return };
    let Browsing { tg, site, llm, answers, ws, names: _names, mut env } =
        Browsing::start("browser").await;
    env.push(("NEXBOT_LLM__VISION".into(), "true".into()));
    let serving = start(&ws, &env).await;

    say_and_wait(&tg, OWNER, "read the orders page").await;
    let read = answers_to(&answers, "read the orders page");
    assert!(read[1].contains(site::RENDERED), "the script's text: {read:#?}");

    say_and_wait(&tg, OWNER, "log in").await;
    let login = answers_to(&answers, "log in");
    assert!(login[4].contains(site::WELCOME), "logged in: {login:#?}");

    say_and_wait(&tg, OWNER, "place the order").await;
    let order = answers_to(&answers, "place the order");
    assert!(order[5].contains("Ordered 3 × blue mug"), "{order:#?}");

    say_and_wait(&tg, OWNER, "get the report").await;
    let room = ws
        .dir
        .join("chats")
        .join(nexbot_tools::rooms::room_name(&format!("telegram:{OWNER}").parse().unwrap()));
    let report = std::fs::read_to_string(room.join("downloads").join(site::DOWNLOAD_NAME));
    assert_eq!(
        report.as_deref().ok(),
        Some(site::DOWNLOAD_BODY),
        "the download is in the room: {:#?}",
        answers_to(&answers, "get the report")
    );

    // A download whose name climbs out of downloads/ into the profile and hides its
    // extension behind a right-to-left override: it lands in downloads/, under a plain name.
    say_and_wait(&tg, OWNER, "get the odd file").await;
    let landed = files_holding(&room, site::ODD_BODY.as_bytes());
    assert_eq!(landed.len(), 1, "{landed:?} {:#?}", answers_to(&answers, "get the odd file"));
    assert_eq!(landed[0].parent(), Some(room.join("downloads").as_path()), "{landed:?}");
    let name = landed[0].file_name().unwrap().to_str().unwrap();
    let hidden = |c: char| {
        c.is_control()
            || matches!(c, '\u{200E}'..='\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
    };
    assert!(!name.chars().any(hidden) && !name.starts_with('.'), "{name:?}");

    // A page's words reach the model as data, inside the envelope, never as instructions.
    say_and_wait(&tg, OWNER, "read the deals").await;
    let deals = answers_to(&answers, "read the deals");
    let hostile = deals.iter().find(|a| a.contains(site::INJECTION)).expect("the page's text");
    let opens = hostile.find("MCP_RESULT").expect("an envelope");
    assert!(opens < hostile.find(site::INJECTION).unwrap(), "{hostile}");

    // A screenshot, saved in the room and sent to the chat as a file.
    say_and_wait(&tg, OWNER, "send me a screenshot of the orders").await;
    let shot = std::fs::read(room.join("downloads/orders.png")).expect("the screenshot");
    assert!(shot.starts_with(b"\x89PNG") && shot.len() > 2_000, "{} bytes", shot.len());
    let sent = tg.bot_messages(OWNER).await;
    let document = sent.iter().find(|m| m.kind == "document").expect("the screenshot was sent");
    let file = document.file.as_ref().unwrap();
    assert_eq!(file.file_name.as_deref(), Some("orders.png"));
    assert_eq!(file.size, shot.len() as u64);
    // Kept for the docs (docs/browser.md shows one).
    let kept =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/browser-screenshots");
    let _ = std::fs::create_dir_all(&kept);
    let _ = std::fs::write(kept.join("orders.png"), &shot);

    // A screenshot saved to a file is not a picture for the model (Playwright answers with the
    // file's name); one without a file is, and a model that sees images is shown it after the
    // tool answers, as a message that says it is data from outside.
    assert!(pictures_sent(&llm).is_empty());
    say_and_wait(&tg, OWNER, "look at the orders page").await;
    let looked = answers_to(&answers, "look at the orders page");
    assert!(looked[1].contains("[image: image/png"), "{looked:#?}");
    let seen = pictures_sent(&llm);
    assert_eq!(seen.len(), 1, "one picture shown to the model: {looked:#?}");

    // Every request went through the proxy, under the chat's browser's name.
    let audit = std::fs::read_to_string(ws.database().parent().unwrap().join("egress-audit.jsonl"))
        .unwrap_or_default();
    let ours: Vec<Value> = audit
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|l| l["port"] == site.addr.port())
        .collect();
    assert!(!ours.is_empty(), "the audit names the site");
    assert!(
        ours.iter().all(|l| l["task_id"] == format!("mcp:browser@telegram:{OWNER}")),
        "{ours:#?}"
    );
    serving.stop(LIMIT).await;

    // A restart: the same chat is still logged in (its profile is in its room).
    let serving = start(&ws, &env).await;
    say_and_wait(&tg, OWNER, "open my account").await;
    let account = answers_to(&answers, "open my account");
    assert!(account[1].contains(site::WELCOME), "still logged in: {account:#?}");

    // A task the chat delegates, granted the browser's tools, works in the chat's own browser
    // (logged in); the delegating turn reads its answer.
    answers.lock().unwrap().remove("open my account");
    say_and_wait(&tg, OWNER, "delegate opening my account").await;
    let account = answers_to(&answers, "open my account");
    let relayed = answers_to(&answers, "delegate opening my account");
    assert!(
        account.get(1).is_some_and(|a| a.contains(site::WELCOME)),
        "the task used the chat's browser: {account:#?} {relayed:#?}"
    );
    assert!(relayed[0].contains("browsed: open my account"), "{relayed:#?}");
    // The task's receipt names the site its browser calls reached (they are the chat's
    // browser's at the proxy, and lent to the task while its calls ran).
    let site_name = site.addr.to_string();
    let receipts = tg.wait_bot_messages(OWNER, |m| has_text(m, "Contacted:"), LIMIT).await;
    let receipt = receipts.iter().rev().find(|m| m.text.contains("Contacted:"));
    let receipt = receipt.map(|m| m.text.clone()).unwrap_or_default();
    let contacted = receipt.lines().find(|l| l.starts_with("Contacted:")).unwrap_or_default();
    let texts: Vec<&str> = receipts.iter().map(|m| m.text.as_str()).collect();
    assert!(contacted.contains(&site_name), "{receipt} in {texts:#?}");

    // Another chat on the same site: not logged in, and its browser has only its own room.
    say_and_wait(&tg, FRIEND, "open my account").await;
    let account = answers_to(&answers, "open my account");
    assert!(account[1].contains(site::NOT_LOGGED_IN), "{account:#?}");
    assert!(!account[1].contains(site::WELCOME));
    let visits = site.visits();
    let accounts: Vec<bool> =
        visits.iter().filter(|v| v.path == "/account").map(|v| v.logged_in).collect();
    assert_eq!(accounts.last(), Some(&false), "the friend's request carried no login");
    serving.stop(LIMIT).await;
}

/// In `ask` mode the browser's first request to a site is held while its chat is asked; a
/// denial fails the page and the model reads why.
#[tokio::test]
async fn in_ask_mode_the_browsers_first_request_is_asked_about_and_a_denial_fails_the_page() {
    let Some(_docker) = nexbot_tests::docker_or_skip("browser-ask").await else { return };
    let Browsing { tg, site, llm: _llm, answers, ws, names: _names, mut env } =
        Browsing::start("browser-ask").await;
    env.push(("NEXBOT_EGRESS__MODE".into(), "ask".into()));
    let serving = start(&ws, &env).await;

    tg.user_says(OWNER, OWNER, "read the orders page").await;
    let question = wait_question(&tg, OWNER, 0).await;
    assert!(question.text.contains(&site.addr.to_string()), "{}", question.text);
    assert!(site.visits().is_empty(), "held: nothing reached the site");
    let deny = press(&question, "Deny");
    tg.user_clicks(OWNER, OWNER, question.message_id, &deny).await;
    tg.wait_bot_messages(OWNER, |m| has_text(m, "browsed: read the orders page"), LIMIT * 3).await;
    let read = answers_to(&answers, "read the orders page");
    assert!(!read.iter().any(|a| a.contains(site::RENDERED)), "{read:#?}");
    assert!(
        read[0].contains("ERR_TUNNEL_CONNECTION_FAILED")
            || read[0].contains("403")
            || read[0].to_lowercase().contains("denied"),
        "the model reads why the page failed: {read:#?}"
    );
    assert!(site.visits().is_empty(), "nothing reached the site");
    // A denial refuses that request only: the browser's next request to the site (a retry, a
    // favicon) is asked about again, about the same site.
    let asked = questions(&tg.bot_messages(OWNER).await);
    assert!(asked.iter().all(|q| q.text.contains(&site.addr.to_string())), "{asked:#?}");
    serving.stop(LIMIT).await;
}

/// The running browser containers of the daemon whose pool is `names`.
/// The pictures of tool answers the model was shown, each a PNG, in order (a turn's later
/// requests carry its pictures again: each is listed once).
fn pictures_sent(llm: &ScriptedLlm) -> Vec<Vec<u8>> {
    let mut seen: Vec<Vec<u8>> = Vec::new();
    for request in llm.chat_requests() {
        let messages = request.body["messages"].as_array().cloned().unwrap_or_default();
        for message in messages.iter().filter(|m| is_tool_pictures(m)) {
            let said = message["content"][0]["text"].as_str().unwrap_or_default();
            assert!(
                said.contains("data from outside") && said.contains("not the user's"),
                "{said}"
            );
            let url = message["content"][1]["image_url"]["url"].as_str().unwrap_or_default();
            let png = url.strip_prefix("data:image/png;base64,").expect("a PNG's data URL");
            let bytes = base64::engine::general_purpose::STANDARD.decode(png).unwrap();
            assert!(bytes.starts_with(b"\x89PNG") && bytes.len() > 2_000, "{} bytes", bytes.len());
            if !seen.contains(&bytes) {
                seen.push(bytes);
            }
        }
    }
    seen
}

/// The files under `dir` (links not followed) whose bytes are `body`.
fn files_holding(dir: &std::path::Path, body: &[u8]) -> Vec<std::path::PathBuf> {
    let (mut found, mut stack) = (Vec::new(), vec![dir.to_path_buf()]);
    while let Some(at) = stack.pop() {
        for entry in std::fs::read_dir(&at).into_iter().flatten().flatten() {
            let Ok(kind) = entry.file_type() else { continue };
            if kind.is_dir() {
                stack.push(entry.path());
            } else if kind.is_file() && std::fs::read(entry.path()).is_ok_and(|b| b == body) {
                found.push(entry.path());
            }
        }
    }
    found
}

/// Waits until `done` (what it waits for, in the failure), within the tests' limit.
async fn until(what: &str, done: impl Fn() -> bool) {
    let started = std::time::Instant::now();
    while !done() {
        assert!(started.elapsed() < LIMIT, "not seen within {LIMIT:?}: {what}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

fn browser_containers(names: &Leftovers) -> Vec<String> {
    let listed = common::docker_cli(&[
        "ps",
        "-q",
        "--no-trunc",
        "--filter",
        "label=nexbot.mcp.server=browser",
        "--filter",
        &format!("name={}-mcp-browser", names.pool),
    ]);
    listed.lines().map(str::to_owned).collect()
}

/// What a node program run inside the container prints.
fn node_in(container: &str, program: &str) -> String {
    common::docker_cli(&["exec", container, "node", "-e", program])
}

/// The walls test's action limit (`browser.action_timeout_secs`).
const ACTION_LIMIT_SECS: u64 = 45;

/// The chat's browser container is hardened like the pool's, has only its chat's room, listens
/// on no port (no DevTools endpoint), and reaches nothing but through the proxy; a page whose
/// script never ends is cut off at the action's limit, the model is told, and the next action
/// gets a fresh browser; `/browser reset` forgets the profile.
#[tokio::test]
async fn the_browser_is_walled_a_stuck_page_gets_a_fresh_browser_and_reset_forgets_it() {
    let Some(_docker) = nexbot_tests::docker_or_skip("browser-walls").await else { return };
    let Browsing { tg, site, llm: _llm, answers, ws, names, mut env } =
        Browsing::start("browser-walls").await;
    // Short enough for the stuck page's wait, long enough for a cold start on a busy machine:
    // the first action of a fresh browser starts Chromium inside its limit. 8 s failed a CI
    // run whose host suite was starting beside it (three browsers and eight daemons starting
    // at once on two cores); 20 s failed the next one early, most likely the same way (CI
    // kept only the test's name).
    env.push(("NEXBOT_BROWSER__ACTION_TIMEOUT_SECS".into(), ACTION_LIMIT_SECS.to_string()));
    let serving = start(&ws, &env).await;

    say_and_wait(&tg, OWNER, "read the orders page").await;
    let read = answers_to(&answers, "read the orders page");
    assert!(read.get(1).is_some_and(|r| r.contains(site::RENDERED)), "{read:#?}");
    let running = browser_containers(&names);
    assert_eq!(running.len(), 1, "one browser, the chat's: {running:?}");
    let first = running[0].clone();
    let inspected = common::docker_cli(&["inspect", &first]);
    let info: Value = serde_json::from_str::<Vec<Value>>(&inspected).unwrap().remove(0);
    let host = &info["HostConfig"];
    assert_eq!(info["Config"]["User"], "65532:65532");
    assert_eq!(host["ReadonlyRootfs"], true);
    assert_eq!(host["CapDrop"], json!(["ALL"]));
    assert_eq!(host["SecurityOpt"], json!(["no-new-privileges:true"]));
    assert_eq!(host["Privileged"], false);
    assert_eq!(host["Memory"], 1024 * 1024 * 1024);
    assert_eq!(host["PidsLimit"], nexbot_tests::expected_pids_limit(512));
    assert!(host["NanoCpus"].as_i64().is_some_and(|n| n > 0), "a CPU limit: {host:#}");
    assert_eq!(host["NetworkMode"], names.network.as_str());
    let room = ws
        .dir
        .join("chats")
        .join(nexbot_tools::rooms::room_name(&format!("telegram:{OWNER}").parse().unwrap()));
    let mounts = info["Mounts"].as_array().unwrap();
    let binds: Vec<&Value> = mounts.iter().filter(|m| m["Type"] == "bind").collect();
    assert_eq!(binds.len(), 1, "only the chat's room: {mounts:#?}");
    let room_name = room.file_name().unwrap().to_str().unwrap();
    assert!(binds[0]["Source"].as_str().unwrap().ends_with(room_name), "{mounts:#?}");
    assert_eq!(binds[0]["Destination"], "/room");

    // No port: nothing listens in the container's network (Chromium is driven over a pipe)
    // but the engine's own resolver, 127.0.0.11, which every container of a user-defined
    // network has.
    let pid = info["State"]["Pid"].as_i64().unwrap();
    for table in ["tcp", "tcp6"] {
        let sockets = std::fs::read_to_string(format!("/proc/{pid}/net/{table}")).unwrap();
        let listening: Vec<&str> = sockets
            .lines()
            .skip(1)
            .filter(|l| l.split_whitespace().nth(3) == Some("0A"))
            .filter(|l| !l.split_whitespace().nth(1).unwrap_or("").starts_with("0B00007F:"))
            .collect();
        assert!(listening.is_empty(), "{table}: {listening:?}");
    }
    // Its files are the room's: a path outside it is refused, for writing and for an upload.
    say_and_wait(&tg, OWNER, "save outside the room").await;
    let outside = answers_to(&answers, "save outside the room");
    assert!(outside[0].contains("outside allowed roots"), "{outside:#?}");
    assert!(outside[4].contains("outside allowed roots"), "{outside:#?}");
    assert!(!outside[5].contains("Error"), "the chooser was cancelled: {outside:#?}");

    // Nothing leaves but through the proxy: a direct connection and a lookup both fail.
    let direct = format!(
        "const s = require('net').connect({}, '{}'); s.setTimeout(3000); \
         s.on('connect', () => {{ s.write('GET /direct HTTP/1.0\\r\\n\\r\\n'); console.log('CONNECTED') }}); \
         s.on('timeout', () => {{ console.log('TIMEOUT'); process.exit() }}); \
         s.on('error', e => console.log('ERR ' + e.code))",
        site.addr.port(),
        site.addr.ip()
    );
    let said = node_in(&first, &direct);
    assert!(!said.contains("CONNECTED") && !said.is_empty(), "{said}");
    let lookup =
        "require('dns').lookup('example.com', (e, a) => console.log(e ? 'ERR ' + e.code : a))";
    let looked_up = node_in(&first, lookup);
    assert!(looked_up.starts_with("ERR"), "no DNS: {looked_up}");
    assert!(!site.visits().iter().any(|v| v.path == "/direct"));

    // `/stop` while an action waits on a page whose script never ends: the turn ends without
    // waiting for the action's limit, the browser still busy with that page is stopped, and
    // the next action gets a fresh browser (before, it met the stuck one and its limit).
    let seen = site.visits().len();
    tg.user_says(OWNER, OWNER, "hang").await;
    until("the browser asks for the page that loops", || {
        site.visits()[seen..].iter().any(|v| v.path == "/loop")
    })
    .await;
    tg.user_says(OWNER, OWNER, "/stop").await;
    tg.wait_bot_messages(OWNER, |m| m.iter().any(|m| m.text == "Stopped."), LIMIT).await;
    until("the busy browser is stopped", || !browser_containers(&names).contains(&first)).await;
    say_and_wait(&tg, OWNER, "read the orders page").await;
    let read = answers_to(&answers, "read the orders page");
    assert!(read[1].contains(site::RENDERED), "after /stop, a fresh browser: {read:#?}");
    let second = browser_containers(&names);
    assert_eq!(second.len(), 1);
    assert_ne!(second[0], first);
    let first = second[0].clone();

    // A page whose script never ends: the action's limit ends it, the model reads why, and the
    // browser that ran it is gone.
    say_and_wait(&tg, OWNER, "hang").await;
    let hang = answers_to(&answers, "hang");
    assert!(hang[0].contains(&format!("passed its limit of {ACTION_LIMIT_SECS} s")), "{hang:#?}");
    assert!(hang[0].contains("the next call starts it afresh"), "{hang:#?}");
    assert!(!browser_containers(&names).contains(&first), "the stuck browser is gone");
    say_and_wait(&tg, OWNER, "read the orders page").await;
    let read = answers_to(&answers, "read the orders page");
    assert!(read[1].contains(site::RENDERED), "a fresh browser reads the page: {read:#?}");
    let fresh = browser_containers(&names);
    assert_eq!(fresh.len(), 1);
    assert_ne!(fresh[0], first);

    // A page that eats memory meets the container's limit; the model reads that the action
    // failed, and the next action reads a page.
    say_and_wait(&tg, OWNER, "eat").await;
    let eat = answers_to(&answers, "eat");
    assert!(eat[0].contains("failed") && eat[0].contains("Page crashed"), "{eat:#?}");
    say_and_wait(&tg, OWNER, "read the orders page").await;
    let read = answers_to(&answers, "read the orders page");
    assert!(read[1].contains(site::RENDERED), "after the hungry page: {read:#?}");

    // `/browser reset`: the browser stops and its profile is gone; the downloads stay.
    assert!(room.join(".browser").exists());
    std::fs::create_dir_all(room.join("downloads")).unwrap();
    std::fs::write(room.join("downloads/kept.txt"), "kept").unwrap();
    tg.user_says(OWNER, OWNER, "/browser reset").await;
    tg.wait_bot_messages(OWNER, |m| has_text(m, "Forgot this chat's browser"), LIMIT).await;
    assert!(!room.join(".browser").exists(), "the profile is gone");
    assert!(room.join("downloads/kept.txt").exists(), "the downloads stay");
    assert!(browser_containers(&names).is_empty(), "the browser was stopped");
    let log = serving.stop(LIMIT).await;
    assert!(log.contains("MCP server stopped: its call was stopped"), "{log}");
}

/// A chat's secret typed into a page: filled in where its binding allows (the site's login
/// works), refused on a page of another origin (which gets nothing), refused anywhere but
/// alone in `browser_type`, and never read back by the model, even from a page that shows it.
#[tokio::test]
async fn a_secret_is_typed_only_where_its_binding_allows_and_the_model_never_reads_it() {
    use nexbot_control::{secrets_paths, Client, SecretEntry, SecretSet, SecretValue};
    let Some(_docker) = nexbot_tests::docker_or_skip("browser-secret").await else { return };
    let Browsing { tg, site, llm, answers, ws, names: _names, mut env } =
        Browsing::start("browser-secret").await;
    let elsewhere = TestSite::start(crate::host_approvals::host()).await;
    env.retain(|(k, _)| k != "NEXBOT_EGRESS__PROXY__ALLOW_INTERNAL");
    env.push((
        "NEXBOT_EGRESS__PROXY__ALLOW_INTERNAL".into(),
        format!(
            r#"[{{ cidr = "{}", ports = [{}, {}] }}]"#,
            site.addr.ip(),
            site.addr.port(),
            elsewhere.addr.port()
        ),
    ));
    env.push(("NEXBOT_MASTER_KEY".into(), "browser-test-master-key-0123456789".into()));
    env.push(("NEXBOT_LLM__VISION".into(), "true".into()));
    let serving = start(&ws, &env).await;
    let set = SecretSet {
        scope: format!("telegram:{OWNER}"),
        name: "SITE_PW".into(),
        value: SecretValue::new(site::PASSWORD.into()),
        hosts: vec![format!("http://{}", site.addr)],
        places: vec!["body".into()],
        mode: None,
        confirm: false,
    };
    let client = Client::new(ws.dir.join("nexbot.sock"));
    let _: SecretEntry = client.post(secrets_paths::SECRETS, &set).await.unwrap();

    // Where it is bound: typed, and the login works.
    say_and_wait(&tg, OWNER, "log in with the secret").await;
    let login = answers_to(&answers, "log in with the secret");
    assert!(login[3].contains("Typed the secret SITE_PW"), "{login:#?}");
    assert!(login[4].contains(site::WELCOME), "logged in with the secret: {login:#?}");

    // A page that shows what was typed: the model reads the secret's name, never its value.
    say_and_wait(&tg, OWNER, "show the note").await;
    let note = answers_to(&answers, "show the note");
    assert!(note[2].contains("Typed the secret SITE_PW"), "{note:#?}");
    assert!(note[4].contains("You typed:"), "the page shows it: {note:#?}");
    // Its screenshot is not shown to the model: the browser has typed a secret (a page may
    // draw the value where its text does not say it).
    assert!(
        note[5].contains("its picture is not shown to the model: this chat's browser has typed"),
        "{note:#?}"
    );
    assert_eq!(pictures_sent(&llm).len(), 0);

    // A chat that typed nothing, with the same value as a secret of its own: a page's picture
    // is shown to the model, unless the page shows that value (as a site shows a key).
    let set = SecretSet { scope: format!("telegram:{FRIEND}"), name: "FRIEND_KEY".into(), ..set };
    let _: SecretEntry = client.post(secrets_paths::SECRETS, &set).await.unwrap();
    say_and_wait(&tg, FRIEND, "screenshots of the orders and the key").await;
    let shots = answers_to(&answers, "screenshots of the orders and the key");
    assert!(!shots[1].contains("not shown"), "{shots:#?}");
    assert!(
        shots[3].contains("its picture is not shown to the model: the page shows one of"),
        "{shots:#?}"
    );
    assert_eq!(pictures_sent(&llm).len(), 1, "the orders page's picture only");

    // Another origin (another port of the same host): refused, and it gets nothing.
    let other = elsewhere.clone();
    llm.set_responder(move |body| {
        let got = this_turns_results(body);
        match got.len() {
            0 => call("browser_navigate", json!({"url": other.url("/login")})),
            1 => call("browser_snapshot", json!({})),
            2 => {
                let password = element(&got, "textbox", "Password");
                call(
                    "browser_type",
                    json!({"element": "Password", "target": password,
                           "text": "{{secret:SITE_PW}}", "submit": true}),
                )
            }
            3 => call(
                "browser_navigate",
                json!({"url": format!("{}?{{{{secret:SITE_PW}}}}", other.url("/login"))}),
            ),
            _ => {
                let texts = got.join("\n---\n");
                Step::text(&format!("browsed elsewhere\n{texts}"))
            }
        }
    });
    tg.user_says(OWNER, OWNER, "type it elsewhere").await;
    let said = tg.wait_bot_messages(OWNER, |m| has_text(m, "browsed elsewhere"), LIMIT * 3).await;
    let reply = said.iter().find(|m| m.text.contains("browsed elsewhere")).unwrap().text.clone();
    assert!(reply.contains("is not typed into this page"), "{reply}");
    assert!(reply.contains("was not run"), "a placeholder in a URL is refused: {reply}");
    assert!(
        !elsewhere
            .visits()
            .iter()
            .any(|v| v.method == "POST" || v.path != "/login" && v.path != "/favicon.ico"),
        "the other origin got nothing: {:?}",
        elsewhere.visits()
    );

    // Nothing the model was ever sent holds the value.
    for request in llm.chat_requests() {
        assert!(!request.body.to_string().contains(site::PASSWORD), "{}", request.body);
    }
    serving.stop(LIMIT).await;

    // The browser's profile, written out as it stopped, keeps no copy of what was typed.
    let room = ws
        .dir
        .join("chats")
        .join(nexbot_tools::rooms::room_name(&format!("telegram:{OWNER}").parse().unwrap()));
    let mut stack = vec![room.join(".browser")];
    let (mut files, mut visited) = (0, false);
    let address = site.addr.to_string();
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            if entry.file_type().unwrap().is_dir() {
                stack.push(path);
            } else if let Ok(bytes) = std::fs::read(&path) {
                files += 1;
                let found =
                    bytes.windows(site::PASSWORD.len()).any(|w| w == site::PASSWORD.as_bytes());
                assert!(!found, "the typed secret is in {}", path.display());
                // The positive control: the profile's history names the site in plain text.
                visited |= bytes.windows(address.len()).any(|w| w == address.as_bytes());
            }
        }
    }
    assert!(files > 10 && visited, "the profile was written ({files} files), its history read");
}
