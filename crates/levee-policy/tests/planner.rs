//! The planner's rules, pinned to the seeds' arithmetic.

mod kit;
use kit::{route, secs, status, World};
use levee_policy::backoff::{Backoff, Jitter};
use levee_policy::classify::{Classifier, Outcome, RetryOn};
use levee_policy::planner::{
    AttemptKind, Decision, Dependencies, Deps, Dispatch, PrimaryRefusal, Reason, RequestState,
    RoutePolicy,
};
use levee_policy::{
    BreakerState, CircuitBreaker, Class, Instant, Permit, ProviderState, Refusal, RetryBudget,
};
use proptest::prelude::*;
use rand::rngs::SmallRng;
use rand::SeedableRng;
use std::time::Duration;

impl World {
    /// Unlimited providers, one per target, and generous budgets.
    fn new(targets: usize) -> Self {
        World::of(
            (0..targets).map(|_| ProviderState::unlimited()).collect(),
            (0..targets)
                .map(|_| RetryBudget::new(0.1, 100.0, secs(1)).unwrap())
                .collect(),
        )
    }
}

/// A deadline-census route: 429 retried, waits 7 s then 11 s, primary 35 s, backup 30 s.
fn seed_004() -> RoutePolicy {
    RoutePolicy::new(
        &[secs(35), secs(30)],
        3,
        Classifier::new(&[RetryOn::Status(429), RetryOn::Status(503)]),
        Backoff::schedule(&[7000, 11_000], Jitter::None).unwrap(),
        true,
    )
    .unwrap()
}

/// Runs a request whose attempts all come back at once with `outcome` until
/// the planner fails; returns (attempt kinds, failure).
fn drive(
    policy: &RoutePolicy,
    world: &mut World,
    deadline: Duration,
    outcome: Outcome,
) -> (Vec<(usize, AttemptKind)>, levee_policy::Failure) {
    let mut rng = SmallRng::seed_from_u64(7);
    let mut now = Instant::from_millis(1_000_000);
    let mut req = RequestState::new(now + deadline);
    let mut attempts = vec![];
    for _ in 0..100 {
        match policy.decide(&mut req, &mut world.deps(), now, &mut rng) {
            Decision::Dispatch(d) => {
                assert!(now + d.timeout <= req.deadline());
                attempts.push((d.target, d.kind));
                policy.record(&mut req, &mut world.deps(), now, outcome);
            }
            Decision::Wait { until } => now = until,
            Decision::Fail(f) => return (attempts, f),
        }
    }
    panic!("planner did not finish");
}

#[test]
fn seed_004_census_retry_needs_72_seconds_and_fallback_30() {
    let p = seed_004();
    let steps = p.schedule();
    assert_eq!(
        steps[1].needs_deadline,
        secs(72) + Duration::from_millis(50)
    );
    let rows: Vec<(bool, Option<bool>)> = [100, 200, 40, 22]
        .iter()
        .map(|&d| {
            let r = p.census(secs(d));
            (r.retry_can_start, r.fallback_reachable)
        })
        .collect();
    assert_eq!(
        rows,
        [
            (true, Some(true)),
            (true, Some(true)),
            (false, Some(true)),
            (false, Some(false))
        ]
    );
    assert!(p.census(secs(22)).shorter_than_expected_attempt);
}

#[test]
fn seed_004_callers_live_the_census_under_refusals() {
    let p = seed_004();
    let ra = Some(secs(1));
    // 100 s: after an overload answer (this route retries only 429 and
    // 503) the backup is asked at once, whatever the deadline; a retry on
    // the primary is for when its retries are proven winning.
    let (a, _) = drive(&p, &mut World::new(2), secs(100), status(429, ra));
    assert_eq!(
        a[..2],
        [(0, AttemptKind::First), (1, AttemptKind::Fallback)]
    );
    // With no backup to ask, the primary is retried.
    let (a, _) = drive(&p, &mut World::new(2), secs(100), status(503, None));
    assert!(a.contains(&(1, AttemptKind::Fallback)));
    // 40 s: no retry on the primary, straight to the backup (which may then
    // retry within its own schedule: 7 s + 30 s + margin fits in what is left).
    let (a, _) = drive(&p, &mut World::new(2), secs(40), status(429, ra));
    assert_eq!(
        a[..2],
        [(0, AttemptKind::First), (1, AttemptKind::Fallback)]
    );
    assert!(!a.contains(&(0, AttemptKind::Retry)));
    // 22 s: no retry; a refusal that came back at once left the whole 22 s,
    // so the backup is asked as a first attempt would be (its census row
    // says "not reachable": that is the promise after a slow failure).
    let (a, f) = drive(&p, &mut World::new(2), secs(22), status(429, ra));
    assert_eq!(a, [(0, AttemptKind::First), (1, AttemptKind::Fallback)]);
    assert_eq!(f.status, 429, "the provider's answer is passed on");
    assert_eq!(f.reason, Reason::DeadlineExceeded);
}

/// `decide` must dispatch: `what` says which attempt was expected.
fn dispatched(
    p: &RoutePolicy,
    req: &mut RequestState,
    w: &mut World,
    now: Instant,
    rng: &mut SmallRng,
    what: &str,
) -> Dispatch {
    match p.decide(req, &mut w.deps(), now, rng) {
        Decision::Dispatch(d) => d,
        other => panic!("{what}: {other:?}"),
    }
}

