//! Statuses a spider asks to see: which non-2xx answers reach the request's callback instead
//! of ending as `failed:http_status`, in Scrapy's three forms (the spider's
//! `handle_httpstatus_list`, the request meta `handle_httpstatus_list` /
//! `handle_httpstatus_all`, the settings `HTTPERROR_ALLOWED_CODES` / `HTTPERROR_ALLOW_ALL`)
//! and with Scrapy's precedence.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::request::Request;

/// Request meta key (Scrapy's name): a list of statuses this request's callback handles.
/// It replaces the spider's list and the `allowed_statuses` setting for the request.
pub const HANDLE_HTTPSTATUS_LIST_META: &str = "handle_httpstatus_list";
/// Request meta key (Scrapy's name): when `true`, every status reaches this request's
/// callback (redirects included: they are not followed).
pub const HANDLE_HTTPSTATUS_ALL_META: &str = "handle_httpstatus_all";

/// Non-2xx statuses let through to a callback: none (the default), a list, or all.
///
/// Written in `crawler.toml` as a list (`allowed_statuses = [404, 410]`) or `"all"`; on a
/// command line as `404,410` or `all`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AllowedStatuses {
    /// These statuses (empty: none).
    List(Vec<u16>),
    /// Every status.
    All,
}

/// None: only 2xx answers reach callbacks.
impl Default for AllowedStatuses {
    fn default() -> Self {
        Self::List(Vec::new())
    }
}

impl AllowedStatuses {
    /// No status beyond 2xx (the default).
    pub fn none() -> Self {
        Self::default()
    }

    /// These statuses.
    pub fn list(codes: impl IntoIterator<Item = u16>) -> Self {
        Self::List(codes.into_iter().collect())
    }

    /// Whether `status` is let through.
    pub fn contains(&self, status: u16) -> bool {
        match self {
            Self::List(codes) => codes.contains(&status),
            Self::All => true,
        }
    }

    /// Whether nothing is let through.
    pub fn is_none(&self) -> bool {
        matches!(self, Self::List(codes) if codes.is_empty())
    }
}

impl fmt::Display for AllowedStatuses {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::All => f.write_str("all"),
            Self::List(codes) => {
                let codes: Vec<String> = codes.iter().map(u16::to_string).collect();
                f.write_str(&codes.join(", "))
            }
        }
    }
}

impl Serialize for AllowedStatuses {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::All => s.serialize_str("all"),
            Self::List(codes) => codes.serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for AllowedStatuses {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let value = serde_json::Value::deserialize(d)?;
        from_value(&value).map_err(serde::de::Error::custom)
    }
}

/// A list of codes, `"all"`, a text list (`"404, 410"`), or nothing; a list holding `"all"`
/// is all (a command line's `all` arrives as a one-element list).
fn from_value(value: &serde_json::Value) -> Result<AllowedStatuses, String> {
    use serde_json::Value;
    let code = |v: &Value| -> Result<Option<u16>, String> {
        let n = match v {
            Value::Number(n) => n.as_u64(),
            Value::String(s) if s.trim().eq_ignore_ascii_case("all") => return Ok(None),
            Value::String(s) => s.trim().parse::<u64>().ok(),
            _ => None,
        };
        match n {
            Some(n @ 100..=599) => Ok(Some(n as u16)),
            _ => Err(format!(
                "expected HTTP status codes (100-599) or \"all\", found {v}"
            )),
        }
    };
    let mut codes = Vec::new();
    let items: Vec<Value> = match value {
        Value::Null => Vec::new(),
        Value::Array(items) => items.clone(),
        Value::String(s) if s.trim().is_empty() || s.trim().eq_ignore_ascii_case("none") => {
            Vec::new()
        }
        Value::String(s) => s
            .split(',')
            .filter(|t| !t.trim().is_empty())
            .map(|t| Value::String(t.trim().to_owned()))
            .collect(),
        Value::Number(_) => vec![value.clone()],
        other => {
            return Err(format!(
                "expected a list of HTTP status codes or \"all\", found {other}"
            ));
        }
    };
    for item in &items {
        match code(item)? {
            Some(c) => codes.push(c),
            None => return Ok(AllowedStatuses::All),
        }
    }
    Ok(AllowedStatuses::List(codes))
}

/// Which non-2xx answers reach the callback, from the spider's own list and the
/// `allowed_statuses` setting, read once per crawl; the request's meta is read per answer.
#[derive(Debug, Clone, Default)]
pub struct StatusRules {
    /// [`Spider::allowed_statuses`](crate::Spider::allowed_statuses).
    pub spider: AllowedStatuses,
    /// The `allowed_statuses` setting.
    pub setting: AllowedStatuses,
}

