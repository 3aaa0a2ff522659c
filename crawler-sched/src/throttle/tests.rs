use super::*;
use crawler_core::{RateLimitReading, ThrottleMode};

fn settings() -> Settings {
    Settings {
        start_rate: 10.0,
        max_rate: 20.0,
        concurrency_per_host: 4,
        ..Default::default()
    }
}

fn ok(latency_ms: u64) -> Feedback {
    Feedback {
        sent: true,
        status: Some(200),
        latency: Duration::from_millis(latency_ms),
        ..Default::default()
    }
}

fn status(code: u16, retry_after: Option<u64>) -> Feedback {
    Feedback {
        sent: true,
        status: Some(code),
        latency: Duration::from_millis(5),
        retry_after: retry_after.map(Duration::from_secs),
        ..Default::default()
    }
}

fn throttle(s: &Settings) -> Politeness {
    Politeness::new("h", Params::from_settings(s), Instant::now())
}

/// Send and answer `n` requests as fast as the throttle allows, with the clock paused.
async fn drive(t: &mut dyn Throttle, n: usize, fb: impl Fn() -> Feedback) -> Instant {
    for _ in 0..n {
        tokio::time::sleep_until(t.ready_at()).await;
        let now = Instant::now();
        t.on_send(now);
        t.on_feedback(&fb(), now);
    }
    Instant::now()
}

#[tokio::test(start_paused = true)]
async fn never_exceeds_max_rate() {
    let s = Settings {
        start_rate: 50.0,
        max_rate: 5.0,
        ..settings()
    };
    let mut t = throttle(&s);
    let start = Instant::now();
    let end = drive(&mut t, 51, || ok(1)).await;
    assert!(
        (end - start).as_secs_f64() >= 10.0 - 1e-3,
        "51 sends at 5/s need 10 s"
    );
    assert!((t.rate() - 5.0).abs() < 1e-6);
}

