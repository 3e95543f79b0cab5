//! Virtual servers: endpoints beside `/mcp`, each serving a chosen part of the catalogue at
//! `/mcp/NAME` for one team or one task, so that a model lists the dozen tools its task needs
//! rather than the hundreds an organisation federates.
//!
//! The operator writes them as `[[servers]]` entries of `larkgate.toml`:
//!
//! ```toml
//! [[servers]]
//! name = "triage"                        # served at /mcp/triage
//! description = "Issue triage"           # told to clients as the server's instructions
//! tools = ["github__*", "kv_get"]        # larkgate names, the patterns of roles
//! prompts = ["github__*"]
//! resources = ["larkgate://github/*"]
//!
//! [[servers]]
//! name = "conf"
//! upstream = "conf"                      # all of one upstream's tools, prompts and resources
//! prefix = false                         # under the names and URIs the upstream gave them
//! ```
//!
//! ## What a server can and cannot do (threat model)
//!
//! A server's patterns are written by the operator; the names it is asked for come from any
//! authenticated client, which may try every name, URI and path.
//!
//! - **A server narrows, never widens.** What a request through it reaches must be granted by
//!   the principal's roles *and* served by the server: the intersection. The check is the
//!   pipeline's `authorize` step, beside the roles ([`crate::pipeline`]), so a call, a read, a
//!   get, a completion and a subscription are all held to it, and listings show only what
//!   both admit. What a server does not serve is refused as `not_found` with the text of what
//!   does not exist, so a client of one server learns nothing of the others.
//! - **Names map back by lookup, never by splitting.** With `prefix = false`, a tool or prompt
//!   shown as `NAME` is larkgate's [`prefixed_name`]`(upstream, NAME)` and a resource shown as
//!   `URI` is [`resource_uri`]`(upstream, URI)`: composed from the one upstream the server
//!   mounts, and then held to the server's patterns like any other. A name of another source
//!   cannot be reached by writing it in the shown form: it would compose to a name of the
//!   mounted upstream.
//! - **Two sources cannot collide.** `prefix = false` is allowed only with `upstream`, and
//!   every pattern of such a server must lie within that upstream, so the names it shows are
//!   one server's and distinct.
//! - **A server's name is one path segment** of lowercase letters, digits, `-` and `_`,
//!   starting with a letter, at most [`MAX_NAME`] characters: nothing a URL parser, a path
//!   normaliser or a reverse proxy could read as another path (`..`, `/`, `%2f`, an empty
//!   segment), so no server shadows `/mcp` or another route.
//! - **Scripts are not narrowed.** A published script called through a server runs as its
//!   own principal with its own roles, as through `/mcp`; its host calls are not the
//!   server's.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Deserialize;

use larkgate_caller::{Origin, Source};

use crate::names::{prefixed_name, resource_uri};
use crate::policy::{Pattern, UriPattern};

/// The longest server name.
pub const MAX_NAME: usize = 32;

/// One `[[servers]]` entry as the operator wrote it (and as a stored server is kept).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct ServerSpec {
    /// The path segment it is served under: `/mcp/NAME`.
    pub name: String,
    /// What it is for, told to clients as the server's instructions.
    #[serde(default)]
    pub description: Option<String>,
    /// The one upstream it mounts: all of that upstream's tools, prompts and resources, or
    /// those of them the patterns below name.
    #[serde(default)]
    pub upstream: Option<String>,
    /// Tool patterns (larkgate names) of what it serves.
    #[serde(default)]
    pub tools: Vec<Pattern>,
    /// Prompt patterns (larkgate names).
    #[serde(default)]
    pub prompts: Vec<Pattern>,
    /// Resource patterns (larkgate URIs), for resources and resource templates.
    #[serde(default)]
    pub resources: Vec<UriPattern>,
    /// Whether names keep larkgate's prefixes (`github__search`); `false` (with `upstream`
    /// only): as the upstream has them (`search`).
    #[serde(default = "prefixed_by_default")]
    pub prefix: bool,
    /// Whether its tool listing is the two tools of a search ([`crate::search`]),
    /// `find_tools` and `call_tool`, and the pinned tools, rather than every tool it serves.
    #[serde(default)]
    pub tool_search: bool,
    /// Tool patterns (larkgate names) of the tools a searched server still lists.
    #[serde(default)]
    pub pinned: Vec<Pattern>,
}

