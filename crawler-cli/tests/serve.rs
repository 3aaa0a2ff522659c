//! `serve`: a project's spiders as jobs over HTTP, end to end. The service is this test
//! binary playing a project's runner (`project_child`), started as a process of its own with
//! `serve`; its jobs are the same binary again with `crawl`. Everything runs against the lab
//! and the service on 127.0.0.1.

use std::io::{BufRead as _, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crawler::prelude::*;
use crawler_cli::Runner;
use crawler_lab::Lab;
use serde_json::Value;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

#[allow(dead_code)]
#[path = "../../examples/books/spider.rs"]
mod books;

use crate::support::clean;

/// Set for the copy of this test binary that plays the project's runner: the lab's URL.
const CHILD_START: &str = "SERVE_TEST_START_URL";

/// A spider whose start panics: its job's process dies with the panic.
struct Crash;

impl Spider for Crash {
    type Item = String;

    fn name(&self) -> &str {
        "crash"
    }

    fn start_urls(&self) -> Vec<String> {
        panic!("the crash spider panics on purpose");
    }

    async fn parse(&self, _page: Response, _out: &mut Output<String>) -> Result<()> {
        Ok(())
    }
}

/// The arguments that make this binary run `project_child` with `args` after `--`.
fn child_prefix() -> Vec<String> {
    vec![
        crate::test_path(module_path!(), "project_child"),
        "--exact".into(),
        "--nocapture".into(),
        "--quiet".into(),
        "--test-threads=1".into(),
        "--".into(),
    ]
}

/// Not a test of its own: when started with the lab's URL in the environment, this process
/// is the project's runner, with the arguments after `--`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn project_child() {
    let Ok(start) = std::env::var(CHILD_START) else {
        return;
    };
    let args: Vec<String> = std::env::args().skip_while(|a| a != "--").skip(1).collect();
    let exe = std::env::current_exe().expect("test binary");
    let code = Runner::new()
        .spider(books::Books { start })
        .spider(Crash)
        .job_command(exe, child_prefix())
        .run_args(std::iter::once("project".to_owned()).chain(args))
        .await;
    // Leave before the test harness prints its summary.
    let status = if code == std::process::ExitCode::SUCCESS {
        0
    } else if code == std::process::ExitCode::from(2) {
        2
    } else {
        1
    };
    std::process::exit(status);
}

/// A running service.
struct Served {
    child: Child,
    addr: SocketAddr,
    root: PathBuf,
}

impl Served {
    /// Stop the service as systemd would (SIGTERM); its exit status, if it exited within
    /// 15 s (it is killed otherwise).
    fn stop(&mut self) -> Option<std::process::ExitStatus> {
        if let Ok(None) = self.child.try_wait() {
            if let Some(pid) = i32::try_from(self.child.id())
                .ok()
                .and_then(rustix::process::Pid::from_raw)
            {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
            }
            let deadline = Instant::now() + Duration::from_secs(15);
            while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        let exited = self.child.try_wait().ok().flatten();
        let _ = self.child.kill();
        let _ = self.child.wait();
        exited
    }
}

impl Drop for Served {
    /// Stopped as a service is: its jobs are stopped with it.
    fn drop(&mut self) {
        self.stop();
    }
}

/// The lab at a steady, quick pace: every job's requests are paced 20 ms apart.
const PACE: &[&str] = &[
    "-s",
    "throttle=fixed",
    "-s",
    "download_delay=20ms",
    "-s",
    "concurrency_per_host=1",
    "-s",
    "user_agent=serve-test/1.0",
];

/// Start `serve` (port 0) in `dir` with the service's root `dir/root` and `args`.
fn start(lab: &str, dir: &Path, args: &[&str]) -> Served {
    let settings = dir.join("crawler.toml");
    if !settings.exists() {
        std::fs::write(&settings, "").expect("settings file");
    }
    let root = dir.join("root");
    let exe = std::env::current_exe().expect("test binary");
    let mut cmd = clean(Command::new(exe), dir);
    cmd.args(child_prefix())
        .arg("--settings")
        .arg(&settings)
        .args(["serve", "--port", "0", "--root"])
        .arg(&root)
        .args(args)
        .args(PACE)
        .env(CHILD_START, lab)
        .stdout(Stdio::piped())
        .stderr(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(dir.join("service.log"))
                .expect("service log"),
        );
    let mut child = cmd.spawn().expect("service starts");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            if let Some(addr) = line
                .strip_prefix("listening on http://")
                .and_then(|a| a.strip_suffix('/'))
            {
                let _ = tx.send(addr.to_owned());
            }
        }
    });
    let addr = match rx.recv_timeout(Duration::from_secs(60)) {
        Ok(a) => a.parse().expect("address"),
        Err(_) => {
            let _ = child.kill();
            panic!(
                "the service did not start:\n{}",
                std::fs::read_to_string(dir.join("service.log")).unwrap_or_default()
            );
        }
    };
    Served { child, addr, root }
}

/// One HTTP/1.1 exchange: the status, the head (lower-cased) and the body (de-chunked).
async fn exchange(addr: SocketAddr, raw: &[u8]) -> (u16, String, Vec<u8>) {
    let io = async {
        let mut s = tokio::net::TcpStream::connect(addr).await?;
        s.write_all(raw).await?;
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).await?;
        Ok::<_, std::io::Error>(buf)
    };
    let buf = tokio::time::timeout(Duration::from_secs(30), io)
        .await
        .expect("the service answers within 30 s")
        .expect("exchange");
    let end = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no head in {:?}", String::from_utf8_lossy(&buf)));
    let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
    let status: u16 = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("status");
    let mut body = buf[end + 4..].to_vec();
    if head.contains("transfer-encoding: chunked") {
        body = dechunk(&body);
    }
    (status, head, body)
}

fn dechunk(mut data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let Some(eol) = data.windows(2).position(|w| w == b"\r\n") else {
            return out;
        };
        let size = usize::from_str_radix(String::from_utf8_lossy(&data[..eol]).trim(), 16)
            .expect("chunk size");
        if size == 0 {
            return out;
        }
        out.extend_from_slice(&data[eol + 2..eol + 2 + size]);
        data = &data[eol + 2 + size + 2..];
    }
}

