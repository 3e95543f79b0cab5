//! The credentials of OAuth-protected upstreams, sealed before they reach the store.
//!
//! # Threat model
//!
//! An upstream's OAuth credentials (access and refresh tokens, the client registration) are
//! bearer secrets for someone else's server. The store holding them may be read by people who
//! should not use them: a backup, a copy of the data directory, another replica's database
//! administrator. So larkgate seals them with AES-256-GCM (aws-lc-rs, the cryptography rustls
//! already brings into the build) under a key the operator provides, and the store only ever
//! holds the sealed bytes:
//!
//! - **Confidentiality and integrity**: a fresh random 96-bit nonce per seal; a changed byte, a
//!   wrong key or a truncated record fails to open (as "cannot be opened", never as garbage).
//! - **Binding**: the associated data is the format version and the upstream's alias, so a
//!   record copied onto another upstream's row does not open there (one upstream's tokens
//!   cannot be sent to another's server by swapping rows).
//! - **The key** comes from `LARKGATE_CREDENTIAL_KEY` (the base64 of 32 random bytes, e.g.
//!   `openssl rand -base64 32`) or a file that only its owner may read
//!   (`LARKGATE_CREDENTIAL_KEY_FILE`). It is never logged,
//!   printed or stored; its `Debug` form is redacted. Without a key an OAuth upstream is down
//!   with that cause: nothing is ever stored unsealed.
//!
//! Limits, stated honestly: with random nonces one key should seal fewer than 2^32 records
//! (token refreshes are far rarer); there is no key rotation yet (a new key means signing in
//! again); whoever holds the key and the store holds the tokens.

use std::path::Path;
use std::sync::Arc;

use aws_lc_rs::aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use aws_lc_rs::rand::{SecureRandom, SystemRandom};
use base64::Engine;
use larkgate_store::{Store, UpstreamCredentials};
use rmcp::transport::auth::{AuthError, CredentialStore, StoredCredentials};

/// The environment variable that holds the credential key.
pub const KEY_VARIABLE: &str = "LARKGATE_CREDENTIAL_KEY";

/// The environment variable that names a file holding the credential key.
pub const KEY_FILE_VARIABLE: &str = "LARKGATE_CREDENTIAL_KEY_FILE";

/// The first byte of a sealed record: its format.
const VERSION: u8 = 1;

/// Why credentials could not be sealed, opened or keyed.
#[derive(Debug, thiserror::Error)]
pub enum CredentialError {
    /// The key is not the base64 of 32 bytes.
    #[error(
        "the credential key is not the base64 of 32 bytes ({0}); make one with \
         `openssl rand -base64 32`"
    )]
    BadKey(String),
    /// The key file cannot be used.
    #[error("the credential key file {path}: {reason}")]
    KeyFile {
        /// The file.
        path: String,
        /// What is wrong with it.
        reason: String,
    },
    /// No key was given.
    #[error(
        "OAuth credentials need a key to be sealed with: set {KEY_VARIABLE} (the base64 of 32 \
         random bytes, `openssl rand -base64 32`) or {KEY_FILE_VARIABLE} (a file only its owner \
         may read that holds one)"
    )]
    NoKey,
    /// A sealed record did not open: another key, another upstream's record, or damage.
    #[error(
        "the stored credentials of {alias:?} cannot be opened with this credential key (another \
         key sealed them, or they were changed); sign in again with `larkgate upstream login \
         {alias}`"
    )]
    Unopenable {
        /// The upstream.
        alias: String,
    },
    /// The system's random source failed.
    #[error("no random nonce could be drawn for sealing")]
    Random,
}

/// The operator's credential key. See the module documentation.
pub struct CredentialKey(LessSafeKey);

impl std::fmt::Debug for CredentialKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CredentialKey(<redacted>)")
    }
}

impl CredentialKey {
    /// A key from the base64 (standard alphabet, padding optional) of 32 bytes.
    pub fn from_base64(text: &str) -> Result<Self, CredentialError> {
        let text = text.trim();
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(text)
            .or_else(|_| base64::engine::general_purpose::STANDARD_NO_PAD.decode(text))
            .map_err(|_| CredentialError::BadKey("it is not base64".into()))?;
        if bytes.len() != 32 {
            return Err(CredentialError::BadKey(format!(
                "it decodes to {} bytes",
                bytes.len()
            )));
        }
        let key = UnboundKey::new(&AES_256_GCM, &bytes)
            .map_err(|_| CredentialError::BadKey("it was refused".into()))?;
        Ok(CredentialKey(LessSafeKey::new(key)))
    }

