//! Where a crawl's output goes: items to stdout with `-o -` (and nothing else there), log
//! lines to `--log-file` without colour, one debug line per request and robots verdict,
//! the settings listing per `[[hosts]]` rule, and Scrapy's variables in the environment.
//! Everything runs against the lab on 127.0.0.1.

use std::path::Path;
use std::process::{Command, Output};

use crawler_cli::Runner;
use crawler_lab::Lab;

#[allow(dead_code)]
#[path = "../../examples/books/spider.rs"]
mod books;

use crate::support;
use support::{clean, crawler, project, run, text};
/// Set for the copy of this test binary that plays a project's runner.
const CHILD_START: &str = "RUNNER_TEST_START_URL";
const CHILD_ARGS: &str = "RUNNER_TEST_ARGS";

/// Not a test of its own: when started by `runner_with_dash_o_writes_json_lines_to_stdout`
/// (with the lab's URL in the environment), this process is a project's runner.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runner_child() {
    let (Ok(start), Ok(args)) = (std::env::var(CHILD_START), std::env::var(CHILD_ARGS)) else {
        return;
    };
    let args: Vec<String> = serde_json::from_str(&args).expect("args are JSON");
    let code = Runner::new()
        .spider(books::Books { start })
        .run_args(args)
        .await;
    let ok = code == std::process::ExitCode::SUCCESS;
    // Leave before the test harness prints its summary: stdout is the crawl's alone.
    std::process::exit(if ok { 0 } else { 1 });
}

/// Run this test binary as a project's runner with `args` (after the program name).
async fn runner(lab: &Lab, dir: &Path, args: &[&str]) -> Output {
    let exe = std::env::current_exe().expect("test binary");
    let mut cmd = clean(Command::new(exe), dir);
    let mut all = vec!["books"];
    all.extend_from_slice(args);
    cmd.args([
        &crate::test_path(module_path!(), "runner_child"),
        "--exact",
        "--nocapture",
        "--quiet",
        "--test-threads=1",
    ])
    .env(CHILD_START, lab.url())
    .env(CHILD_ARGS, serde_json::to_string(&all).expect("args"));
    run(cmd).await
}

