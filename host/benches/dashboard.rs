//! `make bench`: the web dashboard on the real release `nexbot serve` with a pool of 8 and
//! 10,000 task records: the overview page's and the tasks page's server time (p50/p99 over
//! loopback, logged in), next to the obvious alternative in the same run (the same answers
//! as JSON from the control socket: `/v1/status` + `/v1/subagents`, as `nexbot-ctl status`
//! and `subagents ps` ask); then the daemon's idle RSS with the dashboard on against off.
//! Prints figures; asserts only that the pages answer.

// The daemon's tests and benches drive `nexbot` (and docker, kill) as processes; the crate's
// clippy config refuses that to the daemon's own code only.
#![allow(clippy::disallowed_methods)]

use std::time::{Duration, Instant};

use nexbot_control::{paths, Client, Status, SubagentList, WebLogin};
use nexbot_tests::bench::{ms, proc_status_kib, record, DockerCleanup, Figure, Stats, Target};
use nexbot_tests::daemon::{Daemon, Workspace, READY};
use nexbot_tests::scripted_llm::{ScriptedLlm, Step};

/// The daemon benched: the images' static binary under `make bench`, else this build's.
static NEXBOT: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| nexbot_tests::bench::daemon_binary(env!("CARGO_BIN_EXE_nexbot")));
const POOL_SIZE: usize = 8;
const TASKS: usize = 10_000;
const ROUNDS: usize = 200;
const IDLE: Duration = Duration::from_secs(5);
const LIMIT: Duration = Duration::from_secs(90);

/// 10,000 finished tasks over the last day, across 20 chats, written straight into the
/// database the daemon will open (its schema made by the store itself).
async fn seed(workspace: &Workspace) {
    drop(nexbot_store::Store::open(&workspace.database()).await.expect("create the database"));
    let mut db = rusqlite::Connection::open(workspace.database()).expect("open the database");
    let tx = db.transaction().unwrap();
    let now = nexbot_store::unix_now();
    for i in 0..TASKS {
        tx.execute(
            "INSERT INTO task_records (id, chat_id, task, container, status, started_at,
                 duration_ms, prompt_tokens, completion_tokens, egress, receipt)
             VALUES (?1, ?2, 'fetch the page', 'c0ffee123456', 'success', ?3, 1234, 100, 20,
                 '{\"destinations\":{\"example.org:443\":{\"allowed\":1,\"denied\":0,\"errors\":0}}}',
                 'Task success in 1.2s, 120 tokens')",
            rusqlite::params![
                format!("00000000-0000-4000-8000-{i:012}"),
                format!("telegram:{}", 1000 + i % 20),
                now - (i as i64 * 86_400 / TASKS as i64)
            ],
        )
        .unwrap();
    }
    tx.commit().unwrap();
}

fn rss_mb(pid: u32) -> f64 {
    let kib = (0..3)
        .map(|_| {
            std::thread::sleep(Duration::from_millis(300));
            proc_status_kib(pid, "VmRSS:").expect("read /proc/<pid>/status")
        })
        .max()
        .unwrap_or(0);
    kib as f64 * 1024.0 / 1e6
}

