//! A `redis-server` of a test's own: a free loopback port, a temporary directory, no
//! automatic snapshots (only an explicit `SAVE`), and on request an fsync-always AOF. The
//! store's Redis tests, the facade's fleet tests and the Redis benchmark all use this one
//! (by `#[path]`); each uses part of it.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A free TCP port on 127.0.0.1 (free when asked; the caller binds it soon after).
pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A running `redis-server`, killed and waited for on drop.
pub(crate) struct Redis {
    child: Child,
    pub port: u16,
    dir: tempfile::TempDir,
    appendonly: bool,
}

impl Redis {
    /// A server without persistence: a restart forgets everything but an explicit `SAVE`.
    pub(crate) fn start() -> Self {
        Self::start_with(false)
    }

    /// A server that also keeps an fsync-always append-only file, so a restart (SIGTERM, or
    /// a crash after the write) keeps every acknowledged write.
    pub(crate) fn start_with_aof() -> Self {
        Self::start_with(true)
    }

    fn start_with(appendonly: bool) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let child = Self::spawn(port, dir.path(), appendonly);
        let r = Self {
            child,
            port,
            dir,
            appendonly,
        };
        r.wait_ready();
        r
    }

    fn spawn(port: u16, dir: &Path, appendonly: bool) -> Child {
        Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", ""])
            .args(["--appendonly", if appendonly { "yes" } else { "no" }])
            .args(["--appendfsync", "always"])
            .arg("--dir")
            .arg(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server must be installed (apt-get install redis-server)")
    }

    fn wait_ready(&self) {
        for _ in 0..250 {
            if self
                .command(&["PING"])
                .is_some_and(|r| r.starts_with("+PONG"))
            {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("redis-server did not come up on port {}", self.port);
    }

    pub(crate) fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// One command in RESP (the tests do not depend on a Redis client), its raw reply;
    /// `None` if the server is not there.
    pub(crate) fn command(&self, args: &[&str]) -> Option<String> {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", self.port)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
        let mut cmd = format!("*{}\r\n", args.len());
        for a in args {
            cmd.push_str(&format!("${}\r\n{a}\r\n", a.len()));
        }
        s.write_all(cmd.as_bytes()).ok()?;
        let mut buf = vec![0u8; 64 * 1024];
        let n = s.read(&mut buf).ok()?;
        Some(String::from_utf8_lossy(&buf[..n]).into_owned())
    }

    /// The keys matching `pattern` (`KEYS`: fine on a test's small server).
    pub(crate) fn keys(&self, pattern: &str) -> Vec<String> {
        strings(&self.command(&["KEYS", pattern]).unwrap_or_default())
    }

    /// The lease ids outstanding in every shard of `job` (the `lease` hashes).
    pub(crate) fn lease_ids(&self, job: &str) -> Vec<String> {
        let mut ids: Vec<String> = self
            .keys(&format!("crawler:{{{job}/*}}:lease"))
            .iter()
            .flat_map(|k| strings(&self.command(&["HKEYS", k]).unwrap_or_default()))
            .collect();
        ids.sort();
        ids
    }

    /// The sum of a counter of `job`'s shards' `meta` hashes (`reclaimed`).
    pub(crate) fn shard_counter(&self, job: &str, field: &str) -> u64 {
        self.keys(&format!("crawler:{{{job}/*}}:meta"))
            .iter()
            .map(|k| {
                let reply = self.command(&["HGET", k, field]).unwrap_or_default();
                // "$-1" (no such field) or "$N\r\nVALUE\r\n".
                reply
                    .lines()
                    .nth(1)
                    .and_then(|v| v.parse::<u64>().ok())
                    .unwrap_or(0)
            })
            .sum()
    }

    /// Kill the server (losing everything since the last `SAVE`) and start it again from
    /// that snapshot: what a restart from an old RDB file, or a failover to a replica that
    /// was behind, looks like.
    pub(crate) fn crash_and_restart(&mut self) {
        self.kill();
        self.child = Self::spawn(self.port, self.dir.path(), self.appendonly);
        self.wait_ready();
    }

    /// Stop the server the way an operator would (SIGTERM: it writes what its persistence
    /// settings say and exits), stay down for `down`, then start it again on the same port
    /// with the same data directory.
    pub(crate) fn restart(&mut self, down: Duration) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
        std::thread::sleep(down);
        self.child = Self::spawn(self.port, self.dir.path(), self.appendonly);
        self.wait_ready();
    }

    /// Kill the server (SIGKILL) and leave it down.
    pub(crate) fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The bulk strings of a RESP array reply (`*N`, then `$len` and value lines); none for
/// anything else. Test keys and values hold no line breaks.
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
