//! What the mock saw: counters updated on the request path (atomics, plus one
//! mutex for the maps) and the serializable snapshot behind `GET /_mock/stats`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use levee_wire::paths::COUNTED as PATHS;
use levee_wire::stats::{FaultCounts, Stats, TimeoutSeen};

/// One counter per possible HTTP status (100–999).
const STATUS_SLOTS: usize = 1000;

#[derive(Clone, Copy)]
pub(crate) enum FaultKind {
    Status,
    Capacity,
    Reset,
    Stall,
    CutStream,
    Delayed,
}

/// The live counters. Shared by all connections through an `Arc`.
pub(crate) struct Collector {
    requests_total: AtomicU64,
    by_status: Box<[AtomicU64]>,
    by_path: [AtomicU64; PATHS.len()],
    in_flight: AtomicU64,
    max_in_flight: AtomicU64,
    client_closed: AtomicU64,
    timeout_count: AtomicU64,
    timeout_min: AtomicU64,
    timeout_max: AtomicU64,
    faults: [AtomicU64; 6],
    replayed: AtomicU64,
    connections_total: AtomicU64,
    http2_requests: AtomicU64,
    rate_limited: AtomicU64,
    unauthorized: AtomicU64,
    tokens_issued: AtomicU64,
    maps: Mutex<Maps>,
}

#[derive(Default)]
struct Maps {
    by_model: HashMap<String, u64>,
    idempotency_keys: HashMap<String, u64>,
}

fn bump(map: &mut HashMap<String, u64>, key: &str) {
    match map.get_mut(key) {
        Some(n) => *n += 1,
        None => {
            map.insert(key.to_owned(), 1);
        }
    }
}

impl Default for Collector {
    fn default() -> Self {
        Collector {
            requests_total: AtomicU64::new(0),
            by_status: (0..STATUS_SLOTS).map(|_| AtomicU64::new(0)).collect(),
            by_path: Default::default(),
            in_flight: AtomicU64::new(0),
            max_in_flight: AtomicU64::new(0),
            client_closed: AtomicU64::new(0),
            timeout_count: AtomicU64::new(0),
            timeout_min: AtomicU64::new(u64::MAX),
            timeout_max: AtomicU64::new(0),
            faults: Default::default(),
            replayed: AtomicU64::new(0),
            connections_total: AtomicU64::new(0),
            http2_requests: AtomicU64::new(0),
            rate_limited: AtomicU64::new(0),
            unauthorized: AtomicU64::new(0),
            tokens_issued: AtomicU64::new(0),
            maps: Mutex::new(Maps::default()),
        }
    }
}

impl Collector {
    fn maps(&self) -> MutexGuard<'_, Maps> {
        // Counters stay usable even if a panic happened mid-update.
        self.maps.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Counts a new provider request and returns the guard that tracks it.
    pub(crate) fn begin(self: &Arc<Self>, path_index: usize) -> RequestGuard {
        self.requests_total.fetch_add(1, Relaxed);
        if let Some(c) = self.by_path.get(path_index) {
            c.fetch_add(1, Relaxed);
        }
        let before = self.in_flight.fetch_add(1, Relaxed);
        self.max_in_flight.fetch_max(before + 1, Relaxed);
        RequestGuard {
            stats: Arc::clone(self),
            state: GuardState::Open,
            in_flight_before: before,
        }
    }

    pub(crate) fn status(&self, status: u16) {
        let slot = usize::from(status).min(STATUS_SLOTS - 1);
        self.by_status[slot].fetch_add(1, Relaxed);
    }

    pub(crate) fn fault(&self, kind: FaultKind) {
        self.faults[kind as usize].fetch_add(1, Relaxed);
    }

    /// A connection was accepted.
    pub(crate) fn connection(&self) {
        self.connections_total.fetch_add(1, Relaxed);
    }

    /// A provider request came over HTTP/2.
    pub(crate) fn http2_request(&self) {
        self.http2_requests.fetch_add(1, Relaxed);
    }

    /// The mock's own rate limits refused a request (its 429 is counted
    /// by status too).
    pub(crate) fn rate_limited(&self) {
        self.rate_limited.fetch_add(1, Relaxed);
    }

    pub(crate) fn replayed(&self) {
        self.replayed.fetch_add(1, Relaxed);
    }

    pub(crate) fn timeout_ms(&self, value: u64) {
        self.timeout_count.fetch_add(1, Relaxed);
        self.timeout_min.fetch_min(value, Relaxed);
        self.timeout_max.fetch_max(value, Relaxed);
    }

    pub(crate) fn model_and_key(&self, model: Option<&str>, idempotency_key: Option<&str>) {
        if model.is_none() && idempotency_key.is_none() {
            return;
        }
        let mut maps = self.maps();
        if let Some(model) = model {
            bump(&mut maps.by_model, model);
        }
        if let Some(key) = idempotency_key {
            bump(&mut maps.idempotency_keys, key);
        }
    }

