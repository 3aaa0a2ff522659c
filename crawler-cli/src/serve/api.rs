//! The HTTP side: scrapyd's API with its answers' shapes (so its clients work unchanged),
//! a JSON API of its own under `/api/`, each job's log and items, the dashboard, and the
//! guard in front of them all.
//!
//! Every input is checked before anything happens, and refused with scrapyd's error shape
//! (`{"status": "error", "message": ...}`): parameters are bounded in number and size and
//! hold no NUL; a job id is letters, digits, `_`, `-` and `.` (not first), so it names one
//! directory under the service's root and nothing else; a spider's arguments and settings
//! are checked by the spider and the settings themselves, with their "did you mean" hints.
//! Like scrapyd, its endpoints answer errors with HTTP 200; the `/api/` endpoints answer
//! them with a 4xx status as well.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Path as UrlPath, RawQuery, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use base64::Engine as _;
use serde_json::{Map, Value, json};

use super::jobs::{Job, Service, State as JobState, now_ms};
use super::live::{Counts, RecordTail};
use super::start::Check;

type Svc = Arc<Service>;

/// Parameters a request may carry, at most.
const MAX_PARAMS: usize = 256;
/// Longest parameter name.
const MAX_KEY: usize = 128;
/// Longest parameter value.
const MAX_VALUE: usize = 8 * 1024;
/// Longest a scheduled job's check by its spider may take.
const CHECK_TIMEOUT: Duration = Duration::from_secs(10);
/// Settings a scheduled job may not set: they name files, programs or sockets (a job's
/// files stay under the service's root; the service's own settings file may set them).
const SERVICE_SETTINGS: &[&str] = &[
    "job_dir",
    "failures_file",
    "feeds",
    "log_file",
    "cache_dir",
    "metrics_addr",
    "browser_executable",
    "redis_url",
    "warc",
    "files_store",
    "images_store",
];
/// Bytes of a job's log shown in its live view.
const LOG_TAIL: u64 = 16 * 1024;

/// The service's routes.
pub(super) fn router(svc: Svc) -> Router {
    Router::new()
        .route("/daemonstatus.json", any(daemonstatus))
        .route("/listprojects.json", any(listprojects))
        .route("/listversions.json", any(listversions))
        .route("/listspiders.json", any(listspiders))
        .route("/listjobs.json", any(listjobs))
        .route("/status.json", any(status))
        .route("/schedule.json", any(schedule))
        .route("/cancel.json", any(cancel))
        .route("/addversion.json", any(unsupported))
        .route("/delproject.json", any(unsupported))
        .route("/delversion.json", any(unsupported))
        .route("/logs/{project}/{spider}/{file}", get(log_file))
        .route("/items/{project}/{spider}/{file}", get(items_file))
        .route("/api/jobs", get(api_jobs))
        .route("/api/jobs/{id}", get(api_job))
        .route("/api/jobs/{id}/failures", get(api_failures))
        .route("/api/jobs/{id}/{action}", any(api_action))
        .route("/", get(dashboard))
        .fallback(not_found)
        .layer(middleware::from_fn_with_state(Arc::clone(&svc), guard))
        .with_state(svc)
}

/// A request's parameters: the query's, then a form body's (scrapyd reads both).
struct Params(Vec<(String, String)>);

impl Params {
    fn read(query: Option<&str>, body: &[u8]) -> Result<Self, String> {
        let mut all = Vec::new();
        let parts = query
            .map(str::as_bytes)
            .into_iter()
            .chain((!body.is_empty()).then_some(body));
        for part in parts {
            for (k, v) in url::form_urlencoded::parse(part) {
                if all.len() >= MAX_PARAMS {
                    return Err(format!("too many parameters (at most {MAX_PARAMS})"));
                }
                if k.len() > MAX_KEY || v.len() > MAX_VALUE {
                    return Err(format!(
                        "parameter '{}' is too long (names up to {MAX_KEY} bytes, values up to \
                         {MAX_VALUE})",
                        clip(&k)
                    ));
                }
                if k.contains('\0') || v.contains('\0') {
                    return Err(format!("parameter '{}' holds a NUL character", clip(&k)));
                }
                all.push((k.into_owned(), v.into_owned()));
            }
        }
        Ok(Self(all))
    }

    fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    fn required(&self, key: &str) -> Result<&str, String> {
        self.get(key)
            .ok_or_else(|| format!("'{key}' parameter is required"))
    }
}

/// At most 40 characters of `text`, for messages.
fn clip(text: &str) -> String {
    let mut out: String = text.chars().take(40).collect();
    if out.len() < text.len() {
        out.push('…');
    }
    out
}

/// A project name or job id: 1 to 64 letters, digits, `_`, `-`, `.`, not starting with `.`
/// or `-`, so it is one path component of its own, never `..`.
pub(super) fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
        && !name.starts_with(['.', '-'])
}

/// A spider argument's or setting's name.
fn valid_key(key: &str) -> bool {
    !key.is_empty()
        && key.len() <= MAX_KEY
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.'))
        && !key.starts_with(|c: char| c.is_ascii_digit() || c == '.')
}

fn with_node(svc: &Service, mut body: Map<String, Value>, status: &str) -> Value {
    body.insert("status".into(), status.into());
    body.insert("node_name".into(), svc.cfg.node_name.clone().into());
    Value::Object(body)
}

fn json_response(code: StatusCode, v: &Value) -> Response {
    let mut resp = (code, v.to_string()).into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

/// A scrapyd answer: `status: ok` and the node's name added to `body`.
fn ok(svc: &Service, body: Value) -> Response {
    let body = match body {
        Value::Object(m) => m,
        _ => Map::new(),
    };
    json_response(StatusCode::OK, &with_node(svc, body, "ok"))
}

/// A scrapyd error (HTTP 200, as scrapyd answers).
fn error(svc: &Service, message: impl Into<String>) -> Response {
    error_with(svc, StatusCode::OK, message)
}

fn error_with(svc: &Service, code: StatusCode, message: impl Into<String>) -> Response {
    let mut m = Map::new();
    m.insert("message".into(), message.into().into());
    json_response(code, &with_node(svc, m, "error"))
}

/// scrapyd's message for a method an endpoint does not take.
fn wrong_method(allowed: &str) -> String {
    format!("UnsupportedMethod: Expected one of [b'HEAD', b'OPTIONS', b'{allowed}']")
}

/// The parameters of a GET endpoint, or why the request is refused.
fn get_params(method: &Method, query: Option<&str>) -> Result<Params, String> {
    if method != Method::GET && method != Method::HEAD {
        return Err(wrong_method("GET"));
    }
    Params::read(query, &[])
}

/// The parameters of a POST endpoint, or why the request is refused.
fn post_params(
    method: &Method,
    headers: &HeaderMap,
    query: Option<&str>,
    body: &[u8],
) -> Result<Params, String> {
    if method != Method::POST {
        return Err(wrong_method("POST"));
    }
    let form = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_none_or(|t| t.starts_with("application/x-www-form-urlencoded"));
    if !form {
        return Err(
            "parameters are read from the query or an application/x-www-form-urlencoded body"
                .into(),
        );
    }
    Params::read(query, body)
}

/// The `project` parameter, which must name this service's project.
fn project<'a>(svc: &Service, p: &'a Params, required: bool) -> Result<Option<&'a str>, String> {
    match p.get("project") {
        None if required => Err("'project' parameter is required".into()),
        None => Ok(None),
        Some(name) if name == svc.cfg.project => Ok(Some(name)),
        Some(name) => Err(format!("project '{}' not found", clip(name))),
    }
}

