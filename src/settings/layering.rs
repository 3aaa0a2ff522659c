//! Settings layers: built-in defaults < `crawler.toml` < the spider's `custom_settings` <
//! `CRAWLER_*` environment variables < `-s key=value`, with the source of every value kept
//! so `settings` can say where each one came from and errors can point at file:line:col.
//!
//! The layering works on the serde representation of [`Settings`] (a flat JSON map), so a
//! field added to `Settings` is settable from every layer without changes here; its section
//! in crawler.toml comes from [`SECTIONS`] (or `general` when no section claims it).
//!
//! ```
//! use crawler::settings::{SettingsLayers, Source};
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
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use crawler_core::{Error, ErrorKind, Result};

use super::file::{FileValue, located, parse_file};
use crawler_core::Settings;
use crawler_core::settings_text::SPECIAL_KEYS;
use crawler_core::settings_text::scrapy_env_warning;
use crawler_core::settings_text::{
    Written, display_value, set_text, try_set, type_hint, unknown_setting,
};
use crawler_core::{SECTIONS, section_of};

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
    /// Things worth telling the user that are not errors (Scrapy's variables in the
    /// environment).
    warnings: Vec<String>,
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
                value: crawler_core::redact::redact_setting(key, &display_value(value)),
                source: self.sources.get(key).cloned().unwrap_or(Source::Default),
            })
            .collect()
    }

    /// The listing `settings` prints: `key = value  # source`, grouped by section, then for
    /// each `[[hosts]]` rule the effective values for the hosts it matches.
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
        out.push_str(&super::host_table::host_rules_table(&self.settings));
        out
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
    /// not a setting and is skipped; any other unknown `CRAWLER_*` name is an error. Scrapy's
    /// variables are not read but noted in [`SettingsLayers::warnings`].
    pub fn env_from(&mut self, vars: impl IntoIterator<Item = (String, String)>) -> Result<()> {
        let keys = Settings::keys();
        let mut found = Vec::new();
        let mut warnings = Vec::new();
        for (var, value) in vars {
            let Some(rest) = var.strip_prefix("CRAWLER_") else {
                warnings.extend(scrapy_env_warning(&var));
                continue;
            };
            if var == "CRAWLER_SETTINGS" {
                continue;
            }
            let key = rest.to_ascii_lowercase();
            if !keys.contains(&key) {
                return Err(Error::new(
                    ErrorKind::Settings,
                    unknown_setting(&key, Written::Env(&var)),
                ));
            }
            found.push((var, key, value));
        }
        // The environment's order is arbitrary; sort so a run is reproducible.
        found.sort();
        warnings.sort();
        self.env = found;
        self.warnings = warnings;
        Ok(())
    }

    /// Warnings about the layers that are not errors: Scrapy's environment variables
    /// (`SCRAPY_SETTINGS_MODULE`, `SCRAPY_DOWNLOAD_DELAY`, a bare `CONCURRENT_REQUESTS`),
    /// which are not read here, each naming the `CRAWLER_*` variable to set instead. The
    /// command lines print them before anything else.
    pub fn warnings(&self) -> &[String] {
        &self.warnings
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
        // Checked (and its secrets registered) like every finished value; a problem is then
        // blamed on the layer that set it.
        if let Err(e) = settings.validate() {
            let Some((keys, why)) = settings.problem() else {
                return Err(e);
            };
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
