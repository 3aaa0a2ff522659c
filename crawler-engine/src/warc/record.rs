//! WARC 1.1 records: the HTTP blocks of an exchange, the record headers with their digests,
//! and the bytes of one record (a gzip member of its own when the file is compressed).

use std::time::SystemTime;

use crawler_core::Exchange;
use http::HeaderMap;
use sha1::{Digest, Sha1};

/// The profile of a revisit record for a 304 answer to a conditional request.
pub const SERVER_NOT_MODIFIED: &str = "http://netpreserve.org/warc/1.1/revisit/server-not-modified";

/// Headers added to a response block in place of ones that no longer describe the stored
/// body: the body is stored de-chunked (and decoded when the client decoded it), so replay
/// tools must not undo a transfer coding again.
pub const ORIGINAL_TRANSFER_ENCODING: &str = "X-Crawler-Original-Transfer-Encoding";
/// See [`ORIGINAL_TRANSFER_ENCODING`]: the Content-Length the server sent, when the stored
/// body's length differs.
pub const ORIGINAL_CONTENT_LENGTH: &str = "X-Crawler-Original-Content-Length";

/// A record ID as written: `<urn:uuid:` and a UUID's 36 characters and `>`.
#[derive(Clone, Copy)]
pub(crate) struct RecordId([u8; 47]);

impl RecordId {
    /// The ID's text.
    pub(crate) fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

/// A fresh record ID, `<urn:uuid:...>` (a random, version 4 UUID), written without an
/// allocation (three per exchange).
pub(crate) fn record_id() -> RecordId {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut b: [u8; 16] = rand::random();
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let mut id = *b"<urn:uuid:xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx>";
    let mut at = 10;
    for (i, byte) in b.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            at += 1; // the dash already there
        }
        id[at] = HEX[usize::from(byte >> 4)];
        id[at + 1] = HEX[usize::from(byte & 0x0f)];
        at += 2;
    }
    RecordId(id)
}

/// The length of a SHA-1 in base32: 20 bytes, 32 characters, no padding.
const SHA1_BASE32: usize = 32;

/// `sha1:` and the base32 of `digest`, as WARC tools write digests.
fn digest_text(digest: &[u8; 20]) -> [u8; 5 + SHA1_BASE32] {
    let mut out = [0u8; 5 + SHA1_BASE32];
    out[..5].copy_from_slice(b"sha1:");
    data_encoding::BASE32.encode_mut(digest, &mut out[5..]);
    out
}

/// `sha1:` and the base32 of the SHA-1 of `parts`, as WARC tools write digests.
#[cfg(test)]
pub(crate) fn sha1_digest(parts: &[&[u8]]) -> String {
    let mut h = Sha1::new();
    for p in parts {
        h.update(p);
    }
    String::from_utf8_lossy(&digest_text(&h.finalize().into())).into_owned()
}

/// WARC-Date: UTC, to the microsecond (WARC 1.1 allows fractions of a second).
pub(crate) fn warc_date(t: SystemTime) -> String {
    humantime::format_rfc3339_micros(t).to_string()
}

/// The bytes that close every record: the block's end and a blank line.
const RECORD_END: &[u8] = b"\r\n\r\n";

/// How much of a payload is hashed for one digest before the other digest reads it: both
/// SHA-1s read each slice while it is in the first-level cache (a file's body may be many
/// megabytes).
const DIGEST_SLICE: usize = 16 * 1024;

/// One record: its type-specific header lines (`Name: value\r\n` each, without the digests
/// and Content-Length), the block's head (HTTP status line and headers, or nothing) and its
/// payload.
pub(crate) struct Record {
    pub(crate) fields: Vec<u8>,
    pub(crate) head: Vec<u8>,
    pub(crate) payload: bytes::Bytes,
    /// Whether the payload's digest is written (not for revisits, whose payload is absent,
    /// nor for warcinfo, whose block is all fields).
    pub(crate) payload_digest: bool,
}

