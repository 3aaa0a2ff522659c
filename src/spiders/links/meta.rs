//! Page-level signals from `<meta>`, and the attribute micro-syntaxes they use.

use super::LinkExtractor;
use crawler_core::Response;

impl LinkExtractor {
    /// Page-level signals from `<meta>`: refresh targets and a robots nofollow.
    pub(super) fn page_meta(&self, page: &Response) -> PageMeta {
        let mut meta = PageMeta::default();
        let want_refresh = self.meta_refresh && !self.restricted;
        for el in page.select("meta[content]") {
            let Some(content) = el.attr("content") else {
                continue;
            };
            if want_refresh
                && el
                    .attr("http-equiv")
                    .is_some_and(|h| h.trim().eq_ignore_ascii_case("refresh"))
            {
                if let Some(target) = refresh_target(&content) {
                    meta.refresh.push(target.to_owned());
                }
            } else if el
                .attr("name")
                .is_some_and(|n| n.trim().eq_ignore_ascii_case("robots"))
                && (has_token(&content, "nofollow") || has_token(&content, "none"))
            {
                meta.nofollow = true;
            }
        }
        meta
    }
}

#[derive(Default)]
pub(super) struct PageMeta {
    pub(super) refresh: Vec<String>,
    pub(super) nofollow: bool,
}

/// Whether a space- or comma-separated list contains `token`, ignoring ASCII case.
pub(super) fn has_token(list: &str, token: &str) -> bool {
    list.split(|c: char| c.is_ascii_whitespace() || c == ',')
        .any(|t| t.eq_ignore_ascii_case(token))
}

/// The URL of a `content="5; url=/next"` refresh, in the forms browsers accept:
/// `;` or `,` after the delay, `url=` optional and in any case, the URL optionally quoted.
pub(super) fn refresh_target(content: &str) -> Option<&str> {
    let content = content.trim();
    let rest = content
        .trim_start_matches(|c: char| c.is_ascii_digit() || c == '.')
        .trim_start();
    let rest = rest.strip_prefix([';', ','])?.trim_start();
    let rest = match rest.get(..3) {
        Some(p) if p.eq_ignore_ascii_case("url") => {
            let after = rest[3..].trim_start();
            match after.strip_prefix('=') {
                Some(after) => after.trim_start(),
                // "url" is the start of a relative URL such as "urls.html", not the keyword.
                None => rest,
            }
        }
        _ => rest,
    };
    let target = match rest.chars().next() {
        Some(q @ ('"' | '\'')) => rest[1..].split(q).next().unwrap_or_default(),
        _ => rest,
    }
    .trim();
    (!target.is_empty()).then_some(target)
}
