//! Parsing a request head into byte ranges of the read buffer: parsing only, no I/O.

use std::ops::Range;

/// Byte range of `part` inside `buf` (both from the same parse).
fn span(buf: &[u8], part: &[u8]) -> Range<usize> {
    let start = part.as_ptr() as usize - buf.as_ptr() as usize;
    start..start + part.len()
}

#[derive(Default)]
pub(super) struct Head {
    pub(super) len: usize,
    pub(super) method: Range<usize>,
    pub(super) target: Range<usize>,
    pub(super) user_agent: Option<Range<usize>>,
    pub(super) if_none_match: Option<Range<usize>>,
    pub(super) if_modified_since: Option<Range<usize>>,
    pub(super) lab_client: Option<Range<usize>>,
    pub(super) cookie: Option<Range<usize>>,
    pub(super) content_type: Option<Range<usize>>,
    pub(super) authorization: Option<Range<usize>>,
    pub(super) referer: Option<Range<usize>>,
    pub(super) tag: Option<Range<usize>>,
    pub(super) content_length: u64,
    pub(super) chunked: bool,
    pub(super) keep_alive: bool,
}

// Built and matched once per request head; boxing Head would cost an allocation each time.
#[allow(clippy::large_enum_variant)]
pub(super) enum Parsed {
    Done(Head),
    Partial,
    Bad(u16),
}

pub(super) fn parse_head(buf: &[u8]) -> Parsed {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut req = httparse::Request::new(&mut headers);
    let len = match req.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Parsed::Partial,
        Err(httparse::Error::TooManyHeaders) => return Parsed::Bad(431),
        Err(_) => return Parsed::Bad(400),
    };
    let (Some(method), Some(target), Some(version)) = (req.method, req.path, req.version) else {
        return Parsed::Bad(400);
    };
    let mut head = Head {
        len,
        method: span(buf, method.as_bytes()),
        target: span(buf, target.as_bytes()),
        keep_alive: version == 1,
        ..Head::default()
    };
    for h in req.headers.iter() {
        let value = h.value;
        let name = h.name;
        if name.eq_ignore_ascii_case("user-agent") {
            head.user_agent = Some(span(buf, value));
        } else if name.eq_ignore_ascii_case("if-none-match") {
            head.if_none_match = Some(span(buf, value));
        } else if name.eq_ignore_ascii_case("if-modified-since") {
            head.if_modified_since = Some(span(buf, value));
        } else if name.eq_ignore_ascii_case("x-lab-client") {
            head.lab_client = Some(span(buf, value));
        } else if name.eq_ignore_ascii_case("cookie") {
            head.cookie = Some(span(buf, value));
        } else if name.eq_ignore_ascii_case("content-type") {
            head.content_type = Some(span(buf, value));
        } else if name.eq_ignore_ascii_case("authorization") {
            head.authorization = Some(span(buf, value));
        } else if name.eq_ignore_ascii_case("referer") {
            head.referer = Some(span(buf, value));
        } else if name.eq_ignore_ascii_case("x-crawl-tag") {
            head.tag = Some(span(buf, value));
        } else if name.eq_ignore_ascii_case("content-length") {
            match std::str::from_utf8(value)
                .ok()
                .and_then(|v| v.trim().parse().ok())
            {
                Some(n) => head.content_length = n,
                None => return Parsed::Bad(400),
            }
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            head.chunked = true;
        } else if name.eq_ignore_ascii_case("connection") {
            let v = String::from_utf8_lossy(value).to_ascii_lowercase();
            if v.contains("close") {
                head.keep_alive = false;
            } else if v.contains("keep-alive") {
                head.keep_alive = true;
            }
        }
    }
    Parsed::Done(head)
}

pub(super) fn text<'a>(buf: &'a [u8], r: &Option<Range<usize>>) -> Option<&'a str> {
    r.as_ref()
        .and_then(|r| std::str::from_utf8(&buf[r.clone()]).ok())
        .map(str::trim)
}
