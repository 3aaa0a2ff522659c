//! Where a job's keys live: a small global part under the job's own hash tag, and the
//! rest in a fixed number of *shards*, each under a hash tag of its own, so that a Redis
//! Cluster spreads a crawl across its masters while no command or script ever touches keys
//! of two slots. A plain Redis holds every shard too: the same keys, the same scripts.
//!
//! | prefix                 | key        | what                                              |
//! |------------------------|------------|---------------------------------------------------|
//! | `crawler:{JOB}:`       | `epoch`    | the job's random identity (written once, by the first worker) |
//! |                        | `ready`    | set once every shard carries the epoch            |
//! |                        | `meta`     | HASH: `workers` (the last worker number), `shards` (the job's shard count) |
//! |                        | `stats`    | HASH: worker number -> its last saved stats (JSON) |
//! | `crawler:{JOB/N}:`     | `epoch`    | the job's epoch, a copy per shard                 |
//! |                        | `steps`    | HASH: worker token -> that worker's steps applied in this shard |
//! |                        | `gen`      | counter of the shard's queue and lease changes    |
//! |                        | `seen`     | SET of 16-byte fingerprints of the shard's hosts' requests |
//! |                        | `hosts`    | SET of the shard's hosts that may have queued work |
//! |                        | `q:HOST`   | ZSET: the host's queue (members sort in serving order) |
//! |                        | `b:HOST`   | HASH: the host's politeness state, version, skip flag, requests in flight |
//! |                        | `leases`   | ZSET: lease id -> expiry (ms), leases of the shard's hosts |
//! |                        | `lease`    | HASH: lease id -> `HOST \n member`                 |
//! |                        | `meta`     | HASH: `reclaimed` (expired leases returned to their queues) |
//!
//! A host belongs to one shard (a stable hash of its registrable domain, or of its name
//! when it has none: [`group_site`]), and everything a step does for a host (pop its queue,
//! book its send, record the lease, release it, reclaim it) is in that shard. The names of
//! one site share a shard, so a step can pace them as one limiter group (`lua`, "pooled
//! groups") without touching two slots. (Jobs created before sites shared a shard keep
//! hashing names: their `meta` has no `sites`, and their groups are not pooled.) The seen set is sharded the same way, by the host of the fingerprinted
//! request: a request's fingerprint is recorded in the same script, atomically, as the
//! request enters its host's queue, so a crash between the two can never leave a URL seen
//! but never queued. (Sharding the seen set by fingerprint alone would spread one huge
//! host's seen URLs over all masters, but that host's queue sits on one master anyway, and
//! the insert would need two slots.)
//!
//! `N` is not the bare shard number: each shard's tag is `JOB/N` with, if needed, a suffix
//! (`JOB/N.K`) chosen so that shard `N`'s slot lies in the `N`th of `SHARDS` equal slices of
//! the 16,384 cluster slots. A cluster made by `redis-cli --cluster create` gives each
//! master an equal contiguous range of slots, so the shards spread evenly over 1, 2, 3, 4,
//! 6, 8, 12 or 24 masters (randomly placed tags put 9 of 24 shards on one master of three
//! as often as not).

/// Shards of a new job. Fixed per job (recorded in its `meta` at creation, and read by every
/// worker that joins): 24 divides evenly over the usual cluster sizes, and a step touches
/// only the shards of the hosts it concerns, while a fleet-wide read (an idle worker's
/// poll) is one section per shard.
pub(crate) const SHARDS: usize = 24;

/// Cluster hash slots.
const SLOTS: u32 = 16_384;

/// The key prefixes of one job.
#[derive(Debug, Clone)]
pub(crate) struct Layout {
    /// `crawler:{JOB}:`: the epoch, the worker counter, the stats.
    pub(crate) global: String,
    /// `crawler:{JOB/N}:` per shard.
    pub(crate) shards: Vec<String>,
    /// Whether a host's shard is its site's ([`group_site`]), so that a site's names can be
    /// pooled; false for a job created before that.
    pub(crate) by_site: bool,
}

impl Layout {
    /// The layout of `job` with `shards` shards.
    pub(crate) fn new(job: &str, shards: usize) -> Self {
        let shards = shards.max(1);
        Self {
            global: format!("crawler:{{{job}}}:"),
            shards: (0..shards).map(|n| shard_prefix(job, n, shards)).collect(),
            by_site: true,
        }
    }

    /// The shard that holds `host`'s queue, politeness state, leases and seen URLs: its
    /// site's.
    pub(crate) fn shard_of(&self, host: &str) -> usize {
        let site = if self.by_site { group_site(host) } else { None };
        let key = site.as_deref().unwrap_or(host);
        (fnv1a(key.as_bytes()) % self.shards.len() as u64) as usize
    }

    /// The limiter group `host` is pooled with in this job: its site, when the job puts
    /// sites in one shard.
    pub(crate) fn group_of(&self, host: &str) -> Option<String> {
        if self.by_site { group_site(host) } else { None }
    }
}

