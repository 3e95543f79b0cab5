//! The endpoint a running `larkgate serve` announces in its data directory (`serve.url`), so
//! that `larkgate stdio` started beside it can relay to it instead of failing.
//!
//! # Threat model
//!
//! `larkgate stdio` sends its bearer token to the announced URL, so the file decides where a
//! token goes. Whoever can write the data directory could point it elsewhere; they can already
//! rewrite the store (add principals and tokens of their own), so the token gives them nothing
//! new on this gateway — but the token must not leave the machine, nor reach a service that
//! merely resolves from a name. So:
//!
//! - `serve` announces only an address it can be reached at on loopback (a loopback bind, or
//!   the loopback address of an all-interfaces bind), and nothing for any other bind.
//! - The relay accepts only `http://` URLs whose host is a loopback IP literal (127.0.0.0/8,
//!   `::1`) — no names, which a resolver decides, no credentials in the URL — and connects
//!   through the URL guard with just that address allowed, so a redirect goes nowhere.
//! - `serve` removes the file when it stops, if the file is still its own.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};

/// The file's name in the data directory.
pub(crate) const FILE: &str = "serve.url";

/// The MCP URL at which a server bound to `listen` is reachable on loopback, if it is.
pub(crate) fn loopback_url(listen: SocketAddr) -> Option<String> {
    let ip = match listen.ip() {
        ip if ip.is_loopback() => ip,
        IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        _ => return None,
    };
    Some(format!("http://{}/mcp", SocketAddr::new(ip, listen.port())))
}

/// The announcement of a running `serve`; removed when dropped (if still this one).
#[derive(Debug)]
pub(crate) struct Announcement {
    path: PathBuf,
    text: String,
}

/// Announces `listen` in `data_dir`, when it is reachable on loopback. Written whole (a
/// temporary file renamed into place), so a reader never sees half of it.
pub(crate) fn announce(
    data_dir: &Path,
    listen: SocketAddr,
) -> std::io::Result<Option<Announcement>> {
    let path = data_dir.join(FILE);
    let Some(url) = loopback_url(listen) else {
        // A stale file from a crashed serve must not outlive this one's start either.
        let _ = std::fs::remove_file(&path);
        return Ok(None);
    };
    let text = format!("{url}\n");
    let staging = data_dir.join(format!("{FILE}.{}", std::process::id()));
    std::fs::write(&staging, &text)?;
    std::fs::rename(&staging, &path)?;
    Ok(Some(Announcement { path, text }))
}

