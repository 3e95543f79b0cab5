//! `larkgate.toml`: one file for the data directory, the policy and the audit options.
//!
//! ```toml
//! data_dir = "./larkgate-data"
//! listen = "127.0.0.1:8940"  # where `larkgate serve` listens (`--listen` overrides)
//! shutdown_grace_ms = 10000  # after SIGTERM/SIGINT, how long in-flight calls may finish
//!
//! [scripts]                  # every key optional; the defaults are larkgate's limits table
//! max_wall_time_ms = 30000   # per run
//! max_ticks = 100000000
//! max_heap_bytes = 268435456
//! max_call_stack = 200
//! max_tool_calls = 10000
//! max_print_bytes = 1048576
//! workers = 2                # workers kept started by `serve` and `stdio`
//! max_concurrent_runs = 32   # more runs wait their turn
//! max_depth = 4              # how deep published scripts may call each other
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
//! Secrets stay out of the file: upstream header values expand `${VAR}`, and
//! `LARKGATE_UPSTREAM_<ALIAS>_<HEADER>` replaces a header whole (see
//! `larkgate_upstream::config::header_override`).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use larkgate_platform::policy::Policy;
use larkgate_script::ScriptLimits;
use larkgate_scripts::RunBounds;
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

/// The default listen address of `serve`.
pub(crate) const DEFAULT_LISTEN: &str = "127.0.0.1:8940";

/// Script runs: limits (each absent one takes its default) and workers.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ScriptsConfig {
    max_wall_time_ms: Option<u64>,
    max_ticks: Option<u64>,
    max_heap_bytes: Option<usize>,
    max_call_stack: Option<usize>,
    max_tool_calls: Option<u64>,
    max_print_bytes: Option<usize>,
    /// Workers kept started by `serve` and `stdio`.
    workers: Option<usize>,
    /// How many runs may go at once.
    max_concurrent_runs: Option<usize>,
    /// How deep published scripts may call each other.
    max_depth: Option<u32>,
}

impl ScriptsConfig {
    /// The limits of every run.
    pub(crate) fn limits(&self) -> ScriptLimits {
        let d = ScriptLimits::default();
        ScriptLimits {
            max_wall_time: self
                .max_wall_time_ms
                .map_or(d.max_wall_time, Duration::from_millis),
            max_ticks: self.max_ticks.unwrap_or(d.max_ticks),
            max_heap_bytes: self.max_heap_bytes.unwrap_or(d.max_heap_bytes),
            max_call_stack: self.max_call_stack.unwrap_or(d.max_call_stack),
            max_tool_calls: self.max_tool_calls.unwrap_or(d.max_tool_calls),
            max_print_bytes: self.max_print_bytes.unwrap_or(d.max_print_bytes),
            values: d.values,
        }
    }

    /// Workers kept started by long-running commands.
    pub(crate) fn workers(&self) -> usize {
        self.workers.unwrap_or(2)
    }

    /// How runs are bounded: each run's limits, runs at once, nesting depth.
    pub(crate) fn bounds(&self) -> RunBounds {
        let d = RunBounds::default();
        RunBounds {
            limits: self.limits(),
            max_concurrent_runs: self.max_concurrent_runs.unwrap_or(d.max_concurrent_runs),
            max_depth: self.max_depth.unwrap_or(d.max_depth),
        }
    }

    fn validate(&self) -> Result<(), String> {
        let positive = [
            ("max_wall_time_ms", self.max_wall_time_ms.map(|v| v as u128)),
            ("max_ticks", self.max_ticks.map(|v| v as u128)),
            ("max_heap_bytes", self.max_heap_bytes.map(|v| v as u128)),
            ("max_call_stack", self.max_call_stack.map(|v| v as u128)),
            ("max_tool_calls", self.max_tool_calls.map(|v| v as u128)),
            ("max_print_bytes", self.max_print_bytes.map(|v| v as u128)),
            (
                "max_concurrent_runs",
                self.max_concurrent_runs.map(|v| v as u128),
            ),
            ("max_depth", self.max_depth.map(u128::from)),
        ];
        for (key, value) in positive {
            if value == Some(0) {
                return Err(format!("scripts.{key} must be at least 1"));
            }
        }
        if self.workers.is_some_and(|w| w > 64) {
            return Err("scripts.workers must be at most 64".to_owned());
        }
        Ok(())
    }
}

