//! Checking and compiling a [`LinkExtractor`]'s configuration.

use std::collections::HashSet;

use regex::RegexSet;

use super::{IGNORED_EXTENSIONS, LinkExtractor};
use crawler_core::{Error, ErrorKind, Result};

/// Configures a [`LinkExtractor`]; checked by [`build`](Self::build).
///
/// Methods taking lists add to what was set before, except [`tags`](Self::tags) and
/// [`deny_extensions`](Self::deny_extensions), which replace a default.
#[derive(Debug, Clone)]
pub struct LinkExtractorBuilder {
    allow: Vec<String>,
    deny: Vec<String>,
    allow_domains: Vec<String>,
    deny_domains: Vec<String>,
    restrict_css: Vec<String>,
    tags: Vec<(String, String)>,
    canonicalize: bool,
    unique: bool,
    deny_extensions: Vec<String>,
    respect_nofollow: bool,
    meta_refresh: bool,
}

impl Default for LinkExtractorBuilder {
    fn default() -> Self {
        Self {
            allow: Vec::new(),
            deny: Vec::new(),
            allow_domains: Vec::new(),
            deny_domains: Vec::new(),
            restrict_css: Vec::new(),
            tags: default_tags(),
            canonicalize: true,
            unique: true,
            deny_extensions: IGNORED_EXTENSIONS.iter().map(|e| (*e).to_owned()).collect(),
            respect_nofollow: false,
            meta_refresh: true,
        }
    }
}

fn strings<S: Into<String>>(items: impl IntoIterator<Item = S>) -> impl Iterator<Item = String> {
    items.into_iter().map(Into::into)
}

impl LinkExtractorBuilder {
    /// Keep only URLs matching at least one of these regular expressions.
    pub fn allow<S: Into<String>>(mut self, patterns: impl IntoIterator<Item = S>) -> Self {
        self.allow.extend(strings(patterns));
        self
    }

    /// Drop URLs matching any of these regular expressions (deny wins over allow).
    pub fn deny<S: Into<String>>(mut self, patterns: impl IntoIterator<Item = S>) -> Self {
        self.deny.extend(strings(patterns));
        self
    }

    /// Keep only links to these domains or their subdomains (`example.com` allows
    /// `www.example.com`).
    pub fn allow_domains<S: Into<String>>(mut self, domains: impl IntoIterator<Item = S>) -> Self {
        self.allow_domains.extend(strings(domains));
        self
    }

    /// Drop links to these domains and their subdomains.
    pub fn deny_domains<S: Into<String>>(mut self, domains: impl IntoIterator<Item = S>) -> Self {
        self.deny_domains.extend(strings(domains));
        self
    }

    /// Look for links only inside elements matching these CSS selectors (an element that
    /// itself matches counts too, so `li.next a` works). Meta refresh is then not read.
    pub fn restrict_css<S: Into<String>>(mut self, regions: impl IntoIterator<Item = S>) -> Self {
        self.restrict_css.extend(strings(regions));
        self
    }

    /// Which attribute of which tag holds a link, e.g. `[("a", "href"), ("img", "src")]`.
    /// Replaces the default `[("a", "href"), ("area", "href")]`.
    pub fn tags<T: Into<String>, A: Into<String>>(
        mut self,
        pairs: impl IntoIterator<Item = (T, A)>,
    ) -> Self {
        self.tags = pairs
            .into_iter()
            .map(|(t, a)| (t.into(), a.into()))
            .collect();
        self
    }

    /// Drop URL fragments (`#...`), so one page is not seen as several (default on).
    pub fn canonicalize(mut self, on: bool) -> Self {
        self.canonicalize = on;
        self
    }

    /// Keep only the first link to each URL on a page (default on).
    pub fn unique(mut self, on: bool) -> Self {
        self.unique = on;
        self
    }

    /// Skip links whose path ends in one of these extensions (case-insensitive, with or
    /// without the dot). Replaces [`IGNORED_EXTENSIONS`]; an empty list skips none.
    pub fn deny_extensions<S: Into<String>>(mut self, exts: impl IntoIterator<Item = S>) -> Self {
        self.deny_extensions = strings(exts).collect();
        self
    }

    /// Skip links marked `rel="nofollow"`, and every link of a page whose
    /// `<meta name="robots">` says `nofollow` or `none` (default off: such links are
    /// returned with [`Link::nofollow`](super::Link::nofollow) set).
    pub fn respect_nofollow(mut self, on: bool) -> Self {
        self.respect_nofollow = on;
        self
    }

    /// Read the target of `<meta http-equiv="refresh" content="5; url=/next">` (default on).
    pub fn meta_refresh(mut self, on: bool) -> Self {
        self.meta_refresh = on;
        self
    }