/// Two targets; the primary's breaker opens after 5 faults (50 %, 10 s window).
fn primary_opens_after_5_faults() -> World {
    let mut w = World::new(2);
    w.providers[0] = ProviderState::new(
        CircuitBreaker::new(0.5, secs(10), 5, secs(5), 1).unwrap(),
        None,
        100,
    );
    w
}

#[test]
fn seed_004_refusals_left_unretried_for_lack_of_time_do_not_move_the_breaker() {
    let p = seed_004();
    let mut w = primary_opens_after_5_faults();
    for _ in 0..50 {
        drive(&p, &mut w, secs(22), status(429, Some(secs(1))));
        w.providers[0] = w.providers[0].clone();
    }
    assert_eq!(
        w.providers[0].breaker_state(Instant::from_millis(1_000_000)),
        BreakerState::Closed
    );
}

#[test]
fn stalls_cut_short_by_callers_deadlines_do_not_open_the_breaker() {
    // The primary stalls; every caller has 22 s, less than the primary's
    // 35 s expected attempt, so each attempt is cut by the deadline and times
    // out. Fifty of them, with a breaker that opens after 5 faults: it must
    // stay closed for the patient callers behind them.
    let p = seed_004();
    let mut w = primary_opens_after_5_faults();
    for _ in 0..50 {
        let (a, f) = drive(&p, &mut w, secs(22), Outcome::Timeout);
        assert_eq!(a, [(0, AttemptKind::First)]);
        assert_eq!((f.status, f.reason), (504, Reason::DeadlineExceeded));
    }
    let now = Instant::from_millis(1_000_000);
    assert_eq!(w.providers[0].breaker_state(now), BreakerState::Closed);
    // A patient caller's own stall (not cut: 100 s covers 35 s) does count.
    for _ in 0..5 {
        drive(&p, &mut w, secs(100), Outcome::Timeout);
    }
    assert_eq!(w.providers[0].breaker_state(now), BreakerState::Open);
}

#[test]
fn a_stalled_primary_leaves_the_backup_its_reserve() {
    // Primary expected 8 s, backup 2 s; the caller has 6 s. The primary's
    // attempt may run only until the backup's 2 s + margin are left.
    let p = route(&[secs(8), secs(2)], 3);
    let mut w = World::new(2);
    let mut rng = SmallRng::seed_from_u64(1);
    let t0 = Instant::from_millis(50_000);
    let mut req = RequestState::new(t0 + secs(6));
    let d = dispatched(
        &p,
        &mut req,
        &mut w,
        t0,
        &mut rng,
        "first attempt must start",
    );
    let margin = Duration::from_millis(50);
    assert_eq!(d.timeout, secs(6) - margin - (secs(2) + margin));
    let t1 = t0 + d.timeout;
    p.record(&mut req, &mut w.deps(), t1, Outcome::Timeout);
    let f = dispatched(
        &p,
        &mut req,
        &mut w,
        t1,
        &mut rng,
        "the backup must be asked",
    );
    assert_eq!((f.target, f.kind), (1, AttemptKind::Fallback));
    assert!(f.timeout >= secs(2));
    // With a route attempt timeout, the stall is given up on sooner.
    let p = p.with_attempt_timeout(Some(secs(1)));
    let mut req = RequestState::new(t0 + secs(6));
    let Decision::Dispatch(d) = p.decide(&mut req, &mut World::new(2).deps(), t0, &mut rng) else {
        panic!("first attempt must start");
    };
    assert_eq!(d.timeout, secs(1));
}

#[test]
fn a_dead_primary_with_a_healthy_backup_answers_everyone() {
    // The primary answers 503 to everything, the backup is fine; the budget
    // is the default (10 % + 5/s), and fallbacks must not depend on it.
    let p = route(&[secs(2), secs(2)], 3);
    let mut w = World::new(2);
    for b in &mut w.budgets {
        *b = RetryBudget::new(0.1, 5.0, secs(1)).unwrap();
    }
    // Before the primary's breaker opens (here: never), every request meets
    // the dead primary first and reaches the backup as a fallback.
    w.providers[0] = ProviderState::new(
        CircuitBreaker::new(0.5, secs(10), 1_000_000, secs(5), 1).unwrap(),
        None,
        10_000,
    );
    let mut rng = SmallRng::seed_from_u64(3);
    let mut ok = 0;
    for i in 0..1000u64 {
        let t0 = Instant::from_millis(1_000_000 + i * 10);
        let mut now = t0;
        let mut req = RequestState::new(t0 + secs(30));
        loop {
            match p.decide(&mut req, &mut w.deps(), now, &mut rng) {
                Decision::Dispatch(d) => {
                    let o = if d.target == 0 {
                        status(503, None)
                    } else {
                        status(200, None)
                    };
                    if p.record(&mut req, &mut w.deps(), now, o) == levee_policy::Class::Success {
                        ok += 1;
                        break;
                    }
                }
                Decision::Wait { until } => now = until,
                Decision::Fail(_) => break,
            }
        }
    }
    assert!(ok >= 990, "{ok}/1000 answered");
}

