//! A project's `Runner` in process against the lab on 127.0.0.1: a spider registered with a
//! pipeline, spider arguments (`-a`), and a spider that reads the effective settings.

use std::path::Path;
use std::process::ExitCode;

use crawler::prelude::*;
use crawler_cli::{Contract, Runner};
use crawler_lab::Lab;

#[derive(Debug, Serialize, serde::Deserialize)]
struct Book {
    id: u32,
    title: String,
    tag: String,
    depth_limit: u32,
}

/// Follows the first `limit` books of the catalogue's first page (all 20 by default).
#[derive(Default)]
struct Books {
    start: String,
    limit: usize,
    tag: String,
    depth_limit: u32,
}

impl Spider for Books {
    type Item = Book;

    fn name(&self) -> &str {
        "books"
    }

    fn open(&mut self, ctx: &SpiderContext) -> Result<()> {
        self.start = ctx.required_arg("url")?.to_owned();
        self.limit = ctx.parse_arg("limit")?.unwrap_or(20);
        self.tag = ctx.arg("tag").unwrap_or_default().to_owned();
        self.depth_limit = ctx.settings().depth_limit;
        Ok(())
    }

    fn start_urls(&self) -> Vec<String> {
        vec![format!("{}catalogue/page-1.html", self.start)]
    }

    async fn parse(&self, page: Response, out: &mut Output<Book>) -> Result<()> {
        if page.callback() == Some("book") {
            out.item(Book {
                id: page.meta("id").context("book id in meta")?,
                title: page.text_of("div.product h1")?,
                tag: self.tag.clone(),
                depth_limit: self.depth_limit,
            });
            return Ok(());
        }
        for href in page
            .select("article.book h3 a")
            .attrs("href")
            .take(self.limit)
        {
            let id: u32 = href
                .trim_start_matches("/catalogue/book-")
                .trim_end_matches(".html")
                .parse()
                .with_context(|| format!("book id in '{href}'"))?;
            out.follow(&href).callback("book").meta("id", id)?;
        }
        Ok(())
    }
}

/// Drops the books with an odd id.
struct EvenOnly;

impl Pipeline<Book> for EvenOnly {
    async fn process(&self, item: Book) -> Result<Processed<Book>> {
        Ok(if item.id.is_multiple_of(2) {
            Processed::Keep(item)
        } else {
            Processed::Drop(format!("book {} has an odd id", item.id))
        })
    }
}

/// Run the runner with `args` after the program name, in a settings-free directory, with
/// the lab's budget lifted (our own server on loopback).
async fn run(runner: Runner, dir: &Path, args: &[&str]) -> ExitCode {
    let settings = dir.join("crawler.toml");
    std::fs::write(&settings, "").expect("write settings");
    let settings = settings.to_string_lossy().into_owned();
    let mut argv = vec!["project", "--settings", &settings];
    argv.extend_from_slice(args);
    argv.extend_from_slice(&[
        "-s",
        "throttle=fixed",
        "-s",
        "download_delay=0s",
        "-s",
        "concurrency_per_host=8",
        "--no-progress",
    ]);
    runner.run_args(argv).await
}

