//! The records of scripts: drafts, published versions and their pins, runs.

use larkgate_wire::{Code, RunKind};
use serde::{Deserialize, Serialize};

/// A draft to publish as its script's next version.
#[derive(Clone, Copy, Debug)]
pub struct Publication<'a> {
    /// The draft's (and script's) name.
    pub name: &'a str,
    /// The source the publisher checked, which must still be the draft's.
    pub source: &'a str,
    /// SHA-256 (hex) of `source`.
    pub hash: &'a str,
    /// Who publishes.
    pub publisher: &'a str,
    /// The upstream tools the source refers to.
    pub pins: &'a [ScriptPin],
    /// When (Unix ms).
    pub now_ms: i64,
}

/// Which runs [`crate::ScriptStore::runs`] answers, newest first.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RunQuery {
    /// Only runs of this script (saved drafts and published versions).
    pub script: Option<String>,
    /// Only runs that ran as this principal.
    pub principal: Option<String>,
    /// Only runs with this status.
    pub status: Option<RunStatus>,
    /// Only runs started at or after this time (Unix ms).
    pub since_ms: Option<i64>,
    /// Only runs `reader` may read: that ran as it or that it started (`None`: every run, for
    /// administrators).
    pub reader: Option<String>,
    /// At most this many.
    pub limit: usize,
}

/// A script's editable draft: one per name, owned by its author.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Draft {
    /// The script's name.
    pub name: String,
    /// The Starlark source.
    pub source: String,
    /// Who wrote it: the only principal that may change or run it.
    pub author: String,
    /// When it was last saved (Unix ms).
    pub updated_at_ms: i64,
}

/// An immutable published version of a script.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScriptVersion {
    /// The script's name.
    pub name: String,
    /// 1, 2, 3, … per name.
    pub version: u32,
    /// The Starlark source, as published.
    pub source: String,
    /// SHA-256 (hex) of the source.
    pub hash: String,
    /// The draft's author.
    pub author: String,
    /// The author's roles when the version was published: the roles its runs carry.
    pub author_roles: Vec<String>,
    /// Who published it (recorded, never copied into the run's authority).
    pub publisher: String,
    /// When (Unix ms).
    pub published_at_ms: i64,
    /// The upstream tools it refers to, each with the definition it was published against;
    /// `None` for a version published before larkgate recorded them.
    pub pins: Option<Vec<ScriptPin>>,
}

/// An upstream tool a published script refers to, and the definition it was published
/// against.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScriptPin {
    /// The tool's larkgate name (`github__search_issues`).
    pub tool: String,
    /// The upstream's alias.
    pub alias: String,
    /// The tool's name at the upstream.
    pub upstream_tool: String,
    /// SHA-256 (hex) of the tool's approved definition when the version was published (empty
    /// when it had none).
    pub hash: String,
}

/// Where a run stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// Started, not finished.
    Running,
    /// Returned a result.
    Succeeded,
    /// Failed: refused, limited, or the script raised.
    Failed,
}

impl RunStatus {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Running => "running",
            RunStatus::Succeeded => "succeeded",
            RunStatus::Failed => "failed",
        }
    }

    /// Parses the stored name.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "running" => RunStatus::Running,
            "succeeded" => RunStatus::Succeeded,
            "failed" => RunStatus::Failed,
            _ => return None,
        })
    }
}

/// What a run used.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunStats {
    /// Tool calls made.
    pub tool_calls: u64,
    /// Times the run waited out a `rate_limited` refusal.
    pub paces: u64,
    /// Wall time, in milliseconds.
    pub duration_ms: u64,
    /// Peak memory, in bytes, when known.
    pub peak_memory_bytes: Option<u64>,
}

/// One script run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Run {
    /// The run's id.
    pub id: String,
    /// The script's name, for a saved draft or a published version.
    pub script: Option<String>,
    /// The published version, for published runs.
    pub version: Option<u32>,
    /// SHA-256 (hex) of the source that ran.
    pub hash: String,
    /// A draft's run, a review run, or a published version's run.
    pub kind: RunKind,
    /// Who the run ran as.
    pub principal: String,
    /// Where it stands.
    pub status: RunStatus,
    /// The result, as JSON, when it succeeded.
    pub result: Option<String>,
    /// The refusal or error code, when it failed.
    pub error_code: Option<Code>,
    /// The error's message, when it failed.
    pub error: Option<String>,
    /// What it used.
    pub stats: RunStats,
    /// When it started (Unix ms).
    pub started_at_ms: i64,
    /// When it finished.
    pub finished_at_ms: Option<i64>,
    /// Who started it (for a published run, the caller of its tool; unknown for runs recorded
    /// before larkgate kept it).
    pub started_by: Option<String>,
    /// For a review run, as JSON (the platform owns the format): the calls it would have made
    /// to tools that may write, in order (arguments redacted as approvers see them), and every
    /// tool it called.
    pub review: Option<String>,
}
