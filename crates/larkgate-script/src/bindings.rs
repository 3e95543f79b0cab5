//! Tools as Starlark callables.
//!
//! Every tool a run's [`Host`] lists becomes callable with keyword-only arguments:
//! capabilities and platform tools as globals (`kv_get(key = ...)`), upstream and script tools
//! as attributes of a namespace named by their alias (`github.search_issues(...)`, or
//! `github["search-issues"](...)` for names that are not identifiers), and any tool as
//! `call(name, **kwargs)`. `try_call` returns `struct(ok, value, error)` instead of raising.
//! `tools()` lists them; `help(tool)` shows a signature and description.
//!
//! Upstream resources and prompts are reached by two functions: `resource_read(uri)` with a
//! larkgate URI, and `prompt_get(name, **arguments)` with text arguments. They cross the same
//! pipeline as an MCP client's `resources/read` and `prompts/get`; drafts may make them (they
//! are read-only), they count toward the run's tool calls and are paced like tool calls.
//!
//! Arguments bind before the call leaves the engine: through the tool's input shape when it
//! has one, else against the types its JSON input schema states. A draft run refuses a tool
//! that does not declare itself read-only (`write_barrier`) without calling it; the server
//! enforces the same barrier again. A `rate_limited` refusal is paced: the run waits
//! `retry_after` (never past its deadline) and tries again. Every other refusal raises a
//! Starlark error carrying the tool's own text and code.

use std::cell::Cell;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use allocative::Allocative;
use larkgate_binding::{InputShape, Limits, Map, from_starlark, map_to_starlark};
use larkgate_caller::barrier::{Barrier, write_barrier};
use larkgate_caller::{CallError, Caller, Code, RefusalError, RunKind, Target, ToolInfo};
use starlark::any::ProvidesStaticType;
use starlark::collections::SmallMap;
use starlark::environment::GlobalsBuilder;
use starlark::eval::{Arguments, Evaluator};
use starlark::starlark_module;
use starlark::values::structs::AllocStruct;
use starlark::values::{
    Heap, NoSerialize, StarlarkPagablePanic, StarlarkValue, Value as SValue, ValueLike,
    starlark_value,
};

/// The engine's synchronous view of a [`Caller`]. The engine interprets on one thread and
/// waits for each host call; [`Blocking`] adapts any `Caller` to that.
pub trait Host: Send + Sync {
    /// The run's listing.
    fn tools(&self) -> Result<Vec<ToolInfo>, CallError>;
    /// One call.
    fn call_tool(&self, name: &str, arguments: Map) -> Result<Map, CallError>;
    /// One host call of any kind (see [`Caller::request`]).
    fn request(&self, target: Target, name: &str, arguments: Map) -> Result<Map, CallError> {
        match target {
            Target::Tool => self.call_tool(name, arguments),
            Target::Resource | Target::Prompt => Err(CallError::Refused(RefusalError::new(
                Code::NotFound,
                format!("this run's host serves no resources or prompts, so not {name}"),
            ))),
        }
    }
    /// Waits before a retry (pacing).
    fn pause(&self, duration: Duration);
}

/// A [`Caller`] as a [`Host`]: each call blocks the interpreting thread until it completes.
/// Run the engine on a thread that may block (a worker process, or a blocking task).
#[derive(Debug)]
pub struct Blocking<C>(pub C);

impl<C: Caller> Host for Blocking<C> {
    fn tools(&self) -> Result<Vec<ToolInfo>, CallError> {
        futures::executor::block_on(self.0.tools())
    }
    fn call_tool(&self, name: &str, arguments: Map) -> Result<Map, CallError> {
        futures::executor::block_on(self.0.call_tool(name, arguments))
    }
    fn request(&self, target: Target, name: &str, arguments: Map) -> Result<Map, CallError> {
        futures::executor::block_on(self.0.request(target, name, arguments))
    }
    fn pause(&self, duration: Duration) {
        std::thread::sleep(duration);
    }
}

