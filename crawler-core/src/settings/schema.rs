//! The schema: the [`Settings`] struct with its documented defaults, the small enums its
//! fields use, and the checks types alone cannot express ([`Settings::validate`]). Setting a
//! value from text is in `text.rs`; this file uses nothing else of the folder but the
//! `[[hosts]]` rule type.

use std::net::SocketAddr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::{Error, ErrorKind, Result};

use super::host_rules::HostRule;

/// The crawl's settings. Every field has a documented, polite default.
///
/// Durations are written as `"500ms"`, `"2s"`, `"1m"`. Settings are set in code, or by key
/// and text value with [`Settings::set`] (what `-s key=value` and `custom_settings` use).
///
/// `Debug` shows secrets (`http_auth_pass`, passwords in `redis_url` and `proxy`) as `***`.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Settings {
    /// The User-Agent sent with every request and matched against robots.txt groups.
    /// Default: `crawler/0.1 (+https://example.invalid/crawler)`; set it to name your crawl
    /// and give operators a way to reach you.
    pub user_agent: String,
    /// Requests in flight across all hosts. Default 16.
    pub concurrency: usize,
    /// Requests in flight to one host. Default 1.
    pub concurrency_per_host: usize,
    /// How each host is paced: `adaptive` (start at `start_rate`, adapt to what the server
    /// says and how it responds), `autothrottle` (Scrapy-compatible latency-based delay), or
    /// `fixed` (`download_delay` between requests, `concurrency_per_host` in flight).
    /// Default `adaptive`.
    pub throttle: ThrottleMode,
    /// Fixed mode: the delay between requests to one host. Adaptive modes: a floor on the gap
    /// between requests. Default 0s.
    #[serde(with = "humantime_serde")]
    pub download_delay: Duration,
    /// Fixed mode: randomise each delay between 0.5x and 1.5x, so requests do not beat in
    /// lockstep. Default true.
    pub randomize_delay: bool,
    /// Adaptive mode: the rate a new host starts at, requests/s. Default 1.
    pub start_rate: f64,
    /// Adaptive mode: the lowest rate a host is slowed to, requests/s. Default 0.05.
    pub min_rate: f64,
    /// The highest rate any host is sent, requests/s, whatever the server allows.
    /// Default 10.
    pub max_rate: f64,
    /// Requests that may go back to back under `max_rate` before pacing applies. Default 1.
    pub burst: u32,
    /// Adaptive mode: a latency rise smaller than this is noise, not load. Default 50ms.
    #[serde(with = "humantime_serde")]
    pub latency_tolerance: Duration,
    /// A Retry-After (or RateLimit reset) longer than this skips the host for the run.
    /// Default 10m.
    #[serde(with = "humantime_serde")]
    pub max_retry_after: Duration,
    /// Added to every wait a server asks for, to absorb clock and network skew. Default 250ms.
    #[serde(with = "humantime_serde")]
    pub hold_margin: Duration,
    /// Text that marks a response (of any status: challenges come as 200, 403 and 503) as a
    /// challenge or block page (ASCII case-insensitive, searched in the first 64 KiB of HTML
    /// bodies).
    pub soft_block_markers: Vec<String>,
    /// How long a host is paused after a challenge page. Default 5m.
    #[serde(with = "humantime_serde")]
    pub soft_block_pause: Duration,
    /// After a soft-block pause, resume at this fraction of the previous rate. Default 0.25.
    pub soft_block_resume: f64,
    /// AutoThrottle mode: the average number of requests to have in flight to each host.
    /// Default 1.
    pub autothrottle_target_concurrency: f64,
    /// AutoThrottle mode: the longest delay. Default 60s.
    #[serde(with = "humantime_serde")]
    pub autothrottle_max_delay: Duration,
    /// Attempts after the first for a retryable failure. Default 2.
    pub retry_times: u32,
    /// HTTP statuses retried (connection errors and timeouts always are).
    /// Default 408, 429, 500, 502, 503, 504, and the CDN 520-527 and 530; not 501 or
    /// 505-511, which another attempt cannot fix.
    pub retry_http_codes: Vec<u16>,
    /// Retry backoff: attempt n waits a random time up to min(cap, base x 2^n). Default 1s.
    #[serde(with = "humantime_serde")]
    pub retry_backoff_base: Duration,
    /// Retry backoff cap. Default 60s.
    #[serde(with = "humantime_serde")]
    pub retry_backoff_cap: Duration,
    /// Total time allowed for one request, body included. Default 30s.
    #[serde(with = "humantime_serde")]
    pub download_timeout: Duration,
    /// Time allowed to open a connection. Default 10s.
    #[serde(with = "humantime_serde")]
    pub connect_timeout: Duration,
    /// Largest body accepted, in bytes after decompression; larger bodies are aborted while
    /// streaming and counted as `too_large`. Default 10 MiB.
    pub max_body_size: u64,
    /// Redirects followed per request before failing with `too_many_redirects`. Default 10.
    pub max_redirects: usize,
    /// Deepest nesting of elements accepted in an HTML page; a deeper page fails as
    /// `too_complex` and the spider never sees it. Parsing costs the page's elements times
    /// its depth, so 100,000 nested tags (1 MB) would hold a core for half a minute.
    /// Browsers stop nesting at a few hundred levels. Default 1024.
    pub parse_max_depth: u32,
    /// Most elements accepted in one HTML page; a page with more fails as `too_complex`
    /// (each element costs memory while the page is parsed). Default 500000.
    pub parse_max_elements: u64,
    /// Longest time the HTML parse of one page may take; a slower page fails as
    /// `too_complex`. The spider's own callback is not cut short. Default 10s.
    #[serde(with = "humantime_serde")]
    pub parse_timeout: Duration,
    /// Most links followed from one page: those a callback emits beyond it are dropped,
    /// counted in the stats (`links dropped`) and logged once per page. A page of 200,000
    /// links would otherwise put them all in the queue at once. 0 means no limit.
    /// Default 10000.
    pub max_links_per_page: usize,
    /// Most requests waiting in the queue when it is kept in memory (no `job_dir`, no
    /// `redis_url`): links found beyond it are dropped, counted as filtered `queue_full`
    /// and logged the first time. With a job directory the queue is on disk and this does
    /// not apply. A queued request costs about 750 bytes. 0 means no limit.
    /// Default 1000000.
    pub max_queued_requests: usize,
    /// Threads that parse pages and run the spider's callbacks, off the threads that do the
    /// network, so a heavy page never delays other hosts' downloads or inflates their
    /// measured latency; pages beyond this wait their turn. Bodies up to 32 KiB, whose
    /// worst case is milliseconds, are parsed in place (the hop costs more than the parse).
    /// 0 means one per core. Default 0.
    pub parse_threads: usize,
    /// Obey robots.txt. Default true.
    pub obey_robots: bool,
    /// Render every page in a browser before the spider sees it, as if each request asked
    /// with `.render()` (a `[[hosts]]` rule's `render` does it for some hosts). Needs the
    /// `browser` feature of the crawler crate; a crawl that sets it without is refused.
    /// Default false.
    pub render: bool,
    /// Browser: the chromium (or Chrome) executable; empty looks for `chromium`,
    /// `chromium-browser`, `google-chrome` on `PATH`. Default empty.
    pub browser_executable: String,
    /// Browser: pages rendered at once, one tab each (the bound on the browser's memory).
    /// Default 2.
    pub browser_tabs: usize,
    /// Browser: pages fetched and waiting for a tab, at most, besides those rendering;
    /// while `browser_tabs` + this many pages that render are in flight, no new page is
    /// handed out, and the next ones wait in the frontier, unfetched (not in memory, their
    /// render's deadline not running). Default 2.
    pub browser_queue: usize,
    /// Browser: the longest one page's render may take, from waiting for a tab to the DOM
    /// taken, its sub-requests (paced by their hosts' slots) included. Default 30s.
    #[serde(with = "humantime_serde")]
    pub browser_page_timeout: Duration,
    /// Browser: resource types a page may not load, refused without a request (the DevTools
    /// names: `image`, `media`, `font`, `stylesheet`, `script`, `xhr`, `fetch`, `other`).
    /// Default image, media, font.
    pub browser_block: Vec<String>,
    /// Deepest link depth followed; 0 means no limit. Default 0.
    pub depth_limit: u32,
    /// Longest URL accepted; longer ones are filtered as `url_too_long`. Default 2083.
    pub max_url_length: usize,
    /// Close the crawl once this many items were scraped in this run (a resumed job counts
    /// from where it resumed); requests in flight finish, so a few more may be written.
    /// 0 means no limit. Default 0.
    pub close_item_count: u64,
    /// Close the crawl once this many responses (of any status) were received in this run;
    /// requests in flight finish. 0 means no limit. Default 0.
    pub close_page_count: u64,
    /// Close the crawl once this many spider errors (a callback that failed or panicked)
    /// happened in this run. 0 means no limit. Default 0.
    pub close_error_count: u64,
    /// Close the crawl once it has run this long (this run; requests in flight then finish).
    /// 0s means no limit. Default 0s.
    #[serde(with = "humantime_serde")]
    pub close_timeout: Duration,
    /// How long a fetched robots.txt is trusted. Default 24h.
    #[serde(with = "humantime_serde")]
    pub robots_ttl: Duration,
    /// How long a host's robots.txt may stay unreadable (429, 5xx, timeout) before the host
    /// is skipped for the run; until then its pages wait in the queue. A host that refuses
    /// connections (or has no route) 3 times in a row is skipped at once. Default 10m.
    #[serde(with = "humantime_serde")]
    pub robots_outage_max: Duration,
    /// Keep the crawl out of private networks it was not started in: private (RFC 1918),
    /// loopback and unique-local addresses are refused when a page or redirect served from a
    /// public address leads to them (checked on every resolved address, redirect hop and
    /// robots.txt), while a crawl whose start URL is on a private or loopback host goes on
    /// within private space. Link-local and metadata addresses are refused whatever this
    /// says (see `allow_addresses`). Behind a proxy only IP literals and metadata names can
    /// be checked (see `allow_unchecked_proxy`). Default true.
    pub deny_private_addresses: bool,
    /// Addresses the crawl may reach whatever the address rules say: IP addresses, CIDR
    /// ranges (`10.0.0.0/8`) or host names. Link-local addresses (169.254.0.0/16,
    /// fe80::/10) and cloud metadata services (`metadata.google.internal`, 169.254.169.254)
    /// are refused as `forbidden_address` unless named here. Default empty.
    pub allow_addresses: Vec<String>,
    /// Crawl through a proxy (`proxy`, or `HTTP_PROXY` / `HTTPS_PROXY` / `ALL_PROXY` in the
    /// environment) without the warning the crawl logs at start: the proxy resolves host
    /// names itself, so the address rules are checked only on IP literals and metadata
    /// names, not on where names lead. Default false.
    pub allow_unchecked_proxy: bool,
    /// The job directory: persistent frontier, seen set, validators and stats, so a crawl can
    /// be paused, resumed and survive a crash. Unset: everything is in memory.
    pub job_dir: Option<String>,
    /// Send If-None-Match / If-Modified-Since from validators stored by earlier runs (needs a
    /// job directory). Default true.
    pub conditional_requests: bool,
    /// Keep full responses in the job directory and replay them instead of fetching (a
    /// development cache, like Scrapy's HTTPCACHE). Default false.
    pub http_cache: bool,
    /// Write every request that failed (after retries) to this JSON Lines file: URL, reason,
    /// attempts, last status. A path, a `file:///` URL, or an object URL (`s3://bucket/key`,
    /// `gs://`, `az://`, with the `feed_s3_*` settings and the usual environment variables,
    /// as feeds): the file is then written locally as the crawl runs (in the job directory
    /// as `failures.jsonl` if there is one, so a resumed job adds to it; else a temporary
    /// file) and uploaded when the crawl ends, in parts as a feed batch is, so the object
    /// appears whole or not at all. Unset: no file.
    pub failures_file: Option<String>,
    /// How often progress is logged when no terminal shows it live. Default 5s.
    #[serde(with = "humantime_serde")]
    pub progress_interval: Duration,
    /// Feed files items are written to, in addition to any `-o FILE` given to `crawl`. The
    /// format comes from the extension (.jsonl, .json, .csv, .xml, .parquet) or follows a colon
    /// (`items.txt:jsonl`); `-` is standard output (JSON Lines). `%(name)s` and `%(time)s`
    /// in a path become the spider's name and the crawl's start time (UTC,
    /// `2024-05-21T12-33-41`). Checked when the settings load. Default none.
    pub feeds: Vec<String>,
    /// When feed files reach the disk: `group` (flushed and fsynced at most every 50 ms,
    /// always before the requests whose items they hold are acknowledged, so an
    /// acknowledgement that survives a power failure never outlives its items) or `off`
    /// (handed to the operating system only: safe from a crash of the crawler, not from a
    /// power failure). Default `group`.
    pub feed_fsync: FeedFsync,
    /// The least severe log level shown: `error`, `warn`, `info`, `debug` or `trace`, or a
    /// `RUST_LOG`-style filter such as `info,crawler_sched=debug`. A plain level applies to
    /// the framework and the program's own crate, other crates staying at `warn`; `debug`
    /// shows one line per request and per robots.txt verdict. Default `info`.
    pub log_level: String,
    /// How log lines are written to stderr: `text` (for people) or `json` (one object a line,
    /// for log collectors). Default `text`.
    pub log_format: LogFormat,
    /// Write log lines to this file (appended to, never coloured) instead of stderr, like
    /// Scrapy's LOG_FILE; the live progress display stays on the terminal. Unset: stderr.
    pub log_file: Option<String>,
    /// Serve Prometheus metrics (per-host rates and holds, status counters, queue sizes) on
    /// this address while crawling, e.g. `127.0.0.1:9898`. A bare port binds 127.0.0.1.
    /// Unset: no endpoint.
    pub metrics_addr: Option<String>,
    /// Per-host rules, first match wins; see [`HostRule`] and [`Settings::for_host`].
    /// Written as `[[hosts]]` tables in crawler.toml. Default none.
    pub hosts: Vec<HostRule>,
    /// Where validators (conditional requests, sitemap lastmod) and the HTTP cache are kept,
    /// so that they outlive a job: a re-crawl with a fresh job directory (or none) still asks
    /// only for what changed. Unset: `JOB_DIR/cache` when `job_dir` is set, else nothing is
    /// kept between runs.
    pub cache_dir: Option<String>,
    /// With `http_cache`: answer URLs the cache holds from the cache without touching the
    /// network at all (no robots.txt, no revalidation), for developing a spider offline;
    /// URLs it lacks are fetched and stored as usual. Default false.
    pub http_cache_offline: bool,
    /// The most bytes of responses the HTTP cache keeps, oldest dropped first; 0 means no
    /// limit. Default 0.
    pub http_cache_max_bytes: u64,
    /// Crawl as one of a fleet of workers sharing a frontier, seen set, leases and per-host
    /// budgets in Redis: `redis://[:password@]host:port[/db]` or `rediss://` for TLS; a
    /// Redis Cluster by its seed nodes: `redis+cluster://[:password@]host:port,host:port`
    /// (or `rediss+cluster://`). Workers with the same `job_name` join the same crawl; each writes items to its own
    /// feeds, and appends to them when started again. Unset: the crawl is local (in memory,
    /// or `job_dir`).
    pub redis_url: Option<String>,
    /// The name workers join a shared (Redis) crawl by. Unset: the spider's name.
    pub job_name: Option<String>,
    /// With `redis_url`: how long a request handed to a worker stays leased without the
    /// worker renewing it (a live worker renews its leases); after that another worker
    /// fetches it. So this is how long a killed worker's pages wait. Default 30s.
    #[serde(with = "humantime_serde")]
    pub lease_timeout: Duration,
    /// With `redis_url`: how long workers pause and retry while Redis is unreachable
    /// before the crawl stops with an error (nothing is lost either way). Ctrl-C or SIGTERM
    /// ends the wait at once. Default 60s.
    #[serde(with = "humantime_serde")]
    pub redis_retry_for: Duration,
    /// With `redis_url`: how long the job's keys (frontier, seen set, leases, per-host
    /// politeness state) live in Redis after the last worker touched them, so a job that
    /// nobody resumes leaves nothing behind. Default 7 days.
    #[serde(with = "humantime_serde")]
    pub redis_idle_ttl: Duration,
    /// The built-in downloader middlewares to run, in order from the engine to the network
    /// (`process_request` runs in this order, `process_response` in reverse): `http_auth`,
    /// `default_headers`, `user_agent`, `cookies`, and `custom` for where the ones added in
    /// code go (at the end when `custom` is not listed). Leave one out to switch it off.
    /// Default `http_auth, default_headers, user_agent, cookies, custom`.
    pub downloader_middlewares: Vec<String>,
    /// The built-in spider middlewares to run, in order from the engine to the spider (the
    /// spider's output passes them in reverse): `referer`, and `custom` for the ones added in
    /// code. Default `referer, custom`.
    pub spider_middlewares: Vec<String>,
    /// The built-in extensions to run, in the order their signals are called (Scrapy's
    /// `EXTENSIONS`): `monitor` (on once one of its `monitor_*` bounds is set), and `custom`
    /// for where the ones added in code with `Crawl::extension` go (at the end when `custom`
    /// is not listed). Leave one out to switch it off. Default `custom, monitor`.
    pub extensions: Vec<String>,
    /// With the `monitor` extension: a crawl that runs out of work with fewer items scraped
    /// than this closes as `monitor_item_count` (Scrapy spidermon's item-count monitor).
    /// 0 is off. Default 0.
    pub monitor_min_items: u64,
    /// With the `monitor` extension: once 20 answers came, a share of answers with a status
    /// of 400 or more above this (0.2 is 20%) closes the crawl as `monitor_error_ratio`.
    /// 0 is off. Default 0.
    pub monitor_max_error_ratio: f64,
    /// Headers added to every request that does not set them, each written `Name: value`.
    /// Default `Accept: text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8` and
    /// `Accept-Language: en`.
    pub default_headers: Vec<String>,
    /// Keep cookies the sites set and send them back, one jar per spider (honouring Domain,
    /// Path, Expires/Max-Age and Secure). Default true.
    pub cookies_enabled: bool,
    /// Send HTTP Basic credentials to this domain (and its subdomains) only. Unset: none.
    pub http_auth_domain: Option<String>,
    /// The user name for `http_auth_domain`.
    pub http_auth_user: Option<String>,
    /// The password for `http_auth_domain`.
    pub http_auth_pass: Option<String>,
    /// Which Referer follow-up requests carry: `default` (the page URL, but none from https
    /// to http), `no-referrer`, `same-origin`, `origin` (scheme and host only) or
    /// `unsafe-url` (always the page URL). Default `default`.
    pub referer_policy: String,
    /// Send every request through this proxy (`http://host:port`, `https://` for TLS to the
    /// proxy, `socks5://` or `socks5h://` (names resolved by the proxy); credentials in the
    /// URL if needed). A `[[hosts]]` rule's `proxy` and a request's own
    /// (`Request::proxy`) win over it. Unset: direct, or the `HTTP_PROXY` / `HTTPS_PROXY`
    /// environment.
    pub proxy: Option<String>,
    /// What one politeness slot covers: `host` (the host and any explicit port, the default),
    /// `domain` (the registrable domain, so `a.example.com` and `b.example.com` share one
    /// budget; from the public suffix list) or `ip` (the address the host name resolves to,
    /// so every name served by one machine shares one budget, as broad crawlers do; the
    /// lowest address when a name has several; DNS answers are kept for their TTL, 65,536
    /// names at most).
    pub host_key: HostKeyMode,
    /// Share holds across host names behind one limiter, by evidence (docs/politeness.md,
    /// "Limiter groups"): the names of one registrable domain from their first request;
    /// names of different domains on one address (and port) only once one is refused while
    /// the other is held, or both announce the same RateLimit quota. A hold on one name of a
    /// group holds them all; once a refusal reaches a group, one machine paces its names,
    /// with the sums of their in-flight caps and `max_rate`s; a RateLimit quota is shared by
    /// the names that sent within its window. A fleet shares the holds, and paces a refused
    /// group of one registrable domain as one slot (names of other domains joined by
    /// evidence are paced apart there). With a `proxy` the crawler does not resolve names, so only the
    /// registrable-domain groups apply. Default true.
    pub limiter_groups: bool,
    /// Which HTTP version requests speak: `auto` (HTTP/2 where the server offers it in the
    /// TLS handshake, by ALPN, HTTP/1.1 where it prefers that and on plain `http://`), `1.1`
    /// (HTTP/1.1 only) or `2` (HTTP/2 only: over TLS a server without it fails the
    /// handshake, as `tls`; on plain `http://` HTTP/2 is spoken from the first byte, h2c
    /// with prior knowledge). Politeness is the same on both: `concurrency_per_host` bounds
    /// the streams in flight on one HTTP/2 connection as it bounds HTTP/1.1 connections.
    /// `[[hosts]]` rules may set it per host. Default `auto`.
    pub http_version: HttpVersion,
    /// A PEM file of extra CA certificates trusted beside the system's roots (a private CA,
    /// a test's own); a file that cannot be read or holds no certificate stops the crawl at
    /// start. Unset: the system's roots only.
    pub tls_ca_file: Option<String>,
    /// The oldest TLS version accepted: `1.2` or `1.3`. Default `1.2`.
    pub tls_min_version: TlsVersion,
    /// A PEM file with the client certificate (its chain, leaf first) presented to servers
    /// that ask for one (mutual TLS), and its private key unless `tls_client_key` names
    /// another file; a file that cannot be read, or holds no certificate or key, stops the
    /// crawl at start. `[[hosts]]` rules may set their own per host. Unset: no client
    /// certificate.
    pub tls_client_cert: Option<String>,
    /// A PEM file with the private key (PKCS#8, PKCS#1 or SEC1) of `tls_client_cert`, when
    /// that file does not hold it. Unset: the key is read from `tls_client_cert`.
    pub tls_client_key: Option<String>,
    /// Non-2xx statuses whose answers reach the spider's callback instead of failing the
    /// request: a list (`[404, 410]`) or `"all"` (Scrapy's `HTTPERROR_ALLOWED_CODES` and
    /// `HTTPERROR_ALLOW_ALL`). Retries come first and politeness is unchanged (an allowed
    /// 503 is retried and holds its host); redirects are still followed. A spider's own
    /// `allowed_statuses()` list replaces this list, a request's `allow_statuses` both.
    /// Default none.
    pub allowed_statuses: crate::statuses::AllowedStatuses,
    /// Write every request and response the crawl makes (pages, robots.txt, sitemaps) to
    /// WARC 1.1 files at this path, relative to the working directory: `request`, `response`
    /// and (for a 304 to a conditional request) `revisit` records after a `warcinfo` record
    /// naming the crawler and its settings, one gzip member per record when the name ends in
    /// `.gz`. `%(name)s` and `%(time)s` are the spider's name and the crawl's start time, as
    /// in feed paths; a serial number is added before the extension
    /// (`crawl-%(time)s.warc.gz` gives `crawl-2024-05-21T12-33-41-00000.warc.gz`, then
    /// `-00001` after `warc_max_size`). Unset: no WARC.
    pub warc: Option<String>,
    /// The size at which a WARC file is closed and the next one started, in bytes or with a
    /// unit (`500MB`, `1GB`; 1 KB is 1,000 bytes, 1 KiB 1,024). A request and its response
    /// always share a file. Default 1GB, as Heritrix.
    #[serde(deserialize_with = "byte_size")]
    pub warc_max_size: u64,
    /// Replay a crawl from WARC files instead of the network: paths or globs (`*` and `?`
    /// in the file name: `["out/crawl-*.warc.gz"]`), in order. The files are indexed when
    /// the crawl starts (where each record is, not its body) and every request is answered
    /// from the latest `response` record for its method and URL (a `revisit` by the
    /// response it refers to), robots.txt included, as the HTTP cache answers offline.
    /// Nothing goes to the network: a request the archive holds no response to fails as
    /// `not_archived`. Validators and the HTTP cache are not used during a replay. Gzipped
    /// files must hold one gzip member per record (as this crawler, wget and warcio write
    /// them). Default empty: no replay.
    pub replay_warc: Vec<String>,
    /// The directory the files pipeline (`crawler::files::FilesPipeline::files()`) stores
    /// files in, relative to the working directory: `full/<SHA-256 of the
    /// content>.<extension>`, so the same bytes are stored once whatever URL served them,
    /// with `index.jsonl` beside them (what was fetched when, for expiry). Or an object URL
    /// (`s3://bucket/prefix`, `gs://`, `az://`, with the `feed_s3_*` settings and the usual
    /// environment variables, as feeds): the same names under the prefix, each object
    /// uploaded once (looked up with a HEAD first; an object appears whole or not at all),
    /// and `index.jsonl` read when the crawl starts and written whole when it ends. Required
    /// when the pipeline is added. Scrapy's `FILES_STORE`.
    pub files_store: Option<String>,
    /// The item field that lists the URLs to download. Default `file_urls`.
    pub files_urls_field: String,
    /// The item field the results are written to (one `{url, path, checksum, status}` per
    /// file stored). Default `files`.
    pub files_result_field: String,
    /// How many days a stored file is fresh: within them an item naming its URL again gets
    /// the stored file without a request (`uptodate`); after them the file is asked for
    /// again with its validators (ETag, Last-Modified), and a 304 keeps it. 0: asked again
    /// every crawl. Default 90, as Scrapy's `FILES_EXPIRES`.
    pub files_expires: u32,
    /// The directory (or object URL) the images pipeline stores images in, as `files_store`
    /// (the original bytes in `full/`, thumbnails in `thumbs/<name>/`, JPEG). Scrapy's
    /// `IMAGES_STORE`.
    pub images_store: Option<String>,
    /// The item field that lists the image URLs. Default `image_urls`.
    pub images_urls_field: String,
    /// The item field the image results are written to. Default `images`.
    pub images_result_field: String,
    /// As `files_expires`, for images (days). Default 90.
    pub images_expires: u32,
    /// Images narrower than this many pixels are not stored (left out of the results,
    /// counted). Default 0.
    pub images_min_width: u32,
    /// Images lower than this many pixels are not stored. Default 0.
    pub images_min_height: u32,
    /// Thumbnails to make of each image: a name and the box it fits in,
    /// `{ small = [50, 50], big = [270, 270] }` (aspect ratio kept). Default none.
    pub images_thumbs: std::collections::BTreeMap<String, [u32; 2]>,
    /// The most pixels (width times height, read from the image's header before it is
    /// decoded) an image may have: a larger one is refused unread, so a decompression bomb
    /// (a small file that decodes to gigabytes) costs nothing. Default 40,000,000 (a
    /// 160 MB decode at most).
    pub images_max_pixels: u64,
    /// Write each feed in batches of this many items, as Scrapy's
    /// `FEED_EXPORT_BATCH_ITEM_COUNT`: every feed path (but standard output) must then name
    /// its batches with `%(batch_id)d` (from 1; `%(batch_id)05d` zero-pads) or
    /// `%(batch_time)s`. A batch appears whole once its last item is written (a local file
    /// renamed into place, an object completed), and the requests behind its items are
    /// acknowledged only then, so a resumed job writes again exactly the batches not yet
    /// complete. 0: one batch for the whole crawl. Default 0.
    pub feed_batch_items: u64,
    /// The endpoint of an S3-compatible server for `s3://` feeds, failures file and files
    /// stores (MinIO, Ceph, R2...), such as `http://127.0.0.1:9000`; plain `http://` is
    /// allowed when set here. Unset: the `AWS_ENDPOINT_URL` environment variable, else AWS
    /// itself.
    pub feed_s3_endpoint: Option<String>,
    /// The region of `s3://` feeds' buckets. Unset: `AWS_REGION` or `AWS_DEFAULT_REGION`,
    /// else `us-east-1`.
    pub feed_s3_region: Option<String>,
    /// The access key ID for `s3://` feeds. Unset: `AWS_ACCESS_KEY_ID` (or the instance's
    /// role, a web identity token...: the usual AWS chain).
    pub feed_s3_access_key_id: Option<String>,
    /// The secret access key for `s3://` feeds (a secret: shown as `***`, scrubbed from logs
    /// and errors). Unset: `AWS_SECRET_ACCESS_KEY`.
    pub feed_s3_secret_access_key: Option<String>,
    /// The size of the parts a feed object is uploaded in, in bytes or with a unit: an object
    /// larger than one part is sent as a multipart upload of such parts (completed when the
    /// batch closes, aborted on an error), a smaller one in one request; at most two parts
    /// per feed are in memory or in flight. S3 needs at least 5MiB (but for the last part).
    /// Default 8MiB.
    #[serde(deserialize_with = "byte_size")]
    pub feed_upload_part_size: u64,
    /// Items per row group of a Parquet feed: a row group is the unit a reader skips or
    /// reads in parallel, and the writer holds one in memory before writing it (10,000
    /// items of a few kilobytes: tens of megabytes). Smaller groups bound memory for large
    /// items; larger ones compress better and are fewer to read. At least 1. Default 10000.
    pub feed_parquet_row_group_items: u64,
    /// Host names answered without DNS, as curl's `--resolve`: entries
    /// `NAME:ADDRESS[,ADDRESS...]` (`shop.test:127.0.0.1`, `api.test:[::1],127.0.0.2`), for
    /// the downloader and the slot keys alike (tests and labs use it instead of editing
    /// /etc/hosts). Entries naming one name add up, so on a command line, where lists are
    /// split at commas, `-s resolve=api.test:127.0.0.2,api.test:::1` gives it both. The
    /// address rules still apply to these addresses. Default empty.
    pub resolve: Vec<String>,
    /// The DNS servers names are asked of, IP addresses with an optional port
    /// (`127.0.0.1:5353`; 53 without). Empty: the system's (`/etc/resolv.conf`), and
    /// `/etc/hosts` first either way. Default empty.
    pub dns_servers: Vec<String>,
    /// How long one DNS query may take before it is tried again (twice) and then fails the
    /// name (Scrapy's `DNS_TIMEOUT`). Default 5s.
    #[serde(with = "humantime_serde")]
    pub dns_timeout: Duration,
}

