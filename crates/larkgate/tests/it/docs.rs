//! The README and `docs/` hold together: every relative link names a file that exists and, when
//! it names a heading, a heading that file has (as GitHub makes anchors of headings).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::root;

/// The pages: the README, the CHANGELOG and everything in `docs/`.
fn pages() -> Vec<PathBuf> {
    let mut pages = vec![PathBuf::from("README.md"), PathBuf::from("CHANGELOG.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .unwrap()
        .map(|entry| PathBuf::from("docs").join(entry.unwrap().file_name()))
        .filter(|path| path.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    pages.extend(docs);
    pages
}

/// The lines of `text` outside code blocks.
fn prose(text: &str) -> Vec<&str> {
    let mut fenced = false;
    let mut lines = Vec::new();
    for line in text.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if !fenced {
            lines.push(line);
        }
    }
    lines
}

/// A heading's anchor, as GitHub makes it: lower case, punctuation dropped, spaces as `-`.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The `[label](target)` targets of `line` that are not URLs.
fn targets(line: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = line;
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        let Some(end) = after.find(')') else { break };
        let target = &after[..end];
        if !target.contains("://") && !target.contains(' ') && !target.is_empty() && target != "..."
        {
            found.push(target.to_owned());
        }
        rest = &after[end..];
    }
    found
}

#[test]
fn every_link_between_the_readme_and_the_docs_leads_somewhere() {
    let pages = pages();
    let mut anchors: BTreeMap<PathBuf, BTreeSet<String>> = BTreeMap::new();
    for page in &pages {
        let text = std::fs::read_to_string(root().join(page)).unwrap();
        let headings = prose(&text)
            .into_iter()
            .filter_map(|line| {
                line.trim_start_matches('#')
                    .strip_prefix(' ')
                    .filter(|_| line.starts_with('#'))
            })
            .map(anchor)
            .collect();
        anchors.insert(page.clone(), headings);
    }
    let mut broken = Vec::new();
    for page in &pages {
        let text = std::fs::read_to_string(root().join(page)).unwrap();
        for line in prose(&text) {
            for target in targets(line) {
                let (path, fragment) = target.split_once('#').unwrap_or((&target, ""));
                let linked = if path.is_empty() {
                    page.clone()
                } else {
                    normalize(&page.parent().unwrap_or(Path::new("")).join(path))
                };
                if !root().join(&linked).exists() {
                    broken.push(format!("{}: {target}: no such file", page.display()));
                    continue;
                }
                if !fragment.is_empty()
                    && !anchors.get(&linked).is_some_and(|a| a.contains(fragment))
                {
                    broken.push(format!("{}: {target}: no such heading", page.display()));
                }
            }
        }
    }
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}

/// `path` with its `..` and `.` taken out (no file system access).
fn normalize(path: &Path) -> PathBuf {
    let mut parts: Vec<std::path::Component<'_>> = Vec::new();
    for part in path.components() {
        match part {
            std::path::Component::ParentDir => {
                parts.pop();
            }
            std::path::Component::CurDir => {}
            other => parts.push(other),
        }
    }
    parts.iter().collect()
}

/// The worked examples of rules in docs/policy.md are a configuration `larkgate check` accepts,
/// each condition compiled, and the README shows the same five.
#[test]
fn the_policy_pages_rule_examples_pass_check() {
    let rules = rule_examples("docs/policy.md");
    assert_eq!(
        rule_examples("README.md"),
        rules,
        "the README's five are the policy page's"
    );
    assert_eq!(rules.matches("[[policy.rules]]").count(), 5);
    let dir = tempfile::tempdir().unwrap();
    let policy = format!("[policy.roles.admin]\ncall = [\"*\"]\n\n{rules}");
    std::fs::write(crate::config_path(dir.path()), policy).unwrap();
    crate::ok(dir.path(), &["check"]);
}

/// The one TOML block of `page` with rules in it.
fn rule_examples(page: &str) -> String {
    let page = std::fs::read_to_string(root().join(page)).unwrap();
    let mut blocks = Vec::new();
    let mut block: Option<String> = None;
    for line in page.lines() {
        match (&mut block, line.starts_with("```")) {
            (None, true) if line == "```toml" => block = Some(String::new()),
            (Some(text), true) => {
                blocks.push(std::mem::take(text));
                block = None;
            }
            (Some(text), false) => {
                text.push_str(line);
                text.push('\n');
            }
            (None, _) => {}
        }
    }
    let mut rules: Vec<String> = blocks
        .into_iter()
        .filter(|b| b.contains("[[policy.rules]]"))
        .collect();
    assert_eq!(rules.len(), 1, "one block of worked examples in {page}");
    rules.remove(0)
}