/// The value, or return scrapyd's error answer with the message.
macro_rules! tri {
    ($svc:expr, $e:expr) => {
        match $e {
            Ok(v) => v,
            Err(message) => return error(&$svc, message),
        }
    };
}

async fn daemonstatus(State(svc): State<Svc>, method: Method, RawQuery(q): RawQuery) -> Response {
    tri!(svc, get_params(&method, q.as_deref()));
    let (pending, running, finished) = svc.counts();
    ok(
        &svc,
        json!({"pending": pending, "running": running, "finished": finished}),
    )
}

async fn listprojects(State(svc): State<Svc>, method: Method, RawQuery(q): RawQuery) -> Response {
    tri!(svc, get_params(&method, q.as_deref()));
    ok(&svc, json!({"projects": [svc.cfg.project]}))
}

async fn listversions(State(svc): State<Svc>, method: Method, RawQuery(q): RawQuery) -> Response {
    let p = tri!(svc, get_params(&method, q.as_deref()));
    tri!(svc, project(&svc, &p, true));
    // The project is built into this program: it has no uploaded versions.
    ok(&svc, json!({"versions": []}))
}

async fn listspiders(State(svc): State<Svc>, method: Method, RawQuery(q): RawQuery) -> Response {
    let p = tri!(svc, get_params(&method, q.as_deref()));
    tri!(svc, project(&svc, &p, true));
    ok(&svc, json!({"spiders": svc.cfg.spiders}))
}

/// scrapyd's time format: `2024-05-01 12:00:00.123456` (UTC here).
pub(super) fn scrapyd_time(unix_ms: i64) -> String {
    let secs = unix_ms.div_euclid(1000);
    let micros = unix_ms.rem_euclid(1000) * 1000;
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}.{micros:06}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

fn log_url(svc: &Service, job: &Job) -> String {
    format!("/logs/{}/{}/{}.log", svc.cfg.project, job.spider, job.id)
}

fn items_url(svc: &Service, job: &Job) -> String {
    format!("/items/{}/{}/{}.jl", svc.cfg.project, job.spider, job.id)
}

fn pairs(list: &[(String, String)]) -> Value {
    Value::Object(
        list.iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect(),
    )
}

async fn listjobs(State(svc): State<Svc>, method: Method, RawQuery(q): RawQuery) -> Response {
    let p = tri!(svc, get_params(&method, q.as_deref()));
    tri!(svc, project(&svc, &p, false));
    let (mut pending, mut running, mut finished) = (Vec::new(), Vec::new(), Vec::new());
    let project = &svc.cfg.project;
    for job in svc.jobs() {
        let time = |t: Option<i64>| t.map(scrapyd_time);
        match job.state {
            JobState::Pending => pending.push(json!({
                "id": job.id, "project": project, "spider": job.spider, "version": null,
                "settings": pairs(&job.settings), "args": pairs(&job.args),
                "state": job.state.as_str(),
            })),
            JobState::Running | JobState::Paused => running.push(json!({
                "id": job.id, "project": project, "spider": job.spider, "pid": job.pid,
                "start_time": time(job.start_ms), "log_url": log_url(&svc, &job),
                "items_url": items_url(&svc, &job), "state": job.state.as_str(),
            })),
            _ => finished.push(json!({
                "id": job.id, "project": project, "spider": job.spider,
                "start_time": time(job.start_ms), "end_time": time(job.end_ms),
                "log_url": log_url(&svc, &job), "items_url": items_url(&svc, &job),
                "state": job.state.as_str(), "outcome": job.outcome,
            })),
        }
    }
    ok(
        &svc,
        json!({"pending": pending, "running": running, "finished": finished}),
    )
}

async fn status(State(svc): State<Svc>, method: Method, RawQuery(q): RawQuery) -> Response {
    let p = tri!(svc, get_params(&method, q.as_deref()));
    tri!(svc, project(&svc, &p, false));
    let id = tri!(svc, p.required("job"));
    let state = svc.job(id).map(|j| match j.state {
        JobState::Pending => "pending",
        JobState::Running | JobState::Paused => "running",
        _ => "finished",
    });
    ok(&svc, json!({"currstate": state}))
}

