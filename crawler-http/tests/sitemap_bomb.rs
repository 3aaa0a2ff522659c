//! A 1 GB gzip bomb, alone in its own test binary so the process's peak memory measures this
//! parse only.

// Helpers outside #[test] fns unwrap too (clippy.toml only covers test fns): a panic
// there is a test failure, which is what we want.
#![allow(clippy::unwrap_used)]

use crawler_http::{SITEMAP_MAX_BYTES, SitemapErrorKind, SitemapLimits, parse_sitemap};

/// One valid entry, then 1 GiB of zeros, compressed chunk by chunk so the test never holds
/// the gigabyte (the result is about 1 MB at the default level; zlib-rs's fastest level
/// compresses zeros ten times less).
fn bomb() -> Vec<u8> {
    use std::io::Write;
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    enc.write_all(b"<urlset><url><loc>http://127.0.0.1/first</loc></url><url><loc>")
        .unwrap();
    let chunk = vec![0u8; 1024 * 1024];
    for _ in 0..1024 {
        enc.write_all(&chunk).unwrap();
    }
    enc.finish().unwrap()
}

/// Peak resident memory of this process, from /proc (Linux).
fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

#[test]
fn gigabyte_bomb_stops_at_the_cap_with_bounded_memory() {
    let body = bomb();
    assert!(
        body.len() < 8 * 1024 * 1024,
        "compressed bomb is small: {}",
        body.len()
    );
    let parsed = parse_sitemap(
        "http://127.0.0.1/bomb.xml.gz",
        &body,
        &SitemapLimits::default(),
    );
    let err = parsed.error.expect("the bomb is refused");
    assert_eq!(
        err.kind,
        SitemapErrorKind::TooLarge {
            limit: SITEMAP_MAX_BYTES
        }
    );
    assert!(err.to_string().contains("bomb.xml.gz"));
    assert_eq!(
        parsed.entries.len(),
        1,
        "entries before the padding are kept"
    );
    // Inflating the whole gigabyte would need > 1 GiB; the cap keeps the peak near 50 MB
    // (plus buffer growth). A loose bound, but one an uncapped parse cannot meet.
    if let Some(peak) = peak_rss_bytes() {
        eprintln!("compressed {} bytes, peak RSS {peak} bytes", body.len());
        assert!(peak < 400 * 1024 * 1024, "peak RSS {peak} bytes");
    }
}
