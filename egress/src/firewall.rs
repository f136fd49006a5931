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
//!
//! While installed they are checked every [`firewall_check_period`] and put back when
//! something removed them (a `firewalld` reload, an operator's `iptables -F`): DROP first, below
//! the bridge's ACCEPT rules, then this listener's ACCEPT on top, so the bridge is never open.
//! Each rule put back is counted ([`firewall_rules_reinserted`], for the metrics) and logged.
//!
//! IPv6 needs no rules: the pool network has no IPv6 and containers have it switched off
//! (`nexbot_docker::ensure_internal_network` says why).

use std::collections::HashSet;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// How often the installed rules are checked unless [`set_firewall_check_period`] says
/// otherwise.
pub const DEFAULT_FIREWALL_CHECK_PERIOD: Duration = Duration::from_secs(10);

static CHECK_PERIOD_MS: AtomicU64 = AtomicU64::new(10_000);
static REINSERTED: AtomicU64 = AtomicU64::new(0);

/// Sets how often every installed firewall checks its rules (at least 10 ms), from the next
/// check on. Process-wide: one daemon runs one listener.
pub fn set_firewall_check_period(period: Duration) {
    CHECK_PERIOD_MS.store((period.as_millis() as u64).max(10), Ordering::Relaxed);
}

/// How often installed rules are checked.
pub fn firewall_check_period() -> Duration {
    Duration::from_millis(CHECK_PERIOD_MS.load(Ordering::Relaxed))
}

/// Rules put back since the process started because something had removed them.
pub fn firewall_rules_reinserted() -> u64 {
    REINSERTED.load(Ordering::Relaxed)
}

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
    /// The task that keeps the rules in place, and what stops it.
    watch: Option<(CancellationToken, JoinHandle<()>)>,
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
        remove_stale(interface).await;
        iptables_insert(&accept).await?;
        tracing::info!(%interface, %gateway, %port, "egress firewall: the pool network reaches only the proxy on the host");
        let stop = CancellationToken::new();
        let watch = tokio::spawn(keep(
            interface.to_owned(),
            accept.clone(),
            drop_rest.clone(),
            stop.clone(),
        ));
        Ok(Self {
            interface: interface.to_owned(),
            rules: Some((accept, drop_rest)),
            watch: Some((stop, watch)),
        })
    }

    /// Deletes this listener's rule, and the shared DROP once no listener on the bridge is left.
    pub async fn remove(mut self) {
        if let Some((stop, watch)) = self.watch.take() {
            // Stopped first, or it would put back what is deleted below.
            stop.cancel();
            let _ = watch.await;
        }
        let Some((accept, drop_rest)) = self.rules.take() else { return };
        let _lock = rules_lock().await;
        delete_surely(&accept).await;
        remove_stale(&self.interface).await;
        match other_listeners(&self.interface).await {
            Ok(others) if others.is_empty() => delete_surely(&drop_rest).await,
            // Said, so that a DROP left at a stop names what kept it.
            Ok(others) => tracing::info!(
                interface = %self.interface,
                kept_by = ?others,
                "egress firewall: the bridge's DROP stays for the other listeners' rules"
            ),
            Err(err) => tracing::warn!(%err, "egress firewall: rules could not be listed"),
        }
    }
}

impl Drop for Firewall {
    fn drop(&mut self) {
        if let Some((stop, watch)) = self.watch.take() {
            stop.cancel();
            watch.abort();
        }
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

/// Checks the rules every [`firewall_check_period`] until `stop`, putting back what is gone.
async fn keep(
    interface: String,
    accept: Vec<String>,
    drop_rest: Vec<String>,
    stop: CancellationToken,
) {
    let mut failing = false;
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(firewall_check_period()) => {}
        }
        match repair(&interface, &accept, &drop_rest).await {
            Ok(0) => failing = false,
            Ok(put_back) => {
                failing = false;
                tracing::warn!(
                    %interface,
                    put_back,
                    total = firewall_rules_reinserted(),
                    "egress firewall: rules confining the pool network had been removed (a firewall reload?) and were put back"
                );
            }
            // Said once per spell of failures, not every period.
            Err(err) if !failing => {
                failing = true;
                tracing::error!(%err, %interface, "egress firewall: the rules could not be checked or put back");
            }
            Err(_) => {}
        }
    }
}

