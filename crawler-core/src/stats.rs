//! Crawl statistics: every request's terminal state, statuses, bytes, items.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Counters for one crawl. Every request offered to the frontier ends in exactly one terminal
/// state, so `requests_enqueued` equals the sum of the terminal counters plus `pending`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Stats {
    /// Requests offered to the frontier (start requests and followed links).
    pub requests_enqueued: u64,
    /// Refused by the frontier, by reason (duplicate, offsite, depth, url_too_long), or
    /// dropped because the in-memory queue was full (queue_full, see
    /// `max_queued_requests`).
    pub filtered: BTreeMap<String, u64>,
    /// Responses handed to the spider.
    pub fetched: u64,
    /// Answered 304 Not Modified.
    pub not_modified: u64,
    /// Forbidden by robots.txt, never sent.
    pub disallowed: u64,
    /// Answered with a redirect that was followed: the next hop is a new request (counted in
    /// `requests_enqueued`) with its own terminal state.
    pub redirected: u64,
    /// Ended without a usable response, by reason.
    pub failed: BTreeMap<String, u64>,
    /// Not fetched because their host was skipped for the run (it asked for a wait longer
    /// than `max_retry_after`, its robots.txt stayed unavailable…: docs/retries.md).
    pub skipped_host: u64,
    /// Attempts beyond the first (each retried request counts once per retry).
    pub retries: u64,
    /// Still queued or in flight when the crawl stopped (an interrupted crawl).
    pub pending: u64,
    /// HTTP responses by status code.
    pub status: BTreeMap<u16, u64>,
    /// Body bytes received (after decompression), those of bodies aborted at
    /// `max_body_size` or cut off included.
    pub response_bytes: u64,
    /// Items written to the feeds.
    pub items_scraped: u64,
    /// Items dropped by a pipeline.
    pub items_dropped: u64,
    /// Pages whose callback failed: it returned an error (the page's items and links up to
    /// the error are kept) or used an invalid CSS selector (the page's items are not
    /// written). Each is logged with the page's URL and the callback's name.
    pub spider_errors: u64,
    /// Links skipped because they were not valid http(s) URLs.
    pub invalid_links: u64,
    /// Requests a download handler made for the pages it answered (a browser's scripts,
    /// XHR, styles, images), by outcome: `sent` (through their host's slot), `disallowed`
    /// (robots.txt), `blocked` (a resource type the handler refuses), `filtered`,
    /// `skipped_host`, `failed`, `retried`, `abandoned` (dropped unsent: the page stopped
    /// waiting), `pending_at_render` (still in flight when their rendered page was taken).
    /// Not part of `requests_enqueued`: they end with their page.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub subrequests: BTreeMap<String, u64>,
    /// Links dropped because their page had more than `max_links_per_page` (never offered
    /// to the frontier, so not in `requests_enqueued`).
    pub links_dropped: u64,
    /// robots.txt files fetched that were not text (binary data), read as having no rules.
    pub robots_not_text: u64,
    /// Per-host figures of the busiest hosts: the 50 busiest while the crawl runs
    /// (`PROGRESS_HOSTS`), the 1,000 busiest in the final stats (`FINAL_HOSTS`).
    pub hosts: Vec<crate::fetch::HostStats>,
    /// Wall time of the crawl.
    #[serde(with = "secs")]
    pub elapsed: Duration,
    /// Why the crawl closed: `finished` (nothing left to fetch), `close_item_count`,
    /// `close_page_count`, `close_error_count`, `close_timeout` (the close settings),
    /// `stopped` (Ctrl-C, SIGTERM or a [`Shutdown`](crate::Shutdown) request), `error` (the
    /// frontier or the feed writer failed), or the reason a spider
    /// ([`Output::close_spider`](crate::Output::close_spider)) or a pipeline
    /// ([`Pipeline::close_crawl`](crate::Pipeline::close_crawl)) gave. Empty while the crawl
    /// runs.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub close_reason: String,
    /// Counters of each downloader and spider middleware (`downloader:NAME`,
    /// `spider:NAME`), filled in at the end by the crawl that ran them.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub middlewares: BTreeMap<String, BTreeMap<String, u64>>,
    /// Responses from the network by the HTTP version they came in (`HTTP/1.1`, `HTTP/2`;
    /// see the `http_version` setting).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub http_versions: BTreeMap<String, u64>,
    /// Requests sent through each proxy, by its URL with any password redacted (as in
    /// `http://user:***@proxy:3128`): attempts (retries and robots.txt fetches included) and
    /// those that failed, by failure class (`proxy` when the proxy itself failed).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub proxies: BTreeMap<String, ProxyStats>,
    /// What the crawl's resolver did: lookups sent, names answered from its cache, lookups
    /// that failed (see [`DnsStats`](crate::dns::DnsStats)).
    #[serde(skip_serializing_if = "crate::dns::DnsStats::is_empty")]
    pub dns: crate::dns::DnsStats,
    /// The spider's own counters, by name: what its callbacks and errbacks counted with
    /// [`Output::stats`](crate::Output::stats) (Scrapy's `self.crawler.stats.inc_value`).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub spider: BTreeMap<String, u64>,
    /// WARC records written by this run (`warc` setting): warcinfo, request, response and
    /// revisit records, in every file.
    #[serde(skip_serializing_if = "is_zero")]
    pub warc_records: u64,
}