/// Which HTTP version requests speak (the `http_version` setting and `[[hosts]]` field).
/// Written `"auto"`, `"1.1"` or `"2"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
pub enum HttpVersion {
    /// HTTP/2 where the server offers it in the TLS handshake (ALPN), else HTTP/1.1.
    #[default]
    #[serde(rename = "auto")]
    Auto,
    /// HTTP/1.1 only.
    #[serde(rename = "1.1")]
    Http1,
    /// HTTP/2 only (h2c with prior knowledge on plain http).
    #[serde(rename = "2")]
    Http2,
}

/// The oldest TLS version a connection may use (the `tls_min_version` setting). Written
/// `"1.2"` or `"1.3"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
pub enum TlsVersion {
    /// TLS 1.2 and 1.3.
    #[default]
    #[serde(rename = "1.2")]
    Tls12,
    /// TLS 1.3 only.
    #[serde(rename = "1.3")]
    Tls13,
}

/// What one per-host politeness slot covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum HostKeyMode {
    /// One slot per host (and explicit port).
    #[default]
    Host,
    /// One slot per registrable domain.
    Domain,
    /// One slot per IP address (and explicit port) the host name resolves to.
    Ip,
}

/// How hosts are paced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ThrottleMode {
    /// Adapt each host's rate to its responses and headers (the default).
    Adaptive,
    /// Scrapy's AutoThrottle: delay from latency and a target concurrency.
    Autothrottle,
    /// A fixed delay and concurrency per host.
    Fixed,
}

