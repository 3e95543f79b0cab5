//! The server tools a running gateway serves to admins: `server_list`, `server_add` and
//! `server_remove`. They call [`super`], as `larkgate server ...` does on the host.
//! Each needs the `admin` role and a person's own session: a script run reaches none of them,
//! whatever roles it was published with (see [`super`] for the threat model).

use std::sync::Arc;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{Saved, ServerError};
use crate::CallContext;
use crate::Platform;
use crate::envelope::{Code, Refusal};
use crate::registry::{RegistryError, ToolHandler, ToolSpec};
use crate::servers::ServerSpec;
use crate::typed::{Annotations, CapabilityInfo};

/// Input of `server_list`.
#[derive(Clone, Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListInput {}

/// Output of `server_list`.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct ListOutput {
    /// Every virtual server: the configuration file's, then those added at run time.
    pub servers: Vec<crate::servers::ServerEntry>,
}

/// Input of `server_add`: a `[[servers]]` entry, and whether it replaces a stored one. Each
/// list of patterns is one string, the patterns separated by spaces (no pattern holds one).
#[derive(Clone, Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AddInput {
    /// Its name: one path segment (lowercase letters, digits, `-`, `_`), served at
    /// `/mcp/NAME`.
    pub name: String,
    /// What it is for, told to its clients as the server's instructions.
    pub description: Option<String>,
    /// The one upstream it mounts (all of that upstream's tools, prompts and resources, or
    /// those the patterns name).
    pub upstream: Option<String>,
    /// Tool patterns (larkgate names, `*` for any run of characters), separated by spaces:
    /// `"github__* kv_get"`.
    pub tools: Option<String>,
    /// Prompt patterns (larkgate names), separated by spaces.
    pub prompts: Option<String>,
    /// Resource patterns (larkgate URIs), separated by spaces.
    pub resources: Option<String>,
    /// Whether names keep larkgate's prefixes (default true); false with `upstream` only.
    pub prefix: Option<bool>,
    /// Whether its clients search its tools (`find_tools`, `call_tool`) rather than list them.
    pub tool_search: Option<bool>,
    /// Tool patterns of the tools a searched server still lists, separated by spaces.
    pub pinned: Option<String>,
    /// Replace the stored server of this name (default false: the name must be free).
    pub replace: Option<bool>,
}

impl AddInput {
    /// The entry it describes, its patterns checked; or what is wrong with it.
    pub fn spec(self) -> Result<ServerSpec, String> {
        let split = |patterns: Option<String>| -> Vec<String> {
            patterns
                .unwrap_or_default()
                .split_whitespace()
                .map(str::to_owned)
                .collect()
        };
        Entry {
            name: self.name,
            description: self.description,
            upstream: self.upstream,
            tools: split(self.tools),
            prompts: split(self.prompts),
            resources: split(self.resources),
            prefix: self.prefix.unwrap_or(true),
            tool_search: self.tool_search.unwrap_or(false),
            pinned: split(self.pinned),
        }
        .spec()
    }
}

/// A `[[servers]]` entry's keys, as written (patterns not yet checked).
#[derive(Clone, Debug, Default, Serialize)]
pub struct Entry {
    /// `name`.
    pub name: String,
    /// `description`.
    pub description: Option<String>,
    /// `upstream`.
    pub upstream: Option<String>,
    /// `tools`.
    pub tools: Vec<String>,
    /// `prompts`.
    pub prompts: Vec<String>,
    /// `resources`.
    pub resources: Vec<String>,
    /// `prefix`.
    pub prefix: bool,
    /// `tool_search`.
    pub tool_search: bool,
    /// `pinned`.
    pub pinned: Vec<String>,
}

impl Entry {
    /// The entry, its patterns checked; or what is wrong with it, as reading the file says.
    pub fn spec(self) -> Result<ServerSpec, String> {
        let name = self.name.clone();
        let value = serde_json::to_value(self).map_err(|e| e.to_string())?;
        serde_json::from_value(value).map_err(|e| format!("servers.{name}: {e}"))
    }
}

/// Input of `server_remove`.
#[derive(Clone, Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RemoveInput {
    /// The name of a server added at run time.
    pub name: String,
}

