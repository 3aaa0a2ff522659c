//! Tests of the verdict types, and of the parser against texting_robots, which decided
//! before it.

use super::*;

#[test]
fn product_tokens() {
    assert_eq!(product_token("crawler/0.1 (+https://x)"), "crawler");
    assert_eq!(product_token("MyBot"), "MyBot");
    assert_eq!(product_token("Some Bot 2"), "Some");
}

fn rules_of(agent: &str, txt: &[u8]) -> RobotsRules {
    RobotsRules {
        access: Access::Parsed(Box::new(RobotsTxt::parse(agent, txt))),
        status: RobotsStatus::Fetched { status: 200 },
        expires: Instant::now(),
        retry_after: None,
        not_text: false,
    }
}

#[test]
fn parsed_rules_allow_disallow_and_delay() {
    let rules = rules_of(
        "crawler",
        b"User-agent: *\nDisallow: /private/\nCrawl-delay: 2\nSitemap: http://h/s.xml\nSitemap: /rel.xml\n",
    );
    assert!(rules.allowed(&Url::parse("http://h/public").unwrap()));
    assert!(!rules.allowed(&Url::parse("http://h/private/x").unwrap()));
    // What a refusal names: the deciding rule as written, none where no rule matched.
    assert_eq!(
        rules
            .matched_rule(&Url::parse("http://h/private/x").unwrap())
            .as_deref(),
        Some("Disallow: /private/")
    );
    assert_eq!(
        rules.matched_rule(&Url::parse("http://h/public").unwrap()),
        None
    );
    assert_eq!(rules.crawl_delay(), Some(Duration::from_secs(2)));
    assert_eq!(rules.sitemaps(), ["http://h/s.xml", "/rel.xml"]);
    assert_eq!(
        rules.sitemap_urls(),
        [Url::parse("http://h/s.xml").unwrap()]
    );
}

#[test]
fn specific_group_wins_over_star() {
    let txt =
        b"User-agent: *\nDisallow: /\n\nUser-agent: Crawler\nDisallow: /mine\nCrawl-delay: 5\n";
    let ours = rules_of(product_token("crawler/0.1 (+https://x)"), txt);
    assert!(ours.allowed(&Url::parse("http://h/page").unwrap()));
    assert!(!ours.allowed(&Url::parse("http://h/mine").unwrap()));
    assert_eq!(ours.crawl_delay(), Some(Duration::from_secs(5)));
    let other = rules_of("otherbot", txt);
    assert!(!other.allowed(&Url::parse("http://h/page").unwrap()));
    assert_eq!(other.crawl_delay(), None);
}

/// A small deterministic generator (xorshift64*), so a failure names a reproducible case.
struct Gen(u64);

impl Gen {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let r = self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 33;
        usize::try_from(r).unwrap() % n
    }

    /// One of the `|`-separated choices.
    fn pick<'a>(&mut self, choices: &'a str) -> &'a str {
        let all: Vec<&str> = choices.split('|').collect();
        all[self.below(all.len())]
    }
}

/// One generated robots.txt: well-formed, lenient and broken lines mixed.
fn generated_file(g: &mut Gen) -> Vec<u8> {
    const KEYWORDS: &str = "User-agent|user-agent|USER-AGENT|User agent|Useragent|User-agentx|\
        Allow|allow|Allowance|Disallow|DISALLOW|Dissallow|disalow|Sitemap|Site-map|\
        Crawl-delay|crawl delay|Host|";
    const SEPARATORS: &str = ":|: | : | |\t||::|:\t ";
    const AGENTS: &str = "*|crawler|Crawler|CRAWLER|crawler/1.0|other| crawler |crawl|\
        crawlerx|\u{a0}crawler\u{3000}||*crawler|b";
    const VALUES: &str = "|/|/a|/a/|/ab|/a*|/a$|/a*b$|*|*.pdf$|/a$b|/a$*|/a$$|/ä|/a b|/%41|\
        /A|/a?x|/a?x=1$|*/b|/**|$|/a#frag|/robots.txt|/robots.txt$|/a\u{a0}|/a\"<>`|\
        /a\x7f\x01|1|2.5|-1|abc|0|inf|NaN| 3 |1e2|http://h/s.xml|/rel.xml|http://h/ä.xml";
    let mut out = Vec::new();
    // A byte-order mark, or the tail of one.
    let bom: &[u8] = match g.below(5) {
        0 => b"\xEF\xBB\xBF",
        1 => b"\xBB\xBF",
        _ => b"",
    };
    out.extend_from_slice(bom);
    for _ in 0..=g.below(12) {
        out.extend_from_slice(g.pick("|||| |\t|# comment\n").as_bytes());
        let keyword = g.pick(KEYWORDS);
        out.extend_from_slice(keyword.as_bytes());
        out.extend_from_slice(g.pick(SEPARATORS).as_bytes());
        let is_agent = keyword.to_ascii_lowercase().starts_with("user");
        out.extend_from_slice(g.pick(if is_agent { AGENTS } else { VALUES }).as_bytes());
        if g.below(10) == 0 {
            // A value that is not UTF-8.
            out.push(0xFF);
        }
        out.extend_from_slice(g.pick("|| # note|#x| #").as_bytes());
        out.extend_from_slice(g.pick("\n|\n|\r\n|\r|\n\n|\0").as_bytes());
    }
    out
}

