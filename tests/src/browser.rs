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
        let port = crate::free_loopback_addr().port();
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
        // A group of its own: killing it ends chromedriver and every Chromium it started.
        std::os::unix::process::CommandExt::process_group(&mut command, 0);
        let driver = command.spawn().expect("start chromedriver");
        // From here on a panic drops `browser`, which kills the group and removes the profile.
        let mut browser = Browser { client: None, driver, profile };
        let url = format!("http://127.0.0.1:{port}");
        browser.wait_ready(port).await;
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
        // Plain HTTP to loopback: hyper's own connector, no TLS stack compiled in.
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        let mut builder = ClientBuilder::new(connector);
        let session = builder.capabilities(caps).connect(&url);
        let client = match tokio::time::timeout(START_LIMIT, session).await {
            Ok(Ok(client)) => client,
            Ok(Err(e)) => panic!("chromedriver at {url} could not start {CHROMIUM}: {e}"),
            Err(_) => {
                panic!("no Chromium session through chromedriver at {url} in {START_LIMIT:?}")
            }
        };
        browser.client = Some(client);
        browser
    }

    /// The WebDriver client, for everything the helpers here do not wrap (navigation,
    /// finding and clicking elements, running scripts).
    pub fn client(&self) -> &Client {
        self.client.as_ref().expect("a live session")
    }

    /// The viewport's size in CSS pixels (a desktop's 1280×900, a phone's 390×844), so that a
    /// screenshot is exactly that size. WebDriver sizes the outer window, which in headless
    /// Chromium 156 still counts ~140 px of (invisible) browser chrome in its height: the window
    /// is sized once, then grown by whatever the page's viewport came out short.
    pub async fn set_size(&self, width: u32, height: u32) {
        let client = self.client();
        client.set_window_size(width, height).await.expect("resize the window");
        let inner = client
            .execute("return [window.innerWidth, window.innerHeight];", vec![])
            .await
            .expect("read the viewport's size");
        let (inner_w, inner_h): (u32, u32) =
            serde_json::from_value(inner).expect("the viewport's width and height");
        if (inner_w, inner_h) != (width, height) {
            let (w, h) = (2 * width, 2 * height);
            client
                .set_window_size(w.saturating_sub(inner_w), h.saturating_sub(inner_h))
                .await
                .expect("resize the window to the viewport asked for");
        }
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

    /// Waits (at most [`START_LIMIT`]) until chromedriver's `/status` says it is ready for a
    /// session; panics if it exits first (its port taken, say) or never gets there.
    async fn wait_ready(&mut self, port: u16) {
        let started = Instant::now();
        loop {
            if let Ok(Some(status)) = self.driver.try_wait() {
                panic!("chromedriver --port={port} exited before it was ready: {status}");
            }
            if driver_ready(port).await {
                return;
            }
            assert!(
                started.elapsed() < START_LIMIT,
                "chromedriver --port={port} did not answer /status as ready in {START_LIMIT:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Kills chromedriver's process group (Chromium's processes are in it), waits for
    /// chromedriver, then (at most 5 s) until no live process is left in the group, so that a
    /// caller that checks finds them gone; removes the profile.
    fn end(&mut self) {
        let group = self.driver.id();
        // The `kill` command, as the rest of the tests end processes (no libc binding here).
        let _ = Command::new("kill").args(["-KILL", "--", &format!("-{group}")]).status();
        let _ = self.driver.wait();
        let started = Instant::now();
        while group_alive(group) && started.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = std::fs::remove_dir_all(&self.profile);
    }

    /// Chromium's profile directory (every Chromium process names it on its command line).
    pub fn profile_dir(&self) -> &Path {
        &self.profile
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

/// Whether chromedriver on `port` answers `GET /status` with `"ready": true` (one short try).
/// The answer is read only as far as its JSON body: chromedriver 156 sends `Connection: close`
/// but keeps the connection open, so reading to the end would wait for the timeout.
async fn driver_ready(port: u16) -> bool {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let ask = async {
        let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.ok()?;
        let request =
            format!("GET /status HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.ok()?;
        let mut raw = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            let n = stream.read(&mut chunk).await.ok()?;
            if n == 0 {
                return None;
            }
            raw.extend_from_slice(&chunk[..n]);
            let text = String::from_utf8_lossy(&raw);
            let Some((_, body)) = text.split_once("\r\n\r\n") else { continue };
            let (Some(start), Some(end)) = (body.find('{'), body.rfind('}')) else { continue };
            if let Ok(body) = serde_json::from_str::<serde_json::Value>(&body[start..=end]) {
                return body["value"]["ready"].as_bool();
            }
        }
    };
    matches!(tokio::time::timeout(Duration::from_secs(2), ask).await, Ok(Some(true)))
}

/// The ids of live processes whose command line contains `needle` (a profile directory, say),
/// this process excluded: what a test checks is empty once a [`Browser`] is closed.
pub fn processes_with_arg(needle: &str) -> Vec<u32> {
    let me = std::process::id();
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok().map(|pid| (pid, e.path())))
        .filter(|(pid, path)| {
            let cmdline = std::fs::read(path.join("cmdline")).unwrap_or_default();
            // A zombie's command line reads empty: only live processes match.
            *pid != me && String::from_utf8_lossy(&cmdline).contains(needle)
        })
        .map(|(pid, _)| pid)
        .collect()
}
