//! The `crawler` binary and the project runner, end to end against the lab on 127.0.0.1.

use std::path::PathBuf;
use std::process::Command;

use crawler_lab::Lab;

use crate::support;
use support::{crawler, project, run, text};

#[tokio::test]
async fn settings_verb_finds_the_project_file_and_shows_every_source() {
    let dir = project("[throttle]\nstart_rate = 2\nburst = 3\n\n[general]\nconcurrency = 5\n");
    // Run from a subdirectory: the file is found beside the nearest Cargo.toml.
    let mut cmd = crawler(&dir.path().join("src"), &["settings", "-s", "burst=7"]);
    cmd.env("CRAWLER_CONCURRENCY", "9");
    let out = run(cmd).await;
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let row = |key: &str| {
        stdout
            .lines()
            .find(|l| l.split_whitespace().next() == Some(key))
            .unwrap_or_else(|| panic!("{key} missing:\n{stdout}"))
            .to_owned()
    };
    assert!(row("start_rate").contains("2.0"), "{stdout}");
    assert!(row("start_rate").ends_with("crawler.toml:2)"), "{stdout}");
    assert!(row("burst").contains(" 7 "), "{stdout}");
    assert!(row("burst").ends_with("(command line)"), "{stdout}");
    assert!(
        row("concurrency").ends_with("(env CRAWLER_CONCURRENCY)"),
        "{stdout}"
    );
    assert!(row("max_rate").ends_with("(default)"), "{stdout}");
    assert!(stdout.starts_with("# settings file: "), "{stdout}");
}

#[tokio::test]
async fn settings_errors_exit_2_with_file_line_and_column() {
    let dir = project("[general]\nconcurency = 4\n");
    let out = run(crawler(dir.path(), &["settings"])).await;
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("crawler.toml:2:1: unknown setting 'concurency'"),
        "{stderr}"
    );
    assert!(stderr.contains("did you mean 'concurrency'"), "{stderr}");

    let out = run(crawler(
        dir.path(),
        &["--settings", "/nonexistent/x.toml", "settings"],
    ))
    .await;
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("cannot read settings file"),
        "{}",
        text(&out.stderr)
    );

    let ok = project("");
    let out = run(crawler(ok.path(), &["settings", "-s", "concurrency=lots"])).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("invalid value 'lots' for concurrency"),
        "{}",
        text(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fetch_robots_and_sitemap_against_the_lab() {
    let lab = Lab::builder().books(100).start().await.unwrap();
    let dir = project("");
    let book = lab.book(1).unwrap();

    // fetch: status, headers, body.
    let url = lab.url_for(&book.path);
    let out = run(crawler(dir.path(), &["fetch", &url])).await;
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(stdout.starts_with(&format!("HTTP 200 {url}\n")), "{stdout}");
    assert!(
        stdout
            .to_ascii_lowercase()
            .contains("content-type: text/html"),
        "{stdout}"
    );
    assert!(stdout.contains("<div class=\"product\">"), "{stdout}");

    // fetch --css: just the selection's text.
    let out = run(crawler(
        dir.path(),
        &["fetch", &url, "--css", "div.product h1", "--no-headers"],
    ))
    .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim(), book.title);

    // fetch obeys robots.txt: nothing is sent to /private/.
    let private = lab.url_for("/private/secret.html");
    let out = run(crawler(dir.path(), &["fetch", &private])).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("disallowed by robots.txt"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(lab.recorder().count_prefix("/private/"), 0);

    // robots: verdict, rule, sitemaps.
    let out = run(crawler(
        dir.path(),
        &["robots", &private, "--agent", "mybot"],
    ))
    .await;
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(stdout.contains("allowed:     no"), "{stdout}");
    assert!(stdout.contains("Disallow: /private/"), "{stdout}");
    assert!(stdout.contains("agent:       mybot"), "{stdout}");
    assert!(
        stdout.contains(&format!("sitemap:     {}", lab.url_for("/sitemap.xml"))),
        "{stdout}"
    );
    let out = run(crawler(dir.path(), &["robots", &url])).await;
    assert!(
        text(&out.stdout).contains("allowed:     yes"),
        "{}",
        text(&out.stdout)
    );

    // sitemap: from the site root, through robots.txt and the index, every book with lastmod.
    let out = run(crawler(dir.path(), &["sitemap", &lab.url()])).await;
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 100, "{stdout}");
    let first = lines
        .iter()
        .find(|l| l.starts_with(&format!("{}\t", url)))
        .unwrap_or_else(|| panic!("{url} not listed:\n{stdout}"));
    let lastmod = first.split('\t').nth(1).unwrap();
    assert!(lastmod.ends_with('Z') && lastmod.len() == 20, "{first}");

    // sitemap runs as a crawl: robots.txt is obeyed for the sitemaps too.
    let private = lab.url_for("/private/sitemap.xml");
    let out = run(crawler(dir.path(), &["sitemap", &private])).await;
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("1 disallowed by robots.txt"), "{stderr}");
    assert!(text(&out.stdout).is_empty());
    assert_eq!(lab.recorder().count_prefix("/private/"), 0);
    lab.shutdown().await;
}

