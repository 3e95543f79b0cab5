//! Resources and prompts of federated upstreams, under larkgate's own names.
//!
//! Upstream `docs`'s resource `file:///guide.md` is listed as
//! `larkgate://docs/file:///guide.md`, its template `docs://pages/{slug}` as
//! `larkgate://docs/docs://pages/{slug}`, and its prompt `summarize` as `docs__summarize` (the
//! tool naming rule). Each upstream's entries are kept in an [`UpstreamCatalog`]: what it
//! listed, under both names.
//!
//! ## Threat model
//!
//! A client chooses the URI or prompt name it asks for, and it must reach exactly the upstream
//! that listed it, under the name it listed, or nothing. The way back is the catalogue, never
//! the text of what was asked: a URI is answered only when it is one of an upstream's listed
//! resources (an exact lookup) or matches one of its listed templates, and a prompt only when
//! it is one an upstream listed. A URI naming an alias that never listed it, or one made to
//! look like a template's expansion with characters the template does not allow there
//! (`../`, `?`, `#`), is not found. Every entry's larkgate form begins with the literal
//! `larkgate://<alias>/`, and aliases contain no `/`, so no URI can match two upstreams'
//! entries; two templates of one upstream that both match a URI make it ambiguous, and it is
//! refused rather than guessed. Matching is linear in the URI's length (at most
//! [`MAX_URI_BYTES`]) for each template, whatever the template.
//!
//! Who may see and read what is the policy's ([`crate::policy`]), asked by the pipeline's
//! `authorize` step and by the listings; this module only finds.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, RwLock};

use rmcp::model::{
    ArgumentInfo, CompleteResult, CompletionContext, GetPromptResult, Prompt, ReadResourceResult,
    Reference, Resource, ResourceTemplate,
};

use crate::envelope::Refusal;
use crate::identity::CallContext;
use crate::policy::TargetKind;

mod dispatch;
mod uri_template;
mod watching;

pub use dispatch::not_found;
pub use uri_template::UriTemplate;
pub use watching::{Subscribing, Subscription, Watched, is_under};

pub use crate::names::{URI_PREFIX, resource_uri};

/// The longest URI larkgate looks up; longer ones are not found.
pub const MAX_URI_BYTES: usize = 8 * 1024;

/// What a completion asks to complete (see [`crate::pipeline::CallRequest::complete`]).
#[derive(Clone, Debug)]
pub struct Completing {
    /// The argument, and the value typed so far.
    pub argument: ArgumentInfo,
    /// The arguments already chosen.
    pub known: Option<CompletionContext>,
}

/// How one upstream's resources are read and prompts got: its connection.
#[async_trait::async_trait]
pub trait CatalogReader: Send + Sync {
    /// Reads resource `uri` (the upstream's own URI).
    async fn read_resource(
        &self,
        context: &CallContext,
        uri: &str,
    ) -> Result<ReadResourceResult, Refusal>;

    /// Gets prompt `name` (the upstream's own name) with `arguments`.
    async fn get_prompt(
        &self,
        context: &CallContext,
        name: &str,
        arguments: serde_json::Map<String, serde_json::Value>,
    ) -> Result<GetPromptResult, Refusal>;

    /// Completes `argument` of the prompt or resource template `reference` names (the
    /// upstream's own name or template text), given the arguments `known` so far.
    async fn complete(
        &self,
        context: &CallContext,
        reference: Reference,
        argument: ArgumentInfo,
        known: Option<CompletionContext>,
    ) -> Result<CompleteResult, Refusal>;

    /// Subscribes to the updates of resource `uri` (the upstream's own URI) for as long as
    /// the answer's `held` is kept.
    async fn subscribe(&self, context: &CallContext, uri: &str) -> Result<Subscription, Refusal>;
}

/// What one upstream listed, under larkgate's names.
pub struct UpstreamCatalog {
    alias: String,
    resources: Vec<Resource>,
    templates: Vec<(ResourceTemplate, UriTemplate)>,
    prompts: Vec<Prompt>,
    /// Larkgate URI to the upstream's URI.
    resource_originals: HashMap<String, String>,
    /// Larkgate prompt name to the upstream's name.
    prompt_originals: HashMap<String, String>,
    reader: Arc<dyn CatalogReader>,
}

