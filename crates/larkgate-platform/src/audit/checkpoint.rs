//! Signed checkpoints of the audit chain: every so many records or seconds, the replica that
//! has just chained a batch signs the chain's head with its Ed25519 key, and the signed
//! statement is chained as a record of its own (an event of code `checkpoint`, its detail the
//! [`Checkpoint`] as JSON).
//!
//! # Threat model
//!
//! The hash chain shows an edited, inserted or deleted record to anyone who recomputes it, but
//! whoever can write to the database can also rewrite the chain from any point with valid
//! hashes. A checkpoint binds a position and its hash to a key that lives outside the database
//! (in the replica's data directory, sealed with the credential key when one is set), so:
//!
//! - **a rewrite before a checkpoint** changes the hash of the record it names: `audit verify`
//!   says which checkpoint no longer matches;
//! - **a forged or edited checkpoint** does not verify under the key it names;
//! - **a checkpoint signed by a key the verifier does not hold**: given the keys it trusts
//!   (`audit verify --key`), a verifier accepts only those, and keys announced by a checkpoint
//!   one of them signed (`next_key`, a rotation); an attacker's own key is named as unknown.
//!
//! Not covered here: a database rolled back whole to an earlier, consistent state. Only a head
//! kept elsewhere shows that (`audit verify --head`, and anchors outside the database).
//!
//! # What is signed
//!
//! One line of ASCII text, so that a verifier in any language can rebuild it:
//!
//! ```text
//! larkgate-audit-checkpoint-v1 SEQ HASH AT_MS REPLICA POLICY KEY NEXT_KEY\n
//! ```
//!
//! `SEQ` and `AT_MS` in decimal, `HASH` and `POLICY` lowercase hex SHA-256, `REPLICA` as the
//! chain names it, `KEY` and `NEXT_KEY` the standard base64 of 32-byte Ed25519 public keys
//! (`NEXT_KEY` is `-` when there is none). The signature is Ed25519 over those bytes, in
//! standard base64.

use std::time::Duration;

use aws_lc_rs::rand::SystemRandom;
use aws_lc_rs::signature::{ED25519, Ed25519KeyPair, KeyPair, UnparsedPublicKey};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde::{Deserialize, Serialize};

/// How many records a checkpoint follows by default.
pub const DEFAULT_EVERY_RECORDS: u64 = 1_000;
/// How long a checkpoint follows records by default, when fewer came.
pub const DEFAULT_EVERY: Duration = Duration::from_secs(60);

/// The principal checkpoint records are chained under.
pub const CHECKPOINT_PRINCIPAL: &str = "larkgate";

/// The first word of the text a checkpoint signs.
const DOMAIN: &str = "larkgate-audit-checkpoint-v1";

/// A signed checkpoint, as the detail of a `checkpoint` record holds it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Checkpoint {
    /// The chain position signed.
    pub seq: u64,
    /// The hash of the record at that position.
    pub hash: String,
    /// When it was signed (Unix ms).
    pub at_ms: i64,
    /// The replica that signed it.
    pub replica: String,
    /// SHA-256 of the policy in force, as JSON.
    pub policy: String,
    /// The public key that signed it.
    pub key: String,
    /// A key that signs this replica's checkpoints from the next one on (a rotation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_key: Option<String>,
    /// The signature of [`Checkpoint::signed_text`].
    pub signature: String,
}

impl Checkpoint {
    /// The text the signature covers (see the module documentation).
    pub fn signed_text(&self) -> String {
        format!(
            "{DOMAIN} {} {} {} {} {} {} {}\n",
            self.seq,
            self.hash,
            self.at_ms,
            self.replica,
            self.policy,
            self.key,
            self.next_key.as_deref().unwrap_or("-")
        )
    }

    /// Whether the signature is the key's over the text; why not, if not.
    pub fn verify(&self) -> Result<(), String> {
        let key = decode_key(&self.key)?;
        let signature = STANDARD
            .decode(&self.signature)
            .map_err(|_| "its signature is not base64".to_owned())?;
        UnparsedPublicKey::new(&ED25519, key)
            .verify(self.signed_text().as_bytes(), &signature)
            .map_err(|_| "its signature does not verify under the key it names".to_owned())
    }
}

/// The keys a verifier accepts checkpoints of: those it was given, and each key a checkpoint
/// signed by an accepted key announces (`next_key`, a rotation) from that checkpoint on. One
/// rule for the chain, its anchors and bundles.
#[derive(Clone, Debug)]
pub struct AcceptedKeys {
    keys: Vec<String>,
}

impl AcceptedKeys {
    /// The keys given (`--key`). None given: every key is accepted (the chain is then checked
    /// against the keys its checkpoints name).
    pub fn new(given: &[String]) -> Self {
        AcceptedKeys {
            keys: given.iter().map(|k| k.trim().to_owned()).collect(),
        }
    }

    /// Whether `checkpoint`'s key is accepted; why not (`signed by ...`), if not.
    pub fn check(&self, checkpoint: &Checkpoint) -> Result<(), String> {
        if self.keys.is_empty() || self.keys.contains(&checkpoint.key) {
            return Ok(());
        }
        Err(format!(
            "signed by {}, a key you did not give (--key) and none of yours announced",
            checkpoint.key
        ))
    }

    /// [`AcceptedKeys::check`], then the key `checkpoint` announces is accepted from now on.
    pub fn accept(&mut self, checkpoint: &Checkpoint) -> Result<(), String> {
        self.check(checkpoint)?;
        if !self.keys.is_empty()
            && let Some(next) = &checkpoint.next_key
            && !self.keys.contains(next)
        {
            self.keys.push(next.clone());
        }
        Ok(())
    }
}