/// The lab at full speed, as for a host you own.
const FAST: &[&str] = &[
    "-s",
    "throttle=fixed",
    "-s",
    "download_delay=0s",
    "-s",
    "concurrency_per_host=8",
    "-s",
    "user_agent=output-test/1.0",
    "--no-progress",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runner_with_dash_o_writes_json_lines_to_stdout() {
    let lab = Lab::builder().books(100).start().await.expect("lab");
    let dir = tempfile::tempdir().expect("temp dir");
    let mut args = vec!["crawl", "books", "-o", "-", "-O", "%(name)s-%(time)s.csv"];
    args.extend_from_slice(FAST);
    let out = runner(&lab, dir.path(), &args).await;
    let stdout = text(&out.stdout);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    // The test harness's own "running 1 test" line aside, stdout is items only.
    let lines: Vec<&str> = stdout
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with("running "))
        .collect();
    assert_eq!(lines.len(), 100, "{stdout}");
    for line in &lines {
        let item: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
        assert!(item["title"].is_string(), "{line}");
    }
    // The final stats went to stderr instead.
    assert!(stderr.contains("crawl finished in"), "{stderr}");
    assert!(!stdout.contains("crawl finished in"), "{stdout}");
    // The placeholders were filled in: the spider's name and a filesystem-safe time.
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .expect("dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    let csv = names
        .iter()
        .find(|n| n.starts_with("books-") && n.ends_with(".csv"))
        .unwrap_or_else(|| panic!("no books-TIME.csv in {names:?}"));
    assert!(!csv.contains(':') && !csv.contains('%'), "{csv}");
    let rows = std::fs::read_to_string(dir.path().join(csv)).expect("csv");
    assert_eq!(rows.lines().count(), 101, "header and 100 rows");
    lab.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_feeds_in_dash_o_stop_the_crawl_before_its_first_request() {
    let lab = Lab::builder().books(100).start().await.expect("lab");
    let dir = tempfile::tempdir().expect("temp dir");
    let out = runner(
        &lab,
        dir.path(),
        &["crawl", "books", "-o", "%(spider)s.jsonl"],
    )
    .await;
    let stderr = text(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("unknown placeholder %(spider)s"),
        "{stderr}"
    );
    assert!(lab.recorder().requests().is_empty(), "nothing was fetched");
    // A feed that cannot be created stops the crawl before its first request too.
    let out = runner(
        &lab,
        dir.path(),
        &["crawl", "books", "-o", "/nonexistent-dir/x/items.jsonl"],
    )
    .await;
    let stderr = text(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("cannot create feed '/nonexistent-dir/x/items.jsonl'"),
        "{stderr}"
    );
    assert!(lab.recorder().requests().is_empty(), "nothing was fetched");
    lab.shutdown().await;
}

#[tokio::test]
async fn debug_logs_go_to_the_log_file_one_line_per_request_without_colour() {
    let dir = project("");
    let log = dir.path().join("crawl.log");
    std::fs::write(&log, "an earlier line\n").expect("seed the log");
    let mut cmd = crawler(
        dir.path(),
        &[
            "bench",
            "--books",
            "100",
            "--concurrency",
            "4",
            "-L",
            "debug",
            "--log-file",
            log.to_str().expect("utf-8 path"),
        ],
    );
    // Colour is never written to a file, whatever the environment asks for.
    cmd.env("CLICOLOR_FORCE", "1");
    let out = run(cmd).await;
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let logged = std::fs::read_to_string(&log).expect("log file");
    assert!(logged.starts_with("an earlier line\n"), "appended to");
    assert!(!logged.contains('\u{1b}'), "no ANSI escapes in the file");
    // The log lines went to the file, not to stderr.
    assert!(!stderr.contains("DEBUG"), "{stderr}");
    // One line per answered request: method, URL, status, callback, depth, bytes, latency.
    let requests: Vec<&str> = logged
        .lines()
        .filter(|l| l.contains("DEBUG") && l.contains(" GET http://127.0.0.1:"))
        .collect();
    assert!(requests.len() >= 100, "{logged}");
    let book = requests
        .iter()
        .find(|l| l.contains("callback=book"))
        .unwrap_or_else(|| panic!("no book page line:\n{logged}"));
    for field in [
        " 200 ",
        "depth=",
        "bytes=",
        "latency=",
        "from=network",
        "retries=0",
    ] {
        assert!(book.contains(field), "{field} missing: {book}");
    }
    // And one per robots.txt verdict, naming the deciding rule.
    assert!(
        logged
            .lines()
            .any(|l| l.contains("robots.txt: allowed") && l.contains("rule=")),
        "{logged}"
    );
    assert!(
        logged.lines().any(|l| l.contains("robots.txt: disallowed")
            && l.contains("/private/")
            && l.contains("rule=Disallow: /private/")),
        "{logged}"
    );
    // The HTML parser and the CSS engine stay at warn.
    assert!(!logged.contains("html5ever"), "{logged}");
    assert!(!logged.contains("selectors::"), "{logged}");
}

#[tokio::test]
async fn an_unwritable_log_file_is_a_usage_error() {
    let dir = project("");
    let out = run(crawler(
        dir.path(),
        &["settings", "--log-file", "/nonexistent-dir/x/crawl.log"],
    ))
    .await;
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("cannot open log_file '/nonexistent-dir/x/crawl.log'"),
        "{}",
        text(&out.stderr)
    );
}

#[tokio::test]
async fn settings_shows_each_host_rules_effective_values() {
    let dir = project(
        "[throttle]\nconcurrency_per_host = 2\n\n[[hosts]]\nmatch = \"*.example.com\"\nrate = 50\n\
         concurrency = 8\n\n[[hosts]]\nmatch = \"slow.test\"\ndelay = \"2s\"\n",
    );
    let out = run(crawler(dir.path(), &["settings"])).await;
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let (_, rules) = stdout
        .split_once("[[hosts]] #1 match = \"*.example.com\"")
        .unwrap_or_else(|| panic!("{stdout}"));
    let (first, second) = rules
        .split_once("[[hosts]] #2 match = \"slow.test\"")
        .unwrap_or_else(|| panic!("{stdout}"));
    let row = |block: &str, key: &str| -> String {
        block
            .lines()
            .find(|l| l.split_whitespace().next() == Some(key))
            .unwrap_or_else(|| panic!("{key} missing:\n{stdout}"))
            .to_owned()
    };
    assert!(row(first, "max_rate").contains("50.0"), "{stdout}");
    assert!(
        row(first, "concurrency_per_host").contains(" 8 "),
        "{stdout}"
    );
    assert!(row(first, "concurrency_per_host").ends_with("(this rule)"));
    assert!(row(second, "download_delay").contains("2s"), "{stdout}");
    assert!(
        row(second, "concurrency_per_host").contains(" 2 "),
        "{stdout}"
    );
    assert!(row(second, "concurrency_per_host").ends_with("(global)"));
}

#[tokio::test]
async fn settings_errors_for_feeds_name_the_file_line_and_column() {
    let dir = project("[feeds]\nfeeds = [\"x.yaml\"]\n");
    let out = run(crawler(dir.path(), &["settings"])).await;
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains(
            "crawler.toml:2:9: setting feeds entry 'x.yaml': cannot tell the feed format"
        ),
        "{stderr}"
    );
}

#[tokio::test]
async fn scrapys_variables_get_a_warning_naming_ours() {
    let dir = project("");
    let mut cmd = crawler(dir.path(), &["settings"]);
    cmd.env("SCRAPY_SETTINGS_MODULE", "books.settings")
        .env("CONCURRENT_REQUESTS", "8");
    let out = run(cmd).await;
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("warning: environment variable SCRAPY_SETTINGS_MODULE is Scrapy's"),
        "{stderr}"
    );
    assert!(
        stderr.contains("environment variable CONCURRENT_REQUESTS is not read here")
            && stderr.contains("set CRAWLER_CONCURRENCY instead"),
        "{stderr}"
    );
    // Not read: the default stands.
    let stdout = text(&out.stdout);
    let row = stdout
        .lines()
        .find(|l| l.split_whitespace().next() == Some("concurrency"))
        .unwrap_or_else(|| panic!("{stdout}"));
    assert!(row.contains(" 16 ") && row.ends_with("(default)"), "{row}");
}
