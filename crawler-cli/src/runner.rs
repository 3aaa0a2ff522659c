//! The project runner: a project's `main.rs` registers its spiders and gets Scrapy's verbs.
//!
//! ```no_run
//! use crawler::prelude::*;
//! use crawler_cli::{Contract, Runner};
//!
//! struct Titles;
//!
//! impl Spider for Titles {
//!     type Item = String;
//!     fn name(&self) -> &str { "titles" }
//!     fn start_urls(&self) -> Vec<String> { vec!["http://127.0.0.1:8080/".into()] }
//!     async fn parse(&self, page: Response, out: &mut Output<String>) -> Result<()> {
//!         out.item(page.text_of("title")?);
//!         Ok(())
//!     }
//! }
//!
//! #[tokio::main]
//! async fn main() -> std::process::ExitCode {
//!     Runner::new()
//!         .spider(Titles)
//!         .contract("titles", Contract::url("http://127.0.0.1:8080/").returns_items(1, 1))
//!         .run_cli()
//!         .await
//! }
//! ```
//!
//! The binary then understands:
//!
//! ```text
//! crawl NAME [-a KEY=VALUE]... [-o FILE]... [-O FILE]... [-s KEY=VALUE]... [--job-dir DIR]
//!            [--settings FILE] [--log-format text|json] [-L LEVEL] [--log-file FILE]
//!            [--no-progress] [--report FILE]
//! list
//! settings [NAME] [--markdown]
//! check [NAME] [-a KEY=VALUE]...
//! shell URL [--css SELECTOR]... [--spider NAME]
//! parse URL --spider NAME [-c CALLBACK] [--depth N] [-m KEY=VALUE]... [-a KEY=VALUE]... [--json]
//! serve [--port N] [--bind ADDR] [--max-jobs N] [--root DIR] [--token-file FILE]
//! ```
//!
//! `-a key=value` gives the spider an argument, read in
//! [`Spider::open`](crawler::core::Spider::open) with the effective settings; an argument the
//! spider does not read is refused. A spider that needs pipelines or middlewares is
//! registered with [`Runner::spider_with`], which sets up its [`Crawl`] the way code would.
//!
//! Exit status: 0 on success, 1 when a crawl or check fails, 2 for usage, spider argument and
//! settings errors.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::process::ExitCode;

use crawler::core::{
    FeedSpec, Fetched, Output, Request, Settings, Spider, Stats, parse_spider_arg,
    settings_markdown,
};
use crawler::http::HttpDownloader;
use crawler::settings::SettingsLayers;

use crate::common::{self as cli, Failure, SettingsArgs, failed, usage};
use crawler::{Crawl, Error, ErrorKind};

type Boxed<'a, T> = Pin<Box<dyn Future<Output = T> + 'a>>;

/// A spider with its item type erased, so spiders of different item types share a runner.
pub(crate) trait ErasedSpider {
    fn name(&self) -> String;
    fn custom_settings(&self) -> Vec<(&'static str, String)>;
    /// Hand the spider its arguments and settings (what a crawl does when it is built).
    fn open(&mut self, settings: &Settings, args: &[(String, String)]) -> Result<(), Error>;
    fn crawl(self: Box<Self>, job: CrawlJob) -> Boxed<'static, Result<Stats, Failure>>;
    fn check<'a>(
        &'a self,
        contract: &'a Contract,
        settings: &'a Settings,
    ) -> Boxed<'a, Result<String, Error>>;
    /// `parse URL`: run a callback on one page (the spider opened) and print its output.
    fn parse_url<'a>(
        &'a self,
        settings: &'a Settings,
        args: &'a crate::parse::ParseArgs,
    ) -> Boxed<'a, Result<(), Failure>>;
}

/// What `crawl` was asked to do.
pub(crate) struct CrawlJob {
    layers: SettingsLayers,
    /// Feed files from `-o` (appended to) and `-O` (replaced).
    outputs: Vec<(PathBuf, bool)>,
    /// Spider arguments from `-a`.
    args: Vec<(String, String)>,
    progress: bool,
    /// Where `--report` writes the politeness report.
    report: Option<PathBuf>,
}