impl Record {
    /// The record's header, written to `out`: `WARC/1.1`, the fields, digests and length,
    /// and the blank line before the block.
    fn header_into(&self, out: &mut Vec<u8>) {
        let len = self.head.len() + self.payload.len();
        let mut block = Sha1::new();
        block.update(&self.head);
        out.extend_from_slice(b"WARC/1.1\r\n");
        out.extend_from_slice(&self.fields);
        if self.payload_digest {
            // One pass over the payload for both digests.
            let mut payload = Sha1::new();
            for slice in self.payload.chunks(DIGEST_SLICE) {
                payload.update(slice);
                block.update(slice);
            }
            line(
                out,
                "WARC-Payload-Digest",
                &digest_text(&payload.finalize().into()),
            );
        } else {
            block.update(&self.payload);
        }
        line(
            out,
            "WARC-Block-Digest",
            &digest_text(&block.finalize().into()),
        );
        line(out, "Content-Length", decimal(len, &mut [0; 20]));
        out.extend_from_slice(b"\r\n");
    }

    /// The record's bytes: the header, the block, and the two line ends that close it.
    #[cfg(test)]
    pub(crate) fn bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.header_into(&mut out);
        out.extend_from_slice(&self.head);
        out.extend_from_slice(&self.payload);
        out.extend_from_slice(RECORD_END);
        out
    }
}

/// The deflate level of WARC gzip members: 1, the fastest. The default level (6) made the
/// writer cost more CPU than the rest of a crawl together (2.2 times the CPU per page of a
/// crawl without WARC, BENCHMARKS.md "WARC archives") for files a little smaller.
const GZIP_LEVEL: u32 = 1;

/// Records shorter than this (requests, revisits) are stored in their gzip member
/// uncompressed: resetting the deflate state for them cost more CPU than the few hundred
/// bytes they would save. Under 64 KiB, so one stored block holds one.
const STORED_BELOW: usize = 1024;

/// The header of every gzip member written: deflate, no flags, no time, unknown OS (as
/// flate2's encoder writes it).
const GZIP_HEADER: [u8; 10] = [0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 255];

/// Records encoded for the file: as they are, or each as a gzip member of its own (a reader
/// can start at any record, and a file cut mid-record keeps every record before the cut).
/// One deflate state serves every member (reset between them): a fresh one per record
/// allocated and cleared its tables twice a page. A record's parts go to the compressor
/// where they are, never copied together first.
pub(crate) struct Encoder {
    deflate: Option<flate2::Compress>,
    /// The record header being written, reused between records.
    header: Vec<u8>,
}

impl Encoder {
    /// An encoder that compresses when `gzip`.
    pub(crate) fn new(gzip: bool) -> Self {
        Self {
            deflate: gzip
                .then(|| flate2::Compress::new(flate2::Compression::new(GZIP_LEVEL), false)),
            header: Vec::with_capacity(1024),
        }
    }

    /// Append `record`, encoded, to `out`.
    pub(crate) fn append(&mut self, record: &Record, out: &mut Vec<u8>) -> std::io::Result<()> {
        self.header.clear();
        record.header_into(&mut self.header);
        let parts: [&[u8]; 4] = [&self.header, &record.head, &record.payload, RECORD_END];
        let Some(deflate) = self.deflate.as_mut() else {
            for part in parts {
                out.extend_from_slice(part);
            }
            return Ok(());
        };
        let len: usize = parts.iter().map(|p| p.len()).sum();
        let mut crc = crc32fast::Hasher::new();
        for part in parts {
            crc.update(part);
        }
        out.extend_from_slice(&GZIP_HEADER);
        if len < STORED_BELOW {
            // One stored deflate block (RFC 1951 §3.2.4): final, type 00, then LEN, NLEN.
            let stored = len as u16;
            out.push(0x01);
            out.extend_from_slice(&stored.to_le_bytes());
            out.extend_from_slice(&(!stored).to_le_bytes());
            for part in parts {
                out.extend_from_slice(part);
            }
        } else {
            Self::deflate(deflate, &parts, len, out)?;
        }
        out.extend_from_slice(&crc.finalize().to_le_bytes());
        // ISIZE: the length modulo 2^32, as RFC 1952 defines it.
        out.extend_from_slice(&(len as u32).to_le_bytes());
        Ok(())
    }

