//! Traces: larkgate's spans exported over OTLP/HTTP (protobuf) to a collector, off unless
//! `[telemetry] otlp_endpoint` is set.
//!
//! ```toml
//! [telemetry]
//! otlp_endpoint = "http://127.0.0.1:4318"   # the collector; traces go to <it>/v1/traces
//! sample_ratio = 0.25                        # of the traces larkgate starts (default 1.0)
//! service_name = "larkgate"                  # the resource's service.name
//! headers = { authorization = "Bearer ${OTLP_TOKEN}" }   # sent to the collector
//! export_timeout_ms = 10000
//! max_queued_spans = 2048
//! ```
//!
//! The spans are `tracing` spans (see `larkgate_platform::observe`): one per MCP request,
//! children for each pipeline step, the journal and the dispatch, a script run and each of
//! its host calls, and each call to an upstream. A client's `traceparent` (the header, or
//! `_meta`) is their parent; an upstream is told larkgate's.
//!
//! Export never blocks a call: ended spans go into a bounded queue that a thread of the
//! exporter sends in batches; when the queue is full, spans are dropped (and counted by the
//! SDK), never waited for. The sampler follows a client's sampled flag, and samples
//! `sample_ratio` of the traces that start here.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, Sampler, SdkTracerProvider,
};
use serde::Deserialize;

/// `[telemetry]`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct TelemetryConfig {
    /// The collector's OTLP/HTTP URL (`http://collector:4318`); traces are sent to
    /// `<it>/v1/traces`. None: no traces.
    pub(crate) otlp_endpoint: Option<String>,
    /// The share of the traces started here that are recorded, 0.0 to 1.0.
    pub(crate) sample_ratio: f64,
    /// `service.name` of the spans.
    pub(crate) service_name: String,
    /// Headers sent with each export; values expand `${VAR}` from the environment.
    pub(crate) headers: BTreeMap<String, String>,
    /// How long one export may take (ms).
    pub(crate) export_timeout_ms: u64,
    /// Ended spans kept for export at once; more are dropped.
    pub(crate) max_queued_spans: usize,
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        TelemetryConfig {
            otlp_endpoint: None,
            sample_ratio: 1.0,
            service_name: "larkgate".to_owned(),
            headers: BTreeMap::new(),
            export_timeout_ms: 10_000,
            max_queued_spans: 2048,
        }
    }
}

impl TelemetryConfig {
    /// Checks the settings without connecting anywhere; `env` reads header variables.
    pub(crate) fn validate(&self, env: impl Fn(&str) -> Option<String>) -> Result<(), String> {
        if !(0.0..=1.0).contains(&self.sample_ratio) {
            return Err(format!(
                "telemetry.sample_ratio is {}: write a share from 0.0 (none) to 1.0 (every trace)",
                self.sample_ratio
            ));
        }
        if self.service_name.trim().is_empty() {
            return Err("telemetry.service_name must not be empty".to_owned());
        }
        if self.export_timeout_ms == 0 || self.max_queued_spans == 0 {
            return Err(
                "telemetry.export_timeout_ms and telemetry.max_queued_spans must be at least 1"
                    .to_owned(),
            );
        }
        if let Some(endpoint) = &self.otlp_endpoint {
            traces_url(endpoint)?;
        }
        self.header_values(env)?;
        Ok(())
    }

