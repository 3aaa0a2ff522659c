//! `parse URL --spider NAME [--callback NAME]`: run one of a project's callbacks on one page
//! and print what it produced, Scrapy's `scrapy parse`.
//!
//! The page is fetched as the shell fetches it (the project's settings with the spider's
//! custom settings, robots.txt obeyed, the downloader middlewares the settings name), then
//! handed to [`Spider::parse`] with the callback's name on its request, as a crawl
//! dispatches it. `--depth N` parses N levels: the requests a page produced are fetched
//! (one after the other; on one host the delay of its `[[hosts]]` rule, or robots.txt's
//! Crawl-delay when longer, apart) and parsed with their own callbacks; the last level's
//! requests are listed, not fetched.

use std::collections::HashSet;
use std::io::Write;

use crawler::core::{Output, Request, Settings, Spider, StatusRules};
use serde::Serialize;
use serde_json::{Map, Value};

use crate::common::{Failure, failed, usage};
use crate::shell::Session;
use crawler::{Error, ErrorKind};

/// Options of `parse`.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct ParseArgs {
    /// The page to parse (robots.txt is checked).
    pub url: String,
    /// The spider whose callback runs (see `list`); its custom settings apply.
    #[arg(long, value_name = "NAME")]
    pub spider: String,
    /// The callback to run, as `out.follow(href).callback(NAME)` names it (default: the
    /// spider's `parse`).
    #[arg(short = 'c', long, value_name = "NAME")]
    pub callback: Option<String>,
    /// Levels of pages parsed: 1 parses URL alone and lists its requests; 2 also fetches
    /// and parses those requests (each with its own callback), and so on.
    #[arg(short = 'd', long, default_value_t = 1, value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..))]
    pub depth: u32,
    /// Put VALUE under KEY in the request's meta (repeatable), as the page linking here
    /// would; VALUE is read as JSON when it is JSON (`id=4`), else as a string.
    #[arg(short = 'm', long, value_name = "KEY=VALUE", value_parser = meta_pair)]
    pub meta: Vec<(String, Value)>,
    /// Give the spider an argument (repeatable), as `crawl -a` does.
    #[arg(short = 'a', value_name = "KEY=VALUE", value_parser = crate::runner::spider_arg)]
    pub arg: Vec<(String, String)>,
    /// Print one JSON document (`{"spider", "pages": [{"url", "status", "callback",
    /// "depth", "items", "requests", "error"}]}`) instead of the listing.
    #[arg(long)]
    pub json: bool,
    /// Most pages fetched in all (the first included), whatever `--depth` allows.
    #[arg(long, default_value_t = 100, value_name = "N")]
    pub max_pages: usize,
}

/// Parse one `--meta KEY=VALUE`.
fn meta_pair(text: &str) -> Result<(String, Value), String> {
    let (key, value) = text
        .split_once('=')
        .ok_or_else(|| format!("expected KEY=VALUE, found '{text}'"))?;
    let key = key.trim();
    if key.is_empty() {
        return Err(format!("empty key in '{text}'"));
    }
    let value = serde_json::from_str(value).unwrap_or_else(|_| Value::String(value.to_owned()));
    Ok((key.to_owned(), value))
}

/// What one page gave.
#[derive(Serialize, Debug)]
struct PageReport {
    url: String,
    /// The answer's status; none when nothing was fetched.
    status: Option<u16>,
    callback: String,
    depth: u32,
    items: Vec<Value>,
    requests: Vec<RequestReport>,
    /// Why the page was not fetched, or what the callback returned as an error.
    error: Option<String>,
}

/// One request a callback produced.
#[derive(Serialize, Debug)]
struct RequestReport {
    method: String,
    url: String,
    callback: Option<String>,
    #[serde(skip_serializing_if = "Map::is_empty")]
    meta: Map<String, Value>,
}

impl From<&Request> for RequestReport {
    fn from(r: &Request) -> Self {
        Self {
            method: r.method.clone(),
            url: r.url.to_string(),
            callback: r.callback.clone(),
            meta: r.meta.clone(),
        }
    }
}

