//! The per-request worker: download one request, let the spider parse the page, run the
//! items through the pipelines to the feed writer, and report what happened.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures_util::FutureExt;
use tokio::sync::mpsc;
use url::Url;

use super::feeds::FeedMsg;
use crawler_core::Output;
use crawler_core::Request;
use crawler_core::Response;
use crawler_core::Spider;
use crawler_core::{DONT_REDIRECT_META, REDIRECTS, redirect};
use crawler_core::{Download, Downloader, Failure, FailureKind, Feedback, Fetched, Lease};
use crawler_core::{DynPipeline, Processed};

/// What workers share.
pub(super) struct Ctx<S: Spider, D> {
    pub(super) spider: Arc<S>,
    pub(super) downloader: Arc<D>,
    pub(super) pipelines: Vec<Box<dyn DynPipeline<S::Item>>>,
    pub(super) items_tx: mpsc::Sender<FeedMsg<S::Item>>,
    /// Whether any feed is open: without one, items are counted and dropped in the worker.
    pub(super) has_feeds: bool,
    /// Redirect hops allowed from one start request.
    pub(super) max_redirects: usize,
    /// Workers inside [`Downloader::render`]: the engine does not count them against
    /// `concurrency` (they wait for sub-requests the engine must still hand out).
    pub(super) parked: AtomicUsize,
    /// A pipeline stage fetches (the files pipeline): a page whose items are in the
    /// pipelines waits for sub-requests, so it is parked as a page in a render is.
    pub(super) park_delivery: bool,
    /// Permits for the parse pool: HTML parsing and the spider's callbacks run on blocking
    /// threads, at most this many at once, so the runtime's threads stay free for the
    /// network (a page that takes seconds to parse would otherwise stall every download
    /// on its thread and inflate the latency the slots read).
    pub(super) parse_pool: Arc<tokio::sync::Semaphore>,
    /// The bounds of one page's parse.
    pub(super) parse_limits: crawler_core::ParseLimits,
    /// Most links followed from one page (`max_links_per_page`).
    pub(super) max_links: usize,
    /// The cap on requests queued in memory (`max_queued_requests`), when the queue is
    /// in memory.
    pub(super) queue_cap: Option<usize>,
    /// Which non-2xx answers reach the callback (the spider's list, the setting).
    pub(super) statuses: crawler_core::StatusRules,
    /// Resolves the names of a page's follow-ups before they reach the scheduler.
    pub(super) resolve_ahead: Option<Arc<dyn crawler_core::dns::ResolveAhead>>,
    /// The extensions and their handle.
    pub(super) signals: super::extensions::Signals<S::Item>,
}

/// Counts a worker as parked (in a render, or its items in pipelines that fetch) for as long as it lives (a panic or a cancelled
/// task included).
struct Parked<'a>(&'a AtomicUsize);

impl<'a> Parked<'a> {
    fn new(count: &'a AtomicUsize) -> Self {
        count.fetch_add(1, Ordering::Relaxed);
        Self(count)
    }
}

impl Drop for Parked<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

pub(super) enum Terminal {
    Fetched,
    NotModified,
    Disallowed,
    /// A 3xx whose next hop was queued as a new request.
    Redirected,
    Failed(FailureKind),
    /// Never sent: its host was skipped for the run while it waited (a Retry-After over
    /// `max_retry_after`, an unreachable robots.txt), and the scheduler set it aside.
    /// Counted as `skipped_host`; its errback sees [`FailureKind::HostSkipped`].
    SkippedHost,
    /// Not terminal: queued again for another attempt.
    Retrying,
    /// Not terminal and not an attempt: back to the host's queue (see [`Fetched::Requeue`]).
    Requeued,
}

/// Where a worker reports its request's feedback as soon as the response arrives.
pub(super) struct Report {
    pub(super) lease: Lease,
    pub(super) tx: mpsc::UnboundedSender<(Lease, Feedback)>,
}

