//! crawler.toml: reading a settings file into values that remember their file:line:col, with
//! every structure error (unknown section or key, misplaced key, malformed `[[hosts]]` rule)
//! named there, and finding the project's file. Parsing only: the layering is elsewhere.

use std::fmt;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};
use toml::de::{DeTable, DeValue};

use crawler_core::{Error, ErrorKind, Result};

use crawler_core::Settings;
use crawler_core::settings_text::SPECIAL_KEYS;
use crawler_core::settings_text::{Written, nearest, unknown_setting};
use crawler_core::{HOST_RULE_KEYS, HostRule};
use crawler_core::{SECTIONS, section_of};

/// The settings file looked for next to a project's Cargo.toml.
pub(super) const SETTINGS_FILE: &str = "crawler.toml";

/// A value read from a settings file, with where it was written.
#[derive(Debug, Clone)]
pub(super) struct FileValue {
    pub(super) key: String,
    pub(super) value: Value,
    /// The value as written, for error messages.
    pub(super) text: String,
    pub(super) line: usize,
    pub(super) column: usize,
}

/// A settings error pointing at `path:line:column`.
pub(super) fn located(path: &Path, line: usize, column: usize, msg: impl fmt::Display) -> Error {
    Error::new(
        ErrorKind::Settings,
        format!("{}:{line}:{column}: {msg}", path.display()),
    )
}

/// 1-based line and column (in characters) of a byte offset.
fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = text.get(..offset.min(text.len())).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

