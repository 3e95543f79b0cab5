//! Review runs: what a draft would change, recorded instead of made.
//!
//! A draft run in review mode ([`RunKind::Review`](crate::RunKind::Review)) calls read-only
//! tools as any draft does, but for those the approval gate holds: the gate makes (or finds)
//! the request for the call, and it is intercepted and recorded with it ([`ReviewGate`]), so
//! that one review run shows every approval the run would need, and spends none. A call to a tool that may write (anything not classified
//! read-only, fail closed) crosses authenticate, authorize and the argument checks like any
//! call, then the write barrier marks it *intercepted*: the rate limit and the approval gate
//! let it pass untouched (nothing is sent, so nothing is spent or approved), and the journal,
//! instead of dispatching it, writes one `review` audit record, adds the call to the run's
//! ledger here, and answers it with [`placeholder`].
//!
//! Threat model: a review run is untrusted code exploring what it may do. It cannot make a
//! write happen through this path (the handler is never called), cannot make the ledger grow
//! without bound ([`MAX_INTENDED_WRITES`], [`MAX_INTENDED_BYTES`]: past them the call is
//! refused `limit_exceeded`, never silently dropped), and cannot write into another run's
//! ledger (the ledger is found by the run id bound to the session, which the run cannot
//! choose). A review call whose run has no open ledger is refused: nothing is recorded where
//! nobody will read it.

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;

use larkgate_binding::{Map, Value};
use serde::{Deserialize, Serialize};

use crate::envelope::{Code, Refusal};

/// The most intended writes one review run records.
pub const MAX_INTENDED_WRITES: usize = 1000;
/// The most bytes of recorded arguments (canonical JSON) one review run keeps.
pub const MAX_INTENDED_BYTES: usize = 1024 * 1024;

/// A call a review run would have made to a tool that may write, or to a gated tool.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct IntendedWrite {
    /// The tool it would have called.
    pub tool: String,
    /// Its canonical arguments, with the fields `[policy.approvals] redact` names shown as
    /// `"<redacted>"`.
    pub arguments: serde_json::Value,
    /// For a call the approval gate holds: `requested` (a request for these exact arguments
    /// was made, `approval_id`: once approved, the same call in a draft run goes through),
    /// `approved` (one is approved and was not spent), or `needed` (a write: the run that
    /// makes it asks then, as its own principal).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<String>,
    /// The approval request, for `requested` and `approved`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval_id: Option<String>,
}

/// What the approval gate said of a review run's call it held.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReviewGate {
    /// A request for the call was made (or was waiting): its id.
    Requested(String),
    /// An approval for the call is granted and was not spent: its id.
    Approved(String),
    /// A write the gate would hold: its real run asks.
    Needed,
}

impl ReviewGate {
    fn parts(&self) -> (&'static str, Option<String>) {
        match self {
            ReviewGate::Requested(id) => ("requested", Some(id.clone())),
            ReviewGate::Approved(id) => ("approved", Some(id.clone())),
            ReviewGate::Needed => ("needed", None),
        }
    }
}

impl IntendedWrite {
    /// `tool(key=value, ...)`, the arguments as JSON values: how a person reads it in a list.
    pub fn call_text(&self) -> String {
        let arguments = match &self.arguments {
            serde_json::Value::Object(map) => map
                .iter()
                .map(|(key, value)| format!("{key}={value}"))
                .collect::<Vec<_>>()
                .join(", "),
            other => other.to_string(),
        };
        format!("{}({arguments})", self.tool)
    }
}

/// What a review run did, as its run record keeps it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReviewRecord {
    /// The calls it would have made to tools that may write, in order.
    #[serde(default)]
    pub intended_writes: Vec<IntendedWrite>,
    /// Every tool it called (made or recorded), by name: a published version of its source is
    /// pinned to the upstream tools among them.
    #[serde(default)]
    pub tools_called: BTreeSet<String>,
}

#[derive(Debug, Default)]
struct Ledger {
    record: ReviewRecord,
    bytes: usize,
}

/// The ledgers of the review runs going on in this process, by run id.
#[derive(Debug, Default)]
pub struct Reviews {
    open: Mutex<HashMap<String, Ledger>>,
}

impl Reviews {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Ledger>> {
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Opens the ledger of review run `run_id`, before the run makes its first call.
    pub fn open(&self, run_id: &str) {
        self.lock().insert(run_id.to_owned(), Ledger::default());
    }

    /// Closes the ledger of `run_id` and answers what it recorded.
    pub fn close(&self, run_id: &str) -> ReviewRecord {
        self.lock()
            .remove(run_id)
            .map(|ledger| ledger.record)
            .unwrap_or_default()
    }

    /// Notes that review run `run_id` called `tool` (an authorized call, made or not). A run
    /// with no open ledger notes nothing; the tool set is bounded by the tools there are.
    pub fn called(&self, run_id: Option<&str>, tool: &str) {
        let mut open = self.lock();
        if let Some(ledger) = run_id.and_then(|id| open.get_mut(id)) {
            ledger.record.tools_called.insert(tool.to_owned());
        }
    }

