//! `parse URL --spider NAME`: a project's callback run on one lab page, its items and
//! requests printed; `--depth` following them; an unknown callback and a robots-disallowed
//! URL refused. The project is this test binary re-run as a child (stdout is its own).

use std::path::Path;
use std::process::Command;

use crawler::prelude::*;
use crawler::{Error, ErrorKind};
use crawler_cli::Runner;
use crawler_lab::Lab;
use serde_json::Value;

use crate::support::{clean, run, text};

/// Set for the copy of this test binary that plays a project's runner.
const CHILD_ARGS: &str = "PARSE_TEST_ARGS";

/// A listing page gives a `book` request per book (with its id in meta) and a request for
/// the next page; a book page gives one item; `broken` always fails.
struct Books;

impl Spider for Books {
    type Item = Value;

    fn name(&self) -> &str {
        "books"
    }

    fn callbacks(&self) -> Vec<&str> {
        vec!["book", "broken"]
    }

    async fn parse(&self, page: Response, out: &mut Output<Value>) -> Result<()> {
        match page.callback() {
            Some("book") => {
                let id: u32 = page.meta("id").context("book id in meta")?;
                out.item(serde_json::json!({ "id": id, "title": page.text_of("div.product h1")? }));
            }
            Some("broken") => {
                return Err(Error::new(ErrorKind::Other, "the broken callback broke"));
            }
            _ => {
                for href in page.select("article.book h3 a").attrs("href") {
                    let id: u32 = href
                        .trim_start_matches("/catalogue/book-")
                        .trim_end_matches(".html")
                        .parse()
                        .with_context(|| format!("book id in '{href}'"))?;
                    out.follow(&href).callback("book").meta("id", id)?;
                }
                out.follow_all(page.select("li.next a").attrs("href"));
            }
        }
        Ok(())
    }
}

/// Not a test of its own: when started by the tests below, this process is the project.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parse_child() {
    let Ok(args) = std::env::var(CHILD_ARGS) else {
        return;
    };
    let args: Vec<String> = serde_json::from_str(&args).expect("args are JSON");
    let code = Runner::new().spider(Books).run_args(args).await;
    let status = if code == std::process::ExitCode::SUCCESS {
        0
    } else if code == std::process::ExitCode::from(2) {
        2
    } else {
        1
    };
    // Leave before the test harness prints its summary: stdout is the command's alone.
    std::process::exit(status);
}

/// Run this test binary as the project with `parse ARGS`.
async fn parse(dir: &Path, args: &[&str]) -> std::process::Output {
    let settings = dir.join("crawler.toml");
    std::fs::write(&settings, "").expect("write settings");
    let settings = settings.to_string_lossy().into_owned();
    // The lab at full speed unless `args` say otherwise (a later `-s` wins).
    let mut all = vec!["project", "--settings", &settings, "parse"];
    all.extend_from_slice(&["-s", "throttle=fixed", "-s", "download_delay=0s"]);
    all.extend_from_slice(args);
    let exe = std::env::current_exe().expect("test binary");
    let mut cmd = clean(Command::new(exe), dir);
    cmd.args([
        &crate::test_path(module_path!(), "parse_child"),
        "--exact",
        "--nocapture",
        "--quiet",
        "--test-threads=1",
    ])
    .env(CHILD_ARGS, serde_json::to_string(&all).expect("args"));
    run(cmd).await
}

