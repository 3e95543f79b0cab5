//! The `[server]` section of `larkgate.toml`: where `larkgate serve` listens and how every
//! connection, request body and 2025-11-25 session is bounded ([`ServerConfig`]). Each bound
//! is handed to the module that enforces it ([`crate::accept`], [`crate::json_rpc`],
//! [`crate::sessions`], [`crate::address`]).

use std::net::SocketAddr;
use std::time::Duration;

use serde::{Deserialize, Deserializer};

/// The default listen address of `serve`.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8940";

/// The default address of the operational endpoints: this machine only, beside the default
/// `listen`.
pub const DEFAULT_OPS_LISTEN: &str = "127.0.0.1:8941";

/// Where `/healthz`, `/readyz` and `/metrics` are served (`[server] ops_listen`, `serve
/// --ops-listen`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpsListen {
    /// On a listener of their own, with a connection cap of its own, so that whatever
    /// clients do to `listen` (a full connection cap), health answers.
    Apart(SocketAddr),
    /// Beside `/mcp`, on `listen` (`"beside-mcp"`): one port, but a full cap there hides them.
    BesideMcp,
}

impl Default for OpsListen {
    fn default() -> Self {
        OpsListen::Apart(
            DEFAULT_OPS_LISTEN
                .parse()
                .expect("the default ops address parses"),
        )
    }
}

impl std::str::FromStr for OpsListen {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        if text == "beside-mcp" {
            return Ok(OpsListen::BesideMcp);
        }
        parse_socket_address(text)
            .map(OpsListen::Apart)
            .map_err(|e| format!("{e}; or \"beside-mcp\" to serve them on `listen`"))
    }
}

/// `text` as where the operational endpoints are served.
pub fn parse_ops_listen(text: &str) -> Result<OpsListen, String> {
    text.parse()
}

/// How lines on stderr are written (`[server] log_format`; `--log-format` and
/// `LARKGATE_LOG_FORMAT` override it).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines; colours only on a terminal.
    #[default]
    Text,
    /// One JSON object per line: `timestamp`, `level`, `message` and the event's fields.
    Json,
}

/// Reads a socket address, or says which forms are accepted.
fn socket_address<'de, D: Deserializer<'de>>(deserializer: D) -> Result<SocketAddr, D::Error> {
    let text = String::deserialize(deserializer)?;
    parse_socket_address(&text).map_err(serde::de::Error::custom)
}

fn ops_listen<'de, D: Deserializer<'de>>(deserializer: D) -> Result<OpsListen, D::Error> {
    let text = String::deserialize(deserializer)?;
    text.parse().map_err(serde::de::Error::custom)
}

/// `text` as a socket address, or an error naming the accepted forms.
pub fn parse_socket_address(text: &str) -> Result<SocketAddr, String> {
    text.parse().map_err(|_| {
        format!(
            "{text:?} is not an address to listen on: write IP:PORT, for example \
             \"127.0.0.1:8940\" (this machine only), \"0.0.0.0:8940\" (every IPv4 interface), \
             \"[::]:8940\" or \"[::1]:8940\"; a host name is not accepted"
        )
    })
}