#[test]
fn a_retry_after_over_the_cap_is_not_waited_on_and_holds_the_provider_only_for_the_cap() {
    let p = route(&[secs(2)], 3).with_retry_after_cap(secs(60));
    let mut w = World::new(1);
    let (a, f) = drive(&p, &mut w, secs(120), status(429, Some(secs(86_400))));
    assert_eq!(a.len(), 1, "a day's wait is not waited on");
    assert_eq!(f.reason, Reason::RateLimited);
    assert_eq!(
        f.retry_after,
        Some(secs(60)),
        "the caller hears the capped hold"
    );
    // The model is paced, never shut: a request a second later is sent.
    let start = Instant::from_millis(1_000_000);
    assert_eq!(w.providers[0].check(start + secs(1), ""), Ok(()));
}

#[test]
fn anthropic_overloaded_529_is_retried_by_default() {
    let p = route(&[secs(2)], 3);
    let (a, f) = drive(&p, &mut World::new(1), secs(30), status(529, None));
    assert_eq!(a.len(), 3);
    assert_eq!((f.status, f.reason), (529, Reason::UpstreamError));
}

/// Runs `n` requests at `rate`/s where each attempt fails with `fault` with
/// probability `p_fail`; returns the share answered.
fn brownout(policy: &RoutePolicy, fault: Outcome, p_fail: f64, caller_retry: bool) -> f64 {
    use rand::Rng;
    let mut w = World::new(1);
    w.budgets[0] = RetryBudget::new(0.1, 5.0, secs(1)).unwrap();
    let mut rng = SmallRng::seed_from_u64(11);
    let mut faults = SmallRng::seed_from_u64(12);
    let n = 9000u64;
    let mut ok = 0;
    for i in 0..n {
        let t0 = Instant::from_millis(1_000_000 + i * 1000 / 300);
        let mut now = t0;
        let mut req = RequestState::new(t0 + secs(30)).caller_retry(caller_retry);
        loop {
            match policy.decide(&mut req, &mut w.deps(), now, &mut rng) {
                Decision::Dispatch(_) => {
                    let o = if faults.gen_bool(p_fail) {
                        fault
                    } else {
                        status(200, None)
                    };
                    if policy.record(&mut req, &mut w.deps(), now, o)
                        == levee_policy::Class::Success
                    {
                        ok += 1;
                        break;
                    }
                }
                Decision::Wait { until } => now = until,
                Decision::Fail(_) => break,
            }
        }
    }
    ok as f64 / n as f64
}

#[test]
fn retries_that_work_fund_themselves_in_a_brownout() {
    // Answers come back at once and backoff is 1 ms, so the requests, run one
    // after the other, keep time moving forward.
    let quick = Backoff::exponential(1, 1.0, 1, Jitter::None).unwrap();
    let p = RoutePolicy::new(&[secs(2)], 3, Classifier::default(), quick, true).unwrap();
    // 300/s, 30 % transient 503s: three attempts give 1 − 0.3³ = 97.3 %.
    // (9,000 requests: 0.17 points of sampling noise, and the first second
    // has no refunds yet.)
    let share = brownout(&p, status(503, None), 0.3, false);
    assert!(share > 0.96, "{share}");
    // The same rate of answers that ask for a wait (a Retry-After) is not
    // refunded: the budget holds retries near 10 % of successes + 5/s.
    let overloaded = brownout(&p, status(503, Some(Duration::from_millis(1))), 0.3, false);
    assert!(overloaded < 0.85, "{overloaded}");
    // A 529 says "overloaded", but one that comes at random whatever the
    // load, with retries winning, is refunded like any transient fault.
    let random_529 = brownout(&p, status(529, None), 0.3, false);
    assert!(random_529 > 0.96, "{random_529}");
}

#[test]
fn a_callers_own_retry_spends_a_token() {
    let p = route(&[secs(2)], 1);
    let mut w = World::new(1);
    w.budgets[0] = RetryBudget::new(0.1, 2.0, secs(1)).unwrap();
    let mut rng = SmallRng::seed_from_u64(1);
    let now = Instant::from_millis(1_000_000);
    let mut sent = 0;
    for _ in 0..10 {
        let mut req = RequestState::new(now + secs(30)).caller_retry(true);
        match p.decide(&mut req, &mut w.deps(), now, &mut rng) {
            Decision::Dispatch(_) => {
                sent += 1;
                p.record(&mut req, &mut w.deps(), now, status(503, None));
            }
            Decision::Fail(f) => assert_eq!(f.reason, Reason::BudgetExhausted),
            Decision::Wait { .. } => panic!("no wait before a first attempt"),
        }
    }
    assert_eq!(sent, 2, "min_per_second 2 over a 1 s window");
}

#[test]
fn seed_000_attempt_timeout_is_cut_to_the_deadline_and_no_second_attempt_starts() {
    // 8 s caller deadline, a 30 s expected attempt.
    let p = route(&[secs(30)], 3);
    let mut w = World::new(1);
    let mut rng = SmallRng::seed_from_u64(1);
    let t0 = Instant::from_millis(50_000);
    let mut req = RequestState::new(t0 + secs(8));
    let d = dispatched(
        &p,
        &mut req,
        &mut w,
        t0,
        &mut rng,
        "first attempt must start",
    );
    assert_eq!(d.timeout, secs(8) - Duration::from_millis(50));
    // It times out at the deadline (minus margin): that is not a provider fault.
    let t1 = t0 + d.timeout;
    let class = p.record(&mut req, &mut w.deps(), t1, Outcome::Timeout);
    assert_eq!(class, levee_policy::Class::NotProviderFault);
    let Decision::Fail(f) = p.decide(&mut req, &mut w.deps(), t1, &mut rng) else {
        panic!("no second attempt can finish");
    };
    assert_eq!(f.reason, Reason::DeadlineExceeded);
    assert_eq!(f.status, 504);
    // Even a fast 503 at t=0 gets no retry: 8 s cannot hold a 30 s attempt.
    let (a, f) = drive(&p, &mut World::new(1), secs(8), status(503, None));
    assert_eq!(a.len(), 1);
    assert_eq!((f.status, f.reason), (503, Reason::DeadlineExceeded));
}

