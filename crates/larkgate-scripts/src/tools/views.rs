//! What the lifecycle tools take and answer: their input and output types, with the JSON
//! Schemas their listings carry.

use larkgate_platform::registry::script_tool_name;
use larkgate_platform::review::IntendedWrite;
use larkgate_store::{Run, ScriptPin, ScriptVersion};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Input of `script_save_draft`.
#[derive(Debug, Deserialize, JsonSchema)]
pub(super) struct SaveDraftInput {
    /// The script's name: a lowercase letter, then lowercase letters, digits and `_`.
    pub(super) name: String,
    /// The Starlark source, with `def main(*, ...)`.
    pub(super) source: String,
}

/// Output of `script_save_draft`.
#[derive(Debug, Serialize, JsonSchema)]
pub(super) struct SavedDraft {
    /// The script's name.
    pub(super) name: String,
    /// Its author (the caller).
    pub(super) author: String,
    /// `main`'s signature.
    pub(super) signature: String,
    /// `main`'s docstring.
    pub(super) description: Option<String>,
    /// What the checks at save time found that does not refuse the save (`FILE:LINE:COLUMN:
    /// ...`): an unused assignment, a variable that may be unassigned.
    pub(super) warnings: Vec<String>,
}

/// Input of `script_history`.
#[derive(Debug, Deserialize, JsonSchema)]
pub(super) struct NameInput {
    /// The script's name.
    pub(super) name: String,
}

/// Input of `script_publish`.
#[derive(Debug, Deserialize, JsonSchema)]
pub(super) struct PublishInput {
    /// The draft's name.
    pub(super) name: String,
    /// Only show what publishing would change (the diff and the review run's intended
    /// writes); publish nothing. Default false.
    pub(super) dry_run: Option<bool>,
}

/// Output of `script_publish`: the version (as `script_history` lists one), and what was
/// shown of it.
#[derive(Debug, Serialize, JsonSchema)]
pub(super) struct PublishOutput {
    /// Whether a version was published (false for a dry run).
    pub(super) published: bool,
    /// The script's name.
    pub(super) name: String,
    /// The version published (for a dry run: the version publishing would make).
    pub(super) version: i64,
    /// The tool it is served as.
    pub(super) tool: String,
    /// Who wrote it.
    pub(super) author: String,
    /// The author's roles, captured at publish time (null for a dry run).
    pub(super) author_roles: Option<Vec<String>>,
    /// Who published it (null for a dry run).
    pub(super) publisher: Option<String>,
    /// SHA-256 of its source.
    pub(super) hash: String,
    /// When (Unix ms; null for a dry run).
    pub(super) published_at_ms: Option<i64>,
    /// The latest version before it, if any.
    pub(super) previous_version: Option<i64>,
    /// A unified diff from the previous version's source (empty when unchanged; null for a
    /// first version).
    pub(super) diff: Option<String>,
    /// The newest successful review run of exactly this source, with the calls it would have
    /// made to tools that may write; null when it was never reviewed.
    pub(super) review: Option<crate::ReviewSummary>,
    /// The upstream tools the version refers to, with the definitions it is published against:
    /// its runs may call no other upstream tool, and it is suspended while one of these waits
    /// for an admin's review of a changed definition.
    pub(super) upstream_tools: Vec<PinnedTool>,
}

/// An upstream tool a published version refers to.
#[derive(Debug, Serialize, JsonSchema)]
pub(super) struct PinnedTool {
    /// The tool's name.
    pub(super) tool: String,
    /// SHA-256 of its approved definition when the version was published.
    pub(super) definition_sha256: String,
}

impl From<&ScriptPin> for PinnedTool {
    fn from(pin: &ScriptPin) -> Self {
        PinnedTool {
            tool: pin.tool.clone(),
            definition_sha256: pin.hash.clone(),
        }
    }
}

impl PublishOutput {
    pub(super) fn new(version: Option<ScriptVersion>, preview: crate::PublishPreview) -> Self {
        let next = preview.previous_version.map_or(1, |v| v + 1);
        PublishOutput {
            published: version.is_some(),
            tool: script_tool_name(&preview.name),
            version: i64::from(version.as_ref().map_or(next, |v| v.version)),
            author_roles: version.as_ref().map(|v| v.author_roles.clone()),
            publisher: version.as_ref().map(|v| v.publisher.clone()),
            published_at_ms: version.as_ref().map(|v| v.published_at_ms),
            name: preview.name,
            author: preview.author,
            hash: preview.hash,
            previous_version: preview.previous_version.map(i64::from),
            diff: preview.diff,
            review: preview.review,
            upstream_tools: preview.pins.iter().map(PinnedTool::from).collect(),
        }
    }
}

/// A published version, as listed.
#[derive(Debug, Serialize, JsonSchema)]
pub(super) struct VersionView {
    /// The script's name.
    pub(super) name: String,
    /// The version number (1, 2, ...).
    pub(super) version: i64,
    /// The tool it is served as.
    pub(super) tool: String,
    /// Who wrote it.
    pub(super) author: String,
    /// The author's roles, captured at publish time: the roles its runs carry.
    pub(super) author_roles: Vec<String>,
    /// Who published it.
    pub(super) publisher: String,
    /// SHA-256 of its source.
    pub(super) hash: String,
    /// When (Unix ms).
    pub(super) published_at_ms: i64,
    /// The upstream tools it was published against (null for a version published before
    /// larkgate recorded them).
    pub(super) upstream_tools: Option<Vec<String>>,
}

