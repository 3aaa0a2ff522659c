//! What the downloader stack and the spider stack share, written once: their stages (each
//! middleware with what the stack counted at it), the names in stack order, and how their
//! counters reach [`MiddlewareStats`]. Running the hooks stays with each stack: the order
//! and the outcomes differ.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::stats::{MiddlewareStats, StatsSource};

/// What a stack needs of a middleware, of either kind, to name it and report its counters.
pub(super) trait Member {
    /// The middleware's name.
    fn name(&self) -> &str;
    /// The middleware's own counters.
    fn counters(&self) -> Vec<(String, u64)>;
}

/// The counters a stack keeps at each of its stages.
pub(super) trait Tallies: Default {
    /// Add the counters that are not zero to `into`.
    fn snapshot(&self, into: &mut BTreeMap<String, u64>);
}

/// One middleware of a stack and what the stack counted at it.
pub(super) struct Stage<M: ?Sized, T> {
    pub(super) mw: Box<M>,
    pub(super) tally: T,
}

/// A stack's stages, first nearest the engine; shared by the stack and the stats registry.
pub(super) struct Stages<M: ?Sized, T> {
    /// `downloader` or `spider`: what the stats put before each middleware's name.
    kind: &'static str,
    stages: Vec<Stage<M, T>>,
}

impl<M: ?Sized + Member, T: Tallies> Stages<M, T> {
    /// The middlewares of `stack`, each with its counters at zero.
    pub(super) fn new(kind: &'static str, stack: Vec<Box<M>>) -> Self {
        let stages = stack
            .into_iter()
            .map(|mw| Stage {
                mw,
                tally: T::default(),
            })
            .collect();
        Self { kind, stages }
    }

    /// The stages, in stack order.
    pub(super) fn as_slice(&self) -> &[Stage<M, T>] {
        &self.stages
    }

    /// The names of the middlewares, in stack order.
    pub(super) fn names(&self) -> Vec<String> {
        self.stages.iter().map(|s| s.mw.name().to_owned()).collect()
    }
}

impl<M, T> Stages<M, T>
where
    M: ?Sized + Member + Send + Sync + 'static,
    T: Tallies + Send + Sync + 'static,
{
    /// Report these stages' counters into `stats`.
    pub(super) fn register(self: &Arc<Self>, stats: &MiddlewareStats) {
        stats.register(Arc::clone(self) as Arc<dyn StatsSource>);
    }
}

impl<M, T> StatsSource for Stages<M, T>
where
    M: ?Sized + Member + Send + Sync,
    T: Tallies + Send + Sync,
{
    fn collect(&self, into: &mut BTreeMap<String, BTreeMap<String, u64>>) {
        for s in &self.stages {
            let entry = into
                .entry(format!("{}:{}", self.kind, s.mw.name()))
                .or_default();
            s.tally.snapshot(entry);
            insert_nonzero(entry, s.mw.counters());
        }
    }
}

/// Add the counters of `counters` that are not zero to `into`: a counter still at zero is
/// left out of the stats.
pub(super) fn insert_nonzero<K: Into<String>>(
    into: &mut BTreeMap<String, u64>,
    counters: impl IntoIterator<Item = (K, u64)>,
) {
    for (k, v) in counters {
        if v > 0 {
            into.insert(k.into(), v);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};

    use super::*;

    struct Named(&'static str, u64);

    impl Member for Named {
        fn name(&self) -> &str {
            self.0
        }
        fn counters(&self) -> Vec<(String, u64)> {
            vec![("own".to_owned(), self.1), ("never".to_owned(), 0)]
        }
    }

    #[derive(Default)]
    struct Hits(AtomicU64);

    impl Tallies for Hits {
        fn snapshot(&self, into: &mut BTreeMap<String, u64>) {
            insert_nonzero(into, [("hits", self.0.load(Ordering::Relaxed))]);
        }
    }

    #[test]
    fn names_and_counters_by_kind_without_zeros() {
        let stages = Arc::new(Stages::<Named, Hits>::new(
            "spider",
            vec![Box::new(Named("a", 0)), Box::new(Named("b", 3))],
        ));
        assert_eq!(stages.names(), ["a", "b"]);
        stages.as_slice()[0].tally.0.fetch_add(2, Ordering::Relaxed);
        let stats = MiddlewareStats::new();
        stages.register(&stats);
        let snap = stats.snapshot();
        assert_eq!(snap["spider:a"], BTreeMap::from([("hits".to_owned(), 2)]));
        assert_eq!(snap["spider:b"], BTreeMap::from([("own".to_owned(), 3)]));
    }
}
