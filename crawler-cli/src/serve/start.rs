//! Starting the service: its configuration checked (a token when it listens beyond this
//! machine), the history opened and the jobs of a previous run recovered, then the HTTP
//! server, the queue's supervisor and the checks of scheduled jobs against the spiders.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crawler::settings::SettingsLayers;
use crawler::{Error, ErrorKind};
use tokio::sync::{mpsc, oneshot};

use super::jobs::{Config, History, Service};
use super::{JobCommand, ServeArgs, api};
use crate::common::{Failure, SettingsArgs, failed, usage};
use crate::runner::ErasedSpider;

/// A scheduled job's spider, arguments and settings, to be checked against the spider
/// itself (its arguments are its own to accept or refuse).
pub(super) struct Check {
    pub(super) spider: String,
    pub(super) args: Vec<(String, String)>,
    pub(super) settings: Vec<(String, String)>,
    /// The job's initial pace per host (requests/s) when the settings set one, or why the
    /// job is refused.
    pub(super) reply: oneshot::Sender<Result<Option<f64>, String>>,
}

pub(super) async fn run(
    args: ServeArgs,
    common: &SettingsArgs,
    layers: SettingsLayers,
    mut spiders: Vec<Box<dyn ErasedSpider>>,
    command: JobCommand,
) -> Result<(), Failure> {
    let settings = layers.resolve(None).map_err(usage)?.settings;
    crawler::init_logging_with(&settings).map_err(usage)?;
    let token = args.token_file.as_deref().map(read_token).transpose()?;
    if !args.bind.is_loopback() && token.is_none() {
        return Err(usage(Error::new(
            ErrorKind::Settings,
            format!(
                "serve --bind {} listens beyond this machine: give it a token \
                 (--token-file FILE) that every request must carry",
                args.bind
            ),
        )));
    }
    if !super::api::valid_name(&args.project) {
        return Err(usage(Error::new(
            ErrorKind::Settings,
            format!(
                "--project '{}': a project name is letters, digits, '_', '-' and '.'",
                args.project
            ),
        )));
    }
    let program = match command.program {
        Some(p) => p,
        None => std::env::current_exe().map_err(|e| {
            failed(Error::new(
                ErrorKind::Io,
                format!("cannot find this program to start jobs with: {e}"),
            ))
        })?,
    };
    let io = |what: &str, path: &Path, e: std::io::Error| {
        failed(Error::new(
            ErrorKind::Io,
            format!("{what} {}: {e}", path.display()),
        ))
    };
    let jobs_dir = args.root.join("jobs");
    std::fs::create_dir_all(&jobs_dir).map_err(|e| io("cannot make", &jobs_dir, e))?;
    let root = std::fs::canonicalize(&args.root).map_err(|e| io("cannot read", &args.root, e))?;
    let history = History::open(&root).map_err(failed)?;
    let (checks_tx, mut checks) = mpsc::channel::<Check>(16);
    let config = Config {
        root: root.clone(),
        project: args.project.clone(),
        spiders: spiders.iter().map(|s| s.name()).collect(),
        node_name: node_name(),
        max_jobs: args.max_jobs as usize,
        program,
        leading: command.leading,
        forward: forwarded(common)?,
        kill_after: args.kill_after,
        client_timeout: args.client_timeout,
        token,
    };
    let svc = Arc::new(Service::new(config, history, checks_tx));
    svc.recover().await;

    let listener = tokio::net::TcpListener::bind((args.bind, args.port))
        .await
        .map_err(|e| {
            failed(Error::new(
                ErrorKind::Io,
                format!("cannot listen on {}:{}: {e}", args.bind, args.port),
            ))
        })?;
    let addr = listener
        .local_addr()
        .map_err(|e| failed(Error::new(ErrorKind::Io, format!("no local address: {e}"))))?;
    tracing::info!(
        "serving {} spider(s) of project '{}' at http://{addr}/ (jobs in {})",
        svc.cfg.spiders.len(),
        svc.cfg.project,
        root.display()
    );
    // On stdout too, for whoever started the service with port 0.
    println!("listening on http://{addr}/");

    let supervisor = tokio::spawn(Arc::clone(&svc).supervise());
    let server = serve_http(listener, api::router(Arc::clone(&svc)), args.client_timeout);
    // The spiders stay on this task (they need not be Send): scheduled jobs are checked here.
    let answer_checks = async {
        while let Some(check) = checks.recv().await {
            let verdict = check_job(&mut spiders, &layers, &check);
            let _ = check.reply.send(verdict);
        }
    };
    let outcome = tokio::select! {
        r = server => r.map_err(|e| failed(Error::new(ErrorKind::Io, format!("the server stopped: {e}")))),
        () = answer_checks => Ok(()),
        () = stop_signal() => Ok(()),
    };
    supervisor.abort();
    svc.shutdown().await;
    outcome
}

