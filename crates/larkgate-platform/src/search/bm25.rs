//! Okapi BM25 over a few hundred short documents: the ranking of [`super`]'s `find_tools`.
//!
//! A document is a tool's fields, each with a weight: a term in a field of weight `w` counts
//! `w` times towards the term's frequency in the document and the document's length (the
//! simple form of BM25F, with one length normalisation for the whole document). A term's
//! weight is its inverse document frequency, `ln(1 + (N - n + 0.5) / (n + 0.5))` for `n` of `N`
//! documents holding it, which is never negative; a document's score for a query is the sum
//! over the query's distinct terms of
//!
//! ```text
//! idf(t) * tf(t) * (K1 + 1) / (tf(t) + K1 * (1 - B + B * len / avg_len))
//! ```
//!
//! Text becomes terms by [`terms`]: split at anything but letters and digits and at each
//! lowercase-to-uppercase step (`listIssues`, `list_issues` and `list-issues` agree),
//! lowercased, English stop words dropped, each word reduced to its Snowball (Porter 2) stem
//! so that `issues`, `issue` and `issuing` meet.
//!
//! A document is analysed once ([`Document`]); a collection's statistics are computed per
//! search over the documents given ([`rank`]), so that what a caller may not see does not
//! change how the rest rank.

use std::collections::HashMap;
use std::sync::LazyLock;

/// How fast a term's repetitions stop counting (the usual value).
const K1: f64 = 1.2;
/// How much a document's length normalises its terms' frequencies (the usual value).
const B: f64 = 0.75;

/// Words too common in tools' descriptions and people's questions to tell tools apart.
const STOP_WORDS: &[&str] = &[
    "a", "an", "and", "any", "are", "as", "at", "be", "by", "can", "do", "for", "from", "how", "i",
    "if", "in", "into", "is", "it", "its", "me", "my", "of", "on", "one", "or", "our", "so",
    "some", "that", "the", "their", "them", "then", "there", "this", "to", "tool", "us", "was",
    "we", "what", "when", "which", "who", "will", "with", "you", "your",
];

static STEMMER: LazyLock<rust_stemmers::Stemmer> =
    LazyLock::new(|| rust_stemmers::Stemmer::create(rust_stemmers::Algorithm::English));

/// The terms of `text`, in order, repeated as they repeat (see the module documentation).
pub fn terms(text: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut previous_lower = false;
    for c in text.chars() {
        if !c.is_alphanumeric() {
            flush(&mut word, &mut words);
            previous_lower = false;
            continue;
        }
        if c.is_uppercase() && previous_lower {
            flush(&mut word, &mut words);
        }
        previous_lower = c.is_lowercase() || c.is_ascii_digit();
        word.extend(c.to_lowercase());
    }
    flush(&mut word, &mut words);
    words
}

fn flush(word: &mut String, words: &mut Vec<String>) {
    if !word.is_empty() && !STOP_WORDS.contains(&word.as_str()) {
        words.push(STEMMER.stem(word).into_owned());
    }
    word.clear();
}

/// One document's terms, analysed once: the weighted frequency of each, and the weighted
/// length of the whole.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Document {
    frequencies: HashMap<String, f64>,
    length: f64,
}

impl Document {
    /// The document of `fields`, each `(text, weight)`.
    pub fn new<'a>(fields: impl IntoIterator<Item = (&'a str, f64)>) -> Self {
        let mut document = Document::default();
        for (text, weight) in fields {
            for term in terms(text) {
                *document.frequencies.entry(term).or_default() += weight;
                document.length += weight;
            }
        }
        document
    }
}

