//! Incidents users meet, in the core on injected time: a 429 storm on one
//! model, short-deadline callers meeting overload answers, a stalled primary
//! with callers whose deadline is shorter than `expected_attempt_ms`.

mod kit;
use kit::{route, secs, status, World, OK};
use levee_policy::classify::Outcome;
use levee_policy::planner::{AttemptKind, Decision, Reason, RequestState, RoutePolicy};
use levee_policy::{BreakerState, CircuitBreaker, Instant, ProviderState, RetryBudget};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Duration;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// The default budget: 10 % of successes, 5 retries a second always.
fn budget() -> RetryBudget {
    RetryBudget::new(0.1, 5.0, secs(1)).unwrap()
}

#[derive(Default, Debug)]
struct Tally {
    calls: u32,
    ok: u32,
    attempts: u32,
    reasons: Vec<Reason>,
    by_target: [u32; 2],
}

/// Open-loop traffic: `rate` calls/s for `seconds`, each with `deadline`;
/// every attempt is answered `latency` later with `answer(target, rng)`.
fn run_open_loop(
    policy: &RoutePolicy,
    world: &mut World,
    rate: u64,
    seconds: u64,
    deadline: Duration,
    latency: Duration,
    answer: &mut dyn FnMut(usize, Instant, &mut SmallRng) -> Outcome,
) -> Tally {
    let mut rng = SmallRng::seed_from_u64(11);
    let start = Instant::from_millis(100_000);
    let n = rate * seconds;
    let mut reqs: Vec<RequestState> = (0..n)
        .map(|i| RequestState::new(start + ms(i * 1000 / rate) + deadline))
        .collect();
    // (time, request, answer due?) in time order.
    let mut events: BinaryHeap<Reverse<(Instant, u64, bool)>> = (0..n)
        .map(|i| Reverse((start + ms(i * 1000 / rate), i, false)))
        .collect();
    let mut tally = Tally {
        calls: u32::try_from(n).unwrap(),
        ..Tally::default()
    };
    let mut pending_target = vec![0usize; n as usize];
    while let Some(Reverse((now, i, answer_due))) = events.pop() {
        let req = &mut reqs[i as usize];
        if answer_due {
            let outcome = answer(pending_target[i as usize], now, &mut rng);
            policy.record(req, &mut world.deps(), now, outcome);
            if outcome == OK {
                tally.ok += 1;
                tally.by_target[pending_target[i as usize]] += 1;
                continue;
            }
        }
        match policy.decide(req, &mut world.deps(), now, &mut rng) {
            Decision::Dispatch(d) => {
                tally.attempts += 1;
                pending_target[i as usize] = d.target;
                events.push(Reverse((now + latency, i, true)));
            }
            Decision::Wait { until } => events.push(Reverse((until, i, false))),
            Decision::Fail(f) => tally.reasons.push(f.reason),
        }
    }
    tally
}

#[test]
fn a_429_storm_on_one_model_paces_it_instead_of_shutting_it_out() {
    // 60 % of requests answered 429 + `retry-after: 2` at random, 20
    // calls/s for 30 s, callers with 120 s, no backup. An SDK calling the
    // provider directly (3 attempts, honouring the wait) gets 1 − 0.6³ =
    // 78.4 % at 1.96 requests per call. A throttle that shut the model for
    // every 2 s wait let through 3.7 %. The route allows five attempts;
    // once its retries are seen winning (40 % succeed, faults that do not
    // follow load) the 429s are lost races and get all five: 1 − 0.6⁵ =
    // 92 % at 2.3 requests a call.
    let p = route(&[secs(20)], 5);
    let mut w = World::of(vec![ProviderState::unlimited()], vec![budget()]);
    let mut answer = |_t: usize, _now: Instant, rng: &mut SmallRng| {
        if rng.gen_bool(0.6) {
            status(429, Some(secs(2)))
        } else {
            OK
        }
    };
    let t = run_open_loop(&p, &mut w, 20, 30, secs(120), ms(200), &mut answer);
    let success = f64::from(t.ok) / f64::from(t.calls);
    let per_call = f64::from(t.attempts) / f64::from(t.calls);
    assert!(success >= 0.88, "success {success:.3}, {t:?}");
    assert!(per_call <= 2.4, "{per_call:.2} upstream requests per call");
}

