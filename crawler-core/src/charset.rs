//! Finding a body's character encoding, and falling back when the declared one is wrong.
//!
//! The order: a byte-order mark, the Content-Type header's `charset`, a `<meta>` declaration
//! near the top of an HTML document, then UTF-8 when the bytes are valid UTF-8, then what
//! `chardetng` (Firefox's detector) guesses from the bytes. Each candidate is used only if it
//! decodes the body without a malformed sequence: a server that labels a UTF-8 page
//! `charset=utf-16` is common enough that trusting the label lost the page's items.

use std::borrow::Cow;

use encoding_rs::Encoding;

/// How far into a document the HTML standard's prescan looks for a `<meta charset>`.
const META_PRESCAN: usize = 1024;

/// A body decoded to text, and how.
pub(crate) struct Decoded<'a> {
    /// The text (malformed sequences as U+FFFD when no encoding fits).
    pub(crate) text: Cow<'a, str>,
    /// The encoding used.
    pub(crate) encoding: &'static Encoding,
    /// Why a declared encoding was passed over, when one was.
    pub(crate) fallback: Option<String>,
    /// Why no encoding fits the body, when none does: then `text` is a lossy decoding.
    pub(crate) unfit: Option<String>,
}

/// Decode `body`, given its Content-Type header value, by the first encoding that fits it.
pub(crate) fn decode<'a>(content_type: Option<&str>, body: &'a [u8]) -> Decoded<'a> {
    let header = content_type.and_then(charset_param);
    let mut passed: Vec<String> = Vec::new();
    if let Some((enc, bom)) = Encoding::for_bom(body)
        && let Some(text) = fits(enc, &body[bom..])
    {
        return Decoded {
            text,
            encoding: enc,
            fallback: None,
            unfit: None,
        };
    }
    if let Some(name) = header {
        match label(name) {
            Some(enc) => match fits(enc, body) {
                Some(text) => {
                    return Decoded {
                        text,
                        encoding: enc,
                        fallback: None,
                        unfit: None,
                    };
                }
                None => passed.push(format!(
                    "the declared charset {} does not decode it",
                    enc.name()
                )),
            },
            None => passed.push(format!("the declared charset '{}' is unknown", name.trim())),
        }
    }
    let meta = meta_charset(&body[..body.len().min(META_PRESCAN)]);
    if let Some(enc) = meta {
        match fits(enc, body) {
            Some(text) => return found(text, enc, &passed),
            None => passed.push(format!("its <meta> charset {} does not either", enc.name())),
        }
    }
    if let Some(text) = fits(encoding_rs::UTF_8, body) {
        return found(text, encoding_rs::UTF_8, &passed);
    }
    let mut detector = chardetng::EncodingDetector::new();
    detector.feed(body, true);
    let guess = detector.guess(None, true);
    if let Some(text) = fits(guess, body) {
        return found(text, guess, &passed);
    }
    passed.push(format!(
        "neither UTF-8 nor the detected {} decodes it",
        guess.name()
    ));
    // Lossy text in the encoding the page claims, for whoever still reads it.
    let enc = header
        .and_then(label)
        .or(meta)
        .unwrap_or(encoding_rs::UTF_8);
    Decoded {
        text: enc.decode_without_bom_handling(body).0,
        encoding: enc,
        fallback: None,
        unfit: Some(format!(
            "no character encoding fits the body: {}",
            passed.join("; ")
        )),
    }
}

fn found<'a>(text: Cow<'a, str>, encoding: &'static Encoding, passed: &[String]) -> Decoded<'a> {
    Decoded {
        text,
        encoding,
        fallback: (!passed.is_empty())
            .then(|| format!("{}; decoded as {}", passed.join(", "), encoding.name())),
        unfit: None,
    }
}

/// The text of `body` in `enc`, if it decodes without a malformed sequence and looks like
/// text in it.
fn fits<'a>(enc: &'static Encoding, body: &'a [u8]) -> Option<Cow<'a, str>> {
    // Markup in UTF-16 is mostly ASCII, so half its bytes are zero; bytes without any zero
    // decode "cleanly" as UTF-16 into CJK-looking noise, and are another encoding's.
    if (enc == encoding_rs::UTF_16LE || enc == encoding_rs::UTF_16BE)
        && body.len() > 1
        && !body[..body.len().min(META_PRESCAN)].contains(&0)
    {
        return None;
    }
    let text = enc.decode_without_bom_handling_and_without_replacement(body)?;
    looks_like_text(&text).then_some(text)
}

