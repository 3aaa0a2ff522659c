//! Items as Scrapy's `XmlItemExporter` writes them:
//!
//! ```xml
//! <?xml version="1.0" encoding="utf-8"?>
//! <items>
//! <item><title>A &amp; B</title><tags><value>x</value><value>y</value></tags></item>
//! </items>
//! ```
//!
//! A field is an element named after it; a nested map's fields are child elements, a
//! list's entries `<value>` elements; text is escaped; `None` is an empty element; booleans
//! are `True` / `False` as Python writes them. Fields keep the order the item serialises
//! them in (a struct's declaration order).

use serde::Deserialize;
use serde::de::{MapAccess, SeqAccess, Visitor};

/// What opens a feed: the declaration and the root element.
pub(crate) const HEADER: &[u8] = b"<?xml version=\"1.0\" encoding=\"utf-8\"?>\n<items>\n";
/// What closes it.
pub(crate) const FOOTER: &[u8] = b"</items>\n";

/// A serialised value, its maps in their order (serde_json's own map sorts its keys).
enum Node {
    Null,
    Text(String),
    List(Vec<Node>),
    Map(Vec<(String, Node)>),
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Node;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON value")
            }
            fn visit_unit<E>(self) -> Result<Node, E> {
                Ok(Node::Null)
            }
            fn visit_none<E>(self) -> Result<Node, E> {
                Ok(Node::Null)
            }
            fn visit_bool<E>(self, v: bool) -> Result<Node, E> {
                Ok(Node::Text(if v { "True" } else { "False" }.to_owned()))
            }
            fn visit_i64<E>(self, v: i64) -> Result<Node, E> {
                Ok(Node::Text(v.to_string()))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Node, E> {
                Ok(Node::Text(v.to_string()))
            }
            fn visit_f64<E>(self, v: f64) -> Result<Node, E> {
                // As JSON writes it (`3.0`, not `3`).
                Ok(Node::Text(
                    serde_json::Number::from_f64(v)
                        .map_or_else(|| v.to_string(), |n| n.to_string()),
                ))
            }
            fn visit_str<E>(self, v: &str) -> Result<Node, E> {
                Ok(Node::Text(v.to_owned()))
            }
            fn visit_string<E>(self, v: String) -> Result<Node, E> {
                Ok(Node::Text(v))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Node, A::Error> {
                let mut out = Vec::new();
                while let Some(v) = seq.next_element()? {
                    out.push(v);
                }
                Ok(Node::List(out))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Node, A::Error> {
                let mut out = Vec::new();
                while let Some((k, v)) = map.next_entry::<String, Node>()? {
                    out.push((k, v));
                }
                Ok(Node::Map(out))
            }
        }
        d.deserialize_any(V)
    }
}

/// Whether `name` can be an element's name: an XML name without a colon (a namespace
/// prefix would need a declaration), not starting with `xml`.
fn element_name_ok(name: &str) -> bool {
    let mut chars = name.chars();
    let Some(first) = chars.next() else {
        return false;
    };
    (first.is_alphabetic() || first == '_')
        && chars.all(|c| c.is_alphanumeric() || matches!(c, '_' | '-' | '.'))
        && !name.get(..3).is_some_and(|p| p.eq_ignore_ascii_case("xml"))
}

/// Write `item` as one `<item>` element and a line end, into `out`; a field name that
/// cannot be an element's name is an error (and nothing is written).
pub(crate) fn write_item<I: serde::Serialize>(
    item: &I,
    out: &mut Vec<u8>,
) -> std::result::Result<(), String> {
    let json = serde_json::to_vec(item).map_err(|e| e.to_string())?;
    let node: Node = serde_json::from_slice(&json).map_err(|e| e.to_string())?;
    let Node::Map(fields) = node else {
        return Err("an XML feed's item must serialise as a map of fields".to_owned());
    };
    let start = out.len();
    out.extend_from_slice(b"<item>");
    for (name, value) in &fields {
        if let Err(e) = write_field(name, value, out) {
            out.truncate(start);
            return Err(e);
        }
    }
    out.extend_from_slice(b"</item>\n");
    Ok(())
}

/// `<name>value</name>`, nested as the value is.
fn write_field(name: &str, value: &Node, out: &mut Vec<u8>) -> std::result::Result<(), String> {
    if !element_name_ok(name) {
        return Err(format!(
            "the field name '{name}' cannot be an XML element's name"
        ));
    }
    out.push(b'<');
    out.extend_from_slice(name.as_bytes());
    out.push(b'>');
    match value {
        Node::Null => {}
        Node::Text(text) => {
            out.extend_from_slice(quick_xml::escape::escape(text.as_str()).as_bytes())
        }
        Node::List(values) => {
            for v in values {
                write_field("value", v, out)?;
            }
        }
        Node::Map(fields) => {
            for (k, v) in fields {
                write_field(k, v, out)?;
            }
        }
    }
    out.extend_from_slice(b"</");
    out.extend_from_slice(name.as_bytes());
    out.push(b'>');
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Serialize)]
    struct Book {
        title: String,
        price: f64,
        tags: Vec<String>,
        meta: std::collections::BTreeMap<String, Option<u32>>,
        stock: bool,
    }

    #[test]
    fn fields_in_order_escaped_and_nested() {
        let mut out = Vec::new();
        let book = Book {
            title: "A <b> & \"c\"".into(),
            price: 3.0,
            tags: vec!["x".into(), "y".into()],
            meta: [("pages".to_owned(), Some(12)), ("isbn".to_owned(), None)]
                .into_iter()
                .collect(),
            stock: true,
        };
        write_item(&book, &mut out).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "<item><title>A &lt;b&gt; &amp; &quot;c&quot;</title><price>3.0</price><tags>\
             <value>x</value><value>y</value></tags><meta><isbn></isbn><pages>12</pages></meta>\
             <stock>True</stock></item>\n"
        );
    }

    #[test]
    fn a_field_that_is_no_element_name_writes_nothing() {
        let mut out = b"kept".to_vec();
        let item = serde_json::json!({"ok": 1, "not ok": 2});
        let e = write_item(&item, &mut out).unwrap_err();
        assert!(e.contains("'not ok'"), "{e}");
        assert_eq!(out, b"kept");
        assert!(write_item(&1, &mut out).is_err());
    }
}
