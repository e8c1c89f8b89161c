//! One planner decision, with the retry budget, the circuit breaker and both
//! limiters (in-flight cap and requests-per-minute GCRA) consulted.
//!
//! The world is a route with two targets (primary, fallback), each on its own
//! provider with a breaker, a per-minute allowance and an in-flight cap, and a
//! retry budget per target. Before measuring, one second of healthy traffic at
//! 1,000 requests/s fills the breaker buckets and the budget, so the numbers are
//! for a warm gateway, not an empty one. `census`/`schedule` (which build a
//! `Vec` for `levee check`) are not on the per-request path and not measured.
//!
//! Cases:
//! - `first_attempt/decide+record_200`: steady state on one shared world; a new
//!   request, `decide` → `Dispatch`, `record` a 200 (so in-flight stays at zero
//!   and the world does not grow); virtual time moves 100 µs per request.
//! - `first_attempt/decide`: `decide` alone on a fresh copy of the warm world.
//! - `retry_after_503/decide_wait`: the request's first attempt got a 503;
//!   `decide` draws the jittered backoff, checks the provider and withdraws a
//!   retry token → `Wait`.
//! - `retry_after_503/decide_dispatch`: the same request asks again when the
//!   wait is over → `Dispatch` of the retry (breaker, throttle, in-flight cap and
//!   GCRA consulted again through `admit`).
//!
//! The `decide`-alone cases use `iter_batched_ref`: each input (a copy of the
//! world and a request in the right state) is built outside the timed region.

#[path = "../tests/kit/mod.rs"]
mod kit;
use kit::{World, OK, UNAVAILABLE};

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use levee_policy::planner::{AttemptKind, Decision, RequestState, RoutePolicy};
use levee_policy::{
    Backoff, CircuitBreaker, Classifier, Gcra, Instant, ProviderState, RetryBudget,
};
use rand::rngs::SmallRng;
use rand::SeedableRng;
use std::hint::black_box;
use std::time::Duration;

const DEADLINE: Duration = Duration::from_secs(30);
/// Inputs per timed batch in the `decide`-alone cases: about 150 KB of world
/// copies, so a batch stays in L2 and the timer is read once per 128 decisions.
const BATCH: BatchSize = BatchSize::NumIterations(128);

impl World {
    fn new() -> Self {
        let provider = || {
            let breaker =
                CircuitBreaker::new(0.5, Duration::from_secs(10), 20, Duration::from_secs(5), 3)
                    .unwrap();
            // 6,000,000 requests/minute (100,000/s, one second of burst): admits
            // everything this benchmark sends, but is consulted on every attempt.
            let rpm = 6_000_000;
            let allowance = Gcra::per_minute(rpm, Gcra::default_burst(rpm)).unwrap();
            ProviderState::new(breaker, Some(allowance), 1024)
        };
        let budget = || RetryBudget::new(0.1, 5.0, Duration::from_secs(1)).unwrap();
        World::of(vec![provider(), provider()], vec![budget(), budget()])
    }
}

fn route() -> RoutePolicy {
    // Primary expected 10 s, fallback 8 s; 3 attempts per target; retry on
    // 429/502/503/504/connect_error/timeout; 250 ms × 2ⁿ up to 10 s, full jitter.
    RoutePolicy::new(
        &[Duration::from_secs(10), Duration::from_secs(8)],
        3,
        Classifier::default(),
        Backoff::default(),
        true,
    )
    .unwrap()
}

/// One second of healthy traffic at 1,000 requests/s; returns the time after it.
fn warm(policy: &RoutePolicy, world: &mut World, rng: &mut SmallRng) -> Instant {
    let mut now = Instant::from_millis(1_000_000);
    for _ in 0..1000 {
        let mut req = RequestState::new(now + DEADLINE);
        let d = policy.decide(&mut req, &mut world.deps(), now, rng);
        assert!(matches!(d, Decision::Dispatch(_)), "{d:?}");
        policy.record(&mut req, &mut world.deps(), now, OK);
        now = now + Duration::from_millis(1);
    }
    now
}

/// A request whose first attempt just came back 503.
fn after_503(
    policy: &RoutePolicy,
    world: &mut World,
    now: Instant,
    rng: &mut SmallRng,
) -> RequestState {
    let mut req = RequestState::new(now + DEADLINE);
    let d = policy.decide(&mut req, &mut world.deps(), now, rng);
    assert!(matches!(d, Decision::Dispatch(_)), "{d:?}");
    policy.record(&mut req, &mut world.deps(), now, UNAVAILABLE);
    req
}