/// How a spider registered with [`Runner::spider_with`] sets up its crawl.
type Configure<S> = Box<dyn FnOnce(Crawl<S>) -> Crawl<S>>;

struct Holder<S: Spider> {
    spider: S,
    configure: Option<Configure<S>>,
}

impl<S: Spider> ErasedSpider for Holder<S> {
    fn name(&self) -> String {
        self.spider.name().to_owned()
    }

    fn custom_settings(&self) -> Vec<(&'static str, String)> {
        self.spider.custom_settings()
    }

    fn open(&mut self, settings: &Settings, args: &[(String, String)]) -> Result<(), Error> {
        crawler::core::open_spider(&mut self.spider, settings, args)
    }

    fn crawl(self: Box<Self>, job: CrawlJob) -> Boxed<'static, Result<Stats, Failure>> {
        Box::pin(async move {
            let Holder { spider, configure } = *self;
            let mut crawl = Crawl::new(spider);
            if let Some(configure) = configure {
                crawl = configure(crawl);
            }
            let mut crawl = crawl
                .args(job.args)
                .with_settings_layers(&job.layers)
                .map_err(usage)?;
            let settings = crawl.effective_settings().map_err(usage)?;
            crawler::init_logging_with(&settings).map_err(usage)?;
            let stdout_feed = settings
                .feeds
                .iter()
                .map(PathBuf::from)
                .chain(job.outputs.iter().map(|(p, _)| p.clone()))
                .any(|p| FeedSpec::new(p).is_ok_and(|s| s.is_stdout()));
            for feed in &settings.feeds {
                crawl = crawl.feed(feed).map_err(usage)?;
            }
            for (path, append) in job.outputs {
                crawl = if append {
                    crawl.append_feed(path)
                } else {
                    crawl.feed(path)
                }
                .map_err(usage)?;
            }
            let report = job
                .report
                .map(|out| crate::report::CrawlReport::new(out, settings.job_dir.as_deref()))
                .transpose()
                .map_err(usage)?;
            if let Some(record) = report.as_ref().and_then(|r| r.record_override()) {
                crawl = crawl.politeness_record(record);
            }
            let crawl =
                cli::with_metrics(crawl.progress(job.progress).live_progress(true), &settings)
                    .await
                    .map_err(failed)?;
            let stats = crawl.run().await.map_err(|e| {
                // A bad `-a` is a usage error, like a bad `-s`.
                if e.kind() == ErrorKind::Argument {
                    usage(e)
                } else {
                    failed(e)
                }
            });
            // Drawn even when the crawl failed: the record shows how it went until then.
            if let Some(report) = report {
                let drawn = report.finish();
                if stats.is_ok() {
                    drawn.map_err(failed)?;
                } else if let Err(e) = drawn {
                    tracing::warn!("{e}");
                }
            }
            let stats = stats?;
            cli::print_stats(&stats, stdout_feed);
            Ok(stats)
        })
    }

    fn check<'a>(
        &'a self,
        contract: &'a Contract,
        settings: &'a Settings,
    ) -> Boxed<'a, Result<String, Error>> {
        Box::pin(run_contract(&self.spider, contract, settings))
    }

    fn parse_url<'a>(
        &'a self,
        settings: &'a Settings,
        args: &'a crate::parse::ParseArgs,
    ) -> Boxed<'a, Result<(), Failure>> {
        Box::pin(crate::parse::run(&self.spider, settings, args))
    }
}

/// A contract check: fetch one URL (politely: robots.txt is obeyed), hand the page to the
/// spider with the given callback, and check what came out, like Scrapy's contracts.
///
/// The URL may be relative (`catalogue/book-1.html`): it is then resolved against the
/// spider's first start URL, as set by its arguments (`check -a url=...`), so one contract
/// serves whatever site the spider is pointed at.
#[derive(Debug, Clone)]
pub struct Contract {
    url: String,
    callback: Option<String>,
    items: Option<(usize, usize)>,
    requests: Option<(usize, usize)>,
    fields: Vec<String>,
    /// Put on the request before the callback runs, as the page that links here would.
    meta: serde_json::Map<String, serde_json::Value>,
    /// Why a [`Contract::meta`] value could not be kept: the check then fails saying so
    /// (the builder stays infallible, for a list of contracts in `main`).
    invalid_meta: Option<String>,
}

