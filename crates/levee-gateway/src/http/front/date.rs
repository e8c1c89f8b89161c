//! The `date` field, formatted once a second per thread.

use super::line;
use bytes::BytesMut;
use std::cell::RefCell;
use std::time::{Duration, UNIX_EPOCH};

thread_local! {
    static CACHE: RefCell<(u64, String)> = const { RefCell::new((u64::MAX, String::new())) };
}

/// Writes the `date` field for the current second.
pub(super) fn put(out: &mut BytesMut) {
    let secs = crate::clock::unix_ms() / 1000;
    CACHE.with(|cache| {
        let mut cache = cache.borrow_mut();
        if cache.0 != secs {
            let now = UNIX_EPOCH + Duration::from_secs(secs);
            *cache = (secs, httpdate::fmt_http_date(now));
        }
        line(out, b"date", cache.1.as_bytes());
    });
}