/// A new job id: 32 hex digits, as scrapyd's (uuid1 hex).
fn new_job_id() -> String {
    let word = || {
        let mut h = RandomState::new().build_hasher();
        h.write_i64(now_ms());
        h.finish()
    };
    format!("{:016x}{:016x}", word(), word())
}

async fn schedule(
    State(svc): State<Svc>,
    method: Method,
    headers: HeaderMap,
    RawQuery(q): RawQuery,
    body: Bytes,
) -> Response {
    let p = tri!(svc, post_params(&method, &headers, q.as_deref(), &body));
    tri!(svc, project(&svc, &p, true));
    let spider = tri!(svc, p.required("spider"));
    if !svc.cfg.spiders.iter().any(|s| s == spider) {
        return error(&svc, format!("spider '{}' not found", clip(spider)));
    }
    if let Some(v) = p.get("_version").filter(|v| !v.is_empty()) {
        return error(
            &svc,
            format!(
                "version '{}' not found: the project is built into this program and has no \
                 other versions",
                clip(v)
            ),
        );
    }
    let id = match p.get("jobid") {
        Some(id) if valid_name(id) => id.to_owned(),
        Some(id) => {
            return error(
                &svc,
                format!(
                    "invalid jobid '{}': 1 to 64 letters, digits, '_', '-' and '.', not starting \
                     with '.' or '-'",
                    clip(id)
                ),
            );
        }
        None => new_job_id(),
    };
    let priority = match p.get("priority") {
        None => 0.0,
        Some(text) => match text.trim().parse::<f64>() {
            Ok(v) if v.is_finite() => v,
            _ => {
                return error(&svc, format!("invalid priority '{}': a number", clip(text)));
            }
        },
    };
    let mut settings = Vec::new();
    let mut args: Vec<(String, String)> = Vec::new();
    for (k, v) in &p.0 {
        match k.as_str() {
            "project" | "spider" | "_version" | "jobid" | "priority" => {}
            "setting" => {
                let Some((key, value)) = v.split_once('=') else {
                    return error(&svc, format!("setting '{}': expected KEY=VALUE", clip(v)));
                };
                let key = key.trim();
                if !valid_key(key) {
                    return error(&svc, format!("invalid setting name '{}'", clip(key)));
                }
                if SERVICE_SETTINGS.contains(&key.to_ascii_lowercase().as_str()) {
                    return error(
                        &svc,
                        format!(
                            "setting '{key}' cannot be set per job: it names a file, a program \
                             or a socket, and the service decides where a job's files go"
                        ),
                    );
                }
                settings.push((key.to_owned(), value.to_owned()));
            }
            key => {
                if !valid_key(key) {
                    return error(
                        &svc,
                        format!(
                            "invalid spider argument name '{}': letters, digits and '_'",
                            clip(key)
                        ),
                    );
                }
                if args.iter().any(|(a, _)| a == key) {
                    return error(&svc, format!("spider argument '{key}' given twice"));
                }
                args.push((key.to_owned(), v.clone()));
            }
        }
    }
    // The spider checks its own arguments, the settings their names and values.
    let (reply, verdict) = tokio::sync::oneshot::channel();
    let check = Check {
        spider: spider.to_owned(),
        args: args.clone(),
        settings: settings.clone(),
        reply,
    };
    if svc.checks.send(check).await.is_err() {
        return error(&svc, "the service is stopping");
    }
    let pace = match tokio::time::timeout(CHECK_TIMEOUT, verdict).await {
        Ok(Ok(Ok(pace))) => pace,
        Ok(Ok(Err(why))) => return error(&svc, why),
        _ => return error(&svc, "the spider did not check the job's arguments in time"),
    };
    match svc.enqueue(
        id.clone(),
        spider.to_owned(),
        args,
        settings,
        priority,
        pace,
    ) {
        Ok(()) => ok(&svc, json!({"jobid": id})),
        Err(why) => error(&svc, why),
    }
}

