//! Any URL text: canonicalisation never panics, its output parses again, canonicalising
//! twice changes nothing, and equivalent URLs get one fingerprint.
#![no_main]

use crawler_core::Request;
use crawler_sched::{canonical_url, fingerprint};
use libfuzzer_sys::fuzz_target;
use url::Url;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(url) = Url::parse(text) else {
        return;
    };
    let once = canonical_url(&url);
    let reparsed = Url::parse(&once).expect("a canonical URL parses");
    let twice = canonical_url(&reparsed);
    assert_eq!(once, twice, "canonicalisation is idempotent for {text:?}");
    if matches!(url.scheme(), "http" | "https") && url.host().is_some() {
        let a = fingerprint(&Request::new(url));
        let b = fingerprint(&Request::new(reparsed));
        assert_eq!(a, b, "one fingerprint for {text:?} and {once:?}");
    }
});
