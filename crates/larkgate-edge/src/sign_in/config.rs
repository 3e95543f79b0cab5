//! `[sign_in]`: which identity providers' access tokens `/mcp` accepts, and how their claims
//! name a larkgate principal and its roles.
//!
//! ```toml
//! [[sign_in.issuers]]
//! issuer = "https://login.example.com/realms/acme"   # must equal the tokens' `iss`
//! name = "acme"                    # default: the issuer's host; principals are registered
//!                                  # for it: `larkgate principal add ada --issuer acme`
//! # jwks_uri = "https://..."       # default: the issuer's discovery document names it
//! # audience = "https://..."       # default: larkgate's resource URL ([server] public_url)
//! # algorithms = ["RS256"]         # default: every asymmetric algorithm; never HMAC or none
//! principal_claim = "email"        # default "sub": whose value names the principal
//! # principal_prefix = "acme."     # put before the claim's value
//! # groups_claim = "groups"        # default "groups"
//! # required_scopes = ["mcp"]      # a token without them is refused (403 insufficient_scope)
//! # leeway_seconds = 60            # clock skew allowed on exp and nbf (at most 300)
//! [sign_in.issuers.group_roles]    # roles a group brings, beside the principal's own
//! "mcp-approvers" = ["approver"]
//! [sign_in.issuers.scope_roles]    # roles a scope brings
//! "larkgate.author" = ["author"]
//! ```

use std::collections::{BTreeMap, BTreeSet};

use jsonwebtoken::{Algorithm, AlgorithmFamily};
use serde::Deserialize;

/// The asymmetric algorithms accepted when an issuer names none.
pub(crate) const DEFAULT_ALGORITHMS: &[&str] = &[
    "RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "EdDSA",
];

/// The largest clock skew an operator may allow.
const MAX_LEEWAY_SECONDS: u64 = 300;

/// `[sign_in]`: off (larkgate's own tokens only) while no issuer is configured.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SignInConfig {
    /// The identity providers whose access tokens are accepted.
    #[serde(default)]
    pub issuers: Vec<IssuerConfig>,
}

/// One identity provider.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IssuerConfig {
    /// The issuer identifier: equal, byte for byte, to the `iss` of its tokens.
    pub issuer: String,
    /// The name principals are registered for (`principal add NAME --issuer NAME`); by
    /// default the issuer's host.
    #[serde(default)]
    pub name: Option<String>,
    /// Where its signing keys are published; by default read from its discovery document.
    #[serde(default)]
    pub jwks_uri: Option<String>,
    /// The `aud` its tokens must carry; by default larkgate's resource URL.
    #[serde(default)]
    pub audience: Option<String>,
    /// The signature algorithms accepted.
    #[serde(default = "default_algorithms")]
    pub algorithms: Vec<String>,
    /// The claim whose value (with `principal_prefix` before it) names the principal.
    #[serde(default = "default_principal_claim")]
    pub principal_claim: String,
    /// Put before the claim's value to make the principal's name.
    #[serde(default)]
    pub principal_prefix: String,
    /// The claim listing the account's groups.
    #[serde(default = "default_groups_claim")]
    pub groups_claim: String,
    /// Scopes every token must carry.
    #[serde(default)]
    pub required_scopes: Vec<String>,
    /// Roles each group brings.
    #[serde(default)]
    pub group_roles: BTreeMap<String, Vec<String>>,
    /// Roles each scope brings.
    #[serde(default)]
    pub scope_roles: BTreeMap<String, Vec<String>>,
    /// Clock skew allowed on `exp` and `nbf`, in seconds.
    #[serde(default = "default_leeway")]
    pub leeway_seconds: u64,
    /// The shortest time between two fetches of the keys caused by a token whose key is not
    /// among them (a rotation), in seconds.
    #[serde(default = "default_refetch")]
    pub key_refetch_seconds: u64,
    /// How long fetched keys are used before they are fetched again, in seconds.
    #[serde(default = "default_refresh")]
    pub key_refresh_seconds: u64,
}

fn default_algorithms() -> Vec<String> {
    DEFAULT_ALGORITHMS.iter().map(|a| (*a).to_owned()).collect()
}

fn default_principal_claim() -> String {
    "sub".to_owned()
}

fn default_groups_claim() -> String {
    "groups".to_owned()
}

fn default_leeway() -> u64 {
    60
}

fn default_refetch() -> u64 {
    10
}

fn default_refresh() -> u64 {
    3600
}

