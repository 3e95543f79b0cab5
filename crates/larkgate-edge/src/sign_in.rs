//! Sign-in with the organisation's identity provider: larkgate as an OAuth 2.1 resource
//! server, as the MCP authorization specification describes.
//!
//! With `[[sign_in.issuers]]` configured, `/mcp` accepts, beside larkgate's own tokens
//! (`lgt_...`), access tokens the configured providers issue for larkgate: JWTs whose
//! signature verifies with a key the provider publishes, whose `iss` is the provider, whose
//! `aud` is larkgate's resource URL, and that are within `exp`/`nbf` (a small leeway for clock
//! skew). Their claims name a registered larkgate principal ([`mapping`]), whose roles are read
//! from the store at every request, plus the roles the token's groups and scopes map to.
//! Clients find the providers in the protected resource metadata (RFC 9728) that
//! [`metadata`] serves, named by the `WWW-Authenticate` of every 401.
//!
//! # Threat model
//!
//! Whoever can reach `/mcp` may present any string as a token.
//! - **Forged tokens**: only a signature by a key the configured provider publishes makes a
//!   token valid. `alg: none` is not an algorithm the decoder knows; HMAC algorithms are never
//!   accepted (a public key used as an HMAC secret would let anyone sign); the algorithm must
//!   be in the issuer's allow-list, fit the key's type and curve, and equal the key's own
//!   `alg` when it names one. Keys a token carries in its header (`jwk`, `jku`, `x5u`) are
//!   never used.
//! - **Tokens for someone else**: a token issued for another resource (`aud`) or by a provider
//!   that is not configured (`iss`) is refused, so a token a user gave another service cannot
//!   be replayed here; and no client token is ever passed on to an upstream (the platform's
//!   calls to upstreams carry only the upstream's own credentials).
//! - **Accounts that should not get in**: the mapped principal must be registered, of a
//!   person's or a service's kind (never a script's: a provider account named like one does not
//!   borrow a script's authority), and registered *for this issuer* (`principal add NAME
//!   --issuer ISSUER`): a provider's users may choose the claim that names them, so an account
//!   whose `sub` is `admin` must not become the `admin` that holds larkgate's first token, nor
//!   an account of one provider a principal meant for another's. Removing the principal locks
//!   the account out at its next request. A provider-side revocation takes effect when the token expires (`exp`): keep
//!   provider access tokens short-lived.
//! - **Load on the provider**: key fetches are bounded (see [`keys`]).
//! - **What a refusal says**: why the token was refused (expired, wrong audience, ...), never a
//!   key, a claim value beyond the caller's own principal name, or a provider's error text.

pub mod config;
mod keys;
pub mod mapping;
pub mod metadata;

use std::sync::{Arc, Mutex};

use arc_swap::ArcSwapOption;
use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, KeyAlgorithm};
use jsonwebtoken::{Algorithm, AlgorithmFamily, Validation};
use larkgate_platform::envelope::{Code, Refusal};
use larkgate_store::{IssuerBinding, Principal, PrincipalKind, Store};

pub use config::{IssuerConfig, SignInConfig};

use keys::{Key, KeyError, Keys};

/// The longest token looked at; a larger one is refused before it is decoded.
const MAX_TOKEN_BYTES: usize = 16 * 1024;

/// Why an access token was not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Rejection {
    /// The token is not valid here; the reason is safe to tell its bearer.
    #[error("the access token is not accepted: {0}")]
    Invalid(String),
    /// The token lacks scopes every token must carry.
    #[error("the access token lacks the scopes {}", .0.join(" "))]
    InsufficientScope(Vec<String>),
    /// The token is valid, but the principal it names is not registered for its issuer (not
    /// at all, or for no issuer, another issuer, or as a script: the bearer is not told which).
    #[error(
        "signed in as {principal} through {issuer}, which is not a larkgate principal for that provider"
    )]
    NotAPrincipal {
        /// The principal name its claims map to.
        principal: String,
        /// The configured name of its issuer.
        issuer: String,
    },
    /// The token could not be checked: the provider's keys or the store could not be read.
    #[error("{}", .0.message)]
    Unavailable(Refusal),
}

