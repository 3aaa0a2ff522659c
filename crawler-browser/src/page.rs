//! One page in one tab: every request the page makes is paused (the DevTools `Fetch`
//! domain) and answered by us: the document with the body the crawl already fetched, a
//! blocked resource type with an error, anything else with the answer of a sub-request the
//! engine sent through its host's robots.txt and slot. Then the render options run, each
//! wait bounded by the caller's deadline.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use chromiumoxide::Page;
use chromiumoxide::cdp::browser_protocol::fetch::{
    self, ContinueRequestParams, EventRequestPaused, FailRequestParams, FulfillRequestParams,
    HeaderEntry,
};
use chromiumoxide::cdp::browser_protocol::network::{ErrorReason, ResourceType};
use chromiumoxide::page::ScreenshotParams;
use crawler_core::{
    Download, Failure, FailureKind, Fetched, RenderOptions, Request, Response, SubRequests,
};
use futures_util::StreamExt;
use tokio::sync::Mutex;
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;

use crate::config::BrowserConfig;

/// How long the network must be quiet to count as idle.
const IDLE_FOR: Duration = Duration::from_millis(500);
/// How often a condition in the page is polled.
const POLL: Duration = Duration::from_millis(50);
/// The share of the page's deadline the network-idle wait may take: the rest is for what
/// follows it (a wait, a screenshot, taking the DOM), so a page that never goes quiet is
/// still taken.
const IDLE_SHARE_OF_DEADLINE: f64 = 0.5;
/// Sub-requests get a priority above any page's in their host's queue: the page that
/// waits for them is already paid for, and holds a tab until they are answered.
const SUBREQUEST_PRIORITY: i32 = 1_000_000;
/// Response headers that describe the transfer rather than the body we hand over (the
/// body is already decoded and complete).
const TRANSFER_HEADERS: &[&str] = &[
    "content-encoding",
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
];

/// Why a render failed.
pub(crate) enum Failed {
    /// The browser went away under the page: worth a new browser and another try.
    Browser(String),
    /// The page failed on its own terms (a script error, a screenshot that cannot be
    /// written): another try would fail the same way.
    Page(Failure),
}

/// What the tab's request handler shares.
struct Shared {
    page: Page,
    document_url: String,
    document: Answer,
    document_served: AtomicBool,
    subs: Option<SubRequests>,
    config: BrowserConfig,
    /// The page's own request: its depth, and whether it was served from a private address
    /// (which lets its sub-requests reach one).
    parent: Request,
    from_private: bool,
    /// Sub-requests in flight, and when the last one started or ended.
    network: Mutex<(usize, Instant)>,
}

