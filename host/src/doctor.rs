//! `nexbot doctor`: checks what the daemon needs — config, workspace, database, LLM, Docker,
//! the subagent image and the egress listener's prerequisites (its address and port, the
//! firewall's iptables and root) — and says for each failure what to do about it.
//!
//! Why: most first-run problems are one missing piece (no key, no image, Docker not started);
//! naming the piece and the fix saves reading logs.

use std::net::SocketAddr;
use std::time::Duration;

use nexbot_docker::Docker;

use crate::config::{Config, LLM_API_KEY_ENV};
use crate::store::Store;
use crate::vault::{LegacyBinding, Vault, VaultState};
use crate::workspace::BOOTSTRAP_FILES;
use nexbot_egress::LEGACY_BINDINGS_REFUSED_FROM;

/// The status of one check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckStatus {
    Ok,
    Warn,
    Fail,
}

#[derive(Debug, Clone)]
pub struct Check {
    pub name: String,
    pub status: CheckStatus,
    pub detail: String,
    /// What to do, for warnings and failures.
    pub fix: Option<String>,
}

impl Check {
    fn ok(name: impl Into<String>, detail: impl Into<String>) -> Self {
        Self { name: name.into(), status: CheckStatus::Ok, detail: detail.into(), fix: None }
    }
    fn bad(
        name: impl Into<String>,
        status: CheckStatus,
        detail: impl Into<String>,
        fix: impl Into<String>,
    ) -> Self {
        Self { name: name.into(), status, detail: detail.into(), fix: Some(fix.into()) }
    }

    /// One line (two with a fix) for the terminal.
    pub fn render(&self) -> String {
        let tag = match self.status {
            CheckStatus::Ok => "[ok]  ",
            CheckStatus::Warn => "[warn]",
            CheckStatus::Fail => "[FAIL]",
        };
        match &self.fix {
            Some(fix) => format!("{tag} {}: {}\n       fix: {fix}", self.name, self.detail),
            None => format!("{tag} {}: {}", self.name, self.detail),
        }
    }
}

/// Runs every check that the (already loaded) config allows.
pub async fn run(config: &Config) -> Vec<Check> {
    let mut checks = vec![workspace(config), disk(config), database(config).await];
    checks.extend(vault(config).await);
    checks.extend(llm(config).await);
    if config.subagent.enabled {
        let (docker_checks, engine) = docker(config).await;
        checks.extend(docker_checks);
        // Under compose the daemon's pool network is the project's: check that one.
        let deployed = match &engine {
            Some(docker) => crate::sandbox::deployed_config(config, docker).await,
            None => config.clone(),
        };
        if let Some(docker) = &engine {
            checks.extend(mcp_servers(config, docker).await);
        }
        checks.push(egress_listener(&deployed, engine.as_ref()).await);
        checks.push(egress_firewall(config).await);
        checks.extend(egress_relay(config));
    }
    checks
}

fn workspace(config: &Config) -> Check {
    let dir = &config.workspace.dir;
    if !dir.is_dir() {
        return Check::bad(
            "workspace",
            CheckStatus::Fail,
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
            CheckStatus::Warn,
            format!("{} lacks {}", dir.display(), missing.join(", ")),
            format!("nexbot init --dir {} (keeps existing files)", dir.display()),
        )
    }
}

/// The data directory's free space against `storage.min_free_mb` (what health watches): with
/// the disk full nothing can be recorded.
fn disk(config: &Config) -> Check {
    let dir = config.data_dir();
    match crate::disk::DiskSpace::new(&dir, config.storage.min_free_mb).problem() {
        None => {
            Check::ok("disk", format!("{} free in {}", crate::disk::free_text(&dir), dir.display()))
        }
        Some(problem) => Check::bad(
            "disk",
            CheckStatus::Fail,
            problem,
            "free space there (old backups, logs, `docker system prune`), or lower \
             storage.min_free_mb",
        ),
    }
}

