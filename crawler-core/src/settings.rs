//! Settings: every knob of a crawl, with polite defaults.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::{Error, ErrorKind, Result};

/// The crawl's settings. Every field has a documented, polite default.
///
/// Durations are written as `"500ms"`, `"2s"`, `"1m"`. Settings are set in code, or by key
/// and text value with [`Settings::set`] (what `-s key=value` and `custom_settings` use).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Settings {
    /// The User-Agent sent with every request and matched against robots.txt groups.
    /// Default: `crawler/0.1 (+https://example.invalid/crawler)`; set it to name your crawl
    /// and give operators a way to reach you.
    pub user_agent: String,
    /// Requests in flight across all hosts. Default 16.
    pub concurrency: usize,
    /// Requests in flight to one host. Default 1.
    pub concurrency_per_host: usize,
    /// Delay between requests to one host. Default 1s.
    #[serde(with = "humantime_serde")]
    pub download_delay: Duration,
    /// Randomise each delay between 0.5x and 1.5x, so requests do not beat in lockstep.
    /// Default true.
    pub randomize_delay: bool,
    /// Total time allowed for one request, body included. Default 30s.
    #[serde(with = "humantime_serde")]
    pub download_timeout: Duration,
    /// Time allowed to open a connection. Default 10s.
    #[serde(with = "humantime_serde")]
    pub connect_timeout: Duration,
    /// Largest body accepted, in bytes after decompression; larger bodies are aborted while
    /// streaming and counted as `too_large`. Default 10 MiB.
    pub max_body_size: u64,
    /// Redirects followed per request before failing with `too_many_redirects`. Default 10.
    pub max_redirects: usize,
    /// Obey robots.txt. Default true.
    pub obey_robots: bool,
    /// Deepest link depth followed; 0 means no limit. Default 0.
    pub depth_limit: u32,
    /// Longest URL accepted; longer ones are filtered as `url_too_long`. Default 2083.
    pub max_url_length: usize,
    /// How often progress is logged when no terminal shows it live. Default 5s.
    #[serde(with = "humantime_serde")]
    pub progress_interval: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            user_agent: "crawler/0.1 (+https://example.invalid/crawler)".to_owned(),
            concurrency: 16,
            concurrency_per_host: 1,
            download_delay: Duration::from_secs(1),
            randomize_delay: true,
            download_timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(10),
            max_body_size: 10 * 1024 * 1024,
            max_redirects: 10,
            obey_robots: true,
            depth_limit: 0,
            max_url_length: 2083,
            progress_interval: Duration::from_secs(5),
        }
    }
}

impl Settings {
    /// The names of all settings, in declaration order.
    pub fn keys() -> Vec<String> {
        match serde_json::to_value(Settings::default()) {
            Ok(serde_json::Value::Object(map)) => map.keys().cloned().collect(),
            _ => Vec::new(),
        }
    }

    /// Set one setting from its text form, as given on a command line: numbers, `true`/`false`,
    /// durations like `500ms`, or plain text. Unknown keys and values of the wrong type are
    /// errors that name the key (and the nearest valid key for a typo).
    pub fn set(&mut self, key: &str, value: &str) -> Result<()> {
        let mut map = match serde_json::to_value(&*self) {
            Ok(serde_json::Value::Object(map)) => map,
            _ => return Err(Error::new(ErrorKind::Settings, "settings are not a map")),
        };
        let Some(slot) = map.get_mut(key) else {
            return Err(unknown_key(key));
        };
        // Values keep the JSON type of the current value, so "10" for a string stays text.
        *slot = match slot {
            serde_json::Value::String(_) => serde_json::Value::String(value.to_owned()),
            _ => serde_json::from_str(value.trim())
                .unwrap_or_else(|_| serde_json::Value::String(value.to_owned())),
        };
        let updated: Settings =
            serde_json::from_value(serde_json::Value::Object(map)).map_err(|e| {
                Error::new(
                    ErrorKind::Settings,
                    format!("invalid value '{value}' for {key}: {e}"),
                )
            })?;
        updated.validate()?;
        *self = updated;
        Ok(())
    }

    /// Check ranges that types alone cannot express.
    pub fn validate(&self) -> Result<()> {
        let bad = |key: &str, why: &str| {
            Err(Error::new(
                ErrorKind::Settings,
                format!("setting {key} {why}"),
            ))
        };
        if self.concurrency == 0 {
            return bad("concurrency", "must be at least 1");
        }
        if self.concurrency_per_host == 0 {
            return bad("concurrency_per_host", "must be at least 1");
        }
        if self.download_timeout.is_zero() {
            return bad("download_timeout", "must be longer than 0s");
        }
        if self.max_body_size == 0 {
            return bad("max_body_size", "must be at least 1 byte");
        }
        if self.user_agent.trim().is_empty() {
            return bad("user_agent", "must not be empty");
        }
        Ok(())
    }
}

fn unknown_key(key: &str) -> Error {
    let keys = Settings::keys();
    let nearest = keys
        .iter()
        .map(|k| (strsim::jaro_winkler(k, key), k))
        .filter(|(score, _)| *score > 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0));
    let hint = match nearest {
        Some((_, k)) => format!("; did you mean '{k}'?"),
        None => format!("; valid keys: {}", keys.join(", ")),
    };
    Error::new(
        ErrorKind::Settings,
        format!("unknown setting '{key}'{hint}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_parses_each_type() {
        let mut s = Settings::default();
        s.set("concurrency", "64").unwrap();
        s.set("download_delay", "250ms").unwrap();
        s.set("obey_robots", "false").unwrap();
        s.set("user_agent", "mybot/1.0").unwrap();
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