/// The site of a slot key (`name` or `name:port`) for limiter groups in a fleet: its
/// registrable domain, as the frontier groups names. A name without one (an IP literal,
/// `localhost`, an intranet name) has none here: locally such a name is the site of its
/// address, which only a resolver knows, so a fleet paces it alone (its holds are still
/// shared by each worker's own groups).
pub(crate) fn group_site(host: &str) -> Option<String> {
    if host.starts_with('[') || host.contains("://") {
        return None;
    }
    let name = host.split(':').next().unwrap_or(host);
    if name.parse::<std::net::IpAddr>().is_ok() {
        return None;
    }
    psl::domain_str(name).map(str::to_owned)
}

/// Shard `n`'s prefix: its tag moved (by a numeric suffix) into the `n`th slice of slots.
fn shard_prefix(job: &str, n: usize, shards: usize) -> String {
    let width = SLOTS / shards as u32;
    let lo = n as u32 * width;
    let hi = if n + 1 == shards { SLOTS } else { lo + width };
    let in_slice = |p: &String| (lo..hi).contains(&u32::from(key_slot(p.as_bytes())));
    let plain = format!("crawler:{{{job}/{n}}}:");
    // About `shards` tries on average; a job name with braces has a tag that ignores the
    // suffix, so the search gives up and takes the plain prefix (correct, just not spread).
    std::iter::once(plain.clone())
        .chain((1..20_000).map(|k| format!("crawler:{{{job}/{n}.{k}}}:")))
        .find(in_slice)
        .unwrap_or(plain)
}

/// The cluster slot of a key, by Redis's rule: CRC16 (XMODEM) of the hash tag (the text
/// between the first `{` and the next `}`, when not empty) or else of the whole key, mod
/// 16,384.
pub(crate) fn key_slot(key: &[u8]) -> u16 {
    let tagged = key.iter().position(|&b| b == b'{').and_then(|open| {
        let rest = &key[open + 1..];
        let close = rest.iter().position(|&b| b == b'}')?;
        (close > 0).then(|| &rest[..close])
    });
    (crc16_xmodem(tagged.unwrap_or(key)) % SLOTS as u16) & 0x3fff
}

fn crc16_xmodem(data: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &b in data {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// FNV-1a, 64 bits: stable across processes and versions (unlike the standard library's
/// hasher), which every worker's choice of a host's shard depends on.
fn fnv1a(data: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in data {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_agree_with_redis() {
        // `CLUSTER KEYSLOT` of these keys on Redis 7.
        assert_eq!(key_slot(b"123456789"), 12739);
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"{a}x"), 15495);
        assert_eq!(key_slot(b"a"), 15495);
        assert_eq!(key_slot(b"zz"), 14415);
        // An empty tag is no tag: the whole key is hashed.
        assert_eq!(key_slot(b"{}foo"), key_slot(b"{}foo"));
        assert_ne!(key_slot(b"{}foo"), key_slot(b"foo"));
    }

    #[test]
    fn shards_spread_evenly_over_the_slots() {
        let l = Layout::new("books", SHARDS);
        let width = SLOTS / SHARDS as u32;
        for (n, p) in l.shards.iter().enumerate() {
            let slot = u32::from(key_slot(p.as_bytes()));
            assert_eq!(slot / width, n as u32, "{p}: slot {slot}");
            // Every key of the shard shares its slot.
            assert_eq!(
                key_slot(format!("{p}q:example.com").as_bytes()) as u32,
                slot
            );
        }
        assert_ne!(
            key_slot(l.global.as_bytes()),
            key_slot(l.shards[0].as_bytes())
        );
    }

    #[test]
    fn a_host_always_has_the_same_shard() {
        let l = Layout::new("j", SHARDS);
        assert_eq!(l.shard_of("example.com"), l.shard_of("example.com"));
        let used: std::collections::HashSet<usize> = (0..500)
            .map(|i| l.shard_of(&format!("h{i}.test")))
            .collect();
        assert_eq!(used.len(), SHARDS, "500 hosts use every shard");
        assert_eq!(Layout::new("j", 1).shard_of("x"), 0);
    }

    #[test]
    fn the_names_of_one_site_share_a_shard_and_names_without_a_site_are_their_own() {
        let l = Layout::new("j", SHARDS);
        assert_eq!(
            group_site("img.shop.example.com:8080").as_deref(),
            Some("example.com")
        );
        assert_eq!(group_site("a.shop.test").as_deref(), Some("shop.test"));
        for none in [
            "localhost:80",
            "127.0.0.1:8080",
            "[::1]:443",
            "http://a.test",
        ] {
            assert_eq!(group_site(none), None, "{none}");
        }
        let shard = l.shard_of("www.example.com");
        for name in ["api.example.com", "example.com:8443", "a.b.example.com"] {
            assert_eq!(l.shard_of(name), shard, "{name}");
        }
        // A job from before: names hash alone, and nothing is pooled.
        let old = Layout {
            by_site: false,
            ..Layout::new("j", SHARDS)
        };
        assert_eq!(old.group_of("www.example.com"), None);
        let spread: std::collections::HashSet<usize> = (0..100)
            .map(|i| old.shard_of(&format!("h{i}.example.com")))
            .collect();
        assert!(spread.len() > 1);
    }
}