/// One proxy's figures in [`Stats::proxies`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ProxyStats {
    /// Requests sent through it (every attempt).
    pub requests: u64,
    /// Of those, the ones that ended without a response, by failure class.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub failed: BTreeMap<String, u64>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

mod secs {
    pub(super) fn deserialize<'de, D: serde::Deserializer<'de>>(
        d: D,
    ) -> Result<std::time::Duration, D::Error> {
        let secs = <f64 as serde::Deserialize>::deserialize(d)?;
        Ok(std::time::Duration::try_from_secs_f64(secs).unwrap_or_default())
    }

    pub(super) fn serialize<S: serde::Serializer>(
        d: &std::time::Duration,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        s.serialize_f64(d.as_secs_f64())
    }
}

/// The [`Stats::close_reason`] of a crawl that fetched everything it was given.
pub const CLOSE_FINISHED: &str = "finished";
/// The [`Stats::close_reason`] of a crawl stopped by Ctrl-C, SIGTERM or a
/// [`Shutdown`](crate::Shutdown) request.
pub const CLOSE_STOPPED: &str = "stopped";
/// The [`Stats::close_reason`] of a crawl whose frontier or feed writer failed.
pub const CLOSE_ERROR: &str = "error";

impl Stats {
    /// Requests that reached a terminal state.
    pub fn terminal(&self) -> u64 {
        self.filtered.values().sum::<u64>()
            + self.fetched
            + self.not_modified
            + self.disallowed
            + self.redirected
            + self.failed.values().sum::<u64>()
            + self.skipped_host
    }

    /// Whether the terminal states and pending requests add up to the requests enqueued.
    pub fn reconciles(&self) -> bool {
        self.terminal() + self.pending == self.requests_enqueued
    }

    /// Responses per second over the crawl.
    pub fn pages_per_sec(&self) -> f64 {
        let secs = self.elapsed.as_secs_f64();
        if secs > 0.0 {
            self.status.values().sum::<u64>() as f64 / secs
        } else {
            0.0
        }
    }