fn prefixed_by_default() -> bool {
    true
}

/// A checked server: what it serves and under which names. See the module documentation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VirtualServer {
    name: String,
    description: Option<String>,
    upstream: Option<String>,
    tools: Vec<Pattern>,
    prompts: Vec<Pattern>,
    resources: Vec<UriPattern>,
    prefix: bool,
    tool_search: bool,
    pinned: Vec<Pattern>,
}

impl VirtualServer {
    /// Checks `spec`, or says what is wrong with it and what to write instead.
    pub fn new(spec: ServerSpec) -> Result<Self, String> {
        let name = spec.name;
        check_name(&name).map_err(|why| {
            format!(
                "servers: {name:?} cannot be a server's name: {why} (it is served at /mcp/NAME)"
            )
        })?;
        let at = |what: &str| format!("servers.{name}: {what}");
        let (mut tools, mut prompts, mut resources) = (spec.tools, spec.prompts, spec.resources);
        match &spec.upstream {
            Some(alias) => {
                // (An alias no upstream has serves nothing; `larkgate check` says so.)
                Pattern::new(&prefixed_name(alias, "*"))
                    .map_err(|_| at(&format!("upstream {alias:?} is not an alias")))?;
                let tool_prefix = prefixed_name(alias, "");
                let uri_prefix = resource_uri(alias, "");
                // Patterns narrow within the upstream; none means all of it.
                if tools.is_empty() && prompts.is_empty() && resources.is_empty() {
                    let all_tools = Pattern::new(&format!("{tool_prefix}*"))?;
                    tools = vec![all_tools.clone()];
                    prompts = vec![all_tools];
                    resources = vec![UriPattern::new(&format!("{uri_prefix}*"))?];
                }
                let outside = tools
                    .iter()
                    .chain(&prompts)
                    .chain(&spec.pinned)
                    .map(Pattern::as_str)
                    .filter(|pattern| !pattern.starts_with(&tool_prefix))
                    .chain(
                        resources
                            .iter()
                            .map(UriPattern::as_str)
                            .filter(|pattern| !pattern.starts_with(&uri_prefix)),
                    )
                    .collect::<Vec<_>>();
                if !outside.is_empty() {
                    return Err(at(&format!(
                        "it mounts upstream {alias:?}, so its patterns must name that \
                         upstream's tools and prompts ({tool_prefix}...) and resources \
                         ({uri_prefix}...); {} do not: drop `upstream` to serve several sources",
                        quoted(&outside)
                    )));
                }
            }
            None if !spec.prefix => {
                return Err(at(
                    "prefix = false shows names as one upstream has them, so two sources \
                     could show the same name: write upstream = \"ALIAS\" to mount one \
                     upstream, or keep the prefixes",
                ));
            }
            None if tools.is_empty() && prompts.is_empty() && resources.is_empty() => {
                return Err(at(
                    "it serves nothing: write tools, prompts or resources patterns, or \
                     upstream = \"ALIAS\"",
                ));
            }
            None => {}
        }
        if !spec.pinned.is_empty() && !spec.tool_search {
            return Err(at(
                "pinned names the tools a searched server still lists, and this server lists \
                 all it serves: write tool_search = true, or remove pinned",
            ));
        }
        Ok(VirtualServer {
            name,
            description: spec.description,
            upstream: spec.upstream,
            tools,
            prompts,
            resources,
            prefix: spec.prefix,
            tool_search: spec.tool_search,
            pinned: spec.pinned,
        })
    }

