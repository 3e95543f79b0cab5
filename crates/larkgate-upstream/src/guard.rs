//! The URL guard: which network targets larkgate may reach.
//!
//! # Threat model
//!
//! An upstream's URL comes from configuration that an operator (or an agent with admin rights)
//! wrote, and every response may come from a hostile server. Either can try to aim larkgate at
//! something only larkgate can reach: a cloud metadata endpoint (`169.254.169.254`), an admin
//! port on loopback, a database on the private network, or larkgate's own endpoint. They can
//! hide the target behind an IP literal in an unusual form (`http://2130706433/`,
//! `http://[::ffff:127.0.0.1]/`), a DNS name that answers privately, a DNS name that answers
//! publicly once and privately the next time (rebinding), or a redirect.
//!
//! The guard therefore:
//! - decides on the **parsed** host (the WHATWG parser canonicalises every IPv4 form), never on
//!   the URL's text;
//! - admits only `http` and `https`, and refuses URLs with userinfo (`user:pass@`);
//! - checks IP literals and **every** DNS answer against the special-purpose ranges
//!   ([`is_public`]); an IPv4-mapped IPv6 address is judged by its IPv4 address; a name with
//!   any non-public answer is refused as a whole;
//! - is also the HTTP client's resolver ([`GuardedResolver`]), so the addresses it vetted are
//!   the addresses the client connects to: there is no second resolution to rebind;
//! - refuses larkgate's own listen addresses, even when an allow-list admits their range.
//!
//! Operators reach internal servers only through an explicit allow-list of networks and host
//! names per upstream ([`UrlGuard::allow`]). [`UrlGuard::allow_any_for_tests`] admits
//! everything and says so in its name; nothing in larkgate's production paths builds one.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use ipnet::{IpNet, Ipv4Net, Ipv6Net};
use reqwest::Url;

/// Why the guard refused a target.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GuardError {
    /// Not a URL larkgate can use.
    #[error("{url:?} is not a usable URL: {reason}")]
    Malformed {
        /// The URL as given.
        url: String,
        /// What is wrong.
        reason: String,
    },
    /// A scheme other than http or https.
    #[error("{url:?}: only http and https URLs are allowed, not {scheme:?}")]
    Scheme {
        /// The URL.
        url: String,
        /// Its scheme.
        scheme: String,
    },
    /// Credentials in the URL itself.
    #[error(
        "{url:?} carries credentials in the URL; put them in a header instead \
         (headers may name environment variables: ${{TOKEN}})"
    )]
    Userinfo {
        /// The URL, without its credentials.
        url: String,
    },
    /// A target in a special-purpose range that no allow-list admits.
    #[error(
        "{host} resolves to {ip}, which is not a public address ({range}); \
         to reach an internal server, allow it for this upstream (--allow {ip}/32 or --allow {host})"
    )]
    NotPublic {
        /// The host as written in the URL.
        host: String,
        /// The address.
        ip: IpAddr,
        /// The range it falls in.
        range: &'static str,
    },
    /// larkgate's own endpoint.
    #[error("{host} ({addr}) is larkgate's own listen address")]
    Own {
        /// The host.
        host: String,
        /// The address.
        addr: SocketAddr,
    },
    /// The name could not be resolved.
    #[error("{host} could not be resolved: {reason}")]
    Resolve {
        /// The host.
        host: String,
        /// Why.
        reason: String,
    },
}

/// One allow-list entry: a network or a host name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Allowed {
    /// Every address in this network.
    Net(IpNet),
    /// Every address this exact host name (case-insensitive, no trailing dot) resolves to.
    Host(String),
}

impl std::str::FromStr for Allowed {
    type Err = String;

    /// `10.0.0.0/8`, `10.1.2.3` (a /32), `fd00::/8`, or a host name such as `mcp.internal`.
    fn from_str(text: &str) -> Result<Self, String> {
        let text = text.trim();
        if let Ok(net) = text.parse::<IpNet>() {
            return Ok(Allowed::Net(net.trunc()));
        }
        if let Ok(ip) = text.parse::<IpAddr>() {
            return Ok(Allowed::Net(IpNet::from(ip)));
        }
        match url::Host::parse(text) {
            Ok(url::Host::Domain(name)) if !name.is_empty() && !name.contains('/') => {
                Ok(Allowed::Host(normalise_host(&name)))
            }
            _ => Err(format!(
                "{text:?} is neither a network (10.0.0.0/8), an address, nor a host name"
            )),
        }
    }
}

