//! `larkgate check`: the configuration validated without starting anything (no connection, no
//! worker; the data directory is only read, and only if its database exists), with warnings
//! for what is valid but almost certainly not meant: a policy that lets no role call anything,
//! a pattern (role, approval or rate limit) that matches no tool there is or could be, and a
//! role given to a principal that neither the policy nor larkgate defines.

use std::io::Write;
use std::path::Path;

use larkgate_platform::policy::{
    Pattern, Policy, ROLE_ADMIN, ROLE_APPROVER, ROLE_AUTHOR, ROLE_PUBLISHER, misfit,
};
use larkgate_platform::registry::{Registry, SEPARATOR, schema_arguments, script_tool_name};
use larkgate_platform::{approvals, capabilities};
use larkgate_store::{IssuerBinding, Principal, PrincipalStore, SqliteStore, UpstreamStore};

use crate::config::{Config, Located};

/// The tools a configuration can refer to: the built-in ones by name, and the namespaces
/// (`script__`, `<alias>__`) whose tools are known only once larkgate runs.
#[derive(Debug, Default)]
pub(crate) struct KnownTools {
    names: Vec<String>,
    namespaces: Vec<String>,
    /// The argument names of each built-in tool whose input schema lists them.
    arguments: std::collections::BTreeMap<String, Vec<String>>,
    /// The same for the tools beyond the file: upstreams' pinned tools, published scripts.
    outside: std::collections::BTreeMap<String, Vec<String>>,
}

impl KnownTools {
    /// The built-in tools, published scripts, and the upstreams `aliases`.
    pub(crate) fn new(aliases: impl IntoIterator<Item = String>) -> anyhow::Result<Self> {
        let mut registry = Registry::new();
        capabilities::register(&mut registry)?;
        approvals::tools::register(&mut registry)?;
        let mut names: Vec<String> = registry.iter().map(|t| t.spec.name.clone()).collect();
        let arguments = registry
            .iter()
            .filter_map(|t| arguments_of(&t.spec))
            .collect();
        names.extend(larkgate_scripts::platform_tool_names()?);
        let script_namespace = script_tool_name("");
        let mut namespaces = vec![script_namespace];
        namespaces.extend(aliases.into_iter().map(|a| format!("{a}{SEPARATOR}")));
        Ok(KnownTools {
            names,
            namespaces,
            arguments,
            outside: Default::default(),
        })
    }

    /// Whether `pattern` matches a tool there is, or one that could come to be in a namespace.
    fn could_match(&self, pattern: &Pattern) -> bool {
        if self.names.iter().any(|name| pattern.matches(name)) {
            return true;
        }
        let text = String::from(pattern.clone());
        let literal = text.split('*').next().unwrap_or_default();
        let wild = text.contains('*');
        self.namespaces.iter().any(|namespace| {
            if wild {
                literal.starts_with(namespace.as_str()) || namespace.starts_with(literal)
            } else {
                literal.len() > namespace.len() && literal.starts_with(namespace.as_str())
            }
        })
    }
}

