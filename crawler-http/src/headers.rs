//! Reading what servers say in headers: Retry-After in both of its forms.

use std::time::{Duration, SystemTime};

/// The longest Retry-After taken at face value; anything beyond is clamped, so a garbage or
/// hostile value cannot overflow time arithmetic. The scheduler decides whether a wait this
/// long means "skip the host".
pub const RETRY_AFTER_CEILING: Duration = Duration::from_secs(7 * 24 * 3600);

/// Parse a Retry-After value (RFC 9110 §10.2.3): delta-seconds or an HTTP-date, turned into
/// a wait from `now`. Negative, fractional, garbage and unreadable values give `None`; a date
/// in the past gives zero.
pub fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if value.is_empty() {
        return None;
    }
    if value.bytes().all(|b| b.is_ascii_digit()) {
        // Digits only; a value too long for u64 is still "a very long time".
        let secs = value.parse::<u64>().unwrap_or(u64::MAX);
        return Some(Duration::from_secs(secs).min(RETRY_AFTER_CEILING));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(
        at.duration_since(now)
            .unwrap_or(Duration::ZERO)
            .min(RETRY_AFTER_CEILING),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_forms_and_garbage() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        assert_eq!(parse_retry_after("30", now), Some(Duration::from_secs(30)));
        assert_eq!(parse_retry_after(" 0 ", now), Some(Duration::ZERO));
        let date = httpdate::fmt_http_date(now + Duration::from_secs(90));
        assert_eq!(parse_retry_after(&date, now), Some(Duration::from_secs(90)));
        let past = httpdate::fmt_http_date(now - Duration::from_secs(90));
        assert_eq!(parse_retry_after(&past, now), Some(Duration::ZERO));
        for bad in ["", "-5", "1.5", "soon", "Mon, 99 Foo 2024", "30s"] {
            assert_eq!(parse_retry_after(bad, now), None, "{bad}");
        }
        assert_eq!(
            parse_retry_after("99999999999999999999999", now),
            Some(RETRY_AFTER_CEILING)
        );
        let far = "Fri, 31 Dec 9999 23:59:59 GMT";
        assert_eq!(parse_retry_after(far, now), Some(RETRY_AFTER_CEILING));
    }
}

/// Read a server's remaining quota from its response headers, in any dialect seen in the
/// wild; `None` when no dialect is present or readable (the caller then holds its rate).
///
/// - the current draft's structured fields, `RateLimit: "default";r=50;t=30` with
///   `RateLimit-Policy: "default";q=100;w=60` (several comma-separated items allowed; the most
///   restrictive one, lowest remaining per second, wins);
/// - the IETF trio `RateLimit-Limit` / `RateLimit-Remaining` / `RateLimit-Reset`
///   (delta-seconds);
/// - `X-RateLimit-Limit` / `X-RateLimit-Remaining` with `X-RateLimit-Reset-After`
///   (fractional seconds) or `X-RateLimit-Reset`, which is a Unix time when it is larger than
///   a year in seconds and delta-seconds otherwise.
pub fn parse_rate_limit(
    headers: &http::HeaderMap,
    now: SystemTime,
) -> Option<crawler_core::RateLimitReading> {
    let get = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    if let Some(r) = get("ratelimit").and_then(|v| structured(v, get("ratelimit-policy"))) {
        return Some(r);
    }
    if let (Some(rem), Some(reset)) = (get("ratelimit-remaining"), get("ratelimit-reset")) {
        let limit = get("ratelimit-limit")
            .and_then(first_number)
            .map(|n| n as u64);
        return reading(first_number(rem)?, delta(reset)?, limit);
    }
    let rem = get("x-ratelimit-remaining")?;
    let reset = match get("x-ratelimit-reset-after").and_then(delta) {
        Some(d) => d,
        None => {
            let raw = get("x-ratelimit-reset")?.trim().parse::<f64>().ok()?;
            if !raw.is_finite() || raw < 0.0 {
                return None;
            }
            if raw > UNIX_TIME_THRESHOLD {
                let at =
                    SystemTime::UNIX_EPOCH.checked_add(Duration::try_from_secs_f64(raw).ok()?)?;
                at.duration_since(now).unwrap_or(Duration::ZERO)
            } else {
                Duration::try_from_secs_f64(raw).ok()?
            }
        }
    };
    let limit = get("x-ratelimit-limit")
        .and_then(first_number)
        .map(|n| n as u64);
    reading(first_number(rem)?, reset, limit)
}

