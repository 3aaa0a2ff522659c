//! WARC archives of lab crawls (the `warc` setting), read back by `warcio` (PyPI), the
//! reader archivists use: `warcio check` verifies every record's digests, `warcio index`
//! lists the records. warcio missing is a failure, not a skip: `pip install warcio`.
#![allow(clippy::unwrap_used)]

#[allow(dead_code)]
#[path = "../examples/books/spider.rs"]
mod books;
#[allow(dead_code)]
#[path = "../examples/sitemap.rs"]
mod sitemap;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use books::{Book, Books};
use crawler::prelude::*;
use crawler_lab::Lab;
use serde_json::Value;

fn fast(crawl: Crawl<Books>) -> Crawl<Books> {
    // Our own loopback server: lift the per-host budget so the test runs in seconds.
    crawl
        .set("concurrency", "16")
        .set("concurrency_per_host", "16")
        .set("throttle", "fixed")
        .set("download_delay", "0s")
        .progress(false)
}

/// Run warcio with `args`; its standard output. Panics (fails the test) when warcio is not
/// installed or exits with an error.
fn warcio(args: &[&str]) -> String {
    let out = Command::new("warcio")
        .args(args)
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run warcio ({e}): install it with `pip install warcio`")
        });
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "warcio {args:?} failed: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// `warcio check` on `file`: no problem at all, and every record's digests verified (the
/// verbose listing says `digest pass` for each one).
fn check(file: &Path) -> usize {
    let path = file.to_str().unwrap();
    let quiet = warcio(&["check", path]);
    assert!(
        quiet.trim().is_empty(),
        "warcio check found problems:\n{quiet}"
    );
    let verbose = warcio(&["check", "-v", path]);
    assert!(!verbose.contains("failed"), "{verbose}");
    verbose.matches("digest pass").count()
}

/// `warcio index` of `file`: one JSON object per record.
fn index(file: &Path) -> Vec<Value> {
    let fields = "warc-type,warc-target-uri,warc-record-id,warc-concurrent-to,\
                  warc-ip-address,warc-profile,warc-warcinfo-id,http:status,content-type";
    warcio(&["index", "-f", fields, file.to_str().unwrap()])
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The WARC files in `dir`, by name (their serial numbers in order).
fn warc_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(".warc.gz"))
        .collect();
    files.sort();
    files
}

fn field<'a>(record: &'a Value, name: &str) -> &'a str {
    record.get(name).and_then(Value::as_str).unwrap_or("")
}

/// Every response (or revisit) in `records` has its request in the same file, pointing at
/// it with WARC-Concurrent-To, and every record points at the file's warcinfo.
fn assert_pairs(records: &[Value]) {
    assert_eq!(
        field(&records[0], "warc-type"),
        "warcinfo",
        "{:?}",
        records[0]
    );
    let info = field(&records[0], "warc-record-id");
    let answers: HashMap<&str, &Value> = records
        .iter()
        .filter(|r| matches!(field(r, "warc-type"), "response" | "revisit"))
        .map(|r| (field(r, "warc-record-id"), r))
        .collect();
    let requests: Vec<&Value> = records
        .iter()
        .filter(|r| field(r, "warc-type") == "request")
        .collect();
    assert_eq!(requests.len(), answers.len(), "a request per response");
    for req in requests {
        let answer = answers
            .get(field(req, "warc-concurrent-to"))
            .unwrap_or_else(|| panic!("request without its response: {req}"));
        assert_eq!(
            field(answer, "warc-target-uri"),
            field(req, "warc-target-uri")
        );
        assert_eq!(
            field(req, "content-type"),
            "application/http;msgtype=request"
        );
    }
    for r in &records[1..] {
        assert_ne!(field(r, "warc-type"), "warcinfo", "one warcinfo, first");
        assert_eq!(field(r, "warc-warcinfo-id"), info);
    }
}

