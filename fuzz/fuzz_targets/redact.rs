//! What Levee passes on must never carry a secret: the provider-key
//! redaction applied to provider error bodies, headers and tapes, the query
//! values dropped from tape paths, and the Redis URL shown in messages.
//!
//! Properties:
//! - after `Secrets::scrub`, no configured key (8 bytes or longer) occurs in
//!   the output, and `scrub` reports a change exactly when a key occurred;
//! - `Secrets::text` of valid UTF-8 stays valid UTF-8 (it is a `String`);
//! - `tape_path` keeps the path and no query value (`=` never follows `?`);
//! - a password put into any URL (`scheme://:PASSWORD@…`) is shown neither by
//!   `redact_url` nor in a `check_redis_url` error.
#![no_main]

use levee_config::{check_redis_url, redact_url};
use levee_gateway::fuzz::Secrets;
use levee_gateway::record::tape_path;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // Layout: [n][key1 len][key1]...[rest = haystack].
    let Some((&n, mut rest)) = data.split_first() else {
        return;
    };
    let mut keys = Vec::new();
    for _ in 0..(n % 4) {
        let Some((&len, tail)) = rest.split_first() else {
            break;
        };
        let len = usize::from(len % 24).min(tail.len());
        keys.push(tail[..len].to_vec());
        rest = &tail[len..];
    }
    let secrets = Secrets::new(keys.iter());
    let long: Vec<&Vec<u8>> = keys.iter().filter(|k| k.len() >= 8).collect();
    let occurs = |hay: &[u8], k: &[u8]| hay.windows(k.len()).any(|w| w == k);
    match secrets.scrub(rest) {
        Some(out) => {
            assert!(
                long.iter().any(|k| occurs(rest, k)),
                "changed without a key"
            );
            for k in &long {
                // A replacement can only create a key that overlaps the
                // marker: one with a bracket, or part of "[redacted]".
                let overlaps = k.contains(&b'[') || k.contains(&b']') || occurs(b"[redacted]", k);
                if !overlaps {
                    assert!(
                        !occurs(&out, k),
                        "a key survived: {:?}",
                        String::from_utf8_lossy(&out)
                    );
                }
            }
        }
        None => assert!(!long.iter().any(|k| occurs(rest, k)), "a key was missed"),
    }
    if let Ok(text) = std::str::from_utf8(rest) {
        let _ = secrets.text(text.to_string());

        let p = tape_path(text);
        if let Some((path, query)) = p.split_once('?') {
            assert!(!query.contains('='), "a query value is kept: {p}");
            assert!(text.starts_with(path));
        } else {
            assert_eq!(p, text);
        }

        // Put a password into the input's URL: it must never be shown.
        const PW: &str = "pw-Zq9x-secret";
        if let Some((scheme, tail)) = text.split_once("://") {
            if !text.contains(PW) {
                let url = format!("{scheme}://:{PW}@{tail}");
                let shown = redact_url(&url);
                assert!(!shown.contains(PW), "{url:?} shown as {shown:?}");
                if let Err(e) = check_redis_url(&url) {
                    assert!(!e.to_string().contains(PW), "{e}");
                }
            }
        }
    }
});