/// `larkgate serve`'s edge: where it listens and how every connection and session is bounded.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    /// Where `/mcp` is served.
    #[serde(deserialize_with = "socket_address")]
    pub listen: SocketAddr,
    /// Where `/healthz`, `/readyz` and `/metrics` are served: apart from `listen` (by default
    /// on 127.0.0.1:8941), with a connection cap of their own, so that a full cap on `listen`
    /// does not hide them; or `"beside-mcp"`.
    #[serde(deserialize_with = "ops_listen")]
    pub ops_listen: OpsListen,
    /// The URL clients reach `/mcp` at (for example `https://mcp.example.com/mcp` behind a
    /// reverse proxy): printed in the client configuration, and its host is answered to.
    pub public_url: Option<String>,
    /// More host names (`name` or `name:port`) `/mcp` answers to, besides `localhost`, IP
    /// literals and `public_url`'s host.
    pub allowed_hosts: Vec<String>,
    /// Browser origins (`https://console.example.com`) whose pages may call `/mcp`; none by
    /// default.
    pub allowed_origins: Vec<String>,
    /// Reverse proxies (addresses or CIDR ranges) whose `X-Forwarded-For` and
    /// `X-Forwarded-Host` headers are believed; nobody's by default.
    pub trusted_proxies: Vec<String>,
    /// Connections open at once on `listen`.
    pub max_connections: usize,
    /// How long a request head may take to arrive, from its first byte (ms).
    pub header_read_timeout_ms: u64,
    /// How long a connection may stay open without a request (ms); also how long a request's
    /// body may take to arrive.
    pub idle_timeout_ms: u64,
    /// The largest request head, in bytes.
    pub max_header_bytes: usize,
    /// The largest request body, in bytes.
    pub max_body_bytes: usize,
    /// 2025-11-25 sessions open at once, all principals together.
    pub max_sessions: usize,
    /// 2025-11-25 sessions one principal may have open at once.
    pub max_sessions_per_principal: usize,
    /// A 2025-11-25 session without a request for this long is closed (ms).
    pub session_idle_timeout_ms: u64,
    /// After a shutdown signal, how long in-flight calls may finish (ms).
    pub shutdown_grace_ms: u64,
    /// Failed authentications one address may make in a minute before its requests are
    /// refused (429) until the minute is over.
    pub max_failed_authentications_per_minute: u32,
    /// How stderr is written (`--log-format` and `LARKGATE_LOG_FORMAT` override).
    pub log_format: LogFormat,
    /// One access-log line per MCP request (`serve` and `stdio`). The edge makes each line an
    /// event of the target [`larkgate_platform::observe::ACCESS`]; the log writes them while
    /// this is true (a reload changes it).
    pub access_log: bool,
}

impl Default for ServerConfig {
    fn default() -> Self {
        let sockets = crate::accept::SocketLimits::default();
        let sessions = crate::sessions::SessionLimits::default();
        ServerConfig {
            listen: default_listen(),
            ops_listen: OpsListen::default(),
            public_url: None,
            allowed_hosts: Vec::new(),
            allowed_origins: Vec::new(),
            trusted_proxies: Vec::new(),
            max_connections: sockets.max_connections,
            header_read_timeout_ms: millis(sockets.header_read_timeout),
            idle_timeout_ms: millis(sockets.idle_timeout),
            max_header_bytes: sockets.max_header_bytes,
            max_body_bytes: crate::json_rpc::MAX_BODY,
            max_sessions: sessions.total,
            max_sessions_per_principal: sessions.per_principal,
            session_idle_timeout_ms: millis(sessions.idle_timeout),
            shutdown_grace_ms: default_grace_ms(),
            max_failed_authentications_per_minute: 30,
            log_format: LogFormat::Text,
            access_log: true,
        }
    }
}

