//! The fast path of a condition: the well-typed core of CEL that conditions are written in
//! (field reads, `has`, `&&`, `||`, `!`, `? :`, comparisons of values of one type, `in`,
//! `size`, `startsWith`, `endsWith`, `contains`, `matches` with its pattern compiled once),
//! evaluated straight on the call's facts, without making CEL values of them.
//!
//! # Why it agrees with the cel crate
//!
//! The cel crate stays the reference: every condition is compiled and checked by it, and
//! evaluated by it whenever this path does not answer. This path answers only where its
//! answer is certainly the cel crate's; anything else is [`Defer`], and the whole condition is
//! evaluated by the cel crate instead:
//!
//! - an expression with anything outside the core (arithmetic, timestamps, comprehensions,
//!   conversions, maps built in the expression, ...) is not compiled here at all;
//! - at evaluation, a field or key that is not there, an index out of range, operands of two
//!   different types (`"1" == 1`, `1 == 1.0`), a NaN, or an operation on a type it does not
//!   take defers, so every error, and every comparison across types, is the cel crate's.
//!
//! A deferral costs one evaluation by the cel crate, as if there were no fast path. Tests
//! evaluate a table of conditions on hostile arguments both ways and require the same answer.
//!
//! # Why one arena
//!
//! A policy's conditions are judged on every call, in a process whose caches the rest of the
//! call (the edge, the store, the audit) has just filled with other things. A tree of boxed
//! nodes and strings costs a cache miss per node there: measured, 100 rules took 47 µs per
//! call with the caches cold against 11 µs in a hot loop. So a [`Program`] keeps the nodes of
//! many conditions in one `Vec`, children by index, and every string they name in one `String`:
//! judging a policy reads a few contiguous blocks, whatever its number of rules.

use std::cmp::Ordering;

use cel::common::ast::{Expr, IdedExpr, LiteralValue, operators};
use larkgate_binding::{Map, Value as Arg};

use super::FactValues;

/// The answer is not certain here: the cel crate evaluates the condition.
#[derive(Debug, PartialEq, Eq)]
pub(in crate::policy) struct Defer;

/// A fact with a known field, read directly.
#[derive(Clone, Copy, Debug)]
pub(super) enum Fact {
    PrincipalName,
    PrincipalRoles,
    PrincipalKind,
    PrincipalIssuer,
    ToolName,
    ToolSource,
    ToolAlias,
    ToolReadOnly,
    ChainThrough,
    ChainAuthors,
}

impl Fact {
    fn of(fact: &str, field: &str) -> Option<Fact> {
        Some(match (fact, field) {
            ("principal", "name") => Fact::PrincipalName,
            ("principal", "roles") => Fact::PrincipalRoles,
            ("principal", "kind") => Fact::PrincipalKind,
            ("principal", "issuer") => Fact::PrincipalIssuer,
            ("tool", "name") => Fact::ToolName,
            ("tool", "source") => Fact::ToolSource,
            ("tool", "alias") => Fact::ToolAlias,
            ("tool", "read_only") => Fact::ToolReadOnly,
            ("chain", "through") => Fact::ChainThrough,
            ("chain", "authors") => Fact::ChainAuthors,
            _ => return None,
        })
    }
}

/// Comparison operators.
#[derive(Clone, Copy, Debug)]
pub(super) enum Compare {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

/// String tests.
#[derive(Clone, Copy, Debug)]
pub(super) enum Test {
    StartsWith,
    EndsWith,
    Contains,
}

/// A run of a [`Program`]'s text or of its list items: `start..start + len`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::policy) struct Span {
    start: u32,
    len: u32,
}

impl Span {
    fn range(self) -> std::ops::Range<usize> {
        let start = self.start as usize;
        start..start + self.len as usize
    }
}

/// A node's index in its [`Program`].
pub(in crate::policy) type Id = u32;

