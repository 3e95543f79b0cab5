//! Conditions on a call: CEL expressions (`when = "..."`) over the call's canonical arguments
//! (`args`), its caller (`principal`), its tool (`tool`), the runs it came through (`chain`)
//! and the time (`now`). See [`Facts`] for what each holds.
//!
//! # Threat model
//!
//! The arguments are the caller's: an expression evaluates data an attacker chose, on every
//! call, inside the pipeline. What bounds it, each checked when the configuration is loaded
//! (never per call):
//!
//! - **Size.** At most [`MAX_SOURCE_BYTES`] of source, and brackets nested at most
//!   [`MAX_NESTING`] deep, before the parser (which recurses) sees it; at most [`MAX_DEPTH`]
//!   levels in the parsed expression, which evaluation recurses through.
//! - **Cost.** No comprehension (`all`, `exists`, `exists_one`, `map`, `filter`) inside
//!   another, and a comprehension's body reads only its own variables, literals and the small
//!   facts (`principal`, `tool`, `chain`, `now`), never `args`. So evaluation touches each byte
//!   of the arguments a bounded number of times per node of the expression, and the arguments
//!   are already bounded by the `arguments` step (`max_argument_bytes`, and the value limits
//!   of depth and length).
//! - **Regular expressions.** `matches` takes a literal pattern only (compiled by the `regex`
//!   crate, which has no backtracking: its matching time is linear in the input, so there is no
//!   catastrophic pattern); a pattern taken from the arguments would let a caller choose what
//!   is compiled.
//! - **Names.** An expression reads only the five facts (and the type names `int`, `string`,
//!   ...): any other name is refused with the closest fact's name, so a typo is never an
//!   always-failing condition found in production.
//! - **Failure.** A condition that fails to evaluate (a field the arguments lack, a type that
//!   does not compare, a result that is not a boolean) is an error, never `false`: the caller
//!   of [`Condition::holds`] fails closed.

use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::sync::{Arc, LazyLock};

use cel::common::ast::{EntryExpr, Expr, IdedExpr, LiteralValue};
use larkgate_binding::{Map, Value as Arg};
use serde::{Deserialize, Serialize};

mod always;
pub(super) mod fast;

/// The longest condition, in bytes of source.
pub const MAX_SOURCE_BYTES: usize = 2048;
/// The deepest nesting of brackets in a condition's source.
pub const MAX_NESTING: usize = 24;
/// The deepest parsed expression (operators chain: `a || b || c` is three levels).
pub const MAX_DEPTH: usize = 64;

/// The facts a condition reads, by name.
pub const FACTS: [&str; 5] = ["args", "principal", "tool", "chain", "now"];

/// Names of types a condition may compare with `type(x) == string`.
const TYPE_NAMES: [&str; 9] = [
    "int",
    "uint",
    "double",
    "string",
    "bytes",
    "bool",
    "list",
    "map",
    "null_type",
];

/// The standard environment every condition is compiled and evaluated with.
static ENV: LazyLock<Arc<cel::Env>> = LazyLock::new(|| Arc::new(cel::Env::stdlib()));

/// A compiled condition. Equal when written alike.
#[derive(Clone)]
pub struct Condition {
    source: String,
    program: Arc<cel::Program>,
    /// The top-level argument fields it reads by name (`args.key`, `args["key"]`,
    /// `has(args.key)`).
    args_fields: BTreeSet<String>,
    /// Whether it reads no fact: the same for every call.
    constant: bool,
    /// The value it has on every call, though it reads the facts, when its shape decides it.
    always: Option<bool>,
    /// The condition on the fast path, alone in its program, when it is written in the core
    /// that path takes (a policy judges its rules with all their conditions in one program:
    /// see [`crate::policy::Policy::judge`]).
    fast: Option<Arc<(fast::Program, fast::Id)>>,
}

