//! The built-in capabilities: a small key-value store and a clock.
//!
//! Their names, input and output types and annotations are final; their handlers run on the
//! store ([`register`]). Values in the key-value store are
//! strings: a script that needs structure stores `json.encode(...)` and reads it back with
//! `json.decode(...)`.

use std::sync::Arc;

use larkgate_binding::Result;
use larkgate_store::KvQuery;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::envelope::{Code, Refusal};
use crate::identity::CallContext;
use crate::registry::{Registry, RegistryError};
use crate::typed::{Annotations, CapabilityInfo, Declared, Listing, TypedCapability};

const READ: Annotations = Annotations::READ;

/// Input of `kv_get`.
#[derive(Clone, Debug, PartialEq, Deserialize, JsonSchema)]
pub struct KvGetInput {
    /// The key to read.
    pub key: String,
    /// What to return as `value` when the key is absent.
    pub default: Option<String>,
}

/// Output of `kv_get`.
#[derive(Clone, Debug, PartialEq, Serialize, JsonSchema)]
pub struct KvGetOutput {
    /// The key that was read.
    pub key: String,
    /// Whether the key exists.
    pub found: bool,
    /// The stored value, or the `default` when the key is absent (None without a default).
    pub value: Option<String>,
}

/// Input of `kv_list`.
#[derive(Clone, Debug, PartialEq, Deserialize, JsonSchema)]
pub struct KvListInput {
    /// Only keys starting with this prefix.
    pub prefix: Option<String>,
    /// Only keys sorting after this one (the `next_after` of a previous page).
    pub after: Option<String>,
    /// At most this many keys (default 100, at most 1,000).
    pub limit: Option<i64>,
}

/// One entry of a `kv_list` page.
#[derive(Clone, Debug, PartialEq, Serialize, JsonSchema)]
pub struct KvEntry {
    /// The key.
    pub key: String,
    /// Its value.
    pub value: String,
}

/// Output of `kv_list`.
#[derive(Clone, Debug, PartialEq, Serialize, JsonSchema)]
pub struct KvListOutput {
    /// The page's entries, in key order.
    pub entries: Vec<KvEntry>,
    /// Pass as `after` to read the next page; None on the last page.
    pub next_after: Option<String>,
}

/// Input of `clock_now`: none.
#[derive(Clone, Debug, PartialEq, Deserialize, JsonSchema)]
pub struct ClockNowInput {}

/// Output of `clock_now`.
#[derive(Clone, Debug, PartialEq, Serialize, JsonSchema)]
pub struct ClockNowOutput {
    /// Milliseconds since the Unix epoch, UTC.
    pub unix_ms: i64,
    /// The same instant as an RFC 3339 timestamp in UTC.
    pub rfc3339: String,
}

/// Input of `kv_set`.
#[derive(Clone, Debug, PartialEq, Deserialize, JsonSchema)]
pub struct KvSetInput {
    /// The key to write.
    pub key: String,
    /// The value to store.
    pub value: String,
}

/// Output of `kv_set`.
#[derive(Clone, Debug, PartialEq, Serialize, JsonSchema)]
pub struct KvSetOutput {
    /// The key that was written.
    pub key: String,
    /// Whether the key did not exist before.
    pub created: bool,
}

/// Input of `kv_delete`.
#[derive(Clone, Debug, PartialEq, Deserialize, JsonSchema)]
pub struct KvDeleteInput {
    /// The key to delete.
    pub key: String,
}

/// Output of `kv_delete`.
#[derive(Clone, Debug, PartialEq, Serialize, JsonSchema)]
pub struct KvDeleteOutput {
    /// The key.
    pub key: String,
    /// Whether the key existed.
    pub deleted: bool,
}

/// `kv_get`: read one key.
pub fn kv_get() -> Result<Declared<KvGetInput, KvGetOutput>> {
    Declared::new(CapabilityInfo {
        name: "kv_get",
        title: "Read a key",
        description: "Reads one key of larkgate's key-value store. Returns found = false and the \
                      default (or None) when the key is absent.",
        annotations: READ,
    })
}

/// `kv_list`: list keys, a page at a time.
pub fn kv_list() -> Result<Declared<KvListInput, KvListOutput>> {
    Declared::new(CapabilityInfo {
        name: "kv_list",
        title: "List keys",
        description: "Lists entries of larkgate's key-value store in key order, optionally under \
                      a prefix, one page at a time: pass next_after as after for the next page.",
        annotations: READ,
    })
}

/// `clock_now`: the current time.
pub fn clock_now() -> Result<Declared<ClockNowInput, ClockNowOutput>> {
    Declared::new(CapabilityInfo {
        name: "clock_now",
        title: "Current time",
        description: "Returns the current time in UTC, as Unix milliseconds and RFC 3339.",
        annotations: Annotations {
            // A read of the clock changes nothing, but two reads differ.
            idempotent: false,
            ..READ
        },
    })
}

/// `kv_set`: write one key.
pub fn kv_set() -> Result<Declared<KvSetInput, KvSetOutput>> {
    Declared::new(CapabilityInfo {
        name: "kv_set",
        title: "Write a key",
        description: "Stores a string value under a key of larkgate's key-value store, \
                      replacing any previous value.",
        annotations: Annotations {
            read_only: false,
            destructive: true,
            idempotent: true,
            open_world: false,
        },
    })
}

