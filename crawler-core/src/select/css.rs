//! CSS queries: scraper's selectors plus parsel's two pseudo-elements, `::text` (the text
//! nodes of the matched elements) and `::attr(name)` (one attribute of each), which may end
//! each comma-separated part of a selector, as in Scrapy.
//!
//! An invalid selector is reported in our words, with the position of the fault (cssparser
//! knows it; scraper's own error drops it) and a hint when the expression is XPath.

use std::rc::Rc;

use scraper::Selector;
use selectors::parser::{ParseRelative, SelectorList, SelectorParseErrorKind};

use crate::error::{Error, Result};

/// What a part of a query yields for each element its selector matches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Pseudo {
    /// The element itself.
    None,
    /// Its text nodes: its children (`h1::text`), or every one below it and its own when
    /// the part ends with a descendant combinator (`h1 ::text`, parsel's `h1 *::text`).
    Text { deep: bool },
    /// The attribute of that name, where the element has it (`::attr(href)`); the element
    /// and every element below it for `a ::attr(href)`.
    Attr { name: String, deep: bool },
}

/// One comma-separated part of a query.
#[derive(Debug)]
pub(crate) struct Part {
    /// `None` for a part that is only a pseudo-element (`::text`): the context itself and
    /// what lies below it.
    pub(crate) selector: Option<Selector>,
    pub(crate) pseudo: Pseudo,
}

/// A compiled CSS query.
#[derive(Debug)]
pub(crate) enum CssQuery {
    /// Every part selects elements: one selector list, matched in one walk of the tree.
    Elements(Selector),
    /// At least one part ends in a pseudo-element: each part is matched on its own and the
    /// results are merged in document order.
    Parts(Vec<Part>),
}

thread_local! {
    // Spiders use a handful of selectors millions of times; parsing each once per thread
    // keeps selection cheap without asking users to hold compiled selectors. Shared (`Rc`)
    // rather than cloned out per use: a clone copies the selector's vectors every call.
    static QUERIES: std::cell::RefCell<std::collections::HashMap<String, Rc<CssQuery>>> =
        std::cell::RefCell::default();
}

/// Compile `css`, from the thread's cache when it was seen before.
pub(crate) fn compile(css: &str) -> Result<Rc<CssQuery>> {
    super::cached(&QUERIES, css, parse_query)
}

fn parse_query(css: &str) -> Result<CssQuery> {
    let mut parts = Vec::new();
    for (start, text) in split_top_level(css) {
        parts.push(parse_part(css, start, text)?);
    }
    if parts.iter().all(|p| p.pseudo == Pseudo::None) {
        // The whole list in one selector: one walk of the tree, document order for free.
        let selector = Selector::parse(css).map_err(|_| invalid(css, 0, css))?;
        return Ok(CssQuery::Elements(selector));
    }
    Ok(CssQuery::Parts(parts))
}

