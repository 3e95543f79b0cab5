//! The upstream tools a running gateway serves to admins: `upstream_list`, `upstream_add`,
//! `upstream_review` and `upstream_remove`. They call [`crate::manage`], as `larkgate upstream
//! ...` does on the host, and then [`Federation::sync`], so a change is served at once.
//!
//! # Threat model
//!
//! An admin's token is a network credential: whoever holds it — a person, or whoever stole it
//! — may change which servers are federated, and nothing more. So:
//!
//! - `upstream_add` takes a URL, an alias and the approval mode only. Starting a program
//!   (`--command`) is code execution on larkgate's host; a header may hold `${VAR}`, which
//!   larkgate fills from its own environment (a token holder would send a secret of the host
//!   to a server of theirs); `allow` opens private networks to the guard. Those stay with the
//!   operator on the host (`larkgate upstream add`). The URL guard applies as to every upstream:
//!   public targets only, never larkgate's own address, redirects only within the origin.
//! - Every tool needs the `admin` role and a person's own session (`people_only`): a script run
//!   reaches none of them, whatever roles it was published with.
//! - Each change is an audit event under the caller (`upstream_added`, `tool_approved`,
//!   `upstream_removed`); the upstream's own URL is recorded without its query or userinfo.

use std::net::SocketAddr;
use std::sync::Arc;

use larkgate_platform::registry::{RegistryError, ToolHandler, ToolSpec};
use larkgate_platform::typed::{Annotations, CapabilityInfo};
use larkgate_platform::{CallContext, Code, Refusal};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::config::UpstreamConfig;
use crate::federation::{Federation, UpstreamStatus};
use crate::guard::Resolve;
use crate::manage::{self, Added, ManageError, Reviewed};
use crate::tools::Approval;

/// Input of `upstream_list`.
#[derive(Clone, Debug, Deserialize, JsonSchema)]
pub struct ListInput {}

/// Output of `upstream_list`.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct ListOutput {
    /// Every upstream, as this gateway sees it.
    pub upstreams: Vec<UpstreamStatus>,
}

/// Input of `upstream_add`.
#[derive(Clone, Debug, Deserialize, JsonSchema)]
pub struct AddInput {
    /// The alias its tools are prefixed with (`<alias>__<tool>`).
    pub alias: String,
    /// Its Streamable HTTP endpoint, on a public address.
    pub url: String,
    /// `always` (the default: every call needs an approver's approval), `writes` (calls of
    /// the tools that do not declare themselves read-only need one) or `never` (the policy's
    /// approval patterns decide).
    pub approval: Option<String>,
}

/// Input of `upstream_review`.
#[derive(Clone, Debug, Deserialize, JsonSchema)]
pub struct ReviewInput {
    /// The upstream's alias.
    pub alias: String,
    /// One tool, by its name at the upstream; all quarantined tools by default.
    pub tool: Option<String>,
    /// Approve the definitions shown (default false: only show them).
    pub approve: Option<bool>,
}

/// Output of `upstream_review`.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct ReviewOutput {
    /// The quarantined tools, with what changed.
    pub tools: Vec<Reviewed>,
}

/// Input of `upstream_remove`.
#[derive(Clone, Debug, Deserialize, JsonSchema)]
pub struct RemoveInput {
    /// The alias of an upstream added at run time.
    pub alias: String,
}

/// Output of `upstream_remove`.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct RemoveOutput {
    /// The alias removed.
    pub removed: String,
}

/// What a change is refused with: the caller's mistake or the server's state in plain words;
/// a failure of larkgate's own only as a correlation id (the detail goes to the log).
fn refused(error: ManageError) -> Refusal {
    match error {
        ManageError::Invalid(message) => Refusal::new(Code::InvalidArguments, message),
        ManageError::Unreachable(message) => Refusal::new(Code::UpstreamUnavailable, message),
        ManageError::Failed(detail) => failed(detail),
    }
}

fn failed(detail: String) -> Refusal {
    Refusal::logged(Code::Internal, "the change could not be saved", detail)
}

/// A tool as the tool table takes it.
type Tool = (ToolSpec, Arc<dyn ToolHandler>);

