//! The tool registry: every tool larkgate serves, under its MCP-facing name, with its origin
//! and its write-barrier classification.
//!
//! Names: capabilities are bare (`kv_get`), upstream tools `<alias>__<tool>`, published scripts
//! `script__<name>`. A final name must be at most 128 characters of `[A-Za-z0-9_-]` — inside
//! both the MCP rule (`[A-Za-z0-9_.-]`) and what LLM function-calling APIs accept. The way
//! from a name back to its origin is the [`Origin`] stored with it, never string splitting.
//!
//! Classification: a tool is read-only only when that is known (a capability larkgate wrote,
//! or an upstream that declared `readOnlyHint: true`); anything unknown is a write, and
//! script tools are always writes.

use std::collections::BTreeMap;
use std::sync::Arc;

use larkgate_binding::{FieldShape, Map};

use crate::envelope::Refusal;
use crate::identity::CallContext;

/// `_meta` key of a listed tool's origin.
pub const ORIGIN_META_KEY: &str = "larkgate/origin";
/// `_meta` key of a listed tool's Starlark signature.
pub const SIGNATURE_META_KEY: &str = "larkgate/signature";
/// `_meta` key of a listed tool's input shape.
pub const INPUT_SHAPE_META_KEY: &str = "larkgate/input_shape";

/// rmcp's tool listing type, re-exported for callers that print listings.
pub use rmcp::model::Tool as McpTool;

/// The longest tool name.
pub const MAX_TOOL_NAME: usize = 128;

pub use crate::names::{SEPARATOR, prefixed_name};

/// The namespace published scripts are listed under: the tool `script__<name>`, reached from
/// Starlark as `script.<name>(...)`.
pub const SCRIPT_NAMESPACE: &str = "script";

/// The MCP-facing name of published script `name`: `script__<name>`.
pub fn script_tool_name(name: &str) -> String {
    prefixed_name(SCRIPT_NAMESPACE, name)
}

// The origin and annotation types are the wire contract of a listing's `_meta`, shared with
// the sessions that read it.
pub use larkgate_caller::{Annotations as ToolAnnotations, Origin, Source};

/// Everything about a tool except how to run it.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolSpec {
    /// The MCP-facing name.
    pub name: String,
    /// A short human title.
    pub title: Option<String>,
    /// What it does.
    pub description: String,
    /// The JSON Schema of its arguments.
    pub input_schema: serde_json::Map<String, serde_json::Value>,
    /// The JSON Schema of its structured result.
    pub output_schema: Option<serde_json::Map<String, serde_json::Value>>,
    /// Annotations as declared.
    pub annotations: ToolAnnotations,
    /// Where it comes from.
    pub origin: Origin,
    /// Write-barrier classification: `true` only when known read-only.
    pub read_only: bool,
    /// The input shape, for tools that bind through one (capabilities, platform tools).
    pub input_shape: Option<Vec<FieldShape>>,
    /// The Starlark signature, when there is one.
    pub signature: Option<String>,
    /// For platform tools: the roles that may see and call it (any one suffices), whatever
    /// the policy says. `None`: the policy decides.
    pub roles: Option<&'static [&'static str]>,
    /// Gated whatever the policy's approval patterns say (tools of an upstream configured
    /// `approval = "always"`). Nothing a tool declares about itself can clear this.
    pub requires_approval: bool,
    /// Reachable only from a person's own session (a direct call over HTTP, stdio or the
    /// CLI), never from a script run of any kind: the approval tools, because an approval is a
    /// person's act (see `access::reachable`).
    pub people_only: bool,
    /// The definition as the tool's server wrote it (federated tools): listed as it is, with
    /// only the name larkgate gives it and larkgate's keys added to its `_meta`, so a client
    /// reads the icons, annotations and `_meta` the server declared and nothing larkgate made
    /// up. `None`: larkgate's own tools, listed from the fields above.
    pub definition: Option<Arc<rmcp::model::Tool>>,
}

