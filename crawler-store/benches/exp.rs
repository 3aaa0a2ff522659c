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
    let dir = tempfile::tempdir_in("/work/main/target").unwrap();
    let db = sled::Config::new()
        .path(dir.path())
        .cache_capacity(64 << 20)
        .open()
        .unwrap();
    let t = db.open_tree("seen").unwrap();
    let start = Instant::now();
    let mut x: u64 = 0x9E3779B97F4A7C15;
    let mut batch = sled::Batch::default();
    for i in 0..n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let key = ((x as u128) << 64 | i as u128).to_be_bytes();
        match mode.as_str() {
            "batch" => {
                batch.insert(&key[..], &[][..]);
                if i % 10000 == 9999 {
                    t.apply_batch(std::mem::take(&mut batch)).unwrap();
                }
            }
            "seq" => {
                t.insert(&i.to_be_bytes()[..], &key[..]).unwrap();
            }
            _ => {
                t.insert(&key[..], &[][..]).unwrap();
            }
        }
        if i % 1_000_000 == 999_999 {
            eprintln!(
                "{} {:.0}/s {}",
                i + 1,
                (i + 1) as f64 / start.elapsed().as_secs_f64(),
                rss()
            );
        }
    }
    t.apply_batch(batch).unwrap();
    db.flush().unwrap();
    eprintln!(
        "done {:.0}/s {}",
        n as f64 / start.elapsed().as_secs_f64(),
        rss()
    );
    let du = std::process::Command::new("du")
        .arg("-sh")
        .arg(dir.path())
        .output()
        .unwrap();
    eprintln!("{}", String::from_utf8_lossy(&du.stdout));
}
