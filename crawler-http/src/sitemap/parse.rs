//! Parsing one sitemap file, bounded in bytes, entries and field length: bytes in, a
//! [`SitemapParse`] out. No I/O beyond the bytes given, no clock.

use std::io::{self, BufRead, BufReader, Read};

use crawler_core::Url;
use flate2::read::MultiGzDecoder;
use quick_xml::Reader;
use quick_xml::events::{BytesStart, Event};

use super::{
    Alternate, SitemapEntry, SitemapError, SitemapErrorKind, SitemapKind, SitemapLimits,
    SitemapParse,
};
use crate::lastmod::parse_lastmod;

/// `<loc>` and `<lastmod>` values longer than this are invalid (the protocol caps `<loc>` at
/// 2,048 characters; the margin tolerates percent-encoding). Bounds the text kept per field.
const MAX_FIELD_BYTES: usize = 8 * 1024;

/// Parse one sitemap file (XML, plain text, either possibly gzipped) under `limits`.
/// `source_url` names the file in errors. Never panics and never holds more than the
/// kept entries plus one XML event in memory (the compressed input aside).
pub fn parse_sitemap(source_url: &str, body: &[u8], limits: &SitemapLimits) -> SitemapParse {
    if body.starts_with(&[0x1f, 0x8b]) {
        // Multi-member gzip (concatenated .gz files) is valid gzip; read all members.
        parse_reader(source_url, MultiGzDecoder::new(body), limits)
    } else {
        parse_reader(source_url, body, limits)
    }
}

fn parse_reader<R: Read>(source_url: &str, input: R, limits: &SitemapLimits) -> SitemapParse {
    let mut src = BufReader::with_capacity(
        64 * 1024,
        Capped {
            inner: input,
            left: limits.max_bytes,
            exceeded: false,
        },
    );
    let looks_xml = match src.fill_buf() {
        Ok(head) => {
            let head = head.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(head);
            match head.iter().find(|b| !b.is_ascii_whitespace()) {
                Some(b) => *b == b'<',
                None => true,
            }
        }
        Err(e) => return SitemapParse::failed(source_url, io_error_kind(&e, false, limits)),
    };
    let mut out = Collector::new(source_url, limits);
    if looks_xml {
        parse_xml(&mut out, src);
    } else {
        parse_text(&mut out, src);
    }
    out.finish()
}

/// Accumulates entries and counters, enforcing the URL cap.
struct Collector<'a> {
    url: &'a str,
    limits: &'a SitemapLimits,
    parse: SitemapParse,
}

impl<'a> Collector<'a> {
    fn new(url: &'a str, limits: &'a SitemapLimits) -> Self {
        Self {
            url,
            limits,
            parse: SitemapParse {
                kind: SitemapKind::Unknown,
                entries: Vec::new(),
                dropped: 0,
                skipped: 0,
                bad_lastmod: 0,
                error: None,
            },
        }
    }

    fn full(&self) -> bool {
        self.parse.entries.len() >= self.limits.max_urls
    }

    /// Add an entry from its raw fields; invalid locs are counted, not kept.
    fn push(&mut self, loc: &str, lastmod: Option<&str>, alternates: Vec<Alternate>) {
        if self.full() {
            self.parse.dropped += 1;
            return;
        }
        let Some(loc) = http_url(loc) else {
            self.parse.skipped += 1;
            return;
        };
        let lastmod = lastmod.map(str::trim).filter(|s| !s.is_empty());
        let parsed = lastmod.and_then(parse_lastmod);
        if lastmod.is_some() && parsed.is_none() {
            self.parse.bad_lastmod += 1;
        }
        self.parse.entries.push(SitemapEntry {
            loc,
            lastmod: parsed,
            alternates,
        });
    }

    fn fail(&mut self, kind: SitemapErrorKind) {
        self.parse.error = Some(SitemapError {
            url: self.url.to_owned(),
            kind,
        });
    }

    fn finish(self) -> SitemapParse {
        self.parse
    }
}

