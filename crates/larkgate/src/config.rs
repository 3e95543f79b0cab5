//! `larkgate.toml`: one file for the edge, the policy, script limits, audit options and
//! upstreams, found the same way from any working directory ([`Located::find`]):
//!
//! - the data directory is `--data-dir`, else `LARKGATE_DATA_DIR`, else `./larkgate-data`;
//! - the configuration is `--config`, else `LARKGATE_CONFIG`, else `<data dir>/larkgate.toml`
//!   when it exists, else the defaults.
//!
//! So a desktop client that starts `larkgate --data-dir DIR stdio` from wherever it likes gets
//! the policy in `DIR/larkgate.toml`. The file does not name the data directory (a `data_dir`
//! key is an error): the directory is where the file is looked for.
//!
//! ```toml
//! [server]                   # `larkgate serve`'s edge; every key optional (see ServerConfig)
//! listen = "127.0.0.1:8940"  # where it listens (`--listen` overrides)
//! ops_listen = "127.0.0.1:8941"  # /healthz, /readyz and /metrics, apart from /mcp (the default; "beside-mcp": on `listen`)
//! max_connections = 1024
//! header_read_timeout_ms = 10000
//! idle_timeout_ms = 60000
//! shutdown_grace_ms = 10000  # after SIGTERM/SIGINT, how long in-flight calls may finish
//! log_format = "json"        # or "text" (the default); --log-format overrides
//! access_log = true          # one line per MCP request (serve and stdio)
//!
//! [scripts]                  # every key optional; the defaults are larkgate's limits table
//! max_wall_time_ms = 30000   # per run
//! max_ticks = 100000000
//! max_memory_bytes = 268435456   # everything a run's worker allocates
//! max_address_space_bytes = 1073741824
//! max_call_stack = 200
//! max_tool_calls = 10000
//! max_print_bytes = 1048576
//! workers = 2                # workers kept started by `serve` and `stdio`
//! max_concurrent_runs = 32   # more runs wait their turn
//! memory_budget_bytes = 4294967296   # all runs at once; default: half of this machine's memory
//! start_wait_ms = 30000      # how long a run waits for its turn before limit_exceeded
//! max_depth = 4              # how deep published scripts may call each other
//!
//! [store]                    # PostgreSQL instead of SQLite in the data directory (see store)
//! url = "postgres://larkgate@db.internal:5432/larkgate"
//! password = "${LARKGATE_DB_PASSWORD}"
//!
//! [ratelimit]                # rate-limit budgets in Redis, shared by replicas (see ratelimit)
//! redis = "redis://127.0.0.1:6379"
//!
//! [audit]
//! record_arguments = false   # store canonical arguments in intents, not only their hash
//! fsync = false              # fsync the audit journal per record (survives power loss)
//! store_intents = false      # chain each intent in the store before its call runs
//! checkpoints = true         # sign the chain's head every 1,000 records or 60 s
//! anchors_required = false   # refuse calls while an anchor is failing
//!
//! [[audit.anchors]]          # checkpoints kept outside the database too (see anchors)
//! file = "/mnt/other/larkgate-anchors.jsonl"
//!
//! [policy.roles.admin]
//! call = ["*"]
//!
//! [telemetry]                # traces over OTLP/HTTP; off without an endpoint (see telemetry)
//! otlp_endpoint = "http://127.0.0.1:4318"
//! sample_ratio = 1.0
//!
//! [[sign_in.issuers]]        # an identity provider's access tokens (see larkgate_edge::sign_in::config)
//! issuer = "https://login.example.com/realms/acme"
//!
//! [[upstreams]]              # third-party MCP servers (see larkgate_upstream::config)
//! alias = "weather"
//! url = "https://weather.example/mcp"
//! headers = { Authorization = "Bearer ${WEATHER_TOKEN}" }
//!
//! [[servers]]                # more endpoints: /mcp/NAME (see larkgate_platform::servers)
//! name = "forecast"
//! tools = ["weather__*", "kv_get"]
//! ```
//!
//! Unknown keys are errors naming the key. Without a file, everything takes its default.
//! Secrets stay out of the file: upstream header values expand `${VAR}`, and
//! `LARKGATE_UPSTREAM_<ALIAS>_<HEADER>` replaces a header whole (see
//! `larkgate_upstream::config::header_override`).

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use larkgate_platform::policy::Policy;
use larkgate_script::ScriptLimits;
use larkgate_scripts::RunBounds;
use larkgate_upstream::config::UpstreamConfig;
use serde::Deserialize;

