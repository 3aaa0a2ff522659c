//! Real nginx and HAProxy servers for the benchmarks that compare the lab's limiter
//! emulations with the originals. Each server gets a generated config in its own temporary
//! directory and a free 127.0.0.1 port, runs in the foreground as a child process, and is
//! killed when its handle drops. Both write an access log (arrival in ms, status, path), so a
//! crawl behind them can be judged the way the lab's recorder judges a crawl of the lab.

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Whether a program is on PATH (or in /usr/sbin, where Debian puts both servers).
pub(crate) fn which(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/usr/local/sbin")])
        .map(|dir| dir.join(program))
        .find(|p| p.is_file())
}

/// A port nobody listens on right now (the OS picks; the server binds it a moment later).
pub(crate) fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// nginx `limit_req` settings.
#[derive(Clone, Copy, Debug)]
pub(crate) struct NginxLimit {
    /// Whole requests per second (`rate=Nr/s`).
    pub rate: u32,
    /// `burst=B`.
    pub burst: u32,
    /// `nodelay` (otherwise requests within the burst are delayed).
    pub nodelay: bool,
    /// `Retry-After: N` on refusals, or none.
    pub retry_after: Option<u64>,
}

/// HAProxy stick-table settings.
#[derive(Clone, Copy, Debug)]
pub(crate) struct HaproxyLimit {
    /// Deny when `sc_http_req_rate(0) gt max`.
    pub max: u32,
    /// `http_req_rate(period)`, whole seconds.
    pub period_secs: u64,
    /// `Retry-After: N` on refusals, or none.
    pub retry_after: Option<u64>,
}

/// What the real server serves.
#[derive(Clone, Debug)]
pub(crate) enum Content {
    /// A static `index.html` (nginx only).
    Static,
    /// Proxied to this backend (for example an open lab serving the book site).
    Proxy(SocketAddr),
}

/// A running server; killed on drop.
pub(crate) struct RealServer {
    child: Child,
    /// Where it listens.
    pub addr: SocketAddr,
    log: PathBuf,
    _dir: tempfile::TempDir,
    /// The kind, for messages: "nginx" or "haproxy".
    pub kind: &'static str,
}

/// One access-log line.
#[derive(Clone, Debug)]
pub(crate) struct Logged {
    /// Arrival, milliseconds since the Unix epoch.
    pub at_ms: u64,
    /// Response status.
    pub status: u16,
    /// Request path.
    pub path: String,
}

impl RealServer {
    /// `http://127.0.0.1:PORT`
    pub(crate) fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The access log so far, in arrival order.
    pub(crate) fn log(&self) -> Vec<Logged> {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let mut out: Vec<Logged> = text
            .lines()
            .filter_map(|l| {
                let mut it = l.split_whitespace();
                let at = it.next()?;
                // nginx logs `$msec` as seconds.millis; HAProxy `%Ts%ms` as one number.
                let at_ms = match at.split_once('.') {
                    Some((s, ms)) => s.parse::<u64>().ok()? * 1000 + ms.parse::<u64>().ok()?,
                    None => at.parse().ok()?,
                };
                let status = it.next()?.parse().ok()?;
                let path = it.next().unwrap_or("/").to_owned();
                let extra = it.next();
                let at_ms = if self.kind == "nginx" {
                    // `$request_time` (seconds.millis): nginx's `$msec` is the end.
                    let took = extra
                        .and_then(|t| t.parse::<f64>().ok())
                        .map_or(0, |t| (t * 1000.0).round() as u64);
                    at_ms.saturating_sub(took)
                } else {
                    // `%Ti` (ms): on a kept-alive connection HAProxy's accept date is the end
                    // of the previous request, and the request arrived this much later.
                    at_ms + extra.and_then(|t| t.parse::<u64>().ok()).unwrap_or(0)
                };
                Some(Logged {
                    at_ms,
                    status,
                    path,
                })
            })
            .collect();
        out.sort_by_key(|l| l.at_ms);
        out
    }