    /// `parts` (`len` bytes together, the last one not empty) compressed into `out` as one
    /// raw deflate stream.
    fn deflate(
        deflate: &mut flate2::Compress,
        parts: &[&[u8]],
        len: usize,
        out: &mut Vec<u8>,
    ) -> std::io::Result<()> {
        deflate.reset();
        let start = deflate.total_in();
        for (i, part) in parts.iter().enumerate() {
            let last = i + 1 == parts.len();
            if part.is_empty() && !last {
                continue;
            }
            let flush = if last {
                flate2::FlushCompress::Finish
            } else {
                flate2::FlushCompress::None
            };
            let part_start = deflate.total_in();
            loop {
                let done = (deflate.total_in() - part_start) as usize;
                let left = len - (deflate.total_in() - start) as usize;
                // Room for the whole rest: fixed Huffman codes grow a byte by at most an
                // eighth (9 bits), plus the stream's end.
                out.reserve(left + left / 8 + 64);
                let status = deflate
                    .compress_vec(&part[done..], out, flush)
                    .map_err(std::io::Error::other)?;
                let done = (deflate.total_in() - part_start) as usize;
                if last {
                    if status == flate2::Status::StreamEnd {
                        return Ok(());
                    }
                } else if done == part.len() {
                    break;
                }
            }
        }
        Ok(())
    }
}

