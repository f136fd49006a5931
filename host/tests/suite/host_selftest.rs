//! The owner's self-test against a daemon started the way README starts it (`nexbot init`'s
//! config, `nexbot serve`, the real pool, egress and firewall, the Telegram emulator): every
//! attack is held, the report reaches the owner (and nobody else may start one), `nexbot
//! doctor --attack` prints the same, `/status` shows the last run, no model is asked, and
//! nothing of the self-test is left (its rooms' folders, its container). The control: the same
//! daemon with a weakened setting (`egress.mode = "open"`) turns the matching line red, and
//! `doctor --attack` exits 1.

use crate::common;

use std::time::Duration;

use common::{base_env, Leftovers, Serving, TempWorkspace};
use nexbot_control::{paths, Client, SubagentList};
use nexbot_tests::scripted_llm::{ScriptedLlm, Step};
use nexbot_tests::telegram::TelegramFixture;

const LIMIT: Duration = Duration::from_secs(120);
const OWNER: i64 = 7501;
const FRIEND: i64 = 7502;

/// Every attack the self-test runs, by its report's words.
const ATTACKS: &[&str] = &[
    "the container's hardening (docker inspect)",
    "a setsid loop and a thread group whose leader exited, planted to outlive their task",
    "files in /dev/shm, /tmp and the working folder and a System V segment left",
    "reading the subagent's memory (/proc/1/mem)",
    "reaching the host without the proxy (direct IP)",
    "the host's own address through the proxy",
    "a DNS name carrying data, without the proxy",
    "the cloud metadata address through the proxy",
    "a destination no rule allows (the mode must hold it)",
    "another room's files and the daemon's files",
    "the proxy from an idle container, with its last task's credential",
];

/// The attack that needs the vault (a secret of the self-test's own to misplace).
const WITH_VAULT: &str = "a secret's placeholder sent outside its binding";

/// The daemon's environment: README's (`nexbot init`'s config, egress `mode` as given).
fn env(llm: &ScriptedLlm, names: &Leftovers, mode: &str) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = base_env(&llm.base_url())
        .into_iter()
        .chain(names.env())
        .filter(|(k, _)| k != "NEXBOT_EGRESS__MODE")
        .collect();
    env.push(("NEXBOT_EGRESS__MODE".into(), mode.into()));
    env
}

async fn doctor_attack(ws: &TempWorkspace, env: &[(String, String)]) -> (Option<i32>, String) {
    let out = common::nexbot(&["doctor", "--attack"], &ws.config(), env)
        .output()
        .await
        .expect("run nexbot doctor --attack");
    (out.status.code(), format!("{}{}", common::text(&out.stdout), common::text(&out.stderr)))
}

/// The report's line of `attack`.
fn line_of<'r>(report: &'r str, attack: &str) -> &'r str {
    report
        .lines()
        .find(|l| l.contains(&format!(" · {attack}: ")))
        .unwrap_or_else(|| panic!("no line for {attack:?} in:\n{report}"))
}