/// Starts `nexbot serve` with the pool (and the dashboard on `web`, when given); returns it
/// once ready and idle for [`IDLE`].
async fn serve(
    workspace: &Workspace,
    llm: &ScriptedLlm,
    pool: &str,
    network: &str,
    web: Option<std::net::SocketAddr>,
) -> Daemon {
    let mut env = vec![
        ("NEXBOT_LLM__BASE_URL", llm.base_url()),
        ("NEXBOT_LLM__MODEL", "scripted".to_owned()),
        ("NEXBOT_SUBAGENT__ENABLED", "true".to_owned()),
        ("NEXBOT_SUBAGENT__POOL_SIZE", POOL_SIZE.to_string()),
        ("NEXBOT_SUBAGENT__POOL_NAME", pool.to_owned()),
        ("NEXBOT_SUBAGENT__NETWORK", network.to_owned()),
    ];
    if let Some(web) = web {
        env.push(("NEXBOT_CONTROL__WEB_ADDR", web.to_string()));
    }
    let daemon = Daemon::spawn(NEXBOT.as_str(), &workspace.config(), env);
    daemon.wait_log(READY, LIMIT).await;
    let api = Client::new(workspace.socket());
    let start = Instant::now();
    loop {
        let list: Result<SubagentList, _> = api.get(paths::SUBAGENTS).await;
        if list.is_ok_and(|l| l.subagents.iter().filter(|s| s.state == "idle").count() == POOL_SIZE)
        {
            break;
        }
        assert!(start.elapsed() < LIMIT, "the pool of {POOL_SIZE} never warmed");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tokio::time::sleep(IDLE).await;
    daemon
}

async fn time<F, Fut>(mut call: F) -> Stats
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    for _ in 0..10 {
        call().await;
    }
    let mut samples = Vec::with_capacity(ROUNDS);
    for _ in 0..ROUNDS {
        let start = Instant::now();
        call().await;
        samples.push(start.elapsed());
    }
    Stats::of(samples)
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let run = format!("nxb-{}", std::process::id());
    let pool = format!("{run}-web");
    let network = format!("{run}-web-net");
    let _cleanup =
        DockerCleanup::default().label(nexbot_docker::spec::LABEL_POOL, &pool).network(&network);
    let llm = ScriptedLlm::start(vec![]).await;
    llm.set_responder(|_| Step::text("ok"));
    let workspace = Workspace::init(NEXBOT.as_str(), &format!("{run}-web-workspace"));
    seed(&workspace).await;
    let web = nexbot_tests::free_loopback_addr();
    println!(
        "dashboard: {bin}, pool of {POOL_SIZE}, {TASKS} task records, {ROUNDS} \
         requests per figure after 10 warm-ups, one at a time over loopback",
        bin = NEXBOT.as_str()
    );

    // Off first: the same daemon, workspace and pool without the dashboard.
    let daemon = serve(&workspace, &llm, &pool, &network, None).await;
    let off = rss_mb(daemon.pid());
    daemon.stop(LIMIT).await;

    let daemon = serve(&workspace, &llm, &pool, &network, Some(web)).await;
    let on = rss_mb(daemon.pid());
    let api = Client::new(workspace.socket());
    let login: WebLogin = api.post(paths::WEB_LOGIN, &serde_json::json!({})).await.unwrap();
    let http =
        reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let answer = http.get(&login.url).send().await.expect("the login link answers");
    let cookie = answer
        .headers()
        .get("set-cookie")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .expect("a session cookie")
        .to_owned();
    let page = |path: &'static str| {
        let (http, cookie) = (http.clone(), cookie.clone());
        let url = format!("http://{web}{path}");
        move || {
            let (http, cookie, url) = (http.clone(), cookie.clone(), url.clone());
            async move {
                let answer = http.get(&url).header("cookie", cookie).send().await.unwrap();
                assert_eq!(answer.status(), 200, "{url}");
                let body = answer.text().await.unwrap();
                assert!(body.contains("</html>"));
            }
        }
    };
    let overview = time(page("/")).await;
    let tasks = time(page("/tasks")).await;
    let json = time(|| {
        let api = api.clone();
        async move {
            let _: Status = api.get(paths::STATUS).await.unwrap();
            let _: SubagentList = api.get(paths::SUBAGENTS).await.unwrap();
        }
    })
    .await;
    let after = rss_mb(daemon.pid());
    daemon.stop(LIMIT).await;

    println!("{}", overview.line("overview page (GET /, logged in)"));
    println!("{}", tasks.line("tasks page (GET /tasks, 100 of 10,000 rows)"));
    println!("{}", json.line("alternative: /v1/status + /v1/subagents (socket)"));
    println!(
        "idle VmRSS: dashboard off {off:.2} MB, on {on:.2} MB (+{:.2}); after {} page loads \
         {after:.2} MB",
        on - off,
        ROUNDS * 2 + 20
    );
    record(Figure::reference(
        "dashboard overview server time, pool of 8, 10k tasks",
        &format!("p50 {:.2} ms, p99 {:.2} ms", ms(overview.p50), ms(overview.p99)),
        &format!(
            "tasks page p50 {:.2} ms; the same data as JSON on the socket p50 {:.2} ms",
            ms(tasks.p50),
            ms(json.p50)
        ),
    ));
    record(Figure::promised(
        "host idle RSS with the dashboard on (pool of 8)",
        on,
        "MB",
        Target::AtMost(20.0),
    ));
    record(Figure::reference(
        "  the same daemon with the dashboard off",
        &format!("{off:.2} MB"),
        &format!("on − off = {:.2} MB", on - off),
    ));
}
