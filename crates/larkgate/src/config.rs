//! `larkgate.toml`: one file for the data directory, the policy and the audit options.
//!
//! ```toml
//! data_dir = "./larkgate-data"
//!
//! [audit]
//! record_arguments = false   # store canonical arguments in intents, not only their hash
//! fsync = false              # fsync the audit journal per record (survives power loss)
//!
//! [policy.roles.admin]
//! call = ["*"]
//!
//! [[upstreams]]              # third-party MCP servers (see larkgate_upstream::config)
//! alias = "weather"
//! url = "https://weather.example/mcp"
//! headers = { Authorization = "Bearer ${WEATHER_TOKEN}" }
//! ```
//!
//! Unknown keys are errors naming the key. Without a file, everything takes its default.

use std::path::{Path, PathBuf};

use anyhow::Context;
use larkgate_platform::policy::Policy;
use larkgate_upstream::config::UpstreamConfig;
use serde::Deserialize;

/// The default configuration file, read when it exists and no `--config` is given.
pub(crate) const DEFAULT_CONFIG: &str = "larkgate.toml";
/// The default data directory.
pub(crate) const DEFAULT_DATA_DIR: &str = "./larkgate-data";

/// Audit options.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct AuditConfig {
    /// Record canonical arguments in intents.
    #[serde(default)]
    pub(crate) record_arguments: bool,
    /// fsync the journal after every record.
    #[serde(default)]
    pub(crate) fsync: bool,
}

/// The whole configuration.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Config {
    /// Where the database and the audit journal live.
    #[serde(default = "default_data_dir")]
    pub(crate) data_dir: PathBuf,
    /// Audit options.
    #[serde(default)]
    pub(crate) audit: AuditConfig,
    /// Roles, approvals, rate limits.
    #[serde(default)]
    pub(crate) policy: Policy,
    /// Federated MCP servers.
    #[serde(default)]
    pub(crate) upstreams: Vec<UpstreamConfig>,
}

fn default_data_dir() -> PathBuf {
    PathBuf::from(DEFAULT_DATA_DIR)
}

impl Default for Config {
    fn default() -> Self {
        Config {
            data_dir: default_data_dir(),
            audit: AuditConfig::default(),
            policy: Policy::default(),
            upstreams: Vec::new(),
        }
    }
}

impl Config {
    /// Loads `path`, or `larkgate.toml` if it exists, or the defaults.
    pub(crate) fn load(path: Option<&Path>) -> anyhow::Result<Self> {
        let path = match path {
            Some(path) => path.to_owned(),
            None if Path::new(DEFAULT_CONFIG).exists() => PathBuf::from(DEFAULT_CONFIG),
            None => return Ok(Config::default()),
        };
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("cannot read the configuration {}", path.display()))?;
        Self::parse(&text).with_context(|| format!("in {}", path.display()))
    }

    /// Parses and validates configuration text.
    pub(crate) fn parse(text: &str) -> anyhow::Result<Self> {
        let config: Config = toml::from_str(text)?;
        config
            .policy
            .validate()
            .map_err(|e| anyhow::anyhow!("policy.{e}"))?;
        for (i, upstream) in config.upstreams.iter().enumerate() {
            upstream
                .validate()
                .map_err(|e| anyhow::anyhow!("upstreams[{i}]: {e}"))?;
        }
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_give_admin_everything_and_data_under_the_working_directory() {
        let config = Config::parse("").unwrap();
        assert_eq!(config.data_dir, PathBuf::from(DEFAULT_DATA_DIR));
        assert!(config.policy.roles.contains_key("admin"));
        assert!(!config.audit.record_arguments);
    }

    #[test]
    fn errors_name_the_key() {
        let err = Config::parse("data_dri = \"x\"").unwrap_err();
        assert!(
            format!("{err:#}").contains("unknown field `data_dri`"),
            "{err:#}"
        );
        let err = Config::parse("[policy.roles.x]\ncall = [\"bad name\"]").unwrap_err();
        assert!(format!("{err:#}").contains("not a tool pattern"), "{err:#}");
        let err = Config::parse(
            "[[policy.rate_limits]]\nper = \"principal\"\ncalls = 0\nperiod_seconds = 1",
        )
        .unwrap_err();
        assert!(
            format!("{err:#}").contains("policy.rate_limits[0]"),
            "{err:#}"
        );
    }
}
