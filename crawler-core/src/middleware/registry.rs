//! The built-in middlewares by name: what `downloader_middlewares` and `spider_middlewares`
//! may list, how a stack is ordered from those names, and the checks [`Settings::validate`]
//! runs on the middleware settings. The downloader ones are built in crawler-http; here they
//! are only names.
//!
//! [`Settings::validate`]: crate::Settings::validate

use crate::error::{Error, ErrorKind, Result};

use super::referer::RefererPolicy;
use super::spider::BoxedSpiderMiddleware;

/// The built-in downloader middlewares, by the name `downloader_middlewares` uses.
/// `custom` marks where middlewares added in code go (at the end when it is not listed).
pub const DOWNLOADER_MIDDLEWARES: &[&str] = &[
    "http_auth",
    "default_headers",
    "user_agent",
    "cookies",
    "custom",
];

/// The built-in spider middlewares, by the name `spider_middlewares` uses. `custom` marks
/// where middlewares added in code go (at the end when it is not listed).
pub const SPIDER_MIDDLEWARES: &[&str] = &["referer", "custom"];
/// The spider middleware stack `settings.spider_middlewares` names, in order, with
/// `custom` (the middlewares added in code, in the order given) where it is listed or at the
/// end.
pub fn spider_stack<I: 'static>(
    settings: &crate::Settings,
    custom: Vec<BoxedSpiderMiddleware<I>>,
) -> Result<Vec<BoxedSpiderMiddleware<I>>> {
    order_stack(
        &settings.spider_middlewares,
        SPIDER_MIDDLEWARES,
        |name| {
            Ok(match name {
                "referer" => Some(Box::new(RefererPolicy::new(&settings.referer_policy)?)
                    as BoxedSpiderMiddleware<I>),
                _ => None,
            })
        },
        custom,
    )
}

/// Order a stack: the built-ins in the order `names` lists them (`custom` standing for
/// `custom`), each built by `make` (which may return `None` for one that is switched off),
/// then the custom ones where `custom` is listed, or at the end.
pub fn order_stack<T>(
    names: &[String],
    known: &[&str],
    make: impl FnMut(&str) -> Result<Option<T>>,
    custom: Vec<T>,
) -> Result<Vec<T>> {
    order_stack_of("middleware", names, known, make, custom)
}

/// [`order_stack`] for a list of any `kind` of built-ins (`middleware`, `extension`),
/// named in the error for an unknown name.
pub fn order_stack_of<T>(
    kind: &str,
    names: &[String],
    known: &[&str],
    mut make: impl FnMut(&str) -> Result<Option<T>>,
    custom: Vec<T>,
) -> Result<Vec<T>> {
    let mut out = Vec::new();
    let mut custom = Some(custom);
    for name in names {
        let name = name.trim();
        if !known.contains(&name) {
            return Err(Error::new(
                ErrorKind::Settings,
                format!(
                    "unknown {kind} '{name}'; built-in ones are {}",
                    known.join(", ")
                ),
            ));
        }
        if name == "custom" {
            if let Some(c) = custom.take() {
                out.extend(c);
            }
        } else if let Some(m) = make(name)? {
            out.push(m);
        }
    }
    if let Some(c) = custom {
        out.extend(c);
    }
    Ok(out)
}

/// The first problem with the middleware settings: (keys to blame, why).
pub(crate) fn settings_problem(s: &crate::Settings) -> Option<(Vec<&'static str>, String)> {
    for (key, kind, names, known) in [
        (
            "downloader_middlewares",
            "middleware",
            &s.downloader_middlewares,
            DOWNLOADER_MIDDLEWARES,
        ),
        (
            "spider_middlewares",
            "middleware",
            &s.spider_middlewares,
            SPIDER_MIDDLEWARES,
        ),
        (
            "extensions",
            "extension",
            &s.extensions,
            crate::extension::EXTENSIONS,
        ),
    ] {
        if let Some(bad) = names.iter().find(|n| !known.contains(&n.trim())) {
            return Some((
                vec![key],
                format!(
                    "names unknown {kind} '{bad}'; built-in ones are {}",
                    known.join(", ")
                ),
            ));
        }
    }
    if !(0.0..=1.0).contains(&s.monitor_max_error_ratio) {
        return Some((
            vec!["monitor_max_error_ratio"],
            format!(
                "is {}, a share between 0 (off) and 1",
                s.monitor_max_error_ratio
            ),
        ));
    }
    if let Some(bad) = s
        .default_headers
        .iter()
        .find(|h| parse_header_line(h).is_none())
    {
        return Some((
            vec!["default_headers"],
            format!("entry '{bad}' is not written `Name: value`"),
        ));
    }
    if let Err(e) = RefererPolicy::new(&s.referer_policy) {
        return Some((vec!["referer_policy"], e.to_string()));
    }
    None
}

/// `Name: value` split into a valid header name and its trimmed value.
pub fn parse_header_line(line: &str) -> Option<(String, String)> {
    let (name, value) = line.split_once(':')?;
    let name = name.trim();
    let valid = !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
    valid.then(|| (name.to_owned(), value.trim().to_owned()))
}