#[test]
fn deterministic_400_is_answered_after_one_attempt() {
    let p = route(&[secs(1)], 5);
    let (a, f) = drive(&p, &mut World::new(1), secs(30), status(400, None));
    assert_eq!(a.len(), 1);
    assert_eq!(
        (f.status, f.reason, f.upstream_status),
        (400, Reason::UpstreamError, true)
    );
}

#[test]
fn retry_after_longer_than_the_deadline_fails_now_instead_of_waiting() {
    let p = route(&[secs(1)], 3);
    let (a, f) = drive(
        &p,
        &mut World::new(1),
        secs(10),
        status(503, Some(secs(30))),
    );
    assert_eq!(a.len(), 1);
    assert_eq!(f.reason, Reason::DeadlineExceeded);
    assert_eq!(f.retry_after, Some(secs(30)));
}

/// The wait after a Retry-After: exactly what was asked on a route with no
/// jitter; with jitter, spread over up to the first backoff cap (or 250 ms)
/// beyond it, so that callers told "2 s" together do not come back in the
/// same millisecond.
#[test]
fn a_retry_after_is_spread_only_where_the_backoff_has_jitter() {
    let wait_for = |jitter: Jitter, seed: u64| {
        let p = RoutePolicy::new(
            &[secs(1)],
            2,
            Classifier::default(),
            Backoff::exponential(100, 2.0, 10_000, jitter).unwrap(),
            true,
        )
        .unwrap();
        let mut w = World::new(1);
        let mut rng = SmallRng::seed_from_u64(seed);
        let t0 = Instant::from_millis(10_000);
        let mut req = RequestState::new(t0 + secs(30));
        assert!(matches!(
            p.decide(&mut req, &mut w.deps(), t0, &mut rng),
            Decision::Dispatch(_)
        ));
        p.record(&mut req, &mut w.deps(), t0, status(503, Some(secs(2))));
        match p.decide(&mut req, &mut w.deps(), t0, &mut rng) {
            Decision::Wait { until } => until.saturating_since(t0),
            other => panic!("should wait: {other:?}"),
        }
    };
    for seed in 0..8 {
        assert_eq!(wait_for(Jitter::None, seed), secs(2), "seed {seed}");
    }
    let spread: Vec<Duration> = (0..8).map(|seed| wait_for(Jitter::Full, seed)).collect();
    assert!(
        spread
            .iter()
            .all(|w| *w >= secs(2) && *w <= secs(2) + Duration::from_millis(250)),
        "{spread:?}"
    );
    assert!(
        spread
            .iter()
            .any(|w| *w > secs(2) + Duration::from_millis(10)),
        "{spread:?}"
    );
}

#[test]
fn retry_after_is_honoured_when_it_fits() {
    let p = route(&[secs(1)], 2);
    let mut w = World::new(1);
    let mut rng = SmallRng::seed_from_u64(3);
    let t0 = Instant::from_millis(10_000);
    let mut req = RequestState::new(t0 + secs(30));
    assert!(matches!(
        p.decide(&mut req, &mut w.deps(), t0, &mut rng),
        Decision::Dispatch(_)
    ));
    p.record(&mut req, &mut w.deps(), t0, status(429, Some(secs(2))));
    let Decision::Wait { until } = p.decide(&mut req, &mut w.deps(), t0, &mut rng) else {
        panic!("should wait for the retry-after");
    };
    assert!(until >= t0 + secs(2) && until <= t0 + secs(2) + Duration::from_millis(250));
    // Asking early changes nothing.
    assert_eq!(
        p.decide(&mut req, &mut w.deps(), t0 + secs(1), &mut rng),
        Decision::Wait { until }
    );
    let d = dispatched(
        &p,
        &mut req,
        &mut w,
        until,
        &mut rng,
        "retry after the wait",
    );
    assert_eq!(d.kind, AttemptKind::Retry);
    assert_eq!(d.attempt, 2);
}

#[test]
fn no_retry_once_a_byte_reached_the_caller() {
    let p = route(&[secs(1)], 3);
    let mut w = World::new(1);
    let mut rng = SmallRng::seed_from_u64(3);
    let t0 = Instant::from_millis(10_000);
    let mut req = RequestState::new(t0 + secs(30));
    assert!(matches!(
        p.decide(&mut req, &mut w.deps(), t0, &mut rng),
        Decision::Dispatch(_)
    ));
    req.commit();
    p.record(&mut req, &mut w.deps(), t0, Outcome::ConnectError);
    assert!(matches!(
        p.decide(&mut req, &mut w.deps(), t0, &mut rng),
        Decision::Fail(_)
    ));
}

