//! Reading what servers say in headers: Retry-After in both of its forms, RateLimit quotas
//! in every dialect, and the server's clock (`Date`), against which absolute times are read.

use std::time::{Duration, SystemTime};

use crawler_core::{ClockOffset, RateLimitReading};

/// The longest Retry-After taken at face value; anything beyond is clamped, so a garbage or
/// hostile value cannot overflow time arithmetic. The scheduler decides whether a wait this
/// long means "skip the host".
pub const RETRY_AFTER_CEILING: Duration = Duration::from_secs(7 * 24 * 3600);

/// A server clock further than this from ours is not believed: its `Date` is broken, not
/// skewed, and correcting by it would do more harm than good.
pub const MAX_CLOCK_OFFSET: Duration = Duration::from_secs(24 * 3600);

/// `Date` has a resolution of one second and the response spent time in transit, so smaller
/// differences say nothing about the clocks.
const CLOCK_NOISE: Duration = Duration::from_secs(2);

/// Parse a Retry-After value (RFC 9110 §10.2.3): delta-seconds or an HTTP-date, turned into
/// a wait from `now`. Negative, fractional, garbage and unreadable values give `None`; a date
/// in the past gives zero. `now` should be the server's idea of now when the date form may
/// come (see [`server_now`]).
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

/// How far the clock behind a response's `Date` header is from `now` (ours), when the header
/// is readable and the difference is plausible (at most [`MAX_CLOCK_OFFSET`]). Differences
/// within the header's resolution count as none.
pub fn server_clock_offset(headers: &http::HeaderMap, now: SystemTime) -> Option<ClockOffset> {
    let date = headers.get(http::header::DATE)?.to_str().ok()?;
    let theirs = httpdate::parse_http_date(date.trim()).ok()?;
    let (amount, ahead) = match theirs.duration_since(now) {
        Ok(d) => (d, true),
        Err(e) => (e.duration(), false),
    };
    if amount > MAX_CLOCK_OFFSET {
        return None;
    }
    if amount < CLOCK_NOISE {
        return Some(ClockOffset {
            amount: Duration::ZERO,
            ahead: false,
        });
    }
    Some(ClockOffset { amount, ahead })
}

/// The server's idea of `now` (ours), from its `Date` header when that is usable: absolute
/// times it sends (an HTTP-date Retry-After, a Unix-time reset) are meant against its clock,
/// so a local clock minutes off neither erases a hold nor stretches it.
pub fn server_now(headers: &http::HeaderMap, now: SystemTime) -> SystemTime {
    match server_clock_offset(headers, now) {
        Some(ClockOffset {
            amount,
            ahead: true,
        }) => now.checked_add(amount).unwrap_or(now),
        Some(ClockOffset { amount, .. }) => now.checked_sub(amount).unwrap_or(now),
        None => now,
    }
}

/// The response's Retry-After (any status), as a wait from now, read against the server's
/// clock.
pub fn retry_after(headers: &http::HeaderMap, now: SystemTime) -> Option<Duration> {
    let value = headers.get(http::header::RETRY_AFTER)?.to_str().ok()?;
    parse_retry_after(value, server_now(headers, now))
}

