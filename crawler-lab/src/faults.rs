//! Bad input on purpose: the fault kinds, where they are served, and the chaos assignment.
//!
//! Every fault has a fixed endpoint under `/fault/` (see [`FaultKind::path`]), available in
//! every scenario. In a chaos scenario, book detail pages also answer with page faults, chosen
//! per path from the seed so the same URL always fails the same way.

use std::io::Write;
use std::sync::{Arc, OnceLock};

use flate2::write::GzEncoder;
use flate2::{Compress, Compression, FlushCompress, Status};
use serde::{Deserialize, Serialize};

use crate::util::{hash_str, mix, put, unit};

/// A kind of bad response.
///
/// Serialised as its [`FaultKind::name`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FaultKind {
    /// `Content-Length` of the whole page, half of it sent, then the connection is reset (RST).
    ResetMidBody,
    /// The page trickles: 256 bytes every 250 ms (about 4 s for a book page).
    SlowBody,
    /// A chunked body that never ends (the server stops after 1 GiB or 10 minutes).
    EndlessBody,
    /// `Content-Length` declares half the page, the whole page is sent, then the connection
    /// closes.
    LongerThanDeclared,
    /// `Content-Encoding: gzip` whose body inflates to 256 MiB.
    GzipBomb,
    /// A redirect loop between two URLs.
    RedirectLoop,
    /// A chain of redirects (a chaos page first redirects to `/fault/redirect-chain/30`, which
    /// counts down to `/fault/redirect-chain/0`), then a 200 page: 31 redirects from a page.
    RedirectChain,
    /// A redirect to `ftp://`.
    RedirectToNonHttp,
    /// Declared `charset=utf-8`, contains bytes that are not UTF-8 (`FF FE C3 28`).
    InvalidUtf8,
    /// The page encoded in windows-1252, declared in the `Content-Type` header and a
    /// `<meta charset>`; the description gains ` Café “crème brûlée” £4.50` in that encoding.
    Windows1252,
    /// The page encoded in Shift_JIS, declared only in `<meta charset="Shift_JIS">`; the
    /// description gains ` 日本語の本` and prices use `£` as Shift_JIS `81 92` (which decodes
    /// to U+FFE1 `￡`).
    ShiftJis,
    /// An HTML page served as `Content-Type: image/jpeg`.
    WrongContentType,
    /// 500 Internal Server Error.
    ServerError,
    /// A sitemap whose XML is cut off mid-element.
    BrokenSitemap,
    /// A sitemap with a "billion laughs" entity expansion in its DOCTYPE.
    SitemapEntityExpansion,
    /// A gzipped sitemap listing 60,000 URLs (over the protocol's 50,000 limit).
    HugeSitemap,
    /// A gzipped sitemap that inflates to 256 MiB.
    SitemapGzipBomb,
}

impl FaultKind {
    /// The faults a page can have; chaos picks among these.
    pub const PAGE_FAULTS: [FaultKind; 13] = [
        FaultKind::ResetMidBody,
        FaultKind::SlowBody,
        FaultKind::EndlessBody,
        FaultKind::LongerThanDeclared,
        FaultKind::GzipBomb,
        FaultKind::RedirectLoop,
        FaultKind::RedirectChain,
        FaultKind::RedirectToNonHttp,
        FaultKind::InvalidUtf8,
        FaultKind::Windows1252,
        FaultKind::ShiftJis,
        FaultKind::WrongContentType,
        FaultKind::ServerError,
    ];

    /// The malformed sitemaps; chaos lists them in the sitemap index.
    pub const SITEMAP_FAULTS: [FaultKind; 4] = [
        FaultKind::BrokenSitemap,
        FaultKind::SitemapEntityExpansion,
        FaultKind::HugeSitemap,
        FaultKind::SitemapGzipBomb,
    ];

