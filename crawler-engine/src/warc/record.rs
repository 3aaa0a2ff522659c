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

/// A fresh record ID, `<urn:uuid:...>` (a random, version 4 UUID).
pub(crate) fn record_id() -> String {
    let mut b: [u8; 16] = rand::random();
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let hex = data_encoding::HEXLOWER.encode(&b);
    format!(
        "<urn:uuid:{}-{}-{}-{}-{}>",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

/// `sha1:` and the base32 of the SHA-1 of `parts`, as WARC tools write digests.
pub(crate) fn sha1_digest(parts: &[&[u8]]) -> String {
    let mut h = Sha1::new();
    for p in parts {
        h.update(p);
    }
    format!("sha1:{}", data_encoding::BASE32.encode(&h.finalize()))
}

/// WARC-Date: UTC, to the microsecond (WARC 1.1 allows fractions of a second).
pub(crate) fn warc_date(t: SystemTime) -> String {
    humantime::format_rfc3339_micros(t).to_string()
}

/// One record: its type-specific header lines (without Content-Length), the block's head
/// (HTTP status line and headers, or nothing) and its payload.
pub(crate) struct Record {
    pub(crate) fields: Vec<(&'static str, String)>,
    pub(crate) head: Vec<u8>,
    pub(crate) payload: bytes::Bytes,
    /// Whether the payload's digest is written (not for revisits, whose payload is absent,
    /// nor for warcinfo, whose block is all fields).
    pub(crate) payload_digest: bool,
}

impl Record {
    /// The record's bytes: `WARC/1.1`, the fields, digests and length, the block, and the
    /// two line ends that close a record.
    pub(crate) fn bytes(&self) -> Vec<u8> {
        let len = self.head.len() + self.payload.len();
        let mut out = Vec::with_capacity(len + 1024);
        out.extend_from_slice(b"WARC/1.1\r\n");
        for (k, v) in &self.fields {
            line(&mut out, k, v.as_bytes());
        }
        if self.payload_digest {
            line(
                &mut out,
                "WARC-Payload-Digest",
                sha1_digest(&[&self.payload]).as_bytes(),
            );
        }
        line(
            &mut out,
            "WARC-Block-Digest",
            sha1_digest(&[&self.head, &self.payload]).as_bytes(),
        );
        line(&mut out, "Content-Length", len.to_string().as_bytes());
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(&self.head);
        out.extend_from_slice(&self.payload);
        out.extend_from_slice(b"\r\n\r\n");
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
/// allocated and cleared its tables twice a page.
pub(crate) struct Encoder {
    deflate: Option<flate2::Compress>,
}

impl Encoder {
    /// An encoder that compresses when `gzip`.
    pub(crate) fn new(gzip: bool) -> Self {
        Self {
            deflate: gzip
                .then(|| flate2::Compress::new(flate2::Compression::new(GZIP_LEVEL), false)),
        }
    }

    /// Append `record`, encoded, to `out`.
    pub(crate) fn append(&mut self, record: &Record, out: &mut Vec<u8>) -> std::io::Result<()> {
        let raw = record.bytes();
        let Some(deflate) = self.deflate.as_mut() else {
            out.extend_from_slice(&raw);
            return Ok(());
        };
        out.extend_from_slice(&GZIP_HEADER);
        if raw.len() < STORED_BELOW {
            // One stored deflate block (RFC 1951 §3.2.4): final, type 00, then LEN, NLEN.
            let len = raw.len() as u16;
            out.push(0x01);
            out.extend_from_slice(&len.to_le_bytes());
            out.extend_from_slice(&(!len).to_le_bytes());
            out.extend_from_slice(&raw);
        } else {
            Self::deflate(deflate, &raw, out)?;
        }
        out.extend_from_slice(&crc32fast::hash(&raw).to_le_bytes());
        // ISIZE: the length modulo 2^32, as RFC 1952 defines it.
        out.extend_from_slice(&(raw.len() as u32).to_le_bytes());
        Ok(())
    }

    /// `raw` compressed into `out` as one raw deflate stream.
    fn deflate(
        deflate: &mut flate2::Compress,
        raw: &[u8],
        out: &mut Vec<u8>,
    ) -> std::io::Result<()> {
        deflate.reset();
        let start_in = deflate.total_in();
        loop {
            let done = (deflate.total_in() - start_in) as usize;
            // Room for the whole rest: deflate never grows data by more than a little.
            out.reserve(raw.len() - done + raw.len() / 64 + 64);
            let status = deflate
                .compress_vec(&raw[done..], out, flate2::FlushCompress::Finish)
                .map_err(std::io::Error::other)?;
            if status == flate2::Status::StreamEnd {
                return Ok(());
            }
        }
    }
}

fn line(out: &mut Vec<u8>, name: &str, value: &[u8]) {
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// The request's block head: request line (origin form, HTTP/1.1 syntax whatever version
/// carried it), the headers as sent, and a Content-Length for a body when none was given.
pub(crate) fn request_head(ex: &Exchange) -> Vec<u8> {
    let mut out = Vec::with_capacity(512);
    let target = &ex.url[url::Position::BeforePath..url::Position::AfterQuery];
    out.extend_from_slice(ex.method.as_bytes());
    out.push(b' ');
    out.extend_from_slice(if target.is_empty() { "/" } else { target }.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
    headers(&mut out, &ex.request_headers);
    if !ex.request_body.is_empty()
        && !ex
            .request_headers
            .contains_key(http::header::CONTENT_LENGTH)
    {
        line(
            &mut out,
            "content-length",
            ex.request_body.len().to_string().as_bytes(),
        );
    }
    out.extend_from_slice(b"\r\n");
    out
}

/// The response's block head: status line and headers, adjusted to the body as stored:
/// Transfer-Encoding is dropped (the body is stored de-chunked), Content-Length is the
/// stored body's length; the server's values are kept as `X-Crawler-Original-*` headers.
/// A response to HEAD, and a 304, keep their headers as received (they have no body).
pub(crate) fn response_head(ex: &Exchange) -> Vec<u8> {
    let mut out = Vec::with_capacity(1024);
    let reason = http::StatusCode::from_u16(ex.status)
        .ok()
        .and_then(|s| s.canonical_reason())
        .unwrap_or("");
    out.extend_from_slice(format!("HTTP/1.1 {} {reason}\r\n", ex.status).as_bytes());
    let bodiless = ex.method.eq_ignore_ascii_case("HEAD") || ex.status == 304;
    if bodiless {
        headers(&mut out, &ex.headers);
    } else {
        let stored = ex.body.len().to_string();
        let mut kept_length = false;
        for (name, value) in &ex.headers {
            if name == http::header::TRANSFER_ENCODING {
                line(&mut out, ORIGINAL_TRANSFER_ENCODING, value.as_bytes());
            } else if name == http::header::CONTENT_LENGTH {
                if value.as_bytes() == stored.as_bytes() && !kept_length {
                    kept_length = true;
                    line(&mut out, name.as_str(), value.as_bytes());
                } else {
                    line(&mut out, ORIGINAL_CONTENT_LENGTH, value.as_bytes());
                }
            } else {
                line(&mut out, name.as_str(), value.as_bytes());
            }
        }
        if !kept_length {
            line(&mut out, "content-length", stored.as_bytes());
        }
    }
    out.extend_from_slice(b"\r\n");
    out
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

/// The request and response (or revisit) records of one exchange, linked by
/// WARC-Concurrent-To.
pub(crate) fn exchange_records(ex: Exchange, warcinfo_id: &str) -> [Record; 2] {
    let date = warc_date(ex.sent_at);
    let response_id = record_id();
    let request_id = record_id();
    let uri = ex.url.as_str().to_owned();
    let revisit = is_revisit(&ex);
    let mut fields = vec![
        (
            "WARC-Type",
            if revisit { "revisit" } else { "response" }.to_owned(),
        ),
        ("WARC-Record-ID", response_id.clone()),
        ("WARC-Warcinfo-ID", warcinfo_id.to_owned()),
        ("WARC-Date", date.clone()),
        ("WARC-Target-URI", uri.clone()),
    ];
    if let Some(ip) = ex.remote_ip {
        fields.push(("WARC-IP-Address", ip.to_string()));
    }
    if revisit {
        fields.push(("WARC-Profile", SERVER_NOT_MODIFIED.to_owned()));
        fields.push(("WARC-Refers-To-Target-URI", uri.clone()));
    }
    if let Some(why) = ex.truncated {
        fields.push(("WARC-Truncated", why.to_owned()));
    }
    fields.push((
        "Content-Type",
        "application/http;msgtype=response".to_owned(),
    ));
    let response = Record {
        fields,
        head: response_head(&ex),
        payload: if revisit {
            bytes::Bytes::new()
        } else {
            ex.body.clone()
        },
        payload_digest: !revisit,
    };
    let mut fields = vec![
        ("WARC-Type", "request".to_owned()),
        ("WARC-Record-ID", request_id),
        ("WARC-Warcinfo-ID", warcinfo_id.to_owned()),
        ("WARC-Date", date),
        ("WARC-Target-URI", uri),
        ("WARC-Concurrent-To", response_id),
    ];
    if let Some(ip) = ex.remote_ip {
        fields.push(("WARC-IP-Address", ip.to_string()));
    }
    fields.push((
        "Content-Type",
        "application/http;msgtype=request".to_owned(),
    ));
    let request = Record {
        fields,
        head: request_head(&ex),
        payload: ex.request_body,
        payload_digest: true,
    };
    [request, response]
}

/// The `warcinfo` record that opens a file: `fields` as `application/warc-fields`.
pub(crate) fn warcinfo(id: &str, filename: &str, fields: &[(String, String)]) -> Record {
    let mut block = Vec::with_capacity(4096);
    for (k, v) in fields {
        // A value is one line: a line break in a setting would start a field of its own.
        let v = v.replace(['\r', '\n'], " ");
        line(&mut block, k, v.as_bytes());
    }
    Record {
        fields: vec![
            ("WARC-Type", "warcinfo".to_owned()),
            ("WARC-Record-ID", id.to_owned()),
            ("WARC-Date", warc_date(SystemTime::now())),
            ("WARC-Filename", filename.to_owned()),
            ("Content-Type", "application/warc-fields".to_owned()),
        ],
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
        let short = warcinfo("<urn:uuid:x>", "f.warc.gz", &[("a".into(), "b".into())]);
        let long = warcinfo(
            "<urn:uuid:y>",
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

    #[test]
    fn digests_are_base32_sha1() {
        // The SHA-1 of the empty string, as warcio writes it.
        assert_eq!(sha1_digest(&[]), "sha1:3I42H3S6NNFQ2MSVX7XZKYAYSCX5QBYJ");
    }

    #[test]
    fn a_dechunked_body_loses_its_transfer_encoding_and_gets_its_length() {
        let ex = exchange(200, &[("transfer-encoding", "chunked")], b"hello");
        let head = String::from_utf8(response_head(&ex)).expect("text");
        assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
        assert!(head.contains("X-Crawler-Original-Transfer-Encoding: chunked\r\n"));
        assert!(!head.contains("\r\ntransfer-encoding"));
        assert!(head.ends_with("content-length: 5\r\n\r\n"), "{head}");
    }

    #[test]
    fn a_length_that_does_not_match_the_stored_body_is_kept_aside() {
        let ex = exchange(200, &[("content-length", "3")], b"hello");
        let head = String::from_utf8(response_head(&ex)).expect("text");
        assert!(head.contains("X-Crawler-Original-Content-Length: 3\r\n"));
        assert!(head.ends_with("content-length: 5\r\n\r\n"), "{head}");
        let ex = exchange(200, &[("content-length", "5")], b"hello");
        let head = String::from_utf8(response_head(&ex)).expect("text");
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
        let [request, response] = exchange_records(ex, "<urn:uuid:x>");
        let text = String::from_utf8(response.bytes()).expect("text");
        assert!(text.contains("WARC-Type: revisit\r\n"));
        assert!(text.contains(SERVER_NOT_MODIFIED));
        assert!(!text.contains("WARC-Payload-Digest"));
        let req = String::from_utf8(request.bytes()).expect("text");
        assert!(req.contains("GET /a?b=1 HTTP/1.1\r\n"), "{req}");
    }
}
