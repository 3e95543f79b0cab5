//! The crate's modules depend on each other in one direction: no import cycle among them.
//!
//! A cycle is how a newcomer loses the path of a call (the assembly imports the registry,
//! which imports the call context, which imports the assembly). This reads the sources the way
//! a reader does: a module depends on every top-level module it names as `crate::NAME`
//! outside its unit tests; files under `NAME/` belong to `NAME`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The top-level modules each module of `src/` names, tests left out.
fn dependencies(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in rust_files(src) {
        let relative = file.strip_prefix(src).unwrap();
        let first = relative.iter().next().unwrap().to_string_lossy();
        let module = first.trim_end_matches(".rs").to_owned();
        if module == "lib" {
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap();
        // Unit tests sit at the end of a file, behind `#[cfg(test)]`.
        let code = text.split("#[cfg(test)]").next().unwrap_or_default();
        let named = graph.entry(module.clone()).or_default();
        for target in crate_paths(code) {
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

#[test]
fn the_platform_modules_have_no_import_cycle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let graph = dependencies(&src);
    assert!(graph.contains_key("pipeline") && graph.contains_key("access"));
    assert!(
        graph["pipeline"].contains("access"),
        "the reader must see the pipeline's own imports: {graph:?}"
    );
    if let Some(cycle) = find_cycle(&graph) {
        panic!(
            "import cycle among larkgate-platform's modules: {}",
            cycle.join(" → ")
        );
    }
}

#[test]
fn the_cycle_reader_finds_cycles_and_grouped_imports() {
    let code = "use crate::{a, b::{C, D}, self};\nuse crate::e::F;\nlet x = crate::g();";
    let names: Vec<String> = crate_paths(code).into_iter().collect();
    assert_eq!(names, ["a", "b", "e", "g"]);
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