/// Whether the start of `text` reads as text rather than binary data: single-byte
/// encodings decode any bytes, so "decodes cleanly" alone would call a binary body windows-1252.
/// Control characters other than whitespace are rare in real pages and common in binary.
fn looks_like_text(text: &str) -> bool {
    // Pages mostly start with ASCII: then chars are bytes and the count is a byte scan, not
    // a char-by-char decode (which was 1% of the crawl benchmark's CPU). Same answer.
    let head = &text.as_bytes()[..text.len().min(META_PRESCAN)];
    if head.is_ascii() {
        let controls = head
            .iter()
            .filter(|&&b| b < 0x20 && !matches!(b, b'\t' | b'\n' | b'\r' | b'\x0c'))
            .count();
        return controls * 16 <= head.len();
    }
    let mut chars = 0;
    let mut controls = 0;
    for c in text.chars().take(META_PRESCAN) {
        chars += 1;
        if c.is_control() && !matches!(c, '\t' | '\n' | '\r' | '\x0c') && (c as u32) < 0x20 {
            controls += 1;
        }
    }
    controls * 16 <= chars
}

/// The encoding a body declares (BOM, header, `<meta>`), else UTF-8, without checking that
/// it decodes the body.
#[cfg(test)]
pub(crate) fn sniff(content_type: Option<&str>, body: &[u8]) -> &'static Encoding {
    if let Some(enc) = content_type.and_then(charset_param).and_then(label) {
        return enc;
    }
    if let Some((enc, _)) = Encoding::for_bom(body) {
        return enc;
    }
    meta_charset(&body[..body.len().min(META_PRESCAN)]).unwrap_or(encoding_rs::UTF_8)
}

fn label(name: &str) -> Option<&'static Encoding> {
    Encoding::for_label(name.trim().trim_matches(['"', '\'']).as_bytes())
}

fn charset_param(content_type: &str) -> Option<&str> {
    content_type.split(';').skip(1).find_map(|p| {
        let (k, v) = p.split_once('=')?;
        k.trim().eq_ignore_ascii_case("charset").then_some(v)
    })
}

/// Finds `charset=NAME` inside the prescan window; covers both `<meta charset="x">` and
/// `<meta http-equiv="Content-Type" content="text/html; charset=x">`.
fn meta_charset(head: &[u8]) -> Option<&'static Encoding> {
    let lower = head.to_ascii_lowercase();
    let mut from = 0;
    while let Some(pos) = find(&lower[from..], b"<meta") {
        let start = from + pos;
        let end = lower[start..]
            .iter()
            .position(|&b| b == b'>')
            .map_or(lower.len(), |e| start + e);
        let tag = &lower[start..end];
        if let Some(c) = find(tag, b"charset=") {
            let rest = &tag[c + 8..];
            let rest = rest
                .strip_prefix(b"\"")
                .or_else(|| rest.strip_prefix(b"'"))
                .unwrap_or(rest);
            let name_len = rest
                .iter()
                .position(|b| matches!(b, b'"' | b'\'' | b' ' | b';' | b'/' | b'>'))
                .unwrap_or(rest.len());
            if let Some(enc) = Encoding::for_label(&rest[..name_len]) {
                // The HTML standard: a <meta> can only be read if the page is
                // ASCII-compatible, so one that says UTF-16 means UTF-8.
                if enc == encoding_rs::UTF_16LE || enc == encoding_rs::UTF_16BE {
                    return Some(encoding_rs::UTF_8);
                }
                return Some(enc);
            }
        }
        from = end;
    }
    None
}

/// Where `needle` first occurs in `hay`. memchr's SIMD search: the engine looks for
/// `<base` in every page's whole body (`Response::base_url`), and a byte-by-byte window
/// compare of it was 1.7% of the crawl benchmark's CPU.
pub(crate) fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    memchr::memmem::find(hay, needle)
}

