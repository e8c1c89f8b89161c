//! `retry-after`, `retry-after-ms` and the deadline headers, with fuzzer-chosen clocks.
//!
//! Input layout (short inputs are zero-padded):
//!   bytes 0..8   now_unix_ms   (u64 LE, the wall clock for HTTP dates / x-deadline-ms)
//!   bytes 8..16  now_nanos     (u64 LE, the monotonic Instant)
//!   bytes 16..20 cap_ms        (u32 LE, the Retry-After cap)
//!   bytes 20..24 default_ms    (u32 LE, a route's deadline.default)
//!   bytes 24..28 max_ms        (u32 LE, a route's deadline.max)
//!   byte  28     presence bits (bit i set: field i is present)
//!   rest         fields split on `\n` (header values cannot hold a newline):
//!                0 retry-after, 1 retry-after-ms, 2 x-timeout-ms,
//!                3 x-deadline-ms, 4 x-stainless-timeout
#![no_main]

use levee_policy::deadline::{
    parse_ms, DeadlineError, DeadlineHeaders, DeadlinePolicy, DEADLINE_MS, TIMEOUT_MS,
};
use levee_policy::retry_after::{self, parse_retry_after, parse_retry_after_ms, RetryAfter};
use levee_policy::Instant;
use libfuzzer_sys::fuzz_target;
use std::time::Duration;

const HEADER: usize = 29;
const DAY: Duration = Duration::from_secs(86_400);

fn u64_at(b: &[u8; HEADER], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

fn u32_at(b: &[u8; HEADER], at: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(a)
}

fn check_resolve(policy: &DeadlinePolicy, h: DeadlineHeaders<'_>, now: Instant, unix: u64) {
    match policy.resolve(h, now, unix) {
        Ok(at) => {
            // Never in the past, never past the route's ceiling.
            assert!(at >= now, "deadline {at:?} before now {now:?}");
            assert!(
                at.saturating_since(now) <= policy.max(),
                "deadline {:?} beyond max {:?}",
                at.saturating_since(now),
                policy.max()
            );
        }
        Err(e) => {
            // A refusal names a header that was actually sent.
            let header = match &e {
                DeadlineError::Malformed { header, value }
                | DeadlineError::Negative { header, value } => {
                    assert!(value.chars().count() <= 64, "echoed value not truncated");
                    *header
                }
            };
            let sent = match header {
                "x-timeout-ms" => h.timeout_ms.is_some(),
                "x-deadline-ms" => h.deadline_ms.is_some(),
                _ => false,
            };
            assert!(sent, "error names a header that was not sent: {e}");
            let _ = e.to_string();
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let mut head = [0u8; HEADER];
    let n = data.len().min(HEADER);
    head[..n].copy_from_slice(&data[..n]);
    let rest = &data[n..];

    let unix = u64_at(&head, 0);
    let now = Instant::from_nanos(u64_at(&head, 8));
    let cap = Duration::from_millis(u64::from(u32_at(&head, 16)));
    let default = Duration::from_millis(u64::from(u32_at(&head, 20)));
    let max = Duration::from_millis(u64::from(u32_at(&head, 24)));
    let present = head[28];

    let mut parts = rest.split(|&b| b == b'\n');
    let mut fields: [Option<&[u8]>; 5] = [None; 5];
    for (i, f) in fields.iter_mut().enumerate() {
        let v = parts.next().unwrap_or(b"");
        if present & (1 << i) != 0 {
            *f = Some(v);
        }
    }

    // retry-after / retry-after-ms: ignored or bounded, never a panic.
    if let Some(v) = fields[0] {
        if let Some(d) = parse_retry_after(v, unix) {
            assert!(d <= DAY, "retry-after {d:?} above a day");
        }
    }
    if let Some(v) = fields[1] {
        if let Some(d) = parse_retry_after_ms(v) {
            assert!(d <= DAY, "retry-after-ms {d:?} above a day");
        }
    }
    match retry_after::parse(fields[0], fields[1], unix, cap) {
        Some(RetryAfter::Wait(d)) => assert!(d <= cap, "Wait({d:?}) above cap {cap:?}"),
        Some(RetryAfter::TooLong(d)) => assert!(d > cap, "TooLong({d:?}) within cap {cap:?}"),
        None => assert!(
            fields[1].and_then(parse_retry_after_ms).is_none()
                && fields[0].and_then(|v| parse_retry_after(v, unix)).is_none(),
            "a parseable header was dropped"
        ),
    }

    // Deadline headers, alone and through a policy.
    if let Some(v) = fields[2] {
        let _ = parse_ms(TIMEOUT_MS, v);
    }
    if let Some(v) = fields[3] {
        let _ = parse_ms(DEADLINE_MS, v);
    }
    let h = DeadlineHeaders {
        timeout_ms: fields[2],
        deadline_ms: fields[3],
        patience_secs: fields[4],
    };
    check_resolve(&DeadlinePolicy::default(), h, now, unix);
    if let Ok(p) = DeadlinePolicy::new(default, max) {
        check_resolve(&p, h, now, unix);
    }
});
