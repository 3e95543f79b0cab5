//! Publishing: what a draft's next version would change (its diff, its newest review run,
//! the upstream tools it is pinned to), publishing it with its author's roles captured, and
//! the versions published. A published version is suspended while a tool it is pinned to is
//! quarantined.

use std::sync::Arc;

use larkgate_platform::access::{self, PUBLISHERS};
use larkgate_platform::audit::EventKind;
use larkgate_platform::envelope::{Code, Refusal};
use larkgate_platform::registry::script_tool_name;
use larkgate_platform::review::IntendedWrite;
use larkgate_store::{Principal, Publication, Run, ScriptPin, ScriptVersion, StoreError, now_ms};

use crate::records::review_of;
use crate::{Scripts, check, source_hash, store_failed};

/// What publishing a draft changes: shown before publishing (`script publish --dry-run`) and
/// with the publication.
#[derive(Clone, Debug)]
pub struct PublishPreview {
    /// The script's name.
    pub name: String,
    /// The draft's source.
    pub source: String,
    /// Its SHA-256 (hex).
    pub hash: String,
    /// The draft's author: whose roles the version's runs carry.
    pub author: String,
    /// The latest version before it, if any.
    pub previous_version: Option<u32>,
    /// A unified diff from the latest version's source to the draft's (empty when they are the
    /// same; `None` for a first version).
    pub diff: Option<String>,
    /// The newest review run of exactly this source that succeeded, if any.
    pub review: Option<ReviewSummary>,
    /// The upstream tools the version refers to, with their approved definitions now: its
    /// runs may call no other upstream tool, and it is suspended while one of these is
    /// quarantined.
    pub pins: Vec<ScriptPin>,
}

/// A review run, as a publisher is shown it.
#[derive(Clone, Debug, serde::Serialize, schemars::JsonSchema)]
pub struct ReviewSummary {
    /// The run's id.
    pub run_id: String,
    /// Who ran it.
    pub principal: String,
    /// When it finished (Unix ms).
    pub finished_at_ms: Option<i64>,
    /// The calls it would have made to tools that may write, in order.
    pub intended_writes: Vec<IntendedWrite>,
    /// Every tool it called, by name.
    pub tools_called: Vec<String>,
}

impl ReviewSummary {
    fn from_run(run: Run) -> Self {
        let review = review_of(&run).unwrap_or_default();
        ReviewSummary {
            intended_writes: review.intended_writes,
            tools_called: review.tools_called.into_iter().collect(),
            run_id: run.id,
            principal: run.principal,
            finished_at_ms: run.finished_at_ms,
        }
    }
}

/// A unified diff from `previous`'s source to `source`.
fn source_diff(name: &str, previous: &ScriptVersion, source: &str) -> String {
    similar::TextDiff::from_lines(previous.source.as_str(), source)
        .unified_diff()
        .context_radius(3)
        .header(
            &format!("{name} v{}", previous.version),
            &format!("{name} (draft)"),
        )
        .to_string()
}

impl Scripts {
    /// The upstream tools a published version of `source` refers to: those it names literally
    /// (as its author sees tools: the roles its runs will carry) and those `review` called,
    /// each with the hash of its approved definition now.
    async fn upstream_pins(
        &self,
        name: &str,
        source: &str,
        author: &str,
        review: Option<&ReviewSummary>,
    ) -> Result<Vec<ScriptPin>, Refusal> {
        let Some(author) = self.store.principal(author).await.map_err(store_failed)? else {
            // Publishing refuses a departed author; nothing to pin.
            return Ok(Vec::new());
        };
        let ast = larkgate_script::parse(&format!("{name}.star"), source)
            .map_err(|e| Refusal::new(Code::InvalidArguments, format!("{name}: {e}")))?;
        let listing = self.listing(&author);
        let mut named = larkgate_script::lint::references(&ast, &listing);
        named.extend(
            review
                .into_iter()
                .flat_map(|r| r.tools_called.iter().cloned()),
        );
        let mut pins = Vec::new();
        let mut known: std::collections::HashMap<String, Vec<larkgate_store::ToolPin>> =
            std::collections::HashMap::new();
        for tool in listing.iter().filter(|t| named.contains(&t.name)) {
            let (larkgate_caller::Source::Upstream, Some(alias)) =
                (&tool.origin.source, &tool.origin.alias)
            else {
                continue;
            };
            if !known.contains_key(alias) {
                let stored = self.store.pins(alias).await.map_err(store_failed)?;
                known.insert(alias.to_owned(), stored);
            }
            let hash = known[alias]
                .iter()
                .find(|p| p.tool == tool.origin.original_name)
                .map(|p| p.hash.clone())
                .unwrap_or_default();
            pins.push(ScriptPin {
                tool: tool.name.clone(),
                alias: alias.to_owned(),
                upstream_tool: tool.origin.original_name.clone(),
                hash,
            });
        }
        Ok(pins)
    }