fn items(path: &Path) -> Vec<Book> {
    std::fs::read_to_string(path)
        .expect("feed written")
        .lines()
        .map(|l| serde_json::from_str(l).expect("valid JSON line"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_spider_with_a_pipeline_arguments_and_settings() {
    let lab = Lab::builder().books(100).start().await.expect("lab starts");
    let dir = tempfile::tempdir().expect("tempdir");
    let feed = dir.path().join("books.jsonl");
    let url = format!("url={}", lab.url());
    let feed_arg = feed.to_string_lossy().into_owned();

    let runner = Runner::new().spider_with(Books::default(), |crawl| crawl.pipeline(EvenOnly));
    let code = run(
        runner,
        dir.path(),
        &[
            "crawl",
            "books",
            "-a",
            &url,
            "-a",
            "limit=6",
            "-a",
            "tag=run-1",
            "-O",
            &feed_arg,
            "-s",
            "depth_limit=3",
        ],
    )
    .await;
    assert_eq!(code, ExitCode::SUCCESS);
    let books = items(&feed);
    // Six books followed (`-a limit=6`), the three with an odd id dropped by the pipeline.
    let mut ids: Vec<u32> = books.iter().map(|b| b.id).collect();
    ids.sort_unstable();
    assert_eq!(ids, [2, 4, 6]);
    let book = lab.book(4).expect("book 4");
    assert!(books.iter().any(|b| b.title == book.title));
    assert!(
        books.iter().all(|b| b.tag == "run-1"),
        "-a tag reached the spider"
    );
    assert!(
        books.iter().all(|b| b.depth_limit == 3),
        "the spider read the effective settings"
    );
    assert_eq!(lab.recorder().count_prefix("/catalogue/book-"), 6);

    // The same spider registered without the pipeline keeps every book.
    let code = run(
        Runner::new().spider(Books::default()),
        dir.path(),
        &[
            "crawl", "books", "-a", &url, "-a", "limit=5", "-O", &feed_arg,
        ],
    )
    .await;
    assert_eq!(code, ExitCode::SUCCESS);
    assert_eq!(items(&feed).len(), 5);
    lab.shutdown().await;
}

#[tokio::test]
async fn bad_spider_arguments_are_usage_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let usage = ExitCode::from(2);
    for args in [
        // No `=`: refused while parsing the command line.
        &["crawl", "books", "-a", "limit"][..],
        // A name the spider does not read.
        &[
            "crawl",
            "books",
            "-a",
            "url=http://127.0.0.1:9/",
            "-a",
            "limt=5",
        ],
        // A value the spider cannot use.
        &[
            "crawl",
            "books",
            "-a",
            "url=http://127.0.0.1:9/",
            "-a",
            "limit=many",
        ],
        // A required argument missing.
        &["crawl", "books"],
        // `check` takes arguments too.
        &["check", "books", "-a", "limit"],
    ] {
        let code = run(Runner::new().spider(Books::default()), dir.path(), args).await;
        assert_eq!(code, usage, "{args:?}");
    }
}

/// A contract's meta reaches the callback: the spider's `book` callback fails without the
/// `id` its listing page puts in meta, so the check passes only if the contract carried it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_contracts_meta_reaches_the_callback() {
    let lab = Lab::builder().books(100).start().await.expect("lab starts");
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("url={}", lab.url());
    let book = || {
        Contract::url("book-4.html")
            .callback("book")
            .returns_items(1, 1)
            .scrapes(["title"])
    };
    let check = |contract: Contract| {
        let runner = Runner::new()
            .spider(Books::default())
            .contract("books", contract);
        // `check` takes no `-s` (the crawl's pacing does not apply to its one request).
        let settings = dir.path().join("crawler.toml");
        let url = url.clone();
        async move {
            std::fs::write(&settings, "").expect("write settings");
            let settings = settings.to_string_lossy().into_owned();
            let argv = [
                "project",
                "--settings",
                &settings,
                "check",
                "books",
                "-a",
                &url,
            ];
            runner.run_args(argv).await
        }
    };
    assert_eq!(
        check(book().meta("id", 4u32)).await,
        ExitCode::SUCCESS,
        "the callback read the id from meta"
    );
    // Without it the callback's `page.meta("id")` is `None`: a spider error, the check fails.
    assert_eq!(check(book()).await, ExitCode::FAILURE);
    // A value that does not serialise fails the check rather than being dropped silently.
    let unserialisable: std::collections::HashMap<(u8, u8), u8> = [((1, 2), 3)].into();
    assert_eq!(
        check(book().meta("id", 4u32).meta("pair", unserialisable)).await,
        ExitCode::FAILURE
    );
    lab.shutdown().await;
}
