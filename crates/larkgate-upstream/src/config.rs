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
//!
//! [[upstreams]]                  # a server started as a program, spoken to over stdio
//! alias = "fs"
//! command = ["npx", "-y", "@modelcontextprotocol/server-filesystem", "/srv/data"]
//! env = { API_KEY = "${FS_API_KEY}" }   # set for the program, `${VAR}` from larkgate's
//! inherit_env = ["PATH", "HOME"] # larkgate's own variables it sees (default: PATH HOME LANG TZ)
//! cwd = "/srv"                   # its working directory (default: larkgate's)
//!
//! [[upstreams]]                  # a server that wants OAuth (the MCP authorization spec)
//! alias = "vault"
//! url = "https://mcp.vault.example/mcp"
//! [upstreams.oauth]              # tokens sealed with LARKGATE_CREDENTIAL_KEY in the store
//! grant = "authorization_code"   # a person signs in once: `larkgate upstream login vault`
//! # grant = "client_credentials" # a machine account: client_id and client_secret required
//! client_id = "larkgate"         # registered beforehand; absent: a client ID metadata
//!                                # document or dynamic registration, as the server offers
//! client_secret = "${VAULT_CLIENT_SECRET}"
//! scopes = ["mcp:read"]          # absent: the scopes the server asks for
//! [upstreams.limits]
//! call_timeout_ms = 30000
//! total_timeout_ms = 300000
//! max_response_bytes = 4194304
//! max_tools = 1000
//! start_timeout_ms = 60000       # a command-launched server's start and handshake
//! probe_interval_ms = 30000      # a quiet upstream is pinged this often; a down one retried
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
    /// Time a command-launched server has to start and complete the handshake.
    pub start_timeout_ms: Option<u64>,
    /// How long a connected upstream may say nothing before it is probed (a `ping`), and how
    /// long at most a down one waits before it is tried again.
    pub probe_interval_ms: Option<u64>,
}

/// The shortest probe interval an upstream may have: shorter would take a slow answer for a
/// dead server and ping a busy one needlessly.
pub const MIN_PROBE_INTERVAL_MS: u64 = 100;

/// Which OAuth grant larkgate uses for an upstream.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Grant {
    /// A person signs in once (`larkgate upstream login NAME`); larkgate refreshes the tokens.
    #[default]
    AuthorizationCode,
    /// A machine account: larkgate asks for tokens with its client ID and secret.
    ClientCredentials,
}

/// How larkgate signs in to an OAuth-protected upstream (see [`crate::oauth`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OAuthConfig {
    /// The grant.
    #[serde(default)]
    pub grant: Grant,
    /// A client ID registered with the authorization server beforehand.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_id: Option<String>,
    /// Its secret; `${NAME}` is read from larkgate's environment at each use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_secret: Option<String>,
    /// The scopes to ask for; none: those the server asks for.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scopes: Vec<String>,
    /// The HTTPS URL of a client ID metadata document the operator publishes for larkgate
    /// (the MCP authorization spec's preferred client identity): used as the client ID where
    /// the authorization server accepts such documents, otherwise larkgate registers itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_metadata_url: Option<String>,
}

/// The variables of larkgate's own environment a command-launched server sees by default.
pub const DEFAULT_INHERIT_ENV: &[&str] = &["PATH", "HOME", "LANG", "TZ"];

/// One upstream: a Streamable HTTP endpoint (`url`) or a program (`command`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamConfig {
    /// The alias its tools are prefixed with (`<alias>__<tool>`).
    pub alias: String,
    /// The MCP endpoint, for a server reached over Streamable HTTP.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// The program and its arguments, for a server larkgate starts and speaks to over its
    /// standard input and output; no shell is involved.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub command: Vec<String>,
    /// Variables set in the program's environment; `${NAME}` in a value is replaced by that
    /// variable of larkgate's environment at each start.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// Variables of larkgate's own environment the program sees, by name
    /// ([`DEFAULT_INHERIT_ENV`] when absent); nothing else of it reaches the program.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inherit_env: Option<Vec<String>>,
    /// The program's working directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
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
    /// Whether it may ask the client of a call made to it for an elicitation (a question
    /// for the person at the client) during the call; yes when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub elicitation: Option<bool>,
    /// Whether it may ask the client of a call made to it for sampling (a completion from
    /// the client's model, which the client pays for) during the call; no when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sampling: Option<bool>,
    /// Limits.
    #[serde(default)]
    pub limits: LimitsConfig,
    /// OAuth, for an HTTP upstream that wants it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oauth: Option<OAuthConfig>,
}

