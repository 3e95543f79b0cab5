//! Whom a request is for and whom it is from: the `Host` and `Origin` checks (DNS-rebinding
//! protection) and the client's address behind trusted reverse proxies.
//!
//! ## Threat model
//!
//! - **DNS rebinding.** A web page on `evil.example` whose name the attacker re-points at this
//!   machine can make a browser send requests here, with `Host: evil.example`. So `/mcp` answers
//!   only a `Host` it knows: `localhost`, any IP literal (an address cannot be re-pointed: the
//!   attack needs a name the attacker controls), the host of `public_url`, the names in
//!   `allowed_hosts`, and, when bound to every interface, this machine's own host name.
//! - **Browsers.** A request with an `Origin` header comes from a web page; it is refused unless
//!   that origin is listed in `allowed_origins` (none by default). Origins are compared as
//!   scheme, host and port (the scheme's default port when none is written).
//! - **Forged forwarding headers.** `X-Forwarded-For` and `X-Forwarded-Host` are honoured
//!   only on connections from an address in `trusted_proxies`; from anyone else they are ignored, so a client cannot choose the
//!   address it is logged under or the `Host` it is checked against. Behind trusted proxies the
//!   client is the right-most address in `X-Forwarded-For` that is not itself a trusted proxy.
//! - Refusals echo the offending value only shortened ([`shown`]), in JSON-RPC.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderMap, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use ipnet::IpNet;

use super::error::EdgeError;

/// The address a request came from: the peer, or the client behind a trusted proxy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClientAddress(pub IpAddr);

/// What `/mcp` answers to and whom it believes about forwarding.
#[derive(Clone, Debug, Default)]
pub struct AddressPolicy {
    /// Host names (lower case), each with the port it must come with, if any.
    hosts: Vec<(String, Option<u16>)>,
    /// Origins, normalised (`scheme://host:port`).
    origins: Vec<String>,
    /// Peers whose forwarding headers are believed.
    proxies: Vec<IpNet>,
}

impl AddressPolicy {
    /// A policy answering `localhost`, IP literals and `hosts` (each `name` or `name:port`),
    /// admitting the browser `origins` listed and believing `proxies`. Errors name the entry.
    pub fn new(hosts: &[String], origins: &[String], proxies: &[IpNet]) -> Result<Self, String> {
        let mut policy = AddressPolicy {
            hosts: vec![("localhost".to_owned(), None)],
            origins: Vec::new(),
            proxies: proxies.to_vec(),
        };
        for host in hosts {
            let parsed = split_authority(host)
                .filter(|(name, _)| !name.is_empty() && !name.contains(['/', '@', ' ']))
                .ok_or_else(|| {
                    format!("{host:?} is not a host name: write a name, or name:port, without a scheme or path")
                })?;
            policy.hosts.push(parsed);
        }
        for origin in origins {
            let normalised = normalise_origin(origin).ok_or_else(|| {
                format!(
                    "{origin:?} is not an origin: write scheme://host or scheme://host:port, \
                     for example \"https://console.example.com\""
                )
            })?;
            policy.origins.push(normalised);
        }
        Ok(policy)
    }

    /// Whether a request whose (effective) `Host` is `host` is for this server.
    pub fn host_is_allowed(&self, host: &str) -> bool {
        let Some((name, port)) = split_authority(host) else {
            return false;
        };
        if name.parse::<IpAddr>().is_ok() {
            return true;
        }
        self.hosts.iter().any(|(allowed, allowed_port)| {
            *allowed == name && allowed_port.is_none_or(|p| port == Some(p))
        })
    }

    /// Whether a browser page of `origin` may call.
    pub fn origin_is_allowed(&self, origin: &str) -> bool {
        normalise_origin(origin).is_some_and(|origin| self.origins.contains(&origin))
    }

    /// Whether `peer` is a trusted proxy.
    fn trusts(&self, peer: IpAddr) -> bool {
        self.proxies
            .iter()
            .any(|net| net.contains(&larkgate_upstream::guard::canonical(peer)))
    }

