//! `arguments`: within the size cap, inside the value limits, and — for tools with an input
//! shape — bound to it; for tools without one (an upstream's), checked against the top level
//! of its JSON input schema. Produces the canonical arguments and their hash, which the approval
//! gate and the audit record both use.

use std::sync::Arc;

use larkgate_binding::{Map, canonical_map_json, from_json_object};

use crate::registry::RegisteredTool;
use crate::services::CallLimits;
use sha2::{Digest, Sha256};

use crate::envelope::{Code, Refusal, refuse_arguments};
use crate::services::Services;

use super::{CallRequest, Step};

/// The step. See the module documentation.
#[derive(Debug)]
pub struct Arguments {
    /// The platform's services.
    pub services: Arc<Services>,
}

#[async_trait::async_trait]
impl Step for Arguments {
    const NAME: &'static str = "arguments";
    async fn check(&self, request: &mut CallRequest) -> Result<(), Refusal> {
        let empty = serde_json::Map::new();
        let raw = request.arguments.as_ref().unwrap_or(&empty);
        let canonical = canonical_arguments(
            &self.services.limits,
            &request.tool,
            request.resolved.as_deref(),
            raw,
        )?;
        request.args_hash = Some(arguments_hash(&canonical));
        request.canonical = Some(canonical);
        Ok(())
    }
}

/// The canonical arguments of a call of `tool` (named `name`) with `raw`, or the refusal that
/// says what is wrong with them. See the module documentation.
pub fn canonical_arguments(
    limits: &CallLimits,
    name: &str,
    tool: Option<&RegisteredTool>,
    raw: &serde_json::Map<String, serde_json::Value>,
) -> Result<Map, Refusal> {
    let size = json_size(raw);
    if size > limits.max_argument_bytes {
        return Err(Refusal::new(
            Code::InvalidArguments,
            format!(
                "the arguments are {size} bytes of JSON, over the limit of {} bytes",
                limits.max_argument_bytes
            ),
        )
        .with_hint("send less data per call, or store it and pass a key"));
    }
    // The last conversion on a call's way (JSON to value; a script's host call made one
    // before, value to JSON, in its worker or, for an in-process run, its session), and
    // the one authoritative binding.
    let map = from_json_object(raw, limits.values).map_err(|e| refuse_arguments(&e))?;
    Ok(match tool {
        Some(tool) => match &tool.input {
            Some(shape) => shape
                .bind_map(name, &map)
                .map_err(|e| refuse_arguments(&e))?,
            // An upstream's tool (it has no shape): its JSON Schema's required keys, closed
            // keys and top-level types, before an approval is asked for a call that cannot
            // run (the upstream checks the rest). larkgate's own tools without a shape
            // check their arguments themselves, in their own words.
            None if tool.spec.origin.source == larkgate_caller::Source::Upstream => {
                larkgate_binding::check_schema(name, &tool.spec.input_schema, &map).map_err(
                    |text| {
                        Refusal::new(Code::InvalidArguments, text).with_hint(
                            "call it with the arguments its input schema names (tools/list \
                             shows it)",
                        )
                    },
                )?;
                map
            }
            None => map,
        },
        None => map,
    })
}

/// SHA-256 (hex) of the RFC 8785 JSON of canonical arguments.
pub fn arguments_hash(canonical: &Map) -> String {
    hex::encode(Sha256::digest(canonical_map_json(canonical).as_bytes()))
}

/// The size of a JSON object's compact serialization, without building it.
fn json_size(object: &serde_json::Map<String, serde_json::Value>) -> usize {
    struct Counter(usize);
    impl std::io::Write for Counter {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut counter = Counter(0);
    // Writing to a counter cannot fail.
    let _ = serde_json::to_writer(&mut counter, object);
    counter.0
}