    /// What it is, as the operator wrote it, for people to read (the console).
    pub fn view(&self) -> ServerView {
        let strings =
            |patterns: &[Pattern]| patterns.iter().map(|p| p.as_str().to_owned()).collect();
        ServerView {
            name: self.name.clone(),
            description: self.description.clone(),
            upstream: self.upstream.clone(),
            prefix: self.prefix,
            tools: strings(&self.tools),
            prompts: strings(&self.prompts),
            resources: self
                .resources
                .iter()
                .map(|p| p.as_str().to_owned())
                .collect(),
            tool_search: self.tool_search,
            pinned: strings(&self.pinned),
        }
    }

    /// Whether its clients search its tools ([`crate::search`]) rather than list them all.
    pub fn tool_search(&self) -> bool {
        self.tool_search
    }

    /// Whether a searched server lists the tool larkgate names `name` beside the search's
    /// own (it must also serve it).
    pub fn pins(&self, name: &str) -> bool {
        self.pinned.iter().any(|pattern| pattern.matches(name))
    }

    /// Its name: it is served at `/mcp/NAME`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// What it is for, as the operator wrote it.
    pub fn description(&self) -> Option<&str> {
        self.description.as_deref()
    }

    /// Whether it shows names without larkgate's prefixes (the upstream's own).
    pub fn unprefixed(&self) -> Option<&str> {
        self.upstream.as_deref().filter(|_| !self.prefix)
    }

    /// Whether it serves the tool larkgate names `name`, from `origin`. A prefix-less server
    /// serves only its upstream's tools.
    pub fn serves_tool(&self, name: &str, origin: &Origin) -> bool {
        if let Some(alias) = self.unprefixed()
            && (origin.source != Source::Upstream || origin.alias.as_deref() != Some(alias))
        {
            return false;
        }
        self.tools.iter().any(|pattern| pattern.matches(name))
    }

    /// Whether it serves the prompt larkgate names `name`.
    pub fn serves_prompt(&self, name: &str) -> bool {
        self.prompts.iter().any(|pattern| pattern.matches(name))
    }

    /// Whether it serves the resource (or template) of larkgate URI `uri`.
    pub fn serves_resource(&self, uri: &str) -> bool {
        self.resources.iter().any(|pattern| pattern.matches(uri))
    }

    /// The name a client of this server gives the tool or prompt larkgate names `name`
    /// (whose original name is `original`).
    pub fn shown_name(&self, name: &str, original: &str) -> String {
        match self.unprefixed() {
            Some(_) => original.to_owned(),
            None => name.to_owned(),
        }
    }

    /// The name a client of this server gives the prompt larkgate names `name`.
    pub fn shown_prompt(&self, name: &str) -> String {
        match self.unprefixed() {
            Some(alias) => name
                .strip_prefix(&prefixed_name(alias, ""))
                .unwrap_or(name)
                .to_owned(),
            None => name.to_owned(),
        }
    }

    /// The larkgate name of what a client of this server calls `shown`.
    pub fn larkgate_name(&self, shown: &str) -> String {
        match self.unprefixed() {
            Some(alias) => prefixed_name(alias, shown),
            None => shown.to_owned(),
        }
    }

    /// The URI a client of this server reads larkgate URI `uri` by.
    pub fn shown_uri(&self, uri: &str) -> String {
        match self.unprefixed() {
            Some(alias) => uri
                .strip_prefix(&resource_uri(alias, ""))
                .unwrap_or(uri)
                .to_owned(),
            None => uri.to_owned(),
        }
    }

    /// The larkgate URI of what a client of this server reads as `shown`.
    pub fn larkgate_uri(&self, shown: &str) -> String {
        match self.unprefixed() {
            Some(alias) => resource_uri(alias, shown),
            None => shown.to_owned(),
        }
    }
}

