//! Middlewares through the real stack and the lab: a direct answer skips the network, a drop
//! ends the request with its reason, auth goes to one domain only, the referer policy,
//! cookies off by setting.

#![allow(clippy::unwrap_used)]

#[allow(dead_code)]
#[path = "../examples/login.rs"]
mod login;

use crawler::core::{Action, Bytes, DownloaderMiddleware, HeaderMap};
use crawler::prelude::*;
use crawler_lab::Lab;

/// Follows listing and book links from its start URLs; one item (the path) per book page.
struct Pages {
    starts: Vec<String>,
    follow: bool,
}

impl Spider for Pages {
    type Item = String;
    fn name(&self) -> &str {
        "pages"
    }
    fn start_urls(&self) -> Vec<String> {
        self.starts.clone()
    }
    async fn parse(&self, page: Response, out: &mut Output<String>) -> Result<()> {
        if let Some(h1) = page.select_first("div.product h1") {
            out.item(format!("{} {}", page.url().path(), h1.text()));
        }
        if self.follow {
            out.follow_all(page.select("article.book h3 a").attrs("href"));
        }
        Ok(())
    }
}

fn fast<S: Spider>(crawl: Crawl<S>) -> Crawl<S> {
    crawl
        .set("concurrency_per_host", "16")
        .set("throttle", "fixed")
        .set("download_delay", "0s")
        .progress(false)
}

fn book_id(path: &str) -> Option<u32> {
    path.strip_prefix("/catalogue/book-")?
        .strip_suffix(".html")?
        .parse()
        .ok()
}

/// Answers book pages with an even id itself and drops those over 15.
struct Gate;

impl DownloaderMiddleware for Gate {
    fn name(&self) -> &str {
        "gate"
    }
    async fn process_request(&self, request: &mut Request) -> Action {
        let Some(id) = book_id(request.url.path()) else {
            return Action::Continue;
        };
        if id > 15 {
            return Action::Drop(format!("book {id} is out of scope"));
        }
        if id % 2 == 0 {
            let html = format!("<html><div class=\"product\"><h1>canned {id}</h1></div></html>");
            let mut headers = HeaderMap::new();
            headers.insert("content-type", "text/html".parse().unwrap());
            return Action::Respond(Response::new(
                request.clone(),
                request.url.clone(),
                200,
                headers,
                Bytes::from(html),
            ));
        }
        Action::Continue
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn respond_skips_the_network_and_drop_fails_with_the_reason() {
    let lab = Lab::builder().books(100).start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let failures = dir.path().join("failures.jsonl");
    let stats = fast(Crawl::new(Pages {
        starts: vec![lab.url_for("/catalogue/page-1.html")],
        follow: true,
    }))
    .downloader_middleware(Gate)
    .set("failures_file", failures.to_str().unwrap())
    .run()
    .await
    .unwrap();

    // Page 1 lists books 1..=20: 2, 4, .., 14 answered locally, 16..=20 dropped.
    let recorded = lab.recorder().requests();
    let fetched: Vec<u32> = recorded.iter().filter_map(|r| book_id(&r.path)).collect();
    let mut fetched_sorted = fetched.clone();
    fetched_sorted.sort_unstable();
    assert_eq!(
        fetched_sorted,
        [1, 3, 5, 7, 9, 11, 13, 15],
        "only odd ids reach the server"
    );
    assert_eq!(stats.items_scraped, 15, "{stats}");
    assert_eq!(stats.failed.get("other"), Some(&5), "{stats}");
    assert_eq!(stats.retries, 0, "a drop is not retried");
    assert!(stats.reconciles(), "{stats:?}");
    let log = std::fs::read_to_string(&failures).unwrap();
    assert_eq!(log.lines().count(), 5);
    assert!(
        log.contains("dropped by middleware gate: book 16 is out of scope"),
        "{log}"
    );
    let gate = &stats.middlewares["downloader:gate"];
    assert_eq!((gate["responded"], gate["dropped"]), (7, 5), "{gate:?}");
    lab.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_auth_goes_only_to_the_chosen_domain() {
    let ours = Lab::builder().books(100).start().await.unwrap();
    let theirs = Lab::builder().books(100).start().await.unwrap();
    // The same machine under another name: a different domain to the crawler.
    let theirs_url = format!(
        "http://localhost:{}/catalogue/page-1.html",
        theirs.addr().port()
    );
    let stats = fast(Crawl::new(Pages {
        starts: vec![ours.url_for("/catalogue/page-1.html"), theirs_url],
        follow: false,
    }))
    .set("http_auth_domain", "127.0.0.1")
    .set("http_auth_user", "reader")
    .set("http_auth_pass", "books")
    .run()
    .await
    .unwrap();
    assert_eq!(stats.fetched, 2, "{stats}");
    let page = |lab: &Lab| {
        lab.recorder()
            .requests()
            .into_iter()
            .find(|r| r.path == "/catalogue/page-1.html")
            .unwrap()
    };
    assert_eq!(
        page(&ours).authorization.as_deref(),
        Some("Basic cmVhZGVyOmJvb2tz")
    );
    assert_eq!(page(&theirs).authorization, None);
    assert_eq!(stats.middlewares["downloader:http_auth"]["auth_sent"], 1);
    ours.shutdown().await;
    theirs.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_referer_policy_decides_what_follow_ups_carry() {
    for (policy, expect) in [
        ("default", Some("page")),
        ("origin", Some("origin")),
        ("no-referrer", None),
    ] {
        let lab = Lab::builder().books(100).start().await.unwrap();
        let stats = fast(Crawl::new(Pages {
            starts: vec![lab.url_for("/catalogue/page-1.html")],
            follow: true,
        }))
        .set("referer_policy", policy)
        .run()
        .await
        .unwrap();
        assert_eq!(stats.items_scraped, 20, "{policy}: {stats}");
        let want = match expect {
            Some("page") => Some(lab.url_for("/catalogue/page-1.html")),
            Some(_) => Some(lab.url()),
            None => None,
        };
        let books: Vec<_> = lab
            .recorder()
            .requests()
            .into_iter()
            .filter(|r| book_id(&r.path).is_some())
            .collect();
        assert_eq!(books.len(), 20);
        for r in books {
            assert_eq!(r.referer, want, "{policy}");
        }
        lab.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cookies_can_be_switched_off_and_the_user_agent_follows_the_settings() {
    let lab = Lab::builder().books(100).start().await.unwrap();
    // With cookies off the login form's CSRF cookie never comes back: the POST is refused.
    let spider = login::Login {
        base: lab.url(),
        username: crawler_lab::USERNAME.into(),
        password: crawler_lab::PASSWORD.into(),
    };
    let stats = fast(Crawl::new(spider))
        .set("cookies_enabled", "false")
        .set("user_agent", "politebot/2.0")
        .run()
        .await
        .unwrap();
    assert_eq!(stats.items_scraped, 0, "{stats}");
    let recorded = lab.recorder().requests();
    let post = recorded.iter().find(|r| r.method == "POST").unwrap();
    assert_eq!(post.status, 403);
    assert!(recorded.iter().all(|r| r.cookie.is_none()));
    assert!(
        recorded
            .iter()
            .all(|r| r.user_agent.as_deref() == Some("politebot/2.0"))
    );
    assert!(!stats.middlewares.contains_key("downloader:cookies"));
    lab.shutdown().await;
}
