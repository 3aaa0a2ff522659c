//! Feeds: items written to JSON Lines, JSON, CSV, XML or Parquet files (or to standard output, or to
//! object storage: `s3://`, `gs://`, `az://`) as they arrive.
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
//! [`expand_feed_path`], and `%(batch_id)d` / `%(batch_time)s` (the batch's serial number,
//! from 1, and when it started), expanded per batch by [`expand_batch_path`].
//!
//! A feed whose path is an object URL (`s3://bucket/key`) goes to object storage; `file://`
//! URLs are local paths.

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
    /// Scrapy's XML feed (`.xml`): `<items><item><field>value</field>...</item></items>`,
    /// nested maps as child elements and lists as `<value>` elements. Closed when the crawl
    /// ends, like JSON.
    Xml,
    /// Apache Parquet (`.parquet`): one column per field of the first item (strings,
    /// integers, floats, booleans; nested values as JSON text), written a row group at a
    /// time. Closed when the crawl ends (its footer holds the schema), so always written as
    /// a batch: a file appears whole. Not on standard output.
    Parquet,
}

impl FeedFormat {
    /// The format a file extension or a format name (after `FILE:`) stands for, in any
    /// case: `jsonl`, `jl`, `ndjson`, `jsonlines`, `json`, `csv`, `xml`, `parquet`.
    pub fn from_name(name: &str) -> Option<Self> {
        match name.to_ascii_lowercase().as_str() {
            "jsonl" | "jl" | "ndjson" | "jsonlines" => Some(Self::JsonLines),
            "json" => Some(Self::Json),
            "csv" => Some(Self::Csv),
            "xml" => Some(Self::Xml),
            "parquet" => Some(Self::Parquet),
            _ => None,
        }
    }

    /// The format's name in messages (`JSON Lines`, `Parquet`).
    pub fn title(self) -> &'static str {
        match self {
            Self::JsonLines => "JSON Lines",
            Self::Json => "JSON",
            Self::Csv => "CSV",
            Self::Xml => "XML",
            Self::Parquet => "Parquet",
        }
    }

    /// Whether the file is one document closed at its end (JSON, XML, Parquet), which
    /// cannot be appended to.
    pub fn is_closed_document(self) -> bool {
        matches!(self, Self::Json | Self::Xml | Self::Parquet)
    }
}

/// URL schemes of object storage a feed may be written to.
pub const OBJECT_SCHEMES: &[&str] = &["s3", "s3a", "gs", "az", "adl", "azure", "abfs", "abfss"];

/// The scheme of `path` when it is an object storage URL (`s3://bucket/key`): one of
/// [`OBJECT_SCHEMES`], lower-cased.
pub fn object_scheme(path: &str) -> Option<String> {
    let (scheme, rest) = path.split_once("://")?;
    let scheme = scheme.to_ascii_lowercase();
    (OBJECT_SCHEMES.contains(&scheme.as_str()) && !rest.is_empty()).then_some(scheme)
}

/// The local path of an output location that is not an object: `file:///dir/x` is
/// `/dir/x`, a plain path is itself.
pub fn local_location(location: &str) -> &str {
    location.strip_prefix("file://").unwrap_or(location)
}

/// Why `location` (the failures file, a files store) is not a place the crawl can write
/// to: a scheme other than `file://` and the object schemes ([`OBJECT_SCHEMES`]), a
/// `file://` URL without an absolute path, or (`needs_key`: one object, not a prefix) an
/// object URL naming a bucket and no key.
pub fn location_problem(location: &str, needs_key: bool) -> Option<String> {
    if let Some(local) = location.strip_prefix("file://") {
        return (!local.starts_with('/')).then(|| {
            format!(
                "'{location}' is not a file:// URL with an absolute path: write file:///dir/name"
            )
        });
    }
    if let Some(scheme) = object_scheme(location) {
        let rest = &location[scheme.len() + 3..];
        let (bucket, key) = rest.split_once('/').unwrap_or((rest, ""));
        if bucket.is_empty() {
            return Some(format!("'{location}' names no bucket"));
        }
        if needs_key && key.trim_matches('/').is_empty() {
            return Some(format!(
                "'{location}' names a bucket but no object: write {scheme}://{bucket}/name"
            ));
        }
        return None;
    }
    if let Some((scheme, _)) = location.split_once("://")
        && !scheme.is_empty()
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
    {
        return Some(format!(
            "'{location}' names the storage scheme '{scheme}://', which the crawl cannot write \
             to: the schemes are file://, s3:// (and s3a://), gs:// and az:// (azure://, abfs://)"
        ));
    }
    None
}