async fn database(config: &Config) -> Check {
    let path = config.database_path();
    match Store::open(&path).await {
        Ok(_) => Check::ok("database", path.display().to_string()),
        Err(e) => Check::bad("database", CheckStatus::Fail, e.to_string(), "see the message above"),
    }
}

/// Whether the secrets vault opens with `NEXBOT_MASTER_KEY`, then a warning for each legacy
/// binding ([`legacy_binding`]).
async fn vault(config: &Config) -> Vec<Check> {
    let Ok(store) = Store::open(&config.database_path()).await else {
        return vec![Check::bad("secrets vault", CheckStatus::Fail, "no database", "see above")];
    };
    let vault = match Vault::open(store, config.secrets.master_key.as_ref(), None).await {
        Ok(vault) => vault,
        Err(e) => {
            let detail = e.to_string();
            return vec![Check::bad("secrets vault", CheckStatus::Fail, detail, "see above")];
        }
    };
    let count = vault.list(None).len();
    let state = match vault.state() {
        VaultState::On => Check::ok("secrets vault", format!("on, {count} secret(s) stored")),
        VaultState::Off(why) => Check::bad(
            "secrets vault",
            CheckStatus::Warn,
            format!("off, {count} secret(s) stored: {why}"),
            "export NEXBOT_MASTER_KEY=\"$(openssl rand -base64 32)\" (keep it: it opens the vault)",
        ),
        VaultState::WrongKey => Check::bad(
            "secrets vault",
            CheckStatus::Fail,
            format!("NEXBOT_MASTER_KEY does not open it ({count} secret(s) stored)"),
            "set the key the vault was written with",
        ),
    };
    let mut checks = vec![state];
    checks.extend(vault.legacy_bindings().iter().map(legacy_binding));
    checks
}

/// One legacy binding (a bare host stored before bindings named a place): a warning naming
/// the secret, its scope and host, and the command that narrows it — never the value, which
/// doctor does not read. Why a warning even for one this release still honours: it is refused
/// from [`LEGACY_BINDINGS_REFUSED_FROM`], and doctor is where an operator looks before an
/// upgrade.
fn legacy_binding(legacy: &LegacyBinding) -> Check {
    let LegacyBinding { scope, name, host, refused, narrow } = legacy;
    let detail = match refused {
        Some(reason) => format!(
            "secret {name} of {scope}: legacy binding {host:?} {reason}, so the secret is not \
             used; bind it to the service's own host name"
        ),
        None => format!(
            "secret {name} of {scope}: legacy binding {host:?} (anywhere in a request to it, \
             any port), refused from release {LEGACY_BINDINGS_REFUSED_FROM}"
        ),
    };
    Check::bad("secrets legacy binding", CheckStatus::Warn, detail, narrow.clone())
}