/// The arguments the conditions of `policy` read that a tool they can match does not take.
///
/// For a built-in tool: an error for a rule that names the tool itself (its condition fails,
/// and refuses, on every call of it), a warning for one that matches it by a wildcard (it fails
/// on that tool's calls unless it tests `has(args.FIELD)` first).
///
/// For an upstream's tool (its pinned definition) or a published script's: a warning either
/// way, since those tools change outside the file. A rule that names such a tool and reads an
/// argument it does not take refuses every call of it while that lasts (it fails closed).
pub(crate) fn argument_problems(policy: &Policy, known: &KnownTools) -> (Vec<String>, Vec<String>) {
    let (mut errors, mut warnings) = (Vec::new(), Vec::new());
    let rules = policy.rules.iter().enumerate().filter_map(|(i, rule)| {
        let when = rule.when.as_ref()?;
        Some((policy.rule_name(i), rule.tools.as_slice(), when))
    });
    let approvals = policy.approvals.require.iter().filter_map(|rule| {
        let when = rule.when.as_ref()?;
        Some((
            format!("policy.approvals.require {:?}", rule.tool),
            std::slice::from_ref(&rule.tool),
            when,
        ))
    });
    let empty: Vec<Pattern> = Vec::new();
    let limits = policy
        .rate_limits
        .iter()
        .enumerate()
        .filter_map(|(i, rule)| {
            let when = rule.when.as_ref()?;
            Some((
                format!("policy.rate_limits[{i}]"),
                rule.tools.as_deref().unwrap_or(&empty),
                when,
            ))
        });
    let tools = known
        .arguments
        .iter()
        .map(|(tool, arguments)| (tool, arguments, true))
        .chain(
            known
                .outside
                .iter()
                .map(|(tool, arguments)| (tool, arguments, false)),
        );
    let tools: Vec<_> = tools.collect();
    for (place, patterns, when) in rules.chain(approvals).chain(limits) {
        for &(tool, arguments, builtin) in &tools {
            let Some(misfit) = misfit(patterns, when, tool, arguments) else {
                continue;
            };
            for field in &misfit.fields {
                let closest = arguments
                    .iter()
                    .min_by_key(|name| strsim::levenshtein(name, field))
                    .map_or_else(String::new, |name| format!("; did you mean `args.{name}`?"));
                let takes = if arguments.is_empty() {
                    "it takes no arguments".to_owned()
                } else {
                    format!("it takes {}", arguments.join(", "))
                };
                let problem = format!(
                    "{place}: its condition reads `args.{field}`, which {tool} does not take ({takes}){closest}"
                );
                if misfit.by_wildcard {
                    warnings.push(format!(
                        "{problem}: the condition fails, and refuses, on {tool}'s calls unless it tests has(args.{field}) first"
                    ));
                } else if builtin {
                    errors.push(format!(
                        "{problem}: the condition would fail, and refuse, on every call of it"
                    ));
                } else {
                    warnings.push(format!(
                        "{problem}: the rule refuses every call of {tool} until the rule or the tool changes"
                    ));
                }
            }
        }
    }
    (errors, warnings)
}

/// [`argument_problems`] for `policy` with the upstreams `aliases` and the tools beyond the
/// file there are now (`outside`: upstreams' pinned tools, published scripts), as `serve`,
/// `stdio` and the commands that call tools check it before they start (and a reload before it
/// applies a file): the errors as one, the warnings to log.
pub(crate) fn rules_fit_their_tools(
    policy: &Policy,
    aliases: impl IntoIterator<Item = String>,
    outside: impl IntoIterator<Item = (String, Vec<String>)>,
) -> anyhow::Result<Vec<String>> {
    // The tools' schemas are read only when a condition could read them.
    if !has_conditions(policy) {
        return Ok(Vec::new());
    }
    let mut known = KnownTools::new(aliases)?;
    known.outside.extend(outside);
    let (errors, warnings) = argument_problems(policy, &known);
    if !errors.is_empty() {
        anyhow::bail!("{}", errors.join("\n"));
    }
    Ok(warnings)
}

/// Whether any rule, approval rule or rate limit of `policy` has a condition.
pub(crate) fn has_conditions(policy: &Policy) -> bool {
    policy.rules.iter().any(|r| r.when.is_some())
        || policy.approvals.require.iter().any(|r| r.when.is_some())
        || policy.rate_limits.iter().any(|r| r.when.is_some())
}