impl UpstreamConfig {
    /// What it reaches, for people: the URL, or the command line, with every URL in it
    /// stripped of its userinfo, query and fragment (where operators put credentials, see
    /// [`crate::redact`]). Every place that shows an upstream (`upstream list`, the
    /// `upstream_list` tool, the console, audit events, messages) shows this.
    pub fn target(&self) -> String {
        crate::redact::urls(&match &self.url {
            Some(url) => url.clone(),
            None => format!("command: {}", self.command.join(" ")),
        })
    }

    /// Whether larkgate starts it as a program.
    pub fn is_command(&self) -> bool {
        !self.command.is_empty()
    }

    /// The program to start, with its environment built from `env`: the inherited variables
    /// that are set, then `env` entries with `${NAME}` expanded (a missing variable is an
    /// error that names it, never its value).
    pub fn command_target(
        &self,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<crate::command::CommandTarget, String> {
        let (program, args) = self
            .command
            .split_first()
            .ok_or_else(|| format!("upstream {:?} has no command", self.alias))?;
        let mut environment = BTreeMap::new();
        let inherited: Vec<String> = match &self.inherit_env {
            Some(names) => names.clone(),
            None => DEFAULT_INHERIT_ENV
                .iter()
                .map(|n| (*n).to_owned())
                .collect(),
        };
        for name in inherited {
            if let Some(value) = env(&name) {
                environment.insert(name, value);
            }
        }
        for (name, value) in &self.env {
            let value = expand(value, &env)
                .map_err(|e| format!("upstream {:?}, env {name:?}: {e}", self.alias))?;
            environment.insert(name.clone(), value);
        }
        Ok(crate::command::CommandTarget {
            program: program.clone(),
            args: args.to_vec(),
            env: environment,
            cwd: self.cwd.as_ref().map(std::path::PathBuf::from),
            alias: self.alias.clone(),
        })
    }

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
            start_timeout: self
                .limits
                .start_timeout_ms
                .map_or(defaults.start_timeout, ms),
            probe_interval: self
                .limits
                .probe_interval_ms
                .map_or(defaults.probe_interval, ms),
            may_ask: crate::client::MayAsk {
                elicitation: self.elicitation.unwrap_or(defaults.may_ask.elicitation),
                sampling: self.sampling.unwrap_or(defaults.may_ask.sampling),
            },
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
            url: self.url.clone().unwrap_or_default(),
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

    /// Whether a person signs larkgate in to it (`larkgate upstream login`: OAuth with the
    /// authorization code grant), as opposed to a machine account or no OAuth at all.
    pub fn signs_in(&self) -> bool {
        self.oauth
            .as_ref()
            .is_some_and(|oauth| oauth.grant == Grant::AuthorizationCode)
    }

    /// The OAuth client secret with `${NAME}` expanded from `env`.
    pub fn client_secret(
        &self,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<String>, String> {
        let Some(secret) = self.oauth.as_ref().and_then(|o| o.client_secret.as_ref()) else {
            return Ok(None);
        };
        expand(secret, env)
            .map(Some)
            .map_err(|e| format!("upstream {:?}, oauth.client_secret: {e}", self.alias))
    }

    /// Checks everything that can be checked without connecting.
    pub fn validate(&self) -> Result<(), String> {
        larkgate_platform::registry::check_alias_syntax(&self.alias)
            .map_err(|e| format!("upstream alias {:?}: {e}", self.alias))?;
        if let Some(ms) = self.limits.probe_interval_ms
            && ms < MIN_PROBE_INTERVAL_MS
        {
            return Err(format!(
                "upstream {:?}: limits.probe_interval_ms = {ms} is too short: at least \
                 {MIN_PROBE_INTERVAL_MS} (the default is 30000)",
                self.alias
            ));
        }
        match (&self.url, self.command.is_empty()) {
            (Some(_), false) => {
                return Err(format!(
                    "upstream {:?} has both a url and a command: an upstream is reached over \
                     HTTP (url) or started as a program (command), not both",
                    self.alias
                ));
            }
            (None, true) => {
                return Err(format!(
                    "upstream {:?} has neither a url nor a command: write url = \
                     \"https://...\" for a server over HTTP, or command = [\"program\", \
                     \"arg\"] for one larkgate starts",
                    self.alias
                ));
            }
            (Some(url), true) => {
                if let Some(oauth) = &self.oauth {
                    self.validate_oauth(oauth)?;
                }
                let guard = self.guard(None)?;
                guard
                    .parse(url)
                    .map_err(|e| format!("upstream {:?}: {e}", self.alias))?;
                if !self.env.is_empty() || self.inherit_env.is_some() || self.cwd.is_some() {
                    return Err(format!(
                        "upstream {:?}: env, inherit_env and cwd are for command-launched \
                         upstreams; an HTTP upstream takes headers",
                        self.alias
                    ));
                }
            }
            (None, false) => {
                if self.command[0].trim().is_empty() {
                    return Err(format!(
                        "upstream {:?}: the command's first word names the program",
                        self.alias
                    ));
                }
                if !self.headers.is_empty() {
                    return Err(format!(
                        "upstream {:?}: headers are for HTTP upstreams; give a command-launched \
                         one its secrets in env",
                        self.alias
                    ));
                }
                if self.oauth.is_some() {
                    return Err(format!(
                        "upstream {:?}: oauth is for HTTP upstreams; a command-launched server \
                         takes its credentials in env",
                        self.alias
                    ));
                }
                let names = self.env.keys().chain(self.inherit_env.iter().flatten());
                for name in names {
                    if name.is_empty()
                        || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                    {
                        return Err(format!(
                            "upstream {:?}: {name:?} is not an environment variable name",
                            self.alias
                        ));
                    }
                }
                if let Some(cwd) = &self.cwd
                    && !std::path::Path::new(cwd).is_absolute()
                {
                    return Err(format!(
                        "upstream {:?}: cwd {cwd:?} must be an absolute path",
                        self.alias
                    ));
                }
            }
        }
        let limits = self.limits();
        if limits.call_timeout.is_zero()
            || limits.total_timeout.is_zero()
            || limits.start_timeout.is_zero()
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

impl UpstreamConfig {
    fn validate_oauth(&self, oauth: &OAuthConfig) -> Result<(), String> {
        let alias = &self.alias;
        if self
            .headers
            .keys()
            .any(|name| name.eq_ignore_ascii_case("authorization"))
        {
            return Err(format!(
                "upstream {alias:?} has both oauth and an Authorization header: larkgate sends \
                 the OAuth token as the Authorization header; remove one"
            ));
        }
        if oauth.client_secret.is_some() && oauth.client_id.is_none() {
            return Err(format!(
                "upstream {alias:?}: oauth.client_secret belongs to a registered client: give \
                 its oauth.client_id too"
            ));
        }
        if oauth.grant == Grant::ClientCredentials
            && (oauth.client_id.is_none() || oauth.client_secret.is_none())
        {
            return Err(format!(
                "upstream {alias:?}: the client credentials grant needs oauth.client_id and \
                 oauth.client_secret (a machine account registered with the authorization server)"
            ));
        }
        if let Some(document) = &oauth.client_metadata_url {
            if oauth.client_id.is_some() {
                return Err(format!(
                    "upstream {alias:?}: oauth.client_metadata_url is a client identity of its \
                     own; give it or oauth.client_id, not both"
                ));
            }
            let usable = url::Url::parse(document).is_ok_and(|url| {
                url.scheme() == "https"
                    && url.host_str().is_some()
                    && url.path() != "/"
                    && url.fragment().is_none()
                    && url.username().is_empty()
                    && url.password().is_none()
            });
            if !usable {
                // Not repeated: it may hold credentials.
                return Err(format!(
                    "upstream {alias:?}: oauth.client_metadata_url is not the https URL of a \
                     document (https://host/path, without a fragment or credentials)"
                ));
            }
        }
        if let Some(scope) = oauth
            .scopes
            .iter()
            .find(|s| s.is_empty() || s.contains(char::is_whitespace))
        {
            return Err(format!(
                "upstream {alias:?}: {scope:?} is not one OAuth scope (a scope has no spaces)"
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

#[cfg(test)]
mod tests {
    use super::*;

    fn upstream(toml: &str) -> UpstreamConfig {
        toml::from_str(&format!("alias = \"u\"\n{toml}")).unwrap()
    }

    /// What people are shown of an upstream keeps where it is and loses what authenticates to
    /// it, wherever an operator put that in a URL.
    #[test]
    fn an_upstream_is_shown_without_the_secrets_of_its_url() {
        for (config, shown) in [
            (
                r#"url = "https://api.example.com/mcp?token=SECRET""#,
                "https://api.example.com/mcp?<redacted>",
            ),
            (
                r#"url = "https://alice:SECRET@api.example.com:8443/mcp""#,
                "https://<redacted>@api.example.com:8443/mcp",
            ),
            (
                r#"url = "https://api.example.com/mcp#SECRET""#,
                "https://api.example.com/mcp?<redacted>",
            ),
            (
                r#"url = "https://api.example.com/mcp""#,
                "https://api.example.com/mcp",
            ),
            (
                r#"command = ["server", "--upstream", "https://u:SECRET@x.example/?k=SECRET"]"#,
                "command: server --upstream https://<redacted>@x.example/?<redacted>",
            ),
        ] {
            let target = upstream(config).target();
            assert_eq!(target, shown, "{config}");
            assert!(!target.contains("SECRET"), "{target}");
        }
    }
}