impl std::fmt::Debug for UpstreamCatalog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamCatalog")
            .field("alias", &self.alias)
            .field("resources", &self.resources.len())
            .field("templates", &self.templates.len())
            .field("prompts", &self.prompts.len())
            .finish_non_exhaustive()
    }
}

impl UpstreamCatalog {
    /// Upstream `alias`'s listings, renamed, with what was dropped and why: a URI or template
    /// listed twice (the first is kept), a template that is not a valid URI template, a prompt
    /// whose larkgate name (from `prompt_name`) cannot be made or another prompt already has.
    pub fn new(
        alias: &str,
        resources: Vec<Resource>,
        templates: Vec<ResourceTemplate>,
        prompts: Vec<Prompt>,
        prompt_name: impl Fn(&str) -> Result<String, String>,
        reader: Arc<dyn CatalogReader>,
    ) -> (Self, Vec<String>) {
        let mut dropped = Vec::new();
        let mut resource_originals = HashMap::new();
        let mut kept_resources = Vec::new();
        for mut resource in resources {
            let uri = resource_uri(alias, &resource.uri);
            if uri.len() > MAX_URI_BYTES || resource_originals.contains_key(&uri) {
                dropped.push(format!(
                    "resource {} (too long, or listed twice)",
                    resource.uri
                ));
                continue;
            }
            resource_originals.insert(uri.clone(), std::mem::replace(&mut resource.uri, uri));
            kept_resources.push(resource);
        }
        let mut kept_templates: Vec<(ResourceTemplate, UriTemplate)> = Vec::new();
        for mut template in templates {
            let text = resource_uri(alias, &template.uri_template);
            let parsed = match UriTemplate::parse(&text) {
                Ok(parsed) if kept_templates.iter().all(|(t, _)| t.uri_template != text) => parsed,
                Ok(_) => {
                    dropped.push(format!(
                        "resource template {} (listed twice)",
                        template.uri_template
                    ));
                    continue;
                }
                Err(why) => {
                    dropped.push(format!(
                        "resource template {} ({why})",
                        template.uri_template
                    ));
                    continue;
                }
            };
            template.uri_template = text;
            kept_templates.push((template, parsed));
        }
        let mut prompt_originals = HashMap::new();
        let mut kept_prompts = Vec::new();
        for mut prompt in prompts {
            let name = match prompt_name(&prompt.name) {
                Ok(name) if !prompt_originals.contains_key(&name) => name,
                Ok(name) => {
                    dropped.push(format!("prompt {} ({name} is taken)", prompt.name));
                    continue;
                }
                Err(why) => {
                    dropped.push(format!("prompt {} ({why})", prompt.name));
                    continue;
                }
            };
            prompt_originals.insert(name.clone(), std::mem::replace(&mut prompt.name, name));
            kept_prompts.push(prompt);
        }
        let catalog = UpstreamCatalog {
            alias: alias.to_owned(),
            resources: kept_resources,
            templates: kept_templates,
            prompts: kept_prompts,
            resource_originals,
            prompt_originals,
            reader,
        };
        (catalog, dropped)
    }

    /// Its resources, templates and prompts: counts for status.
    pub fn counts(&self) -> (usize, usize, usize) {
        (
            self.resources.len(),
            self.templates.len(),
            self.prompts.len(),
        )
    }

    /// The upstream URI larkgate `uri` reads, and the listed entry it was found by (the
    /// resource's own URI, or the template's text).
    fn find_resource(&self, uri: &str) -> Lookup<(String, String)> {
        if let Some(original) = self.resource_originals.get(uri) {
            return Lookup::Found((original.clone(), uri.to_owned()));
        }
        let mut matched = self
            .templates
            .iter()
            .filter(|(_, parsed)| parsed.matches(uri));
        let Some((template, _)) = matched.next() else {
            return Lookup::Missing;
        };
        if matched.next().is_some() {
            return Lookup::Ambiguous;
        }
        // The template matched from its first byte, and it begins with this upstream's own
        // literal prefix: what follows it is the URI the upstream's template expands to.
        let prefix = resource_uri(&self.alias, "");
        match uri.strip_prefix(&prefix) {
            Some(original) => Lookup::Found((original.to_owned(), template.uri_template.clone())),
            None => Lookup::Missing,
        }
    }
}

