//! Text from outside, as it is shown to a person: in a terminal (`larkgate upstream list`,
//! `approvals list`) and in the console.
//!
//! # Threat model
//!
//! Strings that larkgate did not write — an upstream's `serverInfo.name`, a caller's tool
//! arguments — reach an operator's terminal and an approver's page. Shown raw, they can act
//! instead of being read:
//!
//! - **Terminal control**: ESC (`\x1b`) starts sequences that move the cursor, rewrite what
//!   was printed, set the window title or (OSC 52) the clipboard; other C0 and C1 controls and
//!   DEL do the like. A carriage return lets one line print over another.
//! - **Reordering**: bidirectional controls (U+202A–U+202E, U+2066–U+2069, U+200E, U+200F,
//!   U+061C) make `prod-\u{202e}bd-tset\u{202c}` display as `prod-test-db`: an approver would
//!   approve a call on another database than the one shown.
//! - **Hiding**: zero-width and other invisible format characters (U+200B–U+200D,
//!   U+2060–U+2064, U+FEFF, U+00AD, the tag characters U+E0000–U+E007F, the Hangul fillers)
//!   make two different values look the same.
//!
//! [`escaped`] writes every such character as a visible escape, `\u{202e}`, and leaves every
//! other character as it is (the escapes say what is there; they are for reading, not for
//! parsing back). [`json`] does the same inside JSON text with JSON's own escapes, so what is
//! shown is still the same JSON value. Look-alikes that are ordinary characters (fullwidth
//! `ｐｒｏｄ`, the ligature `ﬁ`) are not escaped; [`lookalike`] says what such a value
//! normalises to (NFKC), so an approver can be told.
//!
//! Limit: characters that are merely similar in a given font (Cyrillic `а` beside Latin `a`)
//! are neither escaped nor flagged: NFKC leaves them apart.

use std::borrow::Cow;
use std::fmt::Write as _;

use unicode_normalization::UnicodeNormalization as _;

/// Whether `c` would act on a terminal or a page, or not show as itself.
pub fn hidden(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{00AD}'
                | '\u{061C}'
                | '\u{115F}'
                | '\u{1160}'
                | '\u{180E}'
                | '\u{200B}'..='\u{200F}'
                | '\u{2028}'..='\u{202E}'
                | '\u{2060}'..='\u{206F}'
                | '\u{3164}'
                | '\u{FEFF}'
                | '\u{FFA0}'
                | '\u{FFF9}'..='\u{FFFB}'
                | '\u{1D173}'..='\u{1D17A}'
                | '\u{E0000}'..='\u{E007F}'
        )
}

/// `text` with every [`hidden`] character written as `\u{XXXX}`: for one line of a terminal.
pub fn escaped(text: &str) -> Cow<'_, str> {
    escaped_but(text, |_| false)
}

/// [`escaped`], keeping line breaks and tabs: for text shown on a page in its own block (a
/// script's source, an error's text), where they are layout and act on nothing.
pub fn escaped_text(text: &str) -> Cow<'_, str> {
    escaped_but(text, |c| matches!(c, '\n' | '\t'))
}

fn escaped_but(text: &str, kept: impl Fn(char) -> bool) -> Cow<'_, str> {
    let shown_as_escape = |c: char| hidden(c) && !kept(c);
    if !text.chars().any(shown_as_escape) {
        return Cow::Borrowed(text);
    }
    let mut shown = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if shown_as_escape(c) {
            let _ = write!(shown, "\\u{{{:04x}}}", u32::from(c));
        } else {
            shown.push(c);
        }
    }
    Cow::Owned(shown)
}

/// `value` as JSON text (indented when `pretty`), with every [`hidden`] character inside its
/// strings written as a JSON escape (`\u202e`; beyond the first plane, as its surrogate pair):
/// the same JSON value, with nothing in it that acts or hides.
pub fn json(value: &serde_json::Value, pretty: bool) -> String {
    let text = if pretty {
        serde_json::to_string_pretty(value)
    } else {
        serde_json::to_string(value)
    }
    .unwrap_or_default();
    if !text.chars().any(hidden) {
        return text;
    }
    let mut shown = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        // Outside strings, JSON text has no hidden character but the indentation's newlines.
        if hidden(c) && c != '\n' {
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                let _ = write!(shown, "\\u{unit:04x}");
            }
        } else {
            shown.push(c);
        }
    }
    shown
}

/// What `text` normalises to (NFKC), when that is not `text` itself: a value that shows as
/// another (fullwidth letters, ligatures, compatibility forms). `None` for ordinary text.
pub fn lookalike(text: &str) -> Option<String> {
    let normal: String = text.nfkc().collect();
    (normal != text).then_some(normal)
}

