//! Who may see and call what, which calls need an approval, and how fast anyone may call.
//!
//! Threat model: the policy is the operator's statement of authority, so it fails closed. A
//! role grants nothing it does not name; a principal without roles sees no tools; a pattern
//! that is malformed is refused when the configuration is loaded, never read as "match all".
//!
//! ```toml
//! [roles.admin]
//! call = ["*"]                      # may list and call every tool
//! resources = ["*"]                 # and list and read every upstream resource
//! prompts = ["*"]                   # and list and get every upstream prompt
//!
//! [roles.viewer]
//! list = ["*"]                      # may see every tool...
//! call = ["kv_get", "clock_now"]    # ...but call only these (others: `forbidden`)
//! resources = ["larkgate://docs/*"] # upstream resources it may list and read
//! prompts = ["docs__*"]             # upstream prompts it may list and get
//!
//! [approvals]
//! require = ["kv_delete", "github__*"]
//! # or, for a call that waits for its decision (up to 120 s) instead of being refused at once:
//! # require = ["kv_delete", { tool = "github__*", wait_seconds = 120 }]
//! resources = []                    # reads that need an approval (none by default)
//! prompts = []                      # prompt gets that need one (none by default)
//! ttl_seconds = 3600                # how long an approval stays usable
//! pending_ttl_seconds = 3600        # how long a request waits for a decision
//! redact = ["password", "token"]    # argument fields approvers see as "<redacted>"
//! max_pending_per_principal = 50    # requests one principal may have waiting at once
//! max_pending = 1000                # requests all principals may have waiting at once
//! max_waiting_per_principal = 10    # calls one principal may have held for a decision at once
//!
//! [publishing]
//! require_review = true             # publish only a source whose review run succeeded
//!
//! [[rate_limits]]
//! per = "principal"                 # one budget per principal, across its tools
//! calls = 600
//! period_seconds = 60
//!
//! [[rate_limits]]
//! per = "principal_tool"            # one budget per (principal, tool)
//! tools = ["kv_set"]
//! calls = 5
//! period_seconds = 1
//! burst = 5
//! ```
//!
//! Patterns are tool names where `*` stands for any run of characters (`kv_*`, `github__*`);
//! prompt patterns are prompt names the same way (`docs__*`); resource patterns are larkgate
//! resource URIs the same way (`larkgate://docs/*`), and a template is listed when a pattern
//! matches its text. Resources and prompts have no "list but not read" grant: what a role may
//! not read it does not see, and reading it is answered as for a URI nobody listed.
//!
//! A rate limit counts tool calls matching `tools`, resource reads matching `resources` and
//! prompt gets matching `prompts`. A rule that names none of the three counts everything (one
//! budget for all a principal does); a rule that names some counts only those.

use std::collections::BTreeMap;
use std::fmt;

use larkgate_store::Principal;
use serde::{Deserialize, Serialize};

pub mod condition;
mod judging;
pub use condition::{Condition, FactContext, FactValues, Facts};

/// The role that may do everything the default configuration allows.
pub const ROLE_ADMIN: &str = "admin";
/// The role that resolves approvals.
pub const ROLE_APPROVER: &str = "approver";
/// The role that publishes scripts.
pub const ROLE_PUBLISHER: &str = "publisher";
/// The role that saves and runs drafts.
pub const ROLE_AUTHOR: &str = "author";

/// A tool-name pattern: `*` matches any run of characters, everything else itself.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Pattern(String);

