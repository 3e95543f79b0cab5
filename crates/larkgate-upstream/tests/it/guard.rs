//! The URL guard against hostile URLs and hostile DNS answers.

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};

use larkgate_upstream::guard::{GuardedResolver, Target, is_public};
use larkgate_upstream::{Allowed, GuardError, Resolve, UrlGuard};

/// Every special-purpose range of the issue, by a member, with the range the refusal names.
#[test]
fn special_purpose_addresses_are_not_public() {
    let table = [
        ("0.1.2.3", "0.0.0.0/8"),
        ("10.0.0.1", "10.0.0.0/8"),
        ("100.64.0.1", "100.64.0.0/10"),
        ("100.127.255.254", "100.64.0.0/10"),
        ("127.0.0.1", "127.0.0.0/8"),
        ("127.255.255.254", "127.0.0.0/8"),
        ("169.254.169.254", "169.254.0.0/16"),
        ("172.16.0.1", "172.16.0.0/12"),
        ("172.31.255.255", "172.16.0.0/12"),
        ("192.0.0.8", "192.0.0.0/24"),
        ("192.0.2.1", "192.0.2.0/24"),
        ("192.88.99.1", "192.88.99.0/24"),
        ("192.168.1.1", "192.168.0.0/16"),
        ("198.18.0.1", "198.18.0.0/15"),
        ("198.19.255.255", "198.18.0.0/15"),
        ("198.51.100.7", "198.51.100.0/24"),
        ("203.0.113.9", "203.0.113.0/24"),
        ("224.0.0.251", "224.0.0.0/4"),
        ("239.255.255.250", "224.0.0.0/4"),
        ("240.0.0.1", "240.0.0.0/4"),
        ("255.255.255.255", "240.0.0.0/4"),
        ("::", "::, unspecified"),
        ("::1", "::1, loopback"),
        ("::ffff:127.0.0.1", "127.0.0.0/8"),
        ("::ffff:169.254.169.254", "169.254.0.0/16"),
        ("::ffff:10.1.2.3", "10.0.0.0/8"),
        ("64:ff9b::a9fe:a9fe", "NAT64"),
        ("64:ff9b:1::1", "NAT64"),
        ("2001::1", "2001::/23"),
        ("2001:0:4136:e378:8000:63bf:3fff:fdd2", "2001::/23"),
        ("2001:db8::1", "2001:db8::/32"),
        ("2002:7f00:1::1", "2002::/16"),
        ("fc00::1", "fc00::/7"),
        ("fd12:3456::1", "fc00::/7"),
        ("fe80::1", "fe80::/10"),
        ("ff02::1", "ff00::/8"),
        ("100::1", "100::/64"),
        ("::127.0.0.1", "not global unicast"),
    ];
    for (ip, range) in table {
        let parsed: IpAddr = ip.parse().unwrap();
        match is_public(parsed) {
            Err(name) => assert!(name.contains(range), "{ip}: {name} should name {range}"),
            Ok(()) => panic!("{ip} must not be public"),
        }
    }
    for ip in [
        "1.1.1.1",
        "8.8.8.8",
        "100.63.255.255",
        "100.128.0.0",
        "172.15.255.255",
        "172.32.0.0",
        "192.0.1.1",
        "198.17.255.255",
        "198.20.0.0",
        "223.255.255.255",
        "::ffff:8.8.8.8",
        "2606:4700:4700::1111",
        "2a00:1450:4001::1",
    ] {
        assert_eq!(is_public(ip.parse().unwrap()), Ok(()), "{ip} is public");
    }
}

/// Hostile URLs, refused by their parsed form whatever their spelling.
#[test]
fn hostile_urls_are_refused() {
    let guard = UrlGuard::strict();
    let table: &[(&str, &str)] = &[
        ("http://127.0.0.1/mcp", "127.0.0.0/8"),
        ("http://localhost.:8080@127.0.0.1/", "credentials"),
        ("http://user:pass@example.com/mcp", "credentials"),
        ("http://user@example.com/mcp", "credentials"),
        ("http://2130706433/", "127.0.0.0/8"),
        ("http://0x7f.0.0.1/", "127.0.0.0/8"),
        ("http://0177.0.0.1/", "127.0.0.0/8"),
        ("http://127.1/", "127.0.0.0/8"),
        ("http://0/", "0.0.0.0/8"),
        ("http://[::1]:8940/mcp", "::1"),
        ("http://[::ffff:7f00:1]/", "127.0.0.0/8"),
        (
            "http://[::ffff:169.254.169.254]/latest/meta-data",
            "169.254.0.0/16",
        ),
        ("http://169.254.169.254/latest/meta-data", "169.254.0.0/16"),
        ("http://[fe80::1%25eth0]/", "not a usable URL"),
        ("http://[fd00::1]/", "fc00::/7"),
        ("http://10.0.0.5:9000/mcp", "10.0.0.0/8"),
        ("http://192.168.1.1/", "192.168.0.0/16"),
        ("file:///etc/passwd", "only http and https"),
        ("gopher://example.com/", "only http and https"),
        ("ftp://example.com/", "only http and https"),
        ("javascript:alert(1)", "only http and https"),
        ("not a url", "not a usable URL"),
        ("https://", "not a usable URL"),
    ];
    for (url, expected) in table {
        let error = guard
            .parse(url)
            .expect_err(&format!("{url} must be refused"))
            .to_string();
        assert!(
            expected.split('|').any(|e| error.contains(e)),
            "{url}: {error} should mention {expected}"
        );
        assert!(
            !error.contains("pass@"),
            "a refusal never repeats a password: {error}"
        );
    }
    // Public literals and names pass the URL check (names are vetted when resolved).
    assert_eq!(
        guard.parse("https://1.1.1.1/mcp").unwrap().1,
        Target::Ip("1.1.1.1".parse().unwrap())
    );
    assert_eq!(
        guard.parse("https://MCP.Example.COM./mcp").unwrap().1,
        Target::Name("mcp.example.com".into())
    );
}

