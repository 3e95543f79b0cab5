//! `[[audit.anchors]]`: where signed checkpoints are sent besides the chain
//! ([`larkgate_platform::audit::anchor`]), one table per sink:
//!
//! ```toml
//! [audit]
//! anchors_required = false            # true: refuse calls while an anchor is failing
//!
//! [[audit.anchors]]
//! file = "/mnt/other-disk/larkgate-anchors.jsonl"   # append-only JSON lines (absolute path)
//!
//! [[audit.anchors]]
//! syslog = "/dev/log"                 # the system log's socket (journald reads it too)
//!
//! [[audit.anchors]]
//! webhook = "https://audit.example.com/larkgate"    # POSTs each checkpoint as JSON
//! allow = ["10.0.0.0/8"]              # private targets it may reach, as an upstream's
//! headers = { Authorization = "Bearer ${AUDIT_WEBHOOK_TOKEN}" }
//! ```
//!
//! A webhook goes through the same URL guard as an upstream: public addresses only unless
//! `allow` names the network or host, no proxies, no redirects followed, larkgate's own
//! address refused. Header values take `${NAME}` from the environment, so a secret stays out
//! of the file.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use larkgate_platform::audit::anchor::{AnchorSink, FileAnchor, SyslogAnchor, anchor_line};
use larkgate_platform::audit::checkpoint::Checkpoint;
use larkgate_upstream::http::{Redirects, build_client_with};
use larkgate_upstream::{Allowed, Resolve, UrlGuard};
use serde::Deserialize;

/// How long a webhook has to answer.
const WEBHOOK_TIMEOUT: Duration = Duration::from_secs(10);

/// One `[[audit.anchors]]` table: exactly one of `file`, `syslog`, `webhook`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct AnchorConfig {
    file: Option<PathBuf>,
    syslog: Option<PathBuf>,
    webhook: Option<String>,
    #[serde(default)]
    allow: Vec<String>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
}

impl AnchorConfig {
    /// Checks the table on its own (the form of each field, and a webhook's URL against the
    /// guard), as `larkgate check` and every start do.
    pub(crate) fn validate(&self) -> Result<(), String> {
        let kinds = [
            self.file.is_some(),
            self.syslog.is_some(),
            self.webhook.is_some(),
        ];
        if kinds.iter().filter(|k| **k).count() != 1 {
            return Err("give exactly one of file, syslog or webhook".into());
        }
        if self.webhook.is_none() && (!self.allow.is_empty() || !self.headers.is_empty()) {
            return Err("allow and headers are a webhook's only".into());
        }
        if let Some(file) = &self.file
            && !file.is_absolute()
        {
            return Err(format!(
                "file {:?} must be an absolute path (ideally on other storage than the \
                 database)",
                file.display()
            ));
        }
        if let Some(socket) = &self.syslog
            && !socket.is_absolute()
        {
            return Err(format!(
                "syslog {:?} must be the absolute path of the system log's socket (/dev/log)",
                socket.display()
            ));
        }
        if let Some(url) = &self.webhook {
            let guard = self.guard(None)?;
            guard
                .parse(url)
                .map_err(|e| format!("webhook {url:?}: {e}"))?;
        }
        Ok(())
    }

    fn guard(&self, listen: Option<SocketAddr>) -> Result<UrlGuard, String> {
        let allow = self
            .allow
            .iter()
            .map(|entry| entry.parse::<Allowed>().map_err(|e| format!("allow: {e}")))
            .collect::<Result<Vec<_>, _>>()?;
        let mut guard = UrlGuard::strict().allow(allow);
        if let Some(listen) = listen {
            guard = guard.refuse_own(listen);
        }
        Ok(guard)
    }