impl Pattern {
    /// Parses a pattern; only tool-name characters and `*` are allowed.
    pub fn new(pattern: &str) -> Result<Self, String> {
        let valid = !pattern.is_empty()
            && pattern
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '*'));
        if valid {
            Ok(Pattern(pattern.to_owned()))
        } else {
            Err(format!(
                "{pattern:?} is not a tool pattern: use tool-name characters \
                 (A-Z a-z 0-9 _ - .) and * for any run of them"
            ))
        }
    }

    /// Whether `name` matches.
    pub fn matches(&self, name: &str) -> bool {
        glob(self.0.as_bytes(), name.as_bytes())
    }

    /// Whether the pattern names one tool, with no `*`.
    pub fn is_literal(&self) -> bool {
        !self.0.contains('*')
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The arguments a condition reads that a tool it applies to does not take.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Misfit {
    /// The fields of `args` the condition reads and the tool does not take, in order.
    pub fields: Vec<String>,
    /// Whether the rule matches the tool by a wildcard only (rather than naming it).
    pub by_wildcard: bool,
}

/// The arguments `condition` reads that a tool named `tool`, taking `arguments`, does not
/// take, with how `patterns` match the tool; `None` when it fits, or when no pattern matches.
pub fn misfit(
    patterns: &[Pattern],
    condition: &Condition,
    tool: &str,
    arguments: &[String],
) -> Option<Misfit> {
    let mut matching = patterns.iter().filter(|p| p.matches(tool)).peekable();
    matching.peek()?;
    let by_wildcard = !matching.any(Pattern::is_literal);
    let fields: Vec<String> = condition
        .args_fields()
        .iter()
        .filter(|field| !arguments.contains(field))
        .cloned()
        .collect();
    (!fields.is_empty()).then_some(Misfit {
        fields,
        by_wildcard,
    })
}

/// Why a rule that names the call's tool refuses it without being evaluated: its condition
/// reads an argument the tool's input schema, as the registry holds it now, does not have
/// (the tool changed since the rule was written, or the rule is mistyped and was never
/// checked). The rule fails closed rather than silently never holding: a `has(args.x)` guard
/// would otherwise turn a deny rule off. `None` when it fits, when the rule only matches the
/// tool by a wildcard (which `larkgate check` warns about instead), or when the schema lists
/// no arguments to check against.
fn refuses_unfit(
    patterns: &[Pattern],
    condition: &Condition,
    facts: &FactValues,
) -> Option<String> {
    if condition.args_fields().is_empty() {
        return None;
    }
    let (tool, arguments) = (facts.tool_name(), facts.tool_arguments()?);
    // A literal pattern matches only its own name: compared, not matched (this runs for each
    // rule on every call it applies to).
    if !patterns.iter().any(|p| p.0 == tool && p.is_literal()) {
        return None;
    }
    // Empty (and not allocated) when the rule fits, as it does on almost every call.
    let missing: Vec<&str> = condition
        .args_fields()
        .iter()
        .filter(|field| !arguments.contains(field))
        .map(String::as_str)
        .collect();
    if missing.is_empty() {
        return None;
    }
    Some(format!(
        "its condition reads `args.{}`, which {tool} does not take now: the rule no longer fits \
         the tool's input schema, and refuses its calls until the rule or the tool is changed",
        missing.join("`, `args.")
    ))
}

/// `*`-only glob matching, iterative with one backtrack point: linear in practice, never
/// exponential.
fn glob(pattern: &[u8], name: &[u8]) -> bool {
    let (mut p, mut n) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while n < name.len() {
        if p < pattern.len() && pattern[p] == b'*' {
            star = Some((p, n));
            p += 1;
        } else if p < pattern.len() && pattern[p] == name[n] {
            p += 1;
            n += 1;
        } else if let Some((sp, sn)) = star {
            p = sp + 1;
            n = sn + 1;
            star = Some((sp, sn + 1));
        } else {
            return false;
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

impl TryFrom<String> for Pattern {
    type Error = String;
    fn try_from(value: String) -> Result<Self, String> {
        Pattern::new(&value)
    }
}

impl From<Pattern> for String {
    fn from(pattern: Pattern) -> Self {
        pattern.0
    }
}

impl fmt::Debug for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

/// A resource-URI pattern: `*` matches any run of characters, everything else itself. Any
/// visible character may appear; whitespace and control characters may not, so a pattern is
/// never silently different from what it looks like.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct UriPattern(String);

impl UriPattern {
    /// Parses a pattern.
    pub fn new(pattern: &str) -> Result<Self, String> {
        let valid = !pattern.is_empty()
            && pattern
                .chars()
                .all(|c| !c.is_whitespace() && !c.is_control());
        if valid {
            Ok(UriPattern(pattern.to_owned()))
        } else {
            Err(format!(
                "{pattern:?} is not a resource pattern: write a larkgate resource URI \
                 (larkgate://ALIAS/...) without spaces, with * for any run of characters"
            ))
        }
    }

    /// Whether `uri` matches.
    pub fn matches(&self, uri: &str) -> bool {
        glob(self.0.as_bytes(), uri.as_bytes())
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for UriPattern {
    type Error = String;
    fn try_from(value: String) -> Result<Self, String> {
        UriPattern::new(&value)
    }
}

impl From<UriPattern> for String {
    fn from(pattern: UriPattern) -> Self {
        pattern.0
    }
}

impl fmt::Debug for UriPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

/// What a call is made to: a tool, an upstream resource (read) or an upstream prompt (get).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum TargetKind {
    /// A tool (`tools/call`).
    #[default]
    Tool,
    /// A resource (`resources/read`), named by its larkgate URI.
    Resource,
    /// A prompt (`prompts/get`), named by its larkgate name.
    Prompt,
}

impl TargetKind {
    /// The MCP method that reaches it.
    pub fn method(self) -> &'static str {
        match self {
            TargetKind::Tool => "tools/call",
            TargetKind::Resource => "resources/read",
            TargetKind::Prompt => "prompts/get",
        }
    }
}

/// What one role grants.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RoleRules {
    /// Tools the role may see but not call (calling them is `forbidden`).
    #[serde(default)]
    pub list: Vec<Pattern>,
    /// Tools the role may see and call.
    #[serde(default)]
    pub call: Vec<Pattern>,
    /// Upstream resources (larkgate URIs) and templates the role may list and read.
    #[serde(default)]
    pub resources: Vec<UriPattern>,
    /// Upstream prompts the role may list and get.
    #[serde(default)]
    pub prompts: Vec<Pattern>,
    /// The tools in whose calls an upstream may ask the role's principals for an
    /// elicitation (as far as the upstream may ask at all: its `elicitation` setting). When
    /// none of a principal's roles says, the upstream's setting alone decides.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub elicitation: Option<Vec<Pattern>>,
    /// The same for sampling (the upstream's `sampling` setting).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sampling: Option<Vec<Pattern>>,
}

/// One `require` rule: the tools whose every call needs an approval for its exact arguments,
/// and how long such a call, when its client waits, is held open for the decision (0: it is
/// refused `approval_required` at once). Written as a pattern (`"kv_delete"`) or as a table
/// (`{ tool = "kv_delete", wait_seconds = 120 }`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "RuleText", into = "RuleText")]
pub struct ApprovalRule {
    /// The tools.
    pub tool: Pattern,
    /// How long a gated call may wait for its decision, in seconds.
    pub wait_seconds: u64,
    /// A condition on the call (see [`condition`]): the rule gates only the calls it holds
    /// of (and, failing to evaluate, gates the call).
    pub when: Option<Condition>,
}

impl ApprovalRule {
    /// A rule with no wait.
    pub fn new(tool: Pattern) -> Self {
        ApprovalRule {
            tool,
            wait_seconds: 0,
            when: None,
        }
    }

    /// Whether the rule gates a call of `tool` with `facts` (`None`: a call no condition can
    /// read, such as a read or a get, which a rule with a condition does not gate).
    fn gates(&self, tool: &str, facts: Option<&FactValues>) -> bool {
        self.tool.matches(tool)
            && condition_counts(
                std::slice::from_ref(&self.tool),
                self.when.as_ref(),
                facts,
                "an approval rule",
            )
    }
}

/// Whether a rule with `when` counts a call with `facts`: always without a condition; never
/// without facts; else when it holds, or when it fails (a rule that limits or gates fails
/// closed: it limits or gates), which the log says.
fn condition_counts(
    patterns: &[Pattern],
    when: Option<&Condition>,
    facts: Option<&FactValues>,
    what: &str,
) -> bool {
    let Some(condition) = when else {
        return true;
    };
    let Some(facts) = facts else {
        return false;
    };
    let unfit = refuses_unfit(patterns, condition, facts).map(Err);
    unfit
        .unwrap_or_else(|| condition.holds(facts))
        .unwrap_or_else(|why| {
            tracing::warn!(
                condition = condition.source(),
                %why,
                "the condition of {what} could not be evaluated; it applies to the call"
            );
            true
        })
}

/// An [`ApprovalRule`] as the configuration writes it.
#[derive(Serialize, Deserialize)]
#[serde(
    untagged,
    expecting = "a tool pattern, or a table { tool = \"PATTERN\", wait_seconds = N }"
)]
enum RuleText {
    Pattern(String),
    Table(RuleTable),
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleTable {
    tool: String,
    #[serde(default)]
    wait_seconds: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    when: Option<Condition>,
}

impl TryFrom<RuleText> for ApprovalRule {
    type Error = String;
    fn try_from(text: RuleText) -> Result<Self, String> {
        Ok(match text {
            RuleText::Pattern(pattern) => ApprovalRule::new(Pattern::new(&pattern)?),
            RuleText::Table(RuleTable {
                tool,
                wait_seconds,
                when,
            }) => ApprovalRule {
                tool: Pattern::new(&tool)?,
                wait_seconds,
                when,
            },
        })
    }
}

impl From<ApprovalRule> for RuleText {
    fn from(rule: ApprovalRule) -> Self {
        match (rule.wait_seconds, rule.when) {
            (0, None) => RuleText::Pattern(rule.tool.into()),
            (wait_seconds, when) => RuleText::Table(RuleTable {
                tool: rule.tool.into(),
                wait_seconds,
                when,
            }),
        }
    }
}

/// The longest a call may wait for its approval's decision.
pub const MAX_WAIT_SECONDS: u64 = 3600;

/// Which calls need an approver's approval.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApprovalRules {
    /// Tools whose every call needs an approval for its exact arguments, each with how long
    /// a call whose client waits is held for the decision.
    #[serde(default)]
    pub require: Vec<ApprovalRule>,
    /// Resources whose every read needs an approval (reads are read-only: none by default).
    #[serde(default)]
    pub resources: Vec<UriPattern>,
    /// Prompts whose every get needs an approval for its exact arguments (none by default).
    #[serde(default)]
    pub prompts: Vec<Pattern>,
    /// How long an approval stays usable after it is granted.
    #[serde(default = "default_ttl")]
    pub ttl_seconds: u64,
    /// How long a request waits for a decision before it expires (`approval_expired`); the
    /// caller's next call asks anew.
    #[serde(default = "default_ttl")]
    pub pending_ttl_seconds: u64,
    /// Argument fields (by name, at any depth) shown to approvers as `"<redacted>"`. The
    /// approval still binds to the whole arguments' hash.
    #[serde(default)]
    pub redact: Vec<String>,
    /// How many requests one principal may have waiting for a decision at once: a gated call
    /// beyond them is refused (`limit_exceeded`) and records nothing.
    #[serde(default = "default_max_pending_per_principal")]
    pub max_pending_per_principal: u64,
    /// How many requests all principals together may have waiting at once.
    #[serde(default = "default_max_pending")]
    pub max_pending: u64,
    /// How many calls one principal may have held open at once in one process, waiting for
    /// their decisions (rules with `wait_seconds`): a call beyond them is answered at once.
    #[serde(default = "default_max_waiting_per_principal")]
    pub max_waiting_per_principal: u64,
}

fn default_max_waiting_per_principal() -> u64 {
    10
}

fn default_ttl() -> u64 {
    3600
}

fn default_max_pending_per_principal() -> u64 {
    50
}

fn default_max_pending() -> u64 {
    1000
}

impl Default for ApprovalRules {
    fn default() -> Self {
        ApprovalRules {
            require: Vec::new(),
            resources: Vec::new(),
            prompts: Vec::new(),
            ttl_seconds: default_ttl(),
            pending_ttl_seconds: default_ttl(),
            redact: Vec::new(),
            max_pending_per_principal: default_max_pending_per_principal(),
            max_pending: default_max_pending(),
            max_waiting_per_principal: default_max_waiting_per_principal(),
        }
    }
}

/// What publishing a script needs.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PublishingRules {
    /// Whether a draft is published only after a review run of its exact source succeeded
    /// (`larkgate run --draft NAME --review`, `script_run_draft(name=..., review=true)`), so a
    /// publisher has seen what it would write.
    #[serde(default)]
    pub require_review: bool,
}

