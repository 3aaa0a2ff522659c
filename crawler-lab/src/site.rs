//! The generated book shop: catalogue data derived from the seed, and the HTML pages.
//!
//! Nothing is precomputed: every value is a hash of (seed, book id, revision), so a page costs a
//! few microseconds to render and a 100,000-book site starts instantly.

use std::sync::RwLock;

use crate::util::{hash2, hash3, put, unit};

/// Books per listing page (catalogue and categories).
pub(crate) const PER_PAGE: u32 = 20;

/// Category slugs and display names.
pub(crate) const CATEGORIES: [(&str, &str); 10] = [
    ("travel", "Travel"),
    ("mystery", "Mystery"),
    ("historical-fiction", "Historical Fiction"),
    ("science", "Science"),
    ("poetry", "Poetry"),
    ("fantasy", "Fantasy"),
    ("romance", "Romance"),
    ("philosophy", "Philosophy"),
    ("humor", "Humor"),
    ("science-fiction", "Science Fiction"),
];

const ADJECTIVES: [&str; 32] = [
    "Silent",
    "Crimson",
    "Hidden",
    "Golden",
    "Broken",
    "Distant",
    "Forgotten",
    "Restless",
    "Burning",
    "Frozen",
    "Quiet",
    "Wandering",
    "Scarlet",
    "Hollow",
    "Bright",
    "Secret",
    "Ancient",
    "Gentle",
    "Savage",
    "Midnight",
    "Velvet",
    "Iron",
    "Paper",
    "Glass",
    "Wild",
    "Last",
    "Lost",
    "Little",
    "Endless",
    "Northern",
    "Southern",
    "Painted",
];

const NOUNS: [&str; 32] = [
    "River",
    "Garden",
    "Kingdom",
    "Lighthouse",
    "Orchard",
    "Harbour",
    "Mountain",
    "Library",
    "Forest",
    "Station",
    "Cathedral",
    "Island",
    "Compass",
    "Lantern",
    "Mirror",
    "Meadow",
    "Archive",
    "Bridge",
    "Voyage",
    "Summer",
    "Winter",
    "Letter",
    "Clock",
    "Sparrow",
    "Empire",
    "Theory",
    "Tide",
    "Engine",
    "Atlas",
    "Ember",
    "Canyon",
    "Citadel",
];

const WORDS: [&str; 48] = [
    "the",
    "a",
    "of",
    "and",
    "in",
    "journey",
    "city",
    "night",
    "light",
    "story",
    "family",
    "secret",
    "war",
    "love",
    "river",
    "house",
    "memory",
    "stranger",
    "letters",
    "winter",
    "sea",
    "promise",
    "years",
    "village",
    "music",
    "garden",
    "voice",
    "truth",
    "shadow",
    "road",
    "found",
    "lost",
    "between",
    "beyond",
    "under",
    "returns",
    "discovers",
    "remembers",
    "quietly",
    "forever",
    "together",
    "alone",
    "old",
    "young",
    "brave",
    "curious",
    "small",
    "vast",
];

/// 2024-01-01T00:00:00Z: base of every book's first Last-Modified.
const BASE_2024: u64 = 1_704_067_200;
/// 2025-01-01T00:00:00Z: base of the dates of mutations.
const BASE_2025: u64 = 1_735_689_600;
const DAY: u64 = 86_400;

/// Validators of a page: strong ETag (as a hash) and Last-Modified (Unix seconds).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Validators {
    pub etag: u64,
    pub last_modified: u64,
}

/// Which listing a page belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Listing {
    Catalogue,
    Category(usize),
}

/// One listing page, resolved: its books, their revisions and the page's validators.
pub(crate) struct ListingPage {
    pub listing: Listing,
    pub page: u32,
    pub pages: u32,
    pub total: u32,
    pub ids: Vec<(u32, u32)>,
    pub validators: Validators,
}

/// The catalogue: size, seed and the mutations applied so far.
pub(crate) struct Catalogue {
    pub seed: u64,
    pub books: u32,
    cat_shift: u32,
    /// "You might also like" links per book page.
    related: u32,
    /// Fraction of books changed by each mutation, oldest first.
    mutations: RwLock<Vec<f64>>,
}

impl Catalogue {
    pub(crate) fn new(seed: u64, books: u32, mutations: Vec<f64>) -> Self {
        Self {
            seed,
            books,
            cat_shift: (seed % CATEGORIES.len() as u64) as u32,
            related: 4,
            mutations: RwLock::new(mutations),
        }
    }

