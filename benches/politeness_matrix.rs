//! The judge of the politeness policy: one crawl per cell of limiter kind × allowed rate ×
//! Retry-After, plus RateLimit-header gateways, all at once, each against its own lab
//! server, with the crawler's DEFAULT settings (only the start URL and an output feed).
//!
//! ```text
//! cargo bench --bench politeness_matrix                    # 36 cells, 10 minutes
//! cargo bench --bench politeness_matrix -- --minutes 2     # or MATRIX_MINUTES=2
//! cargo bench --bench politeness_matrix -- nginx-b0 window # cells whose name contains one
//! cargo bench --bench politeness_matrix -- --real          # nginx/HAProxy cells: lab and real server
//! cargo bench --bench politeness_matrix -- --fleet 4       # each cell crawled by 4 Redis workers
//! cargo bench --bench politeness_matrix -- --fleet 4 --batches 2  # half the cells at a time
//! cargo bench --bench politeness_matrix -- --fleet 4 --real  # 4 workers behind real nginx/HAProxy
//! ```
//!
//! With `--fleet N` each cell is crawled by N workers sharing one crawl through Redis (its
//! frontier and the host's budget): N engines in this process, each with its own Redis
//! connection, all with the default settings plus `redis_url` and a job named after the
//! cell, against the same lab limiter (with `--real`, behind the real nginx or HAProxy,
//! judged from its access log). The figures are the server's, so fleet-wide, and one
//! more goal applies: the fleet never sends more in any minute than the limiter accepts in
//! it. One `redis-server` of the bench's own (a free 127.0.0.1 port, a temporary directory,
//! no persistence) serves every cell; it is skipped with a message when not installed.
//! `--batches M` runs the cells in M consecutive groups, each group at once, for machines
//! that cannot carry every cell's workers together. `MATRIX_RECORD_DIR=DIR` writes each
//! cell's lab record (arrival and reply ms, status) to `DIR/CELL.csv` (`CELL-fleetN.csv`);
//! `MATRIX_LOG=1` sends the crawlers' log to stderr (filtered by `RUST_LOG`, default info).
//!
//! Goals per cell: zero violations (requests inside an announced wait), at most 3 refusals
//! per 1,000 pages, a steady rate (requests/s over the last half of the crawl) of at least
//! 90% of the allowed rate; header gateways: zero refusals and at least 97%.

#[allow(dead_code)]
#[path = "../examples/books/spider.rs"]
mod books;
#[allow(dead_code)]
#[path = "support/matrix.rs"]
mod matrix;
#[allow(dead_code)]
#[path = "support/real.rs"]
mod real;

use matrix::{Kind, Outcome};

#[tokio::main]
async fn main() {
    // reqwest is built without a TLS provider; the crawler's client still needs one set.
    let _ = rustls::crypto::ring::default_provider().install_default();
    if std::env::var_os("MATRIX_LOG").is_some() {
        crawler::init_logging();
    }
    let mut minutes: f64 = std::env::var("MATRIX_MINUTES")
        .ok()
        .and_then(|m| m.parse().ok())
        .unwrap_or(10.0);
    let mut real = false;
    let mut fleet_workers: Option<usize> = None;
    let mut batches: usize = 1;
    let mut filters = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--bench" => {}
            "--real" => real = true,
            "--fleet" => match args.next().map(|n| n.parse::<usize>()) {
                Some(Ok(n)) if n >= 1 => fleet_workers = Some(n),
                _ => {
                    eprintln!("--fleet needs a number of workers (1 or more)");
                    std::process::exit(2);
                }
            },
            "--batches" => match args.next().map(|n| n.parse::<usize>()) {
                Some(Ok(n)) if n >= 1 => batches = n,
                _ => {
                    eprintln!("--batches needs a number (1 or more)");
                    std::process::exit(2);
                }
            },
            "--minutes" => match args.next().and_then(|m| m.parse().ok()) {
                Some(m) => minutes = m,
                None => {
                    eprintln!("--minutes needs a number");
                    std::process::exit(2);
                }
            },
            _ => filters.push(a),
        }
    }
    let secs = (minutes * 60.0).max(10.0);
    let cells: Vec<_> = matrix::full_matrix()
        .into_iter()
        .filter(|c| filters.is_empty() || filters.iter().any(|f| c.name.contains(f.as_str())))
        .filter(|c| !real || matches!(c.kind, Kind::Nginx(_) | Kind::Haproxy))
        .collect();
    if cells.is_empty() {
        eprintln!("no cell matches {filters:?}");
        std::process::exit(2);
    }
    if real {
        for kind in ["nginx", "haproxy"] {
            if real::which(kind).is_none() {
                println!("{kind} not found on PATH: its real cells are skipped");
            }
        }
    }
    if let Some(workers) = fleet_workers {
        run_fleet(cells, secs, workers, batches, real).await;
        return;
    }
    println!(
        "{} cells, {:.1} minutes each, all at once{}\n",
        cells.len(),
        secs / 60.0,
        if real { ", lab and real server" } else { "" }
    );
    let mut runs = Vec::new();
    for cell in cells {
        if real {
            let c = cell.clone();
            runs.push(tokio::spawn(async move {
                matrix::run_real(c, secs, None).await
            }));
        }
        runs.push(tokio::spawn(async move {
            Some(matrix::run_lab(cell, secs).await)
        }));
    }
    let mut outcomes: Vec<Outcome> = Vec::new();
    for r in runs {
        match r.await {
            Ok(Some(o)) => outcomes.push(o),
            Ok(None) => {}
            Err(e) => eprintln!("a cell panicked: {e}"),
        }
    }
    outcomes.sort_by(|a, b| a.name.cmp(&b.name));
    matrix::print_table(&outcomes);
    let passed = outcomes.iter().filter(|o| o.misses().is_empty()).count();
    println!("\n{passed} of {} cells pass", outcomes.len());
}

