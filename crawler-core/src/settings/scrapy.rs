//! Scrapy's setting names: the one table that says what each is called here, read by every
//! layer (crawler.toml, `-s`, `CRAWLER_*` variables) so that `DOWNLOAD_DELAY` or
//! `-s CONCURRENT_REQUESTS=8` gets one precise message instead of a generic "unknown
//! setting", and by the "Coming from Scrapy" page (docs/coming-from-scrapy.md), whose
//! settings table a test keeps equal to this one.

use super::sections::section_of;

/// What a Scrapy setting is here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Ours {
    /// The same knob under another name (the note says where meaning or units differ).
    Key(&'static str),
    /// A value of one of our settings: `Value("throttle", "\"autothrottle\"")` is
    /// `throttle = "autothrottle"`, written as in crawler.toml.
    Value(&'static str, &'static str),
    /// No setting: what to do instead.
    Instead(&'static str),
}

/// One Scrapy setting and its counterpart here.
#[derive(Debug, Clone, Copy)]
pub(super) struct ScrapyName {
    /// Scrapy's name, as Scrapy writes it (`DOWNLOAD_DELAY`).
    pub scrapy: &'static str,
    /// What it is here.
    pub ours: Ours,
    /// Where the meaning or the units differ; empty when they do not.
    pub note: &'static str,
}

const fn key(scrapy: &'static str, ours: &'static str, note: &'static str) -> ScrapyName {
    ScrapyName {
        scrapy,
        ours: Ours::Key(ours),
        note,
    }
}

const fn value(
    scrapy: &'static str,
    ours: &'static str,
    to: &'static str,
    note: &'static str,
) -> ScrapyName {
    ScrapyName {
        scrapy,
        ours: Ours::Value(ours, to),
        note,
    }
}

const fn instead(scrapy: &'static str, what: &'static str) -> ScrapyName {
    ScrapyName {
        scrapy,
        ours: Ours::Instead(what),
        note: "",
    }
}

const SECONDS: &str =
    "Scrapy's is a number of seconds; ours is a duration, written like \"2s\" or \"500ms\"";

/// Scrapy's settings (from its settings reference) a Scrapy user is likely to type, and what
/// each is here. Every key named exists in [`Settings`](super::Settings) (a test checks it).
pub(super) const SCRAPY_NAMES: &[ScrapyName] = &[
    // Concurrency and pacing.
    key("CONCURRENT_REQUESTS", "concurrency", ""),
    key(
        "CONCURRENT_REQUESTS_PER_DOMAIN",
        "concurrency_per_host",
        "a slot covers one host by default; `host_key = \"domain\"` makes it cover a \
         registrable domain, as Scrapy's does",
    ),
    value(
        "CONCURRENT_REQUESTS_PER_IP",
        "host_key",
        "\"ip\"",
        "then `concurrency_per_host` is the limit per address",
    ),
    key(
        "DOWNLOAD_DELAY",
        "download_delay",
        "Scrapy's is a number of seconds; ours is a duration, written like \"2s\"; it is the \
         fixed delay with `throttle = \"fixed\"`, and a floor under the default adaptive pacing",
    ),
    key("RANDOMIZE_DOWNLOAD_DELAY", "randomize_delay", ""),
    value(
        "AUTOTHROTTLE_ENABLED",
        "throttle",
        "\"autothrottle\"",
        "the default `throttle = \"adaptive\"` already adapts each host's rate to its answers \
         and headers",
    ),
    key(
        "AUTOTHROTTLE_START_DELAY",
        "start_rate",
        "a rate in requests/s, not a delay: AUTOTHROTTLE_START_DELAY = 5 is start_rate = 0.2",
    ),
    key("AUTOTHROTTLE_MAX_DELAY", "autothrottle_max_delay", SECONDS),
    key(
        "AUTOTHROTTLE_TARGET_CONCURRENCY",
        "autothrottle_target_concurrency",
        "",
    ),
    instead(
        "AUTOTHROTTLE_DEBUG",
        "every change of a host's rate is logged with its trigger at debug level: \
         `-L crawler_sched=debug`",
    ),
    // Requests and responses.
    key("DOWNLOAD_TIMEOUT", "download_timeout", SECONDS),
    key(
        "DOWNLOAD_MAXSIZE",
        "max_body_size",
        "bytes, counted after decompression; 0 does not mean unlimited",
    ),
    instead(
        "DOWNLOAD_WARNSIZE",
        "there is no warning size; `max_body_size` aborts larger bodies and counts them as \
         `too_large`",
    ),
    key(
        "DNS_TIMEOUT",
        "dns_timeout",
        "a duration per query (\"5s\"), tried twice; the connection itself is bounded by \
         `connect_timeout`",
    ),
    instead(
        "DNSCACHE_ENABLED",
        "always on: each answer is kept for its records' TTL (a failure for 30 s), shared \
         by the downloader and the per-IP slots and limiter groups; `resolve` pins names \
         to addresses",
    ),
    instead(
        "DNSCACHE_SIZE",
        "a fixed bound of 65,536 names, least recently used dropped first",
    ),
    instead(
        "DNS_RESOLVER",
        "one asynchronous resolver (hickory) that never blocks a thread; `dns_servers` \
         names the servers, else the system's (/etc/resolv.conf), `/etc/hosts` first",
    ),
    key(
        "USER_AGENT",
        "user_agent",
        "it is also the agent matched against robots.txt groups",
    ),
    key(
        "DEFAULT_REQUEST_HEADERS",
        "default_headers",
        "a list of \"Name: value\" strings, not a dict",
    ),
    key("REDIRECT_MAX_TIMES", "max_redirects", ""),
    value(
        "REDIRECT_ENABLED",
        "max_redirects",
        "0",
        "then a redirect fails as `too_many_redirects`; for one request, set the request meta \
         `dont_redirect`",
    ),
    instead(
        "METAREFRESH_ENABLED",
        "a page with `<meta http-equiv=\"refresh\">` reaches the spider; `LinkExtractor` (and \
         so `Rules`) follows its target, `.meta_refresh(false)` turns that off",
    ),
    key(
        "HTTPERROR_ALLOWED_CODES",
        "allowed_statuses",
        "a list of codes; a spider's `allowed_statuses()` (Scrapy's `handle_httpstatus_list`) \
         and a request's `.allow_statuses([..])` / `.allow_all_statuses()` (the meta \
         `handle_httpstatus_list` / `handle_httpstatus_all`) work as in Scrapy; retries come \
         first",
    ),
    value(
        "HTTPERROR_ALLOW_ALL",
        "allowed_statuses",
        "\"all\"",
        "redirects are still followed, as in Scrapy",
    ),
    key("URLLENGTH_LIMIT", "max_url_length", ""),
    key("COOKIES_ENABLED", "cookies_enabled", ""),
    instead(
        "HTTPPROXY_ENABLED",
        "set `proxy` to the proxy's URL (`proxy` in a `[[hosts]]` rule for some hosts, \
         `Request::proxy(url)` / meta `proxy` per request, as `meta[\"proxy\"]`); unset, \
         `HTTP_PROXY` / `HTTPS_PROXY` from the environment are used, as in Scrapy",
    ),
    key(
        "REFERRER_POLICY",
        "referer_policy",
        "the values are the policy names: `no-referrer`, `same-origin`, `origin`, \
         `unsafe-url`, or `default`",
    ),
    value(
        "REFERER_ENABLED",
        "spider_middlewares",
        "[\"custom\"]",
        "that is, leave `referer` out of the list to send no Referer",
    ),
    instead(
        "COMPRESSION_ENABLED",
        "gzip, brotli, deflate and zstd are always accepted and decoded, under `max_body_size`",
    ),
    value(
        "DOWNLOAD_HANDLERS",
        "http_version",
        "\"2\"",
        "for Scrapy's `H2DownloadHandler`; the default `\"auto\"` already speaks HTTP/2 to \
         servers that offer it (ALPN), and a `[[hosts]]` rule sets it per host",
    ),
    key(
        "DOWNLOADER_CLIENT_TLS_METHOD",
        "tls_min_version",
        "the oldest TLS version accepted (`\"1.2\"` or `\"1.3\"`), newer ones always offered",
    ),
    instead(
        "DOWNLOADER_CLIENTCONTEXTFACTORY",
        "certificates are verified (Scrapy's default does not) against the system's roots \
         and `tls_ca_file`; `tls_verify = false` in a `[[hosts]]` rule turns that off for \
         hosts you own",
    ),
    // Middlewares, pipelines, extensions.
    key(
        "DOWNLOADER_MIDDLEWARES",
        "downloader_middlewares",
        "an ordered list of built-in names (`http_auth`, `default_headers`, `user_agent`, \
         `cookies`, and `custom` for yours), not a dict of class paths and numbers; your own \
         are added in code with `Crawl::downloader_middleware`",
    ),
    key(
        "SPIDER_MIDDLEWARES",
        "spider_middlewares",
        "an ordered list of built-in names (`referer`, and `custom` for yours), not a dict of \
         class paths and numbers; your own are added in code with `Crawl::spider_middleware`",
    ),
    instead(
        "ITEM_PIPELINES",
        "pipelines are added in code, in the order they run: `Crawl::new(spider).pipeline(p)`, or in a project `Runner::spider_with(spider, |crawl| crawl.pipeline(p))`",
    ),
    // The files and images pipelines (`crawler::files::FilesPipeline`).
    key(
        "FILES_STORE",
        "files_store",
        "a local directory or an object prefix (`s3://bucket/files`, `gs://`, `az://`, with the \
         `feed_s3_*` settings); files are named by the SHA-256 of their content (Scrapy: the \
         SHA-1 of the URL), so the same bytes are stored once (an object is looked up with a \
         HEAD before it is uploaded)",
    ),
    key("FILES_EXPIRES", "files_expires", ""),
    key("FILES_URLS_FIELD", "files_urls_field", ""),
    key(
        "FILES_RESULT_FIELD",
        "files_result_field",
        "the checksum is the SHA-256 (Scrapy: MD5)",
    ),
    key(
        "IMAGES_STORE",
        "images_store",
        "a local directory or an object prefix, as `files_store`; images are stored as \
         fetched (Scrapy converts them to JPEG); thumbnails are JPEG",
    ),
    key("IMAGES_EXPIRES", "images_expires", ""),
    key("IMAGES_URLS_FIELD", "images_urls_field", ""),
    key("IMAGES_RESULT_FIELD", "images_result_field", ""),
    key("IMAGES_MIN_WIDTH", "images_min_width", ""),
    key("IMAGES_MIN_HEIGHT", "images_min_height", ""),
    key(
        "IMAGES_THUMBS",
        "images_thumbs",
        "a table of `name = [width, height]`",
    ),
    key(
        "EXTENSIONS",
        "extensions",
        "an ordered list of built-in names (`monitor`, and `custom` for yours), not a dict of \
         class paths and numbers; your own (an `impl Extension<Item>`) are added in code with \
         `Crawl::extension`; the final stats, the progress display and the metrics endpoint \
         (`metrics_addr`) are always on",
    ),
    // Robots.
    key("ROBOTSTXT_OBEY", "obey_robots", "true by default here"),
    instead(
        "ROBOTSTXT_USER_AGENT",
        "robots.txt groups are matched against `user_agent`",
    ),
    // Depth and scheduling.
    key("DEPTH_LIMIT", "depth_limit", ""),
    instead(
        "DEPTH_PRIORITY",
        "give requests a priority in code: `Request::get(url)?.priority(n)`",
    ),
    instead(
        "DUPEFILTER_CLASS",
        "requests are deduplicated by fingerprint; `Request::dont_filter()` skips it for one \
         request",
    ),
    // Retries.
    key("RETRY_TIMES", "retry_times", ""),
    value(
        "RETRY_ENABLED",
        "retry_times",
        "0",
        "RETRY_ENABLED = False is retry_times = 0",
    ),
    key(
        "RETRY_HTTP_CODES",
        "retry_http_codes",
        "connection errors and timeouts are always retried",
    ),
    // Cache and job directory.
    key(
        "HTTPCACHE_ENABLED",
        "http_cache",
        "the cache lives in `cache_dir` (default `JOB_DIR/cache`), so it needs `job_dir` or \
         `cache_dir`",
    ),
    key("HTTPCACHE_DIR", "cache_dir", ""),
    instead(
        "HTTPCACHE_EXPIRATION_SECS",
        "cached pages never expire; each run revalidates them with conditional requests \
         (`conditional_requests`), and `http_cache_offline = true` replays them without asking",
    ),
    key(
        "JOBDIR",
        "job_dir",
        "it also keeps validators for conditional requests, and the crawl survives `kill -9`",
    ),
    // Feeds.
    key(
        "FEEDS",
        "feeds",
        "a list of paths or URIs, the format given by the extension (.jsonl, .json, .csv, \
         .xml, .parquet) or after a colon (`items.txt:jsonl`), not a dict of URIs and options; `-` is \
         stdout; `s3://`, `gs://`, `az://` and `file://` URIs work; `%(name)s`, `%(time)s`, \
         `%(batch_id)d` and `%(batch_time)s` work; `-o FILE` adds one",
    ),
    key(
        "FEED_URI",
        "feeds",
        "a list of paths or URIs (`s3://`, `gs://`, `az://`, `file://`), the format given by \
         the extension (.jsonl, .json, .csv, .xml, .parquet) or after a colon \
         (`items.txt:jsonl`); `%(name)s` and `%(time)s` work; `-o FILE` adds one",
    ),
    instead(
        "FEED_FORMAT",
        "a feed's format is given by its file's extension (.jsonl, .json, .csv, .xml or .parquet) or \
         after a colon: `feeds = [\"items.txt:jsonl\"]`, `-o items.txt:csv`",
    ),
    instead("FEED_EXPORT_ENCODING", "feeds are always written in UTF-8"),
    key(
        "FEED_EXPORT_BATCH_ITEM_COUNT",
        "feed_batch_items",
        "for every feed (but stdout), whose path must then hold `%(batch_id)d` or \
         `%(batch_time)s`; each batch appears whole (a file renamed into place, an object \
         completed) and a resumed job writes the batches not yet complete",
    ),
    key(
        "AWS_ENDPOINT_URL",
        "feed_s3_endpoint",
        "for `s3://` feeds; `http://` is allowed when set (the `AWS_ENDPOINT_URL` environment \
         variable works too)",
    ),
    key(
        "AWS_REGION_NAME",
        "feed_s3_region",
        "or the `AWS_REGION` environment variable",
    ),
    key(
        "AWS_ACCESS_KEY_ID",
        "feed_s3_access_key_id",
        "or the environment variable of the same name",
    ),
    key(
        "AWS_SECRET_ACCESS_KEY",
        "feed_s3_secret_access_key",
        "or the environment variable of the same name; shown as `***`, scrubbed from logs",
    ),
    instead(
        "FEED_STORAGES",
        "the storages are built in: `s3://`, `gs://`, `az://` and `file://` URIs in `feeds`, \
         `failures_file`, `files_store` and `images_store`",
    ),
    instead(
        "FEED_STORAGE_S3_ACL",
        "objects get the bucket's default ACL; multipart part size is \
         `feed_upload_part_size`",
    ),
    // Logging and stats.
    key(
        "LOG_LEVEL",
        "log_level",
        "the levels are written in lower case (`debug`, `info`, `warn`, `error`), and a \
         filter per crate works too (`info,crawler_sched=debug`)",
    ),
    key(
        "LOG_FILE",
        "log_file",
        "appended to, never coloured; `--log-file FILE` on the command line",
    ),
    key(
        "LOG_FORMAT",
        "log_format",
        "ours is `text` or `json`, not a format string",
    ),
    value(
        "LOG_ENABLED",
        "log_level",
        "\"error\"",
        "LOG_ENABLED = False is closest to showing errors only",
    ),
    instead(
        "STATS_DUMP",
        "the final stats are always printed at the end of a crawl",
    ),
    // Closing the spider.
    key("CLOSESPIDER_ITEMCOUNT", "close_item_count", ""),
    key("CLOSESPIDER_PAGECOUNT", "close_page_count", ""),
    key("CLOSESPIDER_TIMEOUT", "close_timeout", SECONDS),
    key("CLOSESPIDER_ERRORCOUNT", "close_error_count", ""),
    // The project.
    instead(
        "BOT_NAME",
        "a crawl is named by its spider's `name()` (and `job_name` for a fleet); operators \
         see `user_agent`",
    ),
    instead(
        "SPIDER_MODULES",
        "spiders are registered in the project's main.rs: \
         `Runner::new().spider(Books).run_cli()`; `crawler genspider` writes them to \
         src/spiders/",
    ),
    instead(
        "NEWSPIDER_MODULE",
        "`crawler genspider NAME URL` writes the spider to src/spiders/",
    ),
    instead(
        "TWISTED_REACTOR",
        "the crawler runs on Tokio; there is no reactor to choose",
    ),
    instead(
        "TELNETCONSOLE_ENABLED",
        "there is no telnet console; the live display, `progress:` lines and `metrics_addr` \
         show a running crawl",
    ),
];

/// The Scrapy setting `name` names, in any case (`DOWNLOAD_DELAY`, `download_delay`).
pub(super) fn scrapy_name(name: &str) -> Option<&'static ScrapyName> {
    SCRAPY_NAMES
        .iter()
        .find(|s| s.scrapy.eq_ignore_ascii_case(name.trim()))
}