/// The four tools, bound to `federation` (served by `larkgate serve` and `larkgate stdio`).
pub fn tools(
    federation: &Arc<Federation>,
    listen: Option<SocketAddr>,
    resolver: Arc<dyn Resolve>,
) -> Result<Vec<Tool>, RegistryError> {
    let mut tools = Vec::new();
    let f = Arc::clone(federation);
    tools.push(larkgate_platform::typed::admin_tool(
        "upstream tool",
        CapabilityInfo::new(
            "upstream_list",
            "List upstreams",
            "Every federated MCP server: connected (server, protocol, tools) or down and why, \
                 its quarantined tools, and tools dropped over limits or for their names.",
            Annotations::READ,
        ),
        Arc::new(move |_ctx: CallContext, _input: ListInput| {
            let f = Arc::clone(&f);
            Box::pin(async move {
                Ok(ListOutput {
                    upstreams: f.upstreams().iter().map(|u| u.status()).collect(),
                })
            })
        }),
    )?);
    let f = Arc::clone(federation);
    tools.push(larkgate_platform::typed::admin_tool(
        "upstream tool",
        CapabilityInfo::new(
            "upstream_add",
            "Add an upstream",
            "Connects to an MCP server at a public Streamable HTTP URL, lists its tools, pins \
                 their definitions and federates them as <alias>__<tool>. Programs, headers and \
                 private networks are added by the operator on the host (larkgate upstream add).",
            Annotations {
                read_only: false,
                destructive: false,
                idempotent: false,
                open_world: true,
            },
        ),
        Arc::new(move |ctx: CallContext, input: AddInput| {
            let f = Arc::clone(&f);
            let resolver = Arc::clone(&resolver);
            Box::pin(async move {
                let approval = match input.approval.as_deref() {
                    None | Some("always") => Approval::Always,
                    Some("writes") => Approval::Writes,
                    Some("never") => Approval::Never,
                    Some(other) => {
                        return Err(refused(ManageError::Invalid(format!(
                            "approval {other:?} is not \"always\", \"writes\" or \"never\""
                        ))));
                    }
                };
                let config = UpstreamConfig {
                    alias: input.alias,
                    url: Some(input.url),
                    approval,
                    ..UpstreamConfig::default()
                };
                let taken: Vec<String> = f
                    .upstreams()
                    .iter()
                    .map(|u| u.config().alias.clone())
                    .collect();
                let actor = &ctx.identity.run.principal.id;
                let added: Added =
                    manage::add(f.platform(), &config, &taken, actor, listen, resolver)
                        .await
                        .map_err(refused)?;
                f.sync().await.map_err(failed)?;
                Ok(added)
            })
        }),
    )?);
    let f = Arc::clone(federation);
    tools.push(larkgate_platform::typed::admin_tool(
        "upstream tool",
        CapabilityInfo::new(
            "upstream_review",
            "Review quarantined upstream tools",
            "Shows what changed in an upstream's quarantined tools (a unified diff of the \
                 approved and the served definition); with approve, the served definitions \
                 become the pins and the tools are served.",
            Annotations {
                read_only: false,
                destructive: false,
                idempotent: false,
                open_world: false,
            },
        ),
        Arc::new(move |ctx: CallContext, input: ReviewInput| {
            let f = Arc::clone(&f);
            Box::pin(async move {
                let approving = input.approve.unwrap_or(false);
                let actor = &ctx.identity.run.principal.id;
                let tools = manage::review(
                    f.platform(),
                    &input.alias,
                    input.tool.as_deref(),
                    approving,
                    actor,
                )
                .await
                .map_err(refused)?;
                if approving {
                    f.sync().await.map_err(failed)?;
                }
                Ok(ReviewOutput { tools })
            })
        }),
    )?);
    let f = Arc::clone(federation);
    tools.push(larkgate_platform::typed::admin_tool(
        "upstream tool",
        CapabilityInfo::new(
            "upstream_remove",
            "Remove an upstream",
            "Removes an upstream added at run time, and its pins: its tools leave the listing \
                 and its connection is closed. Upstreams of the configuration file are removed \
                 there.",
            Annotations {
                read_only: false,
                destructive: true,
                idempotent: false,
                open_world: false,
            },
        ),
        Arc::new(move |ctx: CallContext, input: RemoveInput| {
            let f = Arc::clone(&f);
            Box::pin(async move {
                let actor = &ctx.identity.run.principal.id;
                let removed = manage::remove(f.platform(), &input.alias, actor)
                    .await
                    .map_err(refused)?;
                if !removed {
                    let configured = f.upstream(&input.alias).is_some();
                    return Err(refused(ManageError::Invalid(if configured {
                        format!(
                            "{:?} is configured in the configuration file; it is removed \
                                 there",
                            input.alias
                        )
                    } else {
                        format!("there is no upstream {:?}", input.alias)
                    })));
                }
                f.sync().await.map_err(failed)?;
                Ok(RemoveOutput {
                    removed: input.alias,
                })
            })
        }),
    )?);
    Ok(tools)
}
