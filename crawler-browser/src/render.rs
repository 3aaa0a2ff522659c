//! [`Rendering`]: the download handler. It wraps the crawl's downloader, leaves every
//! request to it, and renders the fetched pages that ask for it.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use crawler_core::{
    Download, Downloader, Failure, FailureKind, Fetched, HeaderValue, RenderOptions, Request,
    Response, SUBREQUEST_META, SubRequests,
};
use tokio::time::{Instant, timeout, timeout_at};

use crate::config::BrowserConfig;
use crate::memory::ProcessTreeMemory;
use crate::page::{self, Failed};
use crate::pool::Pool;

/// How long closing a tab may take before it is left to the browser.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a browser that failed a page has to show it is still alive.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// A downloader that renders pages in chromium: requests go to `inner` as before (robots
/// gate, HTTP, middlewares); a 2xx HTML page whose request asks for rendering
/// ([`Request::render`], or a host the [`BrowserConfig`] renders) is then loaded in a tab,
/// every request the page makes sent through the crawl (see [`SubRequests`]), and the
/// spider gets the rendered DOM as the response body.
pub struct Rendering<D> {
    inner: D,
    pool: Arc<Pool>,
    subs: OnceLock<SubRequests>,
}

impl<D> Rendering<D> {
    /// Render with `config` on top of `inner`. The browser starts with the first page to
    /// render.
    pub fn new(inner: D, config: BrowserConfig) -> Self {
        Self {
            inner,
            pool: Arc::new(Pool::new(config)),
            subs: OnceLock::new(),
        }
    }

    /// The downloader underneath.
    pub fn inner(&self) -> &D {
        &self.inner
    }

    /// The process id of the running browser, if one has started.
    pub async fn browser_pid(&self) -> Option<u32> {
        self.pool.pid().await
    }

    /// Browsers started to replace one that crashed or was killed.
    pub fn browser_restarts(&self) -> u64 {
        self.pool
            .restarts
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// A handle sharing this renderer's browser, for watching it (its process id, its
    /// restarts) while an engine owns the renderer.
    pub fn monitor(&self) -> Monitor {
        Monitor {
            pool: Arc::clone(&self.pool),
        }
    }
}

/// Watches a [`Rendering`]'s browser from outside the engine.
#[derive(Clone)]
pub struct Monitor {
    pool: Arc<Pool>,
}

impl Monitor {
    /// The process id of the running browser, if one has started.
    pub async fn browser_pid(&self) -> Option<u32> {
        self.pool.pid().await
    }

