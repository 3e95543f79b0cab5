//! `larkgate upstream add`: connect, list the server's tools and report them before anything
//! is saved; an OAuth upstream is signed in to first, and nothing is kept when that fails.

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::Arc;

use anyhow::{Context as _, bail};
use larkgate_platform::Platform;
use larkgate_upstream::SystemResolver;
use larkgate_upstream::config::{Grant, OAuthConfig, UpstreamConfig};
use larkgate_upstream::manage;

use crate::cli::context::StoreContext;

/// Signs in to OAuth upstream `config` as the command's admin, printing the URL to open.
pub(super) async fn sign_in(
    platform: &Platform,
    context: &StoreContext,
    config: &UpstreamConfig,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let alias = &config.alias;
    let show = |url: &str| {
        let _ = writeln!(
            out,
            "open this URL in a browser on this machine to sign in to {alias} (waiting up to \
             {} seconds):\n{url}",
            larkgate_upstream::oauth::LOGIN_WAIT.as_secs()
        );
        let _ = out.flush();
    };
    let key = larkgate_upstream::credentials::CredentialKey::from_environment().map(Arc::new);
    manage::sign_in(
        platform,
        config,
        &context.actor.id,
        None,
        Arc::new(SystemResolver),
        key,
        show,
    )
    .await?;
    Ok(())
}

/// `upstream add`'s OAuth flags as an `[upstreams.oauth]` table (`settings` without its
/// grant), or none without them.
pub(super) fn oauth_settings(
    oauth: bool,
    client_credentials: bool,
    settings: OAuthConfig,
) -> anyhow::Result<Option<OAuthConfig>> {
    if !oauth && !client_credentials {
        if settings != OAuthConfig::default() {
            bail!(
                "--client-id, --client-secret, --scope and --client-metadata-url are OAuth \
                 settings: add --oauth (a person signs in) or --client-credentials (a machine \
                 account)"
            );
        }
        return Ok(None);
    }
    if let Some(secret) = &settings.client_secret
        && !(secret.starts_with("${") && secret.ends_with('}'))
    {
        bail!(
            "--client-secret is stored with the upstream, so it takes the name of a variable of \
             larkgate's environment that holds the secret, not the secret: for example \
             --client-secret '${{VAULT_CLIENT_SECRET}}'"
        );
    }
    Ok(Some(OAuthConfig {
        grant: if client_credentials {
            Grant::ClientCredentials
        } else {
            Grant::AuthorizationCode
        },
        ..settings
    }))
}

/// `NAME=VALUE` arguments of `flag` as a map.
pub(super) fn pairs(arguments: &[String], flag: &str) -> anyhow::Result<BTreeMap<String, String>> {
    arguments
        .iter()
        .map(|argument| {
            let (key, value) = argument
                .split_once('=')
                .with_context(|| format!("{flag} {argument:?} is not NAME=VALUE"))?;
            Ok((key.trim().to_owned(), value.to_owned()))
        })
        .collect()
}

pub(super) async fn add(
    context: &StoreContext,
    config: UpstreamConfig,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let taken: Vec<String> = context
        .config
        .upstreams
        .iter()
        .map(|u| u.alias.clone())
        .collect();
    let platform = context.platform()?;
    // A person signs in before the server is asked for its tools; nothing of the upstream is
    // kept when that or the connection fails.
    if config.oauth.is_some() {
        manage::addable(&platform, &config, &taken).await?;
    }
    if config.signs_in() {
        sign_in(&platform, context, &config, out).await?;
    }
    let added = manage::add(
        &platform,
        &config,
        &taken,
        &context.actor.id,
        None,
        Arc::new(SystemResolver),
    )
    .await;
    let added = match added {
        Ok(added) => added,
        Err(error) => {
            // Its alias was free (checked above): the tokens are this attempt's.
            if config.oauth.is_some() && matches!(error, manage::ManageError::Unreachable(_)) {
                context
                    .store
                    .remove_upstream_credentials(&config.alias)
                    .await?;
            }
            return Err(error.into());
        }
    };
    writeln!(
        out,
        "{}: {} ({}), {} tools",
        added.alias,
        added.server.as_deref().unwrap_or("unnamed server"),
        added.protocol.as_deref().unwrap_or("?"),
        added.tools.len()
    )?;
    for tool in &added.tools {
        writeln!(
            out,
            "  {}{}",
            tool.name,
            if tool.read_only {
                "  (declares read-only: drafts may call it)"
            } else {
                ""
            }
        )?;
    }
    for dropped in &added.dropped_for_names {
        writeln!(out, "  dropped {dropped}")?;
    }
    if added.dropped_over_max_tools > 0 {
        writeln!(
            out,
            "  dropped {} tools over the max_tools limit",
            added.dropped_over_max_tools
        )?;
    }
    writeln!(out, "approval: {}", config.approval.describe())?;
    writeln!(
        out,
        "saved; its tool definitions are pinned; {}",
        context.takes_effect()
    )?;
    Ok(())
}