/// Read a server's remaining quota from its response headers, in any dialect seen in the
/// wild; `None` when no dialect is present or readable (the caller then holds its rate).
/// Absolute resets are read against the server's `Date` (see [`server_now`]).
///
/// - the current draft's structured fields, `RateLimit: "default";r=50;t=30` with
///   `RateLimit-Policy: "default";q=100;w=60`;
/// - the earlier drafts' dictionary, `RateLimit: limit=100, remaining=50, reset=30`, keys in
///   any order, with an optional window as a member (`w=60`) or a parameter
///   (`limit=100;w=60`), else from `RateLimit-Policy: 100;w=60`;
/// - the IETF trio `RateLimit-Limit` / `RateLimit-Remaining` / `RateLimit-Reset`, with an
///   optional `RateLimit-Policy: 100;w=60`;
/// - `X-RateLimit-Limit` / `X-RateLimit-Remaining` with `X-RateLimit-Reset-After`
///   (fractional seconds) or `X-RateLimit-Reset`;
/// - Twitter's `x-rate-limit-limit` / `x-rate-limit-remaining` / `x-rate-limit-reset` (a Unix
///   time in seconds).
///
/// Every reset may be delta-seconds, a Unix time in seconds (larger than a year in seconds)
/// or in milliseconds (larger than 10^11). Several policies (comma-separated items or several
/// header lines) give several readings; the most restrictive binds: an exhausted one with the
/// longest reset, else the fewest requests per second. `remaining=0` without a reset gives
/// `reset: None` (with the policy's window when one is stated).
pub fn parse_rate_limit(headers: &http::HeaderMap, now: SystemTime) -> Option<RateLimitReading> {
    let now = server_now(headers, now);
    let all = |name: &str| all_values(headers, name);
    let policies: Vec<Policy> = all("ratelimit-policy")
        .into_iter()
        .flat_map(sf_items)
        .map(|(name, params)| Policy {
            name,
            quota: param(&params, "q").or_else(|| param(&params, "")),
            window: param(&params, "w").and_then(secs),
        })
        .collect();
    let lines = all("ratelimit");
    // A line is in one form or the other: a list item of the current draft carries `r=` as a
    // parameter, which the dictionary form never has, and a dictionary line has no item
    // named like a policy, so each reader ignores the other's lines.
    let structured = lines
        .iter()
        .flat_map(|line| sf_items(line))
        .filter_map(|(name, params)| {
            let policy = policies.iter().find(|p| p.name == name);
            reading(
                param(&params, "r")?,
                param(&params, "t").and_then(|t| reset_of(t, now)),
                policy.and_then(|p| p.quota),
                policy.and_then(|p| p.window),
            )
        });
    let dictionaries = lines
        .iter()
        .filter_map(|line| dictionary(line, policies.first(), now));
    if let Some(r) = most_restrictive(structured.chain(dictionaries).collect()) {
        return Some(r);
    }
    if let Some(r) = trio(headers, "ratelimit", "ratelimit-reset", &policies, now) {
        return Some(r);
    }
    let x = trio(headers, "x-ratelimit", "x-ratelimit-reset", &[], now).map(|x| {
        // `X-RateLimit-Reset-After` (fractional seconds, Discord) is unambiguous: prefer it.
        match all("x-ratelimit-reset-after")
            .first()
            .and_then(|v| first_number(v))
            .and_then(secs)
        {
            Some(after) => RateLimitReading {
                reset: Some(after),
                ..x
            },
            None => x,
        }
    });
    // Twitter's dialect: the reset is a Unix time in seconds, which `reset_of` recognises by
    // its size (a small value is still read as delta-seconds, the safer reading).
    let twitter = trio(headers, "x-rate-limit", "x-rate-limit-reset", &[], now);
    most_restrictive(x.into_iter().chain(twitter).collect())
}

/// One line of the earlier drafts' dictionary form, `limit=100, remaining=50, reset=30`
/// (members in any order; unknown members and a `policy` member are ignored). The window is a
/// `w` member or a `;w=` parameter on any member, else the policy's; the quota is `limit`,
/// else the policy's. `None` unless `remaining` is present and readable.
fn dictionary(line: &str, policy: Option<&Policy>, now: SystemTime) -> Option<RateLimitReading> {
    let (mut limit, mut remaining, mut reset, mut window) = (None, None, None, None);
    for member in line.split(',') {
        let mut parts = member.split(';');
        let Some((key, value)) = parts.next().and_then(|m| m.split_once('=')) else {
            continue;
        };
        let value = dictionary_number(value);
        for p in parts {
            if let Some((k, v)) = p.split_once('=')
                && k.trim().eq_ignore_ascii_case("w")
            {
                window = window.or(dictionary_number(v).and_then(secs));
            }
        }
        let slot = match key.trim().to_ascii_lowercase().as_str() {
            "limit" => &mut limit,
            "remaining" => &mut remaining,
            "reset" => &mut reset,
            "w" => {
                window = window.or(value.and_then(secs));
                continue;
            }
            _ => continue,
        };
        // The first readable value of a key stands.
        if slot.is_none() {
            *slot = value;
        }
    }
    reading(
        remaining?,
        reset.and_then(|r| reset_of(r, now)),
        limit.or(policy.and_then(|p| p.quota)),
        window.or(policy.and_then(|p| p.window)),
    )
}