/// Puts back whichever of the two rules is missing, counts each in [`firewall_rules_reinserted`]
/// and says how many it put back. The DROP
/// goes right below the bridge's last nexbot ACCEPT (this listener's or another's), the
/// ACCEPT on top: never is the bridge open, nor a listener shut out.
async fn repair(
    interface: &str,
    accept: &[String],
    drop_rest: &[String],
) -> Result<u64, FirewallError> {
    // Serialised with every other listener's changes on this host (see `rules_lock`).
    let _lock = rules_lock().await;
    let drop_present = present(drop_rest).await?;
    let accept_present = present(accept).await?;
    let mut put_back = 0;
    if !drop_present {
        insert_drop(interface, drop_rest).await?;
        REINSERTED.fetch_add(1, Ordering::Relaxed);
        put_back += 1;
    }
    if !accept_present {
        iptables_insert(accept).await?;
        REINSERTED.fetch_add(1, Ordering::Relaxed);
        put_back += 1;
    }
    Ok(put_back)
}

/// Whether `rule` is in `INPUT`. A check that fails for another reason (the tables being
/// rewritten by the engine, say) is an error, not "missing": taken for missing, the rule was
/// put back beside itself, and the copy outlived the listener's stop.
async fn present(rule: &[String]) -> Result<bool, FirewallError> {
    match iptables("-C", rule).await {
        Ok(()) => Ok(true),
        Err(FirewallError::Iptables { reason, .. }) if is_absent(&reason) => Ok(false),
        Err(err) => Err(err),
    }
}

/// Inserts the bridge's DROP right below its last nexbot ACCEPT. A writer that does not share
/// the rules lock (a daemon in a container has a `/run` of its own) may insert or delete a rule
/// between the listing and the insert, which moves the position: the DROP is checked to be
/// below every ACCEPT of the bridge, and moved if not (above one, it shuts that listener out).
async fn insert_drop(interface: &str, drop_rest: &[String]) -> Result<(), FirewallError> {
    for _ in 0..RULE_ATTEMPTS {
        let listing = run(&["-S", "INPUT"]).await?;
        let position = drop_position(&listing, interface).to_string();
        let mut args = vec!["-I", "INPUT", &position];
        args.extend(drop_rest.iter().map(String::as_str));
        run(&args).await?;
        if drop_below_accepts(&run(&["-S", "INPUT"]).await?, interface) {
            return Ok(());
        }
        tracing::warn!(%interface, "egress firewall: the DROP landed above an ACCEPT (rules changed meanwhile); moved");
        iptables("-D", drop_rest).await?;
    }
    // Still moving under us: the bridge closed (a DROP on top) rather than open.
    iptables_insert(drop_rest).await
}

/// Whether every nexbot DROP of `interface` in `listing` is below all its nexbot ACCEPTs.
fn drop_below_accepts(listing: &str, interface: &str) -> bool {
    let rules: Vec<&str> = listing.lines().filter(|line| line.starts_with("-A INPUT ")).collect();
    let last_accept = rules.iter().rposition(|line| is_ours(line, interface, "ACCEPT"));
    let first_drop = rules.iter().position(|line| is_ours(line, interface, "DROP"));
    match (last_accept, first_drop) {
        (Some(accept), Some(drop)) => drop > accept,
        _ => true,
    }
}

/// Where in `INPUT` (1-based) the bridge's DROP belongs: below every nexbot ACCEPT rule of
/// `interface` in `listing` (`iptables -S INPUT`), else at the top.
fn drop_position(listing: &str, interface: &str) -> usize {
    let rules = listing.lines().filter(|line| line.starts_with("-A INPUT "));
    let last_accept = rules
        .enumerate()
        .filter(|(_, line)| is_listener_accept(line, interface))
        .map(|(index, _)| index + 1)
        .last();
    last_accept.map_or(1, |position| position + 1)
}

fn is_listener_accept(line: &str, interface: &str) -> bool {
    is_ours(line, interface, "ACCEPT")
}

/// Whether `line` (of `iptables -S`) is a nexbot rule of `interface` ending in `-j target`.
fn is_ours(line: &str, interface: &str, target: &str) -> bool {
    line.contains(&format!("-i {interface} "))
        && line.contains(COMMENT)
        && line.strip_suffix(target).is_some_and(|rest| rest.ends_with("-j "))
}

