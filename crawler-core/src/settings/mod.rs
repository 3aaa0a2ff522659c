//! Settings: every knob of a crawl, with polite defaults: the contract every crate and every
//! spider reads (`SpiderContext::settings`).
//!
//! This folder owns the [`Settings`] schema and its text form: setting values from text, the
//! `[[hosts]]` rules, the crawler.toml sections, Scrapy's names, and the generated
//! reference. Loading them (reading crawler.toml with positions, the layering of defaults,
//! file, spider, environment and command line) is the `crawler` facade's (`src/settings/`),
//! through [`text_form`]. It must not know how settings are used (no engine, no network, no
//! clock); the middleware settings' checks belong to the middleware registry.
//!
//! The dependencies go one way: `sections.rs` and `host_rules.rs` need nothing of the
//! folder, `schema.rs` only the host rule type, `scrapy.rs` the sections, `text.rs` the
//! schema, the sections and the Scrapy names; `docs.rs` builds on those.
//!
//! - `schema.rs`: [`Settings`], its defaults, enums and validation.
//! - `host_rules.rs`: [`HostRule`], a `[[hosts]]` rule, and how it matches a host.
//! - `text.rs`: [`Settings::set`] and the text form of values.
//! - `sections.rs`: [`SECTIONS`], which setting lives in which crawler.toml section.
//! - `scrapy.rs`: Scrapy's setting names and what each is called here, for every layer's
//!   messages and docs/coming-from-scrapy.md.
//! - `docs.rs`: [`settings_markdown`], the settings reference.

mod docs;
mod host_rules;
mod schema;
mod scrapy;
mod sections;
mod text;

pub use docs::settings_markdown;
pub use host_rules::{HOST_RULE_KEYS, HostRule};
pub use schema::{FeedFsync, HostKeyMode, LogFormat, Settings, ThrottleMode};
pub use schema::{HttpVersion, TlsVersion};
pub use sections::{SECTIONS, Section, section_of};

/// The text form of settings, for the settings loader (the `crawler` facade reads
/// crawler.toml, the environment and the command line into layers): how a value is shown and
/// set from text, how a key that is not ours is explained (Scrapy's names, the nearest
/// setting), which top-level keys are not settings, and Scrapy's own environment variables.
pub mod text_form {
    pub use super::scrapy::scrapy_env_warning;
    pub use super::sections::SPECIAL_KEYS;
    pub use super::text::{
        Written, display_value, nearest, set_text, try_set, type_hint, unknown_setting,
    };
}
