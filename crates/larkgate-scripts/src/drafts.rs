//! Drafts: saving one (its name, its syntax and entry point, and a lint against the tools its
//! author may call), and reading them back. A draft belongs to its author: only the author
//! saves over it or runs it.

use larkgate_platform::access::{self, AUTHORS};
use larkgate_platform::audit::EventKind;
use larkgate_platform::envelope::{Code, Refusal};
use larkgate_platform::{RunContext, RunKind};
use larkgate_script::EntryPoint;
use larkgate_store::{CallChain, Draft, Principal, StoreError, now_ms};
use sha2::{Digest, Sha256};

use crate::{Scripts, store_failed};

/// The SHA-256 (hex) of a script's source.
pub fn source_hash(source: &str) -> String {
    hex::encode(Sha256::digest(source.as_bytes()))
}

/// Parses a script and reads its entry point, or says what is wrong.
pub fn check(name: &str, source: &str) -> Result<EntryPoint, Refusal> {
    larkgate_script::parse(&format!("{name}.star"), source)
        .and_then(|ast| larkgate_script::entry_point(&ast))
        .map_err(|e| Refusal::new(Code::InvalidArguments, format!("{name}: {e}")))
}

/// A saved draft, as reported back.
#[derive(Clone, Debug)]
pub struct Saved {
    /// The draft.
    pub draft: Draft,
    /// `main`'s signature.
    pub signature: String,
    /// `main`'s docstring.
    pub description: Option<String>,
    /// What the checks at save time found that does not refuse the save.
    pub warnings: Vec<String>,
}

/// The most save-time errors one refusal lists.
const MAX_LISTED_ERRORS: usize = 10;

impl Scripts {
    /// Saves `source` as `actor`'s draft `name`.
    pub async fn save_draft(
        &self,
        actor: &Principal,
        name: &str,
        source: &str,
    ) -> Result<Saved, Refusal> {
        access::require_any_role(actor, AUTHORS, "save drafts")?;
        self.platform.registry().check_alias(name).map_err(|why| {
            Refusal::new(
                Code::InvalidArguments,
                format!("{name:?} is not a script name: {why}"),
            )
        })?;
        let entry = check(name, source)?;
        let findings = self.lint(actor, name, source)?;
        let draft = self
            .store
            .save_draft(Draft {
                name: name.to_owned(),
                source: source.to_owned(),
                author: actor.id.clone(),
                updated_at_ms: now_ms(),
            })
            .await
            .map_err(|e| match e {
                StoreError::Conflict(_) => Refusal::new(
                    Code::Forbidden,
                    format!("the draft {name:?} belongs to another author"),
                )
                .with_hint("choose another name"),
                other => store_failed(other),
            })?;
        self.event(
            actor,
            name,
            EventKind::DraftSaved,
            format!("saved draft {name}, sha256 {}", source_hash(source)),
        )?;
        Ok(Saved {
            draft,
            signature: entry.input.signature("main", "any"),
            description: entry.description,
            warnings: findings.warnings,
        })
    }

    /// The tools `principal` sees, as a script run as it sees them.
    pub(crate) fn listing(&self, principal: &Principal) -> Vec<larkgate_caller::ToolInfo> {
        let identity = larkgate_platform::SessionIdentity {
            run: RunContext {
                principal: principal.clone(),
                run_id: None,
                kind: RunKind::Draft,
                depth: 0,
                chain: CallChain::default(),
                upstream_tools: None,
            },
            label: "listing".to_owned(),
            server: None,
        };
        self.platform
            .list(Some(&identity))
            .iter()
            .map(larkgate_session::tool_info)
            .collect()
    }

    /// Checks `source` against the tools `actor` may call in a draft run
    /// ([`larkgate_script::lint`]): errors refuse, warnings are answered.
    fn lint(
        &self,
        actor: &Principal,
        name: &str,
        source: &str,
    ) -> Result<larkgate_script::lint::Findings, Refusal> {
        let ast = larkgate_script::parse(&format!("{name}.star"), source)
            .map_err(|e| Refusal::new(Code::InvalidArguments, format!("{name}: {e}")))?;
        let findings = larkgate_script::lint::lint(&ast, &self.listing(actor));
        if findings.errors.is_empty() {
            return Ok(findings);
        }
        let count = findings.errors.len();
        let mut listed: Vec<&str> = findings
            .errors
            .iter()
            .take(MAX_LISTED_ERRORS)
            .map(String::as_str)
            .collect();
        let more = count.saturating_sub(MAX_LISTED_ERRORS);
        let more_text = format!("and {more} more");
        if more > 0 {
            listed.push(&more_text);
        }
        Err(Refusal::new(
            Code::InvalidArguments,
            format!(
                "{name} was not saved: {count} problem{} a run would fail on: {}",
                if count == 1 { "" } else { "s" },
                listed.join("; ")
            ),
        )
        .with_hint(
            "fix them and save again; list your tools with tools() or larkgate capabilities",
        ))
    }

    /// Every draft, by name.
    pub async fn drafts(&self) -> Result<Vec<Draft>, Refusal> {
        self.store.drafts().await.map_err(store_failed)
    }

    /// The draft `name` for `actor` to run: only its author runs it.
    pub async fn own_draft(&self, actor: &Principal, name: &str) -> Result<Draft, Refusal> {
        // The same answer whether the draft is missing or someone else's.
        self.store
            .draft(name)
            .await
            .map_err(store_failed)?
            .filter(|d| d.author == actor.id)
            .ok_or_else(|| {
                Refusal::new(
                    Code::NotFound,
                    format!(
                        "{} has no draft named {name:?}; only a draft's author runs it",
                        actor.id
                    ),
                )
            })
    }
}