/// When feed files are synced to the disk (the `feed_fsync` setting).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum FeedFsync {
    /// Group commit: fsync at most every 50 ms, before acknowledging the requests whose
    /// items were written.
    #[default]
    Group,
    /// Flush to the operating system only.
    Off,
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            user_agent: "crawler/0.1 (+https://example.invalid/crawler)".to_owned(),
            concurrency: 16,
            concurrency_per_host: 1,
            throttle: ThrottleMode::Adaptive,
            download_delay: Duration::ZERO,
            randomize_delay: true,
            start_rate: 1.0,
            min_rate: 0.05,
            max_rate: 10.0,
            burst: 1,
            latency_tolerance: Duration::from_millis(50),
            max_retry_after: Duration::from_secs(600),
            hold_margin: Duration::from_millis(250),
            soft_block_markers: [
                // Specific to challenge pages; words like "captcha" alone also appear on
                // ordinary pages and would pause healthy hosts.
                "unusual traffic",
                "just a moment...",
                "cf-challenge",
                "/cdn-cgi/challenge-platform/",
                "are you a robot",
            ]
            .map(String::from)
            .to_vec(),
            soft_block_pause: Duration::from_secs(300),
            soft_block_resume: 0.25,
            autothrottle_target_concurrency: 1.0,
            autothrottle_max_delay: Duration::from_secs(60),
            retry_times: 2,
            // 501 (not implemented) and 505-511 (HTTP version not supported, variant also
            // negotiates, insufficient storage, loop detected, bandwidth limit exceeded, not
            // extended, network authentication required) say something about the request or
            // the server's set-up that another attempt cannot change; the CDN 52x family are
            // origin hiccups seen through a proxy, as transient as 502.
            retry_http_codes: vec![
                408, 429, 500, 502, 503, 504, 520, 521, 522, 523, 524, 525, 526, 527, 530,
            ],
            retry_backoff_base: Duration::from_secs(1),
            retry_backoff_cap: Duration::from_secs(60),
            download_timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(10),
            max_body_size: 10 * 1024 * 1024,
            max_redirects: 10,
            parse_max_depth: 1024,
            parse_max_elements: 500_000,
            parse_timeout: Duration::from_secs(10),
            parse_threads: 0,
            max_links_per_page: 10_000,
            max_queued_requests: 1_000_000,
            obey_robots: true,
            render: false,
            browser_executable: String::new(),
            browser_tabs: 2,
            browser_queue: 2,
            browser_page_timeout: Duration::from_secs(30),
            browser_block: vec!["image".into(), "media".into(), "font".into()],
            depth_limit: 0,
            max_url_length: 2083,
            close_item_count: 0,
            close_page_count: 0,
            close_error_count: 0,
            close_timeout: Duration::ZERO,
            robots_ttl: Duration::from_secs(24 * 3600),
            robots_outage_max: Duration::from_secs(600),
            deny_private_addresses: true,
            allow_addresses: Vec::new(),
            allow_unchecked_proxy: false,
            job_dir: None,
            conditional_requests: true,
            http_cache: false,
            failures_file: None,
            progress_interval: Duration::from_secs(5),
            feeds: Vec::new(),
            feed_fsync: FeedFsync::Group,
            log_level: "info".to_owned(),
            log_format: LogFormat::Text,
            log_file: None,
            metrics_addr: None,
            hosts: Vec::new(),
            cache_dir: None,
            http_cache_offline: false,
            http_cache_max_bytes: 0,
            redis_url: None,
            job_name: None,
            lease_timeout: Duration::from_secs(30),
            redis_retry_for: Duration::from_secs(60),
            redis_idle_ttl: Duration::from_secs(7 * 24 * 3600),
            downloader_middlewares: crate::middleware::DOWNLOADER_MIDDLEWARES
                .iter()
                .map(|s| (*s).to_owned())
                .collect(),
            spider_middlewares: crate::middleware::SPIDER_MIDDLEWARES
                .iter()
                .map(|s| (*s).to_owned())
                .collect(),
            extensions: crate::extension::EXTENSIONS
                .iter()
                .map(|s| (*s).to_owned())
                .collect(),
            monitor_min_items: 0,
            monitor_max_error_ratio: 0.0,
            default_headers: vec![
                "Accept: text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"
                    .to_owned(),
                "Accept-Language: en".to_owned(),
            ],
            cookies_enabled: true,
            http_auth_domain: None,
            http_auth_user: None,
            http_auth_pass: None,
            referer_policy: "default".to_owned(),
            proxy: None,
            host_key: HostKeyMode::Host,
            limiter_groups: true,
            http_version: HttpVersion::Auto,
            tls_ca_file: None,
            tls_min_version: TlsVersion::Tls12,
            tls_client_cert: None,
            tls_client_key: None,
            allowed_statuses: crate::statuses::AllowedStatuses::default(),
            warc: None,
            warc_max_size: 1_000_000_000,
            replay_warc: Vec::new(),
            files_store: None,
            files_urls_field: "file_urls".to_owned(),
            files_result_field: "files".to_owned(),
            files_expires: 90,
            images_store: None,
            images_urls_field: "image_urls".to_owned(),
            images_result_field: "images".to_owned(),
            images_expires: 90,
            images_min_width: 0,
            images_min_height: 0,
            images_thumbs: std::collections::BTreeMap::new(),
            images_max_pixels: 40_000_000,
            feed_batch_items: 0,
            feed_s3_endpoint: None,
            feed_s3_region: None,
            feed_s3_access_key_id: None,
            feed_s3_secret_access_key: None,
            feed_upload_part_size: 8 * 1024 * 1024,
            feed_parquet_row_group_items: 10_000,
            resolve: Vec::new(),
            dns_servers: Vec::new(),
            dns_timeout: Duration::from_secs(5),
        }
    }
}

