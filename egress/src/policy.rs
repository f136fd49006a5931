//! Where a container may connect: the destination check of the egress proxy.
//!
//! The proxy, not the container, resolves names, and every resolved address is checked here.
//! Only a [`CheckedAddr`] — which only this module can make — can be connected to, so the
//! address that was checked is the address that is dialled and no second lookup can swap it
//! (no DNS-rebinding window). Internal ranges are recognised in every IPv6 disguise that
//! carries an IPv4 address (mapped, compatible, NAT64, 6to4).

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use super::config::ProxyConfig;
use super::host_addrs::HostAddrs;
use super::literal;

/// Why a destination is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Denial {
    /// The address is in a special range (loopback, private, …).
    Address { class: AddrClass, addr: IpAddr, embedded: Option<Ipv4Addr> },
    /// The address is one of this host's own (`what`: its interface, or what the host named
    /// it) and no explicit `ip:port` entry opens it.
    HostAddress { addr: IpAddr, port: u16, what: String },
    /// The port is not among the host's allowed ports (`allow_ports`, `port_rules`) and no
    /// `allow_internal` entry lists it for the address.
    PortNotAllowed { host: String, port: u16, allowed: Vec<u16> },
    /// The host matches a `deny_domains` pattern.
    DomainDenied { host: String, pattern: String },
    /// The host matches no `allow_domains` pattern.
    DomainNotAllowed { host: String },
    /// The host is not a syntactically valid name or address.
    BadHost { host: String },
}

impl fmt::Display for Denial {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Address { class, addr, embedded: Some(v4) } => {
                write!(f, "{} address {v4} embedded in {addr}", class.as_str())
            }
            Self::Address { class, addr, embedded: None } => {
                write!(f, "{} address {addr}", class.as_str())?;
                if class.may_be_the_users_network() {
                    // A task that meant a service on the user's own network reads how to open it.
                    let ip = match addr {
                        IpAddr::V6(v6) => format!("[{v6}]"),
                        IpAddr::V4(v4) => v4.to_string(),
                    };
                    write!(
                        f,
                        "; a service on your own network is opened by an \
                         egress.proxy.allow_internal entry (e.g. \"{ip}:PORT\")"
                    )?;
                }
                Ok(())
            }
            Self::HostAddress { addr, port, what } => write!(
                f,
                "host_address: {addr} is an address of this host ({what}); only an explicit \
                 egress.proxy.allow_internal entry \"{}\" opens it",
                SocketAddr::new(*addr, *port)
            ),
            Self::PortNotAllowed { host, port, allowed } => {
                let allowed: Vec<String> = allowed.iter().map(u16::to_string).collect();
                write!(
                    f,
                    "port_not_allowed: port {port} of {host} is not an allowed port (allowed: \
                     {}; see egress.proxy.allow_ports and port_rules)",
                    if allowed.is_empty() { "none".to_owned() } else { allowed.join(", ") }
                )
            }
            Self::DomainDenied { host, pattern } => {
                write!(f, "domain_denied: {host} matches deny pattern {pattern}")
            }
            Self::DomainNotAllowed { host } => {
                write!(f, "domain_not_allowed: {host} matches no allow pattern")
            }
            Self::BadHost { host } => write!(f, "bad_host: {host:?} is not a host name or IP"),
        }
    }
}

/// The special address ranges that are denied unless `allow_internal` lists them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddrClass {
    Unspecified,
    Loopback,
    Private,
    SharedCgnat,
    LinkLocal,
    CloudMetadata,
    Multicast,
    Broadcast,
    Documentation,
    Benchmarking,
    UniqueLocal,
    SiteLocal,
    Nat64,
    Reserved,
}