#[test]
fn an_allow_list_admits_exactly_its_networks_and_hosts() {
    let guard = UrlGuard::strict().allow(
        ["10.0.0.0/8", "fd00::/8", "192.168.1.7"]
            .iter()
            .map(|a| a.parse::<Allowed>().unwrap()),
    );
    for url in [
        "http://10.1.2.3:9000/mcp",
        "http://[fd00::1]/mcp",
        "http://192.168.1.7/mcp",
        "http://[::ffff:10.0.0.1]/mcp",
    ] {
        assert!(guard.parse(url).is_ok(), "{url} is allowed");
    }
    for url in [
        "http://192.168.1.8/",
        "http://127.0.0.1/",
        "http://169.254.169.254/",
    ] {
        assert!(guard.parse(url).is_err(), "{url} is not allowed");
    }
    for bad in ["10.0.0.0/33", "http://x", "", "a b"] {
        assert!(bad.parse::<Allowed>().is_err(), "{bad:?} is not an entry");
    }
    assert_eq!(
        "MCP.Internal.".parse::<Allowed>().unwrap(),
        Allowed::Host("mcp.internal".into())
    );
}

#[test]
fn larkgate_s_own_address_is_refused_even_when_allowed() {
    let own: SocketAddr = "127.0.0.1:8940".parse().unwrap();
    let guard = UrlGuard::strict()
        .allow(["127.0.0.0/8".parse::<Allowed>().unwrap()])
        .refuse_own(own);
    assert!(guard.parse("http://127.0.0.1:9000/mcp").is_ok());
    for url in [
        "http://127.0.0.1:8940/mcp",
        "http://127.0.0.2:8940/mcp",
        "http://[::ffff:127.0.0.1]:8940/mcp",
    ] {
        let error = guard.parse(url).unwrap_err();
        assert!(matches!(error, GuardError::Own { .. }), "{url}: {error}");
    }
    let all = UrlGuard::allow_any_for_tests().refuse_own("0.0.0.0:8940".parse().unwrap());
    assert!(matches!(
        all.parse("http://10.9.9.9:8940/").unwrap_err(),
        GuardError::Own { .. }
    ));
}

/// A resolver that answers from a script of answers, one per lookup.
struct Staged(Mutex<Vec<Vec<IpAddr>>>);

impl Resolve for Staged {
    fn lookup(
        &self,
        _host: &str,
    ) -> std::pin::Pin<
        Box<dyn std::future::Future<Output = std::io::Result<Vec<IpAddr>>> + Send + '_>,
    > {
        let next = self.0.lock().unwrap().remove(0);
        Box::pin(async move { Ok(next) })
    }
}

fn ips(list: &[&str]) -> Vec<IpAddr> {
    list.iter().map(|s| s.parse().unwrap()).collect()
}

#[tokio::test]
async fn every_dns_answer_is_vetted_and_a_rebinding_name_is_refused() {
    let staged = Staged(Mutex::new(vec![
        ips(&["93.184.215.14"]),
        ips(&["93.184.215.14", "10.0.0.1"]),
        ips(&["169.254.169.254"]),
        ips(&[]),
    ]));
    let resolver = GuardedResolver::new(Arc::new(UrlGuard::strict()), Arc::new(staged), 443);
    let first = resolver.resolve("rebind.example").await.unwrap();
    assert_eq!(first, vec!["93.184.215.14:443".parse().unwrap()]);
    // One private answer among public ones refuses the name.
    let mixed = resolver.resolve("rebind.example").await.unwrap_err();
    assert!(mixed.to_string().contains("10.0.0.0/8"), "{mixed}");
    // The second look at a name cannot slip a private address through.
    let rebound = resolver.resolve("rebind.example").await.unwrap_err();
    assert!(rebound.to_string().contains("169.254.0.0/16"), "{rebound}");
    let empty = resolver.resolve("rebind.example").await.unwrap_err();
    assert!(matches!(empty, GuardError::Resolve { .. }), "{empty}");
}

#[tokio::test]
async fn an_allowed_host_name_admits_its_private_answers() {
    let staged = Staged(Mutex::new(vec![ips(&["10.2.3.4"]), ips(&["10.2.3.4"])]));
    let guard = UrlGuard::strict().allow(["mcp.internal".parse::<Allowed>().unwrap()]);
    let resolver = GuardedResolver::new(Arc::new(guard), Arc::new(staged), 80);
    assert!(resolver.resolve("MCP.internal").await.is_ok());
    assert!(resolver.resolve("other.internal").await.is_err());
}

#[tokio::test]
async fn localhost_by_name_is_refused_by_its_answers() {
    let resolver = GuardedResolver::new(
        Arc::new(UrlGuard::strict()),
        Arc::new(larkgate_upstream::SystemResolver),
        80,
    );
    let error = resolver.resolve("localhost").await.unwrap_err();
    assert!(matches!(error, GuardError::NotPublic { .. }), "{error}");
}