impl std::fmt::Debug for Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("Settings");
        for (key, value) in self.to_map().unwrap_or_default() {
            match value {
                serde_json::Value::String(text) => {
                    d.field(&key, &crate::redact::redact_setting(&key, &text))
                }
                // `[[hosts]]` rules may carry a proxy URL with its password.
                other => d.field(
                    &key,
                    &format_args!("{}", crate::redact::redact_text(&other.to_string())),
                ),
            };
        }
        d.finish()
    }
}

impl Settings {
    /// The names of all settings, in declaration order.
    pub fn keys() -> Vec<String> {
        match serde_json::to_value(Settings::default()) {
            Ok(serde_json::Value::Object(map)) => map.keys().cloned().collect(),
            _ => Vec::new(),
        }
    }

    /// Check ranges that types alone cannot express, and register the secrets these
    /// settings hold ([`crate::redact::register_secrets`]), so that no log line, error
    /// message or metric shows them from here on. Every run path checks its settings here
    /// before it logs or uses them (resolving layers, [`Settings::set`], a crawl's
    /// effective settings, logging set up from settings, the engine's start), so this is
    /// the one place secrets are registered.
    pub fn validate(&self) -> Result<()> {
        crate::redact::register_secrets(self);
        match self.problem() {
            Some((keys, why)) => Err(Error::new(
                ErrorKind::Settings,
                format!("setting {} {why}", keys.join(", ")),
            )),
            None => Ok(()),
        }
    }

