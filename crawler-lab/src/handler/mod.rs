//! From request to response: the scenario pipeline (blocks, limit, overload) and the routes.
//!
//! The folder owns what the lab answers: [`Shared`] (the state every connection sees), the
//! pipeline that applies a scenario's blocks, limit verdicts and overload before a route runs
//! ([`pipeline`]), the routes of the book site ([`routes`]), their conditional (304) answers
//! ([`conditional`]), the fault pages ([`fault_pages`]) and the `/_lab/` endpoints
//! ([`control`]). It only fills a [`Reply`](crate::server::Reply) from a
//! [`Req`](crate::server::Req): it must not touch the socket or the HTTP/1.1 wire format
//! (the [`server`](crate::server)'s job), nor the limiter arithmetic ([`crate::ratelimit`],
//! [`crate::limiters`]).

use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::faults::{self, FaultKind};
use crate::recorder::Recorder;
use crate::site::Catalogue;
use crate::sitemap::Sitemaps;

mod conditional;
mod control;
mod fault_pages;
mod media;
mod pipeline;
mod routes;

pub(crate) use pipeline::{Live, handle};

const HTML: &str = "text/html; charset=utf-8";

/// Everything the connections share.
pub(crate) struct Shared {
    pub start: Instant,
    /// `http://127.0.0.1:PORT/`
    pub base: String,
    pub catalogue: Catalogue,
    pub sitemaps: Sitemaps,
    pub recorder: Recorder,
    pub default: Live,
    /// Scenarios for client keys, checked first.
    pub by_client: Vec<(String, Live)>,
    /// Scenarios for path prefixes, longest prefix first.
    pub by_prefix: Vec<(String, Live)>,
    /// A test's own answers, consulted before everything else.
    pub script: Option<crate::script::Script>,
    /// Where the JavaScript catalogue's scripts and images come from (`None`: this lab).
    pub js_assets: Option<String>,
}

impl Shared {
    pub(crate) fn live_for(&self, client: Option<&str>, path: &str) -> &Live {
        if let Some((_, live)) =
            client.and_then(|client| self.by_client.iter().find(|(k, _)| k == client))
        {
            return live;
        }
        self.by_prefix
            .iter()
            .find(|(p, _)| path.starts_with(p.as_str()))
            .map_or(&self.default, |(_, live)| live)
    }

    pub(crate) fn all_live(&self) -> impl Iterator<Item = &Live> {
        std::iter::once(&self.default)
            .chain(self.by_client.iter().map(|(_, l)| l))
            .chain(self.by_prefix.iter().map(|(_, l)| l))
    }

    /// The fault a path gets from the scenario that governs it for an unnamed client.
    pub(crate) fn expected_fault(&self, path: &str) -> Option<FaultKind> {
        let path = path
            .strip_prefix(self.base.trim_end_matches('/'))
            .unwrap_or(path);
        let path = path.split_once('?').map_or(path, |(p, _)| p);
        if let Some(name) = path.strip_prefix("/fault/") {
            let name = name.split('/').next().unwrap_or(name);
            return FaultKind::from_name(name);
        }
        let live = self.live_for(None, path);
        let id = faults::book_id(path)?;
        if !self.catalogue.contains(id) {
            return None;
        }
        faults::chaos_fault(self.catalogue.seed, live.scenario.chaos?, path)
    }
}

async fn sleep_unless_shutdown(d: Duration, shutdown: &mut watch::Receiver<bool>) {
    tokio::select! {
        _ = tokio::time::sleep(d) => {}
        _ = shutdown.changed() => {}
    }
}