/// Runs every cell with a fleet of `workers`, in `batches` consecutive groups, and prints
/// the fleet table and the cells passing each goal; with `real`, behind the real server
/// (nginx or HAProxy) instead of the lab's limiter.
async fn run_fleet(
    cells: Vec<matrix::Cell>,
    secs: f64,
    workers: usize,
    batches: usize,
    real: bool,
) {
    if real::which("redis-server").is_none() {
        println!("redis-server not found on PATH: the fleet matrix is skipped");
        return;
    }
    let redis = match RedisServer::start() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("could not start redis-server: {e}");
            std::process::exit(1);
        }
    };
    let fleet = matrix::Fleet {
        redis_url: redis.url(),
        workers,
    };
    let per_batch = cells.len().div_ceil(batches.min(cells.len()));
    println!(
        "{} cells, {workers} workers each (one Redis at {}), {:.1} minutes each, {} at a time\n",
        cells.len(),
        fleet.redis_url,
        secs / 60.0,
        per_batch
    );
    let mut outcomes: Vec<Outcome> = Vec::new();
    // Every cell's workers count into the process's one counter.
    let trips_before = crawler::store::redis_round_trips();
    let purposes_before = crawler::store::redis_round_trips_by_purpose();
    let answers_before = crawler::store::redis_lease_answers();
    for (b, batch) in cells.chunks(per_batch).enumerate() {
        let names: Vec<&str> = batch.iter().map(|c| c.name.as_str()).collect();
        eprintln!("batch {}: {}", b + 1, names.join(" "));
        let runs: Vec<_> = batch
            .iter()
            .cloned()
            .map(|cell| {
                let f = fleet.clone();
                tokio::spawn(async move {
                    if real {
                        matrix::run_real(cell, secs, Some(f)).await
                    } else {
                        Some(matrix::run_lab_fleet(cell, secs, Some(f)).await)
                    }
                })
            })
            .collect();
        for r in runs {
            match r.await {
                Ok(Some(o)) => outcomes.push(o),
                Ok(None) => {}
                Err(e) => eprintln!("a cell panicked: {e}"),
            }
        }
    }
    drop(redis);
    let trips = crawler::store::redis_round_trips() - trips_before;
    outcomes.sort_by(|a, b| a.name.cmp(&b.name));
    matrix::print_fleet_table(&outcomes);
    let requests: u64 = outcomes.iter().map(|o| o.requests).sum();
    let per = |n: u64| n as f64 / requests.max(1) as f64;
    let since = |now: [(&str, u64); 5], before: [(&str, u64); 5]| {
        now.iter()
            .zip(before)
            .map(|((p, n), (_, b))| format!("{p} {:.2}", per(n - b)))
            .collect::<Vec<_>>()
            .join(", ")
    };
    println!(
        "\nRedis round trips: {trips} for {requests} requests, {:.2} a request (every cell): {}; lease answers a request: {}",
        per(trips),
        since(
            crawler::store::redis_round_trips_by_purpose(),
            purposes_before
        ),
        since(crawler::store::redis_lease_answers(), answers_before),
    );
    let p = matrix::passing(&outcomes);
    let n = outcomes.len();
    println!(
        "\n{} of {n} cells pass every goal; zero violations: {} of {n}; refusals: {} of {n}; steady rate: {} of {n}; aggregate rate within the limit: {} of {n}",
        p.all, p.violations, p.refusals, p.steady, p.aggregate
    );
}

/// A redis-server of the bench's own on a free 127.0.0.1 port, with no persistence (a
/// benchmark's crawl need not survive it), killed on drop.
struct RedisServer {
    child: std::process::Child,
    port: u16,
    // Held for its lifetime: redis-server's working directory.
    _dir: tempfile::TempDir,
}

impl RedisServer {
    fn start() -> Result<Self, String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let port = real::free_port().map_err(|e| e.to_string())?;
        let child = std::process::Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(dir.path())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .map_err(|e| e.to_string())?;
        let server = Self {
            child,
            port,
            _dir: dir,
        };
        // Bounded: up to 5 s for it to answer a PING.
        for _ in 0..250 {
            if server.ping() {
                return Ok(server);
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        Err(format!(
            "redis-server did not answer on port {port} within 5 s"
        ))
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    fn ping(&self) -> bool {
        use std::io::{Read, Write};
        let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", self.port)) else {
            return false;
        };
        let _ = s.set_read_timeout(Some(std::time::Duration::from_secs(1)));
        let mut buf = [0u8; 16];
        s.write_all(b"*1\r\n$4\r\nPING\r\n").is_ok()
            && s.read(&mut buf)
                .is_ok_and(|n| buf[..n].starts_with(b"+PONG"))
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