/// The 32 bytes of a public key written in standard base64; why not, if not.
pub fn decode_key(text: &str) -> Result<Vec<u8>, String> {
    match STANDARD.decode(text.trim()) {
        Ok(bytes) if bytes.len() == 32 => Ok(bytes),
        _ => Err(format!(
            "{text:?} is not an Ed25519 public key (the base64 of 32 bytes, as `larkgate audit \
             key` prints)"
        )),
    }
}

/// A replica's signing key. Its `Debug` form shows the public half only.
pub struct Signer {
    pair: Ed25519KeyPair,
    public: String,
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Signer")
            .field("public", &self.public)
            .finish_non_exhaustive()
    }
}

impl Signer {
    /// A new key, and its PKCS#8 document to keep.
    pub fn generate() -> Result<(Signer, Vec<u8>), String> {
        let document = Ed25519KeyPair::generate_pkcs8(&SystemRandom::new())
            .map_err(|_| "no signing key could be generated".to_owned())?;
        let bytes = document.as_ref().to_vec();
        Ok((Signer::from_pkcs8(&bytes)?, bytes))
    }

    /// The key a PKCS#8 document holds.
    pub fn from_pkcs8(document: &[u8]) -> Result<Signer, String> {
        let pair = Ed25519KeyPair::from_pkcs8(document)
            .map_err(|_| "the signing key does not read as an Ed25519 key".to_owned())?;
        let public = STANDARD.encode(pair.public_key().as_ref());
        Ok(Signer { pair, public })
    }

    /// Its public half, in standard base64.
    pub fn public_key(&self) -> &str {
        &self.public
    }

    /// Signs `checkpoint` (whose `key` it sets to its own).
    pub fn sign(&self, mut checkpoint: Checkpoint) -> Checkpoint {
        checkpoint.key = self.public.clone();
        let signature = self.pair.sign(checkpoint.signed_text().as_bytes());
        checkpoint.signature = STANDARD.encode(signature.as_ref());
        checkpoint
    }
}

/// When a replica checkpoints.
#[derive(Debug)]
pub struct Checkpoints {
    /// Its key.
    pub signer: Signer,
    /// After how many records it chained.
    pub every_records: u64,
    /// After how long, when it chained fewer (and at least one).
    pub every: Duration,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unsigned(seq: u64) -> Checkpoint {
        Checkpoint {
            seq,
            hash: "ab".repeat(32),
            at_ms: 1_700_000_000_000,
            replica: "r1".into(),
            policy: "cd".repeat(32),
            key: String::new(),
            next_key: None,
            signature: String::new(),
        }
    }

    /// A signed checkpoint verifies; each field changed, a signature from another key, a key
    /// swapped in, and malformed keys and signatures do not.
    #[test]
    fn a_checkpoint_verifies_only_as_signed() {
        let (signer, document) = Signer::generate().unwrap();
        let signed = signer.sign(unsigned(7));
        signed.verify().unwrap();
        assert_eq!(
            Signer::from_pkcs8(&document).unwrap().public_key(),
            signer.public_key(),
            "the kept document is the same key"
        );
        let (other, _) = Signer::generate().unwrap();
        let tampered: Vec<(&str, Checkpoint)> = vec![
            (
                "seq",
                Checkpoint {
                    seq: 8,
                    ..signed.clone()
                },
            ),
            (
                "hash",
                Checkpoint {
                    hash: "ef".repeat(32),
                    ..signed.clone()
                },
            ),
            (
                "time",
                Checkpoint {
                    at_ms: 1,
                    ..signed.clone()
                },
            ),
            (
                "replica",
                Checkpoint {
                    replica: "r2".into(),
                    ..signed.clone()
                },
            ),
            (
                "policy",
                Checkpoint {
                    policy: "00".repeat(32),
                    ..signed.clone()
                },
            ),
            (
                "next key",
                Checkpoint {
                    next_key: Some(other.public_key().into()),
                    ..signed.clone()
                },
            ),
            (
                "key swapped",
                Checkpoint {
                    key: other.public_key().into(),
                    ..signed.clone()
                },
            ),
            (
                "other's signature",
                Checkpoint {
                    signature: other.sign(unsigned(7)).signature,
                    ..signed.clone()
                },
            ),
        ];
        for (what, checkpoint) in tampered {
            let refused = checkpoint.verify().unwrap_err();
            assert!(refused.contains("does not verify"), "{what}: {refused}");
        }
        for (key, signature) in [
            ("AAAA", signed.signature.as_str()),
            ("not base64!", signed.signature.as_str()),
            (signed.key.as_str(), "%%%"),
        ] {
            let checkpoint = Checkpoint {
                key: key.into(),
                signature: signature.into(),
                ..signed.clone()
            };
            assert!(checkpoint.verify().is_err(), "{key} {signature}");
        }
        assert!(format!("{signer:?}").contains(signer.public_key()));
        assert!(Signer::from_pkcs8(b"not a key").is_err());
    }

    /// The signed text is the documented line.
    #[test]
    fn the_signed_text_is_one_documented_line() {
        let mut checkpoint = unsigned(42);
        checkpoint.key = "K".into();
        assert_eq!(
            checkpoint.signed_text(),
            format!(
                "larkgate-audit-checkpoint-v1 42 {} 1700000000000 r1 {} K -\n",
                "ab".repeat(32),
                "cd".repeat(32)
            )
        );
    }
}
