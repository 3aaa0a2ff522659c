//! Selecting from a page: CSS (with parsel's `::text` and `::attr(name)`) and XPath 1.0,
//! both over the one tree the page is parsed into, with Scrapy's `.get()`, `.getall()`,
//! `.re()` and `.re_first()` on any result.
//!
//! A result is a list of [`Node`]s: elements, text nodes, attributes, comments, or (from an
//! XPath such as `count(//a)`) a value. Every selector is the spider's own code, so an invalid
//! one fails the page (see [`crate::Response::select`]) rather than panicking mid-crawl.

use std::collections::HashMap;
use std::rc::Rc;
use std::sync::{Arc, Mutex, MutexGuard};

use ego_tree::{NodeId, NodeRef};
use scraper::{ElementRef, Html};

use crate::error::{Error, ErrorKind, Result};

pub(crate) mod css;
#[cfg(test)]
mod tests;
pub(crate) mod xpath;

use css::{CssQuery, Pseudo};

/// A parsed page: the tree, and each node's place in document order once a query needs it
/// (XPath, or CSS results merged from several parts).
pub(crate) struct Doc {
    html: Html,
    order: Option<HashMap<NodeId, u32>>,
}

impl Doc {
    pub(crate) fn new(html: Html) -> Self {
        Self { html, order: None }
    }

    /// The tree with its document order, computed on first use.
    fn indexed(&mut self) -> (&Html, &HashMap<NodeId, u32>) {
        let order = self
            .order
            .get_or_insert_with(|| xpath::document_order(&self.html.tree));
        (&self.html, order)
    }
}

/// One result of a query.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Hit {
    /// A node of the tree: an element, a text node, a comment, or the document.
    Node(NodeId),
    /// The attribute at this index among the element's.
    Attr(NodeId, u32),
    /// A value an XPath computed (a number, string or boolean), written as parsel writes it.
    Value(Arc<str>),
}

/// A parsed page and where its problems go: what every selection and node carries.
#[derive(Clone, Copy)]
pub(crate) struct Page<'a> {
    pub(crate) doc: &'a Mutex<Doc>,
    /// Invalid selectors the spider used, reported by the engine after the callback.
    pub(crate) problems: &'a Mutex<Vec<Error>>,
}

impl<'a> Page<'a> {
    fn selection(self, hits: Vec<Hit>) -> Selection<'a> {
        Selection { page: self, hits }
    }

    fn node(self, hit: Hit) -> Node<'a> {
        Node { page: self, hit }
    }

    /// The nodes `css` selects below `scope` (the document when `None`); only the first
    /// when `first`.
    pub(crate) fn css(self, scope: Option<&Hit>, css: &str, first: bool) -> Result<Selection<'a>> {
        let query = css::compile(css)?;
        let mut doc = lock(self.doc);
        let hits = match scope {
            None => run_css(&mut doc, None, &query, first),
            Some(Hit::Node(id)) => run_css(&mut doc, Some(*id), &query, first),
            Some(_) => Vec::new(),
        };
        Ok(self.selection(hits))
    }

    /// The nodes or value `expr` gives with `scope` as the context node (the document's root
    /// when `None`).
    pub(crate) fn xpath(self, scope: Option<&Hit>, expr: &str) -> Result<Selection<'a>> {
        let compiled = xpath::compile(expr)?;
        let mut doc = lock(self.doc);
        let (html, order) = doc.indexed();
        let root = Hit::Node(html.tree.root().id());
        let Some(context) = xpath::XNode::new(&html.tree, order, scope.unwrap_or(&root)) else {
            return Ok(self.selection(Vec::new()));
        };
        let hits = xpath::evaluate(expr, &compiled, context)?;
        Ok(self.selection(hits))
    }

    /// The selection, or an empty one with the error recorded for the engine.
    pub(crate) fn recorded(self, result: Result<Selection<'a>>) -> Selection<'a> {
        result.unwrap_or_else(|e| {
            record(self.problems, &e);
            self.selection(Vec::new())
        })
    }

    /// `result`, with an error also recorded for the engine.
    pub(crate) fn noted<T>(self, result: Result<T>) -> Result<T> {
        result.inspect_err(|e| record(self.problems, e))
    }
}

