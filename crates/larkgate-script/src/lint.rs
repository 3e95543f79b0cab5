//! Checks a script at save time, against the tools its author may call.
//!
//! Two kinds of findings:
//! - **errors**, which refuse the save: a name that is defined nowhere (not a Starlark or
//!   larkgate global, not a tool or namespace of the saver's listing, not assigned in the
//!   script); a literal tool name (`call("kv_gett", ...)`, `github.serach(...)`) that the
//!   listing does not have; a keyword a tool does not take (by its input shape or its JSON
//!   schema, where that schema allows no other properties);
//! - **warnings**, shown but not refusing: Starlark's own lints (an unused assignment, a
//!   variable that may be unassigned on some path, ...).
//!
//! Each finding names its place as `FILE:LINE:COLUMN`. A computed tool name
//! (`call(name, ...)`) cannot be checked here; the pipeline decides it when the script runs.

use std::collections::{BTreeSet, HashMap, HashSet};

use larkgate_caller::{Source, ToolInfo};
use starlark::analysis::AstModuleLint;
use starlark::errors::EvalSeverity;
use starlark::syntax::AstModule;
use starlark_syntax::syntax::ast::{ArgumentP, AstExpr, AstLiteral, AstStmt, ExprP};

/// The namespace published scripts are called through.
const SCRIPT_NAMESPACE: &str = "script";

/// What [`lint`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Findings {
    /// What refuses the save.
    pub errors: Vec<String>,
    /// What is shown beside a saved draft.
    pub warnings: Vec<String>,
}

/// A tool as a script can name it: its keywords, when the listing says which are allowed.
struct Callable<'a> {
    name: &'a str,
    keywords: Option<HashSet<String>>,
}

/// The keywords `tool` takes, when that is a closed set (an input shape, or a JSON schema with
/// `additionalProperties: false`).
fn keywords(tool: &ToolInfo) -> Option<HashSet<String>> {
    if let Some(shape) = &tool.input_shape {
        return Some(shape.iter().map(|field| field.name.clone()).collect());
    }
    let schema = &tool.input_schema;
    if schema.get("additionalProperties") != Some(&serde_json::Value::Bool(false)) {
        return None;
    }
    let properties = schema.get("properties").and_then(|p| p.as_object());
    Some(
        properties
            .into_iter()
            .flatten()
            .map(|(k, _)| k.clone())
            .collect(),
    )
}

/// Checks `ast` against `listing` (the saver's tools) and the engine's globals.
pub fn lint(ast: &AstModule, listing: &[ToolInfo]) -> Findings {
    let mut globals: HashSet<String> = crate::run::globals()
        .names()
        .map(|name| name.as_str().to_owned())
        .collect();
    // Published scripts are called through `script.NAME(...)`, and one may be published after
    // this is saved (a script may even call itself): the namespace is always there, and its
    // members are decided when the script runs.
    globals.insert(SCRIPT_NAMESPACE.to_owned());
    // Tools by how a script names them: a global, or a member of its alias's namespace.
    let mut by_name: HashMap<&str, Callable<'_>> = HashMap::new();
    let mut namespaces: HashMap<&str, HashMap<&str, Callable<'_>>> = HashMap::new();
    for tool in listing {
        let callable = || Callable {
            name: &tool.name,
            keywords: keywords(tool),
        };
        by_name.insert(&tool.name, callable());
        match (&tool.origin.source, &tool.origin.alias) {
            (Source::Upstream | Source::Script, Some(alias)) => {
                globals.insert(alias.clone());
                namespaces
                    .entry(alias)
                    .or_default()
                    .insert(&tool.origin.original_name, callable());
            }
            _ => {
                globals.insert(tool.name.clone());
            }
        }
    }
    let mut findings = Findings::default();
    for lint in ast.lint(Some(&globals)) {
        let text = format!("{}: {}", lint.location, lint.problem);
        if lint.short_name == "using-undefined" || lint.severity == EvalSeverity::Error {
            findings.errors.push(text);
        } else if lint.severity == EvalSeverity::Warning
            || matches!(
                lint.short_name.as_str(),
                "unused-assign" | "unused-argument"
            )
        {
            findings.warnings.push(text);
        }
    }
    let mut check = |expr: &AstExpr| {
        let ExprP::Call(function, arguments) = &expr.node else {
            return;
        };
        let place = ast.file_span(expr.span);
        let named: Vec<&str> = arguments
            .args
            .iter()
            .filter_map(|a| match &a.node {
                ArgumentP::Named(name, _) => Some(name.node.as_str()),
                _ => None,
            })
            .collect();
        let target = match &function.node {
            // `call("name", ...)` and `try_call("name", ...)` with a literal name.
            ExprP::Identifier(id) if matches!(id.node.ident.as_str(), "call" | "try_call") => {
                let first = arguments.args.first().map(|a| &a.node);
                let Some(ArgumentP::Positional(name)) = first else {
                    return;
                };
                let ExprP::Literal(AstLiteral::String(name)) = &name.node else {
                    return; // computed: decided when it runs
                };
                match by_name.get(name.node.as_str()) {
                    Some(callable) => callable,
                    None => {
                        findings.errors.push(format!(
                            "{place}: there is no tool {:?} that you may call",
                            name.node
                        ));
                        return;
                    }
                }
            }
            // A global tool: `kv_get(key = ...)`.
            ExprP::Identifier(id) => match by_name.get(id.node.ident.as_str()) {
                Some(callable) if !namespaces.contains_key(id.node.ident.as_str()) => callable,
                _ => return,
            },
            // A namespace's member: `github.search_issues(...)`.
            ExprP::Dot(object, member) => {
                let ExprP::Identifier(alias) = &object.node else {
                    return;
                };
                if alias.node.ident == SCRIPT_NAMESPACE {
                    return;
                }
                let Some(members) = namespaces.get(alias.node.ident.as_str()) else {
                    return;
                };
                match members.get(member.node.as_str()) {
                    Some(callable) => callable,
                    None => {
                        findings.errors.push(format!(
                            "{place}: {} has no tool {:?} that you may call",
                            alias.node.ident, member.node
                        ));
                        return;
                    }
                }
            }
            _ => return,
        };
        if let Some(allowed) = &target.keywords {
            for keyword in named {
                if !allowed.contains(keyword) {
                    let mut known: Vec<&str> = allowed.iter().map(String::as_str).collect();
                    known.sort_unstable();
                    findings.errors.push(format!(
                        "{place}: {}() takes no argument `{keyword}` (it takes: {})",
                        target.name,
                        if known.is_empty() {
                            "none".to_owned()
                        } else {
                            known.join(", ")
                        }
                    ));
                }
            }
        }
    };
    walk_stmt(ast.statement(), &mut check);
    findings
}