    /// Sets how many related books each book page links to.
    pub(crate) fn with_related(mut self, related: u32) -> Self {
        self.related = related;
        self
    }

    fn with_mutations<R>(&self, f: impl FnOnce(&[f64]) -> R) -> R {
        let guard = self.mutations.read().unwrap_or_else(|e| e.into_inner());
        f(&guard)
    }

    /// Applies one more mutation changing about `fraction` of the books; returns their ids.
    pub(crate) fn mutate(&self, fraction: f64) -> Vec<u32> {
        let mut guard = self.mutations.write().unwrap_or_else(|e| e.into_inner());
        guard.push(fraction.clamp(0.0, 1.0));
        let version = guard.len();
        (1..=self.books)
            .filter(|&id| Self::changed_in(self.seed, id, version, guard[version - 1]))
            .collect()
    }

    /// How many mutations have been applied.
    pub(crate) fn version(&self) -> usize {
        self.with_mutations(|m| m.len())
    }

    fn changed_in(seed: u64, id: u32, version: usize, fraction: f64) -> bool {
        unit(hash3(
            seed,
            u64::from(id),
            0x6d75_7461_7465 + version as u64,
        )) < fraction
    }

    /// The last mutation (1-based) that changed the book, or 0.
    fn revision_in(&self, id: u32, mutations: &[f64]) -> u32 {
        mutations
            .iter()
            .enumerate()
            .rev()
            .find(|(i, f)| Self::changed_in(self.seed, id, i + 1, **f))
            .map_or(0, |(i, _)| i as u32 + 1)
    }

    pub(crate) fn revision(&self, id: u32) -> u32 {
        self.with_mutations(|m| self.revision_in(id, m))
    }

    pub(crate) fn contains(&self, id: u32) -> bool {
        (1..=self.books).contains(&id)
    }

    pub(crate) fn category_of(&self, id: u32) -> usize {
        ((id + self.cat_shift) % CATEGORIES.len() as u32) as usize
    }

    /// First id of a category and how many books it holds: category `c` holds every tenth id.
    fn category_span(&self, c: usize) -> (u32, u32) {
        let n = CATEGORIES.len() as u32;
        let r = (c as u32 + n - self.cat_shift % n) % n;
        let first = if r == 0 { n } else { r };
        let count = if first > self.books {
            0
        } else {
            (self.books - first) / n + 1
        };
        (first, count)
    }

    pub(crate) fn category_index(slug: &str) -> Option<usize> {
        CATEGORIES.iter().position(|(s, _)| *s == slug)
    }

    pub(crate) fn catalogue_pages(&self) -> u32 {
        self.books.div_ceil(PER_PAGE)
    }

    pub(crate) fn price_cents(&self, id: u32, rev: u32) -> u32 {
        1000 + (hash3(self.seed, u64::from(id), 0x7072_6963 ^ u64::from(rev)) % 5000) as u32
    }

    pub(crate) fn stock(&self, id: u32, rev: u32) -> u32 {
        1 + (hash3(self.seed, u64::from(id), 0x7374_6f63 ^ u64::from(rev)) % 22) as u32
    }

    /// Last-Modified of a book at a revision: a day in 2024 for the original, and a day after
    /// 2025-01-01 for each mutation, so a changed book is always newer and always in the past.
    pub(crate) fn book_modified(&self, id: u32, rev: u32) -> u64 {
        let h = hash3(self.seed, u64::from(id), 0x6c6d ^ u64::from(rev));
        if rev == 0 {
            BASE_2024 + h % (300 * DAY)
        } else {
            BASE_2025 + u64::from(rev - 1) * DAY + h % DAY
        }
    }

    pub(crate) fn book_validators(&self, id: u32, rev: u32) -> Validators {
        Validators {
            etag: hash3(self.seed, 0x626f_6f6b, u64::from(id) << 32 | u64::from(rev)),
            last_modified: self.book_modified(id, rev),
        }
    }

    /// Validators of pages that show no book data (index, private): they change only with
    /// the site's version.
    pub(crate) fn site_validators(&self, page: u64) -> Validators {
        let version = self.version() as u64;
        Validators {
            etag: hash3(self.seed, page, version ^ u64::from(self.books) << 20),
            last_modified: if version == 0 {
                BASE_2024 + 300 * DAY
            } else {
                BASE_2025 + version * DAY
            },
        }
    }

