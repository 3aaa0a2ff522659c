//! A `redis-server` of a test's own: a free loopback port, a temporary directory, no
//! persistence but an explicit `SAVE`. Each test binary uses part of it.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A running `redis-server`, killed and waited for on drop.
pub struct Redis {
    child: Child,
    pub port: u16,
    dir: tempfile::TempDir,
}

impl Redis {
    pub fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Self::spawn(port, dir.path());
        let r = Self { child, port, dir };
        r.wait_ready();
        r
    }

    /// No automatic snapshots and no AOF: only an explicit `SAVE` is kept.
    pub fn spawn(port: u16, dir: &Path) -> Child {
        Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server must be installed (apt-get install redis-server)")
    }

    pub fn wait_ready(&self) {
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

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    pub fn command(&self, args: &[&str]) -> Option<String> {
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

    /// Kill the server (losing everything since the last `SAVE`) and start it again from
    /// that snapshot: what a restart from an old RDB file, or a failover to a replica that
    /// was behind, looks like.
    pub fn crash_and_restart(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.child = Self::spawn(self.port, self.dir.path());
        self.wait_ready();
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