impl Contract {
    /// A check of the page at `url` (absolute, or relative to the spider's first start URL),
    /// parsed with the default callback.
    pub fn url(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            callback: None,
            items: None,
            requests: None,
            fields: Vec::new(),
            meta: serde_json::Map::new(),
            invalid_meta: None,
        }
    }

    /// Parse the page with this callback (what `out.follow_with(href, name)` names).
    pub fn callback(mut self, name: impl Into<String>) -> Self {
        self.callback = Some(name.into());
        self
    }

    /// The page must produce between `min` and `max` items (inclusive).
    pub fn returns_items(mut self, min: usize, max: usize) -> Self {
        self.items = Some((min, max));
        self
    }

    /// The page must produce between `min` and `max` follow-up requests (inclusive).
    pub fn returns_requests(mut self, min: usize, max: usize) -> Self {
        self.requests = Some((min, max));
        self
    }

    /// Put `value` under `key` in the request's meta before the callback runs, as the page
    /// that links to this one would (`out.follow(href).meta(key, value)`); the callback
    /// reads it with `Response::meta`. Scrapy's `cb_kwargs` are meta here too. A value that
    /// does not serialise fails the check, saying so.
    pub fn meta(mut self, key: impl Into<String>, value: impl serde::Serialize) -> Self {
        let key = key.into();
        match serde_json::to_value(value) {
            Ok(v) => {
                self.meta.insert(key, v);
            }
            Err(e) => {
                self.invalid_meta
                    .get_or_insert(format!("meta value for '{key}' is not serialisable: {e}"));
            }
        }
        self
    }

    /// Every item must have these fields, non-empty (items are checked as JSON objects).
    pub fn scrapes<I, T>(mut self, fields: I) -> Self
    where
        I: IntoIterator<Item = T>,
        T: Into<String>,
    {
        self.fields.extend(fields.into_iter().map(Into::into));
        self
    }
}

/// Run one contract; `Ok` holds a one-line summary, `Err` what failed.
async fn run_contract<S: Spider>(
    spider: &S,
    contract: &Contract,
    settings: &Settings,
) -> Result<String, Error> {
    let fail = |msg: String| Error::new(ErrorKind::Other, format!("{}: {msg}", contract.url));
    let mut req = contract_request(spider, &contract.url)?;
    if let Some(cb) = &contract.callback {
        req = req.callback(cb.clone());
    }
    if let Some(why) = &contract.invalid_meta {
        return Err(fail(why.clone()));
    }
    req.meta
        .extend(contract.meta.iter().map(|(k, v)| (k.clone(), v.clone())));
    crawler::warn_unchecked_proxy(settings);
    let downloader = HttpDownloader::new(settings)?;
    let page = match downloader.fetch_once(&req).await.outcome {
        Fetched::Response(page) => page,
        Fetched::Disallowed => return Err(fail("disallowed by robots.txt".into())),
        Fetched::Failed(f) => return Err(fail(format!("{}: {}", f.kind, f.message))),
        Fetched::Requeue(why) => return Err(fail(why)),
    };
    if !(200..300).contains(&page.status()) {
        return Err(fail(format!("HTTP status {}", page.status())));
    }
    let mut out = Output::new(page.base_url().clone(), req.depth);
    spider
        .parse(page, &mut out)
        .await
        .map_err(|e| fail(format!("spider error: {e}")))?;
    let (items, requests) = out.into_parts();
    let in_range =
        |n: usize, r: Option<(usize, usize)>| r.is_none_or(|(lo, hi)| (lo..=hi).contains(&n));
    if !in_range(items.len(), contract.items) {
        let (lo, hi) = contract.items.unwrap_or_default();
        return Err(fail(format!(
            "{} items, expected {lo} to {hi}",
            items.len()
        )));
    }
    if !in_range(requests.len(), contract.requests) {
        let (lo, hi) = contract.requests.unwrap_or_default();
        return Err(fail(format!(
            "{} requests, expected {lo} to {hi}",
            requests.len()
        )));
    }
    for (i, item) in items.iter().enumerate() {
        let value = serde_json::to_value(item)
            .map_err(|e| fail(format!("item {i} does not serialize: {e}")))?;
        for field in &contract.fields {
            let present = match value.get(field) {
                None | Some(serde_json::Value::Null) => false,
                Some(serde_json::Value::String(s)) => !s.trim().is_empty(),
                Some(_) => true,
            };
            if !present {
                return Err(fail(format!("item {i} has no field '{field}'")));
            }
        }
    }
    Ok(format!(
        "{}: {} items, {} requests",
        contract.url,
        items.len(),
        requests.len()
    ))
}

