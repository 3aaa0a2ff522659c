//! Any bytes (XML, text, or gzip when they start with 1f 8b) must parse without panicking,
//! within the limits.
#![no_main]

use crawler_http::{SitemapLimits, parse_sitemap};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // Small limits so the caps themselves are reached and exercised.
    let limits = SitemapLimits {
        max_bytes: 256 * 1024,
        max_urls: 64,
        alternates: true,
        ..SitemapLimits::default()
    };
    let parsed = parse_sitemap("http://fuzz/sitemap.xml", data, &limits);
    assert!(parsed.entries.len() <= limits.max_urls);
    for entry in &parsed.entries {
        assert!(entry.loc.starts_with("http://") || entry.loc.starts_with("https://"));
        for alt in &entry.alternates {
            assert!(alt.href.starts_with("http://") || alt.href.starts_with("https://"));
        }
    }
    if parsed.dropped > 0 {
        assert_eq!(parsed.entries.len(), limits.max_urls);
    }
    if let Some(err) = &parsed.error {
        assert_eq!(err.url, "http://fuzz/sitemap.xml");
        let _ = err.to_string();
    }
});
