//! Sitemap `<lastmod>` values: the W3C datetime profile of ISO 8601.
//!
//! Accepted forms (<https://www.w3.org/TR/NOTE-datetime>):
//!
//! | form | example |
//! |---|---|
//! | year | `2024` |
//! | year and month | `2024-05` |
//! | date | `2024-05-17` |
//! | date, hours and minutes | `2024-05-17T13:20+02:00` |
//! | … and seconds | `2024-05-17T13:20:05Z` |
//! | … and a decimal fraction of a second | `2024-05-17T13:20:05.123456Z` |
//!
//! Sitemaps in the wild are sloppy, so a lowercase `t`/`z`, a space instead of `T`, an offset
//! without its colon (`+0200`), a missing zone designator (read as UTC) and surrounding
//! whitespace are tolerated. Out-of-range fields (month 13, February 30, hour 24, minute 60)
//! and anything else give `None`: a lastmod we cannot read is treated as "unknown", which makes
//! the caller fetch the page rather than wrongly skip it.

/// Parse a W3C datetime into seconds since the Unix epoch (UTC). A date without a time means
/// its first instant in UTC (`2024-05` is 2024-05-01T00:00:00Z); fractions of a second are
/// truncated. Returns `None` for anything that is not a valid date.
///
/// ```
/// use crawler_http::parse_lastmod;
///
/// assert_eq!(parse_lastmod("1970-01-02"), Some(86_400));
/// assert_eq!(parse_lastmod("2024-01-01T01:00:00+01:00"), parse_lastmod("2024-01-01"));
/// assert_eq!(parse_lastmod("2024-02-30"), None);
/// ```
pub fn parse_lastmod(value: &str) -> Option<i64> {
    let mut c = Cursor {
        s: value.trim().as_bytes(),
        at: 0,
    };
    let year = c.digits(4)?;
    let (mut month, mut day) = (1, 1);
    let (mut hour, mut minute, mut second, mut offset) = (0, 0, 0, 0i64);
    if c.eat(b'-') {
        month = c.digits(2)?;
        if !(1..=12).contains(&month) {
            return None;
        }
        if c.eat(b'-') {
            day = c.digits(2)?;
            if day < 1 || day > days_in_month(year, month) {
                return None;
            }
            if c.eat_any(b"Tt ") {
                hour = c.digits(2)?;
                c.expect(b':')?;
                minute = c.digits(2)?;
                if c.eat(b':') {
                    second = c.digits(2)?;
                    if c.eat(b'.') {
                        // Fractions only refine within the second, so any number of digits is
                        // read and dropped; at least one is required.
                        if c.skip_digits() == 0 {
                            return None;
                        }
                    }
                }
                if hour > 23 || minute > 59 || second > 59 {
                    return None;
                }
                offset = c.zone()?;
            }
        }
    }
    if !c.done() {
        return None;
    }
    let days = days_from_civil(year, month, day);
    Some(days * 86_400 + hour * 3_600 + minute * 60 + second - offset)
}

/// A panic-free reader over the bytes of the value.
struct Cursor<'a> {
    s: &'a [u8],
    at: usize,
}

impl Cursor<'_> {
    fn peek(&self) -> Option<u8> {
        self.s.get(self.at).copied()
    }

    fn done(&self) -> bool {
        self.at >= self.s.len()
    }

    fn eat(&mut self, b: u8) -> bool {
        self.eat_any(&[b])
    }

    fn eat_any(&mut self, set: &[u8]) -> bool {
        match self.peek() {
            Some(b) if set.contains(&b) => {
                self.at += 1;
                true
            }
            _ => false,
        }
    }

    fn expect(&mut self, b: u8) -> Option<()> {
        self.eat(b).then_some(())
    }

    /// Exactly `n` ASCII digits as a number.
    fn digits(&mut self, n: usize) -> Option<i64> {
        let mut v = 0i64;
        for _ in 0..n {
            let d = self.peek().filter(u8::is_ascii_digit)?;
            v = v * 10 + i64::from(d - b'0');
            self.at += 1;
        }
        Some(v)
    }

    fn skip_digits(&mut self) -> usize {
        let start = self.at;
        while self.peek().is_some_and(|b| b.is_ascii_digit()) {
            self.at += 1;
        }
        self.at - start
    }

    /// The zone designator as seconds east of UTC: `Z`, `+hh:mm`, `-hh:mm`, `+hhmm`, or
    /// nothing (UTC).
    fn zone(&mut self) -> Option<i64> {
        if self.eat_any(b"Zz") || self.done() {
            return Some(0);
        }
        let sign = match self.peek()? {
            b'+' => 1,
            b'-' => -1,
            _ => return None,
        };
        self.at += 1;
        let hours = self.digits(2)?;
        self.eat(b':');
        let minutes = self.digits(2)?;
        if hours > 23 || minutes > 59 {
            return None;
        }
        Some(sign * (hours * 3_600 + minutes * 60))
    }
}

