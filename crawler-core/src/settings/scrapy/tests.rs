use super::*;
use crate::settings::{Settings, SettingsLayers};

fn file_error(toml: &str) -> String {
    let mut layers = SettingsLayers::new();
    match layers.file_text("crawler.toml", toml) {
        Ok(()) => panic!("{toml:?} was accepted"),
        Err(e) => e.to_string(),
    }
}

fn cli_error(key: &str, value: &str) -> String {
    let mut layers = SettingsLayers::new();
    layers.cli(key, value);
    match layers.resolve(None) {
        Ok(_) => panic!("-s {key}={value} was accepted"),
        Err(e) => e.to_string(),
    }
}

fn env_error(var: &str, value: &str) -> String {
    let mut layers = SettingsLayers::new();
    match layers.env_from([(var.to_owned(), value.to_owned())]) {
        Ok(()) => panic!("{var}={value} was accepted"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn every_mapping_names_a_real_setting_and_a_valid_value() {
    let keys = Settings::keys();
    let mut seen = std::collections::BTreeSet::new();
    for s in SCRAPY_NAMES {
        assert!(seen.insert(s.scrapy), "{} is listed twice", s.scrapy);
        assert_eq!(s.scrapy, s.scrapy.to_ascii_uppercase(), "Scrapy's spelling");
        assert!(
            !keys.iter().any(|k| k.eq_ignore_ascii_case(s.scrapy)) || s.key().is_some(),
            "{} is one of our keys",
            s.scrapy
        );
        if let Some(k) = s.key() {
            assert!(
                keys.iter().any(|have| have == k),
                "{} maps to '{k}', which is no setting",
                s.scrapy
            );
        }
        if let Ours::Value(k, v) = s.ours {
            let mut map = Settings::default().to_map().unwrap();
            let v: serde_json::Value = serde_json::from_str(v)
                .unwrap_or_else(|e| panic!("{}: `{k} = {v}` is not a value: {e}", s.scrapy));
            crate::settings::text::try_set(&mut map, k, v)
                .unwrap_or_else(|e| panic!("{}: invalid value for {k}: {e}", s.scrapy));
        }
    }
}

#[test]
fn the_issues_names_are_all_in_the_table() {
    for name in [
        "CONCURRENT_REQUESTS",
        "CONCURRENT_REQUESTS_PER_DOMAIN",
        "CONCURRENT_REQUESTS_PER_IP",
        "DOWNLOAD_DELAY",
        "RANDOMIZE_DOWNLOAD_DELAY",
        "DOWNLOAD_TIMEOUT",
        "AUTOTHROTTLE_ENABLED",
        "AUTOTHROTTLE_START_DELAY",
        "AUTOTHROTTLE_MAX_DELAY",
        "AUTOTHROTTLE_TARGET_CONCURRENCY",
        "ROBOTSTXT_OBEY",
        "USER_AGENT",
        "DEPTH_LIMIT",
        "RETRY_TIMES",
        "RETRY_ENABLED",
        "HTTPCACHE_ENABLED",
        "HTTPCACHE_DIR",
        "JOBDIR",
        "FEEDS",
        "FEED_URI",
        "LOG_LEVEL",
        "LOG_FILE",
        "CLOSESPIDER_ITEMCOUNT",
        "CLOSESPIDER_PAGECOUNT",
        "CLOSESPIDER_TIMEOUT",
        "CLOSESPIDER_ERRORCOUNT",
        "COOKIES_ENABLED",
        "DEFAULT_REQUEST_HEADERS",
        "DOWNLOADER_MIDDLEWARES",
        "SPIDER_MIDDLEWARES",
        "ITEM_PIPELINES",
        "REDIRECT_ENABLED",
        "REDIRECT_MAX_TIMES",
        "DOWNLOAD_MAXSIZE",
        "METAREFRESH_ENABLED",
        "HTTPERROR_ALLOWED_CODES",
    ] {
        assert!(scrapy_name(name).is_some(), "{name}");
        assert!(
            scrapy_name(&name.to_ascii_lowercase()).is_some(),
            "{name} in lower case"
        );
    }
    let close = |n: &str| scrapy_name(n).and_then(ScrapyName::key);
    assert_eq!(close("CLOSESPIDER_ITEMCOUNT"), Some("close_item_count"));
    assert_eq!(close("CLOSESPIDER_PAGECOUNT"), Some("close_page_count"));
    assert_eq!(close("CLOSESPIDER_TIMEOUT"), Some("close_timeout"));
    assert_eq!(close("CLOSESPIDER_ERRORCOUNT"), Some("close_error_count"));
}

#[test]
fn a_scrapy_key_in_crawler_toml_is_named_at_its_line_and_column() {
    let e = file_error("[throttle]\nstart_rate = 2\n  DOWNLOAD_DELAY = 2\n");
    assert!(
        e.starts_with(
            "crawler.toml:3:3: `DOWNLOAD_DELAY` is Scrapy's name; here it is called \
             `download_delay` (in [throttle]); Scrapy's is a number of seconds; ours is a \
             duration, written like \"2s\""
        ),
        "{e}"
    );
    // Any case, in any section: the message says where it goes.
    let e = file_error("[general]\nrobotstxt_obey = true\n");
    assert!(
        e.starts_with(
            "crawler.toml:2:1: `ROBOTSTXT_OBEY` is Scrapy's name; here it is called \
             `obey_robots` (in [robots])"
        ),
        "{e}"
    );
    let e = file_error("AUTOTHROTTLE_ENABLED = true\n");
    assert!(
        e.starts_with(
            "crawler.toml:1:1: `AUTOTHROTTLE_ENABLED` is Scrapy's name; here it is \
             `throttle = \"autothrottle\"` (in [throttle])"
        ),
        "{e}"
    );
    let e = file_error("[middlewares]\nITEM_PIPELINES = {}\n");
    assert!(
        e.starts_with(
            "crawler.toml:2:1: `ITEM_PIPELINES` is Scrapy's name; there is no such setting: \
             pipelines are added in code"
        ),
        "{e}"
    );
}

#[test]
fn a_scrapy_key_on_the_command_line_gets_one_message_not_a_dump() {
    let e = cli_error("DOWNLOAD_DELAY", "2");
    assert_eq!(
        e,
        "-s DOWNLOAD_DELAY: `DOWNLOAD_DELAY` is Scrapy's name; here it is called \
         `download_delay` (in [throttle]); Scrapy's is a number of seconds; ours is a duration, \
         written like \"2s\"; it is the fixed delay with `throttle = \"fixed\"`, and a floor \
         under the default adaptive pacing"
    );
    let e = cli_error("CONCURRENT_REQUESTS", "8");
    assert_eq!(
        e,
        "-s CONCURRENT_REQUESTS: `CONCURRENT_REQUESTS` is Scrapy's name; here it is called \
         `concurrency` (in [general])"
    );
    let e = cli_error("closespider_itemcount", "100");
    assert!(e.contains("here it is called `close_item_count`"), "{e}");
    // Settings::set (custom_settings, code) says the same.
    let e = Settings::default()
        .set("RETRY_ENABLED", "false")
        .unwrap_err();
    assert!(
        e.to_string()
            .starts_with("`RETRY_ENABLED` is Scrapy's name; here it is `retry_times = 0`"),
        "{e}"
    );
    // A name that is nothing like any setting points to the list instead of printing it.
    let e = cli_error("zzzz", "1");
    assert_eq!(
        e,
        "-s zzzz: unknown setting 'zzzz'; `settings` lists every setting (docs/settings.md)"
    );
}

#[test]
fn a_scrapy_name_in_a_crawler_variable_names_our_variable() {
    let e = env_error("CRAWLER_CONCURRENT_REQUESTS", "8");
    assert_eq!(
        e,
        "environment variable CRAWLER_CONCURRENT_REQUESTS: `CONCURRENT_REQUESTS` is Scrapy's \
         name; here it is called `concurrency` (in [general]); its variable is \
         CRAWLER_CONCURRENCY"
    );
    let e = env_error("CRAWLER_JOBDIR", "crawls/1");
    assert!(e.contains("its variable is CRAWLER_JOB_DIR"), "{e}");
    let e = env_error("CRAWLER_BOT_NAME", "x");
    assert!(
        e.contains("`BOT_NAME` is Scrapy's name; there is no such setting"),
        "{e}"
    );
}

#[test]
fn scrapys_own_variables_are_not_read_but_named_with_ours() {
    let mut layers = SettingsLayers::new();
    layers
        .env_from(
            [
                ("SCRAPY_SETTINGS_MODULE", "books.settings"),
                ("SCRAPY_DOWNLOAD_DELAY", "2"),
                ("CONCURRENT_REQUESTS", "8"),
                ("CONCURRENT_REQUESTS_PER_IP", "2"),
                ("TWISTED_REACTOR", "x"),
                // Too generic to be Scrapy's, and other programs' variables: no warning.
                ("LOG_LEVEL", "debug"),
                ("USER_AGENT", "x"),
                ("PATH", "/bin"),
                ("concurrent_requests", "8"),
            ]
            .map(|(k, v)| (k.to_owned(), v.to_owned())),
        )
        .unwrap();
    let w = layers.warnings();
    assert_eq!(w.len(), 5, "{w:#?}");
    let find = |var: &str| -> &str {
        w.iter()
            .find(|m| m.starts_with(&format!("environment variable {var} ")))
            .unwrap_or_else(|| panic!("no warning for {var}: {w:#?}"))
    };
    assert!(find("SCRAPY_SETTINGS_MODULE").contains("crawler.toml"));
    assert!(
        find("SCRAPY_DOWNLOAD_DELAY").ends_with("set CRAWLER_DOWNLOAD_DELAY instead"),
        "{w:#?}"
    );
    assert!(find("CONCURRENT_REQUESTS").contains("called `concurrency`"));
    assert!(find("CONCURRENT_REQUESTS").ends_with("set CRAWLER_CONCURRENCY instead"));
    assert!(find("CONCURRENT_REQUESTS_PER_IP").ends_with("set CRAWLER_HOST_KEY=ip instead"));
    assert!(find("TWISTED_REACTOR").contains("Tokio"));
    // None of them changed a setting.
    assert_eq!(layers.resolve(None).unwrap().settings, Settings::default());
}

#[test]
fn misspellings_point_to_the_nearest_setting_through_scrapys_names() {
    // The issue's example: not `concurrency_per_host`, which shares the longer prefix.
    let e = file_error("[general]\nconcurent_requests = 8\n");
    assert!(
        e.starts_with(
            "crawler.toml:2:1: unknown setting 'concurent_requests'; did you mean \
             'concurrency' (in [general])? (Scrapy's CONCURRENT_REQUESTS)"
        ),
        "{e}"
    );
    let e = cli_error("concurent_requests", "8");
    assert!(
        e.contains("did you mean 'concurrency'? (Scrapy's CONCURRENT_REQUESTS)"),
        "{e}"
    );
    let e = env_error("CRAWLER_CONCURENT_REQUESTS", "8");
    assert!(e.contains("did you mean CRAWLER_CONCURRENCY?"), "{e}");
    // A near miss of a Scrapy name with no key of its own says what to do.
    let e = cli_error("autothrotle_enabled", "true");
    assert!(
        e.contains("did you mean Scrapy's AUTOTHROTTLE_ENABLED?"),
        "{e}"
    );
    assert!(e.contains("`throttle = \"autothrottle\"`"), "{e}");
    // Our own keys still win over Scrapy's when they are nearer.
    let e = cli_error("concurency", "4");
    assert!(e.ends_with("did you mean 'concurrency'?"), "{e}");
    let e = cli_error("concurrency_host", "4");
    assert!(e.ends_with("did you mean 'concurrency_per_host'?"), "{e}");
}

#[test]
fn nearest_prefers_the_fewest_edits() {
    use crate::settings::text::nearest;
    let keys = [
        "concurrency",
        "concurrency_per_host",
        "start_rate",
        "max_rate",
    ];
    assert_eq!(nearest("concurency", keys), Some("concurrency"));
    assert_eq!(nearest("CONCURRENCY", keys), Some("concurrency"));
    assert_eq!(
        nearest("concurrency_per_hots", keys),
        Some("concurrency_per_host")
    );
    assert_eq!(nearest("start_rat", keys), Some("start_rate"));
    assert_eq!(nearest("mx_rate", keys), Some("max_rate"));
    assert_eq!(nearest("zzzz", keys), None);
}

#[test]
fn coming_from_scrapy_lists_the_same_table() {
    const START: &str = "<!-- scrapy-settings: generated from crawler-core/src/settings/scrapy.rs; a test checks it -->\n";
    const END: &str = "<!-- /scrapy-settings -->";
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/coming-from-scrapy.md");
    let doc = std::fs::read_to_string(path).unwrap_or_default();
    let generated = scrapy_settings_markdown();
    let block = doc
        .split_once(START)
        .and_then(|(_, rest)| rest.split_once(END))
        .map(|(block, _)| block);
    if block != Some(generated.as_str())
        && std::env::var_os("UPDATE_SETTINGS_DOC").is_some()
        && let (Some(block), Some((before, _))) = (block, doc.split_once(START))
    {
        let after = &doc[before.len() + START.len() + block.len()..];
        std::fs::write(path, format!("{before}{START}{generated}{after}")).unwrap();
        return;
    }
    assert!(
        block == Some(generated.as_str()),
        "docs/coming-from-scrapy.md's settings table is stale (or its markers are missing): \
         run `UPDATE_SETTINGS_DOC=1 cargo test -p crawler-core coming_from_scrapy`"
    );
}