impl Rejection {
    fn invalid(reason: impl Into<String>) -> Self {
        Rejection::Invalid(reason.into())
    }
}

/// One configured provider, ready.
#[derive(Debug)]
struct Issuer {
    config: IssuerConfig,
    /// Its name ([`IssuerConfig::name`]), which principals are registered for.
    name: String,
    algorithms: Vec<Algorithm>,
    audience: String,
    keys: Keys,
}

/// The identity providers in force, read at each request (by authentication, its challenge
/// and the metadata document), and replaced whole when a reload changes `[sign_in]`: a
/// request is checked against the providers in force when it arrived.
#[derive(Clone, Debug, Default)]
pub struct Providers {
    current: Arc<ArcSwapOption<SignIn>>,
    /// The configuration last given, and larkgate's resource URL once the edge is assembled.
    given: Arc<Mutex<(SignInConfig, Option<String>)>>,
}

impl Providers {
    /// `config`'s providers, in force once [`Providers::start`] names the resource.
    pub fn new(config: SignInConfig) -> Self {
        Providers {
            current: Arc::default(),
            given: Arc::new(Mutex::new((config, None))),
        }
    }

    /// The providers in force; `None` when none is configured.
    pub fn current(&self) -> Option<Arc<SignIn>> {
        self.current.load_full()
    }

    /// Puts the providers last given in force, with `resource` as larkgate's resource URL
    /// (the edge does, when it is assembled).
    pub fn start(&self, resource: &str) {
        let mut given = self.given.lock().unwrap_or_else(|p| p.into_inner());
        given.1 = Some(resource.to_owned());
        self.install(&given.0, resource);
    }

    /// Puts `config`'s providers in force for the next request (a reload does), their keys
    /// fetched in the background. Before the edge is assembled, or without one (`larkgate
    /// stdio`), it is kept for [`Providers::start`].
    pub fn replace(&self, config: SignInConfig) {
        let mut given = self.given.lock().unwrap_or_else(|p| p.into_inner());
        given.0 = config;
        if let Some(resource) = &given.1 {
            self.install(&given.0, resource);
        }
    }

    fn install(&self, config: &SignInConfig, resource: &str) {
        let sign_in = SignIn::new(config, resource);
        if let (Some(sign_in), Ok(runtime)) = (&sign_in, tokio::runtime::Handle::try_current()) {
            let sign_in = Arc::clone(sign_in);
            runtime.spawn(async move { sign_in.prefetch().await });
        }
        self.current.store(sign_in);
    }
}

/// The configured providers and larkgate's resource URL.
#[derive(Debug)]
pub struct SignIn {
    issuers: Vec<Issuer>,
    resource: String,
}

impl SignIn {
    /// Sign-in for `config`, with `resource` as larkgate's resource URL (the URL of `/mcp`
    /// clients use); `None` when no issuer is configured.
    pub fn new(config: &SignInConfig, resource: &str) -> Option<Arc<Self>> {
        if !config.enabled() {
            return None;
        }
        let issuers = config
            .issuers
            .iter()
            .map(|issuer| Issuer {
                algorithms: issuer.accepted_algorithms(),
                audience: issuer
                    .audience
                    .clone()
                    .unwrap_or_else(|| resource.to_owned()),
                keys: Keys::new(issuer),
                name: issuer.name(),
                config: issuer.clone(),
            })
            .collect();
        Some(Arc::new(SignIn {
            issuers,
            resource: resource.to_owned(),
        }))
    }

    /// larkgate's resource URL.
    pub fn resource(&self) -> &str {
        &self.resource
    }

    /// The providers' issuer identifiers, in configuration order.
    pub fn issuers(&self) -> impl Iterator<Item = &str> {
        self.issuers.iter().map(|i| i.config.issuer.as_str())
    }

    /// Every scope a client may ask for: the required ones and those that bring roles.
    pub fn scopes(&self) -> Vec<String> {
        let mut scopes: Vec<String> = self
            .issuers
            .iter()
            .flat_map(|i| {
                i.config
                    .required_scopes
                    .iter()
                    .chain(i.config.scope_roles.keys())
                    .cloned()
            })
            .collect();
        scopes.sort();
        scopes.dedup();
        scopes
    }