/// Where and how to write items.
#[derive(Debug, Clone)]
pub struct FeedSpec {
    /// The output file ([`STDOUT_FEED`], `-`, for standard output).
    pub path: PathBuf,
    /// Its format.
    pub format: FeedFormat,
    /// Append to an existing file instead of replacing it. For a batched feed or an object
    /// (see [`FeedSpec::is_object`]): keep the batches (files, objects) already complete and
    /// write only those after them, as a resumed job does.
    pub append: bool,
    /// Start a new batch (file or object) after this many items; 0: one batch for the whole
    /// crawl (the `feed_batch_items` setting).
    pub batch_items: u64,
}

/// The placeholders a feed path may hold, and what each stands for.
const PLACEHOLDERS: &[(&str, &str)] = &[
    ("name", "the spider's name"),
    (
        "time",
        "when the crawl started, as 2024-05-21T12-33-41 (UTC)",
    ),
    ("batch_id", "the batch's serial number, from 1"),
    ("batch_time", "when the batch started, as %(time)s"),
];

/// A placeholder in a path: its name and, for `%(batch_id)05d`, the zero-padded width.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Placeholder<'a> {
    name: &'a str,
    width: usize,
}

/// Whether `path` names its batches: it holds `%(batch_id)d` or `%(batch_time)s`.
pub fn has_batch_placeholder(path: &str) -> bool {
    placeholders(path).is_ok_and(|parts| {
        parts
            .iter()
            .any(|p| matches!(p, Part::Placeholder(p) if p.name.starts_with("batch_")))
    })
}

/// Why `path` (as written in `feeds` or to `-o`) is not a feed, if it is not: an unknown
/// format or placeholder. Checks the text only; the file is opened when the crawl starts.
pub fn feed_problem(path: &str) -> Option<String> {
    if let Err(why) = placeholders(path) {
        return Some(why);
    }
    if let Some(local) = path.strip_prefix("file://")
        && !local.starts_with('/')
    {
        return Some(format!(
            "'{path}' is not a file:// URL with an absolute path: write file:///dir/items.jsonl"
        ));
    }
    if let Some((scheme, _)) = path.split_once("://")
        && !scheme.eq_ignore_ascii_case("file")
        && object_scheme(path).is_none()
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
    {
        return Some(format!(
            "'{path}' names the storage scheme '{scheme}://', which feeds cannot be written to: \
             the schemes are file://, s3:// (and s3a://), gs:// and az:// (azure://, abfs://)"
        ));
    }
    if let Some(scheme) = object_scheme(path) {
        let rest = &path[scheme.len() + 3..];
        let (bucket, key) = rest.split_once('/').unwrap_or((rest, ""));
        if bucket.contains("%(batch_") {
            return Some(format!(
                "'{path}': the batch placeholders belong in the object's key, not in its \
                 bucket '{bucket}'"
            ));
        }
        if key.is_empty() || key.ends_with('/') {
            return Some(format!(
                "'{path}' names no object: write {scheme}://{bucket}/items.jsonl"
            ));
        }
    }
    parse_spec(Path::new(path)).err()
}

