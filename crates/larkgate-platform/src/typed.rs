//! What a capability is, independent of its handler: its name, description, MCP annotations
//! and binding [`Plan`].

use std::sync::Arc;

use larkgate_binding::{FieldShape, Map, Plan, Result};
use schemars::JsonSchema;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::envelope::{Code, Refusal};
use crate::identity::CallContext;
use crate::registry::{
    Origin, Registry, RegistryError, Source, ToolAnnotations, ToolHandler, ToolSpec,
};

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

impl Annotations {
    /// A read of larkgate's own state: changes nothing, the same answer twice, reaches nothing
    /// outside.
    pub const READ: Annotations = Annotations {
        read_only: true,
        destructive: false,
        idempotent: true,
        open_world: false,
    };
}

impl CapabilityInfo {
    /// A capability's description.
    pub const fn new(
        name: &'static str,
        title: &'static str,
        description: &'static str,
        annotations: Annotations,
    ) -> Self {
        CapabilityInfo {
            name,
            title,
            description,
            annotations,
        }
    }
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

/// A capability's handler: typed input in, typed output or a refusal out.
pub type HandlerFn<I, O> = Arc<
    dyn Fn(CallContext, I) -> futures::future::BoxFuture<'static, Result<O, Refusal>> + Send + Sync,
>;

/// A capability with its handler, ready to register.
pub struct TypedCapability<I, O> {
    declared: Declared<I, O>,
    handler: HandlerFn<I, O>,
    /// For platform tools: the roles that may see and call it, whatever the policy says.
    platform_roles: Option<&'static [&'static str]>,
    /// Reachable only from a person's own session.
    people_only: bool,
}

impl<I, O> std::fmt::Debug for TypedCapability<I, O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TypedCapability")
            .field("info", &self.declared.info)
            .finish_non_exhaustive()
    }
}

impl<I, O> TypedCapability<I, O>
where
    I: DeserializeOwned + Send + 'static,
    O: Serialize + Send + 'static,
{
    /// Pairs a declaration with its handler.
    pub fn new(declared: Declared<I, O>, handler: HandlerFn<I, O>) -> Self {
        TypedCapability {
            declared,
            handler,
            platform_roles: None,
            people_only: false,
        }
    }

    /// Makes this a platform tool, visible and callable exactly by principals holding one of
    /// `roles`.
    pub fn platform(mut self, roles: &'static [&'static str]) -> Self {
        self.platform_roles = Some(roles);
        self
    }

    /// Makes it reachable only from a person's own session, never from a script run.
    pub fn people_only(mut self) -> Self {
        self.people_only = true;
        self
    }

    /// Registers the capability under its name.
    pub fn register(self, registry: &mut Registry) -> Result<(), RegistryError> {
        let (spec, handler) = self.into_tool();
        registry.register(spec, handler)
    }

    /// The capability's registry entry, for adding it to a running platform's tool table.
    pub fn into_tool(self) -> (ToolSpec, Arc<dyn ToolHandler>) {
        let listing = self.declared.listing();
        let info = self.declared.info;
        let as_object = |v: serde_json::Value| match v {
            serde_json::Value::Object(o) => o,
            _ => serde_json::Map::new(),
        };
        let spec = ToolSpec {
            title: Some(info.title.to_owned()),
            description: info.description.to_owned(),
            input_schema: as_object(listing.input_schema),
            output_schema: Some(as_object(listing.output_schema)),
            annotations: ToolAnnotations {
                read_only: Some(info.annotations.read_only),
                destructive: Some(info.annotations.destructive),
                idempotent: Some(info.annotations.idempotent),
                open_world: Some(info.annotations.open_world),
            },
            read_only: info.annotations.read_only,
            input_shape: Some(listing.input_shape),
            signature: Some(listing.signature),
            roles: self.platform_roles,
            people_only: self.people_only,
            ..ToolSpec::new(
                info.name.to_owned(),
                Origin {
                    source: if self.platform_roles.is_some() {
                        Source::Platform
                    } else {
                        Source::Capability
                    },
                    alias: None,
                    original_name: info.name.to_owned(),
                },
            )
        };
        (spec, Arc::new(self))
    }
}

#[async_trait::async_trait]
impl<I, O> ToolHandler for TypedCapability<I, O>
where
    I: DeserializeOwned + Send + 'static,
    O: Serialize + Send + 'static,
{
    async fn call(&self, context: &CallContext, arguments: Map) -> Result<Map, Refusal> {
        let name = self.declared.info.name;
        // The pipeline's `arguments` step bound `arguments` to this plan's input shape (the
        // registry's input shape for this tool is the plan's): read, not bound again.
        let input = self
            .declared
            .plan
            .read_input(name, &arguments)
            .map_err(|e| crate::envelope::refuse_arguments(&e))?;
        let limits = context.services.limits.values;
        let output = (self.handler)(context.clone(), input).await?;
        self.declared
            .plan
            .convert_output(&output, limits)
            .map_err(|e| {
                Refusal::new(
                    Code::LimitExceeded,
                    format!("the result of {name} is too large or unsupported: {e}"),
                )
            })
    }
}

/// An admin's tool for a running platform's tool table: a platform tool for the `admin` role,
/// reachable from a person's own session only (never from a script run, whatever roles it was
/// published with). `what` names the kind of tool in an error about its shape.
pub fn admin_tool<I, O>(
    what: &'static str,
    info: CapabilityInfo,
    handler: HandlerFn<I, O>,
) -> std::result::Result<(ToolSpec, Arc<dyn ToolHandler>), RegistryError>
where
    I: DeserializeOwned + JsonSchema + Send + 'static,
    O: Serialize + JsonSchema + Send + 'static,
{
    Ok(TypedCapability::new(
        Declared::new(info).map_err(RegistryError::shape(what))?,
        handler,
    )
    .platform(crate::access::ADMINS)
    .people_only()
    .into_tool())
}
