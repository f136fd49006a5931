//! The host's own addresses: every address of every interface of this machine, the Docker
//! gateways the host names, and the listener's own address.
//!
//! A container on the pool network that asks the proxy for `<the server's public IP>:22`
//! names an ordinary, public, allowed-looking destination, yet the proxy would dial its own
//! machine: sshd, a database on `0.0.0.0`, a TCP dockerd. So the policy refuses every address
//! in this set unless one explicit `ip:port` entry of `egress.proxy.allow_internal` names it.
//!
//! The interface addresses are read with `getifaddrs(3)` (the `if-addrs` crate, because this
//! crate forbids `unsafe`; link-local addresses included) when the listener starts, every
//! `egress.proxy.host_addresses_refresh_secs` after that, and whenever the host asks
//! ([`crate::Egress::refresh_host_addresses`]), so an address added later (a new bridge, a
//! DHCP lease, a floating IP) is refused within one refresh period.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::RwLock;

/// Where the set comes from; `lookup` names it in refusal reasons.
#[derive(Debug, Default)]
pub(crate) struct HostAddrs {
    /// Address → interface name, from the last successful read.
    interfaces: RwLock<BTreeMap<IpAddr, String>>,
    /// Address → what it is ("docker gateway", "egress listener"), set by the host.
    named: RwLock<BTreeMap<IpAddr, String>>,
}

impl HostAddrs {
    /// Reads the interfaces now; the set is kept as it was when the read fails.
    pub(crate) fn refresh(&self) -> std::io::Result<usize> {
        let read: BTreeMap<IpAddr, String> = if_addrs::get_if_addrs()?
            .into_iter()
            .map(|interface| (interface.ip().to_canonical(), interface.name))
            .collect();
        let count = read.len();
        let mut interfaces = self.interfaces.write().unwrap_or_else(|p| p.into_inner());
        if *interfaces != read {
            let added: Vec<String> = read
                .keys()
                .filter(|ip| !interfaces.contains_key(ip))
                .map(|ip| ip.to_string())
                .collect();
            let removed: Vec<String> = interfaces
                .keys()
                .filter(|ip| !read.contains_key(ip))
                .map(|ip| ip.to_string())
                .collect();
            tracing::info!(
                count,
                added = %added.join(","),
                removed = %removed.join(","),
                "egress: the host's own addresses changed; they are refused as destinations"
            );
            *interfaces = read;
        }
        Ok(count)
    }

    /// Replaces the addresses set by name `what` (e.g. every Docker network gateway).
    pub(crate) fn set_named(&self, what: &str, addrs: impl IntoIterator<Item = IpAddr>) {
        let mut named = self.named.write().unwrap_or_else(|p| p.into_inner());
        named.retain(|_, name| name != what);
        for ip in addrs {
            named.insert(ip.to_canonical(), what.to_owned());
        }
    }

    /// Which of the host's addresses `ip` is (the interface, or what the host named it), if
    /// it is one. Loopback and unspecified addresses always are: dialling them reaches this
    /// machine. An IPv6 form that carries an IPv4 address (mapped, compatible, NAT64, 6to4)
    /// is judged by that address too.
    pub(crate) fn lookup(&self, ip: IpAddr) -> Option<String> {
        let ip = ip.to_canonical();
        if ip.is_loopback() || ip.is_unspecified() {
            return Some("loopback".into());
        }
        let candidates = std::iter::once(ip).chain(match ip {
            IpAddr::V6(v6) => embedded_v4(v6).map(IpAddr::V4),
            IpAddr::V4(_) => None,
        });
        for candidate in candidates {
            if let Some(name) =
                self.interfaces.read().unwrap_or_else(|p| p.into_inner()).get(&candidate)
            {
                return Some(format!("interface {name}"));
            }
            if let Some(name) = self.named.read().unwrap_or_else(|p| p.into_inner()).get(&candidate)
            {
                return Some(name.clone());
            }
            if candidate != ip && (candidate.is_loopback() || candidate.is_unspecified()) {
                return Some("loopback".into());
            }
        }
        None
    }

    /// Every address in the set, sorted.
    pub(crate) fn snapshot(&self) -> Vec<IpAddr> {
        let mut all: Vec<IpAddr> =
            self.interfaces.read().unwrap_or_else(|p| p.into_inner()).keys().copied().collect();
        all.extend(self.named.read().unwrap_or_else(|p| p.into_inner()).keys().copied());
        all.sort();
        all.dedup();
        all
    }
}

/// The IPv4 address an IPv6 address stands for or routes to, in the forms that carry one:
/// IPv4-mapped `::ffff:a.b.c.d`, the deprecated IPv4-compatible `::a.b.c.d`, the NAT64
/// well-known prefix `64:ff9b::a.b.c.d`, and 6to4 `2002:aabb:ccdd::`.
pub(crate) fn embedded_v4(v6: Ipv6Addr) -> Option<Ipv4Addr> {
    let bits = u128::from(v6);
    let low = Ipv4Addr::from((bits & 0xffff_ffff) as u32);
    if let Some(v4) = v6.to_ipv4_mapped() {
        return Some(v4);
    }
    let segments = v6.segments();
    if bits >> 32 == 0 && bits > 1 {
        return Some(low); // ::a.b.c.d (not :: or ::1)
    }
    if segments[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        return Some(low);
    }
    if segments[0] == 0x2002 {
        return Some(Ipv4Addr::from(((bits >> 80) & 0xffff_ffff) as u32));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_interfaces_of_this_machine_are_read_and_named() {
        let addrs = HostAddrs::default();
        assert!(addrs.refresh().unwrap() > 0, "at least loopback");
        assert!(addrs.snapshot().contains(&"127.0.0.1".parse().unwrap()));
        assert_eq!(addrs.lookup("127.0.0.5".parse().unwrap()).as_deref(), Some("loopback"));
        assert_eq!(addrs.lookup("0.0.0.0".parse().unwrap()).as_deref(), Some("loopback"));
        assert_eq!(addrs.lookup("::ffff:127.0.0.1".parse().unwrap()).as_deref(), Some("loopback"));
        assert_eq!(addrs.lookup("8.8.8.8".parse().unwrap()), None);
    }

    #[test]
    fn named_addresses_are_replaced_as_a_group_and_found_in_every_ipv6_form() {
        let addrs = HostAddrs::default();
        let gateway: IpAddr = "203.0.113.9".parse().unwrap();
        addrs.set_named("docker gateway", [gateway]);
        for spelling in
            ["203.0.113.9", "::ffff:203.0.113.9", "64:ff9b::cb00:7109", "2002:cb00:7109::1"]
        {
            assert_eq!(
                addrs.lookup(spelling.parse().unwrap()).as_deref(),
                Some("docker gateway"),
                "{spelling}"
            );
        }
        addrs.set_named("docker gateway", []);
        assert_eq!(addrs.lookup(gateway), None);
    }

    #[test]
    fn embedded_ipv4_forms_are_recognised() {
        let v4 = |s: &str| embedded_v4(s.parse().unwrap()).map(|a| a.to_string());
        assert_eq!(v4("::ffff:1.2.3.4").as_deref(), Some("1.2.3.4"));
        assert_eq!(v4("::1.2.3.4").as_deref(), Some("1.2.3.4"));
        assert_eq!(v4("64:ff9b::102:304").as_deref(), Some("1.2.3.4"));
        assert_eq!(v4("2002:102:304::").as_deref(), Some("1.2.3.4"));
        assert_eq!(v4("::1"), None);
        assert_eq!(v4("2606:4700::1"), None);
    }
}