/// Whether each provider answers (`GET /models` with its key) and lists its model.
pub async fn llm(config: &Config) -> Vec<Check> {
    let mut checks = Vec::new();
    let timeouts = nexbot_llm::provider::Timeouts {
        connect: Duration::from_secs(10),
        call: Duration::from_secs(10),
        stall: Duration::from_secs(10),
    };
    let specs = config.llm.provider_list();
    let several = specs.len() > 1;
    for (i, spec) in specs.into_iter().enumerate() {
        let name = if several { format!("llm {}", spec.display_name()) } else { "llm".to_owned() };
        let key_env = spec.api_key_env.clone();
        let key = config.secrets.provider_keys.get(i).cloned().flatten();
        if key.is_none() {
            if let Some(var) = &key_env {
                checks.push(Check::bad(
                    format!("{name} key"),
                    CheckStatus::Warn,
                    format!("{var} is not set"),
                    format!("export {var}=... (not needed for a local Ollama/vLLM)"),
                ));
            }
        }
        let model = spec.model.clone();
        let (url_key, model_key) = if config.llm.providers.is_empty() {
            ("llm.base_url".to_owned(), "llm.model".to_owned())
        } else {
            (format!("llm.providers[{i}].base_url"), format!("llm.providers[{i}].model"))
        };
        let url = format!("{}/models", spec.base_url.trim_end_matches('/'));
        let provider = match nexbot_llm::Provider::new(spec, key, timeouts) {
            Ok(provider) => provider,
            Err(e) => {
                checks.push(Check::bad(&name, CheckStatus::Fail, e.to_string(), "fix the key"));
                continue;
            }
        };
        let set_key = key_env.unwrap_or_else(|| LLM_API_KEY_ENV.to_owned());
        checks.push(match provider.list_models().await {
            Ok(models) if models.contains(&model) => {
                Check::ok(&name, format!("{url} answers and lists {model}"))
            }
            Ok(_) => Check::bad(
                &name,
                CheckStatus::Warn,
                format!("{url} answers but does not list the model {model}"),
                format!("check {model_key} (some providers do not list every model)"),
            ),
            Err(e) if e.class == nexbot_llm::ErrorClass::Auth => Check::bad(
                &name,
                CheckStatus::Fail,
                format!("{url} refused the key (HTTP {})", e.status.unwrap_or(0)),
                format!("set a valid {set_key}"),
            ),
            Err(e) if e.status.is_some() => Check::bad(
                &name,
                CheckStatus::Fail,
                format!("{url} answered HTTP {}", e.status.unwrap_or(0)),
                format!("check {url_key} (it should end before /chat/completions, e.g. .../v1)"),
            ),
            Err(e) => Check::bad(
                &name,
                CheckStatus::Fail,
                format!("cannot reach {url}: {}", e.message),
                format!("check {url_key} and the network"),
            ),
        });
    }
    checks
}

async fn docker(config: &Config) -> (Vec<Check>, Option<Docker>) {
    let no_docker = "start the Docker engine, or set subagent.enabled = false to run without \
                     delegation";
    let fail = |detail: String| vec![Check::bad("docker", CheckStatus::Fail, detail, no_docker)];
    let (docker, reach) = match nexbot_docker::connect_reach(&config.sandbox).await {
        Ok(found) => found,
        Err(e) => return (fail(e.to_string()), None),
    };
    let (version, api) = match nexbot_docker::engine_version(&docker).await {
        Ok(version) => version,
        Err(e) => return (fail(e.to_string()), None),
    };
    let mut checks =
        vec![Check::ok("docker", format!("engine {version} (API {api}), {}", reach.line()))];
    // A remote engine's disk is on its machine: a path it names may exist here too and mean
    // another disk.
    let engine_disk = match reach.remote() {
        true => None,
        false => crate::disk::engine_disk(&docker, config.storage.min_free_mb).await,
    };
    if let Some(engine) = engine_disk {
        checks.push(match engine.problem() {
            None => Check::ok("engine disk", format!("{} free in {}", engine.free(), engine.dir().display())),
            Some(problem) => Check::bad(
                "engine disk",
                CheckStatus::Fail,
                problem,
                "free space there (`docker system prune`, old images), or lower storage.min_free_mb",
            ),
        });
    }
    let image = &config.subagent.image;
    match nexbot_docker::image_present(&docker, image).await {
        Ok(_) => {
            checks.push(Check::ok("subagent image", image.clone()));
            checks.push(runtime_probe(config, &docker).await);
        }
        Err(e) if reach.remote() => checks.push(Check::bad(
            "subagent image",
            CheckStatus::Warn,
            format!("{image} is not on the remote engine yet: {e}"),
            "the daemon copies it there from this machine's engine at start (docs/remote.md)",
        )),
        Err(e) => checks.push(Check::bad(
            "subagent image",
            CheckStatus::Fail,
            format!("{image}: {e}"),
            "build it with `make image`",
        )),
    }
    (checks, Some(docker))
}