/// What is wrong with `text` as the URL of an identity provider's document: `None` for an
/// `https://` URL, or an `http://` one on a loopback address (a key fetched over plain HTTP
/// from elsewhere could be replaced on the way, and with it every sign-in).
pub(crate) fn provider_url_problem(text: &str) -> Option<&'static str> {
    if let Some(problem) = crate::service_url::problem(text) {
        return Some(problem);
    }
    let url = url::Url::parse(text).ok()?;
    let loopback = match url.host() {
        Some(url::Host::Domain(name)) => name.eq_ignore_ascii_case("localhost"),
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        None => false,
    };
    (url.scheme() != "https" && !loopback)
        .then_some("it must start with https:// (http:// only on this machine's loopback)")
}

/// Whether `name` may name an issuer: 1 to 64 of `A-Z a-z 0-9 _ - .` (never `*`, which the
/// store uses for a principal waiting for its first sign-in).
fn is_issuer_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

/// Whether `scope` is a scope token (RFC 6749 §3.3): printable ASCII but space, `"` and `\`.
fn is_scope_token(scope: &str) -> bool {
    !scope.is_empty()
        && scope
            .bytes()
            .all(|b| matches!(b, 0x21 | 0x23..=0x5b | 0x5d..=0x7e))
}

/// `name` as an accepted algorithm, or why it is refused.
pub(crate) fn algorithm(name: &str) -> Result<Algorithm, String> {
    let algorithm: Algorithm = name.parse().map_err(|_| {
        format!(
            "{name:?} is not a signature algorithm larkgate verifies: use one of {}",
            DEFAULT_ALGORITHMS.join(", ")
        )
    })?;
    if algorithm.family() == AlgorithmFamily::Hmac {
        return Err(format!(
            "{name} is refused: an HMAC key is a secret shared with the provider, and a \
             published key must never verify as one; use the provider's asymmetric algorithm \
             ({})",
            DEFAULT_ALGORITHMS.join(", ")
        ));
    }
    Ok(algorithm)
}

impl SignInConfig {
    /// Whether any issuer is configured.
    pub fn enabled(&self) -> bool {
        !self.issuers.is_empty()
    }

    /// Checks every issuer; the error names the key and what to write.
    pub fn validate(&self) -> Result<(), String> {
        let mut seen = BTreeSet::new();
        let mut names = BTreeSet::new();
        for (i, issuer) in self.issuers.iter().enumerate() {
            issuer
                .validate()
                .map_err(|e| format!("sign_in.issuers[{i}].{e}"))?;
            if !seen.insert(issuer.issuer.as_str()) {
                return Err(format!(
                    "sign_in.issuers[{i}].issuer: {:?} is configured twice; merge the two",
                    issuer.issuer
                ));
            }
            if !names.insert(issuer.name()) {
                return Err(format!(
                    "sign_in.issuers[{i}].name: another issuer is named {:?} too (by default an \
                     issuer is named after its host); give each a `name` of its own",
                    issuer.name()
                ));
            }
        }
        Ok(())
    }

    /// The configured issuer named `name`, or what to write instead.
    pub fn named(&self, name: &str) -> Result<&IssuerConfig, String> {
        if let Some(issuer) = self.issuers.iter().find(|i| i.name() == name) {
            return Ok(issuer);
        }
        if self.issuers.is_empty() {
            return Err(format!(
                "no identity provider is configured, so no account can sign in through \
                 {name:?}: add a [[sign_in.issuers]] to the configuration first"
            ));
        }
        let known: Vec<String> = self.issuers.iter().map(IssuerConfig::name).collect();
        Err(format!(
            "no [[sign_in.issuers]] is named {name:?}; the configured issuers are named {}",
            known.join(", ")
        ))
    }

    /// What an operator should hear about how accounts map to principals: one sentence per
    /// issuer whose `principal_prefix` is empty.
    pub fn warnings(&self) -> Vec<String> {
        self.issuers
            .iter()
            .enumerate()
            .filter(|(_, issuer)| issuer.principal_prefix.is_empty())
            .map(|(i, issuer)| {
                format!(
                    "sign_in.issuers[{i}] ({}): principal_prefix is empty, so its accounts map to \
                     plain names that people of other providers or larkgate's own principals \
                     may have; only principals registered with `--issuer {}` accept them, but a \
                     prefix such as \"{}.\" keeps the names apart",
                    issuer.name(),
                    issuer.name(),
                    issuer.name()
                )
            })
            .collect()
    }
}

impl IssuerConfig {
    /// The name principals are registered for: `name`, or the issuer's host.
    pub fn name(&self) -> String {
        if let Some(name) = &self.name {
            return name.clone();
        }
        url::Url::parse(&self.issuer)
            .ok()
            .and_then(|url| url.host_str().map(str::to_owned))
            .unwrap_or_else(|| self.issuer.clone())
    }

    /// The accepted algorithms (validated: never HMAC).
    pub(crate) fn accepted_algorithms(&self) -> Vec<Algorithm> {
        self.algorithms
            .iter()
            .filter_map(|name| algorithm(name).ok())
            .collect()
    }