    /// The scopes every token must carry (of every provider: a challenge names them all).
    pub fn required_scopes(&self) -> Vec<String> {
        let mut scopes: Vec<String> = self
            .issuers
            .iter()
            .flat_map(|i| i.config.required_scopes.iter().cloned())
            .collect();
        scopes.sort();
        scopes.dedup();
        scopes
    }

    /// Fetches every provider's keys, so the first sign-in does not wait for them.
    pub async fn prefetch(&self) {
        for issuer in &self.issuers {
            issuer.keys.prefetch().await;
        }
    }

    /// The principal `token` signs in as, with its roles as they are now: the store's and
    /// those its groups and scopes map to.
    /// (`server`: the virtual server the request is made to, whose own resource URL is an
    /// audience accepted beside the issuer's: see [`metadata`].)
    pub async fn verify(
        &self,
        store: &dyn Store,
        token: &str,
        server: Option<&str>,
    ) -> Result<Principal, Rejection> {
        let token = token.trim();
        if token.len() > MAX_TOKEN_BYTES {
            return Err(Rejection::invalid("it is longer than any access token"));
        }
        let header = jsonwebtoken::decode_header(token).map_err(|_| {
            Rejection::invalid(
                "it is not a signed JWT (unsigned tokens, `alg: none` and unknown algorithms \
                 are refused)",
            )
        })?;
        // The issuer only chooses which provider's keys and rules apply; the signature and
        // then `iss` itself are checked against that provider below.
        #[derive(serde::Deserialize)]
        struct Unverified {
            iss: Option<serde_json::Value>,
        }
        let claimed: Unverified = jsonwebtoken::dangerous::insecure_decode_claims(token)
            .map_err(|_| Rejection::invalid("its claims are not a JSON object"))?;
        let issuer = claimed
            .iss
            .as_ref()
            .and_then(|iss| iss.as_str())
            .and_then(|iss| self.issuers.iter().find(|i| i.config.issuer == iss))
            .ok_or_else(|| Rejection::invalid("it was not issued by a provider larkgate trusts"))?;
        if !issuer.algorithms.contains(&header.alg) {
            return Err(Rejection::invalid(format!(
                "it is signed with {:?}, which larkgate does not accept from this provider",
                header.alg
            )));
        }
        let key = issuer
            .keys
            .key(header.kid.as_deref())
            .await
            .map_err(|error| match error {
                KeyError::Unknown => Rejection::invalid(
                    "it is signed with a key the provider does not publish (sign in again)",
                ),
                KeyError::Unavailable(detail) => Rejection::Unavailable(
                    Refusal::logged(
                        Code::UpstreamUnavailable,
                        "the identity provider's signing keys could not be fetched, so the \
                         access token could not be checked",
                        detail,
                    )
                    .with_hint("try again shortly; the operator's log has the cause"),
                ),
            })?;
        if !key_fits(&key, header.alg) {
            return Err(Rejection::invalid(
                "its algorithm does not fit the provider's key",
            ));
        }
        let mut validation = Validation::new(header.alg);
        validation.set_issuer(&[&issuer.config.issuer]);
        let server_audience = server.map(|name| metadata::server_resource(&self.resource, name));
        match &server_audience {
            Some(own) => validation.set_audience(&[issuer.audience.as_str(), own.as_str()]),
            None => validation.set_audience(&[&issuer.audience]),
        }
        validation.set_required_spec_claims(&["exp", "iss", "aud"]);
        validation.leeway = issuer.config.leeway_seconds;
        validation.validate_nbf = true;
        let claims = jsonwebtoken::decode::<serde_json::Map<String, serde_json::Value>>(
            token,
            &key.decoding,
            &validation,
        )
        .map_err(|error| {
            let accepted = match &server_audience {
                Some(own) => format!("{} or {own}", issuer.audience),
                None => issuer.audience.clone(),
            };
            Rejection::Invalid(explain(&error, &accepted))
        })?
        .claims;
        let mapped = mapping::map(&issuer.config, &claims)?;
        let stored = store.principal(&mapped.principal).await.map_err(|error| {
            Rejection::Unavailable(Refusal::store(
                "the access token could not be checked",
                error,
            ))
        })?;
        let name = issuer.name.as_str();
        let not_a_principal = || Rejection::NotAPrincipal {
            principal: mapped.principal.clone(),
            issuer: name.to_owned(),
        };
        let Some(mut principal) = stored else {
            return Err(not_a_principal());
        };
        if principal.kind == PrincipalKind::Script {
            return Err(not_a_principal());
        }
        match &principal.issuer {
            IssuerBinding::Issuer(bound) if bound == name => {}
            IssuerBinding::FirstSignIn => {
                let bound = store
                    .bind_at_first_sign_in(&principal.id, name)
                    .await
                    .map_err(|error| {
                        Rejection::Unavailable(Refusal::store(
                            "the access token could not be checked",
                            error,
                        ))
                    })?;
                // Another sign-in (through another issuer) or an operator bound it first.
                if !bound {
                    return Err(not_a_principal());
                }
                tracing::info!(
                    principal = %principal.id,
                    issuer = name,
                    "a principal registered before principals were bound to issuers signed in: \
                     it is now bound to this issuer (change it with `larkgate principal \
                     set-issuer`)"
                );
                principal.issuer = IssuerBinding::Issuer(name.to_owned());
            }
            other => {
                tracing::info!(
                    principal = %principal.id,
                    issuer = name,
                    bound = %other,
                    "an account of this issuer maps to a principal that is not registered for \
                     it: refused"
                );
                return Err(not_a_principal());
            }
        }
        principal.roles.extend(mapped.roles);
        principal.roles.sort();
        principal.roles.dedup();
        Ok(principal)
    }
}