impl ToolSpec {
    /// A tool named `name` from `origin`, with nothing else said of it: no title, description
    /// or schemas, no shape or signature, and the fail-closed defaults: not known to be
    /// read-only (a draft may not call it), no roles of its own (the policy decides), not gated
    /// of itself, reachable from script runs. Say the rest with struct update syntax:
    /// `ToolSpec { read_only: true, ..ToolSpec::new(name, origin) }`.
    pub fn new(name: impl Into<String>, origin: Origin) -> Self {
        ToolSpec {
            name: name.into(),
            title: None,
            description: String::new(),
            input_schema: serde_json::Map::new(),
            output_schema: None,
            annotations: ToolAnnotations::default(),
            origin,
            read_only: false,
            input_shape: None,
            signature: None,
            roles: None,
            requires_approval: false,
            people_only: false,
            definition: None,
        }
    }
}

/// How a tool runs: arguments in (already bound to its shape, when it has one), a structured
/// result or a refusal out.
#[async_trait::async_trait]
pub trait ToolHandler: Send + Sync {
    /// Runs the tool.
    async fn call(&self, context: &CallContext, arguments: Map) -> Result<Map, Refusal>;

    /// Runs the tool for an MCP client: [`ToolHandler::call`]'s value, and the answer as MCP
    /// content when the tool has one to pass on as it came (an upstream's result: text as
    /// text, images, audio, resource links, embedded resources). By default, the value alone.
    async fn call_for_client(
        &self,
        context: &CallContext,
        arguments: Map,
    ) -> Result<ToolOutput, Refusal> {
        self.call(context, arguments).await.map(ToolOutput::from)
    }
}

/// What a call answered: its structured value (what a script sees), and, from a tool that
/// answers in MCP content of its own, that content for MCP clients.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ToolOutput {
    /// The structured value.
    pub value: Map,
    /// The answer as MCP content, passed to MCP clients unchanged; without it they are sent
    /// the value as structured content.
    pub content: Option<McpContent>,
}

impl From<Map> for ToolOutput {
    fn from(value: Map) -> Self {
        ToolOutput {
            value,
            content: None,
        }
    }
}

/// A tool result's MCP content, as another server answered it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct McpContent {
    /// Its content blocks, every kind the protocol defines.
    pub blocks: Vec<rmcp::model::ContentBlock>,
    /// Its structured content, when it had one.
    pub structured: Option<serde_json::Value>,
}

/// A registered tool.
#[derive(Clone)]
pub struct RegisteredTool {
    /// Its description.
    pub spec: ToolSpec,
    /// How it runs.
    pub handler: Arc<dyn ToolHandler>,
    /// Its input shape, validated, when it has one.
    pub input: Option<larkgate_binding::InputShape>,
    /// The arguments its input schema lists (`properties`), when it lists them: what the
    /// policy's rules that name it may read ([`schema_arguments`]).
    pub arguments: Option<Arc<[String]>>,
}

/// The arguments an input schema lists (the names under `properties`), when it lists them.
pub fn schema_arguments(
    input_schema: &serde_json::Map<String, serde_json::Value>,
) -> Option<Arc<[String]>> {
    let properties = input_schema.get("properties")?.as_object()?;
    Some(properties.keys().cloned().collect())
}

impl std::fmt::Debug for RegisteredTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegisteredTool")
            .field("spec", &self.spec)
            .finish_non_exhaustive()
    }
}

/// Why a tool could not be registered.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum RegistryError {
    /// The name breaks the naming rules.
    #[error("tool name {name:?} is invalid: {reason}")]
    InvalidName {
        /// The name.
        name: String,
        /// Which rule it breaks.
        reason: String,
    },
    /// Two tools claim one name.
    #[error("two tools are named {0:?}: rename one (for upstreams, change the alias)")]
    Collision(String),
    /// The tool's input shape is not a valid one.
    #[error("tool {name:?} has an invalid input shape: {reason}")]
    InvalidShape {
        /// The tool.
        name: String,
        /// Why.
        reason: String,
    },
}

impl RegistryError {
    /// What a tool whose input shape does not compile is refused with, for `map_err`.
    pub fn shape(name: &str) -> impl Fn(larkgate_binding::Error) -> RegistryError + '_ {
        move |e| RegistryError::InvalidShape {
            name: name.to_owned(),
            reason: e.to_string(),
        }
    }
}

