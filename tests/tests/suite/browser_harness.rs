//! The browser harness itself (`nexbot_tests::browser`), with no Docker and no Nexbot: a
//! headless Chromium opens a tiny page served here on loopback, runs its same-origin script,
//! and the harness's checks are shown to work both ways (`same_origin_only` is empty for a
//! page that stays home and names the foreign address of one that does not). Closing leaves
//! no chromedriver or Chromium process behind.

use std::time::{Duration, Instant};

use axum::http::header::CONTENT_TYPE;
use axum::routing::get;
use fantoccini::Locator;
use nexbot_tests::browser::{self, Browser};

const INDEX: &str = r#"<!doctype html>
<html><head><title>harness</title><script src="/app.js" defer></script></head>
<body>
<form id="f" onsubmit="return false"><input name="q" value="x"><button id="b" type="button">Press</button></form>
<p id="out">before</p>
</body></html>"#;

const APP_JS: &str = r#"document.getElementById('b').addEventListener('click', () => {
  document.getElementById('out').textContent = 'after';
});"#;

/// A loopback port nothing listens on (bound, then released), for an address that must fail.
fn closed_port() -> u16 {
    let probe = std::net::TcpListener::bind("127.0.0.2:0").expect("a port on 127.0.0.2");
    probe.local_addr().expect("its address").port()
}

/// The text of the element with id `id`.
async fn text_of(browser: &Browser, id: &str) -> String {
    let element = browser.client().find(Locator::Id(id)).await.expect("the element");
    element.text().await.expect("its text")
}

#[tokio::test]
async fn harness_drives_chromium_and_catches_foreign_loads() {
    let started = Instant::now();
    let foreign = format!("http://127.0.0.2:{}/x.png", closed_port());
    let leaky = format!(r#"<!doctype html><html><body><img src="{foreign}" alt=""></body></html>"#);
    let app = axum::Router::new()
        .route("/", get(|| async { ([(CONTENT_TYPE, "text/html; charset=utf-8")], INDEX) }))
        .route("/app.js", get(|| async { ([(CONTENT_TYPE, "text/javascript")], APP_JS) }))
        .route(
            "/leaky",
            get(move || async move { ([(CONTENT_TYPE, "text/html; charset=utf-8")], leaky) }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind the page");
    let origin = format!("http://{}", listener.local_addr().expect("its address"));
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });

    let browser = Browser::start().await;
    eprintln!("{} started in {:?}", browser::chromium_version(), started.elapsed());
    let group = browser.process_group();
    let profile = browser.profile_dir().display().to_string();
    assert!(browser::group_alive(group), "chromedriver's group is alive while in use");
    assert!(
        !browser::processes_with_arg(&profile).is_empty(),
        "Chromium runs with the harness's profile {profile}"
    );

    let page = browser.client();
    page.goto(&format!("{origin}/")).await.expect("open the page");
    assert_eq!(text_of(&browser, "out").await, "before");
    page.find(Locator::Id("b")).await.expect("the button").click().await.expect("click it");
    let until = Instant::now() + Duration::from_secs(5);
    while text_of(&browser, "out").await != "after" {
        assert!(Instant::now() < until, "the same-origin script changed the text");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        browser.same_origin_only(&origin).await,
        Vec::<String>::new(),
        "the page and its script are all on {origin}"
    );

    // The check can fail: an image on another origin (that never answers) is named.
    page.goto(&format!("{origin}/leaky")).await.expect("open the leaky page");
    let until = Instant::now() + Duration::from_secs(5);
    let reported = loop {
        let reported = browser.same_origin_only(&origin).await;
        if !reported.is_empty() || Instant::now() >= until {
            break reported;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(reported, vec![foreign.clone()], "the foreign image is reported");

    browser.set_size(390, 844).await;
    let shot = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../target/browser-harness/phone.png");
    let _ = std::fs::remove_file(&shot);
    browser.screenshot(&shot).await;
    let png = std::fs::read(&shot).expect("the screenshot was written");
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "a PNG at {}", shot.display());
    // The IHDR chunk's width and height: the viewport asked for, not the outer window.
    let dimension = |at: usize| u32::from_be_bytes(png[at..at + 4].try_into().expect("4 bytes"));
    assert_eq!((dimension(16), dimension(20)), (390, 844), "the phone-sized screenshot");

    browser.close().await;
    assert!(!browser::group_alive(group), "no process left in chromedriver's group {group}");
    assert_eq!(
        browser::processes_with_arg(&profile),
        Vec::<u32>::new(),
        "no Chromium process left with the profile {profile}"
    );
    assert!(!std::path::Path::new(&profile).exists(), "the profile {profile} is removed");
    eprintln!("browser harness test took {:?}", started.elapsed());
}

/// A test that fails half-way never calls `close`: dropping the harness must end chromedriver
/// and Chromium all the same (the session is still open, which would keep them running).
#[tokio::test]
async fn dropping_the_harness_ends_every_process() {
    let browser = Browser::start().await;
    browser.client().goto("about:blank").await.expect("a page");
    let group = browser.process_group();
    let profile = browser.profile_dir().display().to_string();
    assert!(!browser::processes_with_arg(&profile).is_empty(), "Chromium runs");
    drop(browser);
    assert!(!browser::group_alive(group), "no process left in chromedriver's group {group}");
    assert_eq!(browser::processes_with_arg(&profile), Vec::<u32>::new(), "no Chromium left");
    assert!(!std::path::Path::new(&profile).exists(), "the profile {profile} is removed");
}