/// Why `path` cannot take batches of `batch_items` items (the `feed_batch_items` setting),
/// if it cannot: a batched feed must name its batches (`%(batch_id)d` or
/// `%(batch_time)s`), or each would replace the one before it, and standard output is not
/// batched.
pub fn batch_problem(path: &str, batch_items: u64) -> Option<String> {
    if batch_items == 0 || path == STDOUT_FEED || path.starts_with("-:") {
        return None;
    }
    (!has_batch_placeholder(path)).then(|| {
        format!(
            "'{path}' must name its batches with %(batch_id)d or %(batch_time)s (as in \
             items-%(batch_id)d.jsonl), since feed_batch_items is set: each batch is a file or \
             object of its own"
        )
    })
}

/// Whether `path` is `-:parquet` (any case).
fn parquet_on_stdout(path: &Path) -> bool {
    path.to_str()
        .and_then(|t| t.strip_prefix("-:"))
        .is_some_and(|f| FeedFormat::from_name(f) == Some(FeedFormat::Parquet))
}

/// Split `FILE:FORMAT` and find the format; the message when there is none.
fn parse_spec(path: &Path) -> std::result::Result<(PathBuf, FeedFormat), String> {
    if parquet_on_stdout(path) {
        return Err(format!(
            "'{}': a Parquet feed cannot go to standard output (a file's schema is in its \
             footer, written last): name a .parquet file",
            path.display()
        ));
    }
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
                "cannot tell the feed format of '{}': use a .jsonl, .json, .csv, .xml or \
                 .parquet file name, or give the format after a colon ('{}:jsonl')",
                path.display(),
                path.display()
            )
        })
}

