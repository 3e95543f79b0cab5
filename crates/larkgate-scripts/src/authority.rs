//! Who a run runs as, decided here and nowhere else: a draft run as the caller who starts it,
//! with the write barrier on; a published run as `script:<name>` with the roles its version's
//! author had at publish time, one nesting level deeper than its caller, its calls carrying the
//! chain of runs and authors it was made through.

use std::sync::Arc;

use larkgate_binding::Map;
use larkgate_platform::envelope::{Code, Refusal};
use larkgate_platform::{RunContext, RunKind};
use larkgate_store::{CallChain, IssuerBinding, Principal, PrincipalKind};

use crate::{Scripts, store_failed};

/// What to run.
#[derive(Clone, Debug)]
pub struct RunRequest {
    /// The script's name (a file's stem, for unsaved sources).
    pub name: String,
    /// Whether `name` is a saved draft or a published script (recorded with the run).
    pub saved: bool,
    /// The source.
    pub source: String,
    /// The published version, for published runs.
    pub version: Option<u32>,
    /// Who the run runs as.
    pub principal: Principal,
    /// Draft or published.
    pub kind: RunKind,
    /// Arguments for `main`.
    pub arguments: Map,
    /// The nesting depth of the run (1 for a run started directly).
    pub depth: u32,
    /// Who started it.
    pub started_by: String,
    /// The runs it is part of, this one included: who started each and who wrote its script.
    /// The run's calls carry it, so an approval they need binds to it.
    pub chain: CallChain,
    /// For a published run: the upstream tools its version was published against, the only
    /// upstream tools it may call (`None`: no such list).
    pub upstream_tools: Option<Arc<std::collections::BTreeSet<String>>>,
    /// The conversation of the call that started the run: its host calls' progress reaches
    /// that call's client, and that client's cancellation ends the run.
    pub conversation: larkgate_platform::Conversation,
}

impl RunRequest {
    /// This draft run in review mode: calls to tools that may write are recorded as intended
    /// writes and answered with a placeholder instead of being made
    /// ([`larkgate_platform::review`]).
    pub fn reviewing(mut self) -> Self {
        if self.kind == RunKind::Draft {
            self.kind = RunKind::Review;
        }
        self
    }

    /// A draft run of `source` as `actor`, who starts it, at nesting `depth`.
    pub fn draft(
        actor: &Principal,
        name: String,
        saved: bool,
        source: String,
        arguments: Map,
        depth: u32,
    ) -> Self {
        RunRequest {
            name,
            saved,
            source,
            version: None,
            principal: actor.clone(),
            kind: RunKind::Draft,
            arguments,
            depth,
            started_by: actor.id.clone(),
            chain: CallChain::default().then(&actor.id, &actor.id),
            upstream_tools: None,
            conversation: larkgate_platform::Conversation::none(),
        }
    }
}

impl Scripts {
    /// The request for a run of the latest published version of `name`, started by `caller`
    /// (a session's run context: a direct one, or another run's).
    pub async fn published_run(
        &self,
        name: &str,
        arguments: Map,
        caller: &RunContext,
    ) -> Result<RunRequest, Refusal> {
        let latest = self
            .store
            .latest_version(name)
            .await
            .map_err(store_failed)?;
        let latest = latest.ok_or_else(|| {
            Refusal::new(Code::NotFound, format!("{name:?} has no published version"))
                .with_hint("publish it first")
        })?;
        self.check_not_suspended(&latest).await?;
        Ok(RunRequest {
            upstream_tools: latest
                .pins
                .as_ref()
                .map(|pins| Arc::new(pins.iter().map(|p| p.tool.clone()).collect())),
            name: name.to_owned(),
            saved: true,
            source: latest.source.clone(),
            version: Some(latest.version),
            principal: Principal {
                id: format!("script:{name}"),
                kind: PrincipalKind::Script,
                roles: latest.author_roles.clone(),
                issuer: IssuerBinding::Local,
            },
            kind: RunKind::Published,
            arguments,
            depth: caller.depth + 1,
            started_by: caller.principal.id.clone(),
            chain: caller.chain.then(&caller.principal.id, &latest.author),
            conversation: larkgate_platform::Conversation::none(),
        })
    }
}