/// A dictionary member's value: a non-negative finite number, possibly quoted.
fn dictionary_number(v: &str) -> Option<f64> {
    let n = v.trim().trim_matches('"').trim().parse::<f64>().ok()?;
    (n.is_finite() && n >= 0.0).then_some(n)
}

/// Every line of header `name` that is readable text.
fn all_values<'h>(headers: &'h http::HeaderMap, name: &str) -> Vec<&'h str> {
    headers
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect()
}

struct Policy {
    name: String,
    quota: Option<f64>,
    window: Option<Duration>,
}

/// `PREFIX-Limit` / `PREFIX-Remaining` / `reset_name`, each possibly listing several
/// policies (comma-separated or several lines), paired by position.
fn trio(
    headers: &http::HeaderMap,
    prefix: &str,
    reset_name: &str,
    policies: &[Policy],
    now: SystemTime,
) -> Option<RateLimitReading> {
    let all = |name: &str| all_values(headers, name);
    let numbers = |name: &str| -> Vec<Option<f64>> {
        all(name)
            .into_iter()
            .flat_map(|v| v.split(','))
            .map(first_number)
            .collect()
    };
    let remaining = numbers(&format!("{prefix}-remaining"));
    if remaining.is_empty() {
        return None;
    }
    let resets = numbers(reset_name);
    let limit_items: Vec<&str> = all(&format!("{prefix}-limit"))
        .into_iter()
        .flat_map(|v| v.split(','))
        .collect();
    let readings = remaining.iter().enumerate().filter_map(|(i, rem)| {
        let limit_item = limit_items.get(i).copied();
        // `RateLimit-Limit: 10, 10;w=1` (an old draft) states the window beside the quota.
        let window_from_limit = limit_items.iter().find_map(|item| {
            let (_, params) = sf_items(item).into_iter().next()?;
            param(&params, "w").and_then(secs)
        });
        let policy = policies.get(i).or_else(|| policies.first());
        reading(
            (*rem)?,
            resets
                .get(i)
                .or_else(|| resets.first())
                .copied()
                .flatten()
                .and_then(|r| reset_of(r, now)),
            limit_item
                .and_then(first_number)
                .or(policy.and_then(|p| p.quota)),
            policy.and_then(|p| p.window).or(window_from_limit),
        )
    });
    most_restrictive(readings.collect())
}

/// Reset values above one year in seconds are Unix times (GitHub), not delays; above 10^11
/// they are Unix times in milliseconds (10^11 seconds is the year 5138).
const UNIX_TIME_THRESHOLD: f64 = 365.0 * 24.0 * 3600.0;
const UNIX_MILLIS_THRESHOLD: f64 = 1e11;

/// A reset value as a wait from `now` (the server's now), whichever form it takes.
fn reset_of(raw: f64, now: SystemTime) -> Option<Duration> {
    if !raw.is_finite() || raw < 0.0 {
        return None;
    }
    if raw > UNIX_TIME_THRESHOLD {
        let secs = if raw > UNIX_MILLIS_THRESHOLD {
            raw / 1000.0
        } else {
            raw
        };
        let at = SystemTime::UNIX_EPOCH.checked_add(Duration::try_from_secs_f64(secs).ok()?)?;
        return Some(
            at.duration_since(now)
                .unwrap_or(Duration::ZERO)
                .min(RETRY_AFTER_CEILING),
        );
    }
    secs(raw)
}

fn reading(
    remaining: f64,
    reset: Option<Duration>,
    limit: Option<f64>,
    window: Option<Duration>,
) -> Option<RateLimitReading> {
    if !remaining.is_finite() || remaining < 0.0 {
        return None;
    }
    Some(RateLimitReading {
        remaining: remaining.min(u64::MAX as f64) as u64,
        reset: reset.map(|r| r.min(RETRY_AFTER_CEILING)),
        limit: limit.map(|l| l.min(u64::MAX as f64) as u64),
        window,
    })
}

