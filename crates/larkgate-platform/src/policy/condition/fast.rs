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

use std::cmp::Ordering;

use cel::common::ast::{Expr, IdedExpr, LiteralValue, operators};
use larkgate_binding::{Map, Value as Arg};

use super::FactValues;

/// The answer is not certain here: the cel crate evaluates the condition.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Defer;

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

/// A condition compiled for the fast path.
#[derive(Debug)]
pub(super) enum Node {
    Null,
    Bool(bool),
    Int(i64),
    Double(f64),
    Str(String),
    /// A list written in the condition.
    List(Vec<Node>),
    /// The arguments, whole.
    Args,
    Fact(Fact),
    Field(Box<Node>, String),
    Has(Box<Node>, String),
    Index(Box<Node>, Box<Node>),
    Not(Box<Node>),
    And(Box<Node>, Box<Node>),
    Or(Box<Node>, Box<Node>),
    If(Box<Node>, Box<Node>, Box<Node>),
    Compare(Compare, Box<Node>, Box<Node>),
    In(Box<Node>, Box<Node>),
    Size(Box<Node>),
    Test(Test, Box<Node>, Box<Node>),
    Matches(Box<Node>, regex::Regex),
}

/// `expr` for the fast path, or `None` when it has anything outside the core.
pub(super) fn compile(expr: &IdedExpr) -> Option<Node> {
    let boxed = |e: &IdedExpr| compile(e).map(Box::new);
    Some(match &expr.expr {
        Expr::Literal(literal) => match literal {
            LiteralValue::Null => Node::Null,
            LiteralValue::Boolean(b) => Node::Bool(*b.inner()),
            LiteralValue::Int(i) => Node::Int(*i.inner()),
            LiteralValue::Double(d) => Node::Double(*d.inner()),
            LiteralValue::String(s) => Node::Str(s.inner().to_owned()),
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
                    .map(Node::Fact);
            }
            let operand = boxed(&select.operand)?;
            if select.test {
                Node::Has(operand, select.field.clone())
            } else {
                Node::Field(operand, select.field.clone())
            }
        }
        Expr::List(list) if list.optional_indices.is_empty() => {
            Node::List(list.elements.iter().map(compile).collect::<Option<_>>()?)
        }
        Expr::Call(call) => {
            let name = call.func_name.as_str();
            match (call.target.as_deref(), call.args.as_slice()) {
                (None, [a]) => match name {
                    operators::LOGICAL_NOT => Node::Not(boxed(a)?),
                    "size" => Node::Size(boxed(a)?),
                    _ => return None,
                },
                (Some(target), []) if name == "size" => Node::Size(boxed(target)?),
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
                    let (a, b) = (boxed(a)?, boxed(b)?);
                    match (name, compare) {
                        (_, Some(op)) => Node::Compare(op, a, b),
                        (operators::LOGICAL_AND, _) => Node::And(a, b),
                        (operators::LOGICAL_OR, _) => Node::Or(a, b),
                        (operators::IN, _) => Node::In(a, b),
                        (operators::INDEX, _) => Node::Index(a, b),
                        _ => return None,
                    }
                }
                (None, [c, a, b]) if name == operators::CONDITIONAL => {
                    Node::If(boxed(c)?, boxed(a)?, boxed(b)?)
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
                            return Some(Node::Matches(boxed(target)?, regex));
                        }
                        _ => return None,
                    };
                    Node::Test(test, boxed(target)?, boxed(arg)?)
                }
                _ => return None,
            }
        }
        _ => return None,
    })
}

/// A value on the fast path, borrowed from the facts or the condition.
#[derive(Clone, Copy, Debug)]
enum V<'a> {
    Null,
    Bool(bool),
    Int(i64),
    Double(f64),
    Str(&'a str),
    Strings(&'a [String]),
    Args(&'a [Arg]),
    Written(&'a [Node]),
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

    fn written(node: &'a Node) -> Result<V<'a>, Defer> {
        Ok(match node {
            Node::Null => V::Null,
            Node::Bool(b) => V::Bool(*b),
            Node::Int(i) => V::Int(*i),
            Node::Double(d) => V::Double(*d),
            Node::Str(s) => V::Str(s),
            Node::List(items) => V::Written(items),
            _ => return Err(Defer),
        })
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

/// `node`'s value for `facts`.
fn eval<'a>(node: &'a Node, facts: &'a FactValues) -> Result<V<'a>, Defer> {
    let bool_of = |node: &'a Node| eval(node, facts).and_then(V::bool);
    Ok(match node {
        Node::Null | Node::Bool(_) | Node::Int(_) | Node::Double(_) | Node::Str(_) => {
            V::written(node)?
        }
        Node::List(items) => V::Written(items),
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
        Node::Field(of, name) => field(eval(of, facts)?, name)?,
        Node::Has(of, name) => match eval(of, facts)? {
            V::Map(map) => V::Bool(map.contains_key(name)),
            _ => return Err(Defer),
        },
        Node::Index(of, key) => match (eval(of, facts)?, eval(key, facts)?) {
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
                eval(a, facts)?
            } else {
                eval(b, facts)?
            }
        }
        Node::Compare(op, a, b) => {
            let (a, b) = (eval(a, facts)?, eval(b, facts)?);
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
            let needle = eval(needle, facts)?;
            V::Bool(match eval(haystack, facts)? {
                V::Map(map) => map.contains_key(needle.str()?),
                V::Strings(items) => any_equal(needle, items.iter().map(|s| Ok(V::Str(s))))?,
                V::Args(items) => any_equal(needle, items.iter().map(|a| Ok(V::of(a))))?,
                V::Written(items) => any_equal(needle, items.iter().map(V::written))?,
                _ => return Err(Defer),
            })
        }
        Node::Size(of) => {
            let size = match eval(of, facts)? {
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
            let (of, arg) = (eval(of, facts)?.str()?, eval(arg, facts)?.str()?);
            V::Bool(match test {
                Test::StartsWith => of.starts_with(arg),
                Test::EndsWith => of.ends_with(arg),
                Test::Contains => of.contains(arg),
            })
        }
        Node::Matches(of, regex) => V::Bool(regex.is_match(eval(of, facts)?.str()?)),
    })
}

/// Whether the condition compiled as `node` holds of `facts`, when that is certain here.
pub(super) fn holds(node: &Node, facts: &FactValues) -> Result<bool, Defer> {
    eval(node, facts)?.bool()
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
                let Some(node) = &condition.fast else {
                    deferred += 1;
                    continue;
                };
                match holds(node, &values) {
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