/// What a rate limit counts calls by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RateScope {
    /// One budget per principal, across every matching tool.
    Principal,
    /// One budget per (principal, tool).
    PrincipalTool,
}

/// One rate limit: `calls` per `period_seconds`, with bursts of up to `burst` (default:
/// `calls`), enforced as GCRA.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateLimitRule {
    /// What the budget is keyed by.
    pub per: RateScope,
    /// The tools it counts calls of. When none of `tools`, `resources` and `prompts` is
    /// given, the rule counts every call, read and get.
    #[serde(default)]
    pub tools: Option<Vec<Pattern>>,
    /// The resources it counts reads of (see `tools`).
    #[serde(default)]
    pub resources: Option<Vec<UriPattern>>,
    /// The prompts it counts gets of (see `tools`).
    #[serde(default)]
    pub prompts: Option<Vec<Pattern>>,
    /// Calls allowed per period (at least 1).
    pub calls: u32,
    /// The period, in seconds (at least 1).
    pub period_seconds: u64,
    /// The largest burst; defaults to `calls`.
    #[serde(default)]
    pub burst: Option<u32>,
    /// A condition on the call (see [`condition`]): the rule counts only the tool calls it
    /// holds of (and, failing to evaluate, counts the call); never a read or a get.
    #[serde(default)]
    pub when: Option<Condition>,
}

impl RateLimitRule {
    /// Whether the rule counts a call of `kind` to `name` (a tool or prompt name, a larkgate
    /// resource URI), its condition aside.
    pub fn counts(&self, kind: TargetKind, name: &str) -> bool {
        let everything = self.tools.is_none() && self.resources.is_none() && self.prompts.is_none();
        if everything {
            return true;
        }
        match kind {
            TargetKind::Tool => self.tools.iter().flatten().any(|p| p.matches(name)),
            TargetKind::Resource => self.resources.iter().flatten().any(|p| p.matches(name)),
            TargetKind::Prompt => self.prompts.iter().flatten().any(|p| p.matches(name)),
        }
    }

    /// Whether the rule counts a call of `kind` to `name` with `facts` (`None` for a call no
    /// condition reads: a read, a get).
    pub fn counts_call(&self, kind: TargetKind, name: &str, facts: Option<&FactValues>) -> bool {
        self.counts(kind, name)
            && condition_counts(
                self.tools.as_deref().unwrap_or_default(),
                self.when.as_ref(),
                facts,
                "a rate limit",
            )
    }
}

fn all_tools() -> Vec<Pattern> {
    vec![Pattern("*".into())]
}

/// What a [`Rule`] does to a call it applies to, when its condition holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Effect {
    /// The call is refused (`forbidden`), whatever else allows it.
    Deny,
    /// The call is allowed, as a role's `call` pattern would allow it.
    Allow,
    /// The call needs an approval for its exact arguments, as `[approvals] require` would.
    RequireApproval,
}

/// A rule on calls: the tools it matches, whose calls it applies to (everyone's, unless
/// `roles` or `principals` name some), a condition on the call (`when`, CEL: see
/// [`condition`]), and its effect.
///
/// ```toml
/// [[policy.rules]]
/// name = "writes under tmp/ only"
/// tools = ["kv_set", "kv_delete"]
/// when = '!args.key.startsWith("tmp/")'
/// effect = "deny"
/// reason = "keys outside tmp/ belong to the deploy pipeline"
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    /// How the audit, the log and `policy explain` name it; `rules[N]` when absent.
    #[serde(default)]
    pub name: Option<String>,
    /// The tools it matches.
    pub tools: Vec<Pattern>,
    /// It applies to principals with any of these roles...
    #[serde(default)]
    pub roles: Vec<String>,
    /// ...and to these principals; to everyone when both are empty.
    #[serde(default)]
    pub principals: Vec<String>,
    /// The condition on the call; the rule always applies without one.
    #[serde(default)]
    pub when: Option<Condition>,
    /// What it does.
    pub effect: Effect,
    /// Why, for the operator (the audit and the log); the caller is not told.
    #[serde(default)]
    pub reason: Option<String>,
}

impl Rule {
    /// Whether the rule applies to `principal`'s calls of `tool` (its condition aside).
    pub fn applies_to(&self, principal: &Principal, tool: &str) -> bool {
        self.is_for(principal) && self.tools.iter().any(|pattern| pattern.matches(tool))
    }

    /// Whether the rule applies to `principal`'s calls (of the tools it matches).
    fn is_for(&self, principal: &Principal) -> bool {
        (self.roles.is_empty() && self.principals.is_empty())
            || self.principals.contains(&principal.id)
            || self.roles.iter().any(|role| principal.roles.contains(role))
    }
}

/// One rule as it stood for a call, for `larkgate policy explain`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuleTrace {
    /// Its name, or `rules[N]`.
    pub name: String,
    /// Its effect.
    pub effect: Effect,
    /// Whether it applies to the caller's calls of the tool (its condition aside).
    pub applies: bool,
    /// When it applies and has a condition: whether the condition holds, or why it could not
    /// be evaluated.
    pub condition: Option<Result<bool, String>>,
}

/// How the rules decided a call whose tool the caller may see.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The call goes on; with the name of the rule that requires an approval for it, if one
    /// does.
    Proceed {
        /// The `require_approval` rule whose condition held.
        approval: Option<String>,
    },
    /// The call is refused.
    Refuse {
        /// The rule that decided (its name, or `rules[N]`), or what did.
        rule: String,
        /// Why, for the operator: the rule's reason, or the condition's error.
        why: String,
        /// Whether the rule could not be judged (its condition failed to evaluate on these
        /// arguments, or no longer fits the tool) rather than decided: the caller is given a
        /// correlation id to quote, and the log has `why` under it.
        failed: bool,
    },
}

/// The whole policy.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Policy {
    /// Role name to what it grants.
    #[serde(default)]
    pub roles: BTreeMap<String, RoleRules>,
    /// Rules with conditions, in the order of evaluation [`Policy::judge`] gives them.
    #[serde(default)]
    pub rules: Vec<Rule>,
    /// Approval requirements.
    #[serde(default)]
    pub approvals: ApprovalRules,
    /// Rate limits; every matching rule applies.
    #[serde(default)]
    pub rate_limits: Vec<RateLimitRule>,
    /// What publishing a script needs.
    #[serde(default)]
    pub publishing: PublishingRules,
    /// The rules as calls are judged on them, made the first time a call is (see
    /// [`judging`]). A policy is not changed once it judges calls: the platform holds it
    /// behind an `Arc` and replaces it whole.
    #[serde(skip)]
    judging: judging::Cell,
}

impl Policy {
    /// Its version: the SHA-256, in hex, of the policy as JSON (what a checkpoint names as the
    /// policy in force).
    pub fn version(&self) -> String {
        use sha2::Digest;
        // Serializing maps, strings and numbers cannot fail.
        let bytes = serde_json::to_vec(self).unwrap_or_default();
        hex::encode(sha2::Sha256::digest(&bytes))
    }
}

impl Default for Policy {
    /// The default policy: `admin` may list and call every tool, and list and read or get every
    /// resource and prompt; nothing else is granted.
    fn default() -> Self {
        let mut roles = BTreeMap::new();
        roles.insert(
            ROLE_ADMIN.to_owned(),
            RoleRules {
                list: Vec::new(),
                call: all_tools(),
                resources: vec![UriPattern("*".into())],
                prompts: all_tools(),
                elicitation: None,
                sampling: None,
            },
        );
        Policy {
            roles,
            rules: Vec::new(),
            approvals: ApprovalRules::default(),
            rate_limits: Vec::new(),
            publishing: PublishingRules::default(),
            judging: judging::Cell::default(),
        }
    }
}