/// One node of a condition on the fast path. Children are indices into the same program,
/// strings are spans of its text.
#[derive(Clone, Copy, Debug)]
enum Node {
    Null,
    Bool(bool),
    Int(i64),
    Double(f64),
    Str(Span),
    /// A list written in the condition: a span of the program's items.
    List(Span),
    /// The arguments, whole.
    Args,
    Fact(Fact),
    Field(Id, Span),
    Has(Id, Span),
    Index(Id, Id),
    Not(Id),
    And(Id, Id),
    Or(Id, Id),
    If(Id, Id, Id),
    Compare(Compare, Id, Id),
    In(Id, Id),
    Size(Id),
    Test(Test, Id, Id),
    /// A value matched against the program's regular expression of that index.
    Matches(Id, u32),
}

/// Conditions compiled for the fast path, any number of them in one arena.
#[derive(Debug, Default)]
pub(in crate::policy) struct Program {
    nodes: Vec<Node>,
    text: String,
    items: Vec<Id>,
    regexes: Vec<regex::Regex>,
}

impl Program {
    /// Compiles `expr` into the program, answering its root; `None` (and the program as it
    /// was) when it has anything outside the core.
    pub(in crate::policy) fn compile(&mut self, expr: &IdedExpr) -> Option<Id> {
        let marks = (
            self.nodes.len(),
            self.text.len(),
            self.items.len(),
            self.regexes.len(),
        );
        let root = self.node(expr);
        if root.is_none() {
            self.nodes.truncate(marks.0);
            self.text.truncate(marks.1);
            self.items.truncate(marks.2);
            self.regexes.truncate(marks.3);
        }
        root
    }

    /// Adds `text` to the program's text.
    pub(in crate::policy) fn text(&mut self, text: &str) -> Option<Span> {
        let start = u32::try_from(self.text.len()).ok()?;
        let len = u32::try_from(text.len()).ok()?;
        self.text.push_str(text);
        Some(Span { start, len })
    }

    /// The text of `span`.
    pub(in crate::policy) fn str(&self, span: Span) -> &str {
        &self.text[span.range()]
    }

    fn push(&mut self, node: Node) -> Option<Id> {
        let id = Id::try_from(self.nodes.len()).ok()?;
        self.nodes.push(node);
        Some(id)
    }

    fn node(&mut self, expr: &IdedExpr) -> Option<Id> {
        let node = match &expr.expr {
            Expr::Literal(literal) => match literal {
                LiteralValue::Null => Node::Null,
                LiteralValue::Boolean(b) => Node::Bool(*b.inner()),
                LiteralValue::Int(i) => Node::Int(*i.inner()),
                LiteralValue::Double(d) => Node::Double(*d.inner()),
                LiteralValue::String(s) => Node::Str(self.text(s.inner())?),
                LiteralValue::Bytes(_) | LiteralValue::UInt(_) => return None,
            },
            Expr::Ident(name) if name == "args" => Node::Args,
            Expr::Select(select) => {
                if let Expr::Ident(fact) = &select.operand.expr
                    && fact != "args"
                {
                    // `principal.name`, ...; `has()` on them, or a field they lack, is the cel
                    // crate's.
                    return Fact::of(fact, &select.field)
                        .filter(|_| !select.test)
                        .and_then(|fact| self.push(Node::Fact(fact)));
                }
                let operand = self.node(&select.operand)?;
                let field = self.text(&select.field)?;
                if select.test {
                    Node::Has(operand, field)
                } else {
                    Node::Field(operand, field)
                }
            }
            Expr::List(list) if list.optional_indices.is_empty() => {
                let elements = list
                    .elements
                    .iter()
                    .map(|e| self.node(e))
                    .collect::<Option<Vec<Id>>>()?;
                let start = u32::try_from(self.items.len()).ok()?;
                let len = u32::try_from(elements.len()).ok()?;
                self.items.extend(elements);
                Node::List(Span { start, len })
            }
            Expr::Call(call) => {
                let name = call.func_name.as_str();
                match (call.target.as_deref(), call.args.as_slice()) {
                    (None, [a]) => match name {
                        operators::LOGICAL_NOT => Node::Not(self.node(a)?),
                        "size" => Node::Size(self.node(a)?),
                        _ => return None,
                    },
                    (Some(target), []) if name == "size" => Node::Size(self.node(target)?),
                    (None, [a, b]) => {
                        let compare = match name {
                            operators::EQUALS => Some(Compare::Eq),
                            operators::NOT_EQUALS => Some(Compare::Ne),
                            operators::LESS => Some(Compare::Lt),
                            operators::LESS_EQUALS => Some(Compare::Le),
                            operators::GREATER => Some(Compare::Gt),
                            operators::GREATER_EQUALS => Some(Compare::Ge),
                            _ => None,
                        };
                        let known = compare.is_some()
                            || matches!(
                                name,
                                operators::LOGICAL_AND
                                    | operators::LOGICAL_OR
                                    | operators::IN
                                    | operators::INDEX
                            );
                        if !known {
                            return None;
                        }
                        let (a, b) = (self.node(a)?, self.node(b)?);
                        match (name, compare) {
                            (_, Some(op)) => Node::Compare(op, a, b),
                            (operators::LOGICAL_AND, _) => Node::And(a, b),
                            (operators::LOGICAL_OR, _) => Node::Or(a, b),
                            (operators::IN, _) => Node::In(a, b),
                            _ => Node::Index(a, b),
                        }
                    }
                    (None, [c, a, b]) if name == operators::CONDITIONAL => {
                        Node::If(self.node(c)?, self.node(a)?, self.node(b)?)
                    }
                    (Some(target), [arg]) => {
                        let test = match name {
                            "startsWith" => Test::StartsWith,
                            "endsWith" => Test::EndsWith,
                            "contains" => Test::Contains,
                            "matches" => {
                                let Expr::Literal(LiteralValue::String(pattern)) = &arg.expr else {
                                    return None;
                                };
                                let regex = regex::Regex::new(pattern.inner()).ok()?;
                                let of = self.node(target)?;
                                let index = u32::try_from(self.regexes.len()).ok()?;
                                self.regexes.push(regex);
                                return self.push(Node::Matches(of, index));
                            }
                            _ => return None,
                        };
                        Node::Test(test, self.node(target)?, self.node(arg)?)
                    }
                    _ => return None,
                }
            }
            _ => return None,
        };
        self.push(node)
    }