async fn cancel(
    State(svc): State<Svc>,
    method: Method,
    headers: HeaderMap,
    RawQuery(q): RawQuery,
    body: Bytes,
) -> Response {
    let p = tri!(svc, post_params(&method, &headers, q.as_deref(), &body));
    tri!(svc, project(&svc, &p, true));
    let id = tri!(svc, p.required("job"));
    if !valid_name(id) {
        return error(&svc, format!("invalid job id '{}'", clip(id)));
    }
    let mut prev = svc.cancel(id);
    // `signal=KILL` (scrapyd's option) does not wait for a graceful stop.
    if prev == Some("running")
        && p.get("signal")
            .is_some_and(|s| matches!(s, "KILL" | "SIGKILL" | "9"))
    {
        prev = svc.cancel(id).or(prev);
    }
    ok(&svc, json!({"prevstate": prev}))
}

async fn unsupported(State(svc): State<Svc>, uri: axum::http::Uri) -> Response {
    let what = uri.path().trim_start_matches('/');
    error(
        &svc,
        format!(
            "{what} is not supported: this service runs the one project built into its \
             program (rebuild and restart it to change the project)"
        ),
    )
}

/// A file streamed from disk in 64 KiB reads on the blocking pool.
fn send_file(path: &Path, content_type: &'static str) -> Response {
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(_) => return not_found_text(),
    };
    let stream = futures_util::stream::unfold(Some(file), |state| async move {
        let mut file = state?;
        let read = tokio::task::spawn_blocking(move || {
            let mut buf = vec![0u8; 64 * 1024];
            let n = file.read(&mut buf)?;
            buf.truncate(n);
            Ok::<_, std::io::Error>((file, buf))
        })
        .await;
        match read {
            Ok(Ok((_, buf))) if buf.is_empty() => None,
            Ok(Ok((file, buf))) => Some((Ok(Bytes::from(buf)), Some(file))),
            Ok(Err(e)) => Some((Err(e), None)),
            Err(e) => Some((Err(std::io::Error::other(e.to_string())), None)),
        }
    });
    let mut resp = Body::from_stream(stream).into_response();
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    resp
}

fn not_found_text() -> Response {
    (StatusCode::NOT_FOUND, "not found\n").into_response()
}

async fn not_found() -> Response {
    not_found_text()
}

/// The job a `/logs/` or `/items/` path names, if project, spider and file name agree.
fn job_file(
    svc: &Service,
    project: &str,
    spider: &str,
    file: &str,
    ext: &str,
) -> Option<(Job, PathBuf)> {
    let id = file.strip_suffix(ext)?;
    if project != svc.cfg.project || !valid_name(id) {
        return None;
    }
    let job = svc.job(id)?;
    (job.spider == spider).then(|| {
        let dir = svc.dir(id);
        (job, dir)
    })
}

async fn log_file(
    State(svc): State<Svc>,
    UrlPath((project, spider, file)): UrlPath<(String, String, String)>,
) -> Response {
    match job_file(&svc, &project, &spider, &file, ".log") {
        Some((_, dir)) => send_file(&dir.join("log"), "text/plain; charset=utf-8"),
        None => not_found_text(),
    }
}

async fn items_file(
    State(svc): State<Svc>,
    UrlPath((project, spider, file)): UrlPath<(String, String, String)>,
) -> Response {
    match job_file(&svc, &project, &spider, &file, ".jl") {
        Some((_, dir)) => send_file(&dir.join("items.jsonl"), "application/x-ndjson"),
        None => not_found_text(),
    }
}

