//! Settings: every knob of a crawl with its polite default ([`Settings`], crawler-core's
//! schema), the layers they come from (built-in defaults < crawler.toml < the spider's
//! `custom_settings` < `CRAWLER_*` environment variables < `-s key=value`), reading
//! crawler.toml with file:line:col in every error, and the `[[hosts]]` rules.
//! docs/settings.md lists every setting.
//!
//! - `file.rs`: reading crawler.toml with positions, [`find_settings_file`].
//! - `layering.rs`: [`SettingsLayers`], [`Source`], [`Resolved`].
//! - `host_table.rs`: the effective values per `[[hosts]]` rule, for `crawler settings`.

mod file;
mod host_table;
mod layering;
#[cfg(test)]
mod scrapy_tests;

pub use crawler_core::{FeedFsync, HostKeyMode, HostRule, LogFormat, Settings, ThrottleMode};
pub use file::find_settings_file;
pub use layering::{Resolved, SettingRow, SettingsLayers, Source};
