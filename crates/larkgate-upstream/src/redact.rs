//! Secrets out of text: the query string and the userinfo of every URL in a message.
//!
//! ## Threat model
//!
//! Operators put credentials in upstream URLs (`https://user:pw@host/mcp?api_key=...`), and
//! the HTTP and MCP libraries quote the URL in their errors. Such text reaches the log and
//! `larkgate upstream list`; it never reaches a caller at all (callers are told only what
//! failed and a correlation id, see [`crate::tools`]). [`urls`] removes, from every
//! `http://` or `https://` URL in a text, the userinfo and everything from `?` or `#` on, so a
//! logged or listed cause keeps the scheme, host, port and path and loses the secrets.

/// `text` with the userinfo, query and fragment of every `http(s)://` URL in it replaced by
/// `<redacted>`.
pub fn urls(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = find_scheme(rest) {
        let (before, url_and_after) = rest.split_at(start);
        out.push_str(before);
        let end = url_and_after
            .find(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | '<' | '>' | '`' | ')'))
            .unwrap_or(url_and_after.len());
        let (url, after) = url_and_after.split_at(end);
        out.push_str(&redact_one(url));
        rest = after;
    }
    out.push_str(rest);
    out
}

/// Where the next `http://` or `https://` starts, case-insensitively.
fn find_scheme(text: &str) -> Option<usize> {
    let lower = text.to_ascii_lowercase();
    match (lower.find("http://"), lower.find("https://")) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// One URL (scheme included) without userinfo, query or fragment.
fn redact_one(url: &str) -> String {
    let scheme_end = url.find("://").map_or(0, |i| i + 3);
    let (scheme, rest) = url.split_at(scheme_end);
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let host = match authority.rfind('@') {
        Some(at) => format!("<redacted>@{}", &authority[at + 1..]),
        None => authority.to_owned(),
    };
    let path = match tail.find(['?', '#']) {
        Some(cut) => format!("{}?<redacted>", &tail[..cut]),
        None => tail.to_owned(),
    };
    format!("{scheme}{host}{path}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_in_urls_are_removed_and_the_rest_kept() {
        let cases = [
            (
                "error sending request for url (http://127.0.0.1:9/mcp?api_key=SECRET)",
                "error sending request for url (http://127.0.0.1:9/mcp?<redacted>)",
            ),
            (
                "https://alice:pw@api.example.com/mcp failed",
                "https://<redacted>@api.example.com/mcp failed",
            ),
            (
                "HTTPS://u:p@x.example?token=SECRET#frag",
                "HTTPS://<redacted>@x.example?<redacted>",
            ),
            ("http://x.example/a#SECRET", "http://x.example/a?<redacted>"),
            (
                "two: http://a.example/?k=SECRET and https://b.example/p?q=SECRET.",
                "two: http://a.example/?<redacted> and https://b.example/p?<redacted>",
            ),
            ("no url here", "no url here"),
            ("http://plain.example/mcp", "http://plain.example/mcp"),
            (
                "\"http://q.example/?SECRET\"",
                "\"http://q.example/?<redacted>\"",
            ),
            (
                "http://[::1]:8080/mcp?key=SECRET",
                "http://[::1]:8080/mcp?<redacted>",
            ),
            ("http://", "http://"),
        ];
        for (text, expected) in cases {
            let redacted = urls(text);
            assert_eq!(redacted, expected, "{text}");
            assert!(
                !redacted.contains("SECRET") && !redacted.contains("pw@"),
                "{redacted}"
            );
        }
    }
}
