//! Settings values to and from their text form: [`Settings::set`] and the helpers every layer
//! uses to set a key from text (with the nearest valid key for a typo), and how a value is
//! written back for listings and the reference.

use serde_json::Value;

use crate::error::{Error, ErrorKind, Result};

use super::schema::Settings;
use super::scrapy::{Ours, SCRAPY_NAMES, scrapy_name};
use super::sections::{SPECIAL_KEYS, section_of};

impl Settings {
    /// Set one setting from its text form, as given on a command line: numbers, `true`/`false`,
    /// durations like `500ms`, or plain text. Unknown keys and values of the wrong type are
    /// errors that name the key (and the nearest valid key for a typo).
    pub fn set(&mut self, key: &str, value: &str) -> Result<()> {
        let mut map = self.to_map()?;
        set_text(&mut map, key, value)?;
        let updated = Settings::from_map(map)?;
        updated.validate()?;
        *self = updated;
        Ok(())
    }
}

/// Set `key` in a settings map from its text form, keeping the JSON type of the current value
/// (so "10" for a string stays text). Errors name the key and the value.
pub fn set_text(
    map: &mut serde_json::Map<String, serde_json::Value>,
    key: &str,
    value: &str,
) -> Result<()> {
    let Some(current) = map.get(key).cloned() else {
        return Err(unknown_key(key));
    };
    let mut last_err = None;
    for candidate in text_candidates(&current, value) {
        match try_set(map, key, candidate) {
            Ok(()) => return Ok(()),
            Err(e) => last_err = Some(e),
        }
    }
    let why = last_err.unwrap_or_else(|| "no value".to_owned());
    Err(Error::new(
        ErrorKind::Settings,
        format!(
            "invalid value '{}' for {key}: {}{}",
            crate::redact::redact_setting(key, value),
            crate::redact::redact_setting(key, &why),
            type_hint(&current)
        ),
    ))
}

/// Put `value` at `key` if the whole map still deserializes; else the reason.
pub fn try_set(
    map: &mut serde_json::Map<String, serde_json::Value>,
    key: &str,
    value: serde_json::Value,
) -> std::result::Result<(), String> {
    let old = map.insert(key.to_owned(), value);
    match serde_json::from_value::<Settings>(serde_json::Value::Object(map.clone())) {
        Ok(_) => Ok(()),
        Err(e) => {
            match old {
                Some(old) => map.insert(key.to_owned(), old),
                None => map.remove(key),
            };
            Err(e.to_string())
        }
    }
}

/// A hint for durations, whose serde error ("expected a duration") does not say the form.
pub fn type_hint(current: &serde_json::Value) -> &'static str {
    match current {
        serde_json::Value::String(s) if humantime::parse_duration(s).is_ok() => {
            " (durations are written like \"500ms\", \"2s\", \"1m\")"
        }
        _ => "",
    }
}

/// The JSON values a text may stand for, most likely first, given the field's current value.
fn text_candidates(current: &serde_json::Value, value: &str) -> Vec<serde_json::Value> {
    use serde_json::Value;
    let scalar = |v: &str| {
        serde_json::from_str(v.trim()).unwrap_or_else(|_| Value::String(v.trim().to_owned()))
    };
    // "none" or nothing unsets an optional setting; for other settings Null does not
    // deserialize and the next candidate is tried.
    let unset = value.trim().is_empty() || value.trim().eq_ignore_ascii_case("none");
    match current {
        Value::String(_) if unset => vec![Value::Null, Value::String(value.to_owned())],
        Value::String(_) => vec![Value::String(value.to_owned())],
        // Lists are written "a,b,c" on a command line (or as a JSON array).
        Value::Array(_) if !value.trim_start().starts_with('[') => vec![Value::Array(
            value
                .split(',')
                .filter(|v| !v.trim().is_empty())
                .map(scalar)
                .collect(),
        )],
        // An unset optional: empty or "none" unsets it; otherwise text first, since most
        // optional settings are paths and addresses, then the typed reading.
        Value::Null => {
            if unset {
                vec![Value::Null]
            } else {
                vec![Value::String(value.to_owned()), scalar(value)]
            }
        }
        _ => vec![scalar(value)],
    }
}

/// The valid name nearest to `word`, if one is close enough to be a likely typo.
///
/// Nearest by edit distance (insertions, deletions, substitutions and swaps of neighbours,
/// ignoring case), ties going to the more similar start (Jaro-Winkler), within a third of the
/// word's length. Jaro-Winkler alone favours a long name that shares a prefix over the name
/// one letter away; it is only the fallback when nothing is within that distance.
pub fn nearest<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let word = word.trim().to_ascii_lowercase();
    let candidates: Vec<&str> = candidates.into_iter().collect();
    let limit = (word.chars().count() / 3).max(1);
    let closest = candidates
        .iter()
        .map(|k| {
            let k_lower = k.to_ascii_lowercase();
            (
                strsim::osa_distance(&word, &k_lower),
                strsim::jaro_winkler(&word, &k_lower),
                *k,
            )
        })
        .filter(|(d, _, _)| *d <= limit)
        .min_by(|a, b| a.0.cmp(&b.0).then(b.1.total_cmp(&a.1)));
    if let Some((_, _, k)) = closest {
        return Some(k);
    }
    candidates
        .into_iter()
        .map(|k| (strsim::jaro_winkler(&k.to_ascii_lowercase(), &word), k))
        .filter(|(score, _)| *score > 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, k)| k)
}