#[tokio::test]
async fn every_attack_is_held_on_a_daemon_started_as_readme_says() {
    let Some(_docker) = nexbot_tests::docker_or_skip("selftest").await else { return };
    let tg = TelegramFixture::start().await;
    let llm = ScriptedLlm::start(vec![]).await;
    llm.set_responder(|_| Step::text("no model is needed"));
    let ws = TempWorkspace::init("selftest");
    let names = Leftovers::new("selftest");
    let mut env = env(&llm, &names, "ask");
    common::telegram_env(&mut env, &tg, OWNER);
    env.push(("NEXBOT_TELEGRAM__ALLOWED_USERS".into(), format!("[{FRIEND}]")));
    env.push(("NEXBOT_MASTER_KEY".into(), "nxs-test-master-key-0123456789abcdef".into()));
    let serving = Serving::start(&ws.config(), &env, LIMIT).await;
    serving.wait_log("the control API is on", LIMIT).await;

    // Before any run, `/status` says how to run one.
    tg.user_says(OWNER, OWNER, "/status").await;
    tg.wait_bot_messages(
        OWNER,
        |m| m.iter().any(|m| m.text.contains("Self-test: never run")),
        LIMIT,
    )
    .await;
    // Not the owner: refused, nothing run.
    tg.user_says(FRIEND, FRIEND, "/selftest").await;
    tg.wait_bot_messages(FRIEND, |m| m.iter().any(|m| m.text.starts_with("Only the owner")), LIMIT)
        .await;

    tg.user_says(OWNER, OWNER, "/selftest").await;
    let reported = |m: &[nexbot_tests::telegram::BotMessage]| {
        m.iter().any(|m| m.text.starts_with("🛡 Self-test: "))
    };
    tg.wait_bot_messages(OWNER, reported, LIMIT).await;
    let messages = tg.bot_messages(OWNER).await;
    assert!(messages.iter().any(|m| m.text.starts_with("🛡 Self-test started")), "{messages:?}");
    let report = messages.iter().find(|m| m.text.starts_with("🛡 Self-test: ")).unwrap();
    let report = report.text.clone();
    eprintln!("{report}");
    let all = ATTACKS.len() + 1;
    assert!(report.starts_with(&format!("🛡 Self-test: all {all} held")), "{report}");
    let misplaced = line_of(&report, WITH_VAULT);
    assert!(misplaced.contains("403 nexbot egress proxy: secret_"), "{report}");
    for attack in ATTACKS {
        assert!(line_of(&report, attack).starts_with("✅ held"), "{attack}: {report}");
    }
    // The evidence is what stopped each attack, not a word: a few that must be specific.
    assert!(line_of(&report, ATTACKS[0]).contains("cap_drop ALL"), "{report}");
    // The plants lived (the same task saw them): their absence next is evidence.
    assert!(!line_of(&report, ATTACKS[1]).contains("did not start"), "{report}");
    assert!(!line_of(&report, ATTACKS[2]).contains("could be made"), "{report}");
    assert!(
        line_of(&report, ATTACKS[4]).contains("nothing reached the host's listener"),
        "{report}"
    );
    assert!(line_of(&report, ATTACKS[7]).contains("403 nexbot egress proxy"), "{report}");
    assert!(!tg.bot_messages(FRIEND).await.iter().any(|m| m.text.contains("Self-test:")));

    // The same through the control socket, as an operator runs it.
    let (code, out) = doctor_attack(&ws, &env).await;
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains(&format!("all {all} held")), "{out}");
    // The last run in `/status`.
    tg.user_says(OWNER, OWNER, "/status").await;
    let shown = |m: &[nexbot_tests::telegram::BotMessage]| {
        m.iter().any(|m| m.text.contains(&format!("Self-test: last: all {all} held, just now")))
    };
    tg.wait_bot_messages(OWNER, shown, LIMIT).await;

    // No model was asked: each attack is a command the self-test wrote, not a model's (the
    // daemon's own start-up probe of the model may be there; no task's call is).
    for request in llm.requests() {
        let body = request.body.to_string();
        assert!(!body.contains("selftest") && !body.contains("run_command"), "{body}");
    }
    // Nothing of it is left: no self-test room's folder, no container serving one.
    let rooms = ws.dir.join("rooms");
    let left: Vec<String> = std::fs::read_dir(&rooms)
        .map(|d| d.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    assert!(!left.iter().any(|r| r.contains("selftest")), "left: {left:?}");
    let client = Client::new(ws.dir.join("nexbot.sock"));
    let ps: SubagentList = client.get(paths::SUBAGENTS).await.unwrap();
    for s in &ps.subagents {
        let room = s.room.clone().unwrap_or_default();
        assert!(!room.contains("selftest"), "a container still serves {room}");
    }
    let retired = ps.subagents.iter().filter_map(|s| s.last_restart.as_deref());
    assert!(retired.clone().any(|r| r.contains("self-test")), "{:?}", retired.collect::<Vec<_>>());
    // Kept: a report per run, in the database.
    let db = rusqlite::Connection::open(ws.database()).unwrap();
    let runs: i64 = db.query_row("SELECT COUNT(*) FROM selftests", [], |r| r.get(0)).unwrap();
    assert_eq!(runs, 2);
    let secrets: i64 = db
        .query_row("SELECT COUNT(*) FROM secrets WHERE scope LIKE '%selftest%'", [], |r| r.get(0))
        .unwrap();
    assert_eq!(secrets, 0, "the self-test's secret is deleted with its room");
    // The dashboard's and `nexbot-ctl status`'s source: the same line.
    let status: nexbot_control::Status = client.get(paths::STATUS).await.unwrap();
    let line = status.channels.iter().find(|c| c.name == "self-test").expect("a self-test line");
    assert!(line.health.starts_with(&format!("last: all {all} held")), "{line:?}");
    serving.stop(LIMIT).await;
}

#[tokio::test]
async fn a_weakened_setting_turns_its_line_red() {
    let Some(_docker) = nexbot_tests::docker_or_skip("selftest_weak").await else { return };
    let llm = ScriptedLlm::start(vec![]).await;
    llm.set_responder(|_| Step::text("no model is needed"));
    let ws = TempWorkspace::init("selftest-weak");
    let names = Leftovers::new("selftestw");
    let env = env(&llm, &names, "open");
    let serving = Serving::start(&ws.config(), &env, LIMIT).await;
    serving.wait_log("the control API is on", LIMIT).await;

    let (code, out) = doctor_attack(&ws, &env).await;
    assert_eq!(code, Some(1), "{out}");
    let mode = line_of(&out, "a destination no rule allows (the mode must hold it)");
    assert!(mode.starts_with("❌ BROKEN"), "{out}");
    assert!(mode.contains("egress.mode = open: looked up with nobody's yes"), "{out}");
    assert!(out.contains(&format!("1 broken, {} held", ATTACKS.len() - 1)), "{out}");
    // No vault here: the attack that needs one is skipped, and says why.
    assert!(out.contains(&format!("— skipped · {WITH_VAULT}: no vault (")), "{out}");
    assert!(out.contains("the self-test did not hold"), "{out}");
    serving.stop(LIMIT).await;
    // No daemon: nothing to attack, said so, exit 3 (as nexbot-ctl's).
    let (code, out) = doctor_attack(&ws, &env).await;
    assert_eq!(code, Some(3), "{out}");
    assert!(out.contains("the nexbot daemon is not running"), "{out}");
}
