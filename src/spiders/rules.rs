//! Crawl rules: let a list of link extractors drive the crawl, as Scrapy's `CrawlSpider` does.

use std::collections::HashSet;

use crate::spiders::links::LinkExtractor;
use crawler_core::Output;
use crawler_core::Request;
use crawler_core::Response;

/// The callback name given to pages requested by a rule without a callback of its own.
///
/// Reserved: a spider's `parse` sees it in [`Response::callback`] for pages that exist only
/// to be followed, and should not use it for its own callbacks.
pub const FOLLOW_CALLBACK: &str = "rules:follow";

/// The request meta key holding the index (in [`Rules`]) of the rule that requested a page.
pub const RULE_META_KEY: &str = "rule";

/// One crawl rule: which links to take from a page, and what to do with them.
#[derive(Debug, Clone)]
pub struct Rule {
    extractor: LinkExtractor,
    callback: Option<String>,
    follow: Option<bool>,
    priority: i32,
}

impl Rule {
    /// A rule taking the links `extractor` finds; without a callback it follows them.
    pub fn new(extractor: LinkExtractor) -> Self {
        Self {
            extractor,
            callback: None,
            follow: None,
            priority: 0,
        }
    }

    /// Parse the linked pages with this callback (matched on [`Response::callback`] in the
    /// spider's `parse`). Such a rule no longer follows unless [`follow`](Self::follow)
    /// says so.
    pub fn callback(mut self, name: impl Into<String>) -> Self {
        self.callback = Some(name.into());
        self
    }

    /// Whether the rules run again on the linked pages (default: only if no callback).
    pub fn follow(mut self, follow: bool) -> Self {
        self.follow = Some(follow);
        self
    }

    /// Add `adjust` to the priority of this rule's requests (higher runs sooner).
    pub fn priority(mut self, adjust: i32) -> Self {
        self.priority = adjust;
        self
    }

    /// The rule's link extractor.
    pub fn extractor(&self) -> &LinkExtractor {
        &self.extractor
    }

    /// The rule's callback, if it has one.
    pub fn callback_name(&self) -> Option<&str> {
        self.callback.as_deref()
    }

    /// Whether the rules run on pages this rule requests (explicit, or the default).
    pub fn follows(&self) -> bool {
        self.follow.unwrap_or(self.callback.is_none())
    }

    /// The request for one link of this rule, numbered `index` in its [`Rules`].
    fn request(&self, index: usize, url: url::Url) -> Request {
        let mut req = Request::new(url)
            .callback(self.callback.as_deref().unwrap_or(FOLLOW_CALLBACK))
            .priority(self.priority);
        req.meta.insert(RULE_META_KEY.to_owned(), index.into());
        req
    }
}

/// The requests [`Rules::requests`] made for a page.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct RuleRequests {
    /// One request per link taken, in rule order then document order. Depth is left at 0:
    /// [`Output::request`] sets it from the page.
    pub requests: Vec<Request>,
    /// Hrefs that could not become an http(s) URL: the most any one rule met, since rules
    /// usually read the same elements and one bad href should count once.
    pub invalid: u64,
}