    /// The effective settings for one host: the first `[[hosts]]` rule whose pattern
    /// matches `host` (a host key: `host`, or `host:port` for a non-default port) is applied
    /// over these settings; later matching rules are ignored. With no match, a copy of these
    /// settings.
    pub fn for_host(&self, host: &str) -> Settings {
        let mut s = self.clone();
        if let Some(rule) = self.hosts.iter().find(|r| r.matches(host)) {
            rule.apply(&mut s);
        }
        s
    }

    /// The first range problem: the keys involved (the one to blame first) and why.
    pub fn problem(&self) -> Option<(Vec<&'static str>, String)> {
        let bad = |keys: &[&'static str], why: &str| Some((keys.to_vec(), why.to_owned()));
        if self.concurrency == 0 {
            return bad(&["concurrency"], "must be at least 1");
        }
        if self.concurrency_per_host == 0 {
            return bad(&["concurrency_per_host"], "must be at least 1");
        }
        if self.lease_timeout < Duration::from_millis(500) {
            // Leases are renewed every quarter of the timeout; shorter would flood Redis.
            return bad(&["lease_timeout"], "must be at least 500ms");
        }
        if self.download_timeout.is_zero() {
            return bad(&["download_timeout"], "must be longer than 0s");
        }
        if self.browser_tabs == 0 {
            return bad(&["browser_tabs"], "must be at least 1");
        }
        if self.browser_page_timeout.is_zero() {
            return bad(&["browser_page_timeout"], "must be longer than 0s");
        }
        if self.max_body_size == 0 {
            return bad(&["max_body_size"], "must be at least 1 byte");
        }
        let rate_ok = |r: f64| r.is_finite() && r > 0.0;
        for (key, rate) in [
            ("min_rate", self.min_rate),
            ("start_rate", self.start_rate),
            ("max_rate", self.max_rate),
        ] {
            if !rate_ok(rate) {
                return bad(&[key], "must be a positive number");
            }
        }
        if self.min_rate > self.max_rate {
            return bad(&["min_rate", "max_rate"], "must not exceed max_rate");
        }
        if self.parse_max_depth == 0 {
            return bad(&["parse_max_depth"], "must be at least 1");
        }
        if self.parse_max_elements == 0 {
            return bad(&["parse_max_elements"], "must be at least 1");
        }
        if self.parse_timeout.is_zero() {
            return bad(&["parse_timeout"], "must be longer than 0s");
        }
        if self.burst == 0 {
            return bad(&["burst"], "must be at least 1");
        }
        if self.soft_block_resume.is_nan()
            || self.soft_block_resume <= 0.0
            || self.soft_block_resume > 1.0
        {
            return bad(&["soft_block_resume"], "must be in (0, 1]");
        }
        if self.autothrottle_target_concurrency.is_nan()
            || self.autothrottle_target_concurrency <= 0.0
        {
            return bad(&["autothrottle_target_concurrency"], "must be positive");
        }
        if self.user_agent.trim().is_empty() {
            return bad(&["user_agent"], "must not be empty");
        }
        if let Some(addr) = &self.metrics_addr
            && metrics_socket_addr(addr).is_none()
        {
            return bad(
                &["metrics_addr"],
                "must be an address like 127.0.0.1:9898 or a port",
            );
        }
        if let Some(proxy) = self.proxy.as_deref().filter(|p| !p.trim().is_empty())
            && !proxy_url_ok(proxy.trim())
        {
            // The value is echoed redacted: a proxy URL often carries a password.
            return Some((
                vec!["proxy"],
                format!(
                    "is an invalid proxy URL '{}': use http://host:port, https://host:port, \
                     socks5://host:port or socks5h://host:port",
                    crate::redact::redact_url(proxy)
                ),
            ));
        }
        if self
            .tls_ca_file
            .as_deref()
            .is_some_and(|f| f.trim().is_empty())
        {
            return bad(&["tls_ca_file"], "must name a PEM file (or be unset)");
        }
        let blank = |f: &Option<String>| f.as_deref().is_some_and(|f| f.trim().is_empty());
        if blank(&self.tls_client_cert) {
            return bad(&["tls_client_cert"], "must name a PEM file (or be unset)");
        }
        if blank(&self.tls_client_key) {
            return bad(&["tls_client_key"], "must name a PEM file (or be unset)");
        }
        if self.tls_client_key.is_some() && self.tls_client_cert.is_none() {
            return bad(
                &["tls_client_key", "tls_client_cert"],
                "a client key needs its certificate (tls_client_cert)",
            );
        }
        if let Some(why) = self.dns_problem() {
            return Some(why);
        }
        if let Some(why) = crate::middleware::settings_problem(self) {
            return Some(why);
        }
        if let Some(why) = self.feeds_problem() {
            return Some(why);
        }
        if let Some(file) = self.failures_file.as_deref() {
            if let Some(why) = crate::feed::location_problem(file, true) {
                return bad(&["failures_file"], &why);
            }
            if self.redis_url.is_some() && crate::feed::object_scheme(file).is_some() {
                return bad(
                    &["failures_file", "redis_url"],
                    "is an object, which the workers of a fleet would each write under the \
                     same name: fleets write their failures files locally",
                );
            }
        }
        if let Some(why) = self.warc_problem() {
            return Some(why);
        }
        if let Some(why) = self.media_problem() {
            return Some(why);
        }
        for rule in &self.hosts {
            if let Some((field, why)) = rule.problem() {
                return Some((
                    vec!["hosts"],
                    format!("rule '{}': {field} {why}", rule.pattern),
                ));
            }
            if let Some(proxy) = rule.proxy.as_deref()
                && !proxy_url_ok(proxy.trim())
            {
                return Some((
                    vec!["hosts"],
                    format!(
                        "rule '{}': proxy is an invalid proxy URL '{}': use http://, https://, \
                         socks5:// or socks5h://host:port",
                        rule.pattern,
                        crate::redact::redact_url(proxy)
                    ),
                ));
            }
        }
        None
    }

    /// The first bad `resolve` or `dns_servers` entry, or a zero `dns_timeout`.
    fn dns_problem(&self) -> Option<(Vec<&'static str>, String)> {
        if let Some(why) = self
            .resolve
            .iter()
            .find_map(|e| crate::dns::parse_resolve(e).err())
        {
            return Some((vec!["resolve"], format!("has an invalid entry {why}")));
        }
        if let Some(why) = self
            .dns_servers
            .iter()
            .find_map(|e| crate::dns::parse_dns_server(e).err())
        {
            return Some((vec!["dns_servers"], format!("has an invalid entry {why}")));
        }
        if self.dns_timeout.is_zero() {
            return Some((vec!["dns_timeout"], "must be longer than 0s".to_owned()));
        }
        None
    }

    /// The settings as a flat JSON map, key by key: the form the layers work on, so a field
    /// added here is settable from every layer.
    pub fn to_map(&self) -> Result<serde_json::Map<String, serde_json::Value>> {
        match serde_json::to_value(self) {
            Ok(serde_json::Value::Object(map)) => Ok(map),
            _ => Err(Error::new(ErrorKind::Settings, "settings are not a map")),
        }
    }

    /// Settings back from that map (not validated: see [`Settings::validate`]).
    pub fn from_map(map: serde_json::Map<String, serde_json::Value>) -> Result<Settings> {
        serde_json::from_value(serde_json::Value::Object(map))
            .map_err(|e| Error::new(ErrorKind::Settings, e.to_string()))
    }
}

impl Settings {
    /// The first feed in `feeds` that cannot be written: an unknown format or placeholder,
    /// two feeds on standard output, or a JSON array a fleet worker would have to append to.
    /// Checked when the settings load, so `settings` reports it at its file:line, not the
    /// crawl.
    fn feeds_problem(&self) -> Option<(Vec<&'static str>, String)> {
        if self.feed_upload_part_size < 64 * 1024 {
            return Some((
                vec!["feed_upload_part_size"],
                "must be at least 64KiB (S3 itself needs 5MiB)".to_owned(),
            ));
        }
        if self.feed_parquet_row_group_items == 0 {
            return Some((
                vec!["feed_parquet_row_group_items"],
                "must be at least 1 (items per row group of a Parquet feed)".to_owned(),
            ));
        }
        if let Some(endpoint) = self.feed_s3_endpoint.as_deref()
            && url::Url::parse(endpoint)
                .ok()
                .filter(|u| matches!(u.scheme(), "http" | "https") && u.host().is_some())
                .is_none()
        {
            return Some((
                vec!["feed_s3_endpoint"],
                format!(
                    "'{}' is not an http:// or https:// URL, such as http://127.0.0.1:9000",
                    crate::redact::redact_url(endpoint)
                ),
            ));
        }
        let mut stdout = 0;
        for feed in &self.feeds {
            if let Some(why) = crate::feed::feed_problem(feed) {
                return Some((vec!["feeds"], format!("entry '{feed}': {why}")));
            }
            // `feed_problem` found none, so this parses; a failure would skip the entry only.
            let Ok(spec) = crate::feed::FeedSpec::new(feed.as_str()) else {
                continue;
            };
            stdout += usize::from(spec.is_stdout());
            if stdout > 1 {
                return Some((
                    vec!["feeds"],
                    "names standard output ('-') twice".to_owned(),
                ));
            }
            if let Some(why) = crate::feed::batch_problem(feed, self.feed_batch_items) {
                return Some((vec!["feeds", "feed_batch_items"], format!("entry {why}")));
            }
            if self.redis_url.is_some() && spec.is_object() {
                return Some((
                    vec!["feeds", "redis_url"],
                    format!(
                        "entry '{feed}' is an object, which the workers of a fleet would each \
                         write under the same name: fleets write their feeds to local files \
                         for now"
                    ),
                ));
            }
            if self.redis_url.is_some()
                && spec.format.is_closed_document()
                && !spec.is_batched()
                && self.feed_batch_items == 0
            {
                return Some((
                    vec!["feeds", "redis_url"],
                    format!(
                        "entry '{feed}' is one JSON array or XML document, which a fleet worker \
                         cannot append to when it is started again: use .jsonl, or batches"
                    ),
                ));
            }
        }
        None
    }
}

// Here, beside the fields it sets and `for_host` that calls it, so that host_rules.rs needs
// nothing from the schema.
impl HostRule {
    /// Set what this rule sets over `s`.
    pub fn apply(&self, s: &mut Settings) {
        if let Some(rate) = self.rate {
            s.max_rate = rate;
            // A floor above the ceiling would fail validation; the rule's ceiling is what the
            // user asked for, so the floor gives way. The host also starts at the rule's
            // rate: a rule is written for a host whose budget is known (one you own, or a
            // fragile one), so there is nothing to discover from a start of 1 request/s.
            s.min_rate = s.min_rate.min(rate);
            s.start_rate = rate;
        }
        if let Some(start) = self.start_rate {
            s.start_rate = start.min(s.max_rate);
        }
        if let Some(burst) = self.burst {
            s.burst = burst;
        }
        if let Some(c) = self.concurrency {
            s.concurrency_per_host = c;
        }
        if let Some(d) = self.delay {
            s.download_delay = d;
        }
        if let Some(ignore) = self.ignore_robots {
            s.obey_robots = !ignore;
        }
        if let Some(render) = self.render {
            s.render = render;
        }
        if let Some(version) = self.http_version {
            s.http_version = version;
        }
        if let Some(proxy) = &self.proxy {
            s.proxy = Some(proxy.clone());
        }
        if let Some(cert) = &self.tls_client_cert {
            s.tls_client_cert = Some(cert.clone());
            s.tls_client_key.clone_from(&self.tls_client_key);
        }
    }
}

/// Whether `proxy` is a URL the HTTP client takes as a proxy: http or https with a host
/// (a bare `host:port` means http, as for the client).
fn proxy_url_ok(proxy: &str) -> bool {
    let parsed = match url::Url::parse(proxy) {
        Ok(u) if u.has_host() => Ok(u),
        Ok(_) | Err(url::ParseError::RelativeUrlWithoutBase) => {
            url::Url::parse(&format!("http://{proxy}"))
        }
        Err(e) => Err(e),
    };
    parsed.is_ok_and(|u| {
        matches!(u.scheme(), "http" | "https" | "socks5" | "socks5h")
            && u.host_str().is_some_and(|h| !h.is_empty())
    })
}

/// Parse a metrics address: `host:port`, or a bare port on 127.0.0.1.
pub(crate) fn metrics_socket_addr(addr: &str) -> Option<SocketAddr> {
    let addr = addr.trim();
    if let Ok(port) = addr.parse::<u16>() {
        return Some(SocketAddr::from(([127, 0, 0, 1], port)));
    }
    addr.parse().ok()
}

impl Settings {
    /// The metrics endpoint's socket address, if `metrics_addr` is set.
    pub fn metrics_socket_addr(&self) -> Option<SocketAddr> {
        self.metrics_addr.as_deref().and_then(metrics_socket_addr)
    }