/// Every string in `value` (keys included) that [`lookalike`] flags, with what it normalises
/// to, escaped for display: `"ｐｒｏｄ" shows as "prod"`. At most `most` of them.
pub fn lookalikes(value: &serde_json::Value, most: usize) -> Vec<String> {
    fn walk(value: &serde_json::Value, found: &mut Vec<String>, most: usize) {
        let note = |text: &str, found: &mut Vec<String>| {
            if found.len() < most
                && let Some(normal) = lookalike(text)
            {
                found.push(format!(
                    "\"{}\" shows as \"{}\"",
                    escaped(text),
                    escaped(&normal)
                ));
            }
        };
        match value {
            serde_json::Value::String(text) => note(text, found),
            serde_json::Value::Array(items) => {
                for item in items {
                    walk(item, found, most);
                }
            }
            serde_json::Value::Object(map) => {
                for (key, item) in map {
                    note(key, found);
                    walk(item, found, most);
                }
            }
            _ => {}
        }
    }
    let mut found = Vec::new();
    walk(value, &mut found, most);
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Hostile strings as they reached a terminal or a page, and as they are shown now.
    #[test]
    fn what_acts_or_hides_is_shown_as_an_escape_and_nothing_else_changes() {
        for (raw, shown) in [
            ("weather-peer", "weather-peer"),
            ("Zürich 東京 🌦", "Zürich 東京 🌦"),
            (
                "evil\u{1b}]0;owned\u{7}\u{1b}[2J",
                "evil\\u{001b}]0;owned\\u{0007}\\u{001b}[2J",
            ),
            (
                "clip\u{1b}]52;c;Y3VybA==\u{9c}",
                "clip\\u{001b}]52;c;Y3VybA==\\u{009c}",
            ),
            ("line\roverwritten\n", "line\\u{000d}overwritten\\u{000a}"),
            (
                "prod-\u{202e}bd-tset\u{202c}",
                "prod-\\u{202e}bd-tset\\u{202c}",
            ),
            (
                "a\u{2066}b\u{2069}\u{200f}",
                "a\\u{2066}b\\u{2069}\\u{200f}",
            ),
            ("ad\u{200b}min", "ad\\u{200b}min"),
            ("\u{feff}x\u{ad}y", "\\u{feff}x\\u{00ad}y"),
            ("tag\u{e0041}\u{e007f}", "tag\\u{e0041}\\u{e007f}"),
            ("del\u{7f}", "del\\u{007f}"),
        ] {
            assert_eq!(escaped(raw), shown, "{raw:?}");
        }
    }

    #[test]
    fn text_for_a_page_keeps_its_lines_and_tabs_and_nothing_else_hidden() {
        assert_eq!(
            escaped_text("def main():\n\treturn 1\r\n"),
            "def main():\n\treturn 1\\u{000d}\n"
        );
        assert_eq!(
            escaped_text("prod-\u{202e}bd-tset\u{202c}\n"),
            "prod-\\u{202e}bd-tset\\u{202c}\n"
        );
        assert!(matches!(escaped_text("plain\ntext"), Cow::Borrowed(_)));
    }

    #[test]
    fn json_keeps_its_value_and_shows_no_hidden_character() {
        let value = serde_json::json!({
            "db": "prod-\u{202e}bd-tset\u{202c}",
            "tag": "x\u{e0041}",
            "esc": "\u{1b}[31m",
            "plain": "Zürich",
        });
        for pretty in [false, true] {
            let shown = json(&value, pretty);
            assert!(!shown.chars().any(|c| hidden(c) && c != '\n'), "{shown:?}");
            assert!(shown.contains("prod-\\u202ebd-tset\\u202c"), "{shown}");
            assert!(shown.contains("x\\udb40\\udc41"), "{shown}");
            assert!(shown.contains("Zürich"), "{shown}");
            let back: serde_json::Value = serde_json::from_str(&shown).unwrap();
            assert_eq!(back, value, "the same value");
        }
    }

    #[test]
    fn values_that_show_as_others_are_named_with_what_they_show_as() {
        assert_eq!(lookalike("prod"), None);
        assert_eq!(lookalike("Zürich"), None);
        assert_eq!(lookalike("ｐｒｏｄ").as_deref(), Some("prod"));
        assert_eq!(lookalike("ﬁle").as_deref(), Some("file"));
        let value = serde_json::json!({"db": "ｐｒｏｄ", "ok": "prod", "list": ["①"], "ｋ": 1});
        let found = lookalikes(&value, 10);
        assert_eq!(found.len(), 3, "{found:?}");
        assert!(
            found.contains(&"\"ｐｒｏｄ\" shows as \"prod\"".to_owned()),
            "{found:?}"
        );
        assert!(
            found.contains(&"\"①\" shows as \"1\"".to_owned()),
            "{found:?}"
        );
        assert!(
            found.contains(&"\"ｋ\" shows as \"k\"".to_owned()),
            "{found:?}"
        );
        assert_eq!(lookalikes(&value, 1).len(), 1);
    }
}