    /// Check and compile the configuration.
    ///
    /// Fails with [`ErrorKind::Settings`] naming the culprit for a pattern that is not a valid
    /// regular expression, an empty or URL-shaped domain, a tag or attribute name that is not
    /// a plain name, an empty extension or tag list; and with [`ErrorKind::Selector`] for a
    /// region that is not valid CSS.
    pub fn build(self) -> Result<LinkExtractor> {
        let allow = patterns("allow", &self.allow)?;
        let deny = patterns("deny", &self.deny)?;
        let allow_domains = domains("allow_domains", self.allow_domains)?;
        let deny_domains = domains("deny_domains", self.deny_domains)?;
        if self.tags.is_empty() {
            return Err(Error::new(
                ErrorKind::Settings,
                "link extractor has no tags to read links from",
            ));
        }
        let mut tags = Vec::with_capacity(self.tags.len());
        for (tag, attr) in self.tags {
            let (tag, attr) = (
                tag.trim().to_ascii_lowercase(),
                attr.trim().to_ascii_lowercase(),
            );
            for (what, name) in [("tag", &tag), ("attribute", &attr)] {
                if !is_plain_name(name) {
                    return Err(Error::new(
                        ErrorKind::Settings,
                        format!(
                            "link extractor {what} '{name}' is not a plain name \
                             (letters, digits, '-' and '_')"
                        ),
                    ));
                }
            }
            tags.push((tag, attr));
        }
        for region in &self.restrict_css {
            scraper::Selector::parse(region).map_err(|e| {
                Error::new(
                    ErrorKind::Selector,
                    format!("invalid restrict_css selector '{region}': {e}"),
                )
            })?;
        }
        let selector = selector_for(&self.restrict_css, &tags);
        // Each part parsed alone above; the combination must parse too (`:is()` limits).
        scraper::Selector::parse(&selector).map_err(|e| {
            Error::new(
                ErrorKind::Selector,
                format!("restrict_css regions cannot be combined into '{selector}': {e}"),
            )
        })?;
        let mut deny_extensions = HashSet::new();
        for ext in self.deny_extensions {
            let ext = ext.trim().trim_start_matches('.').to_ascii_lowercase();
            if ext.is_empty() {
                return Err(Error::new(
                    ErrorKind::Settings,
                    "link extractor deny_extensions has an empty extension",
                ));
            }
            deny_extensions.insert(ext);
        }
        Ok(LinkExtractor {
            allow,
            deny,
            allow_domains,
            deny_domains,
            restricted: !self.restrict_css.is_empty(),
            selector,
            tags,
            canonicalize: self.canonicalize,
            unique: self.unique,
            deny_extensions,
            respect_nofollow: self.respect_nofollow,
            meta_refresh: self.meta_refresh,
        })
    }
}

fn patterns(what: &str, list: &[String]) -> Result<RegexSet> {
    // Compiled one by one first, so the error names the pattern at fault.
    for p in list {
        regex::Regex::new(p).map_err(|e| {
            Error::new(
                ErrorKind::Settings,
                format!("link extractor {what} pattern '{p}' is not a valid regular expression"),
            )
            .with_source(e)
        })?;
    }
    RegexSet::new(list).map_err(|e| {
        Error::new(
            ErrorKind::Settings,
            format!("link extractor {what} patterns are too large together"),
        )
        .with_source(e)
    })
}

fn domains(what: &str, list: Vec<String>) -> Result<Vec<String>> {
    list.into_iter()
        .map(|d| {
            let norm = d.trim().trim_matches('.').to_ascii_lowercase();
            let bad = norm.is_empty()
                || norm.contains(['/', ' ', '\t', '\n', '\r'])
                || (norm.contains(':') && !norm.starts_with('['));
            if bad {
                Err(Error::new(
                    ErrorKind::Settings,
                    format!(
                        "link extractor {what} entry '{d}' is not a domain \
                         (write a bare host such as 'example.com', without scheme, port or path)"
                    ),
                ))
            } else {
                Ok(norm)
            }
        })
        .collect()
}

fn is_plain_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

pub(super) fn default_tags() -> Vec<(String, String)> {
    vec![
        ("a".to_owned(), "href".to_owned()),
        ("area".to_owned(), "href".to_owned()),
    ]
}

/// One selector list that matches every link element in (or being) one of the regions.
pub(super) fn selector_for(regions: &[String], tags: &[(String, String)]) -> String {
    let links = tags
        .iter()
        .map(|(t, a)| format!("{t}[{a}]"))
        .collect::<Vec<_>>()
        .join(", ");
    if regions.is_empty() {
        return links;
    }
    // `:is()` keeps each region's own selector list intact (it may contain commas).
    let within = regions
        .iter()
        .map(|r| format!(":is({r})"))
        .collect::<Vec<_>>()
        .join(", ");
    format!(":is({within}) :is({links}), :is({within}):is({links})")
}
