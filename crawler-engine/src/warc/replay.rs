//! A crawl replayed from its WARC files (the `replay_warc` setting): the archive answers the
//! downloader as the HTTP cache does offline, through the same [`ConditionalStore`] path,
//! and answers the robots.txt cache through [`RobotsShare`], so nothing goes to the network.
//!
//! The files are indexed when the crawl starts: one pass over every record, keeping where
//! each answer is (file and offset), never its body, so memory grows with the number of
//! URLs, not with the archive's size. An answer is read (one gzip member decompressed) when
//! a request asks for it.
//!
//! What answers a request: the latest `response` or `revisit` record (by `WARC-Date`, then
//! by position) whose `request` record names its method (a response without a request
//! record counts as a GET), for the request's URL without its fragment. A `revisit` is the
//! response it refers to (`WARC-Refers-To`, else the latest response for its
//! `WARC-Refers-To-Target-URI`) with the revisit's fresh headers over the stored ones, as
//! the HTTP cache replays a 304; one whose original is in none of the files answers nothing.
//!
//! ```no_run
//! use crawler_engine::warc::WarcArchive;
//!
//! let archive = WarcArchive::open(&["out/crawl-*.warc.gz".to_owned()]).expect("indexed");
//! println!("{} answers in {} files", archive.len(), archive.files().len());
//! ```

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use crawler_core::matching::{Wildcard, wildcard_match};
use crawler_core::{
    CachedPage, ConditionalStore, Error, ErrorKind, Result, RobotsShare, SharedRobots, Url,
    Validators, canonical_url,
};

/// Redirects followed inside the archive to an origin's robots.txt: RFC 9309 asks crawlers
/// to follow at least five, as the robots.txt cache does on the network.
const ROBOTS_REDIRECTS: usize = 5;

/// How long a robots.txt read from the archive is trusted: the archive does not change
/// during a replay, so this only bounds how often the robots.txt cache reads it again.
const ROBOTS_TTL: Duration = Duration::from_secs(24 * 3600);

/// The longest WARC header line and the most WARC header bytes of one record: past them the
/// file is damaged or not WARC, and the index stops with an error rather than reading on.
const MAX_HEADER_LINE: usize = 64 * 1024;
const MAX_HEADER_BYTES: u64 = 1024 * 1024;

/// Buffer of the reader over a file while it is indexed (fewer reads on large archives).
const SCAN_BUFFER: usize = 256 * 1024;

/// Where a record starts: the file's index in [`WarcArchive::files`] and the byte offset
/// (of its gzip member in a compressed file).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Loc {
    file: u32,
    offset: u64,
}

/// What answers one method and URL.
#[derive(Debug, Clone, Copy)]
struct Answer {
    /// The `response` record, or the `revisit` record.
    record: Loc,
    /// For a revisit: the response it refers to.
    original: Option<Loc>,
}

/// One response or revisit record met while indexing.
struct Seen {
    loc: Loc,
    id: String,
    url: String,
    date: SystemTime,
    revisit: bool,
    refers_to: Option<String>,
    refers_to_url: Option<String>,
}

/// WARC files indexed for replay: a [`ConditionalStore`] that answers every request (see
/// [`ConditionalStore::replays_all`]) and a [`RobotsShare`] that answers every origin's
/// robots.txt from the archive.
#[derive(Debug)]
pub struct WarcArchive {
    files: Vec<PathBuf>,
    gzip: Vec<bool>,
    /// (method in upper case, URL without fragment) → its answer.
    answers: HashMap<(String, String), Answer>,
}