/// Check a CSS selector (with `::text` and `::attr(name)`) without a page: the error
/// [`crate::Response::try_select`] would give, for selectors read from settings or typed in.
pub fn check_css(css: &str) -> Result<()> {
    css::compile(css).map(drop)
}

/// Check an XPath 1.0 expression without a page: the syntax error
/// [`crate::Response::try_xpath`] would give.
pub fn check_xpath(expr: &str) -> Result<()> {
    xpath::compile(expr).map(drop)
}

/// Whether an expression reads as XPath rather than CSS (a path from the root or the context,
/// an attribute or text step, an axis): what the shell and `crawler fetch` use to pick one.
pub fn looks_like_xpath(expr: &str) -> bool {
    css::looks_like_xpath(expr)
}

/// Run a compiled CSS query below `scope` (the document when `None`).
fn run_css(doc: &mut Doc, scope: Option<NodeId>, query: &CssQuery, first: bool) -> Vec<Hit> {
    let html = &doc.html;
    let limit = if first { 1 } else { usize::MAX };
    let parts = match query {
        // Straight into hits: no list of ids to copy over.
        CssQuery::Elements(selector) => return matched(html, scope, selector, limit, Hit::Node),
        CssQuery::Parts(parts) => parts,
    };
    let elements = |selector| matched(html, scope, selector, limit, |id| id);
    let mut hits = Vec::new();
    let mut merge = parts.len() > 1;
    for part in parts {
        let starts = match &part.selector {
            Some(selector) => elements(selector),
            // A bare `::text` reads the context itself and everything below it.
            None => vec![scope.unwrap_or_else(|| html.tree.root().id())],
        };
        let deep = match &part.pseudo {
            Pseudo::None => false,
            Pseudo::Text { deep } | Pseudo::Attr { deep, .. } => *deep,
        };
        merge |= deep && starts.len() > 1;
        for node in starts.into_iter().filter_map(|id| html.tree.get(id)) {
            pseudo_hits(node, &part.pseudo, &mut hits);
        }
    }
    if merge {
        // Parts and nested matches may overlap: one list in document order, each node once.
        let (_, order) = doc.indexed();
        let place = |h: &Hit| match *h {
            Hit::Node(id) => (order.get(&id).copied(), 0),
            Hit::Attr(id, i) => (order.get(&id).copied(), i + 1),
            Hit::Value(_) => (None, 0),
        };
        hits.sort_by_key(place);
        hits.dedup();
    }
    if first {
        hits.truncate(1);
    }
    hits
}

/// The elements `selector` matches below `scope` (the whole document when `None`), at most
/// `limit` of them, each as `f` makes it.
fn matched<T>(
    html: &Html,
    scope: Option<NodeId>,
    selector: &scraper::Selector,
    limit: usize,
    f: impl Fn(NodeId) -> T,
) -> Vec<T> {
    match scope {
        None => html
            .select(selector)
            .take(limit)
            .map(|e| f(e.id()))
            .collect(),
        Some(id) => html
            .tree
            .get(id)
            .and_then(ElementRef::wrap)
            .map(|e| e.select(selector).take(limit).map(|d| f(d.id())).collect())
            .unwrap_or_default(),
    }
}

/// What a part's pseudo-element takes from one matched node.
fn pseudo_hits(node: NodeRef<'_, scraper::Node>, pseudo: &Pseudo, hits: &mut Vec<Hit>) {
    match pseudo {
        Pseudo::None => hits.push(Hit::Node(node.id())),
        Pseudo::Text { deep } => {
            let texts = |n: NodeRef<'_, scraper::Node>| n.value().is_text().then(|| n.id());
            if *deep {
                hits.extend(node.descendants().filter_map(texts).map(Hit::Node));
            } else {
                hits.extend(node.children().filter_map(texts).map(Hit::Node));
            }
        }
        Pseudo::Attr { name, deep } => {
            let mut take = |n: NodeRef<'_, scraper::Node>| {
                if let Some(e) = n.value().as_element()
                    && let Some(i) = e.attrs().position(|(k, _)| k == name.as_str())
                {
                    hits.push(Hit::Attr(n.id(), i as u32));
                }
            };
            if *deep {
                node.descendants().for_each(&mut take);
            } else {
                take(node);
            }
        }
    }
}

