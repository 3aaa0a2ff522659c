//! Deciding one URL against a parsed robots.txt, and naming the rule that decided: the
//! verdict and its explanation come from the same rules and the same match. No I/O.

use std::borrow::Cow;
use std::fmt::Write as _;

use crawler_core::Url;
use crawler_core::matching::{Wildcard, wildcard_match};

use super::parse::{RobotsTxt, Rule};

/// The verdict on one URL and what decided it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Decision<'a> {
    /// Whether the URL may be fetched.
    pub(super) allowed: bool,
    /// The deciding rule as written (`Disallow: /private/`), if a written rule decided.
    pub(super) rule: Option<&'a str>,
}

impl RobotsTxt {
    /// The verdict on `url`: the longest matching pattern decides, Allow winning a tie
    /// (RFC 9309 §2.2.2); no match allows. `/robots.txt` itself is always allowed.
    pub(super) fn decide(&self, url: &Url) -> Decision<'_> {
        // Path, query and fragment, as the URL crate writes them (percent-encoded), in the
        // form the patterns were put in.
        let path = normalise(&url[url::Position::BeforePath..]);
        let path = path.as_ref();
        let mut best: Option<&Rule> = None;
        for rule in self.rules.iter().filter(|r| rule_matches(&r.pattern, path)) {
            // Longer first, then Allow, then a written rule over an implied one; the first
            // written among equals.
            let rank = |r: &Rule| (r.pattern.len(), r.allow, r.shown.is_some());
            if best.is_none_or(|b| rank(rule) > rank(b)) {
                best = Some(rule);
            }
        }
        if path == "/robots.txt" {
            return Decision {
                allowed: true,
                rule: best.filter(|r| r.allow).and_then(|r| r.shown.as_deref()),
            };
        }
        Decision {
            allowed: best.is_none_or(|r| r.allow),
            rule: best.and_then(|r| r.shown.as_deref()),
        }
    }
}

/// The one form both a rule's pattern and a URL's path are compared in, so that two spellings
/// of one path match alike (RFC 9309 §2.2.2):
///
/// - what the URL crate percent-encodes in a path and a file may write raw is encoded:
///   controls, space, `"`, `<`, `>`, `` ` `` and every non-ASCII byte (`/ä` is `/%C3%A4`);
/// - an escaped unreserved character (ALPHA, DIGIT, `-`, `.`, `_`, `~`) is decoded, as the
///   RFC asks: `/%61dmin` is `/admin`;
/// - any other escape stays one, with upper-case hex digits (`%2f` is `%2F`): decoding it
///   could change what the path means (`%2F` is not a `/`, nor `%2A` a wildcard `*`).
///
/// A `%` not followed by two hex digits stays as written. Borrowed when nothing changes (the
/// common path, one per request).
pub(super) fn normalise(text: &str) -> Cow<'_, str> {
    let bytes = text.as_bytes();
    if !bytes.iter().any(|&b| b == b'%' || needs_escape(b)) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        let escaped = (b == b'%')
            .then(|| Some((hex(*bytes.get(i + 1)?)? << 4) | hex(*bytes.get(i + 2)?)?))
            .flatten();
        match escaped {
            Some(c) if c.is_ascii_alphanumeric() || matches!(c, b'-' | b'.' | b'_' | b'~') => {
                out.push(char::from(c));
                i += 3;
            }
            Some(c) => {
                let _ = write!(out, "%{c:02X}");
                i += 3;
            }
            None if needs_escape(b) => {
                let _ = write!(out, "%{b:02X}");
                i += 1;
            }
            None => {
                out.push(char::from(b));
                i += 1;
            }
        }
    }
    Cow::Owned(out)
}

/// Whether `b` is written percent-encoded in a normalised path (see [`normalise`]).
fn needs_escape(b: u8) -> bool {
    !(0x20..0x7F).contains(&b) || matches!(b, b' ' | b'"' | b'<' | b'>' | b'`')
}

/// The value of one hex digit, either case.
fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// Whether a rule's pattern matches `path`: a prefix match where `*` matches any run and a
/// `$` anchors the end (RFC 9309 §2.2.3). A `$` inside the pattern anchors too: nothing can
/// follow it but more `*` and `$`, or the rule matches no path.
fn rule_matches(pattern: &str, path: &str) -> bool {
    match pattern.split_once('$') {
        None => path_matches(pattern, path),
        Some((head, tail)) if tail.bytes().all(|b| b == b'*' || b == b'$') => {
            path_matches(&pattern[..=head.len()], path)
        }
        Some(_) => false,
    }
}

