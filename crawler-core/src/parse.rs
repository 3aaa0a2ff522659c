//! Parsing HTML with bounds: a page deeper, larger in elements, or slower to parse than the
//! crawl allows is refused (`too_complex`) instead of holding a core for minutes.
//!
//! html5ever's tree builder looks through the stack of open elements for every start tag, so
//! a page's cost grows with its elements times its depth: 100,000 nested `div`s (1.1 MB) took
//! 33 s. The sink below counts elements and measures the depth of every node it inserts, and
//! the text is fed in small chunks so that a limit (or the deadline) stops the parse within
//! one chunk of being crossed.

use std::borrow::Cow;
use std::cell::{Cell, Ref, RefCell};
use std::time::{Duration, Instant};

use ego_tree::{NodeId, NodeMut, Tree};
use html5ever::tendril::{StrTendril, TendrilSink};
use html5ever::tree_builder::{ElementFlags, NodeOrText, QuirksMode, TreeSink};
use html5ever::{Attribute, QualName, expanded_name, local_name, ns};
use scraper::Html;
use scraper::node::{Comment, Doctype, Element, Node, ProcessingInstruction, Text};

use crate::error::{Error, ErrorKind, Result};

/// How much text is parsed between two checks of the limits and the deadline: small enough
/// that the work done after a limit is crossed stays in milliseconds even at full depth.
const CHUNK: usize = 16 * 1024;

/// The bounds one page's parse must stay within (from the `parse_*` settings).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParseLimits {
    /// Deepest nesting of nodes below the document.
    pub max_depth: u32,
    /// Most elements.
    pub max_elements: u64,
    /// Longest time the parse may take.
    pub timeout: Duration,
}

impl Default for ParseLimits {
    /// The defaults of the `parse_*` settings.
    fn default() -> Self {
        Self {
            max_depth: 1024,
            max_elements: 500_000,
            timeout: Duration::from_secs(10),
        }
    }
}

impl ParseLimits {
    /// The limits the settings give.
    pub fn from_settings(s: &crate::settings::Settings) -> Self {
        Self {
            max_depth: s.parse_max_depth,
            max_elements: s.parse_max_elements,
            timeout: s.parse_timeout,
        }
    }
}

/// Parse `text` as an HTML document within `limits`; an error of kind
/// [`ErrorKind::TooComplex`] says which limit the page crossed.
pub(crate) fn parse_document(text: &str, limits: &ParseLimits) -> Result<Html> {
    let started = Instant::now();
    let mut html = Html::new_document();
    // About one node per 24 bytes of markup on ordinary pages: reserving up front saves the
    // tree's doublings (each a copy of every node so far).
    html.tree = Tree::with_capacity(Node::Document, (text.len() / 24).min(1 << 16));
    let sink = BoundedSink {
        html: RefCell::new(html),
        elements: Cell::new(0),
        crossed: Cell::new(None),
        limits: *limits,
    };
    let mut parser = html5ever::driver::parse_document(sink, Default::default());
    let mut rest = text;
    while !rest.is_empty() {
        let mut cut = rest.len().min(CHUNK);
        while !rest.is_char_boundary(cut) {
            cut += 1;
        }
        parser.process(StrTendril::from_slice(&rest[..cut]));
        rest = &rest[cut..];
        if let Some(crossed) = parser.tokenizer.sink.sink.crossed.get() {
            return Err(too_complex(crossed, limits));
        }
        if started.elapsed() > limits.timeout {
            return Err(too_complex(Crossed::Deadline, limits));
        }
    }
    Ok(parser.finish())
}

/// Which limit a page crossed.
#[derive(Debug, Clone, Copy)]
enum Crossed {
    Depth,
    Elements,
    Deadline,
}

fn too_complex(crossed: Crossed, limits: &ParseLimits) -> Error {
    let why = match crossed {
        Crossed::Depth => format!(
            "elements nested deeper than parse_max_depth ({})",
            limits.max_depth
        ),
        Crossed::Elements => format!(
            "more elements than parse_max_elements ({})",
            limits.max_elements
        ),
        Crossed::Deadline => format!(
            "parsing took longer than parse_timeout ({})",
            humantime::format_duration(limits.timeout)
        ),
    };
    Error::new(ErrorKind::TooComplex, format!("page too complex: {why}"))
}

/// The tendril `scraper::Html` keeps (atomic, so that a parsed page can move between
/// threads).
type SendText = scraper::StrTendril;

/// The parser's tendril as the tree's. scraper's own conversion (`into_send`) copies every
/// short (inline, up to 8 bytes) tendril into a heap buffer of its own; such text is copied
/// inline here instead, without an allocation. Longer ones convert as scraper converts them.
fn send_text(t: StrTendril) -> SendText {
    if t.len() <= INLINE_TEXT {
        SendText::from_slice(&t)
    } else {
        t.into_send().into()
    }
}