/// The text of every text node below `node`, in document order.
pub(crate) fn descendant_text(node: NodeRef<'_, scraper::Node>) -> String {
    let mut out = String::new();
    for n in node.descendants() {
        if let Some(t) = n.value().as_text() {
            out.push_str(t);
        }
    }
    out
}

/// Text with runs of whitespace collapsed to one space and the ends trimmed, which is what a
/// scraped title or price should look like.
pub(crate) fn collapse<'s>(parts: impl Iterator<Item = &'s str>) -> String {
    let mut out = String::new();
    for word in parts.flat_map(str::split_whitespace) {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(word);
    }
    out
}

/// Reading one hit of a parsed page.
struct Read<'h> {
    html: &'h Html,
}

impl<'h> Read<'h> {
    fn node(&self, id: NodeId) -> Option<NodeRef<'h, scraper::Node>> {
        self.html.tree.get(id)
    }

    fn element(&self, hit: &Hit) -> Option<ElementRef<'h>> {
        match hit {
            Hit::Node(id) => self.node(*id).and_then(ElementRef::wrap),
            _ => None,
        }
    }

    /// The hit's string-value as our `.text()` gives it: whitespace collapsed and trimmed.
    fn text(&self, hit: &Hit) -> String {
        match hit {
            Hit::Node(id) => self
                .node(*id)
                .map_or_else(String::new, |n| match n.value() {
                    scraper::Node::Text(t) => collapse(std::iter::once(&**t)),
                    scraper::Node::Comment(c) => collapse(std::iter::once(&**c)),
                    _ => collapse(
                        n.descendants()
                            .filter_map(|d| d.value().as_text().map(|t| &**t)),
                    ),
                }),
            Hit::Attr(..) | Hit::Value(_) => collapse(std::iter::once(self.get(hit).as_str())),
        }
    }

    /// The hit as parsel's `.get()` gives it: an element's or the document's HTML, a text
    /// node's or attribute's text untouched, a comment in its markup, a value as it is.
    fn get(&self, hit: &Hit) -> String {
        match hit {
            Hit::Node(id) => self
                .node(*id)
                .map_or_else(String::new, |n| match n.value() {
                    scraper::Node::Text(t) => t.to_string(),
                    scraper::Node::Comment(c) => format!("<!--{}-->", &**c),
                    scraper::Node::Element(_) => {
                        ElementRef::wrap(n).map(|e| e.html()).unwrap_or_default()
                    }
                    scraper::Node::ProcessingInstruction(pi) => {
                        format!("<?{} {}?>", &*pi.target, &**pi)
                    }
                    _ => self.html.html(),
                }),
            Hit::Attr(id, i) => self
                .node(*id)
                .and_then(|n| n.value().as_element())
                .and_then(|e| e.attrs().nth(*i as usize))
                .map(|(_, v)| v.to_owned())
                .unwrap_or_default(),
            Hit::Value(v) => v.to_string(),
        }
    }
}

/// What a query selected: elements for most CSS selectors; text nodes, attributes or a value
/// for `::text`, `::attr(name)` and XPath. Scrapy's `SelectorList`.
///
/// Two ways to read it: ours, [`text`](Selection::text) and [`attr`](Selection::attr) (the
/// first match) and [`texts`](Selection::texts) / [`attrs`](Selection::attrs) (all), with
/// text whitespace-collapsed and trimmed; and parsel's, [`get`](Selection::get) and
/// [`getall`](Selection::getall), which give what the node is, untouched (an element's HTML,
/// a text node's text with its spaces).
pub struct Selection<'a> {
    page: Page<'a>,
    hits: Vec<Hit>,
}

impl<'a> Selection<'a> {
    /// How many nodes matched.
    pub fn len(&self) -> usize {
        self.hits.len()
    }

    /// Whether nothing matched.
    pub fn is_empty(&self) -> bool {
        self.hits.is_empty()
    }

