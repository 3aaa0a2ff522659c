//! The renderer on hand-made records.

use std::path::PathBuf;

use super::*;

struct Tmp(PathBuf);

impl Drop for Tmp {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn tmp(name: &str) -> Tmp {
    let dir = std::env::temp_dir().join(format!("crawler-report-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap_or_default();
    Tmp(dir)
}

fn write(dir: &Tmp, text: &str) -> PathBuf {
    let path = dir.0.join(RECORD_FILE);
    std::fs::write(&path, text).unwrap_or_default();
    path
}

/// Whether `html` is well-formed XML (every element closed, attributes quoted, entities
/// known), which a browser's HTML parser then reads without any guessing.
fn well_formed(html: &str) -> Result<(), String> {
    let mut reader = quick_xml::Reader::from_str(html);
    let mut depth = 0i64;
    loop {
        match reader.read_event() {
            Ok(quick_xml::events::Event::Start(_)) => depth += 1,
            Ok(quick_xml::events::Event::End(_)) => depth -= 1,
            Ok(quick_xml::events::Event::Text(t)) => {
                t.decode().map_err(|e| e.to_string())?;
            }
            Ok(quick_xml::events::Event::Eof) => break,
            Ok(_) => {}
            Err(e) => return Err(format!("at {}: {e}", reader.buffer_position())),
        }
    }
    if depth == 0 {
        Ok(())
    } else {
        Err(format!("{depth} elements left open"))
    }
}

const EVIL: &str = "<b>evil&\\\"host'</b>";

fn record() -> String {
    let host = serde_json::to_string(EVIL).unwrap_or_default();
    [
        r#"{"t":"run","unix_ms":1700000000000,"version":1}"#.to_owned(),
        format!(r#"{{"t":"second","host":{host},"unix_s":1700000000,"sent":5,"status":{{"200":4,"429":1}},"latency_sum_ms":50.0,"latency_max_ms":20.0,"latency_n":5}}"#),
        format!(r#"{{"t":"audit","host":{host},"unix_ms":1700000000500,"trigger":"Retry-After","what":{{"kind":"hold","until":3000.0,"wait_ms":3000.0}}}}"#),
        format!(r#"{{"t":"audit","host":{host},"unix_ms":1700000000500,"trigger":"429","what":{{"kind":"rate","old":10.0,"new":5.0}}}}"#),
        format!(r#"{{"t":"second","host":{host},"unix_s":1700000004,"sent":3,"retries":1,"status":{{"200":3}},"failed":{{"timeout":1}}}}"#),
        r#"{"t":"second","host":"b.example:8080","unix_s":1700000002,"sent":2,"subrequests":2,"status":{"200":2},"quota":{"remaining":3,"limit":10,"window_ms":1000}}"#.to_owned(),
    ]
    .join("\n")
        + "\n"
}

#[test]
fn a_record_becomes_one_escaped_chart_per_host_with_its_holds() {
    let dir = tmp("basic");
    let path = write(&dir, &record());
    let (html, summary) = render(&path).expect("render");
    well_formed(&html).unwrap_or_else(|e| panic!("{e}\n{html}"));
    assert_eq!(summary.hosts, 2);
    assert_eq!(summary.charted, 2);
    assert_eq!(html.matches("<svg").count(), 2);
    // The host name is text everywhere, never markup.
    assert!(!html.contains(EVIL), "unescaped host name");
    assert!(html.contains("&lt;b&gt;evil&amp;\\&quot;host&#39;&lt;/b&gt;"));
    let doc = scraper::Html::parse_document(&html);
    let sel = |css: &str| scraper::Selector::parse(css).map_err(|e| e.to_string());
    let holds: Vec<_> = doc
        .select(&sel("rect.hold").unwrap_or_else(|e| panic!("{e}")))
        .filter_map(|e| e.value().attr("data-trigger"))
        .collect();
    assert_eq!(holds, ["Retry-After"]);
    let headings: Vec<String> = doc
        .select(&sel("section.host h2").unwrap_or_else(|e| panic!("{e}")))
        .map(|e| e.text().collect())
        .collect();
    assert_eq!(headings.first().map(String::as_str), Some(EVIL));
    // The final counts by status, summed over the seconds.
    let ok: Vec<String> = doc
        .select(&sel("#host-1 td[data-status='200']").unwrap_or_else(|e| panic!("{e}")))
        .map(|e| e.text().collect())
        .collect();
    assert_eq!(ok, ["7"]);
    assert!(html.contains("no response: timeout"));
    assert!(html.contains("class=\"refusal\""));
    assert!(html.contains("class=\"retry\""));
    assert!(
        html.contains("class=\"quota\""),
        "the quota line of b.example"
    );
    assert!(html.contains("class=\"pace\""));
    assert!(!html.contains("<script"));
    // The sub-requests of rendered pages, per host and in the summary.
    assert!(html.contains("<span>sub-requests: 2</span>"), "{html}");
    assert!(html.contains("<span>sub-requests: 0</span>"));
    assert!(html.contains("sub-requests of rendered pages: 2)"));
}

#[test]
fn an_empty_record_gives_a_page_that_says_so() {
    let dir = tmp("empty");
    let path = write(&dir, "");
    let (html, summary) = render(&path).expect("render");
    well_formed(&html).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(summary, ReportSummary::default());
    assert!(html.contains("No request was recorded."));
    assert!(!html.contains("<svg"));
}

#[test]
fn a_partial_last_line_is_left_out_and_bad_lines_are_counted() {
    let dir = tmp("cut");
    let mut text = record();
    text.insert_str(0, "not json\n{\"t\":\"later-kind\"}\n");
    text.push_str(r#"{"t":"second","host":"b.exa"#);
    let path = write(&dir, &text);
    let (html, summary) = render(&path).expect("render");
    well_formed(&html).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(summary.bad_lines, 2);
    assert!(summary.truncated);
    assert_eq!(summary.charted, 2);
    assert!(html.contains("2 unreadable lines of the record skipped"));
}

#[test]
fn a_file_that_is_no_record_and_a_job_dir_without_one_are_named_errors() {
    let dir = tmp("errors");
    let err = record_path(&dir.0).expect_err("no record");
    assert!(
        err.to_string().contains("holds no politeness record"),
        "{err}"
    );
    let path = write(&dir, "hello\nworld\n");
    assert_eq!(record_path(&dir.0).ok(), Some(path.clone()));
    let err = render(&path).expect_err("not a record");
    assert!(
        err.to_string().contains("is not a politeness record"),
        "{err}"
    );
    let err = record_path(&dir.0.join("missing")).expect_err("missing");
    assert!(err.to_string().contains("cannot read"), "{err}");
}

#[test]
fn many_hosts_are_charted_up_to_the_cap_and_listed_after_it() {
    let dir = tmp("many");
    let mut text = String::from("{\"t\":\"run\",\"unix_ms\":1700000000000,\"version\":1}\n");
    for i in 0..(MAX_CHARTS + 5) {
        // A day long: the timeline is bucketed, not a point per second.
        for s in [0, 86_400] {
            text.push_str(&format!(
                "{{\"t\":\"second\",\"host\":\"h{i}.test\",\"unix_s\":{},\"sent\":{},\"status\":{{\"200\":1}}}}\n",
                1_700_000_000 + s,
                i + 1
            ));
        }
    }
    let path = write(&dir, &text);
    let (html, summary) = render(&path).expect("render");
    well_formed(&html).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(summary.hosts, MAX_CHARTS + 5);
    assert_eq!(html.matches("<svg").count(), MAX_CHARTS);
    assert!(html.contains("<h2>Other hosts</h2>"));
    // Bounded: 720 points a chart at most.
    assert!(html.len() < 4_000_000, "{} bytes", html.len());
}

#[test]
fn hostile_times_and_counts_neither_overflow_nor_stretch_memory() {
    let dir = tmp("hostile");
    let text = [
        r#"{"t":"run","unix_ms":-9223372036854775808,"version":99}"#,
        r#"{"t":"second","host":"x","unix_s":9223372036854775807,"sent":4294967295,"status":{"429":4294967295},"latency_sum_ms":1e308,"latency_max_ms":1e308,"latency_n":1}"#,
        r#"{"t":"second","host":"x","unix_s":-9223372036854775808,"sent":1}"#,
        r#"{"t":"audit","host":"x","unix_ms":9223372036854775807,"trigger":"429","what":{"kind":"hold","until":0.0,"wait_ms":1e308}}"#,
        r#"{"t":"audit","host":"x","unix_ms":0,"trigger":"429","what":{"kind":"rate","old":1e308,"new":-5.0}}"#,
    ]
    .join("\n");
    let path = write(&dir, &text);
    let (html, summary) = render(&path).expect("render");
    well_formed(&html).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(summary.charted, 1);
    assert!(html.contains("written by a newer version"));
    for bad in ["NaN", "inf"] {
        if let Some(at) = html.find(bad) {
            panic!(
                "{bad}: {}",
                &html[at.saturating_sub(200)..(at + 50).min(html.len())]
            );
        }
    }
}

#[test]
fn http_versions_and_proxies_are_counted_per_host_and_in_the_summary() {
    let dir = tmp("versions");
    let text = [
        r#"{"t":"run","unix_ms":1700000000000,"version":1}"#,
        r#"{"t":"second","host":"a.example","unix_s":1700000000,"sent":3,"status":{"200":3},"versions":{"HTTP/2":2,"HTTP/1.1":1},"proxies":{"http://u:***@127.0.0.1:3128":3}}"#,
        r#"{"t":"second","host":"a.example","unix_s":1700000001,"sent":2,"status":{"200":2},"versions":{"HTTP/2":2}}"#,
        r#"{"t":"second","host":"b.example","unix_s":1700000001,"sent":1,"status":{"200":1},"versions":{"<i>HTTP/9</i>":1}}"#,
    ]
    .join("\n")
        + "\n";
    let path = write(&dir, &text);
    let (html, _) = render(&path).expect("render");
    well_formed(&html).unwrap_or_else(|e| panic!("{e}\n{html}"));
    // The summary adds up every host; each host's figures have its own.
    assert!(
        html.contains(
            "HTTP versions</th><td>&lt;i&gt;HTTP/9&lt;/i&gt;: 1, HTTP/1.1: 1, HTTP/2: 4</td>"
        ),
        "{html}"
    );
    assert!(
        html.contains("HTTP versions: HTTP/1.1: 1, HTTP/2: 4</span>"),
        "{html}"
    );
    assert!(
        html.contains("through proxies: http://u:***@127.0.0.1:3128: 3</span>"),
        "{html}"
    );
    assert!(!html.contains("<i>"), "escaped");
}
