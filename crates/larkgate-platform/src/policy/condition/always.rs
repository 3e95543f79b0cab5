//! Conditions that read the facts and still have one value on every call: `args.key ==
//! args.key`, `has(args.key) || !has(args.key)`, `args.amount > 100 || true`. Such a condition
//! is almost always a mistake (a name compared with itself, a leftover `true`), and `larkgate
//! check` warns about it as it warns about one that reads no fact at all.
//!
//! The analysis is structural and conservative: it answers only where the shape of the
//! expression decides its value, and says nothing (`None`) otherwise; it never evaluates
//! anything. "One value" means on every call the condition can be evaluated on: `args.key ==
//! args.key` is an error, not `true`, on a call without `key`. (A value compared with itself is
//! equal to itself: the arguments are JSON, which has no NaN.)

use cel::common::ast::{EntryExpr, Expr, IdedExpr, LiteralValue, operators};

/// The value `expr` has on every call it can be evaluated on, when its shape decides it.
pub(super) fn always(expr: &IdedExpr) -> Option<bool> {
    match &expr.expr {
        Expr::Literal(LiteralValue::Boolean(b)) => Some(*b.inner()),
        Expr::Call(call) if call.target.is_none() => {
            match (call.func_name.as_str(), &call.args[..]) {
                (operators::LOGICAL_NOT, [a]) => always(a).map(|a| !a),
                (operators::LOGICAL_AND, [a, b]) => match (always(a), always(b)) {
                    (Some(false), _) | (_, Some(false)) => Some(false),
                    (Some(true), Some(true)) => Some(true),
                    _ => complementary(a, b).then_some(false),
                },
                (operators::LOGICAL_OR, [a, b]) => match (always(a), always(b)) {
                    (Some(true), _) | (_, Some(true)) => Some(true),
                    (Some(false), Some(false)) => Some(false),
                    _ => complementary(a, b).then_some(true),
                },
                (operators::CONDITIONAL, [c, a, b]) => match always(c) {
                    Some(true) => always(a),
                    Some(false) => always(b),
                    None => always(a).filter(|a| always(b) == Some(*a)),
                },
                (
                    operators::EQUALS | operators::LESS_EQUALS | operators::GREATER_EQUALS,
                    [a, b],
                ) if same(a, b) => Some(true),
                (operators::NOT_EQUALS | operators::LESS | operators::GREATER, [a, b])
                    if same(a, b) =>
                {
                    Some(false)
                }
                _ => None,
            }
        }
        _ => None,
    }
}

/// Whether one of `a` and `b` is the other negated (`x` and `!x`).
fn complementary(a: &IdedExpr, b: &IdedExpr) -> bool {
    let negated = |e: &IdedExpr| match &e.expr {
        Expr::Call(call) if call.func_name == operators::LOGICAL_NOT && call.target.is_none() => {
            call.args.first().cloned()
        }
        _ => None,
    };
    negated(a).is_some_and(|x| same(&x, b)) || negated(b).is_some_and(|x| same(a, &x))
}

/// Whether `a` and `b` are written alike (the parser's ids aside). Comprehensions are never
/// alike: their variables make the comparison more than a walk, and nothing is lost by
/// leaving them out.
fn same(a: &IdedExpr, b: &IdedExpr) -> bool {
    let all = |a: &[IdedExpr], b: &[IdedExpr]| {
        a.len() == b.len() && a.iter().zip(b).all(|(a, b)| same(a, b))
    };
    match (&a.expr, &b.expr) {
        (Expr::Ident(a), Expr::Ident(b)) => a == b,
        (Expr::Literal(a), Expr::Literal(b)) => a == b,
        (Expr::Select(a), Expr::Select(b)) => {
            a.field == b.field && a.test == b.test && same(&a.operand, &b.operand)
        }
        (Expr::Call(a), Expr::Call(b)) => {
            a.func_name == b.func_name
                && match (&a.target, &b.target) {
                    (None, None) => true,
                    (Some(a), Some(b)) => same(a, b),
                    _ => false,
                }
                && all(&a.args, &b.args)
        }
        (Expr::List(a), Expr::List(b)) => {
            a.optional_indices == b.optional_indices && all(&a.elements, &b.elements)
        }
        (Expr::Map(a), Expr::Map(b)) => {
            a.entries.len() == b.entries.len()
                && a.entries
                    .iter()
                    .zip(&b.entries)
                    .all(|(a, b)| match (&a.expr, &b.expr) {
                        (EntryExpr::MapEntry(a), EntryExpr::MapEntry(b)) => {
                            a.optional == b.optional
                                && same(&a.key, &b.key)
                                && same(&a.value, &b.value)
                        }
                        _ => false,
                    })
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::super::Condition;

    #[test]
    fn a_condition_whose_shape_decides_its_value_is_known_to_have_it() {
        let cases: &[(&str, Option<bool>)] = &[
            ("args.key == args.key", Some(true)),
            ("args['key'] != args['key']", Some(false)),
            ("args.amount < args.amount", Some(false)),
            ("args.amount >= args.amount", Some(true)),
            ("has(args.key) || !has(args.key)", Some(true)),
            ("!has(args.key) && has(args.key)", Some(false)),
            ("args.key.startsWith(\"tmp/\") || true", Some(true)),
            ("false && args.key == \"x\"", Some(false)),
            ("!(args.key == args.key)", Some(false)),
            (
                "size(args.items) == 0 ? true : args.key == args.key",
                Some(true),
            ),
            (
                "[args.a, {'k': args.b}] == [args.a, {'k': args.b}]",
                Some(true),
            ),
            // What depends on the call says nothing.
            ("args.key == \"x\"", None),
            ("args.key == args.other", None),
            ("args.key.startsWith(\"tmp/\") && true", None),
            ("has(args.key) || !has(args.other)", None),
            ("args.items.all(i, i > 0) == args.items.all(i, i > 0)", None),
            ("size(args.items) == 0 ? true : false", None),
            ("principal.name == principal.nickname", None),
        ];
        for (source, expected) in cases {
            let condition = Condition::new(source).unwrap_or_else(|e| panic!("{source}: {e}"));
            assert_eq!(condition.always(), *expected, "{source}");
        }
    }
}