    /// Writes the title: unique per book because it ends with the id.
    pub(crate) fn write_title(&self, id: u32, out: &mut Vec<u8>) {
        let h = hash2(self.seed, u64::from(id));
        let adj = ADJECTIVES[(h % 32) as usize];
        let noun = NOUNS[(h >> 8) as usize % 32];
        let noun2 = NOUNS[(h >> 16) as usize % 32];
        put!(out, "The {adj} {noun} and the {noun2}, Book {id}");
    }

    pub(crate) fn title(&self, id: u32) -> String {
        let mut v = Vec::with_capacity(64);
        self.write_title(id, &mut v);
        String::from_utf8_lossy(&v).into_owned()
    }

    /// Resolves a listing page, or `None` past the last page.
    pub(crate) fn listing_page(&self, listing: Listing, page: u32) -> Option<ListingPage> {
        let (first, step, total) = match listing {
            Listing::Catalogue => (1, 1, self.books),
            Listing::Category(c) => {
                let (first, count) = self.category_span(c);
                (first, CATEGORIES.len() as u32, count)
            }
        };
        let pages = total.div_ceil(PER_PAGE).max(1);
        if page == 0 || page > pages {
            return None;
        }
        let start = (page - 1) * PER_PAGE;
        let end = (start + PER_PAGE).min(total);
        let (ids, validators) = self.with_mutations(|m| {
            let mut etag = hash3(
                self.seed,
                u64::from(page) << 32 | u64::from(self.books),
                match listing {
                    Listing::Catalogue => 0xca7a,
                    Listing::Category(c) => c as u64,
                },
            );
            let mut last_modified = 0;
            let ids: Vec<(u32, u32)> = (start..end)
                .map(|j| {
                    let id = first + j * step;
                    let rev = self.revision_in(id, m);
                    etag = hash2(etag, u64::from(id) << 32 | u64::from(rev));
                    last_modified = last_modified.max(self.book_modified(id, rev));
                    (id, rev)
                })
                .collect();
            (
                ids,
                Validators {
                    etag,
                    last_modified,
                },
            )
        });
        Some(ListingPage {
            listing,
            page,
            pages,
            total,
            ids,
            validators,
        })
    }

    fn open_page(&self, out: &mut Vec<u8>, title: &[u8], description: &str) {
        out.extend_from_slice(
            b"<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>",
        );
        out.extend_from_slice(title);
        out.extend_from_slice(b" | Books to Crawl</title>\n<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<meta name=\"description\" content=\"");
        out.extend_from_slice(description.as_bytes());
        out.extend_from_slice(b"\">\n<style>body{font-family:Georgia,serif;margin:0 auto;max-width:62em;color:#222}header,footer{padding:1em;background:#f4f1ea}nav ul{list-style:none;padding:0}nav li{display:inline;margin-right:.8em}article.book{display:inline-block;width:12em;vertical-align:top;margin:.5em}.price{color:#2a7d2a}.stock{color:#555}</style>\n</head>\n<body>\n<header><a href=\"/\" class=\"brand\">Books to Crawl</a> <small>a crawler-lab practice shop</small></header>\n<nav>\n<ul class=\"nav\">\n<li><a href=\"/catalogue/page-1.html\">All books</a></li>\n");
        for (slug, name) in CATEGORIES {
            put!(
                out,
                "<li><a href=\"/category/{slug}/page-1.html\">{name}</a></li>\n"
            );
        }
        out.extend_from_slice(b"</ul>\n</nav>\n<main>\n");
    }

    fn close_page(&self, out: &mut Vec<u8>) {
        put!(
            out,
            "</main>\n<footer>\n<p>Staff only: <a href=\"/private/secret.html\">private area</a></p>\n<p>Generated by crawler-lab for testing crawlers; seed {}, {} books.</p>\n</footer>\n</body>\n</html>\n",
            self.seed,
            self.books
        );
    }

