//! Feeds: items written to JSON Lines, JSON or CSV files (or to standard output) as they
//! arrive.
//!
//! Each item is serialised whole into memory before a byte of it reaches the file, so a
//! serialisation error never leaves half a record behind; an I/O error (disk full) or a
//! `kill -9` can still cut the last record short, and a resumed crawl cuts such a torn tail
//! off before it appends (see [`FeedWriter::open`]).
//!
//! A feed is named by a path whose extension gives the format (`items.jsonl`), or with the
//! format after a colon as Scrapy's `-o` takes it (`items.txt:jsonl`); `-` is standard
//! output (JSON Lines unless a format follows: `-:csv`). Paths may hold `%(name)s` (the
//! spider's name) and `%(time)s` (when the crawl started), expanded by
//! [`expand_feed_path`].

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use crate::error::{Error, ErrorKind, Result};

/// The feed path that means standard output.
pub const STDOUT_FEED: &str = "-";

/// The file format of a feed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FeedFormat {
    /// One JSON object per line (`.jsonl`, `.jl`, `.ndjson`). Safe to read while it grows and
    /// to append to when a crawl resumes.
    JsonLines,
    /// One JSON array (`.json`), closed when the crawl ends.
    Json,
    /// Comma-separated values with a header row (`.csv`); items must be flat.
    Csv,
}

impl FeedFormat {
    /// The format a file extension or a format name (after `FILE:`) stands for, in any
    /// case: `jsonl`, `jl`, `ndjson`, `jsonlines`, `json`, `csv`.
    pub fn from_name(name: &str) -> Option<Self> {
        match name.to_ascii_lowercase().as_str() {
            "jsonl" | "jl" | "ndjson" | "jsonlines" => Some(Self::JsonLines),
            "json" => Some(Self::Json),
            "csv" => Some(Self::Csv),
            _ => None,
        }
    }
}

/// Where and how to write items.
#[derive(Debug, Clone)]
pub struct FeedSpec {
    /// The output file ([`STDOUT_FEED`], `-`, for standard output).
    pub path: PathBuf,
    /// Its format.
    pub format: FeedFormat,
    /// Append to an existing file instead of replacing it.
    pub append: bool,
}

/// The placeholders a feed path may hold, and what each stands for.
const PLACEHOLDERS: &[(&str, &str)] = &[
    ("name", "the spider's name"),
    (
        "time",
        "when the crawl started, as 2024-05-21T12-33-41 (UTC)",
    ),
];

/// Why `path` (as written in `feeds` or to `-o`) is not a feed, if it is not: an unknown
/// format or placeholder. Checks the text only; the file is opened when the crawl starts.
pub fn feed_problem(path: &str) -> Option<String> {
    if let Err(why) = placeholders(path) {
        return Some(why);
    }
    parse_spec(Path::new(path)).err()
}

/// Split `FILE:FORMAT` and find the format; the message when there is none.
fn parse_spec(path: &Path) -> std::result::Result<(PathBuf, FeedFormat), String> {
    if let Some(text) = path.to_str()
        && let Some((file, name)) = text.rsplit_once(':')
        && let Some(format) = FeedFormat::from_name(name)
        && !file.is_empty()
    {
        return Ok((PathBuf::from(file), format));
    }
    if path.as_os_str() == STDOUT_FEED {
        return Ok((path.to_path_buf(), FeedFormat::JsonLines));
    }
    let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
    FeedFormat::from_name(ext)
        .map(|f| (path.to_path_buf(), f))
        .ok_or_else(|| {
            format!(
                "cannot tell the feed format of '{}': use a .jsonl, .json or .csv file name, or \
                 give the format after a colon ('{}:jsonl')",
                path.display(),
                path.display()
            )
        })
}

/// The placeholders in `path`, checked: every `%(` opens one, closed by `)s`, naming one of
/// [`PLACEHOLDERS`]. `Ok` holds the pieces: literal text and placeholder names, in order.
fn placeholders(path: &str) -> std::result::Result<Vec<(bool, &str)>, String> {
    let mut parts = Vec::new();
    let mut rest = path;
    while let Some(at) = rest.find("%(") {
        parts.push((false, &rest[..at]));
        let after = &rest[at + 2..];
        let Some(close) = after.find(')') else {
            return Err(format!(
                "unclosed placeholder in feed path '{path}': write %(name)s or %(time)s"
            ));
        };
        let name = &after[..close];
        if !after[close + 1..].starts_with('s') {
            return Err(format!(
                "placeholder %({name}) in feed path '{path}' must end with )s, as in %({name})s"
            ));
        }
        if !PLACEHOLDERS.iter().any(|(n, _)| *n == name) {
            let known: Vec<String> = PLACEHOLDERS
                .iter()
                .map(|(n, what)| format!("%({n})s ({what})"))
                .collect();
            return Err(format!(
                "unknown placeholder %({name})s in feed path '{path}': the placeholders are {}",
                known.join(" and ")
            ));
        }
        parts.push((true, name));
        rest = &after[close + 2..];
    }
    parts.push((false, rest));
    Ok(parts)
}