    /// The headers with their variables expanded.
    fn header_values(
        &self,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<HashMap<String, String>, String> {
        let mut values = HashMap::with_capacity(self.headers.len());
        for (name, value) in &self.headers {
            if http::HeaderName::from_bytes(name.as_bytes()).is_err() {
                return Err(format!(
                    "telemetry.headers: {name:?} is not an HTTP header name"
                ));
            }
            let value = larkgate_upstream::config::expand(value, &env)
                .map_err(|e| format!("telemetry.headers.{name}: {e}"))?;
            if http::HeaderValue::from_str(&value).is_err() {
                // The value may be a secret: say which header, not what it holds.
                return Err(format!(
                    "telemetry.headers.{name}: the value is not valid header text"
                ));
            }
            values.insert(name.clone(), value);
        }
        Ok(values)
    }
}

/// Where traces are sent for `endpoint`, or what is wrong with it.
fn traces_url(endpoint: &str) -> Result<String, String> {
    let problem = larkgate_edge::service_url::problem(endpoint);
    if let Some(problem) = problem {
        return Err(format!(
            "telemetry.otlp_endpoint: {problem}; write the collector's OTLP/HTTP URL, for \
             example \"http://127.0.0.1:4318\" (a collector's credentials go in \
             telemetry.headers)"
        ));
    }
    let base = endpoint.trim_end_matches('/');
    Ok(if base.ends_with("/v1/traces") {
        base.to_owned()
    } else {
        format!("{base}/v1/traces")
    })
}

/// An exporter that says in the log when exports start failing (then at most once a minute
/// while they fail, with how many spans were lost) and when they work again: a collector that
/// is down is otherwise silent, since the SDK's own logs are not built in.
#[derive(Debug)]
struct Reported<E> {
    inner: E,
    failing: std::sync::Mutex<Failing>,
}

#[derive(Debug, Default)]
struct Failing {
    /// When the last warning was logged, while exports fail.
    said: Option<std::time::Instant>,
    /// Spans not delivered since exports started failing.
    lost: u64,
}

/// How often a failing exporter says so again.
const FAILURE_REMINDER: Duration = Duration::from_secs(60);

impl<E> Reported<E> {
    fn new(inner: E) -> Self {
        Reported {
            inner,
            failing: Default::default(),
        }
    }