/// The wall: the engine has `sandbox.runtime` (or its default), and a container of the pool's
/// image, made as the pool makes them, answers `ping` under it (then goes).
async fn runtime_probe(config: &Config, docker: &Docker) -> Check {
    const PROBE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);
    let pool = config.pool_config();
    match nexbot_docker::probe(docker, &pool, PROBE_TIMEOUT).await {
        Ok(probe) => Check::ok(
            "sandbox runtime",
            format!(
                "{}: a container of {} answered its first ping {} ms after it was created",
                probe.runtime,
                pool.image,
                probe.first_pong.as_millis()
            ),
        ),
        Err(nexbot_docker::PoolError::RuntimeMissing { runtime, registered, fix }) => Check::bad(
            "sandbox runtime",
            CheckStatus::Fail,
            format!("the engine has no runtime {runtime:?} (it has: {registered})"),
            fix,
        ),
        Err(e) => Check::bad(
            "sandbox runtime",
            CheckStatus::Fail,
            format!(
                "a container of {} did not answer under the configured runtime: {e}",
                pool.image
            ),
            "try it by hand: `echo '{\"type\":\"ping\",\"id\":\"1\"}' | docker run --rm -i \
             --runtime=<sandbox.runtime> <subagent.image>`, and read the engine's log",
        ),
    }
}

/// Each configured MCP server: a stdio server's image is on the engine and its command is a
/// program of that image (nothing is started); a remote one is reached through the proxy.
async fn mcp_servers(config: &Config, docker: &Docker) -> Vec<Check> {
    let mut checks = Vec::new();
    for server in &config.mcp_servers() {
        let name = format!("mcp {}", server.name);
        if let Some(url) = &server.url {
            checks.push(Check::ok(name, format!("remote, {url}, through the egress proxy")));
            continue;
        }
        let image = server.image();
        let command = server.command_line();
        let Some(program) = command.first() else {
            checks.push(Check::bad(name, CheckStatus::Fail, "no command", "set its command"));
            continue;
        };
        checks.push(match nexbot_docker::image_program(docker, image, program).await {
            Ok(Some(path)) => Check::ok(name, format!("image {image}, command {program} ({path})")),
            Ok(None) => Check::bad(
                name,
                CheckStatus::Fail,
                format!("the image {image} has no program {program} (absolute, or along its PATH)"),
                "set the server's command to a program of its image, or its image to one that has it",
            ),
            Err(nexbot_docker::PoolError::ImageMissing { .. }) => Check::bad(
                name,
                CheckStatus::Fail,
                format!("the engine has no image {image}"),
                server.missing_image_fix(),
            ),
            Err(e) => Check::bad(name, CheckStatus::Warn, e.to_string(), "check the engine (`docker info`)"),
        });
    }
    checks
}

/// Whether the listener's address exists on this host and its port is free.
async fn egress_listener(config: &Config, docker: Option<&Docker>) -> Check {
    const NAME: &str = "egress listener";
    let egress = &config.egress;
    let network = &config.subagent.network;
    if config.sandbox.is_remote() {
        return Check::ok(
            NAME,
            format!(
                "the engine is on another machine: the pool there gets out only through the \
                 egress node the daemon starts beside it ({}, on {network}'s gateway there), \
                 tunnelled to this daemon's proxy and relay (docs/remote.md)",
                config.sandbox.node_image()
            ),
        );
    }
    let addr = match (egress.listen_addr, docker) {
        (Some(addr), _) => addr,
        (None, None) => {
            return Check::bad(
                NAME,
                CheckStatus::Warn,
                format!(
                    "not checked: it binds the gateway of {network}, and Docker is not reachable"
                ),
                "fix the docker check first",
            )
        }
        // The pool network's gateway, where the listener binds by default; `None` when the
        // network does not exist yet (the daemon creates it).
        (None, Some(docker)) => match nexbot_docker::network_gateway(docker, network).await {
            Ok(Some(gateway)) => gateway,
            Ok(None) => {
                return Check::ok(
                    NAME,
                    format!(
                        "the network {network} is created at start; the proxy and relay then \
                         listen on its gateway, port {}",
                        egress.port
                    ),
                )
            }
            Err(e) => {
                return Check::bad(
                    NAME,
                    CheckStatus::Fail,
                    e.to_string(),
                    "remove the network or set subagent.network to another name",
                )
            }
        },
    };
    let at = SocketAddr::new(addr, egress.port);
    match tokio::net::TcpListener::bind(at).await {
        Ok(_) => Check::ok(NAME, format!("{at} is free for the egress proxy and LLM relay")),
        // A warning, not a failure: doctor is often run beside the daemon it checks, whose
        // own listener holds the port.
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => Check::bad(
            NAME,
            CheckStatus::Warn,
            format!("{at} is in use (fine if it is this nexbot's running daemon)"),
            "otherwise stop what listens there or set egress.port (0 picks a free one)",
        ),
        Err(e) => Check::bad(
            NAME,
            CheckStatus::Fail,
            format!("cannot listen on {at}: {e}"),
            "egress.listen_addr must be an address of this host on the pool network (unset, \
             it is the network's gateway)",
        ),
    }
}