pub(crate) mod anchors;
mod ratelimit;
#[cfg(test)]
mod reference;
mod secrets;
mod store;
pub(crate) use ratelimit::RateLimitConfig;
pub(crate) use store::StoreConfig;

/// The configuration file's name in the data directory, read when it exists and neither
/// `--config` nor `LARKGATE_CONFIG` names another.
pub(crate) const CONFIG_FILE: &str = "larkgate.toml";
/// The default data directory.
pub(crate) const DEFAULT_DATA_DIR: &str = "./larkgate-data";
/// The environment variable naming the data directory.
pub(crate) const DATA_DIR_ENV: &str = "LARKGATE_DATA_DIR";
/// The environment variable naming the configuration file.
pub(crate) const CONFIG_ENV: &str = "LARKGATE_CONFIG";

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
    /// Chain each intent in the store before its call runs (nothing of a call is lost with a
    /// replica's disk; a store round trip per call).
    #[serde(default)]
    pub(crate) store_intents: bool,
    /// Sign checkpoints of the chain (default true).
    checkpoints: Option<bool>,
    /// A checkpoint after this many records (default 1,000).
    checkpoint_records: Option<u64>,
    /// A checkpoint this long after the first record since the last one, when fewer came
    /// (default 60).
    checkpoint_seconds: Option<u64>,
    /// Where checkpoints are sent besides the chain (`[[audit.anchors]]`).
    #[serde(default)]
    pub(crate) anchors: Vec<anchors::AnchorConfig>,
    /// Refuse calls while an anchor is failing.
    #[serde(default)]
    pub(crate) anchors_required: bool,
}

impl AuditConfig {
    /// When checkpoints are signed (`None`: they are not), or what is wrong with the keys.
    pub(crate) fn checkpoints(&self) -> Result<Option<(u64, std::time::Duration)>, String> {
        use larkgate_platform::audit::checkpoint::{DEFAULT_EVERY, DEFAULT_EVERY_RECORDS};
        if self.checkpoints == Some(false) {
            if !self.anchors.is_empty() {
                return Err(
                    "audit.anchors anchor checkpoints, and audit.checkpoints = false signs none: \
                     remove one of them"
                        .to_owned(),
                );
            }
            return Ok(None);
        }
        let records = self.checkpoint_records.unwrap_or(DEFAULT_EVERY_RECORDS);
        let every = self
            .checkpoint_seconds
            .map_or(DEFAULT_EVERY, std::time::Duration::from_secs);
        for (i, anchor) in self.anchors.iter().enumerate() {
            anchor
                .validate()
                .map_err(|e| format!("audit.anchors[{i}]: {e}"))?;
        }
        if self.anchors_required && self.anchors.is_empty() {
            return Err(
                "audit.anchors_required is set but no [[audit.anchors]] is configured".to_owned(),
            );
        }
        if records == 0 || every.is_zero() {
            return Err(
                "audit.checkpoint_records and audit.checkpoint_seconds must be at least 1 \
                 (write checkpoints = false to sign none)"
                    .to_owned(),
            );
        }
        Ok(Some((records, every)))
    }
}

