//! An upstream's resources and prompts in the platform's catalogue
//! ([`larkgate_platform::catalog`]).
//!
//! At each connect, and when the server says its resources or prompts changed, the listings it
//! serves (as its capabilities at initialization say) are read, within the caps of a tool
//! listing, and replace the upstream's entries. A listing that fails leaves that kind empty
//! and is logged; it does not take the upstream's tools down. A prompt is named by the tool
//! naming rule ([`crate::tools::federated_name`]). Reads and gets go through the upstream's
//! [`Link`]: while it is down they answer `upstream_unavailable` with the cause, as its tools
//! do, and its entries stay listed.

use std::sync::Arc;

use larkgate_platform::catalog::{CatalogReader, Subscription, UpstreamCatalog, resource_uri};
use larkgate_platform::{CallContext, Code, Refusal};
use rmcp::model::{
    ArgumentInfo, CompleteRequestParams, CompleteResult, CompletionContext, GetPromptResult,
    ReadResourceResult, Reference,
};
use tracing::Instrument;

use crate::client::UpstreamClient;
use crate::tools::{Link, connected, failed, federated_name};

/// Reads and gets through one upstream's link.
#[derive(Debug)]
struct Reader {
    alias: String,
    link: Arc<Link>,
}

#[async_trait::async_trait]
impl CatalogReader for Reader {
    async fn read_resource(
        &self,
        _context: &CallContext,
        uri: &str,
    ) -> Result<ReadResourceResult, Refusal> {
        let name = resource_uri(&self.alias, uri);
        let client = connected(&self.link, &self.alias, &name)?;
        let span = tracing::info_span!(
            "upstream.read",
            otel.name = "resources/read",
            otel.kind = "client",
            mcp.method.name = "resources/read",
            larkgate.upstream = %self.alias,
        );
        match client.read_resource(uri).instrument(span).await {
            Ok(result) => Ok(result),
            Err(error) => Err(failed(&self.link, &self.alias, &name, &client, error).await),
        }
    }

    async fn get_prompt(
        &self,
        _context: &CallContext,
        name: &str,
        arguments: serde_json::Map<String, serde_json::Value>,
    ) -> Result<GetPromptResult, Refusal> {
        let shown = federated_name(&self.alias, name).unwrap_or_else(|_| name.to_owned());
        let client = connected(&self.link, &self.alias, &shown)?;
        let span = tracing::info_span!(
            "upstream.get_prompt",
            otel.name = format!("prompts/get {name}"),
            otel.kind = "client",
            mcp.method.name = "prompts/get",
            gen_ai.prompt.name = %name,
            larkgate.upstream = %self.alias,
        );
        let arguments = (!arguments.is_empty()).then_some(arguments);
        match client.get_prompt(name, arguments).instrument(span).await {
            Ok(result) => Ok(result),
            Err(error) => Err(failed(&self.link, &self.alias, &shown, &client, error).await),
        }
    }

    async fn complete(
        &self,
        _context: &CallContext,
        reference: Reference,
        argument: ArgumentInfo,
        known: Option<CompletionContext>,
    ) -> Result<CompleteResult, Refusal> {
        let shown = match &reference {
            Reference::Prompt(prompt) => {
                federated_name(&self.alias, &prompt.name).unwrap_or_else(|_| prompt.name.clone())
            }
            Reference::Resource(template) => resource_uri(&self.alias, &template.uri),
            _ => self.alias.clone(),
        };
        let client = connected(&self.link, &self.alias, &shown)?;
        let span = tracing::info_span!(
            "upstream.complete",
            otel.name = "completion/complete",
            otel.kind = "client",
            mcp.method.name = "completion/complete",
            larkgate.upstream = %self.alias,
        );
        let mut params = CompleteRequestParams::new(reference, argument);
        params.context = known;
        match client.complete(params).instrument(span).await {
            Ok(result) => Ok(result),
            Err(error) => Err(failed(&self.link, &self.alias, &shown, &client, error).await),
        }
    }

    /// Held at the upstream by its [`crate::watches::Watches`], one subscription per URI
    /// whoever holds it.
    async fn subscribe(&self, _context: &CallContext, uri: &str) -> Result<Subscription, Refusal> {
        let name = resource_uri(&self.alias, uri);
        let client = connected(&self.link, &self.alias, &name)?;
        if !client.serves_subscriptions() {
            return Err(Refusal::new(
                Code::UpstreamError,
                format!(
                    "{name}: the upstream {:?} does not take resource subscriptions",
                    self.alias
                ),
            )
            .with_hint("read the resource again to see whether it changed"));
        }
        let span = tracing::info_span!(
            "upstream.subscribe",
            otel.name = "resources/subscribe",
            otel.kind = "client",
            mcp.method.name = "resources/subscribe",
            larkgate.upstream = %self.alias,
        );
        match self
            .link
            .watches()
            .watch(&client, uri)
            .instrument(span)
            .await
        {
            Ok((updates, held)) => Ok(Subscription {
                updates,
                held: Box::new(held),
            }),
            Err(error) => Err(failed(&self.link, &self.alias, &name, &client, error).await),
        }
    }
}

/// What one listing pass found: the catalogue, and what was dropped or could not be listed.
pub(crate) struct Listed {
    pub(crate) catalog: UpstreamCatalog,
    pub(crate) problems: Vec<String>,
}

/// Reads `client`'s resources, templates and prompts (those its capabilities say it serves)
/// into upstream `alias`'s catalogue, reached through `link`.
pub(crate) async fn list(alias: &str, client: &UpstreamClient, link: &Arc<Link>) -> Listed {
    client.take_catalog_changed();
    let (resources, prompts) = client.serves_resources_and_prompts();
    let mut problems = Vec::new();
    let listed_resources = if resources {
        or_empty(
            alias,
            "resources",
            client.list_resources().await,
            &mut problems,
        )
    } else {
        Vec::new()
    };
    let listed_templates = if resources {
        let listed = client.list_resource_templates().await;
        or_empty(alias, "resource templates", listed, &mut problems)
    } else {
        Vec::new()
    };
    let listed_prompts = if prompts {
        or_empty(alias, "prompts", client.list_prompts().await, &mut problems)
    } else {
        Vec::new()
    };
    let reader = Arc::new(Reader {
        alias: alias.to_owned(),
        link: Arc::clone(link),
    });
    let (catalog, dropped) = UpstreamCatalog::new(
        alias,
        listed_resources,
        listed_templates,
        listed_prompts,
        |name| federated_name(alias, name),
        reader,
    );
    problems.extend(dropped);
    Listed { catalog, problems }
}

/// A listing, or nothing with the failure logged and noted in `problems`.
fn or_empty<T>(
    alias: &str,
    what: &str,
    listed: Result<Vec<T>, crate::client::UpstreamError>,
    problems: &mut Vec<String>,
) -> Vec<T> {
    listed.unwrap_or_else(|error| {
        tracing::warn!(%alias, %error, "an upstream's {what} could not be listed");
        problems.push(format!("its {what} could not be listed: {error}"));
        Vec::new()
    })
}
