//! Finding a body's character encoding: the Content-Type header, then a byte-order mark, then
//! a `<meta>` declaration near the top of an HTML document, then UTF-8.

use encoding_rs::Encoding;

/// How far into a document the HTML standard's prescan looks for a `<meta charset>`.
const META_PRESCAN: usize = 1024;

/// The encoding declared for `body`, given its Content-Type header value.
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
                return Some(enc);
            }
        }
        from = end;
    }
    None
}

pub(crate) fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
