//! One redaction rule: passwords given in settings never show in the `settings` listing,
//! in logs (text or JSON) or in error messages, whichever way they were given.

use std::process::Output;

use crawler_lab::Lab;

use crate::support;
use support::{crawler, run};

const AUTH_PASS: &str = "auth-pass-3141";
const REDIS_PASS: &str = "redis-pass-2718";
const UNIX_PASS: &str = "unix-pass-1618";
const PROXY_PASS: &str = "proxy-pass-1414";
const URL_PASS: &str = "url-pass-1732";

/// Fail if any secret appears in the command's output.
fn assert_clean(what: &str, out: &Output) {
    for stream in [&out.stdout, &out.stderr] {
        let text = String::from_utf8_lossy(stream);
        for secret in [AUTH_PASS, REDIS_PASS, UNIX_PASS, PROXY_PASS, URL_PASS] {
            assert!(!text.contains(secret), "{what} shows {secret}:\n{text}");
        }
        // The Basic header is the password in thin disguise.
        let basic = crawler::core::redact::base64(format!("reader:{AUTH_PASS}").as_bytes());
        assert!(
            !text.contains(&basic),
            "{what} shows the Basic header:\n{text}"
        );
    }
}

#[tokio::test]
async fn the_settings_listing_shows_no_password() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("settings.toml"),
        format!("[job]\nredis_url = \"redis://:{REDIS_PASS}@127.0.0.1:6390/0\"\n"),
    )
    .unwrap();
    let mut cmd = crawler(
        dir.path(),
        &[
            "--settings",
            "settings.toml",
            "settings",
            "-s",
            &format!("proxy=http://bob:{PROXY_PASS}@127.0.0.1:3128"),
        ],
    );
    cmd.env("CRAWLER_HTTP_AUTH_PASS", AUTH_PASS);
    let out = run(cmd).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_clean("settings", &out);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let row = |key: &str| {
        stdout
            .lines()
            .find(|l| l.split_whitespace().next() == Some(key))
            .unwrap_or_else(|| panic!("{key} missing:\n{stdout}"))
            .to_owned()
    };
    assert!(row("http_auth_pass").contains("***"), "{stdout}");
    assert!(
        row("redis_url").contains("redis://:***@127.0.0.1:6390/0"),
        "{stdout}"
    );
    assert!(
        row("proxy").contains("http://bob:***@127.0.0.1:3128"),
        "{stdout}"
    );

    // A Unix-socket Redis URL carries its password as a query parameter.
    let out = run(crawler(
        dir.path(),
        &[
            "settings",
            "-s",
            &format!("redis_url=redis+unix:///run/redis.sock?db=0&pass={UNIX_PASS}"),
        ],
    ))
    .await;
    assert!(out.status.success());
    assert_clean("settings", &out);
    assert!(String::from_utf8_lossy(&out.stdout).contains("pass=***"));
}

#[tokio::test]
async fn an_invalid_proxy_url_is_reported_without_its_password() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(crawler(
        dir.path(),
        &[
            "settings",
            "-s",
            &format!("proxy=ftp://bob:{PROXY_PASS}@127.0.0.1:21"),
        ],
    ))
    .await;
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("proxy") && stderr.contains("bob:***@"),
        "{stderr}"
    );
    assert_clean("an invalid proxy", &out);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crawl_logs_no_password_in_text_or_json() {
    let lab = Lab::builder().books(100).start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let page = lab.url_for(&lab.book(1).unwrap().path);
    // Credentials in the URL itself, HTTP auth for the lab, and a proxy that refuses:
    // every request fails and is logged (at debug) with its URL and the client's error.
    let with_creds = page.replacen("http://", &format!("http://reader:{URL_PASS}@"), 1);
    for format in ["text", "json"] {
        let out = run(crawler(
            dir.path(),
            &[
                "fetch",
                &with_creds,
                "-L",
                "trace",
                "--log-format",
                format,
                "-s",
                "http_auth_domain=127.0.0.1",
                "-s",
                "http_auth_user=reader",
                "-s",
                &format!("http_auth_pass={AUTH_PASS}"),
                "-s",
                &format!("proxy=http://bob:{PROXY_PASS}@127.0.0.1:1"),
                "-s",
                "retry_times=0",
            ],
        ))
        .await;
        assert!(!out.status.success(), "the proxy refuses every connection");
        assert_clean(&format!("fetch ({format} logs)"), &out);
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("***"),
            "the failure names the URL, redacted: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    lab.shutdown().await;
}

#[tokio::test]
async fn the_warning_about_a_proxy_the_guard_cannot_see_through_shows_no_password() {
    let lab = Lab::builder().books(100).start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = crawler(dir.path(), &["fetch", &lab.url()]);
    // An https proxy on a closed loopback port: the http page does not go through it (and
    // nothing could leave loopback if it did), but the crawl must say the rules stop there.
    cmd.env(
        "HTTPS_PROXY",
        format!("http://bob:{PROXY_PASS}@127.0.0.1:9"),
    );
    let out = run(cmd).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("HTTPS_PROXY") && stderr.contains("allow_unchecked_proxy"),
        "{stderr}"
    );
    assert_clean("the guard's warning", &out);
    lab.shutdown().await;
}