    /// The first match.
    pub fn first(&self) -> Option<Node<'a>> {
        self.hits.first().map(|h| self.page.node(h.clone()))
    }

    /// Every match, in document order (without consuming the selection).
    pub fn iter(&self) -> impl Iterator<Item = Node<'a>> + '_ {
        self.hits.iter().map(|h| self.page.node(h.clone()))
    }

    /// Read every hit under one lock of the tree.
    fn read<T>(&self, f: impl FnMut(&Read<'_>, &Hit) -> Option<T>) -> Vec<T> {
        let doc = lock(self.page.doc);
        let read = Read { html: &doc.html };
        let mut f = f;
        self.hits.iter().filter_map(|h| f(&read, h)).collect()
    }

    /// The value of attribute `name` of the first matched element that has it (Scrapy's
    /// `css("a::attr(href)").get()`).
    #[doc(alias = "attrib")]
    pub fn attr(&self, name: &str) -> Option<String> {
        let doc = lock(self.page.doc);
        let read = Read { html: &doc.html };
        self.hits
            .iter()
            .find_map(|h| read.element(h)?.attr(name).map(str::to_owned))
    }

    /// The value of attribute `name` of every matched element that has it.
    pub fn attrs(&self, name: &str) -> impl Iterator<Item = String> + 'a {
        self.read(|r, h| r.element(h)?.attr(name).map(str::to_owned))
            .into_iter()
    }

    /// The text of the first match, whitespace collapsed and trimmed: all the text below an
    /// element, a text node's or attribute's own; `None` when nothing matched. For an error
    /// naming the selector and page instead, use [`Response::text_of`](crate::Response::text_of).
    pub fn text(&self) -> Option<String> {
        self.first().map(|n| n.text())
    }

    /// The text of every match, whitespace collapsed and trimmed.
    pub fn texts(&self) -> impl Iterator<Item = String> + 'a {
        self.read(|r, h| Some(r.text(h))).into_iter()
    }

    /// The first match as parsel's `.get()` gives it: an element's outer HTML, a text node's
    /// or attribute's text untouched (`css("h1::text").get()`), an XPath value as a string.
    #[doc(alias = "extract_first")]
    pub fn get(&self) -> Option<String> {
        self.first().map(|n| n.get())
    }

    /// Every match as [`get`](Selection::get) gives it (parsel's `.getall()`).
    #[doc(alias = "extract")]
    pub fn getall(&self) -> Vec<String> {
        self.read(|r, h| Some(r.get(h)))
    }

    /// What `pattern` extracts from each match's [`get`](Selection::get), as parsel's
    /// `.re()`: the whole match when the pattern has no group, else every group of every
    /// match, or only the group named `extract` of the first match when there is one. An
    /// invalid pattern gives nothing and fails the page, as an invalid selector does.
    pub fn re(&self, pattern: &str) -> Vec<String> {
        let Some(re) = self.page.recorded_regex(pattern) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for text in self.getall() {
            extract(&re, &text, &mut out);
        }
        out
    }

    /// The first of [`re`](Selection::re)'s results.
    pub fn re_first(&self, pattern: &str) -> Option<String> {
        self.re(pattern).into_iter().next()
    }

    /// The nodes `css` selects below each match, in turn (parsel's `SelectorList.css`).
    #[doc(alias = "css")]
    pub fn select(&self, css: &str) -> Selection<'a> {
        self.each(|n| n.page.css(Some(&n.hit), css, false))
    }

    /// What `expr` gives with each match as its context node, in turn (parsel's
    /// `SelectorList.xpath`).
    pub fn xpath(&self, expr: &str) -> Selection<'a> {
        self.each(|n| n.page.xpath(Some(&n.hit), expr))
    }

    fn each(&self, f: impl Fn(&Node<'a>) -> Result<Selection<'a>>) -> Selection<'a> {
        let mut hits = Vec::new();
        for node in self.iter() {
            match f(&node) {
                Ok(s) => hits.extend(s.hits),
                Err(e) => return self.page.recorded(Err(e)),
            }
        }
        self.page.selection(hits)
    }
}

impl<'a> IntoIterator for Selection<'a> {
    type Item = Node<'a>;
    type IntoIter = IntoNodes<'a>;

    fn into_iter(self) -> IntoNodes<'a> {
        IntoNodes {
            page: self.page,
            hits: self.hits.into_iter(),
        }
    }
}