/// An ordered list of crawl rules: Scrapy's `CrawlSpider` as a value a spider holds.
///
/// A [`Rule`] pairs a [`LinkExtractor`] with what to do with the links it finds: parse them
/// with a named callback, follow them (run the rules again on the pages they lead to), or
/// both. [`Rules`] holds the rules in order; a spider calls [`Rules::apply`] from `parse`,
/// and matches on [`Response::callback`] for the pages it wants items from:
///
/// ```
/// use crawler::core::{Output, Response, Result, Spider};
/// use crawler::spiders::{LinkExtractor, Rule, Rules};
///
/// struct Books { rules: Rules }
///
/// impl Books {
///     fn new() -> Result<Self> {
///         let listing = LinkExtractor::builder().allow([r"/catalogue/page-\d+\.html$"]).build()?;
///         let book = LinkExtractor::builder().allow([r"/catalogue/book-\d+\.html$"]).build()?;
///         Ok(Self {
///             rules: Rules::new([Rule::new(listing), Rule::new(book).callback("book")]),
///         })
///     }
/// }
///
/// impl Spider for Books {
///     type Item = String;
///     fn name(&self) -> &str { "books" }
///     fn start_urls(&self) -> Vec<String> { vec!["http://127.0.0.1:8080/".into()] }
///     async fn parse(&self, page: Response, out: &mut Output<String>) -> Result<()> {
///         if page.callback() == Some("book") {
///             out.item(page.text_of("h1")?);
///         }
///         self.rules.apply(&page, out);
///         Ok(())
///     }
/// }
/// # Books::new().unwrap();
/// ```
///
/// # Semantics
///
/// **Which pages the rules run on.** [`Rules::apply`] extracts links only from pages that
/// [`Rules::applies_to`] accepts:
///
/// - pages requested without a callback: the start URLs, and links the spider followed itself
///   with [`Output::follow`];
/// - pages requested by a rule that [follows](Rule::follows): a follow-only rule's links carry
///   the reserved callback [`FOLLOW_CALLBACK`], and every rule's links carry the rule's index
///   in the request meta under [`RULE_META_KEY`];
/// - not pages a rule requested with `follow(false)` (the default for a rule with a
///   callback), nor pages the spider requested itself with a callback of its own.
///
/// On any other page `apply` does nothing, so calling it unconditionally is correct.
///
/// **Follow defaults.** As in Scrapy, a rule without a callback follows its links, and a rule
/// with a callback does not unless [`Rule::follow`] says so.
///
/// **Order and duplicates.** Rules run in the order given. A link taken by an earlier rule on
/// a page is not taken again by a later one on that page, so the first matching rule decides
/// the callback; a link an earlier rule's filters rejected is still open to later rules.
/// Within one rule the extractor drops duplicate links (see [`LinkExtractor`]); across pages
/// the frontier's duplicate filter does the rest.
///
/// **Requests.** Each request is a GET at the page's depth + 1, with the rule's callback (or
/// [`FOLLOW_CALLBACK`]), `meta["rule"]` set to the rule's index, and the rule's priority
/// adjustment added to the default priority.
#[derive(Debug, Clone, Default)]
pub struct Rules {
    rules: Vec<Rule>,
}

impl Rules {
    /// Rules applied in the given order.
    pub fn new(rules: impl IntoIterator<Item = Rule>) -> Self {
        Self {
            rules: rules.into_iter().collect(),
        }
    }

    /// The rules, in order.
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// Whether the rules run on this page: it was requested without a callback, or by a rule
    /// that follows.
    pub fn applies_to(&self, page: &Response) -> bool {
        let rule = page
            .meta::<usize>(RULE_META_KEY)
            .and_then(|i| self.rules.get(i));
        match rule {
            Some(rule) => rule.follows(),
            // No (known) rule: e.g. a start page, a page the spider followed itself, or a
            // request persisted by an older version of the spider with other rules.
            None => matches!(page.callback(), None | Some(FOLLOW_CALLBACK)),
        }
    }

    /// The requests the rules make for this page, without sending them (empty when the
    /// rules do not apply to it). Use this to adjust requests before
    /// [`Output::request`]; otherwise [`apply`](Self::apply) does both.
    pub fn requests(&self, page: &Response) -> RuleRequests {
        let mut made = RuleRequests::default();
        if !self.applies_to(page) {
            return made;
        }
        let mut taken = HashSet::new();
        for (index, rule) in self.rules.iter().enumerate() {
            let found = rule.extractor.extract_counted(page);
            made.invalid = made.invalid.max(found.invalid);
            for link in found.links {
                if taken.insert(link.url.as_str().to_owned()) {
                    made.requests.push(rule.request(index, link.url));
                }
            }
        }
        made
    }