impl Condition {
    /// Compiles `source`, or says what is wrong with it and what to write instead.
    pub fn new(source: &str) -> Result<Self, String> {
        if source.trim().is_empty() {
            return Err(
                "the condition is empty: write a CEL expression, or leave `when` out \
                        for a rule that always applies"
                    .to_owned(),
            );
        }
        if source.len() > MAX_SOURCE_BYTES {
            return Err(format!(
                "the condition is {} bytes, over the limit of {MAX_SOURCE_BYTES}: split it into \
                 rules",
                source.len()
            ));
        }
        if nesting(source) > MAX_NESTING {
            return Err(format!(
                "the condition nests brackets more than {MAX_NESTING} deep: write it flatter"
            ));
        }
        let program = ENV.compile(source).map_err(|errors| {
            format!(
                "the condition is not valid CEL: {}",
                one_line(&errors.to_string())
            )
        })?;
        let mut analysis = Analysis::default();
        analysis.walk(program.expression(), &mut Vec::new(), false, 1)?;
        Ok(Condition {
            source: source.to_owned(),
            fast: {
                let mut fast = fast::Program::default();
                fast.compile(program.expression())
                    .map(|root| Arc::new((fast, root)))
            },
            always: always::always(program.expression()),
            program: Arc::new(program),
            args_fields: analysis.args_fields,
            constant: !analysis.reads_facts,
        })
    }

    /// The expression as written.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The top-level argument fields the condition reads by name.
    pub fn args_fields(&self) -> &BTreeSet<String> {
        &self.args_fields
    }

    /// Whether the condition reads none of the facts, so that it is true of every call or of
    /// none (`1 == 1`, `"x".startsWith("y")`).
    pub fn is_constant(&self) -> bool {
        self.constant
    }

    /// The value the condition has on every call it can be evaluated on, when the shape of
    /// the expression decides it although it reads the facts (`args.key == args.key`,
    /// `has(args.key) || true`); `None` when it may depend on the call. See [`always`].
    pub fn always(&self) -> Option<bool> {
        self.always
    }

    /// Whether the condition holds of `facts`; an error (for the operator's log, never for
    /// the caller: it may quote the arguments) when it cannot be evaluated or is not a
    /// boolean.
    pub fn holds(&self, facts: &FactValues) -> Result<bool, String> {
        self.holds_in(&facts.context())
    }

    /// [`Condition::holds`] in a context made once by [`FactValues::context`], for many
    /// conditions on one call: the facts as CEL values are made, once, only if a condition
    /// needs the cel crate's evaluation.
    pub fn holds_in(&self, context: &FactContext<'_>) -> Result<bool, String> {
        if let Some(fast) = &self.fast
            && let Ok(holds) = fast.0.holds(fast.1, context.values)
        {
            return Ok(holds);
        }
        self.holds_by_cel(context)
    }

    /// The parsed expression, for compiling it again into a policy's program.
    pub(super) fn expression(&self) -> &IdedExpr {
        self.program.expression()
    }

    /// [`Condition::holds_in`] by the cel crate alone, never the fast path.
    pub(super) fn holds_by_cel(&self, context: &FactContext<'_>) -> Result<bool, String> {
        match self.program.execute(context.cel()) {
            Ok(cel::Value::Bool(holds)) => Ok(holds),
            Ok(other) => Err(format!(
                "the condition gave a {}, not true or false",
                other.type_of()
            )),
            Err(error) => Err(one_line(&error.to_string())),
        }
    }
}

impl PartialEq for Condition {
    fn eq(&self, other: &Self) -> bool {
        self.source == other.source
    }
}

impl Eq for Condition {}

impl fmt::Debug for Condition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.source, f)
    }
}

impl TryFrom<String> for Condition {
    type Error = String;
    fn try_from(source: String) -> Result<Self, String> {
        Condition::new(&source)
    }
}

impl From<Condition> for String {
    fn from(condition: Condition) -> Self {
        condition.source
    }
}

impl Serialize for Condition {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.source)
    }
}

impl<'de> Deserialize<'de> for Condition {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let source = String::deserialize(deserializer)?;
        Condition::new(&source).map_err(serde::de::Error::custom)
    }
}

