//! Reading a robots.txt for one agent: the group that applies, its rules, its Crawl-delay and
//! the file's `Sitemap:` lines. Bytes in, a [`RobotsTxt`] out: no I/O, no clock.
//!
//! The reading is the lenient one real files need, and the one texting_robots 0.2 (which
//! decided before this parser replaced it) applies, so verdicts did not change with it, but
//! for two points of RFC 9309 it missed (the last paragraph):
//!
//! - a line ends at `\n` or `\r` (a NUL byte counts as a line break), a `#` starts a comment,
//!   and a leading byte-order mark is skipped;
//! - keywords are case-insensitive and may be followed by `:` or by spaces alone
//!   (`Disallow /a`); common misspellings are read (`User agent`, `Dissallow`, `Site-map`,
//!   `Crawl delay`, ...); other lines are ignored;
//! - a group is a run of `User-agent` lines (lines ignored above do not break the run) and
//!   the lines after it; every group naming our product token applies, else every `*`
//!   group, and a file without any `User-agent` line applies as a whole;
//! - a `User-agent` value names the product token it starts with (RFC 9309: `[a-zA-Z_-]`,
//!   case-insensitive), so `User-agent: mybot/1.0` is the group of `mybot`;
//! - a pattern and a URL's path are compared with their escaped unreserved characters
//!   decoded (RFC 9309 §2.2.2: `Disallow: /admin` covers `/%61dmin`, and the other way);
//! - an empty `Disallow:` reads as `Allow: /`; a `Crawl-delay` that is not a number of
//!   seconds is ignored, and one written before the first group applies when our group has
//!   none.
//!
//! texting_robots compared a `User-agent` value whole and did not decode escapes: there the
//! verdicts differ by design (and the comparison in `tests.rs` leaves those cases out).

use super::matching::normalise;

/// robots.txt as it applies to one agent.
#[derive(Debug)]
pub(super) struct RobotsTxt {
    /// The `User-agent` value whose groups apply (our product token in lower case, or `*`);
    /// `None` when no line names either.
    pub(super) group: Option<String>,
    /// The Allow/Disallow rules of those groups, in file order.
    pub(super) rules: Vec<Rule>,
    /// The Crawl-delay, in seconds, as written (the caller bounds it).
    pub(super) delay: Option<f32>,
    /// Every `Sitemap:` line of the file, whatever group it sits in: as written when parsed,
    /// as absolute URLs once the fetch has resolved them against the robots.txt URL.
    pub(super) sitemaps: Vec<String>,
}

/// One Allow or Disallow rule of the group that applies.
#[derive(Debug)]
pub(super) struct Rule {
    /// Allow (true) or Disallow.
    pub(super) allow: bool,
    /// The path pattern in the form URL paths are compared in
    /// ([`normalise`](super::matching::normalise): `/a b` is `/a%20b`, `/%61` is `/a`), so it
    /// compares with a URL's path byte for byte. Its length ranks the rule.
    pub(super) pattern: String,
    /// The line as written (`Disallow: /private/`), to explain a verdict; `None` for the rule
    /// an empty `Disallow:` implies, which names no path.
    pub(super) shown: Option<String>,
}

