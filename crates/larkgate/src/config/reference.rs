//! The check that `docs/configuration.md`, the configuration reference, names every key the
//! configuration types take and no other.
//!
//! The keys are read from the types themselves: each table is given a key nobody would write,
//! and serde's refusal of it (every table denies unknown fields) lists the keys it expects. So a
//! key added to a type without a line in the reference fails here, and so does a line for a key
//! that was renamed or removed.

/// Each table of the configuration: its name as the reference heads it, and the TOML that puts
/// an unknown key into it.
const TABLES: &[(&str, &str)] = &[
    ("(top level)", "{PROBE} = 1"),
    ("[server]", "[server]\n{PROBE} = 1"),
    ("[scripts]", "[scripts]\n{PROBE} = 1"),
    ("[store]", "[store]\n{PROBE} = 1"),
    ("[ratelimit]", "[ratelimit]\n{PROBE} = 1"),
    ("[audit]", "[audit]\n{PROBE} = 1"),
    ("[telemetry]", "[telemetry]\n{PROBE} = 1"),
    ("[policy]", "[policy]\n{PROBE} = 1"),
    ("[policy.roles.NAME]", "[policy.roles.x]\n{PROBE} = 1"),
    ("[policy.approvals]", "[policy.approvals]\n{PROBE} = 1"),
    ("[policy.publishing]", "[policy.publishing]\n{PROBE} = 1"),
    (
        "[[policy.rate_limits]]",
        "[[policy.rate_limits]]\n{PROBE} = 1",
    ),
    ("[[policy.rules]]", "[[policy.rules]]\n{PROBE} = 1"),
    ("[[upstreams]]", "[[upstreams]]\n{PROBE} = 1"),
    (
        "[upstreams.limits]",
        "[[upstreams]]\n[upstreams.limits]\n{PROBE} = 1",
    ),
    (
        "[upstreams.oauth]",
        "[[upstreams]]\n[upstreams.oauth]\n{PROBE} = 1",
    ),
    ("[[servers]]", "[[servers]]\n{PROBE} = 1"),
    ("[sign_in]", "[sign_in]\n{PROBE} = 1"),
    ("[[sign_in.issuers]]", "[[sign_in.issuers]]\n{PROBE} = 1"),
];

/// The key no table takes.
const PROBE: &str = "zz_not_a_key";

/// The keys `table`'s type expects, from its refusal of [`PROBE`].
fn expected_keys(toml_text: &str) -> Vec<String> {
    let text = toml_text.replace("{PROBE}", PROBE);
    let error = match toml::from_str::<super::Config>(&text) {
        Ok(_) => panic!("{text:?} was accepted"),
        Err(error) => error.to_string(),
    };
    assert!(error.contains(PROBE), "{text:?}: {error}");
    let expected = error
        .split_once("expected")
        .unwrap_or_else(|| panic!("{text:?}: {error}"))
        .1;
    let mut keys: Vec<String> = expected
        .split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect();
    keys.sort();
    keys
}

/// The keys the reference lists under each table heading: a heading is a line `## [name]` (or
/// `### ...`), a key the first cell of a table row, in backticks.
fn documented(reference: &str) -> std::collections::BTreeMap<String, Vec<String>> {
    let mut tables: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    let mut current = None;
    for line in reference.lines() {
        if let Some(heading) = line
            .strip_prefix("## ")
            .or_else(|| line.strip_prefix("### "))
        {
            let name = heading.trim().trim_matches('`').to_owned();
            current = TABLES.iter().any(|(t, _)| *t == name).then_some(name);
            continue;
        }
        let Some(table) = &current else { continue };
        let Some(row) = line.strip_prefix("| `") else {
            continue;
        };
        let key = row.split('`').next().unwrap_or_default().to_owned();
        tables.entry(table.clone()).or_default().push(key);
    }
    for keys in tables.values_mut() {
        keys.sort();
    }
    tables
}

#[test]
fn the_reference_names_every_key_of_every_table_and_no_other() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/configuration.md");
    let reference = std::fs::read_to_string(path).expect("docs/configuration.md");
    let listed = documented(&reference);
    let mut wrong = Vec::new();
    for (table, text) in TABLES {
        let keys = expected_keys(text);
        let written = listed.get(*table).cloned().unwrap_or_default();
        for key in &keys {
            if !written.contains(key) {
                wrong.push(format!(
                    "{table} {key}: a key larkgate takes, missing from the reference"
                ));
            }
        }
        for key in &written {
            if !keys.contains(key) {
                wrong.push(format!(
                    "{table} {key}: in the reference, but larkgate takes no such key"
                ));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "docs/configuration.md:\n{}",
        wrong.join("\n")
    );
}