#[test]
fn a_429_storm_with_a_backup_keeps_most_traffic_on_the_primary() {
    let p = route(&[secs(20), secs(20)], 3);
    let mut w = World::of(
        vec![ProviderState::unlimited(), ProviderState::unlimited()],
        vec![budget(), budget()],
    );
    let mut answer = |t: usize, _now: Instant, rng: &mut SmallRng| {
        if t == 0 && rng.gen_bool(0.6) {
            status(429, Some(secs(2)))
        } else {
            OK
        }
    };
    let t = run_open_loop(&p, &mut w, 20, 30, secs(120), ms(200), &mut answer);
    assert!(t.ok >= t.calls * 99 / 100, "{t:?}");
    assert!(
        t.by_target[0] > t.by_target[1],
        "most answers from the primary's vendor: {:?}",
        t.by_target
    );
}

#[test]
fn a_limit_enforced_by_the_provider_is_learned_and_paced() {
    // A provider that accepts 10 requests a second and answers the rest
    // 429 + `retry-after: 1`; 30 calls/s offered. Paced to what it
    // accepts, most attempts are answered, not refused.
    let p = route(&[secs(5)], 3);
    let mut w = World::of(vec![ProviderState::unlimited()], vec![budget()]);
    let mut window = (0u64, 0u32);
    let mut answer = |_t: usize, now: Instant, _rng: &mut SmallRng| {
        // The provider's own one-second window.
        let now_s = now.as_nanos() / 1_000_000_000;
        if window.0 != now_s {
            window = (now_s, 0);
        }
        window.1 += 1;
        if window.1 <= 10 {
            OK
        } else {
            status(429, Some(secs(1)))
        }
    };
    let t = run_open_loop(&p, &mut w, 30, 20, secs(60), ms(100), &mut answer);
    let refused = t.attempts - t.ok;
    assert!(
        refused * 2 < t.attempts,
        "{refused} of {} attempts refused: {t:?}",
        t.attempts
    );
}

/// Two targets; the primary's breaker opens at 50 % over 20 requests (or 20
/// faults in a row).
fn short_callers_world() -> World {
    World::of(
        vec![ProviderState::unlimited(), ProviderState::unlimited()],
        vec![budget(), budget()],
    )
}

#[test]
fn overload_answers_left_unretried_for_lack_of_time_do_not_open_the_breaker() {
    // Twenty callers with 1 s deadlines meet 503s (then 529s): a retry
    // needs 2 s, so none is retried. Then a caller with 30 s arrives at a
    // healthy provider: it must be sent, not refused `circuit_open`.
    for fault in [status(503, None), status(529, None)] {
        let p = route(&[secs(2)], 3);
        let mut w = short_callers_world();
        let mut rng = SmallRng::seed_from_u64(4);
        let now = Instant::from_millis(50_000);
        for _ in 0..40 {
            let mut req = RequestState::new(now + secs(1));
            let Decision::Dispatch(_) = p.decide(&mut req, &mut w.deps(), now, &mut rng) else {
                panic!("a first attempt is sent");
            };
            p.record(&mut req, &mut w.deps(), now, fault);
            let Decision::Fail(f) = p.decide(&mut req, &mut w.deps(), now, &mut rng) else {
                panic!("no retry fits in 1 s");
            };
            assert_eq!(f.reason, Reason::DeadlineExceeded);
        }
        assert_eq!(w.providers[0].breaker_state(now), BreakerState::Closed);
        let mut patient = RequestState::new(now + secs(30));
        let d = p.decide(&mut patient, &mut w.deps(), now, &mut rng);
        assert!(
            matches!(d, Decision::Dispatch(d) if d.target == 0),
            "{fault:?}: {d:?}"
        );
    }
}

