//! Secrets written into the configuration file itself.
//!
//! # Threat model
//!
//! A configuration file is often committed to a repository, copied between machines, attached
//! to a support request or readable by more people than the gateway's credentials should be.
//! So a credential in it is refused where larkgate offers a way to keep it out — as
//! `store.password` is:
//!
//! - an upstream's header whose name says it carries a credential (`Authorization`,
//!   `Proxy-Authorization`, `Cookie`, or a name with `key`, `token`, `secret`, `password`,
//!   `auth`, `session` or `credential` in it), a command-launched upstream's variable so named,
//!   and an OAuth `client_secret`, each unless its value is read from the environment
//!   (`${VAR}`); the header can also be left out and supplied by
//!   `LARKGATE_UPSTREAM_<ALIAS>_<HEADER>`;
//! - an upstream URL's password (`https://user:PASSWORD@host`) or query parameter so named
//!   (`?api_key=...`), for which the file has no `${VAR}`, is warned about instead: such an
//!   upstream is better added with `larkgate upstream add`, which keeps it in the store and
//!   shows its URL redacted.
//!
//! A value is taken as read from the environment when it contains `${`: what the variable
//! holds is never looked at here. The messages name the key, never the value.

use larkgate_upstream::config::UpstreamConfig;

/// The words that mark a header, variable or query parameter as carrying a credential.
const SECRET_WORDS: &[&str] = &[
    "key",
    "token",
    "secret",
    "password",
    "passwd",
    "auth",
    "session",
    "credential",
    "cookie",
];

/// Whether a header, variable or parameter named `name` carries a credential.
fn names_a_secret(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    SECRET_WORDS.iter().any(|word| name.contains(word))
}

/// Whether `value` is written into the file rather than read from the environment.
fn literal(value: &str) -> bool {
    !value.trim().is_empty() && !value.contains("${")
}

/// The first credential written into the file among `upstreams`' headers, variables and
/// OAuth secrets, as an error naming where it is and what to write instead.
pub(crate) fn refuse_literal(upstreams: &[UpstreamConfig]) -> Result<(), String> {
    for upstream in upstreams {
        let alias = &upstream.alias;
        for (name, value) in &upstream.headers {
            if names_a_secret(name) && literal(value) {
                return Err(format!(
                    "upstream {alias:?}: the header {name} holds a credential written into the \
                     file: read it from the environment (headers = {{ {name} = \"... \
                     ${{VARIABLE}}\" }}), or leave it out and set {}",
                    larkgate_upstream::config::header_override(alias, name)
                ));
            }
        }
        for (name, value) in &upstream.env {
            if names_a_secret(name) && literal(value) {
                return Err(format!(
                    "upstream {alias:?}: env.{name} holds a credential written into the file: \
                     read it from larkgate's environment (env = {{ {name} = \
                     \"${{VARIABLE}}\" }})"
                ));
            }
        }
        if let Some(secret) = upstream
            .oauth
            .as_ref()
            .and_then(|o| o.client_secret.as_ref())
            && literal(secret)
        {
            return Err(format!(
                "upstream {alias:?}: oauth.client_secret is written into the file: read it from \
                 the environment (client_secret = \"${{VARIABLE}}\")"
            ));
        }
    }
    Ok(())
}

/// A warning for each upstream URL in the file that carries a password or a credential in its
/// query.
pub(crate) fn url_warnings(upstreams: &[UpstreamConfig]) -> Vec<String> {
    let mut warnings = Vec::new();
    for upstream in upstreams {
        let Some(parsed) = upstream
            .url
            .as_deref()
            .and_then(|u| url::Url::parse(u).ok())
        else {
            continue;
        };
        let in_query: Vec<String> = parsed
            .query_pairs()
            .filter(|(name, value)| names_a_secret(name) && literal(value))
            .map(|(name, _)| name.into_owned())
            .collect();
        let what = match (parsed.password().is_some(), in_query.is_empty()) {
            (false, true) => continue,
            (true, _) => "a password".to_owned(),
            (false, false) => format!("a credential in its query ({})", in_query.join(", ")),
        };
        warnings.push(format!(
            "upstream {:?}: its URL in the file carries {what}: anyone who reads the file has \
             it; add the upstream with `larkgate upstream add` instead (kept in the store, its \
             URL shown redacted), or have the server take the credential in a header read \
             from the environment",
            upstream.alias
        ));
    }
    warnings
}

#[cfg(test)]
mod tests {
    use super::*;

    fn upstream(text: &str) -> UpstreamConfig {
        toml::from_str(&format!("alias = \"u\"\n{text}")).unwrap()
    }

    /// Each way a credential can be written into the file, and the ways that are not one.
    #[test]
    fn credentials_written_into_the_file_are_refused_and_those_from_the_environment_pass() {
        let refused = [
            "url = \"https://x.example/mcp\"\nheaders = { Authorization = \"Bearer abc123\" }",
            "url = \"https://x.example/mcp\"\nheaders = { authorization = \"abc\" }",
            "url = \"https://x.example/mcp\"\nheaders = { X-Api-Key = \"k-123\" }",
            "url = \"https://x.example/mcp\"\nheaders = { Cookie = \"sid=1\" }",
            "url = \"https://x.example/mcp\"\nheaders = { X-Session = \"s\" }",
            "command = [\"srv\"]\nenv = { GITHUB_TOKEN = \"ghp_x\" }",
            "url = \"https://x.example/mcp\"\n[oauth]\nclient_id = \"c\"\nclient_secret = \"s3cr3t\"",
        ];
        for text in refused {
            let error = refuse_literal(&[upstream(text)]).unwrap_err();
            for value in ["abc123", "k-123", "sid=1", "ghp_x", "s3cr3t"] {
                assert!(
                    !error.contains(value),
                    "the message repeats the secret: {error}"
                );
            }
            assert!(error.contains("upstream \"u\""), "{error}");
        }
        let passed = [
            "url = \"https://x.example/mcp\"\nheaders = { Authorization = \"Bearer ${TOKEN}\" }",
            "url = \"https://x.example/mcp\"\nheaders = { Accept-Language = \"en\" }",
            "url = \"https://x.example/mcp\"\nheaders = { Authorization = \"\" }",
            "command = [\"srv\"]\nenv = { LOG_LEVEL = \"debug\", API_KEY = \"${FS_KEY}\" }",
            "url = \"https://x.example/mcp\"\n[oauth]\nclient_id = \"c\"\nclient_secret = \"${S}\"",
        ];
        for text in passed {
            assert_eq!(refuse_literal(&[upstream(text)]), Ok(()), "{text}");
        }
    }

    #[test]
    fn a_url_with_a_password_or_a_key_in_its_query_is_warned_about_without_repeating_it() {
        let warned = [
            "url = \"https://me:hunter2@x.example/mcp\"",
            "url = \"https://x.example/mcp?api_key=hunter2\"",
            "url = \"https://x.example/mcp?region=eu&token=hunter2\"",
        ];
        for text in warned {
            let warnings = url_warnings(&[upstream(text)]);
            assert_eq!(warnings.len(), 1, "{text}");
            assert!(!warnings[0].contains("hunter2"), "{}", warnings[0]);
        }
        for text in [
            "url = \"https://x.example/mcp?region=eu\"",
            "command = [\"srv\"]",
        ] {
            assert!(url_warnings(&[upstream(text)]).is_empty(), "{text}");
        }
    }
}
