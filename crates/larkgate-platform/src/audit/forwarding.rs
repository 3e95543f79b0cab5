//! Events from a process that does not own the chain (an operator's command beside a running
//! gateway): committed to the store's audit inbox, chained by the owner (see the module
//! documentation of [`crate::audit`]).

use std::sync::Arc;

use larkgate_store::{AuditKind, Store, now_ms};

use super::{AuditCode, AuditEntry, AuditError, AuditSink, EventKind};

/// The sink of a process that does not own the chain: events go to the store's audit inbox,
/// for the owner to chain (see the module documentation). Calls are refused
/// ([`AuditError::NotOwner`]), so nothing runs unaudited.
#[derive(Debug)]
pub struct ForwardingAudit {
    store: Arc<dyn Store>,
}

impl ForwardingAudit {
    /// Forwards to the inbox of `store`.
    pub fn new(store: Arc<dyn Store>) -> Self {
        ForwardingAudit { store }
    }
}

impl AuditSink for ForwardingAudit {
    fn append(&self, _entry: AuditEntry) -> Result<u64, AuditError> {
        Err(AuditError::NotOwner)
    }

    fn record_event(&self, entry: AuditEntry) -> Result<(), AuditError> {
        let text = serde_json::to_string(&entry).map_err(std::io::Error::other)?;
        self.store.forward_audit(now_ms(), &text)?;
        Ok(())
    }
}

/// A forwarded entry is an event, whatever it says: only the owner records calls, so nothing
/// else can open an intent or close one.
pub(super) fn as_event(entry: AuditEntry) -> AuditEntry {
    AuditEntry {
        kind: Some(AuditKind::Event),
        intent_seq: None,
        ..entry
    }
}

/// The record of a forwarded entry that cannot be read: chained as what it was, not dropped.
pub(super) fn unreadable(text: &str, error: &serde_json::Error) -> AuditEntry {
    AuditEntry {
        kind: Some(AuditKind::Event),
        principal: "larkgate".to_owned(),
        code: Some(AuditCode::Event(EventKind::UnreadableForwardedEntry)),
        detail: Some(format!(
            "a forwarded audit entry could not be read ({error}): {text}"
        )),
        ..AuditEntry::default()
    }
}