/// The tools beyond the file that `store` holds, with the arguments each takes: the pinned,
/// approved tools of the upstreams `upstreams` (configured and added), and the published
/// scripts. What cannot be read is left out (an upstream's pins that do not parse, a script
/// the engine no longer takes), as `serve` leaves it out.
pub(crate) async fn stored_tools(
    store: &dyn larkgate_store::Store,
    upstreams: &[larkgate_upstream::config::UpstreamConfig],
) -> anyhow::Result<Vec<(String, Vec<String>)>> {
    let mut tools = Vec::new();
    let added = store.upstreams().await?.into_iter().filter_map(|record| {
        serde_json::from_str::<larkgate_upstream::config::UpstreamConfig>(&record.config).ok()
    });
    for upstream in upstreams.iter().cloned().chain(added) {
        let alias = upstream.alias.as_str();
        let pinned: Vec<rmcp::model::Tool> = store
            .pins(alias)
            .await?
            .iter()
            .filter(|pin| pin.status == larkgate_store::PinStatus::Approved)
            .filter_map(|pin| serde_json::from_str(&pin.definition).ok())
            .collect();
        let adoption = larkgate_upstream::tools::adopt(alias, &pinned, upstream.approval);
        tools.extend(adoption.specs.iter().filter_map(arguments_of));
    }
    for version in store.latest_versions().await? {
        if let Ok(spec) = larkgate_scripts::published_tool_spec(&version) {
            tools.extend(arguments_of(&spec));
        }
    }
    Ok(tools)
}

/// A tool's name and the arguments its input schema lists, when it lists them.
pub(crate) fn arguments_of(
    spec: &larkgate_platform::registry::ToolSpec,
) -> Option<(String, Vec<String>)> {
    let arguments = schema_arguments(&spec.input_schema)?;
    Some((spec.name.clone(), arguments.to_vec()))
}

/// What is valid in `[[servers]]` but almost certainly a mistake: an upstream nobody
/// configured, a tool pattern that matches no tool.
pub(crate) fn server_warnings(
    servers: &[larkgate_platform::servers::ServerSpec],
    known: &KnownTools,
) -> Vec<String> {
    let mut warnings = Vec::new();
    for server in servers {
        if let Some(alias) = &server.upstream
            && !known
                .namespaces
                .contains(&larkgate_platform::registry::prefixed_name(alias, ""))
        {
            warnings.push(format!(
                "servers.{}: no upstream has the alias {alias:?} (in the file, or added with \
                 `larkgate upstream add`), so the server serves none of its tools",
                server.name
            ));
        }
        for (key, patterns) in [("tools", &server.tools), ("pinned", &server.pinned)] {
            for pattern in patterns {
                if !known.could_match(pattern) {
                    warnings.push(format!(
                        "servers.{}.{key}: the pattern {pattern:?} matches no tool (built-in \
                         tools, `script__*`, and `ALIAS__*` for the configured upstreams); \
                         check its spelling",
                        server.name
                    ));
                }
            }
        }
    }
    warnings
}

/// The roles larkgate itself gives meaning to (its platform tools' fixed roles).
const FIXED_ROLES: &[&str] = &[ROLE_ADMIN, ROLE_APPROVER, ROLE_AUTHOR, ROLE_PUBLISHER];

