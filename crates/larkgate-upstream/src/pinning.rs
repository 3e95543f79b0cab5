//! Tool pinning: an upstream cannot quietly change what an approved tool does.
//!
//! # Threat model
//!
//! An operator adopts an upstream after reading its tools. Later the server — compromised, or
//! simply updated — changes a tool's description (instructions aimed at the model), its input
//! schema (new parameters that exfiltrate), or its annotations (now claiming to be read-only so
//! drafts may call it), or adds a new tool. Clients of other gateways see the new definition
//! at once.
//!
//! larkgate pins SHA-256 over the canonical JSON of each tool's `{name, title, description,
//! inputSchema, outputSchema, annotations}` when an upstream is first adopted. On every later
//! listing, a tool of an `approval = "always"` upstream whose definition differs from its pin,
//! or that has no pin, is **quarantined**: not listed, its calls refused as `not_found`, until
//! an operator reviews the difference (`larkgate upstream review`) and approves it. Upstreams
//! configured `approval = "never"` are trusted by the operator: their changes are re-pinned.
//! Every change — pinned, quarantined, approved, re-pinned — is an audit event.

use larkgate_platform::audit::EventKind;
use rmcp::model::Tool;
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::tools::Approval;
use larkgate_store::{PinStatus, ToolPin};

/// A tool's pinned definition: canonical JSON (keys sorted, no whitespace) and its SHA-256.
pub fn definition(tool: &Tool) -> (String, String) {
    let full = serde_json::to_value(tool).unwrap_or(Value::Null);
    let mut pinned = serde_json::Map::new();
    for key in [
        "name",
        "title",
        "description",
        "inputSchema",
        "outputSchema",
        "annotations",
    ] {
        if let Some(value) = full.get(key) {
            pinned.insert(key.to_owned(), value.clone());
        }
    }
    let canonical = canonical(&Value::Object(pinned));
    let hash = hex::encode(Sha256::digest(canonical.as_bytes()));
    (canonical, hash)
}

/// JSON with object keys sorted at every level, compact.
fn canonical(value: &Value) -> String {
    fn sorted(value: &Value) -> Value {
        match value {
            Value::Object(map) => {
                let mut keys: Vec<&String> = map.keys().collect();
                keys.sort();
                let mut out = serde_json::Map::new();
                for key in keys {
                    out.insert(key.clone(), sorted(&map[key]));
                }
                Value::Object(out)
            }
            Value::Array(items) => Value::Array(items.iter().map(sorted).collect()),
            other => other.clone(),
        }
    }
    serde_json::to_string(&sorted(value)).unwrap_or_default()
}

/// What happened to one tool at a listing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PinChange {
    /// The tool's name at the upstream.
    pub tool: String,
    /// `tool_pinned`, `tool_repinned`, `tool_quarantined` or `tool_restored`.
    pub event: EventKind,
    /// The definition's hash now served.
    pub hash: String,
}

/// A listing checked against the pins.
#[derive(Debug, Default)]
pub struct Reconciled {
    /// The tools that may be used.
    pub usable: Vec<Tool>,
    /// The tools held back, by name.
    pub quarantined: Vec<String>,
    /// Pins to save.
    pub pins: Vec<ToolPin>,
    /// What changed (each is audited).
    pub changes: Vec<PinChange>,
}

/// Checks `tools` from upstream `alias` against its `pins`. With no pins at all, this is the
/// upstream's adoption: every tool is pinned as it is.
pub fn reconcile(
    alias: &str,
    approval: Approval,
    tools: &[Tool],
    pins: &[ToolPin],
    now_ms: i64,
) -> Reconciled {
    let adopting = pins.is_empty();
    let mut out = Reconciled::default();
    for tool in tools {
        let name = tool.name.to_string();
        let (served, hash) = definition(tool);
        let pin = pins.iter().find(|p| p.tool == name);
        let approved = |event: EventKind, out: &mut Reconciled| {
            out.pins.push(ToolPin {
                alias: alias.to_owned(),
                tool: name.clone(),
                hash: hash.clone(),
                definition: served.clone(),
                status: PinStatus::Approved,
                pending: None,
                reviewed_by: None,
                updated_at_ms: now_ms,
            });
            out.changes.push(PinChange {
                tool: name.clone(),
                event,
                hash: hash.clone(),
            });
            out.usable.push(tool.clone());
        };
        match pin {
            Some(pin) if pin.hash == hash => {
                if pin.status == PinStatus::Quarantined {
                    // The upstream went back to the approved definition.
                    let mut restored = pin.clone();
                    restored.status = PinStatus::Approved;
                    restored.pending = None;
                    restored.updated_at_ms = now_ms;
                    out.pins.push(restored);
                    out.changes.push(PinChange {
                        tool: name.clone(),
                        event: EventKind::ToolRestored,
                        hash: hash.clone(),
                    });
                }
                out.usable.push(tool.clone());
            }
            None if adopting => approved(EventKind::ToolPinned, &mut out),
            _ if approval == Approval::Never => approved(EventKind::ToolRepinned, &mut out),
            existing => {
                let already = existing.is_some_and(|p| {
                    p.status == PinStatus::Quarantined
                        && p.pending.as_ref().is_some_and(|(h, _)| *h == hash)
                });
                if !already {
                    out.pins.push(ToolPin {
                        alias: alias.to_owned(),
                        tool: name.clone(),
                        hash: existing.map(|p| p.hash.clone()).unwrap_or_default(),
                        definition: existing.map(|p| p.definition.clone()).unwrap_or_default(),
                        status: PinStatus::Quarantined,
                        pending: Some((hash.clone(), served.clone())),
                        reviewed_by: existing.and_then(|p| p.reviewed_by.clone()),
                        updated_at_ms: now_ms,
                    });
                    out.changes.push(PinChange {
                        tool: name.clone(),
                        event: EventKind::ToolQuarantined,
                        hash: hash.clone(),
                    });
                }
                out.quarantined.push(name);
            }
        }
    }
    out
}

/// The difference between a quarantined tool's approved and pending definitions, as a unified
/// diff of their pretty-printed JSON.
pub fn difference(pin: &ToolPin) -> String {
    let pretty = |text: &str| {
        serde_json::from_str::<Value>(text)
            .ok()
            .and_then(|v| serde_json::to_string_pretty(&v).ok())
            .unwrap_or_default()
    };
    let before = pretty(&pin.definition);
    let after = pin
        .pending
        .as_ref()
        .map(|(_, d)| pretty(d))
        .unwrap_or_default();
    similar::TextDiff::from_lines(&before, &after)
        .unified_diff()
        .header("approved", "served now")
        .to_string()
}

/// Approves a quarantined tool's pending definition as `reviewer`.
pub fn approve(pin: &ToolPin, reviewer: &str, now_ms: i64) -> Option<ToolPin> {
    let (hash, definition) = pin.pending.clone()?;
    Some(ToolPin {
        hash,
        definition,
        status: PinStatus::Approved,
        pending: None,
        reviewed_by: Some(reviewer.to_owned()),
        updated_at_ms: now_ms,
        ..pin.clone()
    })
}