    /// A short kebab-case name.
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::ResetMidBody => "reset",
            FaultKind::SlowBody => "slow",
            FaultKind::EndlessBody => "endless",
            FaultKind::LongerThanDeclared => "longer-than-declared",
            FaultKind::GzipBomb => "gzip-bomb",
            FaultKind::RedirectLoop => "redirect-loop",
            FaultKind::RedirectChain => "redirect-chain",
            FaultKind::RedirectToNonHttp => "redirect-scheme",
            FaultKind::InvalidUtf8 => "invalid-utf8",
            FaultKind::Windows1252 => "windows-1252",
            FaultKind::ShiftJis => "shift-jis",
            FaultKind::WrongContentType => "wrong-content-type",
            FaultKind::ServerError => "server-error",
            FaultKind::BrokenSitemap => "sitemap-broken.xml",
            FaultKind::SitemapEntityExpansion => "sitemap-entities.xml",
            FaultKind::HugeSitemap => "sitemap-60k.xml.gz",
            FaultKind::SitemapGzipBomb => "sitemap-bomb.xml.gz",
        }
    }

    /// The endpoint that always serves this fault: `/fault/` + [`FaultKind::name`].
    pub fn path(self) -> String {
        format!("/fault/{}", self.name())
    }

    /// Whether this fault is a page fault (chaos can put it on a book page).
    pub fn is_page_fault(self) -> bool {
        !Self::SITEMAP_FAULTS.contains(&self)
    }

    pub(crate) fn from_name(name: &str) -> Option<Self> {
        Self::PAGE_FAULTS
            .into_iter()
            .chain(Self::SITEMAP_FAULTS)
            .find(|k| k.name() == name)
    }
}

impl Serialize for FaultKind {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl<'de> Deserialize<'de> for FaultKind {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        Self::from_name(&name)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown fault kind `{name}`")))
    }
}

impl std::fmt::Display for FaultKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The fault chaos gives a path, if any: only book detail pages fault, so the listings stay
/// navigable and a test can compute exactly which books a crawler can reach.
pub(crate) fn chaos_fault(seed: u64, rate: f64, path: &str) -> Option<FaultKind> {
    let id = book_id(path)?;
    let h = hash_str(seed ^ 0x0063_6861_6f73, path);
    if id == 0 || unit(h) >= rate {
        return None;
    }
    let kinds = FaultKind::PAGE_FAULTS;
    Some(kinds[(mix(h) % kinds.len() as u64) as usize])
}

/// The id in `/catalogue/book-ID.html`.
pub(crate) fn book_id(path: &str) -> Option<u32> {
    path.strip_prefix("/catalogue/book-")?
        .strip_suffix(".html")?
        .parse()
        .ok()
}

/// Hops of [`FaultKind::RedirectChain`].
pub(crate) const CHAIN_HOPS: u32 = 30;
/// Upper bound of `/fault/redirect-chain/N`.
pub(crate) const MAX_CHAIN: u32 = 1000;
/// Trickle of [`FaultKind::SlowBody`].
pub(crate) const SLOW_PIECE: usize = 256;
pub(crate) const SLOW_INTERVAL: std::time::Duration = std::time::Duration::from_millis(250);
/// How much an endless body may send before the server gives up.
pub(crate) const ENDLESS_CAP: u64 = 1 << 30;
pub(crate) const ENDLESS_TIME: std::time::Duration = std::time::Duration::from_secs(600);
/// Inflated size of the gzip bombs.
pub(crate) const BOMB_MIB: usize = 256;

/// Replaces the UTF-8 pound sign the templates use with another encoding's bytes.
pub(crate) fn transcode_pound(body: &mut Vec<u8>, with: &[u8]) {
    let mut out = Vec::with_capacity(body.len());
    let mut i = 0;
    while i < body.len() {
        if body[i] == 0xC2 && body.get(i + 1) == Some(&0xA3) {
            out.extend_from_slice(with);
            i += 2;
        } else {
            out.push(body[i]);
            i += 1;
        }
    }
    *body = out;
}

/// Bytes appended to the description by the charset faults.
pub(crate) const WINDOWS_1252_EXTRA: &[u8] = b" Caf\xe9 \x93cr\xe8me br\xfbl\xe9e\x94 \xa34.50";
pub(crate) const SHIFT_JIS_EXTRA: &[u8] = b" \x93\xfa\x96\x7b\x8c\xea\x82\xcc\x96\x7b";
pub(crate) const INVALID_UTF8_EXTRA: &[u8] = b" \xff\xfe\xc3\x28 mojibake";