#[test]
fn overload_answers_that_could_have_been_retried_still_open_it() {
    let p = route(&[secs(2)], 3);
    let mut w = short_callers_world();
    let mut rng = SmallRng::seed_from_u64(4);
    let now = Instant::from_millis(50_000);
    for _ in 0..40 {
        let mut req = RequestState::new(now + secs(30));
        if let Decision::Dispatch(_) = p.decide(&mut req, &mut w.deps(), now, &mut rng) {
            p.record(&mut req, &mut w.deps(), now, status(503, None));
        }
    }
    assert_eq!(w.providers[0].breaker_state(now), BreakerState::Open);
}

/// The example config's numbers: primary expected 20 s, backup 15 s; both
/// answered in ~100 ms for a minute before the incident.
fn learned_world(p: &RoutePolicy) -> (World, Instant) {
    let mut w = World::of(
        vec![
            ProviderState::new(CircuitBreaker::default_policy(), None, 1_000),
            ProviderState::unlimited(),
        ],
        vec![budget(), budget()],
    );
    let mut rng = SmallRng::seed_from_u64(5);
    let mut now = Instant::from_millis(10_000);
    for i in 0..600u64 {
        let target = (i % 2) as usize;
        let mut req = RequestState::new(now + secs(60));
        // The backup is reached by opening nothing: use a route of its own.
        let d = if target == 0 {
            p.decide(&mut req, &mut w.deps(), now, &mut rng)
        } else {
            let only_backup = route(&[secs(15)], 1);
            let mut backup = World {
                providers: std::mem::take(&mut w.providers),
                map: vec![1],
                budgets: std::mem::take(&mut w.budgets),
            };
            let d = only_backup.decide(&mut req, &mut backup.deps(), now, &mut rng);
            only_backup.record(&mut req, &mut backup.deps(), now + ms(100), OK);
            w.providers = backup.providers;
            w.budgets = backup.budgets;
            now = now + ms(100);
            assert!(matches!(d, Decision::Dispatch(_)));
            continue;
        };
        assert!(matches!(d, Decision::Dispatch(_)), "{d:?}");
        p.record(&mut req, &mut w.deps(), now + ms(100), OK);
        now = now + ms(100);
    }
    (w, now)
}

#[test]
fn a_stalled_primary_with_short_deadlines_reaches_the_backup_and_trips_its_breaker() {
    let p = route(&[secs(20), secs(15)], 3);
    let (mut w, mut now) = learned_world(&p);
    let mut rng = SmallRng::seed_from_u64(6);
    // An 8 s caller: the primary's attempt leaves the backup its learned
    // reserve (not the 15 s configured, which an 8 s deadline cannot hold),
    // and is stall evidence once past the primary's learned p99.
    let mut req = RequestState::new(now + secs(8));
    let Decision::Dispatch(d) = p.decide(&mut req, &mut w.deps(), now, &mut rng) else {
        panic!()
    };
    assert_eq!(d.target, 0);
    assert!(d.timeout < secs(8) - ms(150), "{:?}", d.timeout);
    let stall = d.stall_after.expect("a learned p99");
    assert!(stall <= ms(250), "twice the learned p99: {stall:?}");
    // The primary stalls: the attempt times out, and the backup answers.
    now = now + d.timeout;
    p.record(&mut req, &mut w.deps(), now, Outcome::Timeout);
    let Decision::Dispatch(f) = p.decide(&mut req, &mut w.deps(), now, &mut rng) else {
        panic!("the backup fits in what is left")
    };
    assert_eq!((f.target, f.kind), (1, AttemptKind::Fallback));
    p.record(&mut req, &mut w.deps(), now + ms(100), OK);

    // Ten calls a second; each primary attempt stalls, reported past the p99.
    let mut opened_after = None;
    for i in 0..100u64 {
        let at = now + ms(i * 100);
        let mut req = RequestState::new(at + secs(8));
        match p.decide(&mut req, &mut w.deps(), at, &mut rng) {
            Decision::Dispatch(d) if d.target == 0 => {
                p.stalled(&mut req, &mut w.deps(), at + d.stall_after.unwrap());
                p.abandon(&mut req, &mut w.deps(), at + d.timeout);
            }
            Decision::Dispatch(d) => {
                assert_eq!(d.kind, AttemptKind::First, "rerouted first attempt");
                opened_after.get_or_insert(i);
                p.record(&mut req, &mut w.deps(), at + ms(100), OK);
            }
            other => panic!("{other:?}"),
        }
    }
    let opened_after = opened_after.expect("the breaker opened");
    assert!(opened_after <= 25, "opened after {opened_after} calls");
}

