//! RFC 6570 URI templates, parsed for matching only: whether a URI a client asks for is one
//! that an upstream's listed template can expand to. Security-critical: this decides which URIs
//! reach an upstream (see the threat model of [`crate::catalog`]). Matching is linear in the
//! URI's length for every template, so a hostile template or URI cannot make it backtrack.

use super::MAX_URI_BYTES;

/// An RFC 6570 URI template, parsed for matching: which URIs it can expand to.
///
/// Each expression matches a run of the characters its operator can produce: a simple
/// `{var}` (and `{.var}`, `{;var}`) anything but `/ ? #`, so a value cannot climb out of its
/// path segment; `{/var}` anything but `? #`; `{?var}` and `{&var}` anything but `#`;
/// `{+var}` and `{#var}` anything. Literal text matches itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UriTemplate {
    parts: Vec<Part>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Part {
    Literal(String),
    Expression(Class),
}

/// The characters an expression may expand to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Class {
    /// Anything but `/ ? #`.
    Segment,
    /// Anything but `? #`.
    Path,
    /// Anything but `#`.
    Query,
    /// Anything.
    Any,
}

impl Class {
    fn admits(self, byte: u8) -> bool {
        match self {
            Class::Segment => !matches!(byte, b'/' | b'?' | b'#'),
            Class::Path => !matches!(byte, b'?' | b'#'),
            Class::Query => byte != b'#',
            Class::Any => true,
        }
    }
}

/// The most expressions a template may have.
const MAX_EXPRESSIONS: usize = 32;

impl UriTemplate {
    /// Parses `template`; an error says what is wrong with it.
    pub fn parse(template: &str) -> Result<Self, String> {
        if template.len() > MAX_URI_BYTES {
            return Err("the template is too long".to_owned());
        }
        let mut parts = Vec::new();
        let mut rest = template;
        let mut expressions = 0;
        while !rest.is_empty() {
            match rest.find(['{', '}']) {
                None => {
                    parts.push(Part::Literal(rest.to_owned()));
                    break;
                }
                Some(at) if rest.as_bytes()[at] == b'}' => {
                    return Err("a `}` closes no expression".to_owned());
                }
                Some(at) => {
                    if at > 0 {
                        parts.push(Part::Literal(rest[..at].to_owned()));
                    }
                    let body_and_rest = &rest[at + 1..];
                    let Some(end) = body_and_rest.find('}') else {
                        return Err("an expression is not closed with `}`".to_owned());
                    };
                    let body = &body_and_rest[..end];
                    if body.contains('{') {
                        return Err("an expression holds a `{`".to_owned());
                    }
                    let (class, names) = match body.as_bytes().first() {
                        Some(b'+' | b'#') => (Class::Any, &body[1..]),
                        Some(b'/') => (Class::Path, &body[1..]),
                        Some(b'?' | b'&') => (Class::Query, &body[1..]),
                        Some(b'.' | b';') => (Class::Segment, &body[1..]),
                        Some(b'=' | b',' | b'!' | b'@' | b'|') => {
                            return Err(format!("the operator of {{{body}}} is reserved"));
                        }
                        _ => (Class::Segment, body),
                    };
                    let valid_name = |name: &str| {
                        let name = name.trim_end_matches('*');
                        let name = name.split_once(':').map_or(name, |(n, _)| n);
                        !name.is_empty()
                            && name.bytes().all(|b| {
                                b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'%')
                            })
                    };
                    if !names.split(',').all(valid_name) {
                        return Err(format!("{{{body}}} is not a valid expression"));
                    }
                    expressions += 1;
                    if expressions > MAX_EXPRESSIONS {
                        return Err(format!("more than {MAX_EXPRESSIONS} expressions"));
                    }
                    parts.push(Part::Expression(class));
                    rest = &body_and_rest[end + 1..];
                }
            }
        }
        Ok(UriTemplate { parts })
    }

    /// Whether some expansion of the template is exactly `uri`: one pass over `uri` per part.
    pub fn matches(&self, uri: &str) -> bool {
        let uri = uri.as_bytes();
        if uri.len() > MAX_URI_BYTES {
            return false;
        }
        // `at[j]`: the parts so far can expand to exactly `uri[..j]`.
        let mut at = vec![false; uri.len() + 1];
        at[0] = true;
        for part in &self.parts {
            let mut next = vec![false; uri.len() + 1];
            match part {
                Part::Literal(literal) => {
                    let literal = literal.as_bytes();
                    for j in 0..=uri.len() {
                        if at[j] && uri[j..].starts_with(literal) {
                            next[j + literal.len()] = true;
                        }
                    }
                }
                Part::Expression(class) => {
                    // Reachable from some start at or before `j`, with every byte since it
                    // admitted (an expansion may be empty).
                    let mut open = false;
                    for j in 0..=uri.len() {
                        open |= at[j];
                        next[j] = open;
                        if j < uri.len() && !class.admits(uri[j]) {
                            open = false;
                        }
                    }
                }
            }
            at = next;
        }
        at[uri.len()]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_match_exactly_the_uris_they_expand_to() {
        let table = [
            ("a://x/{id}", "a://x/42", true),
            ("a://x/{id}", "a://x/", true),
            ("a://x/{id}", "a://x/4/2", false),
            ("a://x/{id}", "a://x/42?evil", false),
            ("a://x/{id}", "a://x/42#f", false),
            ("a://x/{id}", "a://y/42", false),
            ("a://x/{id}", "b://x/42", false),
            ("a://x/{id}/raw", "a://x/42/raw", true),
            ("a://x/{id}/raw", "a://x/42/../raw", false),
            ("a://x/{+path}", "a://x/a/b/../c?q#f", true),
            ("a://x{/seg}", "a://x/a", true),
            ("a://x{/seg}", "a://x/a?q", false),
            ("a://x/{id}{?q,r}", "a://x/1?q=2&r=3", true),
            ("a://x/{id}{?q,r}", "a://x/1?q=2#f", false),
            ("a://x/{a}{b}", "a://x/ab", true),
            ("plain://no/expressions", "plain://no/expressions", true),
            ("plain://no/expressions", "plain://no/expression", false),
        ];
        for (text, uri, expected) in table {
            let parsed = UriTemplate::parse(text).unwrap();
            assert_eq!(parsed.matches(uri), expected, "{text} ~ {uri}");
        }
    }

    #[test]
    fn malformed_templates_are_refused_with_why() {
        for (bad, why) in [
            ("a://{id", "not closed"),
            ("a://id}", "closes no expression"),
            ("a://{}", "not a valid expression"),
            ("a://{a b}", "not a valid expression"),
            ("a://{{id}}", "holds a `{`"),
            ("a://{=id}", "reserved"),
        ] {
            let error = UriTemplate::parse(bad).unwrap_err();
            assert!(error.contains(why), "{bad}: {error}");
        }
        let many = "a://".to_owned() + &"{x}".repeat(MAX_EXPRESSIONS + 1);
        assert!(UriTemplate::parse(&many).unwrap_err().contains("more than"));
    }

    #[test]
    fn matching_a_hostile_uri_is_linear_not_exponential() {
        let text = "a://".to_owned() + &"{+x}a".repeat(MAX_EXPRESSIONS) + "b";
        let parsed = UriTemplate::parse(&text).unwrap();
        let uri = "a://".to_owned() + &"a".repeat(MAX_URI_BYTES - 8);
        // 32 passes over 8 KiB: returns at once (a backtracking matcher would not).
        assert!(!parsed.matches(&uri));
    }
}