/// RFC 9309 path matching: a prefix match, `*` any run, a final `$` anchors the end.
fn path_matches(pattern: &str, path: &str) -> bool {
    wildcard_match(pattern, path, Wildcard::RobotsPath)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decide<'a>(txt: &'a RobotsTxt, path: &str) -> Decision<'a> {
        txt.decide(&Url::parse(&format!("http://h{path}")).unwrap())
    }

    #[test]
    fn the_deciding_rule_is_named() {
        let txt = b"User-agent: *\nDisallow: /\n\nUser-agent: crawler\nUser-agent: other\n\
            Disallow: /shop/\nAllow: /shop/public\nDisallow: /*.pdf$\n# Disallow: /commented\n";
        let crawler = RobotsTxt::parse("crawler", txt);
        assert_eq!(crawler.group.as_deref(), Some("crawler"));
        let d = decide(&crawler, "/shop/public/x");
        assert_eq!((d.allowed, d.rule), (true, Some("Allow: /shop/public")));
        let d = decide(&crawler, "/shop/cart");
        assert_eq!((d.allowed, d.rule), (false, Some("Disallow: /shop/")));
        let d = decide(&crawler, "/docs/a.pdf");
        assert_eq!((d.allowed, d.rule), (false, Some("Disallow: /*.pdf$")));
        let d = decide(&crawler, "/docs/a.pdf?x");
        assert_eq!((d.allowed, d.rule), (true, None));
        assert_eq!(decide(&crawler, "/commented").rule, None);
        let nobody = RobotsTxt::parse("nobody", txt);
        assert_eq!(nobody.group.as_deref(), Some("*"));
        let d = decide(&nobody, "/x");
        assert_eq!((d.allowed, d.rule), (false, Some("Disallow: /")));
    }

    #[test]
    fn ties_and_implied_rules() {
        // Equal length: Allow wins, and the explanation names it.
        let txt = RobotsTxt::parse("a", b"Disallow: /a\nAllow: /a\n");
        assert_eq!(decide(&txt, "/ab").rule, Some("Allow: /a"));
        // An empty Disallow is `Allow: /`: it beats `Disallow: /` and names no rule...
        let txt = RobotsTxt::parse("a", b"Disallow: /\nDisallow:\n");
        let d = decide(&txt, "/x");
        assert_eq!((d.allowed, d.rule), (true, None));
        // ...but a written `Allow: /` of the same weight is named.
        let txt = RobotsTxt::parse("a", b"Disallow:\nAllow: /\n");
        assert_eq!(decide(&txt, "/x").rule, Some("Allow: /"));
        // robots.txt itself is always allowed; only an Allow is named for it.
        let txt = RobotsTxt::parse("a", b"Disallow: /\n");
        let d = decide(&txt, "/robots.txt");
        assert_eq!((d.allowed, d.rule), (true, None));
        let d = decide(&txt, "/robots.txt?x");
        assert_eq!((d.allowed, d.rule), (false, Some("Disallow: /")));
        // Paths are matched percent-encoded, as written by the URL crate.
        let txt = RobotsTxt::parse("a", "Disallow: /ä b\n".as_bytes());
        assert_eq!(decide(&txt, "/ä b/c").rule, Some("Disallow: /ä b"));
    }

    #[test]
    fn the_explanation_is_the_reading_that_decides() {
        // Lenient lines decide, so they are named, in their usual spelling.
        let txt = RobotsTxt::parse("crawler", b"User agent: crawler\nDissallow /x\n");
        assert_eq!(txt.group.as_deref(), Some("crawler"));
        assert_eq!(decide(&txt, "/x/1").rule, Some("Disallow: /x"));
        // Rules above every User-agent line apply when there is none: no group, but a rule.
        let txt = RobotsTxt::parse("crawler", b"Disallow: /x\n");
        let d = decide(&txt, "/x");
        assert_eq!(
            (txt.group.as_deref(), d.allowed, d.rule),
            (None, false, Some("Disallow: /x"))
        );
        // A Crawl-delay ends a run of User-agent lines: `*`'s Allow is not ours to name.
        let txt = RobotsTxt::parse(
            "crawler",
            b"User-agent: crawler\nCrawl-delay: 1\nUser-agent: *\nAllow: /a\nDisallow: /\n",
        );
        let d = decide(&txt, "/a");
        assert_eq!(
            (txt.group.as_deref(), d.allowed, d.rule),
            (Some("crawler"), true, None)
        );
    }

    #[test]
    fn pattern_matching() {
        assert!(path_matches("/a", "/abc"));
        assert!(!path_matches("/a$", "/abc"));
        assert!(path_matches("/a*c$", "/abbbc"));
        assert!(path_matches("*", ""));
        assert!(path_matches("/*/x", "/a/b/x"));
        assert!(!path_matches("/*/y", "/a/b/x"));
        assert!(path_matches("/$", "/"));
        assert!(!path_matches("/$", "/a"));
        // Many stars against a long miss stays fast (no exponential backtracking).
        let pattern = "/*a".repeat(200) + "$";
        let path = "/".to_owned() + &"a".repeat(5_000) + "b";
        assert!(!path_matches(&pattern, &path));
        // A `$` inside a pattern anchors: only `*` and `$` may follow it.
        assert!(rule_matches("/a$*$", "/a"));
        assert!(!rule_matches("/a$*$", "/ab"));
        assert!(!rule_matches("/a$b", "/a$b"));
        assert!(!rule_matches("/a$b", "/a"));
    }
}
