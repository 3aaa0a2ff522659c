//! Request fingerprints: one stable 128-bit value per distinct request, for de-duplication.

use std::hash::{BuildHasherDefault, Hasher};

use crawler_core::Request;
use serde::{Deserialize, Serialize};

/// A stable 128-bit digest of a request's method, canonical URL and body.
///
/// Stable across runs and machines (xxh3), so persisted and shared seen-sets agree.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Fingerprint(pub u128);

impl Fingerprint {
    /// The fingerprint as 16 big-endian bytes (for storage keys).
    pub fn to_bytes(self) -> [u8; 16] {
        self.0.to_be_bytes()
    }
}

pub use crawler_core::canonical_url;

/// The fingerprint of a request.
pub fn fingerprint(request: &Request) -> Fingerprint {
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    h.update(request.method.as_bytes());
    h.update(b"\0");
    h.update(canonical_url(&request.url).as_bytes());
    if let Some(body) = &request.body {
        h.update(b"\0");
        h.update(body);
    }
    Fingerprint(h.digest128())
}

/// A `Hasher` for fingerprints: they are already uniformly distributed, so hashing them
/// again is wasted work. Use it through [`FingerprintBuildHasher`].
#[derive(Default)]
pub struct PassThrough(u64);

impl Hasher for PassThrough {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut b = [0u8; 8];
            b[..chunk.len()].copy_from_slice(chunk);
            self.0 ^= u64::from_le_bytes(b);
        }
    }
    fn write_u128(&mut self, v: u128) {
        self.0 = v as u64 ^ (v >> 64) as u64;
    }
}

/// A `BuildHasher` for sets and maps keyed by fingerprints.
pub type FingerprintBuildHasher = BuildHasherDefault<PassThrough>;
pub(crate) type FpBuild = FingerprintBuildHasher;

#[cfg(test)]
mod tests {
    use super::*;

    fn fp(url: &str) -> Fingerprint {
        fingerprint(&Request::get(url).unwrap())
    }

    #[test]
    fn canonicalisation_merges_equivalent_urls() {
        assert_eq!(
            fp("HTTP://Example.COM/a?x=1"),
            fp("http://example.com/a?x=1")
        );
        assert_eq!(fp("http://example.com:80/a"), fp("http://example.com/a"));
        assert_eq!(fp("https://example.com:443/a"), fp("https://example.com/a"));
        assert_eq!(fp("http://example.com/a#top"), fp("http://example.com/a"));
        assert_eq!(fp("http://example.com"), fp("http://example.com/"));
        assert_eq!(
            canonical_url(&crawler_core::Url::parse("HTTP://Example.com:80/P?b=2&a=1#f").unwrap()),
            "http://example.com/P?b=2&a=1"
        );
    }

    #[test]
    fn distinct_requests_stay_distinct() {
        assert_ne!(
            fp("http://example.com/a?x=1"),
            fp("http://example.com/a?x=2")
        );
        assert_ne!(
            fp("http://example.com/a?b=1&a=2"),
            fp("http://example.com/a?a=2&b=1")
        );
        assert_ne!(fp("http://example.com/A"), fp("http://example.com/a"));
        assert_ne!(fp("http://example.com:8080/a"), fp("http://example.com/a"));
        assert_ne!(fp("https://example.com/a"), fp("http://example.com/a"));
        let get = Request::get("http://example.com/f").unwrap();
        let post = get.clone().method("POST").body("q=1");
        assert_ne!(fingerprint(&get), fingerprint(&post));
        assert_ne!(fingerprint(&post), fingerprint(&post.clone().body("q=2")));
    }
}