/// The deepest nesting of `(`, `[` and `{` outside string literals.
fn nesting(source: &str) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    let mut quote: Option<char> = None;
    let mut escaped = false;
    for c in source.chars() {
        match quote {
            Some(q) => {
                if escaped {
                    escaped = false;
                } else if c == '\\' {
                    escaped = true;
                } else if c == q {
                    quote = None;
                }
            }
            None => match c {
                '"' | '\'' => quote = Some(c),
                '(' | '[' | '{' => {
                    depth += 1;
                    deepest = deepest.max(depth);
                }
                ')' | ']' | '}' => depth = depth.saturating_sub(1),
                _ => {}
            },
        }
    }
    deepest
}

/// `text` on one line, for a log line or an error beside a key.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// What [`Condition::new`] learns walking an expression, and what it refuses.
#[derive(Default)]
struct Analysis {
    args_fields: BTreeSet<String>,
    /// Whether it reads any fact at all.
    reads_facts: bool,
}

impl Analysis {
    /// Walks `expr` with `bound` the names comprehensions bound around it, `inside` whether it
    /// is in a comprehension's body, and `depth` its level.
    fn walk(
        &mut self,
        expr: &IdedExpr,
        bound: &mut Vec<String>,
        inside: bool,
        depth: usize,
    ) -> Result<(), String> {
        if depth > MAX_DEPTH {
            return Err(format!(
                "the condition is more than {MAX_DEPTH} operations deep: split it into rules"
            ));
        }
        let next = depth + 1;
        match &expr.expr {
            Expr::Ident(name) => {
                if bound.iter().any(|b| b == name) || TYPE_NAMES.contains(&name.as_str()) {
                    return Ok(());
                }
                if !FACTS.contains(&name.as_str()) {
                    return Err(unknown_name(name));
                }
                self.reads_facts = true;
                if inside && name == "args" {
                    return Err(
                        "a comprehension (all, exists, exists_one, map, filter) may not read \
                         `args` in its body, only its own variable: bind the list it walks, \
                         as in args.items.all(i, i.startsWith(\"tmp/\"))"
                            .to_owned(),
                    );
                }
                Ok(())
            }
            Expr::Select(select) => {
                if is_args(&select.operand, bound) {
                    self.args_fields.insert(select.field.clone());
                }
                self.walk(&select.operand, bound, inside, next)
            }
            Expr::Call(call) => {
                if call.func_name == "matches" {
                    let pattern = if call.target.is_some() {
                        call.args.first()
                    } else {
                        call.args.get(1)
                    };
                    let Some(Expr::Literal(LiteralValue::String(pattern))) =
                        pattern.map(|p| &p.expr)
                    else {
                        return Err(
                            "matches() takes a literal pattern only (\"^tmp/[a-z]+$\"), never \
                             one from the arguments"
                                .to_owned(),
                        );
                    };
                    if let Err(error) = regex::Regex::new(pattern.inner()) {
                        return Err(format!(
                            "matches() has a pattern that is not a valid regular expression: {}",
                            one_line(&error.to_string())
                        ));
                    }
                }
                if call.func_name == "_[_]"
                    && let [operand, key] = call.args.as_slice()
                    && is_args(operand, bound)
                    && let Expr::Literal(LiteralValue::String(key)) = &key.expr
                {
                    self.args_fields.insert(key.inner().to_string());
                }
                if let Some(target) = &call.target {
                    self.walk(target, bound, inside, next)?;
                }
                for arg in &call.args {
                    self.walk(arg, bound, inside, next)?;
                }
                Ok(())
            }
            Expr::Comprehension(comprehension) => {
                if inside {
                    return Err(
                        "a comprehension (all, exists, exists_one, map, filter) may not be \
                         inside another: its cost would grow with the square of the arguments"
                            .to_owned(),
                    );
                }
                self.walk(&comprehension.iter_range, bound, inside, next)?;
                let before = bound.len();
                bound.push(comprehension.iter_var.clone());
                bound.extend(comprehension.iter_var2.clone());
                bound.push(comprehension.accu_var.clone());
                let body = [
                    &comprehension.accu_init,
                    &comprehension.loop_cond,
                    &comprehension.loop_step,
                    &comprehension.result,
                ];
                let walked = body
                    .into_iter()
                    .try_for_each(|part| self.walk(part, bound, true, next));
                bound.truncate(before);
                walked
            }
            Expr::List(list) => list
                .elements
                .iter()
                .try_for_each(|e| self.walk(e, bound, inside, next)),
            Expr::Map(map) => map.entries.iter().try_for_each(|entry| match &entry.expr {
                EntryExpr::MapEntry(entry) => {
                    self.walk(&entry.key, bound, inside, next)?;
                    self.walk(&entry.value, bound, inside, next)
                }
                EntryExpr::StructField(field) => self.walk(&field.value, bound, inside, next),
            }),
            Expr::Struct(_) => Err(
                "the condition builds a message: write maps ({\"k\": v}) and lists instead"
                    .to_owned(),
            ),
            Expr::Literal(_) | Expr::Unspecified => Ok(()),
        }
    }
}