/// The firewall rules need the `iptables` command and root (`CAP_NET_ADMIN`).
async fn egress_firewall(config: &Config) -> Check {
    const NAME: &str = "egress firewall";
    let off = "set egress.firewall = false only if you firewall the pool bridge yourself";
    if !config.egress.firewall {
        return Check::bad(
            NAME,
            CheckStatus::Warn,
            "off (egress.firewall = false): the pool network can reach every port of this host",
            "turn it on, or make sure your own rules leave only the proxy port reachable",
        );
    }
    let version = match iptables(&["--version"]).await {
        Ok(version) => version,
        Err(e) => {
            return Check::bad(
                NAME,
                CheckStatus::Fail,
                format!("iptables cannot be run: {e}"),
                format!("install iptables (apt-get install iptables), or {off}"),
            )
        }
    };
    let uid = effective_uid();
    if uid != Some(0) {
        let who = uid.map_or_else(|| "an unknown user".to_owned(), |uid| format!("uid {uid}"));
        return Check::bad(
            NAME,
            CheckStatus::Fail,
            format!("nexbot runs as {who}; the firewall rules need root"),
            format!("run nexbot as root, or {off}"),
        );
    }
    match iptables(&["-w", "5", "-S", "INPUT"]).await {
        Ok(_) => Check::ok(NAME, format!("{} as root", version.trim())),
        Err(e) => Check::bad(
            NAME,
            CheckStatus::Fail,
            format!("iptables cannot read the INPUT chain: {e}"),
            format!(
                "give nexbot CAP_NET_ADMIN (it runs as root in a restricted container?), or {off}"
            ),
        ),
    }
}

/// Where subagents' LLM calls go, and whether the real key is handed to them.
fn egress_relay(config: &Config) -> Vec<Check> {
    const NAME: &str = "egress relay";
    let relay = &config.egress.relay;
    let provider = config.subagent_provider_base_url();
    let mut checks = Vec::new();
    if relay.api_key_env != LLM_API_KEY_ENV && config.secrets.relay_provider_key.is_none() {
        checks.push(Check::bad(
            NAME,
            CheckStatus::Warn,
            format!("{} (egress.relay.api_key_env) is not set", relay.api_key_env),
            format!("export {}=... (not needed for a provider without a key)", relay.api_key_env),
        ));
    }
    checks.push(if relay.send_provider_key_to_subagents {
        Check::bad(
            NAME,
            CheckStatus::Warn,
            format!("the real LLM key is sent to every subagent, which calls {provider} directly"),
            "set egress.relay.send_provider_key_to_subagents = false unless the provider cannot \
             be relayed",
        )
    } else {
        Check::ok(
            NAME,
            format!(
                "subagents reach {provider} through the relay with per-task tokens (budget {})",
                relay.default_token_budget
            ),
        )
    });
    checks
}

/// `nexbot doctor`'s one process: `iptables` with the listing arguments written here, run by the
/// operator's command, never by a model (the crate's clippy config refuses every other).
async fn iptables(args: &[&str]) -> Result<String, String> {
    #[allow(clippy::disallowed_methods)]
    let mut command = tokio::process::Command::new("iptables");
    command.args(args).kill_on_drop(true);
    match tokio::time::timeout(Duration::from_secs(15), command.output()).await {
        Err(_) => Err("no answer within 15 s".into()),
        Ok(Err(e)) => Err(e.to_string()),
        Ok(Ok(out)) if out.status.success() => Ok(String::from_utf8_lossy(&out.stdout).into()),
        Ok(Ok(out)) => Err(String::from_utf8_lossy(&out.stderr).trim().to_owned()),
    }
}

