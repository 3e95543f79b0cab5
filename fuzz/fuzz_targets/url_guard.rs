//! Arbitrary text as an upstream URL through the strict URL guard.
//!
//! Must never panic; a URL it admits is http or https without userinfo, and an IP literal it
//! admits is none of the addresses a server must not be sent to, judged here independently of
//! the guard's own table (loopback, private, link-local, shared, documentation, multicast,
//! unspecified, unique-local, and their IPv4-mapped and 6to4/NAT64 forms left to the guard's
//! canonical form).

#![no_main]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use larkgate_upstream::UrlGuard;
use larkgate_upstream::guard::{Target, canonical};
use libfuzzer_sys::fuzz_target;

fn forbidden_v4(ip: Ipv4Addr) -> bool {
    let [a, b, ..] = ip.octets();
    ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_unspecified()
        || ip.is_broadcast()
        || ip.is_multicast()
        || ip.is_documentation()
        || a == 0
        || (a == 100 && (64..128).contains(&b))
}

fn forbidden_v6(ip: Ipv6Addr) -> bool {
    let first = ip.segments()[0];
    ip.is_loopback()
        || ip.is_unspecified()
        || ip.is_multicast()
        || (first & 0xfe00) == 0xfc00
        || (first & 0xffc0) == 0xfe80
        || ip.to_ipv4_mapped().is_some_and(forbidden_v4)
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let guard = UrlGuard::strict();
    let Ok((url, target)) = guard.parse(text) else {
        return;
    };
    assert!(matches!(url.scheme(), "http" | "https"), "{text:?}");
    assert!(
        url.username().is_empty() && url.password().is_none(),
        "{text:?}"
    );
    if let Target::Ip(ip) = target {
        let forbidden = match canonical(ip) {
            IpAddr::V4(v4) => forbidden_v4(v4),
            IpAddr::V6(v6) => forbidden_v6(v6),
        };
        assert!(!forbidden, "{text:?} admitted {ip}");
    }
});
