//! Job identity, locking, bad directories, stats and host state.

// Helpers outside #[test] functions panic on failure too; that is what a test helper is for.
#![allow(clippy::unwrap_used)]

use crawler_store::{SledStore, StoreOptions};
use serde_json::json;

fn opts() -> StoreOptions {
    StoreOptions {
        cache_capacity_bytes: 1 << 20,
        ..StoreOptions::default()
    }
}

#[test]
fn a_job_is_resumed_only_by_its_spider_with_compatible_settings() {
    let dir = tempfile::tempdir().unwrap();
    drop(SledStore::open_job(dir.path(), "books", "digest-1", opts()).unwrap());

    let err = SledStore::open_job(dir.path(), "quotes", "digest-1", opts()).unwrap_err();
    assert!(err.is_job_mismatch());
    let msg = err.to_string();
    assert!(
        msg.contains("\"books\"") && msg.contains("\"quotes\""),
        "{msg}"
    );
    assert!(msg.contains(&dir.path().display().to_string()), "{msg}");

    let err = SledStore::open_job(dir.path(), "books", "digest-2", opts()).unwrap_err();
    assert!(err.is_job_mismatch());
    let msg = err.to_string();
    assert!(
        msg.contains("digest-1") && msg.contains("digest-2"),
        "{msg}"
    );

    assert!(SledStore::open_job(dir.path(), "books", "digest-1", opts()).is_ok());
}

#[test]
fn a_directory_in_use_is_refused_with_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let first = SledStore::open(dir.path(), opts()).unwrap();
    let err = SledStore::open(dir.path(), opts()).unwrap_err();
    assert!(err.is_in_use(), "{err}");
    let msg = err.to_string();
    assert!(msg.contains("in use by another crawl"), "{msg}");
    assert!(msg.contains(&dir.path().display().to_string()), "{msg}");
    assert_eq!(err.path(), dir.path());
    drop(first);
    assert!(SledStore::open(dir.path(), opts()).is_ok());
}

#[test]
fn a_file_or_a_damaged_directory_gives_an_error_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("not-a-dir");
    std::fs::write(&file, b"hello").unwrap();
    let err = SledStore::open(&file, opts()).unwrap_err();
    assert!(err.is_corrupt());
    assert!(err.to_string().contains("is not a directory"), "{err}");

    // A job directory whose files were overwritten with garbage.
    let job = dir.path().join("job");
    drop(SledStore::open(&job, opts()).unwrap());
    let mut damaged = 0;
    for entry in std::fs::read_dir(&job).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            std::fs::write(&path, vec![0xA5; 4096]).unwrap();
            damaged += 1;
        }
    }
    assert!(damaged > 0);
    let err = SledStore::open(&job, opts()).unwrap_err();
    assert!(
        err.to_string().contains(&job.display().to_string()),
        "{err}"
    );
}

#[test]
fn stats_and_host_states_are_kept_across_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let s = SledStore::open(dir.path(), opts()).unwrap();
    assert_eq!(s.load_stats().unwrap(), None);
    s.save_stats(&json!({"fetched": 10})).unwrap();
    s.save_stats(&json!({"fetched": 12, "items": 3})).unwrap();
    s.save_host_state("b.test", &json!({"hold_until_unix": 1_700_000_030}))
        .unwrap();
    s.save_host_state("a.test:8080", &json!({"rate": 2.5}))
        .unwrap();
    s.flush().unwrap();
    drop(s);

    let s = SledStore::open(dir.path(), opts()).unwrap();
    assert_eq!(
        s.load_stats().unwrap(),
        Some(json!({"fetched": 12, "items": 3}))
    );
    assert_eq!(
        s.load_host_states().unwrap(),
        vec![
            ("a.test:8080".to_owned(), json!({"rate": 2.5})),
            (
                "b.test".to_owned(),
                json!({"hold_until_unix": 1_700_000_030})
            ),
        ]
    );
}
