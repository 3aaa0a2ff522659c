//! `crawler shell` and a project runner's `shell`, in their non-interactive modes (`--css`,
//! commands piped to stdin), against the lab on 127.0.0.1.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use crawler::prelude::*;
use crawler_cli::Runner;
use crawler_lab::Lab;

use crate::support;
use support::{crawler, project, text};

/// Run `cmd` with `input` on its stdin, on a blocking thread (the lab is served by this
/// test's runtime).
async fn run(mut cmd: Command, input: &str) -> std::process::Output {
    let input = input.to_owned();
    tokio::task::spawn_blocking(move || {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("command starts");
        let mut stdin = child.stdin.take().expect("stdin piped");
        stdin.write_all(input.as_bytes()).expect("commands written");
        drop(stdin);
        child.wait_with_output().expect("command runs")
    })
    .await
    .expect("command thread")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn css_prints_the_selection_with_the_project_settings_and_exits() {
    let lab = Lab::builder().books(100).start().await.unwrap();
    let dir = project(
        "[general]\nuser_agent = \"shelltest/1.0 (+http://127.0.0.1/)\"\n\n\
         [middlewares]\ndefault_headers = [\"X-Crawl-Tag: from-crawler-toml\"]\n",
    );
    let book = lab.book(3).unwrap();
    let url = lab.url_for(&book.path);
    let out = run(
        crawler(
            dir.path(),
            &[
                "shell",
                &url,
                "--css",
                "div.product h1",
                "--css",
                "p.price::text",
                "--css",
                "normalize-space(//div[contains(@class, 'product')]/h1)",
            ],
        ),
        "status\n",
    )
    .await;
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    // Only the selections: --css leaves stdin alone, and the summary is not printed. An
    // XPath is read as XPath.
    assert_eq!(
        text(&out.stdout),
        format!("{}\n{}\n{}\n", book.title, book.price, book.title)
    );
    // The project's settings and its default_headers middleware made the request.
    let seen = lab.recorder().requests();
    let page = seen
        .iter()
        .find(|r| r.path == book.path)
        .expect("the page was fetched");
    assert_eq!(page.tag.as_deref(), Some("from-crawler-toml"));
    assert!(
        page.user_agent
            .as_deref()
            .is_some_and(|ua| ua.starts_with("shelltest/1.0")),
        "{page:?}"
    );
    assert!(
        seen.iter().any(|r| r.path == "/robots.txt"),
        "robots.txt is checked first"
    );

    // A bad --css selector is a usage error, found before anything is sent.
    let before = lab.recorder().requests().len();
    let out = run(crawler(dir.path(), &["shell", &url, "--css", "h1["]), "").await;
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("invalid CSS selector 'h1['"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(lab.recorder().requests().len(), before);
    lab.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn piped_commands_select_follow_and_view() {
    let lab = Lab::builder().books(100).start().await.unwrap();
    let dir = project("");
    let start = lab.url_for("/catalogue/page-1.html");
    let first = lab.book(1).unwrap();
    let commands = "\
# a comment, then a list of the page's book titles
article.book h3 a::attr(title)
status
h1[
follow 0
div.product h1
url
view
follow /private/secret.html
status
quit
status
";
    let out = run(crawler(dir.path(), &["shell", &start]), commands).await;
    let stdout = text(&out.stdout);
    let stderr = text(&out.stderr);
    // Two commands failed (the selector, the refused link): reported, and the exit status
    // says so, but every other command ran.
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    assert!(
        stderr.contains("error: 2 shell command(s) failed"),
        "{stderr}"
    );
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 20 + 5, "{stdout}");
    let titles: Vec<String> = (1..=20).map(|id| lab.book(id).unwrap().title).collect();
    assert_eq!(lines[..20], titles, "{stdout}");
    assert_eq!(lines[20], "200");
    // `follow 0` opened the first title's link: the book's page.
    assert_eq!(lines[21], first.title);
    assert_eq!(lines[22], lab.url_for(&first.path));
    let saved = Path::new(lines[23]);
    let body = std::fs::read_to_string(saved).expect("view saved the body");
    std::fs::remove_file(saved).expect("remove the saved body");
    assert!(saved.extension().is_some_and(|e| e == "html"), "{saved:?}");
    assert!(
        body.contains(&format!("<div class=\"product\"><h1>{}</h1>", first.title)),
        "{body}"
    );
    // The refused link left the book page current; nothing ran after `quit`.
    assert_eq!(lines[24], "200");
    assert!(
        stderr.contains("error: invalid CSS selector 'h1['"),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("[200] {}", lab.url_for(&first.path))),
        "the follow's summary: {stderr}"
    );
    assert!(
        stderr.contains("/private/secret.html is disallowed by")
            && stderr.contains("(rule `Disallow: /private/`)"),
        "{stderr}"
    );
    assert_eq!(lab.recorder().count_prefix("/private/"), 0);
    lab.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disallowed_start_page_is_refused_with_the_rule() {
    let lab = Lab::builder().books(100).start().await.unwrap();
    let dir = project("");
    let private = lab.url_for("/private/secret.html");
    let out = run(crawler(dir.path(), &["shell", &private]), "status\n").await;
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(text(&out.stdout).is_empty(), "{}", text(&out.stdout));
    assert!(
        stderr.contains(&format!(
            "{private} is disallowed by {} for user agent 'crawler' (rule `Disallow: /private/`)",
            lab.url_for("/robots.txt")
        )),
        "{stderr}"
    );
    assert_eq!(lab.recorder().count_prefix("/private/"), 0);

    // A page that does not answer: a named failure, exit 1.
    let out = run(crawler(dir.path(), &["shell", "http://127.0.0.1:9/"]), "").await;
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("error: http://127.0.0.1:9/: not fetched"),
        "{}",
        text(&out.stderr)
    );
    lab.shutdown().await;
}

/// A spider whose custom settings the runner's `shell --spider` applies.
struct Tagged;

impl Spider for Tagged {
    type Item = String;

    fn name(&self) -> &str {
        "tagged"
    }

    fn custom_settings(&self) -> Vec<(&'static str, String)> {
        vec![
            ("user_agent", "taggedbot/2.0 (+http://127.0.0.1/)".into()),
            ("default_headers", "X-Crawl-Tag: from-the-spider".into()),
        ]
    }

    async fn parse(&self, _page: Response, _out: &mut Output<String>) -> Result<()> {
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_project_runner_has_the_shell_with_its_spiders_settings() {
    let lab = Lab::builder().books(100).start().await.unwrap();
    let book = lab.book(5).unwrap();
    let url = lab.url_for(&book.path);
    let dir = project("");
    let settings = dir.path().join("crawler.toml");
    let settings = settings.to_string_lossy();
    let args = |spider: &str| {
        vec![
            "project".to_owned(),
            "--settings".to_owned(),
            settings.to_string(),
            "shell".to_owned(),
            url.clone(),
            "--css".to_owned(),
            "h1".to_owned(),
            "--spider".to_owned(),
            spider.to_owned(),
        ]
    };
    let code = Runner::new().spider(Tagged).run_args(args("tagged")).await;
    assert_eq!(code, std::process::ExitCode::SUCCESS);
    let seen = lab.recorder().requests();
    let page = seen
        .iter()
        .find(|r| r.path == book.path)
        .expect("the page was fetched");
    assert_eq!(page.tag.as_deref(), Some("from-the-spider"));
    assert!(
        page.user_agent
            .as_deref()
            .is_some_and(|ua| ua.starts_with("taggedbot/2.0")),
        "{page:?}"
    );

    let code = Runner::new().spider(Tagged).run_args(args("taged")).await;
    assert_eq!(code, std::process::ExitCode::from(2));
    assert_eq!(
        lab.recorder().count_prefix(&book.path),
        1,
        "an unknown spider sends nothing"
    );
    lab.shutdown().await;
}
