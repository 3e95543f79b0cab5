//! Bearer tokens: how a network client proves which principal it is.
//!
//! # Threat model
//!
//! A token is a password for a principal. Whoever reads the database (a backup, a stolen
//! disk) must not be able to use the tokens in it; whoever can send requests must not be able
//! to guess one, or to learn one byte at a time from response timings; a token whose
//! principal was removed, that was revoked, or that expired must stop working at once.
//!
//! - A token is `lgt_<id>_<secret>`: a public 12-character id (to find the record without
//!   searching by secret) and a 256-bit secret from the operating system's CSPRNG, both
//!   base64url without padding. It is shown once, when created. An id never starts with `-`,
//!   so it can be passed to a command line (`larkgate token revoke ID`) as it is.
//! - Only SHA-256 of the secret is stored (a 256-bit random secret needs no slow hash: there is
//!   nothing to brute-force). Verification compares hashes in constant time.
//! - Every failure — malformed, unknown id, wrong secret, revoked, expired, principal gone — is
//!   the same [`TokenError::Invalid`] to the caller, so a response does not say which ids exist.
//! - Roles live on the principal, read at every verification: changing a principal's roles
//!   changes what its tokens may do, immediately.

use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use larkgate_store::{Principal, Store, TokenRecord};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// The prefix every larkgate token starts with (recognisable in logs and secret scanners).
pub const TOKEN_PREFIX: &str = "lgt_";

/// Why a token was not accepted.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// Not a token that authenticates anyone now. Deliberately says nothing more.
    #[error("the token is not valid")]
    Invalid,
    /// The store failed (busy, or broken): the caller is told which, never the error's text.
    #[error("tokens could not be read: {0}")]
    Store(#[from] larkgate_store::StoreError),
}

/// A token just created: the only time its text exists.
#[derive(Debug)]
pub struct NewToken {
    /// The whole token, to hand to the client.
    pub token: String,
    /// Its stored record.
    pub record: TokenRecord,
}

/// `bytes` bytes of the operating system's random source, base64url without padding: for
/// secrets (tokens, console sessions, CSRF tokens).
pub fn random(bytes: usize) -> String {
    let mut buffer = vec![0u8; bytes];
    getrandom::fill(&mut buffer).expect("the operating system's random source works");
    URL_SAFE_NO_PAD.encode(buffer)
}

/// A new public token id: 12 base64url characters, never starting with `-` (a command line
/// would read it as an option).
fn new_id() -> String {
    loop {
        let id = random(9);
        if !id.starts_with('-') {
            return id;
        }
    }
}

fn hash(secret: &str) -> String {
    hex::encode(Sha256::digest(secret.as_bytes()))
}

/// Creates and stores a token for `principal`, by `created_by`, valid for `lifetime` (or
/// until revoked).
pub async fn create(
    store: &dyn Store,
    principal: &str,
    created_by: &str,
    lifetime: Option<Duration>,
    now_ms: i64,
) -> Result<NewToken, TokenError> {
    let id = new_id();
    let secret = random(32); // 256 bits
    let record = TokenRecord {
        id: id.clone(),
        principal: principal.to_owned(),
        secret_hash: hash(&secret),
        created_by: created_by.to_owned(),
        created_at_ms: now_ms,
        expires_at_ms: lifetime
            .map(|l| now_ms.saturating_add(i64::try_from(l.as_millis()).unwrap_or(i64::MAX))),
        revoked_at_ms: None,
    };
    store
        .add_token(record.clone())
        .await
        .map_err(TokenError::Store)?;
    Ok(NewToken {
        token: format!("{TOKEN_PREFIX}{id}_{secret}"),
        record,
    })
}

/// Splits a token into its id and secret, checking the form only.
fn parse(token: &str) -> Option<(&str, &str)> {
    let rest = token.strip_prefix(TOKEN_PREFIX)?;
    let (id, secret) = rest.split_at_checked(12)?;
    let secret = secret.strip_prefix('_')?;
    let base64url = |s: &str| {
        s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    };
    (secret.len() == 43 && base64url(id) && base64url(secret)).then_some((id, secret))
}

/// The principal `token` authenticates at `now_ms`, with its roles as they are now.
pub async fn verify(store: &dyn Store, token: &str, now_ms: i64) -> Result<Principal, TokenError> {
    let (id, secret) = parse(token.trim()).ok_or(TokenError::Invalid)?;
    let record = store.token(id).await.map_err(TokenError::Store)?;
    // Hash even when the id is unknown, so both paths take the same time.
    let presented = hash(secret);
    let stored = record
        .as_ref()
        .map_or_else(|| "0".repeat(64), |r| r.secret_hash.clone());
    let matches: bool = presented.as_bytes().ct_eq(stored.as_bytes()).into();
    let record = record.filter(|_| matches).ok_or(TokenError::Invalid)?;
    standing(store, &record, now_ms).await
}

/// The principal of `record` if the token still stands at `now_ms`: not revoked, not expired,
/// its principal still registered (with its roles as they are now).
async fn standing(
    store: &dyn Store,
    record: &TokenRecord,
    now_ms: i64,
) -> Result<Principal, TokenError> {
    if record.revoked_at_ms.is_some() || record.expires_at_ms.is_some_and(|t| t <= now_ms) {
        return Err(TokenError::Invalid);
    }
    store
        .principal(&record.principal)
        .await
        .map_err(TokenError::Store)?
        .ok_or(TokenError::Invalid)
}

/// The principal the token with public id `id` authenticates at `now_ms`, with its roles as
/// they are now, if the token still stands (not revoked, not expired, its principal still
/// registered). For a session that verified the whole token once and must re-check it at every
/// request (the admin console's): a revocation ends such a session at its next request.
pub async fn verify_id(store: &dyn Store, id: &str, now_ms: i64) -> Result<Principal, TokenError> {
    let record = store
        .token(id)
        .await
        .map_err(TokenError::Store)?
        .ok_or(TokenError::Invalid)?;
    standing(store, &record, now_ms).await
}

/// Where a token stands at `now_ms`, as a person reads it (`valid`, `valid until ...`,
/// `expired ...`, `revoked ...`), and whether it still authenticates.
pub fn standing_text(record: &TokenRecord, now_ms: i64) -> (String, bool) {
    use crate::capabilities::rfc3339_from_ms;
    match (record.revoked_at_ms, record.expires_at_ms) {
        (Some(at), _) => (format!("revoked {}", rfc3339_from_ms(at)), false),
        (None, Some(at)) if at <= now_ms => (format!("expired {}", rfc3339_from_ms(at)), false),
        (None, Some(at)) => (format!("valid until {}", rfc3339_from_ms(at)), true),
        (None, None) => ("valid".to_owned(), true),
    }
}

/// The public id of a well-formed `token` (what `verify` looks it up by).
pub fn token_id(token: &str) -> Option<&str> {
    parse(token.trim()).map(|(id, _)| id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_twelve_base64url_characters_and_never_start_with_a_dash() {
        // One random id in 64 would start with `-`; 10,000 draws leave no room for luck.
        for _ in 0..10_000 {
            let id = new_id();
            assert_eq!(id.len(), 12, "{id}");
            assert!(!id.starts_with('-'), "{id}");
            assert!(parse(&format!("{TOKEN_PREFIX}{id}_{}", random(32))).is_some());
        }
    }
}