/// An absolute http(s) URL with a host, normalised; anything else is `None`.
fn http_url(s: &str) -> Option<String> {
    let s = s.trim();
    if s.is_empty() || s.len() > MAX_FIELD_BYTES {
        return None;
    }
    let url = Url::parse(s).ok()?;
    (matches!(url.scheme(), "http" | "https") && url.host().is_some()).then(|| url.into())
}

/// A reader that yields at most `left` bytes and then fails, remembering that it did, so a
/// decompression bomb stops at the cap instead of filling memory or spinning to its end.
struct Capped<R> {
    inner: R,
    left: u64,
    exceeded: bool,
}

impl<R: Read> Read for Capped<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.left == 0 {
            // At the cap: only a further byte proves the input is larger (a file of exactly
            // the limit is fine).
            let mut probe = [0u8; 1];
            if self.inner.read(&mut probe)? == 0 {
                return Ok(0);
            }
            self.exceeded = true;
            return Err(io::Error::other("sitemap larger than the size limit"));
        }
        let want = buf
            .len()
            .min(usize::try_from(self.left).unwrap_or(usize::MAX));
        let n = self.inner.read(buf.get_mut(..want).unwrap_or_default())?;
        self.left = self.left.saturating_sub(n as u64);
        Ok(n)
    }
}

fn io_error_kind(e: &io::Error, exceeded: bool, limits: &SitemapLimits) -> SitemapErrorKind {
    if exceeded {
        SitemapErrorKind::TooLarge {
            limit: limits.max_bytes,
        }
    } else {
        // Reading from memory cannot fail, so an I/O error is the gzip decoder's.
        SitemapErrorKind::Gzip {
            message: e.to_string(),
        }
    }
}

/// Which field of the current entry text goes to.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Field {
    None,
    Loc,
    Lastmod,
}

/// The entry being read.
#[derive(Default)]
struct Partial {
    loc: String,
    lastmod: Option<String>,
    alternates: Vec<Alternate>,
    /// The loc used an unknown entity or was too long: the entry is skipped.
    loc_invalid: bool,
}

