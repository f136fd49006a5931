//! The wall the sandboxes run behind: the OCI runtime the engine starts every container of the
//! pool with (`runc`, the engine's usual default; gVisor's `runsc`, a kernel of its own in
//! user space between the task and the host's kernel). The runtime is a name the engine must
//! have registered; [`resolve_runtime`] asks it before anything is created, so a missing
//! runtime is refused at start with the lines that register it, not found as a failed
//! container later. [`probe`] answers `nexbot doctor`'s question whether a container of the
//! pool's image, made exactly as the pool makes them, answers `ping` under it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bollard::Docker;

use crate::config::PoolConfig;
use crate::connect::ENGINE_TIMEOUT;
use crate::engine::Engine;
use crate::error::PoolError;
use crate::logs::LogRing;
use crate::pool_owner::Owner;

/// The runtime an engine uses when it names none (`DefaultRuntime` missing from its info).
const ENGINE_DEFAULT: &str = "runc";

/// A runtime the engine has registered, as the pool uses it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OciRuntime {
    /// The engine's name for it (`sandbox.runtime`, or the engine's default).
    pub name: String,
    /// Whether it is gVisor, by the program the engine runs for it (a file named `runsc`),
    /// not by its name: an operator may register gVisor as `gvisor`, and its processes still
    /// cost what gVisor's cost (see [`crate::spec::host_pids_limit`]).
    pub gvisor: bool,
}

/// The runtime the pool's containers run under: `wanted` when the engine has it registered,
/// the engine's default when `wanted` is `None`. Refused with [`PoolError::RuntimeMissing`]
/// (what the engine has, and how to register the one asked for) otherwise.
pub async fn resolve_runtime(
    docker: &Docker,
    wanted: Option<&str>,
) -> Result<OciRuntime, PoolError> {
    let info = match tokio::time::timeout(ENGINE_TIMEOUT, docker.info()).await {
        Ok(Ok(info)) => info,
        Ok(Err(e)) => return Err(PoolError::docker("ask which runtimes it has", e)),
        Err(_) => {
            return Err(PoolError::EngineTimeout {
                action: "say which runtimes it has".into(),
                secs: ENGINE_TIMEOUT.as_secs(),
            })
        }
    };
    let default = info.default_runtime.filter(|d| !d.is_empty());
    let runtimes = info.runtimes.unwrap_or_default();
    let mut registered: Vec<String> = runtimes.keys().cloned().collect();
    registered.sort();
    let name = match wanted {
        None => default.unwrap_or_else(|| ENGINE_DEFAULT.to_owned()),
        Some(name) if registered.iter().any(|r| r == name) => name.to_owned(),
        // An engine that lists no runtimes (an API that leaves them out) is taken at its
        // word for its default only.
        Some(name) if registered.is_empty() && default.as_deref() == Some(name) => name.to_owned(),
        Some(name) => {
            return Err(PoolError::RuntimeMissing {
                runtime: name.to_owned(),
                registered: registered.join(", "),
                fix: runtime_fix(name),
            })
        }
    };
    let program = runtimes.get(&name).and_then(|r| r.path.clone()).unwrap_or_else(|| name.clone());
    let gvisor = std::path::Path::new(&program).file_name().is_some_and(|f| f == "runsc");
    Ok(OciRuntime { name, gvisor })
}

/// How to install and register runtime `name` with the engine: the exact `daemon.json` lines
/// and the reload (a `SIGHUP` to `dockerd`: running containers are not touched).
pub fn runtime_fix(name: &str) -> String {
    let reload = "then reload the engine: `kill -HUP $(pidof dockerd)` (running containers \
                  are not touched), or set sandbox.runtime to one it lists";
    if name == "runsc" {
        // Why these arguments: measured on Debian 12's gVisor (2022-12) under engine 20.10,
        // the default network mode refuses a container on a bridge network ("cannot run with
        // network enabled in root network namespace"); `--network=host` makes gVisor use the
        // network namespace the engine made for the container (still the pool's internal
        // network). `ptrace` is the platform that ran there (`kvm` hung).
        format!(
            "install gVisor (`apt-get install runsc`), register it in /etc/docker/daemon.json \
             as {{\"runtimes\": {{\"runsc\": {{\"path\": \"/usr/bin/runsc\", \"runtimeArgs\": \
             [\"--platform=ptrace\", \"--network=host\"]}}}}}}, {reload}"
        )
    } else {
        format!(
            "register it in /etc/docker/daemon.json as {{\"runtimes\": {{\"{name}\": \
             {{\"path\": \"/path/to/{name}\"}}}}}}, {reload}"
        )
    }
}

/// What [`probe`] saw: the runtime the container ran under and how long it took from the
/// engine's create to the first `pong`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probe {
    pub runtime: String,
    pub first_pong: Duration,
}

/// Starts one container exactly as the pool does (`config`'s image, limits, user, runtime),
/// waits for its first `pong` within `timeout`, and removes it. It is named after the pool
/// with `-probe` and joins the pool's network when that exists (where a runtime's network
/// mode matters), else none. Nothing of it stays behind, whatever the outcome.
pub async fn probe(
    docker: &Docker,
    config: &PoolConfig,
    timeout: Duration,
) -> Result<Probe, PoolError> {
    let runtime = resolve_runtime(docker, config.runtime.as_deref()).await?;
    let mut config = config.clone();
    config.name = format!("{}-probe", config.name.chars().take(34).collect::<String>());
    if docker.inspect_network(&config.network, None).await.is_err() {
        config.network = "none".into();
    }
    let instance = uuid::Uuid::new_v4().simple().to_string();
    let owner = Owner::current().clone();
    let engine = Arc::new(Engine::new(docker.clone(), instance, owner, config, runtime.clone()));
    let t0 = Instant::now();
    let up = engine.bring_up(0, Arc::new(LogRing::new(20)), timeout).await;
    let first_pong = t0.elapsed();
    engine.stop.cancel();
    let member = up?;
    engine.remove(&member.container_id).await;
    Ok(Probe { runtime: runtime.name, first_pong })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fix_for_gvisor_names_the_package_the_lines_and_the_reload() {
        let fix = runtime_fix("runsc");
        for part in ["apt-get install runsc", "/etc/docker/daemon.json", "\"--network=host\""] {
            assert!(fix.contains(part), "{part} missing from {fix}");
        }
        assert!(fix.contains("kill -HUP $(pidof dockerd)"), "{fix}");
        // The daemon.json fragment is valid JSON as written.
        let start = fix.find("{\"runtimes\"").unwrap();
        let end = fix.find("]}}}").unwrap() + 4;
        let parsed: serde_json::Value = serde_json::from_str(&fix[start..end]).unwrap();
        assert_eq!(parsed["runtimes"]["runsc"]["path"], "/usr/bin/runsc");
        let other = runtime_fix("kata");
        assert!(other.contains("\"kata\"") && other.contains("kill -HUP"), "{other}");
    }
}