impl AddrClass {
    /// Whether an address of this class may be a service on the user's own network (a LAN,
    /// a VPN's carrier-grade NAT range, IPv6 unique local), which `allow_internal` can open.
    pub fn may_be_the_users_network(self) -> bool {
        matches!(self, Self::Private | Self::SharedCgnat | Self::UniqueLocal)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Unspecified => "unspecified",
            Self::Loopback => "loopback",
            Self::Private => "private",
            Self::SharedCgnat => "shared_cgnat",
            Self::LinkLocal => "link_local",
            Self::CloudMetadata => "cloud_metadata",
            Self::Multicast => "multicast",
            Self::Broadcast => "broadcast",
            Self::Documentation => "documentation",
            Self::Benchmarking => "benchmarking",
            Self::UniqueLocal => "unique_local",
            Self::SiteLocal => "site_local",
            Self::Nat64 => "nat64",
            Self::Reserved => "reserved",
        }
    }
}

/// Metadata endpoints of the big clouds; some sit outside any private range (Azure's
/// wireserver is a public address), so they are listed one by one.
const METADATA_V4: [Ipv4Addr; 5] = [
    Ipv4Addr::new(169, 254, 169, 254), // AWS, GCP, Azure, OpenStack, DigitalOcean…
    Ipv4Addr::new(169, 254, 170, 2),   // AWS ECS task metadata
    Ipv4Addr::new(100, 100, 100, 200), // Alibaba Cloud
    Ipv4Addr::new(168, 63, 129, 16),   // Azure wireserver
    Ipv4Addr::new(192, 0, 0, 192),     // Oracle Cloud
];
const METADATA_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254); // AWS IMDS

fn in_v4(ip: Ipv4Addr, net: [u8; 4], prefix: u32) -> bool {
    let mask = if prefix == 0 { 0 } else { u32::MAX << (32 - prefix) };
    u32::from(ip) & mask == u32::from(Ipv4Addr::from(net)) & mask
}

fn in_v6(ip: Ipv6Addr, net: Ipv6Addr, prefix: u32) -> bool {
    let mask = if prefix == 0 { 0 } else { u128::MAX << (128 - prefix) };
    u128::from(ip) & mask == u128::from(net) & mask
}

fn classify_v4(ip: Ipv4Addr) -> Option<AddrClass> {
    use AddrClass::*;
    if METADATA_V4.contains(&ip) {
        return Some(CloudMetadata);
    }
    let ranges: [([u8; 4], u32, AddrClass); 17] = [
        ([0, 0, 0, 0], 32, Unspecified),
        ([0, 0, 0, 0], 8, Reserved), // "this network"
        ([10, 0, 0, 0], 8, Private),
        ([100, 64, 0, 0], 10, SharedCgnat),
        ([127, 0, 0, 0], 8, Loopback),
        ([169, 254, 0, 0], 16, LinkLocal),
        ([172, 16, 0, 0], 12, Private),
        ([192, 0, 0, 0], 24, Reserved), // IETF protocol assignments
        ([192, 0, 2, 0], 24, Documentation),
        ([192, 88, 99, 0], 24, Reserved), // deprecated 6to4 relay anycast
        ([192, 168, 0, 0], 16, Private),
        ([198, 18, 0, 0], 15, Benchmarking),
        ([198, 51, 100, 0], 24, Documentation),
        ([203, 0, 113, 0], 24, Documentation),
        ([224, 0, 0, 0], 4, Multicast),
        ([255, 255, 255, 255], 32, Broadcast),
        ([240, 0, 0, 0], 4, Reserved),
    ];
    ranges.iter().find(|(net, prefix, _)| in_v4(ip, *net, *prefix)).map(|(_, _, class)| *class)
}

