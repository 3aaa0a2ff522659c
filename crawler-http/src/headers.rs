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