/// The tools of `listing` that `ast` names literally: `call("NAME", ...)` and
/// `try_call("NAME", ...)`, a tool global (`kv_get`), a namespace's member (`github.search`,
/// `github["search-issues"]`). Names computed when the script runs are not among them; a
/// published version is pinned to these, and to what its review runs called.
pub fn references(ast: &AstModule, listing: &[ToolInfo]) -> BTreeSet<String> {
    let mut globals: HashMap<&str, &str> = HashMap::new();
    let mut members: HashMap<&str, HashMap<&str, &str>> = HashMap::new();
    for tool in listing {
        match (&tool.origin.source, &tool.origin.alias) {
            (Source::Upstream | Source::Script, Some(alias)) => {
                members
                    .entry(alias)
                    .or_default()
                    .insert(&tool.origin.original_name, &tool.name);
            }
            _ => {
                globals.insert(&tool.name, &tool.name);
            }
        }
    }
    let by_name: HashSet<&str> = listing.iter().map(|t| t.name.as_str()).collect();
    let literal = |expr: &AstExpr| match &expr.node {
        ExprP::Literal(AstLiteral::String(text)) => Some(text.node.clone()),
        _ => None,
    };
    let mut found = BTreeSet::new();
    let mut note = |expr: &AstExpr| match &expr.node {
        ExprP::Call(function, arguments) => {
            let ExprP::Identifier(id) = &function.node else {
                return;
            };
            if !matches!(id.node.ident.as_str(), "call" | "try_call") {
                return;
            }
            if let Some(ArgumentP::Positional(first)) = arguments.args.first().map(|a| &a.node)
                && let Some(name) = literal(first)
                && by_name.contains(name.as_str())
            {
                found.insert(name);
            }
        }
        ExprP::Identifier(id) => {
            if let Some(name) = globals.get(id.node.ident.as_str()) {
                found.insert((*name).to_owned());
            }
        }
        ExprP::Dot(object, member) => {
            if let ExprP::Identifier(alias) = &object.node
                && let Some(name) = members
                    .get(alias.node.ident.as_str())
                    .and_then(|m| m.get(member.node.as_str()))
            {
                found.insert((*name).to_owned());
            }
        }
        ExprP::Index(pair) => {
            let (object, index) = &**pair;
            if let ExprP::Identifier(alias) = &object.node
                && let Some(key) = literal(index)
                && let Some(name) = members
                    .get(alias.node.ident.as_str())
                    .and_then(|m| m.get(key.as_str()))
            {
                found.insert((*name).to_owned());
            }
        }
        _ => {}
    };
    walk_stmt(ast.statement(), &mut note);
    found
}

fn walk_stmt<'a>(stmt: &'a AstStmt, f: &mut impl FnMut(&'a AstExpr)) {
    stmt.visit_expr(|expr| walk_expr(expr, f));
}

fn walk_expr<'a>(expr: &'a AstExpr, f: &mut impl FnMut(&'a AstExpr)) {
    f(expr);
    expr.visit_expr(|child| walk_expr(child, f));
}

#[cfg(test)]
mod tests {
    use larkgate_caller::{Annotations, Origin};

    use super::*;