/// The nodes of a [`Selection`], by value.
pub struct IntoNodes<'a> {
    page: Page<'a>,
    hits: std::vec::IntoIter<Hit>,
}

impl<'a> Iterator for IntoNodes<'a> {
    type Item = Node<'a>;

    fn next(&mut self) -> Option<Node<'a>> {
        self.hits.next().map(|hit| self.page.node(hit))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.hits.size_hint()
    }
}

impl ExactSizeIterator for IntoNodes<'_> {}

impl std::fmt::Debug for Selection<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// One node a query selected: an element, a text node, an attribute, a comment, or an XPath
/// value. Scrapy's `Selector`.
#[derive(Clone)]
pub struct Node<'a> {
    page: Page<'a>,
    hit: Hit,
}

impl<'a> Node<'a> {
    fn read<T>(&self, f: impl FnOnce(&Read<'_>) -> T) -> T {
        let doc = lock(self.page.doc);
        f(&Read { html: &doc.html })
    }

    /// The tag name in lower case for an element, the name of an attribute, else empty.
    pub fn name(&self) -> String {
        self.read(|r| match &self.hit {
            Hit::Attr(id, i) => r
                .node(*id)
                .and_then(|n| n.value().as_element())
                .and_then(|e| e.attrs().nth(*i as usize))
                .map(|(k, _)| k.to_owned()),
            hit => r.element(hit).map(|e| e.value().name().to_owned()),
        })
        .unwrap_or_default()
    }

    /// Whether this is an element (not text, an attribute, a comment or a value).
    pub fn is_element(&self) -> bool {
        self.read(|r| r.element(&self.hit).is_some())
    }

    /// The value of an attribute of this element, if present.
    #[doc(alias = "attrib")]
    pub fn attr(&self, name: &str) -> Option<String> {
        self.read(|r| r.element(&self.hit)?.attr(name).map(str::to_owned))
    }

    /// The text, whitespace collapsed and trimmed: all the text below an element (Scrapy's
    /// `" ".join(sel.css("*::text").getall())`, tidied), a text node's or attribute's own.
    pub fn text(&self) -> String {
        self.read(|r| r.text(&self.hit))
    }

    /// The node as parsel's `.get()` gives it: an element's outer HTML, a text node's or
    /// attribute's text untouched, an XPath value as a string.
    #[doc(alias = "extract")]
    pub fn get(&self) -> String {
        self.read(|r| r.get(&self.hit))
    }

    /// The element's outer HTML (for other nodes, what [`get`](Node::get) gives).
    pub fn html(&self) -> String {
        self.get()
    }

    /// The element's inner HTML (empty for other nodes).
    pub fn inner_html(&self) -> String {
        self.read(|r| r.element(&self.hit).map(|e| e.inner_html()))
            .unwrap_or_default()
    }

    /// What `pattern` extracts from [`get`](Node::get), as [`Selection::re`].
    pub fn re(&self, pattern: &str) -> Vec<String> {
        let Some(re) = self.page.recorded_regex(pattern) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        extract(&re, &self.get(), &mut out);
        out
    }

    /// The first of [`re`](Node::re)'s results.
    pub fn re_first(&self, pattern: &str) -> Option<String> {
        self.re(pattern).into_iter().next()
    }

    /// The nodes a CSS selector (with `::text` and `::attr(name)`) selects below this
    /// element. An invalid selector selects nothing and fails the page, as with
    /// [`Response::select`](crate::Response::select).
    #[doc(alias = "css")]
    pub fn select(&self, css: &str) -> Selection<'a> {
        self.page.recorded(self.try_select(css))
    }

    /// Like [`Node::select`], but an invalid selector is returned as an error and the page
    /// is not marked as failed.
    pub fn try_select(&self, css: &str) -> Result<Selection<'a>> {
        self.page.css(Some(&self.hit), css, false)
    }

    /// What an XPath 1.0 expression gives with this node as its context (`.//a/@href`,
    /// `h3/a/text()`, `count(li)`). An invalid expression selects nothing and fails the
    /// page, as with [`Response::xpath`](crate::Response::xpath).
    pub fn xpath(&self, expr: &str) -> Selection<'a> {
        self.page.recorded(self.try_xpath(expr))
    }

    /// Like [`Node::xpath`], but an invalid expression is returned as an error and the page
    /// is not marked as failed.
    pub fn try_xpath(&self, expr: &str) -> Result<Selection<'a>> {
        self.page.xpath(Some(&self.hit), expr)
    }
}

