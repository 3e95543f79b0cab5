//! Parsing a script and reading its entry point.
//!
//! A script is parsed in larkgate's dialect ([`dialect`]: Starlark with type annotations and
//! keyword-only arguments, f-strings, no `load`). Its entry point is a top-level
//! `def main(*, ...)`:
//!
//! ```python
//! def main(*, city: str, days: int | None = None):
//!     """Forecast for a city."""
//!     ...
//! ```
//!
//! Every parameter is keyword-only and annotated: a required one is `str`, `int`, `bool` or
//! `float` without a default; an optional one is `T | None = None` (its real default is computed
//! inside `main`). They form an [`InputShape`], the same rules a capability's input follows, so
//! a published script's MCP `inputSchema` comes from the one generator. A docstring on `main`
//! is the script's description. The signature is read from the syntax tree: nothing runs.

use larkgate_binding::{FieldShape, InputShape};
use starlark::syntax::{AstModule, Dialect, DialectTypes};
use starlark_syntax::syntax::ast::{AstLiteral, AstParameter, AstStmt, ExprP, ParameterP, StmtP};

/// Why a script cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ScriptError {
    /// The source does not parse.
    #[error("the script does not parse: {0}")]
    Syntax(String),
    /// The source uses `load`.
    #[error(
        "load() is not available in larkgate scripts: a script is one file; call other scripts \
         as tools (`call(\"script__name\", ...)`) instead"
    )]
    Load,
    /// The entry point is missing or malformed.
    #[error("{0}")]
    EntryPoint(String),
}

/// larkgate's Starlark dialect.
pub fn dialect() -> Dialect {
    Dialect {
        enable_types: DialectTypes::Enable,
        enable_keyword_only_arguments: true,
        // Parsed so that `load` gets larkgate's own refusal rather than a syntax error.
        enable_load: true,
        ..Dialect::Extended
    }
}

/// Parses a script; `load` statements are refused.
pub fn parse(filename: &str, source: &str) -> Result<AstModule, ScriptError> {
    let ast = AstModule::parse(filename, source.to_owned(), &dialect())
        .map_err(|e| ScriptError::Syntax(e.to_string()))?;
    if !ast.loads().is_empty() {
        return Err(ScriptError::Load);
    }
    Ok(ast)
}

/// What a script's entry point takes and says about itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EntryPoint {
    /// The input shape formed by `main`'s parameters.
    pub input: InputShape,
    /// `main`'s docstring, when it has one.
    pub description: Option<String>,
}

const USAGE: &str = "a script's entry point is `def main(*, name: str, count: int | None = None):`";

/// Reads the entry point of a parsed script.
pub fn entry_point(ast: &AstModule) -> Result<EntryPoint, ScriptError> {
    let top: Vec<&AstStmt> = match &ast.statement().node {
        StmtP::Statements(statements) => statements.iter().collect(),
        _ => vec![ast.statement()],
    };
    let mut mains = top.iter().filter_map(|s| match &s.node {
        StmtP::Def(def) if def.name.node.ident == "main" => Some(def),
        _ => None,
    });
    let Some(main) = mains.next() else {
        return Err(ScriptError::EntryPoint(format!(
            "the script has no top-level `main`; {USAGE}"
        )));
    };
    if mains.next().is_some() {
        return Err(ScriptError::EntryPoint(
            "the script defines `main` more than once".to_owned(),
        ));
    }
    let mut fields = Vec::new();
    let mut keyword_only = false;
    for param in &main.params {
        fields.extend(field(ast, param, &mut keyword_only)?);
    }
    let input = InputShape::new(fields).map_err(|e| ScriptError::EntryPoint(e.to_string()))?;
    Ok(EntryPoint {
        input,
        description: docstring(&main.body),
    })
}

/// One parameter of `main` as a field, or why it cannot be one. `keyword_only` turns on at
/// the bare `*`.
fn field(
    ast: &AstModule,
    param: &AstParameter,
    keyword_only: &mut bool,
) -> Result<Option<FieldShape>, ScriptError> {
    let text = |span| ast.file_span(span).source_span().to_owned();
    let (name, annotation, default) = match &param.node {
        ParameterP::NoArgs => {
            *keyword_only = true;
            return Ok(None);
        }
        ParameterP::Normal(name, annotation, default) => (name, annotation, default),
        _ => {
            return Err(ScriptError::EntryPoint(format!(
                "`main` takes `{}`; only named keyword-only parameters are allowed: {USAGE}",
                text(param.span)
            )));
        }
    };
    let name = &name.node.ident;
    if !*keyword_only {
        return Err(ScriptError::EntryPoint(format!(
            "`main`'s parameter `{name}` must be keyword-only (after `*`): {USAGE}"
        )));
    }
    let Some(annotation) = annotation else {
        return Err(ScriptError::EntryPoint(format!(
            "`main`'s parameter `{name}` needs a type: str, int, bool, float, or `T | None = None`"
        )));
    };
    // Normalize spacing: `int|None` and `int | None` are the same type.
    let ty: String = text(annotation.span)
        .split('|')
        .map(str::trim)
        .collect::<Vec<_>>()
        .join(" | ");
    let required = match default {
        None => true,
        Some(default) if text(default.span) == "None" => false,
        Some(default) => {
            return Err(ScriptError::EntryPoint(format!(
                "`main`'s parameter `{name}` defaults to `{}`; an optional parameter defaults to \
                 None, and `main` computes its real default",
                text(default.span)
            )));
        }
    };
    let ty = match (required, ty.strip_prefix("None | ")) {
        // `None | T` means `T | None`.
        (false, Some(inner)) => format!("{inner} | None"),
        _ => ty,
    };
    match (required, ty.ends_with(" | None")) {
        (true, true) => Err(ScriptError::EntryPoint(format!(
            "`main`'s parameter `{name}: {ty}` has no default; write `{name}: {ty} = None`"
        ))),
        (false, false) => Err(ScriptError::EntryPoint(format!(
            "`main`'s parameter `{name}` defaults to None, so its type is `{ty} | None`"
        ))),
        _ => Ok(Some(FieldShape::new(name.clone(), ty, required))),
    }
}

/// The docstring: a string literal as the first statement of the body.
fn docstring(body: &AstStmt) -> Option<String> {
    let first = match &body.node {
        StmtP::Statements(statements) => statements.first()?,
        _ => body,
    };
    match &first.node {
        StmtP::Expression(expr) => match &expr.node {
            ExprP::Literal(AstLiteral::String(s)) => Some(s.node.trim().to_owned()),
            _ => None,
        },
        _ => None,
    }
}