/// `kv_delete`: delete one key.
pub fn kv_delete() -> Result<Declared<KvDeleteInput, KvDeleteOutput>> {
    Declared::new(CapabilityInfo {
        name: "kv_delete",
        title: "Delete a key",
        description: "Deletes a key of larkgate's key-value store. Deleting an absent key is not \
                      an error: deleted = false.",
        annotations: Annotations {
            read_only: false,
            destructive: true,
            idempotent: true,
            open_world: false,
        },
    })
}

/// The listings of every built-in capability, in a stable order (reads first).
pub fn listings() -> Result<Vec<Listing>> {
    Ok(vec![
        kv_get()?.listing(),
        kv_list()?.listing(),
        clock_now()?.listing(),
        kv_set()?.listing(),
        kv_delete()?.listing(),
    ])
}

/// The longest key, in bytes.
pub const MAX_KEY_BYTES: usize = 1024;
/// The default and the largest `kv_list` page.
pub const DEFAULT_PAGE: i64 = 100;
/// The largest `kv_list` page.
pub const MAX_PAGE: i64 = 1000;

fn check_key(tool: &str, key: &str) -> std::result::Result<(), Refusal> {
    if key.is_empty() || key.len() > MAX_KEY_BYTES {
        return Err(Refusal::new(
            Code::InvalidArguments,
            format!(
                "{tool}(): `key` must be 1 to {MAX_KEY_BYTES} bytes, got {}",
                key.len()
            ),
        ));
    }
    Ok(())
}

fn store_failed(e: larkgate_store::StoreError) -> Refusal {
    Refusal::store("the key-value store failed", e)
}

/// A time the store keeps (Unix milliseconds) as RFC 3339 UTC with milliseconds, for people to
/// read. RFC 3339 has four-digit years: a time before the epoch reads as the epoch and one past
/// the year 9999 (a token created `--expires 1000000y`) as its last millisecond.
pub fn rfc3339_from_ms(ms: i64) -> String {
    /// 9999-12-31T23:59:59.999Z
    const LAST: i64 = 253_402_300_799_999;
    let ms = ms.clamp(0, LAST) as u64;
    rfc3339_millis(std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms))
}

/// An instant as RFC 3339 in UTC, to the millisecond.
pub fn rfc3339_millis(at: std::time::SystemTime) -> String {
    humantime::format_rfc3339_millis(at).to_string()
}

/// Registers the built-in capabilities with their handlers on the store.
pub fn register(registry: &mut Registry) -> std::result::Result<(), RegistryError> {
    let invalid = RegistryError::shape("built-in capability");
    TypedCapability::new(
        kv_get().map_err(&invalid)?,
        Arc::new(|ctx: CallContext, input: KvGetInput| {
            Box::pin(async move {
                check_key("kv_get", &input.key)?;
                let stored = ctx
                    .services
                    .store
                    .kv_get(&input.key)
                    .await
                    .map_err(store_failed)?;
                Ok(KvGetOutput {
                    found: stored.is_some(),
                    value: stored.or(input.default),
                    key: input.key,
                })
            })
        }),
    )
    .register(registry)?;
    TypedCapability::new(
        kv_list().map_err(&invalid)?,
        Arc::new(|ctx: CallContext, input: KvListInput| {
            Box::pin(async move {
                let limit = input.limit.unwrap_or(DEFAULT_PAGE);
                if !(1..=MAX_PAGE).contains(&limit) {
                    return Err(Refusal::new(
                        Code::InvalidArguments,
                        format!("kv_list(): `limit` must be 1 to {MAX_PAGE}, got {limit}"),
                    ));
                }
                let limit = limit as usize;
                let prefix = input.prefix.unwrap_or_default();
                let mut rows = ctx
                    .services
                    .store
                    .kv_list(KvQuery {
                        prefix: &prefix,
                        after: input.after.as_deref(),
                        limit: limit + 1,
                    })
                    .await
                    .map_err(store_failed)?;
                let more = rows.len() > limit;
                rows.truncate(limit);
                Ok(KvListOutput {
                    next_after: if more {
                        rows.last().map(|(k, _)| k.clone())
                    } else {
                        None
                    },
                    entries: rows
                        .into_iter()
                        .map(|(key, value)| KvEntry { key, value })
                        .collect(),
                })
            })
        }),
    )
    .register(registry)?;
    TypedCapability::new(
        clock_now().map_err(&invalid)?,
        Arc::new(|_ctx: CallContext, _input: ClockNowInput| {
            Box::pin(async move {
                let now = std::time::SystemTime::now();
                let unix_ms = now
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_millis() as i64);
                Ok(ClockNowOutput {
                    unix_ms,
                    rfc3339: rfc3339_millis(now),
                })
            })
        }),
    )
    .register(registry)?;
    TypedCapability::new(
        kv_set().map_err(&invalid)?,
        Arc::new(|ctx: CallContext, input: KvSetInput| {
            Box::pin(async move {
                check_key("kv_set", &input.key)?;
                let created = ctx
                    .services
                    .store
                    .kv_set(&input.key, &input.value)
                    .await
                    .map_err(store_failed)?;
                Ok(KvSetOutput {
                    key: input.key,
                    created,
                })
            })
        }),
    )
    .register(registry)?;
    TypedCapability::new(
        kv_delete().map_err(&invalid)?,
        Arc::new(|ctx: CallContext, input: KvDeleteInput| {
            Box::pin(async move {
                check_key("kv_delete", &input.key)?;
                let deleted = ctx
                    .services
                    .store
                    .kv_delete(&input.key)
                    .await
                    .map_err(store_failed)?;
                Ok(KvDeleteOutput {
                    key: input.key,
                    deleted,
                })
            })
        }),
    )
    .register(registry)?;
    Ok(())
}
