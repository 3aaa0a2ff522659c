//! The generated book shop: catalogue data derived from the seed, and the HTML pages.
//!
//! Nothing is precomputed: every value is a hash of (seed, book id, revision), so a page costs a
//! few microseconds to render and a 100,000-book site starts instantly.
//!
//! The folder owns the shop's content and nothing of HTTP: this file derives the data (titles,
//! prices, stock, categories, revisions after mutations, validators, listing pages) and
//! [`render`] writes the HTML. Neither reads a request nor sets a status or header; the
//! [`handler`](crate::handler) decides which page to render and how to answer.

use std::sync::RwLock;

use crate::util::{hash2, hash3, put, unit};

mod render;
#[cfg(test)]
mod tests;

pub(crate) use render::{find, render_not_found};

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
}
