//! A run: its turn among the runs going at once, its record started and finished in the store,
//! its worker, its in-memory session with the identity [`crate::authority`] decided, and its
//! review ledger; cancelled runs at shutdown.

use std::collections::HashSet;
use std::time::Instant;

use larkgate_binding::{Limits, Value};
use larkgate_platform::envelope::{Code, Refusal};
use larkgate_platform::review::ReviewRecord;
use larkgate_platform::{RunContext, RunKind};
use larkgate_script::{RunError, Script};
use larkgate_store::{Run, RunStats, RunStatus, now_ms};
use tracing::Instrument;

use crate::{RunRequest, Scripts, check, source_hash, store_failed, turns};

/// A finished run: its record, what it printed, and its outcome.
#[derive(Clone, Debug)]
pub struct Finished {
    /// The run as recorded.
    pub record: Run,
    /// What it printed.
    pub printed: String,
    /// `main`'s result, or why the run failed.
    pub outcome: Result<Value, RunError>,
    /// For a review run: the calls it would have made to tools that may write, in order, and
    /// the tools it called.
    pub review: Option<ReviewRecord>,
}

impl Finished {
    /// The failed run as a refusal: its own code and text, and where to read the record.
    pub fn refusal(&self, error: &RunError) -> Refusal {
        let code = error.code();
        let id = &self.record.id;
        let read = format!("read the run with run_get(run_id=\"{id}\")");
        match error {
            // A call inside the run was refused: the caller hears which, and for an approval
            // its id, so that it can be approved and the script called again.
            RunError::Refused {
                tool: Some(tool),
                approval_id,
                text,
                ..
            } => Refusal {
                approval_id: approval_id.clone(),
                ..Refusal::new(code, format!("run {id} failed: its call of {tool} was refused: {text} [{code}]"))
                    .with_hint(match approval_id {
                        Some(approval) => format!(
                            "an approver decides approval {approval} (the call of {tool} inside \
                             this script); then call the script again with the same arguments; {read}"
                        ),
                        None => read,
                    })
            },
            _ => Refusal::new(code, format!("run {id} failed: {error}")).with_hint(read),
        }
    }
}

impl Scripts {
    /// Runs a script in a worker and records the run. A refusal means the run never started
    /// (a bad script or arguments, too deep a nesting); a run that started and failed is a
    /// [`Finished`] with an error outcome.
    pub async fn run(&self, request: RunRequest) -> Result<Finished, Refusal> {
        let bounds = self.run_limits();
        if request.depth > bounds.max_depth {
            return Err(Refusal::new(
                Code::LimitExceeded,
                format!(
                    "the run exceeded its script nesting depth limit: scripts may call scripts \
                     at most {} deep",
                    bounds.max_depth
                ),
            )
            .with_hint("raise [scripts] max_depth, or have fewer scripts call each other"));
        }
        let entry = check(&request.name, &request.source)?;
        // Bound here too, so a bad argument is refused before a worker or a record is spent.
        entry
            .input
            .bind_map("main", &request.arguments)
            .map_err(|e| larkgate_platform::envelope::refuse_arguments(&e))?;
        let _turn = self.turns.take().await.map_err(|no| match no {
            turns::NoTurn::Waited(refusal) => refusal,
            turns::NoTurn::Closed => {
                Refusal::internal("larkgate is stopping", "the run slots are closed")
            }
        })?;
        let id = run_id();
        let started = Instant::now();
        let mut record = Run {
            id: id.clone(),
            script: request.saved.then(|| request.name.clone()),
            version: request.version,
            hash: source_hash(&request.source),
            kind: request.kind,
            principal: request.principal.id.clone(),
            status: RunStatus::Running,
            result: None,
            error_code: None,
            error: None,
            stats: RunStats::default(),
            started_at_ms: now_ms(),
            finished_at_ms: None,
            started_by: Some(request.started_by.clone()),
            review: None,
        };
        self.store
            .start_run(record.clone())
            .await
            .map_err(store_failed)?;
        let metrics = &self.platform.services().metrics;
        metrics.active_runs.inc();
        let reserved = i64::try_from(self.turns.reservation()).unwrap_or(i64::MAX);
        metrics.script_memory_reserved_bytes.inc_by(reserved);
        self.lock_active().insert(id.clone());
        let span = tracing::info_span!(
            "script.run",
            otel.name = format!("run {}", request.name),
            larkgate.script.name = %request.name,
            larkgate.script.version = request.version,
            larkgate.run.id = %id,
            larkgate.run.kind = request.kind.as_str(),
        );
        let ledger = (request.kind == RunKind::Review)
            .then(|| ReviewLedger::open(&self.platform.services().reviews, &id));
        let mut report = self
            .execute(&request, &id, &bounds.limits)
            .instrument(span)
            .await;
        let review = ledger.map(ReviewLedger::close);
        if report.outcome.is_err() && self.stopping.load(std::sync::atomic::Ordering::SeqCst) {
            report.outcome = Err(RunError::Failed(CANCELLED.to_owned()));
        }
        self.lock_active().remove(&id);
        metrics.active_runs.dec();
        metrics.script_memory_reserved_bytes.dec_by(reserved);
        record.finished_at_ms = Some(now_ms());
        record.stats = RunStats {
            tool_calls: report.usage.tool_calls,
            paces: report.usage.paces,
            duration_ms: started.elapsed().as_millis() as u64,
            peak_memory_bytes: report.usage.peak_memory_bytes,
        };
        match &report.outcome {
            Ok(value) => {
                record.status = RunStatus::Succeeded;
                record.result = Some(value.to_string());
            }
            Err(error) => {
                record.status = RunStatus::Failed;
                record.error_code = Some(error.code());
                record.error = Some(error.to_string());
            }
        }
        record.review = review
            .as_ref()
            .map(|review| serde_json::to_string(review).unwrap_or_else(|_| "{}".to_owned()));
        self.store
            .finish_run(record.clone())
            .await
            .map_err(store_failed)?;
        Ok(Finished {
            record,
            printed: report.printed,
            outcome: report.outcome,
            review,
        })
    }