impl fmt::Display for Allowed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Allowed::Net(net) => write!(f, "{net}"),
            Allowed::Host(host) => f.write_str(host),
        }
    }
}

fn normalise_host(host: &str) -> String {
    host.trim_end_matches('.').to_ascii_lowercase()
}

/// Which targets one upstream may reach. See the module documentation.
#[derive(Clone, Debug)]
pub struct UrlGuard {
    allow: Vec<Allowed>,
    own: Vec<SocketAddr>,
    any: bool,
}

/// A host as the guard sees it after parsing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// An IP literal, already vetted.
    Ip(IpAddr),
    /// A name: its answers are vetted when it is resolved ([`UrlGuard::vet_answers`]).
    Name(String),
}

impl UrlGuard {
    /// Publicly routable targets only.
    pub fn strict() -> Self {
        UrlGuard {
            allow: Vec::new(),
            own: Vec::new(),
            any: false,
        }
    }

    /// Every target, private or not. For tests against servers on loopback; never built by
    /// larkgate's own configuration.
    pub fn allow_any_for_tests() -> Self {
        UrlGuard {
            allow: Vec::new(),
            own: Vec::new(),
            any: true,
        }
    }

    /// Also admits these networks and host names.
    pub fn allow(mut self, entries: impl IntoIterator<Item = Allowed>) -> Self {
        self.allow.extend(entries);
        self
    }

    /// Refuses larkgate's own listen address (its port on any address, when it listens on
    /// all of them).
    pub fn refuse_own(mut self, listen: SocketAddr) -> Self {
        self.own.push(listen);
        self
    }

    /// The allow-list, for logging at start.
    pub fn allowed(&self) -> &[Allowed] {
        &self.allow
    }

    /// Checks a URL's form and, for an IP literal, its address. A name's addresses are
    /// checked when it is resolved.
    pub fn check_url(&self, url: &Url) -> Result<Target, GuardError> {
        let shown = || {
            let mut clean = url.clone();
            let _ = clean.set_username("");
            let _ = clean.set_password(None);
            clean.to_string()
        };
        if !matches!(url.scheme(), "http" | "https") {
            return Err(GuardError::Scheme {
                url: shown(),
                scheme: url.scheme().to_owned(),
            });
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(GuardError::Userinfo { url: shown() });
        }
        let port = url.port_or_known_default().unwrap_or(80);
        match url.host() {
            None => Err(GuardError::Malformed {
                url: shown(),
                reason: "it has no host".into(),
            }),
            Some(url::Host::Ipv4(ip)) => {
                let ip = IpAddr::V4(ip);
                self.check_addr(&ip.to_string(), SocketAddr::new(ip, port))?;
                Ok(Target::Ip(ip))
            }
            Some(url::Host::Ipv6(ip)) => {
                let ip = IpAddr::V6(ip);
                self.check_addr(&format!("[{ip}]"), SocketAddr::new(ip, port))?;
                Ok(Target::Ip(ip))
            }
            Some(url::Host::Domain(name)) => Ok(Target::Name(normalise_host(name))),
        }
    }

    /// Parses and checks a URL (see [`UrlGuard::check_url`]).
    pub fn parse(&self, url: &str) -> Result<(Url, Target), GuardError> {
        let parsed = Url::parse(url).map_err(|e| GuardError::Malformed {
            url: url.to_owned(),
            reason: e.to_string(),
        })?;
        let target = self.check_url(&parsed)?;
        Ok((parsed, target))
    }

    /// Vets every answer for `host`: all must be admitted, or the name is refused.
    pub fn vet_answers(&self, host: &str, answers: &[SocketAddr]) -> Result<(), GuardError> {
        if answers.is_empty() {
            return Err(GuardError::Resolve {
                host: host.to_owned(),
                reason: "no addresses".into(),
            });
        }
        let host = normalise_host(host);
        let host_allowed = self
            .allow
            .iter()
            .any(|a| matches!(a, Allowed::Host(h) if *h == host));
        for addr in answers {
            if host_allowed || self.any {
                self.check_own(&host, *addr)?;
            } else {
                self.check_addr(&host, *addr)?;
            }
        }
        Ok(())
    }