/// Whether `key` may verify a signature made with `algorithm`: the key's type and curve fit
/// the algorithm, and a key that names its algorithm names this one.
fn key_fits(key: &Key, algorithm: Algorithm) -> bool {
    if let Some(named) = key.jwk.common.key_algorithm
        && named_algorithm(named) != Some(algorithm)
    {
        return false;
    }
    match (&key.jwk.algorithm, algorithm.family()) {
        (AlgorithmParameters::RSA(_), AlgorithmFamily::Rsa) => true,
        (AlgorithmParameters::EllipticCurve(ec), AlgorithmFamily::Ec) => matches!(
            (&ec.curve, algorithm),
            (EllipticCurve::P256, Algorithm::ES256) | (EllipticCurve::P384, Algorithm::ES384)
        ),
        (AlgorithmParameters::OctetKeyPair(okp), AlgorithmFamily::Ed) => {
            okp.curve == EllipticCurve::Ed25519
        }
        _ => false,
    }
}

/// The signature algorithm a key's `alg` names (`None`: an encryption or unknown one).
fn named_algorithm(named: KeyAlgorithm) -> Option<Algorithm> {
    Some(match named {
        KeyAlgorithm::RS256 => Algorithm::RS256,
        KeyAlgorithm::RS384 => Algorithm::RS384,
        KeyAlgorithm::RS512 => Algorithm::RS512,
        KeyAlgorithm::PS256 => Algorithm::PS256,
        KeyAlgorithm::PS384 => Algorithm::PS384,
        KeyAlgorithm::PS512 => Algorithm::PS512,
        KeyAlgorithm::ES256 => Algorithm::ES256,
        KeyAlgorithm::ES384 => Algorithm::ES384,
        KeyAlgorithm::EdDSA => Algorithm::EdDSA,
        KeyAlgorithm::HS256 => Algorithm::HS256,
        KeyAlgorithm::HS384 => Algorithm::HS384,
        KeyAlgorithm::HS512 => Algorithm::HS512,
        _ => return None,
    })
}