    /// Whether `user_agent` is still the built-in default (the crawl should warn: operators
    /// cannot tell who is crawling them).
    pub fn has_default_user_agent(&self) -> bool {
        self.user_agent == Settings::default().user_agent
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_rules_first_match_wins() {
        let mut s = Settings::default();
        s.set(
            "hosts",
            r#"[{"match":"*.example.com","rate":50,"concurrency":8},{"match":"*","rate":0.5}]"#,
        )
        .unwrap();
        let h = s.for_host("www.example.com");
        assert_eq!((h.max_rate, h.concurrency_per_host), (50.0, 8));
        let other = s.for_host("example.com");
        assert_eq!(other.max_rate, 0.5);
        assert!(other.start_rate <= 0.5 && other.min_rate <= 0.5);
        assert!(other.validate().is_ok());
        let port = s.for_host("a.example.com:8080");
        assert_eq!(port.max_rate, 50.0);
    }

    #[test]
    fn a_host_rule_rate_is_also_where_the_host_starts() {
        let mut s = Settings::default();
        s.set(
            "hosts",
            r#"[{"match":"own.test","rate":200},{"match":"slow.test","rate":50,"start_rate":5}]"#,
        )
        .unwrap();
        // An owned host with a known budget does not start at the polite 1 request/s.
        let own = s.for_host("own.test");
        assert_eq!((own.max_rate, own.start_rate), (200.0, 200.0));
        assert!(own.validate().is_ok());
        // A rule's own start_rate wins.
        assert_eq!(s.for_host("slow.test").start_rate, 5.0);
        // Hosts without a rule keep the defaults.
        assert_eq!(
            s.for_host("other.test").start_rate,
            Settings::default().start_rate
        );
    }

    #[test]
    fn http_version_and_tls_settings_are_read_from_text_and_rules() {
        let mut s = Settings::default();
        assert_eq!(s.http_version, HttpVersion::Auto);
        s.set("http_version", "2").unwrap();
        assert_eq!(s.http_version, HttpVersion::Http2);
        s.set("http_version", "1.1").unwrap();
        assert_eq!(s.http_version, HttpVersion::Http1);
        let err = s.set("http_version", "3").unwrap_err().to_string();
        assert!(err.contains("http_version"), "{err}");
        s.set("tls_min_version", "1.3").unwrap();
        assert_eq!(s.tls_min_version, TlsVersion::Tls13);
        assert!(s.set("tls_min_version", "1.1").is_err());
        s.set("tls_ca_file", "/etc/ca.pem").unwrap();
        assert_eq!(s.tls_ca_file.as_deref(), Some("/etc/ca.pem"));
        s.set(
            "hosts",
            r#"[{"match":"old.test","http_version":"1.1","tls_verify":false}]"#,
        )
        .unwrap();
        s.set("http_version", "auto").unwrap();
        assert_eq!(s.for_host("old.test").http_version, HttpVersion::Http1);
        assert_eq!(s.for_host("new.test").http_version, HttpVersion::Auto);
        assert_eq!(s.hosts[0].tls_verify, Some(false));
    }
}

/// A size in bytes from a number or a text with a unit: `1GB`, `500 MB`, `64KiB`, `10000`.
fn byte_size<'de, D: serde::Deserializer<'de>>(d: D) -> std::result::Result<u64, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Size {
        Bytes(u64),
        Text(String),
    }
    match Size::deserialize(d)? {
        Size::Bytes(n) => Ok(n),
        Size::Text(text) => parse_byte_size(&text).map_err(serde::de::Error::custom),
    }
}

/// `text` as a number of bytes: digits, then an optional unit (`B`, `KB`/`MB`/`GB`/`TB` in
/// powers of 1,000, `KiB`/`MiB`/`GiB`/`TiB` in powers of 1,024; case-insensitive).
pub(crate) fn parse_byte_size(text: &str) -> std::result::Result<u64, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let n: u64 = digits.parse().map_err(|_| {
        format!("'{text}' is not a size: write bytes, or a number and a unit such as 500MB or 1GB")
    })?;
    let factor: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kb" | "k" => 1_000,
        "mb" | "m" => 1_000_000,
        "gb" | "g" => 1_000_000_000,
        "tb" | "t" => 1_000_000_000_000,
        "kib" => 1 << 10,
        "mib" => 1 << 20,
        "gib" => 1 << 30,
        "tib" => 1 << 40,
        other => {
            return Err(format!(
                "unknown size unit '{other}' in '{text}': use B, KB, MB, GB, TB, KiB, MiB, GiB or TiB"
            ));
        }
    };
    n.checked_mul(factor)
        .ok_or_else(|| format!("'{text}' is too large"))
}