fn gzip(parts: &mut dyn FnMut(&mut GzEncoder<Vec<u8>>) -> std::io::Result<()>) -> Arc<[u8]> {
    let mut enc = GzEncoder::new(Vec::new(), Compression::best());
    let done = parts(&mut enc).and_then(|()| enc.finish());
    // Writing into memory cannot fail; an empty body still exercises the client.
    Arc::from(done.unwrap_or_default())
}

/// Deflates `input` into `out` with the given flush, growing `out` as needed.
fn deflate(
    c: &mut Compress,
    mut input: &[u8],
    flush: FlushCompress,
    out: &mut Vec<u8>,
) -> Result<(), flate2::CompressError> {
    loop {
        if out.capacity() - out.len() < 32 * 1024 {
            out.reserve(64 * 1024);
        }
        let before = c.total_in();
        let status = c.compress_vec(input, out, flush)?;
        input = &input[(c.total_in() - before) as usize..];
        let room_left = out.capacity() > out.len();
        match flush {
            FlushCompress::Finish if status == Status::StreamEnd => return Ok(()),
            FlushCompress::Finish => {}
            _ if input.is_empty() && room_left => return Ok(()),
            _ => {}
        }
    }
}

/// Gzips `prefix`, `mebibytes` MiB of `fill`, then `suffix`, in milliseconds instead of the
/// seconds a plain encoder needs: with a sync flush after each MiB, the compressor reaches a
/// steady state where every further MiB deflates to the same bytes, so those are repeated
/// instead of recomputed (the window holds only `fill` either way, so the stream stays valid).
pub(crate) fn gzip_repeated(prefix: &[u8], fill: u8, mebibytes: usize, suffix: &[u8]) -> Vec<u8> {
    let block = vec![fill; 1 << 20];
    let mut crc = crc32fast::Hasher::new();
    // Fixed gzip header: deflate, no name, no mtime, unknown OS.
    let mut out = vec![0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff];
    let mut c = Compress::new(Compression::best(), false);
    let mut run = || -> Result<(), flate2::CompressError> {
        deflate(&mut c, prefix, FlushCompress::Sync, &mut out)?;
        crc.update(prefix);
        let mut previous: Vec<u8> = Vec::new();
        let mut steady: Option<Vec<u8>> = None;
        for _ in 0..mebibytes {
            crc.update(&block);
            if let Some(piece) = &steady {
                out.extend_from_slice(piece);
                continue;
            }
            let mut piece = Vec::new();
            deflate(&mut c, &block, FlushCompress::Sync, &mut piece)?;
            out.extend_from_slice(&piece);
            if piece == previous {
                steady = Some(piece);
            } else {
                previous = piece;
            }
        }
        deflate(&mut c, suffix, FlushCompress::Finish, &mut out)?;
        crc.update(suffix);
        Ok(())
    };
    if run().is_err() {
        return Vec::new();
    }
    let size = prefix.len() + mebibytes * block.len() + suffix.len();
    out.extend_from_slice(&crc.finalize().to_le_bytes());
    out.extend_from_slice(&(size as u32).to_le_bytes());
    out
}

/// The HTML gzip bomb: a tiny page followed by 256 MiB of spaces. Computed once per process.
pub(crate) fn html_bomb() -> Arc<[u8]> {
    static BOMB: OnceLock<Arc<[u8]>> = OnceLock::new();
    BOMB.get_or_init(|| {
        Arc::from(gzip_repeated(
            b"<!DOCTYPE html><html><head><title>bomb</title></head><body>",
            b' ',
            BOMB_MIB,
            b"</body></html>",
        ))
    })
    .clone()
}

/// The sitemap gzip bomb: a valid urlset whose whitespace inflates to 256 MiB.
pub(crate) fn sitemap_bomb() -> Arc<[u8]> {
    // Shared by every lab in the process, so it names no URL.
    static BOMB: OnceLock<Arc<[u8]>> = OnceLock::new();
    BOMB.get_or_init(|| {
        Arc::from(gzip_repeated(
            b"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<urlset xmlns=\"http://www.sitemaps.org/schemas/sitemap/0.9\">\n",
            b' ',
            BOMB_MIB,
            b"</urlset>\n",
        ))
    })
    .clone()
}