    /// Add `other`'s counters to these: the stats of a fleet from its workers' (each
    /// covers what that worker did). Every count and counter map is summed, the spider's
    /// own counters ([`Stats::spider`]) and the middlewares' included; `elapsed` is the
    /// longest; the per-host figures are listed together (a host several workers crawled
    /// appears once per worker); the close reason is kept, or taken from `other` when
    /// there is none yet.
    pub fn merge(&mut self, other: &Stats) {
        fn sum<K: Ord + Clone>(into: &mut BTreeMap<K, u64>, from: &BTreeMap<K, u64>) {
            for (k, v) in from {
                let e = into.entry(k.clone()).or_default();
                *e = e.saturating_add(*v);
            }
        }
        let Stats {
            requests_enqueued,
            filtered,
            fetched,
            not_modified,
            disallowed,
            redirected,
            failed,
            skipped_host,
            retries,
            pending,
            status,
            response_bytes,
            items_scraped,
            items_dropped,
            spider_errors,
            invalid_links,
            subrequests,
            links_dropped,
            robots_not_text,
            hosts,
            elapsed,
            close_reason,
            middlewares,
            http_versions,
            proxies,
            dns,
            spider,
            warc_records,
        } = other;
        // Destructured whole, so a counter added to Stats cannot be forgotten here.
        for (into, from) in [
            (&mut self.requests_enqueued, requests_enqueued),
            (&mut self.fetched, fetched),
            (&mut self.not_modified, not_modified),
            (&mut self.disallowed, disallowed),
            (&mut self.redirected, redirected),
            (&mut self.skipped_host, skipped_host),
            (&mut self.retries, retries),
            (&mut self.pending, pending),
            (&mut self.response_bytes, response_bytes),
            (&mut self.items_scraped, items_scraped),
            (&mut self.items_dropped, items_dropped),
            (&mut self.spider_errors, spider_errors),
            (&mut self.invalid_links, invalid_links),
            (&mut self.links_dropped, links_dropped),
            (&mut self.robots_not_text, robots_not_text),
            (&mut self.warc_records, warc_records),
        ] {
            *into = into.saturating_add(*from);
        }
        sum(&mut self.filtered, filtered);
        sum(&mut self.failed, failed);
        sum(&mut self.status, status);
        sum(&mut self.subrequests, subrequests);
        sum(&mut self.http_versions, http_versions);
        sum(&mut self.spider, spider);
        for (name, counters) in middlewares {
            sum(self.middlewares.entry(name.clone()).or_default(), counters);
        }
        for (proxy, figures) in proxies {
            let into = self.proxies.entry(proxy.clone()).or_default();
            into.requests = into.requests.saturating_add(figures.requests);
            sum(&mut into.failed, &figures.failed);
        }
        self.dns = self.dns + *dns;
        self.hosts.extend(hosts.iter().cloned());
        self.elapsed = self.elapsed.max(*elapsed);
        if self.close_reason.is_empty() {
            self.close_reason.clone_from(close_reason);
        }
    }

    /// Add one to `key` in one of the stats' counter maps.
    pub fn bump(map: &mut BTreeMap<String, u64>, key: &str) {
        *map.entry(key.to_owned()).or_default() += 1;
    }
}