/// A server as the operator wrote it: [`VirtualServer::view`].
#[derive(Clone, Debug, serde::Serialize, schemars::JsonSchema)]
pub struct ServerView {
    /// Its name (`/mcp/NAME`).
    pub name: String,
    /// What it is for.
    pub description: Option<String>,
    /// The one upstream it mounts, if it does.
    pub upstream: Option<String>,
    /// Whether names keep larkgate's prefixes.
    pub prefix: bool,
    /// Its tool patterns.
    pub tools: Vec<String>,
    /// Its prompt patterns.
    pub prompts: Vec<String>,
    /// Its resource patterns.
    pub resources: Vec<String>,
    /// Whether its clients search its tools.
    pub tool_search: bool,
    /// The tools a searched server still lists.
    pub pinned: Vec<String>,
}

/// Whether `name` can be a server's name; why not, if not.
pub fn check_name(name: &str) -> Result<(), &'static str> {
    let mut chars = name.chars();
    if !chars.next().is_some_and(|c| c.is_ascii_lowercase()) {
        return Err("it must start with a lowercase letter");
    }
    if !chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '-' | '_')) {
        return Err("use lowercase letters, digits, - and _ only");
    }
    if name.len() > MAX_NAME {
        return Err("it is longer than 32 characters");
    }
    Ok(())
}