/// Script runs: limits (each absent one takes its default) and workers.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ScriptsConfig {
    max_wall_time_ms: Option<u64>,
    max_ticks: Option<u64>,
    /// Every allocation of a run's worker process.
    max_memory_bytes: Option<usize>,
    /// The old name of a weaker limit, refused with what replaced it.
    max_heap_bytes: Option<serde::de::IgnoredAny>,
    /// The worker's address space (`RLIMIT_AS`).
    max_address_space_bytes: Option<u64>,
    max_call_stack: Option<usize>,
    max_tool_calls: Option<u64>,
    max_print_bytes: Option<usize>,
    /// Workers kept started by `serve` and `stdio`.
    workers: Option<usize>,
    /// How many runs may go at once.
    max_concurrent_runs: Option<usize>,
    /// The memory all runs going at once may reserve together.
    memory_budget_bytes: Option<u64>,
    /// How long a run waits for its turn.
    start_wait_ms: Option<u64>,
    /// How deep published scripts may call each other.
    max_depth: Option<u32>,
}

/// The smallest memory limit: a worker allocates about 2 MiB before its script starts (its
/// globals, the start frame), and a run needs room beyond that.
const MIN_MEMORY_BYTES: u64 = 16 * 1024 * 1024;

/// How much address space a worker needs beyond its memory limit: its program's mappings and
/// its stack, which the counting allocator does not see.
const ADDRESS_SPACE_HEADROOM: u64 = 256 * 1024 * 1024;

impl ScriptsConfig {
    /// The limits of every run.
    pub(crate) fn limits(&self) -> ScriptLimits {
        let d = ScriptLimits::default();
        ScriptLimits {
            max_wall_time: self
                .max_wall_time_ms
                .map_or(d.max_wall_time, Duration::from_millis),
            max_ticks: self.max_ticks.unwrap_or(d.max_ticks),
            max_memory_bytes: self.max_memory_bytes.unwrap_or(d.max_memory_bytes),
            max_call_stack: self.max_call_stack.unwrap_or(d.max_call_stack),
            max_tool_calls: self.max_tool_calls.unwrap_or(d.max_tool_calls),
            max_print_bytes: self.max_print_bytes.unwrap_or(d.max_print_bytes),
            values: d.values,
        }
    }

    /// Each worker's address-space limit: by default 1 GiB, or 768 MiB above a memory limit
    /// set higher than 256 MiB.
    pub(crate) fn address_space(&self) -> u64 {
        self.max_address_space_bytes.unwrap_or_else(|| {
            let above_memory =
                (self.limits().max_memory_bytes as u64).saturating_add(768 * 1024 * 1024);
            above_memory.max(larkgate_script::worker::DEFAULT_ADDRESS_SPACE)
        })
    }

    /// Workers kept started by long-running commands.
    pub(crate) fn workers(&self) -> usize {
        self.workers.unwrap_or(2)
    }

    /// How runs are bounded: each run's limits, runs at once and their memory, nesting depth.
    pub(crate) fn bounds(&self) -> RunBounds {
        let limits = self.limits();
        RunBounds {
            limits,
            max_concurrent_runs: self.max_concurrent_runs.unwrap_or(32),
            memory_budget_bytes: self.memory_budget_bytes.unwrap_or_else(|| {
                // Half of this machine's memory, and never less than one run needs.
                larkgate_scripts::turns::default_memory_budget().max(
                    larkgate_scripts::turns::reservation(limits.max_memory_bytes),
                )
            }),
            start_wait: self
                .start_wait_ms
                .map_or(Duration::from_secs(30), Duration::from_millis),
            max_depth: self
                .max_depth
                .unwrap_or(larkgate_scripts::DEFAULT_MAX_DEPTH),
        }
    }