/// Split at the commas that separate selectors (not those inside brackets, parentheses or
/// quotes), each part with its byte offset.
fn split_top_level(css: &str) -> Vec<(usize, &str)> {
    let mut parts = Vec::new();
    let (mut depth, mut quote, mut start) = (0i32, None, 0);
    let mut chars = css.char_indices();
    while let Some((i, c)) = chars.next() {
        match (quote, c) {
            (Some(_), '\\') => {
                chars.next();
            }
            (Some(q), _) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '"' | '\'') => quote = Some(c),
            (None, '\\') => {
                chars.next();
            }
            (None, '(' | '[') => depth += 1,
            (None, ')' | ']') => depth -= 1,
            (None, ',') if depth == 0 => {
                parts.push((start, &css[start..i]));
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push((start, &css[start..]));
    parts
}

/// Parse one part (`text`, found at byte `start` of `css`).
fn parse_part(css: &str, start: usize, text: &str) -> Result<Part> {
    let trimmed = text.trim_end();
    let lower = trimmed.to_ascii_lowercase();
    let (base, pseudo) = if lower.ends_with("::text") {
        (&trimmed[..trimmed.len() - "::text".len()], Some(None))
    } else if let Some(open) = lower.rfind("::attr(").filter(|_| lower.ends_with(')')) {
        let name = trimmed[open + "::attr(".len()..trimmed.len() - 1].trim();
        let name = name.trim_matches(|c| c == '"' || c == '\'');
        if name.is_empty() {
            return Err(problem(
                css,
                start + open,
                "'::attr()' needs an attribute name",
            ));
        }
        (&trimmed[..open], Some(Some(name.to_owned())))
    } else {
        (text, None)
    };
    // A pseudo-element anywhere else is a mistake scraper would call an unsupported
    // pseudo-class: say what is meant instead.
    for name in ["::text", "::attr("] {
        if let Some(at) = base.to_ascii_lowercase().find(name) {
            return Err(problem(
                css,
                start + at,
                &format!("'{}' may only end a selector", name.trim_end_matches('(')),
            ));
        }
    }
    let Some(attr) = pseudo else {
        let selector = Selector::parse(base).map_err(|_| invalid(css, start, base))?;
        return Ok(Part {
            selector: Some(selector),
            pseudo: Pseudo::None,
        });
    };
    // `h1 ::text` is the text of h1 and of everything below it; `h1 > ::text` means
    // `h1 > *::text`; `::text` alone is the context's own text and everything below.
    let body = base.trim_start();
    let deep = body.is_empty() || base.ends_with(char::is_whitespace);
    let body = body.trim_end();
    let selector = if body.is_empty() {
        None
    } else {
        let body = if body.ends_with(['>', '+', '~']) {
            format!("{body} *")
        } else {
            body.to_owned()
        };
        let offset = start + (base.len() - base.trim_start().len());
        Some(Selector::parse(&body).map_err(|_| invalid(css, offset, &body))?)
    };
    let pseudo = match attr {
        None => Pseudo::Text { deep },
        Some(name) => Pseudo::Attr { name, deep },
    };
    Ok(Part { selector, pseudo })
}

/// The error for `part` (found at byte `offset` of `css`), which scraper refused: parsed
/// again with the selectors crate itself for the position and the kind of fault.
fn invalid(css: &str, offset: usize, part: &str) -> Error {
    let mut parser = cssparser::Parser::new(part);
    match SelectorList::parse(&scraper::selector::Parser, &mut parser, ParseRelative::No) {
        Ok(_) => problem(css, offset, "not a selector"),
        Err(e) => {
            // cssparser's errors carry no position: the parser stops just past the fault
            // (at the end, for a selector that ends too soon).
            let mut at = parser.position().byte_index().min(part.len());
            if matches!(
                e.kind,
                cssparser::ParseErrorKind::Custom(
                    SelectorParseErrorKind::UnsupportedPseudoClassOrElement
                )
            ) {
                // Point at the pseudo-class itself, and name it.
                if let Some(colon) = part[..at].rfind(':') {
                    let start = if part[..colon].ends_with(':') {
                        colon - 1
                    } else {
                        colon
                    };
                    let name: String = part[start..]
                        .chars()
                        .take_while(|c| *c == ':' || c.is_alphanumeric() || *c == '-')
                        .collect();
                    return problem(
                        css,
                        offset + start,
                        &format!(
                            "unknown pseudo-class or pseudo-element '{name}' (parsel's \
                             '::text' and '::attr(name)' may end a selector)"
                        ),
                    );
                }
            }
            at = at.min(part.len());
            let before: String = {
                let chars: Vec<char> = part[..at].chars().collect();
                chars[chars.len().saturating_sub(12)..].iter().collect()
            };
            let near = if before.trim().is_empty() {
                String::new()
            } else {
                format!(" (after '{}')", before.trim_start())
            };
            problem(css, offset + at, &format!("{}{near}", describe(&e.kind)))
        }
    }
}

fn describe(kind: &cssparser::ParseErrorKind<SelectorParseErrorKind>) -> String {
    use SelectorParseErrorKind as S;
    use cssparser::{BasicParseErrorKind as B, ParseErrorKind as P};
    let what = match kind {
        P::Basic(B::EndOfInput) => "the selector ends too soon",
        P::Basic(B::UnexpectedToken) => "something unexpected",
        P::Basic(B::TooManyNestedBlocks) => "too many nested blocks",
        P::Basic(_) => "not a selector",
        P::Custom(kind) => match kind {
            S::EmptySelector => "an empty selector",
            S::DanglingCombinator => "a combinator with nothing after it",
            S::UnsupportedPseudoClassOrElement => "an unknown pseudo-class or pseudo-element",
            S::UnexpectedIdent | S::UnexpectedTokenInAttributeSelector => "something unexpected",
            S::BadValueInAttr => "a bad value in an attribute selector",
            S::InvalidQualNameInAttr | S::NoQualifiedNameInAttributeSelector => {
                "a bad attribute name in an attribute selector"
            }
            S::PseudoElementExpectedIdent | S::NoIdentForPseudo | S::PseudoElementExpectedColon => {
                "a ':' without a name after it"
            }
            S::ClassNeedsIdent => "a '.' without a class name after it",
            _ => "a construct this selector engine does not support",
        },
    };
    what.to_owned()
}

/// An invalid-selector error naming the expression and the (1-based, in characters)
/// position of the fault, with a pointer to XPath when the expression is one.
pub(crate) fn problem(css: &str, byte: usize, what: &str) -> Error {
    let hint = if looks_like_xpath(css) {
        "; this is XPath: use xpath() instead of select()"
    } else {
        ""
    };
    super::syntax_error("CSS selector", css, byte, what, hint)
}

/// Whether an expression reads as XPath rather than CSS: a path from the root or the
/// context, an attribute or text step, or an axis.
pub(crate) fn looks_like_xpath(expr: &str) -> bool {
    let e = expr.trim_start();
    e.starts_with('/')
        || e.starts_with("./")
        || e.starts_with("..")
        || e.starts_with('(')
        || e.starts_with('@')
        || e.contains("//")
        || e.contains("/@")
        || e.contains("text()")
        || e.contains("::") && !e.contains("::text") && !e.contains("::attr")
}
