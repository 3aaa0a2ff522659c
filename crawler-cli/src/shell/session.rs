//! The shell's state: the downloader (kept for the whole session, so its robots.txt cache
//! and cookie jar carry from page to page), the current page, and the last list printed
//! (what `follow N` picks from).

use std::collections::HashSet;
use std::io::Write;

use crawler::core::{Bytes, Fetched, Request, Response, Settings, Url, parse_http_url};
use crawler::engine::Middlewares;
use crawler::http::{HttpDownloader, downloader_stack, fetch_once_with, product_token};

use super::command::{self, Command, Limits, Pick, Query};
use crate::tools::{Body, printable_body};
use crawler::Error;

/// The most characters `body` prints (all with `--max-chars 0`); `view` saves the whole body.
const BODY_MAX_CHARS: usize = 100_000;

/// Whether the session goes on after a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flow {
    /// Read the next command.
    Continue,
    /// `quit`.
    Quit,
}

/// A shell session: one current page at a time.
pub(crate) struct Session {
    downloader: Middlewares<HttpDownloader>,
    max_redirects: usize,
    /// The robots.txt product token, for refusal messages.
    agent: String,
    page: Option<Response>,
    /// The links of the last list printed, by index (`None` for an entry without one).
    list: Vec<Option<String>>,
    limits: Limits,
}

impl Session {
    /// A session fetching with `settings`: the downloader a crawl with these settings would
    /// use, inside the downloader middlewares they name (`downloader_middlewares`: default
    /// headers, User-Agent, cookies, HTTP auth).
    pub(crate) fn new(settings: &Settings, limits: Limits) -> Result<Self, Error> {
        let downloader = Middlewares::new(
            HttpDownloader::new(settings)?,
            downloader_stack(settings, Vec::new())?,
        );
        Ok(Self {
            downloader,
            max_redirects: settings.max_redirects,
            agent: product_token(&settings.user_agent).to_owned(),
            page: None,
            list: Vec::new(),
            limits,
        })
    }

    /// Fetch `request` (robots.txt checked, redirects followed) and make it the current
    /// page; returns a one-line summary. On failure the current page stays.
    pub(crate) async fn load(&mut self, request: Request) -> Result<String, String> {
        let asked = request.url.clone();
        let (got, last) = fetch_once_with(&self.downloader, &request, self.max_redirects).await;
        let page = match got.outcome {
            Fetched::Response(page) => page,
            Fetched::Disallowed => return Err(self.refusal(&last.url)),
            Fetched::Requeue(why) => return Err(format!("{}: not fetched: {why}", last.url)),
            Fetched::Failed(f) => return Err(format!("{}: {}: {}", last.url, f.kind, f.message)),
        };
        let page = inflated(page);
        let mut summary = format!("[{}] {}", page.status(), page.url());
        if page.url() != &asked {
            summary.push_str(&format!(" (redirected from {asked})"));
        }
        summary.push_str(&format!(", {} bytes", page.body().len()));
        if let Some(ct) = page.header("content-type") {
            summary.push_str(&format!(", {ct}"));
        }
        self.page = Some(page);
        self.list.clear();
        Ok(summary)
    }

    /// The Crawl-delay robots.txt gives `url`'s host, when its file is cached.
    pub(crate) fn crawl_delay(&self, url: &Url) -> Option<std::time::Duration> {
        self.downloader
            .inner()
            .robots()
            .and_then(|cache| cache.cached(url))
            .and_then(|rules| rules.crawl_delay())
    }

    /// Take the current page out of the session (`parse` hands it to a spider's callback).
    pub(crate) fn take_page(&mut self) -> Option<Response> {
        self.list.clear();
        self.page.take()
    }

    /// Why robots.txt refused `url`, naming the deciding rule when the file has one.
    fn refusal(&self, url: &Url) -> String {
        let robots = format!("{}/robots.txt", url.origin().ascii_serialization());
        let rule = self
            .downloader
            .inner()
            .robots()
            .and_then(|cache| cache.cached(url))
            .and_then(|rules| rules.matched_rule(url));
        let rule = rule.map(|r| format!(" (rule `{r}`)")).unwrap_or_default();
        format!(
            "{url} is disallowed by {robots} for user agent '{}'{rule}; not fetched (see \
             `crawler robots {url}`)",
            self.agent
        )
    }