/// Whether `body` may hold a `<base>` tag, in any letter case (`<BASE href>` is one too):
/// pages without one never pay for a parse to look for it. Each `<` is found by memchr and
/// the four letters after it compared; a regex did the same at the cost of a cache per
/// thread that parses (2 MiB more peak memory in the crawl bench).
pub(crate) fn may_have_base(body: &[u8]) -> bool {
    memchr::memchr_iter(b'<', body).any(|at| {
        body.get(at + 1..at + 5)
            .is_some_and(|name| name.eq_ignore_ascii_case(b"base"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The char-by-char count the ASCII fast path of `looks_like_text` stands in for.
    fn looks_like_text_by_chars(text: &str) -> bool {
        let (mut chars, mut controls) = (0, 0);
        for c in text.chars().take(META_PRESCAN) {
            chars += 1;
            if c.is_control() && !matches!(c, '\t' | '\n' | '\r' | '\x0c') && (c as u32) < 0x20 {
                controls += 1;
            }
        }
        controls * 16 <= chars
    }

    #[test]
    fn the_text_test_answers_the_same_for_ascii_and_not() {
        let control = "\x01".repeat(64);
        for text in [
            String::new(),
            "<p>plain</p>\r\n\t\x0c".to_owned(),
            format!("{control}{}", "x".repeat(960)),
            format!("{control}{}", "x".repeat(1100)),
            format!("{}{control}", "x".repeat(1000)),
            format!("é{control}{}", "x".repeat(900)),
            "\x7f\x7f\x7f".to_owned(),
        ] {
            assert_eq!(
                looks_like_text(&text),
                looks_like_text_by_chars(&text),
                "{text:?}"
            );
        }
    }

    #[test]
    fn header_wins_then_bom_then_meta() {
        let body = b"<html><head><meta charset=\"windows-1252\"></head></html>";
        assert_eq!(
            sniff(Some("text/html; charset=Shift_JIS"), body),
            encoding_rs::SHIFT_JIS
        );
        assert_eq!(sniff(Some("text/html"), body), encoding_rs::WINDOWS_1252);
        assert_eq!(sniff(None, b"\xEF\xBB\xBFhello"), encoding_rs::UTF_8);
        assert_eq!(sniff(None, b"\xFF\xFEh\0"), encoding_rs::UTF_16LE);
        let equiv = b"<meta http-equiv='Content-Type' content='text/html; charset=iso-8859-2'>";
        assert_eq!(sniff(None, equiv), encoding_rs::ISO_8859_2);
        assert_eq!(sniff(None, b"<p>plain</p>"), encoding_rs::UTF_8);
        assert_eq!(
            sniff(Some("text/html; charset=bogus"), b""),
            encoding_rs::UTF_8
        );
    }

    #[test]
    fn a_declared_charset_that_does_not_decode_falls_back() {
        let page = "<html><p>caf\u{e9} \u{2014} na\u{ef}ve</p></html>";
        // UTF-8 sent as UTF-16: no zero byte, so not UTF-16; valid UTF-8.
        let d = decode(Some("text/html; charset=utf-16"), page.as_bytes());
        assert_eq!(d.text, page);
        assert_eq!(d.encoding, encoding_rs::UTF_8);
        let why = d.fallback.unwrap();
        assert!(
            why.contains("declared charset UTF-16LE does not decode"),
            "{why}"
        );
        // ...and as Shift_JIS, whose decoder finds malformed sequences in it.
        let d = decode(Some("text/html; charset=shift_jis"), page.as_bytes());
        assert_eq!((d.text.as_ref(), d.encoding), (page, encoding_rs::UTF_8));
        // An unknown label is passed over too.
        let d = decode(Some("text/html; charset=nonsense"), page.as_bytes());
        assert_eq!(d.text, page);
        assert!(d.fallback.unwrap().contains("'nonsense' is unknown"));
        // A declared charset that fits is used without a word.
        let d = decode(Some("text/html; charset=utf-8"), page.as_bytes());
        assert!(d.fallback.is_none() && d.unfit.is_none());
    }

    #[test]
    fn meta_then_detection() {
        // windows-1252 bytes declared UTF-8 in the header, windows-1252 in the <meta>.
        let body = b"<meta charset=windows-1252><p>caf\xe9 cr\xe8me br\xfbl\xe9e</p>";
        let d = decode(Some("text/html; charset=utf-8"), body);
        assert_eq!(d.encoding, encoding_rs::WINDOWS_1252);
        assert!(d.text.contains("café crème brûlée"), "{}", d.text);
        // Without the <meta>: the detector finds a Latin encoding.
        let body = "<p>Les cr\u{e8}mes br\u{fb}l\u{e9}es de la p\u{e2}tisserie \u{e0} c\u{f4}t\u{e9} \
                    sont r\u{e9}put\u{e9}es; le caf\u{e9} est tr\u{e8}s appr\u{e9}ci\u{e9}.</p>";
        let (latin, _, _) = encoding_rs::WINDOWS_1252.encode(body);
        let d = decode(Some("text/html; charset=utf-8"), &latin);
        assert!(d.unfit.is_none());
        assert_eq!(d.text, body, "decoded as {}", d.encoding.name());
        // A <meta> saying UTF-16 means UTF-8 (the page could not be read otherwise).
        assert_eq!(sniff(None, b"<meta charset=utf-16>"), encoding_rs::UTF_8);
    }

    #[test]
    fn a_body_no_encoding_fits_is_unfit() {
        // Binary data sent as a page: single-byte encodings decode any bytes, so only the
        // control characters in the result tell it is not text.
        let body: Vec<u8> = (0..2000u32).map(|i| (i * 7919 % 251) as u8).collect();
        let d = decode(Some("text/html; charset=utf-16be"), &body);
        let why = d.unfit.expect("binary is no text");
        assert!(why.contains("no character encoding fits"), "{why}");
        assert!(why.contains("UTF-16BE does not decode"), "{why}");
        // A few stray control characters in a real page do not make it binary.
        let page = "<p>tab\there, a stray \u{1b} escape and a \u{8} backspace in prose</p>";
        let d = decode(Some("text/html; charset=utf-8"), page.as_bytes());
        assert!(d.unfit.is_none() && d.fallback.is_none());
    }
}