    /// Refuses a run of `version` while an upstream tool it was published against is
    /// quarantined (its definition changed and waits for an admin's review): nothing of the
    /// script runs. Approving the change, or the upstream reverting it, restores the script.
    pub(crate) async fn check_not_suspended(&self, version: &ScriptVersion) -> Result<(), Refusal> {
        let Some(pins) = &version.pins else {
            return Ok(());
        };
        let mut by_alias: std::collections::BTreeMap<&str, Vec<&ScriptPin>> = Default::default();
        for pin in pins {
            by_alias.entry(&pin.alias).or_default().push(pin);
        }
        for (alias, wanted) in by_alias {
            let stored = self.store.pins(alias).await.map_err(store_failed)?;
            for pin in wanted {
                let quarantined = stored.iter().any(|p| {
                    p.tool == pin.upstream_tool
                        && p.status == larkgate_store::PinStatus::Quarantined
                });
                if quarantined {
                    return Err(Refusal::new(
                        Code::ScriptSuspended,
                        format!(
                            "{} is suspended: it calls {}, whose definition changed since \
                             version {} was published and waits for an admin's review",
                            script_tool_name(&version.name),
                            pin.tool,
                            version.version
                        ),
                    )
                    .with_hint(format!(
                        "an admin reviews the change with larkgate upstream review {alias} \
                         (approving it restores the script)"
                    )));
                }
            }
        }
        Ok(())
    }

    /// What publishing the draft `name` would change, for `actor` (a publisher) to see first:
    /// the diff from the latest version, and the intended writes of the newest review run of
    /// exactly this source. Refused as [`Scripts::publish`] would refuse it, except for a
    /// missing review run, which the preview shows as missing.
    pub async fn publish_preview(
        &self,
        actor: &Principal,
        name: &str,
    ) -> Result<PublishPreview, Refusal> {
        access::require_any_role(actor, PUBLISHERS, "publish scripts")?;
        let draft = self
            .store
            .draft(name)
            .await
            .map_err(store_failed)?
            .ok_or_else(|| {
                Refusal::new(Code::NotFound, format!("there is no draft named {name:?}"))
                    .with_hint("save one with script_save_draft first")
            })?;
        check(name, &draft.source)?;
        let hash = source_hash(&draft.source);
        let latest = self
            .store
            .latest_version(name)
            .await
            .map_err(store_failed)?;
        let review = self
            .store
            .latest_review(name, &hash)
            .await
            .map_err(store_failed)?
            .map(ReviewSummary::from_run);
        let pins = self
            .upstream_pins(name, &draft.source, &draft.author, review.as_ref())
            .await?;
        Ok(PublishPreview {
            pins,
            name: name.to_owned(),
            hash,
            author: draft.author,
            previous_version: latest.as_ref().map(|v| v.version),
            diff: latest.map(|v| source_diff(name, &v, &draft.source)),
            review,
            source: draft.source,
        })
    }

    /// Publishes the draft `name` as its next version, published by `actor`; answers the
    /// version and what was shown of it ([`Scripts::publish_preview`]). With
    /// `[policy.publishing] require_review`, a draft whose exact source has no successful review
    /// run is refused.
    pub async fn publish(
        self: &Arc<Self>,
        actor: &Principal,
        name: &str,
    ) -> Result<(ScriptVersion, PublishPreview), Refusal> {
        let preview = self.publish_preview(actor, name).await?;
        if self.platform.services().policy().publishing.require_review && preview.review.is_none() {
            return Err(Refusal::new(
                Code::Forbidden,
                format!(
                    "{name} was not published: this source has no successful review run, and \
                     the policy requires one before publishing"
                ),
            )
            .with_hint(format!(
                "run it in review mode first: larkgate run --draft {name} --review, or \
                 script_run_draft(name=\"{name}\", review=true)"
            )));
        }
        let hash = &preview.hash;
        let version = self
            .store
            .publish(Publication {
                name,
                source: &preview.source,
                hash,
                publisher: &actor.id,
                pins: &preview.pins,
                now_ms: now_ms(),
            })
            .await
            .map_err(|e| match e {
                StoreError::Invalid(message) => Refusal::new(Code::InvalidArguments, message),
                other => store_failed(other),
            })?;
        let reviewed = match &preview.review {
            Some(review) => {
                let count = review.intended_writes.len();
                format!(
                    ", reviewed by run {} ({count} intended write{})",
                    review.run_id,
                    if count == 1 { "" } else { "s" }
                )
            }
            None => ", not reviewed".to_owned(),
        };
        self.event(
            actor,
            name,
            EventKind::Published,
            format!(
                "published {name} version {} by {} with roles [{}], hash {hash}{reviewed}",
                version.version,
                version.author,
                version.author_roles.join(",")
            ),
        )?;
        self.refresh_tools()
            .await
            .map_err(|e| Refusal::internal("the script tools were not refreshed", e))?;
        Ok((version, preview))
    }

    /// The latest version of every published script, by name.
    pub async fn published(&self) -> Result<Vec<ScriptVersion>, Refusal> {
        self.store.latest_versions().await.map_err(store_failed)
    }

    /// Every version of `name`, oldest first.
    pub async fn history(&self, name: &str) -> Result<Vec<ScriptVersion>, Refusal> {
        let versions = self.store.versions(name).await.map_err(store_failed)?;
        if versions.is_empty() {
            return Err(Refusal::new(
                Code::NotFound,
                format!("{name:?} has no published versions"),
            ));
        }
        Ok(versions)
    }
}