fn request(method: &str, path: &str, headers: &str, body: &str) -> Vec<u8> {
    format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n{headers}\
         Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

async fn get_json(addr: SocketAddr, path: &str) -> Value {
    let (status, _, body) = exchange(addr, &request("GET", path, "", "")).await;
    assert!(status < 500, "{path}: {status}");
    serde_json::from_slice(&body)
        .unwrap_or_else(|e| panic!("{path}: not JSON ({e}): {}", String::from_utf8_lossy(&body)))
}

async fn post_json(addr: SocketAddr, path: &str, body: &str) -> Value {
    let (status, _, bytes) = exchange(addr, &request("POST", path, "", body)).await;
    assert!(status < 500, "{path}: {status}");
    serde_json::from_slice(&bytes).unwrap_or_else(|e| {
        panic!(
            "{path}: not JSON ({e}): {}",
            String::from_utf8_lossy(&bytes)
        )
    })
}

/// The state of every job, by id.
async fn states(addr: SocketAddr) -> Vec<(String, String)> {
    let jobs = get_json(addr, "/api/jobs").await;
    jobs["jobs"]
        .as_array()
        .expect("jobs")
        .iter()
        .map(|j| {
            (
                j["id"].as_str().unwrap_or_default().to_owned(),
                j["state"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

/// Wait (at most `within`) until every job is over; returns the states.
async fn wait_all_over(addr: SocketAddr, within: Duration) -> Vec<(String, String)> {
    let deadline = Instant::now() + within;
    loop {
        let s = states(addr).await;
        if s.iter()
            .all(|(_, st)| matches!(st.as_str(), "finished" | "failed" | "cancelled"))
        {
            return s;
        }
        assert!(Instant::now() < deadline, "jobs still running: {s:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The distinct book URLs in a job's feed.
fn book_urls(root: &Path, id: &str) -> std::collections::BTreeSet<String> {
    let text =
        std::fs::read_to_string(root.join("jobs").join(id).join("items.jsonl")).unwrap_or_default();
    text.lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"));
            v["url"].as_str().expect("url").to_owned()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scrapyd_calls_schedule_list_and_cancel_jobs() {
    let lab = Lab::builder().books(100).start().await.expect("lab");
    let dir = tempfile::tempdir().expect("tempdir");
    let svc = start(&lab.url(), dir.path(), &["--max-jobs", "2"]);
    let a = svc.addr;

    let status = get_json(a, "/daemonstatus.json").await;
    assert_eq!(status["status"], "ok", "{status}");
    assert!(status["node_name"].is_string(), "{status}");
    assert_eq!(
        get_json(a, "/listprojects.json").await["projects"],
        serde_json::json!(["default"])
    );
    assert_eq!(
        get_json(a, "/listspiders.json?project=default").await["spiders"],
        serde_json::json!(["books", "crash"])
    );
    assert_eq!(
        get_json(a, "/listversions.json?project=default").await["versions"],
        serde_json::json!([])
    );

    // Refusals, in scrapyd's shape.
    let refused = [
        (
            "/schedule.json",
            "project=default",
            "'spider' parameter is required",
        ),
        (
            "/schedule.json",
            "project=nope&spider=books",
            "project 'nope' not found",
        ),
        (
            "/schedule.json",
            "project=default&spider=bookz",
            "spider 'bookz' not found",
        ),
        (
            "/schedule.json",
            "project=default&spider=books&setting=DOWNLOAD_DELAY=2",
            "download_delay",
        ),
        (
            "/schedule.json",
            "project=default&spider=books&setting=concurency=2",
            "did you mean 'concurrency'",
        ),
        (
            "/schedule.json",
            "project=default&spider=books&colour=red",
            "colour",
        ),
        (
            "/schedule.json",
            "project=default&spider=books&jobid=../x",
            "invalid jobid",
        ),
        ("/delproject.json", "project=default", "not supported"),
        (
            "/delversion.json",
            "project=default&version=1",
            "not supported",
        ),
    ];
    for (path, body, message) in refused {
        let v = post_json(a, path, body).await;
        assert_eq!(v["status"], "error", "{path} {body}: {v}");
        let m = v["message"].as_str().expect("message");
        assert!(m.contains(message), "{path} {body}: {m}");
    }
    // A name resolved to 127.0.0.1 by someone else's DNS is not this service's.
    let rebound =
        "GET /listjobs.json HTTP/1.1\r\nHost: evil.example:6800\r\nConnection: close\r\n\r\n";
    let (code, _, _) = exchange(a, rebound.as_bytes()).await;
    assert_eq!(code, 403);
    let wrong = get_json(a, "/schedule.json?project=default&spider=books").await;
    assert!(
        wrong["message"]
            .as_str()
            .is_some_and(|m| m.contains("UnsupportedMethod")),
        "{wrong}"
    );
    assert!(
        states(a).await.is_empty(),
        "a refused schedule started nothing"
    );

    // A job runs to the end: every book, its log and items served.
    let v = post_json(
        a,
        "/schedule.json",
        "project=default&spider=books&jobid=first&priority=1",
    )
    .await;
    assert_eq!(v["jobid"], "first", "{v}");
    let over = wait_all_over(a, Duration::from_secs(90)).await;
    assert_eq!(over, vec![("first".to_owned(), "finished".to_owned())]);
    assert_eq!(book_urls(&svc.root, "first").len(), 100);
    // Its host, as the record shows it: a fixed 20 ms delay is a pace of 50 a second.
    let live = get_json(a, "/api/jobs/first").await;
    let host = &live["job"]["record"]["hosts"][0];
    assert_eq!(host["pace"].as_f64(), Some(50.0), "{live}");
    assert_eq!(host["pace_from"], "settings", "{host}");
    assert!(host["sent"].as_u64() > Some(100), "{host}");
    assert_eq!(live["job"]["items"].as_u64(), Some(100), "{live}");
    let jobs = get_json(a, "/listjobs.json?project=default").await;
    let done = &jobs["finished"][0];
    for key in [
        "id",
        "project",
        "spider",
        "start_time",
        "end_time",
        "log_url",
        "items_url",
    ] {
        assert!(!done[key].is_null(), "{key} in {done}");
    }
    let (code, head, body) = exchange(
        a,
        &request("GET", done["items_url"].as_str().unwrap(), "", ""),
    )
    .await;
    assert_eq!(code, 200);
    assert!(
        head.contains("content-type: application/x-ndjson"),
        "{head}"
    );
    assert_eq!(
        String::from_utf8_lossy(&body).lines().count(),
        100,
        "items served"
    );
    let (code, head, body) = exchange(
        a,
        &request("GET", done["log_url"].as_str().unwrap(), "", ""),
    )
    .await;
    assert_eq!(code, 200);
    assert!(head.contains("content-type: text/plain"), "{head}");
    assert!(
        String::from_utf8_lossy(&body).contains("crawl finished"),
        "{}",
        String::from_utf8_lossy(&body)
    );
    // No listing, no other file.
    for path in [
        "/logs/",
        "/logs/default/",
        "/items/default/books/",
        "/logs/default/books/../history",
    ] {
        let (code, _, _) = exchange(a, &request("GET", path, "", "")).await;
        assert_eq!(code, 404, "{path}");
    }

    // Cancelling: a running job stops (SIGTERM), the queued one never starts.
    let slow = "project=default&spider=books&setting=download_delay=300ms";
    for id in ["c1", "c2", "c3"] {
        let v = post_json(a, "/schedule.json", &format!("{slow}&jobid={id}")).await;
        assert_eq!(v["status"], "ok", "{v}");
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while get_json(a, "/daemonstatus.json").await["running"] != 2 {
        assert!(Instant::now() < deadline, "two jobs should be running");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let v = post_json(a, "/cancel.json", "project=default&job=c3").await;
    assert_eq!(v["prevstate"], "pending", "{v}");
    // Once its crawl has started (before, SIGTERM ends the process at once).
    let started = svc.root.join("jobs/c1/log");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !std::fs::read_to_string(&started)
        .unwrap_or_default()
        .contains("crawl started")
    {
        assert!(Instant::now() < deadline, "c1's crawl did not start");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let v = post_json(a, "/cancel.json", "project=default&job=c1").await;
    assert_eq!(v["prevstate"], "running", "{v}");
    let v = post_json(a, "/cancel.json", "project=default&job=nosuch").await;
    assert!(v["prevstate"].is_null(), "{v}");
    // Forced at once (scrapyd's `signal=KILL`): no graceful end in its log.
    let v = post_json(a, "/cancel.json", "project=default&job=c2&signal=KILL").await;
    assert_eq!(v["prevstate"], "running", "{v}");
    let over = wait_all_over(a, Duration::from_secs(60)).await;
    let log = |id: &str| {
        std::fs::read_to_string(svc.root.join("jobs").join(id).join("log")).unwrap_or_default()
    };
    assert!(log("c1").contains("SIGTERM"), "{}", log("c1"));
    assert!(
        log("c1").contains("crawl finished"),
        "c1 ended gracefully: {}",
        log("c1")
    );
    assert!(
        !log("c2").contains("crawl finished"),
        "c2 was killed: {}",
        log("c2")
    );
    for id in ["c1", "c2", "c3"] {
        assert!(
            over.contains(&(id.to_owned(), "cancelled".to_owned())),
            "{over:?}"
        );
    }
    assert!(
        !svc.root.join("jobs/c3").exists(),
        "a job cancelled in the queue never ran"
    );
    assert!(book_urls(&svc.root, "c1").len() < 100, "c1 was cut short");
    lab.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_jobs_four_at_once_survive_kill_9_of_the_service() {
    let lab = Lab::builder().books(100).start().await.expect("lab");
    let dir = tempfile::tempdir().expect("tempdir");
    let mut svc = start(
        &lab.url(),
        dir.path(),
        &["--max-jobs", "4", "--kill-after", "5s"],
    );
    let ids: Vec<String> = (0..20).map(|i| format!("job-{i:02}")).collect();
    for id in &ids {
        let v = post_json(
            svc.addr,
            "/schedule.json",
            &format!("project=default&spider=books&jobid={id}"),
        )
        .await;
        assert_eq!(v["status"], "ok", "{v}");
    }
    // Watch the running count until some jobs have finished and others run.
    let mut most = 0;
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let d = get_json(svc.addr, "/daemonstatus.json").await;
        let running = d["running"].as_u64().expect("running");
        most = most.max(running);
        assert!(running <= 4, "{d}");
        if d["finished"].as_u64() >= Some(6) && running > 0 {
            break;
        }
        assert!(Instant::now() < deadline, "{d}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(most, 4, "four jobs ran at once");
    let before = states(svc.addr).await;

    // kill -9 of the service in the middle, then a new one on the same root.
    svc.child.kill().expect("kill -9");
    svc.child.wait().expect("reaped");
    let svc = start(
        &lab.url(),
        dir.path(),
        &["--max-jobs", "4", "--kill-after", "5s"],
    );
    let after = states(svc.addr).await;
    assert_eq!(after.len(), 20, "{after:?}");
    for (id, state) in &before {
        if state == "finished" {
            assert!(
                after.contains(&(id.clone(), "finished".to_owned())),
                "{id}: history kept: {after:?}"
            );
        }
    }
    let over = wait_all_over(svc.addr, Duration::from_secs(180)).await;
    for id in &ids {
        assert!(
            over.contains(&(id.clone(), "finished".to_owned())),
            "{id}: {over:?}\n{id}'s log:\n{}",
            std::fs::read_to_string(svc.root.join("jobs").join(id).join("log")).unwrap_or_default()
        );
        assert_eq!(book_urls(&svc.root, id).len(), 100, "{id}: every item");
    }
    // Some jobs ran twice: once before the kill, resumed after it.
    let jobs = get_json(svc.addr, "/api/jobs").await;
    let resumed = jobs["jobs"]
        .as_array()
        .expect("jobs")
        .iter()
        .filter(|j| j["runs"].as_u64() > Some(1))
        .count();
    assert!(resumed >= 1, "{jobs}");
    lab.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_hosts_pause_resume_failures_and_a_panicking_spider() {
    use crawler_lab::Scenario;
    let lab = Lab::builder()
        .books(100)
        .scenario(Scenario::rate_limited(4.0, 1))
        .start()
        .await
        .expect("lab");
    let dir = tempfile::tempdir().expect("tempdir");
    let svc = start(&lab.url(), dir.path(), &["--kill-after", "10s"]);
    let a = svc.addr;
    // Adaptive pacing against a host that refuses what goes beyond 5/s.
    let v = post_json(
        a,
        "/schedule.json",
        "project=default&spider=books&jobid=live&setting=throttle=adaptive&setting=start_rate=10&setting=download_delay=0s&setting=concurrency_per_host=4",
    )
    .await;
    assert_eq!(v["status"], "ok", "{v}");
    // Live: the host's seconds, pace and refusals or holds appear while it runs.
    let deadline = Instant::now() + Duration::from_secs(60);
    let host = loop {
        let j = get_json(a, "/api/jobs/live").await;
        let job = &j["job"];
        if let Some(h) = job["record"]["hosts"].as_array().and_then(|h| h.first())
            && h["seconds"].as_array().is_some_and(|s| s.len() >= 3)
            && job["state"] == "running"
        {
            break h.clone();
        }
        assert!(Instant::now() < deadline, "no live host figures: {j}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    assert!(host["sent"].as_u64() > Some(0), "{host}");
    assert!(
        host["host"]
            .as_str()
            .is_some_and(|h| h.contains("127.0.0.1")),
        "{host}"
    );

    // Pause: the process stops, the job keeps its directory; resume: it finishes.
    let v = post_json(a, "/api/jobs/live/pause", "").await;
    assert_eq!(v["status"], "ok", "{v}");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !states(a)
        .await
        .contains(&("live".to_owned(), "paused".to_owned()))
    {
        assert!(Instant::now() < deadline, "not paused");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let paused_items = book_urls(&svc.root, "live").len();
    assert!(paused_items < 100, "paused before the end ({paused_items})");
    let v = post_json(a, "/api/jobs/live/resume", "").await;
    assert_eq!(v["status"], "ok", "{v}");
    let v = post_json(a, "/api/jobs/live/resume", "").await;
    assert_eq!(v["status"], "error", "resuming twice: {v}");
    let over = wait_all_over(a, Duration::from_secs(120)).await;
    assert_eq!(over, vec![("live".to_owned(), "finished".to_owned())]);
    assert_eq!(book_urls(&svc.root, "live").len(), 100, "every item");
    let j = get_json(a, "/api/jobs/live").await;
    let job = &j["job"];
    assert_eq!(job["items"].as_u64(), Some(100), "{job}");
    assert_eq!(job["runs"].as_u64(), Some(2), "{job}");
    let host = &job["record"]["hosts"][0];
    let refusals = host["refusals"].as_u64().unwrap_or(0);
    let holds = host["holds"].as_u64().unwrap_or(0);
    assert!(
        refusals + holds > 0,
        "the rate-limited host pushed back: {host}"
    );
    assert!(host["pace"].as_f64().is_some(), "{host}");
    let (code, head, _) = exchange(a, &request("GET", "/api/jobs/live/failures", "", "")).await;
    assert_eq!(code, 200);
    assert!(head.contains("application/x-ndjson"), "{head}");

    // A spider that panics: its job fails with the panic in its log; the service lives on.
    let v = post_json(
        a,
        "/schedule.json",
        "project=default&spider=crash&jobid=boom",
    )
    .await;
    assert_eq!(v["status"], "ok", "{v}");
    let over = wait_all_over(a, Duration::from_secs(60)).await;
    assert!(
        over.contains(&("boom".to_owned(), "failed".to_owned())),
        "{over:?}"
    );
    let log = std::fs::read_to_string(svc.root.join("jobs/boom/log")).expect("log");
    assert!(log.contains("panics on purpose"), "{log}");
    // A failed job can be tried again from its directory; this one fails again.
    let v = post_json(a, "/api/jobs/boom/resume", "").await;
    assert_eq!(v["status"], "ok", "{v}");
    let over = wait_all_over(a, Duration::from_secs(60)).await;
    assert!(
        over.contains(&("boom".to_owned(), "failed".to_owned())),
        "{over:?}"
    );
    let boom = get_json(a, "/api/jobs/boom").await;
    assert_eq!(boom["job"]["runs"].as_u64(), Some(2), "{boom}");
    let v = post_json(a, "/api/jobs/live/resume", "").await;
    assert_eq!(v["status"], "error", "a finished job is not resumed: {v}");
    assert_eq!(get_json(a, "/daemonstatus.json").await["status"], "ok");
    lab.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_is_required_beyond_loopback_and_checked_when_set() {
    let lab = Lab::builder().books(100).start().await.expect("lab");
    let dir = tempfile::tempdir().expect("tempdir");
    // Listening beyond this machine without a token: refused before anything starts.
    std::fs::write(dir.path().join("crawler.toml"), "").expect("settings");
    let exe = std::env::current_exe().expect("test binary");
    let out = clean(Command::new(&exe), dir.path())
        .args(child_prefix())
        .args(["serve", "--port", "0", "--bind", "0.0.0.0", "--root"])
        .arg(dir.path().join("root"))
        .env(CHILD_START, lab.url())
        .output()
        .expect("runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--token-file"), "{stderr}");
    assert!(!dir.path().join("root").exists(), "nothing made");

    // With a token: every request without it is refused, and starts nothing.
    let token = dir.path().join("token");
    std::fs::write(&token, "s3cret-token\n").expect("token");
    let svc = start(
        &lab.url(),
        dir.path(),
        &["--token-file", token.to_str().expect("utf-8")],
    );
    let a = svc.addr;
    for (method, path, body) in [
        ("POST", "/schedule.json", "project=default&spider=books"),
        ("GET", "/listjobs.json", ""),
        ("GET", "/", ""),
        ("GET", "/api/jobs", ""),
        ("POST", "/api/jobs/x/pause", ""),
    ] {
        let (code, head, _) = exchange(a, &request(method, path, "", body)).await;
        assert_eq!(code, 401, "{method} {path}");
        assert!(head.contains("www-authenticate: basic"), "{head}");
        let wrong = "Authorization: Bearer nope\r\n";
        let (code, _, _) = exchange(a, &request(method, path, wrong, body)).await;
        assert_eq!(code, 401, "{method} {path} with a wrong token");
    }
    let bearer = "Authorization: Bearer s3cret-token\r\n";
    let (code, _, body) = exchange(a, &request("GET", "/listjobs.json", bearer, "")).await;
    assert_eq!(code, 200);
    let jobs: Value = serde_json::from_slice(&body).expect("json");
    assert_eq!(
        jobs["pending"],
        serde_json::json!([]),
        "0 jobs started: {jobs}"
    );
    assert_eq!(jobs["running"], serde_json::json!([]), "{jobs}");
    assert!(
        std::fs::read_dir(svc.root.join("jobs"))
            .expect("jobs dir")
            .next()
            .is_none(),
        "no job directory"
    );
    // Basic auth with the token as password, as scrapyd's clients send it.
    use base64::Engine as _;
    let basic = format!(
        "Authorization: Basic {}\r\n",
        base64::engine::general_purpose::STANDARD.encode("anyone:s3cret-token")
    );
    let (code, _, body) = exchange(
        a,
        &request(
            "POST",
            "/schedule.json",
            &basic,
            "project=default&spider=books&jobid=ok",
        ),
    )
    .await;
    assert_eq!(code, 200);
    assert!(String::from_utf8_lossy(&body).contains("\"jobid\":\"ok\""));
    // A page of another site cannot drive the service from a browser.
    let origin = format!("{bearer}Origin: http://evil.example\r\n");
    let (code, _, _) = exchange(
        a,
        &request(
            "POST",
            "/schedule.json",
            &origin,
            "project=default&spider=books",
        ),
    )
    .await;
    assert_eq!(code, 403);
    lab.shutdown().await;
}

/// Every file under `dir`, relative, except under `skip`.
fn files_under(dir: &Path, skip: &Path) -> std::collections::BTreeSet<PathBuf> {
    let mut out = std::collections::BTreeSet::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.starts_with(skip) {
                continue;
            }
            if p.is_dir() {
                stack.push(p.clone());
            }
            out.insert(p.strip_prefix(dir).expect("under").to_path_buf());
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_malformed_requests_crash_nothing_and_write_nothing_outside_the_root() {
    let lab = Lab::builder().books(100).start().await.expect("lab");
    let sandbox = tempfile::tempdir().expect("tempdir");
    let svc = start(&lab.url(), sandbox.path(), &[]);
    let a = svc.addr;
    let outside = files_under(sandbox.path(), &svc.root);

    let evil_values = [
        "../../../../tmp/evil",
        "..%2F..%2Fevil",
        "%2e%2e",
        "..",
        ".",
        "/etc/passwd",
        "a%00b",
        "%ff%fe%fd",
        "x=y=z",
        "",
        "%0d%0aX-Injected:%201",
        "NaN",
        "inf",
        "-1e309",
        "<script>alert(1)</script>",
        "job_dir=/tmp/evil",
        "feeds=/tmp/evil.jsonl",
        "log_file=../evil.log",
        "JOB_DIR=/tmp/evil",
        "concurrency=-5",
        "download_delay=forever",
    ];
    let keys = [
        "jobid", "spider", "project", "priority", "setting", "job", "url", "_version", "..",
        "a%00", "%ff",
    ];
    let paths = [
        "/schedule.json",
        "/cancel.json",
        "/listjobs.json",
        "/listspiders.json",
        "/status.json",
        "/daemonstatus.json",
        "/api/jobs/{v}",
        "/api/jobs/{v}/pause",
        "/api/jobs/{v}/resume",
        "/api/jobs/{v}/failures",
        "/logs/default/books/{v}.log",
        "/items/default/books/{v}.jl",
        "/logs/{v}",
    ];
    let methods = ["GET", "POST", "PUT", "DELETE", "PATCH"];
    // A fixed pseudo-random sequence (an LCG), so a failure is reproducible.
    let mut seed: u64 = 0x005e_ed48;
    let mut next = |n: usize| {
        seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (seed >> 33) as usize % n
    };
    let mut server_errors = 0;
    let mut sent = 0;
    // Answers in scrapyd's error shape: the handlers saw the request and refused it.
    let mut refused = 0;
    for i in 0..100 {
        let raw: Vec<u8> = match i % 10 {
            // Not HTTP at all, or broken HTTP.
            0 => match next(4) {
                0 => b"GARBAGE\r\n\r\n".to_vec(),
                1 => b"GET /schedule.json?project=default HTTP/9.9\r\n\r\n".to_vec(),
                2 => b"POST /schedule.json HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999\r\n\r\nproject=default"
                    .to_vec(),
                _ => {
                    let mut v = b"GET /".to_vec();
                    v.extend(std::iter::repeat_n(b'a', 20_000));
                    v.extend_from_slice(b" HTTP/1.1\r\nHost: x\r\n\r\n");
                    v
                }
            },
            _ => {
                let value = evil_values[next(evil_values.len())];
                let path = paths[next(paths.len())].replace("{v}", value);
                let method = methods[next(methods.len())];
                let mut params = vec!["project=default".to_owned(), "spider=books".to_owned()];
                for _ in 0..next(5) {
                    params.push(format!(
                        "{}={}",
                        keys[next(keys.len())],
                        evil_values[next(evil_values.len())]
                    ));
                }
                let body = params.join("&");
                let query = if next(2) == 0 { format!("?{body}") } else { String::new() };
                request(method, &format!("{path}{query}"), "", &body)
            }
        };
        sent += 1;
        // A connection the server closes without an answer is a refusal too, not a crash.
        let answer = async {
            let mut s = tokio::net::TcpStream::connect(a).await?;
            s.write_all(&raw).await?;
            if i % 10 == 0 {
                // A broken request ends here, whatever its head announced (a well-formed one
                // keeps its write side open: the server closes a half-closed connection).
                s.shutdown().await?;
            }
            let mut buf = Vec::new();
            let _ = s.read_to_end(&mut buf).await;
            Ok::<_, std::io::Error>(buf)
        };
        let buf = tokio::time::timeout(Duration::from_secs(30), answer)
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "request {i} answered in time: {:?}",
                    String::from_utf8_lossy(&raw[..raw.len().min(200)])
                )
            })
            .unwrap_or_default();
        let head = String::from_utf8_lossy(&buf[..buf.len().min(64)]).into_owned();
        if String::from_utf8_lossy(&buf).contains("\"status\":\"error\"") {
            refused += 1;
        }
        eprintln!("fuzz {i}: {}", head.lines().next().unwrap_or("(closed)"));
        if head.starts_with("HTTP/1.1 5") {
            server_errors += 1;
            eprintln!("5xx for request {i}: {head}");
        }
    }
    assert_eq!(sent, 100);
    assert_eq!(server_errors, 0);
    eprintln!("{refused} of 100 refused in scrapyd's error shape");
    assert!(refused >= 40, "{refused}");
    // The service still answers, and its process lives.
    assert_eq!(get_json(a, "/daemonstatus.json").await["status"], "ok");
    wait_all_over(a, Duration::from_secs(120)).await;
    let mut svc = svc;
    assert!(
        svc.child.try_wait().expect("status").is_none(),
        "service alive"
    );
    // Nothing was written outside the root (the service's own log aside).
    let after = files_under(sandbox.path(), &svc.root);
    assert_eq!(outside, after, "files outside the root");
    assert!(!Path::new("/tmp/evil").exists() && !Path::new("/tmp/evil.jsonl").exists());
    // Every job's directory is one plain name under ROOT/jobs.
    for e in std::fs::read_dir(svc.root.join("jobs"))
        .expect("jobs")
        .flatten()
    {
        let name = e.file_name().to_string_lossy().into_owned();
        assert!(
            name.chars()
                .all(|c| c.is_ascii_alphanumeric() || "_-.".contains(c))
                && !name.starts_with('.'),
            "{name}"
        );
    }
    lab.shutdown().await;
}

/// The same calls through scrapyd's Python clients (python-scrapyd-api and scrapyd-client),
/// printed as JSON: run against this service and against scrapyd itself.
const CLIENT_SCRIPT: &str = r#"
import json, sys, time
from scrapyd_api import ScrapydAPI
from scrapyd_api.exceptions import ScrapydResponseError
from scrapyd_client import ScrapydClient

url, spider = sys.argv[1], sys.argv[2]
api = ScrapydAPI(url, timeout=30)
client = ScrapydClient(url)
out = {}
out["projects"] = api.list_projects()
out["spiders"] = api.list_spiders("default")
out["versions"] = api.list_versions("default")
out["daemon"] = client.daemonstatus()
job = api.schedule("default", spider)
out["jobid"] = job
extra = api.schedule("default", spider)
out["jobs_early"] = api.list_jobs("default")
deadline = time.time() + 90
while api.job_status("default", job) != "finished":
    if time.time() > deadline:
        sys.exit("job did not finish: " + json.dumps(api.list_jobs("default")))
    time.sleep(0.3)
out["status"] = client.status(job, "default")
out["jobs"] = api.list_jobs("default")
second = api.schedule("default", spider)
out["cancel"] = api.cancel("default", second)
third = client.schedule("default", spider)
out["cancel_client"] = client.cancel("default", third)
out["spiders_client"] = client.spiders("default")
for name, call in [
    ("delproject", lambda: api.delete_project("default")),
    ("delversion", lambda: api.delete_version("default", "r1")),
    ("unknown_spider", lambda: api.schedule("default", "nope")),
]:
    try:
        call()
        out[name] = None
    except ScrapydResponseError as e:
        out[name] = str(e)
print(json.dumps(out))
"#;

fn run_clients(dir: &Path, url: &str, spider: &str) -> Value {
    let script = dir.join("clients.py");
    std::fs::write(&script, CLIENT_SCRIPT).expect("script");
    let out = Command::new("python3")
        .arg(&script)
        .args([url, spider])
        .current_dir(dir)
        .output()
        .expect("python3 runs (CI installs python3 with python-scrapyd-api and scrapyd-client)");
    assert!(
        out.status.success(),
        "clients against {url}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON from the client script")
}

/// A tiny Scrapy project whose spider `books` reads the lab's first catalogue page, served
/// by scrapyd on a free port; returns scrapyd's process and URL.
fn start_scrapyd(dir: &Path, lab: &str) -> (Child, String) {
    let project = dir.join("scrapy");
    std::fs::create_dir_all(project.join("tiny/spiders")).expect("project dirs");
    std::fs::write(
        project.join("scrapy.cfg"),
        "[settings]\ndefault = tiny.settings\n",
    )
    .expect("scrapy.cfg");
    std::fs::write(project.join("tiny/__init__.py"), "").expect("init");
    std::fs::write(project.join("tiny/spiders/__init__.py"), "").expect("init");
    std::fs::write(
        project.join("tiny/settings.py"),
        "BOT_NAME = 'tiny'\nSPIDER_MODULES = ['tiny.spiders']\nTELNETCONSOLE_ENABLED = False\n",
    )
    .expect("settings.py");
    std::fs::write(
        project.join("tiny/spiders/books.py"),
        format!(
            "import scrapy\n\nclass Books(scrapy.Spider):\n    name = 'books'\n    \
             start_urls = ['{lab}catalogue/page-1.html']\n\n    def parse(self, response):\n        \
             yield {{'url': response.url}}\n"
        ),
    )
    .expect("spider");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    std::fs::write(
        project.join("scrapyd.conf"),
        format!(
            "[scrapyd]\nhttp_port = {port}\nbind_address = 127.0.0.1\npoll_interval = 0.2\n\
             eggs_dir = {d}/eggs\nlogs_dir = {d}/logs\nitems_dir = {d}/items\ndbs_dir = {d}/dbs\n",
            d = dir.display()
        ),
    )
    .expect("scrapyd.conf");
    let child = Command::new("scrapyd")
        .current_dir(&project)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("scrapyd.log")).expect("scrapyd log"))
        .spawn()
        .expect("scrapyd runs (CI installs it: pip install scrapyd scrapy)");
    (child, format!("http://127.0.0.1:{port}"))
}

/// The keys of a JSON object.
fn keys(v: &Value) -> std::collections::BTreeSet<String> {
    v.as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_scrapyd_clients_work_unchanged_and_get_scrapyds_shapes() {
    let lab = Lab::builder().books(100).start().await.expect("lab");
    let dir = tempfile::tempdir().expect("tempdir");
    let svc = start(&lab.url(), dir.path(), &["--max-jobs", "1"]);
    let url = format!("http://{}", svc.addr);
    let d = dir.path().to_path_buf();
    let ours = tokio::task::spawn_blocking(move || run_clients(&d, &url, "books"))
        .await
        .expect("clients");

    let (mut scrapyd, url) = start_scrapyd(dir.path(), &lab.url());
    let deadline = Instant::now() + Duration::from_secs(60);
    let addr: SocketAddr = url.trim_start_matches("http://").parse().expect("addr");
    while tokio::net::TcpStream::connect(addr).await.is_err() {
        assert!(Instant::now() < deadline, "scrapyd did not start");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let d = dir.path().to_path_buf();
    let theirs = tokio::task::spawn_blocking(move || run_clients(&d, &url, "books")).await;
    let _ = scrapyd.kill();
    let _ = scrapyd.wait();
    let theirs = theirs.expect("clients against scrapyd");
    eprintln!("this service: {ours}\nscrapyd: {theirs}");

    // The same answers where the projects agree...
    for v in [&ours, &theirs] {
        assert_eq!(v["projects"], serde_json::json!(["default"]), "{v}");
        assert!(
            v["spiders"]
                .as_array()
                .is_some_and(|s| s.contains(&"books".into())),
            "{v}"
        );
        assert_eq!(v["versions"], serde_json::json!([]), "{v}");
        assert_eq!(v["jobid"].as_str().map(str::len), Some(32), "{v}");
        assert_eq!(v["status"]["currstate"], "finished", "{v}");
        assert!(
            matches!(v["cancel"].as_str(), Some("pending" | "running")),
            "{v}"
        );
        assert!(
            v["unknown_spider"]
                .as_str()
                .is_some_and(|m| m.contains("spider 'nope' not found")),
            "{v}"
        );
        assert!(
            v["delproject"].is_string() && v["delversion"].is_string(),
            "{v}"
        );
    }
    // ...and every field scrapyd gives, in every answer and every job of every list.
    for key in ["daemon", "status", "cancel_client"] {
        let (o, t) = (keys(&ours[key]), keys(&theirs[key]));
        assert!(o.is_superset(&t), "{key}: ours {o:?}, scrapyd's {t:?}");
    }
    assert!(keys(&ours["jobs"]).is_superset(&keys(&theirs["jobs"])));
    // Jobs as listed just after scheduling (queued or running) and once over.
    let lists = ["pending", "running", "finished"];
    let compared = ["jobs_early", "jobs"]
        .iter()
        .flat_map(|when| lists.map(|l| (*when, l)));
    for (when, list) in compared {
        let theirs_keys: std::collections::BTreeSet<String> = theirs[when][list]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(keys)
            .collect();
        for job in ours[when][list].as_array().into_iter().flatten() {
            assert!(
                keys(job).is_superset(&theirs_keys),
                "{when} {list}: ours {job}, scrapyd's keys {theirs_keys:?}"
            );
        }
    }
    let finished = &ours["jobs"]["finished"];
    assert!(
        finished
            .as_array()
            .is_some_and(|f| f.iter().any(|j| j["id"] == ours["jobid"])),
        "{finished}"
    );
    assert_eq!(
        book_urls(&svc.root, ours["jobid"].as_str().expect("id")).len(),
        100
    );
    lab.shutdown().await;
}

/// Debian's chromium, found on PATH.
fn chromium() -> PathBuf {
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .flat_map(|d| [d.join("chromium"), d.join("chromium-browser")])
        .find(|p| p.is_file())
        .expect("chromium on PATH (CI installs Debian's chromium)")
}

/// The newest second, the number of points and the host of the first host chart.
async fn chart_state(page: &chromiumoxide::Page) -> Option<(f64, u64, String)> {
    let js = "(() => { const s = document.querySelector('svg.host-chart'); \
              return s ? [Number(s.getAttribute('data-last')), Number(s.getAttribute('data-points')), \
              s.getAttribute('data-host')] : null; })()";
    let v: Value = page.evaluate(js).await.ok()?.into_value().ok()?;
    let a = v.as_array()?;
    Some((a[0].as_f64()?, a[1].as_u64()?, a[2].as_str()?.to_owned()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_schedules_a_job_and_its_host_chart_moves_in_chromium() {
    use chromiumoxide::browser::{Browser, BrowserConfig};
    use chromiumoxide::page::ScreenshotParams;
    use futures_util::StreamExt as _;

    let lab = Lab::builder()
        .books(200)
        .scenario(crawler_lab::Scenario::rate_limited(8.0, 2))
        .start()
        .await
        .expect("lab");
    let dir = tempfile::tempdir().expect("tempdir");
    let svc = start(&lab.url(), dir.path(), &[]);
    let profile = tempfile::tempdir().expect("profile");
    // Debian's chromium, with the flags the browser tests use.
    let config = BrowserConfig::builder()
        .chrome_executable(chromium())
        .disable_default_args()
        .no_sandbox()
        .user_data_dir(profile.path())
        .window_size(1280, 1000)
        .args([
            "disable-gpu",
            "no-first-run",
            "disable-background-networking",
            "disable-component-update",
            "disable-sync",
            "disable-default-apps",
            "disable-extensions",
            "disable-dev-shm-usage",
            "mute-audio",
            "hide-scrollbars",
            "no-default-browser-check",
            "disable-breakpad",
        ])
        .build()
        .expect("browser config");
    let (mut browser, mut handler) = Browser::launch(config)
        .await
        .expect("chromium starts (CI installs Debian's chromium)");
    let events = tokio::spawn(async move { while handler.next().await.is_some() {} });
    let page = browser
        .new_page(format!("http://{}/", svc.addr))
        .await
        .expect("page opens");

    // The page renders: its title, the spiders to choose from, the (empty) jobs table.
    let title: String = page
        .evaluate("document.title")
        .await
        .expect("evaluate")
        .into_value()
        .expect("string");
    assert!(title.contains("crawler serve"), "{title}");
    let spiders: Vec<String> = page
        .evaluate(
            "[...document.querySelectorAll('select[name=spider] option')].map(o => o.textContent)",
        )
        .await
        .expect("evaluate")
        .into_value()
        .expect("list");
    assert_eq!(spiders, ["books", "crash"]);

    // A job scheduled from the page's form runs.
    page.evaluate(
        "document.querySelector('textarea[name=settings]').value = \
         'throttle=adaptive\\nstart_rate=20\\ndownload_delay=0s\\nconcurrency_per_host=4'; \
         document.getElementById('schedule-button').click(); true",
    )
    .await
    .expect("submit");
    let deadline = Instant::now() + Duration::from_secs(60);
    let first = loop {
        if let Some(state) = chart_state(&page).await
            && state.1 >= 2
        {
            break state;
        }
        assert!(Instant::now() < deadline, "no chart drawn");
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    assert!(first.2.contains("127.0.0.1"), "{first:?}");
    let jobs = states(svc.addr).await;
    assert_eq!(jobs.len(), 1, "{jobs:?}");
    assert_eq!(jobs[0].1, "running", "{jobs:?}");
    let shots = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let shot = |n: u32| shots.join(format!("serve-dashboard-{n}.png"));
    let png = page
        .screenshot(ScreenshotParams::builder().full_page(true).build())
        .await
        .expect("screenshot");
    std::fs::write(shot(1), &png).expect("save screenshot");

    // The chart moves as the crawl goes on: newer seconds, more points.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let second = chart_state(&page).await.expect("chart still drawn");
    assert!(
        second.0 > first.0 && second.1 >= first.1,
        "the chart did not move: {first:?} then {second:?}"
    );
    let rows: u64 = page
        .evaluate("document.querySelectorAll('#jobs tr').length")
        .await
        .expect("evaluate")
        .into_value()
        .expect("count");
    assert_eq!(rows, 1);
    let png = page
        .screenshot(ScreenshotParams::builder().full_page(true).build())
        .await
        .expect("screenshot");
    assert!(png.starts_with(b"\x89PNG"), "a PNG");
    std::fs::write(shot(2), &png).expect("save screenshot");
    eprintln!(
        "screenshots: {} and {}",
        shot(1).display(),
        shot(2).display()
    );

    let _ = browser.close().await;
    let _ = browser.wait().await;
    events.abort();
    lab.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_stopped_with_sigterm_resumes_its_jobs_at_the_next_start() {
    let lab = Lab::builder().books(100).start().await.expect("lab");
    let dir = tempfile::tempdir().expect("tempdir");
    let mut svc = start(&lab.url(), dir.path(), &["--kill-after", "10s"]);
    let v = post_json(
        svc.addr,
        "/schedule.json",
        "project=default&spider=books&jobid=slow&setting=download_delay=80ms",
    )
    .await;
    assert_eq!(v["status"], "ok", "{v}");
    let deadline = Instant::now() + Duration::from_secs(60);
    while book_urls(&svc.root, "slow").len() < 10 {
        assert!(Instant::now() < deadline, "the job made no items");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // SIGTERM: the service stops its job gracefully and exits.
    let status = svc.stop().expect("the service exits on SIGTERM");
    assert!(status.success(), "{status}");
    let cut = book_urls(&svc.root, "slow").len();
    assert!(cut < 100, "stopped before the end ({cut})");
    let log = std::fs::read_to_string(svc.root.join("jobs/slow/log")).expect("log");
    assert!(
        log.contains("SIGTERM"),
        "the job was stopped gracefully:\n{log}"
    );
    drop(svc);

    let svc = start(&lab.url(), dir.path(), &["--kill-after", "10s"]);
    let over = wait_all_over(svc.addr, Duration::from_secs(120)).await;
    assert_eq!(over, vec![("slow".to_owned(), "finished".to_owned())]);
    assert_eq!(book_urls(&svc.root, "slow").len(), 100, "every item");
    let job = get_json(svc.addr, "/api/jobs/slow").await;
    assert_eq!(job["job"]["runs"].as_u64(), Some(2), "{job}");
    lab.shutdown().await;
}

/// A client that trickles its request holds nothing: headers not complete within
/// `--client-timeout` close the connection, a body not complete within it is answered 408,
/// and other clients are answered all the while.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_trickles_its_request_is_cut_off_at_the_client_timeout() {
    let lab = Lab::builder().books(100).start().await.expect("lab");
    let dir = tempfile::tempdir().expect("tempdir");
    let served = start(&lab.url(), dir.path(), &["--client-timeout", "2s"]);
    let addr = served.addr;

    // Headers that never end.
    let mut headers = tokio::net::TcpStream::connect(addr).await.expect("connect");
    headers
        .write_all(b"GET /daemonstatus.json HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        .await
        .expect("write");
    // A body announced and never sent.
    let mut body = tokio::net::TcpStream::connect(addr).await.expect("connect");
    body.write_all(
        b"POST /schedule.json HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\
          Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 100\r\n\r\nproj",
    )
    .await
    .expect("write");
    let started = std::time::Instant::now();

    // Meanwhile the service answers others at once.
    let status = get_json(addr, "/daemonstatus.json").await;
    assert_eq!(status["status"], "ok", "{status}");

    let mut buf = Vec::new();
    let closed = tokio::time::timeout(Duration::from_secs(20), headers.read_to_end(&mut buf))
        .await
        .expect("a connection whose headers never end is closed within 20 s");
    // Closed (hyper may answer 408 first, or reset): nothing else is served on it.
    assert!(
        closed.is_err() || buf.is_empty() || buf.starts_with(b"HTTP/1.1 408"),
        "{:?}",
        String::from_utf8_lossy(&buf)
    );
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(20), body.read_to_end(&mut answer))
        .await
        .expect("a request whose body never comes is answered within 20 s")
        .expect("read");
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("--client-timeout"), "{answer}");
    // Not before the timeout: a slow client is given its whole time.
    assert!(
        started.elapsed() >= Duration::from_millis(1_900),
        "{:?}",
        started.elapsed()
    );
    drop(served);
}
