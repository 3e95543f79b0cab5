//! Which names are Starlark identifiers.
//!
//! A field name is used verbatim as a Starlark keyword argument and a JSON key, so it must be
//! something a script author can type: exactly what the starlark crate's lexer reads as one
//! identifier token. That lexer accepts ASCII `[a-zA-Z_][a-zA-Z0-9_]*` and sets aside its
//! keywords and the words it reserves for future use. It does *not* treat `None`, `True` and
//! `False` as keywords (they are ordinary global names there), so neither do we. A test checks
//! this function against the lexer itself.

/// Keywords of the starlark crate's lexer.
const KEYWORDS: &[&str] = &[
    "and", "break", "continue", "def", "elif", "else", "for", "if", "in", "lambda", "load", "not",
    "or", "pass", "return",
];

/// Words the lexer reserves (they lex as a "reserved keyword" error, not an identifier).
const RESERVED: &[&str] = &[
    "as", "assert", "async", "await", "class", "del", "except", "finally", "from", "global",
    "import", "is", "nonlocal", "raise", "try", "while", "with", "yield",
];

/// Whether `name` lexes as exactly one Starlark identifier.
pub fn valid_identifier(name: &str) -> bool {
    let mut bytes = name.bytes();
    let Some(first) = bytes.next() else {
        return false;
    };
    (first.is_ascii_alphabetic() || first == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
        && !KEYWORDS.contains(&name)
        && !RESERVED.contains(&name)
}
