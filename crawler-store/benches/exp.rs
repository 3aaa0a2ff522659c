//! scratch
use std::time::Instant;
fn rss() -> String {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    s.lines()
        .filter(|l| l.starts_with("VmHWM"))
        .collect::<Vec<_>>()
        .join(" ")
}
fn main() {
    let mode = std::env::args().nth(1).unwrap_or_default();
    let n: u64 = 200_000;
    let dir = tempfile::tempdir_in("/work/main/target").unwrap();
    let db = sled::Config::new()
        .path(dir.path())
        .cache_capacity(64 << 20)
        .flush_every_ms(Some(200))
        .mode(sled::Mode::HighThroughput)
        .open()
        .unwrap();
    let t = db.open_tree("f").unwrap();
    let start = Instant::now();
    for i in 0..n {
        let lk = [
            b'l',
            (i >> 24) as u8,
            (i >> 16) as u8,
            (i >> 8) as u8,
            i as u8,
        ];
        let ck = [b'c', 0, 0, (i / 100) as u8, 1];
        let val = [7u8; 80];
        if mode == "batch" {
            let mut b = sled::Batch::default();
            b.insert(&lk[..], &val[..]);
            b.insert(&ck[..], &(i as u32).to_be_bytes()[..]);
            t.apply_batch(b).unwrap();
        } else if mode == "tx" {
            t.transaction(|tx| {
                tx.insert(&lk[..], &val[..])?;
                tx.insert(&ck[..], &(i as u32).to_be_bytes()[..])?;
                Ok::<_, sled::transaction::ConflictableTransactionError<()>>(())
            })
            .unwrap();
        } else {
            t.insert(&lk[..], &val[..]).unwrap();
            t.insert(&ck[..], &(i as u32).to_be_bytes()[..]).unwrap();
        }
        t.remove(&lk[..]).unwrap();
    }
    eprintln!(
        "{mode}: {:.0}/s {}",
        n as f64 / start.elapsed().as_secs_f64(),
        rss()
    );
}
