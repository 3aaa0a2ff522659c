//! XPath 1.0 over the page's tree: the xpath-eval crate evaluates, and [`XNode`] shows it the
//! tree as lxml shows an HTML page to parsel: element and attribute names as the parser
//! wrote them (lower case for HTML) in no namespace, so `//div` and `@href` match; the
//! doctype is not a node.

use std::cmp::Ordering;
use std::collections::HashMap;
use std::rc::Rc;

use ego_tree::{NodeId, NodeRef, Tree};
use scraper::Node;
use xpath_eval::{EvaluationContext, ExpandedName, Expr, NodeKind, Value};

use super::Hit;
use crate::error::{Error, ErrorKind, Result};

/// "No attribute": the node itself.
const NONE: u32 = u32::MAX;

/// A node of the page as XPath sees it: a tree node, or one attribute of an element.
#[derive(Clone, Copy)]
pub(crate) struct XNode<'a> {
    tree: &'a Tree<Node>,
    /// Each node's place in document order (the tree builder may move nodes, so the ids
    /// of the arena are not that order).
    order: &'a HashMap<NodeId, u32>,
    id: NodeId,
    /// The attribute's index among the element's, or [`NONE`].
    attr: u32,
}

impl PartialEq for XNode<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.id == other.id && self.attr == other.attr
    }
}

impl Eq for XNode<'_> {}

impl<'a> XNode<'a> {
    pub(crate) fn new(
        tree: &'a Tree<Node>,
        order: &'a HashMap<NodeId, u32>,
        hit: &Hit,
    ) -> Option<Self> {
        let (id, attr) = match *hit {
            Hit::Node(id) => (id, NONE),
            Hit::Attr(id, i) => (id, i),
            Hit::Value(_) => return None,
        };
        Some(Self {
            tree,
            order,
            id,
            attr,
        })
    }

    fn node(self) -> Option<NodeRef<'a, Node>> {
        self.tree.get(self.id)
    }

    fn with(self, id: NodeId, attr: u32) -> Self {
        Self { id, attr, ..self }
    }

    /// The attribute this node stands for: (name, value).
    fn attribute(self) -> Option<(&'a str, &'a str)> {
        if self.attr == NONE {
            return None;
        }
        let element = self.node()?.value().as_element()?;
        element.attrs().nth(self.attr as usize)
    }

    fn hit(self) -> Hit {
        if self.attr == NONE {
            Hit::Node(self.id)
        } else {
            Hit::Attr(self.id, self.attr)
        }
    }
}

impl<'a> xpath_eval::Node<'a> for XNode<'a> {
    fn kind(self) -> NodeKind {
        if self.attr != NONE {
            return NodeKind::Attribute;
        }
        match self.node().map(|n| n.value()) {
            Some(Node::Element(_)) => NodeKind::Element,
            Some(Node::Text(_)) => NodeKind::Text,
            Some(Node::Comment(_)) => NodeKind::Comment,
            Some(Node::ProcessingInstruction(_)) => NodeKind::ProcessingInstruction,
            _ => NodeKind::Root,
        }
    }

    fn parent(self) -> Option<Self> {
        if self.attr != NONE {
            return Some(self.with(self.id, NONE));
        }
        self.node()?.parent().map(|p| self.with(p.id(), NONE))
    }

    fn children(self) -> impl Iterator<Item = Self> + 'a {
        let node = if self.attr == NONE { self.node() } else { None };
        node.into_iter()
            .flat_map(|n| n.children())
            .filter(|c| !c.value().is_doctype())
            .map(move |c| self.with(c.id(), NONE))
    }

    fn attributes(self) -> impl Iterator<Item = Self> + 'a {
        let count = match self.node().map(|n| n.value()) {
            Some(Node::Element(e)) if self.attr == NONE => e.attrs().count() as u32,
            _ => 0,
        };
        (0..count).map(move |i| self.with(self.id, i))
    }

    fn namespaces(self) -> impl Iterator<Item = Self> + 'a {
        std::iter::empty()
    }

    fn expanded_name(self) -> Option<ExpandedName> {
        let local_name = if let Some((name, _)) = self.attribute() {
            name.to_owned()
        } else {
            match self.node()?.value() {
                Node::Element(e) => e.name().to_owned(),
                Node::ProcessingInstruction(pi) => pi.target.to_string(),
                _ => return None,
            }
        };
        Some(ExpandedName {
            namespace_uri: None,
            local_name,
        })
    }

    fn has_expanded_name(self, namespace_uri: Option<&str>, local_name: &str) -> bool {
        if namespace_uri.is_some() {
            return false;
        }
        if let Some((name, _)) = self.attribute() {
            return name == local_name;
        }
        match self.node().map(|n| n.value()) {
            Some(Node::Element(e)) => e.name() == local_name,
            Some(Node::ProcessingInstruction(pi)) => &*pi.target == local_name,
            _ => false,
        }
    }

    fn string_value(self) -> String {
        self.with_string_value(str::to_owned)
    }

    fn with_string_value<R>(self, f: impl FnOnce(&str) -> R) -> R {
        if let Some((_, value)) = self.attribute() {
            return f(value);
        }
        let Some(node) = self.node() else {
            return f("");
        };
        match node.value() {
            Node::Text(t) => f(t),
            Node::Comment(c) => f(c),
            Node::ProcessingInstruction(pi) => f(pi),
            _ => f(&super::descendant_text(node)),
        }
    }

    fn document_order(self, other: Self) -> Ordering {
        let place = |n: Self| {
            // An element comes before its attributes, which come before its children
            // (whose places are all greater than the element's).
            let own = self.order.get(&n.id).copied().unwrap_or(u32::MAX);
            (own, n.attr.wrapping_add(1))
        };
        place(self).cmp(&place(other))
    }
}