/// The reading that binds: an exhausted quota with the longest wait, else the lowest
/// requests per second (a reading without a reset counts its window, or one second).
fn most_restrictive(readings: Vec<RateLimitReading>) -> Option<RateLimitReading> {
    readings.into_iter().min_by(|a, b| {
        let key = |r: &RateLimitReading| {
            let wait = r.reset.or(r.window).unwrap_or(Duration::from_secs(1));
            if r.remaining == 0 {
                // Exhausted sorts first; among them, the longer wait first.
                (0u8, -wait.as_secs_f64())
            } else {
                (1u8, r.remaining as f64 / wait.as_secs_f64().max(0.001))
            }
        };
        let (ka, kb) = (key(a), key(b));
        ka.0.cmp(&kb.0).then(ka.1.total_cmp(&kb.1))
    })
}

/// The leading number of a value such as `100`, `100;w=60` or ` 7 `.
fn first_number(v: &str) -> Option<f64> {
    let head = v.split([',', ';']).next()?.trim();
    let n = head.parse::<f64>().ok()?;
    (n.is_finite() && n >= 0.0).then_some(n)
}

/// Non-negative (fractional) seconds, clamped.
fn secs(n: f64) -> Option<Duration> {
    Duration::try_from_secs_f64(n)
        .ok()
        .map(|d| d.min(RETRY_AFTER_CEILING))
}

/// The items of a structured-field list: `"name";k=v;k=v` (the name may be a token, a quoted
/// string, or a bare number as in `100;w=60`, whose value is kept under the key `""`).
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
        let mut params: Vec<(String, f64)> = parts
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
        if let Ok(n) = name.parse::<f64>()
            && n.is_finite()
            && n >= 0.0
        {
            params.push((String::new(), n));
        }
        items.push((name, params));
    }
    items
}