/// Reset values above one year in seconds are Unix times (GitHub), not delays.
const UNIX_TIME_THRESHOLD: f64 = 365.0 * 24.0 * 3600.0;

fn reading(
    remaining: f64,
    reset: Duration,
    limit: Option<u64>,
) -> Option<crawler_core::RateLimitReading> {
    if !remaining.is_finite() || remaining < 0.0 {
        return None;
    }
    Some(crawler_core::RateLimitReading {
        remaining: remaining.min(u64::MAX as f64) as u64,
        reset: Some(reset.min(RETRY_AFTER_CEILING)),
        limit,
        window: None,
    })
}

/// The leading number of a value such as `100`, `100, 100;w=60` or ` 7 `.
fn first_number(v: &str) -> Option<f64> {
    let head = v.split([',', ';']).next()?.trim();
    let n = head.parse::<f64>().ok()?;
    (n.is_finite() && n >= 0.0).then_some(n)
}

/// Non-negative (fractional) seconds.
fn delta(v: &str) -> Option<Duration> {
    let n = first_number(v)?;
    Duration::try_from_secs_f64(n)
        .ok()
        .map(|d| d.min(RETRY_AFTER_CEILING))
}

/// One item of a structured-field list: `"name";k=v;k=v` (the name may be a token or a
/// quoted string). Returns the name and its integer parameters.
fn sf_items(v: &str) -> Vec<(String, Vec<(String, f64)>)> {
    let mut items = Vec::new();
    for item in v.split(',') {
        let mut parts = item.split(';');
        let name = parts
            .next()
            .unwrap_or("")
            .trim()
            .trim_matches('"')
            .to_owned();
        let params = parts
            .filter_map(|p| {
                let (k, val) = p.split_once('=')?;
                let val = val
                    .trim()
                    .parse::<f64>()
                    .ok()
                    .filter(|n| n.is_finite() && *n >= 0.0)?;
                Some((k.trim().to_ascii_lowercase(), val))
            })
            .collect();
        items.push((name, params));
    }
    items
}

fn param(params: &[(String, f64)], key: &str) -> Option<f64> {
    params.iter().find(|(k, _)| k == key).map(|(_, v)| *v)
}

/// `RateLimit: "default";r=50;t=30` (+ optional `RateLimit-Policy: "default";q=100;w=60`).
/// With several items, the one allowing the fewest requests per second binds.
fn structured(ratelimit: &str, policy: Option<&str>) -> Option<crawler_core::RateLimitReading> {
    let policies = policy.map(sf_items).unwrap_or_default();
    sf_items(ratelimit)
        .into_iter()
        .filter_map(|(name, params)| {
            let r = param(&params, "r")?;
            let t = param(&params, "t").unwrap_or(0.0);
            let limit = policies
                .iter()
                .find(|(n, _)| *n == name)
                .and_then(|(_, p)| param(p, "q"))
                .map(|q| q as u64);
            reading(r, Duration::try_from_secs_f64(t).ok()?, limit)
        })
        .min_by(|a, b| per_sec(a).total_cmp(&per_sec(b)))
}

fn per_sec(r: &crawler_core::RateLimitReading) -> f64 {
    r.remaining as f64 / r.reset.map_or(0.0, |d| d.as_secs_f64()).max(0.001)
}