    /// One address: not larkgate's own, and public or allowed.
    fn check_addr(&self, host: &str, addr: SocketAddr) -> Result<(), GuardError> {
        self.check_own(host, addr)?;
        if self.any {
            return Ok(());
        }
        let ip = canonical(addr.ip());
        if let Err(range) = is_public(ip) {
            let allowed = self.allow.iter().any(|a| match a {
                Allowed::Net(net) => net.contains(&ip) || net.contains(&addr.ip()),
                Allowed::Host(_) => false,
            });
            if !allowed {
                return Err(GuardError::NotPublic {
                    host: host.to_owned(),
                    ip,
                    range,
                });
            }
        }
        Ok(())
    }

    fn check_own(&self, host: &str, addr: SocketAddr) -> Result<(), GuardError> {
        let ip = canonical(addr.ip());
        let is_own = self.own.iter().any(|own| {
            own.port() == addr.port()
                && (canonical(own.ip()) == ip
                    || own.ip().is_unspecified()
                    || (own.ip().is_loopback() && ip.is_loopback()))
        });
        if is_own {
            return Err(GuardError::Own {
                host: host.to_owned(),
                addr,
            });
        }
        Ok(())
    }
}

/// An IPv4-mapped IPv6 address (`::ffff:a.b.c.d`) as the IPv4 address it is.
pub fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => ip,
        },
        v4 => v4,
    }
}

const fn v4(a: u8, b: u8, c: u8, d: u8, len: u8) -> (Ipv4Addr, u8) {
    (Ipv4Addr::new(a, b, c, d), len)
}

/// IPv4 special-purpose ranges, with their names.
const SPECIAL_V4: &[((Ipv4Addr, u8), &str)] = &[
    (v4(0, 0, 0, 0, 8), "0.0.0.0/8, this network"),
    (v4(10, 0, 0, 0, 8), "10.0.0.0/8, private"),
    (v4(100, 64, 0, 0, 10), "100.64.0.0/10, shared address space"),
    (v4(127, 0, 0, 0, 8), "127.0.0.0/8, loopback"),
    (v4(169, 254, 0, 0, 16), "169.254.0.0/16, link-local"),
    (v4(172, 16, 0, 0, 12), "172.16.0.0/12, private"),
    (
        v4(192, 0, 0, 0, 24),
        "192.0.0.0/24, IETF protocol assignments",
    ),
    (v4(192, 0, 2, 0, 24), "192.0.2.0/24, documentation"),
    (v4(192, 88, 99, 0, 24), "192.88.99.0/24, 6to4 relay anycast"),
    (v4(192, 168, 0, 0, 16), "192.168.0.0/16, private"),
    (v4(198, 18, 0, 0, 15), "198.18.0.0/15, benchmarking"),
    (v4(198, 51, 100, 0, 24), "198.51.100.0/24, documentation"),
    (v4(203, 0, 113, 0, 24), "203.0.113.0/24, documentation"),
    (v4(224, 0, 0, 0, 4), "224.0.0.0/4, multicast"),
    (v4(240, 0, 0, 0, 4), "240.0.0.0/4, reserved and broadcast"),
];

/// IPv6 special-purpose ranges inside the global unicast space 2000::/3 (everything outside it
/// — `::`, `::1`, 64:ff9b::/96, 64:ff9b:1::/48, 100::/64, fc00::/7, fe80::/10, ff00::/8 — is
/// refused as "not global unicast").
const SPECIAL_V6: &[(&str, &str)] = &[
    (
        "2001::/23",
        "2001::/23, IETF protocol assignments (Teredo 2001::/32 included)",
    ),
    ("2001:db8::/32", "2001:db8::/32, documentation"),
    ("2002::/16", "2002::/16, 6to4"),
    ("3fff::/20", "3fff::/20, documentation"),
];

