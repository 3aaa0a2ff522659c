//! The cached origins: at most a capacity of them, least recently used first out, except the
//! ones a page sent back to the queue still needs. Bookkeeping only: no fetch, no clock.

use std::collections::HashMap;
use std::sync::Arc;

use tokio::sync::OnceCell;

use super::RobotsRules;

pub(super) type Cell = Arc<OnceCell<Arc<RobotsRules>>>;

/// One origin's cell and when it was last used (a counter, for LRU eviction).
/// The cached origins: a least-recently-used set of at most `capacity`, and beside it the
/// origins "pinned" because a page sent back to the queue after robots.txt went in its slot
/// is still to come. Evicting those would fetch robots.txt again when the page comes back,
/// and on a broad crawl whose first round touches more hosts than the cache holds, again
/// and again for ever; pinned origins are bounded by the pages waiting, not by the cache.
pub(super) struct Origins {
    pub(super) lru: lru::LruCache<String, Cell>,
    /// Pinned origins: (cell, pages still to come).
    pinned: HashMap<String, (Cell, u32)>,
}

impl Origins {
    pub(super) fn new(capacity: usize) -> Self {
        let cap = std::num::NonZeroUsize::new(capacity).unwrap_or(std::num::NonZeroUsize::MIN);
        // Bounded, but grown as origins come: `LruCache::new` allocates the whole table up
        // front (a crawl of one site paid for a quarter of a MiB it never used).
        let mut lru = lru::LruCache::unbounded();
        lru.resize(cap);
        Self {
            lru,
            pinned: HashMap::new(),
        }
    }

    pub(super) fn len(&self) -> usize {
        self.lru.len() + self.pinned.len()
    }

    /// The origin's cell if it has one, marked used now.
    pub(super) fn get(&mut self, origin: &str) -> Option<&mut Cell> {
        if let Some((cell, _)) = self.pinned.get_mut(origin) {
            return Some(cell);
        }
        self.lru.get_mut(origin)
    }

    /// The origin's cell, marked used now; a new one (evicting the least recently used
    /// unpinned origin when full) if it has none.
    pub(super) fn cell(&mut self, origin: &str) -> &mut Cell {
        match self.pinned.get_mut(origin) {
            Some((cell, _)) => cell,
            None => self.lru.get_or_insert_mut(origin.to_owned(), Cell::default),
        }
    }

    /// A page of `origin` goes back to the queue and will need its verdict.
    pub(super) fn pin(&mut self, origin: &str) {
        if let Some((_, n)) = self.pinned.get_mut(origin) {
            *n += 1;
        } else if let Some(cell) = self.lru.pop(origin) {
            self.pinned.insert(origin.to_owned(), (cell, 1));
        }
    }

    /// A page of `origin` used its verdict.
    pub(super) fn unpin(&mut self, origin: &str) {
        let Some((_, n)) = self.pinned.get_mut(origin) else {
            return;
        };
        *n -= 1;
        if *n == 0
            && let Some((cell, _)) = self.pinned.remove(origin)
        {
            self.lru.put(origin.to_owned(), cell);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cache_drops_the_least_recently_used_origin() {
        let mut o = Origins::new(2);
        o.cell("http://a");
        o.cell("http://b");
        o.cell("http://a"); // a used again: b is now the oldest
        o.cell("http://c");
        assert_eq!(o.len(), 2);
        assert!(o.get("http://a").is_some() && o.get("http://c").is_some());
        assert!(o.get("http://b").is_none());
    }

    #[test]
    fn a_pinned_origin_outlives_the_capacity_until_its_page_comes_back() {
        let mut o = Origins::new(2);
        o.cell("http://pinned");
        o.pin("http://pinned");
        for i in 0..10 {
            o.cell(&format!("http://other{i}"));
        }
        // Two unpinned origins plus the pinned one: the page waiting keeps its verdict.
        assert_eq!(o.len(), 3);
        assert!(o.get("http://pinned").is_some());
        o.unpin("http://pinned");
        // Released: an ordinary entry again (the most recent), evicted in turn.
        o.cell("http://x");
        o.cell("http://y");
        assert!(o.get("http://pinned").is_none());
        assert_eq!(o.len(), 2);
    }
}
