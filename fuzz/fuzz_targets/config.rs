//! Arbitrary text as larkgate's configuration file.
//!
//! Must never panic: any text is a configuration or an error that says what is wrong, the same
//! one each time.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let first = larkgate::config::validate(text);
    if let Err(message) = &first {
        assert!(!message.is_empty());
    }
    assert_eq!(first, larkgate::config::validate(text));
});
