//! The one-off report behind `crawler robots URL`: one fetch, the verdict for one URL, and
//! the group and rule that decided it.

use std::time::Duration;

use crawler_core::Url;

use super::fetch::{retrieve, verdict};
use super::{Access, RobotsOptions, RobotsStatus, product_token};
use crate::error::Error;

/// Everything robots.txt says about one URL for one agent (what `crawler robots URL --agent A`
/// prints).
#[derive(Debug, Clone, PartialEq)]
pub struct RobotsReport {
    /// The robots.txt URL of the page's origin.
    pub robots_url: String,
    /// The product token groups were matched against.
    pub agent: String,
    /// How the fetch went (and so which default applies).
    pub status: RobotsStatus,
    /// Whether the URL may be fetched.
    pub allowed: bool,
    /// The user-agent group whose rules apply (`"*"` or the agent), if the file has one.
    pub group: Option<String>,
    /// The deciding rule as written (`Disallow: /private/`), if one matched.
    pub matched_rule: Option<String>,
    /// The group's Crawl-delay.
    pub crawl_delay: Option<Duration>,
    /// The `Sitemap:` lines, resolved against the robots.txt URL (unparsable ones left out).
    pub sitemaps: Vec<String>,
    /// Whether the file was larger than [`ROBOTS_MAX_BYTES`](super::ROBOTS_MAX_BYTES) and cut.
    pub truncated: bool,
}

/// Fetch `url`'s robots.txt with `client` and evaluate it for `agent` (a full User-Agent or
/// just its product token), with default [`RobotsOptions`]. Redirects the client hands back
/// are followed up to [`ROBOTS_MAX_REDIRECTS`](super::ROBOTS_MAX_REDIRECTS);
/// [`robots_client`] builds a suitable client.
pub async fn fetch_robots(client: &reqwest::Client, url: &Url, agent: &str) -> RobotsReport {
    let options = RobotsOptions::default();
    let token = product_token(agent).to_owned();
    let robots_url = format!("{}/robots.txt", url.origin().ascii_serialization());
    let got = retrieve(client, &robots_url, options.fetch_timeout, None, None).await;
    let (rules, truncated) = verdict(&robots_url, got, &token, &options);
    // The explanation comes from the very match that decides.
    let (allowed, group, matched_rule) = match &rules.access {
        Access::Parsed(file) => {
            let decision = file.decide(url);
            let rule = decision.rule.map(str::to_owned);
            (decision.allowed, file.group.clone(), rule)
        }
        _ => (rules.allowed(url), None, None),
    };
    RobotsReport {
        robots_url,
        agent: token,
        status: rules.status.clone(),
        allowed,
        group,
        matched_rule,
        crawl_delay: rules.crawl_delay(),
        sitemaps: rules.sitemaps().to_vec(),
        truncated,
    }
}

/// A client for [`fetch_robots`]: the given User-Agent and connect timeout, and no automatic
/// redirects (robots.txt redirects are followed, counted and checked by [`fetch_robots`]).
pub fn robots_client(
    user_agent: &str,
    connect_timeout: Duration,
) -> Result<reqwest::Client, Error> {
    // A second install is a harmless no-op; see HttpDownloader::new.
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .user_agent(user_agent)
        .connect_timeout(connect_timeout)
        .redirect(reqwest::redirect::Policy::none())
        .gzip(true)
        .brotli(true)
        .deflate(true)
        .zstd(true)
        .build()
        .map_err(|e| Error::new("cannot build the HTTP client", e))
}
