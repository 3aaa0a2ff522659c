//! scratch experiment
use std::time::Instant;
fn rss() -> String {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    s.lines()
        .filter(|l| l.starts_with("VmHWM") || l.starts_with("VmRSS"))
        .collect::<Vec<_>>()
        .join(" ")
}
fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(2_000_000);
    let mode = std::env::args().nth(2).unwrap_or_default();
    let cache: u64 = std::env::args()
        .nth(3)
        .and_then(|a| a.parse().ok())
        .unwrap_or(64);
    let vlen: usize = std::env::args()
        .nth(4)
        .and_then(|a| a.parse().ok())
        .unwrap_or(100);
    let dir = tempfile::tempdir_in("/work/main/target").unwrap();
    let mut cfg = sled::Config::new()
        .path(dir.path())
        .cache_capacity(cache << 20);
    if mode.contains("low") {
        cfg = cfg.mode(sled::Mode::LowSpace);
    }
    let db = cfg.open().unwrap();
    let t = db.open_tree("q").unwrap();
    let start = Instant::now();
    let val = vec![7u8; vlen];
    for i in 0..n {
        let host = (i % 1000) as u32;
        let mut key = [0u8; 16];
        key[..4].copy_from_slice(&host.to_be_bytes());
        key[8..].copy_from_slice(&i.to_be_bytes());
        t.insert(&key[..], &val[..]).unwrap();
        if i % 1_000_000 == 999_999 {
            eprintln!(
                "{} {:.0}/s {}",
                i + 1,
                (i + 1) as f64 / start.elapsed().as_secs_f64(),
                rss()
            );
        }
    }
    db.flush().unwrap();
    eprintln!(
        "ins done {:.0}/s {}",
        n as f64 / start.elapsed().as_secs_f64(),
        rss()
    );
    if mode.contains("drain") {
        let start = Instant::now();
        let mut c = 0u64;
        for round in 0..(n / 1000) {
            for host in 0..1000u32 {
                let (k, _v) = t.scan_prefix(host.to_be_bytes()).next().unwrap().unwrap();
                t.remove(k).unwrap();
                c += 1;
            }
            if round % 1000 == 999 {
                eprintln!(
                    "drain {} {:.0}/s {}",
                    c,
                    c as f64 / start.elapsed().as_secs_f64(),
                    rss()
                );
            }
        }
    }
    let du = std::process::Command::new("du")
        .arg("-sh")
        .arg(dir.path())
        .output()
        .unwrap();
    eprintln!("{}", String::from_utf8_lossy(&du.stdout));
}
