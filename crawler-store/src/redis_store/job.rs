//! Which job, and which run of it, a worker joined: the job epoch, the worker's random
//! token (its lease ids) and its count of steps each shard applied, the three things that
//! let a worker notice that Redis (or one master of a cluster) forgot or rolled back (see
//! the script docs in `lua`).

use std::time::Duration;

use redis::Value;

use super::layout::{Layout, SHARDS};
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
    /// This worker's steps applied by each shard, as last read.
    pub(crate) steps: Vec<i64>,
    /// Steps (round trips) that found Redis had lost some of this worker's earlier steps,
    /// in one shard or several.
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

/// Wait (at most 10 s) for the worker creating the job to have written its epoch into
/// every shard.
fn wait_ready(link: &mut Link, global: &str) -> Result<(), Error> {
    let until = std::time::Instant::now() + Duration::from_secs(10);
    let mut cmd = redis::cmd("EXISTS");
    cmd.arg(format!("{global}ready"));
    loop {
        if link.query::<i64>(&cmd, "wait for the job's creation")? == 1 {
            return Ok(());
        }
        if std::time::Instant::now() >= until {
            return Err(Error::redis_reply(
                &link.shown,
                "the job's creation never finished (the worker creating it stopped halfway): \
                 run the job again",
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// 64 random bits as hex: from the OS-seeded thread generator, so two workers (or two
/// runs of one) draw the same value with probability 2^-64.
fn random_hex() -> String {
    format!("{:016x}", rand::random::<u64>())
}

impl Job {
    /// Join the job `name`, creating its epoch if it has none (a new job, or one Redis
    /// forgot: then the crawl starts from its start requests again). Returns the
    /// identity, the worker number and the job's key layout.
    ///
    /// The worker that creates the job writes its epoch into every shard, then marks the
    /// job ready; a worker that joins meanwhile waits for that (a shard without the epoch
    /// reads as lost state).
    pub(crate) fn join(
        link: &mut Link,
        name: &str,
        idle_ttl: Duration,
    ) -> Result<(Self, u32, Layout), Error> {
        let global = Layout::new(name, 1).global;
        let ttl = idle_ttl.as_millis().to_string();
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(JOIN)
            .arg(1)
            .arg(&global)
            .arg(&global)
            .arg(random_hex())
            .arg(&ttl)
            .arg(SHARDS);
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
        let shards = usize::try_from(int_at(&parts, 3))
            .ok()
            .filter(|n| (1..=4096).contains(n))
            .ok_or_else(|| {
                Error::redis_reply(&link.shown, "the job's shard count is unreadable")
            })?;
        let layout = Layout {
            by_site: int_at(&parts, 5) == 1,
            ..Layout::new(name, shards)
        };
        if created {
            for prefix in &layout.shards {
                let mut set = redis::cmd("SET");
                set.arg(format!("{prefix}epoch")).arg(&epoch);
                if idle_ttl > Duration::ZERO {
                    set.arg("PX").arg(&ttl);
                }
                link.query::<Value>(&set, "create the job's shards")?;
            }
            let mut ready = redis::cmd("SET");
            ready.arg(format!("{global}ready")).arg(1);
            if idle_ttl > Duration::ZERO {
                ready.arg("PX").arg(&ttl);
            }
            link.query::<Value>(&ready, "create the job")?;
        } else if int_at(&parts, 4) != 1 {
            wait_ready(link, &global)?;
        }
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
                steps: vec![0; shards],
                rollbacks: 0,
            },
            worker,
            layout,
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

    /// What was lost, if a call's reply says a shard's copy of the job's epoch is not the
    /// one joined: the index of that section in the call, and why.
    pub(crate) fn lost(&self, parts: &[Value]) -> Option<(usize, String)> {
        if parts.len() != 3 || text(parts.first()) != "lost" {
            return None;
        }
        let section = usize::try_from(int_at(parts, 1)).unwrap_or(1).max(1) - 1;
        let now = text(parts.get(2));
        Some((
            section,
            if now.is_empty() {
                format!(
                    "the job epoch {} this worker joined is gone (Redis restarted without \
                     persistence, failed over to a replica without the job, evicted the key, \
                     or the job's keys outlived redis_idle_ttl)",
                    self.epoch
                )
            } else {
                format!(
                    "the job epoch {} this worker joined was replaced by {now} (Redis forgot \
                     the job and another worker started it again)",
                    self.epoch
                )
            },
        ))
    }

    /// Record a section's count of this worker's steps in `shard` (before it, and with it);
    /// `true` if the shard had fewer than this worker last read: it lost some of them
    /// (rolled back).
    pub(crate) fn rolled_back(&mut self, shard: usize, had: i64, steps: i64) -> bool {
        let Some(last) = self.steps.get_mut(shard) else {
            return false;
        };
        let back = had < *last;
        *last = steps;
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
            steps: vec![10, 0],
            rollbacks: 0,
        }
    }

    #[test]
    fn fewer_steps_than_last_read_is_a_rollback() {
        let mut j = job();
        assert!(!j.rolled_back(0, 10, 11));
        // A retried step that had applied already: Redis is ahead, nothing lost.
        assert!(!j.rolled_back(0, 12, 13));
        assert!(
            j.rolled_back(0, 9, 10),
            "Redis forgot three of this worker's steps"
        );
        assert!(!j.rolled_back(0, 10, 11));
        assert!(j.rolled_back(0, 0, 1));
        // Shards count on their own.
        assert!(!j.rolled_back(1, 0, 1));
        assert!(!j.rolled_back(7, 0, 1), "no such shard");
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
            Value::Int(1),
            Value::BulkString(Vec::new()),
        ];
        assert!(
            j.lost(&gone)
                .is_some_and(|(s, d)| s == 0 && d.contains("e1 this worker joined is gone"))
        );
        let other = [
            Value::BulkString(b"lost".to_vec()),
            Value::Int(3),
            Value::BulkString(b"e2".to_vec()),
        ];
        assert!(
            j.lost(&other)
                .is_some_and(|(s, d)| s == 2 && d.contains("replaced by e2"))
        );
        assert!(j.lost(&[Value::Int(0), Value::Int(1)]).is_none());
    }
}