impl std::fmt::Debug for Node<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.hit {
            Hit::Node(_) if self.is_element() => write!(f, "Node(<{}>)", self.name()),
            Hit::Attr(..) => write!(f, "Node(@{}={:?})", self.name(), self.get()),
            _ => write!(f, "Node({:?})", self.get()),
        }
    }
}

impl Page<'_> {
    /// A compiled pattern, or `None` with the error recorded for the engine.
    fn recorded_regex(self, pattern: &str) -> Option<Rc<regex::Regex>> {
        self.noted(compile_regex(pattern)).ok()
    }
}

/// parsel's `extract_regex`: the group named `extract` of the first match, or of every
/// match every group (the whole match when there is none).
fn extract(re: &regex::Regex, text: &str, out: &mut Vec<String>) {
    if re.capture_names().any(|n| n == Some("extract")) {
        if let Some(m) = re.captures(text).and_then(|c| c.name("extract")) {
            out.push(m.as_str().to_owned());
        }
        return;
    }
    for caps in re.captures_iter(text) {
        if caps.len() == 1 {
            out.push(caps[0].to_owned());
        } else {
            out.extend((1..caps.len()).map(|i| caps.get(i).map_or("", |m| m.as_str()).to_owned()));
        }
    }
}

thread_local! {
    static REGEXES: std::cell::RefCell<HashMap<String, Rc<regex::Regex>>> =
        std::cell::RefCell::default();
}

fn compile_regex(pattern: &str) -> Result<Rc<regex::Regex>> {
    cached(&REGEXES, pattern, |p| {
        regex::Regex::new(p).map_err(|e| {
            Error::new(
                ErrorKind::Selector,
                format!("invalid regular expression '{p}': {e}"),
            )
        })
    })
}

/// `source` compiled by `compile`, from a per-thread cache. The cache is emptied when it
/// grows past 4,096 entries: expressions built from page data could grow it without end.
pub(crate) fn cached<T>(
    cache: &'static std::thread::LocalKey<std::cell::RefCell<HashMap<String, Rc<T>>>>,
    source: &str,
    compile: impl FnOnce(&str) -> Result<T>,
) -> Result<Rc<T>> {
    cache.with(|cache| {
        if let Some(found) = cache.borrow().get(source) {
            return Ok(Rc::clone(found));
        }
        let compiled = Rc::new(compile(source)?);
        let mut cache = cache.borrow_mut();
        if cache.len() > 4096 {
            cache.clear();
        }
        cache.insert(source.to_owned(), Rc::clone(&compiled));
        Ok(compiled)
    })
}

/// An invalid-expression error: `what` is wrong at byte `byte` of `expr` (written in
/// `language`), said as a 1-based position in characters, with `hint` when there is one.
pub(crate) fn syntax_error(
    language: &str,
    expr: &str,
    byte: usize,
    what: &str,
    hint: &str,
) -> Error {
    let column = expr
        .get(..byte.min(expr.len()))
        .map_or(byte, |s| s.chars().count())
        + 1;
    Error::new(
        ErrorKind::Selector,
        format!("invalid {language} '{expr}' at position {column}: {what}{hint}"),
    )
}

/// Note an invalid selector the spider used, for the engine to report once the callback
/// returns. A copy: the caller may also return the error to the spider.
pub(crate) fn record(problems: &Mutex<Vec<Error>>, e: &Error) {
    let mut problems = lock(problems);
    // A selector inside a loop would repeat the same problem once per element.
    if problems.len() < 16 && !problems.iter().any(|p| p.to_string() == e.to_string()) {
        problems.push(Error::new(e.kind(), e.to_string()));
    }
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic elsewhere while holding the lock leaves the tree intact (it is never mutated
    // but for the document order, which is set whole).
    m.lock().unwrap_or_else(|p| p.into_inner())
}