#[test]
fn a_first_attempt_reaches_a_backup_whose_configured_attempt_is_longer_than_the_deadline() {
    // The primary's breaker is open; the backup has never been used, so only
    // its configured 15 s is known. An 8 s caller is still sent to it.
    let p = route(&[secs(20), secs(15)], 3);
    let mut w = short_callers_world();
    let mut rng = SmallRng::seed_from_u64(8);
    let now = Instant::from_millis(50_000);
    for _ in 0..20 {
        let mut req = RequestState::new(now + secs(60));
        if let Decision::Dispatch(_) = p.decide(&mut req, &mut w.deps(), now, &mut rng) {
            p.record(&mut req, &mut w.deps(), now, Outcome::ConnectError);
        }
    }
    let mut req = RequestState::new(now + secs(8));
    let d = p.decide(&mut req, &mut w.deps(), now, &mut rng);
    assert!(
        matches!(d, Decision::Dispatch(d) if d.target == 1 && d.kind == AttemptKind::First),
        "{d:?}"
    );
}

#[test]
fn a_fast_overload_answer_reaches_a_backup_longer_than_the_deadline() {
    // Anthropic SDK with `timeout=10`, the example config (primary 20 s,
    // backup 15 s, nothing learned yet), a 529 in 50 ms: no retry fits,
    // and the backup is asked with nearly the whole 10 s left.
    let p = route(&[secs(20), secs(15)], 3);
    let mut w = short_callers_world();
    let mut rng = SmallRng::seed_from_u64(12);
    let now = Instant::from_millis(50_000);
    let mut req = RequestState::new(now + secs(10));
    let Decision::Dispatch(d) = p.decide(&mut req, &mut w.deps(), now, &mut rng) else {
        panic!()
    };
    assert_eq!(d.target, 0);
    let back = now + ms(50);
    p.record(&mut req, &mut w.deps(), back, status(529, None));
    let d = p.decide(&mut req, &mut w.deps(), back, &mut rng);
    assert!(
        matches!(d, Decision::Dispatch(d) if d.target == 1 && d.kind == AttemptKind::Fallback),
        "{d:?}"
    );
    // After a slow failure (6 s of the 10 gone) the backup's 15 s rule stands.
    let mut req = RequestState::new(now + secs(10));
    let Decision::Dispatch(_) = p.decide(&mut req, &mut w.deps(), now, &mut rng) else {
        panic!()
    };
    let late = now + secs(6);
    p.record(&mut req, &mut w.deps(), late, status(529, None));
    assert!(matches!(
        p.decide(&mut req, &mut w.deps(), late, &mut rng),
        Decision::Fail(_)
    ));
}

#[test]
fn a_fast_providers_late_heads_are_not_stall_evidence_before_the_floor() {
    // A provider that answers in 2 ms: its learned p99 is milliseconds,
    // and a head a few milliseconds late (the gateway's own CPUs busy) is
    // no stall. The mark stays at the floor.
    let p = route(&[secs(20)], 3);
    let mut w = World::of(
        vec![ProviderState::new(
            CircuitBreaker::default_policy(),
            None,
            1_000,
        )],
        vec![budget()],
    );
    let mut rng = SmallRng::seed_from_u64(7);
    let mut now = Instant::from_millis(10_000);
    for _ in 0..200u64 {
        let mut req = RequestState::new(now + secs(30));
        let Decision::Dispatch(_) = p.decide(&mut req, &mut w.deps(), now, &mut rng) else {
            panic!("a healthy target takes the attempt")
        };
        p.record(&mut req, &mut w.deps(), now + ms(2), OK);
        now = now + ms(5);
    }
    let mut req = RequestState::new(now + secs(30));
    let Decision::Dispatch(d) = p.decide(&mut req, &mut w.deps(), now, &mut rng) else {
        panic!("a healthy target takes the attempt")
    };
    let stall = d.stall_after.expect("a learned p99");
    assert_eq!(stall, levee_policy::planner::STALL_FLOOR, "{stall:?}");
}
