//! The sitemap index and the gzipped urlsets of book pages, cached per site version.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::faults::FaultKind;
use crate::site::Catalogue;
use crate::util::{put, w3c_datetime};

/// Book URLs per sitemap file.
pub(crate) const PER_SITEMAP: u32 = 5000;

#[derive(Default)]
struct Cached {
    version: usize,
    index: Option<Arc<[u8]>>,
    files: HashMap<u32, Arc<[u8]>>,
    huge: Option<Arc<[u8]>>,
}

/// Renders sitemaps on first request and keeps them until the catalogue mutates.
#[derive(Default)]
pub(crate) struct Sitemaps {
    cache: Mutex<Cached>,
}

impl Sitemaps {
    fn with_cache<R>(&self, version: usize, f: impl FnOnce(&mut Cached) -> R) -> R {
        let mut c = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if c.version != version {
            c.index = None;
            c.files.clear();
            c.version = version;
        }
        f(&mut c)
    }

    pub(crate) fn count(cat: &Catalogue) -> u32 {
        cat.books.div_ceil(PER_SITEMAP)
    }

    /// The sitemap index (plain XML).
    pub(crate) fn index(&self, cat: &Catalogue, base: &str, bad: bool) -> Arc<[u8]> {
        self.with_cache(cat.version(), |c| {
            c.index
                .get_or_insert_with(|| render_index(cat, base, bad))
                .clone()
        })
    }

    /// Sitemap `k` (1-based), gzipped, or `None` past the last one.
    pub(crate) fn file(&self, cat: &Catalogue, base: &str, k: u32) -> Option<Arc<[u8]>> {
        if k == 0 || k > Self::count(cat) {
            return None;
        }
        Some(self.with_cache(cat.version(), |c| {
            c.files
                .entry(k)
                .or_insert_with(|| {
                    let mut xml = Vec::with_capacity(PER_SITEMAP as usize * 100);
                    render_urlset(cat, base, k, &mut xml);
                    gzip_fast(&xml)
                })
                .clone()
        }))
    }

    /// The 60,000-URL sitemap, gzipped.
    pub(crate) fn huge(&self, cat: &Catalogue, base: &str) -> Arc<[u8]> {
        self.with_cache(cat.version(), |c| {
            c.huge
                .get_or_insert_with(|| crate::faults::huge_sitemap(base))
                .clone()
        })
    }
}

fn gzip_fast(data: &[u8]) -> Arc<[u8]> {
    use std::io::Write;
    let mut enc = flate2::write::GzEncoder::new(
        Vec::with_capacity(data.len() / 4),
        flate2::Compression::fast(),
    );
    let out = enc.write_all(data).and_then(|()| enc.finish());
    Arc::from(out.unwrap_or_default())
}

fn range(cat: &Catalogue, k: u32) -> std::ops::RangeInclusive<u32> {
    let first = (k - 1) * PER_SITEMAP + 1;
    first..=(k * PER_SITEMAP).min(cat.books)
}

fn render_index(cat: &Catalogue, base: &str, bad: bool) -> Arc<[u8]> {
    let mut out = Vec::with_capacity(4096);
    out.extend_from_slice(b"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<sitemapindex xmlns=\"http://www.sitemaps.org/schemas/sitemap/0.9\">\n");
    for k in 1..=Sitemaps::count(cat) {
        let newest = range(cat, k)
            .map(|id| cat.book_modified(id, cat.revision(id)))
            .max()
            .unwrap_or(0);
        put!(
            &mut out,
            "<sitemap><loc>{base}sitemaps/books-{k}.xml.gz</loc><lastmod>"
        );
        w3c_datetime(&mut out, newest, 1);
        out.extend_from_slice(b"</lastmod></sitemap>\n");
    }
    if bad {
        for f in FaultKind::SITEMAP_FAULTS {
            put!(
                &mut out,
                "<sitemap><loc>{base}fault/{}</loc></sitemap>\n",
                f.name()
            );
        }
    }
    out.extend_from_slice(b"</sitemapindex>\n");
    Arc::from(out)
}

fn render_urlset(cat: &Catalogue, base: &str, k: u32, out: &mut Vec<u8>) {
    out.extend_from_slice(b"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<urlset xmlns=\"http://www.sitemaps.org/schemas/sitemap/0.9\">\n");
    for id in range(cat, k) {
        put!(
            out,
            "<url><loc>{base}catalogue/book-{id}.html</loc><lastmod>"
        );
        w3c_datetime(out, cat.book_modified(id, cat.revision(id)), u64::from(id));
        out.extend_from_slice(b"</lastmod></url>\n");
    }
    out.extend_from_slice(b"</urlset>\n");
}