/// The crawl's item URLs.
fn item_urls(feed: &Path) -> HashSet<String> {
    std::fs::read_to_string(feed)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Book>(l).unwrap().url)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_exchange_of_a_lab_crawl_is_archived_and_warcio_checks_it() {
    let lab = Lab::builder().books(200).start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let feed = dir.path().join("books.jsonl");
    let pattern = dir.path().join("crawl-%(name)s.warc.gz");
    let stats = fast(Crawl::new(Books { start: lab.url() }))
        .set("warc", pattern.to_str().unwrap())
        // A secret, for another site: the warcinfo lists the settings, this one redacted.
        .set("http_auth_domain", "elsewhere.example")
        .set("http_auth_user", "archivist")
        .set("http_auth_pass", "hunter2-in-the-warc")
        .feed(&feed)
        .unwrap()
        .run()
        .await
        .unwrap();
    let items = item_urls(&feed);
    assert_eq!(items.len(), 200, "{stats}");

    let files = warc_files(dir.path());
    assert_eq!(
        files,
        [dir.path().join("crawl-books-00000.warc.gz")],
        "one file under 1GB, named from the pattern and serial 0"
    );
    let records = index(&files[0]);
    let verified = check(&files[0]);
    assert_eq!(verified, records.len(), "every record's digests verified");
    assert_eq!(stats.warc_records, records.len() as u64, "{stats}");
    assert_pairs(&records);

    let responses: HashMap<&str, &Value> = records
        .iter()
        .filter(|r| field(r, "warc-type") == "response")
        .map(|r| (field(r, "warc-target-uri"), r))
        .collect();
    for url in &items {
        let r = responses
            .get(url.as_str())
            .unwrap_or_else(|| panic!("no response record for {url}"));
        assert_eq!(field(r, "http:status"), "200");
        assert_eq!(field(r, "warc-ip-address"), "127.0.0.1");
        assert_eq!(
            field(r, "content-type"),
            "application/http;msgtype=response"
        );
    }
    let robots = format!("{}robots.txt", lab.url());
    assert!(
        responses.contains_key(robots.as_str()),
        "robots.txt archived"
    );
    // Every page the crawl fetched, and robots.txt: nothing more, nothing less.
    // (The lab's home page links to /robots.txt: that page is archived too, beside the
    // robots.txt check's own fetch.)
    let pages: u64 = stats.status.values().sum();
    let answered = records
        .iter()
        .filter(|r| field(r, "warc-type") == "response")
        .count();
    assert_eq!(answered as u64, pages + 1, "{stats}");
    // What the lab served is what the archive holds.
    let seen = lab.recorder().requests();
    assert_eq!(seen.len(), answered, "a record per request the lab saw");

    let text = warc_text(&files[0]);
    let info = text.split("WARC/1.1\r\n").nth(1).unwrap();
    assert!(info.contains("WARC-Type: warcinfo\r\n"), "{info}");
    assert!(info.contains("software: crawler/"), "{info}");
    assert!(
        info.contains("crawler-setting-http_auth_user: archivist\r\n"),
        "{info}"
    );
    assert!(
        info.contains("crawler-setting-http_auth_pass: ***\r\n"),
        "{info}"
    );
    assert!(
        !text.contains("hunter2-in-the-warc"),
        "the secret is in the WARC"
    );
    lab.shutdown().await;
}

