//! The sections of crawler.toml: which setting lives in which `[section]`. The one list the
//! file loader, the `settings` listing and the generated reference all read.

/// One documented section of crawler.toml.
#[derive(Debug, Clone, Copy)]
pub struct Section {
    /// The table name, `[name]`.
    pub name: &'static str,
    /// What the section is for.
    pub about: &'static str,
    /// The settings that live in it.
    pub keys: &'static [&'static str],
    /// Settings not listed anywhere whose names start with one of these also live here, so a
    /// new `retry_*` or `sitemap_*` field lands in the right section without an edit.
    pub prefixes: &'static [&'static str],
}

/// Which setting lives in which crawler.toml section: the one list the loader, the `settings`
/// verb and the generated reference all read. Settings no section claims are `general`.
pub const SECTIONS: &[Section] = &[
    Section {
        name: "general",
        about: "Identity, global concurrency, limits on requests and responses.",
        keys: &[
            "user_agent",
            "concurrency",
            "download_timeout",
            "connect_timeout",
            "max_body_size",
            "max_redirects",
            "parse_max_depth",
            "parse_max_elements",
            "parse_timeout",
            "parse_threads",
            "max_links_per_page",
            "max_queued_requests",
            "depth_limit",
            "max_url_length",
            "deny_private_addresses",
            "allow_addresses",
            "allow_unchecked_proxy",
        ],
        prefixes: &[],
    },
    Section {
        name: "throttle",
        about: "Politeness: how each host is paced, and how the crawler reacts to servers \
                that ask it to slow down.",
        keys: &[
            "throttle",
            "concurrency_per_host",
            "download_delay",
            "randomize_delay",
            "start_rate",
            "host_key",
            "limiter_groups",
            "min_rate",
            "max_rate",
            "burst",
            "latency_tolerance",
            "max_retry_after",
            "hold_margin",
            "soft_block_markers",
            "soft_block_pause",
            "soft_block_resume",
        ],
        prefixes: &["autothrottle_", "soft_block_", "throttle_"],
    },
    Section {
        name: "retry",
        about: "Which failures are retried, how often, and the backoff between attempts.",
        keys: &[],
        prefixes: &["retry_"],
    },
    Section {
        name: "robots",
        about: "robots.txt.",
        keys: &["obey_robots"],
        prefixes: &["robots_"],
    },
    Section {
        name: "sitemaps",
        about: "Sitemap discovery and incremental re-crawls from sitemap lastmod.",
        keys: &[],
        prefixes: &["sitemap"],
    },
    Section {
        name: "cache",
        about: "Conditional requests and the development HTTP cache (both need a job \
                directory).",
        keys: &["conditional_requests", "http_cache"],
        prefixes: &["cache_", "http_cache_"],
    },
    Section {
        name: "feeds",
        about: "Where items are written.",
        keys: &["feeds"],
        prefixes: &["feed_"],
    },
    Section {
        name: "job",
        about: "The job directory (pause, resume, survive a crash), the failures file, and \
                a shared crawl on Redis (redis_url, job_name, lease_timeout).",
        keys: &["job_dir", "failures_file", "lease_timeout"],
        prefixes: &["job_", "redis_"],
    },
    Section {
        name: "close",
        about: "When the crawl closes before its queue runs out (Scrapy's CLOSESPIDER_*): \
                after so many items, pages or spider errors, or after a time. 0 is off.",
        keys: &[
            "close_item_count",
            "close_page_count",
            "close_error_count",
            "close_timeout",
        ],
        prefixes: &["close_"],
    },
    Section {
        name: "middlewares",
        about: "Downloader and spider middlewares: which built-ins run and in what order, \
                default headers, cookies, HTTP auth for one domain, the referer policy.",
        keys: &[
            "downloader_middlewares",
            "spider_middlewares",
            "default_headers",
            "referer_policy",
            "proxy",
        ],
        prefixes: &["cookies_", "http_auth_"],
    },
    Section {
        name: "extensions",
        about: "Extensions subscribed to the crawl's signals: which built-ins run and in \
                what order, and the bounds of the built-in monitor.",
        keys: &["extensions"],
        prefixes: &["monitor_"],
    },
    Section {
        name: "browser",
        about: "Rendering pages in chromium (the `browser` feature): which pages, how many \
                at once, how long, what they may load.",
        keys: &["render"],
        prefixes: &["browser_"],
    },
    Section {
        name: "logging",
        about: "Log level and format, and progress lines.",
        keys: &["progress_interval"],
        prefixes: &["log_", "progress_"],
    },
    Section {
        name: "metrics",
        about: "The optional Prometheus endpoint.",
        keys: &[],
        prefixes: &["metrics_"],
    },
    Section {
        name: "warc",
        about: "WARC archives of every request and response the crawl makes, and crawls replayed from them.",
        keys: &["warc", "replay_warc"],
        prefixes: &["warc_"],
    },
    Section {
        name: "files",
        about: "The files pipeline: files that items name, fetched through the crawl and stored by content.",
        keys: &[],
        prefixes: &["files_"],
    },
    Section {
        name: "images",
        about: "The images pipeline: the files pipeline for images, with a size filter and thumbnails.",
        keys: &[],
        prefixes: &["images_"],
    },
    Section {
        name: "dns",
        about: "Name resolution: names answered without DNS, the DNS servers asked, how \
                long a query may take.",
        keys: &["resolve"],
        prefixes: &["dns_"],
    },
];

/// Keys that are not plain settings of a section (`[[hosts]]` is an array of tables).
pub const SPECIAL_KEYS: &[&str] = &["hosts"];

/// The crawler.toml section a setting lives in.
pub fn section_of(key: &str) -> &'static str {
    if let Some(s) = SECTIONS.iter().find(|s| s.keys.contains(&key)) {
        return s.name;
    }
    SECTIONS
        .iter()
        .find(|s| s.prefixes.iter().any(|p| key.starts_with(p)))
        .map_or("general", |s| s.name)
}
