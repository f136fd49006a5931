//! IP literals in every spelling a client may send, so that what the proxy checks (against
//! the deny list, the special ranges, the host's own addresses) is the address it dials.
//!
//! A host the proxy did not read as an address would go to the resolver, and the C library
//! resolves `2130706433`, `0x7f.1` and `0177.0.0.1` (the `inet_aton` forms: 1–4 parts, each
//! decimal, `0x` hex or `0`-prefixed octal) to `127.0.0.1` — past a deny entry for
//! `127.0.0.1` that only compared text. So these forms are parsed here the way `inet_aton`
//! reads them, IPv6 literals (brackets, upper case, zero padding, embedded IPv4) by the
//! standard library, and the result is judged as the canonical address (IPv4-mapped IPv6 as
//! IPv4). A host that ends in a number but is no address (`1.2.3.4.5`, `0x1g`) is refused
//! rather than handed to the resolver.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The address `text` spells (brackets optional for IPv6), canonical: IPv4-mapped IPv6 comes
/// back as IPv4. `None` when it is not an address.
pub(crate) fn parse_ip(text: &str) -> Option<IpAddr> {
    if let Some(inner) = text.strip_prefix('[').and_then(|t| t.strip_suffix(']')) {
        return inner.parse::<Ipv6Addr>().ok().map(|v6| IpAddr::V6(v6).to_canonical());
    }
    if let Some(v4) = parse_ipv4_any_form(text) {
        return Some(IpAddr::V4(v4));
    }
    text.parse::<Ipv6Addr>().ok().map(|v6| IpAddr::V6(v6).to_canonical())
}

/// Whether the last dot-separated label is a number (decimal, or `0x` hex): such a host is
/// an address or nothing (the WHATWG URL rule), never a name to look up.
pub(crate) fn ends_in_number(text: &str) -> bool {
    let last = text.rsplit('.').next().unwrap_or_default();
    if !last.is_empty() && last.bytes().all(|b| b.is_ascii_digit()) {
        return true;
    }
    last.strip_prefix("0x")
        .or_else(|| last.strip_prefix("0X"))
        .is_some_and(|hex| hex.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// `inet_aton`'s reading: `a` (32 bits), `a.b` (8.24), `a.b.c` (8.8.16), `a.b.c.d`; each part
/// decimal, `0x`-prefixed hex or `0`-prefixed octal.
fn parse_ipv4_any_form(text: &str) -> Option<Ipv4Addr> {
    let parts: Vec<u64> = text.split('.').map(parse_part).collect::<Option<_>>()?;
    let (last, leading) = parts.split_last()?;
    if parts.len() > 4 || leading.iter().any(|&part| part > 255) {
        return None;
    }
    let room = 8 * (4 - leading.len() as u32);
    if *last >= 1u64 << room {
        return None;
    }
    let high = leading
        .iter()
        .enumerate()
        .fold(0u32, |acc, (i, &part)| acc | ((part as u32) << (24 - 8 * i as u32)));
    Some(Ipv4Addr::from(high | *last as u32))
}

fn parse_part(part: &str) -> Option<u64> {
    let (digits, radix) =
        if let Some(hex) = part.strip_prefix("0x").or_else(|| part.strip_prefix("0X")) {
            if hex.is_empty() {
                return Some(0); // `0x` alone is 0 to inet_aton
            }
            (hex, 16)
        } else if part.len() > 1 && part.starts_with('0') {
            (&part[1..], 8)
        } else {
            (part, 10)
        };
    // Every character a digit of the radix (`from_str_radix` alone would take a sign).
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    match digits.trim_start_matches('0') {
        "" => Some(0),
        significant => u64::from_str_radix(significant, radix).ok(), // None on overflow
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_spelling_of_an_address_reads_as_that_address() {
        let loopback = [
            "127.0.0.1",
            "2130706433",
            "0x7f000001",
            "0X7F000001",
            "0x7f.0.0.1",
            "0x7F.0x0.0x0.0x1",
            "0x7f.1",
            "0177.0.0.1",
            "0177.0000.0000.0001",
            "00000177.0.0.01",
            "017700000001",
            "127.1",
            "127.0.1",
            "[::ffff:127.0.0.1]",
            "[::FFFF:7F00:1]",
            "[0:0:0:0:0:ffff:7f00:1]",
            "[0000:0000:0000:0000:0000:ffff:7f00:0001]",
            "::ffff:127.0.0.1",
        ];
        for spelling in loopback {
            assert_eq!(parse_ip(spelling), Some("127.0.0.1".parse().unwrap()), "{spelling}");
        }
        assert_eq!(parse_ip("[::1]"), Some("::1".parse().unwrap()));
        assert_eq!(parse_ip("0"), Some("0.0.0.0".parse().unwrap()));
        assert_eq!(parse_ip("0x"), Some("0.0.0.0".parse().unwrap()));
        assert_eq!(
            parse_ip("10.0.0.010"),
            Some("10.0.0.8".parse().unwrap()),
            "octal, as inet_aton"
        );
    }

    #[test]
    fn what_is_not_an_address_is_not_read_as_one() {
        for text in [
            "",
            "1.2.3.4.5",
            "256.0.0.1",
            "1.2.3.256",
            "4294967296",
            "1.16777216",
            "0x1g",
            "08",
            "1..2",
            "+1.2.3.4",
            "1.2.3.-4",
            "example.com",
            "[127.0.0.1]",
            "[::1",
            "::ffff:0x7f.1",
            "99999999999999999999999999",
        ] {
            assert_eq!(parse_ip(text), None, "{text:?}");
        }
        for numeric in ["1.2.3.4.5", "example.123", "a.0x1f", "0x", "4294967296"] {
            assert!(ends_in_number(numeric), "{numeric}");
        }
        for name in ["example.com", "1e100.net", "0x1g", "123.example"] {
            assert!(!ends_in_number(name), "{name}");
        }
    }
}