impl Settings {
    /// Why `warc` or `warc_max_size` cannot be used: an unknown placeholder, an empty path,
    /// standard output, or a size too small for a record.
    fn warc_problem(&self) -> Option<(Vec<&'static str>, String)> {
        if self.warc_max_size < 1024 {
            return Some((
                vec!["warc_max_size"],
                "must be at least 1KiB (1024 bytes)".to_owned(),
            ));
        }
        if self.replay_warc.iter().any(|p| p.trim().is_empty()) {
            return Some((
                vec!["replay_warc"],
                "has an empty entry: each names WARC files (a path or a glob)".to_owned(),
            ));
        }
        let path = self.warc.as_deref()?;
        if path.trim().is_empty() || path == crate::feed::STDOUT_FEED {
            return Some((
                vec!["warc"],
                format!("'{path}' is not a file path: WARC files are written to a file"),
            ));
        }
        crate::feed::expand_feed_path(path, "spider", std::time::SystemTime::UNIX_EPOCH)
            .err()
            .map(|e| {
                (
                    vec!["warc"],
                    e.to_string().replace("feed path", "WARC path"),
                )
            })
    }
}

impl Settings {
    /// Why the files or images pipeline's settings cannot be used: an empty field name or
    /// store, a thumbnail box with a zero side or a name that is not a plain directory
    /// name, no pixels allowed.
    fn media_problem(&self) -> Option<(Vec<&'static str>, String)> {
        let bad = |k: &'static str, why: String| Some((vec![k], why));
        for (key, value) in [
            ("files_urls_field", &self.files_urls_field),
            ("files_result_field", &self.files_result_field),
            ("images_urls_field", &self.images_urls_field),
            ("images_result_field", &self.images_result_field),
        ] {
            if value.trim().is_empty() {
                return bad(key, "must name an item field".to_owned());
            }
        }
        for (key, store) in [
            ("files_store", &self.files_store),
            ("images_store", &self.images_store),
        ] {
            if store.as_deref().is_some_and(|s| s.trim().is_empty()) {
                return bad(key, "must name a directory (or be unset)".to_owned());
            }
            if let Some(why) = store
                .as_deref()
                .and_then(|s| crate::feed::location_problem(s, false))
            {
                return bad(key, why);
            }
        }
        if self.images_max_pixels == 0 {
            return bad("images_max_pixels", "must be at least 1".to_owned());
        }
        for (name, [w, h]) in &self.images_thumbs {
            let plain = !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
            if !plain {
                return bad(
                    "images_thumbs",
                    format!(
                        "'{name}' is not a thumbnail name (letters, digits, '-' and '_': it \
                         names a directory)"
                    ),
                );
            }
            if *w == 0 || *h == 0 {
                return bad(
                    "images_thumbs",
                    format!("'{name}': a thumbnail's box needs both sides over 0, not {w}x{h}"),
                );
            }
        }
        None
    }
}