    fn validate(&self) -> Result<(), String> {
        if self.max_heap_bytes.is_some() {
            return Err(
                "scripts.max_heap_bytes is now scripts.max_memory_bytes, which bounds \
                        every allocation of a run's worker (the interpreter's heap limit missed \
                        container storage): rename the key"
                    .to_owned(),
            );
        }
        let positive = [
            ("max_wall_time_ms", self.max_wall_time_ms.map(|v| v as u128)),
            ("max_ticks", self.max_ticks.map(|v| v as u128)),
            ("max_call_stack", self.max_call_stack.map(|v| v as u128)),
            ("max_tool_calls", self.max_tool_calls.map(|v| v as u128)),
            ("max_print_bytes", self.max_print_bytes.map(|v| v as u128)),
            (
                "max_concurrent_runs",
                self.max_concurrent_runs.map(|v| v as u128),
            ),
            ("start_wait_ms", self.start_wait_ms.map(u128::from)),
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
        let memory = self.limits().max_memory_bytes as u64;
        if memory < MIN_MEMORY_BYTES {
            return Err(format!(
                "scripts.max_memory_bytes must be at least {MIN_MEMORY_BYTES} (16 MiB): a \
                 worker allocates about 2 MiB before its script starts"
            ));
        }
        let address_space = self.address_space();
        if address_space < memory.saturating_add(ADDRESS_SPACE_HEADROOM) {
            return Err(format!(
                "scripts.max_address_space_bytes ({address_space}) must be at least \
                 max_memory_bytes ({memory}) + 268435456 (256 MiB for the worker's program and \
                 stack), or runs would hit the address-space limit before their memory limit"
            ));
        }
        let reservation = larkgate_scripts::turns::reservation(memory as usize);
        if let Some(budget) = self.memory_budget_bytes
            && budget < reservation
        {
            return Err(format!(
                "scripts.memory_budget_bytes ({budget}) is less than one run reserves \
                 ({reservation}: max_memory_bytes and the worker's own {}), so no run could \
                 start: raise it or lower max_memory_bytes",
                larkgate_scripts::turns::WORKER_FOOTPRINT
            ));
        }
        Ok(())
    }
}

/// Where a command's data directory and configuration are, and what the configuration says.
#[derive(Clone, Debug)]
pub(crate) struct Located {
    /// The data directory.
    pub(crate) data_dir: PathBuf,
    /// The file read, if one was.
    pub(crate) path: Option<PathBuf>,
    /// What it says (the defaults, when no file was read).
    pub(crate) config: Config,
}

impl Located {
    /// Finds the data directory and the configuration from the flags and the environment
    /// (`env` reads a variable), as the module docs say.
    pub(crate) fn find(
        config_flag: Option<&Path>,
        data_dir_flag: Option<&Path>,
        env: impl Fn(&str) -> Option<String>,
    ) -> anyhow::Result<Self> {
        let from_env = |name: &str| env(name).filter(|v| !v.is_empty()).map(PathBuf::from);
        let data_dir = Self::data_dir(data_dir_flag, &env);
        let path = match config_flag
            .map(Path::to_owned)
            .or_else(|| from_env(CONFIG_ENV))
        {
            Some(named) => Some(named),
            None => Some(data_dir.join(CONFIG_FILE)).filter(|p| p.exists()),
        };
        let config = match &path {
            Some(path) => Config::load(path)?,
            None => Config::default(),
        };
        Ok(Located {
            data_dir,
            path,
            config,
        })
    }

    /// The data directory: `--data-dir`, else the environment's, else the default. It does not
    /// depend on the configuration, which may not even parse.
    pub(crate) fn data_dir(flag: Option<&Path>, env: impl Fn(&str) -> Option<String>) -> PathBuf {
        flag.map(Path::to_owned)
            .or_else(|| {
                env(DATA_DIR_ENV)
                    .filter(|v| !v.is_empty())
                    .map(PathBuf::from)
            })
            .unwrap_or_else(|| PathBuf::from(DEFAULT_DATA_DIR))
    }

    /// What is valid in the file but unwise: an upstream URL that carries a credential.
    pub(crate) fn warnings(&self) -> Vec<String> {
        secrets::url_warnings(&self.config.upstreams)
    }