fn bench(c: &mut Criterion) {
    let policy = route();
    let mut rng = SmallRng::seed_from_u64(42);
    let mut warm_world = World::new();
    let t0 = warm(&policy, &mut warm_world, &mut rng);
    check_cases(&policy, &warm_world, t0, &mut rng);
    first_attempt(c, &policy, &warm_world, t0, &mut rng);
    retry_after_503(c, &policy, &warm_world, t0, &mut rng);
}

/// Sanity, outside the timed region: each case makes the decision it claims to.
fn check_cases(policy: &RoutePolicy, warm_world: &World, t0: Instant, rng: &mut SmallRng) {
    {
        let mut w = warm_world.clone();
        let mut req = after_503(policy, &mut w, t0, rng);
        let Decision::Wait { until } = policy.decide(&mut req, &mut w.deps(), t0, rng) else {
            panic!("a retry after a 503 waits for its backoff");
        };
        let d = policy.decide(&mut req, &mut w.deps(), until, rng);
        assert!(
            matches!(d, Decision::Dispatch(x) if x.kind == AttemptKind::Retry && x.target == 0),
            "{d:?}"
        );
    }
}

fn first_attempt(
    c: &mut Criterion,
    policy: &RoutePolicy,
    warm_world: &World,
    t0: Instant,
    rng: &mut SmallRng,
) {
    let mut g = c.benchmark_group("first_attempt");
    {
        let mut w = warm_world.clone();
        let mut now = t0;
        let mut misses = 0u64;
        g.bench_function("decide+record_200", |b| {
            b.iter(|| {
                now = now + Duration::from_micros(100);
                let mut req = RequestState::new(now + DEADLINE);
                let d = policy.decide(&mut req, &mut w.deps(), now, rng);
                misses += u64::from(!matches!(d, Decision::Dispatch(_)));
                policy.record(&mut req, &mut w.deps(), now, OK);
                black_box(d)
            })
        });
        assert_eq!(misses, 0, "every first attempt was dispatched");
        assert_eq!(w.providers[0].in_flight(), 0);
    }
    {
        let mut misses = 0u64;
        g.bench_function("decide", |b| {
            b.iter_batched_ref(
                || (warm_world.clone(), RequestState::new(t0 + DEADLINE)),
                |(w, req)| {
                    let d = policy.decide(req, &mut w.deps(), t0, rng);
                    misses += u64::from(!matches!(d, Decision::Dispatch(_)));
                    d
                },
                BATCH,
            )
        });
        assert_eq!(misses, 0, "every first attempt was dispatched");
    }
    g.finish();
}

fn retry_after_503(
    c: &mut Criterion,
    policy: &RoutePolicy,
    warm_world: &World,
    t0: Instant,
    rng: &mut SmallRng,
) {
    let mut g = c.benchmark_group("retry_after_503");
    {
        let mut setup_rng = SmallRng::seed_from_u64(7);
        let mut misses = 0u64;
        g.bench_function("decide_wait", |b| {
            b.iter_batched_ref(
                || {
                    let mut w = warm_world.clone();
                    let req = after_503(policy, &mut w, t0, &mut setup_rng);
                    (w, req)
                },
                |(w, req)| {
                    let d = policy.decide(req, &mut w.deps(), t0, rng);
                    misses += u64::from(!matches!(d, Decision::Wait { .. }));
                    d
                },
                BATCH,
            )
        });
        assert_eq!(misses, 0, "every retry waited for its backoff");
    }
    {
        let mut setup_rng = SmallRng::seed_from_u64(8);
        let mut misses = 0u64;
        g.bench_function("decide_dispatch", |b| {
            b.iter_batched_ref(
                || {
                    let mut w = warm_world.clone();
                    let mut req = after_503(policy, &mut w, t0, &mut setup_rng);
                    let Decision::Wait { until } =
                        policy.decide(&mut req, &mut w.deps(), t0, &mut setup_rng)
                    else {
                        panic!("a retry after a 503 waits for its backoff");
                    };
                    (w, req, until)
                },
                |(w, req, until)| {
                    let d = policy.decide(req, &mut w.deps(), *until, rng);
                    misses += u64::from(
                        !matches!(d, Decision::Dispatch(x) if x.kind == AttemptKind::Retry),
                    );
                    d
                },
                BATCH,
            )
        });
        assert_eq!(misses, 0, "every retry was dispatched after its wait");
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