/// Where an unknown setting name was written, for the wording of its message.
pub enum Written<'a> {
    /// A key of crawler.toml, in this section.
    File(&'a str),
    /// A key given as text: `-s key=value`, `custom_settings`, [`Settings::set`].
    Text,
    /// This `CRAWLER_*` environment variable.
    Env(&'a str),
}

/// The message for a setting name that is not one of ours: Scrapy's name for a setting says
/// what it is called here; a misspelling names the nearest setting (also through Scrapy's
/// names, so `concurent_requests` points to `concurrency`); otherwise where to find the list,
/// never a dump of every key.
pub fn unknown_setting(key: &str, written: Written<'_>) -> String {
    let what = match written {
        Written::Env(var) => format!("environment variable {var} names no setting"),
        _ => format!("unknown setting '{key}'"),
    };
    let ours = |k: &str| match written {
        Written::File(_) => format!("'{k}' (in [{}])", section_of(k)),
        Written::Text => format!("'{k}'"),
        Written::Env(_) => format!("CRAWLER_{}", k.to_ascii_uppercase()),
    };
    if let Some(s) = scrapy_name(key) {
        return match (written, s.key()) {
            (Written::Env(var), Some(k)) => format!(
                "environment variable {var}: {}; its variable is CRAWLER_{}",
                s.message(),
                k.to_ascii_uppercase()
            ),
            (Written::Env(var), None) => format!("environment variable {var}: {}", s.message()),
            _ => s.message(),
        };
    }
    let keys = Settings::keys();
    let scrapy_lower: Vec<String> = SCRAPY_NAMES
        .iter()
        .map(|s| s.scrapy.to_ascii_lowercase())
        .collect();
    let candidates = keys
        .iter()
        .chain(&scrapy_lower)
        .map(String::as_str)
        .filter(|k| !SPECIAL_KEYS.contains(k));
    let Some(near) = nearest(key, candidates) else {
        return match written {
            Written::File(section) => {
                format!("{what}; the keys of [{section}] are listed by `settings`")
            }
            Written::Text => {
                format!("{what}; `settings` lists every setting (docs/settings.md)")
            }
            Written::Env(_) => what,
        };
    };
    match scrapy_name(near) {
        // Our own key (a Scrapy name equal to one of ours is our key too).
        _ if keys.iter().any(|k| k == near) => format!("{what}; did you mean {}?", ours(near)),
        Some(s) => match s.ours {
            Ours::Key(k) => {
                let note = if s.note.is_empty() {
                    String::new()
                } else {
                    format!("; {}", s.note)
                };
                format!(
                    "{what}; did you mean {}? (Scrapy's {}{note})",
                    ours(k),
                    s.scrapy
                )
            }
            _ => format!(
                "{what}; did you mean Scrapy's {}? {}",
                s.scrapy,
                s.message()
            ),
        },
        None => format!("{what}; did you mean {}?", ours(near)),
    }
}

pub(crate) fn unknown_key(key: &str) -> Error {
    Error::new(ErrorKind::Settings, unknown_setting(key, Written::Text))
}

/// Render a setting's JSON value the way it is written on a command line.
pub fn display_value(v: &Value) -> String {
    match v {
        Value::Null => "(unset)".to_owned(),
        Value::String(s) => s.clone(),
        Value::Array(items) if items.iter().all(|i| !i.is_object()) => items
            .iter()
            .map(display_value)
            .collect::<Vec<_>>()
            .join(","),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::settings::ThrottleMode;

    #[test]
    fn set_parses_each_type() {
        let mut s = Settings::default();
        s.set("concurrency", "64").unwrap();
        s.set("download_delay", "250ms").unwrap();
        s.set("obey_robots", "false").unwrap();
        s.set("user_agent", "mybot/1.0").unwrap();
        s.set("retry_http_codes", "500, 503").unwrap();
        s.set("throttle", "fixed").unwrap();
        assert_eq!(s.retry_http_codes, [500, 503]);
        assert_eq!(s.throttle, ThrottleMode::Fixed);
        assert!(s.set("throttle", "fast").is_err());
        assert_eq!(s.concurrency, 64);
        assert_eq!(s.download_delay, Duration::from_millis(250));
        assert!(!s.obey_robots);
        assert_eq!(s.user_agent, "mybot/1.0");
    }

    #[test]
    fn errors_name_the_key_and_suggest() {
        let mut s = Settings::default();
        let e = s.set("concurency", "4").unwrap_err();
        assert!(e.to_string().contains("did you mean 'concurrency'"), "{e}");
        let e = s.set("concurrency", "many").unwrap_err();
        assert!(
            e.to_string()
                .contains("invalid value 'many' for concurrency"),
            "{e}"
        );
        let e = s.set("download_delay", "soon").unwrap_err();
        assert!(e.to_string().contains("download_delay"), "{e}");
        let e = s.set("concurrency", "0").unwrap_err();
        assert!(e.to_string().contains("at least 1"), "{e}");
        assert_eq!(s, Settings::default(), "failed sets change nothing");
    }
}
