//! `valid_identifier` agrees with the starlark crate's own lexer.

use larkgate_binding::valid_identifier;
use proptest::prelude::*;
use starlark_syntax::lexer::lex_exactly_one_identifier;

/// What the lexer says: exactly one identifier token, spelled exactly as given.
fn lexer_says(name: &str) -> bool {
    lex_exactly_one_identifier(name).as_deref() == Some(name)
}

#[test]
fn identifiers_match_the_lexer_on_a_table_of_hostile_names() {
    let table = [
        ("key", true),
        ("_private", true),
        ("a1", true),
        ("snake_case_name", true),
        ("None", true), // the lexer reads None, True and False as identifiers
        ("True", true),
        ("False", true),
        ("while_", true),
        ("assertx", true),
        ("f", true),
        ("br", true),
        ("", false),
        ("1abc", false),
        ("my-key", false),
        ("my key", false),
        (" key", false),
        ("key ", false),
        ("é", false),
        ("名前", false),
        ("a.b", false),
        ("def", false),
        ("lambda", false),
        ("load", false),
        ("pass", false),
        ("not", false),
        ("while", false),
        ("class", false),
        ("import", false),
        ("yield", false),
        ("nonlocal", false),
    ];
    for (name, expected) in table {
        assert_eq!(valid_identifier(name), expected, "{name:?}");
        assert_eq!(lexer_says(name), expected, "lexer on {name:?}");
    }
}

proptest! {
    #[test]
    fn identifiers_match_the_lexer_on_generated_names(name in "[a-zA-Z0-9_ .é-]{0,10}") {
        prop_assert_eq!(valid_identifier(&name), lexer_says(&name), "{:?}", name);
    }

    #[test]
    fn identifiers_match_the_lexer_on_keyword_like_names(
        name in "(and|break|continue|def|elif|else|for|if|in|lambda|load|not|or|pass|return|as|assert|async|await|class|del|except|finally|from|global|import|is|nonlocal|raise|try|while|with|yield)[a-z_]?"
    ) {
        prop_assert_eq!(valid_identifier(&name), lexer_says(&name), "{:?}", name);
    }
}