/// The longest text a tendril keeps inline (tendril's `MAX_INLINE_LEN`).
const INLINE_TEXT: usize = 8;

/// A tree sink building a `scraper::Html` as scraper's `HtmlTreeSink` does (same tree for
/// the same input: the tests compare them), that also counts elements and measures the
/// depth of every node it inserts.
struct BoundedSink {
    html: RefCell<Html>,
    elements: Cell<u64>,
    crossed: Cell<Option<Crossed>>,
    limits: ParseLimits,
}

impl BoundedSink {
    /// Note that a node is going in one level under `parent`.
    fn check_depth_under(&self, parent: NodeId) {
        // A tree cannot be deeper than it has elements, so small pages never walk up.
        if self.crossed.get().is_some() || self.elements.get() <= u64::from(self.limits.max_depth) {
            return;
        }
        let html = self.html.borrow();
        let Some(node) = html.tree.get(parent) else {
            return;
        };
        // Walking up is bounded by the limit itself: the parse stops once it is crossed.
        let depth = node.ancestors().count() + 1;
        if depth > self.limits.max_depth as usize {
            self.crossed.set(Some(Crossed::Depth));
        }
    }

    fn check_depth_beside(&self, sibling: NodeId) {
        let parent = self
            .html
            .borrow()
            .tree
            .get(sibling)
            .and_then(|n| n.parent())
            .map(|p| p.id());
        if let Some(parent) = parent {
            self.check_depth_under(parent);
        }
    }
}

/// Text appended after a text node joins it, as the tree builder expects of a sink.
fn append_text(mut parent: NodeMut<'_, Node>, text: StrTendril) {
    if let Some(mut last) = parent.last_child()
        && let Node::Text(t) = last.value()
    {
        t.text.push_slice(&text);
        return;
    }
    parent.append(Node::Text(Text {
        text: send_text(text),
    }));
}

/// The tree builder only asks for nodes it was handed; a handle it holds is never stale.
/// Should one be, the call does nothing rather than panic on page input.
impl TreeSink for BoundedSink {
    type Output = Html;
    type Handle = NodeId;
    type ElemName<'a> = Ref<'a, QualName>;

    fn finish(self) -> Html {
        self.html.into_inner()
    }