impl WarcArchive {
    /// Index the WARC files that `patterns` name: paths, or globs with `*` and `?` in the
    /// file name (matches in name order). A pattern that names no file, a file that is not
    /// WARC, or a gzipped file that is one gzip stream rather than a member per record is
    /// an error naming the file.
    pub fn open(patterns: &[String]) -> Result<Self> {
        let files = expand(patterns)?;
        let mut gzip = Vec::with_capacity(files.len());
        let mut seen = Vec::new();
        // Response record ID → the method of the request record pointing at it.
        let mut methods: HashMap<String, String> = HashMap::new();
        for (n, path) in files.iter().enumerate() {
            let compressed = is_gzip(path)?;
            gzip.push(compressed);
            scan(path, n as u32, compressed, &mut seen, &mut methods)?;
        }
        let by_id: HashMap<&str, Loc> = seen
            .iter()
            .filter(|s| !s.revisit)
            .map(|s| (s.id.as_str(), s.loc))
            .collect();
        // The latest GET response per URL, what a revisit without WARC-Refers-To refers to.
        let mut latest_get: HashMap<String, (SystemTime, usize, Loc)> = HashMap::new();
        let method_of = |s: &Seen| {
            methods
                .get(&s.id)
                .cloned()
                .unwrap_or_else(|| "GET".to_owned())
        };
        for (order, s) in seen.iter().enumerate() {
            if !s.revisit && method_of(s) == "GET" {
                let entry = latest_get
                    .entry(s.url.clone())
                    .or_insert((s.date, order, s.loc));
                if (s.date, order) >= (entry.0, entry.1) {
                    *entry = (s.date, order, s.loc);
                }
            }
        }
        let mut answers: HashMap<(String, String), (SystemTime, usize, Answer)> = HashMap::new();
        for (order, s) in seen.iter().enumerate() {
            let original = if s.revisit {
                let by_ref = s.refers_to.as_deref().and_then(|id| by_id.get(id).copied());
                let by_url = || {
                    let url = s.refers_to_url.as_deref().unwrap_or(&s.url);
                    latest_get.get(url).map(|&(_, _, loc)| loc)
                };
                match by_ref.or_else(by_url) {
                    Some(loc) => Some(loc),
                    None => {
                        tracing::debug!(url = %s.url, "a revisit record whose response is in no replayed file: skipped");
                        continue;
                    }
                }
            } else {
                None
            };
            let answer = Answer {
                record: s.loc,
                original,
            };
            let key = (method_of(s), s.url.clone());
            let entry = answers.entry(key).or_insert((s.date, order, answer));
            if (s.date, order) >= (entry.0, entry.1) {
                *entry = (s.date, order, answer);
            }
        }
        Ok(Self {
            files,
            gzip,
            answers: answers.into_iter().map(|(k, (_, _, a))| (k, a)).collect(),
        })
    }

    /// The files indexed, in order.
    pub fn files(&self) -> &[PathBuf] {
        &self.files
    }

    /// How many method and URL pairs the archive answers.
    pub fn len(&self) -> usize {
        self.answers.len()
    }

    /// Whether the archive answers nothing.
    pub fn is_empty(&self) -> bool {
        self.answers.is_empty()
    }

    /// The answer recorded for `method` on `url`, read from its file.
    pub fn answer(&self, method: &str, url: &Url) -> Result<Option<CachedPage>> {
        let key = (method.to_ascii_uppercase(), canonical_url(url));
        let Some(answer) = self.answers.get(&key).copied() else {
            return Ok(None);
        };
        let (fields, block) = self.read(answer.record)?;
        let page = page_of(&fields, &block).map_err(|why| self.damaged(answer.record, &why))?;
        let Some(original) = answer.original else {
            return Ok(Some(page));
        };
        let (o_fields, o_block) = self.read(original)?;
        let mut stored =
            page_of(&o_fields, &o_block).map_err(|why| self.damaged(original, &why))?;
        // The 304's fresh headers over the stored ones, as the HTTP cache replays a 304:
        // its framing headers describe no body.
        for (k, v) in page.headers {
            if matches!(
                k.to_ascii_lowercase().as_str(),
                "content-length" | "transfer-encoding" | "content-encoding"
            ) {
                continue;
            }
            stored
                .headers
                .retain(|(old, _)| !old.eq_ignore_ascii_case(&k));
            stored.headers.push((k, v));
        }
        stored.url = page.url;
        stored.stored_at_unix = page.stored_at_unix;
        Ok(Some(stored))
    }

    fn damaged(&self, loc: Loc, why: &str) -> Error {
        Error::new(
            ErrorKind::Storage,
            format!(
                "the WARC record at byte {} of {} is damaged: {why}",
                loc.offset,
                self.path(loc).display()
            ),
        )
    }