fn parse_xml<R: Read>(out: &mut Collector<'_>, src: BufReader<Capped<R>>) {
    let mut reader = Reader::from_reader(src);
    let mut buf = Vec::new();
    // Element depth: 1 is the root, 2 an entry (<url>/<sitemap>), 3 a field (<loc>).
    let mut depth = 0usize;
    let mut entry: Option<Partial> = None;
    let mut field = Field::None;
    let mut open: Vec<String> = Vec::new();
    loop {
        let event = reader.read_event_into(&mut buf);
        match event {
            Err(quick_xml::Error::Io(e)) => {
                let exceeded = reader.get_ref().get_ref().exceeded;
                out.fail(io_error_kind(&e, exceeded, out.limits));
                break;
            }
            Err(e) => {
                out.fail(SitemapErrorKind::Xml {
                    position: reader.error_position(),
                    message: e.to_string(),
                });
                break;
            }
            Ok(Event::Start(e)) => {
                depth += 1;
                if depth <= 3 {
                    // Names of the open elements near the root, for the end-of-file message.
                    open.push(String::from_utf8_lossy(e.name().as_ref()).into_owned());
                }
                if depth == 1 && !root(out, &e) {
                    break;
                }
                start(out, &e, depth, &mut entry, &mut field);
            }
            Ok(Event::Empty(e)) => {
                if depth == 0 {
                    // `<urlset/>`: a valid, empty sitemap.
                    root(out, &e);
                    break;
                }
                start(out, &e, depth + 1, &mut entry, &mut field);
                field = Field::None;
                // `<url/>` opens and closes at once: an entry without a loc. Closing it here
                // also keeps a later sibling's fields from landing in it.
                if depth + 1 == 2 && entry.take().is_some() {
                    out.parse.skipped += 1;
                }
            }
            Ok(Event::End(_)) => {
                if depth == 2
                    && let Some(p) = entry.take()
                {
                    if p.loc_invalid {
                        out.parse.skipped += 1;
                    } else {
                        out.push(&p.loc, p.lastmod.as_deref(), p.alternates);
                    }
                }
                if depth <= 3 {
                    open.pop();
                    field = Field::None;
                }
                depth = depth.saturating_sub(1);
            }
            Ok(Event::Text(t)) => {
                if let Some(p) = entry.as_mut()
                    && depth == 3
                {
                    match t.decode() {
                        Ok(s) => append(p, field, &s),
                        Err(_) => invalidate(p, field),
                    }
                }
            }
            Ok(Event::CData(t)) => {
                if let Some(p) = entry.as_mut()
                    && depth == 3
                {
                    match t.decode() {
                        Ok(s) => append(p, field, &s),
                        Err(_) => invalidate(p, field),
                    }
                }
            }
            Ok(Event::GeneralRef(r)) => {
                if let Some(p) = entry.as_mut()
                    && depth == 3
                    && field != Field::None
                {
                    // Only character references and the five predefined entities are ever
                    // resolved: DTD-declared entities are not read, so nothing can expand.
                    let resolved = match r.resolve_char_ref() {
                        Ok(Some(c)) => Some(c.to_string()),
                        Ok(None) => r
                            .decode()
                            .ok()
                            .and_then(|name| quick_xml::escape::resolve_xml_entity(&name))
                            .map(str::to_owned),
                        Err(_) => None,
                    };
                    match resolved {
                        Some(s) => append(p, field, &s),
                        None => invalidate(p, field),
                    }
                }
            }
            // A DTD is skipped unread: entity declarations in it are never expanded.
            Ok(Event::DocType(_)) => {}
            Ok(Event::Eof) => {
                if depth > 0 {
                    let inside = open.last().map(String::as_str).unwrap_or("?");
                    out.fail(SitemapErrorKind::Xml {
                        position: reader.buffer_position(),
                        message: format!("unexpected end of file inside <{inside}>"),
                    });
                } else if out.parse.kind == SitemapKind::Unknown {
                    out.fail(SitemapErrorKind::NotSitemap { root: None });
                }
                break;
            }
            Ok(_) => {}
        }
        buf.clear();
    }
}

/// Classify the root element; false (with the error set) if it is not a sitemap.
fn root(out: &mut Collector<'_>, e: &BytesStart<'_>) -> bool {
    out.parse.kind = match e.local_name().as_ref() {
        b"urlset" => SitemapKind::UrlSet,
        b"sitemapindex" => SitemapKind::Index,
        other => {
            let root = String::from_utf8_lossy(other).into_owned();
            out.fail(SitemapErrorKind::NotSitemap { root: Some(root) });
            return false;
        }
    };
    true
}

/// Handle an element opening at `depth` (an empty element is treated as opening one deeper
/// than the current depth and closing at once).
fn start(
    out: &mut Collector<'_>,
    e: &BytesStart<'_>,
    depth: usize,
    entry: &mut Option<Partial>,
    field: &mut Field,
) {
    let name = e.local_name();
    let name = name.as_ref();
    match depth {
        2 => {
            let wanted = match out.parse.kind {
                SitemapKind::UrlSet => b"url".as_slice(),
                _ => b"sitemap".as_slice(),
            };
            if name == wanted {
                *entry = Some(Partial::default());
            }
        }
        3 => {
            let Some(p) = entry.as_mut() else { return };
            *field = match name {
                b"loc" => Field::Loc,
                b"lastmod" => {
                    // A second <lastmod> replaces the first rather than concatenating.
                    p.lastmod = Some(String::new());
                    Field::Lastmod
                }
                b"link" if out.limits.alternates => {
                    if let Some(a) = alternate(e) {
                        p.alternates.push(a);
                    }
                    Field::None
                }
                _ => Field::None,
            };
        }
        _ => {}
    }
}

