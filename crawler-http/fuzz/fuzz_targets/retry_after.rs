//! Any header value: no panic, and never a wait beyond the ceiling.
#![no_main]

use std::time::{Duration, SystemTime};

use crawler_http::{RETRY_AFTER_CEILING, parse_retry_after};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&seed, rest)) = data.split_first() else {
        return;
    };
    let Ok(value) = std::str::from_utf8(rest) else {
        return;
    };
    // Vary "now" too, including the far past, so date arithmetic is exercised both ways.
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(u64::from(seed) * 40_000_000);
    if let Some(wait) = parse_retry_after(value, now) {
        assert!(wait <= RETRY_AFTER_CEILING, "{value:?} -> {wait:?}");
    }
});
