//! `nexbot doctor`: checks what the daemon needs — config, workspace, database, LLM, Docker
//! and the subagent image — and says for each failure what to do about it.
//!
//! Why: most first-run problems are one missing piece (no key, no image, Docker not started);
//! naming the piece and the fix saves reading logs.

use std::time::Duration;

use secrecy::ExposeSecret;

use crate::config::{Config, LLM_API_KEY_ENV};
use crate::store::Store;
use crate::workspace::BOOTSTRAP_FILES;

/// The verdict of one check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Ok,
    Warn,
    Fail,
}

#[derive(Debug, Clone)]
pub struct Check {
    pub name: &'static str,
    pub verdict: Verdict,
    pub detail: String,
    /// What to do, for warnings and failures.
    pub fix: Option<String>,
}

impl Check {
    fn ok(name: &'static str, detail: impl Into<String>) -> Self {
        Self { name, verdict: Verdict::Ok, detail: detail.into(), fix: None }
    }
    fn bad(
        name: &'static str,
        verdict: Verdict,
        detail: impl Into<String>,
        fix: impl Into<String>,
    ) -> Self {
        Self { name, verdict, detail: detail.into(), fix: Some(fix.into()) }
    }

    /// One line (two with a fix) for the terminal.
    pub fn render(&self) -> String {
        let tag = match self.verdict {
            Verdict::Ok => "[ok]  ",
            Verdict::Warn => "[warn]",
            Verdict::Fail => "[FAIL]",
        };
        match &self.fix {
            Some(fix) => format!("{tag} {}: {}\n       fix: {fix}", self.name, self.detail),
            None => format!("{tag} {}: {}", self.name, self.detail),
        }
    }
}

/// Runs every check that the (already loaded) config allows.
pub async fn run(config: &Config) -> Vec<Check> {
    let mut checks = vec![workspace(config), database(config).await];
    checks.extend(llm(config).await);
    if config.subagent.enabled {
        checks.extend(docker(config).await);
    }
    checks
}

fn workspace(config: &Config) -> Check {
    let dir = &config.workspace.dir;
    if !dir.is_dir() {
        return Check::bad(
            "workspace",
            Verdict::Fail,
            format!("{} does not exist", dir.display()),
            format!("nexbot init --dir {}", dir.display()),
        );
    }
    let missing: Vec<&str> =
        BOOTSTRAP_FILES.iter().map(|(name, _)| *name).filter(|n| !dir.join(n).is_file()).collect();
    if missing.is_empty() {
        Check::ok("workspace", dir.display().to_string())
    } else {
        Check::bad(
            "workspace",
            Verdict::Warn,
            format!("{} lacks {}", dir.display(), missing.join(", ")),
            format!("nexbot init --dir {} (keeps existing files)", dir.display()),
        )
    }
}

async fn database(config: &Config) -> Check {
    let path = config.database_path();
    match Store::open(&path).await {
        Ok(_) => Check::ok("database", path.display().to_string()),
        Err(e) => Check::bad("database", Verdict::Fail, e.to_string(), "see the message above"),
    }
}

async fn llm(config: &Config) -> Vec<Check> {
    let mut checks = Vec::new();
    let key = config.secrets.llm_api_key.as_ref();
    if key.is_none() {
        checks.push(Check::bad(
            "llm key",
            Verdict::Warn,
            format!("{LLM_API_KEY_ENV} is not set"),
            format!("export {LLM_API_KEY_ENV}=... (not needed for a local Ollama/vLLM)"),
        ));
    }
    let url = format!("{}/models", config.llm.base_url.trim_end_matches('/'));
    let client = match reqwest::Client::builder().timeout(Duration::from_secs(10)).build() {
        Ok(client) => client,
        Err(e) => {
            checks.push(Check::bad("llm", Verdict::Fail, e.to_string(), "report a bug"));
            return checks;
        }
    };
    let mut request = client.get(&url);
    if let Some(key) = key {
        request = request.bearer_auth(key.expose_secret());
    }
    checks.push(match request.send().await {
        Ok(response) if response.status().is_success() => {
            let body: serde_json::Value = response.json().await.unwrap_or_default();
            let listed = body["data"]
                .as_array()
                .is_some_and(|models| models.iter().any(|m| m["id"] == config.llm.model.as_str()));
            if listed {
                Check::ok("llm", format!("{url} answers and lists {}", config.llm.model))
            } else {
                Check::bad(
                    "llm",
                    Verdict::Warn,
                    format!("{url} answers but does not list the model {}", config.llm.model),
                    "check llm.model (some providers do not list every model)",
                )
            }
        }
        Ok(response) if matches!(response.status().as_u16(), 401 | 403) => Check::bad(
            "llm",
            Verdict::Fail,
            format!("{url} refused the key (HTTP {})", response.status().as_u16()),
            format!("set a valid {LLM_API_KEY_ENV}"),
        ),
        Ok(response) => Check::bad(
            "llm",
            Verdict::Fail,
            format!("{url} answered HTTP {}", response.status().as_u16()),
            "check llm.base_url (it should end before /chat/completions, e.g. .../v1)",
        ),
        Err(e) => Check::bad(
            "llm",
            Verdict::Fail,
            format!("cannot reach {url}: {}", e.without_url()),
            "check llm.base_url and the network",
        ),
    });
    checks
}

async fn docker(config: &Config) -> Vec<Check> {
    let no_docker = "start the Docker engine, or set subagent.enabled = false to run without \
                     delegation";
    let docker = match bollard::Docker::connect_with_local_defaults() {
        Ok(docker) => docker,
        Err(e) => return vec![Check::bad("docker", Verdict::Fail, e.to_string(), no_docker)],
    };
    let version = match tokio::time::timeout(Duration::from_secs(10), docker.version()).await {
        Ok(Ok(version)) => version,
        Ok(Err(e)) => return vec![Check::bad("docker", Verdict::Fail, e.to_string(), no_docker)],
        Err(_) => return vec![Check::bad("docker", Verdict::Fail, "no answer in 10 s", no_docker)],
    };
    let mut checks = vec![Check::ok(
        "docker",
        format!(
            "engine {} (API {})",
            version.version.unwrap_or_default(),
            version.api_version.unwrap_or_default()
        ),
    )];
    let image = &config.subagent.image;
    checks.push(match docker.inspect_image(image).await {
        Ok(_) => Check::ok("subagent image", image.clone()),
        Err(e) => Check::bad(
            "subagent image",
            Verdict::Fail,
            format!("{image}: {e}"),
            "build it with `make image`",
        ),
    });
    checks
}
