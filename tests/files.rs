//! The files and images pipelines on lab crawls: the pages on one lab, the files and images
//! their items name on another behind a token-bucket limiter (429 with Retry-After), so
//! the downloads are the crawl's sub-requests under its politeness. Checked: every item
//! carries its files' paths and checksums (the files on disk hash to them), the same bytes
//! are stored once whatever URL served them, each URL is downloaded once, robots.txt and
//! the image rules (minimum size, a decompression bomb) hold, no request lands inside a
//! hold on the asset host; a second crawl finds everything fresh and asks nothing, and
//! one after expiry asks with validators and keeps what a 304 confirms.
#![allow(clippy::unwrap_used)]

use std::collections::{HashMap, HashSet};
use std::path::Path;

use crawler::files::{FileRecord, FilesPipeline};
use crawler::prelude::*;
use crawler_lab::{Lab, Scenario};
use sha2::{Digest, Sha256};

#[derive(Debug, Serialize, serde::Deserialize)]
struct Product {
    url: String,
    file_urls: Vec<String>,
    image_urls: Vec<String>,
    #[serde(default)]
    files: Vec<FileRecord>,
    #[serde(default)]
    images: Vec<FileRecord>,
}

/// Book pages of one lab; each book's item names a document and images on the asset lab.
struct Products {
    start: String,
    media: String,
}