fn param(params: &[(String, f64)], key: &str) -> Option<f64> {
    params.iter().find(|(k, _)| k == key).map(|(_, v)| *v)
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

    fn headers(pairs: &[(&'static str, &str)]) -> http::HeaderMap {
        let mut h = http::HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, http::HeaderValue::from_str(v).unwrap());
        }
        h
    }

    fn now() -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000)
    }

    fn date(offset: i64) -> String {
        let t = if offset >= 0 {
            now() + Duration::from_secs(offset as u64)
        } else {
            now() - Duration::from_secs((-offset) as u64)
        };
        httpdate::fmt_http_date(t)
    }

    #[test]
    fn http_date_retry_after_is_read_against_the_servers_clock() {
        // The server's clock is 10 minutes ahead of ours; it asks for 30 s by its clock.
        let h = headers(&[("date", &date(600)), ("retry-after", &date(630))]);
        assert_eq!(retry_after(&h, now()), Some(Duration::from_secs(30)));
        // 10 minutes behind: without the correction the wait would be 0.
        let h = headers(&[("date", &date(-600)), ("retry-after", &date(-570))]);
        assert_eq!(retry_after(&h, now()), Some(Duration::from_secs(30)));
        // Delta-seconds need no clock.
        let h = headers(&[("date", &date(600)), ("retry-after", "12")]);
        assert_eq!(retry_after(&h, now()), Some(Duration::from_secs(12)));
        // An implausible or unreadable Date is ignored: our clock is used.
        let h = headers(&[("date", &date(3 * 86_400)), ("retry-after", &date(30))]);
        assert_eq!(retry_after(&h, now()), Some(Duration::from_secs(30)));
        let h = headers(&[("date", "yesterday"), ("retry-after", &date(30))]);
        assert_eq!(retry_after(&h, now()), Some(Duration::from_secs(30)));
        // A second of difference is Date's resolution, not skew.
        let h = headers(&[("date", &date(1))]);
        assert_eq!(
            server_clock_offset(&h, now()).map(|o| o.amount),
            Some(Duration::ZERO)
        );
        let h = headers(&[("date", &date(-600))]);
        assert_eq!(
            server_clock_offset(&h, now()),
            Some(ClockOffset {
                amount: Duration::from_secs(600),
                ahead: false
            })
        );
    }

    fn read(pairs: &[(&'static str, &str)]) -> Option<(u64, Option<f64>, Option<u64>)> {
        parse_rate_limit(&headers(pairs), now())
            .map(|r| (r.remaining, r.reset.map(|d| d.as_secs_f64()), r.limit))
    }

    #[test]
    fn every_dialect() {
        assert_eq!(
            read(&[
                ("ratelimit-limit", "100"),
                ("ratelimit-remaining", "42"),
                ("ratelimit-reset", "7")
            ]),
            Some((42, Some(7.0), Some(100)))
        );
        assert_eq!(
            read(&[
                ("ratelimit-limit", "10, 10;w=1"),
                ("ratelimit-remaining", "3"),
                ("ratelimit-reset", "1"),
                ("ratelimit-policy", "10;w=1")
            ]),
            Some((3, Some(1.0), Some(10)))
        );
        assert_eq!(
            read(&[
                ("ratelimit", "\"default\";r=50;t=30"),
                ("ratelimit-policy", "\"default\";q=100;w=60")
            ]),
            Some((50, Some(30.0), Some(100)))
        );
        assert_eq!(
            read(&[
                ("x-ratelimit-limit", "60"),
                ("x-ratelimit-remaining", "59"),
                ("x-ratelimit-reset", "1700000030")
            ]),
            Some((59, Some(30.0), Some(60)))
        );
        assert_eq!(
            read(&[("x-ratelimit-remaining", "5"), ("x-ratelimit-reset", "12")]),
            Some((5, Some(12.0), None))
        );
        assert_eq!(
            read(&[
                ("x-ratelimit-remaining", "5"),
                ("x-ratelimit-reset", "1700000099"),
                ("x-ratelimit-reset-after", "2.5")
            ]),
            Some((5, Some(2.5), None))
        );
    }

    #[test]
    fn unix_and_delta_resets_in_every_dialect() {
        // Unix seconds, Unix milliseconds and delta-seconds, for each field carrying a reset.
        for (value, want) in [("1700000020", 20.0), ("1700000020500", 20.5), ("20", 20.0)] {
            assert_eq!(
                read(&[("ratelimit-remaining", "1"), ("ratelimit-reset", value)]),
                Some((1, Some(want), None)),
                "RateLimit-Reset {value}"
            );
            let structured = format!("\"d\";r=1;t={value}");
            assert_eq!(
                read(&[("ratelimit", &structured)]),
                Some((1, Some(want), None)),
                "RateLimit t={value}"
            );
            assert_eq!(
                read(&[("x-ratelimit-remaining", "1"), ("x-ratelimit-reset", value)]),
                Some((1, Some(want), None)),
                "X-RateLimit-Reset {value}"
            );
        }
    }

    #[test]
    fn unix_resets_are_read_against_the_servers_date() {
        // Our clock is 5 minutes slow: the server's Unix reset is 20 s ahead of ITS now.
        let server_now = 1_700_000_300u64;
        let reset = (server_now + 20).to_string();
        let d = date(300);
        assert_eq!(
            read(&[
                ("date", &d),
                ("x-ratelimit-remaining", "0"),
                ("x-ratelimit-reset", &reset)
            ]),
            Some((0, Some(20.0), None))
        );
    }

    #[test]
    fn several_policies_take_the_most_restrictive() {
        // Comma-separated structured items: 0.5/s vs 0.25/s, so the hourly one.
        assert_eq!(
            read(&[
                ("ratelimit", "\"burst\";r=5;t=10, \"hourly\";r=900;t=3600"),
                (
                    "ratelimit-policy",
                    "\"burst\";q=10;w=10, \"hourly\";q=1000;w=3600"
                ),
            ]),
            Some((900, Some(3600.0), Some(1000)))
        );
        // Several header lines; an exhausted one binds whatever the others say.
        assert_eq!(
            read(&[
                ("ratelimit", "\"minute\";r=50;t=30"),
                ("ratelimit", "\"day\";r=0;t=4000"),
                ("ratelimit", "\"second\";r=0;t=1"),
            ]),
            Some((0, Some(4000.0), None))
        );
        // The IETF trio listing two policies.
        assert_eq!(
            read(&[
                ("ratelimit-limit", "10, 1000"),
                ("ratelimit-remaining", "9, 0"),
                ("ratelimit-reset", "1, 600"),
            ]),
            Some((0, Some(600.0), Some(1000)))
        );
    }

    #[test]
    fn exhausted_without_a_reset_keeps_the_window() {
        let r = parse_rate_limit(
            &headers(&[
                ("ratelimit-remaining", "0"),
                ("ratelimit-policy", "50;w=10"),
            ]),
            now(),
        )
        .unwrap();
        assert_eq!(r.remaining, 0);
        assert_eq!(r.reset, None);
        assert_eq!(r.window, Some(Duration::from_secs(10)));
        assert_eq!(r.limit, Some(50));
        let r = parse_rate_limit(&headers(&[("ratelimit", "\"d\";r=0")]), now()).unwrap();
        assert_eq!((r.remaining, r.reset, r.window), (0, None, None));
        let r = parse_rate_limit(&headers(&[("x-ratelimit-remaining", "0")]), now()).unwrap();
        assert_eq!((r.remaining, r.reset), (0, None));
    }

    fn reading_of(pairs: &[(&'static str, &str)]) -> Option<RateLimitReading> {
        parse_rate_limit(&headers(pairs), now())
    }

    #[test]
    fn twitter_dialect() {
        // The reset is a Unix time in seconds, 15 minutes ahead.
        assert_eq!(
            read(&[
                ("x-rate-limit-limit", "900"),
                ("x-rate-limit-remaining", "899"),
                ("x-rate-limit-reset", "1700000900")
            ]),
            Some((899, Some(900.0), Some(900)))
        );
        // Exhausted, without a limit.
        assert_eq!(
            read(&[
                ("x-rate-limit-remaining", "0"),
                ("x-rate-limit-reset", "1700000060")
            ]),
            Some((0, Some(60.0), None))
        );
        // No reset: the remaining count stands alone.
        assert_eq!(
            read(&[("x-rate-limit-remaining", "3")]),
            Some((3, None, None))
        );
        // A reset in the past means "now".
        assert_eq!(
            read(&[
                ("x-rate-limit-remaining", "0"),
                ("x-rate-limit-reset", "1600000000")
            ]),
            Some((0, Some(0.0), None))
        );
        // Beside the X-RateLimit dialect, the more restrictive of the two binds.
        assert_eq!(
            read(&[
                ("x-ratelimit-remaining", "50"),
                ("x-ratelimit-reset", "10"),
                ("x-rate-limit-remaining", "0"),
                ("x-rate-limit-reset", "1700000030")
            ]),
            Some((0, Some(30.0), None))
        );
    }

    #[test]
    fn twitter_resets_are_read_against_the_servers_date() {
        // The server's clock is 5 minutes ahead of ours; its reset is 20 s past ITS now.
        let d = date(300);
        assert_eq!(
            read(&[
                ("date", &d),
                ("x-rate-limit-remaining", "0"),
                ("x-rate-limit-reset", "1700000320")
            ]),
            Some((0, Some(20.0), None))
        );
        // 5 minutes behind: without the correction the reset would already have passed.
        let d = date(-300);
        assert_eq!(
            read(&[
                ("date", &d),
                ("x-rate-limit-remaining", "0"),
                ("x-rate-limit-reset", "1699999720")
            ]),
            Some((0, Some(20.0), None))
        );
    }

    #[test]
    fn twitter_garbage_is_ignored() {
        for bad in ["-1", "ten", "", "NaN", "inf", "1e400", "0x10"] {
            assert_eq!(
                read(&[
                    ("x-rate-limit-remaining", bad),
                    ("x-rate-limit-reset", "1700000060")
                ]),
                None,
                "remaining {bad:?}"
            );
        }
        // An unreadable or negative reset is no reset; an unreadable limit is no limit.
        for bad in ["-30", "soon", "NaN", "1e400", "-1700000060"] {
            assert_eq!(
                read(&[
                    ("x-rate-limit-limit", "15"),
                    ("x-rate-limit-remaining", "5"),
                    ("x-rate-limit-reset", bad)
                ]),
                Some((5, None, Some(15))),
                "reset {bad:?}"
            );
        }
        assert_eq!(
            read(&[
                ("x-rate-limit-limit", "-15"),
                ("x-rate-limit-remaining", "5")
            ]),
            Some((5, None, None))
        );
        // Huge values are clamped, never overflowed.
        let r = read(&[
            ("x-rate-limit-limit", "1e300"),
            ("x-rate-limit-remaining", "99999999999999999999999"),
            ("x-rate-limit-reset", "99999999999999999999"),
        ])
        .unwrap();
        assert_eq!(r.0, u64::MAX);
        assert_eq!(r.2, Some(u64::MAX));
        assert!(
            r.1.is_none_or(|s| s <= RETRY_AFTER_CEILING.as_secs_f64()),
            "{r:?}"
        );
        let r = read(&[
            ("x-rate-limit-remaining", "1"),
            ("x-rate-limit-reset", "99999999999"),
        ])
        .unwrap();
        assert_eq!(r.1, Some(RETRY_AFTER_CEILING.as_secs_f64()));
    }

    #[test]
    fn ietf_dictionary_form() {
        assert_eq!(
            read(&[("ratelimit", "limit=100, remaining=50, reset=30")]),
            Some((50, Some(30.0), Some(100)))
        );
        // Keys in any order, any case, spaces or none.
        for line in [
            "reset=30, limit=100, remaining=50",
            "remaining=50,reset=30,limit=100",
            "Remaining=50, RESET=30, Limit=100",
            "remaining = 50 , reset = 30 , limit = 100",
        ] {
            assert_eq!(
                read(&[("ratelimit", line)]),
                Some((50, Some(30.0), Some(100))),
                "{line}"
            );
        }
        // A window as a member or as a parameter; unknown members are ignored.
        for line in [
            "limit=100, remaining=50, reset=30, w=60",
            "limit=100;w=60, remaining=50, reset=30",
            "policy=\"100;w=60\", w=60, limit=100, remaining=50, reset=30",
        ] {
            let r = reading_of(&[("ratelimit", line)]).expect(line);
            assert_eq!(r.window, Some(Duration::from_secs(60)), "{line}");
            assert_eq!(
                (r.remaining, r.reset, r.limit),
                (50, Some(Duration::from_secs(30)), Some(100)),
                "{line}"
            );
        }
        // The policy header supplies what the line does not say.
        let r = reading_of(&[
            ("ratelimit", "remaining=0, reset=12"),
            ("ratelimit-policy", "100;w=60"),
        ])
        .unwrap();
        assert_eq!(
            (r.remaining, r.reset, r.limit, r.window),
            (
                0,
                Some(Duration::from_secs(12)),
                Some(100),
                Some(Duration::from_secs(60))
            )
        );
        // Exhausted without a reset keeps the window.
        let r = reading_of(&[("ratelimit", "limit=10, remaining=0, w=5")]).unwrap();
        assert_eq!(
            (r.remaining, r.reset, r.window),
            (0, None, Some(Duration::from_secs(5)))
        );
        // Resets are read like every other dialect's: Unix seconds and milliseconds too.
        assert_eq!(
            read(&[("ratelimit", "remaining=1, reset=1700000020")]),
            Some((1, Some(20.0), None))
        );
        assert_eq!(
            read(&[("ratelimit", "remaining=1, reset=1700000020500")]),
            Some((1, Some(20.5), None))
        );
        // Several lines: the most restrictive binds.
        assert_eq!(
            read(&[
                ("ratelimit", "limit=100, remaining=50, reset=30"),
                ("ratelimit", "limit=1000, remaining=0, reset=600"),
            ]),
            Some((0, Some(600.0), Some(1000)))
        );
    }

    #[test]
    fn the_dictionary_form_does_not_break_the_others() {
        // The current draft's list form is still read as before.
        assert_eq!(
            read(&[("ratelimit", "\"default\";r=50;t=30")]),
            Some((50, Some(30.0), None))
        );
        // A dictionary line beside the trio: the `RateLimit` line is read, as the list form
        // would be.
        assert_eq!(
            read(&[
                ("ratelimit", "limit=10, remaining=2, reset=5"),
                ("ratelimit-remaining", "9"),
                ("ratelimit-reset", "1"),
            ]),
            Some((2, Some(5.0), Some(10)))
        );
        // An unreadable dictionary line falls back to the trio.
        assert_eq!(
            read(&[
                ("ratelimit", "limit=10, remaining=lots, reset=5"),
                ("ratelimit-remaining", "9"),
                ("ratelimit-reset", "1"),
            ]),
            Some((9, Some(1.0), None))
        );
        // Both forms on separate lines: the most restrictive of all.
        assert_eq!(
            read(&[
                ("ratelimit", "\"a\";r=50;t=30"),
                ("ratelimit", "remaining=0, reset=40"),
            ]),
            Some((0, Some(40.0), None))
        );
    }

    #[test]
    fn dictionary_garbage_is_ignored() {
        for line in [
            "limit=100, reset=30",
            "limit=100, remaining=-5, reset=30",
            "limit=100, remaining=fifty, reset=30",
            "limit=100, remaining=NaN, reset=30",
            "limit=100, remaining=1e400, reset=30",
            "limit=100, remaining=, reset=30",
            "remaining",
            "=50",
            ",,,",
            ";;=;=",
            "remaining=\"",
        ] {
            assert_eq!(read(&[("ratelimit", line)]), None, "{line}");
        }
        // A bad reset, limit or window is dropped; the remaining count stands.
        for line in [
            "limit=-1, remaining=5, reset=-30",
            "limit=ten, remaining=5, reset=soon",
            "limit=inf, remaining=5, reset=1e400, w=-2",
            "limit=NaN;w=NaN, remaining=5, reset=NaN",
        ] {
            let r = reading_of(&[("ratelimit", line)]).expect(line);
            assert_eq!(
                (r.remaining, r.reset, r.limit, r.window),
                (5, None, None, None),
                "{line}"
            );
        }
        // Huge values are clamped, never overflowed.
        let r = reading_of(&[(
            "ratelimit",
            "limit=1e300, remaining=99999999999999999999999, reset=9999999, w=9999999",
        )])
        .unwrap();
        assert_eq!(r.remaining, u64::MAX);
        assert_eq!(r.limit, Some(u64::MAX));
        assert_eq!(r.reset, Some(RETRY_AFTER_CEILING));
        assert_eq!(r.window, Some(RETRY_AFTER_CEILING));
        // Beyond what a duration holds: no window (and no reset), as in the other dialects.
        let r = reading_of(&[("ratelimit", "remaining=1, reset=1e300, w=1e300")]).unwrap();
        assert_eq!((r.remaining, r.reset, r.window), (1, None, None));
        // The first readable value of a repeated key stands.
        assert_eq!(
            read(&[("ratelimit", "remaining=bad, remaining=4, remaining=9")]),
            Some((4, None, None))
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
        // An unreadable reset is no reset; the remaining count still stands.
        assert_eq!(
            read(&[("ratelimit-remaining", "5"), ("ratelimit-reset", "NaN")]),
            Some((5, None, None))
        );
        assert_eq!(read(&[("ratelimit", "garbage")]), None);
        assert_eq!(
            read(&[("x-ratelimit-remaining", "5"), ("x-ratelimit-reset", "-3")]),
            Some((5, None, None))
        );
        assert_eq!(
            read(&[
                ("x-ratelimit-remaining", "5"),
                ("x-ratelimit-reset", "1e400")
            ]),
            Some((5, None, None))
        );
        // A reset far in the future is clamped, not overflowed.
        let r = read(&[("ratelimit-remaining", "1"), ("ratelimit-reset", "9999999")]).unwrap();
        assert_eq!(r.1, Some(RETRY_AFTER_CEILING.as_secs_f64()));
        // A Unix reset in the past means "now".
        assert_eq!(
            read(&[
                ("x-ratelimit-remaining", "0"),
                ("x-ratelimit-reset", "1600000000")
            ]),
            Some((0, Some(0.0), None))
        );
    }
}