    /// Run the rules on this page and send their requests through `out`; returns how many
    /// requests were made. Does nothing on pages the rules do not apply to.
    ///
    /// Invalid hrefs are counted in the crawl's `invalid_links` statistic, like those given
    /// to [`Output::follow`].
    pub fn apply<I>(&self, page: &Response, out: &mut Output<I>) -> usize {
        let made = self.requests(page);
        let n = made.requests.len();
        for req in made.requests {
            out.request(req);
        }
        for _ in 0..made.invalid {
            // Output counts invalid links only through its own follow methods; a link that
            // can never be an http(s) URL makes it count ours (the real hrefs were logged by
            // the extractor).
            out.follow("about:invalid");
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spiders::links::LinkExtractor;

    const HTML: &str = r#"<a href="/catalogue/page-2.html">next</a>
        <a href="/catalogue/book-1.html">b1</a><a href="/catalogue/book-2.html">b2</a>
        <a href="/category/x/page-1.html">cat</a><a href="mailto:x@example.com">m</a>"#;

    fn page_from(req: Request, html: &str) -> Response {
        crate::spiders::html_response(req, html)
    }

    fn start_page() -> Response {
        let mut req = Request::get("http://example.com/").unwrap();
        req.depth = 2;
        page_from(req, HTML)
    }

    fn allow(pattern: &str) -> LinkExtractor {
        LinkExtractor::builder().allow([pattern]).build().unwrap()
    }

    fn books_rules() -> Rules {
        Rules::new([
            Rule::new(allow(r"/catalogue/page-\d+")),
            Rule::new(allow(r"/catalogue/book-\d+")).callback("book"),
        ])
    }

    #[test]
    fn follow_defaults_depend_on_the_callback() {
        assert!(Rule::new(allow("x")).follows());
        assert!(!Rule::new(allow("x")).callback("c").follows());
        assert!(Rule::new(allow("x")).callback("c").follow(true).follows());
        assert!(!Rule::new(allow("x")).follow(false).follows());
    }

    #[test]
    fn start_pages_get_requests_per_rule_with_callback_and_meta() {
        let page = start_page();
        let mut out: Output<()> = Output::new(page.base_url().clone(), page.depth());
        let n = books_rules().apply(&page, &mut out);
        assert_eq!(n, 3);
        let reqs = out.requests();
        let got: Vec<(&str, Option<&str>, Option<u64>)> = reqs
            .iter()
            .map(|r| {
                (
                    r.url.path(),
                    r.callback.as_deref(),
                    r.meta.get(RULE_META_KEY).and_then(|v| v.as_u64()),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                ("/catalogue/page-2.html", Some(FOLLOW_CALLBACK), Some(0)),
                ("/catalogue/book-1.html", Some("book"), Some(1)),
                ("/catalogue/book-2.html", Some("book"), Some(1)),
            ]
        );
        assert!(reqs.iter().all(|r| r.depth == 3));
        assert_eq!(out.invalid_links(), 1, "the mailto: link is counted");
    }

    #[test]
    fn rules_run_again_only_on_pages_of_following_rules() {
        let rules = Rules::new([
            Rule::new(allow(r"/catalogue/page-\d+")),
            Rule::new(allow(r"/catalogue/book-1\.")).callback("book"),
            Rule::new(allow(r"/catalogue/book-2\."))
                .callback("book")
                .follow(true),
        ]);
        let made = rules.requests(&start_page());
        let pages: Vec<Response> = made
            .requests
            .into_iter()
            .map(|r| page_from(r, HTML))
            .collect();
        assert_eq!(pages.len(), 3);
        assert!(rules.applies_to(&pages[0]), "follow-only rule");
        assert!(!rules.applies_to(&pages[1]), "callback rule, follow off");
        assert!(rules.applies_to(&pages[2]), "callback rule, follow on");
        assert_eq!(rules.requests(&pages[0]).requests.len(), 3);
        assert!(rules.requests(&pages[1]).requests.is_empty());

        // Pages the spider asked for with its own callback are left alone; its plain
        // follows are treated like start pages.
        let own = Request::get("http://example.com/x")
            .unwrap()
            .callback("mine");
        assert!(!rules.applies_to(&page_from(own, HTML)));
        let plain = Request::get("http://example.com/x").unwrap();
        assert!(rules.applies_to(&page_from(plain, HTML)));
        // A rule index the spider no longer has falls back to the callback marker.
        let stale = rules.rules()[0].request(9, url::Url::parse("http://example.com/").unwrap());
        assert!(rules.applies_to(&page_from(stale, HTML)));
    }

    #[test]
    fn a_link_goes_to_the_first_rule_that_takes_it() {
        let rules = Rules::new([
            Rule::new(allow(r"book-1\.")).callback("first"),
            Rule::new(allow(r"/catalogue/")).callback("second"),
            Rule::new(LinkExtractor::builder().deny(["/"]).build().unwrap()),
        ]);
        let made = rules.requests(&start_page());
        let got: Vec<(&str, Option<&str>)> = made
            .requests
            .iter()
            .map(|r| (r.url.path(), r.callback.as_deref()))
            .collect();
        assert_eq!(
            got,
            [
                ("/catalogue/book-1.html", Some("first")),
                ("/catalogue/page-2.html", Some("second")),
                ("/catalogue/book-2.html", Some("second")),
            ]
        );
        // Each of the three extractors skipped the mailto: link; it counts once.
        assert_eq!(made.invalid, 1);
    }

    #[test]
    fn priority_adjusts_requests() {
        let rules = Rules::new([Rule::new(allow("book-1")).callback("b").priority(5)]);
        let made = rules.requests(&start_page());
        assert_eq!(made.requests.len(), 1);
        assert_eq!(made.requests[0].priority, 5);
    }
}