impl StatusRules {
    /// Whether `status` (not 2xx, not 304) reaches the callback of `request`. Scrapy's
    /// order: the request's `handle_httpstatus_all`, then its `handle_httpstatus_list`
    /// (which alone decides when present), then the setting's `all`, then the spider's list
    /// when it has one, else the setting's list.
    pub fn allows(&self, request: &Request, status: u16) -> bool {
        if request_all(request) {
            return true;
        }
        if let Some(list) = request_list(request) {
            return list.contains(&status);
        }
        if self.setting == AllowedStatuses::All {
            return true;
        }
        if !self.spider.is_none() {
            return self.spider.contains(status);
        }
        self.setting.contains(status)
    }

    /// Whether a redirect status is handed to the callback instead of followed: only when
    /// the request or the spider asks for it (as Scrapy's redirect middleware: the setting
    /// lets redirects be followed).
    pub fn keeps_redirect(&self, request: &Request, status: u16) -> bool {
        request_all(request)
            || request_list(request).is_some_and(|l| l.contains(&status))
            || self.spider.contains(status)
    }
}

fn request_all(request: &Request) -> bool {
    request
        .meta
        .get(HANDLE_HTTPSTATUS_ALL_META)
        .and_then(serde_json::Value::as_bool)
        .unwrap_or(false)
}

fn request_list(request: &Request) -> Option<Vec<u16>> {
    let list = request.meta.get(HANDLE_HTTPSTATUS_LIST_META)?;
    Some(
        list.as_array()?
            .iter()
            .filter_map(|v| v.as_u64().and_then(|n| u16::try_from(n).ok()))
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req() -> Request {
        Request::get("http://example.com/").unwrap()
    }

    #[test]
    fn text_forms_read_as_lists_or_all() {
        let read = |v: serde_json::Value| serde_json::from_value::<AllowedStatuses>(v);
        assert_eq!(
            read(serde_json::json!([404, 410])).unwrap(),
            AllowedStatuses::list([404, 410])
        );
        assert_eq!(
            read(serde_json::json!("all")).unwrap(),
            AllowedStatuses::All
        );
        assert_eq!(
            read(serde_json::json!(["all"])).unwrap(),
            AllowedStatuses::All
        );
        assert_eq!(
            read(serde_json::json!("404, 503")).unwrap(),
            AllowedStatuses::list([404, 503])
        );
        assert!(read(serde_json::json!(null)).unwrap().is_none());
        let e = read(serde_json::json!([404, 99])).unwrap_err().to_string();
        assert!(e.contains("100-599"), "{e}");
        let e = read(serde_json::json!("some")).unwrap_err().to_string();
        assert!(e.contains("\"all\""), "{e}");
        assert_eq!(
            serde_json::to_value(AllowedStatuses::All).unwrap(),
            serde_json::json!("all")
        );
    }

    #[test]
    fn the_setting_takes_lists_and_all_from_text_with_clear_errors() {
        let mut s = crate::Settings::default();
        assert!(s.allowed_statuses.is_none());
        s.set("allowed_statuses", "404, 410").unwrap();
        assert_eq!(s.allowed_statuses, AllowedStatuses::list([404, 410]));
        s.set("allowed_statuses", "all").unwrap();
        assert_eq!(s.allowed_statuses, AllowedStatuses::All);
        // From "all" back to a list, and to none.
        s.set("allowed_statuses", "503").unwrap();
        assert_eq!(s.allowed_statuses, AllowedStatuses::list([503]));
        s.set("allowed_statuses", "").unwrap();
        assert!(s.allowed_statuses.is_none());
        let e = s
            .set("allowed_statuses", "404, 9999")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("allowed_statuses") && e.contains("100-599"),
            "{e}"
        );
        // The JSON form crawler.toml gives.
        let from_toml: crate::Settings =
            serde_json::from_value(serde_json::json!({"allowed_statuses": "all"})).unwrap();
        assert_eq!(from_toml.allowed_statuses, AllowedStatuses::All);
    }

    #[test]
    fn scrapy_precedence_request_then_setting_all_then_spider_then_setting() {
        let rules = StatusRules {
            spider: AllowedStatuses::list([404]),
            setting: AllowedStatuses::list([410]),
        };
        // The spider's list replaces the setting's.
        assert!(rules.allows(&req(), 404));
        assert!(!rules.allows(&req(), 410));
        // The request's list replaces both.
        let r = req().allow_statuses([503]);
        assert!(rules.allows(&r, 503) && !rules.allows(&r, 404));
        assert!(rules.allows(&req().allow_all_statuses(), 500));
        // The setting's list applies when the spider has none.
        let setting_only = StatusRules {
            spider: AllowedStatuses::none(),
            setting: AllowedStatuses::list([410]),
        };
        assert!(setting_only.allows(&req(), 410) && !setting_only.allows(&req(), 404));
        let all = StatusRules {
            spider: AllowedStatuses::list([404]),
            setting: AllowedStatuses::All,
        };
        assert!(all.allows(&req(), 500));
        // Redirects: kept only when the request or the spider asks.
        assert!(!all.keeps_redirect(&req(), 301));
        assert!(all.keeps_redirect(&req().allow_statuses([301]), 301));
        assert!(all.keeps_redirect(&req().allow_all_statuses(), 302));
        assert!(!StatusRules::default().allows(&req(), 404));
    }
}