#[test]
fn verdicts_delays_and_sitemaps_are_texting_robots_ones() {
    let paths = "/|/a|/a/|/ab|/a/b|/b|/a?x=1|/a?x|/x.pdf|/x.pdf?y|/ä|/a%20b|/a b|/A|/%41|\
        /robots.txt|/robots.txt?x|/a$b|/a$|/a#frag|/b/a|/a\"<>`|/a\x7f\x01";
    let urls: Vec<Url> = paths
        .split('|')
        .map(|p| Url::parse(&format!("http://h{p}")).unwrap())
        .collect();
    let mut g = Gen(0x9E37_79B9_7F4A_7C15);
    for case in 0..20_000 {
        let file = generated_file(&mut g);
        for agent in ["crawler", "other", "b"] {
            let theirs = texting_robots::Robot::new(agent, &file).unwrap();
            let ours = RobotsTxt::parse(agent, &file);
            let shown = String::from_utf8_lossy(&file);
            assert_eq!(ours.delay, theirs.delay, "case {case}, {agent}: {shown:?}");
            assert_eq!(
                ours.sitemaps, theirs.sitemaps,
                "case {case}, {agent}: {shown:?}"
            );
            for url in &urls {
                assert_eq!(
                    ours.decide(url).allowed,
                    theirs.allowed(url.as_str()),
                    "case {case}, {agent}, {url}: {shown:?}"
                );
            }
        }
    }
}

#[test]
fn a_rule_too_big_for_texting_robots_regex_is_applied() {
    // The one deliberate difference: texting_robots compiled each `$` rule to a regex under a
    // 42 KiB size limit, and a rule over it (here 40 `*`; or some 1,300 characters) made the
    // whole file unreadable, so everything was allowed. Such a file is valid robots.txt: its
    // rules now apply (the wildcard matcher is linear, it needs no size limit).
    let file = format!(
        "User-agent: *\nDisallow: /private\nDisallow: /{}$\n",
        "*a".repeat(40)
    );
    assert!(texting_robots::Robot::new("crawler", file.as_bytes()).is_err());
    let ours = RobotsTxt::parse("crawler", file.as_bytes());
    assert!(
        !ours
            .decide(&Url::parse("http://h/private").unwrap())
            .allowed
    );
    assert!(ours.decide(&Url::parse("http://h/public").unwrap()).allowed);
}

#[test]
fn binary_robots_txt_is_no_rules_and_flagged() {
    let garbage: Vec<u8> = (0..2048u32).map(|i| (i * 7919 % 251) as u8).collect();
    let got = super::fetch::Retrieved::Body {
        status: 200,
        body: garbage,
        truncated: false,
        retry_after: None,
    };
    let options = RobotsOptions::default();
    let (rules, _) = super::fetch::verdict("http://h/robots.txt", got, "crawler", &options);
    assert!(rules.not_text());
    assert!(rules.allowed(&Url::parse("http://h/anything").unwrap()));
    // A real file, and one with a stray control character, are text.
    for text in [
        &b"User-agent: *\nDisallow: /x\n"[..],
        b"# a stray \x1b escape\nUser-agent: *\nDisallow: /x\n",
    ] {
        let got = super::fetch::Retrieved::Body {
            status: 200,
            body: text.to_vec(),
            truncated: false,
            retry_after: None,
        };
        let (rules, _) = super::fetch::verdict("http://h/robots.txt", got, "crawler", &options);
        assert!(!rules.not_text());
        assert!(!rules.allowed(&Url::parse("http://h/x").unwrap()));
    }
}