#[test]
fn an_exhausted_budget_stops_retries_and_says_so() {
    let p = route(&[secs(1)], 3);
    let mut w = World::new(1);
    w.budgets[0] = RetryBudget::new(0.1, 0.0, secs(1)).unwrap();
    let (a, f) = drive(&p, &mut w, secs(30), status(503, None));
    assert_eq!(a.len(), 1);
    assert_eq!((f.status, f.reason), (503, Reason::BudgetExhausted));
}

#[test]
fn an_open_breaker_reroutes_the_first_attempt_to_the_fallback() {
    let p = route(&[secs(1), secs(1)], 1);
    let mut w = World::new(2);
    w.providers[0] = ProviderState::new(
        CircuitBreaker::new(0.5, secs(10), 1, secs(5), 1).unwrap(),
        None,
        100,
    );
    let t = Instant::from_millis(1_000_000);
    let permit = w.providers[0].admit(t, "").unwrap();
    w.providers[0].finish(
        t,
        permit,
        levee_policy::Class::Fault {
            retryable: true,
            wait: None,
            provider_wide: false,
        },
    );
    let (a, _) = drive(&p, &mut w, secs(30), status(200, None));
    assert_eq!(a, [(1, AttemptKind::First)]);
    // With no fallback the caller hears circuit_open at once.
    let single = route(&[secs(1)], 1);
    let (a, f) = drive(&single, &mut w, secs(30), status(200, None));
    assert!(a.is_empty());
    assert_eq!((f.status, f.reason), (503, Reason::CircuitOpen));
    assert!(f.retry_after.is_some());
}

#[test]
fn shed_is_immediate_with_retry_after() {
    let p = route(&[secs(1)], 1);
    let mut w = World::new(1);
    w.providers[0] = ProviderState::new(CircuitBreaker::default_policy(), None, 1);
    let t = Instant::from_millis(1_000_000);
    let _held = w.providers[0].admit(t, "").unwrap();
    let (a, f) = drive(&p, &mut w, secs(30), status(200, None));
    assert!(a.is_empty());
    assert_eq!((f.status, f.reason), (503, Reason::Shed));
    assert_eq!(f.retry_after, Some(secs(1)));
}

#[test]
fn expired_on_arrival_makes_no_attempt() {
    let p = route(&[secs(1)], 3);
    let (a, f) = drive(&p, &mut World::new(1), Duration::ZERO, status(200, None));
    assert!(a.is_empty());
    assert_eq!((f.status, f.reason), (504, Reason::DeadlineExceeded));
}

proptest! {
    #[test]
    fn never_dispatches_an_attempt_whose_timeout_ends_after_the_deadline(
        seed in any::<u64>(),
        deadline_ms in 0u64..120_000,
        expected in proptest::collection::vec(1u64..40_000, 1..4),
        codes in proptest::collection::vec(prop_oneof![Just(200u16), Just(400), Just(429), Just(500), Just(502), Just(503), Just(0), Just(1)], 1..12),
        latency_ms in proptest::collection::vec(0u64..20_000, 1..12),
        ra in proptest::option::of(0u64..10_000),
    ) {
        let expected: Vec<Duration> = expected.into_iter().map(Duration::from_millis).collect();
        let p = RoutePolicy::new(&expected, 4, Classifier::default(), Backoff::default(), true).unwrap();
        let mut w = World::new(expected.len());
        let mut rng = SmallRng::seed_from_u64(seed);
        let mut now = Instant::from_millis(1_000_000);
        let mut req = RequestState::new(now + Duration::from_millis(deadline_ms));
        let mut i = 0;
        for _ in 0..200 {
            match p.decide(&mut req, &mut w.deps(), now, &mut rng) {
                Decision::Dispatch(d) => {
                    prop_assert!(now + d.timeout + p.margin() <= req.deadline());
                    let lat = Duration::from_millis(latency_ms[i % latency_ms.len()]).min(d.timeout);
                    now = now + lat;
                    let o = match codes[i % codes.len()] {
                        0 => Outcome::ConnectError,
                        1 => Outcome::Timeout,
                        s => status(s, ra.map(Duration::from_millis)),
                    };
                    i += 1;
                    p.record(&mut req, &mut w.deps(), now, o);
                }
                Decision::Wait { until } => { prop_assert!(until > now && until <= req.deadline()); now = until; }
                Decision::Fail(_) => break,
            }
        }
        prop_assert!(!req.has_in_flight());
    }
}

#[test]
fn a_first_attempt_past_a_refusing_primary_says_what_refused_it() {
    let p = route(&[secs(1), secs(1), secs(1)], 1);
    let mut w = World::new(3);
    w.providers[0] = ProviderState::new(
        CircuitBreaker::new(0.5, secs(10), 1, secs(5), 1).unwrap(),
        None,
        100,
    );
    let mut rng = SmallRng::seed_from_u64(5);
    let t = Instant::from_millis(1_000_000);
    let mut req = RequestState::new(t + secs(30));
    let d = dispatched(&p, &mut req, &mut w, t, &mut rng, "the primary");
    assert_eq!((d.target, d.primary_refused), (0, None));
    p.record(&mut req, &mut w.deps(), t, status(503, None));
    // Answered by the primary: the fallback is for its answer, not a refusal.
    let d = dispatched(&p, &mut req, &mut w, t, &mut rng, "the fallback");
    assert_eq!(
        (d.target, d.kind, d.primary_refused),
        (1, AttemptKind::Fallback, None)
    );
    p.record(&mut req, &mut w.deps(), t, status(200, None));
    // The primary's breaker is now open: the next request starts on the
    // backup and says why.
    let mut next = RequestState::new(t + secs(30));
    let d = dispatched(&p, &mut next, &mut w, t, &mut rng, "past the primary");
    assert_eq!(
        (d.target, d.kind, d.primary_refused),
        (1, AttemptKind::First, Some(PrimaryRefusal::CircuitOpen))
    );
    // Its own fallback follows the backup's answer.
    p.record(&mut next, &mut w.deps(), t, status(503, None));
    let d = dispatched(&p, &mut next, &mut w, t, &mut rng, "the third target");
    assert_eq!((d.target, d.primary_refused), (2, None));
    assert_eq!(PrimaryRefusal::CircuitOpen.as_str(), "circuit_open");
}

