//! A planner decision does not touch the heap.
//!
//! A counting global allocator (wrapping the system allocator) counts every
//! allocation made on the current thread. After a warm-up, thousands of
//! requests run through `decide`/`record` on a route with two targets whose
//! providers have a breaker, a per-minute allowance and an in-flight cap, and
//! whose targets have retry budgets: first attempts, retries (a `Wait`, then a
//! `Dispatch`), fallbacks, refusals and failures. The count must not move.
//!
//! Not a timing test: it counts, it does not measure.

#[path = "kit/counting.rs"]
mod counting;
mod kit;
use counting::{allocations, Counting};
use kit::{secs, status, World};
use levee_policy::planner::{AttemptKind, Decision, Reason, RequestState, RoutePolicy};
use levee_policy::{
    Backoff, CircuitBreaker, Class, Classifier, Gcra, Instant, Outcome, Permit, ProviderState,
    RetryBudget,
};
use rand::rngs::SmallRng;
use rand::SeedableRng;
use std::time::Duration;

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Two providers (breaker, allowance, in-flight cap) and two budgets, built
/// before the count starts.
impl World {
    fn new() -> Self {
        let provider = |min_requests| {
            ProviderState::new(
                CircuitBreaker::new(0.5, secs(10), min_requests, secs(5), 3).unwrap(),
                // Tight enough that the allowance refuses now and then.
                Some(Gcra::per_minute(60_000, 20).unwrap()),
                // Tight enough that the cap sheds now and then.
                4,
            )
        };
        let budget = || RetryBudget::new(0.1, 5.0, secs(1)).unwrap();
        // The fallback's breaker is slow to open, so its retries meet its
        // budget first.
        World::of(vec![provider(20), provider(400)], vec![budget(), budget()])
    }
}

/// What the planner did, to show every path was taken.
#[derive(Debug, Default)]
struct Seen {
    decisions: u64,
    first: u64,
    retry: u64,
    fallback: u64,
    wait: u64,
    success: u64,
    fail: u64,
    fail_reasons: [u64; Reason::ALL.len()],
}

/// The outcome of attempt `n` (0-based) of request `i` on `target`.
fn outcome(i: u64, n: u32, target: usize) -> Outcome {
    // Every 4,000 requests (12 s), the primary answers 503 to everyone for
    // 2,000 requests (6 s): its breaker opens, retries run out of budget,
    // traffic moves to the fallback, probes close the breaker again.
    // For the first 400 of those, the fallback fails too: its retries run
    // out of its own budget.
    let phase = i % 4000;
    if (1000..3000).contains(&phase) && (target == 0 || phase < 1400) {
        return status(503, None);
    }
    match (i % 40, n) {
        // A 503, then fine: one retry.
        (5, 0) => status(503, None),
        // The primary is down for this request: retries, then the fallback.
        (6, _) if target == 0 => status(502, None),
        // Deterministic 4xx: answered at once.
        (7, _) => status(400, None),
        // Throttled with a wait: everyone waits, then a retry.
        (8, 0) => status(429, Some(Duration::from_millis(300))),
        // Timeouts and connect errors all the way down.
        (9, n) if n % 2 == 0 => Outcome::Timeout,
        (9, _) => Outcome::ConnectError,
        // Failed after the first byte (committed below): no retry.
        (10, _) => Outcome::FailedAfterFirstByte,
        // The caller went away.
        (11, _) => Outcome::CallerCancelled,
        // Healthy.
        _ => status(200, None),
    }
}

/// Takes every in-flight slot of both providers (four each) by admitting
/// attempts directly; give them back with `finish`.
fn hold_every_slot(world: &mut World, now: Instant) -> [Option<(usize, Permit)>; 8] {
    let mut held = [None; 8];
    let mut k = 0;
    for p in 0..2 {
        while let Ok(permit) = world.providers[p].admit(now, "") {
            if k == held.len() {
                world.providers[p].finish(now, permit, Class::NotProviderFault);
                break;
            }
            held[k] = Some((p, permit));
            k += 1;
        }
    }
    held
}

