//! The one table from a refusal's [`Code`] to the JSON-RPC error code and the HTTP status it is
//! answered with where the answer is not a tool result: a refused `resources/read` or
//! `prompts/get` (these methods have no error result), and a request the HTTP edge refuses
//! before any MCP method runs. A refused `tools/call` is a result with `isError: true` and
//! these never apply to it.
//!
//! | code | JSON-RPC | HTTP |
//! | --- | --- | --- |
//! | `unauthenticated` | -32001 | 401 |
//! | `forbidden`, `write_barrier` | -32003 | 403 |
//! | `not_found` | -32602 (`resources/read` on 2025-11-25: -32002, as that revision asks) | 404 |
//! | `invalid_arguments` | -32602 | 400 |
//! | `approval_required`, `approval_denied`, `approval_expired` | -32000 | 403 |
//! | `rate_limited`, `limit_exceeded` | -32005 | 429 |
//! | `upstream_unavailable`, `timeout`, `script_suspended` | -32000 | 503 |
//! | `upstream_error` | -32000 | 502 |
//! | `script_failed` | -32000 | 500 |
//! | `internal` | -32603 | 500 |
//!
//! The JSON-RPC codes of larkgate's own (-32000, -32001, -32003, -32005) stay outside
//! -32020..-32099, which the 2026-07-28 revision reserves. Errors of the JSON-RPC protocol
//! itself ([`PARSE_ERROR`], [`INVALID_REQUEST`], [`INVALID_PARAMS`]) carry no refusal code;
//! [`name`] gives every code its name in the access log.

use std::borrow::Cow;

use crate::Code;

/// The body is not JSON.
pub const PARSE_ERROR: i64 = -32700;
/// The body is JSON but not a JSON-RPC request larkgate serves.
pub const INVALID_REQUEST: i64 = -32600;
/// The method is not one the server has.
pub const METHOD_NOT_FOUND: i64 = -32601;
/// The params do not fit the method.
pub const INVALID_PARAMS: i64 = -32602;
/// larkgate itself failed.
pub const INTERNAL_ERROR: i64 = -32603;
/// larkgate's own: a refusal without a more specific code.
pub const REFUSED: i64 = -32000;
/// larkgate's own: no valid credential.
pub const UNAUTHENTICATED: i64 = -32001;
/// A resource that does not exist or that the caller may not see (2025-11-25's
/// `resources/read`).
pub const RESOURCE_NOT_FOUND: i64 = -32002;
/// larkgate's own: a policy, the write barrier or the edge's address rules refuse the request.
pub const FORBIDDEN: i64 = -32003;
/// larkgate's own: a limit is reached (a rate, a cap, a size).
pub const LIMIT_EXCEEDED: i64 = -32005;

impl Code {
    /// The JSON-RPC error code a refusal with this code is answered with (see the table).
    pub const fn json_rpc_code(self) -> i64 {
        match self {
            Code::Unauthenticated => UNAUTHENTICATED,
            Code::Forbidden | Code::WriteBarrier => FORBIDDEN,
            Code::NotFound | Code::InvalidArguments => INVALID_PARAMS,
            Code::RateLimited | Code::LimitExceeded => LIMIT_EXCEEDED,
            Code::Internal => INTERNAL_ERROR,
            Code::ApprovalRequired
            | Code::ApprovalDenied
            | Code::ApprovalExpired
            | Code::UpstreamUnavailable
            | Code::UpstreamError
            | Code::Timeout
            | Code::ScriptFailed
            | Code::ScriptSuspended => REFUSED,
        }
    }

    /// The HTTP status an edge answers a whole request refused with this code with (see the
    /// table).
    pub const fn http_status(self) -> u16 {
        match self {
            Code::Unauthenticated => 401,
            Code::Forbidden
            | Code::WriteBarrier
            | Code::ApprovalRequired
            | Code::ApprovalDenied
            | Code::ApprovalExpired => 403,
            Code::NotFound => 404,
            Code::InvalidArguments => 400,
            Code::RateLimited | Code::LimitExceeded => 429,
            Code::UpstreamUnavailable | Code::Timeout | Code::ScriptSuspended => 503,
            Code::UpstreamError => 502,
            Code::ScriptFailed | Code::Internal => 500,
        }
    }
}

/// The name of one of JSON-RPC's own error codes (`parse_error`, ...); `None` for the others.
pub const fn protocol_name(code: i64) -> Option<&'static str> {
    match code {
        PARSE_ERROR => Some("parse_error"),
        INVALID_REQUEST => Some("invalid_request"),
        METHOD_NOT_FOUND => Some("method_not_found"),
        INVALID_PARAMS => Some("invalid_params"),
        INTERNAL_ERROR => Some("internal_error"),
        _ => None,
    }
}

/// The name an access-log line gives a JSON-RPC error code.
pub fn name(code: i64) -> Cow<'static, str> {
    match protocol_name(code) {
        Some(name) => Cow::Borrowed(name),
        None => Cow::Owned(format!("rpc_error_{code}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_has_one_json_rpc_code_and_one_status() {
        let table: Vec<(&str, i64, u16)> = Code::ALL
            .iter()
            .map(|c| (c.as_str(), c.json_rpc_code(), c.http_status()))
            .collect();
        assert_eq!(
            table,
            [
                ("unauthenticated", -32001, 401),
                ("forbidden", -32003, 403),
                ("not_found", -32602, 404),
                ("invalid_arguments", -32602, 400),
                ("approval_required", -32000, 403),
                ("approval_denied", -32000, 403),
                ("approval_expired", -32000, 403),
                ("write_barrier", -32003, 403),
                ("rate_limited", -32005, 429),
                ("limit_exceeded", -32005, 429),
                ("upstream_unavailable", -32000, 503),
                ("upstream_error", -32000, 502),
                ("timeout", -32000, 503),
                ("script_failed", -32000, 500),
                ("script_suspended", -32000, 503),
                ("internal", -32603, 500),
            ]
        );
    }

    #[test]
    fn no_code_of_larkgates_own_is_in_the_range_the_spec_reserves() {
        for code in Code::ALL {
            let rpc = code.json_rpc_code();
            assert!(!(-32099..=-32020).contains(&rpc), "{code}: {rpc}");
            assert!((400..600).contains(&code.http_status()), "{code}");
        }
    }

    #[test]
    fn protocol_errors_are_named_and_others_numbered() {
        assert_eq!(name(PARSE_ERROR), "parse_error");
        assert_eq!(name(INVALID_PARAMS), "invalid_params");
        assert_eq!(name(INTERNAL_ERROR), "internal_error");
        assert_eq!(name(UNAUTHENTICATED), "rpc_error_-32001");
    }
}