/// A job's figures counted from its files: items in its feed, lines in its failures file.
fn counted(svc: &Service, job: &Job, with_hosts: bool) -> (u64, u64, Option<Value>) {
    let dir = svc.dir(&job.id);
    let mut live = svc.live.lock().unwrap_or_else(|e| e.into_inner());
    let (tail, items, failures) = live
        .entry(job.id.clone())
        .or_insert_with(|| (RecordTail::default(), Counts::default(), Counts::default()));
    let n_items = items.update(&dir.join("items.jsonl"));
    let n_failures = failures.update(&dir.join("failures.jsonl"));
    let hosts = with_hosts.then(|| {
        tail.update(&dir.join("state").join(crawler::sched::record::RECORD_FILE));
        let mut hosts = serde_json::to_value(tail.hosts()).unwrap_or_default();
        // Until the record states a host's rate, it runs at the pace the settings start it at.
        if let (Some(pace), Some(hosts)) = (job.initial_pace, hosts.as_array_mut()) {
            for h in hosts.iter_mut().filter(|h| h["pace"].is_null()) {
                h["pace"] = pace.into();
                h["pace_from"] = "settings".into();
            }
        }
        json!({
            "runs": tail.runs(),
            "bad_lines": tail.bad_lines(),
            "hosts": hosts,
        })
    });
    (n_items, n_failures, hosts)
}

fn job_json(svc: &Service, job: &Job, with_hosts: bool) -> Value {
    let (items, failures, record) = counted(svc, job, with_hosts);
    let mut v = json!({
        "id": job.id,
        "project": svc.cfg.project,
        "spider": job.spider,
        "state": job.state.as_str(),
        "args": pairs(&job.args),
        "settings": pairs(&job.settings),
        "priority": job.priority,
        "pid": job.pid,
        "runs": job.runs,
        "outcome": job.outcome,
        "created": scrapyd_time(job.created_ms),
        "start_time": job.start_ms.map(scrapyd_time),
        "end_time": job.end_ms.map(scrapyd_time),
        "elapsed_s": job.elapsed_s(),
        "items": items,
        "failures": failures,
        "log_url": log_url(svc, job),
        "items_url": items_url(svc, job),
        "failures_url": format!("/api/jobs/{}/failures", job.id),
    });
    if let (Some(record), Value::Object(m)) = (record, &mut v) {
        m.insert("record".into(), record);
        m.insert(
            "log_tail".into(),
            log_tail(&svc.dir(&job.id).join("log")).into(),
        );
    }
    v
}

/// The last [`LOG_TAIL`] bytes of a log, from a line start.
fn log_tail(path: &Path) -> String {
    use std::io::{Seek, SeekFrom};
    let Ok(mut file) = std::fs::File::open(path) else {
        return String::new();
    };
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    let start = len.saturating_sub(LOG_TAIL);
    if file.seek(SeekFrom::Start(start)).is_err() {
        return String::new();
    }
    let mut buf = Vec::new();
    let _ = file.take(LOG_TAIL).read_to_end(&mut buf);
    let text = String::from_utf8_lossy(&buf);
    match (start > 0, text.find('\n')) {
        (true, Some(i)) => text[i + 1..].to_owned(),
        _ => text.into_owned(),
    }
}

async fn api_jobs(State(svc): State<Svc>) -> Response {
    let jobs: Vec<Value> = svc
        .jobs()
        .iter()
        .rev()
        .map(|j| job_json(&svc, j, false))
        .collect();
    ok(
        &svc,
        json!({"project": svc.cfg.project, "spiders": svc.cfg.spiders, "max_jobs": svc.cfg.max_jobs, "jobs": jobs}),
    )
}

fn unknown_job(svc: &Service, id: &str) -> Response {
    error_with(
        svc,
        StatusCode::NOT_FOUND,
        format!("job '{}' not found", clip(id)),
    )
}