/// One line that matters, before grouping.
enum Line<'a> {
    Agent(&'a [u8]),
    Rule { allow: bool, value: &'a [u8] },
    Delay(f32),
    Sitemap(&'a [u8]),
}

const AGENT: &[&str] = &["user-agent", "user agent", "useragent"];
const ALLOW: &[&str] = &["allow"];
const DISALLOW: &[&str] = &[
    "disallow",
    "dissallow",
    "dissalow",
    "disalow",
    "diasllow",
    "disallaw",
];
const SITEMAP: &[&str] = &["sitemap", "site-map", "site map"];
const DELAY: &[&str] = &["crawl-delay", "crawl delay", "crawldelay"];

impl RobotsTxt {
    /// Read `body` for `agent`, a product token (see
    /// [`product_token`](super::product_token)). Never fails: what cannot be read is ignored.
    pub(super) fn parse(agent: &str, body: &[u8]) -> Self {
        // A NUL byte ends a line: some sites' files have them where line breaks belong.
        let text: Vec<u8> = body
            .iter()
            .map(|&b| if b == 0 { b'\n' } else { b })
            .collect();
        let text = text.strip_prefix(b"\xEF").unwrap_or(&text);
        let text = text.strip_prefix(b"\xBB").unwrap_or(text);
        let text = text.strip_prefix(b"\xBF").unwrap_or(text);
        let mut sitemaps = Vec::new();
        let mut lines = Vec::new();
        for raw in text.split(|&b| b == b'\n' || b == b'\r') {
            match line(raw) {
                Some(Line::Sitemap(url)) => {
                    if let Ok(url) = std::str::from_utf8(url) {
                        sitemaps.push(url.to_owned());
                    }
                }
                Some(l) => lines.push(l),
                None => {}
            }
        }

        // Both sides are cut to their product token: `User-agent: mybot/1.0` names the agent
        // `mybot`, and our own `mybot2` is the agent `mybot` (a digit cannot be in a token,
        // so a file cannot name it; uncut, it would match no group at all).
        let agent = String::from_utf8_lossy(agent_token(agent.as_bytes())).to_ascii_lowercase();
        // `name` is lower case already: only the file's side needs folding. An empty token
        // (`User-agent: /x`, or an agent that starts with no letter) names no one.
        let is = |ua: &[u8], name: &str| {
            let token = agent_token(ua);
            !token.is_empty() && token.eq_ignore_ascii_case(name.as_bytes())
        };
        let agents = || {
            lines.iter().filter_map(|l| match l {
                Line::Agent(ua) => Some(*ua),
                _ => None,
            })
        };
        let wanted = if agents().any(|ua| is(ua, &agent)) {
            agent
        } else {
            "*".to_owned()
        };
        let group = agents().any(|ua| is(ua, &wanted)).then(|| wanted.clone());

        // A run of User-agent lines opens a group; the lines up to the next run belong to it.
        // Without any User-agent line, the whole file applies.
        let mut applies = agents().next().is_none();
        let mut in_agents = false;
        let mut rules = Vec::new();
        let mut delay = None;
        for l in &lines {
            match l {
                Line::Agent(ua) => {
                    if !in_agents {
                        applies = false;
                    }
                    in_agents = true;
                    applies |= is(ua, &wanted);
                    continue;
                }
                _ if !applies => {}
                Line::Rule { allow, value } => rules.extend(Rule::new(*allow, value)),
                Line::Delay(d) => {
                    delay = delay.or(Some(*d));
                }
                Line::Sitemap(_) => {}
            }
            in_agents = false;
        }
        if delay.is_none() {
            // A Crawl-delay above every group applies to all (the last one written wins).
            for l in lines.iter().take_while(|l| !matches!(l, Line::Agent(_))) {
                if let Line::Delay(d) = l {
                    delay = Some(*d);
                }
            }
        }
        Self {
            group,
            rules,
            delay,
            sitemaps,
        }
    }
}

impl Rule {
    /// The rule a line states; `None` for one that decides nothing (an empty `Allow:`, whose
    /// empty pattern matches every path with no weight at all, so the default, allowed,
    /// stands) or whose pattern is not UTF-8.
    fn new(allow: bool, value: &[u8]) -> Option<Self> {
        let value = std::str::from_utf8(value).ok()?;
        if value.is_empty() {
            // `Disallow:` disallows nothing: it reads as `Allow: /`, which also wins a tie
            // against `Disallow: /` in the same group.
            return (!allow).then(|| Self {
                allow: true,
                pattern: "/".to_owned(),
                shown: None,
            });
        }
        Some(Self {
            allow,
            pattern: normalise(value).into_owned(),
            shown: Some(format!(
                "{}: {value}",
                if allow { "Allow" } else { "Disallow" }
            )),
        })
    }
}

/// The product token a `User-agent` value names: up to the first byte that cannot be in one
/// (RFC 9309 §2.2.1: `[a-zA-Z_-]`), so `mybot/1.0` and `MyBot (+https://…)` name `mybot`.
/// `*` alone is kept (the group for everyone); `*bot` names no one.
fn agent_token(value: &[u8]) -> &[u8] {
    if value == b"*" {
        return value;
    }
    let end = value
        .iter()
        .position(|&b| !(b.is_ascii_alphabetic() || b == b'_' || b == b'-'))
        .unwrap_or(value.len());
    value.get(..end).unwrap_or_default()
}

/// Read one line (without its line break); `None` for a line that says nothing we use.
fn line(raw: &[u8]) -> Option<Line<'_>> {
    if let Some(v) = statement(raw, AGENT) {
        return Some(Line::Agent(v));
    }
    if let Some(v) = statement(raw, ALLOW) {
        return Some(Line::Rule {
            allow: true,
            value: v,
        });
    }
    if let Some(v) = statement(raw, DISALLOW) {
        return Some(Line::Rule {
            allow: false,
            value: v,
        });
    }
    if let Some(v) = statement(raw, SITEMAP) {
        return Some(Line::Sitemap(v));
    }
    let seconds = std::str::from_utf8(statement(raw, DELAY)?).ok()?;
    // Not a number of seconds (negative, `NaN`, a word): the line is ignored.
    match seconds.parse::<f32>() {
        Ok(d) if d >= 0.0 => Some(Line::Delay(d)),
        _ => None,
    }
}

/// The value of `raw` if it is `keyword: value` for one of `keywords` (ASCII case ignored;
/// the colon may be replaced by spaces), comment cut and whitespace trimmed.
fn statement<'a>(raw: &'a [u8], keywords: &[&str]) -> Option<&'a [u8]> {
    let rest = trim_blanks(raw);
    let rest = keywords.iter().find_map(|k| {
        let head = rest.get(..k.len())?;
        head.eq_ignore_ascii_case(k.as_bytes())
            .then(|| rest.get(k.len()..))
            .flatten()
    })?;
    let after = trim_blanks(rest);
    let value = match after.strip_prefix(b":") {
        Some(v) => v,
        // `Disallow /a`: spaces alone separate, but something must (`Allowance` is no Allow).
        None if after.len() < rest.len() => after,
        None => return None,
    };
    let value = value.split(|&b| b == b'#').next().unwrap_or_default();
    Some(trim(value))
}