#[tokio::test(start_paused = true)]
async fn retry_after_on_any_status_holds_the_host_and_nothing_goes_out() {
    for code in [429, 503, 500, 301, 200] {
        let mut t = throttle(&settings());
        let now = Instant::now();
        t.on_send(now);
        assert_eq!(
            t.on_feedback(&status(code, Some(30)), now),
            Verdict::Continue
        );
        assert!(
            t.ready_at() >= now + Duration::from_secs(30),
            "{code}: a Retry-After of 30 s holds the host"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_refusal_without_retry_after_holds_by_growing_backoff_in_every_mode() {
    for mode in [
        ThrottleMode::Adaptive,
        ThrottleMode::Autothrottle,
        ThrottleMode::Fixed,
    ] {
        let s = Settings {
            throttle: mode,
            ..settings()
        };
        let mut t = throttle(&s);
        let mut waits = Vec::new();
        for _ in 0..4 {
            tokio::time::sleep_until(t.ready_at()).await;
            let now = Instant::now();
            t.on_send(now);
            t.on_feedback(&status(429, None), now);
            waits.push(t.ready_at() - now);
        }
        assert!(
            waits[0] >= Duration::from_secs(3),
            "{mode:?}: the first backoff is a real hold: {waits:?}"
        );
        assert!(
            waits[3] > waits[0] * 3,
            "{mode:?}: the backoff grows on repeats: {waits:?}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn retry_after_beyond_the_maximum_skips_the_host() {
    let s = Settings {
        max_retry_after: Duration::from_secs(60),
        ..settings()
    };
    let mut t = throttle(&s);
    let now = Instant::now();
    t.on_send(now);
    match t.on_feedback(&status(503, Some(3600)), now) {
        Verdict::Skip(why) => assert!(why.contains("max_retry_after"), "{why}"),
        v => panic!("expected a skip, got {v:?}"),
    }
    assert!(
        t.audit()
            .iter()
            .any(|a| matches!(a.what, What::Skip { .. }))
    );
}

fn reading(remaining: u64, reset: Option<u64>, window: Option<u64>) -> Feedback {
    Feedback {
        rate_limit: Some(RateLimitReading {
            remaining,
            reset: reset.map(Duration::from_secs),
            limit: Some(100),
            window: window.map(Duration::from_secs),
        }),
        ..ok(5)
    }
}

#[tokio::test(start_paused = true)]
async fn rate_limit_headers_steer_and_exhaustion_holds() {
    let mut t = throttle(&settings());
    let now = Instant::now();
    t.on_send(now);
    t.on_feedback(&reading(30, Some(10), None), now);
    // 30 left over a 10 s reset (at most 10 s), spread so that the last goes a gap
    // before the window turns: 31 gaps.
    assert!((t.rate() - 31.0 / 10.0).abs() < 1e-6, "{}", t.rate());
    // Silence after headers: hold the rate, never accelerate.
    t.on_send(now);
    t.on_feedback(&ok(5), now);
    assert!((t.rate() - 31.0 / 10.0).abs() < 1e-6);
    t.on_send(now);
    t.on_feedback(&reading(0, Some(7), None), now);
    assert!(t.ready_at() >= now + Duration::from_secs(7));
}

#[tokio::test(start_paused = true)]
async fn an_exhausted_quota_without_reset_holds_for_the_window_or_by_backoff() {
    let mut t = throttle(&settings());
    let now = Instant::now();
    t.on_send(now);
    t.on_feedback(&reading(0, None, Some(60)), now);
    assert!(
        t.ready_at() >= now + Duration::from_secs(60),
        "the policy window"
    );
    let mut t = throttle(&settings());
    t.on_send(now);
    t.on_feedback(&reading(0, None, None), now);
    assert!(
        t.ready_at() >= now + Duration::from_secs(3),
        "a backoff hold"
    );
}

#[tokio::test(start_paused = true)]
async fn a_rate_limit_header_never_erases_a_limit_learned_from_refusals() {
    let mut t = throttle(&Settings {
        start_rate: 1.0,
        ..settings()
    });
    // Refused after a steady run at ~4 r/s: the learned limit is about 4.
    let mut at = Instant::now();
    for _ in 0..200 {
        t.on_send(at);
        t.on_feedback(&ok(5), at);
        at += Duration::from_millis(250);
    }
    tokio::time::sleep_until(at).await;
    t.on_send(at);
    t.on_feedback(&status(429, Some(1)), at);
    let learned = t.rate();
    assert!(learned < 5.0, "{learned}");
    // A generous quota in headers: the stricter of the two wins, a margin under the pace
    // that was refused (4 r/s).
    let later = at + Duration::from_secs(2);
    t.on_send(later);
    t.on_feedback(&reading(1_000, Some(10), None), later);
    assert!(t.rate() <= 4.0 * 0.95 + 0.05, "{} > {learned}", t.rate());
    // Latency is still tracked on a steered host: a surge eases off.
    let before = t.rate();
    let mut at = later;
    for _ in 0..30 {
        at += Duration::from_millis(500);
        t.on_send(at);
        t.on_feedback(
            &Feedback {
                latency: Duration::from_millis(20),
                ..reading(1_000, Some(10), None)
            },
            at,
        );
    }
    for _ in 0..10 {
        at += Duration::from_secs(2);
        t.on_send(at);
        t.on_feedback(
            &Feedback {
                latency: Duration::from_millis(1_500),
                ..reading(1_000, Some(10), None)
            },
            at,
        );
    }
    assert!(t.rate() < before, "{} !< {before}", t.rate());
}

#[tokio::test(start_paused = true)]
async fn min_rate_never_exceeds_a_declared_budget() {
    let s = Settings {
        min_rate: 2.0,
        ..settings()
    };
    let mut t = throttle(&s);
    let now = Instant::now();
    t.on_send(now);
    // 5 requests left for 100 s: 0.05 r/s, well under min_rate.
    t.on_feedback(&reading(5, Some(100), None), now);
    assert!(t.rate() < 0.1, "{}", t.rate());
}

#[tokio::test(start_paused = true)]
async fn challenge_pages_pause_then_resume_slower() {
    let s = Settings {
        soft_block_pause: Duration::from_secs(120),
        ..settings()
    };
    let mut t = throttle(&s);
    let now = Instant::now();
    t.on_send(now);
    t.on_feedback(
        &Feedback {
            soft_block: true,
            ..status(403, None)
        },
        now,
    );
    assert!(t.ready_at() >= now + Duration::from_secs(120));
    assert!(
        (t.rate() - 2.5).abs() < 1e-6,
        "a quarter of 10: {}",
        t.rate()
    );
}

#[tokio::test(start_paused = true)]
async fn a_streak_of_403s_slows_then_skips() {
    let mut t = throttle(&settings());
    let mut skipped = None;
    for i in 0..40 {
        tokio::time::sleep_until(t.ready_at()).await;
        let now = Instant::now();
        t.on_send(now);
        if let Verdict::Skip(why) = t.on_feedback(&status(403, None), now) {
            skipped = Some((i, why));
            break;
        }
    }
    let (i, why) = skipped.expect("a hard block skips the host");
    assert_eq!(i + 1, 20, "{why}");
    assert!(why.contains("403"), "{why}");
    assert!(t.holds().0 >= 3, "slowed by holds before: {:?}", t.holds());
}

#[tokio::test(start_paused = true)]
async fn robots_outage_holds_then_skips_after_the_bound() {
    let mut t = throttle(&settings());
    let down = Feedback {
        sent: true,
        robots_unavailable: true,
        status: Some(503),
        ..Default::default()
    };
    let start = Instant::now();
    let mut sends = 0;
    let verdict = loop {
        tokio::time::sleep_until(t.ready_at()).await;
        let now = Instant::now();
        t.on_send(now);
        sends += 1;
        if let Verdict::Skip(why) = t.on_feedback(&down, now) {
            break why;
        }
    };
    let took = Instant::now() - start;
    assert!(verdict.contains("robots.txt"), "{verdict}");
    assert!(took >= Duration::from_secs(600), "{took:?}");
    assert!(sends < 20, "robots.txt retried by growing backoff: {sends}");
}

#[tokio::test(start_paused = true)]
async fn crawl_delay_is_a_floor_in_every_mode_and_burst_never_beats_it() {
    for mode in [
        ThrottleMode::Adaptive,
        ThrottleMode::Autothrottle,
        ThrottleMode::Fixed,
    ] {
        let s = Settings {
            throttle: mode,
            burst: 10,
            download_delay: Duration::from_millis(100),
            randomize_delay: true,
            ..settings()
        };
        let mut t = throttle(&s);
        let now = Instant::now();
        t.on_send(now);
        t.on_feedback(
            &Feedback {
                crawl_delay: Some(Duration::from_secs(2)),
                ..ok(5)
            },
            now,
        );
        let mut prev: Option<Instant> = None;
        for _ in 0..30 {
            tokio::time::sleep_until(t.ready_at()).await;
            let at = Instant::now();
            if let Some(p) = prev {
                assert!(
                    at - p >= Duration::from_secs(2),
                    "{mode:?}: a gap of {:?} under the Crawl-delay",
                    at - p
                );
            }
            prev = Some(at);
            t.on_send(at);
            t.on_feedback(&ok(5), at);
        }
    }
}

#[tokio::test(start_paused = true)]
async fn autothrottle_follows_latency_and_errors_only_raise() {
    let s = Settings {
        throttle: ThrottleMode::Autothrottle,
        start_rate: 1.0,
        ..settings()
    };
    let mut t = throttle(&s);
    let now = Instant::now();
    t.on_feedback(&ok(200), now);
    assert!((1.0 / t.rate() - 0.6).abs() < 1e-6, "(1s + 0.2s) / 2");
    t.on_feedback(
        &Feedback {
            latency: Duration::from_millis(10),
            ..status(500, None)
        },
        now,
    );
    assert!(
        (1.0 / t.rate() - 0.6).abs() < 1e-6,
        "a 500 cannot lower the delay"
    );
    t.on_feedback(&ok(10), now);
    assert!((1.0 / t.rate() - 0.305).abs() < 1e-6);
}

#[tokio::test(start_paused = true)]
async fn fixed_delay_is_randomised_within_half_to_one_and_a_half() {
    let s = Settings {
        throttle: ThrottleMode::Fixed,
        download_delay: Duration::from_secs(2),
        randomize_delay: true,
        concurrency_per_host: 1,
        ..Default::default()
    };
    let mut t = throttle(&s);
    let mut prev = t.ready_at();
    for _ in 0..200 {
        t.on_send(prev);
        let gap = t.ready_at() - prev;
        assert!(
            gap >= Duration::from_secs(1) && gap <= Duration::from_secs(3),
            "{gap:?}"
        );
        prev = t.ready_at();
    }
    // A robots refusal from cache costs no delay (the only request booked and unanswered:
    // with others booked after it, its slot may be theirs, see
    // `a_slot_given_back_is_never_handed_out_twice`).
    let mut t = throttle(&s);
    let before = t.ready_at();
    t.on_send(before);
    t.on_feedback(&Feedback::default(), before);
    assert_eq!(t.ready_at(), before);
}

#[tokio::test(start_paused = true)]
async fn the_calm_period_and_probing_state_survive_a_resume() {
    let s = Settings {
        start_rate: 1.0,
        ..settings()
    };
    let mut t = throttle(&s);
    let mut at = Instant::now();
    for _ in 0..100 {
        t.on_send(at);
        t.on_feedback(&ok(5), at);
        at += Duration::from_millis(300);
    }
    t.on_send(at);
    t.on_feedback(&status(429, Some(2)), at);
    let at = at + Duration::from_secs(60);
    tokio::time::sleep_until(at).await;
    let saved = t.save(at);
    let before = t.machine().state().clone();
    let mut back = throttle(&s);
    back.restore(&saved, at);
    let after = back.machine().state();
    assert_eq!(after.estimate, before.estimate);
    assert_eq!(after.phase, before.phase);
    assert_eq!(after.ceiling, before.ceiling);
    assert_eq!(after.probe_step, before.probe_step);
    assert_eq!(after.delivery.bins(), before.delivery.bins());
    // The calm period keeps counting from where it was.
    let calm_before = back.at(at) - after.calm_since;
    let calm_saved = t.at(at) - before.calm_since;
    assert!(
        (calm_before - calm_saved).abs() < 50.0,
        "{calm_before} vs {calm_saved}"
    );
    assert!((back.rate() - t.rate()).abs() < 1e-9);
}

/// An answer read late (the engine busy when it arrived) does not make its send look late:
/// the downloader's own reading of the departure dates it, and the next slot stays where it
/// was booked. Without that reading the send is dated as "read less latency", and a send
/// that looks late pushes the next slot back.
#[tokio::test(start_paused = true)]
async fn an_answer_read_late_is_dated_by_the_downloader() {
    /// One send at 2 r/s answered 20 ms later and read 200 ms after that: when the send
    /// started, the slot it booked for the next one, and the next slot after the answer.
    async fn read_late(dated: bool) -> (Instant, Instant, Instant) {
        let mut t = throttle(&Settings {
            start_rate: 2.0,
            ..settings()
        });
        let start = Instant::now();
        t.on_send(start);
        let slot = t.ready_at();
        tokio::time::sleep(Duration::from_millis(220)).await;
        let fb = Feedback {
            sent_at: dated.then_some(start),
            ..ok(20)
        };
        let _ = t.on_feedback(&fb, Instant::now());
        (start, slot, t.ready_at())
    }
    let (start, slot, next) = read_late(true).await;
    assert!(next <= slot, "{:?} after {:?}", next - start, slot - start);
    let (start, slot, next) = read_late(false).await;
    assert!(
        next >= slot + Duration::from_millis(150),
        "without the downloader's reading: {:?} (booked {:?})",
        next - start,
        slot - start
    );
}