/// Aborts the tab's request handler when the render ends, however it ends.
struct AbortOnDrop(JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Render `document` (the fetched page of `request`) in `page` with `options`: the
/// rendered DOM as HTML.
pub(crate) async fn render(
    page: &Page,
    request: &Request,
    document: &Response,
    options: &RenderOptions,
    subs: Option<SubRequests>,
    config: &BrowserConfig,
) -> Result<String, Failed> {
    let events = page
        .event_listener::<EventRequestPaused>()
        .await
        .map_err(browser)?;
    let mut document_url = document.url().clone();
    document_url.set_fragment(None);
    let shared = Arc::new(Shared {
        page: page.clone(),
        document_url: document_url.to_string(),
        document: Answer::of(document),
        document_served: AtomicBool::new(false),
        subs,
        config: config.clone(),
        parent: request.clone(),
        from_private: document.served_from_private(),
        network: Mutex::new((0, Instant::now())),
    });
    let handler = {
        let shared = Arc::clone(&shared);
        AbortOnDrop(tokio::spawn(async move {
            let mut events = events;
            let mut answering = JoinSet::new();
            loop {
                tokio::select! {
                    event = events.next() => match event {
                        Some(event) => {
                            answering.spawn(answer(Arc::clone(&shared), event));
                        }
                        None => break,
                    },
                    Some(_) = answering.join_next(), if !answering.is_empty() => {}
                }
            }
        }))
    };
    // Every request of the page pauses from here on, the document's included.
    page.execute(fetch::EnableParams {
        patterns: None,
        handle_auth_requests: None,
    })
    .await
    .map_err(browser)?;
    page.goto(shared.document_url.as_str())
        .await
        .map_err(browser)?;

    // What the page shows first (its data arrived), then what the spider does to it
    // (a click, a scroll), then what that brings in.
    if let Some(selector) = &options.wait_for {
        wait_for(page, selector).await?;
    }
    if let Some(script) = &options.script {
        page.evaluate(script.as_str())
            .await
            .map_err(|e| page_failed(format!("the render script failed: {e}")))?;
    }
    for _ in 0..options.scroll {
        let before = height(page).await?;
        page.evaluate("window.scrollTo(0, document.documentElement.scrollHeight)")
            .await
            .map_err(browser)?;
        // What the scroll asked for (the next items) arrives over the network.
        network_idle(&shared).await;
        if height(page).await? <= before {
            break;
        }
    }
    if options.waits_for_network() {
        // A page that never goes quiet (a beacon, a long poll) is taken anyway, at half its
        // deadline: its DOM then, with a warning, rather than a failed page.
        let bound = config.page_timeout.mul_f64(IDLE_SHARE_OF_DEADLINE);
        let _ = tokio::time::timeout(bound, network_idle(&shared)).await;
    }
    if let Some(wait) = options.wait {
        tokio::time::sleep(wait).await;
    }
    if let Some(path) = &options.screenshot {
        let png = page
            .screenshot(ScreenshotParams::builder().full_page(true).build())
            .await
            .map_err(browser)?;
        std::fs::write(path, png)
            .map_err(|e| page_failed(format!("cannot write the screenshot {path}: {e}")))?;
    }
    let html = page.content().await.map_err(browser)?;
    let (pending, _) = *shared.network.lock().await;
    if pending > 0 {
        tracing::warn!(
            url = %request.url,
            pending,
            "rendered page taken with sub-requests still in flight: what they bring is not \
             in it (wait for it with RenderOptions::wait_for or the default network idle)"
        );
        if let Some(subs) = &shared.subs {
            subs.count_pending_at_render(pending as u64);
        }
    }
    drop(handler);
    Ok(html)
}

fn browser(e: impl std::fmt::Display) -> Failed {
    Failed::Browser(e.to_string())
}

fn page_failed(message: String) -> Failed {
    Failed::Page(Failure::new(FailureKind::Other, message))
}

async fn height(page: &Page) -> Result<u64, Failed> {
    page.evaluate("document.documentElement.scrollHeight")
        .await
        .map_err(browser)?
        .into_value::<u64>()
        .map_err(browser)
}

/// Until an element matches `selector` (the caller's deadline bounds it).
async fn wait_for(page: &Page, selector: &str) -> Result<(), Failed> {
    // A JSON string is a valid JavaScript string literal: the selector cannot break out.
    let quoted = serde_json::to_string(selector).map_err(browser)?;
    let probe = format!("document.querySelector({quoted}) !== null");
    loop {
        let found = page
            .evaluate(probe.as_str())
            .await
            .map_err(|e| page_failed(format!("cannot wait for {selector}: {e}")))?
            .into_value::<bool>()
            .unwrap_or(false);
        if found {
            return Ok(());
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Until no sub-request has been in flight for [`IDLE_FOR`].
async fn network_idle(shared: &Shared) {
    loop {
        let (in_flight, since) = *shared.network.lock().await;
        if in_flight == 0 && since.elapsed() >= IDLE_FOR {
            return;
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Answer one paused request of the page.
async fn answer(shared: Arc<Shared>, event: Arc<EventRequestPaused>) {
    let id = event.request_id.clone();
    let url = &event.request.url;
    let kind = &event.resource_type;
    let reply = if *kind == ResourceType::Document
        && *url == shared.document_url
        && !shared.document_served.swap(true, Ordering::AcqRel)
    {
        // The page itself was fetched by the crawl (through its slot) before the render.
        fulfil(id, &shared.document)
    } else if shared.config.blocks(kind.as_ref()) || is_favicon(url) {
        if let Some(subs) = &shared.subs {
            subs.count_blocked();
        }
        tracing::trace!(%url, kind = kind.as_ref(), "blocked");
        Reply::Fail(FailRequestParams::new(id, ErrorReason::BlockedByClient))
    } else if !(url.starts_with("http://") || url.starts_with("https://")) {
        // data:, blob: and the like are made inside the browser, not sent anywhere.
        Reply::Continue(ContinueRequestParams::new(id))
    } else {
        sub_request(&shared, id, &event).await
    };
    let sent = match reply {
        Reply::Fulfil(p) => shared.page.execute(p).await.map(drop),
        Reply::Fail(p) => shared.page.execute(p).await.map(drop),
        Reply::Continue(p) => shared.page.execute(p).await.map(drop),
    };
    if let Err(e) = sent {
        // The page may have been closed or navigated away meanwhile.
        tracing::debug!(%url, "could not answer the browser's request: {e}");
    }
}

/// A site's icon, which the browser asks for on its own for every page: the spider never
/// sees it, so it is refused without a request, as blocked resource types are.
fn is_favicon(url: &str) -> bool {
    url::Url::parse(url).is_ok_and(|u| u.path() == "/favicon.ico")
}

enum Reply {
    Fulfil(FulfillRequestParams),
    Fail(FailRequestParams),
    Continue(ContinueRequestParams),
}

/// Send the paused request through the crawl and turn its answer into the browser's.
async fn sub_request(shared: &Shared, id: fetch::RequestId, event: &EventRequestPaused) -> Reply {
    let fail = |reason| Reply::Fail(FailRequestParams::new(id.clone(), reason));
    let Some(subs) = &shared.subs else {
        // Outside a crawl there is no slot to send it through: refused, never sent around it.
        tracing::warn!(url = %event.request.url, "sub-request refused: the renderer is not attached to a crawl");
        return fail(ErrorReason::BlockedByClient);
    };
    let Some(request) = to_request(shared, event) else {
        return fail(ErrorReason::Failed);
    };
    {
        let mut net = shared.network.lock().await;
        *net = (net.0 + 1, Instant::now());
    }
    let Download { outcome, .. } = subs.fetch(request).await;
    {
        let mut net = shared.network.lock().await;
        *net = (net.0.saturating_sub(1), Instant::now());
    }
    match outcome {
        Fetched::Response(response) => fulfil(id, &Answer::of(&response)),
        Fetched::Disallowed => fail(ErrorReason::BlockedByClient),
        Fetched::Failed(f) => fail(match f.kind {
            FailureKind::Timeout => ErrorReason::TimedOut,
            FailureKind::Dns => ErrorReason::NameNotResolved,
            FailureKind::Connection => ErrorReason::ConnectionFailed,
            FailureKind::Forbidden | FailureKind::HostSkipped => ErrorReason::BlockedByClient,
            _ => ErrorReason::Failed,
        }),
        // The engine settles these before it answers; nothing else is expected here.
        _ => fail(ErrorReason::Failed),
    }
}

/// The crawl's request for a paused browser request.
fn to_request(shared: &Shared, event: &EventRequestPaused) -> Option<Request> {
    let mut text = event.request.url.clone();
    if let Some(fragment) = &event.request.url_fragment {
        text.push_str(fragment);
    }
    let mut request = Request::get(&text).ok()?;
    request.method = event.request.method.to_ascii_uppercase();
    if let Some(headers) = event.request.headers.inner().as_object() {
        for (name, value) in headers {
            // Our client speaks its own transfer: its encodings (a `zstd` body it cannot
            // decode), its connection handling, its lengths; and the crawl names itself
            // with its own User-Agent, the one robots.txt was read for.
            let lower = name.to_ascii_lowercase();
            if matches!(
                lower.as_str(),
                "accept-encoding" | "connection" | "content-length" | "host" | "user-agent"
            ) {
                continue;
            }
            if let Some(v) = value.as_str() {
                request.headers.push((name.clone(), v.to_owned()));
            }
        }
    }
    if let Some(entries) = &event.request.post_data_entries {
        let mut body = Vec::new();
        for entry in entries {
            if let Some(bytes) = &entry.bytes {
                let text: &str = bytes.as_ref();
                body.extend(BASE64.decode(text).ok()?);
            }
        }
        request.body = Some(body);
    }
    request.depth = shared.parent.depth;
    request.priority = SUBREQUEST_PRIORITY;
    crawler_core::address::mark_from_private(&mut request.meta, shared.from_private);
    Some(request)
}

/// What the browser is answered with: a response's status, headers and decoded body.
struct Answer {
    status: u16,
    headers: crawler_core::HeaderMap,
    body: crawler_core::Bytes,
}

impl Answer {
    fn of(response: &Response) -> Self {
        Self {
            status: response.status(),
            headers: response.headers().clone(),
            // A cheap reference-counted copy.
            body: response.body().clone(),
        }
    }
}

/// Fulfil a paused request with an answer.
fn fulfil(id: fetch::RequestId, response: &Answer) -> Reply {
    let headers: Vec<HeaderEntry> = response
        .headers
        .iter()
        .filter(|(name, _)| !TRANSFER_HEADERS.contains(&name.as_str()))
        .map(|(name, value)| {
            HeaderEntry::new(name.as_str(), String::from_utf8_lossy(value.as_bytes()))
        })
        .collect();
    let mut params = FulfillRequestParams::new(id, i64::from(response.status));
    params.response_headers = Some(headers);
    params.body = Some(BASE64.encode(&response.body).into());
    Reply::Fulfil(params)
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_an_origins_icon_is_a_favicon() {
        assert!(super::is_favicon("http://127.0.0.1:8080/favicon.ico"));
        assert!(super::is_favicon("https://example.com/favicon.ico?v=2"));
        assert!(!super::is_favicon("https://example.com/img/favicon.ico"));
        assert!(!super::is_favicon("https://example.com/favicon.ico.js"));
        assert!(!super::is_favicon("not a url"));
    }
}