    /// One line saying which file was read, for a long-running command to print at start.
    pub(crate) fn describe(&self) -> String {
        match &self.path {
            Some(path) => format!("configuration read from {}", path.display()),
            None => format!(
                "no configuration file ({} does not exist; --config or {CONFIG_ENV} \
                 names another): using the defaults",
                self.data_dir.join(CONFIG_FILE).display()
            ),
        }
    }
}

/// The whole configuration.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Config {
    /// `serve`'s edge.
    #[serde(default)]
    pub(crate) server: larkgate_edge::server::ServerConfig,
    /// Script limits and workers.
    #[serde(default)]
    pub(crate) scripts: ScriptsConfig,
    /// Where state is kept: SQLite in the data directory, or PostgreSQL.
    #[serde(default)]
    pub(crate) store: StoreConfig,
    /// Where rate-limit budgets are kept: in the process, or in Redis.
    #[serde(default)]
    pub(crate) ratelimit: RateLimitConfig,
    /// Audit options.
    #[serde(default)]
    pub(crate) audit: AuditConfig,
    /// Roles, approvals, rate limits.
    #[serde(default)]
    pub(crate) policy: Policy,
    /// Federated MCP servers.
    #[serde(default)]
    pub(crate) upstreams: Vec<UpstreamConfig>,
    /// Virtual servers: parts of the catalogue served at `/mcp/NAME`.
    #[serde(default)]
    pub(crate) servers: Vec<larkgate_platform::servers::ServerSpec>,
    /// Trace export (off unless an endpoint is set).
    #[serde(default)]
    pub(crate) telemetry: crate::telemetry::TelemetryConfig,
    /// Identity providers whose access tokens `/mcp` accepts (none unless configured).
    #[serde(default)]
    pub(crate) sign_in: larkgate_edge::sign_in::SignInConfig,
    /// The file's text as TOML, for a reload to tell what changed (empty without a file).
    #[serde(skip)]
    pub(crate) raw: toml::Table,
}

/// Parses and validates configuration text, as `serve` and `check` do; the error is the one
/// they print. Any text gives a configuration or an error, never a panic (fuzzed by
/// `fuzz/fuzz_targets/config.rs`).
pub fn validate(text: &str) -> Result<(), String> {
    Config::parse(text).map(drop).map_err(|e| format!("{e:#}"))
}

impl Config {
    /// Loads and validates the file at `path`.
    pub(crate) fn load(path: &Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read the configuration {}", path.display()))?;
        Self::parse(&text).with_context(|| format!("in {}", path.display()))
    }

    /// Parses and validates configuration text.
    pub(crate) fn parse(text: &str) -> anyhow::Result<Self> {
        let table: toml::Table = toml::from_str(text)?;
        if table.contains_key("data_dir") {
            anyhow::bail!(
                "`data_dir` is not set in the configuration: the data directory is chosen with \
                 --data-dir or {DATA_DIR_ENV}, and its larkgate.toml is the configuration \
                 read by default; remove the key"
            );
        }
        for key in ["listen", "shutdown_grace_ms"] {
            if table.contains_key(key) {
                anyhow::bail!(
                    "`{key}` belongs in the [server] section: write `[server]` and then `{key} = ...`"
                );
            }
        }
        let mut config: Config = toml::from_str(text)?;
        config.raw = table;
        config.server.validate().map_err(anyhow::Error::msg)?;
        config.scripts.validate().map_err(anyhow::Error::msg)?;
        config
            .policy
            .validate()
            .map_err(|e| anyhow::anyhow!("policy.{e}"))?;
        config
            .telemetry
            .validate(|name| std::env::var(name).ok())
            .map_err(anyhow::Error::msg)?;
        config.sign_in.validate().map_err(anyhow::Error::msg)?;
        config
            .store
            .postgres(|name| std::env::var(name).ok())
            .map_err(anyhow::Error::msg)?;
        config
            .ratelimit
            .shared(|name| std::env::var(name).ok())
            .map_err(anyhow::Error::msg)?;
        let mut aliases = std::collections::BTreeSet::new();
        for (i, upstream) in config.upstreams.iter().enumerate() {
            upstream
                .validate()
                .map_err(|e| anyhow::anyhow!("upstreams[{i}]: {e}"))?;
            if !aliases.insert(upstream.alias.as_str()) {
                anyhow::bail!(
                    "upstreams[{i}]: two upstreams have the alias {:?}; aliases must be unique",
                    upstream.alias
                );
            }
        }
        secrets::refuse_literal(&config.upstreams).map_err(anyhow::Error::msg)?;
        config.virtual_servers().map_err(anyhow::Error::msg)?;
        config.audit.checkpoints().map_err(anyhow::Error::msg)?;
        Ok(config)
    }