/// The effective user id, from `/proc/self/status` (`Uid: real effective saved fs`).
fn effective_uid() -> Option<u32> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("Uid:"))?;
    line.split_whitespace().nth(2)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vault::SecretScope;
    use nexbot_core::ChatRef;
    use secrecy::SecretString;

    const VALUE: &str = "ghp_PLANTED_doctor_value_0123456789";

    /// Doctor names each legacy binding — secret, scope, host — with the exact command that
    /// narrows it, and the deadline; never the value. One over a public suffix says it is not
    /// used. A narrowed secret is not listed.
    #[tokio::test]
    async fn doctor_lists_each_legacy_binding_with_the_command_to_narrow_it() {
        let dir = std::env::temp_dir().join(format!("nxh-doctor-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut config = Config::default();
        config.workspace.dir = dir.clone();
        let master = SecretString::from("master-key-for-doctor-0123456789");
        config.secrets.master_key = Some(master.clone());
        let store = Store::open(&config.database_path()).await.unwrap();
        let chat = SecretScope::Chat(ChatRef::Telegram(42));
        let store_row = |scope: SecretScope, name: &'static str, host: &'static str| {
            let (store, master) = (store.clone(), master.clone());
            async move {
                crate::vault::store_legacy_row(&store, &master, &scope, name, VALUE, &[host]).await
            }
        };
        store_row(chat.clone(), "GH_TOKEN", "api.github.com").await;
        store_row(SecretScope::Operator, "SEARCH_KEY", "api.search.example").await;
        store_row(chat.clone(), "PAGES", "*.github.io").await;
        let opened = Vault::open(store.clone(), Some(&master), None).await.unwrap();
        let hosts = ["api.example.com".to_owned()];
        let value = SecretString::from(VALUE);
        opened.set(&chat, "NEW", value, &hosts, &[], None).await.unwrap();
        drop(opened);

        let checks = vault(&config).await;
        let shown: Vec<String> = checks.iter().map(Check::render).collect();
        let all = shown.join("\n");
        assert!(shown[0].starts_with("[ok]   secrets vault: on, 4 secret(s)"), "{all}");
        assert_eq!(checks.len(), 4, "{all}");
        for (name, scope, host, fix) in [
            (
                "GH_TOKEN",
                "chat telegram:42",
                "api.github.com",
                "nexbot-ctl secrets set GH_TOKEN --chat telegram:42 --host api.github.com",
            ),
            (
                "SEARCH_KEY",
                "the operator scope",
                "api.search.example",
                "nexbot-ctl secrets set SEARCH_KEY --operator --host api.search.example",
            ),
        ] {
            let line = shown.iter().find(|l| l.contains(name)).unwrap();
            assert!(line.starts_with("[warn] secrets legacy binding: "), "{line}");
            assert!(line.contains(&format!("secret {name} of {scope}")), "{line}");
            assert!(line.contains(&format!("legacy binding \"{host}\"")), "{line}");
            assert!(line.contains("refused from release 0.2.0"), "{line}");
            assert!(line.contains(&format!("fix: printf %s \"$VALUE\" | {fix}")), "{line}");
        }
        let pages = shown.iter().find(|l| l.contains("PAGES")).unwrap();
        assert!(pages.contains("public suffix \"github.io\"") && pages.contains("not used"));
        assert!(pages.contains("--chat telegram:42 --host HOST"), "{pages}");
        assert!(!all.contains("secret NEW"), "a narrowed secret is not legacy: {all}");
        assert!(!all.contains(VALUE), "doctor showed a value: {all}");
        std::fs::remove_dir_all(&dir).ok();
    }
}