#[test]
fn a_dispatch_refused_by_a_shared_allowance_falls_back_or_fails_rate_limited() {
    let p = route(&[secs(1), secs(1)], 3);
    let mut w = World::new(2);
    let mut rng = SmallRng::seed_from_u64(3);
    let t0 = Instant::from_millis(10_000);
    let mut req = RequestState::new(t0 + secs(30));
    let d = dispatched(&p, &mut req, &mut w, t0, &mut rng, "a dispatch");
    assert_eq!(d.target, 0);
    p.refuse(
        &mut req,
        &mut w.deps(),
        t0,
        levee_policy::Refusal::RateLimited {
            until: t0 + secs(2),
        },
    );
    assert_eq!(req.attempts(), 0, "a refused dispatch is not an attempt");
    assert_eq!(w.providers[0].in_flight(), 0);
    let d = dispatched(&p, &mut req, &mut w, t0, &mut rng, "a dispatch");
    assert_eq!((d.target, d.kind, d.attempt), (1, AttemptKind::Fallback, 1));
    assert_eq!(d.primary_refused, Some(PrimaryRefusal::RateLimited));
    p.refuse(
        &mut req,
        &mut w.deps(),
        t0,
        levee_policy::Refusal::RateLimited {
            until: t0 + secs(2),
        },
    );
    let Decision::Fail(f) = p.decide(&mut req, &mut w.deps(), t0, &mut rng) else {
        panic!()
    };
    assert_eq!((f.status, f.reason), (429, Reason::RateLimited));
    assert_eq!(f.retry_after, Some(secs(2)));
    // Until the refusal lifts, the model is paced, not shut: the next
    // request goes at the pace (at least one a second).
    let mut next = RequestState::new(t0 + secs(30));
    assert!(matches!(
        p.decide(&mut next, &mut w.deps(), t0 + secs(1), &mut rng),
        Decision::Dispatch(d) if d.target == 0
    ));
}

