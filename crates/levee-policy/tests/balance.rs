//! Balanced groups: the spread by weight, members that refuse left out, a
//! retry sent to another member, and the route's next entry after the group.

mod kit;
use kit::{secs, status, World, OK};
use levee_policy::planner::balance::{Group, Strategy};
use levee_policy::planner::{AttemptKind, Decision, RequestState, RoutePolicy};
use levee_policy::{Backoff, Classifier, Instant, ProviderState, RetryBudget};
use rand::rngs::SmallRng;
use rand::SeedableRng;

/// Targets 0 and 1 a group (weights `w0`, `w1`), target 2 the backup.
fn grouped(w0: f64, w1: f64, strategy: Strategy) -> RoutePolicy {
    RoutePolicy::new(
        &[secs(5), secs(5), secs(5)],
        3,
        Classifier::default(),
        Backoff::default(),
        true,
    )
    .unwrap()
    .with_groups(vec![Group {
        start: 0,
        weights: vec![w0, w1],
        strategy,
    }])
    .unwrap()
}

fn world() -> World {
    World::of(
        (0..3)
            .map(|_| ProviderState::new(levee_policy::CircuitBreaker::default_policy(), None, 2))
            .collect(),
        (0..3)
            .map(|_| RetryBudget::new(0.1, 100.0, secs(1)).unwrap())
            .collect(),
    )
}

/// The first dispatch of a fresh request at `now`.
fn first(
    p: &RoutePolicy,
    w: &mut World,
    now: Instant,
    rng: &mut SmallRng,
) -> (usize, AttemptKind, RequestState) {
    // A deadline long enough to wait a minute for a spent allowance.
    let mut req = RequestState::new(now + secs(600));
    match p.decide(&mut req, &mut w.deps(), now, rng) {
        Decision::Dispatch(d) => (d.target, d.kind, req),
        other => panic!("no dispatch: {other:?}"),
    }
}

#[test]
fn requests_spread_by_weight() {
    let p = grouped(2.0, 1.0, Strategy::WeightedRandom);
    let mut w = world();
    let mut rng = SmallRng::seed_from_u64(11);
    let mut counts = [0u32; 3];
    for i in 0..3000u64 {
        let now = Instant::from_millis(1_000_000 + i);
        let (t, kind, mut req) = first(&p, &mut w, now, &mut rng);
        assert_eq!(kind, AttemptKind::First);
        assert_eq!(req.target(), t);
        counts[t] += 1;
        p.record(&mut req, &mut w.deps(), now, OK);
    }
    assert_eq!(counts[2], 0, "the backup is not a member");
    let share = f64::from(counts[0]) / 3000.0;
    assert!((share - 2.0 / 3.0).abs() < 0.03, "{counts:?}");
}

#[test]
fn a_member_that_refuses_is_left_out() {
    for strategy in [Strategy::WeightedRandom, Strategy::LeastInFlight] {
        let p = grouped(1.0, 1.0, strategy);
        let mut w = world();
        let now = Instant::from_millis(1_000_000);
        // Member 0 is at its in-flight cap (2): it sheds.
        let _held = [
            w.providers[0].admit(now, "").unwrap(),
            w.providers[0].admit(now, "").unwrap(),
        ];
        let mut rng = SmallRng::seed_from_u64(5);
        for _ in 0..200 {
            let (t, kind, mut req) = first(&p, &mut w, now, &mut rng);
            assert_eq!((t, kind), (1, AttemptKind::First), "{strategy:?}");
            p.record(&mut req, &mut w.deps(), now, OK);
        }
    }
}

#[test]
fn a_member_whose_allowance_is_spent_is_left_out_not_waited_for() {
    // Member 0's allowance (four a minute, burst 1) is spent: a request that
    // started on it would wait for its next slot, which the deadline holds.
    for strategy in [Strategy::WeightedRandom, Strategy::LeastInFlight] {
        let p = grouped(1.0, 1.0, strategy);
        let mut w = world();
        let gcra = levee_policy::Gcra::per_minute(4, 1).unwrap();
        w.providers[0] = ProviderState::new(
            levee_policy::CircuitBreaker::default_policy(),
            Some(gcra),
            10,
        );
        let now = Instant::from_millis(1_000_000);
        let spent = w.providers[0].admit(now, "").unwrap();
        w.providers[0].finish(now, spent, levee_policy::Class::Success);
        let mut rng = SmallRng::seed_from_u64(5);
        for _ in 0..50 {
            let (t, kind, mut req) = first(&p, &mut w, now, &mut rng);
            assert_eq!((t, kind), (1, AttemptKind::First), "{strategy:?}");
            p.record(&mut req, &mut w.deps(), now, OK);
        }
    }
}

