//! An error with its causes on one line, for the messages robots.txt and sitemap fetches
//! report (reqwest's own `Display` names only the outermost layer: "error sending request",
//! without the refused connection or the DNS failure under it).

/// `e` and each of its sources, joined by `": "`.
pub(crate) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        out.push_str(": ");
        out.push_str(&c.to_string());
        cause = c.source();
    }
    out
}
