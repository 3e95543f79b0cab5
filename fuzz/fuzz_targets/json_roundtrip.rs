//! Arbitrary bytes as JSON through JSON → Value → Starlark → Value → JSON.
//!
//! Must never panic; every value that converts must come back unchanged from each world, and
//! the two ways in (parsed first, or streamed) must agree.

#![no_main]

use larkgate_binding::{Limits, from_json, from_json_slice, from_starlark, to_starlark};
use libfuzzer_sys::fuzz_target;
use starlark::values::Heap;

fuzz_target!(|data: &[u8]| {
    // Small limits so the fuzzer reaches their edges often.
    let limits = Limits::new(16, 2_000, 64 * 1024).unwrap();
    let streamed = from_json_slice(data, limits);
    if let Ok(parsed) = serde_json::from_slice::<serde_json::Value>(data) {
        let via_value = from_json(&parsed, limits);
        assert_eq!(
            streamed.is_ok(),
            via_value.is_ok(),
            "the two ways in disagree: {streamed:?} vs {via_value:?}"
        );
        if let (Ok(a), Ok(b)) = (&streamed, &via_value) {
            assert_eq!(a, b);
        }
    }
    let Ok(value) = streamed else { return };
    let back = Heap::temp(|heap| {
        let star = to_starlark(&value, heap, limits).expect("a value within limits converts");
        from_starlark(star, limits).expect("and comes back")
    });
    assert_eq!(back, value);
    let text = serde_json::to_vec(&back).expect("every value serializes");
    assert_eq!(
        from_json_slice(&text, limits).expect("our own output parses"),
        value
    );
});
