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
//! They are inserted at the top of `INPUT` on start and deleted on shutdown (and before
//! inserting, so a crashed host leaves no duplicates).

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
         network (set egress.firewall = false if the host cannot, e.g. in compose, and \
         firewall the bridge yourself)"
    )]
    Iptables { args: String, reason: String },
}

/// The installed rules; removed by [`Firewall::remove`] or, as a fallback, on drop.
#[derive(Debug)]
pub struct Firewall {
    rules: Vec<Vec<String>>,
}

const COMMENT: &str = "nexbot-egress";

/// Docker names a bridge network's interface `br-` + the first 12 characters of its id.
pub fn bridge_interface(network_id: &str) -> String {
    format!("br-{}", network_id.get(..12).unwrap_or(network_id))
}

impl Firewall {
    pub async fn install(
        interface: &str,
        gateway: IpAddr,
        port: u16,
    ) -> Result<Self, FirewallError> {
        if !std::path::Path::new("/sys/class/net").join(interface).exists() {
            return Err(FirewallError::NoInterface(interface.to_owned()));
        }
        let tagged = |mut rule: Vec<String>| {
            rule.extend(["-m", "comment", "--comment", COMMENT].map(String::from));
            rule
        };
        let drop_rest = tagged(vec!["-i".into(), interface.into(), "-j".into(), "DROP".into()]);
        let accept_proxy = tagged(
            [
                "-i",
                interface,
                "-d",
                &gateway.to_string(),
                "-p",
                "tcp",
                "--dport",
                &port.to_string(),
                "-j",
                "ACCEPT",
            ]
            .map(String::from)
            .to_vec(),
        );
        // Insert DROP first, then ACCEPT above it: no moment where the proxy is blocked
        // matters, but there must be none where everything is open after ACCEPT is in.
        let rules = vec![drop_rest, accept_proxy];
        for rule in &rules {
            while delete(rule).await.is_ok() {}
            iptables(
                &[&["-I", "INPUT", "1"][..], &rule.iter().map(String::as_str).collect::<Vec<_>>()]
                    .concat(),
            )
            .await?;
        }
        tracing::info!(%interface, %gateway, port, "egress firewall: the pool network reaches only the proxy on the host");
        Ok(Self { rules })
    }

    /// Deletes the rules (the proxy is going away).
    pub async fn remove(mut self) {
        for rule in std::mem::take(&mut self.rules).iter().rev() {
            if let Err(err) = delete(rule).await {
                tracing::warn!(%err, "egress firewall: a rule could not be removed");
            }
        }
    }
}

impl Drop for Firewall {
    fn drop(&mut self) {
        // Not removed through `remove` (e.g. a panic): do it synchronously.
        for rule in self.rules.iter().rev() {
            let mut args = vec!["-w", "5", "-D", "INPUT"];
            args.extend(rule.iter().map(String::as_str));
            let _ = std::process::Command::new("iptables").args(&args).output();
        }
    }
}

async fn delete(rule: &[String]) -> Result<(), FirewallError> {
    iptables(&[&["-D", "INPUT"][..], &rule.iter().map(String::as_str).collect::<Vec<_>>()].concat())
        .await
}

async fn iptables(args: &[&str]) -> Result<(), FirewallError> {
    let fail = |reason: String| FirewallError::Iptables { args: args.join(" "), reason };
    let mut command = tokio::process::Command::new("iptables");
    command.arg("-w").arg("5").args(args).kill_on_drop(true);
    let output = tokio::time::timeout(Duration::from_secs(15), command.output())
        .await
        .map_err(|_| fail("timed out".into()))?
        .map_err(|e| fail(e.to_string()))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(fail(String::from_utf8_lossy(&output.stderr).trim().to_owned()))
    }
}