async fn api_job(State(svc): State<Svc>, UrlPath(id): UrlPath<String>) -> Response {
    match svc.job(&id).filter(|_| valid_name(&id)) {
        Some(job) => ok(&svc, json!({"job": job_json(&svc, &job, true)})),
        None => unknown_job(&svc, &id),
    }
}

async fn api_failures(State(svc): State<Svc>, UrlPath(id): UrlPath<String>) -> Response {
    if !valid_name(&id) || svc.job(&id).is_none() {
        return unknown_job(&svc, &id);
    }
    let path = svc.dir(&id).join("failures.jsonl");
    if !path.exists() {
        let mut resp = Response::new(Body::empty());
        resp.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/x-ndjson"),
        );
        return resp;
    }
    send_file(&path, "application/x-ndjson")
}

async fn api_action(
    State(svc): State<Svc>,
    method: Method,
    UrlPath((id, action)): UrlPath<(String, String)>,
) -> Response {
    if method != Method::POST {
        return error_with(&svc, StatusCode::METHOD_NOT_ALLOWED, "use POST");
    }
    if !valid_name(&id) || svc.job(&id).is_none() {
        return unknown_job(&svc, &id);
    }
    let done = match action.as_str() {
        "pause" => svc.pause(&id).map(|s| json!({"state": s.as_str()})),
        "resume" => svc.resume(&id).map(|()| json!({"state": "pending"})),
        "cancel" => Ok(json!({"prevstate": svc.cancel(&id)})),
        _ => {
            return error_with(
                &svc,
                StatusCode::NOT_FOUND,
                format!("no action '{}' (pause, resume, cancel)", clip(&action)),
            );
        }
    };
    match done {
        Ok(v) => ok(&svc, v),
        Err(why) => error_with(&svc, StatusCode::CONFLICT, why),
    }
}

async fn dashboard(State(svc): State<Svc>) -> Response {
    let mut resp = super::page::html(&svc).into_response();
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    // Its own inline script and nothing from elsewhere.
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; \
             connect-src 'self'; img-src 'self' data:; form-action 'self'",
        ),
    );
    resp
}

/// In front of every route: a request from another site's page is refused (a browser
/// names its origin), and with a token every request must carry it. Without a token the
/// service answers only requests addressed to a loopback name, so a site whose name is
/// made to resolve to 127.0.0.1 (DNS rebinding) cannot reach it from a browser.
async fn guard(State(svc): State<Svc>, req: Request, next: Next) -> Response {
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("");
    if svc.cfg.token.is_none() && !loopback_host(host) {
        return error_with(
            &svc,
            StatusCode::FORBIDDEN,
            "without a token the service answers requests to 127.0.0.1, [::1] or localhost \
             only",
        );
    }
    if let Some(origin) = req.headers().get(header::ORIGIN) {
        let origin = origin.to_str().unwrap_or("");
        let same = origin
            .strip_prefix("http://")
            .or_else(|| origin.strip_prefix("https://"))
            .is_some_and(|o| !host.is_empty() && o == host);
        if !same {
            return error_with(
                &svc,
                StatusCode::FORBIDDEN,
                "a request from another site's page is refused",
            );
        }
    }
    if let Some(token) = &svc.cfg.token
        && !authorized(req.headers(), token)
    {
        let mut resp = error_with(
            &svc,
            StatusCode::UNAUTHORIZED,
            "a token is required (Authorization: Bearer TOKEN, or basic auth with the token \
             as password)",
        );
        resp.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Basic realm=\"crawler serve\""),
        );
        return resp;
    }
    // The body is read inside the handler: a client that sends it slower than this (or a
    // handler stuck that long) gets 408 instead of holding the connection. Downloads are
    // streamed after the answer's head, so a long one is not cut.
    match tokio::time::timeout(svc.cfg.client_timeout, next.run(req)).await {
        Ok(resp) => resp,
        Err(_) => error_with(
            &svc,
            StatusCode::REQUEST_TIMEOUT,
            format!(
                "the request was not received and answered within --client-timeout ({})",
                humantime::format_duration(svc.cfg.client_timeout)
            ),
        ),
    }
}