    fn validate(&self) -> Result<(), String> {
        if let Some(problem) = provider_url_problem(&self.issuer) {
            return Err(format!(
                "issuer: {problem}; write the issuer identifier its tokens carry in `iss`, for \
                 example \"https://login.example.com/realms/acme\""
            ));
        }
        if let Some(name) = &self.name
            && !is_issuer_name(name)
        {
            return Err(format!(
                "name: {name:?} is not an issuer name: use 1 to 64 of A-Z a-z 0-9 _ - ., as in \
                 \"acme\""
            ));
        }
        if let Some(problem) = self.jwks_uri.as_deref().and_then(provider_url_problem) {
            return Err(format!(
                "jwks_uri: {problem}; write where the provider publishes its keys, or leave it \
                 out to read it from the provider's discovery document"
            ));
        }
        if self
            .audience
            .as_deref()
            .is_some_and(|a| a.trim().is_empty())
        {
            return Err(
                "audience: it is empty; leave it out to use larkgate's resource URL".to_owned(),
            );
        }
        if self.algorithms.is_empty() {
            return Err(format!(
                "algorithms: name at least one, for example [\"RS256\"] (the default is {})",
                DEFAULT_ALGORITHMS.join(", ")
            ));
        }
        for name in &self.algorithms {
            algorithm(name).map_err(|e| format!("algorithms: {e}"))?;
        }
        for (key, value) in [
            ("principal_claim", &self.principal_claim),
            ("groups_claim", &self.groups_claim),
        ] {
            if value.trim().is_empty() {
                return Err(format!("{key}: name a claim of the provider's tokens"));
            }
        }
        if !self.principal_prefix.is_empty()
            && !larkgate_platform::identity::is_principal_name(&self.principal_prefix)
        {
            return Err(format!(
                "principal_prefix: {:?} would make names that are not principal names: use \
                 A-Z a-z 0-9 _ - . @",
                self.principal_prefix
            ));
        }
        if self.leeway_seconds > MAX_LEEWAY_SECONDS {
            return Err(format!(
                "leeway_seconds: at most {MAX_LEEWAY_SECONDS} (a larger skew would keep expired \
                 tokens working); fix the clocks instead"
            ));
        }
        if self.key_refetch_seconds == 0 || self.key_refresh_seconds == 0 {
            return Err(
                "key_refetch_seconds and key_refresh_seconds must be at least 1".to_owned(),
            );
        }
        for scope in self.required_scopes.iter().chain(self.scope_roles.keys()) {
            if !is_scope_token(scope) {
                return Err(format!(
                    "required_scopes/scope_roles: {scope:?} is not a scope (printable ASCII \
                     without spaces, quotes or backslashes, RFC 6749 §3.3)"
                ));
            }
        }
        for (key, map) in [
            ("group_roles", &self.group_roles),
            ("scope_roles", &self.scope_roles),
        ] {
            for (name, roles) in map {
                for role in roles {
                    if !larkgate_platform::identity::is_role_name(role) {
                        return Err(format!(
                            "{key}.{name:?}: {role:?} is not a role name: use a-z 0-9 _ -"
                        ));
                    }
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<SignInConfig, String> {
        let config: SignInConfig = toml::from_str(text).map_err(|e| e.to_string())?;
        config.validate().map(|()| config)
    }

    #[test]
    fn an_issuer_takes_safe_defaults() {
        let config = parse("[[issuers]]\nissuer = \"https://idp.example.com\"").unwrap();
        let issuer = &config.issuers[0];
        assert_eq!(issuer.principal_claim, "sub");
        assert_eq!(issuer.groups_claim, "groups");
        assert_eq!(issuer.leeway_seconds, 60);
        assert_eq!(issuer.accepted_algorithms().len(), DEFAULT_ALGORITHMS.len());
        assert!(
            issuer
                .accepted_algorithms()
                .iter()
                .all(|a| a.family() != AlgorithmFamily::Hmac)
        );
        assert!(config.enabled());
        assert!(!parse("").unwrap().enabled());
    }

    #[test]
    fn hostile_or_mistaken_settings_are_refused_with_what_to_write() {
        for (text, says) in [
            ("issuer = \"http://idp.example.com\"", "https://"),
            ("issuer = \"https://idp.example.com?x=1\"", "query"),
            ("issuer = \"https://u:p@idp.example.com\"", "credentials"),
            ("issuer = \"idp\"", "not a URL"),
            (
                "issuer = \"https://idp.example.com\"\njwks_uri = \"http://10.0.0.1/keys\"",
                "jwks_uri",
            ),
            (
                "issuer = \"https://idp.example.com\"\nalgorithms = [\"HS256\"]",
                "HMAC",
            ),
            (
                "issuer = \"https://idp.example.com\"\nalgorithms = [\"none\"]",
                "not a signature algorithm",
            ),
            (
                "issuer = \"https://idp.example.com\"\nalgorithms = []",
                "at least one",
            ),
            (
                "issuer = \"https://idp.example.com\"\nleeway_seconds = 86400",
                "at most 300",
            ),
            (
                "issuer = \"https://idp.example.com\"\nprincipal_prefix = \"a b\"",
                "principal_prefix",
            ),
            (
                "issuer = \"https://idp.example.com\"\nprincipal_claim = \"\"",
                "principal_claim",
            ),
            (
                "issuer = \"https://idp.example.com\"\naudience = \" \"",
                "audience",
            ),
            (
                "issuer = \"https://idp.example.com\"\n[issuers.group_roles]\nops = [\"Admin!\"]",
                "not a role name",
            ),
            (
                "issuer = \"https://idp.example.com\"\nkey_refetch_seconds = 0",
                "at least 1",
            ),
            (
                "issuer = \"https://idp.example.com\"\nissuers = 1",
                "unknown field",
            ),
            (
                "issuer = \"https://idp.example.com\"\nrequired_scopes = [\"a\\\" b\"]",
                "not a scope",
            ),
            (
                "issuer = \"https://idp.example.com\"\n[issuers.scope_roles]\n\"x y\" = []",
                "not a scope",
            ),
            // `*` marks principals waiting for a first sign-in: no issuer may be named so.
            (
                "issuer = \"https://idp.example.com\"\nname = \"*\"",
                "not an issuer name",
            ),
            (
                "issuer = \"https://idp.example.com\"\nname = \"\"",
                "not an issuer name",
            ),
            (
                "issuer = \"https://idp.example.com\"\nname = \"a\\u001b[2J\"",
                "not an issuer name",
            ),
        ] {
            let error = parse(&format!("[[issuers]]\n{text}")).unwrap_err();
            assert!(error.contains(says), "{text}: {error}");
        }
        let twice = "[[issuers]]\nissuer = \"https://a.example\"\n[[issuers]]\nissuer = \"https://a.example\"";
        assert!(parse(twice).unwrap_err().contains("twice"));
        // Two realms of one host are named alike unless each is given a name.
        let realms = "[[issuers]]\nissuer = \"https://login.example/realms/a\"\n\
                      [[issuers]]\nissuer = \"https://login.example/realms/b\"";
        let error = parse(realms).unwrap_err();
        assert!(error.contains("give each a `name`"), "{error}");
        assert!(parse(&format!("{realms}\nname = \"b\"")).is_ok());
    }

    #[test]
    fn an_issuer_is_named_by_its_name_or_host_and_found_by_it() {
        let config = parse(
            "[[issuers]]\nissuer = \"https://login.example.com:8443/realms/acme\"\n\
             principal_prefix = \"acme.\"\n\
             [[issuers]]\nissuer = \"http://[::1]:9000\"\n\
             [[issuers]]\nissuer = \"https://idp.example.org\"\nname = \"partners\"",
        )
        .unwrap();
        let names: Vec<String> = config.issuers.iter().map(IssuerConfig::name).collect();
        assert_eq!(names, ["login.example.com", "[::1]", "partners"]);
        assert_eq!(
            config.named("partners").unwrap().issuer,
            "https://idp.example.org"
        );
        // Not by its URL, nor by a name an issuer's host would have had.
        for unknown in ["https://idp.example.org", "idp.example.org", "*"] {
            let error = config.named(unknown).unwrap_err();
            assert!(
                error.contains("login.example.com, [::1], partners"),
                "{error}"
            );
        }
        let none = parse("").unwrap().named("acme").unwrap_err();
        assert!(none.contains("add a [[sign_in.issuers]]"), "{none}");
        // An issuer without a prefix is warned about; one with a prefix is not.
        let warnings = config.warnings();
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(
            warnings[0].contains("principal_prefix is empty"),
            "{warnings:?}"
        );
        assert!(warnings[1].contains("--issuer partners"), "{warnings:?}");
    }

    #[test]
    fn plain_http_is_accepted_only_on_loopback() {
        for ok in [
            "https://idp.example.com",
            "http://127.0.0.1:8080",
            "http://localhost:8080/realms/x",
            "http://[::1]:8080",
        ] {
            assert_eq!(provider_url_problem(ok), None, "{ok}");
        }
        for bad in [
            "http://idp.example.com",
            "http://10.0.0.1",
            "http://127.0.0.1.example.com",
            "ftp://127.0.0.1",
        ] {
            assert!(provider_url_problem(bad).is_some(), "{bad}");
        }
    }
}
