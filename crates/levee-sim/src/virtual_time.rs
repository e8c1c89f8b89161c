//! Virtual time: the engine's clock, and every time a run counts, is whole
//! nanoseconds since the run's start in a `u64`.

use std::time::Duration;

/// `d` in virtual nanoseconds (saturating at `u64::MAX`, some 584 years).
pub(crate) fn ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}
