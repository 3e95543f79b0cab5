//! Run records: one run, or a filtered listing, as their reader may read them (whoever started
//! a run, the principal it ran as, and admins).

use larkgate_platform::access;
use larkgate_platform::envelope::{Code, Refusal};
use larkgate_platform::review::ReviewRecord;
use larkgate_store::{Principal, Run, RunQuery, RunStatus, Store};

use crate::{Scripts, store_failed};

/// The run `id` if `reader` may read it: whoever started it, the principal it ran as, and
/// admins; anyone else gets the same answer as for a run that does not exist.
pub async fn readable_run(store: &dyn Store, reader: &Principal, id: &str) -> Result<Run, Refusal> {
    let run = store.run(id).await.map_err(store_failed)?;
    run.filter(|run| access::may_read_run(reader, &run.principal, run.started_by.as_deref()))
        .ok_or_else(|| Refusal::new(Code::NotFound, format!("there is no run {id:?}")))
}

/// What a runs listing is filtered by, as a caller gives it.
#[derive(Clone, Debug, Default)]
pub struct RunsFilter {
    /// Only runs of this script.
    pub script: Option<String>,
    /// Only runs that ran as this principal.
    pub principal: Option<String>,
    /// Only runs with this status (`running`, `succeeded`, `failed`).
    pub status: Option<String>,
    /// Only runs started at or after this time (Unix ms).
    pub since_ms: Option<i64>,
    /// At most this many (default [`DEFAULT_RUNS`], at most [`MAX_RUNS`]).
    pub limit: Option<i64>,
}

/// How many runs a listing answers unless told.
pub const DEFAULT_RUNS: usize = 50;
/// The most runs one listing answers.
pub const MAX_RUNS: usize = 1000;

/// The runs `filter` selects that `reader` may read (as [`readable_run`] decides: admins every
/// run, anyone else the runs they started or that ran as them), newest first.
pub async fn readable_runs(
    store: &dyn Store,
    reader: &Principal,
    filter: &RunsFilter,
) -> Result<Vec<Run>, Refusal> {
    let status = match filter.status.as_deref() {
        None => None,
        Some(text) => Some(RunStatus::parse(text).ok_or_else(|| {
            Refusal::new(
                Code::InvalidArguments,
                format!("a run's status is running, succeeded or failed, not {text:?}"),
            )
        })?),
    };
    let limit = match filter.limit {
        None => DEFAULT_RUNS,
        Some(n) if (1..=MAX_RUNS as i64).contains(&n) => n as usize,
        Some(n) => {
            return Err(Refusal::new(
                Code::InvalidArguments,
                format!("limit is 1 to {MAX_RUNS}, not {n}"),
            )
            .with_hint("narrow the listing by script, principal, status or since_ms"));
        }
    };
    let admin = access::has_any_role(reader, access::ADMINS);
    let query = RunQuery {
        script: filter.script.clone(),
        principal: filter.principal.clone(),
        status,
        since_ms: filter.since_ms,
        reader: (!admin).then(|| reader.id.clone()),
        limit,
    };
    store.runs(&query).await.map_err(store_failed)
}

/// A run's review record, as its run record keeps it.
pub fn review_of(run: &Run) -> Option<ReviewRecord> {
    run.review
        .as_deref()
        .map(|json| serde_json::from_str(json).unwrap_or_default())
}

impl Scripts {
    /// The run `id`, if `reader` may read it: whoever started it, the principal it ran as,
    /// and admins. Others are told it does not exist.
    pub async fn run_record(&self, reader: &Principal, id: &str) -> Result<Run, Refusal> {
        readable_run(self.store.as_ref(), reader, id).await
    }

    /// The runs `filter` selects that `reader` may read, newest first ([`readable_runs`]).
    pub async fn run_records(
        &self,
        reader: &Principal,
        filter: &RunsFilter,
    ) -> Result<Vec<Run>, Refusal> {
        readable_runs(self.store.as_ref(), reader, filter).await
    }
}