/// Scrapy names too generic to mean Scrapy when they turn up bare in the environment (other
/// programs set `LOG_LEVEL` or `USER_AGENT` too): no warning for those.
const GENERIC_ENV_NAMES: &[&str] = &[
    "USER_AGENT",
    "LOG_LEVEL",
    "LOG_FILE",
    "LOG_FORMAT",
    "LOG_ENABLED",
    "EXTENSIONS",
];

/// A warning for an environment variable a Scrapy user may expect to be read:
/// `SCRAPY_SETTINGS_MODULE`, a Scrapy setting with Scrapy's `SCRAPY_` prefix
/// (`SCRAPY_DOWNLOAD_DELAY`), or bare (`CONCURRENT_REQUESTS`). None are read here; the
/// warning names the `CRAWLER_*` variable to set instead.
pub fn scrapy_env_warning(var: &str) -> Option<String> {
    if var == "SCRAPY_SETTINGS_MODULE" {
        return Some(
            "environment variable SCRAPY_SETTINGS_MODULE is Scrapy's and is not read here: \
             settings come from crawler.toml beside the project's Cargo.toml (or the file \
             CRAWLER_SETTINGS names), CRAWLER_* variables and -s KEY=VALUE"
                .to_owned(),
        );
    }
    let (name, bare) = match var.strip_prefix("SCRAPY_") {
        Some(name) => (name, false),
        None => (var, true),
    };
    // Exact, upper-case names only: a variable is someone's deliberate setting.
    let s = SCRAPY_NAMES.iter().find(|s| s.scrapy == name)?;
    if bare && GENERIC_ENV_NAMES.contains(&name) {
        return None;
    }
    let instead = match s.ours {
        Ours::Key(k) => format!("; set CRAWLER_{} instead", k.to_ascii_uppercase()),
        Ours::Value(k, v) => format!(
            "; set CRAWLER_{}={} instead",
            k.to_ascii_uppercase(),
            v.trim_matches('"')
        ),
        Ours::Instead(_) => String::new(),
    };
    Some(format!(
        "environment variable {var} is not read here: {}{instead}",
        s.message()
    ))
}

