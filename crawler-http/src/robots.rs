//! robots.txt: fetched once per origin, cached, and consulted before every request.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crawler_core::Url;
use texting_robots::Robot;
use tokio::sync::OnceCell;
use tokio::time::Instant;

/// robots.txt files larger than this are cut here (Google's limit is 500 KiB; RFC 9309 asks
/// for at least 500 KiB to be parsed).
pub const ROBOTS_MAX_BYTES: usize = 500 * 1024;
/// How long a fetched robots.txt is trusted.
const TTL: Duration = Duration::from_secs(24 * 3600);
/// How soon an unreachable robots.txt (5xx, network error) is tried again; until then the
/// origin is treated as fully disallowed, as RFC 9309 asks.
const RETRY_UNREACHABLE: Duration = Duration::from_secs(60);

/// The verdict for one origin.
#[derive(Debug)]
pub struct RobotsRules {
    rules: Rules,
    expires: Instant,
}

#[derive(Debug)]
enum Rules {
    AllowAll,
    DisallowAll,
    Parsed(Box<Robot>),
}

impl RobotsRules {
    /// Whether `url` may be fetched.
    pub fn allowed(&self, url: &Url) -> bool {
        match &self.rules {
            Rules::AllowAll => true,
            Rules::DisallowAll => false,
            Rules::Parsed(r) => r.allowed(url.as_str()),
        }
    }

    /// The Crawl-delay of the matching group, if any.
    pub fn crawl_delay(&self) -> Option<Duration> {
        match &self.rules {
            Rules::Parsed(r) => r
                .delay
                .filter(|d| d.is_finite() && *d > 0.0)
                .map(|d| Duration::from_secs_f32(d.min(86_400.0))),
            _ => None,
        }
    }

    /// Sitemap URLs listed in the file.
    pub fn sitemaps(&self) -> &[String] {
        match &self.rules {
            Rules::Parsed(r) => &r.sitemaps,
            _ => &[],
        }
    }
}

/// The product token robots.txt groups are matched against: the User-Agent up to the first
/// `/`, space or `(` (`mybot/1.0 (+https://…)` matches `User-agent: mybot`).
pub fn product_token(user_agent: &str) -> &str {
    let end = user_agent.find(['/', ' ', '(']).unwrap_or(user_agent.len());
    user_agent[..end].trim()
}

type Cell = Arc<OnceCell<Arc<RobotsRules>>>;

/// A per-origin cache of robots.txt verdicts.
pub(crate) struct RobotsCache {
    client: reqwest::Client,
    agent: String,
    origins: Mutex<HashMap<String, Cell>>,
}

/// The result of a robots check.
pub(crate) struct Check {
    pub allowed: bool,
    pub crawl_delay: Option<Duration>,
    /// Whether this check sent a request for robots.txt.
    pub fetched: bool,
}

impl RobotsCache {
    pub(crate) fn new(client: reqwest::Client, user_agent: &str) -> Self {
        Self {
            client,
            agent: product_token(user_agent).to_owned(),
            origins: Mutex::default(),
        }
    }

    /// Check `url`, fetching its origin's robots.txt first if it is not cached. Concurrent
    /// checks for one origin share a single fetch.
    pub(crate) async fn check(&self, url: &Url) -> Check {
        let origin = url.origin().ascii_serialization();
        let cell = {
            let mut map = self.origins.lock().unwrap_or_else(|p| p.into_inner());
            let cell = map.entry(origin.clone()).or_default();
            if cell.get().is_some_and(|r| r.expires <= Instant::now()) {
                *cell = Cell::default();
            }
            Arc::clone(cell)
        };
        let mut fetched = false;
        let rules = cell
            .get_or_init(|| {
                fetched = true;
                self.fetch(origin)
            })
            .await;
        Check {
            allowed: rules.allowed(url),
            crawl_delay: rules.crawl_delay(),
            fetched,
        }
    }

    async fn fetch(&self, origin: String) -> Arc<RobotsRules> {
        let robots_url = format!("{origin}/robots.txt");
        let now = Instant::now();
        let (rules, ttl) = match self.download(&robots_url).await {
            Ok((status, body)) if (200..300).contains(&status) => {
                match Robot::new(&self.agent, &body) {
                    Ok(robot) => (Rules::Parsed(Box::new(robot)), TTL),
                    Err(e) => {
                        tracing::warn!(
                            url = robots_url,
                            "unreadable robots.txt, allowing all: {e}"
                        );
                        (Rules::AllowAll, TTL)
                    }
                }
            }
            // 429 says "come back later", like a 5xx: nothing may be fetched until it is read.
            Ok((429, _)) | Ok((500..=599, _)) => (Rules::DisallowAll, RETRY_UNREACHABLE),
            // Any other 4xx (and odd statuses): no robots.txt, so everything is allowed.
            Ok((_, _)) => (Rules::AllowAll, TTL),
            Err(e) => {
                tracing::warn!(
                    url = robots_url,
                    "robots.txt unreachable, disallowing for now: {e}"
                );
                (Rules::DisallowAll, RETRY_UNREACHABLE)
            }
        };
        Arc::new(RobotsRules {
            rules,
            expires: now + ttl,
        })
    }

    async fn download(&self, url: &str) -> Result<(u16, Vec<u8>), reqwest::Error> {
        let mut resp = self.client.get(url).send().await?;
        let status = resp.status().as_u16();
        let mut body = Vec::new();
        while let Some(chunk) = resp.chunk().await? {
            let room = ROBOTS_MAX_BYTES - body.len();
            body.extend_from_slice(&chunk[..chunk.len().min(room)]);
            if body.len() >= ROBOTS_MAX_BYTES {
                tracing::warn!(
                    url,
                    "robots.txt larger than {ROBOTS_MAX_BYTES} bytes; reading the first part only"
                );
                break;
            }
        }
        Ok((status, body))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn product_tokens() {
        assert_eq!(product_token("crawler/0.1 (+https://x)"), "crawler");
        assert_eq!(product_token("MyBot"), "MyBot");
        assert_eq!(product_token("Some Bot 2"), "Some");
    }

    #[test]
    fn parsed_rules_allow_disallow_and_delay() {
        let robot = Robot::new(
            "crawler",
            b"User-agent: *\nDisallow: /private/\nCrawl-delay: 2\nSitemap: http://h/s.xml\n",
        )
        .unwrap();
        let rules = RobotsRules {
            rules: Rules::Parsed(Box::new(robot)),
            expires: Instant::now(),
        };
        assert!(rules.allowed(&Url::parse("http://h/public").unwrap()));
        assert!(!rules.allowed(&Url::parse("http://h/private/x").unwrap()));
        assert_eq!(rules.crawl_delay(), Some(Duration::from_secs(2)));
        assert_eq!(rules.sitemaps(), ["http://h/s.xml"]);
    }
}
