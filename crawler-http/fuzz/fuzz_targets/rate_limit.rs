//! Any set of RateLimit-* header values in every dialect: no panic.
#![no_main]

use std::time::{Duration, SystemTime};

use crawler_http::parse_rate_limit;
use http::{HeaderMap, HeaderName, HeaderValue};
use libfuzzer_sys::fuzz_target;

const NAMES: [&str; 9] = [
    "ratelimit",
    "ratelimit-policy",
    "ratelimit-limit",
    "ratelimit-remaining",
    "ratelimit-reset",
    "x-ratelimit-limit",
    "x-ratelimit-remaining",
    "x-ratelimit-reset",
    "x-ratelimit-reset-after",
];

fuzz_target!(|data: &[u8]| {
    // Input: values separated by 0xFF, assigned to the header names in turn; an empty value
    // leaves the header out.
    let mut headers = HeaderMap::new();
    for (name, value) in NAMES.iter().zip(data.split(|b| *b == 0xFF)) {
        if value.is_empty() {
            continue;
        }
        if let Ok(v) = HeaderValue::from_bytes(value) {
            headers.insert(HeaderName::from_static(name), v);
        }
    }
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    let _ = parse_rate_limit(&headers, now);
});