/// `time` as `%(time)s` writes it: UTC to the second, with `-` for `:` so the name is valid
/// on every filesystem (Scrapy's form: `2024-05-21T12-33-41`).
pub fn feed_time(time: SystemTime) -> String {
    humantime::format_rfc3339_seconds(time)
        .to_string()
        .trim_end_matches('Z')
        .replace(':', "-")
}

/// `path` with its placeholders filled in: `%(name)s` with `spider`, `%(time)s` with
/// `started` (see [`feed_time`]). Unknown placeholders are errors.
pub fn expand_feed_path(path: &str, spider: &str, started: SystemTime) -> Result<String> {
    let parts = placeholders(path).map_err(|why| Error::new(ErrorKind::Settings, why))?;
    let mut out = String::with_capacity(path.len() + 16);
    for (placeholder, text) in parts {
        match (placeholder, text) {
            (false, literal) => out.push_str(literal),
            (true, "name") => out.push_str(spider),
            (true, _) => out.push_str(&feed_time(started)),
        }
    }
    Ok(out)
}

impl FeedSpec {
    /// A feed whose format follows the file extension, or the format written after a colon
    /// (`items.txt:jsonl`); `-` is standard output, as JSON Lines unless a format follows.
    /// Paths with placeholders are checked here and expanded by [`expand_feed_path`].
    pub fn new(path: impl Into<PathBuf>) -> Result<Self> {
        let path = path.into();
        if let Some(text) = path.to_str() {
            placeholders(text).map_err(|why| Error::new(ErrorKind::Settings, why))?;
        }
        let (path, format) =
            parse_spec(&path).map_err(|why| Error::new(ErrorKind::Settings, why))?;
        Ok(Self {
            path,
            format,
            append: false,
        })
    }

    /// Append instead of replacing (JSON Lines and CSV only).
    pub fn append(mut self) -> Self {
        self.append = true;
        self
    }

    /// Whether items go to standard output rather than a file.
    pub fn is_stdout(&self) -> bool {
        self.path.as_os_str() == STDOUT_FEED
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_format_after_a_colon_and_standard_output() {
        let spec = FeedSpec::new("items.txt:jsonlines").unwrap();
        assert_eq!(
            (spec.path.as_path(), spec.format),
            (Path::new("items.txt"), FeedFormat::JsonLines)
        );
        let spec = FeedSpec::new("out/items.dat:CSV").unwrap();
        assert_eq!(spec.format, FeedFormat::Csv);
        let spec = FeedSpec::new("-").unwrap();
        assert!(spec.is_stdout());
        assert_eq!(spec.format, FeedFormat::JsonLines);
        let spec = FeedSpec::new("-:csv").unwrap();
        assert!(spec.is_stdout() && spec.format == FeedFormat::Csv);
        // A colon that is not followed by a format is part of the name.
        let e = FeedSpec::new("a:b").unwrap_err();
        assert!(e.to_string().contains("'a:b:jsonl'"), "{e}");
        assert_eq!(e.kind(), ErrorKind::Settings, "{e:?}");
    }

    #[test]
    fn placeholders_expand_and_unknown_ones_are_named() {
        let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_716_294_821);
        assert_eq!(feed_time(t), "2024-05-21T12-33-41");
        assert_eq!(
            expand_feed_path("out/%(name)s-%(time)s.jsonl", "books", t).unwrap(),
            "out/books-2024-05-21T12-33-41.jsonl"
        );
        assert_eq!(expand_feed_path("100%.csv", "b", t).unwrap(), "100%.csv");
        let e = expand_feed_path("%(batch_id)d.jsonl", "b", t).unwrap_err();
        assert!(e.to_string().contains("must end with )s"), "{e}");
        let e = FeedSpec::new("%(batch_time)s.jsonl").unwrap_err();
        assert!(
            e.to_string().contains(
                "unknown placeholder %(batch_time)s in feed path '%(batch_time)s.jsonl': the \
                 placeholders are %(name)s"
            ),
            "{e}"
        );
        assert!(feed_problem("%(name.jsonl").is_some());
        assert_eq!(feed_problem("items-%(name)s.csv"), None);
    }
}
