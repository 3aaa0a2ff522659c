//! Settings layers: built-in defaults < `crawler.toml` < the spider's `custom_settings` <
//! `CRAWLER_*` environment variables < `-s key=value`, with the source of every value kept
//! so `settings` can say where each one came from and errors can point at file:line:col.
//!
//! The layering works on the serde representation of [`Settings`] (a flat JSON map), so a
//! field added to `Settings` is settable from every layer without changes here; its section
//! in crawler.toml comes from [`SECTIONS`] (or `general` when no section claims it).
//!
//! ```
//! use crawler_core::{SettingsLayers, Source};
//!
//! let toml = "[throttle]\nstart_rate = 2\n";
//! let mut layers = SettingsLayers::new();
//! layers.file_text("crawler.toml", toml).unwrap();
//! layers.cli("start_rate", "3");
//! let resolved = layers.resolve(None).unwrap();
//! assert_eq!(resolved.settings.start_rate, 3.0);
//! assert_eq!(resolved.source("start_rate"), Some(&Source::CommandLine));
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};
use toml::de::{DeTable, DeValue};

use crate::error::{Error, ErrorKind, Result};
use crate::settings::{HOST_RULE_KEYS, HostRule, Settings, nearest, set_text, try_set, type_hint};

/// The settings file looked for next to a project's Cargo.toml.
pub const SETTINGS_FILE: &str = "crawler.toml";

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
            "depth_limit",
            "max_url_length",
            "deny_private_addresses",
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
];

/// Keys that are not plain settings of a section (`[[hosts]]` is an array of tables).
const SPECIAL_KEYS: &[&str] = &["hosts"];

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

/// Where a setting's effective value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// The built-in default.
    Default,
    /// Set in code (`Crawl::settings`, `SettingsLayers::with_base`).
    Code,
    /// A settings file, at this line.
    File {
        /// The file as named.
        path: PathBuf,
        /// 1-based line.
        line: usize,
    },
    /// The spider's `custom_settings`.
    Spider(String),
    /// An environment variable.
    Env(String),
    /// `-s key=value` on the command line.
    CommandLine,
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Default => f.write_str("default"),
            Self::Code => f.write_str("code"),
            Self::File { path, line } => write!(f, "{}:{line}", path.display()),
            Self::Spider(name) => write!(f, "spider {name}"),
            Self::Env(var) => write!(f, "env {var}"),
            Self::CommandLine => f.write_str("command line"),
        }
    }
}

/// A value read from a settings file, with where it was written.
#[derive(Debug, Clone)]
struct FileValue {
    key: String,
    value: Value,
    /// The value as written, for error messages.
    text: String,
    line: usize,
    column: usize,
}

#[derive(Debug, Clone)]
struct FileLayer {
    path: PathBuf,
    values: Vec<FileValue>,
}

/// The layers of a crawl's settings, resolved on demand (the spider layer is only known when
/// a spider is chosen).
#[derive(Debug, Clone, Default)]
pub struct SettingsLayers {
    base: Option<Settings>,
    file: Option<FileLayer>,
    env: Vec<(String, String, String)>,
    cli: Vec<(String, String)>,
}

/// One row of the `settings` listing.
#[derive(Debug, Clone, PartialEq)]
pub struct SettingRow {
    /// The setting's name.
    pub key: String,
    /// The crawler.toml section it lives in.
    pub section: &'static str,
    /// The effective value, in the form it is written (`500ms`, `a,b`, `(unset)`).
    pub value: String,
    /// Where it came from.
    pub source: Source,
}

/// Effective settings and where each value came from.
#[derive(Debug, Clone)]
pub struct Resolved {
    /// The validated settings.
    pub settings: Settings,
    sources: BTreeMap<String, Source>,
}

impl Resolved {
    /// Where `key`'s value came from.
    pub fn source(&self, key: &str) -> Option<&Source> {
        self.sources.get(key)
    }

