//! What publishing a draft checks and writes, the same for both databases: each backend reads
//! the draft, the author's roles and the next number inside its own transaction, and this turns
//! what it read into the version to insert (see [`crate::ScriptStore::publish`]).

use crate::{Draft, Publication, Result, ScriptVersion, StoreError, join_roles, split_roles};

/// A publication's new version, filled in as its transaction reads the database.
pub(crate) struct Publishing {
    version: ScriptVersion,
}

/// A version ready to insert, with the columns the backends store as text.
pub(crate) struct Numbered {
    /// The version, as `publish` answers it.
    pub version: ScriptVersion,
    /// The author's roles, as the `author_roles` column keeps them.
    pub roles: String,
    /// The pins, as the `pins` column keeps them (JSON).
    pub pins: String,
}

impl Publishing {
    pub(crate) fn new(publication: &Publication<'_>) -> Self {
        Publishing {
            version: ScriptVersion {
                name: publication.name.to_owned(),
                version: 0,
                source: publication.source.to_owned(),
                hash: publication.hash.to_owned(),
                author: String::new(),
                author_roles: Vec::new(),
                publisher: publication.publisher.to_owned(),
                published_at_ms: publication.now_ms,
                pins: Some(publication.pins.to_vec()),
            },
        }
    }

    /// The script's name.
    pub(crate) fn name(&self) -> &str {
        &self.version.name
    }

    /// Takes the draft as the transaction read it, locked: it must exist and still hold the
    /// source the publisher checked. Answers its author, whose roles the transaction reads next.
    pub(crate) fn draft(&mut self, draft: Option<Draft>) -> Result<&str> {
        let name = &self.version.name;
        let draft = draft.ok_or_else(|| StoreError::Missing(format!("a draft named {name:?}")))?;
        if draft.source != self.version.source {
            return Err(StoreError::Invalid(format!(
                "the draft {name:?} changed while it was being published; publish again"
            )));
        }
        self.version.author = draft.author;
        Ok(&self.version.author)
    }

    /// The version numbered `number`, carrying the author's roles as the transaction read them
    /// (`None`: the author is no longer registered, and there are no roles to capture).
    pub(crate) fn numbered(mut self, roles: Option<String>, number: i64) -> Result<Numbered> {
        let roles = roles.ok_or_else(|| {
            StoreError::Invalid(format!(
                "the draft's author {:?} is no longer a registered principal, so there are no \
                 roles to capture",
                self.version.author
            ))
        })?;
        self.version.author_roles = split_roles(&roles);
        self.version.version = u32::try_from(number).unwrap_or(u32::MAX);
        let pins = serde_json::to_string(&self.version.pins)
            .map_err(|e| StoreError::Invalid(format!("the script's pins cannot be stored: {e}")))?;
        Ok(Numbered {
            roles: join_roles(self.version.author_roles.clone())?,
            pins,
            version: self.version,
        })
    }
}