fn quoted(items: &[&str]) -> String {
    items
        .iter()
        .map(|item| format!("{item:?}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The servers in force, by name; replaced whole when the configuration is reloaded.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Servers {
    by_name: BTreeMap<String, Arc<VirtualServer>>,
}

impl Servers {
    /// Checks every entry, and that no two share a name.
    pub fn new(specs: Vec<ServerSpec>) -> Result<Self, String> {
        let mut by_name = BTreeMap::new();
        for spec in specs {
            let server = VirtualServer::new(spec)?;
            if by_name.contains_key(server.name()) {
                return Err(format!(
                    "servers: two entries are named {:?}; each server needs a name of its own",
                    server.name()
                ));
            }
            by_name.insert(server.name().to_owned(), Arc::new(server));
        }
        Ok(Servers { by_name })
    }

    /// The server named `name`.
    pub fn get(&self, name: &str) -> Option<&Arc<VirtualServer>> {
        self.by_name.get(name)
    }

    /// Every server, by name.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<VirtualServer>> {
        self.by_name.values()
    }
}

/// The servers in force: the configuration file's (replaced whole by a reload) and those added
/// at run time (kept in the store, [`stored`], and followed with [`ServerTable::follow`]).
/// Each replacement that changes them counts one change, which sessions of virtual servers
/// watch to tell their clients that their lists may have changed ([`ServerTable::changes`]).
///
/// A stored server named like one of the configuration file is not served: the file's is
/// (the file is what the operator reviews and deploys; `server_add` refuses such a name, so
/// this happens only when the file gains the name later). [`ServerTable::entries`] shows it as
/// shadowed, and following logs it.
#[derive(Debug)]
pub struct ServerTable {
    current: arc_swap::ArcSwap<Servers>,
    changes: tokio::sync::watch::Sender<u64>,
    sources: std::sync::Mutex<Sources>,
    /// One [`ServerTable::follow`] at a time, so an older reading never replaces a newer one.
    following: tokio::sync::Mutex<()>,
}

/// What the servers in force are made of.
#[derive(Debug, Default)]
struct Sources {
    configured: Servers,
    stored: Vec<Stored>,
    /// The store's server revision last followed.
    revision: Option<i64>,
}

impl Default for ServerTable {
    fn default() -> Self {
        ServerTable::new(Servers::default())
    }
}

impl ServerTable {
    /// A table serving `servers` (the configuration file's).
    pub fn new(servers: Servers) -> Self {
        ServerTable {
            current: arc_swap::ArcSwap::from_pointee(servers.clone()),
            changes: tokio::sync::watch::Sender::new(0),
            sources: std::sync::Mutex::new(Sources {
                configured: servers,
                ..Sources::default()
            }),
            following: tokio::sync::Mutex::new(()),
        }
    }

    /// The servers now.
    pub fn load(&self) -> Arc<Servers> {
        self.current.load_full()
    }

    /// The server named `name` now.
    pub fn get(&self, name: &str) -> Option<Arc<VirtualServer>> {
        self.current.load().get(name).cloned()
    }

    /// Serves `servers` as the configuration file's from the next request on (a reload),
    /// beside the stored ones.
    pub fn configure(&self, servers: Servers) {
        let mut sources = self.sources.lock().unwrap_or_else(|p| p.into_inner());
        sources.configured = servers;
        self.apply(&sources);
    }

    /// Whether the configuration file has a server named `name`.
    pub fn configured(&self, name: &str) -> bool {
        let sources = self.sources.lock().unwrap_or_else(|p| p.into_inner());
        sources.configured.get(name).is_some()
    }

    /// Follows the store: serves the servers added, replaced or removed there since the last
    /// time (by this process or any other sharing the store). Does nothing when the store's
    /// server revision has not moved. A stored server that cannot be read or checked is not
    /// served, and logged. Fails only when the store cannot be read.
    pub async fn follow(&self, store: &dyn larkgate_store::ServerStore) -> Result<(), String> {
        let _one = self.following.lock().await;
        let unreadable =
            |e: larkgate_store::StoreError| format!("the stored servers cannot be read: {e}");
        let revision = store.servers_revision().await.map_err(unreadable)?;
        let followed = self
            .sources
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .revision;
        if followed == Some(revision) {
            return Ok(());
        }
        let records = store.servers().await.map_err(unreadable)?;
        let stored = records
            .into_iter()
            .filter_map(|record| match Stored::read(record) {
                Ok(server) => Some(server),
                Err((name, why)) => {
                    tracing::error!(
                        server = %name,
                        %why,
                        "a stored server cannot be served; remove it with `larkgate server \
                         remove` and add it again"
                    );
                    None
                }
            })
            .collect();
        let mut sources = self.sources.lock().unwrap_or_else(|p| p.into_inner());
        sources.stored = stored;
        sources.revision = Some(revision);
        for shadowed in sources
            .stored
            .iter()
            .filter(|s| sources.configured.get(s.server.name()).is_some())
        {
            tracing::error!(
                server = %shadowed.server.name(),
                "a server added at run time has the name of one in the configuration file, \
                 which is served; remove one of them"
            );
        }
        self.apply(&sources);
        Ok(())
    }

    /// Every server, the configuration file's first, with where it comes from.
    pub fn entries(&self) -> Vec<ServerEntry> {
        let sources = self.sources.lock().unwrap_or_else(|p| p.into_inner());
        let configured = sources.configured.iter().map(|server| ServerEntry {
            server: server.view(),
            added: None,
            shadowed: false,
        });
        let stored = sources.stored.iter().map(|stored| ServerEntry {
            server: stored.server.view(),
            added: Some(Added {
                by: stored.added_by.clone(),
                at_ms: stored.added_at_ms,
            }),
            shadowed: sources.configured.get(stored.server.name()).is_some(),
        });
        configured.chain(stored).collect()
    }

    /// Serves what `sources` make, counting a change when it differs from what is served.
    fn apply(&self, sources: &Sources) {
        let mut servers = sources.configured.clone();
        for stored in &sources.stored {
            servers
                .by_name
                .entry(stored.server.name().to_owned())
                .or_insert_with(|| Arc::clone(&stored.server));
        }
        let changed = *self.current.load_full() != servers;
        self.current.store(Arc::new(servers));
        if changed {
            self.changes.send_modify(|count| *count += 1);
        }
    }

    /// Ticks each time the servers change.
    pub fn changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changes.subscribe()
    }
}

/// A stored server, checked.
#[derive(Clone, Debug)]
struct Stored {
    server: Arc<VirtualServer>,
    added_by: String,
    added_at_ms: i64,
}

