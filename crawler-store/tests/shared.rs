//! Validators and the HTTP cache: persistent, and shared by many tasks.

// Helpers outside #[test] functions panic on failure too; that is what a test helper is for.
#![allow(clippy::unwrap_used)]

use crawler_store::{
    CacheStore, CachedResponse, SledStore, StoreOptions, ValidatorStore, Validators,
};

fn opts() -> StoreOptions {
    StoreOptions {
        cache_capacity_bytes: 2 << 20,
        ..StoreOptions::default()
    }
}

fn fp(n: u32) -> [u8; 16] {
    let mut b = [0u8; 16];
    b[12..].copy_from_slice(&n.to_be_bytes());
    b
}

fn validators(n: u32) -> Validators {
    Validators {
        etag: Some(format!("\"v{n}\"")),
        last_modified: n
            .is_multiple_of(2)
            .then(|| "Wed, 21 Oct 2015 07:28:00 GMT".to_owned()),
        fetched_at_unix: 1_700_000_000 + i64::from(n),
        content_hash: u64::from(n) * 31,
        body_len: u64::from(n) + 100,
    }
}

fn response(n: u32, body_len: usize) -> CachedResponse {
    CachedResponse {
        url: format!("http://a.test/{n}"),
        status: 200,
        headers: vec![
            ("content-type".into(), "text/html".into()),
            ("etag".into(), format!("\"{n}\"")),
        ],
        body: vec![(n % 251) as u8; body_len],
        stored_at_unix: 1_700_000_000,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn validators_are_shared_by_tasks_and_survive_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let store = SledStore::open(dir.path(), opts()).unwrap();
    let v: ValidatorStore = store.validators().unwrap();
    let tasks: Vec<_> = (0..8u32)
        .map(|t| {
            let v = v.clone();
            tokio::spawn(async move {
                for n in t * 100..t * 100 + 100 {
                    v.put(fp(n), &validators(n)).unwrap();
                    assert_eq!(v.get(fp(n)).unwrap(), Some(validators(n)));
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(v.len(), 800);
    assert_eq!(v.get(fp(10_000)).unwrap(), None);
    v.remove(fp(0)).unwrap();
    drop(v);
    drop(store);

    let store = SledStore::open(dir.path(), opts()).unwrap();
    let v = store.validators().unwrap();
    assert_eq!(v.len(), 799);
    assert_eq!(v.get(fp(0)).unwrap(), None);
    assert_eq!(v.get(fp(799)).unwrap(), Some(validators(799)));
}

#[test]
fn a_standalone_validator_store_persists() {
    let dir = tempfile::tempdir().unwrap();
    let v = ValidatorStore::open(dir.path(), opts()).unwrap();
    v.put(fp(1), &validators(1)).unwrap();
    v.flush().unwrap();
    drop(v);
    let v = ValidatorStore::open(dir.path(), opts()).unwrap();
    assert_eq!(v.get(fp(1)).unwrap(), Some(validators(1)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_http_cache_round_trips_bodies_and_keeps_to_its_budget() {
    let dir = tempfile::tempdir().unwrap();
    let cache = CacheStore::open(dir.path(), opts(), Some(64 << 10)).unwrap();
    let tasks: Vec<_> = (0..4u32)
        .map(|t| {
            let c = cache.clone();
            tokio::spawn(async move {
                for n in t * 10..t * 10 + 10 {
                    c.put(fp(n), &response(n, 4_000)).unwrap();
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    // 40 responses of ~4 KB do not fit in 64 KiB: the oldest were evicted.
    assert!(cache.stored_bytes() <= 64 << 10, "{}", cache.stored_bytes());
    let kept: Vec<u32> = (0..40)
        .filter(|&n| cache.get(fp(n)).unwrap().is_some())
        .collect();
    assert!(kept.len() >= 10 && kept.len() < 40, "{kept:?}");

    // Bodies are stored byte for byte, including ones that are not UTF-8.
    let mut binary = response(99, 0);
    binary.body = (0..=255u8).collect();
    cache.put(fp(99), &binary).unwrap();
    assert_eq!(cache.get(fp(99)).unwrap(), Some(binary.clone()));
    cache.flush().unwrap();
    drop(cache);

    let cache = CacheStore::open(dir.path(), opts(), Some(64 << 10)).unwrap();
    assert_eq!(cache.get(fp(99)).unwrap(), Some(binary));
    assert!(cache.stored_bytes() > 0 && cache.stored_bytes() <= 64 << 10);
}

#[test]
fn a_cache_without_budget_keeps_everything_and_replaces_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let store = SledStore::open(dir.path(), opts()).unwrap();
    let cache = store.http_cache(None).unwrap();
    for n in 0..50 {
        cache.put(fp(n), &response(n, 2_000)).unwrap();
    }
    let before = cache.stored_bytes();
    cache.put(fp(7), &response(7, 2_000)).unwrap();
    assert_eq!(cache.stored_bytes(), before);
    assert!((0..50).all(|n| cache.get(fp(n)).unwrap().is_some()));
}
