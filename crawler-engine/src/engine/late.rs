//! The spider's late turn at a request that ended without a page for its callback, once the
//! engine has settled that no retry follows: an answer whose status the spider asked to see
//! goes to the request's callback, and a failure (or a robots.txt or address refusal, or
//! its host skipped for the run while it waited) to the errback the request named. The slot learned from the answer when it arrived, as for any
//! other; this turn changes nothing of politeness.

use std::panic::AssertUnwindSafe;

use futures_util::FutureExt;

use super::worker::{
    Completion, Ctx, Terminal, deliver, panicked_error, parse_page, spider_errors,
};
use crawler_core::address::{FROM_PRIVATE_META, mark_from_private};
use crawler_core::{Downloader, FailedRequest, FailureKind, Output, Spider};

/// Whether the spider gets a late turn at `done` (a request that is not retried).
pub(super) fn wants_late(done: &Completion) -> bool {
    if done.late {
        return false;
    }
    let Some(req) = &done.request else {
        return false;
    };
    match done.terminal {
        Terminal::Failed(FailureKind::Status) if done.allowed && done.answer.is_some() => true,
        // The spider's own errors are its callback's, not the request's.
        Terminal::Failed(FailureKind::Spider) => false,
        Terminal::Failed(_) | Terminal::Disallowed => req.errback.is_some(),
        _ => false,
    }
}

/// Run the spider's late turn (see [`wants_late`]) and report it as the request's end.
pub(super) async fn late<S: Spider, D: Downloader>(
    ctx: std::sync::Arc<Ctx<S, D>>,
    mut done: Completion,
) -> Completion {
    done.late = true;
    let Some(req) = done.request.take() else {
        return done;
    };
    if matches!(done.terminal, Terminal::Failed(FailureKind::Status))
        && done.allowed
        && let Some(response) = done.answer.take()
    {
        // Handed to the spider: fetched, with its status in the stats as ever.
        done.terminal = Terminal::Fetched;
        done.message.clear();
        return parse_page(&ctx, req, *response, false, done).await;
    }
    errback(&ctx, req, done).await
}

/// Hand the failure to the request's errback, then its items to the pipelines; its
/// requests are queued when the engine settles the result.
async fn errback<S: Spider, D: Downloader>(
    ctx: &Ctx<S, D>,
    req: crawler_core::Request,
    mut done: Completion,
) -> Completion {
    let kind = match done.terminal {
        Terminal::Failed(kind) => kind,
        Terminal::SkippedHost => FailureKind::HostSkipped,
        _ => FailureKind::Disallowed,
    };
    // A refusal (robots.txt, a forbidden address) is decided before this request is sent,
    // and a request set aside with its skipped host was never sent either.
    let refused = matches!(kind, FailureKind::Disallowed | FailureKind::Forbidden)
        || matches!(done.terminal, Terminal::SkippedHost);
    let attempts = req.retries + u32::from(!refused);
    let name = req.errback.clone().unwrap_or_default();
    let url = req.url.clone();
    // The errback's requests may go where the failed request could: into private space
    // when it came from a private page, or was a start request.
    let private = req.meta.contains_key(FROM_PRIVATE_META)
        || (req.depth == 0 && req.redirect_urls.is_empty());
    let mut out = Output::new(req.url.clone(), req.depth).with_max_links(ctx.max_links);
    let failure = FailedRequest::new(
        kind,
        done.message.clone(),
        req.clone(),
        done.status,
        done.answer.take().map(|r| *r),
        attempts,
    );
    let call = ctx.spider.errback(failure, &mut out);
    let (result, panicked) = match AssertUnwindSafe(call).catch_unwind().await {
        Ok(result) => (result, false),
        Err(panic) => (Err(panicked_error(panic.as_ref())), true),
    };
    done.spider_error = spider_errors(&url, &name, &result, &[]);
    done.handled = result.is_ok();
    if panicked {
        // Half-built items are not written, as after a callback's panic.
        out.parts_mut().0.clear();
    }
    done.invalid_links = out.invalid_links();
    done.links_dropped = out.dropped_links();
    done.close = out.close_requested().map(str::to_owned);
    done.counters = out.take_counters();
    let (items, mut requests) = out.into_parts();
    for r in &mut requests {
        mark_from_private(&mut r.meta, private);
    }
    done.requests = requests;
    // Kept for the failures file, should the errback have failed.
    done.request = Some(req);
    deliver(ctx, items, &url, &mut done).await;
    done
}