#[tokio::test]
async fn bench_off_a_terminal_logs_periodic_progress_lines_as_json() {
    let dir = project("");
    // stderr is a pipe here, so the live display must give way to log lines. A small delay
    // keeps the crawl long enough for several intervals.
    let out = run(crawler(
        dir.path(),
        &[
            "bench",
            "--books",
            "100",
            "--concurrency",
            "2",
            "-s",
            "download_delay=20ms",
            "-s",
            "progress_interval=250ms",
            "--log-format",
            "json",
        ],
    ))
    .await;
    let stdout = text(&out.stdout);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stdout.contains("pages/s"), "{stdout}");
    assert!(stdout.contains("100 items"), "{stdout}");
    let progress: Vec<serde_json::Value> = stderr
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .filter(|v: &serde_json::Value| {
            v["fields"]["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("progress: "))
        })
        .collect();
    assert!(
        progress.len() >= 3,
        "expected periodic progress lines:\n{stderr}"
    );
    assert!(
        !stderr.contains('\u{1b}'),
        "no terminal drawing off a terminal:\n{stderr}"
    );
    assert!(
        !stderr.contains("user_agent is still the default"),
        "bench names itself"
    );
}

fn cargo() -> String {
    std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned())
}

/// The commands `crawler new` prints after "created project", comments and `&` removed.
fn printed_commands(stdout: &str) -> Vec<Vec<String>> {
    stdout
        .lines()
        .skip_while(|l| !l.starts_with("created project"))
        .skip(1)
        .map(|l| {
            l.split('#')
                .next()
                .unwrap_or("")
                .trim()
                .trim_end_matches('&')
        })
        .filter(|l| !l.is_empty())
        .map(|l| l.split_whitespace().map(str::to_owned).collect())
        .collect()
}