    /// Whether the condition rooted at `root` holds of `facts`, when that is certain here.
    pub(in crate::policy) fn holds(&self, root: Id, facts: &FactValues) -> Result<bool, Defer> {
        self.eval(root, facts)?.bool()
    }

    /// A value written in the condition.
    fn written(&self, id: Id) -> Result<V<'_>, Defer> {
        Ok(match self.nodes[id as usize] {
            Node::Null => V::Null,
            Node::Bool(b) => V::Bool(b),
            Node::Int(i) => V::Int(i),
            Node::Double(d) => V::Double(d),
            Node::Str(s) => V::Str(self.str(s)),
            Node::List(items) => V::Written(&self.items[items.range()]),
            _ => return Err(Defer),
        })
    }

    /// `id`'s value for `facts`.
    fn eval<'a>(&'a self, id: Id, facts: &'a FactValues) -> Result<V<'a>, Defer> {
        let bool_of = |id: Id| self.eval(id, facts).and_then(V::bool);
        Ok(match self.nodes[id as usize] {
            Node::Null
            | Node::Bool(_)
            | Node::Int(_)
            | Node::Double(_)
            | Node::Str(_)
            | Node::List(_) => self.written(id)?,
            Node::Args => V::Map(&facts.args),
            Node::Fact(fact) => match fact {
                Fact::PrincipalName => V::Str(&facts.principal.name),
                Fact::PrincipalRoles => V::Strings(&facts.principal.roles),
                Fact::PrincipalKind => V::Str(facts.principal.kind),
                Fact::PrincipalIssuer => V::Str(&facts.principal.issuer),
                Fact::ToolName => V::Str(&facts.tool.name),
                Fact::ToolSource => V::Str(facts.tool.source),
                Fact::ToolAlias => V::Str(&facts.tool.alias),
                Fact::ToolReadOnly => V::Bool(facts.tool.read_only),
                Fact::ChainThrough => V::Strings(&facts.chain.through),
                Fact::ChainAuthors => V::Strings(&facts.chain.authors),
            },
            Node::Field(of, name) => field(self.eval(of, facts)?, self.str(name))?,
            Node::Has(of, name) => match self.eval(of, facts)? {
                V::Map(map) => V::Bool(map.contains_key(self.str(name))),
                _ => return Err(Defer),
            },
            Node::Index(of, key) => match (self.eval(of, facts)?, self.eval(key, facts)?) {
                (map @ V::Map(_), V::Str(key)) => field(map, key)?,
                (V::Args(items), V::Int(i)) => V::of(
                    usize::try_from(i)
                        .ok()
                        .and_then(|i| items.get(i))
                        .ok_or(Defer)?,
                ),
                (V::Strings(items), V::Int(i)) => V::Str(
                    usize::try_from(i)
                        .ok()
                        .and_then(|i| items.get(i))
                        .ok_or(Defer)?,
                ),
                _ => return Err(Defer),
            },
            Node::Not(a) => V::Bool(!bool_of(a)?),
            // As CEL: a false left side decides `&&`, a true one decides `||`, whatever the right
            // side would be (an error there included).
            Node::And(a, b) => V::Bool(bool_of(a)? && bool_of(b)?),
            Node::Or(a, b) => V::Bool(bool_of(a)? || bool_of(b)?),
            Node::If(c, a, b) => {
                if bool_of(c)? {
                    self.eval(a, facts)?
                } else {
                    self.eval(b, facts)?
                }
            }
            Node::Compare(op, a, b) => {
                let (a, b) = (self.eval(a, facts)?, self.eval(b, facts)?);
                V::Bool(match op {
                    Compare::Eq => equal(a, b)?,
                    Compare::Ne => !equal(a, b)?,
                    Compare::Lt => order(a, b)?.is_lt(),
                    Compare::Le => order(a, b)?.is_le(),
                    Compare::Gt => order(a, b)?.is_gt(),
                    Compare::Ge => order(a, b)?.is_ge(),
                })
            }
            Node::In(needle, haystack) => {
                let needle = self.eval(needle, facts)?;
                V::Bool(match self.eval(haystack, facts)? {
                    V::Map(map) => map.contains_key(needle.str()?),
                    V::Strings(items) => any_equal(needle, items.iter().map(|s| Ok(V::Str(s))))?,
                    V::Args(items) => any_equal(needle, items.iter().map(|a| Ok(V::of(a))))?,
                    V::Written(items) => any_equal(needle, items.iter().map(|&i| self.written(i)))?,
                    _ => return Err(Defer),
                })
            }
            Node::Size(of) => {
                let size = match self.eval(of, facts)? {
                    V::Str(s) => s.chars().count(),
                    V::Strings(items) => items.len(),
                    V::Args(items) => items.len(),
                    V::Written(items) => items.len(),
                    V::Map(map) => map.len(),
                    _ => return Err(Defer),
                };
                V::Int(i64::try_from(size).map_err(|_| Defer)?)
            }
            Node::Test(test, of, arg) => {
                let of = self.eval(of, facts)?.str()?;
                let arg = self.eval(arg, facts)?.str()?;
                V::Bool(match test {
                    Test::StartsWith => of.starts_with(arg),
                    Test::EndsWith => of.ends_with(arg),
                    Test::Contains => of.contains(arg),
                })
            }
            Node::Matches(of, regex) => {
                V::Bool(self.regexes[regex as usize].is_match(self.eval(of, facts)?.str()?))
            }
        })
    }
}