    /// The client's address and the `Host` to check, from the peer and the headers.
    pub fn resolve<'h>(&self, peer: IpAddr, headers: &'h HeaderMap) -> (IpAddr, Option<&'h str>) {
        let host = headers.get(header::HOST).and_then(|v| v.to_str().ok());
        if !self.trusts(peer) {
            return (peer, host);
        }
        let forwarded_host = headers
            .get("x-forwarded-host")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(',').next_back())
            .map(str::trim);
        let mut client = peer;
        let chain = headers
            .get_all("x-forwarded-for")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .map(str::trim)
            .collect::<Vec<_>>();
        for hop in chain.iter().rev() {
            let Ok(address) = hop.parse::<IpAddr>() else {
                // Unreadable: believe nothing further left.
                break;
            };
            client = address;
            if !self.trusts(address) {
                break;
            }
        }
        (client, forwarded_host.or(host))
    }
}

/// `name[:port]` or `[v6][:port]`, the name in lower case.
fn split_authority(authority: &str) -> Option<(String, Option<u16>)> {
    let authority = authority.trim();
    if let Some(rest) = authority.strip_prefix('[') {
        let (v6, after) = rest.split_once(']')?;
        v6.parse::<std::net::Ipv6Addr>().ok()?;
        let port = match after {
            "" => None,
            _ => Some(after.strip_prefix(':')?.parse().ok()?),
        };
        return Some((v6.to_ascii_lowercase(), port));
    }
    match authority.rsplit_once(':') {
        Some((name, port)) => Some((name.to_ascii_lowercase(), Some(port.parse().ok()?))),
        None => Some((authority.to_ascii_lowercase(), None)),
    }
}

/// `scheme://host:port` with the scheme's default port written out, or `None`.
fn normalise_origin(origin: &str) -> Option<String> {
    let url = url::Url::parse(origin.trim()).ok()?;
    if !matches!(url.scheme(), "http" | "https")
        || url.path() != "/"
        || url.query().is_some()
        || url.fragment().is_some()
        || !url.username().is_empty()
        || url.password().is_some()
        || origin.trim().trim_end_matches('/').matches('/').count() != 2
    {
        return None;
    }
    Some(format!(
        "{}://{}:{}",
        url.scheme(),
        url.host_str()?,
        url.port_or_known_default()?
    ))
}

/// At most 100 characters of a value a client sent, for a refusal that names it.
pub fn shown(value: &str) -> String {
    let mut shown: String = value
        .chars()
        .filter(|c| !c.is_control())
        .take(100)
        .collect();
    if value.chars().count() > 100 {
        shown.push('…');
    }
    shown
}

