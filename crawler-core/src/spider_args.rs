//! What a spider is told before its crawl starts: its arguments (`crawl NAME -a key=value`)
//! and the effective settings. See [`Spider::open`](crate::Spider::open).

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::str::FromStr;

use crate::error::{Error, ErrorKind, Result};
use crate::settings::Settings;

/// Longest spider argument accepted (key and value together): arguments come from a command
/// line or a job file, and a spider keeps them for the whole crawl.
const MAX_ARG_LEN: usize = 64 * 1024;

/// Split one `key=value` spider argument (what `-a` takes) into its key and value.
///
/// The key is trimmed and must be non-empty; the value is kept as given (it may be empty,
/// or contain `=`).
///
/// ```
/// use crawler_core::parse_spider_arg;
///
/// assert_eq!(parse_spider_arg("limit=5").unwrap(), ("limit".into(), "5".into()));
/// assert_eq!(parse_spider_arg("q=a=b").unwrap(), ("q".into(), "a=b".into()));
/// assert!(parse_spider_arg("limit").is_err());
/// ```
pub fn parse_spider_arg(text: &str) -> Result<(String, String)> {
    let arg_error = |why: String| Error::new(ErrorKind::Argument, why);
    if text.len() > MAX_ARG_LEN {
        return Err(arg_error(format!(
            "spider argument of {} bytes is too long (at most {MAX_ARG_LEN})",
            text.len()
        )));
    }
    let Some((key, value)) = text.split_once('=') else {
        return Err(arg_error(format!(
            "spider argument '{text}' has no value: write it as KEY=VALUE (e.g. -a {text}=1)"
        )));
    };
    let key = key.trim();
    if key.is_empty() {
        return Err(arg_error(format!(
            "spider argument '{text}' has no name before '=': write it as KEY=VALUE"
        )));
    }
    Ok((key.to_owned(), value.to_owned()))
}

/// What a spider is told before its crawl starts, passed to
/// [`Spider::open`](crate::Spider::open): its arguments and the effective settings.
///
/// The context remembers which arguments the spider looked at. An argument it never read is
/// a mistake of the person running the crawl (a typo, or a spider that takes no such
/// argument), so the crawl refuses to start, naming it, rather than ignoring it.
#[derive(Debug)]
pub struct SpiderContext<'a> {
    settings: &'a Settings,
    args: &'a [(String, String)],
    read: RefCell<BTreeSet<String>>,
}

/// Open `spider` as a crawl does before its start requests: [`Spider::open`](crate::Spider::open)
/// with `args` and the effective `settings`, then refuse any argument it did not read. An
/// error names the spider.
pub fn open_spider<S: crate::Spider>(
    spider: &mut S,
    settings: &Settings,
    args: &[(String, String)],
) -> Result<()> {
    let ctx = SpiderContext::new(settings, args);
    spider
        .open(&ctx)
        .and_then(|()| ctx.check_all_read())
        .map_err(|e| e.context(format!("spider '{}'", spider.name())))
}

impl<'a> SpiderContext<'a> {
    /// A context with these settings and `key=value` arguments (a later value of a key
    /// replaces an earlier one).
    pub fn new(settings: &'a Settings, args: &'a [(String, String)]) -> Self {
        Self {
            settings,
            args,
            read: RefCell::default(),
        }
    }

