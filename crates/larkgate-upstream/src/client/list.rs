//! Listing an upstream's tools, prompts, resources and resource templates, and reading or
//! getting one: each list paginated by larkgate's own loop (a repeating cursor or more than
//! [`UpstreamLimits::max_pages`] pages is an error), at most [`UpstreamLimits::max_tools`]
//! tools kept and the rest counted.

use std::collections::HashSet;
use std::sync::atomic::Ordering;

use rmcp::model::{
    ClientRequest, GetPromptRequestParams, GetPromptResult, JsonObject, PaginatedRequestParams,
    Prompt, ReadResourceRequestParams, ReadResourceResult, Resource, ResourceTemplate,
    ServerResult, Tool,
};

use super::error::answered_with;
use super::{UpstreamClient, UpstreamError};

impl UpstreamClient {
    /// Lists the server's tools, page by page.
    pub async fn list_tools(&self) -> Result<Vec<Tool>, UpstreamError> {
        self.tools_changed.store(false, Ordering::SeqCst);
        let (tools, dropped) = self
            .paginate("tools/list", |params| async move {
                let request = ClientRequest::ListToolsRequest(rmcp::model::ListToolsRequest {
                    method: Default::default(),
                    params,
                    extensions: Default::default(),
                });
                match self.send(request, false).await? {
                    ServerResult::ListToolsResult(page) => Ok((page.tools, page.next_cursor)),
                    other => Err(answered_with("tools/list", &other)),
                }
            })
            .await?;
        if dropped > 0 {
            tracing::warn!(
                dropped,
                kept = tools.len(),
                "an upstream listed more tools than its max_tools limit; the rest were dropped"
            );
        }
        self.dropped.store(dropped, Ordering::SeqCst);
        Ok(tools)
    }

    /// Lists the server's prompts, page by page, within the limits of a tool listing.
    pub async fn list_prompts(&self) -> Result<Vec<Prompt>, UpstreamError> {
        let (prompts, _) = self
            .paginate("prompts/list", |params| async move {
                let request = ClientRequest::ListPromptsRequest(rmcp::model::ListPromptsRequest {
                    method: Default::default(),
                    params,
                    extensions: Default::default(),
                });
                match self.send(request, false).await? {
                    ServerResult::ListPromptsResult(page) => Ok((page.prompts, page.next_cursor)),
                    other => Err(answered_with("prompts/list", &other)),
                }
            })
            .await?;
        Ok(prompts)
    }

    /// Lists the server's resources, page by page, within the limits of a tool listing.
    pub async fn list_resources(&self) -> Result<Vec<Resource>, UpstreamError> {
        let (resources, _) = self
            .paginate("resources/list", |params| async move {
                let request =
                    ClientRequest::ListResourcesRequest(rmcp::model::ListResourcesRequest {
                        method: Default::default(),
                        params,
                        extensions: Default::default(),
                    });
                match self.send(request, false).await? {
                    ServerResult::ListResourcesResult(page) => {
                        Ok((page.resources, page.next_cursor))
                    }
                    other => Err(answered_with("resources/list", &other)),
                }
            })
            .await?;
        Ok(resources)
    }

    /// Lists the server's resource templates, page by page, within the limits of a tool
    /// listing.
    pub async fn list_resource_templates(&self) -> Result<Vec<ResourceTemplate>, UpstreamError> {
        let (templates, _) = self
            .paginate("resources/templates/list", |params| async move {
                let request = ClientRequest::ListResourceTemplatesRequest(
                    rmcp::model::ListResourceTemplatesRequest {
                        method: Default::default(),
                        params,
                        extensions: Default::default(),
                    },
                );
                match self.send(request, false).await? {
                    ServerResult::ListResourceTemplatesResult(page) => {
                        Ok((page.resource_templates, page.next_cursor))
                    }
                    other => Err(answered_with("resources/templates/list", &other)),
                }
            })
            .await?;
        Ok(templates)
    }

    /// Gets prompt `name` with `arguments`.
    pub async fn get_prompt(
        &self,
        name: &str,
        arguments: Option<JsonObject>,
    ) -> Result<GetPromptResult, UpstreamError> {
        let mut params = GetPromptRequestParams::new(name);
        params.arguments = arguments;
        let request = ClientRequest::GetPromptRequest(rmcp::model::GetPromptRequest::new(params));
        match self.send(request, true).await? {
            ServerResult::GetPromptResult(result) => Ok(result),
            other => Err(answered_with("prompts/get", &other)),
        }
    }

    /// Completes an argument of the server's prompt or resource template (`completion/complete`).
    pub async fn complete(
        &self,
        params: rmcp::model::CompleteRequestParams,
    ) -> Result<rmcp::model::CompleteResult, UpstreamError> {
        let request = ClientRequest::CompleteRequest(rmcp::model::CompleteRequest::new(params));
        match self.send(request, true).await? {
            ServerResult::CompleteResult(result) => Ok(result),
            other => Err(answered_with("completion/complete", &other)),
        }
    }

    /// Reads the resource at `uri` (the server's own URI).
    pub async fn read_resource(&self, uri: &str) -> Result<ReadResourceResult, UpstreamError> {
        let params = ReadResourceRequestParams::new(uri);
        let request =
            ClientRequest::ReadResourceRequest(rmcp::model::ReadResourceRequest::new(params));
        match self.send(request, true).await? {
            ServerResult::ReadResourceResult(result) => Ok(result),
            other => Err(answered_with("resources/read", &other)),
        }
    }

    /// A whole paginated listing of `method`: `page` asks for one page (after the cursor it is
    /// given) and answers its items and next cursor. At most [`UpstreamLimits::max_pages`]
    /// pages and [`UpstreamLimits::max_tools`] items are kept (answered with how many were
    /// dropped over that); a cursor seen before is a listing that would never end.
    async fn paginate<T, F, Fut>(
        &self,
        method: &str,
        page: F,
    ) -> Result<(Vec<T>, usize), UpstreamError>
    where
        F: Fn(Option<PaginatedRequestParams>) -> Fut,
        Fut: Future<Output = Result<(Vec<T>, Option<String>), UpstreamError>>,
    {
        let mut items = Vec::new();
        let mut dropped = 0usize;
        let mut cursors = HashSet::new();
        let mut cursor: Option<String> = None;
        for _page in 0..self.limits.max_pages {
            let params = cursor
                .clone()
                .map(|c| PaginatedRequestParams::default().with_cursor(Some(c)));
            let (listed, next) = page(params).await?;
            for item in listed {
                if items.len() < self.limits.max_tools {
                    items.push(item);
                } else {
                    dropped += 1;
                }
            }
            match next {
                None => return Ok((items, dropped)),
                Some(next) => {
                    if !cursors.insert(next.clone()) {
                        return Err(UpstreamError::Protocol(format!(
                            "{method} repeated the cursor {next:?}; the listing would never end"
                        )));
                    }
                    cursor = Some(next);
                }
            }
        }
        Err(UpstreamError::Protocol(format!(
            "{method} did not end within {} pages",
            self.limits.max_pages
        )))
    }
}