impl fmt::Display for Stats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let join = |m: &BTreeMap<String, u64>| {
            m.iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(" ")
        };
        writeln!(f, "crawl finished in {:.2}s", self.elapsed.as_secs_f64())?;
        if !self.close_reason.is_empty() {
            writeln!(f, "  close reason       {}", self.close_reason)?;
        }
        writeln!(f, "  requests enqueued  {}", self.requests_enqueued)?;
        writeln!(f, "  fetched            {}", self.fetched)?;
        writeln!(f, "  not modified       {}", self.not_modified)?;
        writeln!(f, "  robots disallowed  {}", self.disallowed)?;
        if self.redirected > 0 {
            writeln!(f, "  redirected         {}", self.redirected)?;
        }
        writeln!(
            f,
            "  filtered           {} {}",
            self.filtered.values().sum::<u64>(),
            join(&self.filtered)
        )?;
        writeln!(
            f,
            "  failed             {} {}",
            self.failed.values().sum::<u64>(),
            join(&self.failed)
        )?;
        if self.skipped_host > 0 {
            writeln!(f, "  skipped (host)     {}", self.skipped_host)?;
        }
        writeln!(f, "  retries            {}", self.retries)?;
        if !self.subrequests.is_empty() {
            writeln!(f, "  sub-requests       {}", join(&self.subrequests))?;
        }
        if self.pending > 0 {
            writeln!(f, "  pending (stopped)  {}", self.pending)?;
        }
        let statuses: Vec<String> = self
            .status
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        writeln!(f, "  statuses           {}", statuses.join(" "))?;
        if !self.http_versions.is_empty() {
            writeln!(f, "  http versions      {}", join(&self.http_versions))?;
        }
        writeln!(
            f,
            "  items              {} scraped, {} dropped",
            self.items_scraped, self.items_dropped
        )?;
        writeln!(f, "  spider errors      {}", self.spider_errors)?;
        writeln!(f, "  invalid links      {}", self.invalid_links)?;
        if self.robots_not_text > 0 {
            writeln!(f, "  robots not text    {}", self.robots_not_text)?;
        }
        if self.warc_records > 0 {
            writeln!(f, "  WARC records       {}", self.warc_records)?;
        }
        if self.links_dropped > 0 {
            writeln!(f, "  links dropped      {}", self.links_dropped)?;
        }
        writeln!(f, "  bytes received     {}", self.response_bytes)?;
        write!(f, "  pages/s            {:.1}", self.pages_per_sec())?;
        for h in self.hosts.iter().take(10) {
            let rate = h
                .rate
                .map_or_else(|| "-".to_owned(), |r| format!("{r:.2}/s"));
            write!(
                f,
                "\n  host {}: {} requests, rate {rate}, latency mean {:.0}ms p95 {:.0}ms, {} holds ({:.1}s)",
                h.host,
                h.requests,
                h.latency_mean * 1000.0,
                h.latency_p95 * 1000.0,
                h.holds,
                h.hold_secs
            )?;
            if h.unsent > 0 {
                write!(f, ", {} not sent (refused before the wire)", h.unsent)?;
            }
            if let Some(why) = &h.skipped {
                write!(f, ", skipped: {why}")?;
            }
        }
        if self.hosts.len() > 10 {
            write!(f, "\n  ... and {} more hosts", self.hosts.len() - 10)?;
        }
        if !self.dns.is_empty() {
            write!(
                f,
                "\n  dns                {} lookups, {} from cache, {} failed",
                self.dns.lookups, self.dns.cached, self.dns.failed
            )?;
        }
        for (proxy, p) in &self.proxies {
            write!(f, "\n  proxy {proxy}: {} requests", p.requests)?;
            if !p.failed.is_empty() {
                write!(
                    f,
                    ", {} failed {}",
                    p.failed.values().sum::<u64>(),
                    join(&p.failed)
                )?;
            }
        }
        if !self.spider.is_empty() {
            write!(f, "\n  spider stats       {}", join(&self.spider))?;
        }
        for (name, counters) in &self.middlewares {
            let counters: Vec<String> = counters.iter().map(|(k, v)| format!("{k}={v}")).collect();
            write!(f, "\n  middleware {name}: {}", counters.join(" "))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reconciliation_counts_every_terminal_state() {
        let mut s = Stats {
            requests_enqueued: 10,
            fetched: 4,
            not_modified: 1,
            disallowed: 1,
            pending: 1,
            ..Default::default()
        };
        Stats::bump(&mut s.filtered, "duplicate");
        Stats::bump(&mut s.failed, "timeout");
        assert!(!s.reconciles());
        Stats::bump(&mut s.failed, "timeout");
        assert!(s.reconciles());
        assert!(s.to_string().contains("timeout=2"));
    }

    #[test]
    fn merge_sums_every_workers_counters_proxies_and_dns_included() {
        let worker = |requests, lookups| {
            let mut s = Stats {
                fetched: requests,
                dns: crate::dns::DnsStats {
                    lookups,
                    cached: 1,
                    failed: 0,
                },
                ..Default::default()
            };
            let proxy = s
                .proxies
                .entry("http://p:***@127.0.0.1:1".into())
                .or_default();
            proxy.requests = requests;
            Stats::bump(&mut proxy.failed, "proxy");
            Stats::bump(&mut s.spider, "shop/pages");
            s
        };
        let mut merged = worker(3, 2);
        merged.merge(&worker(4, 5));
        assert_eq!(merged.fetched, 7);
        assert_eq!(merged.dns.lookups, 7);
        assert_eq!(merged.dns.cached, 2);
        let proxy = &merged.proxies["http://p:***@127.0.0.1:1"];
        assert_eq!(proxy.requests, 7);
        assert_eq!(proxy.failed["proxy"], 2);
        assert_eq!(merged.spider["shop/pages"], 2);
    }
}
