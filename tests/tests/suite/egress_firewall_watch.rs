//! The egress firewall keeps its rules, against the real engine and `iptables`: rules that
//! someone else deleted (a firewall reload) are put back within the check period — the DROP
//! below the ACCEPT, so the bridge is never open — counted and logged; once the listener stops,
//! nothing puts them back. Needs root (skipped, loudly, without it outside CI).

use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use nexbot_docker::{ensure_pool_network, remove_network};
use nexbot_egress::{
    firewall_rules_reinserted, set_firewall_check_period, Egress, EgressConfig, LateAttribution,
    Network,
};
use nexbot_tests::docker_or_skip;

use crate::pool_common::Leftovers;
use nexbot_tests::egress::DataDir;

fn iptables(args: &[&str]) -> (bool, String) {
    let out = Command::new("iptables").arg("-w").arg("5").args(args).output().expect("iptables");
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `-C` (is it there?) or `-D` (delete) of `rule` in INPUT.
fn rule(action: &str, rule: &[String]) -> bool {
    let mut args = vec![action, "INPUT"];
    args.extend(rule.iter().map(String::as_str));
    iptables(&args).0
}

/// Deletes every nexbot-egress rule of a bridge when dropped: a failing test would leave the
/// bridge's DROP behind (as a crashed daemon does, on purpose).
struct RulesOf(String);

impl Drop for RulesOf {
    fn drop(&mut self) {
        let listing = iptables(&["-S", "INPUT"]).1;
        for line in listing.lines() {
            if line.contains(&format!("-i {} ", self.0)) && line.contains("nexbot-egress") {
                let args: Vec<&str> = line.split_whitespace().skip(2).collect();
                let mut delete = vec!["-D", "INPUT"];
                delete.extend(args);
                iptables(&delete);
            }
        }
    }
}

/// Polls every 50 ms until `check` holds or `within` passes.
async fn eventually(within: Duration, check: impl Fn() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + within;
    while tokio::time::Instant::now() < deadline {
        if check() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    check()
}

#[tokio::test]
async fn firewall_rules_removed_by_someone_else_are_put_back_within_the_period() {
    let Some(docker) = docker_or_skip("firewall_watch").await else { return };
    if !iptables(&["-S", "INPUT"]).0 {
        assert!(std::env::var("CI").as_deref() != Ok("true"), "CI must run as root with iptables");
        eprintln!("\n!!! SKIPPED firewall_watch: needs root and iptables !!!\n");
        return;
    }
    let name = format!("nxp-fw-{}", std::process::id());
    let _leftovers = Leftovers { containers: Vec::new(), networks: vec![name.clone()] };
    let network = ensure_pool_network(&docker, &name).await.expect("network");
    let bridge = network.bridge_interface();
    let _rules = RulesOf(bridge.clone());
    set_firewall_check_period(Duration::from_millis(200));
    let dir = DataDir::new("fw-watch");
    let config = EgressConfig { port: 0, firewall: true, ..EgressConfig::default() };
    let egress = Egress::start(
        config,
        &Network { gateway: network.gateway, bridge: bridge.clone() },
        &dir.0,
        Arc::new(LateAttribution::default()),
        None,
    )
    .await
    .expect("egress with its firewall");
    let tag = ["-m", "comment", "--comment", "nexbot-egress"];
    let port = egress.local_addr().port().to_string();
    let gateway = network.gateway.to_string();
    let accept: Vec<String> =
        ["-i", &bridge, "-d", &gateway, "-p", "tcp", "--dport", &port, "-j", "ACCEPT"]
            .iter()
            .chain(&tag)
            .map(|s| s.to_string())
            .collect();
    let drop: Vec<String> =
        ["-i", &bridge, "-j", "DROP"].iter().chain(&tag).map(|s| s.to_string()).collect();
    assert!(rule("-C", &accept) && rule("-C", &drop), "installed");
    // ACCEPT above DROP in INPUT.
    let in_order = || {
        let listing = iptables(&["-S", "INPUT"]).1;
        let line_of = |what: &str| {
            listing.lines().position(|l| l.contains(&format!("-i {bridge} ")) && l.ends_with(what))
        };
        matches!((line_of("-j ACCEPT"), line_of("-j DROP")), (Some(a), Some(d)) if a < d)
    };
    assert!(in_order());

    // A firewall reload: both gone. Back within the period (200 ms; 3 s of slack).
    let before = firewall_rules_reinserted();
    assert!(rule("-D", &accept) && rule("-D", &drop));
    let back =
        eventually(Duration::from_secs(3), || rule("-C", &accept) && rule("-C", &drop)).await;
    assert!(back, "the rules were not put back");
    assert!(in_order(), "{}", iptables(&["-S", "INPUT"]).1);
    let counted = eventually(Duration::from_secs(1), || firewall_rules_reinserted() >= before + 2);
    assert!(counted.await, "counted");

    // Only the DROP gone: it comes back below the ACCEPT (the proxy stays reachable).
    let before = firewall_rules_reinserted();
    assert!(rule("-D", &drop));
    assert!(eventually(Duration::from_secs(3), || rule("-C", &drop)).await);
    assert!(in_order(), "{}", iptables(&["-S", "INPUT"]).1);
    assert!(eventually(Duration::from_secs(1), || firewall_rules_reinserted() > before).await);

    // Stopped with the listener, its ACCEPT there twice (a check that failed while the engine
    // rewrote the tables was once taken for "missing", and the rule put back beside itself):
    // every copy is removed, and the DROP with them, and they stay removed. (Deleted once,
    // the copy kept both: the ACCEPT, and the DROP as if another listener used the bridge.)
    let mut twice = vec!["-I", "INPUT", "1"];
    twice.extend(accept.iter().map(String::as_str));
    assert!(iptables(&twice).0);
    egress.shutdown(Duration::from_secs(1)).await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(!rule("-C", &accept) && !rule("-C", &drop), "{}", iptables(&["-S", "INPUT"]).1);
    remove_network(&docker, &name).await.expect("remove the test network");
}
