//! A policy's rules as a call is judged on them: made once per policy, the first time it
//! judges a call, and read on every call after.
//!
//! What every call reads of the rules is kept where it is cheap to read with the caches cold
//! (they are, mid-call: the edge, the store and the audit have just used them):
//!
//! - the conditions' fast paths, all in one [`Program`] (one arena of nodes, one string);
//! - per rule, in one `Vec`: its effect, whether it applies to everyone, where its condition's
//!   fast path starts, and which argument fields it reads (spans of the program's text);
//! - per tool name, the rules whose tool patterns match it, and whether one names it literally
//!   (made the first time the name is judged: a rule's patterns never change, the policy is
//!   replaced whole on a reload). At most [`MAX_TOOLS`] names are kept; past that the table
//!   starts again, so a flood of names costs time, never memory.
//!
//! The rules themselves ([`super::Rule`]) are read only for what is rare: a rule limited to
//! roles or principals, a condition the fast path does not answer (the cel crate evaluates
//! it), a rule that no longer fits its tool (its message).
//!
//! [`super::Policy::judge`] must decide exactly as reading the rules one by one would; a test
//! holds it to [`super::Policy::trace`], which does that.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock, RwLock};

use super::condition::fast::{Id, Program, Span};
use super::{Effect, Rule};

/// The most tool names whose matching rules are kept.
pub(super) const MAX_TOOLS: usize = 4096;

/// One rule as a call reads it.
#[derive(Debug)]
pub(super) struct Compiled {
    /// Its effect.
    pub(super) effect: Effect,
    /// Whether it names no roles and no principals, and so applies to everyone's calls.
    pub(super) everyone: bool,
    /// Whether it has a condition.
    pub(super) conditional: bool,
    /// Its condition's fast path in the policy's program, when it has one.
    pub(super) fast: Option<Id>,
    /// The argument fields its condition reads: `fields[start..start + len]`.
    fields: (u32, u32),
}

/// A rule whose tool patterns match a tool.
#[derive(Clone, Copy, Debug)]
pub(super) struct Matching {
    /// The rule's index.
    pub(super) rule: u32,
    /// Whether one of its patterns is the tool's name itself (no wildcard).
    pub(super) named: bool,
}

/// A policy's rules, made for judging calls.
#[derive(Debug, Default)]
pub(super) struct Judging {
    pub(super) program: Program,
    pub(super) rules: Vec<Compiled>,
    fields: Vec<Span>,
    by_tool: RwLock<HashMap<Box<str>, Arc<[Matching]>>>,
}

impl Judging {
    /// The rules as calls will read them.
    fn new(rules: &[Rule]) -> Self {
        let mut judging = Judging::default();
        for rule in rules {
            let start = u32::try_from(judging.fields.len()).unwrap_or(u32::MAX);
            let mut fast = None;
            if let Some(condition) = &rule.when {
                for field in condition.args_fields() {
                    if let Some(span) = judging.program.text(field) {
                        judging.fields.push(span);
                    }
                }
                fast = judging.program.compile(condition.expression());
            }
            let end = u32::try_from(judging.fields.len()).unwrap_or(u32::MAX);
            judging.rules.push(Compiled {
                effect: rule.effect,
                everyone: rule.roles.is_empty() && rule.principals.is_empty(),
                conditional: rule.when.is_some(),
                fast,
                fields: (start, end - start),
            });
        }
        judging
    }

    /// The rules whose tool patterns match `tool`, in order.
    pub(super) fn matching(&self, rules: &[Rule], tool: &str) -> Arc<[Matching]> {
        // A poisoned lock only means a thread panicked holding it; the table is whole.
        if let Some(found) = self
            .by_tool
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(tool)
        {
            return Arc::clone(found);
        }
        let matching: Arc<[Matching]> = rules
            .iter()
            .enumerate()
            .filter_map(|(index, rule)| {
                let mut patterns = rule.tools.iter().filter(|p| p.matches(tool)).peekable();
                patterns.peek()?;
                Some(Matching {
                    rule: u32::try_from(index).ok()?,
                    named: patterns.any(|p| p.is_literal()),
                })
            })
            .collect();
        let mut table = self
            .by_tool
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if table.len() >= MAX_TOOLS {
            table.clear();
        }
        table.insert(tool.into(), Arc::clone(&matching));
        matching
    }

    /// Whether rule `rule`'s condition reads an argument `arguments` lacks.
    pub(super) fn reads_beyond(&self, rule: &Compiled, arguments: &[String]) -> bool {
        let (start, len) = (rule.fields.0 as usize, rule.fields.1 as usize);
        self.fields[start..start + len]
            .iter()
            .any(|&field| !arguments.iter().any(|a| a == self.program.str(field)))
    }
}

/// [`Judging`] for a policy, made the first time it is asked for. A copy of the policy makes
/// its own (so a policy changed after it was copied is judged as it is); two policies are
/// equal whatever either has made.
#[derive(Default)]
pub(super) struct Cell(OnceLock<Judging>);

impl Cell {
    pub(super) fn get(&self, rules: &[Rule]) -> &Judging {
        let judging = self.0.get_or_init(|| Judging::new(rules));
        debug_assert_eq!(
            judging.rules.len(),
            rules.len(),
            "a policy's rules were changed after it judged a call"
        );
        judging
    }
}

impl Clone for Cell {
    fn clone(&self) -> Self {
        Cell::default()
    }
}

impl PartialEq for Cell {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for Cell {}

impl std::fmt::Debug for Cell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Judging")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_of_tool_names_stays_bounded_and_answers_alike_after_it_starts_again() {
        let policy: super::super::Policy = toml::from_str(
            "[[rules]]\ntools = [\"kv_*\"]\neffect = \"deny\"\n\
             [[rules]]\ntools = [\"kv_get\", \"x*\"]\neffect = \"allow\"\n",
        )
        .unwrap();
        let judging = Judging::new(&policy.rules);
        let named = |tool: &str| -> Vec<(u32, bool)> {
            judging
                .matching(&policy.rules, tool)
                .iter()
                .map(|m| (m.rule, m.named))
                .collect()
        };
        assert_eq!(named("kv_get"), [(0, false), (1, true)]);
        for n in 0..MAX_TOOLS + 10 {
            named(&format!("x{n}"));
            assert!(judging.by_tool.read().unwrap().len() <= MAX_TOOLS);
        }
        assert_eq!(named("kv_get"), [(0, false), (1, true)]);
        assert_eq!(named("x1"), [(1, false)]);
        assert!(named("other").is_empty());
    }
}
