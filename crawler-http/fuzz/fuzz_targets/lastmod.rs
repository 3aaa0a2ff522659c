//! Any string: no panic, and every accepted value lies within years 0000..=9999 (± a day of
//! zone offset).
#![no_main]

use crawler_http::parse_lastmod;
use libfuzzer_sys::fuzz_target;

/// 0000-01-01T00:00:00Z and 9999-12-31T23:59:59Z, widened by a day for offsets.
const MIN: i64 = -62_167_219_200 - 86_400;
const MAX: i64 = 253_402_300_799 + 86_400;

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    if let Some(t) = parse_lastmod(s) {
        assert!((MIN..=MAX).contains(&t), "{s:?} -> {t}");
        // Surrounding whitespace never changes the answer.
        assert_eq!(parse_lastmod(&format!(" {s}\n")), Some(t));
    }
});