    // Parse errors are not kept (scraper's `errors` feature is off).
    fn parse_error(&self, _msg: Cow<'static, str>) {}

    fn get_document(&self) -> NodeId {
        self.html.borrow().tree.root().id()
    }

    fn elem_name<'a>(&'a self, target: &'a NodeId) -> Ref<'a, QualName> {
        Ref::map(self.html.borrow(), |html| {
            match html.tree.get(*target).map(|n| n.value()) {
                Some(Node::Element(e)) => &e.name,
                // The tree builder asks only for elements' names; an empty name matches
                // nothing it looks for.
                _ => &NO_NAME,
            }
        })
    }

    fn create_element(&self, name: QualName, attrs: Vec<Attribute>, _: ElementFlags) -> NodeId {
        let n = self.elements.get() + 1;
        self.elements.set(n);
        if n > self.limits.max_elements && self.crossed.get().is_none() {
            self.crossed.set(Some(Crossed::Elements));
        }
        let template = name.expanded() == expanded_name!(html "template");
        // scraper's `Element::new`, with attribute values converted by `send_text`.
        let mut element = Element::new(name, Vec::new());
        element.attrs = attrs
            .into_iter()
            .map(|a| (a.name, send_text(a.value)))
            .collect();
        element.attrs.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        let mut html = self.html.borrow_mut();
        let mut node = html.tree.orphan(Node::Element(element));
        if template {
            node.append(Node::Fragment);
        }
        node.id()
    }

    fn create_comment(&self, text: StrTendril) -> NodeId {
        self.html
            .borrow_mut()
            .tree
            .orphan(Node::Comment(Comment {
                comment: send_text(text),
            }))
            .id()
    }

    fn create_pi(&self, target: StrTendril, data: StrTendril) -> NodeId {
        self.html
            .borrow_mut()
            .tree
            .orphan(Node::ProcessingInstruction(ProcessingInstruction {
                target: send_text(target),
                data: send_text(data),
            }))
            .id()
    }

    fn append(&self, parent: &NodeId, child: NodeOrText<NodeId>) {
        if matches!(child, NodeOrText::AppendNode(_)) {
            self.check_depth_under(*parent);
        }
        let mut html = self.html.borrow_mut();
        let Some(mut parent) = html.tree.get_mut(*parent) else {
            return;
        };
        match child {
            NodeOrText::AppendNode(id) => {
                parent.append_id(id);
            }
            NodeOrText::AppendText(text) => append_text(parent, text),
        }
    }

    fn append_based_on_parent_node(
        &self,
        element: &NodeId,
        prev_element: &NodeId,
        child: NodeOrText<NodeId>,
    ) {
        let has_parent = self
            .html
            .borrow()
            .tree
            .get(*element)
            .is_some_and(|n| n.parent().is_some());
        if has_parent {
            self.append_before_sibling(element, child);
        } else {
            self.append(prev_element, child);
        }
    }

    fn append_doctype_to_document(
        &self,
        name: StrTendril,
        public_id: StrTendril,
        system_id: StrTendril,
    ) {
        let doctype = Doctype {
            name: send_text(name),
            public_id: send_text(public_id),
            system_id: send_text(system_id),
        };
        self.html
            .borrow_mut()
            .tree
            .root_mut()
            .append(Node::Doctype(doctype));
    }

    fn pop(&self, _node: &NodeId) {}

    fn get_template_contents(&self, target: &NodeId) -> NodeId {
        let html = self.html.borrow();
        // A template's contents are its first child, made with it in `create_element`.
        html.tree
            .get(*target)
            .and_then(|n| n.first_child())
            .map_or(*target, |c| c.id())
    }

    fn same_node(&self, x: &NodeId, y: &NodeId) -> bool {
        x == y
    }

    fn set_quirks_mode(&self, mode: QuirksMode) {
        self.html.borrow_mut().quirks_mode = mode;
    }

    fn append_before_sibling(&self, sibling: &NodeId, new_node: NodeOrText<NodeId>) {
        if matches!(new_node, NodeOrText::AppendNode(_)) {
            self.check_depth_beside(*sibling);
        }
        let mut html = self.html.borrow_mut();
        if let NodeOrText::AppendNode(id) = new_node
            && let Some(mut node) = html.tree.get_mut(id)
        {
            node.detach();
        }
        let Some(mut sibling) = html.tree.get_mut(*sibling) else {
            return;
        };
        if sibling.parent().is_none() {
            return;
        }
        match new_node {
            NodeOrText::AppendNode(id) => {
                sibling.insert_id_before(id);
            }
            NodeOrText::AppendText(text) => {
                if let Some(mut prev) = sibling.prev_sibling()
                    && let Node::Text(t) = prev.value()
                {
                    t.text.push_slice(&text);
                    return;
                }
                sibling.insert_before(Node::Text(Text {
                    text: send_text(text),
                }));
            }
        }
    }

    fn add_attrs_if_missing(&self, target: &NodeId, attrs: Vec<Attribute>) {
        let mut html = self.html.borrow_mut();
        let Some(mut node) = html.tree.get_mut(*target) else {
            return;
        };
        let Node::Element(element) = node.value() else {
            return;
        };
        for attr in attrs {
            if let Err(i) = element
                .attrs
                .binary_search_by(|(name, _)| name.cmp(&attr.name))
            {
                element.attrs.insert(i, (attr.name, send_text(attr.value)));
            }
        }
    }

    fn remove_from_parent(&self, target: &NodeId) {
        if let Some(mut node) = self.html.borrow_mut().tree.get_mut(*target) {
            node.detach();
        }
    }

    fn reparent_children(&self, node: &NodeId, new_parent: &NodeId) {
        if let Some(mut parent) = self.html.borrow_mut().tree.get_mut(*new_parent) {
            parent.reparent_from_id_append(*node);
        }
    }
}

/// What `elem_name` answers for a handle that is not an element's.
static NO_NAME: std::sync::LazyLock<QualName> =
    std::sync::LazyLock::new(|| QualName::new(None, ns!(), local_name!("")));

#[cfg(test)]
mod tests {
    use super::*;

    fn nested(n: usize) -> String {
        format!(
            "<html><body>{}x{}</body></html>",
            "<div>".repeat(n),
            "</div>".repeat(n)
        )
    }

    #[test]
    fn ordinary_pages_parse_as_scraper_does() {
        let text = r#"<html><head><title>T</title></head><body><table><tr><td>1<td>2</table>
            <p>a<b>b<p>c</b>d</body></html>"#;
        let ours = parse_document(text, &ParseLimits::default()).unwrap();
        assert_eq!(ours.html(), Html::parse_document(text).html());
        // At the depth limit: html, body and 20 divs (text adds no depth); one more fails.
        let limits = ParseLimits {
            max_depth: 22,
            ..ParseLimits::default()
        };
        assert!(parse_document(&nested(20), &limits).is_ok());
        assert!(parse_document(&nested(21), &limits).is_err());
    }