impl Stored {
    /// `record` read and checked; its name and why not, if it cannot be served.
    fn read(record: larkgate_store::ServerRecord) -> Result<Stored, (String, String)> {
        let name = record.name;
        let spec: ServerSpec = serde_json::from_str(&record.spec)
            .map_err(|e| (name.clone(), format!("its definition does not read: {e}")))?;
        if spec.name != name {
            return Err((name, "its definition names another server".to_owned()));
        }
        let server = VirtualServer::new(spec).map_err(|why| (name.clone(), why))?;
        Ok(Stored {
            server: Arc::new(server),
            added_by: record.added_by,
            added_at_ms: record.added_at_ms,
        })
    }
}

/// One server as [`ServerTable::entries`] shows it.
#[derive(Clone, Debug, serde::Serialize, schemars::JsonSchema)]
pub struct ServerEntry {
    /// What it serves.
    #[serde(flatten)]
    pub server: ServerView,
    /// Who added it and when, for a server added at run time; `null` for one of the
    /// configuration file.
    pub added: Option<Added>,
    /// Whether it is not served because the configuration file has a server of its name.
    pub shadowed: bool,
}

/// Who added a server at run time, and when.
#[derive(Clone, Debug, serde::Serialize, schemars::JsonSchema)]
pub struct Added {
    /// The principal.
    pub by: String,
    /// When (Unix ms).
    pub at_ms: i64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(name: &str) -> ServerSpec {
        ServerSpec {
            name: name.to_owned(),
            prefix: true,
            ..Default::default()
        }
    }

    fn patterns(patterns: &[&str]) -> Vec<Pattern> {
        patterns.iter().map(|p| Pattern::new(p).unwrap()).collect()
    }

    struct Tool {
        name: String,
        origin: Origin,
    }

    fn tool(name: &str, source: Source, alias: Option<&str>, original: &str) -> Tool {
        Tool {
            name: name.to_owned(),
            origin: Origin {
                source,
                alias: alias.map(str::to_owned),
                original_name: original.to_owned(),
            },
        }
    }

    fn serves(server: &VirtualServer, tool: &Tool) -> bool {
        server.serves_tool(&tool.name, &tool.origin)
    }

    #[test]
    fn hostile_names_are_refused_saying_why() {
        for (name, why) in [
            ("", "start with a lowercase letter"),
            ("..", "start with a lowercase letter"),
            (".", "start with a lowercase letter"),
            ("/mcp", "start with a lowercase letter"),
            ("a/b", "lowercase letters, digits"),
            ("a%2fb", "lowercase letters, digits"),
            ("a..b", "lowercase letters, digits"),
            ("Team", "start with a lowercase letter"),
            ("team ", "lowercase letters, digits"),
            ("tëam", "lowercase letters, digits"),
            ("1team", "start with a lowercase letter"),
            ("-team", "start with a lowercase letter"),
            ("team\n", "lowercase letters, digits"),
            (&"a".repeat(33), "longer than 32"),
        ] {
            let mut server = spec(name);
            server.tools = patterns(&["kv_get"]);
            let refused = VirtualServer::new(server).unwrap_err();
            assert!(
                refused.contains(why) && refused.contains("/mcp/NAME"),
                "{name:?}: {refused}"
            );
        }
        for name in ["team", "a", "ops-2", "data_eng", &"a".repeat(32)] {
            let mut server = spec(name);
            server.tools = patterns(&["kv_get"]);
            assert!(VirtualServer::new(server).is_ok(), "{name}");
        }
    }