    fn tool(
        name: &str,
        alias: Option<&str>,
        original: &str,
        schema: serde_json::Value,
    ) -> ToolInfo {
        ToolInfo {
            name: name.to_owned(),
            title: None,
            description: None,
            input_schema: schema,
            input_shape: None,
            signature: None,
            annotations: Annotations::default(),
            origin: Origin {
                source: if alias.is_some() {
                    Source::Upstream
                } else {
                    Source::Capability
                },
                alias: alias.map(str::to_owned),
                original_name: original.to_owned(),
            },
        }
    }

    fn listing() -> Vec<ToolInfo> {
        let closed = serde_json::json!({
            "type": "object", "properties": {"key": {"type": "string"}},
            "additionalProperties": false
        });
        let open = serde_json::json!({"type": "object", "properties": {"q": {}}});
        vec![
            tool("kv_get", None, "kv_get", closed),
            tool("github__search", Some("github"), "search", open),
        ]
    }

    #[test]
    fn a_script_refers_to_the_tools_it_names_literally_and_no_others() {
        let mut tools = listing();
        tools.push(tool(
            "github__search-issues",
            Some("github"),
            "search-issues",
            serde_json::json!({}),
        ));
        tools.push(tool(
            "github__delete",
            Some("github"),
            "delete",
            serde_json::json!({}),
        ));
        let table: [(&str, &[&str]); 8] = [
            ("def main():\n    return kv_get(key = \"k\")\n", &["kv_get"]),
            (
                "def main():\n    return github.search(q = 1)\n",
                &["github__search"],
            ),
            (
                "def main():\n    return github[\"search-issues\"](q = 1)\n",
                &["github__search-issues"],
            ),
            (
                "def main():\n    return try_call(\"github__delete\")\n",
                &["github__delete"],
            ),
            // A reference that is not a call still refers to the tool.
            (
                "def main():\n    f = github.delete\n    return f()\n",
                &["github__delete"],
            ),
            // Computed names are decided at run time: no reference.
            (
                "def main(*, n: str):\n    return call(\"github__\" + n)\n",
                &[],
            ),
            ("def main(*, n: str):\n    return github[n]()\n", &[]),
            // Names the listing does not have are no references.
            (
                "def main():\n    return call(\"github__gone\") or github.gone\n",
                &[],
            ),
        ];
        for (source, expected) in table {
            let ast = crate::parse("s.star", source).unwrap();
            let found: Vec<String> = references(&ast, &tools).into_iter().collect();
            assert_eq!(found, expected, "{source}");
        }
    }

    fn findings(source: &str) -> Findings {
        let ast = crate::parse("s.star", source).unwrap();
        lint(&ast, &listing())
    }

    #[test]
    fn what_would_fail_when_run_is_an_error_at_save_time() {
        let table = [
            ("def main():\n    return kv_gett(key = \"k\")\n", "kv_gett"),
            (
                "def main():\n    return call(\"kv_gett\", key = \"k\")\n",
                "no tool \"kv_gett\"",
            ),
            (
                "def main():\n    return kv_get(kee = \"k\")\n",
                "takes no argument `kee` (it takes: key)",
            ),
            (
                "def main():\n    return github.serach(q = 1)\n",
                "github has no tool \"serach\"",
            ),
            (
                "def main():\n    return undefined_thing\n",
                "undefined_thing",
            ),
            (
                "def main():\n    return try_call(\"nope\")\n",
                "no tool \"nope\"",
            ),
        ];
        for (source, expected) in table {
            let found = findings(source);
            assert!(
                found
                    .errors
                    .iter()
                    .any(|e| e.contains(expected) && e.starts_with("s.star:2:")),
                "{source}: {found:?}"
            );
        }
    }

    #[test]
    fn what_the_listing_allows_is_clean_and_computed_names_are_left_to_the_run() {
        let clean = [
            "def main():\n    return kv_get(key = \"k\")\n",
            "def main():\n    return call(\"kv_get\", key = \"k\")\n",
            // An open schema: any keyword may be meant.
            "def main():\n    return github.search(q = 1, page = 2)\n",
            "def main(*, name: str):\n    return call(name)\n",
            "def main():\n    return [tools(), help(kv_get), resource_read(\"larkgate://d/x\"), json.encode(struct(a = 1))]\n",
            // A script not published yet, or this one calling itself.
            "def main():\n    return script.later(n = 1)\n",
        ];
        for source in clean {
            let found = findings(source);
            assert!(found.errors.is_empty(), "{source}: {found:?}");
        }
    }

    #[test]
    fn starlarks_own_lints_are_warnings() {
        let found = findings("def main():\n    unused = 1\n    return 2\n");
        assert!(found.errors.is_empty(), "{found:?}");
        assert!(
            found
                .warnings
                .iter()
                .any(|w| w.contains("Unused assignment of `unused`")),
            "{found:?}"
        );
        let found = findings("def main(*, a: bool):\n    if a:\n        x = 1\n    return x\n");
        assert!(found.errors.is_empty(), "{found:?}");
        assert!(
            found
                .warnings
                .iter()
                .any(|w| w.contains("potentially undefined variable `x`")),
            "{found:?}"
        );
    }
}