/// Runs `requests` requests back to back from `*now`.
fn run(
    policy: &RoutePolicy,
    world: &mut World,
    rng: &mut SmallRng,
    now: &mut Instant,
    requests: std::ops::Range<u64>,
    seen: &mut Seen,
) {
    for i in requests {
        *now = *now + Duration::from_millis(3);
        // Every 25th caller has almost no time left: refused before any attempt.
        let deadline = if i % 25 == 24 {
            Duration::from_millis(40)
        } else {
            secs(30)
        };
        // Every 50th request arrives while slow attempts hold every slot of
        // both in-flight caps: it is shed. (Held by admitting directly: a
        // request asked to hold one may instead wait for a throttled
        // model's slot and hold nothing.)
        let held = match i % 50 == 20 {
            true => hold_every_slot(world, *now),
            false => [None; 8],
        };
        let mut req = RequestState::new(*now + deadline);
        let mut t = *now;
        let mut n = 0;
        loop {
            let d = policy.decide(&mut req, &mut world.deps(), t, rng);
            seen.decisions += 1;
            match d {
                Decision::Dispatch(d) => {
                    match d.kind {
                        AttemptKind::First => seen.first += 1,
                        AttemptKind::Retry => seen.retry += 1,
                        AttemptKind::Fallback => seen.fallback += 1,
                    }
                    t = t + Duration::from_millis(20);
                    if i % 40 == 10 {
                        req.commit();
                    }
                    if i % 97 == 0 && n == 0 {
                        // The driver drops the attempt: give the permit back.
                        policy.abandon(&mut req, &mut world.deps(), t);
                    } else {
                        let o = outcome(i, n, d.target);
                        if policy.record(&mut req, &mut world.deps(), t, o) == Class::Success {
                            seen.success += 1;
                            break;
                        }
                    }
                    n += 1;
                }
                Decision::Wait { until } => {
                    seen.wait += 1;
                    t = until;
                }
                Decision::Fail(f) => {
                    seen.fail += 1;
                    let r = Reason::ALL.iter().position(|&r| r == f.reason).unwrap();
                    seen.fail_reasons[r] += 1;
                    break;
                }
            }
            assert!(n < 100, "request {i} does not finish");
        }
        for (p, permit) in held.into_iter().flatten() {
            world.providers[p].finish(t, permit, Class::NotProviderFault);
        }
        *now = (*now).max(t);
    }
}

#[test]
fn a_planner_decision_makes_no_heap_allocation() {
    let policy = RoutePolicy::new(
        &[secs(10), secs(8)],
        3,
        Classifier::default(),
        Backoff::default(),
        true,
    )
    .unwrap();
    let mut world = World::new();
    let mut rng = SmallRng::seed_from_u64(2);
    let mut now = Instant::from_millis(1_000_000);

    let mut warm = Seen::default();
    run(&policy, &mut world, &mut rng, &mut now, 0..1000, &mut warm);

    let mut seen = Seen::default();
    let before = allocations();
    run(
        &policy,
        &mut world,
        &mut rng,
        &mut now,
        1000..11_000,
        &mut seen,
    );
    let allocated = allocations() - before;

    eprintln!("{seen:?}");
    assert_eq!(
        allocated, 0,
        "{allocated} heap allocations in {} decisions ({seen:?})",
        seen.decisions
    );
    // The run took every kind of path, so the zero above covers them all.
    assert!(seen.decisions > 10_000, "{seen:?}");
    assert!(
        seen.first > 0 && seen.retry > 0 && seen.fallback > 0,
        "{seen:?}"
    );
    assert!(
        seen.wait > 0 && seen.success > 0 && seen.fail > 0,
        "{seen:?}"
    );
    for reason in [
        Reason::DeadlineExceeded,
        Reason::UpstreamError,
        Reason::CircuitOpen,
        Reason::BudgetExhausted,
        Reason::Shed,
    ] {
        let r = Reason::ALL.iter().position(|&x| x == reason).unwrap();
        assert!(seen.fail_reasons[r] > 0, "no {reason:?} failure: {seen:?}");
    }
}

#[test]
fn the_counter_sees_an_allocation() {
    // The check above is only as good as the counter: prove it counts.
    let before = allocations();
    let v: Vec<u64> = std::hint::black_box(Vec::with_capacity(4));
    assert_eq!(allocations() - before, 1);
    drop(v);
}

#[test]
fn a_balanced_groups_decisions_make_no_heap_allocation() {
    // The same traffic on a route whose two targets are one balanced
    // group: each request orders the members for itself, on the stack.
    let policy = RoutePolicy::new(
        &[secs(10), secs(8)],
        3,
        Classifier::default(),
        Backoff::default(),
        true,
    )
    .unwrap()
    .with_groups(vec![levee_policy::planner::balance::Group {
        start: 0,
        weights: vec![2.0, 1.0],
        strategy: levee_policy::planner::balance::Strategy::WeightedRandom,
    }])
    .unwrap();
    let mut world = World::new();
    let mut rng = SmallRng::seed_from_u64(3);
    let mut now = Instant::from_millis(1_000_000);
    run(
        &policy,
        &mut world,
        &mut rng,
        &mut now,
        0..1000,
        &mut Seen::default(),
    );
    let mut seen = Seen::default();
    let before = allocations();
    run(
        &policy,
        &mut world,
        &mut rng,
        &mut now,
        1000..11_000,
        &mut seen,
    );
    let allocated = allocations() - before;
    assert_eq!(allocated, 0, "{allocated} heap allocations ({seen:?})");
    assert!(seen.decisions > 10_000 && seen.fallback > 0, "{seen:?}");
}