/// The request of a contract: its URL as given when absolute, else resolved against the
/// spider's first start request.
fn contract_request<S: Spider>(spider: &S, url: &str) -> Result<Request, Error> {
    if let Ok(req) = Request::get(url) {
        return Ok(req);
    }
    let start = spider.start_requests()?.into_iter().next().ok_or_else(|| {
        Error::new(
            ErrorKind::Url,
            format!("contract URL '{url}' is relative, and the spider has no start URL to resolve it against"),
        )
    })?;
    let joined = start.url.join(url).map_err(|e| {
        Error::new(ErrorKind::Url, format!("invalid contract URL '{url}'")).with_source(e)
    })?;
    Request::get(joined.as_str())
}

/// The runner a project's `main.rs` calls with its spiders: register them with
/// [`Runner::spider`] (or [`Runner::spider_with`] for pipelines and middlewares), then
/// [`Runner::run_cli`] gives the binary Scrapy's verbs: `crawl NAME [-a KEY=VALUE]...
/// [-o FILE]... [-O FILE]... [-s KEY=VALUE]...`, `list`, `settings [NAME]`,
/// `check [NAME] [-a KEY=VALUE]...`, `shell URL` and `parse URL --spider NAME [-c CALLBACK]`. `-a` gives the spider an argument, read in
/// [`Spider::open`](crawler::core::Spider::open); exit status 0 on success, 1 when a crawl or
/// check fails, 2 for usage, argument and settings errors.
#[derive(Default)]
pub struct Runner {
    spiders: Vec<Box<dyn ErasedSpider>>,
    contracts: Vec<(String, Contract)>,
    /// How `serve` starts a job's process (see [`Runner::job_command`]).
    job_command: crate::serve::JobCommand,
}

impl std::fmt::Debug for Runner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runner")
            .field("spiders", &self.names())
            .field("contracts", &self.contracts.len())
            .finish()
    }
}

#[derive(clap::Parser, Debug)]
#[command(about = "Run this project's spiders", disable_version_flag = true)]
struct RunnerCli {
    #[command(flatten)]
    common: SettingsArgs,
    #[command(subcommand)]
    verb: RunnerVerb,
}

#[derive(clap::Subcommand, Debug)]
enum RunnerVerb {
    /// Run a spider to completion and print the final stats.
    Crawl(CrawlArgs),
    /// List the spiders.
    List,
    /// Print every setting's effective value and where it came from.
    Settings(SettingsVerb),
    /// Run the spiders' contract checks.
    Check {
        /// Only this spider's checks.
        name: Option<String>,
        /// Give the spiders an argument (repeatable), as `crawl -a` does.
        #[arg(short = 'a', value_name = "KEY=VALUE", value_parser = spider_arg)]
        arg: Vec<(String, String)>,
    },
    /// Fetch one URL with the project's settings and downloader middlewares (robots.txt
    /// checked), then explore the page with CSS selectors, as Scrapy's `shell` does.
    Shell {
        #[command(flatten)]
        args: crate::shell::ShellArgs,
        /// Also apply this spider's custom settings.
        #[arg(long, value_name = "NAME")]
        spider: Option<String>,
    },
    /// Run one of a spider's callbacks on one page and print its items and requests, as
    /// Scrapy's `parse` does (`--depth N` follows them).
    Parse(crate::parse::ParseArgs),
    /// Run the spiders as jobs over HTTP: scrapyd's API, a JSON API and a live dashboard.
    Serve(crate::serve::ServeArgs),
}