/// This machine's host name, as the kernel knows it.
fn machine_host_name() -> Option<String> {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname").ok()?;
    let name = name.trim();
    (!name.is_empty()).then(|| name.to_ascii_lowercase())
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

impl ServerConfig {
    /// The bounds of connections on `listen`.
    pub fn sockets(&self) -> crate::accept::SocketLimits {
        crate::accept::SocketLimits {
            max_connections: self.max_connections,
            header_read_timeout: Duration::from_millis(self.header_read_timeout_ms),
            idle_timeout: Duration::from_millis(self.idle_timeout_ms),
            max_header_bytes: self.max_header_bytes,
        }
    }

    /// The bounds of request bodies on `/mcp`.
    pub fn bodies(&self) -> crate::json_rpc::BodyLimits {
        crate::json_rpc::BodyLimits {
            max_bytes: self.max_body_bytes,
            timeout: Duration::from_millis(self.idle_timeout_ms),
        }
    }

    /// The caps on 2025-11-25 sessions.
    pub fn sessions(&self) -> crate::sessions::SessionLimits {
        crate::sessions::SessionLimits {
            total: self.max_sessions,
            per_principal: self.max_sessions_per_principal,
            idle_timeout: Duration::from_millis(self.session_idle_timeout_ms),
        }
    }

    /// The URL clients reach `/mcp` at when `serve` listens on `listen`: `public_url`, else
    /// the listen address, else (bound to every interface) this machine's host name.
    pub fn public_mcp_url(&self, listen: SocketAddr) -> String {
        if let Some(url) = self.public_url() {
            return url.to_string();
        }
        if !listen.ip().is_unspecified() {
            return format!("http://{listen}/mcp");
        }
        let host = machine_host_name().unwrap_or_else(|| "THIS-MACHINE".to_owned());
        format!("http://{host}:{}/mcp", listen.port())
    }

    /// `public_url`, read (validated when the configuration was loaded).
    fn public_url(&self) -> Option<url::Url> {
        let text = self.public_url.as_deref()?;
        let mut url = url::Url::parse(text).ok()?;
        if url.path() == "/" {
            url.set_path("/mcp");
        }
        Some(url)
    }

    /// What `/mcp` answers to when `serve` listens on `listen`, and whom it believes.
    pub fn address_policy(
        &self,
        listen: SocketAddr,
    ) -> Result<crate::address::AddressPolicy, String> {
        let mut hosts = self.allowed_hosts.clone();
        if let Some(host) = self
            .public_url()
            .and_then(|u| u.host_str().map(str::to_owned))
        {
            hosts.push(host);
        }
        if listen.ip().is_unspecified()
            && let Some(name) = machine_host_name()
        {
            hosts.push(name);
        }
        let proxies = self
            .trusted_proxies
            .iter()
            .map(|entry| {
                entry
                    .parse::<ipnet::IpNet>()
                    .or_else(|_| entry.parse::<std::net::IpAddr>().map(ipnet::IpNet::from))
                    .map_err(|_| {
                        format!(
                            "server.trusted_proxies: {entry:?} is not an address or a CIDR range \
                             (for example \"10.0.0.5\" or \"10.0.0.0/8\")"
                        )
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        crate::address::AddressPolicy::new(&hosts, &self.allowed_origins, &proxies)
            .map_err(|e| format!("server: {e}"))
    }

    /// What is wrong with the section, in words naming the key, or nothing.
    pub fn validate(&self) -> Result<(), String> {
        if let Some(problem) = self
            .public_url
            .as_deref()
            .and_then(crate::service_url::problem)
        {
            return Err(format!(
                "server.public_url: {problem}; write the URL clients use for /mcp, for \
                 example \"https://mcp.example.com/mcp\""
            ));
        }
        self.address_policy(self.listen)?;
        let positive = [
            ("max_connections", self.max_connections as u128),
            (
                "header_read_timeout_ms",
                u128::from(self.header_read_timeout_ms),
            ),
            ("idle_timeout_ms", u128::from(self.idle_timeout_ms)),
            ("max_body_bytes", self.max_body_bytes as u128),
            ("max_sessions", self.max_sessions as u128),
            (
                "max_sessions_per_principal",
                self.max_sessions_per_principal as u128,
            ),
            (
                "session_idle_timeout_ms",
                u128::from(self.session_idle_timeout_ms),
            ),
            (
                "max_failed_authentications_per_minute",
                u128::from(self.max_failed_authentications_per_minute),
            ),
        ];
        for (key, value) in positive {
            if value == 0 {
                return Err(format!("server.{key} must be at least 1"));
            }
        }
        if self.max_header_bytes < 8192 {
            return Err("server.max_header_bytes must be at least 8192".to_owned());
        }
        if matches!(self.ops_listen, OpsListen::Apart(ops) if ops == self.listen && ops.port() != 0)
        {
            return Err(
                "server.ops_listen must differ from server.listen (it is there so that the \
                 operational endpoints stay reachable when listen is full); write \
                 \"beside-mcp\" to serve them on listen"
                    .to_owned(),
            );
        }
        Ok(())
    }
}

fn default_grace_ms() -> u64 {
    10_000
}

fn default_listen() -> SocketAddr {
    DEFAULT_LISTEN
        .parse()
        .expect("the default listen address parses")
}