    #[test]
    fn a_prefix_less_server_mounts_one_upstream_and_nothing_else() {
        // Without an upstream: two sources could collide.
        let mut server = spec("conf");
        server.prefix = false;
        server.tools = patterns(&["a__*", "b__*"]);
        let refused = VirtualServer::new(server).unwrap_err();
        assert!(
            refused.contains("two sources could show the same name"),
            "{refused}"
        );
        // With one, a pattern outside it is named.
        let mut server = spec("conf");
        server.prefix = false;
        server.upstream = Some("a".into());
        server.tools = patterns(&["a__x", "b__*", "*"]);
        let refused = VirtualServer::new(server).unwrap_err();
        assert!(
            refused.contains("\"b__*\", \"*\" do not") && !refused.contains("\"a__x\""),
            "{refused}"
        );
        let mut server = spec("conf");
        server.upstream = Some("a".into());
        server.resources = vec![UriPattern::new("larkgate://b/*").unwrap()];
        let refused = VirtualServer::new(server).unwrap_err();
        assert!(refused.contains("\"larkgate://b/*\" do not"), "{refused}");
        // An upstream that is no alias.
        let mut server = spec("conf");
        server.upstream = Some("a b".into());
        assert!(
            VirtualServer::new(server)
                .unwrap_err()
                .contains("is not an alias")
        );
        // Nothing served.
        assert!(
            VirtualServer::new(spec("empty"))
                .unwrap_err()
                .contains("it serves nothing")
        );
    }

    #[test]
    fn a_prefix_less_server_shows_and_maps_back_its_upstream_s_names_only() {
        let mut server = spec("conf");
        server.prefix = false;
        server.upstream = Some("conf".into());
        let server = VirtualServer::new(server).unwrap();
        let own = tool("conf__echo", Source::Upstream, Some("conf"), "echo");
        assert!(serves(&server, &own));
        assert_eq!(
            server.shown_name(&own.name, &own.origin.original_name),
            "echo"
        );
        assert_eq!(server.larkgate_name("echo"), "conf__echo");
        // Another source's tools are not served, whatever their name.
        for other in [
            tool("kv_get", Source::Capability, None, "kv_get"),
            tool("other__echo", Source::Upstream, Some("other"), "echo"),
            tool("script__conf__x", Source::Script, Some("conf"), "x"),
        ] {
            assert!(!serves(&server, &other), "{}", other.name);
        }
        // A name written in another source's form composes into the upstream's namespace.
        assert_eq!(server.larkgate_name("other__echo"), "conf__other__echo");
        assert_eq!(server.larkgate_name("../kv_get"), "conf__../kv_get");
        assert!(server.serves_prompt("conf__greet") && !server.serves_prompt("other__greet"));
        assert_eq!(server.shown_uri("larkgate://conf/test://a"), "test://a");
        assert_eq!(server.larkgate_uri("test://a"), "larkgate://conf/test://a");
        assert!(server.serves_resource(&server.larkgate_uri("test://a")));
        assert!(!server.serves_resource("larkgate://other/test://a"));
    }

    #[test]
    fn a_prefixed_server_serves_what_its_patterns_name_under_larkgate_s_names() {
        let mut server = spec("triage");
        server.tools = patterns(&["github__*", "kv_get"]);
        let server = VirtualServer::new(server).unwrap();
        assert!(serves(
            &server,
            &tool("kv_get", Source::Capability, None, "kv_get")
        ));
        assert!(serves(
            &server,
            &tool("github__s", Source::Upstream, Some("github"), "s")
        ));
        assert!(!serves(
            &server,
            &tool("kv_set", Source::Capability, None, "kv_set")
        ));
        assert!(
            !server.serves_prompt("github__p"),
            "no prompt patterns: no prompts"
        );
        assert_eq!(server.shown_name("github__s", "s"), "github__s");
        assert_eq!(server.larkgate_name("github__s"), "github__s");
        assert_eq!(
            server.shown_uri("larkgate://github/x"),
            "larkgate://github/x"
        );
    }

    #[test]
    fn two_servers_of_one_name_are_refused() {
        let mut a = spec("team");
        a.tools = patterns(&["kv_get"]);
        let refused = Servers::new(vec![a.clone(), a]).unwrap_err();
        assert!(
            refused.contains("two entries are named \"team\""),
            "{refused}"
        );
    }
}