fn line(out: &mut Vec<u8>, name: &str, value: &[u8]) {
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// `n` in decimal, written at the end of `buf` (a `usize` has at most 20 digits).
fn decimal(mut n: usize, buf: &mut [u8; 20]) -> &[u8] {
    let mut at = buf.len();
    loop {
        at -= 1;
        buf[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return &buf[at..];
        }
    }
}

/// The request's block head: request line (origin form, HTTP/1.1 syntax whatever version
/// carried it), the headers as sent, and a Content-Length for a body when none was given.
pub(crate) fn request_head(ex: &Exchange, out: &mut Vec<u8>) {
    let target = &ex.url[url::Position::BeforePath..url::Position::AfterQuery];
    out.extend_from_slice(ex.method.as_bytes());
    out.push(b' ');
    out.extend_from_slice(if target.is_empty() { "/" } else { target }.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
    headers(out, &ex.request_headers);
    if !ex.request_body.is_empty()
        && !ex
            .request_headers
            .contains_key(http::header::CONTENT_LENGTH)
    {
        line(
            out,
            "content-length",
            decimal(ex.request_body.len(), &mut [0; 20]),
        );
    }
    out.extend_from_slice(b"\r\n");
}

/// The response's block head: status line and headers, adjusted to the body as stored:
/// Transfer-Encoding is dropped (the body is stored de-chunked), Content-Length is the
/// stored body's length; the server's values are kept as `X-Crawler-Original-*` headers.
/// A response to HEAD, and a 304, keep their headers as received (they have no body).
pub(crate) fn response_head(ex: &Exchange, out: &mut Vec<u8>) {
    let reason = http::StatusCode::from_u16(ex.status)
        .ok()
        .and_then(|s| s.canonical_reason())
        .unwrap_or("");
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(decimal(usize::from(ex.status), &mut [0; 20]));
    out.push(b' ');
    out.extend_from_slice(reason.as_bytes());
    out.extend_from_slice(b"\r\n");
    let bodiless = ex.method.eq_ignore_ascii_case("HEAD") || ex.status == 304;
    if bodiless {
        headers(out, &ex.headers);
    } else {
        let mut digits = [0; 20];
        let stored = decimal(ex.body.len(), &mut digits);
        let mut kept_length = false;
        for (name, value) in &ex.headers {
            if name == http::header::TRANSFER_ENCODING {
                line(out, ORIGINAL_TRANSFER_ENCODING, value.as_bytes());
            } else if name == http::header::CONTENT_LENGTH {
                if value.as_bytes() == stored && !kept_length {
                    kept_length = true;
                    line(out, name.as_str(), value.as_bytes());
                } else {
                    line(out, ORIGINAL_CONTENT_LENGTH, value.as_bytes());
                }
            } else {
                line(out, name.as_str(), value.as_bytes());
            }
        }
        if !kept_length {
            line(out, "content-length", stored);
        }
    }
    out.extend_from_slice(b"\r\n");
}

fn headers(out: &mut Vec<u8>, headers: &HeaderMap) {
    for (name, value) in headers {
        line(out, name.as_str(), value.as_bytes());
    }
}

/// Whether `ex` is a 304 to a conditional request: a `revisit` record, not a `response`.
pub(crate) fn is_revisit(ex: &Exchange) -> bool {
    ex.status == 304
        && (ex.request_headers.contains_key(http::header::IF_NONE_MATCH)
            || ex
                .request_headers
                .contains_key(http::header::IF_MODIFIED_SINCE))
}

impl Record {
    /// A record with room for an exchange's fields and head, to be filled by
    /// [`exchange_records`] again and again.
    pub(crate) fn reusable() -> Self {
        Self {
            fields: Vec::with_capacity(1024),
            head: Vec::with_capacity(1024),
            payload: bytes::Bytes::new(),
            payload_digest: true,
        }
    }
}

/// The request and response (or revisit) records of one exchange, linked by
/// WARC-Concurrent-To, written over `records` (request, response): their buffers are reused
/// from one exchange to the next, so the writer allocates nothing for a page.
pub(crate) fn exchange_records(ex: Exchange, warcinfo_id: &RecordId, records: &mut [Record; 2]) {
    use std::io::Write;
    let response_id = record_id();
    let request_id = record_id();
    let revisit = is_revisit(&ex);
    let [request, response] = records;
    let fields = &mut response.fields;
    fields.clear();
    line(
        fields,
        "WARC-Type",
        if revisit { b"revisit" } else { b"response" },
    );
    line(fields, "WARC-Record-ID", response_id.as_bytes());
    // The fields both records share: written once, copied to the request's.
    let common = fields.len();
    line(fields, "WARC-Warcinfo-ID", warcinfo_id.as_bytes());
    fields.extend_from_slice(b"WARC-Date: ");
    // Writing to a Vec cannot fail.
    let _ = write!(fields, "{}", humantime::format_rfc3339_micros(ex.sent_at));
    fields.extend_from_slice(b"\r\n");
    line(fields, "WARC-Target-URI", ex.url.as_str().as_bytes());
    if let Some(ip) = ex.remote_ip {
        fields.extend_from_slice(b"WARC-IP-Address: ");
        let _ = write!(fields, "{ip}");
        fields.extend_from_slice(b"\r\n");
    }
    request.fields.clear();
    line(&mut request.fields, "WARC-Type", b"request");
    line(&mut request.fields, "WARC-Record-ID", request_id.as_bytes());
    request.fields.extend_from_slice(&fields[common..]);
    if revisit {
        line(fields, "WARC-Profile", SERVER_NOT_MODIFIED.as_bytes());
        line(
            fields,
            "WARC-Refers-To-Target-URI",
            ex.url.as_str().as_bytes(),
        );
    }
    if let Some(why) = ex.truncated {
        line(fields, "WARC-Truncated", why.as_bytes());
    }
    line(fields, "Content-Type", b"application/http;msgtype=response");
    response.head.clear();
    response_head(&ex, &mut response.head);
    request.head.clear();
    request_head(&ex, &mut request.head);
    response.payload = if revisit {
        bytes::Bytes::new()
    } else {
        ex.body
    };
    response.payload_digest = !revisit;

    let fields = &mut request.fields;
    line(fields, "WARC-Concurrent-To", response_id.as_bytes());
    line(fields, "Content-Type", b"application/http;msgtype=request");
    request.payload = ex.request_body;
    request.payload_digest = true;
}

/// The `warcinfo` record that opens a file: `fields` as `application/warc-fields`.
pub(crate) fn warcinfo(id: &RecordId, filename: &str, fields: &[(String, String)]) -> Record {
    let mut block = Vec::with_capacity(4096);
    for (k, v) in fields {
        // A value is one line: a line break in a setting would start a field of its own.
        let v = v.replace(['\r', '\n'], " ");
        line(&mut block, k, v.as_bytes());
    }
    let mut header = Vec::with_capacity(256);
    line(&mut header, "WARC-Type", b"warcinfo");
    line(&mut header, "WARC-Record-ID", id.as_bytes());
    line(
        &mut header,
        "WARC-Date",
        warc_date(SystemTime::now()).as_bytes(),
    );
    line(&mut header, "WARC-Filename", filename.as_bytes());
    line(&mut header, "Content-Type", b"application/warc-fields");
    Record {
        fields: header,
        head: block,
        payload: bytes::Bytes::new(),
        payload_digest: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exchange(status: u16, headers: &[(&str, &str)], body: &'static [u8]) -> Exchange {
        let mut map = HeaderMap::new();
        for (k, v) in headers {
            map.append(
                http::HeaderName::from_bytes(k.as_bytes()).expect("name"),
                http::HeaderValue::from_str(v).expect("value"),
            );
        }
        Exchange {
            method: "GET".into(),
            url: url::Url::parse("http://127.0.0.1:8080/a?b=1").expect("url"),
            request_headers: HeaderMap::new(),
            request_body: bytes::Bytes::new(),
            version: http::Version::HTTP_11,
            status,
            headers: map,
            body: bytes::Bytes::from_static(body),
            remote_ip: None,
            sent_at: SystemTime::UNIX_EPOCH,
            truncated: None,
        }
    }

    #[test]
    fn short_and_long_records_are_gzip_members_that_decode() {
        use std::io::Read;
        let short = warcinfo(&record_id(), "f.warc.gz", &[("a".into(), "b".into())]);
        let long = warcinfo(
            &record_id(),
            "f.warc.gz",
            &[("a".into(), "long value ".repeat(500))],
        );
        let mut encoder = Encoder::new(true);
        for record in [short, long] {
            let mut out = Vec::new();
            encoder.append(&record, &mut out).expect("encoded");
            let mut text = Vec::new();
            flate2::read::GzDecoder::new(&out[..])
                .read_to_end(&mut text)
                .expect("one gzip member");
            assert_eq!(text, record.bytes());
        }
    }

    /// `text`'s field `name`.
    fn field<'a>(text: &'a str, name: &str) -> &'a str {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(": "))
            .unwrap_or_else(|| panic!("no {name} in {text}"))
    }

    #[test]
    fn a_large_body_is_one_gzip_member_whose_digests_cover_payload_and_block() {
        use std::io::Read;
        // Varied bytes over several deflate blocks and digest slices.
        let body: Vec<u8> = (0u32..300_000)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8 | b' ')
            .collect();
        let body: &'static [u8] = Box::leak(body.into_boxed_slice());
        let ex = exchange(200, &[("content-type", "text/html")], body);
        let mut head = Vec::new();
        response_head(&ex, &mut head);
        let mut records = [Record::reusable(), Record::reusable()];
        exchange_records(ex, &record_id(), &mut records);
        let [_, response] = records;
        let mut out = Vec::new();
        Encoder::new(true)
            .append(&response, &mut out)
            .expect("encoded");
        let mut member = flate2::bufread::GzDecoder::new(&out[..]);
        let mut raw = Vec::new();
        member.read_to_end(&mut raw).expect("one gzip member");
        assert!(member.into_inner().is_empty(), "nothing after the member");
        assert_eq!(raw, response.bytes());
        let text = String::from_utf8_lossy(&raw);
        assert_eq!(field(&text, "WARC-Payload-Digest"), sha1_digest(&[body]));
        assert_eq!(
            field(&text, "WARC-Block-Digest"),
            sha1_digest(&[&head, body])
        );
        assert_eq!(
            field(&text, "Content-Length"),
            (head.len() + body.len()).to_string()
        );
        assert!(
            raw.ends_with(
                body.iter()
                    .chain(b"\r\n\r\n")
                    .copied()
                    .collect::<Vec<u8>>()
                    .as_slice()
            )
        );
    }

    #[test]
    fn record_ids_are_version_4_uuids() {
        let a = record_id();
        let text = std::str::from_utf8(a.as_bytes()).expect("text");
        let uuid = text
            .strip_prefix("<urn:uuid:")
            .and_then(|t| t.strip_suffix('>'))
            .expect("urn form");
        let groups: Vec<&str> = uuid.split('-').collect();
        assert_eq!(
            groups.iter().map(|g| g.len()).collect::<Vec<_>>(),
            [8, 4, 4, 4, 12]
        );
        assert!(uuid.bytes().all(|b| b == b'-' || b.is_ascii_hexdigit()));
        assert!(groups[2].starts_with('4'), "{uuid}");
        assert!(matches!(groups[3].as_bytes()[0], b'8' | b'9' | b'a' | b'b'));
        assert_ne!(a.as_bytes(), record_id().as_bytes());
    }

    #[test]
    fn digests_are_base32_sha1() {
        // The SHA-1 of the empty string, as warcio writes it.
        assert_eq!(sha1_digest(&[]), "sha1:3I42H3S6NNFQ2MSVX7XZKYAYSCX5QBYJ");
    }

    fn head_of(ex: &Exchange) -> Vec<u8> {
        let mut head = Vec::new();
        response_head(ex, &mut head);
        head
    }

    #[test]
    fn a_dechunked_body_loses_its_transfer_encoding_and_gets_its_length() {
        let ex = exchange(200, &[("transfer-encoding", "chunked")], b"hello");
        let head = String::from_utf8(head_of(&ex)).expect("text");
        assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
        assert!(head.contains("X-Crawler-Original-Transfer-Encoding: chunked\r\n"));
        assert!(!head.contains("\r\ntransfer-encoding"));
        assert!(head.ends_with("content-length: 5\r\n\r\n"), "{head}");
    }

    #[test]
    fn a_length_that_does_not_match_the_stored_body_is_kept_aside() {
        let ex = exchange(200, &[("content-length", "3")], b"hello");
        let head = String::from_utf8(head_of(&ex)).expect("text");
        assert!(head.contains("X-Crawler-Original-Content-Length: 3\r\n"));
        assert!(head.ends_with("content-length: 5\r\n\r\n"), "{head}");
        let ex = exchange(200, &[("content-length", "5")], b"hello");
        let head = String::from_utf8(head_of(&ex)).expect("text");
        assert_eq!(head.matches("content-length").count(), 1, "{head}");
    }

    #[test]
    fn a_304_to_a_conditional_request_is_a_revisit() {
        let mut ex = exchange(304, &[("etag", "\"x\"")], b"");
        assert!(!is_revisit(&ex));
        ex.request_headers.insert(
            http::header::IF_NONE_MATCH,
            http::HeaderValue::from_static("\"x\""),
        );
        let mut records = [Record::reusable(), Record::reusable()];
        exchange_records(ex, &record_id(), &mut records);
        let [request, response] = records;
        let text = String::from_utf8(response.bytes()).expect("text");
        assert!(text.contains("WARC-Type: revisit\r\n"));
        assert!(text.contains(SERVER_NOT_MODIFIED));
        assert!(!text.contains("WARC-Payload-Digest"));
        let req = String::from_utf8(request.bytes()).expect("text");
        assert!(req.contains("GET /a?b=1 HTTP/1.1\r\n"), "{req}");
    }
}