/// Read `<xhtml:link rel="alternate" hreflang=".." href=".."/>`.
fn alternate(e: &BytesStart<'_>) -> Option<Alternate> {
    let (mut rel, mut hreflang, mut href) = (None, None, None);
    for attr in e.attributes().flatten() {
        // Unknown entities in attribute values are an error here, never an expansion.
        let Ok(value) = attr.decode_and_unescape_value(e.decoder()) else {
            return None;
        };
        match attr.key.local_name().as_ref() {
            b"rel" => rel = Some(value.into_owned()),
            b"hreflang" => hreflang = Some(value.trim().to_owned()),
            b"href" => href = Some(value.into_owned()),
            _ => {}
        }
    }
    let rel_ok = rel?
        .split_ascii_whitespace()
        .any(|r| r.eq_ignore_ascii_case("alternate"));
    let hreflang = hreflang.filter(|h| !h.is_empty() && h.len() <= 64)?;
    let href = http_url(&href?)?;
    rel_ok.then_some(Alternate { hreflang, href })
}

fn append(p: &mut Partial, field: Field, s: &str) {
    let target = match field {
        Field::Loc => &mut p.loc,
        Field::Lastmod => match p.lastmod.as_mut() {
            Some(l) => l,
            None => return,
        },
        Field::None => return,
    };
    if target.len() + s.len() > MAX_FIELD_BYTES {
        invalidate(p, field);
        return;
    }
    target.push_str(s);
}

fn invalidate(p: &mut Partial, field: Field) {
    match field {
        Field::Loc => {
            p.loc_invalid = true;
            p.loc.clear();
        }
        // An unreadable lastmod keeps the entry; it just has no date.
        Field::Lastmod => p.lastmod = Some("invalid".to_owned()),
        Field::None => {}
    }
}