    fn path(&self, loc: Loc) -> &Path {
        &self.files[loc.file as usize]
    }

    /// The WARC fields and block of the record at `loc`.
    fn read(&self, loc: Loc) -> Result<(Fields, Vec<u8>)> {
        let path = self.path(loc);
        let io = |e: std::io::Error| {
            Error::new(
                ErrorKind::Io,
                format!("cannot read the WARC file {}", path.display()),
            )
            .with_source(e)
        };
        let mut file = File::open(path).map_err(io)?;
        file.seek(SeekFrom::Start(loc.offset)).map_err(io)?;
        let record = if self.gzip[loc.file as usize] {
            let mut reader = BufReader::new(flate2::bufread::GzDecoder::new(BufReader::new(file)));
            read_record(&mut reader, true)
        } else {
            read_record(&mut BufReader::new(file), true)
        };
        match record.map_err(io)? {
            Some(r) => Ok((r.fields, r.block)),
            None => Err(self.damaged(loc, "no record there")),
        }
    }
}

impl ConditionalStore for WarcArchive {
    fn validators(&self, _url: &Url) -> Result<Option<Validators>> {
        Ok(None)
    }

    fn put_validators(&self, _url: &Url, _validators: &Validators) -> Result<()> {
        Ok(())
    }

    fn keeps_responses(&self) -> bool {
        true
    }

    fn cached(&self, url: &Url) -> Result<Option<CachedPage>> {
        self.answer("GET", url)
    }

    fn replays_all(&self) -> bool {
        true
    }

    fn recorded(&self, method: &str, url: &Url) -> Result<Option<CachedPage>> {
        self.answer(method, url)
    }
}

impl RobotsShare for WarcArchive {
    /// The origin's robots.txt as archived, redirects followed inside the archive; an
    /// origin whose robots.txt is not archived (a crawl that did not obey robots.txt) has
    /// none (a 404: no rules), so the robots.txt cache never fetches it.
    fn get(&self, origin: &str) -> Result<Option<(SharedRobots, Duration)>> {
        let none = SharedRobots {
            status: 404,
            body: Vec::new(),
            truncated: false,
        };
        let Ok(mut url) = Url::parse(&format!("{origin}/robots.txt")) else {
            return Ok(Some((none, ROBOTS_TTL)));
        };
        for _ in 0..=ROBOTS_REDIRECTS {
            let page = match self.answer("GET", &url) {
                Ok(Some(page)) => page,
                Ok(None) => break,
                Err(e) => {
                    tracing::warn!(%url, "robots.txt unreadable in the archive, read as none: {e}");
                    break;
                }
            };
            let location = crawler_core::REDIRECTS
                .contains(&page.status)
                .then(|| {
                    page.headers
                        .iter()
                        .find(|(k, _)| k.eq_ignore_ascii_case("location"))
                })
                .flatten()
                .and_then(|(_, v)| url.join(v).ok());
            match location {
                Some(next) => url = next,
                None => {
                    let robots = SharedRobots {
                        status: page.status,
                        body: page.body,
                        truncated: false,
                    };
                    return Ok(Some((robots, ROBOTS_TTL)));
                }
            }
        }
        Ok(Some((none, ROBOTS_TTL)))
    }

    fn put(&self, _origin: &str, _robots: &SharedRobots, _ttl: Duration) -> Result<()> {
        Ok(())
    }
}

/// The files `patterns` name, each once, in order (a glob's matches by name).
fn expand(patterns: &[String]) -> Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = Vec::new();
    for pattern in patterns {
        let path = Path::new(pattern);
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let found = if name.contains(['*', '?']) {
            let dir = path
                .parent()
                .filter(|d| !d.as_os_str().is_empty())
                .unwrap_or(Path::new("."));
            let entries = std::fs::read_dir(dir).map_err(|e| {
                Error::new(
                    ErrorKind::Io,
                    format!("replay_warc: cannot list {} for '{pattern}'", dir.display()),
                )
                .with_source(e)
            })?;
            let mut found: Vec<PathBuf> = entries
                .filter_map(|e| e.ok())
                .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
                .filter(|e| wildcard_match(&name, &e.file_name().to_string_lossy(), Wildcard::Glob))
                .map(|e| dir.join(e.file_name()))
                .collect();
            found.sort();
            found
        } else if path.is_file() {
            vec![path.to_owned()]
        } else {
            Vec::new()
        };
        if found.is_empty() {
            return Err(Error::new(
                ErrorKind::Settings,
                format!("replay_warc: no WARC file matches '{pattern}'"),
            ));
        }
        for f in found {
            if !files.contains(&f) {
                files.push(f);
            }
        }
    }
    Ok(files)
}