    /// Starts nginx with `limit_req` in front of `content`.
    pub(crate) fn nginx(limit: NginxLimit, content: &Content) -> Result<Self, String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let d = dir.path();
        std::fs::write(d.join("index.html"), "<html><body>ok</body></html>\n")
            .map_err(|e| e.to_string())?;
        let port = free_port().map_err(|e| e.to_string())?;
        let mode = if limit.nodelay { " nodelay" } else { "" };
        // nginx rejects `burst=0`; leaving it out is the same (its default).
        let burst = if limit.burst == 0 {
            String::new()
        } else {
            format!(" burst={}", limit.burst)
        };
        let serve = match content {
            Content::Static => format!("root {};", d.display()),
            Content::Proxy(addr) => format!(
                "proxy_pass http://{addr}; proxy_http_version 1.1; proxy_set_header Connection \"\"; proxy_set_header Host $http_host;"
            ),
        };
        let ra = limit.retry_after.map_or(String::new(), |s| s.to_string());
        // `$msec` is when the log line is written: for a refusal, its arrival; for a proxied
        // page, a few ms later. `$request_time` lets the parser subtract that back.
        let child = spawn_nginx(
            d,
            "master_process off;\nworker_processes 1;\nevents { worker_connections 512; }",
            &format!(
                r#"    log_format lab '$msec $status $request_uri $request_time';
    limit_req_zone $binary_remote_addr zone=z:1m rate={rate}r/s;
    limit_req_status 429;
    map $status $retry_after {{ 429 "{ra}"; default ""; }}
    server {{
        listen 127.0.0.1:{port};
        access_log {d}/access.log lab;
        location / {{
            limit_req zone=z{burst}{mode};
            add_header Retry-After $retry_after always;
            {serve}
        }}
    }}"#,
                d = d.display(),
                rate = limit.rate,
            ),
        )?;
        let server = Self {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            log: d.join("access.log"),
            kind: "nginx",
            _dir: dir,
        };
        server.wait_listening()?;
        Ok(server)
    }

    /// Starts HAProxy with a stick table and a deny rule, in front of `backend`.
    pub(crate) fn haproxy(limit: HaproxyLimit, backend: SocketAddr) -> Result<Self, String> {
        let bin = which("haproxy").ok_or("haproxy not found")?;
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let d = dir.path();
        let port = free_port().map_err(|e| e.to_string())?;
        let hdr = limit
            .retry_after
            .map_or(String::new(), |s| format!(" hdr Retry-After {s}"));
        let log = d.join("access.log");
        // HAProxy logs to a syslog target; a file is not one, so it logs to stdout and the
        // child's stdout goes to the file. `%Ts%ms` is the accept date in ms, `%Ti` the idle
        // time before the request.
        let conf = format!(
            r#"global
    maxconn 512
    log stdout format raw local0
defaults
    mode http
    log global
    option http-server-close
    timeout connect 5s
    timeout client 30s
    timeout server 30s
frontend fe
    bind 127.0.0.1:{port}
    log-format "%Ts%ms %ST %HP %Ti"
    stick-table type ip size 1k expire 30s store http_req_rate({period}s)
    http-request track-sc0 src
    http-request deny deny_status 429{hdr} if {{ sc_http_req_rate(0) gt {max} }}
    default_backend be
backend be
    server s1 {backend}
"#,
            period = limit.period_secs,
            max = limit.max,
        );
        let conf_path = d.join("haproxy.cfg");
        std::fs::write(&conf_path, conf).map_err(|e| e.to_string())?;
        let out = std::fs::File::create(&log).map_err(|e| e.to_string())?;
        let child = Command::new(bin)
            .arg("-db")
            .arg("-f")
            .arg(&conf_path)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("haproxy: {e}"))?;
        let server = Self {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            log,
            kind: "haproxy",
            _dir: dir,
        };
        server.wait_listening()?;
        Ok(server)
    }

    fn wait_listening(&self) -> Result<(), String> {
        wait_listening(self.addr, self.kind)
    }

    /// The directory holding the config and logs (for diagnostics).
    pub(crate) fn dir(&self) -> &Path {
        self._dir.path()
    }
}

/// Start nginx as an unprivileged foreground child with its own prefix `d` (pid, logs and
/// temporary files under it, no access log unless `http` asks for one): `main` holds the
/// top-level directives (workers, `events`), `http` the lines inside `http { }`.
pub(crate) fn spawn_nginx(d: &Path, main: &str, http: &str) -> Result<Child, String> {
    let bin = which("nginx").ok_or("nginx not found")?;
    let conf = format!(
        r#"daemon off;
{main}
pid {d}/nginx.pid;
error_log {d}/error.log warn;
http {{
    access_log off;
    client_body_temp_path {d}/body;
    proxy_temp_path {d}/proxy;
    fastcgi_temp_path {d}/fastcgi;
    uwsgi_temp_path {d}/uwsgi;
    scgi_temp_path {d}/scgi;
{http}
}}
"#,
        d = d.display(),
    );
    let conf_path = d.join("nginx.conf");
    std::fs::write(&conf_path, conf).map_err(|e| e.to_string())?;
    Command::new(bin)
        .arg("-p")
        .arg(d)
        .arg("-c")
        .arg(&conf_path)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("nginx: {e}"))
}

/// Wait up to ten seconds for something to listen on `addr`.
pub(crate) fn wait_listening(addr: SocketAddr, what: &str) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if std::net::TcpStream::connect(addr).is_ok() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Err(format!("{what} did not listen on {addr}"))
}

impl Drop for RealServer {
    fn drop(&mut self) {
        // Our own child, by its handle: never a broad kill.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
