//! A resolved read or get as the pipeline dispatches it: a registered tool whose handler asks
//! the upstream that listed the entry, under the name it listed, and answers in larkgate's
//! names; and the one refusal for what resolves to nothing.

use std::sync::Arc;

use larkgate_binding::{Limits, Map, from_json_object, map_to_json};

use super::{NotResolved, Resolved, resource_uri};
use crate::envelope::{Code, Refusal};
use crate::identity::CallContext;
use crate::policy::TargetKind;
use crate::registry::{Origin, RegisteredTool, Source, ToolHandler, ToolSpec};

impl Resolved {
    /// The read or get as the pipeline dispatches it, named `audited` (how the audit and logs
    /// name it): classified read-only, gated by nothing of its own (the policy's approval
    /// patterns for resources and prompts decide), its `spec.name` the listed entry it was
    /// found by (what a per-target rate limit is kept for).
    /// A completion's (`completing`) answers the upstream's `completion/complete`; a
    /// subscription's (`subscribing`) leaves the upstream's subscription there, and answers
    /// nothing.
    pub fn dispatch(
        self,
        kind: TargetKind,
        completing: Option<super::Completing>,
        subscribing: Option<super::Subscribing>,
    ) -> RegisteredTool {
        RegisteredTool {
            spec: ToolSpec {
                read_only: true,
                ..ToolSpec::new(
                    self.entry.clone(),
                    Origin {
                        source: Source::Upstream,
                        alias: Some(self.alias.clone()),
                        original_name: self.original.clone(),
                    },
                )
            },
            handler: Arc::new(Dispatch {
                kind,
                target: self,
                completing,
                subscribing,
            }),
            input: None,
            arguments: None,
        }
    }
}

/// A read, get or completion on its way to the upstream.
struct Dispatch {
    kind: TargetKind,
    target: Resolved,
    completing: Option<super::Completing>,
    subscribing: Option<super::Subscribing>,
}

#[async_trait::async_trait]
impl ToolHandler for Dispatch {
    /// The upstream's answer as larkgate's value: a read's `{"contents": [...]}` (each
    /// content's `uri` in larkgate's form), a get's `{"description": ..., "messages": [...]}`,
    /// each part as its MCP JSON.
    async fn call(&self, context: &CallContext, arguments: Map) -> Result<Map, Refusal> {
        let Resolved {
            alias,
            original,
            reader,
            ..
        } = &self.target;
        if let Some(subscribing) = &self.subscribing {
            let subscription = reader.subscribe(context, original).await?;
            subscribing.put(super::Watched::new(alias, original, subscription));
            return Ok(Map::new());
        }
        let answer = match (self.kind, &self.completing) {
            (TargetKind::Resource | TargetKind::Prompt, Some(completing)) => {
                let reference = match self.kind {
                    TargetKind::Prompt => rmcp::model::Reference::for_prompt(original.clone()),
                    _ => rmcp::model::Reference::for_resource(original.clone()),
                };
                let mut result = reader
                    .complete(
                        context,
                        reference,
                        completing.argument.clone(),
                        completing.known.clone(),
                    )
                    .await?;
                result.result_type = None;
                // At most what the protocol allows in one answer.
                let values = &mut result.completion.values;
                values.truncate(rmcp::model::CompletionInfo::MAX_VALUES);
                serde_json::to_value(result)
            }
            (TargetKind::Resource, None) => {
                let mut result = reader.read_resource(context, original).await?;
                // The revision's framing is the edge's to write, not a script's to see; and an
                // upstream's cache hints do not carry over an answer larkgate gives per caller.
                result.result_type = None;
                result.ttl_ms = None;
                result.cache_scope = None;
                for contents in &mut result.contents {
                    match contents {
                        rmcp::model::ResourceContents::TextResourceContents { uri, .. }
                        | rmcp::model::ResourceContents::BlobResourceContents { uri, .. } => {
                            *uri = resource_uri(alias, uri);
                        }
                        // A kind of contents this version does not know is passed on as is.
                        _ => {}
                    }
                }
                serde_json::to_value(result)
            }
            (TargetKind::Prompt, None) => {
                let arguments = map_to_json(&arguments);
                let mut result = reader.get_prompt(context, original, arguments).await?;
                result.result_type = None;
                serde_json::to_value(result)
            }
            (TargetKind::Tool, _) => {
                return Err(Refusal::internal(
                    "the call did not run",
                    "a tool call reached a read's dispatch",
                ));
            }
        };
        let answer = match answer {
            Ok(serde_json::Value::Object(object)) => object,
            Ok(_) | Err(_) => {
                return Err(Refusal::internal(
                    "the upstream's answer could not be passed on",
                    format_args!("upstream {alias}: its answer did not serialize as an object"),
                ));
            }
        };
        from_json_object(&answer, Limits::default()).map_err(|e| {
            Refusal::new(
                Code::LimitExceeded,
                format!("upstream {alias}'s answer is over larkgate's limits: {e}"),
            )
            .with_hint("ask for less: a smaller resource, or fewer prompt arguments")
        })
    }
}

/// The refusal for a read or get that reaches nothing: one text for "nobody listed it" and
/// "you may not see it", so that a refusal reveals nothing.
pub fn not_found(kind: TargetKind, name: &str, why: NotResolved) -> Refusal {
    let shown = shorten(name);
    match (kind, why) {
        (_, NotResolved::Ambiguous) => Refusal::new(
            Code::NotFound,
            format!(
                "the URI {shown} matches more than one resource template of its upstream, so \
                 larkgate does not guess which to read"
            ),
        )
        .with_hint("read a URI that matches exactly one template, or ask the operator"),
        (TargetKind::Prompt, _) => Refusal::new(
            Code::NotFound,
            format!("larkgate lists no prompt named {shown} for you"),
        )
        .with_hint("list the prompts (prompts/list) to see the ones you may get"),
        (_, _) => Refusal::new(
            Code::NotFound,
            format!("larkgate lists no resource {shown} for you"),
        )
        .with_hint(
            "list the resources and resource templates (resources/list, \
             resources/templates/list) to see what you may read",
        ),
    }
}

/// `name`, cut to at most 200 bytes (at a character boundary) for a message.
fn shorten(name: &str) -> std::borrow::Cow<'_, str> {
    const MAX: usize = 200;
    if name.len() <= MAX {
        return name.into();
    }
    let mut end = MAX;
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}... ({} bytes)", &name[..end], name.len()).into()
}