/// The whole configuration.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Config {
    /// Where the database and the audit journal live.
    #[serde(default = "default_data_dir")]
    pub(crate) data_dir: PathBuf,
    /// Where `serve` listens.
    #[serde(default = "default_listen")]
    pub(crate) listen: SocketAddr,
    /// After a shutdown signal, how long in-flight calls may finish (ms).
    #[serde(default = "default_grace_ms")]
    pub(crate) shutdown_grace_ms: u64,
    /// Script limits and workers.
    #[serde(default)]
    pub(crate) scripts: ScriptsConfig,
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

fn default_grace_ms() -> u64 {
    10_000
}

fn default_listen() -> SocketAddr {
    DEFAULT_LISTEN
        .parse()
        .expect("the default listen address parses")
}

fn default_data_dir() -> PathBuf {
    PathBuf::from(DEFAULT_DATA_DIR)
}

impl Default for Config {
    fn default() -> Self {
        Config {
            data_dir: default_data_dir(),
            listen: default_listen(),
            shutdown_grace_ms: default_grace_ms(),
            scripts: ScriptsConfig::default(),
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
        config.scripts.validate().map_err(anyhow::Error::msg)?;
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
        assert_eq!(config.listen.to_string(), DEFAULT_LISTEN);
        assert_eq!(config.scripts.limits(), ScriptLimits::default());
    }

    #[test]
    fn script_limits_and_the_listener_are_configured() {
        let config = Config::parse(
            "listen = \"127.0.0.1:9000\"\n[scripts]\nmax_wall_time_ms = 500\nworkers = 0\n",
        )
        .unwrap();
        assert_eq!(config.listen.port(), 9000);
        assert_eq!(
            config.scripts.limits().max_wall_time,
            Duration::from_millis(500)
        );
        assert_eq!(config.scripts.workers(), 0);
        assert_eq!(
            config.scripts.limits().max_ticks,
            ScriptLimits::default().max_ticks
        );
    }

    #[test]
    fn the_script_nesting_depth_is_configured_and_validated() {
        assert_eq!(
            Config::parse("").unwrap().scripts.bounds().max_depth,
            larkgate_scripts::DEFAULT_MAX_DEPTH
        );
        let config = Config::parse("[scripts]\nmax_depth = 2\nmax_concurrent_runs = 3").unwrap();
        assert_eq!(config.scripts.bounds().max_depth, 2);
        assert_eq!(config.scripts.bounds().max_concurrent_runs, 3);
        let err = Config::parse("[scripts]\nmax_depth = 0").unwrap_err();
        assert!(
            format!("{err:#}").contains("scripts.max_depth must be at least 1"),
            "{err:#}"
        );
        for bad in ["-1", "\"4\"", "4.5", "4294967296"] {
            let err = Config::parse(&format!("[scripts]\nmax_depth = {bad}")).unwrap_err();
            assert!(format!("{err:#}").contains("max_depth"), "{bad}: {err:#}");
        }
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
        let err = Config::parse("[scripts]\nmax_ticks = 0").unwrap_err();
        assert!(
            format!("{err:#}").contains("scripts.max_ticks must be at least 1"),
            "{err:#}"
        );
        let err = Config::parse("[scripts]\nmax_tiks = 5").unwrap_err();
        assert!(
            format!("{err:#}").contains("unknown field `max_tiks`"),
            "{err:#}"
        );
        let err = Config::parse("listen = \"localhost\"").unwrap_err();
        assert!(format!("{err:#}").contains("listen"), "{err:#}");
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