    pub(crate) fn render_index(&self, out: &mut Vec<u8>) {
        self.open_page(
            out,
            b"Home",
            "A small generated book shop for testing crawlers.",
        );
        put!(
            out,
            "<h1>Welcome to Books to Crawl</h1>\n<p>We stock {} books in {} categories. Start with <a href=\"/catalogue/page-1.html\">the full catalogue</a> or pick a category:</p>\n<ul class=\"categories\">\n",
            self.books,
            CATEGORIES.len()
        );
        for (slug, name) in CATEGORIES {
            put!(
                out,
                "<li><a href=\"/category/{slug}/page-1.html\">{name}</a></li>\n"
            );
        }
        out.extend_from_slice(b"</ul>\n<p>Robots: please read <a href=\"/robots.txt\">robots.txt</a> and the <a href=\"/sitemap.xml\">sitemap</a>. Staff pages live under <a href=\"/private/secret.html\">/private/</a>.</p>\n");
        self.close_page(out);
    }

    fn write_display_title(&self, id: u32, out: &mut Vec<u8>) {
        // Listings truncate long titles like real shops do; the full title is in `title=`.
        let start = out.len();
        self.write_title(id, out);
        if out.len() - start > 30 {
            out.truncate(start + 27);
            out.extend_from_slice(b"...");
        }
    }

    pub(crate) fn render_listing(&self, page: &ListingPage, out: &mut Vec<u8>) {
        let (heading, desc): (&str, &str) = match page.listing {
            Listing::Catalogue => ("All books", "Every book in the shop."),
            Listing::Category(c) => (CATEGORIES[c].1, "Books in one category."),
        };
        let mut title = Vec::with_capacity(48);
        put!(&mut title, "{heading}, page {}", page.page);
        self.open_page(out, &title, desc);
        if let Listing::Category(c) = page.listing {
            put!(
                out,
                "<ul class=\"breadcrumb\"><li><a href=\"/\">Home</a></li><li class=\"active\">{}</li></ul>\n",
                CATEGORIES[c].1
            );
        }
        let from = (page.page - 1) * PER_PAGE + 1;
        put!(
            out,
            "<h1>{heading}</h1>\n<p class=\"count\"><strong>{}</strong> results, showing {} to {}.</p>\n<ol class=\"row\">\n",
            page.total,
            if page.total == 0 { 0 } else { from },
            from - 1 + page.ids.len() as u32
        );
        for &(id, rev) in &page.ids {
            out.extend_from_slice(b"<li><article class=\"book\"><h3><a href=\"/catalogue/book-");
            put!(out, "{id}.html\" title=\"");
            self.write_title(id, out);
            out.extend_from_slice(b"\">");
            self.write_display_title(id, out);
            let cents = self.price_cents(id, rev);
            put!(
                out,
                "</a></h3><p class=\"price\">\u{a3}{}.{:02}</p></article></li>\n",
                cents / 100,
                cents % 100
            );
        }
        out.extend_from_slice(b"</ol>\n<ul class=\"pager\">\n");
        if page.page > 1 {
            put!(
                out,
                "<li class=\"previous\"><a href=\"page-{}.html\">previous</a></li>\n",
                page.page - 1
            );
        }
        put!(
            out,
            "<li class=\"current\">Page {} of {}</li>\n",
            page.page,
            page.pages
        );
        if page.page < page.pages {
            put!(
                out,
                "<li class=\"next\"><a href=\"page-{}.html\">next</a></li>\n",
                page.page + 1
            );
        }
        out.extend_from_slice(b"</ul>\n");
        self.close_page(out);
    }