    /// The key in [`KEY_VARIABLE`], if it is set.
    pub fn from_env() -> Result<Option<Self>, CredentialError> {
        match std::env::var(KEY_VARIABLE) {
            Ok(text) if !text.trim().is_empty() => Self::from_base64(&text).map(Some),
            _ => Ok(None),
        }
    }

    /// The operator's key: [`KEY_VARIABLE`], else the file [`KEY_FILE_VARIABLE`] names;
    /// [`CredentialError::NoKey`] when neither is set.
    pub fn from_environment() -> Result<Self, CredentialError> {
        if let Some(key) = Self::from_env()? {
            return Ok(key);
        }
        match std::env::var_os(KEY_FILE_VARIABLE) {
            Some(path) if !path.is_empty() => Self::from_file(Path::new(&path)),
            _ => Err(CredentialError::NoKey),
        }
    }

    /// The key in `path`, a file only its owner may read or write.
    pub fn from_file(path: &Path) -> Result<Self, CredentialError> {
        let failed = |reason: String| CredentialError::KeyFile {
            path: path.display().to_string(),
            reason,
        };
        let metadata = std::fs::metadata(path).map_err(|e| failed(e.to_string()))?;
        use std::os::unix::fs::PermissionsExt;
        let mode = metadata.permissions().mode();
        if mode & 0o077 != 0 {
            return Err(failed(format!(
                "others may read or write it (mode {:o}); chmod 600 it",
                mode & 0o777
            )));
        }
        let text = std::fs::read_to_string(path).map_err(|e| failed(e.to_string()))?;
        Self::from_base64(&text)
    }

    /// `plaintext` sealed for upstream `alias`: the version, a random nonce, the ciphertext
    /// and its tag.
    pub fn seal(&self, alias: &str, plaintext: &[u8]) -> Result<Vec<u8>, CredentialError> {
        let mut nonce = [0u8; NONCE_LEN];
        SystemRandom::new()
            .fill(&mut nonce)
            .map_err(|_| CredentialError::Random)?;
        let mut body = plaintext.to_vec();
        self.0
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(associated(alias)),
                &mut body,
            )
            .map_err(|_| CredentialError::Random)?;
        let mut sealed = Vec::with_capacity(1 + NONCE_LEN + body.len());
        sealed.push(VERSION);
        sealed.extend_from_slice(&nonce);
        sealed.extend_from_slice(&body);
        Ok(sealed)
    }

    /// Opens what [`CredentialKey::seal`] sealed for `alias`.
    pub fn open(&self, alias: &str, sealed: &[u8]) -> Result<Vec<u8>, CredentialError> {
        let unopenable = || CredentialError::Unopenable {
            alias: alias.to_owned(),
        };
        let Some((&VERSION, rest)) = sealed.split_first() else {
            return Err(unopenable());
        };
        if rest.len() < NONCE_LEN {
            return Err(unopenable());
        }
        let (nonce, body) = rest.split_at(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| unopenable())?;
        let mut body = body.to_vec();
        let plaintext = self
            .0
            .open_in_place(nonce, Aad::from(associated(alias)), &mut body)
            .map_err(|_| unopenable())?;
        Ok(plaintext.to_vec())
    }
}

/// The associated data of `alias`'s record: the format and the alias.
fn associated(alias: &str) -> Vec<u8> {
    let mut data = b"larkgate upstream credentials v1\0".to_vec();
    data.extend_from_slice(alias.as_bytes());
    data
}

/// rmcp's credential store for one upstream, on larkgate's store, sealed with the operator's key.
pub struct SealedCredentials {
    store: Arc<dyn Store>,
    alias: String,
    key: Arc<CredentialKey>,
}

impl std::fmt::Debug for SealedCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SealedCredentials")
            .field("alias", &self.alias)
            .finish_non_exhaustive()
    }
}

impl SealedCredentials {
    /// The credentials of upstream `alias` in `store`, sealed with `key`.
    pub fn new(store: Arc<dyn Store>, alias: &str, key: Arc<CredentialKey>) -> Self {
        SealedCredentials {
            store,
            alias: alias.to_owned(),
            key,
        }
    }

    /// Whether the store holds credentials for this upstream that open with this key.
    pub async fn stored(&self) -> Result<bool, AuthError> {
        self.load().await.map(|c| c.is_some())
    }
}

fn internal(error: impl std::fmt::Display) -> AuthError {
    AuthError::InternalError(error.to_string())
}