impl Policy {
    /// Checks what serde cannot: positive rates and periods, lifetimes of approvals.
    pub fn validate(&self) -> Result<(), String> {
        if self.approvals.ttl_seconds == 0 || self.approvals.pending_ttl_seconds == 0 {
            return Err(
                "approvals: ttl_seconds and pending_ttl_seconds must be at least 1".to_owned(),
            );
        }
        if self.approvals.max_waiting_per_principal == 0 {
            return Err(
                "approvals: max_waiting_per_principal must be at least 1 (a rule without \
                 wait_seconds is how a call is refused at once)"
                    .to_owned(),
            );
        }
        if self.approvals.max_pending_per_principal == 0 || self.approvals.max_pending == 0 {
            return Err(
                "approvals: max_pending_per_principal and max_pending must be at least \
                        1 (a gated call can only ever run after a request waited)"
                    .to_owned(),
            );
        }
        let most = self.approvals.pending_ttl_seconds.min(MAX_WAIT_SECONDS);
        if let Some(rule) = self
            .approvals
            .require
            .iter()
            .find(|r| r.wait_seconds > most)
        {
            return Err(format!(
                "approvals: the rule for {:?} waits {} s, longer than a request is kept \
                 pending ({} s, pending_ttl_seconds) or the longest wait ({MAX_WAIT_SECONDS} s): \
                 lower its wait_seconds",
                rule.tool, rule.wait_seconds, self.approvals.pending_ttl_seconds,
            ));
        }
        for (i, rule) in self.rate_limits.iter().enumerate() {
            if rule.calls == 0 || rule.period_seconds == 0 || rule.burst == Some(0) {
                return Err(format!(
                    "rate_limits[{i}]: calls, period_seconds and burst must be at least 1"
                ));
            }
        }
        let mut names = std::collections::BTreeSet::new();
        for (i, rule) in self.rules.iter().enumerate() {
            let name = self.rule_name(i);
            if rule.tools.is_empty() {
                return Err(format!(
                    "{name}: tools is empty, so the rule matches nothing: name the tools it is for (\"*\" for all)"
                ));
            }
            if rule.name.as_ref().is_some_and(|n| n.trim().is_empty()) {
                return Err(format!(
                    "rules[{i}]: name is empty: name it, or leave name out"
                ));
            }
            if !names.insert(name.clone()) {
                return Err(format!(
                    "two rules are named {name:?}: give each its own name, so the audit says which decided"
                ));
            }
        }
        Ok(())
    }

    /// How the audit names rule `index`: its `name`, else `rules[index]`.
    pub fn rule_name(&self, index: usize) -> String {
        match self.rules.get(index).and_then(|r| r.name.as_ref()) {
            Some(name) => name.clone(),
            None => format!("rules[{index}]"),
        }
    }

    fn role_rules<'a>(&'a self, principal: &'a Principal) -> impl Iterator<Item = &'a RoleRules> {
        principal.roles.iter().filter_map(|r| self.roles.get(r))
    }

    /// Whether an upstream may ask `principal`, in a call to tool `name`, for an elicitation
    /// (`sampling`: for sampling): yes where none of the principal's roles says (the
    /// upstream's own setting decides), otherwise when one of them names the tool.
    pub fn may_be_asked(&self, principal: &Principal, name: &str, sampling: bool) -> bool {
        let mut said = false;
        for rules in self.role_rules(principal) {
            let patterns = if sampling {
                &rules.sampling
            } else {
                &rules.elicitation
            };
            if let Some(patterns) = patterns {
                said = true;
                if patterns.iter().any(|p| p.matches(name)) {
                    return true;
                }
            }
        }
        !said
    }

    /// Whether `principal`'s roles name `tool` in a `call` pattern.
    pub fn roles_grant_call(&self, principal: &Principal, tool: &str) -> bool {
        self.role_rules(principal)
            .any(|r| r.call.iter().any(|p| p.matches(tool)))
    }

    /// Whether an `allow` rule applies to `principal`'s calls of `tool` (its condition decides
    /// each call; see [`Policy::judge`]).
    fn allow_rule_applies(&self, principal: &Principal, tool: &str) -> bool {
        self.applying(principal, tool)
            .any(|(_, compiled)| compiled.effect == Effect::Allow)
    }