    /// Renders a book page. A non-empty `charset_meta` replaces the `<meta charset="utf-8">`;
    /// `extra` is inserted raw inside the description, which is how the
    /// charset faults put bytes that are not UTF-8 into an otherwise normal page.
    pub(crate) fn render_book(
        &self,
        id: u32,
        rev: u32,
        out: &mut Vec<u8>,
        charset_meta: &[u8],
        extra: &[u8],
    ) {
        let mut title = Vec::with_capacity(64);
        self.write_title(id, &mut title);
        let (slug, cat) = CATEGORIES[self.category_of(id)];
        let cents = self.price_cents(id, rev);
        let stock = self.stock(id, rev);
        self.open_page(out, &title, "A book in the Books to Crawl shop.");
        if !charset_meta.is_empty() {
            // Charset faults swap the UTF-8 declaration for their own, in the same place.
            let at = find(out, b"<meta charset=\"utf-8\">").unwrap_or(0);
            let end = at + b"<meta charset=\"utf-8\">".len();
            out.splice(at..end, charset_meta.iter().copied());
        }
        put!(
            out,
            "<ul class=\"breadcrumb\"><li><a href=\"/\">Home</a></li><li><a href=\"/category/{slug}/page-1.html\">{cat}</a></li><li class=\"active\">"
        );
        out.extend_from_slice(&title);
        out.extend_from_slice(b"</li></ul>\n<div class=\"product\"><h1>");
        out.extend_from_slice(&title);
        put!(
            out,
            "</h1><p class=\"price\">\u{a3}{}.{:02}</p><p class=\"stock\">In stock ({stock} available)</p></div>\n<div class=\"description\">\n<h2>Product Description</h2>\n<p>",
            cents / 100,
            cents % 100
        );
        self.write_description(id, rev, out);
        out.extend_from_slice(extra);
        put!(
            out,
            "</p>\n</div>\n<table class=\"info\">\n<tr><th>UPC</th><td>{:016x}</td></tr>\n<tr><th>Category</th><td><a href=\"/category/{slug}/page-1.html\">{cat}</a></td></tr>\n<tr><th>Availability</th><td>{stock}</td></tr>\n<tr><th>Revision</th><td>{rev}</td></tr>\n</table>\n",
            hash2(self.seed ^ 0x0075_7063, u64::from(id))
        );
        out.extend_from_slice(b"<section class=\"related\">\n<h2>You might also like</h2>\n<ul>\n");
        for k in 1..=self.related {
            let other = (id - 1 + 10 * k) % self.books + 1;
            put!(out, "<li><a href=\"/catalogue/book-{other}.html\">");
            self.write_title(other, out);
            out.extend_from_slice(b"</a></li>\n");
        }
        out.extend_from_slice(b"</ul>\n</section>\n");
        self.close_page(out);
    }

    fn write_description(&self, id: u32, rev: u32, out: &mut Vec<u8>) {
        let mut h = hash3(self.seed, u64::from(id), 0x6465_7363 ^ u64::from(rev));
        for i in 0..150u32 {
            if i % 8 == 0 {
                h = crate::util::mix(h.wrapping_add(u64::from(i)));
            }
            let word = WORDS[(h >> ((i % 8) * 8)) as usize % WORDS.len()];
            if i % 14 == 0 {
                if i > 0 {
                    out.extend_from_slice(b". ");
                }
                let mut chars = word.chars();
                if let Some(c) = chars.next() {
                    put!(out, "{}{}", c.to_ascii_uppercase(), chars.as_str());
                }
            } else {
                out.push(b' ');
                out.extend_from_slice(word.as_bytes());
            }
        }
        out.push(b'.');
    }

    pub(crate) fn render_private(&self, out: &mut Vec<u8>) {
        self.open_page(out, b"Private", "Staff only.");
        out.extend_from_slice(b"<h1>Staff only</h1>\n<p class=\"secret\">This area is disallowed by robots.txt. A crawler that obeys robots.txt never sees this page, and the lab's recorder shows whether it did.</p>\n");
        self.close_page(out);
    }
}

/// Writes the small 404 page.
pub(crate) fn render_not_found(out: &mut Vec<u8>) {
    out.extend_from_slice(b"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>404 Not Found</title></head><body><h1>Not Found</h1><p>No such page. <a href=\"/\">Home</a></p></body></html>\n");
}

pub(crate) fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn categories_partition_the_catalogue() {
        for seed in [0, 3, 7] {
            let c = Catalogue::new(seed, 1003, Vec::new());
            let total: u32 = (0..CATEGORIES.len()).map(|i| c.category_span(i).1).sum();
            assert_eq!(total, 1003);
            for i in 0..CATEGORIES.len() {
                let (first, _) = c.category_span(i);
                assert_eq!(c.category_of(first), i);
            }
        }
    }

    #[test]
    fn mutation_changes_about_the_fraction_and_moves_validators() {
        let c = Catalogue::new(7, 10_000, Vec::new());
        let before = c.book_validators(1, c.revision(1));
        let changed = c.mutate(0.05);
        assert!((400..600).contains(&changed.len()), "{}", changed.len());
        let id = changed[0];
        assert_eq!(c.revision(id), 1);
        let after = c.book_validators(id, 1);
        assert!(after.last_modified > c.book_modified(id, 0));
        if !changed.contains(&1) {
            assert_eq!(before, c.book_validators(1, c.revision(1)));
        }
    }
}