    /// The effective settings of the crawl: defaults, the settings file, the spider's
    /// `custom_settings`, `CRAWLER_*` variables and `-s` overrides, layered. Keep what the
    /// spider needs from them in its own fields (Scrapy's `self.settings`).
    pub fn settings(&self) -> &'a Settings {
        self.settings
    }

    /// The value of argument `key`, if given (the last one, if given twice).
    pub fn arg(&self, key: &str) -> Option<&'a str> {
        self.read.borrow_mut().insert(key.to_owned());
        self.args
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// The value of argument `key`, or an error of kind [`ErrorKind::Argument`] saying it
    /// is required.
    pub fn required_arg(&self, key: &str) -> Result<&'a str> {
        self.arg(key).ok_or_else(|| {
            Error::new(
                ErrorKind::Argument,
                format!("spider argument '{key}' is required (-a {key}=VALUE)"),
            )
        })
    }

    /// Argument `key` parsed as `T` (a number, a bool, ...), if given; a value that does not
    /// parse is an error naming the argument.
    pub fn parse_arg<T>(&self, key: &str) -> Result<Option<T>>
    where
        T: FromStr,
        T::Err: std::fmt::Display,
    {
        self.arg(key)
            .map(|v| {
                v.trim().parse::<T>().map_err(|e| {
                    Error::new(
                        ErrorKind::Argument,
                        format!("invalid value '{v}' for spider argument '{key}': {e}"),
                    )
                })
            })
            .transpose()
    }

    /// Every argument, in the order given; all count as read (for spiders that take any
    /// argument, e.g. as search terms).
    pub fn args(&self) -> impl Iterator<Item = (&'a str, &'a str)> + 'a {
        let mut read = self.read.borrow_mut();
        for (k, _) in self.args {
            read.insert(k.clone());
        }
        self.args.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// Refuse arguments the spider never read, naming them and, for a likely typo, the
    /// argument it did read. The crawl calls this after [`Spider::open`](crate::Spider::open)
    /// and prefixes the error with the spider's name.
    pub fn check_all_read(&self) -> Result<()> {
        let read = self.read.borrow();
        let unread: BTreeSet<&str> = self
            .args
            .iter()
            .map(|(k, _)| k.as_str())
            .filter(|k| !read.contains(*k))
            .collect();
        let Some(first) = unread.iter().next() else {
            return Ok(());
        };
        let names = unread
            .iter()
            .map(|k| format!("'{k}'"))
            .collect::<Vec<_>>()
            .join(", ");
        let message = if read.is_empty() {
            format!(
                "takes no arguments, but was given {names} (a spider reads its arguments in \
                 Spider::open)"
            )
        } else {
            let known = read.iter().cloned().collect::<Vec<_>>().join(", ");
            // Argument names are short: one or two edits (`tga` for `tag`) is a likely typo.
            let hint = read
                .iter()
                .map(|k| (strsim::damerau_levenshtein(first, k), k))
                .filter(|(edits, k)| *edits <= 2 && *edits < k.len())
                .min_by_key(|(edits, _)| *edits)
                .map(|(_, k)| format!("; did you mean '{k}'?"))
                .unwrap_or_default();
            format!("unknown argument {names} (it reads: {known}){hint}")
        };
        Err(Error::new(ErrorKind::Argument, message))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(pairs: &[&str]) -> Vec<(String, String)> {
        pairs.iter().map(|p| parse_spider_arg(p).unwrap()).collect()
    }

    #[test]
    fn malformed_arguments_are_refused_with_the_form_to_use() {
        let e = parse_spider_arg("limit").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Argument);
        assert!(e.to_string().contains("write it as KEY=VALUE"), "{e}");
        assert!(parse_spider_arg("=5").is_err());
        assert_eq!(
            parse_spider_arg(" url =").unwrap(),
            ("url".into(), String::new())
        );
        assert!(parse_spider_arg(&"k=".repeat(MAX_ARG_LEN)).is_err());
    }

    #[test]
    fn arguments_are_read_parsed_and_unread_ones_refused() {
        let settings = Settings::default();
        let given = args(&["limit=5", "limit=7", "categry=poetry"]);
        let ctx = SpiderContext::new(&settings, &given);
        assert_eq!(ctx.parse_arg::<usize>("limit").unwrap(), Some(7));
        assert_eq!(ctx.arg("category"), None);
        let e = ctx.required_arg("url").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Argument);
        assert!(e.to_string().contains("(-a url=VALUE)"), "{e}");
        assert_eq!(ctx.settings().concurrency, settings.concurrency);
        let e = ctx.check_all_read().unwrap_err();
        let text = e.to_string();
        assert!(text.contains("unknown argument 'categry'"), "{text}");
        assert!(text.contains("did you mean 'category'"), "{text}");

        let bad = args(&["limit=lots"]);
        let ctx = SpiderContext::new(&settings, &bad);
        let e = ctx.parse_arg::<u32>("limit").unwrap_err();
        assert!(
            e.to_string().contains("'lots' for spider argument 'limit'"),
            "{e}"
        );
        ctx.check_all_read().unwrap();

        let ctx = SpiderContext::new(&settings, &given);
        let e = ctx.check_all_read().unwrap_err();
        assert!(e.to_string().starts_with("takes no arguments"), "{e}");
        assert_eq!(ctx.args().count(), 3);
        ctx.check_all_read().unwrap();
    }
}