#[cfg(test)]
mod rate_limit_tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> http::HeaderMap {
        let mut h = http::HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, http::HeaderValue::from_str(v).unwrap());
        }
        h
    }

    fn read(pairs: &[(&'static str, &str)]) -> Option<(u64, f64, Option<u64>)> {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        parse_rate_limit(&headers(pairs), now).map(|r| {
            (
                r.remaining,
                r.reset.map_or(0.0, |d| d.as_secs_f64()),
                r.limit,
            )
        })
    }

    #[test]
    fn every_dialect() {
        assert_eq!(
            read(&[
                ("ratelimit-limit", "100"),
                ("ratelimit-remaining", "42"),
                ("ratelimit-reset", "7")
            ]),
            Some((42, 7.0, Some(100)))
        );
        assert_eq!(
            read(&[
                ("ratelimit-limit", "10, 10;w=1"),
                ("ratelimit-remaining", "3"),
                ("ratelimit-reset", "1"),
                ("ratelimit-policy", "10;w=1")
            ]),
            Some((3, 1.0, Some(10)))
        );
        assert_eq!(
            read(&[
                ("ratelimit", "\"default\";r=50;t=30"),
                ("ratelimit-policy", "\"default\";q=100;w=60")
            ]),
            Some((50, 30.0, Some(100)))
        );
        // Several policies: the one allowing least per second binds (5/10s < 900/3600s? no:
        // 0.5/s vs 0.25/s, so the hourly one).
        assert_eq!(
            read(&[
                ("ratelimit", "\"burst\";r=5;t=10, \"hourly\";r=900;t=3600"),
                (
                    "ratelimit-policy",
                    "\"burst\";q=10;w=10, \"hourly\";q=1000;w=3600"
                ),
            ]),
            Some((900, 3600.0, Some(1000)))
        );
        assert_eq!(
            read(&[
                ("x-ratelimit-limit", "60"),
                ("x-ratelimit-remaining", "59"),
                ("x-ratelimit-reset", "1700000030")
            ]),
            Some((59, 30.0, Some(60)))
        );
        assert_eq!(
            read(&[("x-ratelimit-remaining", "5"), ("x-ratelimit-reset", "12")]),
            Some((5, 12.0, None))
        );
        assert_eq!(
            read(&[
                ("x-ratelimit-remaining", "5"),
                ("x-ratelimit-reset", "1700000099"),
                ("x-ratelimit-reset-after", "2.5")
            ]),
            Some((5, 2.5, None))
        );
    }

    #[test]
    fn garbage_is_ignored() {
        assert_eq!(read(&[]), None);
        assert_eq!(
            read(&[("ratelimit-remaining", "-1"), ("ratelimit-reset", "5")]),
            None
        );
        assert_eq!(
            read(&[("ratelimit-remaining", "ten"), ("ratelimit-reset", "5")]),
            None
        );
        assert_eq!(
            read(&[("ratelimit-remaining", "5"), ("ratelimit-reset", "NaN")]),
            None
        );
        assert_eq!(read(&[("ratelimit", "garbage")]), None);
        assert_eq!(
            read(&[("x-ratelimit-remaining", "5"), ("x-ratelimit-reset", "-3")]),
            None
        );
        assert_eq!(
            read(&[
                ("x-ratelimit-remaining", "5"),
                ("x-ratelimit-reset", "1e400")
            ]),
            None
        );
        // A reset far in the future is clamped, not overflowed.
        let r = read(&[
            ("ratelimit-remaining", "1"),
            ("ratelimit-reset", "99999999999999"),
        ])
        .unwrap();
        assert_eq!(r.1, RETRY_AFTER_CEILING.as_secs_f64());
        // A Unix reset in the past means "now".
        assert_eq!(
            read(&[
                ("x-ratelimit-remaining", "0"),
                ("x-ratelimit-reset", "1600000000")
            ]),
            Some((0, 0.0, None))
        );
    }
}