    async fn execute(
        &self,
        request: &RunRequest,
        id: &str,
        limits: &larkgate_script::ScriptLimits,
    ) -> larkgate_script::RunReport {
        let context = RunContext {
            principal: request.principal.clone(),
            run_id: Some(id.to_owned()),
            kind: request.kind,
            depth: request.depth,
            chain: request.chain.clone(),
            upstream_tools: request.upstream_tools.clone(),
        };
        let label = format!("script-{}", request.kind);
        let (caller, teardown) = match larkgate_session::connect_in(
            &self.platform,
            context,
            &label,
            Limits::default(),
            request.conversation.clone(),
        )
        .await
        {
            Ok(session) => session,
            Err(e) => {
                return larkgate_script::RunReport::failed(RunError::Failed(e.to_string()));
            }
        };
        let filename = format!("{}.star", request.name);
        let draft = request.kind == RunKind::Draft;
        let run = self.workers.run(
            &caller,
            Script {
                filename: &filename,
                source: &request.source,
                arguments: &request.arguments,
                limits,
            },
            draft,
        );
        // The caller that started the run cancelled it: the run ends (its worker, dropped with
        // the run, is killed), and so do its host calls, whose own callers are this session.
        let cancelled = || RunError::Failed("its caller cancelled it".to_owned());
        let mut report = tokio::select! {
            biased;
            () = request.conversation.cancelled() => larkgate_script::RunReport::failed(cancelled()),
            report = run => report,
        };
        // A run that failed once its caller had cancelled it failed because of that (a host
        // call the cancellation ended, within the same turn of the run): its record says so.
        if report.outcome.is_err() && request.conversation.is_cancelled() {
            report.outcome = Err(cancelled());
        }
        teardown.close().await;
        report
    }

    fn lock_active(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.active.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Cancels every run still going, for a shutdown that could not wait for them: new runs
    /// are refused, every worker is killed, and each run is recorded as failed with
    /// [`CANCELLED`] — by the run itself as its worker dies, or here for one that does not
    /// finish recording within a second.
    pub async fn cancel_active(&self) {
        self.stopping
            .store(true, std::sync::atomic::Ordering::SeqCst);
        self.turns.close();
        larkgate_script::kill_all();
        for _ in 0..20 {
            if self.lock_active().is_empty() {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        let ids: Vec<String> = self.lock_active().drain().collect();
        for id in ids {
            let Ok(Some(mut run)) = self.store.run(&id).await else {
                continue;
            };
            run.status = RunStatus::Failed;
            run.error_code = Some(Code::Internal);
            run.error = Some(format!("the script failed: {CANCELLED}"));
            run.finished_at_ms = Some(now_ms());
            if let Err(error) = self.store.finish_run(run).await {
                tracing::warn!("run {id} could not be recorded as cancelled: {error}");
            }
        }
    }
}

/// A review run's ledger of intended writes, open while the run goes: closed by
/// [`ReviewLedger::close`], or when dropped (a run whose caller went away).
struct ReviewLedger<'a> {
    reviews: &'a larkgate_platform::review::Reviews,
    run_id: String,
    closed: bool,
}

impl<'a> ReviewLedger<'a> {
    fn open(reviews: &'a larkgate_platform::review::Reviews, run_id: &str) -> Self {
        reviews.open(run_id);
        ReviewLedger {
            reviews,
            run_id: run_id.to_owned(),
            closed: false,
        }
    }

    fn close(mut self) -> ReviewRecord {
        self.closed = true;
        self.reviews.close(&self.run_id)
    }
}

impl Drop for ReviewLedger<'_> {
    fn drop(&mut self) {
        if !self.closed {
            self.reviews.close(&self.run_id);
        }
    }
}

/// Why a run that was going at shutdown failed.
const CANCELLED: &str = "the run was cancelled: larkgate stopped";

/// A new run id: time-ordered, unique across processes.
fn run_id() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static SEQUENCE: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let n = SEQUENCE.fetch_add(1, Ordering::Relaxed);
    format!("run-{nanos:x}-{:x}-{n:x}", std::process::id())
}