impl From<ScriptVersion> for VersionView {
    fn from(v: ScriptVersion) -> Self {
        VersionView {
            tool: script_tool_name(&v.name),
            name: v.name,
            version: i64::from(v.version),
            author: v.author,
            author_roles: v.author_roles,
            publisher: v.publisher,
            hash: v.hash,
            published_at_ms: v.published_at_ms,
            upstream_tools: v
                .pins
                .map(|pins| pins.into_iter().map(|p| p.tool).collect()),
        }
    }
}

/// A draft, as listed.
#[derive(Debug, Serialize, JsonSchema)]
pub(super) struct DraftView {
    /// The script's name.
    pub(super) name: String,
    /// Its author.
    pub(super) author: String,
    /// When it was last saved (Unix ms).
    pub(super) updated_at_ms: i64,
}

/// Input of `script_list`.
#[derive(Debug, Deserialize, JsonSchema)]
pub(super) struct ListInput {}

/// Output of `script_list`.
#[derive(Debug, Serialize, JsonSchema)]
pub(super) struct ScriptList {
    /// Every draft, by name.
    pub(super) drafts: Vec<DraftView>,
    /// The latest version of every published script, by name.
    pub(super) published: Vec<VersionView>,
}

/// Output of `script_history`.
#[derive(Debug, Serialize, JsonSchema)]
pub(super) struct History {
    /// Every version, oldest first.
    pub(super) versions: Vec<VersionView>,
}

/// Input of `runs_list`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
pub(super) struct RunsListInput {
    /// Only runs of this script.
    pub(super) script: Option<String>,
    /// Only runs that ran as this principal (`script:NAME` for published runs).
    pub(super) principal: Option<String>,
    /// Only runs with this status: `running`, `succeeded` or `failed`.
    pub(super) status: Option<String>,
    /// Only runs started at or after this time (Unix ms).
    pub(super) since_ms: Option<i64>,
    /// At most this many (default 50, at most 1000).
    pub(super) limit: Option<i64>,
}

/// Output of `runs_list`.
#[derive(Debug, Serialize, JsonSchema)]
pub(super) struct RunsListOutput {
    /// The runs, newest first.
    pub(super) runs: Vec<RunView>,
}

/// Input of `run_get`.
#[derive(Debug, Deserialize, JsonSchema)]
pub(super) struct RunIdInput {
    /// The run's id.
    pub(super) run_id: String,
}

/// A run record: the one shape of `run_get`, `runs_list`, `larkgate runs show` and `larkgate
/// runs list --json`.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct RunView {
    /// The run's id.
    pub run_id: String,
    /// The script's name, for saved drafts and published scripts.
    pub script: Option<String>,
    /// The published version.
    pub version: Option<i64>,
    /// SHA-256 of the source that ran.
    pub hash: String,
    /// `draft`, `review` or `published`.
    pub kind: String,
    /// Who it ran as.
    pub principal: String,
    /// Who started it.
    pub started_by: Option<String>,
    /// `running`, `succeeded` or `failed`.
    pub status: String,
    /// `main`'s result, when it succeeded.
    pub result: Option<serde_json::Value>,
    /// The refusal or error code, when it failed.
    pub error_code: Option<String>,
    /// The error, when it failed.
    pub error: Option<String>,
    /// Tool calls made.
    pub tool_calls: i64,
    /// Times it waited out a `rate_limited` refusal.
    pub paces: i64,
    /// How long it took.
    pub duration_ms: i64,
    /// The worker's peak resident memory.
    pub peak_memory_bytes: Option<i64>,
    /// When it started (Unix ms).
    pub started_at_ms: i64,
    /// When it finished.
    pub finished_at_ms: Option<i64>,
    /// For a review run: the calls it would have made to tools that may write, in order.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub intended_writes: Option<Vec<IntendedWrite>>,
    /// For a review run: every tool it called, by name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tools_called: Option<Vec<String>>,
}

pub(super) fn signed(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

impl From<Run> for RunView {
    fn from(run: Run) -> Self {
        let review = crate::review_of(&run);
        let (intended_writes, tools_called) = match review {
            Some(review) => (
                Some(review.intended_writes),
                Some(review.tools_called.into_iter().collect()),
            ),
            None => (None, None),
        };
        RunView {
            run_id: run.id,
            script: run.script,
            version: run.version.map(i64::from),
            hash: run.hash,
            kind: run.kind.as_str().to_owned(),
            principal: run.principal,
            started_by: run.started_by,
            status: run.status.as_str().to_owned(),
            result: run.result.and_then(|r| serde_json::from_str(&r).ok()),
            error_code: run.error_code.map(|code| code.as_str().to_owned()),
            error: run.error,
            tool_calls: signed(run.stats.tool_calls),
            paces: signed(run.stats.paces),
            duration_ms: signed(run.stats.duration_ms),
            peak_memory_bytes: run.stats.peak_memory_bytes.map(signed),
            started_at_ms: run.started_at_ms,
            finished_at_ms: run.finished_at_ms,
            intended_writes,
            tools_called,
        }
    }
}