impl ScrapyName {
    /// The key of ours it maps to, if any.
    pub(super) fn key(&self) -> Option<&'static str> {
        match self.ours {
            Ours::Key(k) | Ours::Value(k, _) => Some(k),
            Ours::Instead(_) => None,
        }
    }

    /// What it is here, as a phrase: "called `download_delay` (in [throttle])",
    /// "`throttle = "autothrottle"` (in [throttle])", or "no setting: WHAT INSTEAD".
    pub(super) fn here(&self) -> String {
        match self.ours {
            Ours::Key(k) => format!("called `{k}` (in [{}])", section_of(k)),
            Ours::Value(k, v) => format!("`{k} = {v}` (in [{}])", section_of(k)),
            Ours::Instead(what) => format!("there is no such setting: {what}"),
        }
    }

    /// The one message for someone who typed this Scrapy name: "`DOWNLOAD_DELAY` is
    /// Scrapy's name; here it is called `download_delay` (in [throttle]); NOTE".
    pub(super) fn message(&self) -> String {
        let here = match self.ours {
            Ours::Instead(_) => self.here(),
            _ => format!("here it is {}", self.here()),
        };
        let mut msg = format!("`{}` is Scrapy's name; {here}", self.scrapy);
        if !self.note.is_empty() {
            msg.push_str("; ");
            msg.push_str(self.note);
        }
        msg
    }
}

/// The settings table of docs/coming-from-scrapy.md, generated from [`SCRAPY_NAMES`].
#[cfg(test)]
pub(super) fn scrapy_settings_markdown() -> String {
    let mut out = String::from("| Scrapy | here | notes |\n|---|---|---|\n");
    for s in SCRAPY_NAMES {
        let here = match s.ours {
            Ours::Key(k) => format!("`{k}` in `[{}]`", section_of(k)),
            Ours::Value(k, v) => format!("`{k} = {v}` in `[{}]`", section_of(k)),
            Ours::Instead(_) => "no setting".to_owned(),
        };
        let note = match s.ours {
            Ours::Instead(what) => what,
            _ => s.note,
        };
        out.push_str(&format!(
            "| `{}` | {here} | {} |\n",
            s.scrapy,
            note.replace('|', "\\|")
        ));
    }
    out
}

#[cfg(test)]
mod tests;