/// One request's result, reported to the engine loop.
pub(super) struct Completion {
    /// The request, kept for a retry and for the failures file.
    pub(super) request: Option<Request>,
    /// Why it failed, when it did.
    pub(super) message: String,
    pub(super) feedback: Feedback,
    pub(super) terminal: Terminal,
    pub(super) status: Option<u16>,
    pub(super) bytes: u64,
    pub(super) requests: Vec<Request>,
    pub(super) items: u64,
    pub(super) dropped: u64,
    pub(super) invalid_links: u64,
    /// Links of the page beyond `max_links_per_page`, dropped.
    pub(super) links_dropped: u64,
    pub(super) spider_error: bool,
    pub(super) feed_closed: bool,
    /// What the downloader deferred until the request is acknowledged (see
    /// [`crawler_core::AfterAck`]); set only when the page was parsed and its items all sent.
    pub(super) after_ack: Option<crawler_core::AfterAck>,
    /// Why the spider or a pipeline asked to close the crawl, if one did.
    pub(super) close: Option<String>,
    /// The answer of a failed request, kept when the spider may still see it: its status
    /// is allowed (the callback gets it once no retry is planned), or the request names an
    /// errback (which gets its headers and body).
    /// Boxed: most completions carry none, and a completion is moved once per request.
    pub(super) answer: Option<Box<Response>>,
    /// The answer's status is one the spider asked to see.
    pub(super) allowed: bool,
    /// The spider already had its late turn at this request (an allowed status's
    /// callback, or the errback): no retry, no second turn.
    pub(super) late: bool,
    /// The errback ran and succeeded: the failure is counted but not listed in the
    /// failures file.
    pub(super) handled: bool,
    /// What the spider counted ([`Output::stats`]).
    pub(super) counters: crawler_core::Counters,
}

impl Completion {
    pub(super) fn new(feedback: Feedback, terminal: Terminal) -> Self {
        Self {
            request: None,
            message: String::new(),
            feedback,
            terminal,
            status: None,
            bytes: 0,
            requests: Vec::new(),
            items: 0,
            dropped: 0,
            invalid_links: 0,
            links_dropped: 0,
            spider_error: false,
            feed_closed: false,
            after_ack: None,
            close: None,
            answer: None,
            allowed: false,
            late: false,
            handled: false,
            counters: crawler_core::Counters::default(),
        }
    }

    pub(super) fn panicked(e: &tokio::task::JoinError) -> Self {
        tracing::error!("a spider callback panicked: {e}");
        let feedback = Feedback {
            sent: true,
            ..Feedback::default()
        };
        let mut c = Self::new(feedback, Terminal::Failed(FailureKind::Spider));
        c.spider_error = true;
        c
    }
}

/// Download one request, parse it, run the items through the pipelines into the feed.
pub(super) async fn work<S: Spider, D: Downloader>(
    ctx: Arc<Ctx<S, D>>,
    req: Request,
    report: Report,
) -> Completion {
    let Download { outcome, feedback } = match ctx.downloader.gate(&req).await {
        Some(answered) => answered,
        None => {
            if let Some((list, crawl)) = ctx.signals.on() {
                for e in list {
                    e.request_reached_downloader(&req, crawl);
                }
            }
            ctx.downloader.fetch(&req).await
        }
    };
    // The slot learns now; parsing and pipelines may take a while.
    let _ = report.tx.send((report.lease, feedback.clone()));
    let response = match outcome {
        Fetched::Disallowed => {
            let mut c = Completion::new(feedback, Terminal::Disallowed);
            // Kept only for an errback: a refusal otherwise needs nothing of it.
            if req.errback.is_some() {
                c.message = "forbidden by robots.txt".to_owned();
                c.request = Some(req);
            }
            return c;
        }
        Fetched::Requeue(why) => {
            tracing::debug!(url = %req.url, "back to the queue: {why}");
            let mut c = Completion::new(feedback, Terminal::Requeued);
            c.request = Some(req);
            return c;
        }
        Fetched::Failed(Failure {
            kind,
            message,
            status,
            bytes,
        }) => {
            tracing::debug!(url = %req.url, %kind, "request failed: {message}");
            let mut c = Completion::new(feedback, Terminal::Failed(kind));
            c.status = status;
            c.bytes = bytes;
            c.request = Some(req);
            c.message = message;
            return c;
        }
        Fetched::Response(r) => r,
    };
    let done = answered(&ctx, req, response, feedback).await;
    if let Some(ahead) = &ctx.resolve_ahead
        && !done.requests.is_empty()
    {
        // Here, in the page's worker: the engine's loop queues them without waiting.
        ahead
            .resolve_ahead(done.requests.iter().map(|r| r.url.clone()).collect())
            .await;
    }
    done
}

