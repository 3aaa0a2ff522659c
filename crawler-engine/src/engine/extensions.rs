//! The crawl's extensions and the handle they act through, as the engine calls them.
//!
//! Every call site asks [`Signals::on`] first: with no extension registered it returns
//! `None` and the site does nothing else (no copy of the request or item, no call), which
//! is why the signals cost nothing to a crawl that uses none.

use crawler_core::{CrawlHandle, Request, SharedExtension};

/// The registered extensions (in the order they were added) and their handle.
pub(super) struct Signals<I> {
    list: Vec<SharedExtension<I>>,
    handle: CrawlHandle,
}

impl<I> Signals<I> {
    pub(super) fn new(list: Vec<SharedExtension<I>>, handle: CrawlHandle) -> Self {
        Self { list, handle }
    }

    /// The extensions and the handle to pass them, or `None` when there are none.
    #[inline]
    pub(super) fn on(&self) -> Option<(&[SharedExtension<I>], &CrawlHandle)> {
        (!self.list.is_empty()).then_some((self.list.as_slice(), &self.handle))
    }

    /// Whether any extension is registered.
    pub(super) fn any(&self) -> bool {
        !self.list.is_empty()
    }

    /// The handle extensions are given.
    pub(super) fn handle(&self) -> &CrawlHandle {
        &self.handle
    }

    /// The extensions, in order.
    pub(super) fn list(&self) -> &[SharedExtension<I>] {
        &self.list
    }

    /// Sum the counters extensions added through their handle ([`CrawlHandle::inc_stat`])
    /// into the spider's own, with the callbacks'.
    pub(super) fn drain_counters(&self, stats: &mut crawler_core::Stats) {
        if self.list.is_empty() {
            return;
        }
        for (name, n) in self.handle.take_counters().into_map() {
            let v = stats.spider.entry(name).or_default();
            *v = v.saturating_add(n);
        }
    }

    /// `request_scheduled` for a request about to be offered, and a copy of it (only when
    /// an extension listens) for `request_dropped` should the frontier refuse it.
    pub(super) fn scheduled(&self, request: &Request) -> Option<Request> {
        let (list, handle) = self.on()?;
        for e in list {
            e.request_scheduled(request, handle);
        }
        Some(request.clone())
    }

    /// `request_dropped`, with the `filtered` key it was refused for.
    pub(super) fn dropped(&self, request: Option<&Request>, reason: &str) {
        if let (Some((list, handle)), Some(request)) = (self.on(), request) {
            for e in list {
                e.request_dropped(request, reason, handle);
            }
        }
    }
}