/// Checks a final tool name against the naming rules.
pub fn check_tool_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("it is empty".to_owned());
    }
    if name.len() > MAX_TOOL_NAME {
        return Err(format!("it is longer than {MAX_TOOL_NAME} characters"));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-')))
    {
        return Err(format!(
            "it contains {c:?}; tool names use only A-Z a-z 0-9 _ -"
        ));
    }
    Ok(())
}

/// The longest upstream alias or script name.
pub const MAX_ALIAS: usize = 32;

/// Names a script sees as globals (Starlark's own and larkgate's engine's), plus `script`:
/// none of them may become an upstream alias or a script name, which would shadow it. The
/// engine's globals are checked against this list by a test of `larkgate-scripts` (the crate
/// that sees both), so a global the engine gains cannot slip through.
pub const RESERVED_ALIASES: &[&str] = &[
    // larkgate's engine
    "call",
    "try_call",
    "tools",
    "help",
    "resource_read",
    "prompt_get",
    "print",
    "json",
    "struct",
    "fail",
    "main",
    SCRIPT_NAMESPACE,
    "load",
    // Starlark's built-ins
    "abs",
    "all",
    "any",
    "bool",
    "bytes",
    "chr",
    "dict",
    "dir",
    "enumerate",
    "eval_type",
    "float",
    "getattr",
    "hasattr",
    "hash",
    "int",
    "isinstance",
    "len",
    "list",
    "max",
    "min",
    "ord",
    "range",
    "repr",
    "reversed",
    "sorted",
    "str",
    "tuple",
    "type",
    "typing",
    "zip",
    "set",
    "record",
    "enum",
    "field",
    "partial",
    "debug",
    "breakpoint",
    "none",
    "true",
    "false",
];

/// Checks an upstream alias or a script name: `[a-z][a-z0-9_]*`, at most 32 characters, no
/// `__` (the separator of prefixed names), not ending in `_`, a Starlark identifier, and not
/// reserved ([`RESERVED_ALIASES`]). Capability names are checked by
/// [`Registry::check_alias`].
pub fn check_alias_syntax(alias: &str) -> Result<(), String> {
    let mut chars = alias.chars();
    let starts_well = chars.next().is_some_and(|c| c.is_ascii_lowercase());
    let rest_ok = chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if !starts_well || !rest_ok {
        return Err("use a lowercase letter, then lowercase letters, digits and _".to_owned());
    }
    if alias.len() > MAX_ALIAS {
        return Err(format!("it is longer than {MAX_ALIAS} characters"));
    }
    if alias.contains("__") {
        return Err("`__` separates an alias from a tool name".to_owned());
    }
    if alias.ends_with('_') {
        return Err("it ends in `_`, which would run into the `__` separator".to_owned());
    }
    if !larkgate_binding::valid_identifier(alias) || RESERVED_ALIASES.contains(&alias) {
        return Err("it is a reserved word or a name scripts already use".to_owned());
    }
    Ok(())
}

/// The registry in force, replaced whole when an upstream's tools change: every call and
/// listing reads one consistent snapshot. Each replacement that changes a tool's definition
/// (one added, removed, or described differently) counts one change, which sessions watch to
/// tell their clients the tool list changed ([`ToolTable::changes`]).
#[derive(Debug)]
pub struct ToolTable {
    current: std::sync::RwLock<Arc<Registry>>,
    changes: tokio::sync::watch::Sender<u64>,
}

impl Default for ToolTable {
    fn default() -> Self {
        ToolTable::new(Registry::default())
    }
}

impl ToolTable {
    /// A table holding `registry`.
    pub fn new(registry: Registry) -> Self {
        ToolTable {
            current: std::sync::RwLock::new(Arc::new(registry)),
            changes: tokio::sync::watch::Sender::new(0),
        }
    }

    /// Changes from now on: the receiver is marked changed after each replacement that
    /// changes a tool's definition.
    pub fn changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// The registry in force now.
    pub fn snapshot(&self) -> Arc<Registry> {
        Arc::clone(&self.current.read().unwrap_or_else(|p| p.into_inner()))
    }

    /// Replaces every tool of upstream `alias` with `tools`, all or nothing: a collision or an
    /// invalid tool leaves the table as it was.
    pub fn replace_upstream(
        &self,
        alias: &str,
        tools: Vec<(ToolSpec, Arc<dyn ToolHandler>)>,
    ) -> Result<(), RegistryError> {
        self.replace(
            |spec| {
                spec.origin.source == Source::Upstream
                    && spec.origin.alias.as_deref() == Some(alias)
            },
            tools,
        )
    }