fn book_number(url: &str) -> u32 {
    url.rsplit("book-")
        .next()
        .and_then(|s| s.strip_suffix(".html"))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// Image width for book `n`: under the 50-pixel minimum for `n % 8` of 0 and 1.
fn width(n: u32) -> u32 {
    20 + (n % 8) * 20
}

impl Spider for Products {
    type Item = Product;

    fn name(&self) -> &str {
        "products"
    }

    fn start_urls(&self) -> Vec<String> {
        vec![self.start.clone()]
    }

    async fn parse(&self, page: Response, out: &mut Output<Product>) -> Result<()> {
        if page.callback() == Some("book") {
            let n = book_number(page.url().as_str());
            let m = &self.media;
            let image = format!("{m}media/img-{}x60-{}.png", width(n), n % 8);
            let mut image_urls = vec![image.clone()];
            if n <= 12 {
                // The same bytes under another URL: fetched (a URL is not content), stored
                // once.
                image_urls.push(format!("{image}?copy={n}"));
            }
            if n == 1 {
                image_urls.push(format!("{m}media/bomb.png"));
                image_urls.push(format!("{m}private/cover.png"));
            }
            out.item(Product {
                url: page.url().to_string(),
                file_urls: vec![format!("{m}media/doc-{}.pdf", n % 4)],
                image_urls,
                files: Vec::new(),
                images: Vec::new(),
            });
            return Ok(());
        }
        for href in page.select("a").attrs("href") {
            if href.contains("/book-") || href.starts_with("book-") {
                out.follow(href).callback("book");
            } else {
                out.follow(href);
            }
        }
        Ok(())
    }
}

fn crawl(site: &Lab, media: &Lab, dir: &Path, feed: &Path) -> Crawl<Products> {
    Crawl::new(Products {
        start: site.url(),
        media: media.url(),
    })
    // The page lab is ours and fast; the asset lab's limiter is what the pace must obey.
    .set("concurrency", "8")
    .set("concurrency_per_host", "4")
    .set("throttle", "fixed")
    .set("download_delay", "0s")
    // With no pace of its own (fixed, no delay) the crawl meets the asset lab's limiter
    // head on: every 429 holds the host for its Retry-After, and the file is asked again
    // after it, as often as it takes.
    .set("retry_times", "20")
    .set("files_store", dir.join("files").to_str().unwrap())
    .set("images_store", dir.join("images").to_str().unwrap())
    .set("images_min_width", "50")
    .set("images_thumbs", r#"{"small": [32, 32]}"#)
    .pipeline(FilesPipeline::files())
    .pipeline(FilesPipeline::images())
    .feed(feed)
    .unwrap()
    .progress(false)
}

fn items(feed: &Path) -> Vec<Product> {
    std::fs::read_to_string(feed)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn sha256(path: &Path) -> String {
    let bytes = std::fs::read(path).unwrap();
    Sha256::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn files_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|d| {
            d.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn items_files_are_fetched_through_the_crawl_and_stored_once_by_content() {
    let site = Lab::builder().books(100).start().await.unwrap();
    let media = Lab::builder()
        .books(100)
        .scenario(Scenario::rate_limited(6.0, 2))
        .start()
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let feed = dir.path().join("products.jsonl");

    let stats = crawl(&site, &media, dir.path(), &feed).run().await.unwrap();
    let products = items(&feed);
    assert_eq!(products.len(), 100, "{stats}");

    let files_dir = dir.path().join("files");
    let images_dir = dir.path().join("images");
    let mut paths_by_content: HashMap<String, HashSet<String>> = HashMap::new();
    for p in &products {
        let n = book_number(&p.url);
        assert_eq!(p.files.len(), 1, "{p:?}\n{stats}");
        let f = &p.files[0];
        assert_eq!(f.url, p.file_urls[0]);
        assert_eq!(f.status, "downloaded");
        assert_eq!(f.path, format!("full/{}.pdf", f.checksum), "{f:?}");
        assert_eq!(sha256(&files_dir.join(&f.path)), f.checksum);
        let small = n % 8 < 2;
        let expected = if small {
            0
        } else if n <= 12 {
            2
        } else {
            1
        };
        assert_eq!(
            p.images.len(),
            expected,
            "book {n}: {:?}\n{stats}",
            p.images
        );
        for i in &p.images {
            assert_eq!(sha256(&images_dir.join(&i.path)), i.checksum, "{i:?}");
            assert!(i.path.ends_with(".png"), "{i:?}");
            assert!(
                !i.url.contains("bomb") && !i.url.contains("private"),
                "{i:?}"
            );
            paths_by_content
                .entry(i.checksum.clone())
                .or_default()
                .insert(i.path.clone());
        }
    }
    // One path per content, and one file per content on disk.
    assert!(paths_by_content.values().all(|p| p.len() == 1));
    assert_eq!(files_in(&files_dir.join("full")).len(), 4, "four documents");
    assert_eq!(
        files_in(&images_dir.join("full")).len(),
        6,
        "six images of at least 50 pixels, whatever their URLs"
    );
    let thumbs = files_in(&images_dir.join("thumbs").join("small"));
    assert_eq!(thumbs.len(), 6, "{thumbs:?}");
    for t in &thumbs {
        let img = image::open(images_dir.join("thumbs").join("small").join(t)).unwrap();
        assert!(img.width() <= 32 && img.height() <= 32, "{t}");
    }

    // The asset lab: each URL answered once, none refused by robots.txt fetched, the bomb
    // fetched once and stored nowhere, and no request inside a hold its limiter placed.
    let seen = media.recorder().requests();
    let mut served: HashMap<String, usize> = HashMap::new();
    for r in seen.iter().filter(|r| r.status == 200) {
        *served.entry(r.path.clone()).or_default() += 1;
    }
    let twice: Vec<_> = served.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "downloaded twice: {twice:?}");
    assert!(!seen.iter().any(|r| r.path.starts_with("/private/")));
    assert_eq!(served.get("/media/bomb.png"), Some(&1), "{served:?}");
    let media_urls: HashSet<&str> = products
        .iter()
        .flat_map(|p| p.file_urls.iter().chain(&p.image_urls))
        .filter(|u| !u.contains("/private/"))
        .map(String::as_str)
        .collect();
    assert_eq!(
        served.keys().filter(|p| p.starts_with("/media/")).count(),
        media_urls.len(),
        "every file URL once: {served:?}"
    );
    assert_eq!(media.recorder().report().total_violations(), 0);
    assert_eq!(stats.subrequests.get("disallowed"), Some(&1), "{stats}");

    // Again, with the store as it is: everything is fresh, nothing is asked for.
    media.recorder().clear();
    let again = dir.path().join("again.jsonl");
    crawl(&site, &media, dir.path(), &again)
        .run()
        .await
        .unwrap();
    let products = items(&again);
    assert_eq!(products.len(), 100);
    assert!(
        products
            .iter()
            .flat_map(|p| p.files.iter().chain(&p.images))
            .all(|f| f.status == "uptodate"),
        "{products:?}"
    );
    // Only what was not stored is asked for again (images under the minimum, the bomb),
    // as in Scrapy: a refused image is not remembered.
    let stored: HashSet<String> = products
        .iter()
        .flat_map(|p| p.files.iter().chain(&p.images))
        .map(|f| f.url.trim_start_matches(&media.url()).to_owned())
        .collect();
    assert_eq!(stored.len(), media_urls.len() - 6, "{stored:?}");
    let asked: Vec<String> = media
        .recorder()
        .requests()
        .into_iter()
        .map(|r| r.path.trim_start_matches('/').to_owned())
        .filter(|p| stored.contains(p))
        .collect();
    assert!(
        asked.is_empty(),
        "fresh files were asked for again: {asked:?}"
    );

    // Expired: asked again with validators; the lab's 304s keep every stored file.
    media.recorder().clear();
    let expired = dir.path().join("expired.jsonl");
    crawl(&site, &media, dir.path(), &expired)
        .set("files_expires", "0")
        .set("images_expires", "0")
        .run()
        .await
        .unwrap();
    let products = items(&expired);
    assert_eq!(products.len(), 100);
    let records: Vec<&FileRecord> = products
        .iter()
        .flat_map(|p| p.files.iter().chain(&p.images))
        .collect();
    assert!(
        records.iter().all(|f| f.status == "uptodate"),
        "{records:?}"
    );
    let conditional: Vec<_> = media
        .recorder()
        .requests()
        .into_iter()
        .filter(|r| stored.contains(r.path.trim_start_matches('/')))
        .filter(|r| r.status != 429)
        .collect();
    assert_eq!(conditional.len(), stored.len(), "{conditional:?}");
    assert!(
        conditional
            .iter()
            .all(|r| r.status == 304 && r.if_none_match.is_some()),
        "{conditional:?}"
    );
    assert_eq!(files_in(&images_dir.join("full")).len(), 6);
    site.shutdown().await;
    media.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_item_type_without_the_result_field_stops_the_crawl_with_the_reason() {
    #[derive(Debug, Serialize, serde::Deserialize)]
    struct Bare {
        url: String,
        file_urls: Vec<String>,
    }
    struct BareSpider(String);
    impl Spider for BareSpider {
        type Item = Bare;
        fn name(&self) -> &str {
            "bare"
        }
        fn start_urls(&self) -> Vec<String> {
            vec![format!("{}catalogue/book-1.html", self.0)]
        }
        async fn parse(&self, page: Response, out: &mut Output<Bare>) -> Result<()> {
            out.item(Bare {
                url: page.url().to_string(),
                file_urls: vec![format!("{}media/doc-1.pdf", self.0)],
            });
            Ok(())
        }
    }
    let lab = Lab::builder().books(100).start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let stats = Crawl::new(BareSpider(lab.url()))
        .set("files_store", dir.path().to_str().unwrap())
        .pipeline(FilesPipeline::files())
        .progress(false)
        .run()
        .await
        .unwrap();
    assert!(
        stats.close_reason.contains("no 'files' field"),
        "{}",
        stats.close_reason
    );
    lab.shutdown().await;
}

#[tokio::test]
async fn the_pipeline_without_its_store_fails_before_any_request() {
    let lab = Lab::builder().books(100).start().await.unwrap();
    let err = Crawl::new(Products {
        start: lab.url(),
        media: lab.url(),
    })
    .pipeline(FilesPipeline::images())
    .progress(false)
    .run()
    .await
    .expect_err("no images_store");
    assert!(err.to_string().contains("images_store is not set"), "{err}");
    assert_eq!(lab.recorder().len(), 0);
    lab.shutdown().await;
}