/// Whether `path` starts with the gzip magic number.
fn is_gzip(path: &Path) -> Result<bool> {
    let mut magic = [0u8; 2];
    let mut file = File::open(path).map_err(|e| {
        Error::new(
            ErrorKind::Io,
            format!("cannot read the WARC file {}", path.display()),
        )
        .with_source(e)
    })?;
    let n = file.read(&mut magic).unwrap_or(0);
    Ok(n == 2 && magic == [0x1f, 0x8b])
}

/// A reader that counts the bytes its user consumed, for record offsets.
struct Counting<R> {
    inner: R,
    pos: u64,
}

impl<R: BufRead> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.pos += n as u64;
        Ok(n)
    }
}

impl<R: BufRead> BufRead for Counting<R> {
    fn fill_buf(&mut self) -> std::io::Result<&[u8]> {
        self.inner.fill_buf()
    }

    fn consume(&mut self, amt: usize) {
        self.pos += amt as u64;
        self.inner.consume(amt);
    }
}

/// A record's WARC fields, in order.
type Fields = Vec<(String, String)>;

/// One record as read: its WARC fields, and its block when asked for (else skipped).
struct RawRecord {
    fields: Fields,
    block: Vec<u8>,
}

fn field<'a>(fields: &'a [(String, String)], name: &str) -> Option<&'a str> {
    fields
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

/// Read one record from `r`: blank lines, the `WARC/` version line, the fields up to a
/// blank line, then `Content-Length` bytes of block (kept if `keep_block`, else only the
/// block's first line is kept: a request's method). `None` at the end of the input.
fn read_record(r: &mut impl BufRead, keep_block: bool) -> std::io::Result<Option<RawRecord>> {
    let bad = |why: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, why.to_owned());
    let mut line = Vec::new();
    let mut head_bytes = 0u64;
    // The version line, after any blank lines left by the previous record.
    loop {
        line.clear();
        let n = r
            .by_ref()
            .take(MAX_HEADER_LINE as u64)
            .read_until(b'\n', &mut line)?;
        if n == 0 {
            return Ok(None);
        }
        head_bytes += n as u64;
        if head_bytes > MAX_HEADER_BYTES {
            return Err(bad("no WARC record where one was expected"));
        }
        if line.iter().all(|b| b.is_ascii_whitespace()) {
            continue;
        }
        if line.starts_with(b"WARC/") {
            break;
        }
        return Err(bad("not a WARC record (no WARC/ version line)"));
    }
    let mut fields = Vec::new();
    loop {
        line.clear();
        let n = r
            .by_ref()
            .take(MAX_HEADER_LINE as u64)
            .read_until(b'\n', &mut line)?;
        head_bytes += n as u64;
        if n == 0 || head_bytes > MAX_HEADER_BYTES {
            return Err(bad("a WARC record's header is cut off or too long"));
        }
        let text = String::from_utf8_lossy(&line);
        let text = text.trim_end_matches(['\r', '\n']);
        if text.is_empty() {
            break;
        }
        if let Some((k, v)) = text.split_once(':') {
            fields.push((k.trim().to_owned(), v.trim().to_owned()));
        }
    }
    let len: u64 = field(&fields, "Content-Length")
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| bad("a WARC record without a valid Content-Length"))?;
    let mut block = Vec::new();
    let mut body = r.by_ref().take(len);
    if keep_block {
        body.read_to_end(&mut block)?;
    } else {
        body.by_ref()
            .take(MAX_HEADER_LINE as u64)
            .read_until(b'\n', &mut block)?;
        std::io::copy(&mut body, &mut std::io::sink())?;
    }
    if body.limit() > 0 || (keep_block && (block.len() as u64) < len) {
        return Err(bad("a WARC record's block is cut off"));
    }
    Ok(Some(RawRecord { fields, block }))
}