/// What is valid in `policy` but almost certainly a mistake, one sentence each.
pub(crate) fn warnings(
    policy: &Policy,
    known: &KnownTools,
    principals: &[Principal],
) -> Vec<String> {
    let mut warnings = Vec::new();
    if policy.roles.values().all(|rules| rules.call.is_empty()) {
        warnings.push(
            "the policy lets no role call any tool: only the platform tools, by their fixed \
             roles, can be called; add `call = [...]` under a [policy.roles.NAME]"
                .to_owned(),
        );
    }
    let mut unmatched = |pattern: &Pattern, place: String| {
        if !known.could_match(pattern) {
            warnings.push(format!(
                "{place}: the pattern {pattern:?} matches no tool (built-in tools, `script__*`, \
                 and `ALIAS__*` for the configured upstreams); check its spelling"
            ));
        }
    };
    for (role, rules) in &policy.roles {
        for pattern in &rules.list {
            unmatched(pattern, format!("policy.roles.{role}.list"));
        }
        for pattern in &rules.call {
            unmatched(pattern, format!("policy.roles.{role}.call"));
        }
    }
    for rule in &policy.approvals.require {
        unmatched(&rule.tool, "policy.approvals.require".to_owned());
    }
    for (i, rule) in policy.rules.iter().enumerate() {
        for pattern in &rule.tools {
            unmatched(pattern, format!("rule {}", policy.rule_name(i)));
        }
    }
    for (i, rule) in policy.rate_limits.iter().enumerate() {
        for pattern in rule.tools.iter().flatten() {
            unmatched(pattern, format!("policy.rate_limits[{i}].tools"));
        }
    }
    let conditions = policy
        .rules
        .iter()
        .enumerate()
        .filter_map(|(i, rule)| {
            Some((format!("rule {}", policy.rule_name(i)), rule.when.as_ref()?))
        })
        .chain(
            policy
                .rate_limits
                .iter()
                .enumerate()
                .filter_map(|(i, rule)| {
                    Some((format!("policy.rate_limits[{i}]"), rule.when.as_ref()?))
                }),
        )
        .chain(policy.approvals.require.iter().filter_map(|rule| {
            Some((
                format!("policy.approvals.require {:?}", rule.tool),
                rule.when.as_ref()?,
            ))
        }));
    for (place, condition) in conditions {
        if condition.is_constant() {
            warnings.push(format!(
                "{place}: its condition {:?} reads none of args, principal, tool, chain and \
                 now, so it is true of every call or of none: leave `when` out, or the rule",
                condition.source()
            ));
        } else if let Some(value) = condition.always() {
            warnings.push(format!(
                "{place}: its condition {:?} is {value} on every call it can be evaluated on \
                 (a value compared with itself, or a part that decides the whole): compare \
                 with what you meant, or leave `when` out",
                condition.source()
            ));
        }
    }
    // Resource patterns name larkgate URIs: one that cannot begin like one matches nothing.
    let resource_places = policy
        .roles
        .iter()
        .flat_map(|(role, rules)| {
            rules
                .resources
                .iter()
                .map(move |p| (p, format!("policy.roles.{role}.resources")))
        })
        .chain(
            policy
                .approvals
                .resources
                .iter()
                .map(|p| (p, "policy.approvals.resources".to_owned())),
        );
    for (pattern, place) in resource_places {
        let text = pattern.as_str();
        let literal = text.split('*').next().unwrap_or_default();
        let prefix = larkgate_platform::catalog::URI_PREFIX;
        if !(literal.starts_with(prefix) || prefix.starts_with(literal)) {
            warnings.push(format!(
                "{place}: the pattern {text:?} matches no resource: larkgate lists upstream \
                 resources as {prefix}ALIAS/URI (write, for example, \"{prefix}docs/*\")"
            ));
        }
    }
    for principal in principals {
        warnings.extend(undefined_roles(policy, &principal.id, &principal.roles));
    }
    warnings
}

/// A warning for each of `roles` (given to `principal`) that neither the policy defines nor
/// larkgate knows: such a role grants nothing.
pub(crate) fn undefined_roles(policy: &Policy, principal: &str, roles: &[String]) -> Vec<String> {
    roles
        .iter()
        .filter(|role| !policy.roles.contains_key(*role) && !FIXED_ROLES.contains(&role.as_str()))
        .map(|role| {
            format!(
                "the principal {principal:?} has the role {role:?}, which no [policy.roles] \
                 defines and larkgate does not know: it grants nothing"
            )
        })
        .collect()
}