    /// Clears everything except the live `in_flight` gauge.
    pub(crate) fn reset(&self) {
        let mut maps = self.maps();
        *maps = Maps::default();
        self.requests_total.store(0, Relaxed);
        for c in self
            .by_status
            .iter()
            .chain(&self.by_path)
            .chain(&self.faults)
        {
            c.store(0, Relaxed);
        }
        self.max_in_flight
            .store(self.in_flight.load(Relaxed), Relaxed);
        self.client_closed.store(0, Relaxed);
        self.timeout_count.store(0, Relaxed);
        self.timeout_min.store(u64::MAX, Relaxed);
        self.timeout_max.store(0, Relaxed);
        self.replayed.store(0, Relaxed);
        self.connections_total.store(0, Relaxed);
        self.http2_requests.store(0, Relaxed);
        self.rate_limited.store(0, Relaxed);
        self.unauthorized.store(0, Relaxed);
        self.tokens_issued.store(0, Relaxed);
    }

    /// A cloud mock refused a request's credentials with `status`.
    pub(crate) fn unauthorized(&self, status: u16) {
        self.unauthorized.fetch_add(1, Relaxed);
        self.status(status);
    }

    /// A cloud mock's token endpoint issued an access token.
    pub(crate) fn token_issued(&self) {
        self.tokens_issued.fetch_add(1, Relaxed);
    }

    pub(crate) fn snapshot(&self) -> Stats {
        let maps = self.maps();
        let sorted = |m: &HashMap<String, u64>| m.iter().map(|(k, v)| (k.clone(), *v)).collect();
        let count = |c: &AtomicU64| c.load(Relaxed);
        let timeout_count = count(&self.timeout_count);
        let f = &self.faults;
        Stats {
            requests_total: count(&self.requests_total),
            by_status: self
                .by_status
                .iter()
                .enumerate()
                .filter_map(|(code, c)| {
                    let n = count(c);
                    (n > 0).then(|| (code.to_string(), n))
                })
                .collect(),
            by_model: sorted(&maps.by_model),
            by_path: PATHS
                .iter()
                .zip(&self.by_path)
                .filter_map(|(p, c)| {
                    let n = count(c);
                    (n > 0).then(|| ((*p).to_owned(), n))
                })
                .collect(),
            in_flight: count(&self.in_flight),
            max_in_flight: count(&self.max_in_flight),
            idempotency_keys: sorted(&maps.idempotency_keys),
            timeout_ms_seen: TimeoutSeen {
                count: timeout_count,
                min: (timeout_count > 0).then(|| count(&self.timeout_min)),
                max: (timeout_count > 0).then(|| count(&self.timeout_max)),
            },
            client_closed: count(&self.client_closed),
            faults: FaultCounts {
                status: count(&f[FaultKind::Status as usize]),
                capacity: count(&f[FaultKind::Capacity as usize]),
                reset: count(&f[FaultKind::Reset as usize]),
                stall: count(&f[FaultKind::Stall as usize]),
                cut_stream: count(&f[FaultKind::CutStream as usize]),
                delayed: count(&f[FaultKind::Delayed as usize]),
            },
            replayed: count(&self.replayed),
            connections_total: count(&self.connections_total),
            http2_requests: count(&self.http2_requests),
            rate_limited: count(&self.rate_limited),
            unauthorized: count(&self.unauthorized),
            tokens_issued: count(&self.tokens_issued),
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum GuardState {
    /// The answer is not complete yet: dropping now means the client left.
    Open,
    /// The answer was fully handed to the connection.
    Done,
    /// The mock itself dropped the connection on purpose (reset, cut).
    Intentional,
}

/// Lives as long as one provider request: decrements `in_flight` when
/// dropped and counts `client_closed` if the answer never completed.
/// It rides inside the response body, so a client leaving mid-stream counts.
pub(crate) struct RequestGuard {
    stats: Arc<Collector>,
    state: GuardState,
    /// `in_flight` just before this request arrived.
    pub in_flight_before: u64,
}

impl RequestGuard {
    pub(crate) fn stats(&self) -> &Collector {
        &self.stats
    }

    pub(crate) fn done(&mut self) {
        self.state = GuardState::Done;
    }

    pub(crate) fn intentional_close(&mut self) {
        self.state = GuardState::Intentional;
    }
}

impl Drop for RequestGuard {
    fn drop(&mut self) {
        self.stats.in_flight.fetch_sub(1, Relaxed);
        if self.state == GuardState::Open {
            self.stats.client_closed.fetch_add(1, Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guard_tracks_in_flight_and_client_closed() {
        let c = Arc::new(Collector::default());
        let mut a = c.begin(0);
        let b = c.begin(1);
        assert_eq!(c.snapshot().in_flight, 2);
        a.done();
        drop(a);
        drop(b);
        let s = c.snapshot();
        assert_eq!((s.in_flight, s.max_in_flight, s.client_closed), (0, 2, 1));
        assert_eq!(s.requests_total, 2);
        assert_eq!(s.by_path.get("/v1/messages"), Some(&1));
    }

    #[test]
    fn timeouts_and_maps() {
        let c = Arc::new(Collector::default());
        c.timeout_ms(900);
        c.timeout_ms(300);
        c.model_and_key(Some("m"), Some("k"));
        c.model_and_key(Some("m"), Some("k"));
        c.status(503);
        let s = c.snapshot();
        assert_eq!(
            s.timeout_ms_seen,
            TimeoutSeen {
                count: 2,
                min: Some(300),
                max: Some(900)
            }
        );
        assert_eq!(s.idempotency_keys.get("k"), Some(&2));
        assert_eq!(s.by_model.get("m"), Some(&2));
        assert_eq!(s.by_status.get("503"), Some(&1));
        c.reset();
        assert_eq!(c.snapshot(), Stats::default());
    }
}
