//! Which job, and which run of it, a worker joined: the job epoch, the worker's random
//! token (its lease ids) and its count of steps Redis applied, the three things that let a
//! worker notice that Redis forgot or rolled back (see the script docs in `lua`).

use std::time::Duration;

use redis::Value;

use super::link::Link;
use super::lua::JOIN;
use super::reply::{int_at, text};
use crate::error::Error;

/// A worker's identity in one run of a job.
pub(crate) struct Job {
    /// The job name (for messages).
    pub(crate) name: String,
    /// The job's epoch as it was when this worker joined.
    pub(crate) epoch: String,
    /// This worker's random token: lease ids are `TOKEN:N`, and Redis counts the worker's
    /// steps under it.
    pub(crate) token: String,
    /// This worker's steps applied by Redis, as last read.
    pub(crate) steps: i64,
    /// Times Redis was found to have lost some of this worker's steps.
    pub(crate) rollbacks: u64,
}

/// Redis with a memory limit and an eviction policy may drop any of the job's keys (they all
/// have a time-to-live, so even `volatile-*` policies apply). Losing the epoch is noticed;
/// losing the seen set or a queue alone is not, so say so at once. Best effort: a server
/// that refuses `CONFIG` (managed services often do) is not asked twice.
fn warn_if_evicting(link: &mut Link) {
    let mut cmd = redis::cmd("CONFIG");
    cmd.arg("GET").arg("maxmemory*");
    let Ok(pairs) = link.query::<Vec<String>>(&cmd, "read the memory policy") else {
        return;
    };
    let get = |k: &str| {
        pairs
            .chunks(2)
            .find(|p| p.first().is_some_and(|n| n == k))
            .and_then(|p| p.get(1).cloned())
    };
    let limited = get("maxmemory").is_some_and(|m| m != "0");
    let policy = get("maxmemory-policy").unwrap_or_default();
    if limited && policy != "noeviction" {
        tracing::warn!(
            redis = %link.shown,
            policy,
            "Redis may evict the crawl's keys when full (maxmemory-policy is not noeviction): \
             an evicted seen set or queue loses URLs unnoticed; set noeviction"
        );
    }
}

/// 64 random bits as hex: from the OS-seeded thread generator, so two workers (or two
/// runs of one) draw the same value with probability 2^-64.
fn random_hex() -> String {
    format!("{:016x}", rand::random::<u64>())
}

impl Job {
    /// Join the job under `prefix`, creating its epoch if it has none (a new job, or one
    /// Redis forgot: then the crawl starts from its start requests again). Returns the
    /// identity and the worker number.
    pub(crate) fn join(
        link: &mut Link,
        prefix: &str,
        name: &str,
        idle_ttl: Duration,
    ) -> Result<(Self, u32), Error> {
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(JOIN)
            .arg(0)
            .arg(prefix)
            .arg(random_hex())
            .arg(idle_ttl.as_millis().to_string());
        let reply: Value = link.query(&cmd, "join the job")?;
        let Value::Array(parts) = reply else {
            return Err(Error::redis_reply(
                &link.shown,
                "joining did not answer an array",
            ));
        };
        let epoch = text(parts.first());
        if epoch.is_empty() {
            return Err(Error::redis_reply(&link.shown, "joining read no job epoch"));
        }
        let worker = u32::try_from(int_at(&parts, 1)).unwrap_or(u32::MAX);
        let created = int_at(&parts, 2) == 1;
        warn_if_evicting(link);
        tracing::info!(
            redis = %link.shown,
            job = name,
            worker,
            epoch,
            "{} the crawl",
            if created { "created" } else { "joined" }
        );
        Ok((
            Self {
                name: name.to_owned(),
                epoch,
                token: random_hex(),
                steps: 0,
                rollbacks: 0,
            },
            worker,
        ))
    }

    /// What tells this worker run's queue members apart from another's with the same
    /// priority and seq (seqs start again with every run). From the random token rather
    /// than the worker number, which a Redis rollback can hand out twice.
    pub(crate) fn tag(&self) -> u32 {
        u32::from_str_radix(self.token.get(8..).unwrap_or_default(), 16).unwrap_or(0)
    }

    /// The id in Redis of this worker's lease number `n`.
    pub(crate) fn lease_id(&self, n: u64) -> String {
        format!("{}:{n}", self.token)
    }

    /// What was lost, if a step's reply says the job's epoch is not the one joined.
    pub(crate) fn lost(&self, parts: &[Value]) -> Option<String> {
        if parts.len() != 2 || text(parts.first()) != "lost" {
            return None;
        }
        let now = text(parts.get(1));
        Some(if now.is_empty() {
            format!(
                "the job epoch {} this worker joined is gone (Redis restarted without \
                 persistence, failed over, evicted the key, or the job's keys outlived \
                 redis_idle_ttl)",
                self.epoch
            )
        } else {
            format!(
                "the job epoch {} this worker joined was replaced by {now} (Redis forgot the \
                 job and another worker started it again)",
                self.epoch
            )
        })
    }

    /// Record a step's count of this worker's steps (before it, and with it); `true` if
    /// Redis had fewer than this worker last read: it lost some of them (rolled back).
    pub(crate) fn rolled_back(&mut self, had: i64, steps: i64) -> bool {
        let back = had < self.steps;
        if back {
            self.rollbacks += 1;
        }
        self.steps = steps;
        back
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job() -> Job {
        Job {
            name: "j".into(),
            epoch: "e1".into(),
            token: random_hex(),
            steps: 10,
            rollbacks: 0,
        }
    }

    #[test]
    fn fewer_steps_than_last_read_is_a_rollback() {
        let mut j = job();
        assert!(!j.rolled_back(10, 11));
        // A retried step that had applied already: Redis is ahead, nothing lost.
        assert!(!j.rolled_back(12, 13));
        assert!(
            j.rolled_back(9, 10),
            "Redis forgot three of this worker's steps"
        );
        assert!(!j.rolled_back(10, 11));
        assert!(j.rolled_back(0, 1));
        assert_eq!(j.rollbacks, 2);
    }

    #[test]
    fn lease_ids_carry_a_random_token() {
        let (a, b) = (job(), job());
        assert_ne!(a.token, b.token);
        assert_ne!(a.lease_id(1), b.lease_id(1));
        assert_eq!(a.lease_id(7), format!("{}:7", a.token));
        assert_ne!(a.tag(), b.tag());
    }

    #[test]
    fn a_lost_reply_names_the_epoch() {
        let j = job();
        let gone = [
            Value::BulkString(b"lost".to_vec()),
            Value::BulkString(Vec::new()),
        ];
        assert!(
            j.lost(&gone)
                .is_some_and(|d| d.contains("e1 this worker joined is gone"))
        );
        let other = [
            Value::BulkString(b"lost".to_vec()),
            Value::BulkString(b"e2".to_vec()),
        ];
        assert!(j.lost(&other).is_some_and(|d| d.contains("replaced by e2")));
        assert!(j.lost(&[Value::Int(0), Value::Int(1)]).is_none());
    }
}