/// A response came: follow it when it is a redirect, end it when its status is a failure,
/// or have the spider parse it.
async fn answered<S: Spider, D: Downloader>(
    ctx: &Ctx<S, D>,
    req: Request,
    response: Response,
    feedback: Feedback,
) -> Completion {
    super::request_log::log_response(&req, &response, &feedback);
    if let Some((list, crawl)) = ctx.signals.on() {
        for e in list {
            e.response_received(&response, &req, crawl);
        }
    }
    let status = response.status();
    // A 304 answered from the HTTP cache counts as not modified (the server sent no body),
    // yet the spider parses the cached page so its items are still produced.
    let revalidated = response.is_revalidated();
    let terminal = match status {
        _ if revalidated => Terminal::NotModified,
        200..=299 => Terminal::Fetched,
        304 => Terminal::NotModified,
        _ => Terminal::Failed(FailureKind::Status),
    };
    if !revalidated
        && REDIRECTS.contains(&status)
        && !ctx.statuses.keeps_redirect(&req, status)
        && !req
            .meta
            .get(DONT_REDIRECT_META)
            .and_then(|v| v.as_bool())
            .unwrap_or(false)
    {
        return redirected(req, &response, feedback, ctx.max_redirects);
    }
    let mut done = Completion::new(feedback, terminal);
    done.status = Some(if revalidated { 304 } else { status });
    // Cached bodies did not cross the network; the stats count bytes received.
    done.bytes = if response.is_cached() {
        0
    } else {
        response.body().len() as u64
    };
    if let Terminal::Failed(_) = done.terminal {
        done.message = format!("HTTP {status}");
        // An allowed status still goes through the retry policy first (the engine decides
        // retries when it settles the request); the answer waits here for the callback.
        done.allowed = status >= 300 && ctx.statuses.allows(&req, status);
        if status >= 400 && !done.allowed {
            tracing::debug!(url = %req.url, status, "response not handled by the spider");
        }
        if done.allowed || req.errback.is_some() {
            done.answer = Some(Box::new(response));
        }
        done.request = Some(req);
        return done;
    }
    let unchanged = status == 304 && !revalidated;
    let response = if matches!(done.terminal, Terminal::Fetched) && ctx.downloader.renders(&req) {
        let _parked = Parked::new(&ctx.parked);
        match ctx.downloader.render(&req, response).await {
            Fetched::Response(rendered) => rendered,
            Fetched::Failed(Failure { kind, message, .. }) => {
                tracing::debug!(url = %req.url, %kind, "render failed: {message}");
                done.terminal = Terminal::Failed(kind);
                done.message = message;
                done.request = Some(req);
                return done;
            }
            other => {
                done.terminal = Terminal::Failed(FailureKind::Other);
                done.message = format!("render gave no page: {other:?}");
                done.request = Some(req);
                return done;
            }
        }
    } else {
        response
    };
    parse_page(ctx, req, response, unchanged, done).await
}

/// A 3xx to follow: its next hop becomes the follow-up request, or the request fails with
/// the reason it cannot be followed.
fn redirected(req: Request, response: &Response, feedback: Feedback, max: usize) -> Completion {
    let status = response.status();
    let mut done = match redirect(&req, response, max) {
        Ok(next) => {
            tracing::debug!(from = %req.url, to = %next.url, status, "redirect");
            let mut done = Completion::new(feedback, Terminal::Redirected);
            done.requests = vec![next];
            done
        }
        Err(failure) => {
            tracing::debug!(url = %req.url, status, "redirect not followed: {}", failure.message);
            let mut done = Completion::new(feedback, Terminal::Failed(failure.kind));
            done.message = failure.message;
            done.request = Some(req);
            done
        }
    };
    done.status = Some(status);
    done.bytes = response.body().len() as u64;
    done
}

/// What the parse pool hands back for one page.
enum Parsed<I> {
    /// The page could not be parsed (no encoding fits it, or it is too complex): the
    /// spider never saw it.
    Refused(Failure),
    /// The callback ran: its result, whether it panicked, and what it produced.
    Called {
        result: crawler_core::Result<()>,
        panicked: bool,
        out: Box<Output<I>>,
    },
}