/// Options of `crawl`.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct CrawlArgs {
    /// The spider to run (see `list`).
    pub name: String,
    /// Give the spider an argument, e.g. `-a limit=10` (repeatable), as Scrapy's `-a`
    /// does; the spider reads it in `Spider::open`.
    #[arg(short = 'a', value_name = "KEY=VALUE", value_parser = spider_arg)]
    pub arg: Vec<(String, String)>,
    /// Append items to FILE (.jsonl, .json, .csv, .xml or .parquet, or FILE:FORMAT; an `s3://`,
    /// `gs://` or `az://` URL; repeatable), as Scrapy's `-o` does. `-` writes JSON Lines to stdout (the final stats then go to stderr).
    /// `%(name)s` and `%(time)s` in FILE become the spider's name and the start time.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Vec<PathBuf>,
    /// Write items to FILE, replacing what it held (repeatable), as Scrapy's `-O` does.
    #[arg(short = 'O', long = "overwrite-output", value_name = "FILE")]
    pub overwrite_output: Vec<PathBuf>,
    /// Job directory: persistent frontier, so the crawl can be paused and resumed (same as
    /// `-s job_dir=DIR`).
    #[arg(long, value_name = "DIR")]
    pub job_dir: Option<PathBuf>,
    /// Never draw the live display (log lines are still written every progress_interval).
    #[arg(long)]
    pub no_progress: bool,
    /// When the crawl ends, write its politeness report (one HTML page, as `crawler report`
    /// draws) to FILE.
    #[arg(long, value_name = "FILE")]
    pub report: Option<PathBuf>,
}

/// Parse one `-a KEY=VALUE` (clap reports the error with the option's name).
pub(crate) fn spider_arg(text: &str) -> Result<(String, String), String> {
    parse_spider_arg(text).map_err(|e| e.to_string())
}

/// Options of `settings`.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct SettingsVerb {
    /// Include this spider's custom settings.
    pub name: Option<String>,
    /// Print the settings reference (docs/settings.md) instead.
    #[arg(long)]
    pub markdown: bool,
}

impl Runner {
    /// A runner with no spiders.
    pub fn new() -> Self {
        Self::default()
    }

    /// Register a spider (its `name()` is what `crawl NAME` takes).
    pub fn spider<S: Spider>(mut self, spider: S) -> Self {
        self.spiders.push(Box::new(Holder {
            spider,
            configure: None,
        }));
        self
    }

    /// Register a spider with what its crawl needs in code: pipelines, middlewares, a
    /// conditional store. `configure` receives the [`Crawl`] before the settings and feeds
    /// of the command line are applied, and runs only when this spider is crawled.
    ///
    /// ```no_run
    /// # use crawler::prelude::*;
    /// # use crawler_cli::Runner;
    /// # struct Books;
    /// # impl Spider for Books {
    /// #     type Item = String;
    /// #     fn name(&self) -> &str { "books" }
    /// #     async fn parse(&self, _: Response, _: &mut Output<String>) -> Result<()> { Ok(()) }
    /// # }
    /// struct NoEmpty;
    ///
    /// impl Pipeline<String> for NoEmpty {
    ///     async fn process(&self, item: String) -> Result<Processed<String>> {
    ///         Ok(if item.is_empty() { Processed::Drop("empty".into()) } else { Processed::Keep(item) })
    ///     }
    /// }
    ///
    /// # async fn run() {
    /// Runner::new()
    ///     .spider_with(Books, |crawl| crawl.pipeline(NoEmpty))
    ///     .run_cli()
    ///     .await;
    /// # }
    /// ```
    pub fn spider_with<S: Spider>(
        mut self,
        spider: S,
        configure: impl FnOnce(Crawl<S>) -> Crawl<S> + 'static,
    ) -> Self {
        self.spiders.push(Box::new(Holder {
            spider,
            configure: Some(Box::new(configure)),
        }));
        self
    }