/// Deletes the ACCEPT rules of `interface` whose port nothing listens on any more: what a
/// killed listener left (a rerun on another port, e.g. `egress.port = 0`, would otherwise keep
/// it for ever, and with it the shared DROP at its stop, and a hole for whatever listens on
/// that port later). Best effort, under the rules lock.
async fn remove_stale(interface: &str) {
    let Ok(listing) = run(&["-S", "INPUT"]).await else { return };
    let gone = |name: &str| !std::path::Path::new("/sys/class/net").join(name).exists();
    let mut stale = stale_accepts(&listing, interface, &listening_ports());
    stale.extend(rules_of_gone_bridges(&listing, gone));
    for rule in stale {
        let mut args = vec!["-D"];
        args.extend(rule.split_whitespace().skip(1));
        match run(&args).await {
            Ok(_) => {
                tracing::warn!(%rule, "egress firewall: removed a rule a stopped listener left")
            }
            Err(err) => tracing::warn!(%err, "egress firewall: a stale rule could not be removed"),
        }
    }
}

/// The listener ACCEPT rules of `interface` in `listing` (`iptables -S INPUT`) whose
/// `--dport` is not in `live`.
fn stale_accepts(listing: &str, interface: &str, live: &HashSet<u16>) -> Vec<String> {
    listing
        .lines()
        .filter(|line| line.starts_with("-A INPUT ") && is_listener_accept(line, interface))
        .filter(|line| {
            let port = line.split_whitespace().skip_while(|w| *w != "--dport").nth(1);
            port.and_then(|p| p.parse::<u16>().ok()).is_some_and(|p| !live.contains(&p))
        })
        .map(str::to_owned)
        .collect()
}

/// The nexbot rules (ACCEPT and DROP) in `listing` whose interface is `gone`: a pool network
/// removed and made again (after an engine restart, say) has a new bridge, and the old one's
/// rules would stay for ever.
fn rules_of_gone_bridges(listing: &str, gone: impl Fn(&str) -> bool) -> Vec<String> {
    listing
        .lines()
        .filter(|line| line.starts_with("-A INPUT ") && line.contains(COMMENT))
        .filter(|line| {
            let interface = line.split_whitespace().skip_while(|w| *w != "-i").nth(1);
            interface.is_some_and(&gone)
        })
        .map(str::to_owned)
        .collect()
}

