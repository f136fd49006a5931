//! A real browser for the tests: Debian's headless Chromium driven over WebDriver
//! (`chromedriver`, spoken to by fantoccini).
//!
//! Why this shape: the dashboard is judged by what a browser does with it (its CSP, cookies,
//! scripts, live updates), so the tests use the one a user would, not an HTML parser.
//! chromedriver runs in a process group of its own, so ending the group ends every Chromium
//! process it started even when a test panics (a WebDriver session left open keeps its
//! processes); the profile is a fresh directory, removed at the end. Chromium's flags keep it
//! from reaching any network but the pages a test opens (this machine's network is closed,
//! and a browser's background calls would only fail, slowly).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder};

const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
/// How long chromedriver and a session may take to come up.
const START_LIMIT: Duration = Duration::from_secs(30);

/// `chromium --version`, for the notes of a run.
pub fn chromium_version() -> String {
    Command::new(CHROMIUM)
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_else(|e| format!("unknown ({e})"))
}

/// A headless Chromium session; [`Browser::close`] ends it (dropping it also ends every
/// process it started).
pub struct Browser {
    client: Option<Client>,
    driver: Child,
    profile: PathBuf,
}

impl std::fmt::Debug for Browser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Browser").field("profile", &self.profile).finish_non_exhaustive()
    }
}

impl Browser {
    /// Starts chromedriver on a free loopback port and a headless Chromium session through
    /// it. Panics, naming what is missing, when Chromium or chromedriver is not installed
    /// (`apt-get install chromium chromium-driver`; `.ci/run` installs them).
    pub async fn start() -> Browser {
        for (path, package) in [(CHROMIUM, "chromium"), (CHROMEDRIVER, "chromium-driver")] {
            assert!(
                Path::new(path).exists(),
                "{path} is missing: install Debian's {package} (apt-get install chromium \
                 chromium-driver) to run the browser tests"
            );
        }
        let port = {
            let probe = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
            probe.local_addr().expect("its address").port()
        };
        let profile =
            std::env::temp_dir().join(format!("nexbot-chromium-{}-{port}", std::process::id()));
        let _ = std::fs::remove_dir_all(&profile);
        std::fs::create_dir_all(&profile).expect("a profile directory");
        let mut command = Command::new(CHROMEDRIVER);
        command
            .arg(format!("--port={port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        std::os::unix::process::CommandExt::process_group(&mut command, 0);
        let driver = command.spawn().expect("start chromedriver");
        let mut browser = Browser { client: None, driver, profile };
        let url = format!("http://127.0.0.1:{port}");
        let started = Instant::now();
        let client = loop {
            let mut caps = serde_json::Map::new();
            caps.insert(
                "goog:chromeOptions".into(),
                serde_json::json!({
                    "binary": CHROMIUM,
                    "args": [
                        "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic",
                        "--no-first-run", "--disable-background-networking",
                        "--disable-component-update", "--disable-sync",
                        "--disable-dev-shm-usage", "--window-size=1280,900",
                        format!("--user-data-dir={}", browser.profile.display()),
                    ],
                }),
            );
            let connector = hyper_util::client::legacy::connect::HttpConnector::new();
            match ClientBuilder::new(connector).capabilities(caps).connect(&url).await {
                Ok(client) => break client,
                Err(e) => {
                    assert!(
                        started.elapsed() < START_LIMIT,
                        "no Chromium session through chromedriver at {url}: {e}"
                    );
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        };
        browser.client = Some(client);
        browser
    }

    pub fn client(&self) -> &Client {
        self.client.as_ref().expect("a live session")
    }

    /// The window's size in CSS pixels (a desktop's 1280×900, a phone's 390×844).
    pub async fn set_size(&self, width: u32, height: u32) {
        self.client().set_window_size(width, height).await.expect("resize the window");
    }

    /// A PNG of the current page into `path` (its folders made).
    pub async fn screenshot(&self, path: &Path) {
        let png = self.client().screenshot().await.expect("a screenshot");
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).expect("the screenshots' folder");
        }
        std::fs::write(path, png).expect("write the screenshot");
    }

    /// Every address the current page loaded (the page itself and each resource, as the
    /// browser's own performance record lists them) that is not on `origin`
    /// (`http://127.0.0.1:8088`). Empty: the page reached nothing else.
    pub async fn same_origin_only(&self, origin: &str) -> Vec<String> {
        let urls = self
            .client()
            .execute(
                "return [location.href].concat(performance.getEntriesByType('resource')\
                 .map(e => e.name));",
                vec![],
            )
            .await
            .expect("read the page's resources");
        let urls: Vec<String> = serde_json::from_value(urls).expect("a list of addresses");
        let prefix = format!("{}/", origin.trim_end_matches('/'));
        urls.into_iter().filter(|u| !u.starts_with(&prefix)).collect()
    }

    /// Ends the session, chromedriver and every browser process, and removes the profile.
    pub async fn close(mut self) {
        if let Some(client) = self.client.take() {
            let _ = tokio::time::timeout(Duration::from_secs(10), client.close()).await;
        }
        self.end();
    }

    /// Kills chromedriver's process group (Chromium's processes are in it) and waits for it.
    fn end(&mut self) {
        let group = self.driver.id() as i32;
        // The `kill` command, as the rest of the tests end processes (no libc binding here).
        let _ = Command::new("kill").args(["-KILL", "--", &format!("-{group}")]).status();
        let _ = self.driver.wait();
        let _ = std::fs::remove_dir_all(&self.profile);
    }

    /// The id of chromedriver's process group (for tests that check it is gone).
    pub fn process_group(&self) -> u32 {
        self.driver.id()
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if self.profile.exists() {
            self.end();
        }
    }
}

/// Whether a live process (not a zombie waiting to be reaped) is in process group `group`.
pub fn group_alive(group: u32) -> bool {
    let Ok(entries) = std::fs::read_dir("/proc") else { return false };
    entries.filter_map(Result::ok).any(|e| {
        let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
        // The fields after the command's closing parenthesis: state, ppid, pgrp, …
        let Some((_, rest)) = stat.rsplit_once(')') else { return false };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        fields.len() > 2 && fields[0] != "Z" && fields[2] == group.to_string()
    })
}
