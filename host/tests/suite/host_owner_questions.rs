//! Only the owner makes what outlives a task, and the owner answers any chat's question: the
//! real `nexbot serve` in `egress.mode = "ask"` with the real pool and proxy, the Telegram
//! fixture and emulator, and the scripted model. Another user's private chat is offered no
//! "always" and a typed one is refused; the owner's `/questions` lists that chat's question
//! with buttons in the owner's own chat, and the owner's press there answers it.

use crate::common::{Leftovers, TempWorkspace};
use crate::egress_support;
use crate::host_approvals::{ask_env, fetching_model, host, results_when, wait_question};
use crate::telegram::{has_text, start, FRIEND, LIMIT, OWNER};

use nexbot_tests::scripted_llm::ScriptedLlm;
use nexbot_tests::telegram::TelegramFixture;

#[tokio::test]
async fn the_owner_answers_another_chats_question_from_their_own_chat() {
    let Some(_docker) = nexbot_tests::docker_or_skip("owner_questions").await else { return };
    let tg = TelegramFixture::start().await;
    let (server, seen) = egress_support::http_server_at(host()).await;
    let llm = ScriptedLlm::start(vec![]).await;
    let results =
        fetching_model(&llm, "fetch for a friend", vec![format!("http://{server}/hello")]);
    let ws = TempWorkspace::init("owner-questions");
    let names = Leftovers::new("ownerq");
    let env = ask_env(&llm, &tg, &names, &[server]);
    let serving = start(&ws, &env).await;

    // A friend's private chat: asked with no "always", and a typed "always" is refused.
    tg.user_says(FRIEND, FRIEND, "fetch it for me").await;
    let question = wait_question(&tg, FRIEND, 0).await;
    let labels: Vec<String> = question.buttons().into_iter().map(|(l, _)| l).collect();
    assert_eq!(labels, ["Allow once", "Allow for this task", "Deny"], "{}", question.text);
    let id = question.buttons()[0].1.split_whitespace().nth(1).unwrap().to_owned();
    tg.user_says(FRIEND, FRIEND, &format!("/egress {id} chat")).await;
    tg.wait_bot_messages(FRIEND, |m| has_text(m, "Only the owner can allow"), LIMIT).await;
    // The digest is the owner's: the friend is refused it.
    tg.user_says(FRIEND, FRIEND, "/questions").await;
    tg.wait_bot_messages(FRIEND, |m| has_text(m, "Only the owner, in their private chat"), LIMIT)
        .await;
    assert!(seen.lock().unwrap().is_empty(), "still held");

    // The owner's digest names the friend's question; a press in the owner's chat answers it.
    tg.user_says(OWNER, OWNER, "/questions").await;
    let digest = tg.wait_bot_messages(OWNER, |m| has_text(m, "question(s) waiting"), LIMIT).await;
    let digest = digest.into_iter().find(|m| m.text.contains("question(s) waiting")).unwrap();
    assert!(
        digest.text.contains(&format!("#{id} in telegram:{FRIEND} (egress)")),
        "{}",
        digest.text
    );
    let request = format!("GET {}:{} /hello", server.ip(), server.port());
    assert!(digest.text.contains(&request), "{}", digest.text);
    let once = digest.buttons().into_iter().find(|(l, _)| *l == format!("#{id} once"));
    let once = once.unwrap_or_else(|| panic!("no once button: {:?}", digest.buttons())).1;
    tg.user_clicks(OWNER, OWNER, digest.message_id, &once).await;
    let got = results_when(&results, 1).await;
    assert!(got[0].to_string().contains("hello from the allowed server"), "{}", got[0]);
    assert_eq!(seen.lock().unwrap().len(), 1);
    // The friend's question says who decided.
    let decided = format!("Allowed once by telegram:{OWNER}");
    tg.wait_bot_messages(FRIEND, |m| has_text(m, &decided), LIMIT).await;
    serving.stop(LIMIT).await;
}