/// The TCP ports something listens on in this network namespace (IPv4 and IPv6), from
/// `/proc/net/tcp{,6}` (state `0A` is LISTEN).
fn listening_ports() -> HashSet<u16> {
    ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|path| std::fs::read_to_string(path).ok())
        .flat_map(|table| {
            table
                .lines()
                .skip(1)
                .filter_map(|line| {
                    let mut fields = line.split_whitespace();
                    let local = fields.nth(1)?;
                    let state = fields.nth(1)?;
                    let port = local.rsplit(':').next()?;
                    (state == "0A").then(|| u16::from_str_radix(port, 16).ok()).flatten()
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The other listeners' ACCEPT rules for `interface` still installed.
async fn other_listeners(interface: &str) -> Result<Vec<String>, FirewallError> {
    let listing = run(&["-S", "INPUT"]).await?;
    Ok(listing
        .lines()
        .filter(|line| is_listener_accept(line, interface))
        .map(str::to_owned)
        .collect())
}

/// Deletes every copy of `rule` and checks it is gone: a delete can fail while the engine or a
/// firewall manager is rewriting the tables (an engine restart does), so it is tried again
/// for a few seconds; a rule still there after that is logged as an error with the command
/// that removes it by hand.
async fn delete_surely(rule: &[String]) {
    for attempt in 0..RULE_ATTEMPTS {
        while iptables("-D", rule).await.is_ok() {}
        match present(rule).await {
            Ok(false) => return,
            Err(err) => {
                tracing::warn!(%err, attempt, "egress firewall: a rule could not be checked")
            }
            Ok(true) => {
                tracing::warn!(attempt, "egress firewall: a rule is still there after its deletion")
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    tracing::error!(
        command = %format!("iptables -D INPUT {}", rule.join(" ")),
        "egress firewall: a rule of this listener could not be removed; remove it by hand"
    );
}

/// How often a rule change that the tables did not keep is tried (half a second apart when
/// deleting).
const RULE_ATTEMPTS: u32 = 6;

/// Whether `iptables -C`'s complaint says the rule is not there (rather than that the check
/// itself failed).
fn is_absent(reason: &str) -> bool {
    reason.contains("does a matching rule exist") || reason.contains("Bad rule")
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_drop_goes_below_the_bridges_last_accept() {
        let listing = "-P INPUT ACCEPT\n\
            -A INPUT -d 10.0.0.1/32 -i br-a -p tcp -m tcp --dport 3128 -m comment --comment nexbot-egress -j ACCEPT\n\
            -A INPUT -i br-b -m comment --comment nexbot-egress -j DROP\n\
            -A INPUT -d 10.0.0.1/32 -i br-a -p tcp -m tcp --dport 4000 -m comment --comment nexbot-egress -j ACCEPT\n\
            -A INPUT -i eth0 -j ACCEPT\n";
        assert_eq!(drop_position(listing, "br-a"), 4);
        assert_eq!(drop_position(listing, "br-b"), 1);
        assert_eq!(drop_position("-P INPUT ACCEPT\n", "br-a"), 1);
        // A bridge whose name is a prefix of another's is not confused with it.
        assert_eq!(drop_position(listing, "br-"), 1);
    }

    #[test]
    fn an_accept_whose_port_nothing_listens_on_is_stale() {
        let listing = "-P INPUT ACCEPT
-A INPUT -d 172.18.0.1/32 -i br-a1 -p tcp -m tcp --dport 44351 -m comment --comment nexbot-egress -j ACCEPT
-A INPUT -d 172.18.0.1/32 -i br-a1 -p tcp -m tcp --dport 40000 -m comment --comment nexbot-egress -j ACCEPT
-A INPUT -d 172.19.0.1/32 -i br-b2 -p tcp -m tcp --dport 44351 -m comment --comment nexbot-egress -j ACCEPT
-A INPUT -i br-a1 -m comment --comment nexbot-egress -j DROP
-A INPUT -i br-a1 -p tcp -m tcp --dport 44351 -j ACCEPT";
        let live: HashSet<u16> = [40000].into();
        let stale = stale_accepts(listing, "br-a1", &live);
        assert_eq!(stale.len(), 1, "{stale:?}");
        assert!(stale[0].contains("--dport 44351") && stale[0].contains("-i br-a1"));
        assert!(stale_accepts(listing, "br-a1", &[40000, 44351].into()).is_empty());
        let gone = rules_of_gone_bridges(listing, |name| name == "br-b2");
        assert_eq!(gone.len(), 1, "{gone:?}");
        assert!(gone[0].contains("-i br-b2"));
        assert!(rules_of_gone_bridges(listing, |_| false).is_empty());
    }

    #[test]
    fn a_drop_above_an_accept_of_its_bridge_is_out_of_place() {
        let accept = "-A INPUT -d 10.0.0.1/32 -i br-a -p tcp -m tcp --dport 3128 -m comment --comment nexbot-egress -j ACCEPT";
        let drop = "-A INPUT -i br-a -m comment --comment nexbot-egress -j DROP";
        let other = "-A INPUT -i br-b -m comment --comment nexbot-egress -j DROP";
        let listing = |lines: &[&str]| format!("-P INPUT ACCEPT\n{}\n", lines.join("\n"));
        assert!(drop_below_accepts(&listing(&[accept, other, drop]), "br-a"));
        assert!(!drop_below_accepts(&listing(&[drop, accept]), "br-a"));
        // Another bridge's DROP above is no matter; nor is a bridge with one of the two.
        assert!(drop_below_accepts(&listing(&[other, accept, drop]), "br-a"));
        assert!(drop_below_accepts(&listing(&[drop]), "br-a"));
    }

    #[test]
    fn only_iptables_saying_no_such_rule_is_absent() {
        // What iptables (nft and legacy) prints for `-C` of a rule that is not there.
        assert!(is_absent("iptables: Bad rule (does a matching rule exist in that chain?)."));
        assert!(!is_absent("iptables: Resource temporarily unavailable."));
        assert!(!is_absent("timed out"));
    }

    #[test]
    fn this_process_listening_is_seen() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        assert!(listening_ports().contains(&port));
        drop(listener);
        assert!(!listening_ports().contains(&port));
    }

    #[test]
    fn the_check_period_is_settable_with_a_floor() {
        let before = firewall_check_period();
        set_firewall_check_period(Duration::ZERO);
        assert_eq!(firewall_check_period(), Duration::from_millis(10));
        set_firewall_check_period(before);
        assert_eq!(firewall_check_period(), before);
    }
}