/// Index one file's records into `seen` (responses and revisits) and `methods` (what each
/// request record says about the response it belongs to).
fn scan(
    path: &Path,
    n: u32,
    gzip: bool,
    seen: &mut Vec<Seen>,
    methods: &mut HashMap<String, String>,
) -> Result<()> {
    let damaged = |offset: u64, why: String| {
        Error::new(
            ErrorKind::Storage,
            format!("replay_warc: {} at byte {offset}: {why}", path.display()),
        )
    };
    let file = File::open(path).map_err(|e| {
        Error::new(
            ErrorKind::Io,
            format!("cannot read the WARC file {}", path.display()),
        )
        .with_source(e)
    })?;
    let mut src = Counting {
        inner: BufReader::with_capacity(SCAN_BUFFER, file),
        pos: 0,
    };
    loop {
        let offset = src.pos;
        let at_end = src
            .fill_buf()
            .map_err(|e| damaged(offset, e.to_string()))?
            .is_empty();
        if at_end {
            return Ok(());
        }
        let record = if gzip {
            let mut member = BufReader::new(flate2::bufread::GzDecoder::new(&mut src));
            let record =
                read_record(&mut member, false).map_err(|e| damaged(offset, e.to_string()))?;
            // The rest of the member must be the record's closing line ends: a member
            // holding more records is a file compressed whole, which cannot be read from an
            // offset.
            let mut rest = Vec::new();
            member
                .by_ref()
                .take(64)
                .read_to_end(&mut rest)
                .map_err(|e| damaged(offset, e.to_string()))?;
            if !rest.iter().all(u8::is_ascii_whitespace) {
                return Err(damaged(
                    offset,
                    "the file is compressed as one gzip stream, not one gzip member per \
                     record; recompress it (`warcio recompress`) to replay it"
                        .to_owned(),
                ));
            }
            std::io::copy(&mut member, &mut std::io::sink())
                .map_err(|e| damaged(offset, e.to_string()))?;
            record
        } else {
            read_record(&mut src, false).map_err(|e| damaged(offset, e.to_string()))?
        };
        let Some(record) = record else {
            return Ok(());
        };
        let loc = Loc { file: n, offset };
        let fields = &record.fields;
        let kind = field(fields, "WARC-Type")
            .unwrap_or("")
            .to_ascii_lowercase();
        let uri = field(fields, "WARC-Target-URI").map(|u| u.trim_matches(['<', '>']));
        let Some(url) = uri
            .and_then(|u| Url::parse(u).ok())
            .map(|u| canonical_url(&u))
        else {
            continue;
        };
        let id = field(fields, "WARC-Record-ID").unwrap_or("").to_owned();
        match kind.as_str() {
            "request" => {
                let method = record
                    .block
                    .split(|&b| b == b' ')
                    .next()
                    .map(|m| String::from_utf8_lossy(m).to_ascii_uppercase())
                    .unwrap_or_default();
                if let Some(to) = field(fields, "WARC-Concurrent-To")
                    && !method.is_empty()
                {
                    methods.insert(to.to_owned(), method);
                }
            }
            "response" | "revisit" => {
                let date = field(fields, "WARC-Date")
                    .and_then(|d| humantime::parse_rfc3339_weak(d).ok())
                    .unwrap_or(SystemTime::UNIX_EPOCH);
                seen.push(Seen {
                    loc,
                    id,
                    url,
                    date,
                    revisit: kind == "revisit",
                    refers_to: field(fields, "WARC-Refers-To").map(str::to_owned),
                    refers_to_url: field(fields, "WARC-Refers-To-Target-URI")
                        .and_then(|u| Url::parse(u.trim_matches(['<', '>'])).ok())
                        .map(|u| canonical_url(&u)),
                });
            }
            _ => {}
        }
    }
}

