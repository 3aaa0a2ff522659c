//! A Redis Cluster of a test's own: `2 * masters` `redis-server`s with cluster mode on, on
//! free loopback ports in a temporary directory, joined by `redis-cli --cluster create`
//! with one replica per master. Killed and waited for on drop. The store's cluster tests,
//! the facade's and the Redis benchmark use this one (by `#[path]`).

#![allow(dead_code)]

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A free TCP port on 127.0.0.1 whose cluster bus port (port + 10000) is free too.
fn free_cluster_port() -> u16 {
    for _ in 0..200 {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        if port < 55_000 && std::net::TcpListener::bind(("127.0.0.1", port + 10_000)).is_ok() {
            return port;
        }
    }
    panic!("no free port pair for a cluster node");
}

/// One command in RESP to `127.0.0.1:port`, its raw reply; `None` if nothing answers.
pub(crate) fn command_on(port: u16, args: &[&str]) -> Option<String> {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    let mut cmd = format!("*{}\r\n", args.len());
    for a in args {
        cmd.push_str(&format!("${}\r\n{a}\r\n", a.len()));
    }
    s.write_all(cmd.as_bytes()).ok()?;
    let mut out = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    // Read until the reply is complete enough for these tests: one read, then more while
    // the server keeps sending (large `CLUSTER NODES` or `INFO` replies).
    loop {
        let n = s.read(&mut buf).ok()?;
        out.extend_from_slice(&buf[..n]);
        if n < buf.len() {
            break;
        }
    }
    Some(String::from_utf8_lossy(&out).into_owned())
}

/// A field of an `INFO` or `CLUSTER INFO` reply.
pub(crate) fn info_field(reply: &str, field: &str) -> Option<String> {
    reply.lines().find_map(|l| {
        l.strip_prefix(field)
            .and_then(|r| r.strip_prefix(':'))
            .map(|v| v.trim().to_owned())
    })
}

struct Node {
    port: u16,
    child: Option<Child>,
}

/// A running cluster.
pub(crate) struct RedisCluster {
    nodes: Vec<Node>,
    masters: usize,
    dir: tempfile::TempDir,
}

impl RedisCluster {
    /// `masters` masters with one replica each, every slot covered, `cluster_state:ok` on
    /// every node. A master stays down for `node_timeout` before its replica takes over.
    pub(crate) fn start(masters: usize, node_timeout: Duration) -> Self {
        Self::start_with(masters, 1, node_timeout)
    }

