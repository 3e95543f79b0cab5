//! An upstream alias or a script name becomes a namespace in every script (`github.search(...)`,
//! `script.greet(...)`), so none may shadow a name the engine already gives scripts. The list
//! of reserved names is the platform's; the globals are the engine's: this keeps them in step.

use larkgate_platform::registry::{RESERVED_ALIASES, SCRIPT_NAMESPACE, check_alias_syntax};

#[test]
fn no_alias_or_script_name_can_shadow_an_engine_global() {
    let globals = larkgate_script::run::globals();
    let names: Vec<String> = globals.names().map(|n| n.as_str().to_owned()).collect();
    for name in [
        "call",
        "try_call",
        "tools",
        "help",
        "resource_read",
        "prompt_get",
        "print",
        "json",
        "struct",
        "len",
    ] {
        assert!(
            names.iter().any(|n| n == name),
            "{name} is a global: {names:?}"
        );
    }
    let shadowing: Vec<&String> = names
        .iter()
        .filter(|name| check_alias_syntax(name).is_ok())
        .collect();
    assert!(
        shadowing.is_empty(),
        "these engine globals would be accepted as aliases; add them to RESERVED_ALIASES: \
         {shadowing:?}"
    );
}

#[test]
fn the_script_namespace_and_every_reserved_name_are_refused_as_aliases() {
    assert!(check_alias_syntax(SCRIPT_NAMESPACE).is_err());
    for name in RESERVED_ALIASES {
        assert!(check_alias_syntax(name).is_err(), "{name}");
    }
    // Names that are merely close to a global are fine.
    for name in ["calls", "tools2", "github", "print_server"] {
        assert_eq!(check_alias_syntax(name), Ok(()), "{name}");
    }
}
