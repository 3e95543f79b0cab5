//! Size bounds on what a refusal records or echoes.
//!
//! ## Threat model
//!
//! A caller chooses the strings a refusal would repeat: a tool name, an argument quoted in an
//! error. Without a bound, one request of a few megabytes is stored twice in the audit chain
//! and sent back, so a principal with no roles at all could grow the data directory by
//! megabytes per call. Every such string is cut to a bound, and a cut string says so and
//! carries the SHA-256 of the whole, so the record still identifies exactly what was sent.

use std::borrow::Cow;

use sha2::{Digest, Sha256};

/// The longest tool name MCP allows, in bytes (characters of `[A-Za-z0-9_.-]`).
pub const MAX_TOOL_NAME_BYTES: usize = 128;

/// The most bytes of a refusal's message or hint that are told and recorded.
pub const MAX_MESSAGE_BYTES: usize = 2048;

/// `text` if it is at most `max` bytes; else its first bytes (at a character boundary, at
/// most `max`) followed by `… (cut: N bytes, sha256 H)`.
pub fn cut(text: &str, max: usize) -> Cow<'_, str> {
    if text.len() <= max {
        return Cow::Borrowed(text);
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let hash = hex::encode(Sha256::digest(text.as_bytes()));
    Cow::Owned(format!(
        "{}… (cut: {} bytes, sha256 {hash})",
        &text[..end],
        text.len()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_text_is_kept_and_long_text_is_cut_marked_and_hashed() {
        assert!(matches!(cut("kv_get", 128), Cow::Borrowed("kv_get")));
        let exact = "a".repeat(128);
        assert_eq!(cut(&exact, 128), exact.as_str());
        let long = "a".repeat(3_000_000);
        let shown = cut(&long, 128);
        assert!(shown.len() < 128 + 120, "{}", shown.len());
        assert!(shown.starts_with(&"a".repeat(128)));
        assert!(shown.contains("cut: 3000000 bytes"), "{shown}");
        assert!(shown.contains(&hex::encode(Sha256::digest(long.as_bytes()))));
        // Never inside a character: 'é' is two bytes.
        let accents = "é".repeat(100);
        let shown = cut(&accents, 5);
        assert!(shown.starts_with("éé…"), "{shown}");
        // Two different long texts with the same beginning stay distinguishable.
        let other = format!("{}b", "a".repeat(2_999_999));
        assert_ne!(cut(&long, 128), cut(&other, 128));
    }
}