/// Warnings of a policy that leaves nobody able to administer: one that defines roles but
/// not `admin` (the first start's `admin`, and every principal with that role, may then call
/// larkgate's platform tools only, not a built-in or federated one), and a store whose
/// principals hold no `admin` role (read only where `read_store`: SQLite's).
fn admin_warnings(config: &Config, principals: &[Principal], read_store: bool) -> Vec<String> {
    let mut warnings = Vec::new();
    let roles = &config.policy.roles;
    let admin_calls = roles.get(ROLE_ADMIN).is_some_and(|r| !r.call.is_empty());
    if !roles.is_empty() && !admin_calls {
        warnings.push(format!(
            "the policy grants the {ROLE_ADMIN} role no tools: the first start's `admin`, and \
             every principal with that role, may call larkgate's platform tools (principals, \
             tokens, approvals, scripts, upstreams) but no built-in or federated tool (a call \
             of one is answered not_found); add [policy.roles.{ROLE_ADMIN}] call = [\"*\"] \
             to keep them"
        ));
    }
    if read_store
        && !principals.is_empty()
        && !principals
            .iter()
            .any(|p| p.roles.iter().any(|r| r == ROLE_ADMIN))
    {
        warnings.push(format!(
            "no principal has the {ROLE_ADMIN} role: nobody can manage principals, tokens or \
             upstreams over MCP or in the console; give one the role (`larkgate principal \
             set-roles NAME --roles {ROLE_ADMIN}`)"
        ));
    }
    warnings
}

/// Principals bound to an issuer the configuration does not name (nobody signs in as them
/// through a provider), and those registered before principals were bound to issuers, which
/// the first sign-in of an account of their name, through any configured issuer, binds.
fn sign_in_warnings(
    sign_in: &larkgate_edge::sign_in::SignInConfig,
    principals: &[Principal],
) -> Vec<String> {
    let mut warnings: Vec<String> = principals
        .iter()
        .filter_map(|p| match &p.issuer {
            IssuerBinding::Issuer(name) if sign_in.named(name).is_err() => Some(format!(
                "the principal {:?} signs in through {name:?}, which no [[sign_in.issuers]] is \
                 named: no account signs in as it (name the issuer so, or run `larkgate \
                 principal set-issuer {} --issuer ISSUER`)",
                p.id, p.id
            )),
            _ => None,
        })
        .collect();
    let waiting: Vec<&str> = principals
        .iter()
        .filter(|p| p.issuer == IssuerBinding::FirstSignIn)
        .map(|p| p.id.as_str())
        .collect();
    if waiting.is_empty() {
        return warnings;
    }
    warnings.push(format!(
        "{} registered before principals were bound to an identity provider ({}): the first \
         account of that name to sign in, through any configured issuer, binds each; bind them \
         now with `larkgate principal set-issuer NAME --issuer ISSUER` (or `--none`)",
        if waiting.len() == 1 {
            "1 principal was".to_owned()
        } else {
            format!("{} principals were", waiting.len())
        },
        waiting.join(", ")
    ));
    warnings
}

/// What `check` reads of a SQLite store, when its file exists: no network is touched.
#[derive(Default)]
struct Stored {
    principals: Vec<Principal>,
    /// The aliases of the upstreams added at run time.
    aliases: Vec<String>,
    /// For each upstream, configured or added, which of its tools its `approval` setting
    /// gates.
    approvals: Vec<String>,
    /// Published scripts.
    scripts: usize,
    /// The upstreams' pinned tools and the published scripts, with the arguments each takes.
    tools: Vec<(String, Vec<String>)>,
}

/// What `data_dir`'s store holds for `config`'s checks, read in one opening of it.
fn stored(config: &Config, data_dir: &Path) -> anyhow::Result<Stored> {
    let database = data_dir.join(larkgate_store::DATABASE_FILE).exists();
    let runtime = tokio::runtime::Builder::new_current_thread().build()?;
    runtime.block_on(async {
        let store = match database {
            true => Some(SqliteStore::open(data_dir)?),
            false => None,
        };
        let (principals, records, scripts) = match &store {
            Some(store) => (
                store.principals().await?,
                store.upstreams().await?,
                larkgate_store::ScriptStore::latest_versions(store)
                    .await?
                    .len(),
            ),
            None => (Vec::new(), Vec::new(), 0),
        };
        let approvals = approval_lines(config, store.as_ref(), &records).await?;
        let tools = match &store {
            Some(store) => stored_tools(store, &config.upstreams).await?,
            None => Vec::new(),
        };
        Ok(Stored {
            principals,
            aliases: records.into_iter().map(|u| u.alias).collect(),
            approvals,
            scripts,
            tools,
        })
    })
}

