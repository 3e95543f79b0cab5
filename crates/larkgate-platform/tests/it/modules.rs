//! In every crate of the workspace, the modules depend on each other in one direction: no
//! import cycle among them.
//!
//! A cycle is how a newcomer loses the path of a call (the assembly imports the registry,
//! which imports the call context, which imports the assembly). This reads the sources the way
//! a reader does: a module depends on every top-level module it names as `crate::NAME` in its
//! code (not in comments, which may point anywhere) outside its unit tests; files under `NAME/`
//! belong to `NAME`. A crate's roots (`lib.rs`, `main.rs`) and its extra binaries (`bin/`)
//! are not modules of the library.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The top-level modules each module of `src/` names, tests left out.
fn dependencies(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in rust_files(src) {
        let relative = file.strip_prefix(src).unwrap();
        let first = relative.iter().next().unwrap().to_string_lossy();
        let module = first.trim_end_matches(".rs").to_owned();
        if matches!(module.as_str(), "lib" | "main" | "bin") {
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap();
        // Unit tests sit at the end of a file, behind `#[cfg(test)]`.
        let code = text.split("#[cfg(test)]").next().unwrap_or_default();
        let code = without_comments(code);
        let named = graph.entry(module.clone()).or_default();
        for target in crate_paths(&code) {
            if target != module {
                named.insert(target);
            }
        }
    }
    graph
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
    files
}

/// `code` without its line comments (doc comments included): what the compiler reads. A `//`
/// inside a string literal (a URL) is not a comment.
fn without_comments(code: &str) -> String {
    let mut out = String::with_capacity(code.len());
    for line in code.lines() {
        let mut in_string = false;
        let mut escaped = false;
        let mut end = line.len();
        let bytes = line.as_bytes();
        for (i, &b) in bytes.iter().enumerate() {
            match b {
                _ if escaped => escaped = false,
                b'\\' if in_string => escaped = true,
                b'"' => in_string = !in_string,
                b'/' if !in_string && bytes.get(i + 1) == Some(&b'/') => {
                    end = i;
                    break;
                }
                _ => {}
            }
        }
        out.push_str(&line[..end]);
        out.push('\n');
    }
    out
}

/// The first segment after every `crate::` in `code`, including each item of a
/// `crate::{a, b::C}` group.
fn crate_paths(code: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    for (at, _) in code.match_indices("crate::") {
        let rest = &code[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 0usize;
            let mut item_start = true;
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => item_start = true,
                    c if c.is_whitespace() => {}
                    _ if item_start => {
                        item_start = false;
                        let name = ident(&group[i..]);
                        if !name.is_empty() && name != "self" {
                            found.insert(name);
                        }
                    }
                    _ => {}
                }
            }
        } else {
            let name = ident(rest);
            if !name.is_empty() {
                found.insert(name);
            }
        }
    }
    found
}

/// A cycle in `graph`, as the modules along it, if there is one.
fn find_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|n| n == node) {
            let mut cycle = path[at..].to_vec();
            cycle.push(node.to_owned());
            return Some(cycle);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_owned());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(cycle) = visit(next, graph, path, done) {
                return Some(cycle);
            }
        }
        path.pop();
        done.insert(node.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|node| visit(node, graph, &mut Vec::new(), &mut done))
}

/// Every crate of the workspace, by name, with its `src/`.
fn crates() -> Vec<(String, PathBuf)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut crates: Vec<(String, PathBuf)> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.join("Cargo.toml").exists() && path.join("src").is_dir())
        .map(|path| {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            (name, path.join("src"))
        })
        .collect();
    crates.sort();
    crates
}

#[test]
fn no_crate_has_an_import_cycle_among_its_modules() {
    let crates = crates();
    let names: Vec<&str> = crates.iter().map(|(name, _)| name.as_str()).collect();
    for expected in [
        "larkgate",
        "larkgate-edge",
        "larkgate-platform",
        "larkgate-upstream",
    ] {
        assert!(names.contains(&expected), "{expected} is read: {names:?}");
    }
    let mut cycles = Vec::new();
    for (name, src) in &crates {
        let graph = dependencies(src);
        if let Some(cycle) = find_cycle(&graph) {
            cycles.push(format!("{name}: {}", cycle.join(" → ")));
        }
    }
    assert!(
        cycles.is_empty(),
        "import cycles among modules:\n{}",
        cycles.join("\n")
    );
}

#[test]
fn the_reader_sees_the_pipeline_import_its_steps() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let graph = dependencies(&src);
    assert!(graph.contains_key("pipeline") && graph.contains_key("access"));
    assert!(
        graph["pipeline"].contains("access"),
        "the reader must see the pipeline's own imports: {graph:?}"
    );
}

#[test]
fn the_cycle_reader_finds_cycles_and_grouped_imports() {
    let code = "use crate::{a, b::{C, D}, self};\nuse crate::e::F;\nlet x = crate::g();";
    let names: Vec<String> = crate_paths(code).into_iter().collect();
    assert_eq!(names, ["a", "b", "e", "g"]);
    let commented =
        "/// see [`crate::h`]\nlet u = \"https://x\"; // crate::i\nuse crate::j; // crate::k";
    let names: Vec<String> = crate_paths(&without_comments(commented))
        .into_iter()
        .collect();
    assert_eq!(names, ["j"]);
    let graph: BTreeMap<String, BTreeSet<String>> = [
        ("platform", &["pipeline"][..]),
        ("pipeline", &["services"]),
        ("services", &["registry"]),
        ("registry", &["identity"]),
        ("identity", &["platform"]),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.iter().map(|s| (*s).to_owned()).collect()))
    .collect();
    let cycle = find_cycle(&graph).expect("the cycle");
    assert_eq!(cycle.first(), cycle.last());
    assert_eq!(cycle.len(), 6, "{cycle:?}");
    let mut acyclic = graph.clone();
    acyclic.get_mut("identity").unwrap().clear();
    assert_eq!(find_cycle(&acyclic), None);
}