#[cfg(test)]
mod media_tests {
    use super::*;

    #[test]
    fn media_settings_have_scrapy_defaults_and_refuse_bad_thumbnails() {
        let s = Settings::default();
        assert_eq!(s.files_urls_field, "file_urls");
        assert_eq!(s.images_result_field, "images");
        assert_eq!(s.files_expires, 90);
        let mut s = Settings::default();
        s.set("images_thumbs", r#"{"small": [50, 50]}"#)
            .expect("a box");
        assert_eq!(s.images_thumbs.get("small"), Some(&[50, 50]));
        s.set("images_expires", "7").expect("days");
        assert_eq!(s.images_expires, 7);
        let mut s = Settings::default();
        s.images_thumbs.insert("../up".into(), [10, 10]);
        let e = s.validate().expect_err("a path is not a name").to_string();
        assert!(e.contains("images_thumbs") && e.contains("../up"), "{e}");
        let mut s = Settings::default();
        s.images_thumbs.insert("zero".into(), [0, 10]);
        let e = s.validate().expect_err("a zero side").to_string();
        assert!(e.contains("0x10"), "{e}");
        let s = Settings {
            files_result_field: " ".into(),
            ..Settings::default()
        };
        let e = s.validate().expect_err("no field").to_string();
        assert!(e.contains("files_result_field"), "{e}");
    }
}

#[cfg(test)]
mod warc_tests {
    use super::*;

    #[test]
    fn warc_max_size_takes_bytes_or_a_unit() {
        let mut s = Settings::default();
        assert_eq!(s.warc_max_size, 1_000_000_000);
        for (text, bytes) in [
            ("500MB", 500_000_000),
            ("1 GiB", 1 << 30),
            ("64kb", 64_000),
            ("2048", 2048),
        ] {
            s.set("warc_max_size", text).expect(text);
            assert_eq!(s.warc_max_size, bytes, "{text}");
        }
        let e = s
            .set("warc_max_size", "3 parsecs")
            .expect_err("no such unit");
        assert!(e.to_string().contains("unknown size unit"), "{e}");
        let e = s.set("warc_max_size", "100").expect_err("too small");
        assert!(e.to_string().contains("at least 1KiB"), "{e}");
    }

    #[test]
    fn a_warc_path_with_an_unknown_placeholder_or_stdout_is_refused() {
        let mut s = Settings::default();
        s.set("warc", "out/%(name)s-%(time)s.warc.gz")
            .expect("placeholders");
        let e = s
            .set("warc", "out/%(batch)s.warc.gz")
            .expect_err("unknown placeholder");
        assert!(e.to_string().contains("WARC path"), "{e}");
        assert!(s.set("warc", "-").is_err());
    }

    #[test]
    fn a_hosts_rule_proxy_is_checked_applied_and_redacted() {
        let mut s = Settings::default();
        s.set(
            "hosts",
            r#"[{"match":"geo.test","proxy":"http://u:rule-pass-42@127.0.0.1:3128"}]"#,
        )
        .unwrap();
        assert_eq!(
            s.for_host("geo.test").proxy.as_deref(),
            Some("http://u:rule-pass-42@127.0.0.1:3128")
        );
        assert_eq!(s.for_host("other.test").proxy, None);
        let shown = format!("{s:?}");
        assert!(!shown.contains("rule-pass-42"), "{shown}");
        let err = s
            .set(
                "hosts",
                r#"[{"match":"geo.test","proxy":"ftp://u:rule-pass-42@127.0.0.1:21"}]"#,
            )
            .unwrap_err()
            .to_string();
        assert!(err.contains("proxy") && err.contains("geo.test"), "{err}");
        assert!(!err.contains("rule-pass-42"), "{err}");
    }
}