/// Whether `expr` is the fact `args` (not a comprehension's variable of that name).
fn is_args(expr: &IdedExpr, bound: &[String]) -> bool {
    matches!(&expr.expr, Expr::Ident(name) if name == "args" && !bound.iter().any(|b| b == name))
}

/// The refusal of a name that is not a fact, with the closest fact's name.
fn unknown_name(name: &str) -> String {
    let closest = FACTS
        .iter()
        .min_by_key(|fact| strsim::levenshtein(name, fact))
        .copied()
        .unwrap_or("args");
    format!(
        "the condition reads `{name}`, which is not one of args, principal, tool, chain, now \
         (did you mean `{closest}`?)"
    )
}

/// What a condition reads of one call.
#[derive(Clone, Debug)]
pub struct Facts<'a> {
    /// The call's canonical arguments.
    pub args: &'a Map,
    /// The caller: its name, roles, kind (`user`, `service`, `script`) and issuer (the name of
    /// the identity provider it signs in through, or `""`).
    pub principal: &'a larkgate_store::Principal,
    /// The tool's listed name.
    pub tool: &'a str,
    /// Where the tool comes from: `builtin`, `upstream` or `script`.
    pub source: &'static str,
    /// The upstream's alias for an upstream's tool, else `""`.
    pub alias: &'a str,
    /// Whether the tool declares itself read-only.
    pub read_only: bool,
    /// The runs the call came through (empty for a direct call).
    pub chain: &'a larkgate_store::CallChain,
    /// The time of the call, in Unix milliseconds (the platform's clock).
    pub now_ms: i64,
    /// The arguments the tool's input schema lists, when it lists them: a rule that names the
    /// tool and reads another one refuses its calls (see [`crate::policy::Policy::judge`]).
    pub arguments: Option<&'a Arc<[String]>>,
}

impl Facts<'_> {
    /// The facts, owned, made once per call for every condition evaluated on it.
    pub fn values(&self) -> FactValues {
        let principal = &self.principal;
        let issuer = match &principal.issuer {
            larkgate_store::IssuerBinding::Issuer(name) => name.clone(),
            _ => String::new(),
        };
        FactValues {
            args: self.args.clone(),
            principal: PrincipalFacts {
                name: principal.id.clone(),
                roles: principal.roles.clone(),
                kind: principal.kind.as_str(),
                issuer,
            },
            tool: ToolFacts {
                name: self.tool.to_owned(),
                source: self.source,
                alias: self.alias.to_owned(),
                read_only: self.read_only,
                arguments: self.arguments.cloned(),
            },
            chain: ChainFacts {
                through: self.chain.through.clone(),
                authors: self.chain.authors.clone(),
            },
            now_ms: self.now_ms,
        }
    }
}

/// [`Facts`], owned: what a call keeps for the steps that evaluate conditions.
#[derive(Clone, Debug)]
pub struct FactValues {
    args: Map,
    principal: PrincipalFacts,
    tool: ToolFacts,
    chain: ChainFacts,
    now_ms: i64,
}

#[derive(Clone, Debug)]
struct PrincipalFacts {
    name: String,
    roles: Vec<String>,
    kind: &'static str,
    issuer: String,
}

