//! A real S3-compatible server for the tests: moto's `moto_server` (PyPI `moto[server]`),
//! started on a free port of 127.0.0.1 with an empty bucket, killed when dropped.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub(super) const BUCKET: &str = "feeds";
/// Parts this small make every batch of the tests a multipart upload (S3 needs 5MiB; the
/// server is told to accept less, with `S3_UPLOAD_PART_MIN_SIZE`).
pub(super) const PART_SIZE: &str = "64KiB";

/// A `moto_server` process, killed when dropped.
pub(super) struct Moto {
    child: Child,
    pub(super) endpoint: String,
    http: reqwest::Client,
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Moto {
    /// Start the server with an empty bucket (`moto_server` must be installed).
    pub(super) async fn start() -> Self {
        Self::start_logged(None).await
    }

    /// Start the server, its request log (one line per request: `"PUT /bucket/key
    /// HTTP/1.1" 200`) written to `log` if given.
    pub(super) async fn start_logged(log: Option<&Path>) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = match Command::new("moto_server")
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .env("S3_UPLOAD_PART_MIN_SIZE", "1024")
            .stdout(Stdio::null())
            .stderr(match log {
                Some(path) => Stdio::from(std::fs::File::create(path).unwrap()),
                None => Stdio::null(),
            })
            .spawn()
        {
            Ok(child) => child,
            // Missing is a failure, not a skip (as warcio for the WARC tests): these tests
            // are what says feeds reach a real S3-compatible server.
            Err(e) => panic!(
                "cannot start moto_server ({e}): install it with `pip install 'moto[server]'`"
            ),
        };
        let _ = rustls::crypto::ring::default_provider().install_default();
        let moto = Self {
            child,
            endpoint: format!("http://127.0.0.1:{port}"),
            http: reqwest::Client::new(),
        };
        for _ in 0..300 {
            if let Ok(r) = moto
                .http
                .put(format!("{}/{BUCKET}", moto.endpoint))
                .send()
                .await
                && r.status().is_success()
            {
                return moto;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("moto_server did not answer within 30 s");
    }

    /// The complete objects in the bucket, by key.
    pub(super) async fn keys(&self) -> Vec<String> {
        let text = self
            .http
            .get(format!(
                "{}/{BUCKET}?list-type=2&max-keys=1000",
                self.endpoint
            ))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        tags(&text, "Key")
    }

    /// Keys of the multipart uploads started and neither completed nor aborted.
    pub(super) async fn uploads_in_progress(&self) -> Vec<String> {
        let text = self
            .http
            .get(format!("{}/{BUCKET}?uploads", self.endpoint))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        tags(&text, "Key")
    }

    /// A client of the bucket, signing as any S3 client does (the server refuses anonymous
    /// reads of objects put in one request).
    fn client(&self) -> object_store::aws::AmazonS3 {
        object_store::aws::AmazonS3Builder::new()
            .with_endpoint(&self.endpoint)
            .with_allow_http(true)
            .with_bucket_name(BUCKET)
            .with_region("us-east-1")
            .with_access_key_id("moto-test-id")
            .with_secret_access_key("moto-test-secret")
            .build()
            .unwrap()
    }

    /// An object's bytes.
    pub(super) async fn object(&self, key: &str) -> Vec<u8> {
        use object_store::ObjectStoreExt;
        let key = object_store::path::Path::from(key);
        let got = self
            .client()
            .get(&key)
            .await
            .unwrap_or_else(|e| panic!("GET {key}: {e}"));
        got.bytes().await.unwrap().to_vec()
    }

    /// Delete an object.
    pub(super) async fn delete(&self, key: &str) {
        use object_store::ObjectStoreExt;
        let key = object_store::path::Path::from(key);
        self.client()
            .delete(&key)
            .await
            .unwrap_or_else(|e| panic!("DELETE {key}: {e}"));
    }

    /// Every object of the bucket, by key.
    pub(super) async fn objects(&self) -> BTreeMap<String, Vec<u8>> {
        let mut out = BTreeMap::new();
        for key in self.keys().await {
            let body = self.object(&key).await;
            out.insert(key, body);
        }
        out
    }
}

/// The texts of every `<tag>` element in `xml` (S3's listings).
pub(super) fn tags(xml: &str, tag: &str) -> Vec<String> {
    let open = format!("<{tag}>");
    let close = format!("</{tag}>");
    xml.split(&open)
        .skip(1)
        .filter_map(|s| s.split_once(&close).map(|(v, _)| v.to_owned()))
        .collect()
}