/// A sitemap cut off mid-element.
pub(crate) fn broken_sitemap(base: &str, out: &mut Vec<u8>) {
    put!(
        out,
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<urlset xmlns=\"http://www.sitemaps.org/schemas/sitemap/0.9\">\n<url><loc>{base}catalogue/book-1.html</loc><lastmod>2024-01-05</lastmod></url>\n<url><loc>{base}catalogue/book-2.html</loc><lastmod>2024-01-0"
    );
}

/// The "billion laughs" sitemap: ten levels of ten-fold entity expansion.
pub(crate) fn laughs_sitemap(base: &str, out: &mut Vec<u8>) {
    out.extend_from_slice(b"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<!DOCTYPE urlset [\n  <!ENTITY lol \"lol\">\n");
    for level in 1..=9 {
        put!(out, "  <!ENTITY lol{level} \"");
        for _ in 0..10 {
            if level == 1 {
                out.extend_from_slice(b"&lol;");
            } else {
                put!(out, "&lol{};", level - 1);
            }
        }
        out.extend_from_slice(b"\">\n");
    }
    put!(
        out,
        "]>\n<urlset xmlns=\"http://www.sitemaps.org/schemas/sitemap/0.9\">\n<url><loc>{base}catalogue/book-1.html?&lol9;</loc></url>\n</urlset>\n"
    );
}

/// A gzipped sitemap of 60,000 book URLs (ids past the catalogue answer 404).
pub(crate) fn huge_sitemap(base: &str) -> Arc<[u8]> {
    gzip(&mut |enc| {
        let mut buf = Vec::with_capacity(1 << 16);
        buf.extend_from_slice(b"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<urlset xmlns=\"http://www.sitemaps.org/schemas/sitemap/0.9\">\n");
        for id in 1..=60_000u32 {
            put!(
                &mut buf,
                "<url><loc>{base}catalogue/book-{id}.html</loc></url>\n"
            );
            if buf.len() > 60_000 {
                enc.write_all(&buf)?;
                buf.clear();
            }
        }
        buf.extend_from_slice(b"</urlset>\n");
        enc.write_all(&buf)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chaos_only_touches_book_pages_and_is_stable() {
        assert_eq!(chaos_fault(1, 1.0, "/catalogue/page-1.html"), None);
        assert!(chaos_fault(1, 1.0, "/catalogue/book-3.html").is_some());
        assert_eq!(chaos_fault(1, 0.0, "/catalogue/book-3.html"), None);
        let a: Vec<_> = (1..200)
            .map(|i| chaos_fault(9, 0.2, &format!("/catalogue/book-{i}.html")))
            .collect();
        let b: Vec<_> = (1..200)
            .map(|i| chaos_fault(9, 0.2, &format!("/catalogue/book-{i}.html")))
            .collect();
        assert_eq!(a, b);
    }

    #[test]
    fn repeated_gzip_inflates_to_the_exact_input() {
        use std::io::Read;
        let gz = gzip_repeated(b"<a>", b' ', 9, b"</a>");
        assert!(gz.len() < 20_000, "{}", gz.len());
        let mut plain = Vec::new();
        flate2::read::GzDecoder::new(&gz[..])
            .read_to_end(&mut plain)
            .expect("valid gzip");
        assert_eq!(plain.len(), 3 + (9 << 20) + 4);
        assert!(plain.starts_with(b"<a> ") && plain.ends_with(b" </a>"));
        assert!(plain[3..plain.len() - 4].iter().all(|&b| b == b' '));
    }

    #[test]
    fn every_fault_name_round_trips() {
        for k in FaultKind::PAGE_FAULTS
            .into_iter()
            .chain(FaultKind::SITEMAP_FAULTS)
        {
            assert_eq!(FaultKind::from_name(k.name()), Some(k));
        }
    }
}
