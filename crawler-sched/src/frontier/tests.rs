use super::config::domain_key;
use super::*;
use crate::resolve::IpKeys;
use crawler_core::ThrottleMode;
use crawler_core::{
    Admission, Feedback, FilterReason, HostKeyMode, Lease, Next, Request, Scheduler, Settings, Url,
};
use std::time::Duration;

fn frontier(settings: &Settings, domains: &[&str]) -> Frontier {
    Frontier::new(FrontierConfig::from_settings(
        settings,
        domains.iter().map(|s| s.to_string()).collect(),
    ))
}

fn req(url: &str) -> Request {
    Request::get(url).unwrap()
}

fn ready(f: &mut Frontier, now: Instant) -> (Lease, Request) {
    match f.next(now) {
        Next::Ready(l, r) => (l, r),
        other => panic!("expected a ready request, got {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn duplicates_offsite_depth_and_long_urls_are_filtered() {
    let s = Settings {
        depth_limit: 2,
        max_url_length: 60,
        ..Default::default()
    };
    let mut f = frontier(&s, &["Example.com", "books.test:8080"]);
    let now = Instant::now();
    assert_eq!(
        f.enqueue(req("http://example.com/a"), now),
        Admission::Queued
    );
    assert_eq!(
        f.enqueue(req("http://EXAMPLE.com:80/a#x"), now),
        Admission::Filtered(FilterReason::Duplicate)
    );
    assert_eq!(
        f.enqueue(req("http://www.example.com/a"), now),
        Admission::Queued
    );
    assert_eq!(
        f.enqueue(req("http://books.test:8080/"), now),
        Admission::Queued
    );
    for off in [
        "http://badexample.com/",
        "http://example.org/",
        "http://com/",
    ] {
        assert_eq!(
            f.enqueue(req(off), now),
            Admission::Filtered(FilterReason::Offsite)
        );
    }
    let mut deep = req("http://example.com/deep");
    deep.depth = 3;
    assert_eq!(
        f.enqueue(deep.clone(), now),
        Admission::Filtered(FilterReason::Depth)
    );
    deep.depth = 2;
    assert_eq!(f.enqueue(deep, now), Admission::Queued);
    let long = format!("http://example.com/{}", "x".repeat(60));
    assert_eq!(
        f.enqueue(req(&long), now),
        Admission::Filtered(FilterReason::UrlTooLong)
    );
    assert_eq!(f.queued(), 4);
    let mut again = req("http://example.com/a");
    again.dont_filter = true;
    assert_eq!(f.enqueue(again, now), Admission::Queued);
}

#[tokio::test(start_paused = true)]
async fn one_host_waits_its_delay_while_others_proceed() {
    let s = Settings {
        throttle: ThrottleMode::Fixed,
        download_delay: Duration::from_secs(2),
        randomize_delay: false,
        ..Default::default()
    };
    let mut f = frontier(&s, &[]);
    let t0 = Instant::now();
    for u in ["http://a.test/1", "http://a.test/2", "http://b.test/1"] {
        f.enqueue(req(u), t0);
    }
    let (l1, r1) = ready(&mut f, t0);
    let (l2, r2) = ready(&mut f, t0);
    let hosts: Vec<_> = [r1.url.host_str(), r2.url.host_str()]
        .into_iter()
        .flatten()
        .collect();
    assert!(
        hosts.contains(&"a.test") && hosts.contains(&"b.test"),
        "{hosts:?}"
    );
    // a.test has one in flight (concurrency 1): nothing is ready until it completes.
    assert!(matches!(f.next(t0), Next::Empty));
    let fb = Feedback {
        sent: true,
        status: Some(200),
        ..Default::default()
    };
    f.complete(l1, &fb, t0);
    f.complete(l2, &fb, t0);
    match f.next(t0) {
        Next::NotBefore(at) => assert_eq!(at, t0 + Duration::from_secs(2)),
        other => panic!("a.test must wait its delay, got {other:?}"),
    }
    let (_, r3) = ready(&mut f, t0 + Duration::from_secs(2));
    assert_eq!(r3.url.as_str(), "http://a.test/2");
    assert!(matches!(f.next(t0 + Duration::from_secs(5)), Next::Empty));
    assert_eq!(f.queued(), 0);
}

#[tokio::test(start_paused = true)]
async fn idle_hosts_with_nothing_learned_are_dropped_and_held_ones_kept() {
    let s = Settings::default();
    let mut f = frontier(&s, &[]);
    let t0 = Instant::now();
    let n = 200;
    for i in 0..n {
        f.enqueue(req(&format!("http://h{i}.test/")), t0);
    }
    f.enqueue(req("http://held.test/"), t0);
    let ok = Feedback {
        sent: true,
        status: Some(200),
        ..Default::default()
    };
    let refused = Feedback {
        sent: true,
        status: Some(429),
        retry_after: Some(Duration::from_secs(600)),
        ..Default::default()
    };
    for _ in 0..=n {
        let (lease, r) = ready(&mut f, t0);
        // One request for a host never seen: its connection is not kept for reuse.
        assert_eq!(r.header_value("connection"), Some("close"));
        let fb = if r.url.host_str() == Some("held.test") {
            &refused
        } else {
            &ok
        };
        f.complete(lease, fb, t0);
        f.acknowledge(lease);
    }
    assert_eq!(f.hosts().count(), n + 1);
    // Idle long enough: every host with nothing learned goes; the one under a hold stays.
    let later = t0 + Duration::from_secs(30);
    assert!(matches!(f.next(later), Next::Empty));
    let live: Vec<&str> = f.hosts().map(|(h, _, _)| h).collect();
    assert_eq!(live, ["held.test"]);
    // Their figures are still reported, and a host seen again gets a fresh slot.
    let stats = f.host_stats();
    assert_eq!(stats.len(), n + 1);
    assert!(stats.iter().all(|h| h.requests == 1));
    assert_eq!(
        f.enqueue(req("http://h7.test/again"), later),
        Admission::Queued
    );
    let (_, r) = ready(&mut f, later);
    assert_eq!(r.url.as_str(), "http://h7.test/again");
    // The held host still waits out its Retry-After.
    f.enqueue(req("http://held.test/2"), later);
    assert!(matches!(f.next(later), Next::NotBefore(_)));
    // A host with more work queued keeps its connection alive.
    f.enqueue(req("http://two.test/1"), later);
    f.enqueue(req("http://two.test/2"), later);
    let (_, r) = ready(&mut f, later);
    assert_eq!(r.url.host_str(), Some("two.test"));
    assert_eq!(r.header_value("connection"), None);
}

#[tokio::test(start_paused = true)]
async fn priority_first_then_first_in_first_out() {
    let s = Settings {
        throttle: ThrottleMode::Fixed,
        download_delay: Duration::ZERO,
        ..Default::default()
    };
    let mut f = frontier(&s, &[]);
    let now = Instant::now();
    f.enqueue(req("http://a.test/low1"), now);
    f.enqueue(req("http://a.test/high").priority(5), now);
    f.enqueue(req("http://a.test/low2"), now);
    let mut order = Vec::new();
    for _ in 0..3 {
        let (l, r) = ready(&mut f, now);
        order.push(r.url.path().to_owned());
        f.complete(
            l,
            &Feedback {
                sent: true,
                ..Default::default()
            },
            now,
        );
    }
    assert_eq!(order, ["/high", "/low1", "/low2"]);
}

#[tokio::test(start_paused = true)]
async fn per_host_concurrency_is_respected() {
    let s = Settings {
        throttle: ThrottleMode::Fixed,
        download_delay: Duration::ZERO,
        concurrency_per_host: 3,
        ..Default::default()
    };
    let mut f = frontier(&s, &[]);
    let now = Instant::now();
    for i in 0..10 {
        f.enqueue(req(&format!("http://a.test/{i}")), now);
    }
    let mut leases = Vec::new();
    while let Next::Ready(l, _) = f.next(now) {
        leases.push(l);
    }
    assert_eq!(leases.len(), 3);
    f.complete(
        leases[0],
        &Feedback {
            sent: true,
            ..Default::default()
        },
        now,
    );
    assert!(matches!(f.next(now), Next::Ready(..)));
    assert!(matches!(f.next(now), Next::Empty));
}

#[tokio::test(start_paused = true)]
async fn retry_after_holds_the_whole_host() {
    let s = Settings {
        throttle: ThrottleMode::Fixed,
        download_delay: Duration::ZERO,
        concurrency_per_host: 2,
        ..Default::default()
    };
    let mut f = frontier(&s, &[]);
    let now = Instant::now();
    for i in 0..4 {
        f.enqueue(req(&format!("http://a.test/{i}")), now);
    }
    let (l, _) = ready(&mut f, now);
    let (l2, _) = ready(&mut f, now);
    let fb = Feedback {
        sent: true,
        status: Some(429),
        retry_after: Some(Duration::from_secs(30)),
        ..Default::default()
    };
    f.complete(l, &fb, now);
    // The other request in flight is refused with it (one host comes back one probe at a
    // time, so nothing more goes until it is answered).
    f.complete(l2, &fb, now);
    match f.next(now + Duration::from_secs(1)) {
        Next::NotBefore(at) => assert_eq!(at, now + Duration::from_millis(30_250)),
        other => panic!("expected a hold, got {other:?}"),
    }
    assert!(matches!(
        f.next(now + Duration::from_millis(30_250)),
        Next::Ready(..)
    ));
}

#[tokio::test(start_paused = true)]
async fn retries_wait_for_their_time_and_skipped_hosts_drain() {
    let s = Settings {
        throttle: ThrottleMode::Fixed,
        max_retry_after: Duration::from_secs(60),
        ..Default::default()
    };
    let mut f = frontier(&s, &[]);
    let now = Instant::now();
    f.enqueue(req("http://a.test/again"), now);
    let (first, again) = ready(&mut f, now);
    let sent = Feedback {
        sent: true,
        status: Some(500),
        ..Default::default()
    };
    f.complete(first, &sent, now);
    f.retry(first, again, now + Duration::from_secs(5));
    assert_eq!(f.queued(), 1);
    match f.next(now) {
        Next::NotBefore(at) => assert_eq!(at, now + Duration::from_secs(5)),
        other => panic!("the retry must wait, got {other:?}"),
    }
    let (l, r) = ready(&mut f, now + Duration::from_secs(5));
    assert_eq!(r.url.path(), "/again");

    for i in 0..3 {
        f.enqueue(req(&format!("http://a.test/{i}")), now);
    }
    let fb = Feedback {
        sent: true,
        status: Some(503),
        retry_after: Some(Duration::from_secs(3600)),
        ..Default::default()
    };
    f.complete(l, &fb, now);
    let skipped = f.take_skipped();
    assert_eq!(skipped.len(), 3);
    assert!(skipped[0].1.contains("max_retry_after"), "{}", skipped[0].1);
    assert_eq!(f.queued(), 0);
    // Later links to the skipped host are set aside too, never queued.
    assert_eq!(f.enqueue(req("http://a.test/late"), now), Admission::Queued);
    assert_eq!(f.take_skipped().len(), 1);
    assert!(matches!(f.next(now + Duration::from_secs(10)), Next::Empty));
    let stats = f.host_stats();
    assert_eq!(stats[0].host, "a.test");
    assert_eq!(stats[0].status.get(&503), Some(&1));
    assert!(stats[0].skipped.is_some());
}

mod host_rule_tests {
    use super::*;
    use crawler_core::{HostRule, ThrottleMode};
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn host_rules_set_a_hosts_pace() {
        let rule: HostRule = serde_json::from_value(serde_json::json!({
            "match": "fast.test", "concurrency": 3, "delay": "0s"
        }))
        .unwrap();
        let s = Settings {
            throttle: ThrottleMode::Fixed,
            download_delay: Duration::from_secs(5),
            hosts: vec![rule],
            ..Default::default()
        };
        let mut f = Frontier::new(FrontierConfig::from_settings(&s, vec![]));
        let now = Instant::now();
        for i in 0..5 {
            f.enqueue(Request::get(format!("http://fast.test/{i}")).unwrap(), now);
            f.enqueue(Request::get(format!("http://slow.test/{i}")).unwrap(), now);
        }
        let mut hosts = Vec::new();
        while let Next::Ready(_, r) = f.next(now) {
            hosts.push(r.url.host_str().unwrap_or_default().to_owned());
        }
        assert_eq!(
            hosts.iter().filter(|h| *h == "fast.test").count(),
            3,
            "{hosts:?}"
        );
        assert_eq!(
            hosts.iter().filter(|h| *h == "slow.test").count(),
            1,
            "{hosts:?}"
        );
    }
}

mod domain_rule_tests {
    use super::*;
    use crawler_core::{HostRule, ThrottleMode};
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn host_rules_match_the_urls_host_whatever_the_slot_key() {
        let rule: HostRule = serde_json::from_value(serde_json::json!({
            "match": "*.example.com", "concurrency": 3, "delay": "0s"
        }))
        .unwrap();
        let s = Settings {
            throttle: ThrottleMode::Fixed,
            download_delay: Duration::from_secs(5),
            host_key: HostKeyMode::Domain,
            hosts: vec![rule],
            ..Default::default()
        };
        let mut f = Frontier::new(FrontierConfig::from_settings(&s, vec![]));
        let now = Instant::now();
        for i in 0..5 {
            f.enqueue(
                Request::get(format!("http://a.example.com/{i}")).unwrap(),
                now,
            );
        }
        let mut sent = 0;
        while let Next::Ready(..) = f.next(now) {
            sent += 1;
        }
        assert_eq!(
            sent, 3,
            "the rule's concurrency and delay apply to the domain's slot"
        );
    }
}

mod key_tests {
    use super::*;

    #[test]
    fn domain_mode_shares_one_slot_per_registrable_domain() {
        let url = |s: &str| Url::parse(s).unwrap();
        assert_eq!(
            domain_key(&url("http://a.b.example.co.uk/x")),
            "example.co.uk"
        );
        assert_eq!(
            domain_key(&url("https://www.example.com:8443/")),
            "example.com"
        );
        assert_eq!(domain_key(&url("http://127.0.0.1:8080/")), "127.0.0.1:8080");
        assert_eq!(
            host_key(&url("https://www.example.com:8443/")),
            "www.example.com:8443"
        );

        let s = Settings {
            host_key: HostKeyMode::Domain,
            ..Default::default()
        };
        let mut f = Frontier::new(FrontierConfig::from_settings(&s, vec![]));
        let now = Instant::now();
        f.enqueue(Request::get("http://a.example.com/1").unwrap(), now);
        f.enqueue(Request::get("http://b.example.com/2").unwrap(), now);
        // One slot, one request in flight: the second host waits for the first.
        assert!(matches!(f.next(now), Next::Ready(..)));
        assert!(!matches!(f.next(now), Next::Ready(..)));
        assert_eq!(f.hosts().count(), 1);
    }

    /// A test resolver: two names on one shared-hosting machine, a third elsewhere.
    fn shared_hosting(name: &str) -> Option<std::net::IpAddr> {
        match name {
            "a.test" | "b.test" => Some([192, 0, 2, 1].into()),
            "c.test" => Some([192, 0, 2, 2].into()),
            _ => None,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn ip_mode_shares_one_slot_per_address() {
        let s = Settings {
            host_key: HostKeyMode::Ip,
            ..Default::default()
        };
        let mut config = FrontierConfig::from_settings(&s, vec![]);
        config.ip_keys = std::sync::Arc::new(IpKeys::with_lookup(64, shared_hosting));
        let mut f = Frontier::new(config);
        let now = Instant::now();
        f.enqueue(Request::get("http://a.test/1").unwrap(), now);
        f.enqueue(Request::get("http://b.test/2").unwrap(), now);
        f.enqueue(Request::get("http://c.test/3").unwrap(), now);
        // a and b share 192.0.2.1 (one in flight), c has its own slot.
        let mut hosts = Vec::new();
        while let Next::Ready(_, r) = f.next(now) {
            hosts.push(r.url.host_str().unwrap_or("").to_owned());
        }
        assert_eq!(hosts.len(), 2, "{hosts:?}");
        assert!(hosts.contains(&"c.test".to_owned()));
        let mut keys: Vec<&str> = f.hosts().map(|(k, _, _)| k).collect();
        keys.sort();
        assert_eq!(keys, ["192.0.2.1", "192.0.2.2"]);
    }
}

#[tokio::test(start_paused = true)]
async fn a_recorder_gets_sends_retries_outcomes_and_the_holds_they_cause() {
    use crate::record::{RecordLine, Recorder};
    let path = std::env::temp_dir().join(format!("crawler-frontier-record-{}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let mut f = frontier(&Settings::default(), &[]);
    f.record_to(Recorder::open(&path).unwrap());
    let now = Instant::now();
    f.enqueue(req("http://a.test/"), now);
    let (lease, r) = ready(&mut f, now);
    let refused = Feedback {
        sent: true,
        status: Some(429),
        retry_after: Some(Duration::from_secs(2)),
        ..Default::default()
    };
    f.complete(lease, &refused, now);
    let mut again = r;
    again.retries = 1;
    f.retry(lease, again, now);
    let later = now + Duration::from_secs(3);
    let (_, r) = ready(&mut f, later);
    assert_eq!(r.retries, 1);
    f.checkpoint(&crawler_core::Stats::default());
    drop(f);
    let lines: Vec<RecordLine> = std::fs::read_to_string(&path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let _ = std::fs::remove_file(&path);
    let hold = lines.iter().find_map(|l| match l {
        RecordLine::Audit(a) if matches!(a.what, crate::politeness::What::Hold { .. }) => {
            Some(a.trigger.as_str())
        }
        _ => None,
    });
    assert_eq!(hold, Some("Retry-After"));
    let seconds: Vec<_> = lines
        .iter()
        .filter_map(|l| match l {
            RecordLine::Second(s) => Some(s),
            _ => None,
        })
        .collect();
    assert_eq!(seconds.iter().map(|s| s.sent).sum::<u32>(), 2);
    assert_eq!(seconds.iter().map(|s| s.retries).sum::<u32>(), 1);
    let refusals: u32 = seconds.iter().filter_map(|s| s.status.get(&429)).sum();
    assert_eq!(refusals, 1);
    assert!(seconds.iter().all(|s| s.host == "a.test"));
}

/// A request refused before the wire (robots.txt, the address policy: feedback with
/// nothing sent) is counted apart from the host's requests, which count what reached it.
#[tokio::test(start_paused = true)]
async fn a_request_refused_before_the_wire_is_not_one_of_the_hosts_requests() {
    let s = Settings {
        throttle: ThrottleMode::Fixed,
        download_delay: Duration::ZERO,
        ..Default::default()
    };
    let mut f = frontier(&s, &[]);
    let now = Instant::now();
    f.enqueue(req("http://a.test/private"), now);
    f.enqueue(req("http://a.test/public"), now);
    let (lease, _) = ready(&mut f, now);
    f.complete(lease, &Feedback::default(), now);
    let (lease, _) = ready(&mut f, now);
    let ok = Feedback {
        sent: true,
        status: Some(200),
        ..Default::default()
    };
    f.complete(lease, &ok, now);
    let host = f.host_stats().into_iter().next().expect("the host");
    assert_eq!((host.requests, host.unsent), (1, 1), "{host:?}");
}

#[tokio::test(start_paused = true)]
async fn a_request_given_back_unsent_is_not_counted_and_comes_out_again() {
    use crate::record::{RecordLine, Recorder};
    let path =
        std::env::temp_dir().join(format!("crawler-frontier-give-back-{}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let s = Settings {
        throttle: ThrottleMode::Fixed,
        download_delay: Duration::ZERO,
        ..Default::default()
    };
    let mut f = frontier(&s, &[]);
    f.record_to(Recorder::open(&path).unwrap());
    let now = Instant::now();
    f.enqueue(req("http://a.test/1"), now);
    let (lease, r) = ready(&mut f, now);
    f.give_back(lease, r, now);
    // At once, and once: the engine had no room, the host sent nothing.
    let (lease, r) = ready(&mut f, now);
    assert_eq!(r.url.path(), "/1");
    let ok = Feedback {
        sent: true,
        status: Some(200),
        ..Default::default()
    };
    f.complete(lease, &ok, now);
    assert_eq!(f.host_stats().first().map(|h| h.requests), Some(1));
    f.checkpoint(&crawler_core::Stats::default());
    drop(f);
    let sent: u32 = std::fs::read_to_string(&path)
        .unwrap()
        .lines()
        .filter_map(|l| match serde_json::from_str(l) {
            Ok(RecordLine::Second(s)) => Some(s.sent),
            _ => None,
        })
        .sum();
    let _ = std::fs::remove_file(&path);
    assert_eq!(sent, 1);
}

mod group_tests {
    use super::*;
    use std::collections::HashMap;
    use std::sync::Arc;

    /// A test resolver: three shop names on one server with an unrelated site beside them
    /// (`neighbour.test`, shared hosting), a name elsewhere, and two names of one
    /// registrable domain (`site.test`) on two addresses (a CDN, say).
    fn servers(name: &str) -> Option<std::net::IpAddr> {
        match name {
            "a.shop.test" | "b.shop.test" | "c.shop.test" | "neighbour.test" | "intranet" => {
                Some([192, 0, 2, 10].into())
            }
            "apart.test" => Some([192, 0, 2, 11].into()),
            "x.site.test" => Some([192, 0, 2, 20].into()),
            "y.site.test" => Some([192, 0, 2, 21].into()),
            _ => None,
        }
    }

    fn grouped(settings: &Settings) -> Frontier {
        let mut config = FrontierConfig::from_settings(settings, vec![]);
        config.ip_keys = Arc::new(IpKeys::with_lookup(64, servers));
        Frontier::new(config)
    }

    fn refused(wait_secs: u64) -> Feedback {
        Feedback {
            sent: true,
            status: Some(429),
            retry_after: Some(Duration::from_secs(wait_secs)),
            latency: Duration::from_millis(50),
            ..Default::default()
        }
    }

    fn ok() -> Feedback {
        Feedback {
            sent: true,
            status: Some(200),
            latency: Duration::from_millis(50),
            ..Default::default()
        }
    }

    fn enqueue_pages(f: &mut Frontier, host: &str, pages: usize, now: Instant) {
        for i in 0..pages {
            f.enqueue(req(&format!("http://{host}/{i}")), now);
        }
    }

    /// The requests handed out at `now`, by host, each leased.
    fn lease_all(f: &mut Frontier, now: Instant) -> HashMap<String, Lease> {
        let mut out = HashMap::new();
        while let Next::Ready(lease, r) = f.next(now) {
            out.insert(r.url.host_str().unwrap_or("").to_owned(), lease);
        }
        out
    }

    /// The hosts whose requests are handed out at `now` (each answered 200 at once).
    fn ready_hosts(f: &mut Frontier, now: Instant) -> Vec<String> {
        let leased = lease_all(f, now);
        let mut hosts: Vec<String> = leased.keys().cloned().collect();
        for lease in leased.into_values() {
            f.complete(lease, &ok(), now);
            f.acknowledge(lease);
        }
        hosts.sort();
        hosts
    }

    fn secs(s: f64) -> Duration {
        Duration::from_secs_f64(s)
    }

    /// The hosts served between `from` and `to` (asked every 50 ms, each answered 200 at
    /// once), and the most handed out at one instant.
    fn served_between(f: &mut Frontier, from: Instant, to: Instant) -> (Vec<String>, usize) {
        let (mut all, mut most) = (std::collections::BTreeSet::new(), 0);
        let mut at = from;
        while at <= to {
            let hosts = ready_hosts(f, at);
            most = most.max(hosts.len());
            all.extend(hosts);
            at += secs(0.05);
        }
        (all.into_iter().collect(), most)
    }

    fn triggers(f: &Frontier, host: &str) -> Vec<String> {
        let id = f.host_ids[host];
        f.hosts[id]
            .throttle
            .audit()
            .into_iter()
            .map(|a| a.trigger)
            .collect()
    }

    #[tokio::test(start_paused = true)]
    async fn a_retry_after_on_one_name_holds_every_name_on_its_address() {
        let mut f = grouped(&Settings::default());
        let t0 = Instant::now();
        enqueue_pages(&mut f, "a.shop.test", 5, t0);
        enqueue_pages(&mut f, "b.shop.test", 5, t0);
        let leased = lease_all(&mut f, t0);
        assert_eq!(leased.len(), 2);
        let t1 = t0 + secs(0.1);
        f.complete(leased["a.shop.test"], &refused(10), t1);
        f.complete(leased["b.shop.test"], &ok(), t1);
        // b would be due a second after its first send; it waits out a's hold instead.
        for at in [2.0, 5.0, 9.9] {
            assert_eq!(
                ready_hosts(&mut f, t0 + secs(at)),
                Vec::<String>::new(),
                "{at}s"
            );
        }
        match f.next(t0 + secs(5.0)) {
            Next::NotBefore(at) => assert!(at >= t1 + secs(10.0), "{:?}", at - t0),
            other => panic!("expected a wait, got {other:?}"),
        }
        // A name first seen during the hold starts held too.
        enqueue_pages(&mut f, "c.shop.test", 1, t0 + secs(5.0));
        assert_eq!(ready_hosts(&mut f, t0 + secs(9.9)), Vec::<String>::new());
        // The group a refusal reached is paced as one: after the hold its names take turns
        // at the group's pace, one at a time (all at the hold's end would be a burst the
        // limiter refuses), and every name with work gets its turns.
        let (served, most) = served_between(&mut f, t1 + secs(10.0), t1 + secs(16.0));
        assert_eq!(served, ["a.shop.test", "b.shop.test", "c.shop.test"]);
        assert_eq!(most, 1);
        for sibling in ["b.shop.test", "c.shop.test"] {
            assert!(
                triggers(&f, sibling).iter().any(|t| t == "limiter group"),
                "{sibling}: {:?}",
                triggers(&f, sibling)
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn other_sites_are_held_alone_even_on_the_same_address() {
        let mut f = grouped(&Settings::default());
        let t0 = Instant::now();
        // neighbour.test shares a.shop.test's address; apart.test lives elsewhere;
        // nowhere.shop.test does not resolve but is of a.shop.test's site.
        for host in [
            "a.shop.test",
            "neighbour.test",
            "apart.test",
            "nowhere.shop.test",
        ] {
            enqueue_pages(&mut f, host, 5, t0);
        }
        let leased = lease_all(&mut f, t0);
        let t1 = t0 + secs(0.1);
        f.complete(leased["a.shop.test"], &refused(10), t1);
        for host in ["neighbour.test", "apart.test", "nowhere.shop.test"] {
            f.complete(leased[host], &ok(), t1);
        }
        assert_eq!(
            ready_hosts(&mut f, t0 + secs(1.5)),
            ["apart.test", "neighbour.test"]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_address_and_a_name_without_a_domain_on_it_are_one_site() {
        let mut f = grouped(&Settings::default());
        let t0 = Instant::now();
        enqueue_pages(&mut f, "192.0.2.10", 5, t0);
        enqueue_pages(&mut f, "intranet", 5, t0);
        enqueue_pages(&mut f, "neighbour.test", 5, t0);
        let leased = lease_all(&mut f, t0);
        let t1 = t0 + secs(0.1);
        f.complete(leased["192.0.2.10"], &refused(10), t1);
        f.complete(leased["intranet"], &ok(), t1);
        f.complete(leased["neighbour.test"], &ok(), t1);
        assert_eq!(ready_hosts(&mut f, t0 + secs(1.5)), ["neighbour.test"]);
    }

    #[tokio::test(start_paused = true)]
    async fn names_of_one_site_on_two_addresses_share_the_first_hold() {
        let mut f = grouped(&Settings::default());
        let t0 = Instant::now();
        enqueue_pages(&mut f, "x.site.test", 10, t0);
        enqueue_pages(&mut f, "y.site.test", 10, t0);
        let leased = lease_all(&mut f, t0);
        let t1 = t0 + secs(0.1);
        // The first refusal on x, answered while y's first request is still out.
        f.complete(leased["x.site.test"], &refused(20), t1);
        f.complete(leased["y.site.test"], &ok(), t1 + secs(0.05));
        for at in [1.5, 10.0, 20.0] {
            assert_eq!(
                ready_hosts(&mut f, t0 + secs(at)),
                Vec::<String>::new(),
                "{at}s"
            );
        }
        assert!(
            triggers(&f, "y.site.test")
                .iter()
                .any(|t| t == "limiter group"),
            "{:?}",
            triggers(&f, "y.site.test")
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_refusal_while_a_neighbour_is_held_joins_their_groups() {
        use crate::record::{RecordLine, Recorder};
        let path = std::env::temp_dir().join(format!(
            "crawler-frontier-groups-record-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_file(&path);
        let mut f = grouped(&Settings::default());
        f.record_to(Recorder::open(&path).unwrap());
        let t0 = Instant::now();
        enqueue_pages(&mut f, "a.shop.test", 10, t0);
        enqueue_pages(&mut f, "neighbour.test", 10, t0);
        let leased = lease_all(&mut f, t0);
        let t1 = t0 + secs(0.1);
        f.complete(leased["a.shop.test"], &refused(10), t1);
        f.complete(leased["neighbour.test"], &ok(), t1);
        // Two sites: a's hold does not reach its neighbour on the same address.
        let leased = lease_all(&mut f, t0 + secs(1.5));
        assert_eq!(leased.keys().collect::<Vec<_>>(), ["neighbour.test"]);
        // The neighbour refused while a is held: one limiter after all. Its own hold would
        // end near 4.7 s; it takes a's, to 10.3 s.
        f.complete(leased["neighbour.test"], &refused(3), t0 + secs(1.6));
        for at in [5.0, 8.0, 10.0] {
            assert_eq!(
                ready_hosts(&mut f, t0 + secs(at)),
                Vec::<String>::new(),
                "{at}s"
            );
        }
        // After a's hold both come back, paced as one group (one at a time).
        let (served, most) = served_between(&mut f, t0 + secs(10.5), t0 + secs(14.0));
        assert_eq!(served, ["a.shop.test", "neighbour.test"]);
        assert_eq!(most, 1);
        // For the rest of the crawl: a's next hold reaches the neighbour, which was not
        // refused.
        let a = loop {
            let leased = lease_all(&mut f, t0 + secs(20.0));
            let mut leased = leased.into_iter();
            let Some((host, lease)) = leased.next() else {
                panic!("nothing ready at 20 s");
            };
            if host == "a.shop.test" {
                break lease;
            }
            f.complete(lease, &ok(), t0 + secs(20.0));
            f.acknowledge(lease);
        };
        f.complete(a, &refused(10), t0 + secs(20.1));
        assert_eq!(ready_hosts(&mut f, t0 + secs(25.0)), Vec::<String>::new());
        let (served, _) = served_between(&mut f, t0 + secs(30.5), t0 + secs(40.0));
        assert_eq!(served, ["a.shop.test", "neighbour.test"]);
        // The record shows the shared holds, for the report.
        f.checkpoint(&crawler_core::Stats::default());
        drop(f);
        let lines: Vec<RecordLine> = std::fs::read_to_string(&path)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let _ = std::fs::remove_file(&path);
        let shared = lines
            .iter()
            .filter(|l| {
                matches!(l, RecordLine::Audit(a) if a.host == "neighbour.test"
                    && a.trigger == "limiter group"
                    && matches!(a.what, crate::politeness::What::Hold { .. }))
            })
            .count();
        assert_eq!(shared, 1, "the join's hold");
        // From the join on, the group is paced as one on the neighbour's machine (its
        // refusal pooled it): a's next refusal is that machine's own hold.
        let own = lines
            .iter()
            .filter(|l| {
                matches!(l, RecordLine::Audit(a) if a.host == "neighbour.test"
                    && a.trigger == "Retry-After"
                    && matches!(a.what, crate::politeness::What::Hold { .. }))
            })
            .count();
        assert_eq!(own, 2, "its own refusal's hold and a's next one");
    }

    #[tokio::test(start_paused = true)]
    async fn names_behind_one_limiter_split_its_ratelimit_quota() {
        let mut f = grouped(&Settings::default());
        let t0 = Instant::now();
        for host in ["a.shop.test", "b.shop.test", "apart.test"] {
            enqueue_pages(&mut f, host, 5, t0);
        }
        let leased = lease_all(&mut f, t0);
        // The same quota reading on a grouped name and on a name alone: 20 requests left
        // for 10 s.
        let reading = Feedback {
            rate_limit: Some(crawler_core::RateLimitReading {
                remaining: 20,
                reset: Some(secs(10.0)),
                limit: Some(30),
                window: None,
            }),
            ..ok()
        };
        // c.shop.test is of the same site but has not sent: the quota is not its.
        enqueue_pages(&mut f, "c.shop.test", 1, t0);
        let t1 = t0 + secs(0.1);
        f.complete(leased["a.shop.test"], &reading, t1);
        f.complete(leased["apart.test"], &reading, t1);
        f.complete(leased["b.shop.test"], &ok(), t1);
        let rate = |f: &Frontier, host: &str| f.hosts[f.host_ids[host]].throttle.rate();
        // Alone: (20 + 1) / 10 s. Two names that sent behind one gateway: half the quota
        // each; the idle third takes none of it.
        assert!(
            (rate(&f, "apart.test") - 2.1).abs() < 0.05,
            "{}",
            rate(&f, "apart.test")
        );
        assert!(
            (rate(&f, "a.shop.test") - 1.1).abs() < 0.05,
            "{}",
            rate(&f, "a.shop.test")
        );
    }

    #[tokio::test(start_paused = true)]
    async fn limiter_groups_off_leaves_each_name_alone() {
        let s = Settings {
            limiter_groups: false,
            ..Default::default()
        };
        let mut f = grouped(&s);
        let t0 = Instant::now();
        enqueue_pages(&mut f, "a.shop.test", 5, t0);
        enqueue_pages(&mut f, "b.shop.test", 5, t0);
        let leased = lease_all(&mut f, t0);
        let t1 = t0 + secs(0.1);
        f.complete(leased["a.shop.test"], &refused(10), t1);
        f.complete(leased["b.shop.test"], &ok(), t1);
        assert_eq!(ready_hosts(&mut f, t0 + secs(1.5)), ["b.shop.test"]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_slot_id_reused_after_a_prune_does_not_inherit_the_group() {
        let mut f = grouped(&Settings::default());
        let t0 = Instant::now();
        enqueue_pages(&mut f, "a.shop.test", 5, t0);
        enqueue_pages(&mut f, "b.shop.test", 1, t0);
        let b_id = f.host_ids["b.shop.test"];
        assert_eq!(ready_hosts(&mut f, t0), ["a.shop.test", "b.shop.test"]);
        // b is done and idle: its slot is dropped, and the next new host takes its id.
        let t1 = t0 + secs(6.0);
        let leased = lease_all(&mut f, t1);
        assert!(!f.host_ids.contains_key("b.shop.test"));
        enqueue_pages(&mut f, "apart.test", 1, t1);
        assert_eq!(f.host_ids["apart.test"], b_id);
        f.complete(leased["a.shop.test"], &refused(10), t1 + secs(0.1));
        assert_eq!(ready_hosts(&mut f, t1 + secs(0.2)), ["apart.test"]);
        // b seen again joins its group, held.
        enqueue_pages(&mut f, "b.shop.test", 1, t1 + secs(1.0));
        assert_eq!(ready_hosts(&mut f, t1 + secs(2.0)), Vec::<String>::new());
    }

    /// Four names of one site behind one nginx bucket without a burst (4 r/s, 429 with
    /// `Retry-After: 5`), default settings, 20 virtual minutes: once the first refusal
    /// reaches the group its names are paced as one slot, so together they take most of
    /// the bucket's rate with few refusals (four machines each climbing and probing against
    /// it refuse and hold each other over and over).
    #[tokio::test(start_paused = true)]
    async fn four_names_behind_one_bucket_are_paced_as_one_slot() {
        use crate::politeness::worlds::Limiter;
        let mut f = grouped(&Settings::default());
        let t0 = Instant::now();
        let names = ["a.shop.test", "b.shop.test", "c.shop.test", "d.shop.test"];
        for host in names {
            enqueue_pages(&mut f, host, 3_000, t0);
        }
        let mut limiter = Limiter::nginx(4.0, 1, true);
        let mut pending: Vec<(Instant, Lease, Feedback)> = Vec::new();
        let (end, half) = (t0 + secs(1_200.0), t0 + secs(600.0));
        let (mut now, mut refusals, mut late_ok) = (t0, 0u32, 0u32);
        let mut by_name: HashMap<String, u32> = HashMap::new();
        while now < end {
            let next_ready = loop {
                match f.next(now) {
                    Next::Ready(lease, r) => {
                        let ms = (now - t0).as_secs_f64() * 1e3;
                        let fb = if limiter.admit(ms).ok {
                            if now >= half {
                                late_ok += 1;
                                *by_name
                                    .entry(r.url.host_str().unwrap_or("").to_owned())
                                    .or_default() += 1;
                            }
                            ok()
                        } else {
                            refusals += 1;
                            refused(5)
                        };
                        pending.push((now + secs(0.03), lease, fb));
                    }
                    Next::NotBefore(at) => break Some(at),
                    _ => break None,
                }
            };
            let next_answer = pending.iter().map(|p| p.0).min();
            let next = match (next_ready, next_answer) {
                (Some(a), Some(b)) => a.min(b),
                (a, b) => a.or(b).unwrap_or(end),
            };
            now = next.max(now + Duration::from_millis(1));
            let (done, waiting): (Vec<_>, Vec<_>) = pending.into_iter().partition(|p| p.0 <= now);
            pending = waiting;
            for (at, lease, fb) in done {
                f.complete(lease, &fb, at);
                f.acknowledge(lease);
            }
        }
        let steady = f64::from(late_ok) / 600.0;
        assert!(steady >= 0.85 * 4.0, "{steady:.2} r/s, {refusals} refusals");
        assert!(refusals <= 20, "{refusals} refusals, {steady:.2} r/s");
        // The group's rate is shared among the names with work: none starves.
        for host in names {
            let n = by_name.get(host).copied().unwrap_or(0);
            assert!(
                f64::from(n) >= 0.1 * f64::from(late_ok),
                "{host}: {n} of {late_ok}"
            );
        }
    }

    /// Two names of one site, each behind an nginx bucket of its own (`api.` at 1 r/s,
    /// `img.` at 4 r/s, 429 with `Retry-After: 5`), default settings, an hour of virtual
    /// time (the last 20 minutes judged): the first refusal pools them (one site), but the
    /// pool's refusals keep falling on `api.` alone, so it leaves the pool with its part of
    /// the pace and `img.` probes up to its own limit. Pooled for good, one rate split
    /// equally held both near 1 r/s. No request goes inside a wait either limiter
    /// announced.
    #[tokio::test(start_paused = true)]
    async fn a_name_the_pooled_refusals_keep_falling_on_leaves_the_pool() {
        use crate::politeness::worlds::Limiter;
        let mut f = grouped(&Settings::default());
        let t0 = Instant::now();
        let names = ["api.shop.test", "img.shop.test"];
        for host in names {
            enqueue_pages(&mut f, host, 16_000, t0);
        }
        let mut limiters = [Limiter::nginx(1.0, 2, true), Limiter::nginx(4.0, 2, true)];
        let mut pending: Vec<(Instant, Lease, Feedback)> = Vec::new();
        let (end, half) = (t0 + secs(3_600.0), t0 + secs(2_400.0));
        let (mut now, mut refusals, mut inside) = (t0, 0u32, 0u32);
        let mut late_ok = [0u32; 2];
        // Until when each limiter asked to wait.
        let mut waits = [t0; 2];
        while now < end {
            let next_ready = loop {
                match f.next(now) {
                    Next::Ready(lease, r) => {
                        let i = usize::from(r.url.host_str() == Some(names[1]));
                        if now < waits[i] {
                            inside += 1;
                        }
                        let ms = (now - t0).as_secs_f64() * 1e3;
                        let fb = if limiters[i].admit(ms).ok {
                            if now >= half {
                                late_ok[i] += 1;
                            }
                            ok()
                        } else {
                            refusals += 1;
                            waits[i] = now + secs(0.03 + 5.0);
                            refused(5)
                        };
                        pending.push((now + secs(0.03), lease, fb));
                    }
                    Next::NotBefore(at) => break Some(at),
                    _ => break None,
                }
            };
            let next_answer = pending.iter().map(|p| p.0).min();
            let next = match (next_ready, next_answer) {
                (Some(a), Some(b)) => a.min(b),
                (a, b) => a.or(b).unwrap_or(end),
            };
            now = next.max(now + Duration::from_millis(1));
            let (done, waiting): (Vec<_>, Vec<_>) = pending.into_iter().partition(|p| p.0 <= now);
            pending = waiting;
            for (at, lease, fb) in done {
                f.complete(lease, &fb, at);
                f.acknowledge(lease);
            }
        }
        let api = f64::from(late_ok[0]) / 1_200.0;
        let img = f64::from(late_ok[1]) / 1_200.0;
        // The tight name left the pool and paces itself; the other paces what is left.
        let (a, b) = (f.host_ids[names[0]], f.host_ids[names[1]]);
        assert_eq!(f.groups.core.pacer(a), None);
        assert_eq!(f.groups.core.pacer(b), Some(b));
        assert_eq!(inside, 0, "requests inside the waits");
        assert!(
            img >= 0.75 * 4.0,
            "img. at {img:.2} r/s, api. at {api:.2} r/s, {refusals} refusals"
        );
        assert!(
            api >= 0.75 * 1.0,
            "api. at {api:.2} r/s, img. at {img:.2} r/s, {refusals} refusals"
        );
    }
}