    /// Every setting with its section, effective value and source, in declaration order.
    pub fn rows(&self) -> Vec<SettingRow> {
        let Ok(map) = self.settings.to_map() else {
            return Vec::new();
        };
        map.iter()
            .map(|(key, value)| SettingRow {
                key: key.clone(),
                section: if SPECIAL_KEYS.contains(&key.as_str()) {
                    "hosts"
                } else {
                    section_of(key)
                },
                // Secrets never reach the listing (one rule: crate::redact).
                value: crate::redact::redact_setting(key, &display_value(value)),
                source: self.sources.get(key).cloned().unwrap_or(Source::Default),
            })
            .collect()
    }

    /// The listing `settings` prints: `key = value  # source`, grouped by section.
    pub fn table(&self) -> String {
        let rows = self.rows();
        let width = rows.iter().map(|r| r.key.len()).max().unwrap_or(0);
        let vwidth = rows
            .iter()
            .map(|r| r.value.chars().count().min(40))
            .max()
            .unwrap_or(0);
        let mut out = String::new();
        let mut names: Vec<&str> = SECTIONS.iter().map(|s| s.name).collect();
        names.push("hosts");
        for name in names {
            let mut section: Vec<&SettingRow> = rows.iter().filter(|r| r.section == name).collect();
            if section.is_empty() {
                continue;
            }
            section.sort_by_key(|r| r.key.as_str());
            out.push_str(&format!("[{name}]\n"));
            for r in section {
                out.push_str(&format!(
                    "  {:width$}  {:vwidth$}  ({})\n",
                    r.key, r.value, r.source
                ));
            }
        }
        out
    }
}

/// Render a setting's JSON value the way it is written on a command line.
fn display_value(v: &Value) -> String {
    match v {
        Value::Null => "(unset)".to_owned(),
        Value::String(s) => s.clone(),
        Value::Array(items) if items.iter().all(|i| !i.is_object()) => items
            .iter()
            .map(display_value)
            .collect::<Vec<_>>()
            .join(","),
        other => other.to_string(),
    }
}

impl SettingsLayers {
    /// Layers over the built-in defaults.
    pub fn new() -> Self {
        Self::default()
    }

    /// Use `base` instead of the built-in defaults as the lowest layer (its values that
    /// differ from the defaults are reported as set in code).
    pub fn with_base(mut self, base: Settings) -> Self {
        self.base = Some(base);
        self
    }

