//! The facade's error keeps its kinds: code can tell a job directory that belongs to another
//! spider from a bad setting or a file it cannot write, and reach the crate error underneath.

#![allow(clippy::unwrap_used)]

use std::error::Error as _;

use crawler::prelude::*;
use crawler::{Error, ErrorKind};

struct Named(&'static str);

impl Spider for Named {
    type Item = String;
    fn name(&self) -> &str {
        self.0
    }
    fn start_urls(&self) -> Vec<String> {
        vec!["http://127.0.0.1:9/".into()]
    }
    async fn parse(&self, _page: Response, _out: &mut Output<String>) -> Result<()> {
        Ok(())
    }
}

#[test]
fn a_job_directory_of_another_spider_is_a_job_mismatch() {
    let dir = tempfile::tempdir().unwrap();
    let job = dir.path().join("job");
    let job = job.to_str().unwrap();
    // The first spider takes the job directory (building opens and claims it).
    drop(
        Crawl::new(Named("first"))
            .set("job_dir", job)
            .build()
            .unwrap(),
    );
    let e: Error = Crawl::new(Named("second"))
        .set("job_dir", job)
        .build()
        .err()
        .expect("another spider's job directory is refused");
    assert!(e.is_job_mismatch(), "{e:?}");
    assert_eq!(e.kind(), ErrorKind::JobMismatch);
    assert!(e.to_string().contains("first"), "{e}");
    let store = e
        .source()
        .and_then(|s| s.downcast_ref::<crawler::store::Error>())
        .expect("the store's error underneath");
    assert!(store.is_job_mismatch());
}

#[test]
fn settings_and_io_errors_keep_their_kinds() {
    let e = Crawl::new(Named("a"))
        .set("concurrency", "many")
        .effective_settings()
        .unwrap_err();
    assert!(e.is_settings(), "{e:?}");
    assert!(!e.is_job_mismatch());

    let e = Crawl::new(Named("a"))
        .set("http_cache", "true")
        .build()
        .err()
        .expect("an HTTP cache needs a directory");
    assert!(e.is_settings(), "{e:?}");

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a-file");
    std::fs::write(&file, "").unwrap();
    let e = Crawl::new(Named("a"))
        .set("cache_dir", file.join("cache").to_str().unwrap())
        .set("conditional_requests", "true")
        .build()
        .err()
        .expect("a cache directory under a file cannot be made");
    assert!(e.is_io(), "{e:?}");
}

/// A spider's callbacks and `Crawl` return the same `crawler::Error`: `?` works on the errors
/// spider code meets most, the kind a page helper gives (a bad selector, a missing element)
/// survives to the caller, and the typed cause stays reachable.
#[test]
fn callbacks_and_crawls_share_one_error_and_its_kinds() {
    fn price(text: &str) -> crawler::Result<u32> {
        Ok(text.trim().parse::<u32>()?)
    }
    let e = price("x").unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Other);
    assert!(
        e.source()
            .is_some_and(|s| s.is::<std::num::ParseIntError>()),
        "{e:?}"
    );

    fn read(path: &std::path::Path) -> crawler::Result<String> {
        Ok(std::fs::read_to_string(path)?)
    }
    let dir = tempfile::tempdir().unwrap();
    assert!(read(&dir.path().join("absent")).unwrap_err().is_io());

    let url = crawler::core::Url::parse("http://127.0.0.1:9/book").unwrap();
    let page = Response::new(
        Request::get(url.as_str()).unwrap(),
        url,
        200,
        Default::default(),
        "<html><body><h1>A Book</h1></body></html>".into(),
    );
    let e: Error = page.text_of("p.price").unwrap_err();
    assert!(e.is_missing(), "{e:?}");
    let e: Error = page.try_select("h1[").expect_err("a bad selector");
    assert!(e.is_selector(), "{e:?}");
    // Context keeps the kind a helper gave, and prefixes what the spider was doing.
    let e = page
        .text_of("p.price")
        .context("price of 'A Book'")
        .unwrap_err();
    assert!(e.is_missing());
    assert!(e.to_string().starts_with("price of 'A Book': "), "{e}");
}