/// Have the spider parse the page (its `not_modified` hook when it is `unchanged` and no
/// copy is at hand), then send its items through the pipelines to the feeds.
pub(super) async fn parse_page<S: Spider, D: Downloader>(
    ctx: &Ctx<S, D>,
    req: Request,
    mut response: Response,
    unchanged: bool,
    mut done: Completion,
) -> Completion {
    let url = response.url().clone();
    let from_private = response.served_from_private();
    // The callback's name, for the log of a spider error ("parse" is the default one).
    let callback = response.callback().unwrap_or("parse").to_owned();
    let after_ack = response.take_after_ack();
    let problems = response.problems();
    response.set_parse_limits(ctx.parse_limits);
    let spider = Arc::clone(&ctx.spider);
    let depth = req.depth;
    let max_links = ctx.max_links;
    // A small page is parsed where it is: its worst case is bounded by its size and the
    // depth cap (milliseconds), and the hop to a blocking thread and back cost 70% more CPU
    // per page on the crawl benchmark (BENCHMARKS.md, "Hostile pages: parsing off the
    // runtime").
    let inline = response.body().len() <= INLINE_BODY;
    let job = async move {
        // Parsed up front (HTML only: a JSON body is never a tree unless the spider asks),
        // so that a page that cannot be parsed fails as what it is before the spider runs.
        if !unchanged
            && response.is_html()
            && let Err(failure) = response.parse_html()
        {
            return Parsed::Refused(failure);
        }
        let mut out = Output::new(response.base_url().clone(), depth).with_max_links(max_links);
        let call = async {
            if unchanged {
                // Unchanged and no copy to replay: the spider's hook decides (default:
                // nothing).
                spider.not_modified(response, &mut out).await
            } else {
                spider.parse(response, &mut out).await
            }
        };
        // A panic in the callback is caught here, where the page is known, so its log line
        // names the URL and the callback like any spider error, and the crawl goes on.
        let (result, panicked) = match AssertUnwindSafe(call).catch_unwind().await {
            Ok(result) => (result, false),
            Err(panic) => (Err(panicked_error(panic.as_ref())), true),
        };
        Parsed::Called {
            result,
            panicked,
            out: Box::new(out),
        }
    };
    let parsed = if inline {
        job.await
    } else {
        on_parse_pool(&ctx.parse_pool, job).await
    };
    let (result, panicked, mut out) = match parsed {
        Parsed::Called {
            result,
            panicked,
            out,
        } => (result, panicked, out),
        Parsed::Refused(failure) => return refused(req, failure, done),
    };
    let mut problems = std::mem::take(&mut *problems.lock().unwrap_or_else(|p| p.into_inner()));
    // A tree parsed when the spider first selected (a body not labelled HTML) may have
    // crossed the limits too: the page fails as too complex, not as the spider's error.
    if let Some(i) = problems
        .iter()
        .position(|p| p.kind() == crawler_core::ErrorKind::TooComplex)
    {
        let failure = Failure::new(FailureKind::TooComplex, problems.swap_remove(i).to_string());
        return refused(req, failure, done);
    }
    done.spider_error = spider_errors(&url, &callback, &result, &problems);
    if panicked {
        // The callback stopped half-way: its items may be half-built, so none is written.
        // The requests it had made are whole and are followed, as after an error returned
        // with `?` (and as Scrapy schedules what a callback yielded before it raised).
        let (items, _) = out.parts_mut();
        items.clear();
    }
    if !problems.is_empty() {
        // An invalid selector matched nothing, so the page's items may hold empty fields
        // the spider never chose: none of them is written (see `Response::select`).
        let (items, _) = out.parts_mut();
        if !items.is_empty() {
            tracing::warn!(
                %url,
                callback,
                discarded = items.len(),
                "items of the page not written: the callback used an invalid CSS selector"
            );
            items.clear();
        }
    }
    done.invalid_links = out.invalid_links();
    done.links_dropped = out.dropped_links();
    if done.links_dropped > 0 {
        // Once per page, not per link: a page of 200,000 links is one event.
        tracing::warn!(
            %url,
            kept = ctx.max_links,
            dropped = done.links_dropped,
            "links beyond max_links_per_page dropped"
        );
    }
    done.close = out.close_requested().map(str::to_owned);
    done.counters = out.take_counters();
    let (items, mut requests) = out.into_parts();
    // Follow-ups inherit nothing implicitly except depth; keep the referrer for debugging.
    // A copy of the URL's text per request, not a formatting pass (`to_string`) per link.
    let referer = url.as_str();
    for r in &mut requests {
        if r.header_value("referer").is_none() {
            r.headers.push(("Referer".to_owned(), referer.to_owned()));
        }
        // Whether the page was private decides whether its links may lead into private
        // space; the engine's word, not the spider's (which may have copied meta over).
        crawler_core::address::mark_from_private(&mut r.meta, from_private);
    }
    done.requests = requests;

    deliver(ctx, items, &url, &mut done).await;
    if !done.spider_error && !done.feed_closed {
        done.after_ack = after_ack;
    }
    done
}

/// A page that could not be parsed ends as a failure of its own class (not retried: the
/// same bytes would fail the same way); its status stays what the server sent.
fn refused(req: Request, failure: Failure, mut done: Completion) -> Completion {
    tracing::warn!(url = %req.url, kind = %failure.kind, "page not parsed: {}", failure.message);
    done.terminal = Terminal::Failed(failure.kind);
    done.message = failure.message;
    done.request = Some(req);
    done
}