/// A refusal raised into the script: the tool's own text, and its code.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{text} [{code}]")]
pub struct ToolRefused {
    /// The refusal code.
    pub code: Code,
    /// The tool's own text.
    pub text: String,
    /// The tool that refused.
    pub tool: String,
    /// For `approval_required` and `approval_denied` (and an approval given back): its id.
    pub approval_id: Option<String>,
    /// How long to wait before trying again, when the refusal says (whole seconds, rounded
    /// up).
    pub retry_after_seconds: Option<u64>,
}

impl ToolRefused {
    /// `refusal` of a call to `tool`.
    pub fn of(tool: &str, refusal: RefusalError) -> Self {
        ToolRefused {
            retry_after_seconds: refusal
                .retry_after
                .map(|d| d.as_secs() + u64::from(d.subsec_nanos() > 0)),
            code: refusal.code,
            text: refusal.text,
            tool: tool.to_owned(),
            approval_id: refusal.approval_id,
        }
    }
}

/// A limit reached inside a host call.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub(crate) struct HostLimit {
    pub(crate) limit: &'static str,
    pub(crate) message: String,
}

/// Everything a run's host calls need, in the evaluator's `extra`.
#[derive(ProvidesStaticType)]
pub(crate) struct RunState {
    pub(crate) host: Arc<dyn Host>,
    pub(crate) listing: Vec<ToolInfo>,
    pub(crate) draft: bool,
    pub(crate) values: Limits,
    pub(crate) max_tool_calls: u64,
    pub(crate) deadline: Instant,
    pub(crate) tool_calls: Cell<u64>,
    pub(crate) paces: Cell<u64>,
}

impl RunState {
    fn tool(&self, name: &str) -> Option<&ToolInfo> {
        self.listing.iter().find(|t| t.name == name)
    }

    /// One host call with pacing; `Err` is a refusal or a limit. Reads and gets are
    /// read-only, so drafts make them; every kind counts toward the run's tool calls.
    fn request(&self, target: Target, name: &str, arguments: Map) -> Result<Map, CallOutcome> {
        if self.draft && target == Target::Tool {
            // Refused here with the pipeline's own decision, to spare the round trip; the
            // pipeline decides again. The tool must exist first: an unknown name goes to the
            // server, which answers `not_found` in the same words for hidden and missing tools.
            if let Some(tool) = self.tool(name)
                && let Barrier::Refuse(envelope) = write_barrier(
                    Some(RunKind::Draft),
                    name,
                    tool.annotations.read_only == Some(true),
                )
            {
                return Err(CallOutcome::Refused(RefusalError::new(
                    envelope.code,
                    envelope.text(),
                )));
            }
        }
        loop {
            let calls = self.tool_calls.get() + 1;
            if calls > self.max_tool_calls {
                return Err(CallOutcome::Limit(HostLimit {
                    limit: "tool calls",
                    message: format!("more than {} tool calls", self.max_tool_calls),
                }));
            }
            self.tool_calls.set(calls);
            match self.host.request(target, name, arguments.clone()) {
                Ok(result) => return Ok(result),
                Err(CallError::Refused(refusal)) if refusal.is_rate_limited() => {
                    let wait = refusal.retry_after.unwrap_or(Duration::from_secs(1));
                    if Instant::now() + wait >= self.deadline {
                        return Err(CallOutcome::Limit(HostLimit {
                            limit: "wall time",
                            message: format!(
                                "{name} is rate limited for {wait:?}, past the run's deadline"
                            ),
                        }));
                    }
                    self.paces.set(self.paces.get() + 1);
                    self.host.pause(wait);
                }
                Err(CallError::Refused(refusal)) => return Err(CallOutcome::Refused(refusal)),
                Err(CallError::Transport(message)) => {
                    return Err(CallOutcome::Refused(RefusalError::new(
                        Code::Internal,
                        message,
                    )));
                }
            }
        }
    }
}

enum CallOutcome {
    Refused(RefusalError),
    Limit(HostLimit),
}

fn state<'a>(eval: &'a Evaluator<'_, '_, '_>) -> starlark::Result<&'a RunState> {
    eval.extra
        .and_then(|extra| extra.downcast_ref::<RunState>())
        .ok_or_else(|| other("tools are not available in this run"))
}

fn other(message: impl Into<String>) -> starlark::Error {
    starlark::Error::new_other(std::io::Error::other(message.into()))
}

