//! Matching rules every crate shares, written once: "is this host the domain or one of its
//! subdomains" (allowed domains, link extraction, credentials scoped to a domain) and
//! wildcard patterns (host rules in the settings, robots.txt paths).

/// Whether `host` is `domain` or one of its subdomains: equal, or ending in `.domain`, ASCII
/// case ignored. `notexample.com` is not in `example.com`. IPv6 brackets on `host` are
/// ignored, so a URL's `host_str()` can be passed as it is.
pub fn host_in_domain(host: &str, domain: &str) -> bool {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let (h, d) = (host.as_bytes(), domain.as_bytes());
    if d.is_empty() || h.len() < d.len() {
        return false;
    }
    let cut = h.len() - d.len();
    h[cut..].eq_ignore_ascii_case(d) && (cut == 0 || h[cut - 1] == b'.')
}

/// How a [`wildcard_match`] pattern reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wildcard {
    /// A glob over the whole text: `*` matches any run (possibly empty), `?` one byte.
    Glob,
    /// A robots.txt path rule (RFC 9309): a prefix match where `*` matches any run and a
    /// final `$` anchors the end.
    RobotsPath,
}

/// Whether `pattern` matches `text` under the `kind` rules. Greedy with one backtrack
/// point, so a hostile pattern costs O(pattern x text), never exponential time.
pub fn wildcard_match(pattern: &str, text: &str, kind: Wildcard) -> bool {
    let (pattern, whole, question) = match kind {
        Wildcard::Glob => (pattern, true, true),
        Wildcard::RobotsPath => match pattern.strip_suffix('$') {
            Some(p) => (p, true, false),
            None => (pattern, false, false),
        },
    };
    let (p, s) = (pattern.as_bytes(), text.as_bytes());
    let (mut pi, mut si) = (0usize, 0usize);
    // The last `*` seen and the text position it is stretched to.
    let mut star: Option<(usize, usize)> = None;
    loop {
        if pi == p.len() {
            if !whole || si == s.len() {
                return true;
            }
        } else if p[pi] == b'*' {
            star = Some((pi, si));
            pi += 1;
            continue;
        } else if si < s.len() && (p[pi] == s[si] || (question && p[pi] == b'?')) {
            pi += 1;
            si += 1;
            continue;
        }
        match star {
            Some((sp, ss)) if ss < s.len() => {
                star = Some((sp, ss + 1));
                pi = sp + 1;
                si = ss + 1;
            }
            _ => return false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_is_in_its_domain_and_its_subdomains_only() {
        assert!(host_in_domain("example.com", "example.com"));
        assert!(host_in_domain("a.b.Example.COM", "example.com"));
        assert!(host_in_domain("[::1]", "::1"));
        assert!(!host_in_domain("notexample.com", "example.com"));
        assert!(!host_in_domain("example.com", "a.example.com"));
        assert!(!host_in_domain("example.com", ""));
        assert!(!host_in_domain("com", "example.com"));
    }

    #[test]
    fn globs_match_the_whole_text() {
        let g = |p, t| wildcard_match(p, t, Wildcard::Glob);
        assert!(g("*.example.com", "a.example.com"));
        assert!(!g("*.example.com", "example.com"));
        assert!(g("host?", "host1"));
        assert!(!g("host?", "host"));
        assert!(g("a*b*c", "aXbYc"));
        assert!(!g("a*b*c", "aXbYcd"));
        assert!(g("**", ""));
        assert!(!g("", "x"));
    }

    #[test]
    fn robots_paths_match_a_prefix_unless_anchored() {
        let r = |p, t| wildcard_match(p, t, Wildcard::RobotsPath);
        assert!(r("/private", "/private/page"));
        assert!(r("/*.php", "/a/b.php?x=1"));
        assert!(!r("/*.php$", "/a/b.php?x=1"));
        assert!(r("/*.php$", "/a/b.php"));
        assert!(r("/a?b", "/a?b=1"), "? is literal in robots.txt");
        assert!(!r("/a?b", "/axb"));
        assert!(r("", "/anything"));
    }

    #[test]
    fn hostile_patterns_stay_fast() {
        let text = "a".repeat(5_000);
        let pattern = format!("{}b", "*a".repeat(200));
        // An exponential matcher would not return here at all.
        assert!(!wildcard_match(&pattern, &text, Wildcard::Glob));
        assert!(!wildcard_match(&pattern, &text, Wildcard::RobotsPath));
    }
}
