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
    /// How each host is paced: `adaptive` (start at `start_rate`, adapt to what the server
    /// says and how it responds), `autothrottle` (Scrapy-compatible latency-based delay), or
    /// `fixed` (`download_delay` between requests, `concurrency_per_host` in flight).
    /// Default `adaptive`.
    pub throttle: ThrottleMode,
    /// Fixed mode: the delay between requests to one host. Adaptive modes: a floor on the gap
    /// between requests. Default 0s.
    #[serde(with = "humantime_serde")]
    pub download_delay: Duration,
    /// Fixed mode: randomise each delay between 0.5x and 1.5x, so requests do not beat in
    /// lockstep. Default true.
    pub randomize_delay: bool,
    /// Adaptive mode: the rate a new host starts at, requests/s. Default 1.
    pub start_rate: f64,
    /// Adaptive mode: the lowest rate a host is slowed to, requests/s. Default 0.05.
    pub min_rate: f64,
    /// The highest rate any host is sent, requests/s, whatever the server allows.
    /// Default 10.
    pub max_rate: f64,
    /// Requests that may go back to back under `max_rate` before pacing applies. Default 1.
    pub burst: u32,
    /// Adaptive mode: a latency rise smaller than this is noise, not load. Default 50ms.
    #[serde(with = "humantime_serde")]
    pub latency_tolerance: Duration,
    /// A Retry-After (or RateLimit reset) longer than this skips the host for the run.
    /// Default 10m.
    #[serde(with = "humantime_serde")]
    pub max_retry_after: Duration,
    /// Added to every wait a server asks for, to absorb clock and network skew. Default 250ms.
    #[serde(with = "humantime_serde")]
    pub hold_margin: Duration,
    /// Text that marks a 200 response as a challenge or block page (case-insensitive,
    /// searched in the first 64 KiB of HTML bodies).
    pub soft_block_markers: Vec<String>,
    /// How long a host is paused after a challenge page. Default 5m.
    #[serde(with = "humantime_serde")]
    pub soft_block_pause: Duration,
    /// After a soft-block pause, resume at this fraction of the previous rate. Default 0.25.
    pub soft_block_resume: f64,
    /// AutoThrottle mode: the average number of requests to have in flight to each host.
    /// Default 1.
    pub autothrottle_target_concurrency: f64,
    /// AutoThrottle mode: the longest delay. Default 60s.
    #[serde(with = "humantime_serde")]
    pub autothrottle_max_delay: Duration,
    /// Attempts after the first for a retryable failure. Default 2.
    pub retry_times: u32,
    /// HTTP statuses retried (connection errors and timeouts always are).
    /// Default 408, 429, 500, 502, 503, 504, 522, 524.
    pub retry_http_codes: Vec<u16>,
    /// Retry backoff: attempt n waits a random time up to min(cap, base x 2^n). Default 1s.
    #[serde(with = "humantime_serde")]
    pub retry_backoff_base: Duration,
    /// Retry backoff cap. Default 60s.
    #[serde(with = "humantime_serde")]
    pub retry_backoff_cap: Duration,
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
    /// How long a fetched robots.txt is trusted. Default 24h.
    #[serde(with = "humantime_serde")]
    pub robots_ttl: Duration,
    /// Refuse requests to private, loopback and link-local addresses (for crawls that follow
    /// untrusted links). Off by default so local servers (like the lab) can be crawled.
    pub deny_private_addresses: bool,
    /// The job directory: persistent frontier, seen set, validators and stats, so a crawl can
    /// be paused, resumed and survive a crash. Unset: everything is in memory.
    pub job_dir: Option<String>,
    /// Send If-None-Match / If-Modified-Since from validators stored by earlier runs (needs a
    /// job directory). Default true.
    pub conditional_requests: bool,
    /// Keep full responses in the job directory and replay them instead of fetching (a
    /// development cache, like Scrapy's HTTPCACHE). Default false.
    pub http_cache: bool,
    /// Write every request that failed (after retries) to this JSON Lines file: URL, reason,
    /// attempts, last status. Unset: no file.
    pub failures_file: Option<String>,
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
            throttle: ThrottleMode::Adaptive,
            download_delay: Duration::ZERO,
            randomize_delay: true,
            start_rate: 1.0,
            min_rate: 0.05,
            max_rate: 10.0,
            burst: 1,
            latency_tolerance: Duration::from_millis(50),
            max_retry_after: Duration::from_secs(600),
            hold_margin: Duration::from_millis(250),
            soft_block_markers: [
                // Specific to challenge pages; words like "captcha" alone also appear on
                // ordinary pages and would pause healthy hosts.
                "unusual traffic",
                "just a moment...",
                "cf-challenge",
                "/cdn-cgi/challenge-platform/",
                "are you a robot",
            ]
            .map(String::from)
            .to_vec(),
            soft_block_pause: Duration::from_secs(300),
            soft_block_resume: 0.25,
            autothrottle_target_concurrency: 1.0,
            autothrottle_max_delay: Duration::from_secs(60),
            retry_times: 2,
            retry_http_codes: vec![408, 429, 500, 502, 503, 504, 522, 524],
            retry_backoff_base: Duration::from_secs(1),
            retry_backoff_cap: Duration::from_secs(60),
            download_timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(10),
            max_body_size: 10 * 1024 * 1024,
            max_redirects: 10,
            obey_robots: true,
            depth_limit: 0,
            max_url_length: 2083,
            robots_ttl: Duration::from_secs(24 * 3600),
            deny_private_addresses: false,
            job_dir: None,
            conditional_requests: true,
            http_cache: false,
            failures_file: None,
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
        let scalar = |v: &str| {
            serde_json::from_str(v.trim())
                .unwrap_or_else(|_| serde_json::Value::String(v.trim().to_owned()))
        };
        *slot = match slot {
            serde_json::Value::String(_) => serde_json::Value::String(value.to_owned()),
            // Lists are written "a,b,c" on a command line (or as a JSON array).
            serde_json::Value::Array(_) if !value.trim_start().starts_with('[') => {
                serde_json::Value::Array(
                    value
                        .split(',')
                        .filter(|v| !v.trim().is_empty())
                        .map(scalar)
                        .collect(),
                )
            }
            _ => scalar(value),
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
        let rate_ok = |r: f64| r.is_finite() && r > 0.0;
        if !rate_ok(self.min_rate) || !rate_ok(self.start_rate) || !rate_ok(self.max_rate) {
            return bad(
                "min_rate, start_rate and max_rate",
                "must be positive numbers",
            );
        }
        if self.min_rate > self.max_rate {
            return bad("min_rate", "must not exceed max_rate");
        }
        if self.burst == 0 {
            return bad("burst", "must be at least 1");
        }
        if self.soft_block_resume.is_nan()
            || self.soft_block_resume <= 0.0
            || self.soft_block_resume > 1.0
        {
            return bad("soft_block_resume", "must be in (0, 1]");
        }
        if self.autothrottle_target_concurrency.is_nan()
            || self.autothrottle_target_concurrency <= 0.0
        {
            return bad("autothrottle_target_concurrency", "must be positive");
        }
        if self.user_agent.trim().is_empty() {
            return bad("user_agent", "must not be empty");
        }
        Ok(())
    }
}

/// How hosts are paced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ThrottleMode {
    /// Adapt each host's rate to its responses and headers (the default).
    Adaptive,
    /// Scrapy's AutoThrottle: delay from latency and a target concurrency.
    Autothrottle,
    /// A fixed delay and concurrency per host.
    Fixed,
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
