//! Small helpers shared by the site generators: deterministic hashing, formatting into byte
//! buffers, and calendar arithmetic for sitemap dates.

use std::fmt;

/// The splitmix64 finaliser: cheap, well mixed, and stable across platforms and releases,
/// which is what determinism across runs needs (std's hashers promise neither).
pub(crate) fn mix(mut x: u64) -> u64 {
    x ^= x >> 30;
    x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^= x >> 27;
    x = x.wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Hash of two words, order-sensitive.
pub(crate) fn hash2(a: u64, b: u64) -> u64 {
    mix(a ^ mix(b.wrapping_add(0x9e37_79b9_7f4a_7c15)))
}

/// Hash of three words, order-sensitive.
pub(crate) fn hash3(a: u64, b: u64, c: u64) -> u64 {
    hash2(hash2(a, b), c)
}

/// FNV-1a over the bytes, then mixed with the seed.
pub(crate) fn hash_str(seed: u64, s: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    hash2(seed, h)
}

/// Maps a hash to `[0, 1)`.
pub(crate) fn unit(h: u64) -> f64 {
    (h >> 11) as f64 / (1u64 << 53) as f64
}

/// Lets `write!` target a `Vec<u8>` through `fmt::Write`; writing to memory cannot fail, so the
/// `put!` macro below discards the always-`Ok` result.
pub(crate) struct Sink<'a>(pub &'a mut Vec<u8>);

impl fmt::Write for Sink<'_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.0.extend_from_slice(s.as_bytes());
        Ok(())
    }
}

/// `put!(buf, "fmt", args..)` appends formatted text to a `Vec<u8>`.
macro_rules! put {
    ($buf:expr, $($arg:tt)*) => {{
        let _ = ::std::fmt::Write::write_fmt(
            &mut $crate::util::Sink($buf),
            format_args!($($arg)*),
        );
    }};
}
pub(crate) use put;

/// Civil date (year, month, day) of a count of days since 1970-01-01 (Howard Hinnant's
/// algorithm), so sitemap dates need no calendar dependency.
pub(crate) fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// Writes a W3C datetime for `unix` seconds in one of six forms chosen by `form`, all denoting
/// the same instant (truncated where the form has less precision), because real sitemaps mix
/// them and a parser must accept every one.
pub(crate) fn w3c_datetime(out: &mut Vec<u8>, unix: u64, form: u64) {
    // Offsets used by the zoned forms, in minutes east of UTC.
    const OFFSETS: [i64; 2] = [120, -300];
    let offset_min = match form % 6 {
        2 => OFFSETS[0],
        3 => OFFSETS[1],
        _ => 0,
    };
    let local = unix as i64 + offset_min * 60;
    let days = local.div_euclid(86_400);
    let secs = local.rem_euclid(86_400);
    let (y, mo, d) = civil_from_days(days);
    let (h, mi, s) = (secs / 3600, secs / 60 % 60, secs % 60);
    match form % 6 {
        0 => put!(out, "{y:04}-{mo:02}-{d:02}"),
        1 => put!(out, "{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}Z"),
        2 | 3 => {
            let sign = if offset_min < 0 { '-' } else { '+' };
            let abs = offset_min.abs();
            put!(
                out,
                "{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}{sign}{:02}:{:02}",
                abs / 60,
                abs % 60
            );
        }
        4 => put!(out, "{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}.250Z"),
        _ => put!(out, "{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}Z"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_dates_match_known_days() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(19_723), (2024, 1, 1));
        assert_eq!(civil_from_days(19_782), (2024, 2, 29));
    }

    #[test]
    fn w3c_forms_denote_the_same_instant() {
        // 2024-03-05T10:20:30Z
        let t = 1_709_634_030;
        let forms: Vec<String> = (0..6)
            .map(|f| {
                let mut v = Vec::new();
                w3c_datetime(&mut v, t, f);
                String::from_utf8(v).expect("ascii")
            })
            .collect();
        assert_eq!(
            forms,
            [
                "2024-03-05",
                "2024-03-05T10:20:30Z",
                "2024-03-05T12:20:30+02:00",
                "2024-03-05T05:20:30-05:00",
                "2024-03-05T10:20:30.250Z",
                "2024-03-05T10:20Z",
            ]
        );
    }
}
