//! Scrapy's names through every layer (crawler.toml, the command line, the environment):
//! each is named at its place with what it is called here.

#![allow(clippy::unwrap_used)]

use super::{Settings, SettingsLayers};

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
    // The example: not `concurrency_per_host`, which shares the longer prefix.
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