/// Classifies an address; `Some((class, embedded))` means it is special, with the IPv4
/// address an IPv6 form carried when that is what made it special.
pub fn classify(ip: IpAddr) -> Option<(AddrClass, Option<Ipv4Addr>)> {
    use AddrClass::*;
    let v6 = match ip {
        IpAddr::V4(v4) => return classify_v4(v4).map(|c| (c, None)),
        IpAddr::V6(v6) => v6,
    };
    if let Some(v4) = v6.to_ipv4_mapped() {
        // A mapped address reaches exactly its IPv4 address: judge it as that.
        return classify_v4(v4).map(|c| (c, Some(v4)));
    }
    if v6.is_unspecified() {
        return Some((Unspecified, None));
    }
    if v6.is_loopback() {
        return Some((Loopback, None));
    }
    if v6 == METADATA_V6 {
        return Some((CloudMetadata, None));
    }
    let bits = u128::from(v6);
    let low_v4 = Ipv4Addr::from((bits & 0xffff_ffff) as u32);
    let embedded = |fallback: AddrClass| {
        Some(classify_v4(low_v4).map_or((fallback, None), |c| (c, Some(low_v4))))
    };
    if in_v6(v6, Ipv6Addr::UNSPECIFIED, 96) {
        return embedded(Reserved); // deprecated IPv4-compatible ::a.b.c.d
    }
    if in_v6(v6, Ipv6Addr::new(0x64, 0xff9b, 0, 0, 0, 0, 0, 0), 96) {
        return embedded(Nat64);
    }
    if in_v6(v6, Ipv6Addr::new(0x64, 0xff9b, 1, 0, 0, 0, 0, 0), 48) {
        return Some((Nat64, None)); // local-use NAT64: where the IPv4 sits depends on the site
    }
    if in_v6(v6, Ipv6Addr::new(0x2002, 0, 0, 0, 0, 0, 0, 0), 16) {
        let six_to_four = Ipv4Addr::from(((bits >> 80) & 0xffff_ffff) as u32);
        return classify_v4(six_to_four).map(|c| (c, Some(six_to_four)));
    }
    let ranges: [(Ipv6Addr, u32, AddrClass); 7] = [
        (Ipv6Addr::new(0xfc00, 0, 0, 0, 0, 0, 0, 0), 7, UniqueLocal),
        (Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 0), 10, LinkLocal),
        (Ipv6Addr::new(0xfec0, 0, 0, 0, 0, 0, 0, 0), 10, SiteLocal),
        (Ipv6Addr::new(0xff00, 0, 0, 0, 0, 0, 0, 0), 8, Multicast),
        (Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0), 32, Documentation),
        (Ipv6Addr::new(0x3fff, 0, 0, 0, 0, 0, 0, 0), 20, Documentation),
        (Ipv6Addr::new(0x2001, 0, 0, 0, 0, 0, 0, 0), 23, Reserved), // incl. Teredo, ORCHID
    ];
    if let Some((_, _, class)) = ranges.iter().find(|(net, prefix, _)| in_v6(v6, *net, *prefix)) {
        return Some((*class, None));
    }
    // Only 2000::/3 is global unicast; everything else is reserved or special.
    let global = Ipv6Addr::new(0x2000, 0, 0, 0, 0, 0, 0, 0);
    (!in_v6(v6, global, 3)).then_some((Reserved, None))
}

/// A destination that passed the address check: the only thing the proxy connects to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckedAddr {
    addr: SocketAddr,
    host_address: bool,
}

impl CheckedAddr {
    pub fn addr(self) -> SocketAddr {
        self.addr
    }

    /// One of this host's own addresses, opened by an explicit `ip:port` entry.
    pub fn host_address(self) -> bool {
        self.host_address
    }
}

/// The host part of a request target, normalised.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// Lower-case, without brackets or a trailing dot.
    pub host: String,
    pub port: u16,
    /// Set when the host is an IP literal (no lookup needed).
    pub literal: Option<IpAddr>,
}

impl Target {
    /// Parses a URI host (`example.com`, `10.0.0.1`, `[::1]`, or any other spelling of an
    /// address, see `literal.rs`) with its port.
    pub fn parse(host: &str, port: u16) -> Result<Self, Denial> {
        let lowered = host.trim_end_matches('.').to_ascii_lowercase();
        if let Some(ip) = literal::parse_ip(&lowered) {
            return Ok(Self { host: ip.to_string(), port, literal: Some(ip) });
        }
        // Brackets hold an IPv6 address; a number is an address or nothing.
        let valid = !lowered.starts_with('[')
            && !literal::ends_in_number(&lowered)
            && lowered.len() <= 253
            && lowered.split('.').all(|label| {
                !label.is_empty()
                    && label.len() <= 63
                    && label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            });
        if !valid {
            return Err(Denial::BadHost { host: host.to_owned() });
        }
        Ok(Self { host: lowered, port, literal: None })
    }
}