/// The wait before the retry of a 429 asking for 2 s, the provider having
/// reported `remaining` left of its requests with it (`None`: no fields).
fn wait_after_429(remaining: Option<u64>) -> Duration {
    use levee_policy::allowance::{Meter, Reported};
    let quick = Backoff::exponential(100, 2.0, 10_000, Jitter::Full).unwrap();
    let p = RoutePolicy::new(&[secs(2)], 3, Classifier::default(), quick, true).unwrap();
    let mut w = World::new(1);
    let mut rng = SmallRng::seed_from_u64(3);
    let now = Instant::from_millis(1_000_000);
    let mut req = RequestState::new(now + secs(60));
    assert!(matches!(
        p.decide(&mut req, &mut w.deps(), now, &mut rng),
        Decision::Dispatch(_)
    ));
    if let Some(remaining) = remaining {
        let r = Reported {
            limit: Some(600),
            remaining: Some(remaining),
        };
        w.providers[0].reported(now, Meter::Requests, r);
    }
    p.record(&mut req, &mut w.deps(), now, status(429, Some(secs(2))));
    match p.decide(&mut req, &mut w.deps(), now, &mut rng) {
        Decision::Wait { until } => until.saturating_since(now),
        Decision::Dispatch(_) => Duration::ZERO,
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_429_while_the_provider_says_it_has_room_is_a_lost_race() {
    // The provider's own fields on the 429 say 120 requests are left: not
    // the account's limit, so the retry backs off (the first step's 100 ms
    // at most) instead of waiting the 2 s asked.
    assert!(wait_after_429(Some(120)) <= Duration::from_millis(100));
    // At 0 left it is the limit: the 2 s are waited, and so they are when
    // the provider says nothing and there is no evidence of lost races.
    assert!(wait_after_429(Some(0)) >= secs(2));
    assert!(wait_after_429(None) >= secs(2));
}

/// A retry after a transient fault that finds the budget empty waits for a
/// token (rechecking every 100 ms) for up to a second from its first
/// refusal, instead of failing at once: the two tokens the floor allows
/// this second, spent by others, come back a second after they were.
#[test]
fn a_retry_waits_up_to_a_second_for_a_budget_token_then_goes() {
    let p = route(&[secs(1)], 2);
    let mut w = World::new(1);
    w.budgets[0] = RetryBudget::new(0.0, 2.0, secs(1)).unwrap();
    let t0 = Instant::from_millis(10_000);
    assert!(w.budgets[0].try_withdraw(t0) && w.budgets[0].try_withdraw(t0));
    let mut rng = SmallRng::seed_from_u64(5);
    let mut req = RequestState::new(t0 + secs(30));
    assert!(matches!(
        p.decide(&mut req, &mut w.deps(), t0, &mut rng),
        Decision::Dispatch(_)
    ));
    p.record(&mut req, &mut w.deps(), t0, status(503, None));
    let mut now = t0;
    let mut waits = 0;
    let retried_at = loop {
        match p.decide(&mut req, &mut w.deps(), now, &mut rng) {
            Decision::Wait { until } => {
                waits += 1;
                assert!(until > now, "waits move time on");
                now = until;
            }
            Decision::Dispatch(d) => {
                assert_eq!(d.kind, AttemptKind::Retry);
                break now;
            }
            Decision::Fail(f) => panic!(
                "failed at {:?} after {waits} waits: {f:?}",
                now.saturating_since(t0)
            ),
        }
        assert!(waits < 50, "never went");
    };
    let waited = retried_at.saturating_since(t0);
    assert!(
        waited >= Duration::from_millis(900) && waited <= secs(1),
        "{waited:?}"
    );
    assert!(waits >= 5, "rechecked the budget: {waits} waits");
}

/// The world's dependencies with a retry budget filled by hand (`tokens`),
/// no retry going free, and the tokens refunded to it counted.
struct HandBudget<'a> {
    world: Deps<'a>,
    tokens: u32,
    refunded: u32,
}

impl<'a> HandBudget<'a> {
    /// `world` with `tokens` in the budget and nothing refunded yet.
    fn holding(world: Deps<'a>, tokens: u32) -> Self {
        HandBudget {
            world,
            tokens,
            refunded: 0,
        }
    }
}

impl Dependencies for HandBudget<'_> {
    fn check(&self, t: usize, now: Instant) -> Result<(), Refusal> {
        self.world.check(t, now)
    }
    fn admit(&mut self, t: usize, now: Instant) -> Result<Permit, Refusal> {
        self.world.admit(t, now)
    }
    fn finish(&mut self, t: usize, now: Instant, permit: Permit, class: Class) -> Option<bool> {
        self.world.finish(t, now, permit, class)
    }
    fn withdraw(&mut self, _t: usize, _now: Instant) -> bool {
        let paid = self.tokens > 0;
        self.tokens = self.tokens.saturating_sub(1);
        paid
    }
    fn deposit(&mut self, t: usize, now: Instant) {
        self.world.deposit(t, now)
    }
    fn refund(&mut self, _t: usize, _now: Instant, tokens: u32) {
        self.refunded += tokens;
    }
    fn free_retry(&mut self, _t: usize, _now: Instant) -> bool {
        false
    }
    fn expected(&self, t: usize, now: Instant) -> Option<Duration> {
        self.world.expected(t, now)
    }
    fn winning(&self, t: usize, now: Instant) -> Option<bool> {
        self.world.winning(t, now)
    }
    fn headroom(&self, t: usize, now: Instant) -> Option<bool> {
        self.world.headroom(t, now)
    }
}

/// One target (1 s expected, three attempts) whose backoff is a fixed
/// millisecond: the waits a test sees are the budget's rechecks.
fn one_ms_backoff() -> RoutePolicy {
    let quick = Backoff::schedule(&[1], Jitter::None).unwrap();
    RoutePolicy::new(&[secs(1)], 3, Classifier::default(), quick, true).unwrap()
}