    /// Run one command, writing its results to `out`. `Err` is the message of a command
    /// that failed (the session goes on).
    pub(crate) async fn run(&mut self, cmd: Command, out: &mut Vec<u8>) -> Result<Flow, String> {
        let limits = self.limits;
        match cmd {
            Command::Nothing => {}
            Command::Help => {
                out.extend_from_slice(command::HELP.as_bytes());
                out.push(b'\n');
            }
            Command::Quit => return Ok(Flow::Quit),
            Command::Follow(target) => {
                let request = self.follow_request(&target)?;
                let summary = self.load(request).await?;
                eprintln!("{summary}");
            }
            Command::Fetch(target) => {
                let request = match parse_http_url(&target) {
                    Ok(url) => Request::new(url),
                    // Not absolute: a link relative to the current page.
                    Err(_) => Request::new(self.page()?.urljoin(&target).map_err(|e| {
                        format!("'{target}' is neither an http(s) URL nor a link: {e}")
                    })?),
                };
                let summary = self.load(request).await?;
                eprintln!("{summary}");
            }
            Command::Select(query) => {
                let (text, links) = select(self.page()?, &query, limits);
                out.extend_from_slice(text.as_bytes());
                if let Some(links) = links {
                    self.list = links;
                }
            }
            Command::Links(query) => {
                let links = page_links(self.page()?, query.as_ref());
                if links.is_empty() {
                    eprintln!("no links");
                }
                let shown = command::shown(links.len(), limits);
                out.extend_from_slice(
                    command::render(&links[..shown], links.len(), limits).as_bytes(),
                );
                self.list = links.into_iter().map(Some).collect();
            }
            Command::Headers => {
                let page = self.page()?;
                let _ = writeln!(out, "HTTP {} {}", page.status(), page.url());
                for (name, value) in page.headers() {
                    let _ = writeln!(out, "{name}: {}", String::from_utf8_lossy(value.as_bytes()));
                }
            }
            Command::Status => {
                let _ = writeln!(out, "{}", self.page()?.status());
            }
            Command::Url => {
                let _ = writeln!(out, "{}", self.page()?.url());
            }
            Command::Body => {
                let page = self.page()?;
                if let Body::Binary(why) = printable_body(page.body()) {
                    return Err(format!(
                        "binary body of {} bytes ({why}) not printed; `view` saves it to a file",
                        page.body().len()
                    ));
                }
                let max = match limits.max_chars {
                    0 => 0,
                    _ => BODY_MAX_CHARS,
                };
                out.extend_from_slice(command::truncate(page.text(), max).as_bytes());
                out.push(b'\n');
            }
            Command::View => {
                let path = view(self.page()?)?;
                let _ = writeln!(out, "{}", path.display());
            }
        }
        Ok(Flow::Continue)
    }

    fn page(&self) -> Result<&Response, String> {
        self.page
            .as_ref()
            .ok_or_else(|| "no page yet: `fetch URL` first".to_owned())
    }

    /// The request `follow TARGET` makes: entry N of the last list (the page's links when
    /// nothing was listed yet), or a link resolved against the page.
    fn follow_request(&mut self, target: &str) -> Result<Request, String> {
        let page = self
            .page
            .as_ref()
            .ok_or_else(|| "no page yet: `fetch URL` first".to_owned())?;
        let href = match target.parse::<usize>() {
            Ok(n) => {
                if self.list.is_empty() {
                    self.list = page_links(page, None).into_iter().map(Some).collect();
                }
                match self.list.get(n) {
                    Some(Some(href)) => href.clone(),
                    Some(None) => {
                        return Err(format!("entry {n} of the last list has no link"));
                    }
                    None => {
                        return Err(format!(
                            "no entry {n}: the last list had {} (`links` lists the page's \
                             links)",
                            self.list.len()
                        ));
                    }
                }
            }
            Err(_) => target.to_owned(),
        };
        page.follow(&href).map_err(|e| e.to_string())
    }
}

/// A gzip body (a `.xml.gz` sitemap) replaced by its text, as `crawler fetch` shows it, so
/// selectors see the document.
fn inflated(page: Response) -> Response {
    match printable_body(page.body()) {
        Body::Gzip(text) => Response::new(
            page.request().clone(),
            page.url().clone(),
            page.status(),
            page.headers().clone(),
            Bytes::from(text),
        ),
        Body::Page | Body::Binary(_) => page,
    }
}