/// Run `parse` with the spider opened and the settings resolved; prints the pages and
/// fails (exit 1) when a page could not be fetched or its callback returned an error.
pub(crate) async fn run<S: Spider>(
    spider: &S,
    settings: &Settings,
    args: &ParseArgs,
) -> Result<(), Failure> {
    // `parse` names the default callback, as requests without one are logged.
    let callback = args.callback.clone().filter(|c| c != "parse");
    if let Some(cb) = &callback {
        let known = spider.callbacks();
        if !known.is_empty() && !known.contains(&cb.as_str()) {
            return Err(usage(Error::new(
                ErrorKind::Other,
                format!(
                    "spider '{}' has no callback '{cb}' (callbacks: parse, {})",
                    spider.name(),
                    known.join(", ")
                ),
            )));
        }
    }
    // As a crawl does before its first request: a spider may read a file or open a
    // connection its callbacks use.
    spider
        .opened()
        .await
        .map_err(|e| failed(e.context(format!("spider '{}' failed to open", spider.name()))))?;
    let mut first = Request::get(args.url.as_str()).map_err(usage)?;
    first.callback = callback;
    first.meta.extend(args.meta.iter().cloned());
    crawler::warn_unchecked_proxy(settings);
    let mut session = crate::shell::fetcher(settings).map_err(failed)?;
    let rules = StatusRules {
        spider: spider.allowed_statuses(),
        setting: settings.allowed_statuses.clone(),
    };
    let mut pages = Vec::new();
    let mut seen = HashSet::new();
    let mut level = vec![first];
    let mut last_host: Option<String> = None;
    'levels: for depth in 1..=args.depth {
        let mut next = Vec::new();
        for req in level {
            if !seen.insert((req.method.clone(), req.url.clone())) {
                continue;
            }
            if pages.len() >= args.max_pages {
                tracing::warn!(
                    "parse stopped at --max-pages {}: more requests were left",
                    args.max_pages
                );
                break 'levels;
            }
            // Back to back on one host, the pause a crawl's slot would make: the delay of
            // the host's `[[hosts]]` rule, or robots.txt's Crawl-delay when longer.
            let host = host_key(&req.url);
            if last_host.as_deref() == Some(host.as_str()) {
                let delay = settings.for_host(&host).download_delay;
                let delay = session
                    .crawl_delay(&req.url)
                    .map_or(delay, |d| d.max(delay));
                if !delay.is_zero() {
                    tokio::time::sleep(delay).await;
                }
            }
            last_host = Some(host);
            let (page, produced) = parse_one(spider, &mut session, &rules, req, depth).await;
            if depth < args.depth {
                next.extend(produced);
            }
            pages.push(page);
        }
        level = next;
        if level.is_empty() {
            break;
        }
    }
    print(spider.name(), &pages, args.json).map_err(failed)?;
    let errors = pages.iter().filter(|p| p.error.is_some()).count();
    if errors > 0 {
        return Err(failed(Error::new(
            ErrorKind::Other,
            format!("{errors} page(s) failed"),
        )));
    }
    Ok(())
}

/// The host key `[[hosts]]` rules match: `host`, or `host:port` for a non-default port.
fn host_key(url: &crawler::core::Url) -> String {
    let host = url.host_str().unwrap_or("");
    match url.port() {
        Some(p) => format!("{host}:{p}"),
        None => host.to_owned(),
    }
}