/// Bodies up to this size are parsed, and their callback run, on the runtime's thread: at
/// most about 10,000 elements, whose parse and selection stay in milliseconds even nested
/// to `parse_max_depth`. Larger ones go to the parse pool.
const INLINE_BODY: usize = 32 * 1024;

/// Run `job` (the parse and the spider's callback) on a blocking thread, once one of the
/// pool's permits is free. The callback's own `.await`s still work: the thread drives it
/// with the runtime's handle, whose reactor and timers run on the runtime's threads.
async fn on_parse_pool<T: Send + 'static>(
    pool: &Arc<tokio::sync::Semaphore>,
    job: impl std::future::Future<Output = T> + Send + 'static,
) -> T {
    // The semaphore is never closed, so acquiring fails only if it were; then the job
    // runs without a permit rather than not at all.
    let permit = Arc::clone(pool).acquire_owned().await.ok();
    let handle = tokio::runtime::Handle::current();
    let task = tokio::task::spawn_blocking(move || {
        let _permit = permit;
        handle.block_on(job)
    });
    match task.await {
        Ok(parsed) => parsed,
        // The job catches the callback's panics itself; a panic elsewhere in it (the
        // parser) is the crawler's bug: carry it to the worker, whose task reports it.
        Err(e) => std::panic::resume_unwind(e.into_panic()),
    }
}

/// The error standing for a callback's panic, with the panic's message when it has one.
pub(super) fn panicked_error(panic: &(dyn std::any::Any + Send)) -> crawler_core::Error {
    let message = panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "no message".to_owned());
    crawler_core::Error::new(
        crawler_core::ErrorKind::Other,
        format!("the callback panicked: {message}"),
    )
}

/// Log what went wrong in a callback (its error, and invalid selectors it used), each with
/// the page's URL and the callback's name; whether anything did.
pub(super) fn spider_errors(
    url: &Url,
    callback: &str,
    result: &crawler_core::Result<()>,
    problems: &[crawler_core::Error],
) -> bool {
    let error = result.as_ref().err().map(ToString::to_string);
    for p in problems {
        let text = p.to_string();
        // An invalid selector whose error the callback returned is logged once, below.
        if error.as_ref().is_none_or(|e| !e.contains(&text)) {
            tracing::error!(%url, callback, "spider error: {text}");
        }
    }
    if let Some(e) = &error {
        tracing::error!(%url, callback, "spider error: {e}");
    }
    error.is_some() || !problems.is_empty()
}

/// Run each item through the pipelines, then (when a feed is open) to the feed writer,
/// counting what was kept and dropped; stops when the writer is gone.
pub(super) async fn deliver<S: Spider, D: Downloader>(
    ctx: &Ctx<S, D>,
    items: Vec<S::Item>,
    url: &Url,
    done: &mut Completion,
) {
    // Waiting for a stage's fetches, not for this page's network: the sub-requests those
    // wait for need a turn that a full count of workers would never give them.
    let _parked = ctx.park_delivery.then(|| Parked::new(&ctx.parked));
    'items: for mut item in items {
        for p in &ctx.pipelines {
            let processed = p.process(item).await;
            if done.close.is_none() {
                done.close = p.close_crawl();
            }
            match processed {
                Ok(Processed::Keep(kept)) => item = kept,
                Ok(Processed::Drop(reason)) => {
                    tracing::debug!(%url, pipeline = p.name(), "item dropped: {reason}");
                    if let Some((list, crawl)) = ctx.signals.on() {
                        for e in list {
                            e.item_dropped(url, p.name(), &reason, crawl);
                        }
                    }
                    done.dropped += 1;
                    continue 'items;
                }
                Err(e) => {
                    tracing::warn!(%url, pipeline = p.name(), "pipeline error, item dropped: {e}");
                    if let Some((list, crawl)) = ctx.signals.on() {
                        for x in list {
                            x.item_error(url, p.name(), &e, crawl);
                        }
                    }
                    done.dropped += 1;
                    continue 'items;
                }
            }
        }
        if let Some((list, crawl)) = ctx.signals.on() {
            for e in list {
                e.item_scraped(&item, url, crawl);
            }
        }
        if !ctx.has_feeds {
            drop(item);
        } else if ctx.items_tx.send(FeedMsg::Item(item)).await.is_err() {
            done.feed_closed = true;
            break;
        }
        done.items += 1;
    }
}

/// Threads of the parse pool: the setting, or one per core.
pub(super) fn parse_threads(settings: &crawler_core::Settings) -> usize {
    match settings.parse_threads {
        0 => std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get),
        n => n,
    }
}