    /// Add the settings file at `path`. Unknown sections and keys are errors that name the
    /// file, line and column.
    pub fn file(&mut self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|e| {
            Error::new(
                ErrorKind::Settings,
                format!("cannot read settings file {}", path.display()),
            )
            .with_source(e)
        })?;
        self.file_text(path, &text)
    }

    /// Add a settings file's text, named `path` in messages.
    pub fn file_text(&mut self, path: impl AsRef<Path>, text: &str) -> Result<()> {
        let path = path.as_ref().to_path_buf();
        let values = parse_file(&path, text)?;
        self.file = Some(FileLayer { path, values });
        Ok(())
    }

    /// The settings file in use, if any.
    pub fn file_path(&self) -> Option<&Path> {
        self.file.as_ref().map(|f| f.path.as_path())
    }

    /// Read `CRAWLER_<KEY>` variables from the process environment (`CRAWLER_START_RATE=2`).
    pub fn env(&mut self) -> Result<()> {
        self.env_from(std::env::vars())
    }

    /// Read `CRAWLER_<KEY>` variables from `vars`. `CRAWLER_SETTINGS` (the settings file) is
    /// not a setting and is skipped; any other unknown `CRAWLER_*` name is an error.
    pub fn env_from(&mut self, vars: impl IntoIterator<Item = (String, String)>) -> Result<()> {
        let keys = Settings::keys();
        let mut found = Vec::new();
        for (var, value) in vars {
            let Some(rest) = var.strip_prefix("CRAWLER_") else {
                continue;
            };
            if var == "CRAWLER_SETTINGS" {
                continue;
            }
            let key = rest.to_ascii_lowercase();
            if !keys.contains(&key) {
                let hint = nearest(&key, keys.iter().map(String::as_str))
                    .map(|k| format!("; did you mean CRAWLER_{}?", k.to_ascii_uppercase()))
                    .unwrap_or_default();
                return Err(Error::new(
                    ErrorKind::Settings,
                    format!("environment variable {var} names no setting{hint}"),
                ));
            }
            found.push((var, key, value));
        }
        // The environment's order is arbitrary; sort so a run is reproducible.
        found.sort();
        self.env = found;
        Ok(())
    }

    /// Add `-s key=value` (later ones win).
    pub fn cli(&mut self, key: &str, value: &str) {
        self.cli.push((key.to_owned(), value.to_owned()));
    }

    /// Add a `key=value` string as given to `-s`.
    pub fn cli_pair(&mut self, pair: &str) -> Result<()> {
        let Some((k, v)) = pair.split_once('=') else {
            return Err(Error::new(
                ErrorKind::Settings,
                format!("-s expects key=value, got '{pair}'"),
            ));
        };
        self.cli(k.trim(), v);
        Ok(())
    }

    /// The layers above the spider's (environment, then command line) as `(key, text)`
    /// overrides, in the order they apply.
    pub fn overrides(&self) -> Vec<(String, String)> {
        self.env
            .iter()
            .map(|(_, k, v)| (k.clone(), v.clone()))
            .chain(self.cli.iter().cloned())
            .collect()
    }

    /// The settings below the spider's layer (base and file), unvalidated across keys.
    pub fn below_spider(&self) -> Result<Settings> {
        let (map, _) = self.base_and_file()?;
        Settings::from_map(map)
    }

    fn base_and_file(&self) -> Result<(Map<String, Value>, BTreeMap<String, Source>)> {
        let defaults = Settings::default().to_map()?;
        let base = self.base.clone().unwrap_or_default();
        let mut map = base.to_map()?;
        let mut sources = BTreeMap::new();
        for (k, v) in &map {
            let src = if defaults.get(k) == Some(v) {
                Source::Default
            } else {
                Source::Code
            };
            sources.insert(k.clone(), src);
        }
        if let Some(file) = &self.file {
            for fv in &file.values {
                try_set(&mut map, &fv.key, fv.value.clone()).map_err(|why| {
                    located(
                        &file.path,
                        fv.line,
                        fv.column,
                        format!(
                            "invalid value {} for {}: {why}{}",
                            fv.text,
                            fv.key,
                            map.get(&fv.key).map_or("", type_hint)
                        ),
                    )
                })?;
                sources.insert(
                    fv.key.clone(),
                    Source::File {
                        path: file.path.clone(),
                        line: fv.line,
                    },
                );
            }
        }
        Ok((map, sources))
    }

    /// Resolve every layer, with the spider's `custom_settings` (`(name, pairs)`) if a spider
    /// is chosen. Type and range errors name the layer that set the value.
    pub fn resolve(&self, spider: Option<(&str, &[(&'static str, String)])>) -> Result<Resolved> {
        let (mut map, mut sources) = self.base_and_file()?;
        if let Some((name, pairs)) = spider {
            for (k, v) in pairs {
                set_text(&mut map, k, v).map_err(|e| context(&format!("spider '{name}'"), e))?;
                sources.insert((*k).to_owned(), Source::Spider(name.to_owned()));
            }
        }
        for (var, k, v) in &self.env {
            set_text(&mut map, k, v).map_err(|e| context(var, e))?;
            sources.insert(k.clone(), Source::Env(var.clone()));
        }
        for (k, v) in &self.cli {
            set_text(&mut map, k, v).map_err(|e| context(&format!("-s {k}"), e))?;
            sources.insert(k.clone(), Source::CommandLine);
        }
        let settings = Settings::from_map(map)?;
        if let Some((keys, why)) = settings.problem() {
            let msg = format!("setting {} {why}", keys.join(", "));
            // Blame the most specific layer that set any of the keys involved.
            let culprit = keys
                .iter()
                .filter_map(|k| sources.get(*k))
                .max_by_key(|s| rank(s));
            return Err(match (culprit, &self.file) {
                (Some(Source::File { line, .. }), Some(file)) => {
                    let column = keys
                        .iter()
                        .find_map(|k| {
                            file.values
                                .iter()
                                .find(|v| v.key == *k && v.line == *line)
                                .map(|v| v.column)
                        })
                        .unwrap_or(1);
                    located(&file.path, *line, column, msg)
                }
                (Some(s @ (Source::Env(_) | Source::Spider(_))), _) => {
                    Error::new(ErrorKind::Settings, format!("{s}: {msg}"))
                }
                (Some(Source::CommandLine), _) => {
                    Error::new(ErrorKind::Settings, format!("-s: {msg}"))
                }
                _ => Error::new(ErrorKind::Settings, msg),
            });
        }
        Ok(Resolved { settings, sources })
    }
}

fn rank(s: &Source) -> u8 {
    match s {
        Source::Default => 0,
        Source::Code => 1,
        Source::File { .. } => 2,
        Source::Spider(_) => 3,
        Source::Env(_) => 4,
        Source::CommandLine => 5,
    }
}

fn context(what: &str, e: Error) -> Error {
    Error::new(e.kind(), format!("{what}: {e}"))
}

fn located(path: &Path, line: usize, column: usize, msg: impl fmt::Display) -> Error {
    Error::new(
        ErrorKind::Settings,
        format!("{}:{line}:{column}: {msg}", path.display()),
    )
}

/// 1-based line and column (in characters) of a byte offset.
fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = text.get(..offset.min(text.len())).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

/// Read a settings file into typed values with positions; structure errors (unknown
/// sections and keys, misplaced keys, malformed host rules) are reported here.
fn parse_file(path: &Path, text: &str) -> Result<Vec<FileValue>> {
    let at = |offset: usize, msg: String| {
        let (line, column) = line_col(text, offset);
        located(path, line, column, msg)
    };
    let doc = DeTable::parse(text).map_err(|e| {
        let offset = e.span().map_or(0, |s| s.start);
        at(offset, format!("invalid TOML: {}", e.message().trim()))
    })?;
    let keys = Settings::keys();
    let mut out = Vec::new();
    let mut setting = |key: &str, key_at: usize, section: &str, value: &toml::Spanned<DeValue>| {
        if !keys.iter().any(|k| k == key) || SPECIAL_KEYS.contains(&key) {
            let hint = match nearest(key, keys.iter().map(String::as_str)) {
                Some(k) => format!("; did you mean '{k}' (in [{}])?", section_of(k)),
                None => format!("; the keys of [{section}] are listed by `settings`"),
            };
            return Err(at(key_at, format!("unknown setting '{key}'{hint}")));
        }
        let home = section_of(key);
        if home != section {
            return Err(at(
                key_at,
                format!("setting '{key}' belongs in [{home}], not [{section}]"),
            ));
        }
        let span = value.span();
        let (line, column) = line_col(text, span.start);
        out.push(FileValue {
            key: key.to_owned(),
            value: to_json(value.get_ref())
                .map_err(|why| at(span.start, format!("invalid value for {key}: {why}")))?,
            text: text.get(span).unwrap_or("").trim().to_owned(),
            line,
            column,
        });
        Ok(())
    };
    let mut hosts = Vec::new();
    let mut hosts_at = None;
    for (name, value) in doc.get_ref().iter() {
        let name_at = name.span().start;
        match value.get_ref() {
            DeValue::Table(table) => {
                let section = name.get_ref().as_ref();
                if !SECTIONS.iter().any(|s| s.name == section) {
                    let names = SECTIONS.iter().map(|s| s.name);
                    let hint = match nearest(section, names.clone()) {
                        Some(n) => format!("; did you mean [{n}]?"),
                        None => format!(
                            "; sections are {}, and [[hosts]]",
                            names
                                .map(|n| format!("[{n}]"))
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                    };
                    return Err(at(name_at, format!("unknown section [{section}]{hint}")));
                }
                for (key, v) in table.iter() {
                    setting(key.get_ref(), key.span().start, section, v)?;
                }
            }
            DeValue::Array(rules) if name.get_ref() == "hosts" => {
                hosts_at = Some(name_at);
                for rule in rules.iter() {
                    hosts.push(host_rule(rule, &at)?);
                }
            }
            _ => setting(name.get_ref(), name_at, "general", value)?,
        }
    }
    if let Some(offset) = hosts_at {
        let (line, column) = line_col(text, offset);
        let value = serde_json::to_value(&hosts)
            .map_err(|e| at(offset, format!("invalid [[hosts]]: {e}")))?;
        out.push(FileValue {
            key: "hosts".to_owned(),
            value,
            text: "[[hosts]]".to_owned(),
            line,
            column,
        });
    }
    Ok(out)
}

/// One `[[hosts]]` table, checked field by field so errors point at the field.
fn host_rule(
    rule: &toml::Spanned<DeValue>,
    at: &impl Fn(usize, String) -> Error,
) -> Result<HostRule> {
    let DeValue::Table(table) = rule.get_ref() else {
        return Err(at(
            rule.span().start,
            "[[hosts]] entries must be tables".to_owned(),
        ));
    };
    let mut obj = Map::new();
    for (key, value) in table.iter() {
        let k = key.get_ref().as_ref();
        if !HOST_RULE_KEYS.contains(&k) {
            let hint = nearest(k, HOST_RULE_KEYS.iter().copied())
                .map(|n| format!("did you mean '{n}'? "))
                .unwrap_or_default();
            return Err(at(
                key.span().start,
                format!(
                    "unknown host rule field '{k}'; {hint}fields are {}",
                    HOST_RULE_KEYS.join(", ")
                ),
            ));
        }
        let v = to_json(value.get_ref()).map_err(|why| at(value.span().start, why))?;
        obj.insert(k.to_owned(), v.clone());
        // Check each field alone so a wrong type names its own line.
        let mut probe = Map::new();
        probe.insert("match".to_owned(), Value::String("*".to_owned()));
        probe.insert(k.to_owned(), v);
        let parsed: std::result::Result<HostRule, _> = serde_json::from_value(Value::Object(probe));
        match parsed {
            Err(e) => {
                let hint = if k == "delay" {
                    " (durations are written like \"500ms\", \"2s\", \"1m\")"
                } else {
                    ""
                };
                return Err(at(
                    value.span().start,
                    format!("invalid value for host rule field {k}: {e}{hint}"),
                ));
            }
            Ok(r) => {
                if let Some((field, why)) = r.problem() {
                    return Err(at(value.span().start, format!("host rule {field} {why}")));
                }
            }
        }
    }
    if !obj.contains_key("match") {
        return Err(at(
            rule.span().start,
            "a [[hosts]] rule needs `match = \"GLOB\"`".to_owned(),
        ));
    }
    serde_json::from_value(Value::Object(obj))
        .map_err(|e| at(rule.span().start, format!("invalid [[hosts]] rule: {e}")))
}

/// A TOML value as JSON, the representation the settings layers work on.
fn to_json(v: &DeValue) -> std::result::Result<Value, String> {
    Ok(match v {
        DeValue::String(s) => Value::String(s.to_string()),
        DeValue::Integer(i) => {
            let n = i64::from_str_radix(&i.as_str().replace('_', ""), i.radix())
                .map_err(|e| format!("integer {}: {e}", i.as_str()))?;
            Value::from(n)
        }
        DeValue::Float(f) => {
            let x: f64 = f
                .as_str()
                .replace('_', "")
                .parse()
                .map_err(|_| format!("bad float {}", f.as_str()))?;
            serde_json::Number::from_f64(x)
                .map(Value::Number)
                .ok_or_else(|| format!("{} is not a finite number", f.as_str()))?
        }
        DeValue::Boolean(b) => Value::Bool(*b),
        DeValue::Datetime(d) => Value::String(d.to_string()),
        DeValue::Array(items) => Value::Array(
            items
                .iter()
                .map(|i| to_json(i.get_ref()))
                .collect::<std::result::Result<_, _>>()?,
        ),
        DeValue::Table(t) => {
            let mut map = Map::new();
            for (k, v) in t.iter() {
                map.insert(k.get_ref().to_string(), to_json(v.get_ref())?);
            }
            Value::Object(map)
        }
    })
}

/// The project's settings file: `crawler.toml` beside the nearest `Cargo.toml` at or above
/// `start`, if it exists.
pub fn find_settings_file(start: &Path) -> Option<PathBuf> {
    start
        .ancestors()
        .take(64)
        .find(|dir| dir.join("Cargo.toml").is_file())
        .map(|dir| dir.join(SETTINGS_FILE))
        .filter(|p| p.is_file())
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

/// The doc comment of every `Settings` field, read from this crate's source so the reference
/// cannot drift from the code.
fn field_docs() -> BTreeMap<String, String> {
    let src = include_str!("settings.rs");
    let mut docs = BTreeMap::new();
    let Some(start) = src.find("pub struct Settings {") else {
        return docs;
    };
    let mut doc: Vec<&str> = Vec::new();
    for line in src[start..].lines().skip(1) {
        let line = line.trim();
        if line == "}" {
            break;
        }
        if let Some(text) = line.strip_prefix("///") {
            doc.push(text.trim());
        } else if let Some(rest) = line.strip_prefix("pub ") {
            if let Some((name, _)) = rest.split_once(':') {
                docs.insert(name.trim().to_owned(), doc.join(" "));
            }
            doc.clear();
        }
    }
    docs
}

/// The settings reference (docs/settings.md): every section, every key with its default and
/// its documentation, generated from [`Settings`] and [`SECTIONS`].
pub fn settings_markdown() -> String {
    let docs = field_docs();
    let defaults = Settings::default().to_map().unwrap_or_default();
    let mut out = String::from(
        "# Settings reference\n\n\
         <!-- Generated by `crawler settings --markdown`; a test checks it matches the code. -->\n\n\
         Settings are layered, lowest first: built-in defaults, `crawler.toml` (next to the \
         project's `Cargo.toml`, or `--settings FILE`), the spider's `custom_settings()`, \
         `CRAWLER_<KEY>` environment variables (`CRAWLER_START_RATE=2`), and `-s key=value` \
         on the command line. `settings` prints every effective value and where it came from.\n\n\
         Durations are written `500ms`, `2s`, `1m`; lists on a command line as `a,b,c`. In \
         `crawler.toml` each key goes in its section (`[throttle]` `start_rate = 2`); \
         unknown sections and keys are errors naming the file, line and column.\n",
    );
    for section in SECTIONS {
        let mut keys: Vec<&String> = defaults
            .keys()
            .filter(|k| !SPECIAL_KEYS.contains(&k.as_str()) && section_of(k) == section.name)
            .collect();
        keys.sort();
        out.push_str(&format!("\n## [{}]\n\n{}\n\n", section.name, section.about));
        if keys.is_empty() {
            out.push_str("No settings yet.\n");
            continue;
        }
        out.push_str("| key | default | meaning |\n|---|---|---|\n");
        for key in keys {
            let default = defaults.get(key).map(display_value).unwrap_or_default();
            let default = if default.is_empty() {
                "(none)".to_owned()
            } else {
                default
            };
            let doc = docs.get(key).map_or("", String::as_str).replace('|', "\\|");
            out.push_str(&format!("| `{key}` | `{default}` | {doc} |\n"));
        }
    }
    out.push_str(
        "\n## [[hosts]]\n\n\
         Per-host rules; the first rule whose `match` glob matches the host wins (later \
         matching rules are ignored). `*` matches any run of characters and `?` one, \
         case-insensitively; `*.example.com` matches `www.example.com` but not `example.com`; \
         a pattern without a port matches the host on any port. Only the fields given change.\n\n\
         | field | sets |\n|---|---|\n\
         | `match` | the glob (required) |\n\
         | `rate` | `max_rate`, the ceiling in requests/s |\n\
         | `burst` | `burst` |\n\
         | `concurrency` | `concurrency_per_host` |\n\
         | `delay` | `download_delay` |\n\
         | `start_rate` | `start_rate` |\n\
         | `ignore_robots` | `obey_robots = false` (hosts you own only) |\n\n\
         ```toml\n[[hosts]]\nmatch = \"127.0.0.1:*\"\nrate = 200\nconcurrency = 16\n\
         delay = \"0s\"\nignore_robots = true\n```\n",
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_listed_key_is_a_setting_and_every_setting_is_documented() {
        let keys = Settings::keys();
        for s in SECTIONS {
            for k in s.keys {
                assert!(keys.iter().any(|x| x == k), "section {} lists {k}", s.name);
            }
        }
        let docs = field_docs();
        for k in &keys {
            assert!(docs.get(k).is_some_and(|d| !d.is_empty()), "{k} has no doc");
        }
    }

    #[test]
    fn positions_are_one_based() {
        assert_eq!(line_col("a\nbc", 3), (2, 2));
        assert_eq!(line_col("abc", 0), (1, 1));
    }

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
}