/// Why `error` refused a token, in words its bearer can act on (`audience`: what is accepted).
fn explain(error: &jsonwebtoken::errors::Error, audience: &str) -> String {
    use jsonwebtoken::errors::ErrorKind;
    match error.kind() {
        ErrorKind::ExpiredSignature => "it has expired (sign in again)".to_owned(),
        ErrorKind::ImmatureSignature => "it is not valid yet (`nbf` is in the future)".to_owned(),
        ErrorKind::InvalidAudience => {
            format!("it was issued for another audience; larkgate accepts tokens for {audience}")
        }
        ErrorKind::InvalidIssuer => "it was not issued by a provider larkgate trusts".to_owned(),
        ErrorKind::InvalidSignature => "its signature does not verify".to_owned(),
        ErrorKind::MissingRequiredClaim(claim)
            if matches!(claim.as_str(), "exp" | "iss" | "aud") =>
        {
            format!("it has no `{claim}` claim")
        }
        ErrorKind::InvalidAlgorithm | ErrorKind::InvalidKeyFormat => {
            "its algorithm does not fit the provider's key".to_owned()
        }
        _ => "it is malformed".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(jwk: serde_json::Value) -> Key {
        let jwk: jsonwebtoken::jwk::Jwk = serde_json::from_value(jwk).unwrap();
        let decoding = jsonwebtoken::DecodingKey::from_jwk(&jwk).unwrap();
        Key { jwk, decoding }
    }

    #[test]
    fn an_algorithm_must_fit_the_keys_type_curve_and_named_algorithm() {
        let b64 = "AQAB";
        let coordinate = "f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU";
        let rsa = key(serde_json::json!({"kty": "RSA", "n": b64, "e": b64}));
        let rs384 = key(serde_json::json!({"kty": "RSA", "alg": "RS384", "n": b64, "e": b64}));
        let p256 =
            key(serde_json::json!({"kty": "EC", "crv": "P-256", "x": coordinate, "y": coordinate}));
        let p384 =
            key(serde_json::json!({"kty": "EC", "crv": "P-384", "x": coordinate, "y": coordinate}));
        let ed = key(serde_json::json!({"kty": "OKP", "crv": "Ed25519", "x": coordinate}));
        let oct = key(serde_json::json!({"kty": "oct", "k": "c2VjcmV0"}));
        use Algorithm::*;
        for (key, fits, refused) in [
            (
                &rsa,
                &[RS256, RS384, RS512, PS256, PS384, PS512][..],
                &[ES256, ES384, EdDSA, HS256][..],
            ),
            (&rs384, &[RS384], &[RS256, PS384, ES384, HS384]),
            (&p256, &[ES256], &[ES384, RS256, EdDSA, HS256]),
            (&p384, &[ES384], &[ES256, RS256, EdDSA]),
            (&ed, &[EdDSA], &[ES256, RS256, HS256]),
            // A shared secret published as a key verifies nothing, HMAC included.
            (&oct, &[], &[HS256, HS384, HS512, RS256]),
        ] {
            for algorithm in fits {
                assert!(
                    key_fits(key, *algorithm),
                    "{key:?} should verify {algorithm:?}"
                );
            }
            for algorithm in refused {
                assert!(
                    !key_fits(key, *algorithm),
                    "{key:?} must not verify {algorithm:?}"
                );
            }
        }
    }

    #[test]
    fn each_refusal_reason_says_what_to_do_and_nothing_of_the_library() {
        use jsonwebtoken::errors::ErrorKind;
        for (kind, says) in [
            (ErrorKind::ExpiredSignature, "expired"),
            (ErrorKind::ImmatureSignature, "not valid yet"),
            (ErrorKind::InvalidAudience, "https://gw.example/mcp"),
            (
                ErrorKind::InvalidIssuer,
                "not issued by a provider larkgate trusts",
            ),
            (ErrorKind::InvalidSignature, "signature does not verify"),
            (
                ErrorKind::MissingRequiredClaim("exp".into()),
                "no `exp` claim",
            ),
            (
                ErrorKind::MissingRequiredClaim("x\u{1b}[31m".into()),
                "malformed",
            ),
            (ErrorKind::InvalidAlgorithm, "does not fit"),
            (ErrorKind::InvalidToken, "malformed"),
        ] {
            let text = explain(&kind.into(), "https://gw.example/mcp");
            assert!(text.contains(says), "{text}");
            assert!(
                !text.contains("Error") && !text.contains('\u{1b}'),
                "{text}"
            );
        }
    }
}