    /// `masters` masters with `replicas` replicas each (at least three masters: what
    /// `redis-cli --cluster create` accepts).
    pub(crate) fn start_with(masters: usize, replicas: usize, node_timeout: Duration) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let mut nodes = Vec::new();
        for _ in 0..masters * (1 + replicas) {
            let port = free_cluster_port();
            let child = spawn(port, dir.path(), node_timeout);
            nodes.push(Node {
                port,
                child: Some(child),
            });
        }
        let c = Self {
            nodes,
            masters,
            dir,
        };
        // A node's first PONG: generous, because the whole test binary starts its servers,
        // chromium and crawls at once on a machine of two cores (10 s was seen to pass).
        for n in &c.nodes {
            wait_for(Duration::from_secs(30), || {
                command_on(n.port, &["PING"]).is_some_and(|r| r.starts_with("+PONG"))
            });
        }
        let addrs: Vec<String> = c
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let out = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addrs)
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .expect("redis-cli must be installed (it comes with redis-server)");
        assert!(
            out.status.success(),
            "redis-cli --cluster create failed: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        c.wait_ok(Duration::from_secs(20));
        // Every replica in sync with its master, or a failover finds none fit to take over.
        wait_for(Duration::from_secs(20), || {
            c.nodes.iter().all(|n| {
                let info = command_on(n.port, &["INFO", "replication"]).unwrap_or_default();
                match info_field(&info, "role").as_deref() {
                    Some("master") => true,
                    Some("slave") => {
                        info_field(&info, "master_link_status").as_deref() == Some("up")
                    }
                    _ => false,
                }
            })
        });
        c
    }

    /// Wait until every live node says `cluster_state:ok` and knows `masters` masters
    /// holding every slot.
    pub(crate) fn wait_ok(&self, within: Duration) {
        let want = self.masters;
        wait_for(within, || {
            self.live_ports().iter().all(|&p| {
                let info = command_on(p, &["CLUSTER", "INFO"]).unwrap_or_default();
                info_field(&info, "cluster_state").as_deref() == Some("ok")
                    && info_field(&info, "cluster_slots_ok").as_deref() == Some("16384")
            }) && self.masters().len() == want
        });
    }

    fn live_ports(&self) -> Vec<u16> {
        self.nodes
            .iter()
            .filter(|n| n.child.is_some())
            .map(|n| n.port)
            .collect()
    }

    /// The URL the store takes: every master and replica as a seed.
    pub(crate) fn url(&self) -> String {
        let seeds: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        format!("redis+cluster://{}", seeds.join(","))
    }

    /// The ports of the live masters that hold slots, as the cluster sees them now.
    pub(crate) fn masters(&self) -> Vec<u16> {
        let live = self.live_ports();
        let Some(&any) = live.first() else {
            return Vec::new();
        };
        let nodes = command_on(any, &["CLUSTER", "NODES"]).unwrap_or_default();
        let mut out: Vec<u16> = nodes
            .lines()
            .filter(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                f.get(2).is_some_and(|flags| {
                    flags.contains("master") && !flags.contains("fail") && f.len() > 8
                })
            })
            .filter_map(|l| {
                let addr = l.split_whitespace().nth(1)?;
                let port = addr.split('@').next()?.rsplit(':').next()?;
                port.parse().ok()
            })
            .filter(|p| live.contains(p))
            .collect();
        out.sort_unstable();
        out
    }

    /// The keys matching `pattern` on every live master.
    pub(crate) fn keys(&self, pattern: &str) -> Vec<(u16, String)> {
        self.masters()
            .into_iter()
            .flat_map(|p| {
                strings(&command_on(p, &["KEYS", pattern]).unwrap_or_default())
                    .into_iter()
                    .map(move |k| (p, k))
            })
            .collect()
    }

    /// Kill one node (SIGKILL: what it had not replicated is gone) and leave it down.
    pub(crate) fn kill(&mut self, port: u16) {
        if let Some(n) = self.nodes.iter_mut().find(|n| n.port == port)
            && let Some(mut c) = n.child.take()
        {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        for n in &mut self.nodes {
            if let Some(mut c) = n.child.take() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
        let _ = &self.dir;
    }
}

fn spawn(port: u16, dir: &Path, node_timeout: Duration) -> Child {
    let own = dir.join(port.to_string());
    std::fs::create_dir_all(&own).unwrap();
    Command::new("redis-server")
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--cluster-enabled", "yes"])
        .args(["--cluster-config-file", "nodes.conf"])
        .args([
            "--cluster-node-timeout",
            &node_timeout.as_millis().to_string(),
        ])
        .args(["--save", "", "--appendonly", "no"])
        // A replica's first sync starts at once (Redis waits 5 s by default for more
        // replicas to share it); until it has synced, it cannot take over.
        .args(["--repl-diskless-sync-delay", "0"])
        .arg("--dir")
        .arg(&own)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("redis-server must be installed (apt-get install redis-server)")
}

fn wait_for(within: Duration, mut ok: impl FnMut() -> bool) {
    let until = Instant::now() + within;
    while Instant::now() < until {
        if ok() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("the Redis cluster did not settle within {within:?}");
}

/// The bulk strings of a RESP array reply (`*N`, then `$len` and value lines).
pub(crate) fn strings(reply: &str) -> Vec<String> {
    if !reply.starts_with('*') {
        return Vec::new();
    }
    reply
        .lines()
        .skip(1)
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}
