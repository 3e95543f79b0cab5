//! The URLs of HTTP services larkgate names in its configuration: its own public URL, a trace
//! collector's, an identity provider's. Such a URL is printed and logged, so it must carry no
//! secret (no userinfo, no query).

/// What is wrong with `text` as the URL of an HTTP service larkgate names in its
/// configuration (its own public URL, a collector's): `None` for an `http://` or `https://`
/// URL with a host and without credentials, a query or a fragment.
pub fn problem(text: &str) -> Option<&'static str> {
    match url::Url::parse(text) {
        Err(_) => Some("it is not a URL"),
        Ok(url) if !matches!(url.scheme(), "http" | "https") => {
            Some("it must start with https:// or http://")
        }
        Ok(url) if url.host_str().is_none() => Some("it names no host"),
        Ok(url) if !url.username().is_empty() || url.password().is_some() => {
            Some("it must not carry credentials")
        }
        Ok(url) if url.query().is_some() || url.fragment().is_some() => {
            Some("it must not have a query or a fragment")
        }
        Ok(_) => None,
    }
}