    /// Records `tool` called with `shown` (the redacted canonical arguments, as JSON text) in
    /// the ledger of `run_id`; answers its place (1, 2, ...).
    pub fn record(
        &self,
        run_id: Option<&str>,
        tool: &str,
        shown: &str,
        gate: Option<&ReviewGate>,
    ) -> Result<usize, Refusal> {
        let mut open = self.lock();
        let ledger = run_id.and_then(|id| open.get_mut(id)).ok_or_else(|| {
            Refusal::internal(
                "the review run's record is closed, so the call was not recorded",
                format_args!("no open review ledger for {run_id:?} calling {tool}"),
            )
        })?;
        if ledger.record.intended_writes.len() >= MAX_INTENDED_WRITES {
            return Err(Refusal::new(
                Code::LimitExceeded,
                format!(
                    "the review run exceeded its intended writes limit: it may record at most \
                     {MAX_INTENDED_WRITES} calls to tools that may write"
                ),
            )
            .with_hint("review the script with arguments that make fewer writes"));
        }
        let bytes = tool.len() + shown.len();
        if ledger.bytes + bytes > MAX_INTENDED_BYTES {
            return Err(Refusal::new(
                Code::LimitExceeded,
                format!(
                    "the review run exceeded its intended writes limit: it may record at most \
                     {MAX_INTENDED_BYTES} bytes of arguments"
                ),
            )
            .with_hint("review the script with arguments that make smaller writes"));
        }
        let arguments = serde_json::from_str(shown).map_err(|e| {
            Refusal::internal("the intended write could not be recorded", e.to_string())
        })?;
        ledger.bytes += bytes;
        let (approval, approval_id) = match gate.map(ReviewGate::parts) {
            Some((state, id)) => (Some(state.to_owned()), id),
            None => (None, None),
        };
        ledger.record.intended_writes.push(IntendedWrite {
            tool: tool.to_owned(),
            arguments,
            approval,
            approval_id,
        });
        Ok(ledger.record.intended_writes.len())
    }
}

/// What an intercepted call answers, documented for script authors:
/// `{"intercepted": true, "tool": NAME, "write": N}`, where N counts the run's intended
/// writes from 1.
pub fn placeholder(tool: &str, index: usize) -> Map {
    let mut map = Map::new();
    map.insert("intercepted".to_owned(), Value::Bool(true));
    map.insert("tool".to_owned(), Value::from(tool));
    map.insert(
        "write".to_owned(),
        Value::Int(i64::try_from(index).unwrap_or(i64::MAX)),
    );
    map
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ledger_records_in_order_and_is_gone_once_closed() {
        let reviews = Reviews::default();
        reviews.open("run-1");
        assert_eq!(
            reviews.record(Some("run-1"), "kv_set", r#"{"key":"a"}"#, None),
            Ok(1)
        );
        assert_eq!(
            reviews.record(Some("run-1"), "kv_delete", r#"{"key":"b"}"#, None),
            Ok(2)
        );
        for tool in ["kv_get", "kv_set", "kv_delete", "kv_get"] {
            reviews.called(Some("run-1"), tool);
        }
        reviews.called(Some("elsewhere"), "clock_now");
        let record = reviews.close("run-1");
        assert_eq!(
            record.tools_called.iter().collect::<Vec<_>>(),
            ["kv_delete", "kv_get", "kv_set"]
        );
        let writes = record.intended_writes;
        assert_eq!(writes.len(), 2);
        assert_eq!(writes[0].call_text(), r#"kv_set(key="a")"#);
        assert_eq!(writes[1].tool, "kv_delete");
        assert_eq!(reviews.close("run-1"), ReviewRecord::default());
    }

    #[test]
    fn hostile_review_calls_are_refused_not_dropped() {
        let reviews = Reviews::default();
        reviews.open("mine");
        // No ledger: another run's id, no run at all, a closed one.
        for id in [Some("theirs"), None, Some("")] {
            let refusal = reviews.record(id, "kv_set", "{}", None).unwrap_err();
            assert_eq!(refusal.code, Code::Internal, "{id:?}");
        }
        // Too many.
        for _ in 0..MAX_INTENDED_WRITES {
            reviews.record(Some("mine"), "kv_set", "{}", None).unwrap();
        }
        let refusal = reviews
            .record(Some("mine"), "kv_set", "{}", None)
            .unwrap_err();
        assert_eq!(refusal.code, Code::LimitExceeded);
        assert!(refusal.message.contains("intended writes limit"));
        assert_eq!(
            reviews.close("mine").intended_writes.len(),
            MAX_INTENDED_WRITES
        );
        // Too large.
        reviews.open("big");
        let half = format!("{{\"v\":\"{}\"}}", "x".repeat(MAX_INTENDED_BYTES / 2));
        reviews.record(Some("big"), "kv_set", &half, None).unwrap();
        let refusal = reviews
            .record(Some("big"), "kv_set", &half, None)
            .unwrap_err();
        assert_eq!(refusal.code, Code::LimitExceeded);
        assert_eq!(reviews.close("big").intended_writes.len(), 1);
    }

    #[test]
    fn the_placeholder_says_what_it_stands_for() {
        let map = placeholder("kv_set", 3);
        assert_eq!(map.get("intercepted"), Some(&Value::Bool(true)));
        assert_eq!(map.get("tool"), Some(&Value::from("kv_set")));
        assert_eq!(map.get("write"), Some(&Value::Int(3)));
    }
}
