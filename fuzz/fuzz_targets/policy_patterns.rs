//! Arbitrary tool patterns and names through the policy's `*` matcher.
//!
//! Input: a pattern, a zero byte, a name. Must never panic; a pattern it accepts matches
//! exactly the names a plain dynamic-programming matcher says it does.

#![no_main]

use larkgate_platform::policy::Pattern;
use libfuzzer_sys::fuzz_target;

/// `*` is any run of bytes; every other byte itself.
fn reference(pattern: &[u8], name: &[u8]) -> bool {
    // matched[j]: the pattern so far matches name[..j].
    let mut matched = vec![false; name.len() + 1];
    matched[0] = true;
    for &p in pattern {
        let mut next = vec![false; name.len() + 1];
        for j in 0..=name.len() {
            next[j] = if p == b'*' {
                matched[j] || (j > 0 && next[j - 1])
            } else {
                j > 0 && matched[j - 1] && name[j - 1] == p
            };
        }
        matched = next;
    }
    matched[name.len()]
}

fuzz_target!(|data: &[u8]| {
    let (pattern, name) = match data.iter().position(|&b| b == 0) {
        Some(at) => (&data[..at], &data[at + 1..]),
        None => (data, &b""[..]),
    };
    if pattern.len() > 256 || name.len() > 1024 {
        return;
    }
    let (Ok(pattern_text), Ok(name_text)) =
        (std::str::from_utf8(pattern), std::str::from_utf8(name))
    else {
        return;
    };
    if let Ok(parsed) = Pattern::new(pattern_text) {
        assert_eq!(
            parsed.matches(name_text),
            reference(pattern, name),
            "{pattern_text:?} against {name_text:?}"
        );
    }
});