/// Whether `check`'s spider exists, its settings resolve and the spider accepts its
/// arguments (the message is the one a `crawl` with them would print); if so, the pace
/// its settings start each host at.
fn check_job(
    spiders: &mut [Box<dyn ErasedSpider>],
    layers: &SettingsLayers,
    check: &Check,
) -> Result<Option<f64>, String> {
    let Some(spider) = spiders.iter_mut().find(|s| s.name() == check.spider) else {
        return Err(format!("spider '{}' not found", check.spider));
    };
    let mut layers = layers.clone();
    for (k, v) in &check.settings {
        layers.cli(k, v);
    }
    let custom = spider.custom_settings();
    let settings = layers
        .resolve(Some((&check.spider, &custom)))
        .map_err(|e| e.to_string())?
        .settings;
    spider
        .open(&settings, &check.args)
        .map_err(|e| e.to_string())?;
    Ok(initial_pace(&settings))
}

/// The pace a host starts at, requests/s, as the settings give it (a `[[hosts]]` rule may
/// change it for some hosts; the record's rate changes replace it as they come): the start
/// rate of the adaptive throttle, the delay of the fixed one; none for AutoThrottle or a
/// fixed throttle without delay.
fn initial_pace(settings: &crawler::core::Settings) -> Option<f64> {
    use crawler::core::ThrottleMode;
    match settings.throttle {
        ThrottleMode::Adaptive => Some(settings.start_rate.min(settings.max_rate)),
        ThrottleMode::Fixed => {
            let delay = settings.download_delay.as_secs_f64();
            (delay > 0.0).then(|| 1.0 / delay)
        }
        _ => None,
    }
}

/// The settings options of the `serve` command line that every job gets too.
fn forwarded(common: &SettingsArgs) -> Result<Vec<OsString>, Failure> {
    let mut out: Vec<OsString> = Vec::new();
    if let Some(file) = &common.settings {
        let file = std::fs::canonicalize(file).map_err(|e| {
            usage(Error::new(
                ErrorKind::Settings,
                format!("cannot read settings file {}: {e}", file.display()),
            ))
        })?;
        out.push("--settings".into());
        out.push(file.into_os_string());
    }
    for pair in &common.set {
        out.push("-s".into());
        out.push(pair.into());
    }
    if let Some(level) = &common.log_level {
        out.push("-L".into());
        out.push(level.into());
    }
    if let Some(format) = &common.log_format {
        out.push("--log-format".into());
        out.push(format.into());
    }
    Ok(out)
}

/// The token in `path` (surrounding whitespace trimmed).
fn read_token(path: &Path) -> Result<String, Failure> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        usage(Error::new(
            ErrorKind::Settings,
            format!("cannot read the token file {}: {e}", path.display()),
        ))
    })?;
    let token = text.trim();
    if token.is_empty() || token.chars().any(|c| c.is_control() || c == ' ') {
        return Err(usage(Error::new(
            ErrorKind::Settings,
            format!(
                "the token file {} must hold one token (no spaces)",
                path.display()
            ),
        )));
    }
    Ok(token.to_owned())
}

/// This machine's name, as scrapyd's `node_name`.
fn node_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "localhost".to_owned())
}

/// Resolves on Ctrl-C or SIGTERM.
async fn stop_signal() {
    #[cfg(unix)]
    {
        let term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate());
        match term {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
    tracing::warn!("stopping: the running jobs are stopped and resume at the next start");
}

/// Where a job's files are: `ROOT/jobs/ID`.
pub(super) fn job_dir(root: &Path, id: &str) -> PathBuf {
    root.join("jobs").join(id)
}

/// Accepts connections and serves each with HTTP/1.1 until the service stops. Unlike
/// `axum::serve`, a connection whose request headers do not arrive within `header_timeout`
/// is closed (hyper's header read timeout needs a timer, which `axum::serve` does not set):
/// a client trickling bytes cannot hold connections open for ever.
async fn serve_http(
    listener: tokio::net::TcpListener,
    router: axum::Router,
    header_timeout: Duration,
) -> std::io::Result<()> {
    use hyper_util::rt::{TokioIo, TokioTimer};
    use hyper_util::service::TowerToHyperService;
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            // Out of file descriptors or a connection reset before accept: the listener
            // itself is fine; pause briefly rather than spin.
            Err(e) => {
                tracing::warn!("accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let service = TowerToHyperService::new(router.clone());
        tokio::spawn(async move {
            let served = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(header_timeout)
                .serve_connection(TokioIo::new(stream), service)
                .await;
            if let Err(e) = served {
                tracing::debug!("connection from {peer}: {e}");
            }
        });
    }
}