/// Why a request got no connection.
#[derive(Debug)]
pub enum Refusal {
    /// Policy said no; `resolved` is the address judged, when there was one.
    Denied { denial: Denial, resolved: Option<IpAddr> },
    /// The name did not resolve (or too slowly).
    Unresolved(String),
}

/// The proxy's destination policy.
#[derive(Debug)]
pub struct Policy {
    config: ProxyConfig,
    host: Arc<HostAddrs>,
    /// `egress.mode = "open"`: `allow_domains` decides which names pass. In `ask` and
    /// `allowlist` the allow decision is the approval gate's (`approval.rs`), after this
    /// policy's deny list and address rules.
    open_mode: bool,
}

impl Policy {
    /// `host` is the set of the host's own addresses, kept up to date by the listener.
    pub(crate) fn new(config: ProxyConfig, host: Arc<HostAddrs>, open_mode: bool) -> Self {
        Self { config, host, open_mode }
    }

    /// The name check, done before any lookup.
    pub fn check_host(&self, target: &Target) -> Result<(), Denial> {
        if let Some(pattern) = self.config.deny_domains.iter().find(|p| p.matches(&target.host)) {
            return Err(Denial::DomainDenied {
                host: target.host.clone(),
                pattern: pattern.to_string(),
            });
        }
        if self.open_mode && !self.config.allow_domains.iter().any(|p| p.matches(&target.host)) {
            return Err(Denial::DomainNotAllowed { host: target.host.clone() });
        }
        Ok(())
    }

    /// The check of one address `target` resolved to (or is), in this order: special ranges
    /// are denied unless `allow_internal` names them; the port must be one of the host's
    /// allowed ports or listed by an `allow_internal` entry covering the address; the host's
    /// own addresses need an entry naming exactly that address and port.
    pub fn check_addr(&self, target: &Target, ip: IpAddr) -> Result<CheckedAddr, Denial> {
        // Dial IPv4-mapped addresses as the IPv4 address they stand for.
        let ip = ip.to_canonical();
        let port = target.port;
        // A denied address is denied by whatever name or spelling it was reached.
        if let Some(pattern) = self.config.deny_domains.iter().find(|p| p.denies_ip(ip)) {
            return Err(Denial::DomainDenied {
                host: target.host.clone(),
                pattern: pattern.to_string(),
            });
        }
        let allowed = &self.config.allow_internal;
        if let Some((class, embedded)) = classify(ip) {
            if !allowed.iter().any(|a| a.matches(ip, port)) {
                return Err(Denial::Address { class, addr: ip, embedded });
            }
        }
        let ports = self.config.ports_for(&target.host);
        if !ports.contains(&port)
            && !allowed.iter().any(|a| !a.ports.is_empty() && a.matches(ip, port))
        {
            return Err(Denial::PortNotAllowed {
                host: target.host.clone(),
                port,
                allowed: ports.to_vec(),
            });
        }
        let host_address = match self.host.lookup(ip) {
            Some(what) if !allowed.iter().any(|a| a.opens_exactly(ip, port)) => {
                return Err(Denial::HostAddress { addr: ip, port, what });
            }
            found => found.is_some(),
        };
        Ok(CheckedAddr { addr: SocketAddr::new(ip, port), host_address })
    }

    /// Everything that can be judged without a lookup: the name check, and for a literal
    /// address its address check. The proxy calls it before it asks anyone (the approval gate)
    /// and only then [`Self::resolve`]s: a lookup is itself a message to whoever serves the
    /// name, so a name carrying data (`<data>.attacker.example`) must not be looked up before
    /// the destination is allowed.
    pub fn check_before_lookup(&self, target: &Target) -> Result<(), Refusal> {
        self.check_host(target).map_err(|denial| Refusal::Denied { denial, resolved: None })?;
        if let Some(ip) = target.literal {
            self.check_addr(target, ip)
                .map_err(|denial| Refusal::Denied { denial, resolved: Some(ip) })?;
        }
        Ok(())
    }