/// Every node's place in document order.
pub(crate) fn document_order(tree: &Tree<Node>) -> HashMap<NodeId, u32> {
    let mut order = HashMap::new();
    for (i, node) in tree.root().descendants().enumerate() {
        order.insert(node.id(), i as u32);
    }
    order
}

thread_local! {
    // As for CSS: a spider's few expressions are parsed once per thread.
    static EXPRS: std::cell::RefCell<HashMap<String, Rc<Expr>>> = std::cell::RefCell::default();
}

/// Compile `expr`, from the thread's cache when it was seen before.
pub(crate) fn compile(expr: &str) -> Result<Rc<Expr>> {
    super::cached(&EXPRS, expr, |e| {
        xpath_eval::parse(e).map_err(|err| problem(e, err.position, &err.message))
    })
}

/// Evaluate `expr` with `context` as the context node: a node-set becomes its nodes in
/// document order; a number, string or boolean becomes one [`Hit::Value`], written as parsel
/// writes it (`"3.0"`, `"1"` for true).
pub(crate) fn evaluate(source: &str, expr: &Expr, context: XNode<'_>) -> Result<Vec<Hit>> {
    let ctx = EvaluationContext::new(context);
    let value = xpath_eval::evaluate(expr, &ctx).map_err(|e| {
        Error::new(
            ErrorKind::Selector,
            format!("XPath '{source}' cannot be evaluated: {e}"),
        )
    })?;
    Ok(match value {
        Value::NodeSet(mut nodes) => {
            use xpath_eval::Node as _;
            nodes.sort_by(|a, b| a.document_order(*b));
            nodes.into_iter().map(XNode::hit).collect()
        }
        Value::Boolean(b) => vec![Hit::Value(if b { "1" } else { "0" }.into())],
        Value::Number(n) => vec![Hit::Value(python_float(n).into())],
        Value::String(s) => vec![Hit::Value(s.into())],
    })
}

/// A number as parsel prints one (Python's `str(float)`), so a ported spider's
/// `xpath("count(//li)").get()` is still `"3.0"`.
fn python_float(n: f64) -> String {
    if n.is_nan() {
        "nan".to_owned()
    } else if n.is_infinite() {
        if n > 0.0 { "inf" } else { "-inf" }.to_owned()
    } else if n.fract() == 0.0 && n.abs() < 1e16 {
        format!("{n:.1}")
    } else {
        format!("{n}")
    }
}

/// An invalid-XPath error naming the expression and the (1-based, in characters) position of
/// the fault, with a pointer to CSS when the expression is one.
fn problem(expr: &str, byte: usize, what: &str) -> Error {
    let hint = if looks_like_css(expr) {
        "; this is CSS: use select() instead of xpath()"
    } else {
        ""
    };
    super::syntax_error("XPath", expr, byte, what, hint)
}

/// Whether an expression that XPath refused reads as CSS: a pseudo-element of parsel's, an
/// id, a class at the start, or an attribute test without `@`.
fn looks_like_css(expr: &str) -> bool {
    let e = expr.trim();
    e.contains("::text")
        || e.contains("::attr(")
        || e.contains('#')
        || e.starts_with('.') && e[1..].starts_with(|c: char| c.is_ascii_alphabetic())
        || e.contains('[') && !e.contains('@') && !e.contains('(') && !e.contains('/')
}