/// The JSON document of `--json` (the harness's "running 1 test" line aside).
fn document(out: &std::process::Output) -> Value {
    let stdout = text(&out.stdout);
    let start = stdout.find("\n{").map_or(0, |i| i + 1);
    let end = stdout.rfind('}').map_or(stdout.len(), |i| i + 1);
    serde_json::from_str(stdout.get(start..end).unwrap_or_default())
        .unwrap_or_else(|e| panic!("not one JSON document ({e}): {stdout}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parse_prints_a_callbacks_items_and_requests() {
    let lab = Lab::builder().books(100).start().await.expect("lab");
    let dir = tempfile::tempdir().expect("temp dir");
    let listing = format!("{}catalogue/page-1.html", lab.url());

    // The default callback on a listing page: no items, a `book` request per book.
    let out = parse(dir.path(), &[&listing, "--spider", "books", "--json"]).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let doc = document(&out);
    assert_eq!(doc["spider"], "books");
    let pages = doc["pages"].as_array().expect("pages");
    assert_eq!(pages.len(), 1, "{doc}");
    let page = &pages[0];
    assert_eq!(page["status"], 200);
    assert_eq!(page["callback"], "parse");
    assert_eq!(page["items"].as_array().map(Vec::len), Some(0));
    let requests = page["requests"].as_array().expect("requests");
    let books: Vec<&Value> = requests
        .iter()
        .filter(|r| r["callback"] == "book")
        .collect();
    assert_eq!(books.len(), 20, "{doc}");
    assert!(
        books.iter().any(|r| r["meta"]["id"] == 1
            && r["url"]
                .as_str()
                .is_some_and(|u| u.ends_with("/catalogue/book-1.html"))),
        "{doc}"
    );
    assert!(requests.iter().any(|r| {
        r["url"]
            .as_str()
            .is_some_and(|u| u.ends_with("page-2.html"))
    }));
    // Listed, not fetched.
    assert_eq!(lab.recorder().count_prefix("/catalogue/book-"), 0);

    // A named callback with the meta its listing page would give.
    let book = format!("{}catalogue/book-4.html", lab.url());
    let out = parse(
        dir.path(),
        &[
            &book, "--spider", "books", "-c", "book", "--meta", "id=4", "--json",
        ],
    )
    .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let doc = document(&out);
    let items = doc["pages"][0]["items"].as_array().expect("items");
    let title = lab.book(4).expect("book 4").title.clone();
    assert_eq!(items, &[serde_json::json!({ "id": 4, "title": title })]);

    // The readable listing says the same.
    let out = parse(
        dir.path(),
        &[&book, "--spider", "books", "-c", "book", "-m", "id=4"],
    )
    .await;
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(stdout.contains("(callback book, depth 1)"), "{stdout}");
    assert!(
        stdout.contains("items (1):") && stdout.contains(&title),
        "{stdout}"
    );
    lab.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parse_depth_2_follows_the_requests_with_their_callbacks() {
    let lab = Lab::builder().books(100).start().await.expect("lab");
    let dir = tempfile::tempdir().expect("temp dir");
    let listing = format!("{}catalogue/page-1.html", lab.url());
    let out = parse(
        dir.path(),
        &[&listing, "--spider", "books", "--depth", "2", "--json"],
    )
    .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let doc = document(&out);
    let pages = doc["pages"].as_array().expect("pages");
    // The listing, its 20 books and the next listing page.
    assert_eq!(pages.len(), 22, "{doc}");
    let books: Vec<&Value> = pages.iter().filter(|p| p["callback"] == "book").collect();
    assert_eq!(books.len(), 20);
    for p in &books {
        assert_eq!(p["depth"], 2);
        assert_eq!(p["items"].as_array().map(Vec::len), Some(1), "{p}");
    }
    // The second listing was parsed with `parse`; its own requests listed, not followed.
    let next = pages
        .iter()
        .find(|p| {
            p["url"]
                .as_str()
                .is_some_and(|u| u.ends_with("page-2.html"))
        })
        .expect("page 2 parsed");
    assert_eq!(next["callback"], "parse");
    assert!(next["requests"].as_array().is_some_and(|r| r.len() > 20));
    assert_eq!(lab.recorder().count_prefix("/catalogue/book-"), 20);
    assert_eq!(lab.recorder().count_prefix("/catalogue/page-3"), 0);
    lab.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parse_refuses_unknown_callbacks_and_disallowed_urls_and_reports_callback_errors() {
    let lab = Lab::builder().books(100).start().await.expect("lab");
    let dir = tempfile::tempdir().expect("temp dir");
    let listing = format!("{}catalogue/page-1.html", lab.url());

    let out = parse(dir.path(), &[&listing, "--spider", "books", "-c", "bok"]).await;
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("spider 'books' has no callback 'bok' (callbacks: parse, book, broken)"),
        "{stderr}"
    );
    let out = parse(dir.path(), &[&listing, "--spider", "bookz"]).await;
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("no spider named 'bookz'") && stderr.contains("spiders: books"));
    assert!(lab.recorder().requests().is_empty(), "nothing was fetched");

    let private = format!("{}private/secret.html", lab.url());
    let out = parse(dir.path(), &[&private, "--spider", "books"]).await;
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("{private} is disallowed by")) && stderr.contains("robots.txt"),
        "{stderr}"
    );
    assert_eq!(lab.recorder().count_prefix("/private/"), 0);

    // A callback's error is printed with the page's URL, and the exit status says so.
    let out = parse(dir.path(), &[&listing, "--spider", "books", "-c", "broken"]).await;
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("{listing} (callback broken): spider error"))
            && stderr.contains("the broken callback broke"),
        "{stderr}"
    );
    lab.shutdown().await;
}

/// Followed pages on one host are paced as a crawl paces them: `download_delay` apart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parse_paces_followed_pages_on_one_host() {
    let lab = Lab::builder().books(100).start().await.expect("lab");
    let dir = tempfile::tempdir().expect("temp dir");
    let listing = format!("{}catalogue/page-1.html", lab.url());
    let out = parse(
        dir.path(),
        &[
            &listing,
            "--spider",
            "books",
            "--depth",
            "2",
            "--max-pages",
            "3",
            "--json",
            "-s",
            "download_delay=400ms",
        ],
    )
    .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(document(&out)["pages"].as_array().map(Vec::len), Some(3));
    let pages: Vec<_> = lab
        .recorder()
        .requests()
        .into_iter()
        .filter(|r| r.path.starts_with("/catalogue/"))
        .collect();
    assert_eq!(pages.len(), 3);
    for pair in pages.windows(2) {
        let gap = pair[1].at.saturating_sub(pair[0].replied_at);
        assert!(
            gap >= std::time::Duration::from_millis(350),
            "{} then {} only {gap:?} apart",
            pair[0].path,
            pair[1].path
        );
    }
    lab.shutdown().await;
}