/// The page a response or revisit record holds: its URL, date, and the HTTP status,
/// headers and body of its block. A body stored with its transfer coding (chunked) or a
/// gzip or deflate content coding, as some archivers keep them, is decoded, as the
/// downloader hands bodies to spiders.
fn page_of(fields: &[(String, String)], block: &[u8]) -> std::result::Result<CachedPage, String> {
    let url = field(fields, "WARC-Target-URI")
        .unwrap_or("")
        .trim_matches(['<', '>'])
        .to_owned();
    let stored_at_unix = field(fields, "WARC-Date")
        .and_then(|d| humantime::parse_rfc3339_weak(d).ok())
        .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
    let split = block
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| (i, i + 4))
        .or_else(|| {
            block
                .windows(2)
                .position(|w| w == b"\n\n")
                .map(|i| (i, i + 2))
        })
        .ok_or("no end to the HTTP header")?;
    let head = String::from_utf8_lossy(&block[..split.0]);
    let mut lines = head.lines();
    let status_line = lines.next().unwrap_or("");
    let status: u16 = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("no HTTP status in '{status_line}'"))?;
    let mut headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect();
    let mut body = block[split.1..].to_vec();
    let coding = |headers: &[(String, String)], name: &str| {
        field(headers, name).map(|v| v.trim().to_ascii_lowercase())
    };
    if coding(&headers, "transfer-encoding").is_some_and(|v| v.contains("chunked")) {
        body = dechunk(&body).ok_or("a chunked body that does not de-chunk")?;
        headers.retain(|(k, _)| !k.eq_ignore_ascii_case("transfer-encoding"));
        headers.retain(|(k, _)| !k.eq_ignore_ascii_case("content-length"));
    }
    let decoded = match coding(&headers, "content-encoding").as_deref() {
        Some("gzip" | "x-gzip") => {
            let mut out = Vec::new();
            flate2::read::MultiGzDecoder::new(&body[..])
                .read_to_end(&mut out)
                .map(|_| Some(out))
                .map_err(|e| format!("a gzip body that does not decode: {e}"))?
        }
        Some("deflate") => {
            let mut out = Vec::new();
            flate2::read::ZlibDecoder::new(&body[..])
                .read_to_end(&mut out)
                .map(|_| Some(out))
                .map_err(|e| format!("a deflate body that does not decode: {e}"))?
        }
        _ => None,
    };
    if let Some(out) = decoded {
        body = out;
        headers.retain(|(k, _)| {
            !k.eq_ignore_ascii_case("content-encoding") && !k.eq_ignore_ascii_case("content-length")
        });
    }
    Ok(CachedPage {
        url,
        status,
        headers,
        body,
        stored_at_unix,
    })
}

/// A chunked body without its chunk framing (trailers dropped).
fn dechunk(mut data: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(data.len());
    loop {
        let end = data.windows(2).position(|w| w == b"\r\n")?;
        let size_text = std::str::from_utf8(&data[..end]).ok()?;
        let size_text = size_text.split(';').next()?.trim();
        let size = usize::from_str_radix(size_text, 16).ok()?;
        data = &data[end + 2..];
        if size == 0 {
            return Some(out);
        }
        out.extend_from_slice(data.get(..size)?);
        data = data.get(size + 2..)?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chunked_body_dechunks() {
        assert_eq!(
            dechunk(b"5\r\nhello\r\n6;x=y\r\n world\r\n0\r\n\r\n").as_deref(),
            Some(&b"hello world"[..])
        );
        assert_eq!(dechunk(b"5\r\nhel"), None);
    }

    #[test]
    fn a_response_block_reads_as_a_page() {
        let fields = vec![
            ("WARC-Target-URI".to_owned(), "http://a.test/x".to_owned()),
            ("WARC-Date".to_owned(), "2024-05-21T12:33:41.5Z".to_owned()),
        ];
        let block = b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n";
        let page = page_of(&fields, block).unwrap();
        assert_eq!(page.status, 200);
        assert_eq!(page.body, b"hi");
        assert_eq!(page.url, "http://a.test/x");
        assert_eq!(
            page.headers,
            vec![("Content-Type".to_owned(), "text/html".to_owned())]
        );
        assert_eq!(page.stored_at_unix, 1_716_294_821);
    }
}