    /// The sink, its header values taken from `env`; `listen` is larkgate's own address, which
    /// a webhook may not be.
    pub(crate) fn sink(
        &self,
        listen: Option<SocketAddr>,
        resolver: Arc<dyn Resolve>,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Arc<dyn AnchorSink>, String> {
        self.validate()?;
        if let Some(file) = &self.file {
            return Ok(Arc::new(FileAnchor::new(file.clone())));
        }
        if let Some(socket) = &self.syslog {
            return Ok(Arc::new(SyslogAnchor::new(socket.clone())));
        }
        let url = self.webhook.as_deref().unwrap_or_default();
        let guard = Arc::new(self.guard(listen)?);
        let (url, _) = guard
            .parse(url)
            .map_err(|e| format!("webhook {url:?}: {e}"))?;
        let mut headers = reqwest::header::HeaderMap::new();
        for (name, value) in &self.headers {
            let value = larkgate_upstream::config::expand(value, &env)
                .map_err(|e| format!("webhook header {name:?}: {e}"))?;
            let name = reqwest::header::HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| format!("webhook header {name:?} is not a header name"))?;
            let mut value = reqwest::header::HeaderValue::from_str(&value)
                .map_err(|_| format!("webhook header {name}'s value is not a header value"))?;
            value.set_sensitive(true);
            headers.insert(name, value);
        }
        let client = build_client_with(guard, resolver, &url, WEBHOOK_TIMEOUT, Redirects::None)
            .map_err(|e| format!("webhook {url}: {e}"))?;
        Ok(Arc::new(WebhookAnchor {
            url,
            client,
            headers,
        }))
    }
}

/// An HTTP endpoint that receives each checkpoint as a JSON body (`POST`, `application/json`);
/// any 2xx answer takes it. Its body is not read.
struct WebhookAnchor {
    url: url::Url,
    client: reqwest::Client,
    headers: reqwest::header::HeaderMap,
}

impl std::fmt::Debug for WebhookAnchor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Header values may be secrets: their names only.
        f.debug_struct("WebhookAnchor")
            .field("url", &self.url.as_str())
            .field("headers", &self.headers.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl AnchorSink for WebhookAnchor {
    fn describe(&self) -> String {
        let mut shown = self.url.clone();
        let _ = shown.set_username("");
        let _ = shown.set_password(None);
        shown.set_query(None);
        format!("webhook {shown}")
    }

    fn append<'a>(&'a self, checkpoint: &'a Checkpoint) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            let answer = self
                .client
                .post(self.url.clone())
                .headers(self.headers.clone())
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .timeout(WEBHOOK_TIMEOUT)
                .body(anchor_line(checkpoint))
                .send()
                .await
                .map_err(|e| format!("the webhook could not be reached: {e}"))?;
            let status = answer.status();
            if status.is_success() {
                Ok(())
            } else {
                Err(format!("the webhook answered {status}"))
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<AnchorConfig, String> {
        toml::from_str::<AnchorConfig>(text).map_err(|e| e.to_string())
    }

    /// Each form reads; every mistake is refused saying what is wrong.
    #[test]
    fn anchor_tables_are_checked() {
        for good in [
            r#"file = "/var/anchors.jsonl""#,
            r#"syslog = "/dev/log""#,
            r#"webhook = "https://audit.example.com/in""#,
            r#"webhook = "http://10.1.2.3:8080/in"
               allow = ["10.0.0.0/8"]
               headers = { Authorization = "Bearer ${TOKEN}" }"#,
        ] {
            parse(good).unwrap().validate().unwrap();
        }
        for (bad, says) in [
            ("", "exactly one"),
            (
                r#"file = "/a"
                   syslog = "/dev/log""#,
                "exactly one",
            ),
            (r#"file = "anchors.jsonl""#, "absolute path"),
            (r#"syslog = "log""#, "absolute path"),
            (
                r#"file = "/a"
                   allow = ["10.0.0.0/8"]"#,
                "webhook's only",
            ),
            (r#"webhook = "http://127.0.0.1:9/in""#, "127.0.0.1"),
            (r#"webhook = "http://10.1.2.3/in""#, "10.1.2.3"),
            (r#"webhook = "ftp://audit.example.com/""#, "ftp"),
            (
                r#"webhook = "https://a.example/"
                   allow = ["not a net/"]"#,
                "allow",
            ),
        ] {
            let refused = parse(bad).unwrap().validate().unwrap_err();
            assert!(refused.contains(says), "{bad}: {refused}");
        }
        assert!(
            parse(r#"webhok = "x""#)
                .unwrap_err()
                .contains("unknown field")
        );
        // A header's variable that is not set is named.
        let config = parse(
            r#"webhook = "https://audit.example.com/in"
               headers = { Authorization = "Bearer ${LARKGATE_TEST_UNSET}" }"#,
        )
        .unwrap();
        let refused = config
            .sink(None, Arc::new(larkgate_upstream::SystemResolver), |_| None)
            .unwrap_err();
        assert!(refused.contains("LARKGATE_TEST_UNSET"), "{refused}");
    }
}