/// The records of a .warc.gz file as text (every gzip member).
fn warc_text(file: &Path) -> String {
    use std::io::Read;
    let mut text = Vec::new();
    flate2::read::MultiGzDecoder::new(std::fs::File::open(file).unwrap())
        .read_to_end(&mut text)
        .unwrap();
    String::from_utf8_lossy(&text).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_warc_max_size_rotates_into_valid_files_each_opening_with_warcinfo() {
    let lab = Lab::builder().books(200).start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let pattern = dir.path().join("rotated.warc.gz");
    let stats = fast(Crawl::new(Books { start: lab.url() }))
        .set("warc", pattern.to_str().unwrap())
        .set("warc_max_size", "50KB")
        .run()
        .await
        .unwrap();
    let files = warc_files(dir.path());
    assert!(files.len() >= 3, "{} files: {files:?}", files.len());
    let mut total = 0;
    let mut answered = 0;
    for (n, file) in files.iter().enumerate() {
        assert_eq!(
            file.file_name().unwrap().to_str().unwrap(),
            format!("rotated-{n:05}.warc.gz")
        );
        let size = std::fs::metadata(file).unwrap().len();
        // Closed once past the limit: at most one exchange over it.
        assert!(size < 50_000 + 40_000, "{} is {size} bytes", file.display());
        let records = index(file);
        assert_eq!(check(file), records.len());
        assert_pairs(&records);
        total += records.len();
        answered += records
            .iter()
            .filter(|r| field(r, "warc-type") == "response")
            .count();
    }
    assert_eq!(stats.warc_records, total as u64, "{stats}");
    let pages: u64 = stats.status.values().sum();
    assert_eq!(
        answered as u64,
        pages + 1,
        "every page once, and robots.txt"
    );
    lab.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recrawl_archives_its_304s_as_server_not_modified_revisits() {
    let lab = Lab::builder().books(100).start().await.unwrap();
    let cache = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let crawl = |warc: Option<PathBuf>| {
        let mut c = fast(Crawl::new(Books { start: lab.url() }))
            .set("cache_dir", cache.path().to_str().unwrap())
            .set("http_cache", "true");
        if let Some(path) = warc {
            c = c.set("warc", path.to_str().unwrap());
        }
        c
    };
    let first = crawl(None).run().await.unwrap();
    assert_eq!(first.items_scraped, 100, "{first}");
    let second = crawl(Some(dir.path().join("again.warc.gz")))
        .run()
        .await
        .unwrap();
    assert_eq!(second.items_scraped, 100, "{second}");
    assert!(second.not_modified > 100, "{second}");

    let files = warc_files(dir.path());
    assert_eq!(files.len(), 1);
    let records = index(&files[0]);
    assert_eq!(check(&files[0]), records.len() - revisits(&records).len());
    assert_pairs(&records);
    let revisits = revisits(&records);
    assert_eq!(revisits.len() as u64, second.not_modified, "{second}");
    for r in &revisits {
        assert_eq!(field(r, "http:status"), "304");
        assert_eq!(
            field(r, "warc-profile"),
            "http://netpreserve.org/warc/1.1/revisit/server-not-modified"
        );
    }
    lab.shutdown().await;
}

fn revisits(records: &[Value]) -> Vec<&Value> {
    records
        .iter()
        .filter(|r| field(r, "warc-type") == "revisit")
        .collect()
}

/// A page of one title, served by [`compressing_server`].
const PAGE: &str =
    "<html><head><title>Squeezed</title></head><body>compressed and chunked</body></html>";

/// A server on 127.0.0.1 that answers every page with [`PAGE`] gzip-compressed and sent in
/// chunks (what many real servers do), and robots.txt with a 404.
async fn compressing_server() -> String {
    use std::io::Write;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(PAGE.as_bytes()).unwrap();
    let gzipped = gz.finish().unwrap();
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            let gzipped = gzipped.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
                        match conn.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                        continue;
                    };
                    let head = String::from_utf8_lossy(&buf[..end]).into_owned();
                    buf.drain(..end + 4);
                    let reply = if head.starts_with("GET /robots.txt") {
                        b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n".to_vec()
                    } else {
                        let mut r = b"HTTP/1.1 200 OK\r\ncontent-type: text/html\r\n\
                                      content-encoding: gzip\r\ntransfer-encoding: chunked\r\n\r\n"
                            .to_vec();
                        for piece in gzipped.chunks(16) {
                            r.extend_from_slice(format!("{:x}\r\n", piece.len()).as_bytes());
                            r.extend_from_slice(piece);
                            r.extend_from_slice(b"\r\n");
                        }
                        r.extend_from_slice(b"0\r\n\r\n");
                        r
                    };
                    if conn.write_all(&reply).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    format!("http://{addr}/")
}

/// Takes each page's title.
struct Titles {
    start: String,
}

impl Spider for Titles {
    type Item = String;
    fn name(&self) -> &str {
        "titles"
    }
    fn start_urls(&self) -> Vec<String> {
        vec![self.start.clone()]
    }
    async fn parse(&self, page: Response, out: &mut Output<String>) -> Result<()> {
        out.item(page.text_of("title")?);
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compressed_chunked_body_is_stored_decoded_with_headers_that_match_it() {
    let start = compressing_server().await;
    let dir = tempfile::tempdir().unwrap();
    let stats = Crawl::new(Titles {
        start: start.clone(),
    })
    .set("warc", dir.path().join("page.warc.gz").to_str().unwrap())
    .progress(false)
    .run()
    .await
    .unwrap();
    assert_eq!(stats.items_scraped, 1, "{stats}");
    let file = dir.path().join("page-00000.warc.gz");
    let records = index(&file);
    // warcinfo, and a request and a response each for robots.txt and the page.
    assert_eq!(records.len(), 5, "{records:?}");
    assert_eq!(check(&file), 5, "the decoded body's digests hold");
    assert_pairs(&records);
    let text = warc_text(&file);
    let response = text
        .split("WARC/1.1\r\n")
        .find(|r| {
            r.contains("WARC-Type: response")
                && r.contains(&format!("WARC-Target-URI: {start}\r\n"))
        })
        .unwrap();
    assert!(response.contains(PAGE), "the body decoded: {response}");
    assert!(response.contains("X-Crawler-Original-Transfer-Encoding: chunked\r\n"));
    assert!(response.contains(&format!("content-length: {}\r\n", PAGE.len())));
    assert!(!response.contains("content-encoding"), "{response}");
    assert!(!response.contains("\r\ntransfer-encoding"), "{response}");
    // The request as sent, with what the client adds.
    let request = text
        .split("WARC/1.1\r\n")
        .find(|r| {
            r.contains("WARC-Type: request") && r.contains(&format!("WARC-Target-URI: {start}\r\n"))
        })
        .unwrap();
    assert!(request.contains("GET / HTTP/1.1\r\n"), "{request}");
    assert!(
        request.contains("accept-encoding: gzip,deflate,br\r\n"),
        "{request}"
    );
    assert!(request.contains("user-agent: "), "{request}");
    assert!(
        request.contains(&format!("host: {}\r\n", &start[7..start.len() - 1])),
        "{request}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sitemap_crawl_archives_its_sitemaps_as_fetched() {
    let lab = Lab::builder().books(300).start().await.unwrap();
    let cache = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let warc = dir.path().join("sitemaps.warc.gz");
    let (stats, _) = sitemap::crawl(&lab.url(), cache.path(), |c| {
        c.set("concurrency_per_host", "16")
            .set("throttle", "fixed")
            .set("download_delay", "0s")
            .set("warc", warc.to_str().unwrap())
            .progress(false)
    })
    .await
    .unwrap();
    assert_eq!(stats.items_scraped, 300, "{stats}");
    let file = dir.path().join("sitemaps-00000.warc.gz");
    let records = index(&file);
    assert_eq!(check(&file), records.len());
    assert_pairs(&records);
    let uris: HashSet<&str> = records
        .iter()
        .filter(|r| field(r, "warc-type") == "response")
        .map(|r| field(r, "warc-target-uri"))
        .collect();
    for path in ["robots.txt", "sitemap.xml", "sitemaps/books-1.xml.gz"] {
        let url = format!("{}{path}", lab.url());
        assert!(uris.contains(url.as_str()), "{url} not archived");
    }
    lab.shutdown().await;
}

#[tokio::test]
async fn a_warc_path_that_cannot_be_written_fails_the_crawl_before_any_request() {
    let lab = Lab::builder().books(100).start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    // A directory where a file is: nothing can be created under it.
    let blocker = dir.path().join("file");
    std::fs::write(&blocker, "not a directory").unwrap();
    let e = fast(Crawl::new(Books { start: lab.url() }))
        .set("warc", blocker.join("x.warc.gz").to_str().unwrap())
        .run()
        .await
        .expect_err("the WARC file cannot be created");
    assert!(e.to_string().contains("WARC file"), "{e}");
    assert!(lab.recorder().requests().is_empty(), "nothing was fetched");
    lab.shutdown().await;
}

/// The crawl the kill test runs in a child process: the lab's books, slowly, into the WARC
/// named by `CHILD_WARC`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "helper: run as a child process by the WARC kill test"]
async fn child_warc_crawl() {
    let url = std::env::var("CHILD_LAB_URL").expect("CHILD_LAB_URL");
    let warc = std::env::var("CHILD_WARC").expect("CHILD_WARC");
    let stats = Crawl::new(Books { start: url })
        .set("throttle", "fixed")
        .set("download_delay", "3ms")
        .set("concurrency_per_host", "4")
        .set("warc", warc)
        .progress(false)
        .run()
        .await;
    println!("CHILD_DONE {}", stats.is_ok());
}

/// The end of the last complete gzip member of `data` and how many members precede it.
fn complete_members(data: &[u8]) -> (usize, usize) {
    use std::io::Read;
    let (mut at, mut members) = (0, 0);
    while at < data.len() {
        let mut member = flate2::bufread::GzDecoder::new(&data[at..]);
        let mut out = Vec::new();
        if member.read_to_end(&mut out).is_err() {
            break;
        }
        at = data.len() - member.into_inner().len();
        members += 1;
    }
    (at, members)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_kill_nine_every_complete_record_reads_and_checks() {
    let lab = Lab::builder().books(1000).start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("killed-00000.warc.gz");
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            &crate::test_path(module_path!(), "child_warc_crawl"),
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("CHILD_LAB_URL", lab.url())
        .env("CHILD_WARC", dir.path().join("killed.warc.gz"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Killed mid-crawl, once a few hundred records are out.
    for _ in 0..1500 {
        if std::fs::metadata(&file).map(|m| m.len()).unwrap_or(0) > 300_000 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    child.kill().unwrap(); // SIGKILL
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        !stdout.contains("CHILD_DONE"),
        "killed before the end: {stdout}"
    );

    // Every complete member is a whole record: up to the last one, the file checks clean.
    let data = std::fs::read(&file).unwrap();
    let (end, members) = complete_members(&data);
    assert!(members > 100, "{members} records before the kill");
    assert!(data.len() - end < 64 * 1024, "at most one record cut short");
    let kept = dir.path().join("kept.warc.gz");
    std::fs::write(&kept, &data[..end]).unwrap();
    let records = index(&kept);
    assert_eq!(records.len(), members, "one record per gzip member");
    assert_eq!(check(&kept), members);
    assert_eq!(field(&records[0], "warc-type"), "warcinfo");
    lab.shutdown().await;
}

/// A feed's lines, sorted: the same items whatever order the crawl wrote them in.
fn sorted_lines(feed: &Path) -> Vec<String> {
    let mut lines: Vec<String> = std::fs::read_to_string(feed)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    lines.sort();
    lines
}

/// Requests that reached the wire, every host together.
fn sent(stats: &Stats) -> u64 {
    stats.hosts.iter().map(|h| h.requests).sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crawl_replays_from_its_warc_with_the_site_gone() {
    let lab = Lab::builder().books(200).start().await.unwrap();
    let start = lab.url();
    let dir = tempfile::tempdir().unwrap();
    let live_feed = dir.path().join("live.jsonl");
    let live = fast(Crawl::new(Books {
        start: start.clone(),
    }))
    .set("warc", dir.path().join("crawl.warc.gz").to_str().unwrap())
    // Small files, so the replay reads several.
    .set("warc_max_size", "100KB")
    .feed(&live_feed)
    .unwrap()
    .run()
    .await
    .unwrap();
    assert_eq!(live.items_scraped, 200, "{live}");
    assert!(warc_files(dir.path()).len() > 2, "several WARC files");
    // The site is gone: anything the replay sent would fail (and be counted as sent).
    lab.shutdown().await;

    let replay_warc = dir.path().join("crawl-*.warc.gz");
    let replay_feed = dir.path().join("replay.jsonl");
    let replay = fast(Crawl::new(Books {
        start: start.clone(),
    }))
    .set("replay_warc", replay_warc.to_str().unwrap())
    .feed(&replay_feed)
    .unwrap()
    .run()
    .await
    .unwrap();
    assert_eq!(
        sorted_lines(&replay_feed),
        sorted_lines(&live_feed),
        "the same items"
    );
    assert_eq!(sent(&replay), 0, "nothing went to the network: {replay}");
    assert!(replay.failed.is_empty(), "{replay}");
    assert_eq!(replay.status, live.status, "the same answers: {replay}");

    // A page the archive lacks fails as not_archived, and still nothing is sent.
    let missing = fast(Crawl::new(Books {
        start: format!("{start}no-such-page"),
    }))
    .set("replay_warc", replay_warc.to_str().unwrap())
    .run()
    .await
    .unwrap();
    assert_eq!(missing.failed.get("not_archived"), Some(&1), "{missing}");
    assert_eq!(sent(&missing), 0, "{missing}");

    // A pattern that names no file fails the crawl before it starts.
    let e = fast(Crawl::new(Books { start }))
        .set(
            "replay_warc",
            dir.path().join("nothing-*.warc.gz").to_str().unwrap(),
        )
        .run()
        .await
        .expect_err("no WARC file to replay");
    assert!(e.to_string().contains("no WARC file matches"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recrawl_s_revisits_replay_as_the_responses_they_refer_to() {
    let lab = Lab::builder().books(100).start().await.unwrap();
    let start = lab.url();
    let cache = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let crawl = |name: &str| {
        fast(Crawl::new(Books {
            start: start.clone(),
        }))
        .set("cache_dir", cache.path().to_str().unwrap())
        .set("http_cache", "true")
        .set("warc", dir.path().join(name).to_str().unwrap())
    };
    let first = crawl("a.warc.gz").run().await.unwrap();
    assert_eq!(first.items_scraped, 100, "{first}");
    let second_feed = dir.path().join("second.jsonl");
    let second = crawl("b.warc.gz")
        .feed(&second_feed)
        .unwrap()
        .run()
        .await
        .unwrap();
    assert!(second.not_modified > 100, "{second}");
    lab.shutdown().await;

    // The second crawl's archive is mostly revisits: with the first's beside it, each
    // replays as the response it refers to.
    let replay_feed = dir.path().join("replay.jsonl");
    let replay = fast(Crawl::new(Books {
        start: start.clone(),
    }))
    .set(
        "replay_warc",
        dir.path().join("*.warc.gz").to_str().unwrap(),
    )
    .feed(&replay_feed)
    .unwrap()
    .run()
    .await
    .unwrap();
    assert_eq!(sorted_lines(&replay_feed), sorted_lines(&second_feed));
    assert_eq!(sent(&replay), 0, "{replay}");
    assert!(replay.failed.is_empty(), "{replay}");

    // Alone, its revisits have nothing to refer to: those pages are not archived.
    let alone = fast(Crawl::new(Books { start }))
        .set(
            "replay_warc",
            dir.path().join("b-00000.warc.gz").to_str().unwrap(),
        )
        .run()
        .await
        .unwrap();
    assert_eq!(alone.items_scraped, 0, "{alone}");
    assert_eq!(alone.failed.get("not_archived"), Some(&1), "{alone}");
    assert_eq!(sent(&alone), 0, "{alone}");
}