/// `s` without leading spaces and tabs.
fn trim_blanks(s: &[u8]) -> &[u8] {
    let start = s.iter().position(|b| !matches!(b, b' ' | b'\t'));
    s.get(start.unwrap_or(s.len())..).unwrap_or_default()
}

/// `s` without leading and trailing whitespace (Unicode's, when `s` is UTF-8; a value that
/// is not is never used as text, so its ends do not matter).
fn trim(s: &[u8]) -> &[u8] {
    match std::str::from_utf8(s) {
        Ok(text) => text.trim().as_bytes(),
        Err(_) => s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(txt: &RobotsTxt) -> Vec<(bool, &str, Option<&str>)> {
        txt.rules
            .iter()
            .map(|r| (r.allow, r.pattern.as_str(), r.shown.as_deref()))
            .collect()
    }

    #[test]
    fn lenient_lines() {
        let txt = RobotsTxt::parse(
            "crawler",
            b"\xEF\xBB\xBFUser agent: CRAWLER\r\n  disallow /a # comment\rDissallow:/b\0\
              Allowance: /no\nAllow:\nDisallow:\nCrawl delay: 2\nSite-map: http://h/s.xml\n",
        );
        assert_eq!(txt.group.as_deref(), Some("crawler"));
        assert_eq!(
            rules(&txt),
            [
                (false, "/a", Some("Disallow: /a")),
                (false, "/b", Some("Disallow: /b")),
                (true, "/", None),
            ]
        );
        assert_eq!(txt.delay, Some(2.0));
        assert_eq!(txt.sitemaps, ["http://h/s.xml"]);
    }

    #[test]
    fn groups_and_delays() {
        let body = b"Crawl-delay: 7\nUser-agent: a\n# between\nUser-agent: b\nDisallow: /ab\n\
            User-agent: c\nCrawl-delay: 1\nUser-agent: b\nDisallow: /b2\nCrawl-delay: x\n\
            User-agent: *\nDisallow: /\n";
        let b = RobotsTxt::parse("b", body);
        assert_eq!(b.group.as_deref(), Some("b"));
        let patterns: Vec<_> = b.rules.iter().map(|r| r.pattern.as_str()).collect();
        assert_eq!(patterns, ["/ab", "/b2"]);
        // Our groups have no Crawl-delay of their own: the one above every group applies.
        assert_eq!(b.delay, Some(7.0));
        // A Crawl-delay line ends a run of User-agent lines: `c`'s group is not `b`'s.
        assert_eq!(RobotsTxt::parse("c", body).delay, Some(1.0));
        let other = RobotsTxt::parse("other", body);
        assert_eq!(other.group.as_deref(), Some("*"));
        assert_eq!(other.rules.len(), 1);
        // No User-agent line at all: the whole file applies, to everyone.
        let bare = RobotsTxt::parse("any", b"Disallow: /x\n");
        assert_eq!((bare.group, bare.rules.len()), (None, 1));
        // User-agent lines that name neither us nor `*`: nothing applies.
        let none = RobotsTxt::parse("any", b"User-agent: a\nDisallow: /x\n");
        assert_eq!((none.group, none.rules.len()), (None, 0));
    }

    #[test]
    fn patterns_are_percent_encoded() {
        let txt = RobotsTxt::parse("a", "Disallow: /ä b\"<>`\x7f/%41".as_bytes());
        assert_eq!(txt.rules[0].pattern, "/%C3%A4%20b%22%3C%3E%60%7F/A");
        assert_eq!(
            txt.rules[0].shown.as_deref(),
            Some("Disallow: /ä b\"<>`\x7f/%41")
        );
    }
}