/// Asks `decide` from `now`, following its waits (`fill` may top the
/// budget up before each ask), until it dispatches or fails; returns that
/// decision and when it came.
fn until_sent_or_failed(
    p: &RoutePolicy,
    req: &mut RequestState,
    deps: &mut HandBudget<'_>,
    mut now: Instant,
    mut fill: impl FnMut(&mut HandBudget<'_>, Instant),
) -> (Decision, Instant) {
    let mut rng = SmallRng::seed_from_u64(9);
    for _ in 0..100 {
        fill(deps, now);
        match p.decide(req, deps, now, &mut rng) {
            Decision::Wait { until } => now = until,
            d => return (d, now),
        }
    }
    panic!("kept waiting");
}

/// A request with 30 s of deadline whose first attempt, sent at `t0`, was
/// answered 503: its retry is the next decision.
fn first_answered_503(p: &RoutePolicy, deps: &mut HandBudget<'_>, t0: Instant) -> RequestState {
    let mut req = RequestState::new(t0 + secs(30));
    let (first, _) = until_sent_or_failed(p, &mut req, deps, t0, |_, _| {});
    assert!(matches!(first, Decision::Dispatch(_)));
    p.record(&mut req, deps, t0, status(503, None));
    req
}

/// A retry that never gets a budget token gives up when its patience ends,
/// a second after the budget first refused it, not a recheck later.
#[test]
fn a_retry_that_never_gets_a_token_fails_when_its_second_is_up() {
    let p = one_ms_backoff();
    let mut w = World::new(1);
    let mut deps = HandBudget::holding(w.deps(), 0);
    let t0 = Instant::from_millis(10_000);
    let mut req = first_answered_503(&p, &mut deps, t0);
    let (end, at) = until_sent_or_failed(&p, &mut req, &mut deps, t0, |_, _| {});
    let Decision::Fail(f) = end else {
        panic!("{end:?}")
    };
    assert_eq!(f.reason, Reason::BudgetExhausted);
    assert_eq!(at, t0 + secs(1));
}

/// A request's patience for budget tokens runs from its first refusal: a
/// later retry that finds the budget empty with less than a recheck of it
/// left fails at once instead of waiting again.
#[test]
fn a_later_retry_keeps_the_patience_its_first_refusal_started() {
    let p = one_ms_backoff();
    let mut w = World::new(1);
    let mut deps = HandBudget::holding(w.deps(), 0);
    let t0 = Instant::from_millis(10_000);
    let mut req = first_answered_503(&p, &mut deps, t0);
    // One token comes in as the patience ends: the retry goes then.
    let patience_end = t0 + secs(1);
    let mut filled = false;
    let (retry, at) = until_sent_or_failed(&p, &mut req, &mut deps, t0, |d, now| {
        if now >= patience_end && !filled {
            d.tokens = 1;
            filled = true;
        }
    });
    assert!(matches!(retry, Decision::Dispatch(d) if d.kind == AttemptKind::Retry));
    assert_eq!(at, patience_end);
    // It fails too; the budget is empty again and the patience spent.
    p.record(&mut req, &mut deps, at, status(503, None));
    let mut rng = SmallRng::seed_from_u64(9);
    let Decision::Fail(f) = p.decide(&mut req, &mut deps, at, &mut rng) else {
        panic!("a retry with no patience left waited");
    };
    assert_eq!(f.reason, Reason::BudgetExhausted);
}

/// A retry after a transient fault that works refunds its token, whether
/// the budget paid for it at once or after it waited for a token.
#[test]
fn a_paid_retry_that_works_refunds_its_token() {
    for wait_for_token in [false, true] {
        let p = one_ms_backoff();
        let mut w = World::new(1);
        let mut deps = HandBudget::holding(w.deps(), u32::from(!wait_for_token));
        let t0 = Instant::from_millis(10_000);
        let mut req = RequestState::new(t0 + secs(30));
        let (first, _) = until_sent_or_failed(&p, &mut req, &mut deps, t0, |_, _| {});
        assert!(matches!(first, Decision::Dispatch(_)));
        p.record(&mut req, &mut deps, t0, status(503, None));
        let token_at = t0 + Duration::from_millis(500);
        let (retry, at) = until_sent_or_failed(&p, &mut req, &mut deps, t0, |d, now| {
            if wait_for_token && now == token_at {
                d.tokens = 1;
            }
        });
        assert!(
            matches!(retry, Decision::Dispatch(d) if d.kind == AttemptKind::Retry),
            "{retry:?}"
        );
        assert_eq!(at > t0 + Duration::from_millis(1), wait_for_token);
        assert_eq!(deps.tokens, 0, "the retry was paid for");
        p.record(&mut req, &mut deps, at, status(200, None));
        assert_eq!(deps.refunded, 1, "waited for its token: {wait_for_token}");
    }
}

/// A retry whose wait, expected attempt and margin add up to exactly the
/// time left is planned; a nanosecond less and it is not.
#[test]
fn a_retry_the_deadline_exactly_holds_is_planned() {
    let seven = Backoff::schedule(&[7000], Jitter::None).unwrap();
    let p = RoutePolicy::new(&[secs(2)], 3, Classifier::default(), seven, true).unwrap();
    let needed = secs(7) + secs(2) + p.margin();
    for (left, planned) in [(needed, true), (needed - Duration::from_nanos(1), false)] {
        let mut w = World::new(1);
        let mut rng = SmallRng::seed_from_u64(3);
        let t0 = Instant::from_millis(10_000);
        let mut req = RequestState::new(t0 + left);
        dispatched(&p, &mut req, &mut w, t0, &mut rng, "the first attempt");
        p.record(&mut req, &mut w.deps(), t0, status(503, None));
        match p.decide(&mut req, &mut w.deps(), t0, &mut rng) {
            Decision::Wait { until } => {
                assert!(planned, "{left:?} left");
                assert_eq!(until, t0 + secs(7));
                let d = dispatched(&p, &mut req, &mut w, until, &mut rng, "the retry");
                assert_eq!((d.kind, d.timeout), (AttemptKind::Retry, secs(2)));
            }
            Decision::Fail(f) => {
                assert!(!planned, "{left:?} left: {f:?}");
                assert_eq!(f.reason, Reason::DeadlineExceeded);
            }
            other => panic!("{other:?}"),
        }
    }
}

/// A Retry-After exactly at the route's cap is waited on; only a longer
/// one is not.
#[test]
fn a_retry_after_at_the_cap_is_waited_on() {
    let p = route(&[secs(1)], 2).with_retry_after_cap(secs(60));
    for (asked, waited) in [(secs(60), true), (secs(61), false)] {
        let mut w = World::new(1);
        let mut rng = SmallRng::seed_from_u64(3);
        let t0 = Instant::from_millis(10_000);
        let mut req = RequestState::new(t0 + secs(300));
        dispatched(&p, &mut req, &mut w, t0, &mut rng, "the first attempt");
        p.record(&mut req, &mut w.deps(), t0, status(429, Some(asked)));
        match p.decide(&mut req, &mut w.deps(), t0, &mut rng) {
            Decision::Wait { until } => {
                assert!(waited, "{asked:?}");
                assert!(until >= t0 + asked, "{until:?}");
            }
            Decision::Fail(f) => {
                assert!(!waited, "{asked:?}: {f:?}");
                assert_eq!(f.reason, Reason::RateLimited);
            }
            other => panic!("{other:?}"),
        }
    }
}
