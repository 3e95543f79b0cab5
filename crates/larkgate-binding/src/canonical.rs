//! Canonical JSON (RFC 8785, the JSON Canonicalization Scheme) of a [`Value`].
//!
//! Approvals are bound to the SHA-256 of a call's canonical arguments, so two encodings of the
//! same arguments must give the same bytes, and different arguments different bytes. RFC 8785
//! fixes both: object members sorted by the UTF-16 code units of their names, strings with
//! the minimal escapes of ECMAScript's `JSON.stringify`, and numbers as ECMAScript prints them
//! (`1.0` is `1`, `1e21` is `1e+21`, `-0` is `0`).
//!
//! One deliberate difference: RFC 8785 prints every number as an IEEE double, so the integers
//! 2^53 and 2^53 + 1 would print alike and one approval would cover both. We print an integer
//! outside ±2^53 exactly, in decimal. Within ±2^53 the output is RFC 8785's to the byte.

use std::fmt::Write;

use crate::{Map, Value};

/// The canonical JSON text of `value`.
pub fn canonical_json(value: &Value) -> String {
    let mut out = String::new();
    write_value(value, &mut out);
    out
}

/// The canonical JSON text of a map, as an object.
pub fn canonical_map_json(map: &Map) -> String {
    let mut out = String::new();
    write_map(map, &mut out);
    out
}

/// `map` as the JSON object whose numbers are written as its canonical text writes them: the
/// arguments exactly as an approver is shown them, for a call passed on to another server. A
/// float with an integral value within ±2^53 is an integer (`1.0` is `1`), other floats are
/// ECMAScript's shortest form (`1e+21`, `0.1`), `-0` is `0`; strings, keys and structure are
/// as they are (keys in the map's own order: no server reads meaning into it).
pub fn canonical_map_to_json(map: &Map) -> serde_json::Map<String, serde_json::Value> {
    map.iter()
        .map(|(key, value)| (key.clone(), canonical_value_to_json(value)))
        .collect()
}

fn canonical_value_to_json(value: &Value) -> serde_json::Value {
    match value {
        Value::Null => serde_json::Value::Null,
        Value::Bool(b) => serde_json::Value::Bool(*b),
        Value::Int(i) => serde_json::Value::from(*i),
        Value::Float(f) => {
            let mut text = String::new();
            write_float(f.get(), &mut text);
            // The shortest text of a finite float is a JSON number, which serde_json reads
            // (and, with `arbitrary_precision`, writes back to the byte).
            serde_json::from_str::<serde_json::Number>(&text)
                .map_or(serde_json::Value::Null, serde_json::Value::Number)
        }
        Value::Str(s) => serde_json::Value::String(s.clone()),
        Value::List(items) => {
            serde_json::Value::Array(items.iter().map(canonical_value_to_json).collect())
        }
        Value::Map(map) => serde_json::Value::Object(canonical_map_to_json(map)),
    }
}

fn write_value(value: &Value, out: &mut String) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(true) => out.push_str("true"),
        Value::Bool(false) => out.push_str("false"),
        Value::Int(i) => {
            // Within ±2^53 ECMAScript prints an integral double as its plain decimal digits, so
            // the exact decimal is RFC 8785's output there and a safe one beyond.
            let _ = write!(out, "{i}");
        }
        Value::Float(f) => write_float(f.get(), out),
        Value::Str(s) => write_string(s, out),
        Value::List(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_value(item, out);
            }
            out.push(']');
        }
        Value::Map(map) => write_map(map, out),
    }
}

fn write_map(map: &Map, out: &mut String) {
    // A `Map` is sorted by UTF-8 bytes; RFC 8785 sorts by UTF-16 code units. The two orders
    // differ only between characters above U+FFFF and those in U+E000..=U+FFFF.
    let mut entries: Vec<(&String, &Value)> = map.iter().collect();
    entries.sort_by(|(a, _), (b, _)| a.encode_utf16().cmp(b.encode_utf16()));
    out.push('{');
    for (i, (key, item)) in entries.into_iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        write_string(key, out);
        out.push(':');
        write_value(item, out);
    }
    out.push('}');
}

fn write_float(f: f64, out: &mut String) {
    if f == 0.0 {
        // Both zeros print as 0.
        out.push('0');
        return;
    }
    let mut buffer = ryu_js::Buffer::new();
    out.push_str(buffer.format_finite(f));
}

fn write_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{8}' => out.push_str("\\b"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\u{c}' => out.push_str("\\f"),
            '\r' => out.push_str("\\r"),
            c if c < ' ' => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}
