//! [`RedisRobots`]: the robots.txt files a fleet's workers fetched, shared through Redis
//! (see [`RobotsShare`]): one string per origin in the shard its name hashes to, expiring
//! with the TTL it was shared with.
//!
//! The value is `status truncated expires_ms` (the fleet's clock) on one line, then the
//! body as fetched.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crawler_core::{RobotsShare, SharedRobots};

use super::{Inner, lock};
use crate::error::Error;

/// The fleet's robots.txt files, handed to the downloader (crawler-http's
/// `HttpDownloader::with_robots_share`) by [`RedisStore::robots`](super::RedisStore::robots).
pub(super) struct RedisRobots {
    pub(super) inner: Arc<Mutex<Inner>>,
}

impl RedisRobots {
    /// The key of `origin`'s file.
    fn key(inner: &Inner, origin: &str) -> String {
        let shard = inner.layout.shard_of(origin);
        format!("{}robots:{origin}", inner.layout.shards[shard])
    }
}

impl RobotsShare for RedisRobots {
    fn get(&self, origin: &str) -> crawler_core::Result<Option<(SharedRobots, Duration)>> {
        let mut inner = lock(&self.inner);
        let key = Self::key(&inner, origin);
        let value: Option<Vec<u8>> = inner
            .link
            .query(redis::cmd("GET").arg(&key), "read a shared robots.txt")?;
        let Some(value) = value else {
            return Ok(None);
        };
        let Some((file, expires)) = decode(&value) else {
            let shown = inner.link.shown.clone();
            return Err(
                Error::redis_reply(&shown, format!("{key} is not a shared robots.txt")).into(),
            );
        };
        let left = expires - inner.now_ms();
        if left <= 0.0 {
            return Ok(None);
        }
        Ok(Some((file, Duration::from_secs_f64(left / 1_000.0))))
    }

    fn put(&self, origin: &str, robots: &SharedRobots, ttl: Duration) -> crawler_core::Result<()> {
        let mut inner = lock(&self.inner);
        let key = Self::key(&inner, origin);
        let ms = ttl.as_millis().clamp(1, u128::from(u64::MAX)) as u64;
        let expires = inner.now_ms() + ms as f64;
        let mut value = format!(
            "{} {} {expires:.0}\n",
            robots.status,
            u8::from(robots.truncated)
        )
        .into_bytes();
        value.extend_from_slice(&robots.body);
        inner.link.query::<()>(
            redis::cmd("SET").arg(&key).arg(value).arg("PX").arg(ms),
            "share a robots.txt",
        )?;
        Ok(())
    }
}

/// The file and its expiry (fleet ms) from a stored value, `None` if it is not one.
fn decode(value: &[u8]) -> Option<(SharedRobots, f64)> {
    let nl = value.iter().position(|&b| b == b'\n')?;
    let head = std::str::from_utf8(value.get(..nl)?).ok()?;
    let mut fields = head.split(' ');
    let status = fields.next()?.parse().ok()?;
    let truncated = fields.next()? == "1";
    let expires = fields.next()?.parse().ok()?;
    let body = value.get(nl + 1..)?.to_vec();
    Some((
        SharedRobots {
            status,
            body,
            truncated,
        },
        expires,
    ))
}

#[cfg(test)]
mod tests {
    use super::decode;

    #[test]
    fn a_stored_file_decodes_and_anything_else_does_not() {
        let (file, expires) =
            decode(b"200 0 1700000000000\nUser-agent: *\nDisallow: /x\n").unwrap();
        assert_eq!(file.status, 200);
        assert!(!file.truncated);
        assert_eq!(file.body, b"User-agent: *\nDisallow: /x\n");
        assert_eq!(expires, 1_700_000_000_000.0);
        assert!(decode(b"no header").is_none());
        assert!(decode(b"200 x\n").is_none());
    }
}