#[derive(Clone, Debug)]
struct ToolFacts {
    name: String,
    source: &'static str,
    alias: String,
    read_only: bool,
    arguments: Option<Arc<[String]>>,
}

#[derive(Clone, Debug)]
struct ChainFacts {
    through: Vec<String>,
    authors: Vec<String>,
}

impl FactValues {
    /// The tool's listed name.
    pub fn tool_name(&self) -> &str {
        &self.tool.name
    }

    /// The arguments the tool's input schema lists, when it lists them.
    pub fn tool_arguments(&self) -> Option<&[String]> {
        self.tool.arguments.as_deref()
    }

    /// The context conditions are evaluated in, made once for all the conditions evaluated on
    /// one call.
    pub fn context(&self) -> FactContext<'_> {
        FactContext {
            values: self,
            cel: std::cell::OnceCell::new(),
        }
    }

    /// The facts as the cel crate's context: every fact converted, the arguments whole.
    fn cel_context(&self) -> cel::Context<'static, 'static> {
        let strings = |items: &[String]| {
            cel::Value::List(Arc::new(
                items.iter().map(|s| cel::Value::from(s.as_str())).collect(),
            ))
        };
        let principal = &self.principal;
        let principal = cel::Value::from(HashMap::from([
            ("name", cel::Value::from(principal.name.as_str())),
            ("roles", strings(&principal.roles)),
            ("kind", cel::Value::from(principal.kind)),
            ("issuer", cel::Value::from(principal.issuer.as_str())),
        ]));
        let tool = &self.tool;
        let tool = cel::Value::from(HashMap::from([
            ("name", cel::Value::from(tool.name.as_str())),
            ("source", cel::Value::from(tool.source)),
            ("alias", cel::Value::from(tool.alias.as_str())),
            ("read_only", cel::Value::Bool(tool.read_only)),
        ]));
        let chain = cel::Value::from(HashMap::from([
            ("through", strings(&self.chain.through)),
            ("authors", strings(&self.chain.authors)),
        ]));
        let now = chrono::DateTime::from_timestamp_millis(self.now_ms)
            .unwrap_or_default()
            .fixed_offset();
        let mut context = cel::Context::with_env(Arc::clone(&ENV));
        for (name, value) in [
            ("args", map_value(&self.args)),
            ("principal", principal),
            ("tool", tool),
            ("chain", chain),
            ("now", cel::Value::Timestamp(now)),
        ] {
            context.add_variable_from_value(name, value);
        }
        context
    }
}

/// The facts of one call, ready for [`Condition::holds_in`]: the cel crate's context is made
/// the first time a condition needs it, and only then.
pub struct FactContext<'a> {
    values: &'a FactValues,
    cel: std::cell::OnceCell<cel::Context<'static, 'static>>,
}

impl FactContext<'_> {
    fn cel(&self) -> &cel::Context<'static, 'static> {
        self.cel.get_or_init(|| self.values.cel_context())
    }
}

impl fmt::Debug for FactContext<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("FactContext")
    }
}

fn map_value(map: &Map) -> cel::Value {
    cel::Value::from(
        map.iter()
            .map(|(key, value)| (key.clone(), arg_value(value)))
            .collect::<HashMap<String, cel::Value>>(),
    )
}

fn arg_value(value: &Arg) -> cel::Value {
    match value {
        Arg::Null => cel::Value::Null,
        Arg::Bool(b) => cel::Value::Bool(*b),
        Arg::Int(i) => cel::Value::Int(*i),
        Arg::Float(f) => cel::Value::Float(f.get()),
        Arg::Str(s) => cel::Value::from(s.as_str()),
        Arg::List(items) => cel::Value::List(Arc::new(items.iter().map(arg_value).collect())),
        Arg::Map(map) => map_value(map),
    }
}

#[cfg(test)]
mod tests {
    use larkgate_binding::Value;
    use larkgate_store::{CallChain, IssuerBinding, Principal, PrincipalKind};

    use super::*;

    fn ada() -> Principal {
        Principal {
            id: "ada".into(),
            kind: PrincipalKind::User,
            roles: vec!["writer".into()],
            issuer: IssuerBinding::Local,
        }
    }