/// For each upstream (configured, or added: `records`), which of its tools its `approval`
/// setting gates, from the definitions pinned in `store`.
async fn approval_lines(
    config: &Config,
    store: Option<&SqliteStore>,
    records: &[larkgate_store::UpstreamRecord],
) -> anyhow::Result<Vec<String>> {
    use larkgate_upstream::config::UpstreamConfig;
    use larkgate_upstream::federation::UpstreamStatus;
    let added = records
        .iter()
        .filter_map(|record| serde_json::from_str::<UpstreamConfig>(&record.config).ok());
    let mut lines = Vec::new();
    for upstream in config.upstreams.iter().cloned().chain(added) {
        let alias = upstream.alias.as_str();
        let pins = match store {
            Some(store) => store.pins(alias).await?,
            None => Vec::new(),
        };
        let tools: Vec<rmcp::model::Tool> = pins
            .iter()
            .filter(|pin| pin.status == larkgate_store::PinStatus::Approved)
            .filter_map(|pin| serde_json::from_str(&pin.definition).ok())
            .collect();
        if tools.is_empty() {
            lines.push(format!(
                "upstream {alias}: approval {}: {} (its tools are known once it has connected)",
                upstream.approval.as_str(),
                upstream.approval.describe()
            ));
            continue;
        }
        let adoption = larkgate_upstream::tools::adopt(alias, &tools, upstream.approval);
        let status = UpstreamStatus {
            approval: upstream.approval,
            tools: adoption.specs.len(),
            gated: adoption.gated(),
            ..UpstreamStatus::default()
        };
        lines.push(format!(
            "upstream {alias}: {}",
            super::upstream::gates(&status)
        ));
    }
    lines.extend(waiting_lines(&config.policy));
    Ok(lines)
}

/// For each `require` rule that holds calls for their decision, how long.
fn waiting_lines(policy: &Policy) -> impl Iterator<Item = String> + '_ {
    policy
        .approvals
        .require
        .iter()
        .filter(|rule| rule.wait_seconds > 0)
        .map(|rule| {
            format!(
                "approvals: a call of {:?} from a client over HTTP or stdio waits up to {} s \
                 for its decision",
                String::from(rule.tool.clone()),
                rule.wait_seconds
            )
        })
}

