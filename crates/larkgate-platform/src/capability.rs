//! What a capability is, independent of its handler: its name, description, MCP annotations
//! and binding [`Plan`].

use larkgate_binding::{FieldShape, Plan, Result};
use schemars::JsonSchema;
use serde::Serialize;
use serde::de::DeserializeOwned;

/// MCP tool annotations of a capability. For built-in capabilities these are statements by
/// larkgate itself, so `read_only` also classifies the tool for the draft write barrier.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Annotations {
    /// `readOnlyHint`: the tool does not modify its environment.
    #[serde(rename = "readOnlyHint")]
    pub read_only: bool,
    /// `destructiveHint`: a write may destroy or overwrite data.
    #[serde(rename = "destructiveHint")]
    pub destructive: bool,
    /// `idempotentHint`: repeating a call with the same arguments has no further effect.
    #[serde(rename = "idempotentHint")]
    pub idempotent: bool,
    /// `openWorldHint`: the tool reaches outside larkgate.
    #[serde(rename = "openWorldHint")]
    pub open_world: bool,
}

/// The static description of a capability.
#[derive(Clone, Copy, Debug)]
pub struct CapabilityInfo {
    /// The MCP-facing name (bare, for capabilities).
    pub name: &'static str,
    /// A short human title.
    pub title: &'static str,
    /// What the tool does, for a model choosing tools.
    pub description: &'static str,
    /// MCP annotations.
    pub annotations: Annotations,
}

/// A capability's description together with its compiled plan.
#[derive(Debug)]
pub struct Declared<I, O> {
    /// Name, description and annotations.
    pub info: CapabilityInfo,
    /// The compiled binding plan.
    pub plan: Plan<I, O>,
}

impl<I, O> Declared<I, O>
where
    I: DeserializeOwned + JsonSchema,
    O: Serialize + JsonSchema,
{
    /// Compiles the plan for `info`; fails if the types cannot form one.
    pub fn new(info: CapabilityInfo) -> Result<Self> {
        Ok(Declared {
            info,
            plan: Plan::compile()?,
        })
    }
}

/// The model-facing description of a capability, as `larkgate capabilities` prints it.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Listing {
    /// The MCP-facing name.
    pub name: String,
    /// A short human title.
    pub title: String,
    /// What the tool does.
    pub description: String,
    /// The Starlark signature.
    pub signature: String,
    /// The input fields.
    pub input_shape: Vec<FieldShape>,
    /// The output fields.
    pub output_shape: Vec<FieldShape>,
    /// The MCP `inputSchema`.
    pub input_schema: serde_json::Value,
    /// The MCP `outputSchema`.
    pub output_schema: serde_json::Value,
    /// The MCP annotations.
    pub annotations: Annotations,
}

impl<I, O> Declared<I, O> {
    /// The model-facing listing.
    pub fn listing(&self) -> Listing {
        Listing {
            name: self.info.name.to_owned(),
            title: self.info.title.to_owned(),
            description: self.info.description.to_owned(),
            signature: self.plan.signature(self.info.name),
            input_shape: self.plan.input_shape(),
            output_shape: self.plan.output_shape(),
            input_schema: self.plan.input_schema(),
            output_schema: self.plan.output_schema(),
            annotations: self.info.annotations,
        }
    }
}