    /// Whether `source` holds of `args` for ada calling `kv_set` at 2026-12-07 12:00 UTC.
    fn eval(source: &str, args: serde_json::Value) -> Result<bool, String> {
        let condition = Condition::new(source).unwrap_or_else(|e| panic!("{source}: {e}"));
        let args = larkgate_binding::from_json(&args, larkgate_binding::Limits::default()).unwrap();
        let Value::Map(args) = args else {
            panic!("arguments are a map")
        };
        let principal = ada();
        let chain = CallChain::default();
        let facts = Facts {
            args: &args,
            principal: &principal,
            tool: "kv_set",
            source: "builtin",
            alias: "",
            read_only: false,
            chain: &chain,
            now_ms: 1_796_644_800_000,
            arguments: None,
        };
        condition.holds(&facts.values())
    }

    #[test]
    fn conditions_that_cannot_be_bounded_or_checked_are_refused_with_what_to_write() {
        let deep = format!("{}true{}", "(".repeat(30), ")".repeat(30));
        let long = format!("args.key == \"{}\"", "x".repeat(MAX_SOURCE_BYTES));
        let selected = format!("args{} == 1", ".a".repeat((MAX_SOURCE_BYTES - 10) / 2));
        let cases: &[(&str, &str)] = &[
            ("", "is empty"),
            ("   ", "is empty"),
            (&long, "over the limit"),
            (&deep, "nests brackets"),
            (&selected, "operations deep"),
            ("args.key ==", "not valid CEL"),
            ("foo == 1", "reads `foo`"),
            ("arg.key == \"x\"", "did you mean `args`"),
            ("princpal.name == \"x\"", "did you mean `principal`"),
            (
                "args.items.all(i, args.items.exists(j, i == j))",
                "may not be inside another",
            ),
            ("args.items.all(i, i == args.x)", "may not read `args`"),
            ("args.key.matches(args.pattern)", "literal pattern only"),
            ("matches(args.key, args.pattern)", "literal pattern only"),
        ];
        for (source, says) in cases {
            let error = Condition::new(source).expect_err(source);
            assert!(error.contains(says), "{source}: {error}");
        }
    }

    #[test]
    fn what_a_condition_reads_of_the_arguments_is_known() {
        let condition = Condition::new(
            "has(args.key) && args[\"value\"] != \"\" && args.items.all(i, i > 0) && \
             principal.name == \"ada\"",
        )
        .unwrap();
        assert_eq!(
            condition
                .args_fields()
                .iter()
                .map(String::as_str)
                .collect::<Vec<_>>(),
            ["items", "key", "value"]
        );
        // A comprehension's variable named like a fact is its own.
        let condition = Condition::new("[1, 2].exists(args, args == 2)").unwrap();
        assert!(condition.args_fields().is_empty());
        assert!(condition.is_constant());
        assert!(Condition::new("1 == 1").unwrap().is_constant());
        assert!(
            !Condition::new("now.getHours(\"UTC\") > 8")
                .unwrap()
                .is_constant()
        );
    }