/// `larkgate check`: loads and validates the configuration, including every upstream's
/// `${VAR}` header references against the environment, and says what it found.
pub(crate) fn run(
    config: Option<&Path>,
    data_dir: Option<&Path>,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let located = Located::find(config, data_dir, |name| std::env::var(name).ok())?;
    let config: &Config = &located.config;
    for upstream in &config.upstreams {
        upstream
            .endpoint(|name| std::env::var(name).ok())
            .map_err(anyhow::Error::msg)?;
    }
    // The store's settings are checked without connecting; a SQLite store's principals and
    // upstreams are read for the warnings below when its file exists (reading it touches no
    // network).
    let postgres = config
        .store
        .postgres(|name| std::env::var(name).ok())
        .map_err(anyhow::Error::msg)?;
    let Stored {
        principals,
        aliases: stored_aliases,
        approvals,
        scripts,
        tools: stored_tools,
    } = match &postgres {
        None => stored(config, &located.data_dir)?,
        Some(_) => Stored::default(),
    };
    if let Some(twice) = config
        .upstreams
        .iter()
        .find(|u| stored_aliases.contains(&u.alias))
    {
        anyhow::bail!(
            "the upstream alias {:?} is both in the configuration file and added with \
             `larkgate upstream add`: the file's is used and the added one is not served; \
             remove one (`larkgate upstream remove {}`, or its [[upstreams]] entry)",
            twice.alias,
            twice.alias
        );
    }
    let stored_count = stored_aliases.len();
    let aliases = config
        .upstreams
        .iter()
        .map(|u| u.alias.clone())
        .chain(stored_aliases);
    let mut known = KnownTools::new(aliases)?;
    known.outside.extend(stored_tools);
    let (errors, argument_warnings) = argument_problems(&config.policy, &known);
    if !errors.is_empty() {
        anyhow::bail!("{}", errors.join("\n"));
    }
    let mut all = warnings(&config.policy, &known, &principals);
    all.extend(server_warnings(&config.servers, &known));
    all.extend(argument_warnings);
    all.extend(located.warnings());
    all.extend(admin_warnings(config, &principals, postgres.is_none()));
    all.extend(config.sign_in.warnings());
    all.extend(sign_in_warnings(&config.sign_in, &principals));
    for warning in all {
        eprintln!("warning: {warning}");
    }
    writeln!(out, "{}", located.describe())?;
    let stored_here = match postgres {
        None => format!(
            " and {stored_count} added with `larkgate upstream add`; {scripts} published \
             script{}",
            if scripts == 1 { "" } else { "s" }
        ),
        Some(_) => " (those added with `larkgate upstream add`, and the published scripts, are \
         in PostgreSQL, which check does not contact)"
            .to_owned(),
    };
    writeln!(
        out,
        "configuration is valid: data_dir {}, listen {}, {} roles, {} rules, {} upstreams in \
         the file{}",
        located.data_dir.display(),
        config.server.listen,
        config.policy.roles.len(),
        config.policy.rules.len(),
        config.upstreams.len(),
        stored_here
    )?;
    for line in approvals {
        writeln!(out, "{line}")?;
    }
    match postgres {
        None => writeln!(
            out,
            "store: SQLite database {}",
            located
                .data_dir
                .join(larkgate_store::DATABASE_FILE)
                .display()
        )?,
        Some(settings) => writeln!(
            out,
            "store: {} (settings valid; not contacted: `larkgate migrate` connects)",
            settings.describe()
        )?,
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use larkgate_store::PrincipalKind;

    fn policy(text: &str) -> Policy {
        Config::parse(text).unwrap().policy
    }

    #[test]
    fn conditions_that_read_arguments_a_built_in_tool_does_not_take_are_named() {
        let known = KnownTools::new(Vec::new()).unwrap();
        let constant = policy(
            "[policy.roles.admin]\ncall = [\"*\"]\n[[policy.rules]]\nname = \"always\"\ntools = [\"kv_set\"]\nwhen = '1 == 1'\neffect = \"deny\"\n",
        );
        let all = super::warnings(&constant, &known, &[]);
        assert!(
            all.iter()
                .any(|w| w.starts_with("rule always: its condition \"1 == 1\" reads none of")),
            "{all:?}"
        );
        // One that reads the facts and has one value all the same.
        let tautology = policy(
            "[policy.roles.admin]\ncall = [\"*\"]\n[[policy.rules]]\nname = \"self\"\ntools = [\"kv_set\"]\nwhen = 'args.key == args.key'\neffect = \"deny\"\n\
             [policy.approvals]\nrequire = [{ tool = \"kv_delete\", when = 'has(args.key) && !has(args.key)' }]\n",
        );
        let all = super::warnings(&tautology, &known, &[]);
        for expected in [
            "rule self: its condition \"args.key == args.key\" is true on every call",
            "policy.approvals.require \"kv_delete\": its condition \"has(args.key) && !has(args.key)\" is false on every call",
        ] {
            assert!(
                all.iter().any(|w| w.starts_with(expected)),
                "{expected}: {all:?}"
            );
        }
        let policy = policy(
            "[policy.roles.admin]\ncall = [\"*\"]\n\
             [[policy.rules]]\nname = \"typo\"\ntools = [\"kv_set\"]\nwhen = 'args.ky == \"x\"'\neffect = \"deny\"\n\
             [[policy.rules]]\nname = \"wide\"\ntools = [\"kv_*\"]\nwhen = 'args.value == \"x\"'\neffect = \"deny\"\n\
             [[policy.rules]]\nname = \"fine\"\ntools = [\"kv_set\"]\nwhen = 'args.key == \"x\" && principal.name == \"a\"'\neffect = \"deny\"\n\
             [[policy.rules]]\nname = \"nowhere\"\ntools = [\"kv_sett\"]\neffect = \"deny\"\n\
             [policy.approvals]\nrequire = [{ tool = \"kv_delete\", when = 'args.kee == \"x\"' }]\n",
        );
        let (errors, warnings) = argument_problems(&policy, &known);
        assert_eq!(errors.len(), 2, "{errors:?}");
        assert!(
            errors[0]
                .starts_with("typo: its condition reads `args.ky`, which kv_set does not take")
                && errors[0].contains("did you mean `args.key`?"),
            "{errors:?}"
        );
        assert!(
            errors[1].contains("policy.approvals.require \"kv_delete\"")
                && errors[1].contains("did you mean `args.key`?"),
            "{errors:?}"
        );
        // kv_get and kv_delete take no value: warned, since the rule names them by a wildcard.
        assert!(
            warnings.iter().any(|w| w
                .starts_with("wide: its condition reads `args.value`, which kv_get")
                && w.contains("unless it tests has(args.value) first")),
            "{warnings:?}"
        );
        assert!(
            !warnings
                .iter()
                .chain(&errors)
                .any(|w| w.starts_with("fine")),
            "{warnings:?}"
        );
        let all = super::warnings(&policy, &known, &[]);
        assert!(
            all.iter()
                .any(|w| w.starts_with("rule nowhere: the pattern \"kv_sett\" matches no tool")),
            "{all:?}"
        );
    }

    #[test]
    fn patterns_that_match_nothing_and_unknown_roles_are_warned_about() {
        let known = KnownTools::new(["github".to_owned()]).unwrap();
        let text = "[policy.roles.ops]\ncall = [\"kv_*\", \"kv_gett\", \"github__*\", \"gh__*\", \
                    \"script__report\", \"git*\", \"*\"]\nlist = [\"clock_now\", \"clok_now\"]\n\
                    [policy.approvals]\nrequire = [\"kv_delete\", \"kv_delte\", \"github__create_issue\"]\n\
                    [[policy.rate_limits]]\nper = \"principal\"\ncalls = 1\nperiod_seconds = 1\n\
                    tools = [\"script_run_draft\", \"scrpt__*\"]\n";
        let principals = vec![Principal {
            id: "eve".into(),
            kind: PrincipalKind::User,
            roles: vec!["ops".into(), "approver".into(), "viewr".into()],
            issuer: IssuerBinding::Local,
        }];
        let warnings = warnings(&policy(text), &known, &principals);
        let flagged: Vec<&str> = [
            "kv_gett", "gh__*", "clok_now", "kv_delte", "scrpt__*", "viewr",
        ]
        .into_iter()
        .filter(|w| {
            !warnings
                .iter()
                .any(|line| line.contains(&format!("\"{w}\"")))
        })
        .collect();
        assert!(
            flagged.is_empty(),
            "not warned about {flagged:?}: {warnings:#?}"
        );
        assert_eq!(warnings.len(), 6, "{warnings:#?}");
        assert!(
            warnings[0].starts_with("policy.roles.ops.list"),
            "{warnings:#?}"
        );
    }

    #[test]
    fn a_policy_that_grants_nothing_is_warned_about() {
        let known = KnownTools::new([]).unwrap();
        let nothing = warnings(
            &policy("[policy.roles.viewer]\nlist = [\"*\"]\n"),
            &known,
            &[],
        );
        assert_eq!(nothing.len(), 1, "{nothing:#?}");
        assert!(nothing[0].contains("no role call any tool"), "{nothing:#?}");
        assert!(
            warnings(&policy(""), &known, &[]).is_empty(),
            "the default grants admin"
        );
    }
}
