//! From a verified token's claims to a larkgate principal's name and the roles its groups and
//! scopes bring.
//!
//! - The principal is `principal_prefix` followed by the value of `principal_claim` (`sub` by
//!   default), which must be a string that makes a principal name (`A-Z a-z 0-9 _ - . @`, at
//!   most 64 characters): anything else is refused, never cleaned up into another name.
//! - Groups are the `groups_claim` claim: a list of strings, or one string. Each group named
//!   in `group_roles` brings its roles.
//! - Scopes are `scope` (space-separated, RFC 8693/9068) or `scp` (a list or a string, as some
//!   providers write it). Each scope named in `scope_roles` brings its roles, and every one in
//!   `required_scopes` must be there.
//!
//! A claim larger than the caps below is refused, so a token cannot make this step slow.

use serde_json::{Map, Value};

use super::Rejection;
use super::config::IssuerConfig;

/// The most groups or scopes read from one token.
const MAX_ENTRIES: usize = 1000;

/// What a token's claims map to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapped {
    /// The principal's name.
    pub principal: String,
    /// The roles its groups and scopes bring (sorted, unique).
    pub roles: Vec<String>,
}

/// The principal and roles `claims` map to under `config`.
pub fn map(config: &IssuerConfig, claims: &Map<String, Value>) -> Result<Mapped, Rejection> {
    let claim = &config.principal_claim;
    let value = claims
        .get(claim)
        .and_then(Value::as_str)
        .filter(|v| !v.is_empty())
        .ok_or_else(|| {
            Rejection::Invalid(format!("it has no `{claim}` claim naming the account"))
        })?;
    let principal = format!("{}{value}", config.principal_prefix);
    if !larkgate_platform::identity::is_principal_name(&principal) {
        return Err(Rejection::Invalid(format!(
            "its `{claim}` claim does not make a principal name (1 to 64 of A-Z a-z 0-9 _ - . @)"
        )));
    }
    let groups = strings(claims.get(&config.groups_claim), false).ok_or_else(|| {
        Rejection::Invalid(format!(
            "its `{}` claim is not a list of names",
            config.groups_claim
        ))
    })?;
    let scopes = match (claims.get("scope"), claims.get("scp")) {
        (Some(scope), _) => strings(Some(scope), true),
        (None, scp) => strings(scp, true),
    }
    .ok_or_else(|| Rejection::Invalid("its scopes are not a list of names".to_owned()))?;
    let missing: Vec<String> = config
        .required_scopes
        .iter()
        .filter(|s| !scopes.contains(s))
        .cloned()
        .collect();
    if !missing.is_empty() {
        return Err(Rejection::InsufficientScope(missing));
    }
    let mut roles: Vec<String> = groups
        .iter()
        .filter_map(|g| config.group_roles.get(g))
        .chain(scopes.iter().filter_map(|s| config.scope_roles.get(s)))
        .flatten()
        .cloned()
        .collect();
    roles.sort();
    roles.dedup();
    Ok(Mapped { principal, roles })
}

/// A claim as a list of names: absent is empty; a list of strings, or one string (split at
/// spaces when `spaced`). `None` for anything else or more than [`MAX_ENTRIES`].
fn strings(value: Option<&Value>, spaced: bool) -> Option<Vec<String>> {
    let list: Vec<String> = match value {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(s)) if spaced => s.split_whitespace().map(str::to_owned).collect(),
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(items)) => items
            .iter()
            .map(|item| item.as_str().map(str::to_owned))
            .collect::<Option<_>>()?,
        Some(_) => return None,
    };
    (list.len() <= MAX_ENTRIES).then_some(list)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(extra: &str) -> IssuerConfig {
        toml::from_str(&format!("issuer = \"https://idp.example.com\"\n{extra}")).unwrap()
    }

    fn claims(json: serde_json::Value) -> Map<String, Value> {
        json.as_object().unwrap().clone()
    }

    #[test]
    fn claims_name_the_principal_and_bring_the_mapped_roles() {
        let config = config(
            "principal_claim = \"email\"\nrequired_scopes = [\"mcp\"]\n\
             [group_roles]\nops = [\"admin\"]\nreviewers = [\"approver\", \"publisher\"]\n\
             [scope_roles]\n\"larkgate.author\" = [\"author\"]",
        );
        let mapped = map(
            &config,
            &claims(serde_json::json!({
                "sub": "00u1", "email": "ada@example.com",
                "groups": ["reviewers", "unmapped"], "scope": "mcp larkgate.author openid"
            })),
        )
        .unwrap();
        assert_eq!(mapped.principal, "ada@example.com");
        assert_eq!(mapped.roles, ["approver", "author", "publisher"]);
        // `scp` as a list, one group as a string.
        let mapped = map(
            &config,
            &claims(serde_json::json!({"email": "a@x", "groups": "ops", "scp": ["mcp"]})),
        )
        .unwrap();
        assert_eq!(mapped.roles, ["admin"]);
    }

    #[test]
    fn a_prefix_goes_before_the_claim() {
        let config = config("principal_prefix = \"acme.\"");
        let mapped = map(&config, &claims(serde_json::json!({"sub": "00u1"}))).unwrap();
        assert_eq!(mapped.principal, "acme.00u1");
        assert!(mapped.roles.is_empty());
    }

    #[test]
    fn hostile_claims_are_refused_never_cleaned_into_another_name() {
        let plain = config("");
        let scoped = config("required_scopes = [\"mcp\", \"larkgate\"]");
        let many: Vec<String> = (0..=MAX_ENTRIES).map(|i| format!("g{i}")).collect();
        for (config, claims_json, says) in [
            (&plain, serde_json::json!({}), "no `sub` claim"),
            (&plain, serde_json::json!({"sub": ""}), "no `sub` claim"),
            (&plain, serde_json::json!({"sub": 7}), "no `sub` claim"),
            (
                &plain,
                serde_json::json!({"sub": ["ada"]}),
                "no `sub` claim",
            ),
            (
                &plain,
                serde_json::json!({"sub": "script:greet"}),
                "principal name",
            ),
            (
                &plain,
                serde_json::json!({"sub": "ada admin"}),
                "principal name",
            ),
            (
                &plain,
                serde_json::json!({"sub": "ada\nadmin"}),
                "principal name",
            ),
            (
                &plain,
                serde_json::json!({"sub": "a".repeat(65)}),
                "principal name",
            ),
            (
                &plain,
                serde_json::json!({"sub": "larkgate/../admin"}),
                "principal name",
            ),
            (
                &plain,
                serde_json::json!({"sub": "ada", "groups": {"ops": true}}),
                "not a list",
            ),
            (
                &plain,
                serde_json::json!({"sub": "ada", "groups": [1]}),
                "not a list",
            ),
            (
                &plain,
                serde_json::json!({"sub": "ada", "groups": many}),
                "not a list",
            ),
            (
                &plain,
                serde_json::json!({"sub": "ada", "scope": 5}),
                "scopes",
            ),
        ] {
            let error = map(config, &claims(claims_json.clone())).unwrap_err();
            assert!(error.to_string().contains(says), "{claims_json}: {error}");
        }
        assert_eq!(
            map(
                &scoped,
                &claims(serde_json::json!({"sub": "ada", "scope": "mcp"}))
            )
            .unwrap_err(),
            Rejection::InsufficientScope(vec!["larkgate".to_owned()])
        );
        // A scope is a whole word: `mcpx` is not `mcp`.
        assert!(
            map(
                &scoped,
                &claims(serde_json::json!({"sub": "ada", "scope": "mcpx larkgatey"}))
            )
            .is_err()
        );
    }
}