    #[test]
    fn conditions_hold_of_the_facts_of_a_call() {
        let cases: &[(&str, serde_json::Value, bool)] = &[
            (
                "args.key.startsWith(\"tmp/\")",
                serde_json::json!({"key": "tmp/a"}),
                true,
            ),
            (
                "args.key.startsWith(\"tmp/\")",
                serde_json::json!({"key": "etc"}),
                false,
            ),
            (
                "args.amount > 100",
                serde_json::json!({"amount": 150}),
                true,
            ),
            (
                "args.amount > 100",
                serde_json::json!({"amount": 100}),
                false,
            ),
            (
                "args.amount > 100.0",
                serde_json::json!({"amount": 100.5}),
                true,
            ),
            (
                "args.filter.project == \"x\"",
                serde_json::json!({"filter": {"project": "x"}}),
                true,
            ),
            (
                "principal.name == \"ada\" && \"writer\" in principal.roles",
                serde_json::json!({}),
                true,
            ),
            (
                "principal.kind == \"user\" && principal.issuer == \"\"",
                serde_json::json!({}),
                true,
            ),
            (
                "tool.name == \"kv_set\" && tool.source == \"builtin\" && !tool.read_only",
                serde_json::json!({}),
                true,
            ),
            ("size(chain.through) == 0", serde_json::json!({}), true),
            ("now.getHours(\"UTC\") == 12", serde_json::json!({}), true),
            (
                "now.getHours(\"Europe/Berlin\") == 13",
                serde_json::json!({}),
                true,
            ),
            (
                "now.getDayOfWeek(\"UTC\") in [0, 6]",
                serde_json::json!({}),
                false,
            ),
            (
                "size(chain.through) == 0 || args.project != chain.through[0]",
                serde_json::json!({}),
                true,
            ),
            ("has(args.key)", serde_json::json!({}), false),
            (
                "args.tags.exists(t, t == \"prod\")",
                serde_json::json!({"tags": ["dev", "prod"]}),
                true,
            ),
            (
                "args.key.matches(\"^tmp/[a-z]+$\")",
                serde_json::json!({"key": "tmp/abc"}),
                true,
            ),
        ];
        for (source, args, expected) in cases {
            assert_eq!(
                eval(source, args.clone()),
                Ok(*expected),
                "{source} of {args}"
            );
        }
    }

    /// Arguments shaped to slip past a rule: each makes the condition an error (the caller
    /// fails closed), never `true` or `false` by accident.
    #[test]
    fn hostile_arguments_make_a_condition_fail_never_pass() {
        let prefix = "args.key.startsWith(\"tmp/\")";
        let cases: &[(&str, serde_json::Value)] = &[
            (prefix, serde_json::json!({})),
            // A look-alike key: `kеy` with a Cyrillic е.
            (prefix, serde_json::json!({"k\u{435}y": "tmp/a"})),
            (prefix, serde_json::json!({"key": 1})),
            (prefix, serde_json::json!({"key": null})),
            (prefix, serde_json::json!({"key": ["tmp/a"]})),
            (prefix, serde_json::json!({"key": {"startsWith": "tmp/"}})),
            // "1" is not 1.
            ("args.amount > 100", serde_json::json!({"amount": "1000"})),
            // A result that is not a boolean.
            ("args.key", serde_json::json!({"key": "tmp/a"})),
        ];
        for (source, args) in cases {
            assert!(eval(source, args.clone()).is_err(), "{source} of {args}");
        }
    }

    /// The bounds hold against what a caller can send: a 1 MiB string through a prefix test
    /// and a regular expression (linear: the `regex` crate does not backtrack), and arguments
    /// nested as deep as the value limits allow. Nothing here is timed; a bound that failed
    /// would hang or overflow the stack, and fail the run.
    #[test]
    fn a_large_or_deep_argument_is_evaluated_within_the_bounds() {
        let huge = format!("{}b", "a".repeat(1024 * 1024));
        assert_eq!(
            eval(
                "args.key.startsWith(\"tmp/\")",
                serde_json::json!({"key": huge})
            ),
            Ok(false)
        );
        assert_eq!(
            eval(
                "args.key.matches(\"^(a+)+$\")",
                serde_json::json!({"key": huge})
            ),
            Ok(false)
        );
        let mut nested = serde_json::json!("deep");
        for _ in 0..30 {
            nested = serde_json::json!({ "n": nested });
        }
        assert_eq!(
            eval("has(args.n.n.n)", serde_json::json!({"n": nested})),
            Ok(true)
        );
        // The longest condition the limits allow compiles and runs on a thread with a small
        // stack (2 MiB, as a runtime's worker has).
        let longest = ["args.a == 1"; 5].join(" || ");
        let source = format!(
            "{}{longest}{}",
            "(".repeat(MAX_NESTING - 1),
            ")".repeat(MAX_NESTING - 1)
        );
        std::thread::Builder::new()
            .stack_size(2 * 1024 * 1024)
            .spawn(move || eval(&source, serde_json::json!({"a": 1})))
            .unwrap()
            .join()
            .unwrap()
            .unwrap();
    }
}
