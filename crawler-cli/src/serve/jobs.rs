//! The jobs: their queue, their processes and their history on disk.
//!
//! Every change of a job is written to the history (a sled tree, flushed) before it is
//! acted on, so a service killed at any point finds on its next start what it was doing:
//! a job marked running whose process is gone is queued again and resumes from its job
//! directory; one whose process survived the service is stopped first (SIGTERM, then
//! SIGKILL), then resumed the same way.

use std::collections::{BTreeMap, HashMap};
use std::ffi::OsString;
use std::fs::OpenOptions;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use crawler::{Error, ErrorKind};
use serde::{Deserialize, Serialize};
use tokio::sync::{Notify, mpsc};

use super::live::{Counts, RecordTail};
use super::proc;
use super::start::{Check, job_dir};

/// What the service was started with.
pub(super) struct Config {
    /// The service's directory (canonical).
    pub(super) root: PathBuf,
    pub(super) project: String,
    pub(super) spiders: Vec<String>,
    pub(super) node_name: String,
    pub(super) max_jobs: usize,
    pub(super) program: PathBuf,
    pub(super) leading: Vec<OsString>,
    /// Settings options every job gets (the service's `--settings`, `-s`, `-L`).
    pub(super) forward: Vec<OsString>,
    pub(super) kill_after: Duration,
    /// `--client-timeout`: a request's headers, then its body and answer, within this.
    pub(super) client_timeout: Duration,
    pub(super) token: Option<String>,
}

/// Where a job is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(super) enum State {
    /// Waiting for a free place.
    Pending,
    /// Its process runs.
    Running,
    /// Stopped on request; resumes from its job directory when resumed.
    Paused,
    /// Its crawl ended with success.
    Finished,
    /// Its crawl failed (non-zero exit, a panic, a signal not ours) or could not start.
    Failed,
    /// Cancelled on request.
    Cancelled,
}

impl State {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Running => "running",
            Self::Paused => "paused",
            Self::Finished => "finished",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
        }
    }
}

/// Why the service sent a running job SIGTERM: what the job becomes when it exits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(super) enum Intent {
    Cancel,
    Pause,
}

/// One job, as kept in the history.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct Job {
    pub(super) id: String,
    pub(super) spider: String,
    /// Spider arguments (`-a`).
    pub(super) args: Vec<(String, String)>,
    /// Settings (`-s`).
    pub(super) settings: Vec<(String, String)>,
    pub(super) priority: f64,
    /// Order of scheduling.
    pub(super) seq: u64,
    pub(super) state: State,
    pub(super) intent: Option<Intent>,
    pub(super) created_ms: i64,
    pub(super) start_ms: Option<i64>,
    pub(super) end_ms: Option<i64>,
    pub(super) pid: Option<u32>,
    /// How it ended, in words (`exit status 1`, `killed by signal 9`, ...).
    pub(super) outcome: Option<String>,
    /// How many times its process was started (a resumed job runs again).
    pub(super) runs: u32,
    /// The pace each host starts at, requests/s, from the job's settings.
    #[serde(default)]
    pub(super) initial_pace: Option<f64>,
}

impl Job {
    /// Seconds it has run (to now while it runs).
    pub(super) fn elapsed_s(&self) -> Option<f64> {
        let start = self.start_ms?;
        let end = self.end_ms.unwrap_or_else(now_ms);
        Some((end - start).max(0) as f64 / 1000.0)
    }
}

/// The history on disk: one sled tree of jobs by id.
pub(super) struct History {
    db: sled::Db,
    jobs: sled::Tree,
}

impl History {
    pub(super) fn open(root: &Path) -> Result<Self, Error> {
        let path = root.join("history");
        let db = sled::open(&path).map_err(|e| {
            Error::new(
                ErrorKind::Io,
                format!(
                    "cannot open the job history {} (is another service using this root?): {e}",
                    path.display()
                ),
            )
        })?;
        let jobs = db
            .open_tree("jobs")
            .map_err(|e| Error::new(ErrorKind::Io, format!("job history: {e}")))?;
        Ok(Self { db, jobs })
    }