/// Whether `ip` is publicly routable; the name of the range that makes it not. IPv4-mapped
/// IPv6 addresses are judged by their IPv4 address.
pub fn is_public(ip: IpAddr) -> Result<(), &'static str> {
    match canonical(ip) {
        IpAddr::V4(ip) => {
            for ((base, len), name) in SPECIAL_V4 {
                let net = Ipv4Net::new_assert(*base, *len);
                if net.contains(&ip) {
                    return Err(name);
                }
            }
            Ok(())
        }
        IpAddr::V6(ip) => {
            let global = Ipv6Net::new_assert(Ipv6Addr::new(0x2000, 0, 0, 0, 0, 0, 0, 0), 3);
            if !global.contains(&ip) {
                return Err(match ip.segments() {
                    [0, 0, 0, 0, 0, 0, 0, 0] => "::, unspecified",
                    [0, 0, 0, 0, 0, 0, 0, 1] => "::1, loopback",
                    [0x64, 0xff9b, ..] => "64:ff9b::/96 or 64:ff9b:1::/48, NAT64",
                    [0x100, 0, 0, 0, ..] => "100::/64, discard-only",
                    [s, ..] if s & 0xfe00 == 0xfc00 => "fc00::/7, unique local",
                    [s, ..] if s & 0xffc0 == 0xfe80 => "fe80::/10, link-local",
                    [s, ..] if s & 0xff00 == 0xff00 => "ff00::/8, multicast",
                    _ => "outside 2000::/3, not global unicast",
                });
            }
            for (net, name) in SPECIAL_V6 {
                let net: Ipv6Net = net.parse().expect("a valid network");
                if net.contains(&ip) {
                    return Err(name);
                }
            }
            Ok(())
        }
    }
}

/// How names are resolved before the guard vets the answers. The system resolver in
/// production; tests use their own to stage private answers and rebinding.
pub trait Resolve: Send + Sync + 'static {
    /// All addresses for `host` (the port is set by the caller).
    fn lookup(
        &self,
        host: &str,
    ) -> std::pin::Pin<
        Box<dyn std::future::Future<Output = std::io::Result<Vec<IpAddr>>> + Send + '_>,
    >;
}

/// The operating system's resolver, through tokio.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemResolver;

impl Resolve for SystemResolver {
    fn lookup(
        &self,
        host: &str,
    ) -> std::pin::Pin<
        Box<dyn std::future::Future<Output = std::io::Result<Vec<IpAddr>>> + Send + '_>,
    > {
        let host = host.to_owned();
        Box::pin(async move {
            let answers = tokio::net::lookup_host((host.as_str(), 0)).await?;
            Ok(answers.map(|a| a.ip()).collect())
        })
    }
}

/// The guard as the HTTP client's resolver: a name resolves only to addresses the guard
/// admits, and the client connects to exactly those.
#[derive(Clone)]
pub struct GuardedResolver {
    guard: Arc<UrlGuard>,
    resolver: Arc<dyn Resolve>,
    port: u16,
}

impl fmt::Debug for GuardedResolver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GuardedResolver")
            .field("guard", &self.guard)
            .finish_non_exhaustive()
    }
}

impl GuardedResolver {
    /// Resolves through `resolver` and vets through `guard`. `port` is the upstream's port,
    /// used for the own-address check (redirects stay on the same origin, so on this port).
    pub fn new(guard: Arc<UrlGuard>, resolver: Arc<dyn Resolve>, port: u16) -> Self {
        GuardedResolver {
            guard,
            resolver,
            port,
        }
    }

    /// Resolves `host` and vets every answer.
    pub async fn resolve(&self, host: &str) -> Result<Vec<SocketAddr>, GuardError> {
        let answers = self
            .resolver
            .lookup(host)
            .await
            .map_err(|e| GuardError::Resolve {
                host: host.to_owned(),
                reason: e.to_string(),
            })?;
        let answers: Vec<SocketAddr> = answers
            .into_iter()
            .map(|ip| SocketAddr::new(ip, self.port))
            .collect();
        self.guard.vet_answers(host, &answers)?;
        Ok(answers)
    }
}

impl reqwest::dns::Resolve for GuardedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let this = self.clone();
        Box::pin(async move {
            let answers = GuardedResolver::resolve(&this, name.as_str()).await;
            match answers {
                Ok(answers) => Ok(Box::new(answers.into_iter()) as reqwest::dns::Addrs),
                Err(refused) => {
                    tracing::warn!(%refused, "the URL guard refused a resolved address");
                    Err(Box::new(refused) as Box<dyn std::error::Error + Send + Sync>)
                }
            }
        })
    }
}