/// The `documents` that match `query` (by position), best first, at most `limit`, with their
/// scores; equal scores keep the documents' order. None when no term of the query is in any
/// of them. The collection's statistics (how many documents hold a term, their average length)
/// are those of `documents` alone.
pub fn rank(documents: &[&Document], query: &str, limit: usize) -> Vec<(usize, f64)> {
    let count = documents.len() as f64;
    if documents.is_empty() {
        return Vec::new();
    }
    let average = (documents.iter().map(|d| d.length).sum::<f64>() / count).max(1.0);
    let mut query_terms = terms(query);
    query_terms.sort();
    query_terms.dedup();
    let weighted: Vec<(&str, f64)> = query_terms
        .iter()
        .filter_map(|term| {
            let holding = documents
                .iter()
                .filter(|d| d.frequencies.contains_key(term))
                .count() as f64;
            let idf = (1.0 + (count - holding + 0.5) / (holding + 0.5)).ln();
            (holding > 0.0).then_some((term.as_str(), idf))
        })
        .collect();
    if weighted.is_empty() {
        return Vec::new();
    }
    let mut scored: Vec<(usize, f64)> = documents
        .iter()
        .enumerate()
        .filter_map(|(position, document)| {
            let norm = K1 * (1.0 - B + B * document.length / average);
            let score: f64 = weighted
                .iter()
                .filter_map(|(term, idf)| {
                    let tf = document.frequencies.get(*term)?;
                    Some(idf * tf * (K1 + 1.0) / (tf + norm))
                })
                .sum();
            (score > 0.0).then_some((position, score))
        })
        .collect();
    scored.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    scored.truncate(limit);
    scored
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terms_split_names_in_every_case_and_meet_at_their_stems() {
        for (text, expected) in [
            ("list_issues", vec!["list", "issu"]),
            ("listIssues", vec!["list", "issu"]),
            ("list-issues", vec!["list", "issu"]),
            ("github__list_issues", vec!["github", "list", "issu"]),
            (
                "Lists the issues of a repository.",
                vec!["list", "issu", "repositori"],
            ),
            ("getHTTPStatus v2", vec!["get", "httpstatus", "v2"]),
            ("Überprüfe DATEN", vec!["überprüf", "daten"]),
            ("", vec![]),
            ("the of a", vec![]),
            ("...__--", vec![]),
        ] {
            assert_eq!(terms(text), expected, "{text:?}");
        }
    }

    /// Ranks `documents` (one field each) for `query`.
    fn ranked(documents: &[&str], query: &str, limit: usize) -> Vec<(usize, f64)> {
        let documents: Vec<Document> = documents
            .iter()
            .map(|d| Document::new([(*d, 1.0)]))
            .collect();
        rank(&documents.iter().collect::<Vec<_>>(), query, limit)
    }

    #[test]
    fn a_rarer_term_outweighs_a_common_one() {
        let ranked = ranked(
            &[
                "list issues in a repository",
                "list pull requests in a repository",
                "list branches in a repository",
                "close an issue",
            ],
            "close repository",
            4,
        );
        assert_eq!(ranked[0].0, 3, "{ranked:?}");
        assert_eq!(ranked.len(), 4);
    }

    #[test]
    fn a_field_s_weight_counts_as_repetitions() {
        let documents = [
            vec![("send message", 1.0), ("post text to a channel", 1.0)],
            vec![("post", 3.0), ("send a message to a channel", 1.0)],
        ];
        let documents: Vec<Document> = documents.into_iter().map(Document::new).collect();
        assert_eq!(
            rank(&documents.iter().collect::<Vec<_>>(), "post", 2)[0].0,
            1
        );
    }

    #[test]
    fn shorter_documents_win_equal_matches_and_ties_keep_their_order() {
        let documents = [
            "search the web for pages about a subject and summarise each result",
            "search the web",
            "search the web",
        ];
        let order: Vec<usize> = ranked(&documents, "web search", 3)
            .iter()
            .map(|r| r.0)
            .collect();
        assert_eq!(order, [1, 2, 0]);
    }

    #[test]
    fn nothing_matches_a_query_of_unknown_or_stop_words_and_limits_hold() {
        let documents = ["list issues", "create issue"];
        assert!(ranked(&documents, "the of", 5).is_empty());
        assert!(ranked(&documents, "kubernetes", 5).is_empty());
        assert!(ranked(&documents, "", 5).is_empty());
        assert_eq!(ranked(&documents, "issue", 1).len(), 1);
        assert_eq!(ranked(&documents, "issue", 0).len(), 0);
        assert!(rank(&[], "issue", 5).is_empty());
    }

    #[test]
    fn a_term_repeated_in_the_query_counts_once() {
        let documents = ["delete file", "delete delete branch"];
        let once = ranked(&documents, "file delete", 2);
        let repeated = ranked(&documents, "file file file delete", 2);
        assert_eq!(once, repeated);
    }
}