/// A call's arguments as Starlark passed them.
struct CallArgs<'v> {
    positional: Vec<SValue<'v>>,
    named: Vec<(String, SValue<'v>)>,
}

impl<'v> CallArgs<'v> {
    /// Reads `args`, skipping the first `skip` positional arguments (`call`'s tool name).
    fn read(args: &Arguments<'v, '_>, heap: Heap<'v>, skip: usize) -> starlark::Result<Self> {
        Ok(CallArgs {
            positional: args.positions(heap)?.skip(skip).collect(),
            named: args
                .names_map()?
                .iter()
                .map(|(k, v)| (k.as_str().to_owned(), *v))
                .collect(),
        })
    }
}

/// Binds a call's arguments for `name` from Starlark values.
fn bind(state: &RunState, name: &str, args: &CallArgs<'_>) -> starlark::Result<Map> {
    let positional = &args.positional;
    let named: Vec<(&str, SValue<'_>)> = args.named.iter().map(|(k, v)| (k.as_str(), *v)).collect();
    let tool = state.tool(name);
    if let Some(shape) = tool.and_then(|t| t.input_shape.clone()) {
        let shape = InputShape::new(shape).map_err(|e| other(e.to_string()))?;
        return shape
            .bind_starlark(name, positional, &named)
            .map_err(|e| invalid_arguments(name, e.to_string()));
    }
    if !positional.is_empty() {
        return Err(invalid_arguments(
            name,
            format!("{name}() takes keyword arguments only"),
        ));
    }
    let mut map = Map::new();
    for (key, value) in named {
        let value = from_starlark(value, state.values)
            .map_err(|e| invalid_arguments(name, format!("{name}(): argument `{key}`: {e}")))?;
        map.insert(key.to_owned(), value);
    }
    if let Some(schema) = tool.and_then(|t| t.input_schema.as_object()) {
        larkgate_binding::check_schema(name, schema, &map)
            .map_err(|text| invalid_arguments(name, text))?;
    }
    Ok(map)
}

/// Calls `name` and converts the outcome: a dict, or an error raised into the script.
fn call_raising<'v>(
    name: &str,
    args: &CallArgs<'v>,
    eval: &mut Evaluator<'v, '_, '_>,
) -> starlark::Result<SValue<'v>> {
    let arguments = bind(state(eval)?, name, args)?;
    request_raising(Target::Tool, name, arguments, eval)
}

/// Makes a host call and converts the outcome: a dict, or an error raised into the script.
fn request_raising<'v>(
    target: Target,
    name: &str,
    arguments: Map,
    eval: &mut Evaluator<'v, '_, '_>,
) -> starlark::Result<SValue<'v>> {
    let heap = eval.heap();
    let state = state(eval)?;
    match state.request(target, name, arguments) {
        Ok(result) => map_to_starlark(&result, heap, state.values).map_err(|e| {
            starlark::Error::new_other(HostLimit {
                limit: "result",
                message: format!("the answer to {name}: {e}"),
            })
        }),
        Err(CallOutcome::Refused(refusal)) => {
            Err(starlark::Error::new_other(ToolRefused::of(name, refusal)))
        }
        Err(CallOutcome::Limit(limit)) => Err(starlark::Error::new_other(limit)),
    }
}

/// Calls `name` without raising on a refusal: `struct(ok, value, error)`.
fn call_trying<'v>(
    name: &str,
    args: &CallArgs<'v>,
    eval: &mut Evaluator<'v, '_, '_>,
) -> starlark::Result<SValue<'v>> {
    let heap = eval.heap();
    let refused = |r: &ToolRefused| {
        let error = heap.alloc(AllocStruct([
            ("code", heap.alloc(r.code.as_str())),
            ("message", heap.alloc(r.text.as_str())),
            ("tool", heap.alloc(r.tool.as_str())),
            (
                "approval_id",
                r.approval_id
                    .as_deref()
                    .map_or(SValue::new_none(), |id| heap.alloc(id)),
            ),
            (
                "retry_after_seconds",
                r.retry_after_seconds
                    .map_or(SValue::new_none(), |s| heap.alloc(s as i64)),
            ),
        ]));
        heap.alloc(AllocStruct([
            ("ok", SValue::new_bool(false)),
            ("value", SValue::new_none()),
            ("error", error),
        ]))
    };
    match call_raising(name, args, eval) {
        Ok(value) => Ok(heap.alloc(AllocStruct([
            ("ok", SValue::new_bool(true)),
            ("value", value),
            ("error", SValue::new_none()),
        ]))),
        Err(error) => match error_source::<ToolRefused>(&error) {
            Some(r) => Ok(refused(r)),
            None => Err(error),
        },
    }
}

