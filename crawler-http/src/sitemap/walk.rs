//! The walk through sitemap indexes: a bounded queue of sitemap URLs, fetched one at a time.

use std::collections::{HashSet, VecDeque};
use std::fmt;

use crawler_core::Url;

use super::{SitemapEntry, SitemapKind, SitemapLimits, SitemapParse, fetch_sitemap};

/// One sitemap file reached by a [`SitemapWalk`].
#[derive(Debug, Clone)]
pub struct SitemapFile {
    /// The sitemap's URL.
    pub url: Url,
    /// 0 for a root, 1 for a sitemap listed by a root index, and so on.
    pub depth: u32,
    /// Its entries and errors. For an index, the entries are the child sitemaps (already
    /// queued by the walk, subject to the limits and filter).
    pub parse: SitemapParse,
}

/// Totals of a [`SitemapWalk`] so far.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WalkSummary {
    /// Sitemap files fetched (indexes included).
    pub fetched: usize,
    /// Files that ended with an error (their earlier entries were still returned).
    pub errors: usize,
    /// Page entries returned from urlsets and text sitemaps.
    pub urls: usize,
    /// Entries dropped over the per-file URL cap, summed.
    pub dropped: usize,
    /// Entries skipped for an invalid `<loc>`, summed.
    pub skipped: usize,
    /// Child sitemaps not followed because they were deeper than [`SitemapLimits::max_depth`].
    pub too_deep: usize,
    /// Sitemaps not followed because the walk reached [`SitemapLimits::max_sitemaps`].
    pub over_cap: usize,
    /// Sitemaps listed again after being queued once (cycles in indexes end here).
    pub duplicates: usize,
    /// Child sitemaps the filter declined.
    pub filtered: usize,
}

type Follow = Box<dyn FnMut(&SitemapEntry) -> bool + Send>;

/// A walk through sitemaps and the indexes that list them, one file at a time.
///
/// Memory holds one file's entries (what [`SitemapWalk::next`] returns) plus the queue of
/// sitemap URLs still to fetch, which [`SitemapLimits::max_sitemaps`] bounds. Index cycles,
/// nesting deeper than [`SitemapLimits::max_depth`] and files over the cap are counted in
/// [`WalkSummary`], not followed.
///
/// ```no_run
/// # async fn demo(client: reqwest::Client, root: crawler_core::Url) {
/// use crawler_http::{SitemapKind, SitemapLimits, SitemapWalk};
///
/// let mut walk = SitemapWalk::new(client, [root], SitemapLimits::default());
/// while let Some(file) = walk.next().await {
///     if let Some(err) = &file.parse.error {
///         eprintln!("warning: {err}");
///     }
///     if file.parse.kind != SitemapKind::Index {
///         for entry in file.parse.entries {
///             println!("{} {:?}", entry.loc, entry.lastmod);
///         }
///     }
/// }
/// # }
/// ```
pub struct SitemapWalk {
    client: reqwest::Client,
    limits: SitemapLimits,
    queue: VecDeque<(Url, u32)>,
    seen: HashSet<String>,
    follow: Option<Follow>,
    summary: WalkSummary,
}

impl fmt::Debug for SitemapWalk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SitemapWalk")
            .field("queued", &self.queue.len())
            .field("summary", &self.summary)
            .finish_non_exhaustive()
    }
}

impl SitemapWalk {
    /// A walk starting from `roots` (explicit sitemap URLs or robots.txt `Sitemap:` lines).
    pub fn new(
        client: reqwest::Client,
        roots: impl IntoIterator<Item = Url>,
        limits: SitemapLimits,
    ) -> Self {
        let mut walk = Self {
            client,
            limits,
            queue: VecDeque::new(),
            seen: HashSet::new(),
            follow: None,
            summary: WalkSummary::default(),
        };
        for root in roots {
            walk.enqueue(root, 0);
        }
        walk
    }

    /// Follow only the child sitemaps of an index for which `follow` returns true, e.g. those
    /// whose `lastmod` is newer than the last crawl.
    pub fn follow_if(mut self, follow: impl FnMut(&SitemapEntry) -> bool + Send + 'static) -> Self {
        self.follow = Some(Box::new(follow));
        self
    }

    /// Fetch and parse the next sitemap, queueing the children of an index. `None` when the
    /// queue is empty.
    pub async fn next(&mut self) -> Option<SitemapFile> {
        let (url, depth) = self.queue.pop_front()?;
        let parse = fetch_sitemap(&self.client, &url, &self.limits).await;
        let s = &mut self.summary;
        s.fetched += 1;
        s.errors += usize::from(parse.error.is_some());
        s.dropped += parse.dropped;
        s.skipped += parse.skipped;
        if parse.kind == SitemapKind::Index {
            for child in &parse.entries {
                if let Some(follow) = self.follow.as_mut()
                    && !follow(child)
                {
                    self.summary.filtered += 1;
                    continue;
                }
                if depth >= self.limits.max_depth {
                    self.summary.too_deep += 1;
                    continue;
                }
                match Url::parse(&child.loc) {
                    Ok(u) => self.enqueue(u, depth + 1),
                    Err(_) => self.summary.skipped += 1,
                }
            }
        } else {
            self.summary.urls += parse.entries.len();
        }
        Some(SitemapFile { url, depth, parse })
    }

    /// The totals so far.
    pub fn summary(&self) -> &WalkSummary {
        &self.summary
    }

    fn enqueue(&mut self, url: Url, depth: u32) {
        if self.seen.contains(url.as_str()) {
            self.summary.duplicates += 1;
        } else if self.seen.len() >= self.limits.max_sitemaps {
            self.summary.over_cap += 1;
        } else {
            self.seen.insert(url.as_str().to_owned());
            self.queue.push_back((url, depth));
        }
    }
}