/// A text sitemap: one URL per line, UTF-8.
fn parse_text<R: Read>(out: &mut Collector<'_>, mut src: BufReader<Capped<R>>) {
    out.parse.kind = SitemapKind::Text;
    let mut line = Vec::new();
    loop {
        line.clear();
        // Lines are bounded by the byte cap on the whole input.
        match src.read_until(b'\n', &mut line) {
            Ok(0) => break,
            Ok(_) => {
                let text = String::from_utf8_lossy(&line);
                let text = text.trim().trim_start_matches('\u{feff}');
                if !text.is_empty() {
                    out.push(text, None, Vec::new());
                }
            }
            Err(e) => {
                let exceeded = src.get_ref().exceeded;
                out.fail(io_error_kind(&e, exceeded, out.limits));
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn parse(xml: &str) -> SitemapParse {
        parse_sitemap("http://h/s.xml", xml.as_bytes(), &SitemapLimits::default())
    }

    fn gzip(data: &[u8]) -> Vec<u8> {
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        enc.write_all(data).unwrap();
        enc.finish().unwrap()
    }

    #[test]
    fn urlset_with_namespaces_entities_and_lastmod() {
        let p = parse(
            r#"<?xml version="1.0"?>
            <sm:urlset xmlns:sm="http://www.sitemaps.org/schemas/sitemap/0.9">
              <sm:url><sm:loc> http://h/a?x=1&amp;y=&#50;&#x33; </sm:loc>
                <sm:lastmod>2024-05-17T13:20:05Z</sm:lastmod></sm:url>
              <sm:url><sm:loc><![CDATA[http://h/b?q=<1>]]></sm:loc><sm:lastmod>someday</sm:lastmod></sm:url>
              <sm:url><sm:lastmod>2024</sm:lastmod></sm:url>
              <sm:url><sm:loc>ftp://h/c</sm:loc></sm:url>
              <sm:url><sm:loc>c/relative</sm:loc></sm:url>
            </sm:urlset>"#,
        );
        assert_eq!(p.kind, SitemapKind::UrlSet);
        assert_eq!(p.error, None);
        assert_eq!(p.entries.len(), 2);
        assert_eq!(p.entries[0].loc, "http://h/a?x=1&y=23");
        assert_eq!(p.entries[0].lastmod, Some(1_715_952_005));
        assert_eq!(p.entries[1].loc, "http://h/b?q=%3C1%3E");
        assert_eq!(p.entries[1].lastmod, None);
        assert_eq!(p.bad_lastmod, 1);
        assert_eq!(p.skipped, 3);
    }

    #[test]
    fn index_and_ignored_extensions() {
        let p = parse(
            r#"<sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">
              <sitemap><loc>http://h/1.xml.gz</loc><lastmod>2024-01</lastmod></sitemap>
              <sitemap><loc>http://h/2.xml</loc></sitemap>
              <url><loc>http://h/not-in-an-index</loc></url>
            </sitemapindex>"#,
        );
        assert_eq!(p.kind, SitemapKind::Index);
        let locs: Vec<_> = p.entries.iter().map(|e| e.loc.as_str()).collect();
        assert_eq!(locs, ["http://h/1.xml.gz", "http://h/2.xml"]);
        assert_eq!(p.entries[0].lastmod, Some(1_704_067_200));

        // An image extension's <image:loc> sits deeper and must not replace the page's loc.
        let p = parse(
            r#"<urlset><url><loc>http://h/page</loc>
               <image:image><image:loc>http://h/img.png</image:loc></image:image></url></urlset>"#,
        );
        assert_eq!(p.entries.len(), 1);
        assert_eq!(p.entries[0].loc, "http://h/page");
    }

    #[test]
    fn alternates_only_when_asked() {
        let xml = r#"<urlset xmlns:xhtml="http://www.w3.org/1999/xhtml"><url>
            <loc>http://h/en</loc>
            <xhtml:link rel="alternate" hreflang="de" href="http://h/de?a=1&amp;b=2"/>
            <xhtml:link rel="alternate" hreflang="fr" href="/fr"/>
            <xhtml:link rel="stylesheet" hreflang="it" href="http://h/it"/>
            <xhtml:link rel="alternate" hreflang="x-default" href="http://h/"></xhtml:link>
            </url></urlset>"#;
        assert!(parse(xml).entries[0].alternates.is_empty());
        let limits = SitemapLimits {
            alternates: true,
            ..SitemapLimits::default()
        };
        let p = parse_sitemap("http://h/s.xml", xml.as_bytes(), &limits);
        let alts: Vec<_> = p.entries[0]
            .alternates
            .iter()
            .map(|a| (a.hreflang.as_str(), a.href.as_str()))
            .collect();
        assert_eq!(
            alts,
            [("de", "http://h/de?a=1&b=2"), ("x-default", "http://h/")]
        );
        assert_eq!(p.entries[0].loc, "http://h/en");
    }

    #[test]
    fn malformed_xml_keeps_earlier_entries_and_names_position() {
        let xml =
            "<urlset><url><loc>http://h/1</loc></url>\n<url><loc>http://h/2</lock></url></urlset>";
        let p = parse(xml);
        assert_eq!(p.entries.len(), 1);
        let err = p.error.unwrap();
        let pos = err.position().unwrap();
        assert_eq!(pos, xml.find("</lock>").unwrap() as u64);
        let msg = err.to_string();
        assert!(
            msg.contains("http://h/s.xml") && msg.contains(&format!("byte {pos}")),
            "{msg}"
        );

        let cut = "<urlset><url><loc>http://h/1</loc></url><url><loc>http://h/2";
        let p = parse(cut);
        assert_eq!(p.entries.len(), 1);
        assert!(p.error.unwrap().to_string().contains("end of file"));
    }

    #[test]
    fn not_a_sitemap_and_empty() {
        let p = parse("<rss><channel/></rss>");
        assert_eq!(
            p.error.map(|e| e.kind),
            Some(SitemapErrorKind::NotSitemap {
                root: Some("rss".into())
            })
        );
        let p = parse("  ");
        assert_eq!(p.kind, SitemapKind::Unknown);
        assert!(p.error.is_some());
        let p = parse("<urlset/>");
        assert_eq!((p.kind, p.error), (SitemapKind::UrlSet, None));
        let p = parse("<urlset><url/><other><loc>http://h/x</loc></other></urlset>");
        assert_eq!((p.entries.len(), p.skipped), (0, 1));
    }

    #[test]
    fn entities_are_never_expanded() {
        let mut lol = String::from(
            r#"<?xml version="1.0"?><!DOCTYPE urlset [<!ENTITY lol "lol">
            <!ENTITY xxe SYSTEM "file:///etc/passwd">"#,
        );
        for i in 1..=9 {
            let prev = if i == 1 {
                "lol".to_owned()
            } else {
                format!("lol{}", i - 1)
            };
            lol.push_str(&format!(
                "<!ENTITY lol{i} \"{}\">",
                format!("&{prev};").repeat(10)
            ));
        }
        lol.push_str(
            "]><urlset><url><loc>http://h/&lol9;</loc></url><url><loc>http://h/&xxe;</loc></url>\
             <url><loc>http://h/ok</loc></url></urlset>",
        );
        let p = parse(&lol);
        assert_eq!(p.error, None);
        assert_eq!(p.skipped, 2);
        let locs: Vec<_> = p.entries.iter().map(|e| e.loc.as_str()).collect();
        assert_eq!(locs, ["http://h/ok"]);
    }

    #[test]
    fn url_cap_drops_and_counts() {
        let mut xml = String::from("<urlset>");
        for i in 0..25 {
            xml.push_str(&format!("<url><loc>http://h/{i}</loc></url>"));
        }
        xml.push_str("</urlset>");
        let limits = SitemapLimits {
            max_urls: 10,
            ..SitemapLimits::default()
        };
        let p = parse_sitemap("http://h/s.xml", xml.as_bytes(), &limits);
        assert_eq!((p.entries.len(), p.dropped), (10, 15));
        assert_eq!(p.entries[9].loc, "http://h/9");
    }

    #[test]
    fn gzip_detected_by_magic_and_capped() {
        let xml = b"<urlset><url><loc>http://h/z</loc></url></urlset>";
        let p = parse_sitemap("http://h/s", &gzip(xml), &SitemapLimits::default());
        assert_eq!(p.entries[0].loc, "http://h/z");

        let small = SitemapLimits {
            max_bytes: 20,
            ..SitemapLimits::default()
        };
        for body in [gzip(xml), xml.to_vec()] {
            let p = parse_sitemap("http://h/s", &body, &small);
            assert_eq!(
                p.error.map(|e| e.kind),
                Some(SitemapErrorKind::TooLarge { limit: 20 })
            );
        }
        // Exactly at the cap is not "too large".
        let exact = SitemapLimits {
            max_bytes: xml.len() as u64,
            ..SitemapLimits::default()
        };
        assert_eq!(parse_sitemap("http://h/s", &gzip(xml), &exact).error, None);

        let mut corrupt = gzip(xml);
        corrupt.truncate(corrupt.len() / 2);
        let p = parse_sitemap("http://h/s", &corrupt, &SitemapLimits::default());
        assert!(
            matches!(p.error.map(|e| e.kind), Some(SitemapErrorKind::Gzip { .. })),
            "truncated gzip is a gzip error"
        );
    }

    #[test]
    fn text_sitemaps() {
        let body = "\u{feff}http://h/1\r\n\nnot a url\nhttps://h/2\n";
        let p = parse_sitemap("http://h/s.txt", body.as_bytes(), &SitemapLimits::default());
        assert_eq!(p.kind, SitemapKind::Text);
        let locs: Vec<_> = p.entries.iter().map(|e| e.loc.as_str()).collect();
        assert_eq!(locs, ["http://h/1", "https://h/2"]);
        assert_eq!(p.skipped, 1);
    }

    #[test]
    fn overlong_loc_is_skipped() {
        let xml = format!(
            "<urlset><url><loc>http://h/{}</loc></url></urlset>",
            "a".repeat(MAX_FIELD_BYTES)
        );
        let p = parse(&xml);
        assert_eq!((p.entries.len(), p.skipped), (0, 1));
    }
}