impl Drop for Announcement {
    fn drop(&mut self) {
        if std::fs::read_to_string(&self.path).is_ok_and(|now| now == self.text) {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Why the announced endpoint cannot be used.
#[derive(Debug, thiserror::Error)]
pub(crate) enum EndpointError {
    /// No running serve announced one.
    #[error("no running `larkgate serve` announced an endpoint in {0}")]
    Missing(String),
    /// The file could not be read.
    #[error("cannot read {0}: {1}")]
    Unreadable(String, std::io::Error),
    /// The file holds something the relay will not send a token to.
    #[error("{0} announces {1:?}, which is not a loopback http:// URL: {2}")]
    Refused(String, String, &'static str),
}

/// The endpoint announced in `data_dir`, checked (see the threat model).
pub(crate) fn read(data_dir: &Path) -> Result<reqwest::Url, EndpointError> {
    let path = data_dir.join(FILE);
    let shown = path.display().to_string();
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(EndpointError::Missing(data_dir.display().to_string()));
        }
        Err(e) => return Err(EndpointError::Unreadable(shown, e)),
    };
    let text = text.trim();
    check(text).map_err(|why| EndpointError::Refused(shown, text.chars().take(200).collect(), why))
}

/// Accepts only `http://<loopback IP literal>[:port]/...`, nothing else.
fn check(text: &str) -> Result<reqwest::Url, &'static str> {
    if text.contains(char::is_whitespace) {
        return Err("it holds more than one URL");
    }
    let url = reqwest::Url::parse(text).map_err(|_| "it is not a URL")?;
    if url.scheme() != "http" {
        return Err("only http:// on loopback is relayed to");
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err("a URL with credentials is refused");
    }
    let host = url.host_str().unwrap_or("");
    let ip: IpAddr = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .parse()
        .map_err(|_| "a host name is refused: only IP literals")?;
    if !ip.is_loopback() {
        return Err("its host is not a loopback address");
    }
    Ok(url)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_http_ip_literals_are_relayed_to() {
        let table: &[(&str, Option<&str>)] = &[
            ("http://127.0.0.1:8940/mcp", None),
            ("http://127.5.6.7:1/mcp", None),
            ("http://[::1]:8940/mcp", None),
            ("https://127.0.0.1:8940/mcp", Some("only http://")),
            ("http://localhost:8940/mcp", Some("host name")),
            ("http://evil.example/mcp", Some("host name")),
            ("http://10.0.0.1:8940/mcp", Some("not a loopback")),
            ("http://0.0.0.0:8940/mcp", Some("not a loopback")),
            ("http://[::ffff:127.0.0.1]:8940/mcp", Some("not a loopback")),
            ("http://[::]:8940/mcp", Some("not a loopback")),
            ("http://169.254.169.254/latest", Some("not a loopback")),
            ("http://user:pw@127.0.0.1:8940/mcp", Some("credentials")),
            (
                "http://127.0.0.1:8940/mcp\nhttp://evil.example/",
                Some("more than one"),
            ),
            ("file:///etc/passwd", Some("only http://")),
            ("not a url", Some("more than one")),
            ("127.0.0.1:8940", Some("not a URL")),
            ("", Some("not a URL")),
        ];
        for (text, refused) in table {
            match (check(text), refused) {
                (Ok(_), None) => {}
                (Err(why), Some(expected)) => assert!(why.contains(expected), "{text:?}: {why}"),
                (result, _) => panic!("{text:?}: {result:?}"),
            }
        }
    }

    #[test]
    fn serve_announces_only_what_loopback_reaches() {
        let at = |s: &str| s.parse::<SocketAddr>().unwrap();
        assert_eq!(
            loopback_url(at("127.0.0.1:8940")).as_deref(),
            Some("http://127.0.0.1:8940/mcp")
        );
        assert_eq!(
            loopback_url(at("0.0.0.0:9")).as_deref(),
            Some("http://127.0.0.1:9/mcp")
        );
        assert_eq!(
            loopback_url(at("[::]:9")).as_deref(),
            Some("http://[::1]:9/mcp")
        );
        assert_eq!(loopback_url(at("192.168.1.5:8940")), None);
        for announced in ["127.0.0.1:1", "0.0.0.0:2", "[::1]:3"] {
            let url = loopback_url(at(announced)).unwrap();
            assert!(check(&url).is_ok(), "{url}");
        }
    }

    #[test]
    fn an_announcement_is_removed_when_its_serve_stops_unless_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let at = "127.0.0.1:4000".parse().unwrap();
        let first = announce(dir.path(), at).unwrap().unwrap();
        assert_eq!(
            read(dir.path()).unwrap().as_str(),
            "http://127.0.0.1:4000/mcp"
        );
        drop(first);
        assert!(matches!(read(dir.path()), Err(EndpointError::Missing(_))));
        // A serve that lost its file to a newer one leaves the newer one alone.
        let old = announce(dir.path(), at).unwrap().unwrap();
        let new = announce(dir.path(), "127.0.0.1:4001".parse().unwrap()).unwrap();
        drop(old);
        assert!(read(dir.path()).unwrap().as_str().contains(":4001"));
        drop(new);
        // A bind loopback does not reach announces nothing, and clears a stale file.
        std::fs::write(dir.path().join(FILE), "http://127.0.0.1:1/mcp\n").unwrap();
        assert!(
            announce(dir.path(), "192.168.1.5:80".parse().unwrap())
                .unwrap()
                .is_none()
        );
        assert!(matches!(read(dir.path()), Err(EndpointError::Missing(_))));
    }
}
