//! The replica's audit signing key ([`larkgate_platform::audit::checkpoint`]): a file in the
//! data directory, made at the first start that signs checkpoints, readable by its owner
//! only, and sealed with the credential key (`LARKGATE_CREDENTIAL_KEY`) when one is set, so
//! that a copy of the directory without the credential key cannot sign. Its public half is
//! printed when it is made and by `larkgate audit key`.

use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::Path;

use anyhow::{Context as _, bail};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use larkgate_platform::audit::AuditLog;
use larkgate_platform::audit::checkpoint::{Checkpoint, Signer};
use larkgate_upstream::credentials::CredentialKey;

/// The key's file in the data directory.
pub(crate) const KEY_FILE: &str = "audit-signing.key";
/// The key a rotation moves to, until the key in use has announced it.
pub(crate) const NEXT_FILE: &str = "audit-signing.key.next";

/// The first line of the file, saying how the key below it is kept.
const SEALED: &str = "larkgate audit signing key v1 sealed";
const PLAIN: &str = "larkgate audit signing key v1 plain";

/// What the credential key seals the signing key for (no upstream alias has a space).
const SEALED_FOR: &str = "audit signing key";

/// The data directory's signing key, made (and said) when there is none yet.
pub(crate) fn load_or_create(data_dir: &Path) -> anyhow::Result<Signer> {
    if let Some(signer) = load(data_dir)? {
        return Ok(signer);
    }
    let path = data_dir.join(KEY_FILE);
    let (signer, sealed) = create(&path)?;
    crate::logging::say(&format!(
        "made the audit signing key {} ({}); its public key, to verify checkpoints with \
         `larkgate audit verify --key KEY`: {}",
        path.display(),
        if sealed {
            "sealed with the credential key"
        } else {
            "not sealed: set LARKGATE_CREDENTIAL_KEY to seal it"
        },
        signer.public_key()
    ));
    Ok(signer)
}

/// A new key written to `path` (which must not exist), sealed when a credential key is set;
/// the key, and whether it was sealed.
fn create(path: &Path) -> anyhow::Result<(Signer, bool)> {
    let credential = CredentialKey::from_env()?;
    let (signer, document) = Signer::generate().map_err(anyhow::Error::msg)?;
    let text = match &credential {
        Some(key) => format!(
            "{SEALED}\n{}\n",
            STANDARD.encode(key.seal(SEALED_FOR, &document)?)
        ),
        None => format!("{PLAIN}\n{}\n", STANDARD.encode(&document)),
    };
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("cannot create the audit signing key {}", path.display()))?;
    file.write_all(text.as_bytes())?;
    file.sync_all()?;
    Ok((signer, credential.is_some()))
}

/// Makes the key a rotation moves to ([`NEXT_FILE`], replacing one an unfinished rotation
/// left); its public half. The key in use stays until [`rotate_pending`] has it announced.
pub(crate) fn prepare_next(data_dir: &Path) -> anyhow::Result<String> {
    let path = data_dir.join(NEXT_FILE);
    match std::fs::remove_file(&path) {
        Ok(()) => {}
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
        Err(error) => {
            return Err(error).with_context(|| format!("cannot replace {}", path.display()));
        }
    }
    let (signer, _) = create(&path)?;
    Ok(signer.public_key().to_owned())
}

/// Carries out a rotation [`prepare_next`] asked for, if one is waiting: a checkpoint signed
/// by the key in use announces the next one and is chained; only then does the next key
/// replace the old one's file (the old private key is gone; its public half is in every
/// checkpoint it signed). The announcing checkpoint, when there was a rotation.
pub(crate) async fn rotate_pending(
    data_dir: &Path,
    log: &AuditLog,
) -> anyhow::Result<Option<Checkpoint>> {
    let next_path = data_dir.join(NEXT_FILE);
    let Some(next) = load_file(&next_path)? else {
        return Ok(None);
    };
    let announced = log.rotate_key(next).await?;
    std::fs::rename(&next_path, data_dir.join(KEY_FILE)).with_context(|| {
        format!(
            "the new audit signing key was announced but {} could not replace the old one",
            next_path.display()
        )
    })?;
    Ok(Some(announced))
}

/// The data directory's signing key, if it has one.
pub(crate) fn load(data_dir: &Path) -> anyhow::Result<Option<Signer>> {
    load_file(&data_dir.join(KEY_FILE))
}

/// The signing key the file at `path` holds, if there is one.
fn load_file(path: &Path) -> anyhow::Result<Option<Signer>> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(error) => {
            return Err(error)
                .with_context(|| format!("cannot read the audit signing key {}", path.display()));
        }
    };
    let unreadable = || {
        format!(
            "{} is not an audit signing key larkgate wrote; move it away to make a new one \
             (checkpoints signed with the old key still verify with its public key)",
            path.display()
        )
    };
    let mut lines = text.lines();
    let (how, body) = (lines.next(), lines.next());
    let body = body
        .and_then(|b| STANDARD.decode(b.trim()).ok())
        .with_context(unreadable)?;
    let document = match how {
        Some(PLAIN) => body,
        Some(SEALED) => {
            let Some(key) = CredentialKey::from_env()? else {
                bail!(
                    "the audit signing key {} is sealed with a credential key: set \
                     LARKGATE_CREDENTIAL_KEY (or LARKGATE_CREDENTIAL_KEY_FILE) to the one it was \
                     sealed with",
                    path.display()
                );
            };
            key.open(SEALED_FOR, &body).map_err(|_| {
                anyhow::anyhow!(
                    "the audit signing key {} does not open with this credential key; set the \
                     one it was sealed with",
                    path.display()
                )
            })?
        }
        _ => bail!(unreadable()),
    };
    Signer::from_pkcs8(&document)
        .map(Some)
        .map_err(|_| anyhow::anyhow!(unreadable()))
}
