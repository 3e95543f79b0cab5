//! The envelope of every refusal code, as clients receive it (snapshot).

use std::time::Duration;

use larkgate_platform::{Code, Refusal};

#[test]
fn every_code_has_a_stable_envelope() {
    let envelopes: Vec<serde_json::Value> = Code::ALL
        .iter()
        .map(|&code| {
            let mut refusal =
                Refusal::new(code, format!("a {} refusal", code.as_str())).with_hint("a hint");
            if code == Code::RateLimited {
                refusal.retry_after = Some(Duration::from_millis(1500));
            }
            if matches!(
                code,
                Code::ApprovalRequired | Code::ApprovalDenied | Code::ApprovalExpired
            ) {
                refusal.approval_id = Some("0123456789abcdef".into());
            }
            let result = refusal.to_result();
            serde_json::to_value(&result).unwrap()
        })
        .collect();
    // Rendered by serde_json itself: insta's own JSON writer does not know serde_json's
    // arbitrary-precision numbers, which the starlark crate switches on for the whole build.
    let text = serde_json::to_string_pretty(&envelopes).unwrap();
    insta::assert_snapshot!("refusal_results", text);
}
