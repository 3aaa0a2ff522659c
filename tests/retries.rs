//! docs/retries.md against the code outside crawler-core (crawler-core's own tests check the
//! settings and the retry policy it states), and a host skip proved end to end: a Retry-After
//! longer than `max_retry_after` puts every request of the host in the failures file with
//! that reason, none dropped silently.

use std::collections::BTreeSet;
use std::time::Duration;

use crawler::prelude::*;
use crawler_lab::{Lab, ScriptReply};

const DOC: &str = "docs/retries.md";

/// The body rows of the table whose header row starts with `header`, as trimmed cells.
fn table(doc: &str, header: &str) -> Vec<Vec<String>> {
    let mut lines = doc.lines().skip_while(|l| !l.starts_with(header));
    assert!(lines.next().is_some(), "{DOC}: no table headed `{header}`");
    lines
        .skip(1)
        .take_while(|l| l.starts_with('|'))
        .map(|l| {
            l.trim()
                .trim_matches('|')
                .split('|')
                .map(|c| c.trim().to_owned())
                .collect()
        })
        .collect()
}

#[test]
fn the_politeness_constants_in_the_doc_are_the_machines() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/retries.md");
    let doc = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let tuning = serde_json::to_value(crawler_sched::politeness::Tuning::default())
        .expect("the tuning serialises");
    let rows = table(&doc, "| constant |");
    let mut named = BTreeSet::new();
    for row in &rows {
        let [name, value] = row.as_slice() else {
            panic!("{DOC}: a constants row without 2 cells: {row:?}");
        };
        let name = name.trim_matches('`');
        let stated: f64 = value
            .parse()
            .unwrap_or_else(|_| panic!("{DOC}: `{name}` = `{value}` is not a number"));
        let actual = tuning
            .get(name)
            .and_then(serde_json::Value::as_f64)
            .unwrap_or_else(|| panic!("{DOC} names `{name}`, which Tuning does not have"));
        assert_eq!(
            stated, actual,
            "{DOC} says {name} is {value}; Tuning::default() has {actual}"
        );
        named.insert(name);
    }
    for name in [
        "backoff_base_ms",
        "backoff_cap_ms",
        "failure_streak",
        "give_up_ms",
        "forbidden_slow_after",
        "forbidden_skip_after",
    ] {
        assert!(
            named.contains(name),
            "{DOC}: the constants table lacks {name}"
        );
    }
    // The prose states them in seconds and counts; the table is the page's own summary.
    let flat = doc.split_whitespace().collect::<Vec<_>>().join(" ");
    let secs = |name: &str| tuning[name].as_f64().unwrap_or(f64::NAN) / 1_000.0;
    let count = |name: &str| tuning[name].as_u64().unwrap_or(0);
    for stated in [
        format!(
            "{} s the first time, doubling with each repeat up to {} s",
            secs("backoff_base_ms"),
            secs("backoff_cap_ms")
        ),
        format!("{} answers in a row are 403", count("forbidden_skip_after")),
        format!(
            "every {}th in a row halves the rate",
            count("forbidden_slow_after")
        ),
        format!("is {} or more answers in a row", count("failure_streak")),
        format!("for {} minutes every answer", secs("give_up_ms") / 60.0),
        format!(
            "by a backoff ({} s doubling to {} s)",
            secs("backoff_base_ms"),
            secs("backoff_cap_ms")
        ),
        format!("one doubling per {} s of answers", secs("backoff_cap_ms")),
    ] {
        assert!(flat.contains(&stated), "{DOC} should say `{stated}`");
    }
}

/// Starts at `start` and follows every link; takes a while over `/slow`, so that its links
/// are found after the host was skipped.
struct Links {
    start: String,
}

impl Spider for Links {
    type Item = String;

    fn name(&self) -> &str {
        "links"
    }

    fn start_urls(&self) -> Vec<String> {
        vec![self.start.clone()]
    }

    async fn parse(&self, page: Response, out: &mut Output<String>) -> Result<()> {
        if page.url().path() == "/slow" {
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        out.item(page.url().path().to_owned());
        out.follow_all(page.select("a").attrs("href"));
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_after_beyond_the_maximum_lists_every_request_of_the_host_in_the_failures_file() {
    // `/` links to `/slow` (parsed slowly; it links to `/c` and `/d`), then to `/a`, which
    // asks for an hour, then to five more pages that are queued when it does.
    let lab = Lab::builder()
        .script(|req| {
            let html = |body: &str| Some(ScriptReply::new(200).html(body.to_owned()));
            match req.path {
                // The lab's own robots.txt.
                "/robots.txt" => None,
                "/" => html(
                    r#"<a href="/slow">s</a><a href="/a">a</a><a href="/p1">1</a>
                       <a href="/p2">2</a><a href="/p3">3</a><a href="/p4">4</a>
                       <a href="/p5">5</a>"#,
                ),
                "/slow" => html(r#"<a href="/c">c</a><a href="/d">d</a>"#),
                "/a" => Some(ScriptReply::new(429).header("Retry-After", "3600")),
                _ => html("<p>leaf</p>"),
            }
        })
        .start()
        .await
        .expect("lab");
    let dir = tempfile::tempdir().expect("tempdir");
    let failures = dir.path().join("failures.jsonl");
    let stats = tokio::time::timeout(
        Duration::from_secs(60),
        Crawl::new(Links {
            start: lab.url_for("/"),
        })
        .progress(false)
        .set("start_rate", "20")
        .set("download_timeout", "10s")
        .set("failures_file", failures.to_string_lossy().to_string())
        .run(),
    )
    .await
    .expect("the crawl finishes instead of waiting an hour")
    .expect("crawl");

    let sent: BTreeSet<String> = lab
        .recorder()
        .requests()
        .into_iter()
        .map(|r| r.path)
        .filter(|p| p != "/robots.txt")
        .collect();
    // The slow page went before the refusal, and nothing went after it.
    assert_eq!(
        sent,
        ["/", "/slow", "/a"].map(String::from).into(),
        "{stats}"
    );
    let me = lab.recorder().report();
    assert_eq!(me.clients.values().map(|c| c.violations).sum::<u64>(), 0);

    let text = std::fs::read_to_string(&failures).expect("failures file");
    let mut listed = BTreeSet::new();
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line).expect("a JSON line");
        let url = v["url"].as_str().expect("url").to_owned();
        assert_eq!(v["reason"], "host_skipped", "{line}");
        let message = v["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("Retry-After") && message.contains("max_retry_after"),
            "{line}"
        );
        assert!(listed.insert(url), "listed twice: {line}");
    }
    // `/a` (its retry), the five pages queued behind it, and the two links of `/slow`,
    // found after the skip.
    let want: BTreeSet<String> = ["/a", "/p1", "/p2", "/p3", "/p4", "/p5", "/c", "/d"]
        .into_iter()
        .map(|p| lab.url_for(p))
        .collect();
    assert_eq!(listed, want, "{text}");
    assert_eq!(stats.skipped_host, 8, "{stats}");
    assert_eq!(stats.fetched, 2, "{stats}");
    assert_eq!(stats.pending, 0, "{stats}");
    assert!(stats.reconciles(), "{stats:?}");
    let host = stats.hosts.first().expect("host stats");
    assert!(
        host.skipped
            .as_deref()
            .is_some_and(|w| w.contains("max_retry_after")),
        "{host:?}"
    );
    lab.shutdown().await;
}
