//! The `settings` listing of `[[hosts]]` rules: for each rule, the effective value of every
//! setting a rule can change, for the hosts it matches (the rule merged over the crawl's
//! settings, as [`Settings::for_host`] does), and which of them the rule set.

use crawler_core::HostRule;
use crawler_core::Settings;
use crawler_core::settings_text::display_value;

/// The settings a `[[hosts]]` rule can change, with the pacing mode they are read under.
const PER_HOST_KEYS: &[&str] = &[
    "throttle",
    "max_rate",
    "start_rate",
    "min_rate",
    "burst",
    "concurrency_per_host",
    "download_delay",
    "obey_robots",
    "render",
    "http_version",
];

/// One block per rule, in the order rules are tried; empty without rules.
pub(super) fn host_rules_table(settings: &Settings) -> String {
    let Ok(global) = settings.to_map() else {
        return String::new();
    };
    let mut out = String::new();
    for (i, rule) in settings.hosts.iter().enumerate() {
        out.push_str(&format!("[[hosts]] #{} match = {:?}", i + 1, rule.pattern));
        if let Some(first) = shadowed_by(&settings.hosts[..i], rule) {
            out.push_str(&format!(
                "  (never applies: rule #{} matches these hosts first)",
                first + 1
            ));
        }
        out.push('\n');
        let mut effective = settings.clone();
        rule.apply(&mut effective);
        let Ok(map) = effective.to_map() else {
            continue;
        };
        let width = PER_HOST_KEYS.iter().map(|k| k.len()).max().unwrap_or(0);
        let rows: Vec<(&str, String, bool)> = PER_HOST_KEYS
            .iter()
            .filter_map(|k| {
                let value = map.get(*k)?;
                Some((*k, display_value(value), global.get(*k) != Some(value)))
            })
            .collect();
        let vwidth = rows.iter().map(|r| r.1.chars().count()).max().unwrap_or(0);
        for (key, value, changed) in rows {
            let source = if changed { "this rule" } else { "global" };
            out.push_str(&format!("  {key:width$}  {value:vwidth$}  ({source})\n"));
        }
    }
    out
}

/// The first earlier rule that takes every host `rule` could match: only known for sure
/// when `rule`'s pattern is a plain host name (no wildcard).
fn shadowed_by(earlier: &[HostRule], rule: &HostRule) -> Option<usize> {
    if rule.pattern.contains(['*', '?']) {
        return None;
    }
    earlier.iter().position(|r| r.matches(&rule.pattern))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_rule_shows_its_merged_values_and_what_it_set() {
        let mut s = Settings::default();
        s.set("concurrency_per_host", "2").unwrap();
        s.set(
            "hosts",
            r#"[{"match":"*.example.com","rate":50,"concurrency":8},
                {"match":"slow.test","delay":"2s","ignore_robots":true},
                {"match":"a.example.com","rate":1}]"#,
        )
        .unwrap();
        let table = host_rules_table(&s);
        let block = |n: usize| -> String {
            table
                .split("[[hosts]]")
                .nth(n)
                .unwrap_or_else(|| panic!("{table}"))
                .to_owned()
        };
        let row = |block: &str, key: &str| -> String {
            block
                .lines()
                .find(|l| l.split_whitespace().next() == Some(key))
                .unwrap_or_else(|| panic!("{key} missing:\n{block}"))
                .to_owned()
        };
        let first = block(1);
        assert!(first.contains("match = \"*.example.com\""), "{table}");
        assert!(row(&first, "max_rate").contains("50.0"), "{table}");
        assert!(row(&first, "max_rate").ends_with("(this rule)"), "{table}");
        // A rule's rate is where its hosts start too.
        assert!(row(&first, "start_rate").contains("50.0"), "{table}");
        assert!(
            row(&first, "concurrency_per_host").contains(" 8 "),
            "{table}"
        );
        assert!(row(&first, "burst").ends_with("(global)"), "{table}");
        let second = block(2);
        assert!(row(&second, "download_delay").contains("2s"), "{table}");
        assert!(row(&second, "obey_robots").contains("false"), "{table}");
        // The global per-host concurrency, where the rule leaves it.
        assert!(
            row(&second, "concurrency_per_host").contains(" 2 "),
            "{table}"
        );
        assert!(row(&second, "concurrency_per_host").ends_with("(global)"));
        assert!(block(3).contains("never applies: rule #1"), "{table}");
        assert_eq!(host_rules_table(&Settings::default()), "");
    }
}
