//! Settings: every knob of a crawl, with polite defaults, and the layers they come from.
//!
//! This folder owns the [`Settings`] schema and everything that reads or describes it:
//! setting values from text, the `[[hosts]]` rules, the crawler.toml sections, reading
//! crawler.toml, the layering of defaults, file, spider, environment and command line, and
//! the generated reference. It must not know how settings are used (no engine, no network,
//! no clock); the middleware settings' checks belong to the middleware registry.
//!
//! The dependencies go one way: `sections.rs` and `host_rules.rs` need nothing of the
//! folder, `schema.rs` only the host rule type, `scrapy.rs` the sections, `text.rs` the
//! schema, the sections and the Scrapy names; `host_table.rs`, `file.rs`, `layering.rs` and
//! `docs.rs` build on those, and nothing below uses them.
//!
//! - `schema.rs`: [`Settings`], its defaults, enums and validation.
//! - `host_rules.rs`: [`HostRule`], a `[[hosts]]` rule, and how it matches a host.
//! - `host_table.rs`: the effective values per `[[hosts]]` rule, for `settings`.
//! - `text.rs`: [`Settings::set`] and the text form of values.
//! - `sections.rs`: [`SECTIONS`], which setting lives in which crawler.toml section.
//! - `file.rs`: reading crawler.toml with positions, [`find_settings_file`].
//! - `layering.rs`: [`SettingsLayers`], [`Source`], [`Resolved`].
//! - `scrapy.rs`: Scrapy's setting names and what each is called here, for every layer's
//!   messages and docs/coming-from-scrapy.md.
//! - `docs.rs`: [`settings_markdown`], the settings reference.

mod docs;
mod file;
mod host_rules;
mod host_table;
mod layering;
mod schema;
mod scrapy;
mod sections;
mod text;

pub use docs::settings_markdown;
pub use file::find_settings_file;
pub use host_rules::{HOST_RULE_KEYS, HostRule};
pub use layering::{Resolved, SettingRow, SettingsLayers, Source};
pub use schema::{FeedFsync, HostKeyMode, LogFormat, Settings, ThrottleMode};
pub use sections::{SECTIONS, Section, section_of};
