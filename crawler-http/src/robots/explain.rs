//! Our own reading of a robots.txt, used only to explain a verdict: which group applies and
//! which rule matched. Text in, no I/O.

use crawler_core::Url;
use crawler_core::matching::{Wildcard, wildcard_match};

/// Our own reading of the file, used only to explain a verdict (texting_robots decides).
pub(super) struct Scan {
    pub(super) group: Option<String>,
    /// (is Allow, the rule as written) of the longest matching rule.
    pub(super) rule: Option<(bool, String)>,
}

/// A group as written: its agents (lower case) and its rules (is Allow, pattern, the line).
type Group = (Vec<String>, Vec<(bool, String, String)>);

/// Find the group for `token` (else `*`) and its longest rule matching `url`'s path and query,
/// Allow winning ties (RFC 9309 §2.2.2).
pub(super) fn scan_rules(body: &[u8], token: &str, url: &Url) -> Scan {
    let text = String::from_utf8_lossy(body);
    let mut groups: Vec<Group> = Vec::new();
    let mut in_agents = false;
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or("").trim();
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let (key, value) = (key.trim().to_ascii_lowercase(), value.trim());
        match key.as_str() {
            "user-agent" => {
                if !in_agents {
                    groups.push((Vec::new(), Vec::new()));
                }
                in_agents = true;
                if let Some(g) = groups.last_mut() {
                    g.0.push(value.to_ascii_lowercase());
                }
            }
            "allow" | "disallow" => {
                in_agents = false;
                if let Some(g) = groups.last_mut() {
                    let allow = key == "allow";
                    let shown = if allow { "Allow" } else { "Disallow" };
                    g.1.push((allow, value.to_owned(), format!("{shown}: {value}")));
                }
            }
            _ => {}
        }
    }
    let token = token.to_ascii_lowercase();
    let named = groups.iter().any(|(agents, _)| agents.contains(&token));
    let wanted = if named { token } else { "*".to_owned() };
    // Path and query, as texting_robots matches them.
    let path = &url[url::Position::BeforePath..url::Position::AfterQuery];
    let mut best: Option<(usize, bool, String)> = None;
    let mut found_group = false;
    for (_, rules) in groups.iter().filter(|(a, _)| a.contains(&wanted)) {
        found_group = true;
        for (allow, pattern, shown) in rules {
            // An empty Disallow allows everything and decides nothing.
            if pattern.is_empty() || !path_matches(pattern, path) {
                continue;
            }
            let better = match &best {
                None => true,
                Some((len, best_allow, _)) => {
                    pattern.len() > *len || (pattern.len() == *len && *allow && !best_allow)
                }
            };
            if better {
                best = Some((pattern.len(), *allow, shown.clone()));
            }
        }
    }
    Scan {
        group: found_group.then_some(wanted),
        rule: best.map(|(_, allow, shown)| (allow, shown)),
    }
}

/// RFC 9309 path matching: a prefix match, `*` any run, a final `$` anchors the end.
fn path_matches(pattern: &str, path: &str) -> bool {
    wildcard_match(pattern, path, Wildcard::RobotsPath)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scan_finds_the_deciding_rule() {
        let txt = b"User-agent: *\nDisallow: /\n\nUser-agent: crawler\nUser-agent: other\n\
            Disallow: /shop/\nAllow: /shop/public\nDisallow: /*.pdf$\n# Disallow: /commented\n";
        let u = |s: &str| Url::parse(&format!("http://h{s}")).unwrap();
        let scan = scan_rules(txt, "crawler", &u("/shop/public/x"));
        assert_eq!(scan.group.as_deref(), Some("crawler"));
        assert_eq!(scan.rule, Some((true, "Allow: /shop/public".into())));
        let scan = scan_rules(txt, "crawler", &u("/shop/cart"));
        assert_eq!(scan.rule, Some((false, "Disallow: /shop/".into())));
        let scan = scan_rules(txt, "crawler", &u("/docs/a.pdf"));
        assert_eq!(scan.rule, Some((false, "Disallow: /*.pdf$".into())));
        assert_eq!(scan_rules(txt, "crawler", &u("/docs/a.pdf?x")).rule, None);
        assert_eq!(scan_rules(txt, "crawler", &u("/commented")).rule, None);
        let scan = scan_rules(txt, "nobody", &u("/x"));
        assert_eq!(scan.group.as_deref(), Some("*"));
        assert_eq!(scan.rule, Some((false, "Disallow: /".into())));
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
    }
}