    /// The tree as text: every node with its kind, name, sorted attributes and text, one a
    /// line, indented by depth (adjacent text nodes show as two lines, so a sink that
    /// concatenates differently shows).
    fn dump(html: &Html) -> String {
        let mut out = format!("{:?}\n", html.quirks_mode);
        for edge in html.tree.root().traverse() {
            let ego_tree::iter::Edge::Open(node) = edge else {
                continue;
            };
            let depth = node.ancestors().count();
            let line = match node.value() {
                Node::Element(e) => format!("<{:?} {:?}>", e.name, e.attrs().collect::<Vec<_>>()),
                Node::Text(t) => format!("{:?}", &*t.text),
                other => format!("{other:?}"),
            };
            out.push_str(&format!("{}{line}\n", "  ".repeat(depth)));
        }
        out
    }

    /// Documents that take the tree builder's less common paths: foster parenting, the
    /// adoption agency, templates, duplicate attributes on `html` and `body`, comments, a
    /// doctype, short and long text runs, character references.
    const TRICKY: &[&str] = &[
        "<!DOCTYPE html><html><head><title>T</title></head><body><p>a</p></body></html>",
        "<table><tr><td>1<td>2</table><p>a<b>b<p>c</b>d",
        "<table>x<tr>y</tr>z<td>w</table>",
        "<a><p>1<a>2</p>3",
        "<b><i><p>x</b>y</i>z",
        "<template><td>x</td></template><p>t",
        "<html a=1><body b=2><html c=3 a=4><body d=5 b=6>",
        "<!-- c --><p>&amp;&lt;&#x41;&nosuch; x\n\t  </p><!--x-->",
        "<p class=\"a b\" id=x title='a very long attribute value indeed'>short</p>",
        "<select><option>1<option>2</select><svg><path/></svg><math><mi>x</math>",
        "<frameset><frame></frameset>",
        "plain text only",
        "",
    ];

    #[test]
    fn the_sink_builds_scrapers_tree() {
        for text in TRICKY {
            let ours = parse_document(text, &ParseLimits::default()).unwrap();
            assert_eq!(dump(&ours), dump(&Html::parse_document(text)), "{text}");
        }
    }

    /// Every document case of html5lib-tests' tree-construction files (the folder in
    /// `HTML5LIB_TREE_CONSTRUCTION`; skipped without it) gives the same tree through this
    /// sink as through scraper's: the parser is html5ever either way, only the sink differs.
    #[test]
    fn the_sink_builds_scrapers_tree_on_html5lib_tests() {
        let Ok(dir) = std::env::var("HTML5LIB_TREE_CONSTRUCTION") else {
            return;
        };
        let mut cases = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_none_or(|e| e != "dat") {
                continue;
            }
            let file = std::fs::read_to_string(&path).unwrap();
            for case in file.split("\n#data\n") {
                let case = case.strip_prefix("#data\n").unwrap_or(case);
                if case.contains("\n#document-fragment\n") {
                    continue;
                }
                let Some((data, _)) = case.split_once("\n#errors\n") else {
                    continue;
                };
                let ours = parse_document(data, &ParseLimits::default()).unwrap();
                assert_eq!(
                    dump(&ours),
                    dump(&Html::parse_document(data)),
                    "{}: {data}",
                    path.display()
                );
                cases += 1;
            }
        }
        eprintln!("{cases} html5lib tree-construction documents: same tree");
        assert!(cases > 1000, "{cases}");
    }

    #[test]
    fn a_page_deeper_than_the_limit_fails() {
        let limits = ParseLimits {
            max_depth: 100,
            ..ParseLimits::default()
        };
        let e = parse_document(&nested(101), &limits).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::TooComplex);
        assert!(e.to_string().contains("parse_max_depth (100)"), "{e}");
        // 100,000 levels stop within a chunk of the limit, not after the whole page.
        let started = Instant::now();
        let e = parse_document(&nested(100_000), &ParseLimits::default()).unwrap_err();
        assert!(e.to_string().contains("parse_max_depth"), "{e}");
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn a_page_with_too_many_elements_fails() {
        let limits = ParseLimits {
            max_elements: 1000,
            ..ParseLimits::default()
        };
        let flat = format!("<ul>{}</ul>", "<li>x</li>".repeat(996));
        assert!(
            parse_document(&flat, &limits).is_ok(),
            "html, head, body, ul and 996 li"
        );
        let flat = format!("<ul>{}</ul>", "<li>x</li>".repeat(2000));
        let e = parse_document(&flat, &limits).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::TooComplex);
        assert!(e.to_string().contains("parse_max_elements (1000)"), "{e}");
    }

    #[test]
    fn a_parse_past_its_deadline_fails() {
        let limits = ParseLimits {
            timeout: Duration::from_nanos(1),
            ..ParseLimits::default()
        };
        let page = format!("<ul>{}</ul>", "<li>x</li>".repeat(10_000));
        let e = parse_document(&page, &limits).unwrap_err();
        assert!(e.to_string().contains("parse_timeout"), "{e}");
    }
}
