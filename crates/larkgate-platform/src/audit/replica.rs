//! A data directory's name in the audit chain: the `replica` file next to the journal.
//!
//! Each larkgate process that journals records (a *replica*: one data directory) numbers them
//! in its own sequence, and the chain keys them by (replica, local sequence). The name is made
//! up (16 random hex digits) the first time a directory journals, and kept: a restarted replica
//! replays its journal under the same name, so nothing is chained twice. An operator may write
//! a name of their own (letters, digits, `-`, `_`; up to 64) into the file before the first
//! start. Two live processes may not share a name: the store refuses the second
//! ([`larkgate_store::AuditStore::claim_audit_replica`]), so a copied data directory fails safe.

use std::io::Write;
use std::path::Path;

use super::AuditError;

/// The file holding the name.
pub(super) const FILE: &str = "replica";

/// The directory's name, made up and written (durably) if it has none yet. The caller holds the
/// directory's lock.
pub(super) fn name(dir: &Path) -> Result<String, AuditError> {
    let path = dir.join(FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            let name = text.trim();
            if larkgate_store::valid_replica(name) {
                Ok(name.to_owned())
            } else {
                Err(AuditError::Journal(std::io::Error::other(format!(
                    "{} does not hold a replica name (1 to 64 letters, digits, '-' or '_'); \
                     fix it, or remove it if this directory has never journaled",
                    path.display()
                ))))
            }
        }
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            let mut bytes = [0u8; 8];
            getrandom::fill(&mut bytes).map_err(|e| std::io::Error::other(e.to_string()))?;
            let name = hex::encode(bytes);
            let staged = dir.join(format!("{FILE}.new"));
            let mut file = std::fs::File::create(&staged)?;
            file.write_all(format!("{name}\n").as_bytes())?;
            file.sync_all()?;
            std::fs::rename(&staged, &path)?;
            std::fs::File::open(dir)?.sync_all()?;
            Ok(name)
        }
        Err(error) => Err(error.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn made_up_once_then_kept() {
        let dir = tempfile::tempdir().unwrap();
        let first = name(dir.path()).unwrap();
        assert_eq!(first.len(), 16);
        assert_eq!(name(dir.path()).unwrap(), first);
        let other = tempfile::tempdir().unwrap();
        assert_ne!(name(other.path()).unwrap(), first);
    }

    #[test]
    fn an_operators_name_is_used_and_a_bad_one_refused() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(FILE), "eu-west-1\n").unwrap();
        assert_eq!(name(dir.path()).unwrap(), "eu-west-1");
        for bad in ["", "a b", "../etc", "x\ny"] {
            std::fs::write(dir.path().join(FILE), bad).unwrap();
            let error = name(dir.path()).unwrap_err().to_string();
            assert!(
                error.contains("does not hold a replica name"),
                "{bad:?}: {error}"
            );
        }
    }
}