/// What a query prints of `page`, and the links of its matches for `follow N` (`None`
/// for `count`, which prints no list).
fn select(page: &Response, query: &Query, limits: Limits) -> (String, Option<Vec<Option<String>>>) {
    let selection = match run(page, query) {
        Ok(selection) => selection,
        Err(e) => {
            eprintln!("{e}");
            return (String::new(), None);
        }
    };
    let total = selection.len();
    if query.pick == Pick::Count {
        return (format!("{total}\n"), None);
    }
    if total == 0 {
        eprintln!("nothing matches '{}'", query.expr);
        return (String::new(), Some(Vec::new()));
    }
    let nodes: Vec<_> = selection.into_iter().collect();
    let (entries, links, total) = match &query.pick {
        Pick::Attr(name) => {
            // Attribute values are cheap: all of them, so `follow N` reaches past the cut.
            let (values, links): (Vec<String>, Vec<Option<String>>) = nodes
                .iter()
                .filter_map(|n| {
                    let value = n.attr(name)?;
                    let link = if is_url_attr(name) {
                        Some(value.clone())
                    } else {
                        n.attr("href")
                    };
                    Some((value, link))
                })
                .unzip();
            if values.is_empty() {
                eprintln!(
                    "{total} node(s) match '{}' but none has attribute '{name}'",
                    query.expr
                );
            }
            let total = values.len();
            (values, links, total)
        }
        pick => {
            // Texts and HTML only for the entries shown: a page of 10,000 rows costs no more
            // than the rows printed.
            let shown = command::shown(total, limits);
            let entries = nodes[..shown]
                .iter()
                .map(|n| {
                    if *pick == Pick::Html {
                        n.html()
                    } else {
                        n.text()
                    }
                })
                .collect();
            // An entry's link: a URL attribute's value itself (`a::attr(href)`, `//a/@href`),
            // else the href of the element, or of the element a text node or attribute
            // belongs to (`follow 0` after `a::attr(title)` or `a::text` opens that link).
            let links = nodes
                .iter()
                .map(|n| {
                    if n.is_element() {
                        n.attr("href")
                    } else if is_url_attr(&n.name()) {
                        Some(n.text())
                    } else {
                        n.xpath("../@href").get()
                    }
                })
                .collect();
            (entries, links, total)
        }
    };
    (command::render(&entries, total, limits), Some(links))
}

fn is_url_attr(name: &str) -> bool {
    ["href", "src", "action"].contains(&name.to_ascii_lowercase().as_str())
}

/// The query on `page`, CSS or XPath.
fn run<'p>(page: &'p Response, query: &Query) -> Result<crawler::Selection<'p>, Error> {
    if query.xpath {
        page.try_xpath(&query.expr)
    } else {
        page.try_select(&query.expr)
    }
}

/// The absolute URLs of the `href`s of the elements `query` matches (`a[href]` without one),
/// first occurrence kept.
fn page_links(page: &Response, query: Option<&Query>) -> Vec<String> {
    let selection = match query {
        Some(query) => run(page, query),
        None => page.try_select("a[href]"),
    };
    let mut seen = HashSet::new();
    selection
        .map(|s| s.attrs("href").collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .filter_map(|href| page.urljoin(&href).ok())
        .map(String::from)
        .filter(|url| seen.insert(url.clone()))
        .collect()
}

/// Save the body (decompressed, as selectors see it) to a new file in the temporary
/// directory, named for its type so a browser opens it as one; returns its path.
fn view(page: &Response) -> Result<std::path::PathBuf, String> {
    let ct = page
        .header("content-type")
        .unwrap_or_default()
        .to_ascii_lowercase();
    let suffix = if ct.contains("json") {
        ".json"
    } else if ct.contains("xml") && !ct.contains("html") {
        ".xml"
    } else if ct.contains("text/plain") {
        ".txt"
    } else if page.is_html() {
        ".html"
    } else {
        ".bin"
    };
    let mut file = tempfile::Builder::new()
        .prefix("crawler-shell-")
        .suffix(suffix)
        .tempfile()
        .map_err(|e| format!("cannot create a file in the temporary directory: {e}"))?;
    file.write_all(page.body())
        .map_err(|e| format!("cannot write {}: {e}", file.path().display()))?;
    let (_, path) = file
        .keep()
        .map_err(|e| format!("cannot keep the saved body: {e}"))?;
    Ok(path)
}