    /// The rules that apply to `principal`'s calls of `tool` (their conditions aside), in
    /// order, as [`judging`] keeps them.
    fn applying<'a>(
        &'a self,
        principal: &'a Principal,
        tool: &str,
    ) -> impl Iterator<Item = (judging::Matching, &'a judging::Compiled)> + 'a {
        let judging = self.judging.get(&self.rules);
        let matching = judging.matching(&self.rules, tool);
        (0..matching.len()).filter_map(move |i| {
            let m = matching[i];
            let compiled = &judging.rules[m.rule as usize];
            (compiled.everyone || self.rules[m.rule as usize].is_for(principal))
                .then_some((m, compiled))
        })
    }

    /// Whether `principal` may call `tool`, by name: a role's `call` pattern names it, or an
    /// `allow` rule applies (whose condition then decides each call).
    pub fn may_call(&self, principal: &Principal, tool: &str) -> bool {
        self.roles_grant_call(principal, tool) || self.allow_rule_applies(principal, tool)
    }

    /// Whether `principal` may see `tool` (in listings, and to be told `forbidden` rather
    /// than `not_found`).
    pub fn may_see(&self, principal: &Principal, tool: &str) -> bool {
        self.role_rules(principal)
            .any(|r| r.call.iter().chain(&r.list).any(|p| p.matches(tool)))
            || self.allow_rule_applies(principal, tool)
    }

    /// Whether any rule applies to `principal`'s calls of `tool`: only then has
    /// [`Policy::judge`] anything to evaluate.
    pub fn has_rules_for(&self, principal: &Principal, tool: &str) -> bool {
        self.applying(principal, tool).next().is_some()
    }

    /// Every rule, in order, as it stands for `principal`'s call of `tool` with `facts`.
    pub fn trace(&self, principal: &Principal, tool: &str, facts: &FactValues) -> Vec<RuleTrace> {
        let context = facts.context();
        self.rules
            .iter()
            .enumerate()
            .map(|(index, rule)| {
                let applies = rule.applies_to(principal, tool);
                RuleTrace {
                    name: self.rule_name(index),
                    effect: rule.effect,
                    applies,
                    condition: rule.when.as_ref().filter(|_| applies).map(|condition| {
                        match refuses_unfit(&rule.tools, condition, facts) {
                            Some(why) => Err(why),
                            None => condition.holds_in(&context),
                        }
                    }),
                }
            })
            .collect()
    }

    /// Decides a call of `tool` by `principal` that its roles grant (`granted`) or an `allow`
    /// rule might, with `facts` made (once) when a rule applies. In this order:
    ///
    /// 1. a `deny` rule that applies and holds refuses it;
    /// 2. an `allow` rule that applies and holds allows it;
    /// 3. else the roles decide, as they do without rules (`granted`);
    /// 4. then a `require_approval` rule that applies and holds requires an approval.
    ///
    /// A condition that cannot be evaluated refuses the call, whatever the rule's effect: a
    /// rule the operator wrote never silently stops applying.
    pub fn judge(
        &self,
        principal: &Principal,
        tool: &str,
        granted: bool,
        facts: &FactValues,
    ) -> Verdict {
        let judging = self.judging.get(&self.rules);
        let applying: Vec<(judging::Matching, &judging::Compiled)> =
            self.applying(principal, tool).collect();
        if applying.is_empty() {
            return if granted {
                Verdict::Proceed { approval: None }
            } else {
                Verdict::Refuse {
                    rule: "the roles".to_owned(),
                    why: format!("no role of {} calls {tool}", principal.id),
                    failed: false,
                }
            };
        }
        let context = facts.context();
        let mut refusal = None;
        let mut holds = |matching: judging::Matching, compiled: &judging::Compiled| -> bool {
            if !compiled.conditional {
                return true;
            }
            let index = matching.rule as usize;
            // The rule itself (`self.rules`) is read only off the fast path: its memory is
            // elsewhere, and cold.
            let condition = || self.rules[index].when.as_ref();
            // Only a rule that names the tool fails closed when it reads an argument the tool
            // does not take (see `refuses_unfit`, which says why).
            if matching.named
                && let Some(arguments) = facts.tool_arguments()
                && judging.reads_beyond(compiled, arguments)
                && let Some(condition) = condition()
                && let Some(why) = refuses_unfit(&self.rules[index].tools, condition, facts)
            {
                refusal.get_or_insert(Verdict::Refuse {
                    rule: self.rule_name(index),
                    why,
                    failed: true,
                });
                return false;
            }
            let held = match compiled.fast.map(|root| judging.program.holds(root, facts)) {
                Some(Ok(holds)) => Ok(holds),
                _ => condition().map_or(Ok(true), |c| c.holds_by_cel(&context)),
            };
            match held {
                Ok(holds) => holds,
                Err(error) => {
                    refusal.get_or_insert(Verdict::Refuse {
                        rule: self.rule_name(index),
                        why: format!("its condition could not be evaluated: {error}"),
                        failed: true,
                    });
                    false
                }
            }
        };
        let by = |effect| {
            applying
                .iter()
                .copied()
                .filter(move |(_, compiled)| compiled.effect == effect)
        };
        if let Some((matching, _)) = by(Effect::Deny).find(|&(m, c)| holds(m, c)) {
            let index = matching.rule as usize;
            return Verdict::Refuse {
                rule: self.rule_name(index),
                why: self.rules[index]
                    .reason
                    .clone()
                    .unwrap_or_else(|| "its condition holds".to_owned()),
                failed: false,
            };
        }
        let allowed = by(Effect::Allow).any(|(m, c)| holds(m, c));
        let approval = by(Effect::RequireApproval)
            .find(|&(m, c)| holds(m, c))
            .map(|(m, _)| self.rule_name(m.rule as usize));
        if let Some(refusal) = refusal {
            return refusal;
        }
        if !allowed && !granted {
            let names: Vec<String> = by(Effect::Allow)
                .map(|(m, _)| self.rule_name(m.rule as usize))
                .collect();
            if names.is_empty() {
                return Verdict::Refuse {
                    rule: "the roles".to_owned(),
                    why: format!("no role of {} calls {tool}", principal.id),
                    failed: false,
                };
            }
            return Verdict::Refuse {
                rule: names.join(", "),
                why: format!(
                    "no role of {} calls {tool}, and no allow rule's condition holds",
                    principal.id
                ),
                failed: false,
            };
        }
        Verdict::Proceed { approval }
    }

    /// Each rule, approval rule and rate limit that names `tool` (not by a wildcard) and whose
    /// condition reads an argument the tool, taking `arguments`, does not take, as "PLACE reads
    /// `args.F`": it refuses (a rule), gates (an approval rule) or counts (a rate limit) every
    /// call of the tool until one of them changes.
    pub fn unfit_for(&self, tool: &str, arguments: &[String]) -> Vec<String> {
        let rules = self.rules.iter().enumerate().filter_map(|(i, rule)| {
            Some((
                format!("rule {}", self.rule_name(i)),
                &rule.tools[..],
                rule.when.as_ref()?,
            ))
        });
        let approvals = self.approvals.require.iter().filter_map(|rule| {
            Some((
                format!("the approval rule for {:?}", rule.tool),
                std::slice::from_ref(&rule.tool),
                rule.when.as_ref()?,
            ))
        });
        let limits = self.rate_limits.iter().enumerate().filter_map(|(i, rule)| {
            Some((
                format!("rate_limits[{i}]"),
                rule.tools.as_deref()?,
                rule.when.as_ref()?,
            ))
        });
        rules
            .chain(approvals)
            .chain(limits)
            .filter_map(|(place, patterns, condition)| {
                let misfit = misfit(patterns, condition, tool, arguments)?;
                (!misfit.by_wildcard)
                    .then(|| format!("{place} reads `args.{}`", misfit.fields.join("`, `args.")))
            })
            .collect()
    }

    /// Whether calls of `tool` need an approval, by name (a rule with a condition counts:
    /// some of them do).
    pub fn requires_approval(&self, tool: &str) -> bool {
        self.approvals.require.iter().any(|r| r.tool.matches(tool))
    }

    /// Whether rules with conditions read the calls of `tool`: [`Policy::judge`]'s, or an
    /// approval or rate limit rule's with a `when`. Only then are a call's facts made.
    pub fn reads_calls_of(&self, tool: &str) -> bool {
        !self
            .judging
            .get(&self.rules)
            .matching(&self.rules, tool)
            .is_empty()
            || self
                .approvals
                .require
                .iter()
                .any(|r| r.when.is_some() && r.tool.matches(tool))
            || self
                .rate_limits
                .iter()
                .any(|r| r.when.is_some() && r.counts(TargetKind::Tool, tool))
    }

    /// How long a gated call of `kind` to `name` whose client waits is held for its decision:
    /// the longest `wait_seconds` of the `require` rules naming the tool; `None` for no wait
    /// (and for reads and gets, which are refused at once).
    pub fn approval_wait(&self, kind: TargetKind, name: &str) -> Option<std::time::Duration> {
        if kind != TargetKind::Tool {
            return None;
        }
        self.approvals
            .require
            .iter()
            .filter(|r| r.tool.matches(name))
            .map(|r| r.wait_seconds)
            .max()
            .filter(|&seconds| seconds > 0)
            .map(std::time::Duration::from_secs)
    }

    /// Whether `principal` may list and read the resource (or template) at larkgate `uri`.
    pub fn may_read_resource(&self, principal: &Principal, uri: &str) -> bool {
        self.role_rules(principal)
            .any(|r| r.resources.iter().any(|p| p.matches(uri)))
    }

    /// Whether `principal` may list and get prompt `name`.
    pub fn may_get_prompt(&self, principal: &Principal, name: &str) -> bool {
        self.role_rules(principal)
            .any(|r| r.prompts.iter().any(|p| p.matches(name)))
    }

    /// Whether a call of `kind` to `name` with `facts` needs an approval: a tool by
    /// `require` (a rule with a condition when it holds), a resource read by `resources`, a
    /// prompt get by `prompts`.
    pub fn requires_approval_of(
        &self,
        kind: TargetKind,
        name: &str,
        facts: Option<&FactValues>,
    ) -> bool {
        match kind {
            TargetKind::Tool => self.approvals.require.iter().any(|r| r.gates(name, facts)),
            TargetKind::Resource => self.approvals.resources.iter().any(|p| p.matches(name)),
            TargetKind::Prompt => self.approvals.prompts.iter().any(|p| p.matches(name)),
        }
    }
}

#[cfg(test)]
mod tests {
    use larkgate_store::{IssuerBinding, PrincipalKind};

    use super::*;

    fn p(pattern: &str) -> Pattern {
        Pattern::new(pattern).unwrap()
    }

    #[test]
    fn patterns_match_whole_names_with_star_as_any_run() {
        let table = [
            ("*", "anything", true),
            ("*", "", true),
            ("kv_*", "kv_get", true),
            ("kv_*", "kv_", true),
            ("kv_*", "xkv_get", false),
            ("kv_get", "kv_get", true),
            ("kv_get", "kv_get2", false),
            ("kv_get", "kv_ge", false),
            ("*__search", "github__search", true),
            ("*__search", "github__search_all", false),
            ("a*b*c", "aXXbYYc", true),
            ("a*b*c", "aXXbYY", false),
            ("a**", "a", true),
            ("github__*", "github__", true),
        ];
        for (pattern, name, expected) in table {
            assert_eq!(p(pattern).matches(name), expected, "{pattern} ~ {name}");
        }
    }

