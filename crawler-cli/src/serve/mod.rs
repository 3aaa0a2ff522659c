//! `serve`: the project's spiders as jobs over HTTP, the way scrapyd runs a Scrapy project.
//!
//! ```text
//! cargo run -- serve [--port 6800] [--bind 127.0.0.1] [--max-jobs 4] [--root crawler-serve]
//!                    [--token-file FILE]
//! ```
//!
//! Each job is this program run again as `crawl NAME --job-dir ROOT/jobs/ID/state -o
//! ROOT/jobs/ID/items.jsonl --log-file ROOT/jobs/ID/log`, in a process of its own: a panic
//! or a kill ends that job alone, cancelling is SIGTERM (the crawl finishes its requests in
//! flight) then SIGKILL, and a job whose process is gone resumes from its job directory. At
//! most `--max-jobs` run at once; the others wait in a queue (highest priority first, then
//! in order). The jobs and their history are kept in `ROOT/history` (sled), so a service
//! killed with `kill -9` and started again resumes the jobs that were running and still
//! lists the finished ones.
//!
//! - `jobs`: the jobs, their queue, their processes and their history.
//! - `api`: scrapyd's API (`schedule.json`, `listjobs.json`, ... with its answers' shapes),
//!   the JSON API of its own (`/api/...`: live stats, hosts, pause, resume, failures) and
//!   the guard in front of both (token, origin).
//! - `live`: each job's politeness record read as it grows (per-host rates, holds,
//!   refusals).
//! - `page`: the dashboard.
//! - `proc`: signals to a job's process, and whether a process is still a job's.

use std::ffi::OsString;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use crawler::settings::SettingsLayers;

use crate::common::{Failure, SettingsArgs};
use crate::runner::ErasedSpider;

#[cfg(feature = "serve")]
mod api;
#[cfg(feature = "serve")]
mod jobs;
#[cfg(feature = "serve")]
mod live;
#[cfg(feature = "serve")]
mod page;
#[cfg(feature = "serve")]
mod proc;
#[cfg(feature = "serve")]
mod start;

/// Options of `serve`.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct ServeArgs {
    /// Port to listen on (scrapyd's by default).
    #[arg(long, default_value_t = 6800)]
    pub port: u16,
    /// Address to listen on. Any address but a loopback one needs a token (--token-file):
    /// without one the service refuses to start.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1")]
    pub bind: IpAddr,
    /// Jobs running at once; the others wait in the queue.
    #[arg(long, value_name = "N", default_value_t = 4,
          value_parser = clap::value_parser!(u32).range(1..=256))]
    pub max_jobs: u32,
    /// The service's directory: the job history and a directory per job.
    #[arg(long, value_name = "DIR", default_value = "crawler-serve")]
    pub root: PathBuf,
    /// A file holding the token every request must carry, as `Authorization: Bearer TOKEN`
    /// or as the password of basic auth (scrapyd's clients send that).
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// The project's name in scrapyd's API (scrapyd names the project of its directory
    /// `default`).
    #[arg(long, value_name = "NAME", default_value = "default")]
    pub project: String,
    /// How long a cancelled or paused job has to stop after SIGTERM before it is killed.
    #[arg(long, value_name = "DURATION", default_value = "30s",
          value_parser = humantime::parse_duration)]
    pub kill_after: Duration,
    /// How long a client may take to send a request's headers, and then its body and the
    /// service to answer it, before the connection is closed (headers) or answered 408.
    /// A client that trickles bytes would otherwise hold a connection for ever.
    #[arg(long, value_name = "DURATION", default_value = "30s",
          value_parser = humantime::parse_duration)]
    pub client_timeout: Duration,
}

/// How a job's process is started: a program and the arguments before `crawl ...`.
#[derive(Debug, Clone, Default)]
#[cfg_attr(
    not(feature = "serve"),
    allow(dead_code, reason = "read by the service, which this build leaves out")
)]
pub(crate) struct JobCommand {
    /// The program; this one when `None`.
    program: Option<PathBuf>,
    leading: Vec<OsString>,
}

impl JobCommand {
    pub(crate) fn new(
        program: impl Into<PathBuf>,
        leading: impl IntoIterator<Item = impl Into<OsString>>,
    ) -> Self {
        Self {
            program: Some(program.into()),
            leading: leading.into_iter().map(Into::into).collect(),
        }
    }
}

/// Run the service until Ctrl-C or SIGTERM.
#[cfg(feature = "serve")]
pub(crate) async fn run(
    args: ServeArgs,
    common: &SettingsArgs,
    layers: SettingsLayers,
    spiders: Vec<Box<dyn ErasedSpider>>,
    command: JobCommand,
) -> Result<(), Failure> {
    start::run(args, common, layers, spiders, command).await
}

/// Without the `serve` feature the verb is refused, naming the feature.
#[cfg(not(feature = "serve"))]
pub(crate) async fn run(
    _args: ServeArgs,
    _common: &SettingsArgs,
    _layers: SettingsLayers,
    _spiders: Vec<Box<dyn ErasedSpider>>,
    _command: JobCommand,
) -> Result<(), Failure> {
    Err(crate::common::usage(crawler::Error::new(
        crawler::ErrorKind::Settings,
        "serve needs crawler-cli's `serve` feature (features = [\"serve\"] on crawler-cli in \
         Cargo.toml)",
    )))
}
