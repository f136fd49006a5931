//! The egress policy's public parsers: `HostPattern` and `Cidr` (as the config reads them) and
//! `classify` (the address check). Properties: no panic; a parsed pattern or CIDR prints as
//! text that parses back to the same value; an exact host pattern matches its own host; a
//! CIDR contains its network address; and an IPv4 address that is special stays special in
//! each IPv6 disguise (mapped, compatible, NAT64, 6to4).
#![no_main]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use libfuzzer_sys::fuzz_target;
use nexbot_egress::{classify, Cidr, HostPattern};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data).into_owned();
    if let Ok(pattern) = HostPattern::try_from(text.clone()) {
        let shown = pattern.to_string();
        let again = HostPattern::try_from(shown.clone()).expect("a printed pattern parses");
        assert_eq!(again, pattern, "{text:?} printed as {shown:?}");
        if let Some(parent) = shown.strip_prefix("*.") {
            assert!(pattern.matches(&format!("a.{parent}")));
            assert!(!pattern.matches(parent));
        } else {
            assert!(pattern.matches(&shown), "{shown:?} does not match itself");
        }
    }
    if let Ok(cidr) = Cidr::try_from(text.clone()) {
        let shown = String::from(cidr);
        assert_eq!(Cidr::try_from(shown.clone()), Ok(cidr), "{text:?} printed as {shown:?}");
        assert!(cidr.0.contains(&cidr.0.network()));
    }
    if let Ok(ip) = text.trim().parse::<IpAddr>() {
        let _ = classify(ip);
    }
    if data.len() >= 16 {
        let mut octets = [0u8; 16];
        octets.copy_from_slice(&data[..16]);
        let _ = classify(IpAddr::V6(Ipv6Addr::from(octets)));
    }
    if data.len() >= 4 {
        let v4 = Ipv4Addr::new(data[0], data[1], data[2], data[3]);
        if classify(IpAddr::V4(v4)).is_some() {
            let bits = u32::from(v4);
            let disguises = [
                v4.to_ipv6_mapped(),
                v4.to_ipv6_compatible(),
                Ipv6Addr::from((0x64_ff9b_u128 << 96) | u128::from(bits)),
                Ipv6Addr::from((0x2002_u128 << 112) | (u128::from(bits) << 80)),
            ];
            for v6 in disguises {
                assert!(classify(IpAddr::V6(v6)).is_some(), "{v4} passes as {v6}");
            }
        }
    }
});