    /// Replaces every published script's tool (`script__<name>`) with `tools`, all or
    /// nothing.
    pub fn replace_scripts(
        &self,
        tools: Vec<(ToolSpec, Arc<dyn ToolHandler>)>,
    ) -> Result<(), RegistryError> {
        self.replace(|spec| spec.origin.source == Source::Script, tools)
    }

    /// Adds tools, all or nothing (a name already taken is a collision).
    pub fn add(&self, tools: Vec<(ToolSpec, Arc<dyn ToolHandler>)>) -> Result<(), RegistryError> {
        self.replace(|_| false, tools)
    }

    fn replace(
        &self,
        remove: impl Fn(&ToolSpec) -> bool,
        tools: Vec<(ToolSpec, Arc<dyn ToolHandler>)>,
    ) -> Result<(), RegistryError> {
        let mut current = self.current.write().unwrap_or_else(|p| p.into_inner());
        let mut next = Registry::clone(&current);
        next.tools.retain(|_, t| !remove(&t.spec));
        for (spec, handler) in tools {
            next.register(spec, handler)?;
        }
        let same = current.tools.len() == next.tools.len()
            && current
                .tools
                .iter()
                .zip(next.tools.iter())
                .all(|((a, x), (b, y))| a == b && x.spec == y.spec);
        *current = Arc::new(next);
        drop(current);
        if !same {
            self.changes.send_modify(|version| *version += 1);
        }
        Ok(())
    }
}

/// Every tool, by name.
#[derive(Clone, Debug, Default)]
pub struct Registry {
    tools: BTreeMap<String, Arc<RegisteredTool>>,
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers a tool; fails loudly on a bad name, a collision or a bad shape.
    pub fn register(
        &mut self,
        spec: ToolSpec,
        handler: Arc<dyn ToolHandler>,
    ) -> Result<(), RegistryError> {
        check_tool_name(&spec.name).map_err(|reason| RegistryError::InvalidName {
            name: spec.name.clone(),
            reason,
        })?;
        if self.tools.contains_key(&spec.name) {
            return Err(RegistryError::Collision(spec.name));
        }
        let input = spec
            .input_shape
            .clone()
            .map(larkgate_binding::InputShape::new)
            .transpose()
            .map_err(RegistryError::shape(&spec.name))?;
        self.tools.insert(
            spec.name.clone(),
            Arc::new(RegisteredTool {
                arguments: schema_arguments(&spec.input_schema),
                spec,
                handler,
                input,
            }),
        );
        Ok(())
    }

    /// Checks an upstream alias or script name against the syntax rules and every
    /// capability's name.
    pub fn check_alias(&self, alias: &str) -> Result<(), String> {
        check_alias_syntax(alias)?;
        let taken = self.tools.values().any(|t| {
            matches!(t.spec.origin.source, Source::Capability | Source::Platform)
                && t.spec.name == alias
        });
        if taken {
            return Err("a built-in tool has this name".to_owned());
        }
        Ok(())
    }

    /// One tool.
    pub fn get(&self, name: &str) -> Option<&Arc<RegisteredTool>> {
        self.tools.get(name)
    }

    /// Every tool, by name.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<RegisteredTool>> {
        self.tools.values()
    }

    /// How many tools there are.
    pub fn len(&self) -> usize {
        self.tools.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }
}

