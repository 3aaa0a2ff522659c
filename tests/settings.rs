//! Settings layering and its error messages: defaults < crawler.toml < the spider's
//! custom_settings < CRAWLER_* environment < -s, with file:line:col errors.

use std::time::Duration;

use crawler::Crawl;
use crawler::core::settings_markdown;
use crawler::prelude::*;
use crawler::settings::{HostKeyMode, Settings, SettingsLayers, Source};

const FILE: &str = "crawler.toml";

fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn file_error(text: &str) -> String {
    let mut layers = SettingsLayers::new();
    match layers.file_text(FILE, text) {
        Err(e) => e.to_string(),
        Ok(()) => layers
            .resolve(None)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default(),
    }
}

struct Tuned;

impl Spider for Tuned {
    type Item = String;
    fn name(&self) -> &str {
        "tuned"
    }
    fn custom_settings(&self) -> Vec<(&'static str, String)> {
        vec![("start_rate", "3".into()), ("burst", "4".into())]
    }
    async fn parse(&self, _page: Response, _out: &mut Output<String>) -> Result<()> {
        Ok(())
    }
}

const SPIDER: &[(&str, String)] = &[];

#[test]
fn each_layer_overrides_the_one_below_and_says_so() {
    let toml =
        "[general]\nconcurrency = 4\n\n[throttle]\nstart_rate = 2\nburst = 2\nmax_rate = 8\n";
    let spider: Vec<(&'static str, String)> =
        vec![("start_rate", "3".into()), ("burst", "3".into())];
    let mut layers = SettingsLayers::new();
    layers.file_text(FILE, toml).unwrap();

    // File over defaults.
    let r = layers.resolve(None).unwrap();
    assert_eq!(r.settings.start_rate, 2.0);
    assert_eq!(r.settings.concurrency, 4);
    assert_eq!(
        r.source("start_rate"),
        Some(&Source::File {
            path: FILE.into(),
            line: 5
        })
    );
    assert_eq!(r.source("min_rate"), Some(&Source::Default));

    // Spider over file.
    let r = layers.resolve(Some(("tuned", &spider))).unwrap();
    assert_eq!((r.settings.start_rate, r.settings.burst), (3.0, 3));
    assert_eq!(
        r.source("start_rate"),
        Some(&Source::Spider("tuned".into()))
    );

    // Environment over spider.
    layers
        .env_from(env(&[
            ("CRAWLER_START_RATE", "4"),
            ("CRAWLER_DOWNLOAD_DELAY", "500ms"),
            ("HOME", "/ignored"),
        ]))
        .unwrap();
    let r = layers.resolve(Some(("tuned", &spider))).unwrap();
    assert_eq!(r.settings.start_rate, 4.0);
    assert_eq!(
        r.settings.burst, 3,
        "untouched keys keep the spider's value"
    );
    assert_eq!(r.settings.download_delay, Duration::from_millis(500));
    assert_eq!(
        r.source("start_rate"),
        Some(&Source::Env("CRAWLER_START_RATE".into()))
    );

    // Command line over everything.
    layers.cli("start_rate", "5");
    let r = layers.resolve(Some(("tuned", &spider))).unwrap();
    assert_eq!(r.settings.start_rate, 5.0);
    assert_eq!(r.source("start_rate"), Some(&Source::CommandLine));
    assert_eq!(r.settings.max_rate, 8.0, "file values survive");

    // The listing shows each value with its source.
    let table = r.table();
    let line = |key: &str| {
        table
            .lines()
            .find(|l| l.split_whitespace().next() == Some(key))
            .unwrap_or_else(|| panic!("{key} missing from\n{table}"))
            .to_owned()
    };
    assert!(line("start_rate").ends_with("(command line)"), "{table}");
    assert!(line("burst").ends_with("(spider tuned)"), "{table}");
    assert!(line("download_delay").contains("500ms"), "{table}");
    assert!(
        line("download_delay").ends_with("(env CRAWLER_DOWNLOAD_DELAY)"),
        "{table}"
    );
    assert!(line("max_rate").ends_with("(crawler.toml:7)"), "{table}");
    assert!(line("min_rate").ends_with("(default)"), "{table}");
    assert!(table.contains("[throttle]\n"), "{table}");
    let _ = SPIDER;
}

#[test]
fn crawl_applies_layers_with_the_spiders_settings_in_their_place() {
    let mut layers = SettingsLayers::new();
    layers
        .file_text(
            FILE,
            "[throttle]\nstart_rate = 2\nburst = 2\nmax_rate = 9\n",
        )
        .unwrap();
    layers
        .env_from(env(&[("CRAWLER_START_RATE", "6")]))
        .unwrap();
    let s = Crawl::new(Tuned)
        .with_settings_layers(&layers)
        .unwrap()
        .effective_settings()
        .unwrap();
    assert_eq!(s.start_rate, 6.0, "env beats the spider");
    assert_eq!(s.burst, 4, "the spider beats the file");
    assert_eq!(s.max_rate, 9.0, "the file beats the defaults");
}

#[test]
fn unknown_key_names_file_line_column_and_the_nearest_key() {
    let e = file_error("[throttle]\n  start_rte = 2\n");
    assert!(
        e.starts_with("crawler.toml:2:3: unknown setting 'start_rte'"),
        "{e}"
    );
    assert!(
        e.contains("did you mean 'start_rate' (in [throttle])?"),
        "{e}"
    );
}

#[test]
fn unknown_section_suggests_the_nearest() {
    let e = file_error("# comment\n[throtle]\nstart_rate = 2\n");
    assert!(
        e.starts_with("crawler.toml:2:2: unknown section [throtle]; did you mean [throttle]?"),
        "{e}"
    );
}

#[test]
fn key_in_the_wrong_section_names_its_home() {
    let e = file_error("[retry]\nstart_rate = 2\n");
    assert!(
        e.starts_with("crawler.toml:2:1: setting 'start_rate' belongs in [throttle], not [retry]"),
        "{e}"
    );
}

#[test]
fn wrong_type_names_the_value_position() {
    let e = file_error("[general]\nconcurrency = \"many\"\n");
    assert!(
        e.starts_with("crawler.toml:2:15: invalid value \"many\" for concurrency"),
        "{e}"
    );
    let e = file_error("[robots]\nobey_robots = 1\n");
    assert!(
        e.starts_with("crawler.toml:2:15: invalid value 1 for obey_robots"),
        "{e}"
    );
}

#[test]
fn bad_duration_says_how_durations_are_written() {
    let e = file_error("[throttle]\ndownload_delay = \"soon\"\n");
    assert!(
        e.starts_with("crawler.toml:2:18: invalid value \"soon\" for download_delay"),
        "{e}"
    );
    assert!(e.contains("\"500ms\""), "{e}");
    let e = file_error("[throttle]\ndownload_delay = 500\n");
    assert!(e.starts_with("crawler.toml:2:18:"), "{e}");
    assert!(e.contains("durations are written"), "{e}");
    // The same rules from the command line and the environment.
    let mut layers = SettingsLayers::new();
    layers.cli("download_delay", "soon");
    let e = layers.resolve(None).unwrap_err().to_string();
    assert!(e.contains("-s download_delay"), "{e}");
    assert!(e.contains("durations are written"), "{e}");
}

#[test]
fn out_of_range_values_point_at_the_layer_that_set_them() {
    let e = file_error("[general]\nconcurrency = 0\n");
    assert_eq!(
        e,
        "crawler.toml:2:15: setting concurrency must be at least 1"
    );
    let e = file_error("[throttle]\nmin_rate = 5.0\nmax_rate = 2.0\n");
    assert!(e.starts_with("crawler.toml:"), "{e}");
    assert!(e.contains("must not exceed max_rate"), "{e}");
    let mut layers = SettingsLayers::new();
    layers.env_from(env(&[("CRAWLER_BURST", "0")])).unwrap();
    let e = layers.resolve(None).unwrap_err().to_string();
    assert_eq!(e, "env CRAWLER_BURST: setting burst must be at least 1");
}

#[test]
fn feed_paths_are_checked_when_the_settings_load() {
    // Reported at the value's file:line:col, before any crawl.
    let e = file_error("[feeds]\nfeeds = [\"x.txt\"]\n");
    assert!(
        e.starts_with("crawler.toml:2:9: setting feeds entry 'x.txt': cannot tell the feed format"),
        "{e}"
    );
    assert!(e.contains("'x.txt:jsonl'"), "{e}");
    let e = file_error("[feeds]\nfeeds = [\"a.jsonl\", \"%(spider)s.csv\"]\n");
    assert!(
        e.starts_with(
            "crawler.toml:2:9: setting feeds entry '%(spider)s.csv': unknown placeholder"
        ),
        "{e}"
    );
    let e = file_error("[feeds]\nfeeds = [\"-\", \"-:csv\"]\n");
    assert!(e.contains("standard output ('-') twice"), "{e}");
    let e =
        file_error("[feeds]\nfeeds = [\"a.json\"]\n[job]\nredis_url = \"redis://127.0.0.1:1\"\n");
    assert!(e.starts_with("crawler.toml:"), "{e}");
    assert!(e.contains("use .jsonl"), "{e}");
    // Good ones load, and -s is checked the same way.
    assert_eq!(
        file_error("[feeds]\nfeeds = [\"%(name)s-%(time)s.jsonl\", \"items.txt:csv\", \"-\"]\n"),
        ""
    );
    let mut layers = SettingsLayers::new();
    layers.cli("feeds", "items.yaml");
    let e = layers.resolve(None).unwrap_err().to_string();
    assert!(e.starts_with("-s: setting feeds entry 'items.yaml'"), "{e}");
}

#[test]
fn environment_typos_are_errors_with_a_suggestion() {
    let mut layers = SettingsLayers::new();
    let e = layers
        .env_from(env(&[("CRAWLER_START_RAT", "2")]))
        .unwrap_err()
        .to_string();
    assert!(e.contains("CRAWLER_START_RAT names no setting"), "{e}");
    assert!(e.contains("did you mean CRAWLER_START_RATE?"), "{e}");
    // The settings file variable is not a setting.
    layers
        .env_from(env(&[("CRAWLER_SETTINGS", "x.toml")]))
        .unwrap();
}

#[test]
fn host_rules_load_with_positions_and_apply_first_match() {
    let toml = r#"
[[hosts]]
match = "*.shop.test"
rate = 50
concurrency = 8
delay = "100ms"
ignore_robots = true

[[hosts]]
match = "*"
rate = 0.5
"#;
    let mut layers = SettingsLayers::new();
    layers.file_text(FILE, toml).unwrap();
    let r = layers.resolve(None).unwrap();
    assert_eq!(r.settings.hosts.len(), 2);
    let shop = r.settings.for_host("www.shop.test");
    assert_eq!(shop.max_rate, 50.0);
    assert_eq!(shop.concurrency_per_host, 8);
    assert_eq!(shop.download_delay, Duration::from_millis(100));
    assert!(!shop.obey_robots);
    let other = r.settings.for_host("example.org");
    assert_eq!(other.max_rate, 0.5);
    assert!(other.obey_robots);
    assert!(other.validate().is_ok());
    assert!(r.table().contains("*.shop.test"), "{}", r.table());

    let e = file_error("[[hosts]]\nmatch = \"a\"\nrat = 2\n");
    assert!(
        e.starts_with("crawler.toml:3:1: unknown host rule field 'rat'; did you mean 'rate'?"),
        "{e}"
    );
    let e = file_error("[[hosts]]\nmatch = \"a\"\ndelay = \"later\"\n");
    assert!(e.starts_with("crawler.toml:3:9:"), "{e}");
    assert!(e.contains("durations are written"), "{e}");
    let e = file_error("[[hosts]]\nmatch = \"a\"\nrate = 0\n");
    assert!(
        e.starts_with("crawler.toml:3:8: host rule rate must be a positive number"),
        "{e}"
    );
    let e = file_error("[[hosts]]\nrate = 2\n");
    assert!(e.contains("needs `match"), "{e}");
}

#[test]
fn set_still_works_on_plain_settings() {
    let mut s = Settings::default();
    s.set("download_delay", "2s").unwrap();
    s.set("feeds", "a.jsonl,b.csv").unwrap();
    s.set("metrics_addr", "9898").unwrap();
    assert_eq!(s.download_delay, Duration::from_secs(2));
    assert_eq!(s.feeds, ["a.jsonl", "b.csv"]);
    assert_eq!(
        s.metrics_socket_addr(),
        Some(std::net::SocketAddr::from(([127, 0, 0, 1], 9898)))
    );
    assert!(s.set("metrics_addr", "nowhere:port").is_err());
    s.set("metrics_addr", "none").unwrap();
    assert_eq!(s.metrics_addr, None);
    for (v, mode) in [
        ("host", HostKeyMode::Host),
        ("domain", HostKeyMode::Domain),
        ("ip", HostKeyMode::Ip),
    ] {
        s.set("host_key", v).unwrap();
        assert_eq!(s.host_key, mode);
    }
    assert!(s.set("host_key", "address").is_err());
}

#[test]
fn settings_reference_is_generated_from_the_code() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/settings.md");
    let generated = settings_markdown();
    let on_disk = std::fs::read_to_string(path).unwrap_or_default();
    if on_disk != generated && std::env::var_os("UPDATE_SETTINGS_DOC").is_some() {
        std::fs::write(path, &generated).unwrap();
        return;
    }
    assert!(
        on_disk == generated,
        "docs/settings.md is stale: run `UPDATE_SETTINGS_DOC=1 cargo test -p crawler --test all settings::` \
         (or `crawler settings --markdown > docs/settings.md`)"
    );
    for key in Settings::keys() {
        if key != "hosts" {
            assert!(
                generated.contains(&format!("| `{key}` |")),
                "{key} undocumented"
            );
        }
    }
}