/// A piece of a feed path: literal text or a placeholder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part<'a> {
    Text(&'a str),
    Placeholder(Placeholder<'a>),
}

/// The placeholders in `path`, checked: every `%(` opens one, closed by `)s` (`)d` for
/// `batch_id`, which may also be zero-padded as `)05d`, as in Scrapy), naming one of
/// [`PLACEHOLDERS`]. `Ok` holds the pieces in order.
fn placeholders(path: &str) -> std::result::Result<Vec<Part<'_>>, String> {
    let mut parts = Vec::new();
    let mut rest = path;
    while let Some(at) = rest.find("%(") {
        parts.push(Part::Text(&rest[..at]));
        let after = &rest[at + 2..];
        let Some(close) = after.find(')') else {
            return Err(format!(
                "unclosed placeholder in feed path '{path}': write %(name)s or %(time)s"
            ));
        };
        let name = &after[..close];
        if !PLACEHOLDERS.iter().any(|(n, _)| *n == name) {
            let known: Vec<String> = PLACEHOLDERS
                .iter()
                .map(|(n, what)| {
                    let conv = if *n == "batch_id" { 'd' } else { 's' };
                    format!("%({n}){conv} ({what})")
                })
                .collect();
            return Err(format!(
                "unknown placeholder %({name})s in feed path '{path}': the placeholders are {}",
                known.join(", ")
            ));
        }
        let spec = &after[close + 1..];
        let (width, len) = if name == "batch_id" {
            // `d`, or `0Nd`: zero-padded to N digits.
            let digits = spec.bytes().take_while(u8::is_ascii_digit).count();
            if spec.as_bytes().get(digits) != Some(&b'd') || (digits > 0 && !spec.starts_with('0'))
            {
                return Err(format!(
                    "placeholder %(batch_id) in feed path '{path}' must end with )d, as in \
                     %(batch_id)d (or )05d for five digits, zero-padded)"
                ));
            }
            (spec[..digits].parse::<usize>().unwrap_or(0), digits + 1)
        } else {
            if !spec.starts_with('s') {
                return Err(format!(
                    "placeholder %({name}) in feed path '{path}' must end with )s, as in \
                     %({name})s"
                ));
            }
            (0, 1)
        };
        parts.push(Part::Placeholder(Placeholder { name, width }));
        rest = &spec[len..];
    }
    parts.push(Part::Text(rest));
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
/// `started` (see [`feed_time`]). The batch placeholders are left as they are, for
/// [`expand_batch_path`] to fill in per batch. Unknown placeholders are errors.
pub fn expand_feed_path(path: &str, spider: &str, started: SystemTime) -> Result<String> {
    expand(path, |p, out| match p.name {
        "name" => {
            out.push_str(spider);
            true
        }
        "time" => {
            out.push_str(&feed_time(started));
            true
        }
        _ => false,
    })
}

/// `path` (already through [`expand_feed_path`]) for batch `id` (from 1), started at
/// `time`: `%(batch_id)d` becomes `id` (`%(batch_id)05d`: zero-padded to 5 digits) and
/// `%(batch_time)s` becomes `time` as [`feed_time`] writes it.
pub fn expand_batch_path(path: &str, id: u64, time: SystemTime) -> Result<String> {
    expand(path, |p, out| match p.name {
        "batch_id" => {
            out.push_str(&format!("{id:0width$}", width = p.width));
            true
        }
        "batch_time" => {
            out.push_str(&feed_time(time));
            true
        }
        _ => false,
    })
}

/// `path` with the placeholders `fill` writes (it returns false for those it leaves as
/// they were written).
fn expand(
    path: &str,
    mut fill: impl FnMut(Placeholder<'_>, &mut String) -> bool,
) -> Result<String> {
    let parts = placeholders(path).map_err(|why| Error::new(ErrorKind::Settings, why))?;
    let mut out = String::with_capacity(path.len() + 16);
    for part in parts {
        match part {
            Part::Text(literal) => out.push_str(literal),
            Part::Placeholder(p) => {
                if !fill(p, &mut out) {
                    out.push_str("%(");
                    out.push_str(p.name);
                    out.push(')');
                    if p.name == "batch_id" {
                        if p.width > 0 {
                            out.push_str(&format!("0{}", p.width));
                        }
                        out.push('d');
                    } else {
                        out.push('s');
                    }
                }
            }
        }
    }
    Ok(out)
}

impl FeedSpec {
    /// A feed whose format follows the file extension, or the format written after a colon
    /// (`items.txt:jsonl`); `-` is standard output, as JSON Lines unless a format follows.
    /// Paths with placeholders are checked here and expanded by [`expand_feed_path`].
    ///
    /// `file:///dir/items.jsonl` is the local path `/dir/items.jsonl`; `s3://`, `gs://` and
    /// `az://` URLs (see [`OBJECT_SCHEMES`]) are objects, written by the engine's object
    /// store client.
    pub fn new(path: impl Into<PathBuf>) -> Result<Self> {
        let mut path = path.into();
        if let Some(text) = path.to_str() {
            placeholders(text).map_err(|why| Error::new(ErrorKind::Settings, why))?;
            if let Some(local) = text.strip_prefix("file://") {
                if !local.starts_with('/') {
                    return Err(Error::new(
                        ErrorKind::Settings,
                        format!(
                            "feed URL '{text}' is not a file:// URL with an absolute path: \
                             write file:///dir/items.jsonl (or the plain path)"
                        ),
                    ));
                }
                path = PathBuf::from(local);
            }
        }
        let (path, format) =
            parse_spec(&path).map_err(|why| Error::new(ErrorKind::Settings, why))?;
        Ok(Self {
            path,
            format,
            append: false,
            batch_items: 0,
        })
    }

    /// Start a new batch every `items` items (0: one batch). The path should name its
    /// batches (`%(batch_id)d` or `%(batch_time)s`), or each batch replaces the one before
    /// it: [`feed_problem`] and the settings refuse that.
    pub fn batches(mut self, items: u64) -> Self {
        self.batch_items = items;
        self
    }

    /// The object storage URL this feed goes to (`s3://bucket/key`, placeholders still in),
    /// if it is not a local file or standard output.
    pub fn object_url(&self) -> Option<&str> {
        let text = self.path.to_str()?;
        object_scheme(text).map(|_| text)
    }

    /// Whether the feed goes to object storage.
    pub fn is_object(&self) -> bool {
        self.object_url().is_some()
    }

    /// Whether the feed is written in batches: a batch size is set or its path names
    /// batches. Each batch appears whole (a local file renamed into place, an object
    /// completed) once its last item is written.
    pub fn is_batched(&self) -> bool {
        self.batch_items > 0 || self.path.to_str().is_some_and(has_batch_placeholder)
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
        let e = expand_feed_path("%(time)d.jsonl", "b", t).unwrap_err();
        assert!(e.to_string().contains("must end with )s"), "{e}");
        let e = FeedSpec::new("%(batch)s.jsonl").unwrap_err();
        assert!(
            e.to_string().contains(
                "unknown placeholder %(batch)s in feed path '%(batch)s.jsonl': the \
                 placeholders are %(name)s"
            ),
            "{e}"
        );
        assert!(feed_problem("%(name.jsonl").is_some());
        assert_eq!(feed_problem("items-%(name)s.csv"), None);
    }

    #[test]
    fn batch_placeholders_are_kept_then_filled_per_batch() {
        let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_716_294_821);
        let path = "s3://b/%(name)s/%(batch_id)05d-%(batch_time)s.jsonl";
        let once = expand_feed_path(path, "books", t).unwrap();
        assert_eq!(once, "s3://b/books/%(batch_id)05d-%(batch_time)s.jsonl");
        assert_eq!(
            expand_batch_path(&once, 7, t).unwrap(),
            "s3://b/books/00007-2024-05-21T12-33-41.jsonl"
        );
        assert_eq!(
            expand_batch_path("x-%(batch_id)d.csv", 12, t).unwrap(),
            "x-12.csv"
        );
        assert!(has_batch_placeholder("x-%(batch_time)s.csv"));
        assert!(!has_batch_placeholder("x-%(time)s.csv"));
        let e = FeedSpec::new("x-%(batch_id)s.csv").unwrap_err();
        assert!(e.to_string().contains("must end with )d"), "{e}");
        assert!(batch_problem("items.jsonl", 100).is_some());
        assert_eq!(batch_problem("items.jsonl", 0), None);
        assert_eq!(batch_problem("-", 100), None);
        assert_eq!(batch_problem("i-%(batch_id)d.jsonl", 100), None);
    }

    #[test]
    fn object_urls_file_urls_and_unknown_schemes() {
        let spec = FeedSpec::new("s3://bucket/dir/items.jsonl").unwrap();
        assert_eq!(spec.object_url(), Some("s3://bucket/dir/items.jsonl"));
        assert_eq!(spec.format, FeedFormat::JsonLines);
        let spec = FeedSpec::new("file:///tmp/items.parquet").unwrap();
        assert_eq!(spec.format, FeedFormat::Parquet);
        // Its footer is written last: never on standard output.
        let e = FeedSpec::new("-:parquet").unwrap_err();
        assert!(
            e.to_string().contains("cannot go to standard output"),
            "{e}"
        );
        assert!(feed_problem("-:PARQUET").is_some());
        let spec = FeedSpec::new("file:///tmp/items.xml").unwrap();
        assert_eq!(spec.path, Path::new("/tmp/items.xml"));
        assert_eq!(spec.format, FeedFormat::Xml);
        assert!(!spec.is_object());
        let why = feed_problem("ftp://host/items.jsonl").unwrap();
        assert!(why.contains("the storage scheme 'ftp://'"), "{why}");
        let why = feed_problem("s3://bucket/").unwrap();
        assert!(why.contains("names no object"), "{why}");
        let why = feed_problem("s3://b-%(batch_id)d/x.jsonl").unwrap();
        assert!(why.contains("not in its bucket"), "{why}");
        assert_eq!(feed_problem("gs://bucket/a/%(batch_id)d.csv"), None);
    }
}