#[test]
fn least_in_flight_goes_to_the_quieter_member() {
    let p = grouped(1.0, 1.0, Strategy::LeastInFlight);
    let mut w = world();
    let now = Instant::from_millis(1_000_000);
    let _held = w.providers[1].admit(now, "").unwrap();
    let mut rng = SmallRng::seed_from_u64(5);
    for _ in 0..100 {
        let (t, _, mut req) = first(&p, &mut w, now, &mut rng);
        assert_eq!(t, 0);
        p.record(&mut req, &mut w.deps(), now, OK);
    }
}

#[test]
fn a_failure_goes_to_the_other_member_then_to_the_next_entry() {
    let p = grouped(1.0, 1.0, Strategy::WeightedRandom);
    let mut w = world();
    // Retry tokens to spare: a retry on the same member could be paid for,
    // and still the next attempt goes to the other member, as a fallback
    // (which spends none).
    let mut rng = SmallRng::seed_from_u64(9);
    let mut now = Instant::from_millis(1_000_000);
    let mut seen = vec![];
    let mut req = RequestState::new(now + secs(60));
    loop {
        match p.decide(&mut req, &mut w.deps(), now, &mut rng) {
            Decision::Dispatch(d) => {
                seen.push((d.target, d.kind));
                let answer = if d.target == 2 { OK } else { status(502, None) };
                p.record(&mut req, &mut w.deps(), now, answer);
                if d.target == 2 {
                    break;
                }
            }
            Decision::Wait { until } => now = until,
            Decision::Fail(f) => panic!("failed after {seen:?}: {f:?}"),
        }
    }
    let members: Vec<usize> = seen.iter().take(2).map(|s| s.0).collect();
    assert!(members == [0, 1] || members == [1, 0], "{seen:?}");
    assert_eq!(seen[1].1, AttemptKind::Fallback, "{seen:?}");
    assert_eq!(seen.last(), Some(&(2, AttemptKind::Fallback)), "{seen:?}");
}

#[test]
fn groups_are_checked() {
    let base = || {
        RoutePolicy::new(
            &[secs(5), secs(5)],
            3,
            Classifier::default(),
            Backoff::default(),
            true,
        )
        .unwrap()
    };
    let g = |start, weights: Vec<f64>| Group {
        start,
        weights,
        strategy: Strategy::WeightedRandom,
    };
    assert!(base().with_groups(vec![g(0, vec![])]).is_err());
    assert!(base().with_groups(vec![g(0, vec![1.0, 0.0])]).is_err());
    assert!(base().with_groups(vec![g(1, vec![1.0, 1.0])]).is_err());
    assert!(base().with_groups(vec![g(0, vec![1.0, 1.0])]).is_ok());
}

#[test]
fn a_member_found_unreachable_goes_behind_the_others_for_a_second() {
    let p = grouped(1.0, 1.0, Strategy::WeightedRandom);
    let mut w = world();
    let t0 = Instant::from_millis(1_000_000);
    let refused = w.providers[0].admit(t0, "").unwrap();
    let unreachable = levee_policy::Class::Fault {
        retryable: true,
        wait: None,
        provider_wide: true,
    };
    w.providers[0].finish(t0, refused, unreachable);
    let mut rng = SmallRng::seed_from_u64(5);
    let mut first_slots = [0u32; 2];
    for i in 0..100u64 {
        let now = Instant::from_millis(1_000_000 + i * 9);
        let (t, _, mut req) = first(&p, &mut w, now, &mut rng);
        first_slots[t] += 1;
        p.record(&mut req, &mut w.deps(), now, OK);
    }
    assert_eq!(first_slots, [0, 100], "within the second");
    let mut later = [0u32; 2];
    for i in 0..100u64 {
        let now = Instant::from_millis(1_001_000 + i);
        let (t, _, mut req) = first(&p, &mut w, now, &mut rng);
        later[t] += 1;
        p.record(&mut req, &mut w.deps(), now, OK);
    }
    assert!(later[0] > 30, "back in rotation after it: {later:?}");
}
