//! Fetching one sitemap: a bounded download (bytes and time) handed to the parser on a
//! blocking thread.

use crawler_core::Url;

use super::{SitemapError, SitemapErrorKind, SitemapLimits, SitemapParse, parse_sitemap};
use crate::error_chain::error_chain;

/// Fetch one sitemap with `client` and parse it: non-2xx statuses and network failures become
/// [`SitemapParse::error`]; the download is cut after [`SitemapLimits::max_bytes`] and limited
/// to [`SitemapLimits::fetch_timeout`]. Parsing runs on a blocking thread so a 50 MB file does
/// not stall the async runtime.
///
/// The request goes straight to the server: robots.txt and the host's politeness slot are the
/// caller's business (the engine should route sitemap requests through the scheduler).
pub async fn fetch_sitemap(
    client: &reqwest::Client,
    url: &Url,
    limits: &SitemapLimits,
) -> SitemapParse {
    let source = url.as_str();
    let body = match tokio::time::timeout(limits.fetch_timeout, download(client, url, limits)).await
    {
        Ok(Ok(body)) => body,
        Ok(Err(kind)) => return SitemapParse::failed(source, kind),
        Err(_) => {
            let message = format!("no complete response within {:?}", limits.fetch_timeout);
            return SitemapParse::failed(source, SitemapErrorKind::Fetch { message });
        }
    };
    let (owned_url, owned_limits) = (source.to_owned(), limits.clone());
    let truncated = body.len() as u64 > limits.max_bytes;
    let parsed =
        tokio::task::spawn_blocking(move || parse_sitemap(&owned_url, &body, &owned_limits)).await;
    match parsed {
        Ok(mut p) => {
            // A download cut at the cap is too large even if the cut gzip reads as corrupt.
            if truncated && p.error.as_ref().is_none_or(|e| e.kind != too_large(limits)) {
                p.error = Some(SitemapError {
                    url: source.to_owned(),
                    kind: too_large(limits),
                });
            }
            p
        }
        Err(e) => SitemapParse::failed(
            source,
            SitemapErrorKind::Fetch {
                message: format!("parser task failed: {e}"),
            },
        ),
    }
}

fn too_large(limits: &SitemapLimits) -> SitemapErrorKind {
    SitemapErrorKind::TooLarge {
        limit: limits.max_bytes,
    }
}

/// The body, at most `max_bytes + 1` bytes (the extra byte tells the parser the file was cut).
async fn download(
    client: &reqwest::Client,
    url: &Url,
    limits: &SitemapLimits,
) -> Result<Vec<u8>, SitemapErrorKind> {
    let fetch_err = |e: reqwest::Error| SitemapErrorKind::Fetch {
        message: error_chain(&e),
    };
    let mut resp = client.get(url.clone()).send().await.map_err(fetch_err)?;
    let status = resp.status().as_u16();
    if !(200..300).contains(&status) {
        return Err(SitemapErrorKind::Status { status });
    }
    let cap = usize::try_from(limits.max_bytes.saturating_add(1)).unwrap_or(usize::MAX);
    let mut body = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(fetch_err)? {
        let room = cap.saturating_sub(body.len());
        body.extend_from_slice(chunk.get(..chunk.len().min(room)).unwrap_or_default());
        if body.len() >= cap {
            break;
        }
    }
    Ok(body)
}