/// Kills the lab started as a child process when the test ends, whatever happens.
struct Child(std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The first five minutes, as printed: `crawler new`, then the commands it prints, run as
/// printed (the lab on its default port, `cargo run -- crawl ...` in the project), and the
/// feed checked. The build and the crawl are timed (run with `--nocapture` to see them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_project_builds_and_its_spider_crawls_the_lab() {
    let tmp = tempfile::tempdir().unwrap();
    let out = run(crawler(tmp.path(), &["new", "demo"])).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let demo = tmp.path().join("demo");
    for f in [
        "Cargo.toml",
        "crawler.toml",
        "src/main.rs",
        "src/spiders/books.rs",
        "README.md",
    ] {
        assert!(demo.join(f).is_file(), "{f} missing");
    }
    let manifest = std::fs::read_to_string(demo.join("Cargo.toml")).unwrap();
    assert!(manifest.contains(env!("CARGO_MANIFEST_DIR")), "{manifest}");

    let printed = printed_commands(&text(&out.stdout));
    let words = |i: usize| printed.get(i).map(|w| w.join(" ")).unwrap_or_default();
    assert_eq!(words(0), "cd demo", "{printed:?}");
    assert!(words(1).starts_with("crawler lab"), "{printed:?}");
    assert!(
        words(2).starts_with("cargo run -- crawl books"),
        "{printed:?}"
    );

    // `crawler lab &`: this package's binary, as the printed command runs it. It serves
    // 127.0.0.1:8080, the address the scaffold's spider and its `[[hosts]]` rule name. When
    // something else holds that port (a developer's own lab), the lab goes on a free port
    // and the crawl is pointed at it with `-a url=`, with the budget the rule would give.
    let mut lab_args: Vec<String> = printed[1][1..].to_vec();
    let mut crawl_args: Vec<String> = printed[2][1..].to_vec();
    let port = if std::net::TcpStream::connect("127.0.0.1:8080").is_ok() {
        let free = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        eprintln!("127.0.0.1:8080 is taken: the lab runs on {free} instead");
        lab_args.extend(["--port".to_owned(), free.to_string()]);
        for a in [
            "-a".to_owned(),
            format!("url=http://127.0.0.1:{free}/"),
            "-s".to_owned(),
            "throttle=fixed".to_owned(),
            "-s".to_owned(),
            "download_delay=0s".to_owned(),
            "-s".to_owned(),
            "concurrency_per_host=16".to_owned(),
        ] {
            crawl_args.push(a);
        }
        free
    } else {
        8080
    };
    let mut lab_cmd = crawler(
        &demo,
        &lab_args.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    lab_cmd
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let _lab = Child(lab_cmd.spawn().expect("crawler lab starts"));
    let up = std::time::Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            up.elapsed().as_secs() < 30,
            "the lab did not listen within 30 s"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }

    // `cargo run -- crawl books -o books.jsonl`: built in a target dir of its own (this
    // test's cargo holds the workspace's), kept between runs; offline, from the framework's
    // copied Cargo.lock.
    let target = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("scaffold-target");
    let started = std::time::Instant::now();
    let build = || {
        let mut build = Command::new(cargo());
        build
            .current_dir(&demo)
            .args(["build", "--quiet"])
            .env("CARGO_NET_OFFLINE", "true")
            .env("CARGO_TARGET_DIR", &target)
            .env_remove("RUSTFLAGS");
        build
    };
    let out = run(build()).await;
    assert!(
        out.status.success(),
        "scaffold build failed:\n{}",
        text(&out.stderr)
    );
    let built = started.elapsed();
    let mut crawl = Command::new(cargo());
    crawl
        .current_dir(&demo)
        .args(&crawl_args)
        .env("CARGO_NET_OFFLINE", "true")
        .env("CARGO_TARGET_DIR", &target)
        .env_remove("RUSTFLAGS")
        .env_remove("RUST_LOG");
    for (k, _) in std::env::vars() {
        if k.starts_with("CRAWLER_") {
            crawl.env_remove(k);
        }
    }
    let out = run(crawl).await;
    let crawled = started.elapsed() - built;
    eprintln!(
        "crawler new to a complete feed: build {:.1} s, crawl {:.1} s",
        built.as_secs_f64(),
        crawled.as_secs_f64()
    );
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    assert!(stdout.contains("1000 scraped"), "{stdout}");
    let items = std::fs::read_to_string(demo.join("books.jsonl")).unwrap();
    assert_eq!(items.lines().count(), 1000);
    let first: serde_json::Value = serde_json::from_str(items.lines().next().unwrap()).unwrap();
    assert!(
        first["title"].as_str().is_some_and(|t| !t.is_empty()),
        "{first}"
    );
    let bin = target.join("debug").join("demo");

    let project_cmd = |args: &[&str]| {
        let mut cmd = Command::new(&bin);
        cmd.current_dir(&demo).args(args).env_remove("RUST_LOG");
        for (k, _) in std::env::vars() {
            if k.starts_with("CRAWLER_") {
                cmd.env_remove(k);
            }
        }
        cmd
    };

    let out = run(project_cmd(&["list"])).await;
    assert_eq!(text(&out.stdout).trim(), "books");

    let out = run(project_cmd(&["settings", "books"])).await;
    let stdout = text(&out.stdout);
    assert!(
        stdout.lines().any(|l| l.contains("user_agent")
            && l.contains("demo/0.1")
            && l.contains("crawler.toml:")),
        "{stdout}"
    );

    let url_arg = format!("url=http://127.0.0.1:{port}/");
    let out = run(project_cmd(&["check", "-a", &url_arg])).await;
    assert!(
        out.status.success(),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    assert!(
        text(&out.stdout).contains("books: ok"),
        "{}",
        text(&out.stdout)
    );

    // The shell fetches with the project's settings: crawler.toml's User-Agent (a lab of
    // this test's own, whose recorder sees the request).
    let lab = Lab::builder().books(100).start().await.unwrap();
    let book = lab.book(2).unwrap();
    let page = lab.url_for(&book.path);
    let out = run(project_cmd(&["shell", &page, "--css", "div.product h1"])).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim(), book.title);
    assert!(
        lab.recorder().requests().iter().any(|r| r.path == book.path
            && r.user_agent
                .as_deref()
                .is_some_and(|ua| ua.contains("demo/0.1"))),
        "the shell's request carries the project's User-Agent"
    );
    lab.shutdown().await;

    let out = run(project_cmd(&["crawl", "nosuch"])).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("no spider named 'nosuch'"));

    let out = run(project_cmd(&["crawl", "books", "-a", "ur=x"])).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("did you mean 'url'"),
        "{}",
        text(&out.stderr)
    );

    // The scaffold leaves the fleet out: a crawl that asks for one is refused with the
    // feature to turn on, and nothing is fetched.
    let out = run(project_cmd(&[
        "crawl",
        "books",
        "-a",
        &url_arg,
        "-s",
        "redis_url=redis://127.0.0.1:9/",
    ]))
    .await;
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("without the `redis` feature"),
        "{}",
        text(&out.stderr)
    );

    // genspider adds a spider file and registers its module.
    let listing = format!("http://127.0.0.1:{port}/catalogue/page-1.html");
    let out = run(crawler(
        &demo.join("src"),
        &["genspider", "quotes", &listing],
    ))
    .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(demo.join("src/spiders/quotes.rs").is_file());
    let module = std::fs::read_to_string(demo.join("src/spiders/mod.rs")).unwrap();
    assert!(module.contains("pub mod quotes;"), "{module}");
    let register = ".spider(spiders::quotes::Quotes)";
    assert!(text(&out.stdout).contains(register));

    // Registered as printed, the generated spider builds and follows the catalogue's
    // "next" chain to its last page (50 pages of 20 books): a depth limit in the template
    // once stopped it at the third.
    let main_rs = demo.join("src/main.rs");
    let source = std::fs::read_to_string(&main_rs).unwrap();
    let books = ".spider(spiders::books::Books::default())";
    assert!(source.contains(books), "{source}");
    std::fs::write(
        &main_rs,
        source.replace(books, &format!("{books}{register}")),
    )
    .unwrap();
    let out = run(build()).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = run(project_cmd(&[
        "crawl",
        "quotes",
        "-O",
        "quotes.jsonl",
        "-s",
        "throttle=fixed",
        "-s",
        "download_delay=0s",
        "--no-progress",
    ]))
    .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let pages = std::fs::read_to_string(demo.join("quotes.jsonl")).unwrap();
    assert_eq!(pages.lines().count(), 50, "{pages}");
    assert!(pages.contains("/catalogue/page-50.html"), "{pages}");
}