/// Whether a Host header names this machine's loopback (`127.0.0.1:6800`, `[::1]`,
/// `localhost`).
fn loopback_host(host: &str) -> bool {
    let name = match host.strip_prefix('[') {
        Some(rest) => rest.split(']').next().unwrap_or(""),
        None => host.split(':').next().unwrap_or(""),
    };
    name.eq_ignore_ascii_case("localhost")
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// Whether the request carries `token`: as a bearer token, or as basic auth's password
/// (any user name).
fn authorized(headers: &HeaderMap, token: &str) -> bool {
    let Some(value) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let value = value.trim();
    if let Some(bearer) = value
        .strip_prefix("Bearer ")
        .or_else(|| value.strip_prefix("bearer "))
    {
        return same_secret(bearer.trim().as_bytes(), token.as_bytes());
    }
    if let Some(basic) = value
        .strip_prefix("Basic ")
        .or_else(|| value.strip_prefix("basic "))
        && let Ok(decoded) = base64::engine::general_purpose::STANDARD.decode(basic.trim())
        && let Some(at) = decoded.iter().position(|b| *b == b':')
    {
        return same_secret(&decoded[at + 1..], token.as_bytes());
    }
    false
}

/// Compare secrets in time that does not depend on where they differ.
fn same_secret(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_one_path_component() {
        for good in ["a", "job-1", "x.y_z", "0f3a"] {
            assert!(valid_name(good), "{good}");
        }
        for bad in [
            "",
            ".",
            "..",
            "../x",
            "a/b",
            "-rf",
            ".hidden",
            "a\\b",
            "é",
            &"x".repeat(65),
        ] {
            assert!(!valid_name(bad), "{bad}");
        }
    }

    #[test]
    fn times_read_as_scrapyd_writes_them() {
        assert_eq!(scrapyd_time(0), "1970-01-01 00:00:00.000000");
        assert_eq!(
            scrapyd_time(1_714_564_800_123),
            "2024-05-01 12:00:00.123000"
        );
        assert_eq!(scrapyd_time(951_782_400_000), "2000-02-29 00:00:00.000000");
    }

    #[test]
    fn loopback_hosts_only() {
        for good in [
            "127.0.0.1:6800",
            "127.0.0.1",
            "localhost:6800",
            "[::1]:6800",
            "127.1.2.3",
        ] {
            assert!(loopback_host(good), "{good}");
        }
        for bad in [
            "",
            "evil.example:6800",
            "10.0.0.1:6800",
            "[::2]",
            "localhost.evil.example",
        ] {
            assert!(!loopback_host(bad), "{bad}");
        }
    }

    #[test]
    fn tokens_as_bearer_or_basic_password() {
        let mut h = HeaderMap::new();
        assert!(!authorized(&h, "s3cret"));
        h.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Bearer s3cret"),
        );
        assert!(authorized(&h, "s3cret"));
        assert!(!authorized(&h, "s3cre"));
        // "user:s3cret"
        h.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Basic dXNlcjpzM2NyZXQ="),
        );
        assert!(authorized(&h, "s3cret"));
        assert!(!authorized(&h, "other"));
    }

    #[test]
    fn parameters_are_bounded() {
        let p = Params::read(Some("a=1&b=2"), b"c=3&a=4").expect("parses");
        assert_eq!(p.get("a"), Some("1"));
        assert_eq!(p.get("c"), Some("3"));
        assert!(Params::read(Some("a=%00"), b"").is_err());
        let many = (0..300)
            .map(|i| format!("k{i}=v"))
            .collect::<Vec<_>>()
            .join("&");
        assert!(Params::read(Some(&many), b"").is_err());
    }
}