    /// Name check, lookup (by the proxy, with a timeout) and address check of every result.
    /// Returns the allowed addresses in resolver order, or why there are none.
    pub async fn resolve(
        &self,
        target: &Target,
        timeout: Duration,
    ) -> Result<Vec<CheckedAddr>, Refusal> {
        self.check_host(target).map_err(|denial| Refusal::Denied { denial, resolved: None })?;
        let addrs: Vec<IpAddr> = match target.literal {
            Some(ip) => vec![ip],
            None => {
                let lookup = tokio::net::lookup_host((target.host.as_str(), target.port));
                match tokio::time::timeout(timeout, lookup).await {
                    Ok(Ok(found)) => found.map(|a| a.ip()).collect(),
                    Ok(Err(err)) => return Err(Refusal::Unresolved(format!("dns: {err}"))),
                    Err(_) => return Err(Refusal::Unresolved("dns: lookup timed out".into())),
                }
            }
        };
        let mut allowed = Vec::new();
        let mut first_denial = None;
        for ip in addrs {
            match self.check_addr(target, ip) {
                Ok(checked) => {
                    if !allowed.contains(&checked) {
                        allowed.push(checked);
                    }
                }
                Err(denial) => {
                    first_denial.get_or_insert((denial, ip));
                }
            }
        }
        match (allowed.is_empty(), first_denial) {
            (false, _) => Ok(allowed),
            (true, Some((denial, ip))) => Err(Refusal::Denied { denial, resolved: Some(ip) }),
            (true, None) => Err(Refusal::Unresolved("dns: no addresses".into())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Cidr, HostPattern, InternalAllow, PortRule};

    /// The code every reason starts with (`loopback address ...` → `loopback`).
    fn code(denial: &Denial) -> String {
        denial.to_string().split([' ', ':']).next().unwrap_or_default().to_owned()
    }

    fn class(ip: &str) -> Option<&'static str> {
        classify(ip.parse().unwrap()).map(|(c, _)| c.as_str())
    }

    /// A refused address that may be the user's own network says how to open it; loopback or
    /// the cloud's metadata address does not (nothing should open those).
    #[test]
    fn a_refused_lan_address_names_allow_internal() {
        let refused = |ip: &str| {
            let addr: IpAddr = ip.parse().unwrap();
            let (class, _) = classify(addr).unwrap();
            Denial::Address { class, addr, embedded: None }.to_string()
        };
        let lan = refused("192.168.1.20");
        assert!(lan.starts_with("private address 192.168.1.20; "), "{lan}");
        assert!(
            lan.contains("egress.proxy.allow_internal entry (e.g. \"192.168.1.20:PORT\")"),
            "{lan}"
        );
        assert!(refused("100.101.102.103").contains("allow_internal"), "a VPN's address");
        assert!(refused("fd12::7").contains("(e.g. \"[fd12::7]:PORT\")"));
        for closed in ["127.0.0.1", "169.254.169.254", "224.0.0.1"] {
            assert!(!refused(closed).contains("allow_internal"), "{closed}");
        }
    }

    #[test]
    fn ipv4_special_ranges_are_classified() {
        let cases = [
            ("0.0.0.0", "unspecified"),
            ("0.1.2.3", "reserved"),
            ("10.9.8.7", "private"),
            ("100.64.0.1", "shared_cgnat"),
            ("100.100.100.200", "cloud_metadata"),
            ("127.0.0.1", "loopback"),
            ("127.255.1.2", "loopback"),
            ("169.254.169.254", "cloud_metadata"),
            ("169.254.170.2", "cloud_metadata"),
            ("169.254.1.1", "link_local"),
            ("168.63.129.16", "cloud_metadata"),
            ("172.16.0.1", "private"),
            ("172.31.255.255", "private"),
            ("192.0.0.192", "cloud_metadata"),
            ("192.0.0.8", "reserved"),
            ("192.0.2.1", "documentation"),
            ("192.168.1.1", "private"),
            ("198.18.0.1", "benchmarking"),
            ("198.51.100.1", "documentation"),
            ("203.0.113.9", "documentation"),
            ("224.0.0.1", "multicast"),
            ("239.255.255.250", "multicast"),
            ("240.0.0.1", "reserved"),
            ("255.255.255.255", "broadcast"),
        ];
        for (ip, want) in cases {
            assert_eq!(class(ip), Some(want), "{ip}");
        }
        for public in ["1.1.1.1", "8.8.8.8", "172.32.0.1", "100.128.0.1", "93.184.216.34"] {
            assert_eq!(class(public), None, "{public}");
        }
    }

    #[test]
    fn ipv6_special_ranges_and_ipv4_disguises_are_classified() {
        let cases = [
            ("::", "unspecified"),
            ("::1", "loopback"),
            ("::ffff:127.0.0.1", "loopback"),
            ("::ffff:169.254.169.254", "cloud_metadata"),
            ("::ffff:10.0.0.1", "private"),
            ("::127.0.0.1", "loopback"),
            ("::8.8.8.8", "reserved"),
            ("64:ff9b::7f00:1", "loopback"),
            ("64:ff9b::808:808", "nat64"),
            ("64:ff9b:1::1", "nat64"),
            ("2002:7f00:1::", "loopback"),
            ("2002:a9fe:a9fe::1", "cloud_metadata"),
            ("fd00:ec2::254", "cloud_metadata"),
            ("fc00::1", "unique_local"),
            ("fd12:3456::1", "unique_local"),
            ("fe80::1", "link_local"),
            ("febf::1", "link_local"),
            ("fec0::1", "site_local"),
            ("ff02::1", "multicast"),
            ("2001:db8::1", "documentation"),
            ("3fff::1", "documentation"),
            ("2001::1", "reserved"),
            ("100::1", "reserved"),
            ("4000::1", "reserved"),
        ];
        for (ip, want) in cases {
            assert_eq!(class(ip), Some(want), "{ip}");
        }
        for public in
            ["2606:4700:4700::1111", "2a00:1450:4001::200e", "::ffff:8.8.8.8", "2002:808:808::"]
        {
            assert_eq!(class(public), None, "{public}");
        }
    }

    #[test]
    fn deny_entries_for_an_address_match_every_spelling_and_resolved_names() {
        let p = |s: &str| HostPattern::try_from(s.to_owned()).unwrap();
        let policy =
            policy(|c| c.deny_domains = vec![p("0x08.8.8.8"), p("[2001:4860:4860::8888]")]);
        for spelling in [
            "8.8.8.8",
            "134744072",
            "0x8080808",
            "010.8.8.8",
            "8.8.2056",
            "[::ffff:8.8.8.8]",
            "[::FFFF:808:808]",
        ] {
            let target = Target::parse(spelling, 443).unwrap();
            assert_eq!(target.literal, Some("8.8.8.8".parse().unwrap()), "{spelling}");
            let err = policy.check_host(&target).unwrap_err();
            assert_eq!(
                err.to_string(),
                "domain_denied: 8.8.8.8 matches deny pattern 8.8.8.8",
                "{spelling}"
            );
        }
        // Forms that route to it, and a name that resolved to it.
        for ip in ["64:ff9b::808:808", "2002:808:808::1", "::8.8.8.8"] {
            let target = Target::parse(ip, 443).unwrap();
            assert!(policy.check_host(&target).is_ok(), "not the same text");
            assert_eq!(
                code(&policy.check_addr(&target, target.literal.unwrap()).unwrap_err()),
                "domain_denied",
                "{ip}"
            );
        }
        let name = Target::parse("dns.example", 443).unwrap();
        assert_eq!(
            code(&policy.check_addr(&name, "8.8.8.8".parse().unwrap()).unwrap_err()),
            "domain_denied"
        );
        assert_eq!(
            code(
                &policy
                    .check_addr(&name, "2001:4860:4860:0:0:0:0:8888".parse().unwrap())
                    .unwrap_err()
            ),
            "domain_denied"
        );
        assert!(policy.check_addr(&name, "8.8.4.4".parse().unwrap()).is_ok());
    }

    /// The address check of `ip` as a literal target at `port`.
    fn check(policy: &Policy, ip: &str, port: u16) -> Result<CheckedAddr, Denial> {
        let target = Target::parse(ip, port).unwrap();
        policy.check_addr(&target, ip.parse().unwrap())
    }

    fn policy(edit: impl FnOnce(&mut ProxyConfig)) -> Policy {
        let mut config = ProxyConfig::default();
        edit(&mut config);
        let host = Arc::new(HostAddrs::default());
        host.refresh().unwrap();
        Policy::new(config, host, true)
    }

    #[test]
    fn address_check_denies_special_unless_allowed_and_canonicalises() {
        let strict = policy(|_| {});
        let err = check(&strict, "::ffff:127.0.0.1", 80).unwrap_err();
        assert_eq!(code(&err), "loopback");
        assert!(err.to_string().contains("127.0.0.1"), "{err}");
        let ok = check(&strict, "::ffff:8.8.8.8", 443).unwrap();
        assert_eq!(ok.addr(), "8.8.8.8:443".parse().unwrap());

        let open = policy(|c| {
            c.allow_internal = vec![InternalAllow {
                cidr: Cidr::try_from("127.0.0.1".to_owned()).unwrap(),
                ports: vec![8080],
            }]
        });
        assert_eq!(
            check(&open, "::ffff:127.0.0.1", 8080).unwrap().addr(),
            "127.0.0.1:8080".parse().unwrap()
        );
        assert!(check(&open, "127.0.0.1", 8081).is_err());
        assert!(check(&open, "127.0.0.2", 8080).is_err());
    }

    #[test]
    fn the_hosts_own_addresses_need_an_exact_ip_port_entry() {
        let entry = |cidr: &str, ports: Vec<u16>| InternalAllow {
            cidr: Cidr::try_from(cidr.to_owned()).unwrap(),
            ports,
        };
        let gateway: IpAddr = "198.51.100.1".parse().unwrap();
        let policy = policy(|c| {
            c.allow_internal = vec![
                entry("198.51.100.0/24", vec![]),
                entry("127.0.0.0/8", vec![]),
                entry("198.51.100.1", vec![9200]),
            ]
        });
        policy.host.set_named("docker gateway", [gateway]);
        // A wide entry allows the block, not the host's address in it.
        assert!(check(&policy, "198.51.100.2", 80).is_ok());
        let err = check(&policy, "198.51.100.1", 80).unwrap_err();
        assert_eq!(code(&err), "host_address");
        assert!(err.to_string().contains("docker gateway") && err.to_string().contains(":80"));
        let err = check(&policy, "::ffff:198.51.100.1", 443).unwrap_err();
        assert_eq!(code(&err), "host_address");
        let err = check(&policy, "127.0.0.1", 443).unwrap_err();
        assert_eq!(code(&err), "host_address");
        // The exact entry opens its port only, and says so.
        let checked = check(&policy, "198.51.100.1", 9200).unwrap();
        assert!(checked.host_address());
        assert!(!check(&policy, "198.51.100.2", 443).unwrap().host_address());
    }

    #[test]
    fn ports_are_limited_by_name_and_opened_by_internal_entries_that_list_them() {
        let p = |s: &str| HostPattern::try_from(s.to_owned()).unwrap();
        let policy = policy(|c| {
            c.allow_internal = vec![
                InternalAllow {
                    cidr: Cidr::try_from("10.0.0.0/8".to_owned()).unwrap(),
                    ports: vec![],
                },
                InternalAllow {
                    cidr: Cidr::try_from("10.9.0.0/16".to_owned()).unwrap(),
                    ports: vec![5432],
                },
            ];
            c.port_rules =
                vec![PortRule { hosts: vec![p("10.1.1.1"), p("*.git.test")], ports: vec![22] }];
        });
        let target = |host: &str, port| Target::parse(host, port).unwrap();
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert!(check(&policy, "10.2.2.2", 443).is_ok());
        let err = check(&policy, "10.2.2.2", 22).unwrap_err();
        assert_eq!(code(&err), "port_not_allowed");
        assert!(
            err.to_string().contains("port 22 of 10.2.2.2") && err.to_string().contains("80, 443"),
            "{err}"
        );
        // A rule replaces the default for its hosts, by name or literal.
        assert!(check(&policy, "10.1.1.1", 22).is_ok());
        assert_eq!(code(&check(&policy, "10.1.1.1", 443).unwrap_err()), "port_not_allowed");
        assert!(policy.check_addr(&target("a.git.test", 22), ip("10.3.3.3")).is_ok());
        assert_eq!(
            code(&policy.check_addr(&target("a.git.test", 80), ip("10.3.3.3")).unwrap_err()),
            "port_not_allowed"
        );
        // An internal entry listing a port opens it for the addresses it covers only.
        assert!(check(&policy, "10.9.1.1", 5432).is_ok());
        assert_eq!(code(&check(&policy, "10.8.1.1", 5432).unwrap_err()), "port_not_allowed");
        // The address checks come first: a loopback address is refused as loopback.
        assert_eq!(code(&check(&policy, "127.0.0.1", 22).unwrap_err()), "loopback");
    }

    #[test]
    fn host_check_applies_deny_before_allow() {
        let p = |s: &str| HostPattern::try_from(s.to_owned()).unwrap();
        let policy = policy(|c| {
            c.allow_domains = vec![p("*.example.com")];
            c.deny_domains = vec![p("bad.example.com")];
        });
        let target = |h: &str| Target::parse(h, 443).unwrap();
        assert!(policy.check_host(&target("www.example.com")).is_ok());
        assert_eq!(
            code(&policy.check_host(&target("bad.example.com")).unwrap_err()),
            "domain_denied"
        );
        assert_eq!(
            code(&policy.check_host(&target("example.org")).unwrap_err()),
            "domain_not_allowed"
        );
        assert_eq!(code(&policy.check_host(&target("8.8.8.8")).unwrap_err()), "domain_not_allowed");
    }

    #[test]
    fn targets_parse_literals_and_reject_garbage() {
        let t = Target::parse("[::FFFF:127.0.0.1]", 80).unwrap();
        assert_eq!(t.literal, Some("127.0.0.1".parse().unwrap()));
        assert_eq!(t.host, "127.0.0.1");
        let t = Target::parse("0x7F.1.", 80).unwrap();
        assert_eq!((t.host.as_str(), t.literal), ("127.0.0.1", Some("127.0.0.1".parse().unwrap())));
        let t = Target::parse("WWW.Example.com.", 80).unwrap();
        assert_eq!((t.host.as_str(), t.literal), ("www.example.com", None));
        for bad in
            ["", "a b", "exa$mple.com", "..", "[::1", "[127.0.0.1]", "1.2.3.4.5", "08", "a.0x1f"]
        {
            assert_eq!(code(&Target::parse(bad, 80).unwrap_err()), "bad_host", "{bad:?}");
        }
    }

    #[tokio::test]
    async fn names_are_resolved_by_the_proxy_and_each_address_checked() {
        let strict = policy(|_| {});
        let target = Target::parse("localhost", 80).unwrap();
        match strict.resolve(&target, Duration::from_secs(5)).await {
            Err(Refusal::Denied { denial, resolved: Some(ip) }) => {
                assert_eq!(code(&denial), "loopback");
                assert!(ip.is_loopback());
            }
            other => panic!("localhost must be denied as loopback, got {other:?}"),
        }
        let target = Target::parse("no-such-host.invalid", 80).unwrap();
        assert!(matches!(
            strict.resolve(&target, Duration::from_secs(5)).await,
            Err(Refusal::Unresolved(_))
        ));
    }
}