/// Output of `server_remove`.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct RemoveOutput {
    /// The name removed.
    pub removed: String,
}

/// What a change is refused with: the caller's mistake in plain words; a failure of
/// larkgate's own only as a correlation id (the detail goes to the log).
fn refused(error: ServerError) -> Refusal {
    match error {
        ServerError::Invalid(message) => Refusal::new(Code::InvalidArguments, message),
        ServerError::Failed(detail) => {
            Refusal::logged(Code::Internal, "the change could not be saved", detail)
        }
    }
}

/// A tool as the tool table takes it.
type Tool = (ToolSpec, Arc<dyn ToolHandler>);

/// The three tools, bound to `platform`'s servers. `server_add` keeps a weak handle on the
/// platform's tool table, which holds it.
pub fn tools(platform: &Platform) -> Result<Vec<Tool>, RegistryError> {
    let servers = Arc::clone(platform.servers());
    let list = crate::typed::admin_tool(
        "server tool",
        CapabilityInfo::new(
            "server_list",
            "List virtual servers",
            "Every virtual server (/mcp/NAME): what it serves, and whether it comes from the \
             configuration file or was added at run time (by whom, when).",
            Annotations::READ,
        ),
        Arc::new(move |_ctx: CallContext, _input: ListInput| {
            let servers = Arc::clone(&servers);
            Box::pin(async move {
                Ok(ListOutput {
                    servers: servers.entries(),
                })
            })
        }),
    )?;
    let (table, weak) = (
        Arc::clone(platform.servers()),
        Arc::downgrade(platform.tool_table()),
    );
    let add = crate::typed::admin_tool(
        "server tool",
        CapabilityInfo::new(
            "server_add",
            "Add a virtual server",
            "Adds a virtual server at /mcp/NAME, served at once by every larkgate sharing the \
             store: the tools, prompts and resources its patterns choose (each caller still \
             reaches only what their roles allow). With replace, changes one added before; its \
             clients are told their lists changed. Servers of the configuration file are \
             changed there.",
            Annotations {
                read_only: false,
                destructive: false,
                idempotent: false,
                open_world: false,
            },
        ),
        Arc::new(move |ctx: CallContext, input: AddInput| {
            let (table, weak) = (Arc::clone(&table), weak.clone());
            Box::pin(async move {
                let registry = weak.upgrade().ok_or_else(stopping)?.snapshot();
                let replace = input.replace.unwrap_or(false);
                let spec = input
                    .spec()
                    .map_err(|why| Refusal::new(Code::InvalidArguments, why))?;
                let actor = &ctx.identity.run.principal.id;
                let saved: Saved =
                    super::add(&ctx.services, &table, Some(&registry), spec, replace, actor)
                        .await
                        .map_err(refused)?;
                Ok(saved)
            })
        }),
    )?;
    let table = Arc::clone(platform.servers());
    let remove = crate::typed::admin_tool(
        "server tool",
        CapabilityInfo::new(
            "server_remove",
            "Remove a virtual server",
            "Removes a virtual server added at run time: /mcp/NAME answers 404 from then on. \
             Servers of the configuration file are removed there.",
            Annotations {
                read_only: false,
                destructive: true,
                idempotent: false,
                open_world: false,
            },
        ),
        Arc::new(move |ctx: CallContext, input: RemoveInput| {
            let table = Arc::clone(&table);
            Box::pin(async move {
                let actor = &ctx.identity.run.principal.id;
                let removed = super::remove(&ctx.services, &table, &input.name, actor)
                    .await
                    .map_err(refused)?;
                if !removed {
                    let why = if table.configured(&input.name) {
                        format!(
                            "server {:?} is configured in the configuration file; it is \
                             removed there",
                            input.name
                        )
                    } else {
                        format!("there is no server {:?} added at run time", input.name)
                    };
                    return Err(Refusal::new(Code::InvalidArguments, why));
                }
                Ok(RemoveOutput {
                    removed: input.name,
                })
            })
        }),
    )?;
    Ok(vec![list, add, remove])
}

fn stopping() -> Refusal {
    Refusal::new(Code::Internal, "larkgate is stopping")
}
