//! Downloader middlewares: the trait, and its object-safe form for mixed stacks. The stack
//! that runs them around a downloader is crawler-engine's `Middlewares`.

use std::future::Future;
use std::pin::Pin;

use crate::request::Request;
use crate::response::Response;

/// What a downloader middleware decided about an outgoing request.
// Moved once per request; boxing the response would cost an allocation on the hot path.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum Action {
    /// Go on to the next middleware, then the network.
    Continue,
    /// Answer with this response instead of sending the request (a cache, a stub, a
    /// canned page). The response hooks still run on it.
    Respond(Response),
    /// Do not send the request; it ends as failed with this reason.
    Drop(String),
}

/// What a downloader middleware decided about a response.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum After {
    /// Hand the (possibly changed) response to the next response hook.
    Pass(Response),
    /// Use this response and skip the remaining response hooks: it goes straight to the
    /// engine and the spider.
    Replace(Response),
    /// The response is not usable (an empty page, a login wall): retry the request, for
    /// this reason.
    Retry(String),
}

/// A downloader middleware: hooks before a request is sent and after its response arrives.
///
/// Hooks are `async fn`s in the impl. One instance serves every request of the crawl, many
/// at once, so state lives behind a lock or in atomics.
pub trait DownloaderMiddleware: Send + Sync + 'static {
    /// A short name for logs and stats.
    fn name(&self) -> &str;

    /// Change the request (headers, meta), answer it directly, or drop it.
    fn process_request(&self, request: &mut Request) -> impl Future<Output = Action> + Send {
        let _ = request;
        async { Action::Continue }
    }

    /// Look at (or change, replace, retry) the response to `request`.
    fn process_response(
        &self,
        request: &Request,
        response: Response,
    ) -> impl Future<Output = After> + Send {
        let _ = request;
        async move { After::Pass(response) }
    }

    /// The middleware's own counters (cookies stored, malformed headers, ...), added to the
    /// crawl's middleware stats.
    fn counters(&self) -> Vec<(String, u64)> {
        Vec::new()
    }
}

type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Object-safe form of [`DownloaderMiddleware`], so middlewares of different types share one
/// stack. Implemented for every `DownloaderMiddleware`; not meant to be implemented directly.
pub trait DynDownloaderMiddleware: Send + Sync + 'static {
    /// See [`DownloaderMiddleware::name`].
    fn name(&self) -> &str;
    /// See [`DownloaderMiddleware::process_request`].
    fn process_request<'a>(&'a self, request: &'a mut Request) -> BoxFuture<'a, Action>;
    /// See [`DownloaderMiddleware::process_response`].
    fn process_response<'a>(
        &'a self,
        request: &'a Request,
        response: Response,
    ) -> BoxFuture<'a, After>;
    /// See [`DownloaderMiddleware::counters`].
    fn counters(&self) -> Vec<(String, u64)>;
}

impl<M: DownloaderMiddleware> DynDownloaderMiddleware for M {
    fn name(&self) -> &str {
        DownloaderMiddleware::name(self)
    }
    fn process_request<'a>(&'a self, request: &'a mut Request) -> BoxFuture<'a, Action> {
        Box::pin(DownloaderMiddleware::process_request(self, request))
    }
    fn process_response<'a>(
        &'a self,
        request: &'a Request,
        response: Response,
    ) -> BoxFuture<'a, After> {
        Box::pin(DownloaderMiddleware::process_response(
            self, request, response,
        ))
    }
    fn counters(&self) -> Vec<(String, u64)> {
        DownloaderMiddleware::counters(self)
    }
}

/// A boxed downloader middleware, as kept in a stack.
pub type BoxedDownloaderMiddleware = Box<dyn DynDownloaderMiddleware>;