    /// Browsers started to replace one that crashed or was killed.
    pub fn browser_restarts(&self) -> u64 {
        self.pool
            .restarts
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The most fetched pages that were in the renderer at once, rendering in a tab or
    /// waiting for one, since it was made: under an engine, at most
    /// [`BrowserConfig::render_limit`] (the tabs and the queue in front of them).
    pub fn peak_pages(&self) -> usize {
        self.pool
            .peak_pages
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The memory of the running browser: its process and every process under it (the
    /// renderers of its tabs, the GPU and network services), if one is running and the
    /// system shows it (Linux's `/proc`).
    pub async fn browser_memory(&self) -> Option<ProcessTreeMemory> {
        ProcessTreeMemory::of(self.pool.pid().await?)
    }
}

impl<D: Downloader> Downloader for Rendering<D> {
    fn gate(&self, request: &Request) -> impl Future<Output = Option<Download>> + Send {
        self.inner.gate(request)
    }

    fn fetch(&self, request: &Request) -> impl Future<Output = Download> + Send {
        self.inner.fetch(request)
    }

    fn attach(&self, subrequests: SubRequests) {
        let _ = self.subs.set(subrequests.clone());
        self.inner.attach(subrequests);
    }

    fn renders(&self, request: &Request) -> bool {
        // A sub-request is a resource of a page being rendered, never a page of its own.
        !request.meta.contains_key(SUBREQUEST_META)
            && (RenderOptions::of(request).is_some() || self.pool.config().renders_host(request))
    }

    fn render_limit(&self) -> usize {
        self.pool.config().render_limit()
    }

    async fn render(&self, request: &Request, response: Response) -> Fetched {
        // Nothing to render: a body chromium would not show. A download would also never
        // end its navigation (chromiumoxide waits for the load event of a document that
        // never comes), holding the tab until the page's deadline: the spider gets the
        // body as fetched, as scrapy-playwright hands over a download.
        if !response.is_html() || is_download(&response) {
            return Fetched::Response(response);
        }
        let options = RenderOptions::of(request).unwrap_or_default();
        let deadline = Instant::now() + self.pool.config().page_timeout;
        // The tab is held for the whole render; pages beyond the tabs wait here (with the
        // page already fetched), not in the browser, and at most `queue` of them: the
        // engine keeps the next ones in the frontier (`render_limit`).
        let _in_render = self.pool.enter();
        let Ok(Ok(_tab)) = timeout_at(deadline, self.pool.tabs.acquire()).await else {
            return timed_out("no browser tab came free before the page's deadline");
        };
        let attempts = self.pool.config().crash_retries.saturating_add(1);
        let mut last = String::new();
        for attempt in 0..attempts {
            let browser = match timeout_at(deadline, self.pool.browser()).await {
                Ok(Ok(b)) => b,
                Ok(Err(e)) => {
                    return Fetched::Failed(Failure::new(FailureKind::Other, e.to_string()));
                }
                Err(_) => return timed_out("the browser did not start before the page's deadline"),
            };
            let tab = match timeout_at(deadline, browser.browser.new_page("about:blank")).await {
                Ok(Ok(tab)) => tab,
                Ok(Err(e)) => {
                    last = format!("cannot open a tab: {e}");
                    self.pool.discard(browser.generation).await;
                    continue;
                }
                Err(_) => return timed_out("no tab opened before the page's deadline"),
            };
            let subs = self.subs.get().cloned();
            let config = self.pool.config();
            let result = timeout_at(
                deadline,
                page::render(&tab, request, &response, &options, subs, config),
            )
            .await;
            // Closed whatever happened, so a failed page never stays open in the browser.
            let _ = timeout(CLOSE_TIMEOUT, tab.close()).await;
            match result {
                Ok(Ok(html)) => return Fetched::Response(rendered(request, &response, html)),
                Ok(Err(failed)) => {
                    // Whatever the page made of it (a wait or a script that failed), a
                    // browser that died under it is the cause: a new one, another try.
                    if alive(&browser).await {
                        return Fetched::Failed(match failed {
                            Failed::Page(failure) => failure,
                            // The browser is fine: the page itself broke the render (a
                            // navigation that was a download, an aborted load).
                            Failed::Browser(why) => {
                                Failure::new(FailureKind::Other, format!("render failed: {why}"))
                            }
                        });
                    }
                    let why = match failed {
                        Failed::Page(f) => f.message,
                        Failed::Browser(why) => why,
                    };
                    tracing::warn!(url = %request.url, attempt, "the browser died under the page: {why}");
                    last = why;
                    self.pool.discard(browser.generation).await;
                }
                Err(_) => {
                    if !alive(&browser).await {
                        self.pool.discard(browser.generation).await;
                    }
                    return timed_out("the render took longer than the page's deadline");
                }
            }
        }
        Fetched::Failed(Failure::new(
            FailureKind::Connection,
            format!("the browser died under the page {attempts} times: {last}"),
        ))
    }
}

/// Whether the browser would save `response` instead of showing it: a `Content-Disposition`
/// other than `inline` (RFC 6266: an unknown type is handled as `attachment`).
fn is_download(response: &Response) -> bool {
    response
        .headers()
        .get("content-disposition")
        .and_then(|v| v.to_str().ok())
        .map(|v| v.split(';').next().unwrap_or_default().trim())
        .is_some_and(|kind| !kind.is_empty() && !kind.eq_ignore_ascii_case("inline"))
}

/// Whether the browser still answers.
async fn alive(browser: &crate::pool::Instance) -> bool {
    browser.alive.load(std::sync::atomic::Ordering::Acquire)
        && matches!(
            timeout(PROBE_TIMEOUT, browser.browser.version()).await,
            Ok(Ok(_))
        )
}

fn timed_out(why: &str) -> Fetched {
    Fetched::Failed(Failure::new(FailureKind::Timeout, why))
}

/// The fetched page with the rendered DOM as its body.
fn rendered(request: &Request, fetched: &Response, html: String) -> Response {
    let mut headers = fetched.headers().clone();
    // The DOM comes out of the browser as UTF-8, whatever the page was served in.
    headers.insert(
        "content-type",
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    headers.remove("content-length");
    headers.remove("content-encoding");
    Response::new(
        request.clone(),
        fetched.url().clone(),
        fetched.status(),
        headers,
        crawler_core::Bytes::from(html),
    )
    .with_remote_addr(fetched.remote_addr())
}
