use super::*;
use crate::settings::Settings;

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