    /// The virtual servers, checked (as [`Config::parse`] checked them already).
    pub(crate) fn virtual_servers(&self) -> Result<larkgate_platform::servers::Servers, String> {
        larkgate_platform::servers::Servers::new(self.servers.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_give_admin_everything_and_data_under_the_working_directory() {
        let config = Config::parse("").unwrap();
        assert!(config.policy.roles.contains_key("admin"));
        assert!(!config.audit.record_arguments);
        assert_eq!(
            config.server.listen.to_string(),
            larkgate_edge::server::DEFAULT_LISTEN
        );
        assert_eq!(config.scripts.limits(), ScriptLimits::default());
    }

    #[test]
    fn script_limits_and_the_listener_are_configured() {
        let config = Config::parse(
            "[server]\nlisten = \"127.0.0.1:9000\"\n[scripts]\nmax_wall_time_ms = 500\nworkers = 0\n",
        )
        .unwrap();
        assert_eq!(config.server.listen.port(), 9000);
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
    fn script_memory_settings_default_sensibly_and_follow_each_other() {
        const MIB: u64 = 1024 * 1024;
        let defaults = Config::parse("").unwrap().scripts;
        assert_eq!(defaults.limits().max_memory_bytes, 256 * 1024 * 1024);
        assert_eq!(defaults.address_space(), 1024 * MIB);
        let reservation = larkgate_scripts::turns::reservation(256 * 1024 * 1024);
        assert_eq!(
            defaults.bounds().memory_budget_bytes,
            larkgate_scripts::turns::default_memory_budget().max(reservation)
        );
        assert_eq!(defaults.bounds().start_wait, Duration::from_secs(30));
        // A memory limit above 256 MiB takes the address space up with it.
        let big = Config::parse("[scripts]\nmax_memory_bytes = 2147483648").unwrap();
        assert_eq!(big.scripts.address_space(), 2048 * MIB + 768 * MIB);
        let set = Config::parse(
            "[scripts]\nmemory_budget_bytes = 1073741824\nstart_wait_ms = 500\nmax_address_space_bytes = 2147483648",
        )
        .unwrap();
        assert_eq!(set.scripts.bounds().memory_budget_bytes, 1024 * MIB);
        assert_eq!(set.scripts.bounds().start_wait, Duration::from_millis(500));
        assert_eq!(set.scripts.address_space(), 2048 * MIB);
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
    fn the_configuration_is_found_from_the_flags_the_environment_or_the_data_directory() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        std::fs::create_dir(&data).unwrap();
        let none = |_: &str| None;
        // No file anywhere: the defaults, and the data directory's file is what is looked for.
        let found = Located::find(None, Some(&data), none).unwrap();
        assert_eq!(found.path, None);
        assert!(
            found.describe().contains("no configuration file"),
            "{}",
            found.describe()
        );
        assert!(
            found
                .describe()
                .contains(&data.join(CONFIG_FILE).display().to_string())
        );
        // The data directory's own file.
        std::fs::write(data.join(CONFIG_FILE), "[server]\nlisten = \"127.0.0.1:1\"").unwrap();
        let found = Located::find(None, Some(&data), none).unwrap();
        assert_eq!(found.path, Some(data.join(CONFIG_FILE)));
        assert_eq!(found.config.server.listen.port(), 1);
        // The data directory from the environment, the flag first.
        let data_env = {
            let data = data.display().to_string();
            move |name: &str| (name == DATA_DIR_ENV).then(|| data.clone())
        };
        let found = Located::find(None, None, &data_env).unwrap();
        assert_eq!(found.data_dir, data);
        assert_eq!(found.config.server.listen.port(), 1);
        let other = dir.path().join("other");
        assert_eq!(
            Located::find(None, Some(&other), &data_env).unwrap().path,
            None
        );
        // LARKGATE_CONFIG, then --config, over the data directory's file.
        let named = dir.path().join("named.toml");
        std::fs::write(&named, "[server]\nlisten = \"127.0.0.1:2\"").unwrap();
        let config_env = {
            let named = named.display().to_string();
            move |name: &str| (name == CONFIG_ENV).then(|| named.clone())
        };
        let found = Located::find(None, Some(&data), &config_env).unwrap();
        assert_eq!(found.config.server.listen.port(), 2);
        let flagged = dir.path().join("flagged.toml");
        std::fs::write(&flagged, "[server]\nlisten = \"127.0.0.1:3\"").unwrap();
        let found = Located::find(Some(&flagged), Some(&data), &config_env).unwrap();
        assert_eq!(found.config.server.listen.port(), 3);
        // A named file that is missing is an error, not the defaults.
        let missing = dir.path().join("missing.toml");
        let error = Located::find(Some(&missing), Some(&data), none).unwrap_err();
        assert!(
            format!("{error:#}").contains("cannot read the configuration"),
            "{error:#}"
        );
        // The file does not name the data directory.
        std::fs::write(&named, "data_dir = \"/elsewhere\"").unwrap();
        let error = Located::find(Some(&named), Some(&data), none).unwrap_err();
        assert!(
            format!("{error:#}").contains("--data-dir or LARKGATE_DATA_DIR"),
            "{error:#}"
        );
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
        let err = Config::parse("listen = \"127.0.0.1:1\"").unwrap_err();
        assert!(
            format!("{err:#}").contains("`listen` belongs in the [server] section"),
            "{err:#}"
        );
        for bad in ["localhost", "localhost:8940", "127.0.0.1", ":8940", "8940"] {
            let err = Config::parse(&format!("[server]\nlisten = \"{bad}\"")).unwrap_err();
            let text = format!("{err:#}");
            assert!(
                text.contains("IP:PORT") && text.contains("0.0.0.0:8940"),
                "{bad}: {text}"
            );
        }
        let err = Config::parse("[server]\nmax_connections = 0").unwrap_err();
        assert!(
            format!("{err:#}").contains("server.max_connections must be at least 1"),
            "{err:#}"
        );
        for (text, says) in [
            (
                "trusted_proxies = [\"nope\"]",
                "not an address or a CIDR range",
            ),
            (
                "trusted_proxies = [\"10.0.0.0/33\"]",
                "not an address or a CIDR range",
            ),
            ("allowed_hosts = [\"https://x.example\"]", "not a host name"),
            ("allowed_origins = [\"x.example\"]", "not an origin"),
            ("public_url = \"ftp://x.example/mcp\"", "https://"),
            (
                "public_url = \"https://user:pw@x.example/mcp\"",
                "credentials",
            ),
            ("public_url = \"https://x.example/mcp?token=1\"", "query"),
            ("public_url = \"mcp\"", "not a URL"),
        ] {
            let err = Config::parse(&format!("[server]\n{text}")).unwrap_err();
            assert!(format!("{err:#}").contains(says), "{text}: {err:#}");
        }
        let err = Config::parse("[server]\nmax_conections = 5").unwrap_err();
        assert!(
            format!("{err:#}").contains("unknown field `max_conections`"),
            "{err:#}"
        );
        let err =
            Config::parse("[server]\nlisten = \"127.0.0.1:9000\"\nops_listen = \"127.0.0.1:9000\"")
                .unwrap_err();
        assert!(
            format!("{err:#}").contains("ops_listen must differ"),
            "{err:#}"
        );
        let err = Config::parse("[server]\nops_listen = \"localhost:8941\"").unwrap_err();
        assert!(format!("{err:#}").contains("\"beside-mcp\""), "{err:#}");
        // Apart from /mcp by default, on this machine only; beside it when asked.
        use larkgate_edge::server::OpsListen;
        assert_eq!(
            Config::parse("").unwrap().server.ops_listen,
            OpsListen::Apart("127.0.0.1:8941".parse().unwrap())
        );
        assert_eq!(
            Config::parse("[server]\nops_listen = \"beside-mcp\"")
                .unwrap()
                .server
                .ops_listen,
            OpsListen::BesideMcp
        );
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