/// The `E` a starlark error wraps, if that is what it wraps.
pub(crate) fn error_source<E: std::error::Error + Send + Sync + 'static>(
    error: &starlark::Error,
) -> Option<&E> {
    match error.kind() {
        starlark::ErrorKind::Other(inner) => inner.downcast_ref::<E>(),
        _ => None,
    }
}

/// An `invalid_arguments` refusal raised before the call leaves the engine.
fn invalid_arguments(tool: &str, text: String) -> starlark::Error {
    starlark::Error::new_other(ToolRefused::of(
        tool,
        RefusalError::new(Code::InvalidArguments, text),
    ))
}

/// A tool as a Starlark callable.
#[derive(Debug, ProvidesStaticType, NoSerialize, Allocative, StarlarkPagablePanic)]
pub(crate) struct ToolFn {
    pub(crate) name: String,
}

starlark::starlark_simple_value!(ToolFn);

impl fmt::Display for ToolFn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "<tool {}>", self.name)
    }
}

#[starlark_value(type = "tool")]
impl<'v> StarlarkValue<'v> for ToolFn {
    fn invoke(
        &self,
        _me: SValue<'v>,
        args: &Arguments<'v, '_>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<SValue<'v>> {
        let args = CallArgs::read(args, eval.heap(), 0)?;
        call_raising(&self.name, &args, eval)
    }
}

/// An upstream's or a script's tools, by their original names.
#[derive(Debug, ProvidesStaticType, NoSerialize, Allocative, StarlarkPagablePanic)]
pub(crate) struct Namespace {
    pub(crate) alias: String,
    /// (original name, listed name)
    pub(crate) members: Vec<(String, String)>,
}

starlark::starlark_simple_value!(Namespace);

impl fmt::Display for Namespace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "<namespace {}>", self.alias)
    }
}

impl Namespace {
    fn member(&self, original: &str) -> Option<&str> {
        self.members
            .iter()
            .find(|(o, _)| o == original)
            .map(|(_, listed)| listed.as_str())
    }
}

#[starlark_value(type = "namespace")]
impl<'v> StarlarkValue<'v> for Namespace {
    fn get_attr(&self, attribute: &str, heap: Heap<'v>) -> Option<SValue<'v>> {
        self.member(attribute).map(|name| {
            heap.alloc(ToolFn {
                name: name.to_owned(),
            })
        })
    }

    fn dir_attr(&self) -> Vec<String> {
        self.members
            .iter()
            .map(|(o, _)| o.clone())
            .filter(|o| larkgate_binding::valid_identifier(o))
            .collect()
    }

    fn at(&self, index: SValue<'v>, heap: Heap<'v>) -> starlark::Result<SValue<'v>> {
        let key = index
            .unpack_str()
            .ok_or_else(|| other(format!("{}[...] takes a tool name", self.alias)))?;
        self.member(key)
            .map(|name| {
                heap.alloc(ToolFn {
                    name: name.to_owned(),
                })
            })
            .ok_or_else(|| other(format!("{} has no tool named {key:?}", self.alias)))
    }
}