    /// Declare a contract check for the spider named `spider`, run by `check`.
    pub fn contract(mut self, spider: &str, contract: Contract) -> Self {
        self.contracts.push((spider.to_owned(), contract));
        self
    }

    /// How `serve` starts a job: `program` with `leading_args`, then `crawl NAME --job-dir
    /// DIR -o FILE ...`. By default this program itself with no leading arguments; a wrapper
    /// (`nice`, `systemd-run`, a test harness) goes here.
    pub fn job_command(
        mut self,
        program: impl Into<PathBuf>,
        leading_args: impl IntoIterator<Item = impl Into<OsString>>,
    ) -> Self {
        self.job_command = crate::serve::JobCommand::new(program, leading_args);
        self
    }

    /// The registered spiders' names, in registration order.
    pub fn names(&self) -> Vec<String> {
        self.spiders.iter().map(|s| s.name()).collect()
    }

    /// Parse the process's arguments and run the verb; returns the exit status.
    pub async fn run_cli(self) -> ExitCode {
        self.run_args(std::env::args_os()).await
    }

    /// Run with these arguments (the first is the program name).
    pub async fn run_args<I, T>(self, args: I) -> ExitCode
    where
        I: IntoIterator<Item = T>,
        T: Into<OsString>,
    {
        let cli: RunnerCli = match cli::parse(args.into_iter().map(Into::into)) {
            Ok(cli) => cli,
            Err(code) => return code,
        };
        match self.run_verb(cli).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(f) => f.exit(),
        }
    }

    fn duplicate_names(&self) -> Option<String> {
        let mut seen = BTreeSet::new();
        self.names().into_iter().find(|n| !seen.insert(n.clone()))
    }

    fn unknown_spider(&self, name: &str) -> Failure {
        let names = self.names();
        let hint = nearest_name(name, &names)
            .map(|n| format!("; did you mean '{n}'?"))
            .unwrap_or_default();
        usage(Error::new(
            ErrorKind::Other,
            format!(
                "no spider named '{name}'{hint} (spiders: {})",
                names.join(", ")
            ),
        ))
    }

    async fn run_verb(mut self, cli: RunnerCli) -> Result<(), Failure> {
        if let Some(dup) = self.duplicate_names() {
            return Err(usage(Error::new(
                ErrorKind::Other,
                format!("two spiders are named '{dup}'"),
            )));
        }
        let mut layers = cli.common.layers().map_err(usage)?;
        match cli.verb {
            RunnerVerb::List => {
                for name in self.names() {
                    println!("{name}");
                }
                Ok(())
            }
            RunnerVerb::Settings(verb) => {
                if verb.markdown {
                    print!("{}", settings_markdown());
                    return Ok(());
                }
                let custom = match &verb.name {
                    Some(name) => {
                        let s = self
                            .spiders
                            .iter()
                            .find(|s| &s.name() == name)
                            .ok_or_else(|| self.unknown_spider(name))?;
                        Some((name.clone(), s.custom_settings()))
                    }
                    None => None,
                };
                let resolved = layers
                    .resolve(custom.as_ref().map(|(n, c)| (n.as_str(), c.as_slice())))
                    .map_err(usage)?;
                if let Some(path) = layers.file_path() {
                    println!("# settings file: {}", path.display());
                }
                print!("{}", resolved.table());
                Ok(())
            }
            RunnerVerb::Crawl(args) => {
                let Some(at) = self.spiders.iter().position(|s| s.name() == args.name) else {
                    return Err(self.unknown_spider(&args.name));
                };
                if let Some(dir) = &args.job_dir {
                    layers.cli("job_dir", &dir.to_string_lossy());
                }
                let spider = self.spiders.swap_remove(at);
                let job = CrawlJob {
                    layers,
                    args: args.arg,
                    outputs: args
                        .output
                        .into_iter()
                        .map(|p| (p, true))
                        .chain(args.overwrite_output.into_iter().map(|p| (p, false)))
                        .collect(),
                    progress: !args.no_progress,
                    report: args.report,
                };
                spider.crawl(job).await?;
                Ok(())
            }
            RunnerVerb::Serve(args) => {
                crate::serve::run(args, &cli.common, layers, self.spiders, self.job_command).await
            }
            RunnerVerb::Shell { args, spider } => {
                let custom = match &spider {
                    Some(name) => match self.spiders.iter().find(|s| &s.name() == name) {
                        Some(s) => Some((name.as_str(), s.custom_settings())),
                        None => return Err(self.unknown_spider(name)),
                    },
                    None => None,
                };
                let settings = layers
                    .resolve(custom.as_ref().map(|(n, c)| (*n, c.as_slice())))
                    .map_err(usage)?
                    .settings;
                crawler::init_logging_with(&settings).map_err(usage)?;
                crate::shell::run(&settings, &args).await
            }
            RunnerVerb::Parse(args) => {
                let Some(at) = self.spiders.iter().position(|s| s.name() == args.spider) else {
                    return Err(self.unknown_spider(&args.spider));
                };
                let spider = &mut self.spiders[at];
                let custom = spider.custom_settings();
                let settings = layers
                    .resolve(Some((&args.spider, &custom)))
                    .map_err(usage)?
                    .settings;
                crawler::init_logging_with(&settings).map_err(usage)?;
                spider.open(&settings, &args.arg).map_err(|e| {
                    if e.kind() == ErrorKind::Argument {
                        usage(e)
                    } else {
                        failed(e)
                    }
                })?;
                spider.parse_url(&settings, &args).await
            }
            RunnerVerb::Check { name, arg } => {
                if let Some(n) = &name
                    && !self.names().contains(n)
                {
                    return Err(self.unknown_spider(n));
                }
                if name.is_none() && !arg.is_empty() && self.spiders.len() > 1 {
                    // Arguments are a spider's own: one that does not read them would be
                    // refused, so every other spider's checks would fail.
                    return Err(usage(Error::new(
                        ErrorKind::Argument,
                        "check -a needs the spider's NAME (check NAME -a KEY=VALUE): \
                         arguments are read by one spider",
                    )));
                }
                let mut failures = 0usize;
                for spider in &mut self.spiders {
                    let sname = spider.name();
                    if name.as_ref().is_some_and(|n| n != &sname) {
                        continue;
                    }
                    let custom = spider.custom_settings();
                    let settings = layers
                        .resolve(Some((&sname, &custom)))
                        .map_err(usage)?
                        .settings;
                    crawler::init_logging_with(&settings).map_err(usage)?;
                    spider.open(&settings, &arg).map_err(|e| {
                        if e.kind() == ErrorKind::Argument {
                            usage(e)
                        } else {
                            failed(e)
                        }
                    })?;
                    let contracts: Vec<&Contract> = self
                        .contracts
                        .iter()
                        .filter(|(n, _)| n == &sname)
                        .map(|(_, c)| c)
                        .collect();
                    if contracts.is_empty() {
                        println!("{sname}: no contracts");
                    }
                    for c in contracts {
                        match spider.check(c, &settings).await {
                            Ok(summary) => println!("{sname}: ok   {summary}"),
                            Err(e) => {
                                failures += 1;
                                let e = crawler::core::redact::scrub(&e.to_string()).into_owned();
                                println!("{sname}: FAIL {e}");
                            }
                        }
                    }
                }
                if failures > 0 {
                    return Err(failed(Error::new(
                        ErrorKind::Other,
                        format!("{failures} contract check(s) failed"),
                    )));
                }
                Ok(())
            }
        }
    }
}

/// The spider name nearest to `word`, if one is close enough to be a likely typo (the
/// same measure and threshold as the settings' "did you mean").
fn nearest_name<'a>(word: &str, names: &'a [String]) -> Option<&'a str> {
    names
        .iter()
        .map(|n| (strsim::jaro_winkler(word, n), n.as_str()))
        .filter(|(score, _)| *score > 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, n)| n)
}