#[async_trait::async_trait]
impl CredentialStore for SealedCredentials {
    async fn load(&self) -> Result<Option<StoredCredentials>, AuthError> {
        let Some(sealed) = self
            .store
            .upstream_credentials(&self.alias)
            .await
            .map_err(internal)?
        else {
            return Ok(None);
        };
        let plain = self.key.open(&self.alias, &sealed).map_err(internal)?;
        serde_json::from_slice(&plain).map(Some).map_err(|_| {
            internal(CredentialError::Unopenable {
                alias: self.alias.clone(),
            })
        })
    }

    async fn save(&self, credentials: StoredCredentials) -> Result<(), AuthError> {
        let plain = serde_json::to_vec(&credentials).map_err(internal)?;
        let sealed = self.key.seal(&self.alias, &plain).map_err(internal)?;
        self.store
            .save_upstream_credentials(UpstreamCredentials {
                alias: self.alias.clone(),
                sealed,
                updated_at_ms: larkgate_store::now_ms(),
            })
            .await
            .map_err(internal)
    }

    async fn clear(&self) -> Result<(), AuthError> {
        self.store
            .remove_upstream_credentials(&self.alias)
            .await
            .map(|_| ())
            .map_err(internal)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "q0nE7P0m3Qx5b2l6t1QmQ2xGb0h2V0J6b3NqU1lqN2U=";
    const OTHER: &str = "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=";

    #[test]
    fn a_sealed_record_opens_only_with_its_key_and_its_alias_and_unchanged() {
        let key = CredentialKey::from_base64(KEY).unwrap();
        let sealed = key
            .seal("github", b"{\"access_token\":\"secret\"}")
            .unwrap();
        assert_eq!(
            key.open("github", &sealed).unwrap(),
            b"{\"access_token\":\"secret\"}"
        );
        assert!(
            !sealed.windows(6).any(|w| w == b"secret"),
            "the token is not in the sealed bytes"
        );
        let again = key
            .seal("github", b"{\"access_token\":\"secret\"}")
            .unwrap();
        assert_ne!(sealed, again, "every seal draws a fresh nonce");

        let other = CredentialKey::from_base64(OTHER).unwrap();
        let mut flipped = sealed.clone();
        let last = flipped.len() - 1;
        flipped[last] ^= 1;
        let mut nonce_flipped = sealed.clone();
        nonce_flipped[3] ^= 0x80;
        let mut version = sealed.clone();
        version[0] = 2;
        let hostile: &[(&str, &CredentialKey, &str, &[u8])] = &[
            ("another key", &other, "github", &sealed),
            ("another upstream's row", &key, "gitlab", &sealed),
            ("a changed tag", &key, "github", &flipped),
            ("a changed nonce", &key, "github", &nonce_flipped),
            ("another format", &key, "github", &version),
            (
                "truncated to its nonce",
                &key,
                "github",
                &sealed[..1 + NONCE_LEN],
            ),
            ("truncated inside its nonce", &key, "github", &sealed[..5]),
            ("empty", &key, "github", &[]),
        ];
        for (case, key, alias, bytes) in hostile {
            match key.open(alias, bytes) {
                Err(CredentialError::Unopenable { alias: named }) => {
                    assert_eq!(&named, alias, "{case}")
                }
                other => panic!("{case}: {other:?}"),
            }
        }
    }

    #[test]
    fn keys_that_are_not_32_bytes_of_base64_are_refused_and_never_shown() {
        for bad in ["", "not base64!", "c2hvcnQ=", &"QUFB".repeat(20)] {
            let error = CredentialKey::from_base64(bad).unwrap_err();
            assert!(
                matches!(error, CredentialError::BadKey(_)),
                "{bad:?}: {error:?}"
            );
            assert!(error.to_string().contains("openssl rand -base64 32"));
        }
        let key = CredentialKey::from_base64(KEY).unwrap();
        assert_eq!(format!("{key:?}"), "CredentialKey(<redacted>)");
        let unpadded = KEY.trim_end_matches('=');
        assert!(CredentialKey::from_base64(unpadded).is_ok());
    }

    #[test]
    fn a_key_file_others_may_read_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("key");
        std::fs::write(&path, format!("{KEY}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let error = CredentialKey::from_file(&path).unwrap_err();
        assert!(error.to_string().contains("chmod 600"), "{error}");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        let key = CredentialKey::from_file(&path).unwrap();
        let sealed = key.seal("a", b"x").unwrap();
        assert_eq!(
            CredentialKey::from_base64(KEY)
                .unwrap()
                .open("a", &sealed)
                .unwrap(),
            b"x"
        );
        let missing = CredentialKey::from_file(&dir.path().join("nope")).unwrap_err();
        assert!(matches!(missing, CredentialError::KeyFile { .. }));
    }
}
