//! The state every connection of one mock server shares: stats, the fault
//! set in force and its clock, the random draws, the tape, the kept
//! Responses answers and the clouds' issued tokens. The request path and
//! the `/_mock/` control plane both work on it.

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Instant;

use rand::rngs::SmallRng;
use rand::SeedableRng;

use crate::faults::{Decision, FaultSet};
use crate::stats::Collector;
use crate::stored::Stored;
use crate::tape::{Player, Tape};
use crate::{clock, platform, ratelimit, MockApi};

/// State shared by every connection of one mock server.
pub(crate) struct Shared {
    pub stats: Arc<Collector>,
    faults: RwLock<Arc<Active>>,
    pub(crate) rng: Mutex<SmallRng>,
    pub(crate) tape: Option<Player>,
    pub(crate) ids: AtomicU64,
    pub(crate) api: MockApi,
    /// The Responses answers kept for `GET /v1/responses/{id}` and the like.
    responses: Mutex<Stored>,
    /// What the clouds' faces keep (Vertex AI's issued tokens).
    pub(crate) clouds: platform::Clouds,
}

/// The fault set in force and when its clock started.
pub(crate) struct Active {
    pub(crate) set: FaultSet,
    epoch: Instant,
    /// The set's `rate_limit` buckets, full when it was installed.
    pub(crate) limiter: ratelimit::Limiter,
}

impl Shared {
    pub(crate) fn new(faults: FaultSet, seed: u64, tape: Option<Tape>, api: MockApi) -> Shared {
        let stats = Arc::new(Collector::default());
        Shared {
            clouds: platform::Clouds::new(Arc::clone(&stats)),
            stats,
            faults: RwLock::new(Arc::new(Active {
                limiter: ratelimit::Limiter::new(faults.rate_limit()),
                set: faults,
                epoch: clock::now(),
            })),
            rng: Mutex::new(SmallRng::seed_from_u64(seed)),
            tape: tape.map(Player::new),
            ids: AtomicU64::new(1),
            api,
            responses: Mutex::new(Stored::default()),
        }
    }

    /// Replaces the fault set and restarts its clock.
    pub(crate) fn set_faults(&self, set: FaultSet) {
        let active = Arc::new(Active {
            limiter: ratelimit::Limiter::new(set.rate_limit()),
            set,
            epoch: clock::now(),
        });
        *self.faults.write().unwrap_or_else(PoisonError::into_inner) = active;
    }

    pub(crate) fn responses(&self) -> std::sync::MutexGuard<'_, Stored> {
        self.responses
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn active(&self) -> Arc<Active> {
        Arc::clone(&self.faults.read().unwrap_or_else(PoisonError::into_inner))
    }
}

impl Active {
    /// What the fault set does to one request, on the set's clock (nothing
    /// without faults).
    pub(crate) fn decide(
        &self,
        model: Option<&str>,
        streaming: bool,
        rng: &Mutex<SmallRng>,
    ) -> Decision {
        if !self.set.has_faults() {
            return Decision::default();
        }
        let elapsed = clock::now().saturating_duration_since(self.epoch);
        self.set.decide(elapsed, model, streaming, rng)
    }

    /// Whether the set has a `blackhole` fault at all.
    pub(crate) fn has_blackhole(&self) -> bool {
        self.set.has_blackhole()
    }

    /// How the host is off the network and for how long from now, under a
    /// `blackhole` or `syn_blackhole` fault (`None`: it is on it); an
    /// open-ended one is looked at again a second on.
    pub(crate) fn blackholed_for(&self) -> Option<(crate::faults::Hole, std::time::Duration)> {
        if !self.set.has_faults() {
            return None;
        }
        let elapsed = clock::now().saturating_duration_since(self.epoch);
        let (hole, end) = self.set.blackholed(elapsed)?;
        let off = end.map_or(std::time::Duration::from_secs(1), |end| {
            end.saturating_sub(elapsed)
        });
        Some((hole, off))
    }
}