fn is_leap(year: i64) -> bool {
    (year % 4 == 0 && year % 100 != 0) || year % 400 == 0
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if is_leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days from 1970-01-01 to the given proleptic Gregorian date (Howard Hinnant's algorithm,
/// exact for every year we accept).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2024-05-17T00:00:00Z, computed independently (`date -u -d 2024-05-17 +%s`).
    const MAY_17: i64 = 1_715_904_000;

    #[test]
    fn every_form() {
        assert_eq!(parse_lastmod("1970"), Some(0));
        assert_eq!(parse_lastmod("2024"), Some(1_704_067_200));
        assert_eq!(parse_lastmod("2024-05"), Some(1_714_521_600));
        assert_eq!(parse_lastmod("2024-05-17"), Some(MAY_17));
        let hm = MAY_17 + 13 * 3600 + 20 * 60;
        assert_eq!(parse_lastmod("2024-05-17T13:20Z"), Some(hm));
        assert_eq!(parse_lastmod("2024-05-17T15:20+02:00"), Some(hm));
        assert_eq!(parse_lastmod("2024-05-17T08:20-05:00"), Some(hm));
        assert_eq!(parse_lastmod("2024-05-17T13:20:05Z"), Some(hm + 5));
        assert_eq!(parse_lastmod("2024-05-17T13:20:05.5Z"), Some(hm + 5));
        assert_eq!(
            parse_lastmod("2024-05-17T13:20:05.123456789012+00:00"),
            Some(hm + 5)
        );
        assert_eq!(parse_lastmod("2024-05-17T14:20:05.9+01:00"), Some(hm + 5));
    }

    #[test]
    fn tolerated_variants() {
        let hms = MAY_17 + 13 * 3600 + 20 * 60 + 5;
        for v in [
            "2024-05-17t13:20:05z",
            "2024-05-17 13:20:05Z",
            "  2024-05-17T13:20:05Z\n",
            "2024-05-17T15:20:05+0200",
            "2024-05-17T13:20:05",
        ] {
            assert_eq!(parse_lastmod(v), Some(hms), "{v:?}");
        }
    }

    #[test]
    fn calendar_edges() {
        assert_eq!(parse_lastmod("2024-02-29"), Some(1_709_164_800));
        assert_eq!(parse_lastmod("2000-02-29"), Some(951_782_400));
        assert_eq!(parse_lastmod("1969-12-31T23:59:59Z"), Some(-1));
        assert_eq!(parse_lastmod("1900-01-01"), Some(-2_208_988_800));
        assert_eq!(parse_lastmod("9999-12-31T23:59:59Z"), Some(253_402_300_799));
        // A zone offset may move the instant across a day boundary.
        assert_eq!(parse_lastmod("2024-05-17T00:30+01:00"), Some(MAY_17 - 1800));
    }

    #[test]
    fn rejects() {
        for bad in [
            "",
            "   ",
            "24",
            "20245",
            "2024-",
            "2024-13",
            "2024-00",
            "2024-5",
            "2024-05-",
            "2024-05-00",
            "2024-05-32",
            "2023-02-29",
            "2024-02-30",
            "1900-02-29",
            "2024-04-31",
            "2024-05-17T",
            "2024-05-17T13",
            "2024-05-17T25:00Z",
            "2024-05-17T24:00Z",
            "2024-05-17T13:60Z",
            "2024-05-17T13:20:61Z",
            "2024-05-17T13:20:05.Z",
            "2024-05-17T13:20:05,5Z",
            "2024-05-17T13:20+25:00",
            "2024-05-17T13:20+01:60",
            "2024-05-17T13:20+1",
            "2024-05-17T13:20ZZ",
            "2024-05-17T13:20:05Z garbage",
            "2024-05-17X13:20Z",
            "May 17, 2024",
            "Fri, 17 May 2024 13:20:05 GMT",
            "2024-05-17T13:20:05+02:00:00",
            "٢٠٢٤-05-17",
            "-2024-05-17",
            "+2024",
        ] {
            assert_eq!(parse_lastmod(bad), None, "{bad:?}");
        }
    }
}
