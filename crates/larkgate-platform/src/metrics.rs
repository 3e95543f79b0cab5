//! Prometheus metrics of the platform: every call by tool and outcome code, and its latency.
//!
//! Label cardinality is bounded by the registry: a call to a tool that does not exist (or that
//! the caller may not see) is counted under the tool label `-`, so callers cannot create label
//! values at will.

use std::sync::Mutex;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Labels of a call.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CallLabels {
    /// The tool (`-` for one that does not exist or is not visible).
    pub tool: String,
    /// `ok` or the refusal code.
    pub code: String,
}

/// Labels of a latency observation.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ToolLabels {
    /// The tool (`-` as above).
    pub tool: String,
}

/// The platform's metrics.
#[derive(Debug)]
pub struct Metrics {
    registry: Mutex<Registry>,
    calls: Family<CallLabels, Counter>,
    latency: Family<ToolLabels, Histogram>,
    /// Sessions open now (set by the endpoint that owns them).
    pub active_sessions: Gauge,
    /// Script runs in progress.
    pub active_runs: Gauge,
    /// Bytes of the script memory budget the runs in progress reserve.
    pub script_memory_reserved_bytes: Gauge,
    /// Tool calls in progress (a graceful shutdown waits for them).
    pub active_calls: Gauge,
}

impl Default for Metrics {
    fn default() -> Self {
        let calls = Family::<CallLabels, Counter>::default();
        let latency = Family::<ToolLabels, Histogram>::new_with_constructor(|| {
            // 50 µs to ~13 s.
            Histogram::new(exponential_buckets(0.000_05, 2.0, 19))
        });
        let active_sessions = Gauge::default();
        let active_runs = Gauge::default();
        let script_memory_reserved_bytes = Gauge::default();
        let active_calls = Gauge::default();
        let mut registry = Registry::with_prefix("larkgate");
        registry.register(
            "calls",
            "Tool calls by tool and outcome code",
            calls.clone(),
        );
        registry.register(
            "call_duration_seconds",
            "Tool call latency through the whole pipeline",
            latency.clone(),
        );
        registry.register(
            "active_sessions",
            "Sessions open now",
            active_sessions.clone(),
        );
        registry.register(
            "active_runs",
            "Script runs in progress",
            active_runs.clone(),
        );
        registry.register(
            "script_memory_reserved_bytes",
            "Bytes of the script memory budget reserved by runs in progress",
            script_memory_reserved_bytes.clone(),
        );
        registry.register(
            "active_calls",
            "Tool calls in progress",
            active_calls.clone(),
        );
        Metrics {
            registry: Mutex::new(registry),
            calls,
            latency,
            active_sessions,
            active_runs,
            script_memory_reserved_bytes,
            active_calls,
        }
    }
}

impl Metrics {
    /// Records one call.
    pub fn record_call(&self, tool: &str, code: &str, seconds: f64) {
        self.calls
            .get_or_create(&CallLabels {
                tool: tool.to_owned(),
                code: code.to_owned(),
            })
            .inc();
        self.latency
            .get_or_create(&ToolLabels {
                tool: tool.to_owned(),
            })
            .observe(seconds);
    }

    /// Registers a metric owned elsewhere (an endpoint's or the federation's).
    pub fn register(
        &self,
        name: &str,
        help: &str,
        metric: impl prometheus_client::registry::Metric,
    ) {
        self.registry
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .register(name, help, metric);
    }

    /// The Prometheus text exposition of every metric.
    pub fn encode(&self) -> String {
        let mut text = String::new();
        let registry = self.registry.lock().unwrap_or_else(|p| p.into_inner());
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut text, &registry);
        text
    }
}