/// Read a settings file into typed values with positions; structure errors (unknown
/// sections and keys, misplaced keys, malformed host rules) are reported here.
pub(super) fn parse_file(path: &Path, text: &str) -> Result<Vec<FileValue>> {
    let at = |offset: usize, msg: String| {
        let (line, column) = line_col(text, offset);
        located(path, line, column, msg)
    };
    let doc = DeTable::parse(text).map_err(|e| {
        let offset = e.span().map_or(0, |s| s.start);
        at(offset, format!("invalid TOML: {}", e.message().trim()))
    })?;
    let keys = Settings::keys();
    let mut out = Vec::new();
    let mut setting = |key: &str, key_at: usize, section: &str, value: &toml::Spanned<DeValue>| {
        if !keys.iter().any(|k| k == key) || SPECIAL_KEYS.contains(&key) {
            return Err(at(key_at, unknown_setting(key, Written::File(section))));
        }
        let home = section_of(key);
        if home != section {
            return Err(at(
                key_at,
                format!("setting '{key}' belongs in [{home}], not [{section}]"),
            ));
        }
        let span = value.span();
        let (line, column) = line_col(text, span.start);
        out.push(FileValue {
            key: key.to_owned(),
            value: to_json(value.get_ref())
                .map_err(|why| at(span.start, format!("invalid value for {key}: {why}")))?,
            text: text.get(span).unwrap_or("").trim().to_owned(),
            line,
            column,
        });
        Ok(())
    };
    let mut hosts = Vec::new();
    let mut hosts_at = None;
    for (name, value) in doc.get_ref().iter() {
        let name_at = name.span().start;
        match value.get_ref() {
            DeValue::Table(table) => {
                let section = name.get_ref().as_ref();
                if !SECTIONS.iter().any(|s| s.name == section) {
                    let names = SECTIONS.iter().map(|s| s.name);
                    let hint = match nearest(section, names.clone()) {
                        Some(n) => format!("; did you mean [{n}]?"),
                        None => format!(
                            "; sections are {}, and [[hosts]]",
                            names
                                .map(|n| format!("[{n}]"))
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                    };
                    return Err(at(name_at, format!("unknown section [{section}]{hint}")));
                }
                for (key, v) in table.iter() {
                    setting(key.get_ref(), key.span().start, section, v)?;
                }
            }
            DeValue::Array(rules) if name.get_ref() == "hosts" => {
                hosts_at = Some(name_at);
                for rule in rules.iter() {
                    hosts.push(host_rule(rule, &at)?);
                }
            }
            _ => setting(name.get_ref(), name_at, "general", value)?,
        }
    }
    if let Some(offset) = hosts_at {
        let (line, column) = line_col(text, offset);
        let value = serde_json::to_value(&hosts)
            .map_err(|e| at(offset, format!("invalid [[hosts]]: {e}")))?;
        out.push(FileValue {
            key: "hosts".to_owned(),
            value,
            text: "[[hosts]]".to_owned(),
            line,
            column,
        });
    }
    Ok(out)
}

/// One `[[hosts]]` table, checked field by field so errors point at the field.
fn host_rule(
    rule: &toml::Spanned<DeValue>,
    at: &impl Fn(usize, String) -> Error,
) -> Result<HostRule> {
    let DeValue::Table(table) = rule.get_ref() else {
        return Err(at(
            rule.span().start,
            "[[hosts]] entries must be tables".to_owned(),
        ));
    };
    let mut obj = Map::new();
    for (key, value) in table.iter() {
        let k = key.get_ref().as_ref();
        if !HOST_RULE_KEYS.contains(&k) {
            let hint = nearest(k, HOST_RULE_KEYS.iter().copied())
                .map(|n| format!("did you mean '{n}'? "))
                .unwrap_or_default();
            return Err(at(
                key.span().start,
                format!(
                    "unknown host rule field '{k}'; {hint}fields are {}",
                    HOST_RULE_KEYS.join(", ")
                ),
            ));
        }
        let v = to_json(value.get_ref()).map_err(|why| at(value.span().start, why))?;
        obj.insert(k.to_owned(), v.clone());
        // Check each field alone so a wrong type names its own line.
        let mut probe = Map::new();
        probe.insert("match".to_owned(), Value::String("*".to_owned()));
        probe.insert(k.to_owned(), v);
        let parsed: std::result::Result<HostRule, _> = serde_json::from_value(Value::Object(probe));
        match parsed {
            Err(e) => {
                let hint = if k == "delay" {
                    " (durations are written like \"500ms\", \"2s\", \"1m\")"
                } else {
                    ""
                };
                return Err(at(
                    value.span().start,
                    format!("invalid value for host rule field {k}: {e}{hint}"),
                ));
            }
            Ok(r) => {
                if let Some((field, why)) = r.problem() {
                    return Err(at(value.span().start, format!("host rule {field} {why}")));
                }
            }
        }
    }
    if !obj.contains_key("match") {
        return Err(at(
            rule.span().start,
            "a [[hosts]] rule needs `match = \"GLOB\"`".to_owned(),
        ));
    }
    serde_json::from_value(Value::Object(obj))
        .map_err(|e| at(rule.span().start, format!("invalid [[hosts]] rule: {e}")))
}

/// A TOML value as JSON, the representation the settings layers work on.
fn to_json(v: &DeValue) -> std::result::Result<Value, String> {
    Ok(match v {
        DeValue::String(s) => Value::String(s.to_string()),
        DeValue::Integer(i) => {
            let n = i64::from_str_radix(&i.as_str().replace('_', ""), i.radix())
                .map_err(|e| format!("integer {}: {e}", i.as_str()))?;
            Value::from(n)
        }
        DeValue::Float(f) => {
            let x: f64 = f
                .as_str()
                .replace('_', "")
                .parse()
                .map_err(|_| format!("bad float {}", f.as_str()))?;
            serde_json::Number::from_f64(x)
                .map(Value::Number)
                .ok_or_else(|| format!("{} is not a finite number", f.as_str()))?
        }
        DeValue::Boolean(b) => Value::Bool(*b),
        DeValue::Datetime(d) => Value::String(d.to_string()),
        DeValue::Array(items) => Value::Array(
            items
                .iter()
                .map(|i| to_json(i.get_ref()))
                .collect::<std::result::Result<_, _>>()?,
        ),
        DeValue::Table(t) => {
            let mut map = Map::new();
            for (k, v) in t.iter() {
                map.insert(k.get_ref().to_string(), to_json(v.get_ref())?);
            }
            Value::Object(map)
        }
    })
}

/// The project's settings file: `crawler.toml` beside the nearest `Cargo.toml` at or above
/// `start`, if it exists.
pub fn find_settings_file(start: &Path) -> Option<PathBuf> {
    start
        .ancestors()
        .take(64)
        .find(|dir| dir.join("Cargo.toml").is_file())
        .map(|dir| dir.join(SETTINGS_FILE))
        .filter(|p| p.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_are_one_based() {
        assert_eq!(line_col("a\nbc", 3), (2, 2));
        assert_eq!(line_col("abc", 0), (1, 1));
    }
}