    #[test]
    fn malformed_patterns_are_refused() {
        for bad in ["", "kv get", "kv/get", "kv?", "[a-z]", "kv_get\n"] {
            assert!(Pattern::new(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_pathological_pattern_does_not_backtrack_exponentially() {
        let pattern = p(&"a*".repeat(50));
        let name = "a".repeat(10_000) + "b";
        assert!(!p(&(pattern.0.clone() + "c")).matches(&name));
        assert!(pattern.matches(&name[..10_000]));
    }

    fn principal(roles: &[&str]) -> Principal {
        Principal {
            id: "x".into(),
            kind: PrincipalKind::User,
            roles: roles.iter().map(|r| r.to_string()).collect(),
            issuer: IssuerBinding::Local,
        }
    }

    #[test]
    fn roles_narrow_who_upstreams_may_ask_only_where_they_say() {
        let policy: Policy = toml::from_str(
            "[roles.plain]\ncall = [\"*\"]\n\
             [roles.crm]\nelicitation = [\"crm__*\"]\nsampling = []\n\
             [roles.model]\nsampling = [\"crm__summarise\"]\n",
        )
        .unwrap();
        policy.validate().unwrap();
        for (roles, tool, elicitation, sampling) in [
            // No role says: the upstream's own settings decide.
            (&["plain"][..], "crm__ask", true, true),
            (&[], "crm__ask", true, true),
            (&["nobody_defines_this"], "crm__ask", true, true),
            // A role that says narrows to what it names.
            (&["crm"], "crm__ask", true, false),
            (&["crm"], "weather__ask", false, false),
            (&["plain", "crm"], "weather__ask", false, false),
            // Any role naming the tool is enough.
            (&["crm", "model"], "crm__summarise", true, true),
            (&["crm", "model"], "crm__ask", true, false),
        ] {
            let who = principal(roles);
            assert_eq!(
                (
                    policy.may_be_asked(&who, tool, false),
                    policy.may_be_asked(&who, tool, true)
                ),
                (elicitation, sampling),
                "{roles:?} {tool}"
            );
        }
    }

    /// `judge` of ada (role `writer`) calling `kv_set` with `key`, under `rules`.
    fn judge(rules: &str, granted: bool, key: &str) -> Verdict {
        let policy: Policy = toml::from_str(rules).unwrap();
        policy.validate().unwrap();
        let ada = Principal {
            id: "ada".into(),
            ..principal(&["writer"])
        };
        let args: larkgate_binding::Map = [("key".to_owned(), key.into())].into();
        let chain = larkgate_store::CallChain::default();
        policy.judge(
            &ada,
            "kv_set",
            granted,
            &Facts {
                args: &args,
                principal: &ada,
                tool: "kv_set",
                source: "builtin",
                alias: "",
                read_only: false,
                chain: &chain,
                now_ms: 0,
                arguments: None,
            }
            .values(),
        )
    }

    /// The judge as the rules read one by one, with the patterns matched and each condition
    /// evaluated on its own: what [`Policy::judge`] decides through [`judging`], which must
    /// decide alike.
    fn judge_by_scan(
        policy: &Policy,
        principal: &Principal,
        tool: &str,
        granted: bool,
        facts: &FactValues,
    ) -> Verdict {
        let applying: Vec<(usize, &Rule)> = policy
            .rules
            .iter()
            .enumerate()
            .filter(|(_, rule)| rule.applies_to(principal, tool))
            .collect();
        if applying.is_empty() {
            return if granted {
                Verdict::Proceed { approval: None }
            } else {
                Verdict::Refuse {
                    rule: "the roles".to_owned(),
                    why: format!("no role of {} calls {tool}", principal.id),
                    failed: false,
                }
            };
        }
        let context = facts.context();
        let mut refusal = None;
        let mut holds = |index: usize, rule: &Rule| -> bool {
            let Some(condition) = &rule.when else {
                return true;
            };
            if let Some(why) = refuses_unfit(&rule.tools, condition, facts) {
                refusal.get_or_insert(Verdict::Refuse {
                    rule: policy.rule_name(index),
                    why,
                    failed: true,
                });
                return false;
            }
            match condition.holds_in(&context) {
                Ok(holds) => holds,
                Err(error) => {
                    refusal.get_or_insert(Verdict::Refuse {
                        rule: policy.rule_name(index),
                        why: format!("its condition could not be evaluated: {error}"),
                        failed: true,
                    });
                    false
                }
            }
        };
        let by = |effect| {
            applying
                .iter()
                .filter(move |(_, rule)| rule.effect == effect)
        };
        if let Some((index, rule)) = by(Effect::Deny).find(|(i, rule)| holds(*i, rule)) {
            return Verdict::Refuse {
                rule: policy.rule_name(*index),
                why: rule
                    .reason
                    .clone()
                    .unwrap_or_else(|| "its condition holds".to_owned()),
                failed: false,
            };
        }
        let allowed = by(Effect::Allow).any(|(i, rule)| holds(*i, rule));
        let approval = by(Effect::RequireApproval)
            .find(|(i, rule)| holds(*i, rule))
            .map(|(i, _)| policy.rule_name(*i));
        if let Some(refusal) = refusal {
            return refusal;
        }
        if !allowed && !granted {
            let names: Vec<String> = by(Effect::Allow)
                .map(|(i, _)| policy.rule_name(*i))
                .collect();
            if names.is_empty() {
                return Verdict::Refuse {
                    rule: "the roles".to_owned(),
                    why: format!("no role of {} calls {tool}", principal.id),
                    failed: false,
                };
            }
            return Verdict::Refuse {
                rule: names.join(", "),
                why: format!(
                    "no role of {} calls {tool}, and no allow rule's condition holds",
                    principal.id
                ),
                failed: false,
            };
        }
        Verdict::Proceed { approval }
    }

    /// [`Policy::judge`] decides every call as reading the rules one by one does: rules for
    /// roles and principals, wildcards and names, rules that no longer fit the tool, conditions
    /// the fast path takes and ones only the cel crate evaluates, conditions that fail.
    #[test]
    fn the_judge_decides_as_reading_the_rules_one_by_one() {
        let text = r#"
            [[rules]]
            name = "deny tmp"
            tools = ["kv_*"]
            when = 'has(args.key) && args.key.startsWith("etc/")'
            effect = "deny"
            [[rules]]
            name = "writers"
            tools = ["kv_set", "fs__read"]
            roles = ["writer"]
            when = 'args.key.startsWith(principal.name + "/")'
            effect = "allow"
            [[rules]]
            name = "big"
            tools = ["kv_set"]
            when = 'size(args.value) > 3'
            effect = "require_approval"
            [[rules]]
            name = "ada only"
            tools = ["*"]
            principals = ["ada"]
            when = 'args.amount > 10'
            effect = "deny"
            [[rules]]
            name = "unfit"
            tools = ["fs__read"]
            when = 'args.path == "x"'
            effect = "deny"
            [[rules]]
            name = "always"
            tools = ["clock_*"]
            effect = "require_approval"
            [[rules]]
            name = "by cel"
            tools = ["kv_get", "fs__read"]
            when = '(args.key + "").endsWith("!")'
            effect = "deny"
        "#;
        let policy: Policy = toml::from_str(text).unwrap();
        policy.validate().unwrap();
        let people = [
            Principal {
                id: "ada".into(),
                ..principal(&["writer"])
            },
            Principal {
                id: "bo".into(),
                ..principal(&["reader"])
            },
        ];
        let takes = |names: &[&str]| -> std::sync::Arc<[String]> {
            names.iter().map(|n| n.to_string()).collect()
        };
        let tools: [(&str, Option<std::sync::Arc<[String]>>); 5] = [
            ("kv_set", Some(takes(&["key", "value"]))),
            ("kv_get", Some(takes(&["key"]))),
            ("fs__read", Some(takes(&["key"]))),
            ("clock_now", None),
            ("other", Some(takes(&[]))),
        ];
        let arguments = [
            serde_json::json!({}),
            serde_json::json!({"key": "etc/passwd"}),
            serde_json::json!({"key": "ada/notes", "value": "long value"}),
            serde_json::json!({"key": "bo/x", "value": "v", "amount": 1}),
            serde_json::json!({"key": 7, "amount": 11}),
            serde_json::json!({"key": "a!", "amount": 3}),
            serde_json::json!({"key": "x", "amount": "11", "path": "x"}),
        ];
        let chain = larkgate_store::CallChain::default();
        let mut decided = 0;
        let mut seen = std::collections::BTreeSet::new();
        for principal in &people {
            for (tool, takes) in &tools {
                for args in &arguments {
                    let larkgate_binding::Value::Map(args) =
                        larkgate_binding::from_json(args, larkgate_binding::Limits::default())
                            .unwrap()
                    else {
                        panic!("arguments are a map")
                    };
                    let facts = Facts {
                        args: &args,
                        principal,
                        tool,
                        source: "builtin",
                        alias: "",
                        read_only: false,
                        chain: &chain,
                        now_ms: 0,
                        arguments: takes.as_ref(),
                    }
                    .values();
                    for granted in [true, false] {
                        let fast = policy.judge(principal, tool, granted, &facts);
                        let scanned = judge_by_scan(&policy, principal, tool, granted, &facts);
                        assert_eq!(
                            fast, scanned,
                            "{} calling {tool} with {args:?}",
                            principal.id
                        );
                        seen.insert(match &fast {
                            Verdict::Proceed { approval: None } => "proceed".to_owned(),
                            Verdict::Proceed {
                                approval: Some(rule),
                            } => format!("approval {rule}"),
                            Verdict::Refuse { rule, failed, .. } => {
                                format!("refuse {rule} {failed}")
                            }
                        });
                        decided += 1;
                    }
                    assert_eq!(
                        policy.has_rules_for(principal, tool),
                        policy.rules.iter().any(|r| r.applies_to(principal, tool)),
                        "{tool}"
                    );
                }
            }
        }
        assert_eq!(decided, 2 * 5 * 7 * 2);
        // Every way a call can be decided was decided here.
        for way in [
            "proceed",
            "approval big",
            "approval always",
            "refuse deny tmp false",
            "refuse ada only false",
            "refuse unfit true",
            "refuse by cel false",
            "refuse writers false",
            "refuse the roles false",
        ] {
            assert!(seen.contains(way), "{way} not in {seen:?}");
        }
        assert!(
            seen.iter()
                .any(|w| w.ends_with(" true") && w != "refuse unfit true"),
            "{seen:?}"
        );
        // A copy judges alike, with tables of its own.
        let copy = policy.clone();
        assert_eq!(copy, policy);
    }

    #[test]
    fn rules_are_judged_deny_first_then_allow_then_the_roles_then_approvals() {
        let deny = "[[rules]]\nname = \"d\"\ntools = [\"kv_*\"]\nwhen = 'args.key == \"x\"'\neffect = \"deny\"\nreason = \"no x\"\n";
        let allow = "[[rules]]\nname = \"a\"\ntools = [\"kv_set\"]\nroles = [\"writer\"]\nwhen = 'args.key.startsWith(\"ada/\")'\neffect = \"allow\"\n";
        let approve = "[[rules]]\ntools = [\"kv_set\"]\nprincipals = [\"ada\"]\nwhen = 'size(args.key) > 5'\neffect = \"require_approval\"\n";
        let other = "[[rules]]\ntools = [\"kv_set\"]\nroles = [\"reader\"]\neffect = \"deny\"\n";
        let broken = "[[rules]]\nname = \"b\"\ntools = [\"kv_set\"]\nwhen = 'args.missing == 1'\neffect = \"allow\"\n";
        let proceed = |approval: Option<&str>| Verdict::Proceed {
            approval: approval.map(str::to_owned),
        };
        let refused = |verdict: &Verdict, rule: &str| matches!(verdict, Verdict::Refuse { rule: r, .. } if r == rule);
        // A deny that holds beats an allow and the roles.
        let both = format!("{allow}{deny}");
        assert!(refused(&judge(&both, true, "x"), "d"));
        assert_eq!(
            judge(&both, true, "x"),
            Verdict::Refuse {
                rule: "d".into(),
                why: "no x".into(),
                failed: false,
            }
        );
        // An allow that holds lets through what the roles do not; one that does not hold
        // leaves the roles to decide.
        assert_eq!(judge(allow, false, "ada/a"), proceed(None));
        assert!(refused(&judge(allow, false, "bob/a"), "a"));
        assert_eq!(judge(allow, true, "bob/a"), proceed(None));
        // A rule for other roles does not apply; nothing applies: the roles decide.
        assert_eq!(judge(other, true, "k"), proceed(None));
        assert!(refused(&judge(other, false, "k"), "the roles"));
        // An approval rule that holds names itself for the gate.
        assert_eq!(judge(approve, true, "longer"), proceed(Some("rules[0]")));
        assert_eq!(judge(approve, true, "short"), proceed(None));
        // A condition that cannot be evaluated refuses, even on an allow rule.
        let verdict = judge(broken, true, "k");
        assert!(refused(&verdict, "b"), "{verdict:?}");
        assert!(
            matches!(&verdict, Verdict::Refuse { why, failed: true, .. } if why.contains("could not be evaluated")),
            "{verdict:?}"
        );
    }

    #[test]
    fn an_allow_rule_makes_its_tools_visible_and_callable_by_name() {
        let policy: Policy = toml::from_str(
            "[roles.viewer]\ncall = [\"kv_get\"]\n[[rules]]\ntools = [\"kv_set\"]\nroles = [\"viewer\"]\nwhen = 'true'\neffect = \"allow\"\n",
        )
        .unwrap();
        let viewer = principal(&["viewer"]);
        assert!(policy.may_see(&viewer, "kv_set") && policy.may_call(&viewer, "kv_set"));
        assert!(!policy.roles_grant_call(&viewer, "kv_set"));
        assert!(!policy.may_see(&principal(&["other"]), "kv_set"));
    }

    #[test]
    fn rules_that_match_nothing_or_share_a_name_are_refused() {
        let cases = [
            (
                "[[rules]]\ntools = []\neffect = \"deny\"\n",
                "tools is empty",
            ),
            (
                "[[rules]]\nname = \"x\"\ntools = [\"a\"]\neffect = \"deny\"\n[[rules]]\nname = \"x\"\ntools = [\"b\"]\neffect = \"allow\"\n",
                "two rules are named \"x\"",
            ),
            (
                "[[rules]]\nname = \" \"\ntools = [\"a\"]\neffect = \"deny\"\n",
                "name is empty",
            ),
        ];
        for (text, says) in cases {
            let policy: Policy = toml::from_str(text).unwrap();
            let error = policy.validate().expect_err(text);
            assert!(error.contains(says), "{text}: {error}");
        }
        for (text, says) in [
            (
                "[[rules]]\ntools = [\"a\"]\neffect = \"maybe\"\n",
                "unknown variant",
            ),
            (
                "[[rules]]\ntools = [\"a\"]\neffect = \"deny\"\nwhen = 'foo'\n",
                "reads `foo`",
            ),
            (
                "[[rules]]\ntools = [\"a\"]\neffect = \"deny\"\nwhn = 'true'\n",
                "unknown field",
            ),
        ] {
            let error = toml::from_str::<Policy>(text).expect_err(text).to_string();
            assert!(error.contains(says), "{text}: {error}");
        }
    }

    #[test]
    fn the_default_policy_grants_admin_everything_and_others_nothing() {
        let policy = Policy::default();
        assert!(policy.may_call(&principal(&["admin"]), "kv_set"));
        assert!(!policy.may_see(&principal(&["author"]), "kv_get"));
        assert!(!policy.may_see(&principal(&[]), "kv_get"));
        assert!(!policy.requires_approval("kv_set"));
    }

    #[test]
    fn list_grants_visibility_and_call_grants_both() {
        let policy: Policy = toml::from_str(
            r#"
            [roles.viewer]
            list = ["*"]
            call = ["kv_get"]
            [approvals]
            require = ["kv_delete"]
            "#,
        )
        .unwrap();
        let viewer = principal(&["viewer", "unknown-role"]);
        assert!(policy.may_see(&viewer, "kv_set"));
        assert!(!policy.may_call(&viewer, "kv_set"));
        assert!(policy.may_call(&viewer, "kv_get"));
        assert!(policy.requires_approval("kv_delete"));
        assert_eq!(policy.approvals.ttl_seconds, 3600);
    }

    #[test]
    fn a_require_rule_is_a_pattern_or_a_table_with_its_wait() {
        let policy: Policy = toml::from_str(
            r#"
            [approvals]
            require = ["kv_delete", { tool = "kv_*", wait_seconds = 120 }, { tool = "weather__*" }]
            "#,
        )
        .unwrap();
        policy.validate().unwrap();
        let wait = |kind, name| policy.approval_wait(kind, name).map(|d| d.as_secs());
        // The longest wait of the rules naming the tool; none where no rule waits.
        assert_eq!(wait(TargetKind::Tool, "kv_delete"), Some(120));
        assert_eq!(wait(TargetKind::Tool, "kv_set"), Some(120));
        assert_eq!(wait(TargetKind::Tool, "weather__forecast"), None);
        assert_eq!(wait(TargetKind::Tool, "clock_now"), None);
        assert_eq!(wait(TargetKind::Resource, "kv_set"), None);
        assert!(policy.requires_approval("weather__forecast"));
        // Written back as it was read: a bare pattern where nothing waits.
        let text = toml::to_string(&policy.approvals).unwrap();
        assert!(
            text.contains(
                r#"require = ["kv_delete", { tool = "kv_*", wait_seconds = 120 }, "weather__*"]"#
            ),
            "{text}"
        );
    }

    #[test]
    fn a_malformed_or_too_long_wait_is_refused_with_what_to_change() {
        let table = [
            (
                r#"require = [{ tool = "kv get", wait_seconds = 5 }]"#,
                "not a tool pattern",
            ),
            (
                r#"require = [{ tool = "kv_set", wait = 5 }]"#,
                "a tool pattern, or a table",
            ),
            (
                r#"require = [{ wait_seconds = 5 }]"#,
                "a tool pattern, or a table",
            ),
            (
                r#"require = [{ tool = "kv_set", wait_seconds = -1 }]"#,
                "a tool pattern, or a table",
            ),
            (r#"require = [7]"#, "a tool pattern, or a table"),
        ];
        for (line, says) in table {
            let err = toml::from_str::<Policy>(&format!("[approvals]\n{line}\n")).unwrap_err();
            assert!(err.to_string().contains(says), "{line}: {err}");
        }
        let too_long = [
            "require = [{ tool = \"kv_set\", wait_seconds = 61 }]\npending_ttl_seconds = 60",
            "require = [{ tool = \"kv_set\", wait_seconds = 3601 }]\npending_ttl_seconds = 7200",
        ];
        for text in too_long {
            let policy: Policy = toml::from_str(&format!("[approvals]\n{text}\n")).unwrap();
            let err = policy.validate().unwrap_err();
            assert!(
                err.contains("\"kv_set\" waits") && err.contains("lower its wait_seconds"),
                "{err}"
            );
        }
    }

    #[test]
    fn configuration_errors_name_the_key() {
        let err = toml::from_str::<Policy>("[roles.viewer]\ncall = [\"kv get\"]\n").unwrap_err();
        assert!(err.to_string().contains("not a tool pattern"), "{err}");
        let err = toml::from_str::<Policy>("[roles.viewer]\ncal = []\n").unwrap_err();
        assert!(err.to_string().contains("unknown field `cal`"), "{err}");
        let policy: Policy =
            toml::from_str("[[rate_limits]]\nper = \"principal\"\ncalls = 0\nperiod_seconds = 1\n")
                .unwrap();
        assert!(policy.validate().unwrap_err().contains("rate_limits[0]"));
        for zero in ["max_pending_per_principal = 0", "max_pending = 0"] {
            let policy: Policy = toml::from_str(&format!("[approvals]\n{zero}\n")).unwrap();
            let err = policy.validate().unwrap_err();
            assert!(
                err.contains("max_pending_per_principal and max_pending"),
                "{err}"
            );
        }
        let defaults = Policy::default().approvals;
        assert_eq!(
            (defaults.max_pending_per_principal, defaults.max_pending),
            (50, 1000)
        );
    }

    #[test]
    fn resource_and_prompt_grants_are_their_own_and_fail_closed() {
        let policy: Policy = toml::from_str(
            r#"
            [roles.reader]
            call = ["*"]
            resources = ["larkgate://docs/*"]
            prompts = ["docs__*"]
            [approvals]
            resources = ["larkgate://docs/secret/*"]
            "#,
        )
        .unwrap();
        let reader = principal(&["reader"]);
        let table = [
            ("larkgate://docs/readme", true),
            ("larkgate://docs/", true),
            // Another alias that starts like it: the `/` after the alias keeps them apart.
            ("larkgate://docs2/readme", false),
            ("larkgate://other/larkgate://docs/readme", false),
            ("docs://readme", false),
        ];
        for (uri, allowed) in table {
            assert_eq!(policy.may_read_resource(&reader, uri), allowed, "{uri}");
        }
        assert!(policy.may_get_prompt(&reader, "docs__summary"));
        assert!(!policy.may_get_prompt(&reader, "other__summary"));
        // `call = ["*"]` grants tools only.
        let tools_only: Policy = toml::from_str("[roles.r]\ncall = [\"*\"]\n").unwrap();
        let r = principal(&["r"]);
        assert!(!tools_only.may_read_resource(&r, "larkgate://docs/readme"));
        assert!(!tools_only.may_get_prompt(&r, "docs__summary"));
        // Approvals: reads only where a resource pattern names them, and tool patterns never.
        assert!(policy.requires_approval_of(
            TargetKind::Resource,
            "larkgate://docs/secret/k",
            None
        ));
        assert!(!policy.requires_approval_of(TargetKind::Resource, "larkgate://docs/readme", None));
        let star: Policy = toml::from_str("[approvals]\nrequire = [\"*\"]\n").unwrap();
        assert!(star.requires_approval_of(TargetKind::Tool, "kv_get", None));
        assert!(!star.requires_approval_of(TargetKind::Resource, "larkgate://docs/readme", None));
        assert!(!star.requires_approval_of(TargetKind::Prompt, "docs__summary", None));
        // The default policy's admin reads everything; nobody else anything.
        let default = Policy::default();
        assert!(default.may_read_resource(&principal(&["admin"]), "larkgate://docs/x"));
        assert!(default.may_get_prompt(&principal(&["admin"]), "docs__x"));
        assert!(!default.may_read_resource(&principal(&["author"]), "larkgate://docs/x"));
    }

    #[test]
    fn malformed_resource_patterns_are_refused_with_what_to_write() {
        for bad in ["", "larkgate://docs/ x", "larkgate://docs/\n", "\t"] {
            let err = UriPattern::new(bad).unwrap_err();
            assert!(err.contains("larkgate://ALIAS/"), "{bad:?}: {err}");
        }
        let err = toml::from_str::<Policy>("[roles.r]\nresources = [\"a b\"]\n").unwrap_err();
        assert!(err.to_string().contains("not a resource pattern"), "{err}");
    }

    #[test]
    fn a_rate_limit_counts_what_it_names_or_everything_when_it_names_nothing() {
        let rules: Policy = toml::from_str(
            r#"
            [[rate_limits]]
            per = "principal"
            calls = 1
            period_seconds = 1
            [[rate_limits]]
            per = "principal"
            tools = ["kv_set"]
            calls = 1
            period_seconds = 1
            [[rate_limits]]
            per = "principal"
            resources = ["larkgate://docs/*"]
            calls = 1
            period_seconds = 1
            "#,
        )
        .unwrap();
        let [all, tools, reads] = &rules.rate_limits[..] else {
            panic!("three rules");
        };
        let table = [
            (TargetKind::Tool, "kv_set", [true, true, false]),
            (TargetKind::Tool, "kv_get", [true, false, false]),
            (
                TargetKind::Resource,
                "larkgate://docs/a",
                [true, false, true],
            ),
            (
                TargetKind::Resource,
                "larkgate://web/a",
                [true, false, false],
            ),
            (TargetKind::Prompt, "docs__p", [true, false, false]),
        ];
        for (kind, name, expected) in table {
            let counted = [all, tools, reads].map(|rule| rule.counts(kind, name));
            assert_eq!(counted, expected, "{kind:?} {name}");
        }
    }
}
