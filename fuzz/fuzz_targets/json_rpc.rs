//! Arbitrary bytes as a request body through the HTTP edge's JSON-RPC check.
//!
//! Must never panic; what it admits is one object with `"jsonrpc": "2.0"`, a string method (or
//! a result or error), an id that is a string, a number or absent, object params, and for
//! `tools/call` a string name and object arguments; what it refuses is answered with a parse
//! error, an invalid request or invalid params, with an id JSON-RPC allows.

#![no_main]

use larkgate_edge::error::EdgeError;
use larkgate_edge::json_rpc::check_message;
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fn answerable(id: &Value) -> bool {
    id.is_string() || id.is_number() || id.is_null()
}

fuzz_target!(|data: &[u8]| {
    match check_message(data) {
        Ok((message, id)) => {
            let object = message.as_object().expect("only objects are admitted");
            assert_eq!(object["jsonrpc"], "2.0");
            assert!(answerable(&id));
            match object.get("method") {
                Some(method) => assert!(method.is_string()),
                None => assert!(object.contains_key("result") || object.contains_key("error")),
            }
            if let Some(params) = object.get("params").filter(|p| !p.is_null()) {
                assert!(params.is_object());
                if object["method"] == "tools/call" {
                    assert!(params["name"].is_string());
                    let arguments = params.get("arguments").unwrap_or(&Value::Null);
                    assert!(arguments.is_object() || arguments.is_null());
                }
            }
        }
        Err(EdgeError::NotJson(_)) => {
            assert!(serde_json::from_slice::<Value>(data).is_err());
        }
        Err(EdgeError::InvalidRequest { id, .. } | EdgeError::InvalidParams { id, .. }) => {
            assert!(answerable(&id));
        }
        Err(other) => panic!("a body check answered {other:?}"),
    }
});
