//! [`MiddlewareStats`]: the counters of every middleware stack of a crawl, read on demand.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// Counters of every middleware of a crawl, by middleware name, readable during and after
/// the crawl. Cheap to clone; clones see the same counters.
#[derive(Clone, Default)]
pub struct MiddlewareStats {
    sources: Arc<Mutex<Vec<Arc<dyn StatsSource>>>>,
}

impl std::fmt::Debug for MiddlewareStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("MiddlewareStats")
            .field(&self.snapshot())
            .finish()
    }
}

/// Something whose counters a [`MiddlewareStats`] reads.
pub(super) trait StatsSource: Send + Sync {
    fn collect(&self, into: &mut BTreeMap<String, BTreeMap<String, u64>>);
}

impl MiddlewareStats {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    pub(super) fn register(&self, source: Arc<dyn StatsSource>) {
        self.sources
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(source);
    }

    /// Counters by middleware name (`downloader:NAME` or `spider:NAME`), then by counter.
    /// Counters still at zero are left out.
    pub fn snapshot(&self) -> BTreeMap<String, BTreeMap<String, u64>> {
        let mut out = BTreeMap::new();
        for s in self
            .sources
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            s.collect(&mut out);
        }
        out.retain(|_, v: &mut BTreeMap<String, u64>| !v.is_empty());
        out
    }
}