/// Fetch `req` and run its callback; the report, and the requests to follow.
async fn parse_one<S: Spider>(
    spider: &S,
    session: &mut Session,
    rules: &StatusRules,
    req: Request,
    depth: u32,
) -> (PageReport, Vec<Request>) {
    let callback = req.callback.clone().unwrap_or_else(|| "parse".to_owned());
    let mut report = PageReport {
        url: req.url.to_string(),
        status: None,
        callback: callback.clone(),
        depth,
        items: Vec::new(),
        requests: Vec::new(),
        error: None,
    };
    let fail = |report: &mut PageReport, message: String| {
        let message = crawler::core::redact::scrub(&message).into_owned();
        eprintln!("error: {} (callback {callback}): {message}", report.url);
        report.error = Some(message);
    };
    let page = match session.load(req.clone()).await {
        Ok(_) => session.take_page(),
        Err(why) => {
            fail(&mut report, why);
            return (report, Vec::new());
        }
    };
    let Some(page) = page else {
        fail(&mut report, "no page was kept".into());
        return (report, Vec::new());
    };
    let status = page.status();
    report.status = Some(status);
    report.url = page.url().to_string();
    if !(200..300).contains(&status) && !rules.allows(&req, status) {
        fail(
            &mut report,
            format!(
                "HTTP status {status}, which the spider does not handle \
                 (Spider::allowed_statuses, the allowed_statuses setting)"
            ),
        );
        return (report, Vec::new());
    }
    let from_private = page.served_from_private();
    let mut out = Output::new(page.base_url().clone(), req.depth);
    let result = spider.parse(page, &mut out).await;
    let (items, mut requests) = out.into_parts();
    report.requests = requests.iter().map(RequestReport::from).collect();
    // As the engine does: a page served from a private address may lead to others there
    // (`deny_private_addresses`); the mark is the crawl's, so it is left out of the report.
    for r in &mut requests {
        crawler::core::address::mark_from_private(&mut r.meta, from_private);
    }
    for (i, item) in items.iter().enumerate() {
        match serde_json::to_value(item) {
            Ok(v) => report.items.push(v),
            Err(e) => {
                fail(&mut report, format!("item {i} does not serialize: {e}"));
            }
        }
    }
    if let Err(e) = result {
        fail(&mut report, format!("spider error: {e}"));
    }
    (report, requests)
}

/// Print the pages: one JSON document, or a listing.
fn print(spider: &str, pages: &[PageReport], json: bool) -> Result<(), Error> {
    let mut out = std::io::stdout().lock();
    let text = if json {
        let doc = serde_json::json!({ "spider": spider, "pages": pages });
        let mut s = serde_json::to_string_pretty(&doc)
            .map_err(|e| Error::new(ErrorKind::Other, format!("cannot write the report: {e}")))?;
        s.push('\n');
        s
    } else {
        listing(pages)
    };
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(|e| Error::new(ErrorKind::Other, format!("cannot write to stdout: {e}")))
}

/// The readable form: per page its status, URL, callback and depth, then its items (one
/// JSON line each) and its requests.
fn listing(pages: &[PageReport]) -> String {
    let mut s = String::new();
    for p in pages {
        let status = p
            .status
            .map(|s| s.to_string())
            .unwrap_or_else(|| "-".into());
        s.push_str(&format!(
            "[{status}] {}  (callback {}, depth {})\n",
            p.url, p.callback, p.depth
        ));
        if let Some(e) = &p.error {
            s.push_str(&format!("  error: {e}\n"));
        }
        s.push_str(&format!("  items ({}):\n", p.items.len()));
        for item in &p.items {
            s.push_str(&format!("    {item}\n"));
        }
        s.push_str(&format!("  requests ({}):\n", p.requests.len()));
        for r in &p.requests {
            s.push_str(&format!(
                "    {} {}  callback={}",
                r.method,
                r.url,
                r.callback.as_deref().unwrap_or("parse")
            ));
            if !r.meta.is_empty() {
                s.push_str(&format!("  meta={}", Value::Object(r.meta.clone())));
            }
            s.push('\n');
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::meta_pair;
    use serde_json::json;

    #[test]
    fn meta_values_are_json_or_strings() {
        assert_eq!(meta_pair("id=4"), Ok(("id".into(), json!(4))));
        assert_eq!(meta_pair("name=book"), Ok(("name".into(), json!("book"))));
        assert_eq!(meta_pair("a=[1,2]"), Ok(("a".into(), json!([1, 2]))));
        assert!(meta_pair("novalue").is_err());
        assert!(meta_pair("=3").is_err());
    }
}