    fn note(&self, result: &opentelemetry_sdk::error::OTelSdkResult, spans: usize) {
        let mut failing = self.failing.lock().unwrap_or_else(|e| e.into_inner());
        match result {
            Ok(()) => {
                if failing.said.take().is_some() {
                    tracing::warn!(
                        lost_spans = failing.lost,
                        "traces reach the collector again"
                    );
                }
                failing.lost = 0;
            }
            Err(error) => {
                failing.lost += spans as u64;
                let due = failing
                    .said
                    .is_none_or(|said| said.elapsed() >= FAILURE_REMINDER);
                if due {
                    failing.said = Some(std::time::Instant::now());
                    tracing::warn!(
                        %error,
                        lost_spans = failing.lost,
                        "traces could not be sent to the collector; calls are not affected"
                    );
                }
            }
        }
    }
}

impl<E: opentelemetry_sdk::trace::SpanExporter> opentelemetry_sdk::trace::SpanExporter
    for Reported<E>
{
    async fn export(
        &self,
        batch: Vec<opentelemetry_sdk::trace::SpanData>,
    ) -> opentelemetry_sdk::error::OTelSdkResult {
        let spans = batch.len();
        let result = self.inner.export(batch).await;
        self.note(&result, spans);
        result
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> opentelemetry_sdk::error::OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> opentelemetry_sdk::error::OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

/// The traces in force in this process, for a command that serves MCP: the tracer spans are
/// built with (an exporting provider's, or one that records nothing) and whether spans are
/// exported. [`Prepared::apply`] replaces them whole, at start and at a reload.
struct Live {
    tracer: arc_swap::ArcSwap<opentelemetry_sdk::trace::Tracer>,
    exporting: AtomicBool,
    /// The provider exporting now, shut down when another replaces it and at exit.
    provider: Mutex<Option<SdkTracerProvider>>,
    /// The tracer of a provider that samples nothing and exports nowhere.
    off: opentelemetry_sdk::trace::Tracer,
}

static LIVE: OnceLock<Live> = OnceLock::new();

fn live() -> &'static Live {
    LIVE.get_or_init(|| {
        let off = SdkTracerProvider::builder()
            .with_sampler(Sampler::AlwaysOff)
            .build()
            .tracer("larkgate");
        Live {
            tracer: arc_swap::ArcSwap::from_pointee(off.clone()),
            exporting: AtomicBool::new(false),
            provider: Mutex::new(None),
            off,
        }
    })
}

/// Whether spans are exported now (the trace layer is skipped while they are not).
pub(crate) fn exporting() -> bool {
    LIVE.get()
        .is_some_and(|live| live.exporting.load(Ordering::Relaxed))
}

/// The tracer the trace layer builds spans with: the one in force when a span starts.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LiveTracer;

impl opentelemetry::trace::Tracer for LiveTracer {
    type Span = opentelemetry_sdk::trace::Span;

    fn build_with_context(
        &self,
        builder: opentelemetry::trace::SpanBuilder,
        parent: &opentelemetry::Context,
    ) -> Self::Span {
        live().tracer.load().build_with_context(builder, parent)
    }
}

/// Traces for a configuration, built (the configuration checked, the exporter made) but not
/// yet in force: a reload builds them before it changes anything, so a configuration that
/// cannot export is refused whole.
#[derive(Debug)]
pub(crate) struct Prepared {
    provider: Option<SdkTracerProvider>,
}

impl Prepared {
    /// Puts these traces in force for the spans that start from now on. The provider they
    /// replace sends what it has queued (within its export timeout) on a thread of its own.
    pub(crate) fn apply(self) {
        let live = live();
        let old = match self.provider {
            Some(provider) => {
                live.tracer.store(Arc::new(provider.tracer("larkgate")));
                live.exporting.store(true, Ordering::Relaxed);
                replace_provider(live, Some(provider))
            }
            None => {
                live.exporting.store(false, Ordering::Relaxed);
                live.tracer.store(Arc::new(live.off.clone()));
                replace_provider(live, None)
            }
        };
        if let Some(old) = old {
            let _ = std::thread::Builder::new()
                .name("larkgate-traces-end".to_owned())
                .spawn(move || shut_down(&old));
        }
    }
}

fn replace_provider(live: &Live, provider: Option<SdkTracerProvider>) -> Option<SdkTracerProvider> {
    let mut held = live.provider.lock().unwrap_or_else(|p| p.into_inner());
    std::mem::replace(&mut *held, provider)
}

fn shut_down(provider: &SdkTracerProvider) {
    if let Err(error) = provider.shutdown() {
        tracing::warn!(%error, "traces queued when the exporter stopped could not all be sent");
    }
}

/// Traces for a command that serves MCP: `config`'s, in force, and the tracer of the layer
/// that exports them (see [`crate::logging::init`]).
pub(crate) fn start(config: &TelemetryConfig) -> Result<LiveTracer, String> {
    prepare(config)?.apply();
    Ok(LiveTracer)
}

/// Sends what is queued (within the export timeout) and stops exporting: at the end of the
/// command.
pub(crate) fn shutdown() {
    let Some(live) = LIVE.get() else { return };
    live.exporting.store(false, Ordering::Relaxed);
    if let Some(provider) = replace_provider(live, None) {
        shut_down(&provider);
    }
}

/// The exporter's HTTP client: to the configured collector only, never through a proxy named
/// in the environment (`HTTP_PROXY` and its kin), which would receive every span and the
/// configured headers. Built on a thread of its own, as the blocking client must be outside
/// an async runtime.
fn export_client(timeout: Duration) -> Result<reqwest::blocking::Client, String> {
    std::thread::spawn(move || {
        reqwest::blocking::Client::builder()
            .no_proxy()
            .timeout(timeout)
            .build()
    })
    .join()
    .map_err(|_| "telemetry: the exporter's HTTP client could not be built".to_owned())?
    .map_err(|e| format!("telemetry: the exporter's HTTP client could not be built: {e}"))
}

/// Traces as `config` asks for them: an exporting provider, or none when no endpoint is set.
pub(crate) fn prepare(config: &TelemetryConfig) -> Result<Prepared, String> {
    let Some(endpoint) = &config.otlp_endpoint else {
        return Ok(Prepared { provider: None });
    };
    let env = |name: &str| std::env::var(name).ok();
    config.validate(env)?;
    let url = traces_url(endpoint)?;
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_http_client(export_client(Duration::from_millis(
            config.export_timeout_ms,
        ))?)
        .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
        .with_endpoint(url)
        .with_timeout(Duration::from_millis(config.export_timeout_ms))
        .with_headers(config.header_values(env)?)
        .build()
        .map_err(|e| format!("telemetry: the trace exporter could not be built: {e}"))?;
    let batches = BatchConfigBuilder::default()
        .with_max_queue_size(config.max_queued_spans)
        .with_scheduled_delay(Duration::from_millis(500))
        .build();
    let processor = BatchSpanProcessor::builder(Reported::new(exporter))
        .with_batch_config(batches)
        .build();
    let provider = SdkTracerProvider::builder()
        .with_span_processor(processor)
        .with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
            config.sample_ratio,
        ))))
        .with_resource(
            Resource::builder()
                .with_service_name(config.service_name.clone())
                .build(),
        )
        .build();
    Ok(Prepared {
        provider: Some(provider),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(text: &str) -> TelemetryConfig {
        toml::from_str(text).expect("parses")
    }

    #[test]
    fn the_traces_url_is_the_collectors_plus_v1_traces() {
        assert_eq!(
            traces_url("http://127.0.0.1:4318").unwrap(),
            "http://127.0.0.1:4318/v1/traces"
        );
        assert_eq!(
            traces_url("https://otel.example/").unwrap(),
            "https://otel.example/v1/traces"
        );
        assert_eq!(
            traces_url("https://otel.example/v1/traces").unwrap(),
            "https://otel.example/v1/traces"
        );
    }

    #[test]
    fn bad_settings_are_refused_with_what_to_write() {
        let no_env = |_: &str| None;
        let cases: &[(&str, &str)] = &[
            ("otlp_endpoint = \"collector:4318\"", "https:// or http://"),
            ("otlp_endpoint = \"not a url\"", "is not a URL"),
            (
                "otlp_endpoint = \"http://user:secret@collector:4318\"",
                "must not carry credentials",
            ),
            (
                "otlp_endpoint = \"http://collector:4318/?x=1\"",
                "query or a fragment",
            ),
            ("sample_ratio = 1.5", "from 0.0 (none) to 1.0"),
            ("sample_ratio = -0.1", "from 0.0 (none) to 1.0"),
            ("service_name = \" \"", "must not be empty"),
            ("max_queued_spans = 0", "at least 1"),
            (
                "headers = { authorization = \"Bearer ${OTLP_TOKEN}\" }",
                "OTLP_TOKEN",
            ),
            (
                "headers = { \"bad name\" = \"x\" }",
                "not an HTTP header name",
            ),
        ];
        for (text, says) in cases {
            let error = config(text).validate(no_env).expect_err(text);
            assert!(error.contains(says), "{text}: {error}");
            assert!(!error.contains("secret"), "{error}");
        }
        let error = config("headers = { authorization = \"Bearer ${T}\" }")
            .validate(|_| Some("line\nbreak".to_owned()))
            .expect_err("a newline is not header text");
        assert!(error.contains("not valid header text"), "{error}");
        assert!(
            !error.contains("line"),
            "the value is not repeated: {error}"
        );
        assert!(toml::from_str::<TelemetryConfig>("endpoint = \"x\"").is_err());
    }

    #[test]
    fn defaults_export_nothing() {
        let defaults = TelemetryConfig::default();
        defaults.validate(|_| None).unwrap();
        assert!(prepare(&defaults).unwrap().provider.is_none());
    }
}
