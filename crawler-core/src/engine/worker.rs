//! The per-request worker: download one request, let the spider parse the page, run the
//! items through the pipelines to the feed writer, and report what happened.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures_util::FutureExt;
use tokio::sync::mpsc;
use url::Url;

use super::feeds::FeedMsg;
use super::redirect::{DONT_REDIRECT_META, REDIRECTS, redirect};
use crate::fetch::{Download, Downloader, Failure, FailureKind, Feedback, Fetched, Lease};
use crate::output::Output;
use crate::pipeline::{DynPipeline, Processed};
use crate::request::Request;
use crate::response::Response;
use crate::spider::Spider;

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
}

/// Counts a worker as parked in a render for as long as it lives (a panic or a cancelled
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
    pub(super) spider_error: bool,
    pub(super) feed_closed: bool,
    /// What the downloader deferred until the request is acknowledged (see
    /// [`crate::AfterAck`]); set only when the page was parsed and its items all sent.
    pub(super) after_ack: Option<crate::AfterAck>,
    /// Why the spider or a pipeline asked to close the crawl, if one did.
    pub(super) close: Option<String>,
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
            spider_error: false,
            feed_closed: false,
            after_ack: None,
            close: None,
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
        None => ctx.downloader.fetch(&req).await,
    };
    // The slot learns now; parsing and pipelines may take a while.
    let _ = report.tx.send((report.lease, feedback.clone()));
    let response = match outcome {
        Fetched::Disallowed => return Completion::new(feedback, Terminal::Disallowed),
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
        }) => {
            tracing::debug!(url = %req.url, %kind, "request failed: {message}");
            let mut c = Completion::new(feedback, Terminal::Failed(kind));
            c.status = status;
            c.request = Some(req);
            c.message = message;
            return c;
        }
        Fetched::Response(r) => r,
    };
    answered(&ctx, req, response, feedback).await
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
        if status >= 400 {
            tracing::debug!(url = %req.url, status, "response not handled by the spider");
        }
        done.message = format!("HTTP {status}");
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
    parse_page(ctx, req.depth, response, unchanged, done).await
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

/// Have the spider parse the page (its `not_modified` hook when it is `unchanged` and no
/// copy is at hand), then send its items through the pipelines to the feeds.
async fn parse_page<S: Spider, D: Downloader>(
    ctx: &Ctx<S, D>,
    depth: u32,
    response: Response,
    unchanged: bool,
    mut done: Completion,
) -> Completion {
    let url = response.url().clone();
    let from_private = response.served_from_private();
    // The callback's name, for the log of a spider error ("parse" is the default one).
    let callback = response.callback().unwrap_or("parse").to_owned();
    let after_ack = response.take_after_ack();
    let problems = response.problems();
    let mut out = Output::new(response.base_url().clone(), depth);
    let call = async {
        if unchanged {
            // Unchanged and no copy to replay: the spider's hook decides (default: nothing).
            ctx.spider.not_modified(response, &mut out).await
        } else {
            ctx.spider.parse(response, &mut out).await
        }
    };
    // A panic in the callback is caught here, where the page is known, so its log line
    // names the URL and the callback like any spider error, and the crawl goes on.
    let (result, panicked) = match AssertUnwindSafe(call).catch_unwind().await {
        Ok(result) => (result, false),
        Err(panic) => (Err(panicked_error(panic.as_ref())), true),
    };
    let problems = std::mem::take(&mut *problems.lock().unwrap_or_else(|p| p.into_inner()));
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
    done.close = out.close_requested().map(str::to_owned);
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
        crate::address::mark_from_private(&mut r.meta, from_private);
    }
    done.requests = requests;

    deliver(ctx, items, &url, &mut done).await;
    if !done.spider_error && !done.feed_closed {
        done.after_ack = after_ack;
    }
    done
}

/// The error standing for a callback's panic, with the panic's message when it has one.
fn panicked_error(panic: &(dyn std::any::Any + Send)) -> crate::error::Error {
    let message = panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "no message".to_owned());
    crate::error::Error::new(
        crate::error::ErrorKind::Other,
        format!("the callback panicked: {message}"),
    )
}

/// Log what went wrong in a callback (its error, and invalid selectors it used), each with
/// the page's URL and the callback's name; whether anything did.
fn spider_errors(
    url: &Url,
    callback: &str,
    result: &crate::error::Result<()>,
    problems: &[crate::error::Error],
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
async fn deliver<S: Spider, D: Downloader>(
    ctx: &Ctx<S, D>,
    items: Vec<S::Item>,
    url: &Url,
    done: &mut Completion,
) {
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
                    done.dropped += 1;
                    continue 'items;
                }
                Err(e) => {
                    tracing::warn!(%url, pipeline = p.name(), "pipeline error, item dropped: {e}");
                    done.dropped += 1;
                    continue 'items;
                }
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