/// What an upstream's resource listings say, for telling whether they changed.
fn listed_resources(catalog: Option<&UpstreamCatalog>) -> Option<serde_json::Value> {
    let catalog = catalog?;
    let templates: Vec<&ResourceTemplate> = catalog.templates.iter().map(|(t, _)| t).collect();
    serde_json::to_value((&catalog.resources, templates)).ok()
}

/// What an upstream's prompt listing says, for telling whether it changed.
fn listed_prompts(catalog: Option<&UpstreamCatalog>) -> Option<serde_json::Value> {
    serde_json::to_value(&catalog?.prompts).ok()
}

enum Lookup<T> {
    Found(T),
    Missing,
    Ambiguous,
}

/// What a read or get resolved to: the upstream, its own name for the target, and the listed
/// entry it was found by.
#[derive(Clone)]
pub struct Resolved {
    /// The upstream's alias.
    pub alias: String,
    /// The upstream's own URI or prompt name.
    pub original: String,
    /// The listed entry: a resource's or prompt's larkgate name, or a template's larkgate text.
    pub entry: String,
    /// The upstream's connection.
    pub reader: Arc<dyn CatalogReader>,
}

impl std::fmt::Debug for Resolved {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Resolved")
            .field("alias", &self.alias)
            .field("original", &self.original)
            .field("entry", &self.entry)
            .finish_non_exhaustive()
    }
}

/// Why a read or get found nothing to reach.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NotResolved {
    /// Nothing listed it (or the caller may not see it: the caller decides that first).
    Missing,
    /// Two templates of one upstream match it.
    Ambiguous,
}

/// Every upstream's catalogue, replaced whole per upstream as its listings change; listeners
/// learn of changes to resources and prompts separately.
#[derive(Debug)]
pub struct Catalog {
    upstreams: RwLock<BTreeMap<String, Arc<UpstreamCatalog>>>,
    resources_changed: tokio::sync::watch::Sender<u64>,
    prompts_changed: tokio::sync::watch::Sender<u64>,
}

impl Default for Catalog {
    fn default() -> Self {
        Catalog {
            upstreams: RwLock::default(),
            resources_changed: tokio::sync::watch::Sender::new(0),
            prompts_changed: tokio::sync::watch::Sender::new(0),
        }
    }
}

impl Catalog {
    fn snapshot(&self) -> Vec<Arc<UpstreamCatalog>> {
        self.upstreams
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect()
    }

    /// Replaces upstream `alias`'s entries (`None`: withdraws them), telling listeners of the
    /// kinds that changed.
    pub fn replace_upstream(&self, alias: &str, catalog: Option<UpstreamCatalog>) {
        let (resources, prompts) = (
            listed_resources(catalog.as_ref()),
            listed_prompts(catalog.as_ref()),
        );
        let before = {
            let mut upstreams = self.upstreams.write().unwrap_or_else(|p| p.into_inner());
            match catalog {
                Some(catalog) => upstreams.insert(alias.to_owned(), Arc::new(catalog)),
                None => upstreams.remove(alias),
            }
        };
        if listed_resources(before.as_deref()) != resources {
            self.resources_changed.send_modify(|n| *n += 1);
        }
        if listed_prompts(before.as_deref()) != prompts {
            self.prompts_changed.send_modify(|n| *n += 1);
        }
    }

