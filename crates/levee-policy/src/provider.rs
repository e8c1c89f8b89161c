//! One provider's shared state: breaker, throttle, allowance and in-flight cap.
//!
//! Every attempt to a provider, from any route, passes through its
//! [`ProviderState`]: [`ProviderState::admit`] before sending, and
//! [`ProviderState::finish`] with the classified result. Fallback attempts go
//! through the fallback provider's own state, so one vendor's incident cannot
//! become a flood on the second.

use crate::admission::Gcra;
use crate::breaker::{BreakerPermit, BreakerState, CircuitBreaker};
use crate::classify::Class;
use crate::time::Instant;
use std::time::Duration;

/// Why a provider would not take an attempt now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Breaker open until then.
    CircuitOpen { until: Instant },
    /// The provider said 429 with a wait; everyone waits until then.
    Throttled { until: Instant },
    /// The per-minute allowance would be exceeded; it conforms again then.
    RateLimited { until: Instant },
    /// `max_in_flight` reached.
    Shed,
}

/// What [`ProviderState::admit`] hands out; give it back to [`ProviderState::finish`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Permit {
    breaker: BreakerPermit,
}

/// Mutable state of one provider.
#[derive(Clone, Debug)]
pub struct ProviderState {
    breaker: CircuitBreaker,
    allowance: Option<Gcra>,
    max_in_flight: u32,
    in_flight: u32,
    throttled_until: Instant,
}

impl ProviderState {
    /// Builds from validated parts. `max_in_flight` 0 is read as 1.
    pub fn new(breaker: CircuitBreaker, allowance: Option<Gcra>, max_in_flight: u32) -> Self {
        ProviderState {
            breaker,
            allowance,
            max_in_flight: max_in_flight.max(1),
            in_flight: 0,
            throttled_until: Instant::ZERO,
        }
    }

    /// Whether an attempt would be admitted now, without taking anything.
    pub fn check(&self, now: Instant) -> Result<(), Refusal> {
        if let Some(until) = self.breaker.refusing_until(now) {
            return Err(Refusal::CircuitOpen { until });
        }
        if self.throttled_until > now {
            return Err(Refusal::Throttled {
                until: self.throttled_until,
            });
        }
        if self.in_flight >= self.max_in_flight {
            return Err(Refusal::Shed);
        }
        if let Some(g) = &self.allowance {
            g.peek(now)
                .map_err(|until| Refusal::RateLimited { until })?;
        }
        Ok(())
    }

    /// Takes an in-flight slot, one request of the allowance and the breaker's
    /// permission — all or nothing.
    pub fn admit(&mut self, now: Instant) -> Result<Permit, Refusal> {
        self.check(now)?;
        let breaker = self
            .breaker
            .admit(now)
            .map_err(|until| Refusal::CircuitOpen { until })?;
        if let Some(g) = &mut self.allowance {
            // Cannot fail after a successful peek at the same instant.
            if let Err(until) = g.check(now) {
                self.breaker.record(now, breaker, Class::NotProviderFault);
                return Err(Refusal::RateLimited { until });
            }
        }
        self.in_flight += 1;
        Ok(Permit { breaker })
    }

    /// Records an admitted attempt's result and frees its slot. A cancelled or
    /// abandoned attempt is finished with [`Class::NotProviderFault`].
    pub fn finish(&mut self, now: Instant, permit: Permit, class: Class) {
        self.in_flight = self.in_flight.saturating_sub(1);
        self.breaker.record(now, permit.breaker, class);
        if let Class::Throttled {
            wait: Some(wait), ..
        } = class
        {
            self.throttled_until = self.throttled_until.max(now + wait);
        }
    }

    /// Attempts in flight now.
    pub fn in_flight(&self) -> u32 {
        self.in_flight
    }

    /// The breaker's state at `now`.
    pub fn breaker_state(&self, now: Instant) -> BreakerState {
        self.breaker.state(now)
    }

    /// Until when a 429 asked everyone to wait (`None` if not now).
    pub fn throttled_until(&self, now: Instant) -> Option<Instant> {
        (self.throttled_until > now).then_some(self.throttled_until)
    }

    /// A generous default for tests and the no-config mock setup.
    pub fn unlimited() -> Self {
        ProviderState::new(CircuitBreaker::default_policy(), None, u32::MAX)
    }
}

impl Refusal {
    /// How long until the refusal lifts, if known.
    pub fn retry_after(self, now: Instant) -> Option<Duration> {
        match self {
            Refusal::CircuitOpen { until }
            | Refusal::Throttled { until }
            | Refusal::RateLimited { until } => Some(until.saturating_since(now)),
            Refusal::Shed => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn throttle_blocks_everyone_until_the_wait_is_over() {
        let mut p = ProviderState::unlimited();
        let t = Instant::from_millis(1000);
        let permit = p.admit(t).unwrap();
        p.finish(
            t,
            permit,
            Class::Throttled {
                retryable: true,
                wait: Some(Duration::from_secs(2)),
            },
        );
        assert_eq!(
            p.check(t + Duration::from_secs(1)),
            Err(Refusal::Throttled {
                until: t + Duration::from_secs(2)
            })
        );
        assert!(p.admit(t + Duration::from_secs(2)).is_ok());
    }

    #[test]
    fn in_flight_cap_sheds_and_finish_frees() {
        let mut p = ProviderState::new(CircuitBreaker::default_policy(), None, 1);
        let t = Instant::from_millis(1);
        let a = p.admit(t).unwrap();
        assert_eq!(p.admit(t), Err(Refusal::Shed));
        p.finish(t, a, Class::NotProviderFault);
        assert_eq!(p.in_flight(), 0);
        assert!(p.admit(t).is_ok());
    }

    #[test]
    fn allowance_is_spent_per_attempt() {
        let mut p = ProviderState::new(
            CircuitBreaker::default_policy(),
            Some(Gcra::per_minute(60, 2).unwrap()),
            100,
        );
        let t = Instant::from_millis(10_000);
        for _ in 0..2 {
            let permit = p.admit(t).unwrap();
            p.finish(t, permit, Class::Permanent);
        }
        assert!(matches!(p.admit(t), Err(Refusal::RateLimited { .. })));
    }
}
