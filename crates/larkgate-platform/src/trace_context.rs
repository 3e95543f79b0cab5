//! W3C trace context (`traceparent`, `tracestate`) across larkgate's edges: read from a client
//! (the HTTP headers, or a request's `_meta` as SEP-414 puts it), and written for an upstream.
//!
//! Spans are `tracing` spans; they become OpenTelemetry spans only when `larkgate serve` or
//! `larkgate stdio` exports traces (`[telemetry]`). Without that, every function here does
//! nothing: [`adopt`] adopts nothing and [`traceparent_of`] names nothing, so an upstream is not
//! sent a context larkgate does not take part in.
//!
//! ## Threat model
//!
//! A trace context is written by the client, before or without authentication, so it is
//! untrusted text:
//! - Its shape is checked here first ([`well_formed`]: lowercase hex fields of exactly the
//!   W3C lengths; the propagator alone would take a short id and pad it), then it is parsed by
//!   OpenTelemetry's own propagator (which refuses version `ff` and all-zero ids). Anything
//!   else, and any value longer than [`MAX_HEADER_BYTES`], is ignored, and the request starts
//!   a trace of its own. A bad context is never an error a caller sees.
//! - It decides nothing but which trace the spans join and, through the parent-based
//!   sampler, whether they are recorded: a client can ask for its requests to be traced
//!   (the exporter's bounded queue drops spans past its size, so that costs the gateway a
//!   bounded amount of memory and never a call's time), never for a decision of the pipeline.
//! - Only what larkgate's own span is, is sent to an upstream: a fresh `traceparent` whose
//!   parent is larkgate's upstream span, and the `tracestate` the propagator carries.

use std::collections::HashMap;

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::TraceContextExt;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The longest `traceparent` or `tracestate` value read (W3C: `tracestate` SHOULD stay within
/// 512 characters; a `traceparent` is 55).
pub const MAX_HEADER_BYTES: usize = 512;

/// The header (and `_meta` key) of the parent.
pub const TRACEPARENT: &str = "traceparent";
/// The header (and `_meta` key) of vendor state.
pub const TRACESTATE: &str = "tracestate";

/// The remote parent a client's `traceparent` (and `tracestate`) names, if it is a valid
/// one.
pub fn remote_parent(
    traceparent: &str,
    tracestate: Option<&str>,
) -> Option<opentelemetry::Context> {
    if traceparent.len() > MAX_HEADER_BYTES || !well_formed(traceparent) {
        return None;
    }
    let mut carrier = HashMap::with_capacity(2);
    carrier.insert(TRACEPARENT.to_owned(), traceparent.to_owned());
    if let Some(state) = tracestate.filter(|s| s.len() <= MAX_HEADER_BYTES) {
        carrier.insert(TRACESTATE.to_owned(), state.to_owned());
    }
    let context = TraceContextPropagator::new().extract(&carrier);
    let valid = context.span().span_context().is_valid();
    valid.then_some(context)
}

/// Whether `traceparent` has the W3C shape: `VV-TTTT…(32)-SSSS…(16)-FF` in lowercase hex;
/// version `00` ends there, a later version may go on after a `-`.
pub fn well_formed(traceparent: &str) -> bool {
    let bytes = traceparent.as_bytes();
    let hex = |range: std::ops::Range<usize>| {
        bytes
            .get(range)
            .is_some_and(|b| b.iter().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f')))
    };
    let dashes = [2, 35, 52].iter().all(|&i| bytes.get(i) == Some(&b'-'));
    let fields = hex(0..2) && hex(3..35) && hex(36..52) && hex(53..55);
    let end = match bytes.len() {
        55 => true,
        _ => bytes.get(0..2) != Some(b"00") && bytes.get(55) == Some(&b'-'),
    };
    dashes && fields && end
}

/// Makes `span` a child of the client's `traceparent`, when it is valid and `span` has not
/// started yet; returns whether it did.
pub fn adopt(span: &tracing::Span, traceparent: &str, tracestate: Option<&str>) -> bool {
    match remote_parent(traceparent, tracestate) {
        Some(parent) => span.set_parent(parent).is_ok(),
        None => false,
    }
}

/// The `traceparent` and `tracestate` that name `span` to a server larkgate calls, when
/// traces are exported (else `None`).
pub fn traceparent_of(span: &tracing::Span) -> Option<(String, Option<String>)> {
    let context = span.context();
    if !context.span().span_context().is_valid() {
        return None;
    }
    let mut carrier = HashMap::with_capacity(2);
    TraceContextPropagator::new().inject_context(&context, &mut carrier);
    let parent = carrier.remove(TRACEPARENT)?;
    let state = carrier.remove(TRACESTATE).filter(|s| !s.is_empty());
    Some((parent, state))
}

#[cfg(test)]
mod tests {
    use super::*;

    const VALID: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

    #[test]
    fn only_a_well_formed_version_00_context_is_adopted() {
        let cases: &[(&str, bool)] = &[
            (VALID, true),
            // Not sampled by the client: still a parent.
            (
                "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00",
                true,
            ),
            // All-zero ids are invalid.
            (
                "00-00000000000000000000000000000000-b7ad6b7169203331-01",
                false,
            ),
            (
                "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
                false,
            ),
            // Version ff is forbidden.
            (
                "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
                false,
            ),
            // Uppercase hex, short ids, extra fields in version 00, garbage.
            (
                "00-0AF7651916CD43DD8448EB211C80319C-B7AD6B7169203331-01",
                false,
            ),
            ("00-0af7651916cd43dd-b7ad6b7169203331-01", false),
            (
                "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-extra",
                false,
            ),
            // A later version may carry more after a dash; version 00 may not.
            (
                "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-later",
                true,
            ),
            (
                "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01later",
                false,
            ),
            ("", false),
            // Multi-byte characters where hex belongs, and cut short inside a field.
            (
                "00-0af7651916cd43dd8448eb211c8031é-b7ad6b7169203331-01",
                false,
            ),
            ("00-0af7651916cd43dd8448eb211c80319c-b7ad6b71", false),
            ("not a trace context", false),
            ("00-\n-\r-01", false),
        ];
        for (traceparent, valid) in cases {
            assert_eq!(
                remote_parent(traceparent, None).is_some(),
                *valid,
                "{traceparent:?}"
            );
        }
        let long = format!("{VALID}{}", " ".repeat(MAX_HEADER_BYTES));
        assert!(remote_parent(&long, None).is_none());
    }

    #[test]
    fn the_adopted_parent_carries_the_clients_trace_id() {
        let parent = remote_parent(VALID, Some("vendor=abc")).expect("valid");
        let span = parent.span();
        let context = span.span_context();
        assert_eq!(
            context.trace_id().to_string(),
            "0af7651916cd43dd8448eb211c80319c"
        );
        assert_eq!(context.span_id().to_string(), "b7ad6b7169203331");
        assert!(context.is_remote());
        assert!(context.is_sampled());
        assert_eq!(context.trace_state().header(), "vendor=abc");
        // An oversized tracestate is dropped, the parent kept.
        let state = "a=b,".repeat(200);
        let parent = remote_parent(VALID, Some(&state)).expect("valid");
        assert_eq!(parent.span().span_context().trace_state().header(), "");
    }

    #[test]
    fn without_an_exporter_nothing_is_adopted_or_sent() {
        let span = tracing::info_span!("request");
        assert!(!adopt(&span, VALID, None));
        assert_eq!(traceparent_of(&span), None);
    }
}
