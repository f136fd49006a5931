//! Closing the one hole an internal Docker network leaves: the host itself.
//!
//! On an `internal` network Docker drops forwarded traffic, so containers cannot reach the
//! internet, but containers still have a default route to the gateway, and packets addressed to
//! any of the host's own addresses (the gateway, `eth0`, other bridges) are delivered locally.
//! Every service the host runs on a non-loopback address would be reachable from the sandbox
//! without the proxy. These two `iptables` rules leave the proxy port on the gateway as the
//! only thing the pool's bridge may reach on the host:
//!
//! ```text
//! -A INPUT -i br-<net> -d <gateway> -p tcp --dport <port> -j ACCEPT
//! -A INPUT -i br-<net> -j DROP
//! ```
//!
//! They are inserted at the top of `INPUT` on start; the ACCEPT is deleted on shutdown, the
//! DROP once no listener on that bridge is left (a crash leaves the bridge closed, not open).
//! Listeners sharing a bridge change the rules one at a time (a lock file in `/run`, shared by
//! every process on the host), so one's removal of the DROP never interleaves with another's
//! install and leaves an ACCEPT without the DROP below it.

use std::net::IpAddr;
use std::time::Duration;

/// Why the rules could not be installed.
#[derive(Debug, thiserror::Error)]
pub enum FirewallError {
    #[error(
        "bridge interface {0} of the pool network does not exist (a custom bridge name?); \
         set egress.firewall = false and firewall the bridge yourself"
    )]
    NoInterface(String),
    #[error(
        "iptables {args}: {reason}; the host needs root and iptables to confine the pool \
         network (set egress.firewall = false only if you firewall the bridge yourself)"
    )]
    Iptables { args: String, reason: String },
}

/// The installed rules; removed by [`Firewall::remove`] or, as a fallback, on drop.
#[derive(Debug)]
pub struct Firewall {
    interface: String,
    /// This listener's ACCEPT rule, and the bridge's shared DROP rule.
    rules: Option<(Vec<String>, Vec<String>)>,
}

const COMMENT: &str = "nexbot-egress";

fn tagged(rule: &[&str]) -> Vec<String> {
    rule.iter().chain(&["-m", "comment", "--comment", COMMENT]).map(|s| (*s).to_owned()).collect()
}

impl Firewall {
    /// Installs the rules. Several listeners may share a bridge (each adds its ACCEPT above the
    /// one shared DROP), and a rerun replaces the ACCEPT a crashed predecessor left.
    pub async fn install(
        interface: &str,
        gateway: IpAddr,
        port: u16,
    ) -> Result<Self, FirewallError> {
        if !std::path::Path::new("/sys/class/net").join(interface).exists() {
            return Err(FirewallError::NoInterface(interface.to_owned()));
        }
        let _lock = rules_lock().await;
        let drop_rest = tagged(&["-i", interface, "-j", "DROP"]);
        let (gateway, port) = (gateway.to_string(), port.to_string());
        let accept = tagged(&[
            "-i", interface, "-d", &gateway, "-p", "tcp", "--dport", &port, "-j", "ACCEPT",
        ]);
        // DROP first, then ACCEPT above it: at no moment is the bridge open.
        if iptables("-C", &drop_rest).await.is_err() {
            iptables_insert(&drop_rest).await?;
        }
        while iptables("-D", &accept).await.is_ok() {}
        iptables_insert(&accept).await?;
        tracing::info!(%interface, %gateway, %port, "egress firewall: the pool network reaches only the proxy on the host");
        Ok(Self { interface: interface.to_owned(), rules: Some((accept, drop_rest)) })
    }

    /// Deletes this listener's rule, and the shared DROP once no listener on the bridge is left.
    pub async fn remove(mut self) {
        let Some((accept, drop_rest)) = self.rules.take() else { return };
        let _lock = rules_lock().await;
        if let Err(err) = iptables("-D", &accept).await {
            tracing::warn!(%err, "egress firewall: a rule could not be removed");
        }
        match other_listeners(&self.interface).await {
            Ok(false) => while iptables("-D", &drop_rest).await.is_ok() {},
            Ok(true) => {}
            Err(err) => tracing::warn!(%err, "egress firewall: rules could not be listed"),
        }
    }
}

impl Drop for Firewall {
    fn drop(&mut self) {
        // Not removed through `remove` (e.g. a panic): delete our ACCEPT synchronously and
        // leave the shared DROP, which keeps the bridge confined rather than open.
        if let Some((accept, _)) = self.rules.take() {
            let mut args = vec!["-w", "5", "-D", "INPUT"];
            args.extend(accept.iter().map(String::as_str));
            let _ = std::process::Command::new("iptables").args(&args).output();
        }
    }
}

/// Holds the host-wide lock on rule changes until dropped; `None` (and no serialisation) when
/// no lock file can be opened, which only a host without a writable `/run` or temp dir has.
async fn rules_lock() -> Option<std::fs::File> {
    let lock = || {
        let dirs = [std::path::PathBuf::from("/run"), std::env::temp_dir()];
        let file = dirs.iter().find_map(|dir| {
            std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(dir.join("nexbot-egress-firewall.lock"))
                .ok()
        })?;
        rustix::fs::flock(&file, rustix::fs::FlockOperation::LockExclusive).ok()?;
        Some(file)
    };
    let locked = tokio::task::spawn_blocking(lock).await.ok().flatten();
    if locked.is_none() {
        tracing::warn!("egress firewall: no lock file; rule changes are not serialised");
    }
    locked
}

/// Whether another listener's ACCEPT rule for `interface` is still installed.
async fn other_listeners(interface: &str) -> Result<bool, FirewallError> {
    let listing = run(&["-S", "INPUT"]).await?;
    Ok(listing.lines().any(|line| {
        line.contains(&format!("-i {interface} "))
            && line.contains(COMMENT)
            && line.ends_with("-j ACCEPT")
    }))
}

async fn iptables_insert(rule: &[String]) -> Result<(), FirewallError> {
    let mut args = vec!["-I", "INPUT", "1"];
    args.extend(rule.iter().map(String::as_str));
    run(&args).await.map(drop)
}

/// `-C` (check) or `-D` (delete) of `rule` in `INPUT`.
async fn iptables(action: &str, rule: &[String]) -> Result<(), FirewallError> {
    let mut args = vec![action, "INPUT"];
    args.extend(rule.iter().map(String::as_str));
    run(&args).await.map(drop)
}

async fn run(args: &[&str]) -> Result<String, FirewallError> {
    let fail = |reason: String| FirewallError::Iptables { args: args.join(" "), reason };
    let mut command = tokio::process::Command::new("iptables");
    command.arg("-w").arg("5").args(args).kill_on_drop(true);
    let output = tokio::time::timeout(Duration::from_secs(15), command.output())
        .await
        .map_err(|_| fail("timed out".into()))?
        .map_err(|e| fail(e.to_string()))?;
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    } else {
        Err(fail(String::from_utf8_lossy(&output.stderr).trim().to_owned()))
    }
}