    fn load(&self) -> Vec<Job> {
        self.jobs
            .iter()
            .filter_map(|kv| {
                let (k, v) = kv.ok()?;
                match serde_json::from_slice::<Job>(&v) {
                    Ok(job) => Some(job),
                    Err(e) => {
                        tracing::warn!(
                            "job history: skipping unreadable job {}: {e}",
                            String::from_utf8_lossy(&k)
                        );
                        None
                    }
                }
            })
            .collect()
    }

    /// Write `job` and flush: it is on disk when this returns.
    fn put(&self, job: &Job) {
        let written = serde_json::to_vec(job)
            .map_err(|e| e.to_string())
            .and_then(|v| {
                self.jobs
                    .insert(job.id.as_bytes(), v)
                    .map_err(|e| e.to_string())
            })
            .and_then(|_| self.db.flush().map(|_| ()).map_err(|e| e.to_string()));
        if let Err(e) = written {
            tracing::error!("job history: cannot write job {}: {e}", job.id);
        }
    }
}

struct Inner {
    jobs: BTreeMap<String, Job>,
    /// Running processes by job id: their pids.
    children: HashMap<String, u32>,
    next_seq: u64,
}

/// The service: configuration, jobs and their processes.
pub(super) struct Service {
    pub(super) cfg: Config,
    history: History,
    inner: Mutex<Inner>,
    wake: Notify,
    pub(super) checks: mpsc::Sender<Check>,
    stopping: AtomicBool,
    /// Per job: its politeness record read so far, and its feed and failures counted.
    pub(super) live: Mutex<HashMap<String, (RecordTail, Counts, Counts)>>,
}

/// Why a job could not be scheduled, paused or resumed (the message clients see).
pub(super) type Refusal = String;