impl RegisteredTool {
    /// The MCP listing of this tool, with origin, signature and shape in `_meta`. A
    /// federated tool is listed as its server defined it (see [`ToolSpec::definition`]): only
    /// its name is larkgate's, and larkgate's keys in its `_meta` (a server's own key of the
    /// same name is replaced, so no server can say where its tool comes from).
    pub fn to_mcp(&self) -> rmcp::model::Tool {
        let spec = &self.spec;
        let mut tool = match &spec.definition {
            Some(definition) => {
                let mut tool = (**definition).clone();
                tool.name = spec.name.clone().into();
                tool
            }
            None => {
                let mut tool = rmcp::model::Tool::new(
                    spec.name.clone(),
                    spec.description.clone(),
                    Arc::new(spec.input_schema.clone()),
                );
                if let Some(title) = &spec.title {
                    tool = tool.with_title(title.clone());
                }
                if let Some(schema) = &spec.output_schema {
                    tool = tool.with_raw_output_schema(Arc::new(schema.clone()));
                }
                let mut annotations = rmcp::model::ToolAnnotations::new();
                annotations.read_only_hint = spec.annotations.read_only;
                annotations.destructive_hint = spec.annotations.destructive;
                annotations.idempotent_hint = spec.annotations.idempotent;
                annotations.open_world_hint = spec.annotations.open_world;
                tool.with_annotations(annotations)
            }
        };
        let mut meta = tool.meta.take().unwrap_or_default();
        meta.insert(
            ORIGIN_META_KEY.to_owned(),
            serde_json::to_value(&spec.origin).unwrap_or_default(),
        );
        if let Some(signature) = &spec.signature {
            meta.insert(SIGNATURE_META_KEY.to_owned(), signature.as_str().into());
        }
        if let Some(shape) = &spec.input_shape {
            meta.insert(
                INPUT_SHAPE_META_KEY.to_owned(),
                serde_json::to_value(shape).unwrap_or_default(),
            );
        }
        tool.with_meta(meta)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_names_follow_the_rules() {
        let table = [
            ("kv_get", true),
            ("github__search-issues", true),
            ("script__digest", true),
            ("a", true),
            ("", false),
            ("has space", false),
            ("dotted.name", false),
            ("slash/name", false),
            ("ünicode", false),
        ];
        for (name, ok) in table {
            assert_eq!(check_tool_name(name).is_ok(), ok, "{name:?}");
        }
        assert!(check_tool_name(&"a".repeat(128)).is_ok());
        assert!(check_tool_name(&"a".repeat(129)).is_err());
    }

    #[test]
    fn aliases_follow_the_rules() {
        let table = [
            ("github", true),
            ("gh2", true),
            ("my_server", true),
            ("a", true),
            ("", false),
            ("GitHub", false),
            ("2fa", false),
            ("_hidden", false),
            ("my__server", false),
            ("server_", false),
            ("my-server", false),
            ("def", false),
            ("while", false),
            ("print", false),
            ("json", false),
            ("script", false),
            ("call", false),
            ("len", false),
        ];
        for (alias, ok) in table {
            assert_eq!(check_alias_syntax(alias).is_ok(), ok, "{alias:?}");
        }
        assert!(check_alias_syntax(&"a".repeat(32)).is_ok());
        assert!(check_alias_syntax(&"a".repeat(33)).is_err());
        let mut registry = Registry::new();
        crate::capabilities::register(&mut registry).unwrap();
        assert!(
            registry.check_alias("kv_get").is_err(),
            "a capability's name is reserved"
        );
        assert!(registry.check_alias("github").is_ok());
    }

    #[test]
    fn only_a_replacement_that_changes_a_definition_counts_as_a_change() {
        let mut builtin = Registry::new();
        crate::capabilities::register(&mut builtin).unwrap();
        let clock = builtin.get("clock_now").unwrap();
        let script = |description: &str| {
            let mut spec = clock.spec.clone();
            spec.name = script_tool_name("hello");
            spec.origin.source = Source::Script;
            spec.description = description.to_owned();
            (spec, Arc::clone(&clock.handler))
        };
        let table = ToolTable::new(builtin.clone());
        let mut changes = table.changes();
        table.replace_scripts(Vec::new()).unwrap();
        table.add(Vec::new()).unwrap();
        assert!(!changes.has_changed().unwrap(), "nothing changed");
        table.replace_scripts(vec![script("v1")]).unwrap();
        assert!(changes.has_changed().unwrap(), "a tool was added");
        changes.mark_unchanged();
        table.replace_scripts(vec![script("v1")]).unwrap();
        assert!(!changes.has_changed().unwrap(), "the same definition again");
        table.replace_scripts(vec![script("v2")]).unwrap();
        assert!(changes.has_changed().unwrap(), "a description changed");
        changes.mark_unchanged();
        table.replace_scripts(Vec::new()).unwrap();
        assert!(changes.has_changed().unwrap(), "a tool was removed");
    }
}