    /// A receiver that changes whenever some upstream's resources or templates change.
    pub fn resource_changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.resources_changed.subscribe()
    }

    /// A receiver that changes whenever some upstream's prompts change.
    pub fn prompt_changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.prompts_changed.subscribe()
    }

    /// Every listed resource `visible` admits (by larkgate URI).
    pub fn resources(&self, visible: impl Fn(&str) -> bool) -> Vec<Resource> {
        self.snapshot()
            .iter()
            .flat_map(|c| c.resources.iter())
            .filter(|r| visible(&r.uri))
            .cloned()
            .collect()
    }

    /// Every listed template `visible` admits (by its larkgate text).
    pub fn templates(&self, visible: impl Fn(&str) -> bool) -> Vec<ResourceTemplate> {
        self.snapshot()
            .iter()
            .flat_map(|c| c.templates.iter())
            .filter(|(t, _)| visible(&t.uri_template))
            .map(|(t, _)| t.clone())
            .collect()
    }

    /// Every listed prompt `visible` admits (by larkgate name).
    pub fn prompts(&self, visible: impl Fn(&str) -> bool) -> Vec<Prompt> {
        self.snapshot()
            .iter()
            .flat_map(|c| c.prompts.iter())
            .filter(|p| visible(&p.name))
            .cloned()
            .collect()
    }

    /// Finds what a `kind` call to `name` (a larkgate URI or prompt name) reaches. Tools are
    /// the tool table's: `Missing`.
    pub fn resolve(&self, kind: TargetKind, name: &str) -> Result<Resolved, NotResolved> {
        match kind {
            TargetKind::Tool => Err(NotResolved::Missing),
            TargetKind::Resource => self.resolve_resource(name),
            TargetKind::Prompt => self.resolve_prompt(name),
        }
    }

    fn resolve_resource(&self, uri: &str) -> Result<Resolved, NotResolved> {
        if uri.len() > MAX_URI_BYTES || !uri.starts_with(URI_PREFIX) {
            return Err(NotResolved::Missing);
        }
        let mut found = None;
        for catalog in self.snapshot() {
            match catalog.find_resource(uri) {
                Lookup::Found((original, entry)) => {
                    if found.is_some() {
                        return Err(NotResolved::Ambiguous);
                    }
                    found = Some(Resolved {
                        alias: catalog.alias.clone(),
                        original,
                        entry,
                        reader: Arc::clone(&catalog.reader),
                    });
                }
                Lookup::Ambiguous => return Err(NotResolved::Ambiguous),
                Lookup::Missing => {}
            }
        }
        found.ok_or(NotResolved::Missing)
    }

    /// Finds the resource template whose larkgate text is exactly `text` (what a completion
    /// names: a template, not a URI made from one).
    pub fn resolve_template(&self, text: &str) -> Result<Resolved, NotResolved> {
        if text.len() > MAX_URI_BYTES || !text.starts_with(URI_PREFIX) {
            return Err(NotResolved::Missing);
        }
        self.snapshot()
            .iter()
            .find_map(|catalog| {
                let prefix = resource_uri(&catalog.alias, "");
                let original = text.strip_prefix(&prefix)?;
                catalog
                    .templates
                    .iter()
                    .any(|(t, _)| t.uri_template == text)
                    .then(|| Resolved {
                        alias: catalog.alias.clone(),
                        original: original.to_owned(),
                        entry: text.to_owned(),
                        reader: Arc::clone(&catalog.reader),
                    })
            })
            .ok_or(NotResolved::Missing)
    }

    fn resolve_prompt(&self, name: &str) -> Result<Resolved, NotResolved> {
        self.snapshot()
            .iter()
            .find_map(|catalog| {
                catalog.prompt_originals.get(name).map(|original| Resolved {
                    alias: catalog.alias.clone(),
                    original: original.clone(),
                    entry: name.to_owned(),
                    reader: Arc::clone(&catalog.reader),
                })
            })
            .ok_or(NotResolved::Missing)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Nobody;

    #[async_trait::async_trait]
    impl CatalogReader for Nobody {
        async fn read_resource(
            &self,
            _: &CallContext,
            _: &str,
        ) -> Result<ReadResourceResult, Refusal> {
            unreachable!("the tests here only look up")
        }
        async fn complete(
            &self,
            _: &CallContext,
            _: Reference,
            _: ArgumentInfo,
            _: Option<CompletionContext>,
        ) -> Result<CompleteResult, Refusal> {
            unreachable!("the tests here only look up")
        }
        async fn get_prompt(
            &self,
            _: &CallContext,
            _: &str,
            _: serde_json::Map<String, serde_json::Value>,
        ) -> Result<GetPromptResult, Refusal> {
            unreachable!("the tests here only look up")
        }
        async fn subscribe(&self, _: &CallContext, _: &str) -> Result<Subscription, Refusal> {
            unreachable!("the tests here only look up")
        }
    }

    fn resource(uri: &str) -> Resource {
        Resource::new(uri, uri)
    }

    fn template(text: &str) -> ResourceTemplate {
        ResourceTemplate::new(text, text)
    }

    fn catalog(
        alias: &str,
        resources: &[&str],
        templates: &[&str],
        prompts: &[&str],
    ) -> UpstreamCatalog {
        let (catalog, dropped) = UpstreamCatalog::new(
            alias,
            resources.iter().map(|u| resource(u)).collect(),
            templates.iter().map(|t| template(t)).collect(),
            prompts
                .iter()
                .map(|p| Prompt::new(*p, None::<String>, None))
                .collect(),
            |name| Ok(format!("{alias}__{name}")),
            Arc::new(Nobody),
        );
        assert!(dropped.is_empty(), "{dropped:?}");
        catalog
    }

    /// A completion names a template exactly as larkgate lists it, and reaches only the
    /// upstream that listed it.
    #[test]
    fn a_template_reaches_exactly_the_upstream_that_listed_it() {
        let table = Catalog::default();
        table.replace_upstream(
            "docs",
            Some(catalog("docs", &[], &["docs://pages/{slug}"], &[])),
        );
        table.replace_upstream("docs2", Some(catalog("docs2", &[], &["other://{x}"], &[])));
        let found = |text: &str| {
            table
                .resolve_template(text)
                .map(|r| (r.alias, r.original, r.entry))
        };
        assert_eq!(
            found("larkgate://docs/docs://pages/{slug}"),
            Ok((
                "docs".into(),
                "docs://pages/{slug}".into(),
                "larkgate://docs/docs://pages/{slug}".into()
            ))
        );
        assert_eq!(found("larkgate://docs2/other://{x}").unwrap().0, "docs2");
        for hostile in [
            // A URI made from the template is not the template.
            "larkgate://docs/docs://pages/intro",
            // Another upstream's template under this alias, and the other way round.
            "larkgate://docs/other://{x}",
            "larkgate://docs2/docs://pages/{slug}",
            // The upstream's own text, and an alias that listed nothing.
            "docs://pages/{slug}",
            "larkgate://nobody/docs://pages/{slug}",
            "larkgate://docs/docs://pages/{slug}/",
        ] {
            assert_eq!(found(hostile), Err(NotResolved::Missing), "{hostile}");
        }
        let long = format!("larkgate://docs/{}", "x".repeat(MAX_URI_BYTES));
        assert_eq!(found(&long), Err(NotResolved::Missing));
    }

    #[test]
    fn a_uri_reaches_exactly_the_upstream_that_listed_it() {
        let table = Catalog::default();
        table.replace_upstream(
            "docs",
            Some(catalog(
                "docs",
                &["file:///guide.md"],
                &["docs://pages/{slug}"],
                &["summarize"],
            )),
        );
        table.replace_upstream(
            "docs2",
            Some(catalog(
                "docs2",
                &["file:///guide.md"],
                &["docs://pages/{slug}"],
                &["summarize"],
            )),
        );
        let found = |uri: &str| {
            table
                .resolve(TargetKind::Resource, uri)
                .map(|r| (r.alias, r.original, r.entry))
        };
        assert_eq!(
            found("larkgate://docs/file:///guide.md"),
            Ok((
                "docs".into(),
                "file:///guide.md".into(),
                "larkgate://docs/file:///guide.md".into()
            ))
        );
        assert_eq!(
            found("larkgate://docs2/docs://pages/intro"),
            Ok((
                "docs2".into(),
                "docs://pages/intro".into(),
                "larkgate://docs2/docs://pages/{slug}".into()
            ))
        );
        for hostile in [
            // Listed by nobody under that alias.
            "larkgate://docs/file:///etc/passwd",
            "larkgate://nobody/file:///guide.md",
            // A template's expansion made to climb out of its segment or add a query.
            "larkgate://docs/docs://pages/../../secret",
            "larkgate://docs/docs://pages/intro?x=1",
            // An alias smuggled into the path.
            "larkgate://docs/larkgate://docs2/file:///guide.md",
            // The upstream's own URI, and larkgate's form with another scheme.
            "file:///guide.md",
            "larkgatex://docs/file:///guide.md",
        ] {
            assert_eq!(found(hostile), Err(NotResolved::Missing), "{hostile}");
        }
        let long = "larkgate://docs/docs://pages/".to_owned() + &"a".repeat(MAX_URI_BYTES);
        assert_eq!(found(&long), Err(NotResolved::Missing));
        let prompt = table
            .resolve(TargetKind::Prompt, "docs2__summarize")
            .unwrap();
        assert_eq!(
            (prompt.alias.as_str(), prompt.original.as_str()),
            ("docs2", "summarize")
        );
        assert!(table.resolve(TargetKind::Prompt, "summarize").is_err());
        // Withdrawn: gone.
        table.replace_upstream("docs2", None);
        assert_eq!(
            found("larkgate://docs2/file:///guide.md"),
            Err(NotResolved::Missing)
        );
    }

    #[test]
    fn what_a_hostile_upstream_lists_cannot_reach_another_upstream() {
        let table = Catalog::default();
        table.replace_upstream(
            "docs",
            Some(catalog("docs", &["file:///guide.md"], &[], &["summarize"])),
        );
        // It lists a URI that climbs to another alias, one that names it, and a template that
        // matches anything.
        table.replace_upstream(
            "evil",
            Some(catalog(
                "evil",
                &[
                    "../docs/file:///guide.md",
                    "larkgate://docs/file:///guide.md",
                ],
                &["{+anything}"],
                &["docs__summarize"],
            )),
        );
        let reached = |uri: &str| table.resolve(TargetKind::Resource, uri).unwrap().alias;
        assert_eq!(reached("larkgate://docs/file:///guide.md"), "docs");
        assert_eq!(reached("larkgate://evil/../docs/file:///guide.md"), "evil");
        assert_eq!(
            reached("larkgate://evil/larkgate://docs/file:///guide.md"),
            "evil"
        );
        assert_eq!(reached("larkgate://evil/whatever"), "evil");
        // Its prompt named like another's gets that upstream's name prefixed: no collision.
        let prompt = table
            .resolve(TargetKind::Prompt, "docs__summarize")
            .unwrap();
        assert_eq!(prompt.alias, "docs");
        let prompt = table
            .resolve(TargetKind::Prompt, "evil__docs__summarize")
            .unwrap();
        assert_eq!(prompt.alias, "evil");
    }

    #[test]
    fn two_templates_of_one_upstream_matching_one_uri_is_ambiguous_not_a_guess() {
        let table = Catalog::default();
        table.replace_upstream(
            "docs",
            Some(catalog("docs", &[], &["docs://{a}/x", "docs://p/{b}"], &[])),
        );
        assert_eq!(
            table
                .resolve(TargetKind::Resource, "larkgate://docs/docs://p/x")
                .map(|r| r.entry),
            Err(NotResolved::Ambiguous)
        );
        assert!(
            table
                .resolve(TargetKind::Resource, "larkgate://docs/docs://q/x")
                .is_ok()
        );
    }

    #[test]
    fn listings_are_renamed_filtered_and_changes_are_told_per_kind() {
        let table = Catalog::default();
        let mut resources = table.resource_changes();
        let mut prompts = table.prompt_changes();
        table.replace_upstream(
            "docs",
            Some(catalog("docs", &["a://1"], &["a://{x}"], &["p"])),
        );
        assert!(resources.has_changed().unwrap() && prompts.has_changed().unwrap());
        resources.mark_unchanged();
        prompts.mark_unchanged();
        let all = |_: &str| true;
        assert_eq!(table.resources(all)[0].uri, "larkgate://docs/a://1");
        assert_eq!(
            table.templates(all)[0].uri_template,
            "larkgate://docs/a://{x}"
        );
        assert_eq!(table.prompts(all)[0].name, "docs__p");
        assert!(
            table
                .resources(|uri| uri.starts_with("larkgate://web/"))
                .is_empty()
        );
        // Only the prompts changed: only their listeners are told.
        table.replace_upstream(
            "docs",
            Some(catalog("docs", &["a://1"], &["a://{x}"], &["q"])),
        );
        assert!(!resources.has_changed().unwrap());
        assert!(prompts.has_changed().unwrap());
    }

    #[test]
    fn repeated_and_malformed_entries_are_dropped_and_reported() {
        let (catalog, dropped) = UpstreamCatalog::new(
            "docs",
            vec![resource("a://1"), resource("a://1")],
            vec![template("a://{x"), template("a://{x}"), template("a://{x}")],
            vec![
                Prompt::new("p", None::<String>, None),
                Prompt::new("p", None::<String>, None),
            ],
            |name| Ok(format!("docs__{name}")),
            Arc::new(Nobody),
        );
        assert_eq!(catalog.counts(), (1, 1, 1));
        assert_eq!(dropped.len(), 4, "{dropped:?}");
        assert!(
            dropped.iter().any(|d| d.contains("not closed")),
            "{dropped:?}"
        );
    }
}