impl Service {
    pub(super) fn new(cfg: Config, history: History, checks: mpsc::Sender<Check>) -> Self {
        let jobs: BTreeMap<String, Job> = history
            .load()
            .into_iter()
            .map(|j| (j.id.clone(), j))
            .collect();
        let next_seq = jobs.values().map(|j| j.seq + 1).max().unwrap_or(0);
        Self {
            cfg,
            history,
            inner: Mutex::new(Inner {
                jobs,
                children: HashMap::new(),
                next_seq,
            }),
            wake: Notify::new(),
            checks,
            stopping: AtomicBool::new(false),
            live: Mutex::new(HashMap::new()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves consistent data (every change is one
        // assignment): carry on with it.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Every job, in scheduling order.
    pub(super) fn jobs(&self) -> Vec<Job> {
        let mut jobs: Vec<Job> = self.lock().jobs.values().cloned().collect();
        jobs.sort_by_key(|j| j.seq);
        jobs
    }

    pub(super) fn job(&self, id: &str) -> Option<Job> {
        self.lock().jobs.get(id).cloned()
    }

    /// Where job `id`'s files are.
    pub(super) fn dir(&self, id: &str) -> PathBuf {
        job_dir(&self.cfg.root, id)
    }

    /// Queue a new job (its input already checked).
    pub(super) fn enqueue(
        &self,
        id: String,
        spider: String,
        args: Vec<(String, String)>,
        settings: Vec<(String, String)>,
        priority: f64,
        initial_pace: Option<f64>,
    ) -> Result<(), Refusal> {
        let mut inner = self.lock();
        if inner.jobs.contains_key(&id) || self.dir(&id).exists() {
            return Err(format!("job '{id}' already exists"));
        }
        let seq = inner.next_seq;
        inner.next_seq += 1;
        let job = Job {
            id: id.clone(),
            spider,
            args,
            settings,
            priority,
            seq,
            state: State::Pending,
            intent: None,
            created_ms: now_ms(),
            start_ms: None,
            end_ms: None,
            pid: None,
            outcome: None,
            runs: 0,
            initial_pace,
        };
        self.history.put(&job);
        inner.jobs.insert(id, job);
        drop(inner);
        self.wake.notify_one();
        Ok(())
    }

    /// Cancel a job: a queued or paused one at once, a running one with SIGTERM (SIGKILL if
    /// it is still running after `kill_after`, or at once when cancelled again). Returns
    /// the state it was in (scrapyd's `prevstate`), `None` for an unknown or ended job.
    pub(super) fn cancel(self: &Arc<Self>, id: &str) -> Option<&'static str> {
        let mut inner = self.lock();
        let pid = inner.children.get(id).copied();
        let job = inner.jobs.get_mut(id)?;
        let prev = job.state;
        match prev {
            State::Pending | State::Paused => {
                job.state = State::Cancelled;
                job.intent = None;
                job.end_ms = Some(now_ms());
                job.outcome = Some("cancelled".into());
                self.history.put(job);
            }
            State::Running => {
                let again = job.intent == Some(Intent::Cancel);
                job.intent = Some(Intent::Cancel);
                self.history.put(job);
                if let Some(pid) = pid {
                    if again {
                        proc::kill(pid);
                    } else {
                        proc::terminate(pid);
                        self.kill_later(id, pid);
                    }
                }
            }
            _ => return None,
        }
        Some(prev.as_str())
    }

    /// Pause a job: a running one stops gracefully (SIGTERM) and keeps its job directory;
    /// a queued one stays out of the queue until resumed.
    pub(super) fn pause(self: &Arc<Self>, id: &str) -> Result<State, Refusal> {
        let mut inner = self.lock();
        let pid = inner.children.get(id).copied();
        let job = inner
            .jobs
            .get_mut(id)
            .ok_or_else(|| format!("job '{id}' not found"))?;
        match job.state {
            State::Pending => {
                job.state = State::Paused;
                self.history.put(job);
            }
            State::Running if job.intent.is_none() => {
                job.intent = Some(Intent::Pause);
                self.history.put(job);
                if let Some(pid) = pid {
                    proc::terminate(pid);
                    self.kill_later(id, pid);
                }
            }
            other => {
                return Err(format!(
                    "job '{id}' is {}: only a pending or running job can be paused",
                    other.as_str()
                ));
            }
        }
        Ok(job.state)
    }

    /// Resume a paused job, or retry a failed one: it is queued again and continues from
    /// its job directory.
    pub(super) fn resume(&self, id: &str) -> Result<(), Refusal> {
        let mut inner = self.lock();
        let job = inner
            .jobs
            .get_mut(id)
            .ok_or_else(|| format!("job '{id}' not found"))?;
        if !matches!(job.state, State::Paused | State::Failed) {
            return Err(format!(
                "job '{id}' is {}: only a paused or failed job can be resumed",
                job.state.as_str()
            ));
        }
        job.state = State::Pending;
        job.end_ms = None;
        job.outcome = None;
        self.history.put(job);
        drop(inner);
        self.wake.notify_one();
        Ok(())
    }

    /// SIGKILL `pid` after `kill_after` if it is still job `id`'s process.
    fn kill_later(self: &Arc<Self>, id: &str, pid: u32) {
        let svc = Arc::clone(self);
        let id = id.to_owned();
        tokio::spawn(async move {
            tokio::time::sleep(svc.cfg.kill_after).await;
            if svc.lock().children.get(&id) == Some(&pid) {
                tracing::warn!(
                    "job {id}: still running {:?} after SIGTERM; killing it",
                    svc.cfg.kill_after
                );
                proc::kill(pid);
            }
        });
    }

    /// Jobs the history says were running: their processes (if they outlived the previous
    /// service) are stopped, and the jobs queued to resume, or paused or cancelled as they
    /// were asked to be.
    pub(super) async fn recover(&self) {
        let running: Vec<Job> = self
            .lock()
            .jobs
            .values()
            .filter(|j| j.state == State::Running)
            .cloned()
            .collect();
        for job in running {
            // By the job's directory, not only the number written down: the service may have
            // died between starting the process and writing its number.
            let dir = self.dir(&job.id);
            for pid in proc::job_processes(&dir) {
                tracing::info!(
                    "job {}: stopping process {pid} left by the previous run",
                    job.id
                );
                proc::stop_orphan(pid, &dir, self.cfg.kill_after).await;
            }
            let mut inner = self.lock();
            if let Some(j) = inner.jobs.get_mut(&job.id) {
                j.pid = None;
                match j.intent.take() {
                    Some(Intent::Cancel) => {
                        j.state = State::Cancelled;
                        j.end_ms = Some(now_ms());
                        j.outcome = Some("cancelled".into());
                    }
                    Some(Intent::Pause) => j.state = State::Paused,
                    None => j.state = State::Pending,
                }
                tracing::info!("job {}: {} after a restart", j.id, j.state.as_str());
                self.history.put(j);
            }
        }
    }

    /// Start queued jobs while there is room, for as long as the service runs.
    pub(super) async fn supervise(self: Arc<Self>) {
        loop {
            if !self.stopping.load(Ordering::Acquire) {
                self.start_ready();
            }
            tokio::select! {
                () = self.wake.notified() => {}
                () = tokio::time::sleep(Duration::from_secs(1)) => {}
            }
        }
    }

    fn start_ready(self: &Arc<Self>) {
        let mut inner = self.lock();
        while inner.children.len() < self.cfg.max_jobs {
            // Jobs that ran before (resumed) first, then by priority, then in order.
            let Some(id) = inner
                .jobs
                .values()
                .filter(|j| j.state == State::Pending)
                .max_by(|a, b| {
                    (a.runs > 0)
                        .cmp(&(b.runs > 0))
                        .then(a.priority.total_cmp(&b.priority))
                        .then(b.seq.cmp(&a.seq))
                })
                .map(|j| j.id.clone())
            else {
                break;
            };
            let Some(j) = inner.jobs.get_mut(&id) else {
                break;
            };
            // Written down as running before its process exists: a service killed in between
            // finds the process by its directory at the next start (`recover`) instead of
            // starting a second one beside it.
            j.state = State::Running;
            j.pid = None;
            j.start_ms.get_or_insert_with(now_ms);
            j.end_ms = None;
            j.runs += 1;
            self.history.put(j);
            let job = j.clone();
            let started = self.spawn(&job);
            let Some(j) = inner.jobs.get_mut(&id) else {
                break;
            };
            match started {
                Ok(child) => {
                    let pid = child.id();
                    j.pid = Some(pid);
                    self.history.put(j);
                    inner.children.insert(id.clone(), pid);
                    tracing::info!("job {id}: started (process {pid})");
                    tokio::spawn(Arc::clone(self).watch(id, child));
                }
                Err(e) => {
                    j.state = State::Failed;
                    j.end_ms = Some(now_ms());
                    j.outcome = Some(format!("cannot start: {e}"));
                    self.history.put(j);
                    tracing::error!("job {id}: cannot start: {e}");
                }
            }
        }
    }

    /// The job's process: this program's `crawl` with the job's directory, feed and log.
    fn spawn(&self, job: &Job) -> std::io::Result<std::process::Child> {
        let dir = self.dir(&job.id);
        std::fs::create_dir_all(&dir)?;
        let log_path = dir.join("log");
        let mut log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)?;
        let _ = writeln!(
            log,
            "--- run {} of job {} (spider {}) at {}",
            job.runs,
            job.id,
            job.spider,
            super::api::scrapyd_time(now_ms())
        );
        let mut cmd = std::process::Command::new(&self.cfg.program);
        cmd.args(&self.cfg.leading)
            .arg("crawl")
            .arg(&job.spider)
            .arg("--job-dir")
            .arg(dir.join("state"))
            .arg("-o")
            .arg(dir.join("items.jsonl"))
            .arg("--log-file")
            .arg(&log_path)
            .arg("--no-progress")
            .args(&self.cfg.forward)
            .arg("-s")
            .arg(format!(
                "failures_file={}",
                dir.join("failures.jsonl").to_string_lossy()
            ));
        for (k, v) in &job.settings {
            cmd.arg("-s").arg(format!("{k}={v}"));
        }
        for (k, v) in &job.args {
            cmd.arg("-a").arg(format!("{k}={v}"));
        }
        // stdout (the final stats) and stderr (a panic) go to the log as well.
        cmd.stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        #[cfg(unix)]
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        cmd.spawn()
    }

    /// Wait for the job's process on a blocking thread (the std child: tokio's needs its
    /// `process` feature, which the rest of the build does not).
    async fn watch(self: Arc<Self>, id: String, mut child: std::process::Child) {
        let status = tokio::task::spawn_blocking(move || child.wait())
            .await
            .unwrap_or_else(|e| Err(std::io::Error::other(e.to_string())));
        self.exited(&id, status);
    }

    fn exited(&self, id: &str, status: std::io::Result<ExitStatus>) {
        let mut inner = self.lock();
        inner.children.remove(id);
        if self.stopping.load(Ordering::Acquire) {
            // Stopped with the service: left running in the history, resumed at its next
            // start.
            return;
        }
        let Some(job) = inner.jobs.get_mut(id) else {
            return;
        };
        job.pid = None;
        match job.intent.take() {
            Some(Intent::Cancel) => {
                job.state = State::Cancelled;
                job.end_ms = Some(now_ms());
                job.outcome = Some("cancelled".into());
            }
            Some(Intent::Pause) => job.state = State::Paused,
            None => {
                job.end_ms = Some(now_ms());
                match status {
                    Ok(s) if s.success() => {
                        job.state = State::Finished;
                        job.outcome = Some("finished".into());
                    }
                    Ok(s) => {
                        job.state = State::Failed;
                        job.outcome = Some(describe(s));
                    }
                    Err(e) => {
                        job.state = State::Failed;
                        job.outcome = Some(format!("lost its process: {e}"));
                    }
                }
            }
        }
        tracing::info!(
            "job {id}: {} ({})",
            job.state.as_str(),
            job.outcome.as_deref().unwrap_or("")
        );
        self.history.put(job);
        drop(inner);
        self.wake.notify_one();
    }

    /// Stop every running job gracefully (they stay running in the history and resume at
    /// the next start), killing those still running after `kill_after`.
    pub(super) async fn shutdown(&self) {
        self.stopping.store(true, Ordering::Release);
        let pids: Vec<u32> = self.lock().children.values().copied().collect();
        for pid in &pids {
            proc::terminate(*pid);
        }
        let deadline = tokio::time::Instant::now() + self.cfg.kill_after;
        while !self.lock().children.is_empty() && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        for pid in self.lock().children.values() {
            proc::kill(*pid);
        }
    }

    /// How many jobs are in each of scrapyd's lists: pending, running, finished.
    pub(super) fn counts(&self) -> (usize, usize, usize) {
        let inner = self.lock();
        let mut c = (0, 0, 0);
        for j in inner.jobs.values() {
            match j.state {
                State::Pending => c.0 += 1,
                State::Running | State::Paused => c.1 += 1,
                _ => c.2 += 1,
            }
        }
        c
    }
}

/// A process's exit in words.
fn describe(status: ExitStatus) -> String {
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt as _;
        if let Some(sig) = status.signal() {
            return format!("killed by signal {sig}");
        }
    }
    match status.code() {
        Some(101) => "exit status 101 (a panic: see the log)".to_owned(),
        Some(code) => format!("exit status {code}"),
        None => "ended".to_owned(),
    }
}

/// Milliseconds since the Unix epoch.
pub(super) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}
