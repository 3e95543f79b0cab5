//! One upstream's configuration, as written in `larkgate.toml` (`[[upstreams]]`) or saved by
//! `larkgate upstream add`.
//!
//! ```toml
//! [[upstreams]]
//! alias = "github"
//! url = "https://api.githubcopilot.com/mcp/"
//! headers = { Authorization = "Bearer ${GITHUB_TOKEN}" }   # from the environment
//! # ...or leave secrets out entirely: LARKGATE_UPSTREAM_GITHUB_AUTHORIZATION, when set,
//! # replaces (or supplies) the header; see `header_override`.
//! approval = "always"            # or "never": the policy's patterns decide
//! allow = ["10.0.0.0/8"]         # reach internal addresses (logged at start)
//! revisions = "latest"           # or "legacy": 2025-11-25 only
//! [upstreams.limits]
//! call_timeout_ms = 30000
//! total_timeout_ms = 300000
//! max_response_bytes = 4194304
//! max_tools = 1000
//! ```

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::client::{Endpoint, Revisions, UpstreamLimits};
use crate::guard::{Allowed, UrlGuard};
use crate::tools::Approval;

/// The environment variable that overrides header `header` of upstream `alias`:
/// `LARKGATE_UPSTREAM_<ALIAS>_<HEADER>`, upper-cased, `-` as `_`
/// (`LARKGATE_UPSTREAM_GITHUB_AUTHORIZATION`, `LARKGATE_UPSTREAM_WEATHER_X_API_KEY`).
pub fn header_override(alias: &str, header: &str) -> String {
    format!("LARKGATE_UPSTREAM_{alias}_{header}")
        .to_ascii_uppercase()
        .replace('-', "_")
}

/// An upstream's limits; each absent one takes its default.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsConfig {
    /// Round-trip timeout, reset by progress.
    pub call_timeout_ms: Option<u64>,
    /// Total time of one call.
    pub total_timeout_ms: Option<u64>,
    /// Bytes of one response.
    pub max_response_bytes: Option<usize>,
    /// Tools kept from the listing.
    pub max_tools: Option<usize>,
}

/// One upstream.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamConfig {
    /// The alias its tools are prefixed with (`<alias>__<tool>`).
    pub alias: String,
    /// The MCP endpoint.
    pub url: String,
    /// Headers for every request; `${NAME}` in a value is replaced by that environment
    /// variable when larkgate starts, so secrets stay out of files.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// Networks and host names this upstream may reach beyond public addresses.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow: Vec<String>,
    /// Whether its tools need an approval.
    #[serde(default)]
    pub approval: Approval,
    /// Protocol revisions.
    #[serde(default)]
    pub revisions: Revisions,
    /// Limits.
    #[serde(default)]
    pub limits: LimitsConfig,
}

impl UpstreamConfig {
    /// The limits with their defaults filled in.
    pub fn limits(&self) -> UpstreamLimits {
        let defaults = UpstreamLimits::default();
        let ms = Duration::from_millis;
        UpstreamLimits {
            call_timeout: self
                .limits
                .call_timeout_ms
                .map_or(defaults.call_timeout, ms),
            total_timeout: self
                .limits
                .total_timeout_ms
                .map_or(defaults.total_timeout, ms),
            max_response_bytes: self
                .limits
                .max_response_bytes
                .unwrap_or(defaults.max_response_bytes),
            max_tools: self.limits.max_tools.unwrap_or(defaults.max_tools),
            ..defaults
        }
    }

    /// The endpoint, with `${NAME}` in header values taken from `env`, and each header
    /// (and `Authorization`, configured or not) replaced whole by the variable
    /// [`header_override`] names when that is set — so a deployment can supply secrets without
    /// writing them into the file.
    pub fn endpoint(&self, env: impl Fn(&str) -> Option<String>) -> Result<Endpoint, String> {
        let mut headers = BTreeMap::new();
        for (name, value) in &self.headers {
            let value = match env(&header_override(&self.alias, name)) {
                Some(value) => value,
                None => expand(value, &env)
                    .map_err(|e| format!("upstream {:?}, header {name:?}: {e}", self.alias))?,
            };
            headers.insert(name.clone(), value);
        }
        let configured = |wanted: &str| headers.keys().any(|n| n.eq_ignore_ascii_case(wanted));
        if !configured("Authorization")
            && let Some(value) = env(&header_override(&self.alias, "Authorization"))
        {
            headers.insert("Authorization".to_owned(), value);
        }
        Ok(Endpoint {
            url: self.url.clone(),
            revisions: self.revisions,
            headers,
            limits: self.limits(),
        })
    }

    /// The strict guard with this upstream's allow-list, refusing larkgate's own `listen`.
    pub fn guard(&self, listen: Option<SocketAddr>) -> Result<UrlGuard, String> {
        let allow = self
            .allow
            .iter()
            .map(|entry| {
                entry
                    .parse::<Allowed>()
                    .map_err(|e| format!("upstream {:?}, allow: {e}", self.alias))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let mut guard = UrlGuard::strict().allow(allow);
        if let Some(listen) = listen {
            guard = guard.refuse_own(listen);
        }
        Ok(guard)
    }

    /// Connects as larkgate does: header secrets from the environment, the strict guard with
    /// this upstream's allow-list, refusing larkgate's own `listen` address.
    pub async fn connect(
        &self,
        listen: Option<SocketAddr>,
        resolver: std::sync::Arc<dyn crate::guard::Resolve>,
    ) -> Result<crate::client::UpstreamClient, String> {
        let endpoint = self.endpoint(|name| std::env::var(name).ok())?;
        let guard = std::sync::Arc::new(self.guard(listen)?);
        crate::client::UpstreamClient::connect(&endpoint, guard, resolver)
            .await
            .map_err(|e| e.to_string())
    }

    /// Checks everything that can be checked without connecting.
    pub fn validate(&self) -> Result<(), String> {
        larkgate_platform::registry::check_alias_syntax(&self.alias)
            .map_err(|e| format!("upstream alias {:?}: {e}", self.alias))?;
        let guard = self.guard(None)?;
        guard
            .parse(&self.url)
            .map_err(|e| format!("upstream {:?}: {e}", self.alias))?;
        let limits = self.limits();
        if limits.call_timeout.is_zero()
            || limits.total_timeout.is_zero()
            || limits.max_response_bytes == 0
            || limits.max_tools == 0
        {
            return Err(format!(
                "upstream {:?}: limits must be greater than zero",
                self.alias
            ));
        }
        Ok(())
    }
}

/// Replaces each `${NAME}` in `value` with `env(NAME)`; a missing variable is an error that
/// names it. `$` not followed by `{` is kept as it is.
pub fn expand(value: &str, env: impl Fn(&str) -> Option<String>) -> Result<String, String> {
    let mut out = String::with_capacity(value.len());
    let mut rest = value;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else {
            return Err(format!("an unclosed \"${{\" in {value:?}"));
        };
        let name = &after[..end];
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(format!("{name:?} is not an environment variable name"));
        }
        let found =
            env(name).ok_or_else(|| format!("the environment variable {name} is not set"))?;
        out.push_str(&found);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}