/// A value on the fast path, borrowed from the facts or the program.
#[derive(Clone, Copy, Debug)]
enum V<'a> {
    Null,
    Bool(bool),
    Int(i64),
    Double(f64),
    Str(&'a str),
    Strings(&'a [String]),
    Args(&'a [Arg]),
    /// A list written in the condition: its items' ids.
    Written(&'a [Id]),
    Map(&'a Map),
}

impl<'a> V<'a> {
    fn of(arg: &'a Arg) -> V<'a> {
        match arg {
            Arg::Null => V::Null,
            Arg::Bool(b) => V::Bool(*b),
            Arg::Int(i) => V::Int(*i),
            Arg::Float(f) => V::Double(f.get()),
            Arg::Str(s) => V::Str(s),
            Arg::List(items) => V::Args(items),
            Arg::Map(map) => V::Map(map),
        }
    }

    fn bool(self) -> Result<bool, Defer> {
        match self {
            V::Bool(b) => Ok(b),
            _ => Err(Defer),
        }
    }

    fn str(self) -> Result<&'a str, Defer> {
        match self {
            V::Str(s) => Ok(s),
            _ => Err(Defer),
        }
    }
}

/// How `a` compares with `b`, for two scalars of one type (no NaN); anything else defers.
fn order(a: V<'_>, b: V<'_>) -> Result<Ordering, Defer> {
    match (a, b) {
        (V::Int(a), V::Int(b)) => Ok(a.cmp(&b)),
        (V::Double(a), V::Double(b)) => a.partial_cmp(&b).ok_or(Defer),
        (V::Str(a), V::Str(b)) => Ok(a.cmp(b)),
        _ => Err(Defer),
    }
}

/// Whether `a == b`, for two scalars of one type; anything else defers.
fn equal(a: V<'_>, b: V<'_>) -> Result<bool, Defer> {
    match (a, b) {
        (V::Null, V::Null) => Ok(true),
        (V::Bool(a), V::Bool(b)) => Ok(a == b),
        _ => order(a, b).map(Ordering::is_eq),
    }
}

/// Whether any of `items` equals `needle`.
fn any_equal<'a, I>(needle: V<'_>, items: I) -> Result<bool, Defer>
where
    I: IntoIterator<Item = Result<V<'a>, Defer>>,
{
    for item in items {
        if equal(needle, item?)? {
            return Ok(true);
        }
    }
    Ok(false)
}

/// The field `name` of the map `of`.
fn field<'a>(of: V<'a>, name: &str) -> Result<V<'a>, Defer> {
    match of {
        V::Map(map) => map.get(name).map(V::of).ok_or(Defer),
        _ => Err(Defer),
    }
}

#[cfg(test)]
mod tests {
    use larkgate_binding::Value;
    use larkgate_store::{CallChain, IssuerBinding, Principal, PrincipalKind};

    use super::super::{Condition, Facts};
    use super::*;

    /// Conditions over every part of the core, and some just outside it.
    const CONDITIONS: &[&str] = &[
        r#"args.key.startsWith("tmp/")"#,
        r#"!args.key.startsWith("tmp/")"#,
        r#"args.key.endsWith(".txt") || args.key.contains("..")"#,
        r#"has(args.key) && args.key.startsWith("tmp/")"#,
        r#"!has(args.key) || size(args.key) > 8"#,
        r#"args["key"] == "tmp/a""#,
        r#"args.key != "tmp/a""#,
        r#"args.key < "m""#,
        r#"args.key.matches("^tmp/[a-z]+$")"#,
        r#"args.key.size() <= 5"#,
        r#"args.amount > 100"#,
        r#"args.amount >= 100.0"#,
        r#"args.amount == 100"#,
        r#"args.amount < 0 ? true : args.amount > 1000"#,
        r#"args.flag"#,
        r#"args.flag == true"#,
        r#"args.key == null"#,
        r#"args.key in ["tmp/a", "tmp/b"]"#,
        r#""tmp/a" in args.items"#,
        r#"args.items[0] == "tmp/a""#,
        r#"args.items[5] == "x""#,
        r#"size(args.items) == 2"#,
        r#"has(args.a.b) && args.a.b.c == 1"#,
        r#""b" in args.a"#,
        r#"size(args) > 3"#,
        r#""writer" in principal.roles && principal.kind == "user""#,
        r#"principal.name == "ada" && tool.name == "kv_set" && !tool.read_only"#,
        r#"tool.source == "builtin" && tool.alias == "" && principal.issuer == """#,
        r#"size(chain.through) == 0 && !("eve" in chain.authors)"#,
        r#"args.key.startsWith("tmp/") && args.missing == 1"#,
        r#"args.missing == 1 || args.key.startsWith("tmp/")"#,
        r#"args.missing == 1 && false"#,
        r#"args.key"#,
        r#"args.amount + 1 > 100"#,
        r#"args.items.all(i, i.startsWith("tmp/"))"#,
        r#"now.getHours() >= 9"#,
        r#"1 == 1"#,
        r#"[1, "1"] == [1, "1"]"#,
        r#"args.amount in [100, 100.0, "100"]"#,
    ];

    /// Arguments an attacker might send: type confusion, missing fields, `null`, look-alike
    /// keys, a 1 MiB string, nested maps.
    fn arguments() -> Vec<serde_json::Value> {
        use serde_json::json;
        vec![
            json!({"key": "tmp/a", "amount": 100, "flag": true, "items": ["tmp/a", "b"]}),
            json!({"key": "home/../etc", "amount": 100.0, "flag": false, "items": []}),
            json!({"key": 1, "amount": "100", "flag": "true", "items": [1, "1", null]}),
            json!({"key": "1", "amount": 1e300, "flag": null, "items": "tmp/a"}),
            json!({"key": null, "amount": -5, "items": [["tmp/a"]]}),
            json!({}),
            json!({"ｋey": "tmp/a", "key": "ｔmp/a", "amount": 1001}),
            json!({"key": "x".repeat(1 << 20), "amount": 9223372036854775807i64}),
            json!({"key": "tmp/ab", "a": {"b": {"c": 1}}}),
            json!({"key": "tmp/ab", "a": {"b": {"c": "1"}}}),
            json!({"key": "tmp/ab", "a": {"b": 1}}),
            json!({"key": "tmp/ab", "a": [1]}),
        ]
    }

    fn ada() -> Principal {
        Principal {
            id: "ada".into(),
            kind: PrincipalKind::User,
            roles: vec!["writer".into()],
            issuer: IssuerBinding::Local,
        }
    }

    #[test]
    fn the_fast_path_answers_as_the_cel_crate_does_or_not_at_all() {
        let principal = ada();
        let chain = CallChain::default();
        let limits = larkgate_binding::Limits::default();
        let (mut answered, mut deferred) = (0, 0);
        for args in arguments() {
            let Value::Map(args) = larkgate_binding::from_json(&args, limits).unwrap() else {
                panic!("arguments are a map")
            };
            let values = Facts {
                args: &args,
                principal: &principal,
                tool: "kv_set",
                source: "builtin",
                alias: "",
                read_only: false,
                chain: &chain,
                now_ms: 1_796_644_800_000,
                arguments: None,
            }
            .values();
            let context = values.context();
            for source in CONDITIONS {
                let condition = Condition::new(source).unwrap_or_else(|e| panic!("{source}: {e}"));
                let by_cel = condition.holds_by_cel(&context);
                let Some(fast) = &condition.fast else {
                    deferred += 1;
                    continue;
                };
                match fast.0.holds(fast.1, &values) {
                    Ok(fast) => {
                        answered += 1;
                        let short: String = format!("{args:?}").chars().take(120).collect();
                        assert_eq!(Ok(fast), by_cel, "{source} on {short}");
                    }
                    Err(Defer) => deferred += 1,
                }
                // Whoever answers, the condition's answer is the cel crate's.
                assert_eq!(condition.holds_in(&context), by_cel, "{source}");
            }
        }
        // The fast path takes the common case, not a token share of it.
        assert!(answered > 200, "answered {answered}, deferred {deferred}");
        assert!(deferred > 60, "answered {answered}, deferred {deferred}");
    }

    #[test]
    fn only_the_core_is_compiled_for_the_fast_path() {
        let compiled = |source: &str| Condition::new(source).unwrap().fast.is_some();
        for source in &CONDITIONS[..33] {
            assert!(compiled(source), "{source}");
        }
        for source in [
            "args.amount + 1 > 100",
            r#"args.items.all(i, i.startsWith("tmp/"))"#,
            "now.getHours() >= 9",
            "args.n == 1u",
            r#"type(args.key) == string"#,
            r#"principal == {"name": "ada"}"#,
            r#"has(principal.name)"#,
            r#"principal.nickname == "x""#,
        ] {
            assert!(!compiled(source), "{source}");
        }
    }

    #[test]
    fn a_matches_pattern_that_is_not_a_regular_expression_is_refused_at_load() {
        let error = Condition::new(r#"args.key.matches("(unclosed")"#).unwrap_err();
        assert!(error.contains("not a valid regular expression"), "{error}");
    }
}