/// The middleware: refuses an unknown `Host` or a browser `Origin` not listed, and hands the
/// handlers the [`ClientAddress`].
pub async fn check_address(
    State(policy): State<Arc<AddressPolicy>>,
    mut request: Request,
    next: Next,
) -> Response {
    let peer = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map_or(IpAddr::from([127, 0, 0, 1]), |info| info.0.ip());
    let (client, host) = policy.resolve(peer, request.headers());
    if let Some(exchange) = request
        .extensions()
        .get::<larkgate_platform::observe::Exchange>()
    {
        exchange.client(client);
    }
    let host_allowed = host.is_some_and(|host| policy.host_is_allowed(host));
    if !host_allowed {
        let host = shown(host.unwrap_or(""));
        tracing::warn!(%client, host, "refused a request for an unknown Host (possible DNS rebinding)");
        return EdgeError::UnknownHost(host).into_response();
    }
    if let Some(origin) = request.headers().get(header::ORIGIN) {
        let origin = origin.to_str().unwrap_or("");
        if !policy.origin_is_allowed(origin) {
            let origin = shown(origin);
            tracing::warn!(%client, origin, "refused a request from a browser origin not allowed");
            return EdgeError::BrowserOrigin(origin).into_response();
        }
    }
    request.extensions_mut().insert(ClientAddress(client));
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> AddressPolicy {
        AddressPolicy::new(
            &["mcp.example.com".to_owned(), "gw.internal:8940".to_owned()],
            &["https://console.example.com".to_owned()],
            &["10.0.0.0/8".parse().unwrap()],
        )
        .unwrap()
    }

    #[test]
    fn hosts_answered_and_refused() {
        let policy = policy();
        let cases = [
            ("localhost", true),
            ("localhost:8940", true),
            ("LOCALHOST:8940", true),
            ("127.0.0.1:8940", true),
            ("192.0.2.7:8940", true),
            ("[::1]:8940", true),
            ("[::1]", true),
            ("mcp.example.com", true),
            ("MCP.Example.COM:443", true),
            ("gw.internal:8940", true),
            // Hostile or unknown.
            ("gw.internal:9999", false),
            ("gw.internal", false),
            ("evil.example", false),
            ("mcp.example.com.evil.example", false),
            ("evil.example#@mcp.example.com", false),
            ("localhost.evil.example", false),
            ("127.0.0.1.nip.io", false),
            ("[::1", false),
            ("[evil]:80", false),
            ("localhost:notaport", false),
            ("", false),
        ];
        for (host, allowed) in cases {
            assert_eq!(policy.host_is_allowed(host), allowed, "{host:?}");
        }
    }

    #[test]
    fn origins_admitted_and_refused() {
        let policy = policy();
        let cases = [
            ("https://console.example.com", true),
            ("https://console.example.com:443", true),
            ("HTTPS://Console.Example.com", true),
            ("http://console.example.com", false),
            ("https://console.example.com:8443", false),
            ("https://console.example.com.evil.example", false),
            ("https://evil.example", false),
            ("null", false),
            ("", false),
            ("https://user@console.example.com", false),
            ("https://console.example.com/path", false),
            ("file://", false),
        ];
        for (origin, allowed) in cases {
            assert_eq!(policy.origin_is_allowed(origin), allowed, "{origin:?}");
        }
        let none = AddressPolicy::new(&[], &[], &[]).unwrap();
        assert!(!none.origin_is_allowed("http://localhost:8940"));
        for bad in [
            "console.example.com",
            "https://x.example/path",
            "ftp://x.example",
        ] {
            let error = AddressPolicy::new(&[], &[bad.to_owned()], &[]).unwrap_err();
            assert!(error.contains("not an origin"), "{bad}: {error}");
        }
        for bad in [
            "https://x.example",
            "x.example/mcp",
            "a@b",
            "x:notaport",
            "",
        ] {
            let error = AddressPolicy::new(&[bad.to_owned()], &[], &[]).unwrap_err();
            assert!(error.contains("not a host name"), "{bad}: {error}");
        }
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, value.parse().unwrap());
        }
        map
    }

    #[test]
    fn forwarding_headers_are_believed_only_from_trusted_proxies() {
        let policy = policy();
        let forged = headers(&[
            ("host", "127.0.0.1:8940"),
            ("x-forwarded-for", "203.0.113.9"),
            ("x-forwarded-host", "evil.example"),
        ]);
        let stranger: IpAddr = "198.51.100.1".parse().unwrap();
        assert_eq!(
            policy.resolve(stranger, &forged),
            (stranger, Some("127.0.0.1:8940")),
            "an untrusted peer's forwarding headers are ignored"
        );
        let proxy: IpAddr = "10.1.2.3".parse().unwrap();
        assert_eq!(
            policy.resolve(proxy, &forged),
            ("203.0.113.9".parse().unwrap(), Some("evil.example")),
            "a trusted proxy's are believed (and the Host it names is then checked)"
        );
        // The client prepended an address of its choice; the proxies appended the real ones.
        let chain = headers(&[
            ("host", "gw"),
            ("x-forwarded-for", "1.1.1.1, 203.0.113.9"),
            ("x-forwarded-for", "10.9.9.9"),
        ]);
        assert_eq!(
            policy.resolve(proxy, &chain).0,
            "203.0.113.9".parse::<IpAddr>().unwrap()
        );
        let junk = headers(&[("x-forwarded-for", "1.1.1.1, not-an-ip")]);
        assert_eq!(policy.resolve(proxy, &junk).0, proxy);
        let mapped: IpAddr = "::ffff:10.0.0.1".parse().unwrap();
        assert!(policy.trusts(mapped));
    }

    #[test]
    fn a_refusal_shows_a_short_clean_value() {
        assert_eq!(shown("evil\r\nSet-Cookie: x"), "evilSet-Cookie: x");
        let long = "a".repeat(500);
        assert_eq!(shown(&long).chars().count(), 101);
    }
}