#[starlark_module]
pub(crate) fn host_globals(builder: &mut GlobalsBuilder) {
    /// Calls any tool by its listed name: `call("github__search-issues", query = "...")`.
    fn call<'v>(
        args: &Arguments<'v, '_>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<SValue<'v>> {
        let name = tool_name(args, eval.heap())?;
        let args = CallArgs::read(args, eval.heap(), 1)?;
        call_raising(&name, &args, eval)
    }

    /// Like `call`, but a refusal is returned as `struct(ok = False, value = None,
    /// error = struct(code, message, retry_after_seconds))` instead of raised.
    fn try_call<'v>(
        args: &Arguments<'v, '_>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<SValue<'v>> {
        let name = tool_name(args, eval.heap())?;
        let args = CallArgs::read(args, eval.heap(), 1)?;
        call_trying(&name, &args, eval)
    }

    /// Reads an upstream resource by its larkgate URI (`larkgate://ALIAS/URI`, as listed or
    /// filled into a listed template): `{"contents": [{"uri", "mimeType", "text" | "blob"}]}`.
    /// A read is read-only: drafts may make it. A refusal raises, as a tool's does.
    fn resource_read<'v>(
        #[starlark(require = pos)] uri: &str,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<SValue<'v>> {
        request_raising(Target::Resource, uri, Map::new(), eval)
    }

    /// Gets an upstream prompt by its listed name with its arguments as keywords (text):
    /// `{"description": ..., "messages": [{"role", "content"}]}`. Drafts may get prompts.
    fn prompt_get<'v>(
        #[starlark(require = pos)] name: &str,
        #[starlark(kwargs)] arguments: SmallMap<String, SValue<'v>>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<SValue<'v>> {
        let mut map = Map::new();
        for (key, value) in arguments {
            let Some(text) = value.unpack_str() else {
                return Err(invalid_arguments(
                    name,
                    format!(
                        "prompt_get(): argument `{key}` must be a string (prompt arguments are \
                         text), got {}",
                        value.get_type()
                    ),
                ));
            };
            map.insert(key, text.into());
        }
        request_raising(Target::Prompt, name, map, eval)
    }

    /// The tools this run may call: a list of `struct(name, signature, description, read_only)`.
    fn tools<'v>(eval: &mut Evaluator<'v, '_, '_>) -> starlark::Result<SValue<'v>> {
        let heap = eval.heap();
        let state = state(eval)?;
        let items: Vec<SValue<'v>> = state
            .listing
            .iter()
            .map(|t| {
                heap.alloc(AllocStruct([
                    ("name", heap.alloc(t.name.as_str())),
                    ("signature", heap.alloc(signature(t).as_str())),
                    (
                        "description",
                        heap.alloc(t.description.clone().unwrap_or_default()),
                    ),
                    (
                        "read_only",
                        SValue::new_bool(t.annotations.read_only == Some(true)),
                    ),
                ]))
            })
            .collect();
        Ok(heap.alloc(starlark::values::list::AllocList(items)))
    }

    /// A tool's signature and description.
    fn help<'v>(tool: SValue<'v>, eval: &mut Evaluator<'v, '_, '_>) -> starlark::Result<String> {
        let name = match tool.downcast_ref::<ToolFn>() {
            Some(f) => f.name.clone(),
            None => tool
                .unpack_str()
                .map(str::to_owned)
                .ok_or_else(|| other("help() takes a tool or a tool name"))?,
        };
        let state = state(eval)?;
        let info = state
            .tool(&name)
            .ok_or_else(|| other(format!("no tool named {name:?} is available")))?;
        Ok(format!(
            "{}\n{}",
            signature(info),
            info.description.clone().unwrap_or_default()
        ))
    }
}

/// `call(name, **kwargs)`: the tool name, which must be the only positional argument.
fn tool_name<'v>(args: &Arguments<'v, '_>, heap: Heap<'v>) -> starlark::Result<String> {
    let mut positional = args.positions(heap)?;
    let name = positional
        .next()
        .and_then(|v| v.unpack_str().map(str::to_owned))
        .ok_or_else(|| other("call() takes the tool's name first: call(\"kv_get\", key = ...)"))?;
    if positional.next().is_some() {
        return Err(other(
            "call() takes the tool's name, then keyword arguments only",
        ));
    }
    Ok(name)
}

/// The signature shown for a tool: its own, or one built from its schema.
fn signature(tool: &ToolInfo) -> String {
    if let Some(signature) = &tool.signature {
        return signature.clone();
    }
    let properties: Vec<String> = tool
        .input_schema
        .get("properties")
        .and_then(|p| p.as_object())
        .map(|p| p.keys().map(|k| format!("{k}=...")).collect())
        .unwrap_or_default();
    format!("{}({}) -> dict", tool.name, properties.join(", "))
}
