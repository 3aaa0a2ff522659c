//! Parsing HTML with bounds: a page deeper, larger in elements, or slower to parse than the
//! crawl allows is refused (`too_complex`) instead of holding a core for minutes.
//!
//! html5ever's tree builder looks through the stack of open elements for every start tag, so
//! a page's cost grows with its elements times its depth: 100,000 nested `div`s (1.1 MB) took
//! 33 s. The sink below counts elements and measures the depth of every node it inserts, and
//! the text is fed in small chunks so that a limit (or the deadline) stops the parse within
//! one chunk of being crossed.

use std::cell::Cell;
use std::time::{Duration, Instant};

use html5ever::tendril::{StrTendril, TendrilSink};
use html5ever::tree_builder::{ElementFlags, NodeOrText, QuirksMode, TreeSink};
use html5ever::{Attribute, QualName};
use scraper::{Html, HtmlTreeSink};

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
    let sink = BoundedSink {
        inner: HtmlTreeSink::new(Html::new_document()),
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

/// scraper's sink, counting elements and measuring the depth of inserted nodes.
struct BoundedSink {
    inner: HtmlTreeSink,
    elements: Cell<u64>,
    crossed: Cell<Option<Crossed>>,
    limits: ParseLimits,
}

impl BoundedSink {
    /// Note that `node` is going in at `depth` below the document, or one level under
    /// `parent` when the depth is to be measured from there.
    fn check_depth_under(&self, parent: &ego_tree::NodeId) {
        // A tree cannot be deeper than it has elements, so small pages never walk up.
        if self.crossed.get().is_some() || self.elements.get() <= u64::from(self.limits.max_depth) {
            return;
        }
        let html = self.inner.0.borrow();
        let Some(node) = html.tree.get(*parent) else {
            return;
        };
        // Walking up is bounded by the limit itself: the parse stops once it is crossed.
        let depth = node.ancestors().count() + 1;
        if depth > self.limits.max_depth as usize {
            self.crossed.set(Some(Crossed::Depth));
        }
    }

    fn check_depth_beside(&self, sibling: &ego_tree::NodeId) {
        let parent = self
            .inner
            .0
            .borrow()
            .tree
            .get(*sibling)
            .and_then(|n| n.parent())
            .map(|p| p.id());
        if let Some(parent) = parent {
            self.check_depth_under(&parent);
        }
    }
}

/// Every call goes to scraper's sink; element creation and insertion are also counted.
impl TreeSink for BoundedSink {
    type Output = Html;
    type Handle = <HtmlTreeSink as TreeSink>::Handle;
    type ElemName<'a> = <HtmlTreeSink as TreeSink>::ElemName<'a>;

    fn finish(self) -> Html {
        self.inner.finish()
    }

    fn parse_error(&self, msg: std::borrow::Cow<'static, str>) {
        self.inner.parse_error(msg);
    }

    fn get_document(&self) -> Self::Handle {
        self.inner.get_document()
    }

    fn elem_name<'a>(&'a self, target: &'a Self::Handle) -> Self::ElemName<'a> {
        self.inner.elem_name(target)
    }

    fn create_element(
        &self,
        name: QualName,
        attrs: Vec<Attribute>,
        flags: ElementFlags,
    ) -> Self::Handle {
        let n = self.elements.get() + 1;
        self.elements.set(n);
        if n > self.limits.max_elements && self.crossed.get().is_none() {
            self.crossed.set(Some(Crossed::Elements));
        }
        self.inner.create_element(name, attrs, flags)
    }

    fn create_comment(&self, text: StrTendril) -> Self::Handle {
        self.inner.create_comment(text)
    }

    fn create_pi(&self, target: StrTendril, data: StrTendril) -> Self::Handle {
        self.inner.create_pi(target, data)
    }

    fn append(&self, parent: &Self::Handle, child: NodeOrText<Self::Handle>) {
        if matches!(child, NodeOrText::AppendNode(_)) {
            self.check_depth_under(parent);
        }
        self.inner.append(parent, child);
    }

    fn append_based_on_parent_node(
        &self,
        element: &Self::Handle,
        prev_element: &Self::Handle,
        child: NodeOrText<Self::Handle>,
    ) {
        if matches!(child, NodeOrText::AppendNode(_)) {
            self.check_depth_under(prev_element);
        }
        self.inner
            .append_based_on_parent_node(element, prev_element, child);
    }

    fn append_doctype_to_document(
        &self,
        name: StrTendril,
        public_id: StrTendril,
        system_id: StrTendril,
    ) {
        self.inner
            .append_doctype_to_document(name, public_id, system_id);
    }

    fn mark_script_already_started(&self, node: &Self::Handle) {
        self.inner.mark_script_already_started(node);
    }

    fn pop(&self, node: &Self::Handle) {
        self.inner.pop(node);
    }

    fn get_template_contents(&self, target: &Self::Handle) -> Self::Handle {
        self.inner.get_template_contents(target)
    }

    fn same_node(&self, x: &Self::Handle, y: &Self::Handle) -> bool {
        self.inner.same_node(x, y)
    }

    fn set_quirks_mode(&self, mode: QuirksMode) {
        self.inner.set_quirks_mode(mode);
    }

    fn append_before_sibling(&self, sibling: &Self::Handle, new_node: NodeOrText<Self::Handle>) {
        if matches!(new_node, NodeOrText::AppendNode(_)) {
            self.check_depth_beside(sibling);
        }
        self.inner.append_before_sibling(sibling, new_node);
    }

    fn add_attrs_if_missing(&self, target: &Self::Handle, attrs: Vec<Attribute>) {
        self.inner.add_attrs_if_missing(target, attrs);
    }

    fn associate_with_form(
        &self,
        target: &Self::Handle,
        form: &Self::Handle,
        nodes: (&Self::Handle, Option<&Self::Handle>),
    ) {
        self.inner.associate_with_form(target, form, nodes);
    }

    fn remove_from_parent(&self, target: &Self::Handle) {
        self.inner.remove_from_parent(target);
    }

    fn reparent_children(&self, node: &Self::Handle, new_parent: &Self::Handle) {
        self.inner.reparent_children(node, new_parent);
    }

    fn is_mathml_annotation_xml_integration_point(&self, handle: &Self::Handle) -> bool {
        self.inner
            .is_mathml_annotation_xml_integration_point(handle)
    }

    fn set_current_line(&self, line_number: u64) {
        self.inner.set_current_line(line_number);
    }

    fn allow_declarative_shadow_roots(&self, intended_parent: &Self::Handle) -> bool {
        self.inner.allow_declarative_shadow_roots(intended_parent)
    }

    fn attach_declarative_shadow(
        &self,
        location: &Self::Handle,
        template: &Self::Handle,
        attrs: &[Attribute],
    ) -> bool {
        self.inner
            .attach_declarative_shadow(location, template, attrs)
    }

    fn maybe_clone_an_option_into_selectedcontent(&self, option: &Self::Handle) {
        self.inner
            .maybe_clone_an_option_into_selectedcontent(option);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use scraper::node::Node;

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
    fn tricky_pages_parse_as_scraper_does() {
        for text in TRICKY {
            let ours = parse_document(text, &ParseLimits::default()).unwrap();
            assert_eq!(dump(&ours), dump(&Html::parse_document(text)), "{text}");
        }
    }

    /// Every document case of html5lib-tests' tree-construction files (the folder in
    /// `HTML5LIB_TREE_CONSTRUCTION`; skipped without it) gives the same tree through the
    /// bounded sink as through scraper's own: the limits' bookkeeping changes nothing.
    /// The files are html5lib-tests' `tree-construction/` as of its last commit that had
    /// them (9329e64; they have since moved to web-platform-tests): 1,600 documents.
    #[test]
    fn html5lib_documents_parse_as_scraper_does() {
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
