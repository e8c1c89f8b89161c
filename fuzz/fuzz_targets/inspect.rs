//! Request-body inspection (model and stream flag) and the model rewrite a
//! route target applies before the body goes upstream.
//!
//! Properties, for any body `inspect` accepts:
//! - `rewrite_model` yields a JSON object whose `model` is the new name;
//! - inspecting the rewritten body gives the new model and the same stream
//!   flag (what was routed is what the provider sees);
//! - rewriting to the same name returns the body unchanged;
//! - the output cap read in the same pass (`max_tokens` and its kin, for
//!   the admission estimate) is what a whole `serde_json::Value` says: the
//!   largest top-level integer cap under 10^12, a key given twice counted
//!   at its last value.
//!
//! - every body `inspect` accepts can be rewritten: `inspect` validates the
//!   whole document as strictly as the rewrite parses it, so a body is
//!   refused (400) the same way on every route. Bodies with invalid UTF-8 or a
//!   lone surrogate in another field, a number out of range or deep nesting
//!   were once accepted by `inspect` and forwarded raw on routes without a
//!   rewrite (found by this target; regression inputs in
//!   `fuzz/regressions/inspect/`).
#![no_main]

use bytes::Bytes;
use levee_gateway::fuzz::{inspect, rewrite_model, Inspected};
use libfuzzer_sys::fuzz_target;

const TO: &str = "levee-fuzz/rewritten";

fuzz_target!(|data: &[u8]| {
    let Ok(Inspected {
        model,
        stream,
        max_output,
    }) = inspect(data)
    else {
        return;
    };
    assert!(!model.is_empty());
    let whole: serde_json::Value = serde_json::from_slice(data).expect("inspect accepted non-JSON");
    let expected = ["max_tokens", "max_completion_tokens", "max_output_tokens"]
        .into_iter()
        .filter_map(|k| whole.get(k)?.as_u64().filter(|n| *n < 1_000_000_000_000))
        .max();
    assert_eq!(
        max_output,
        expected,
        "output cap: {:?}",
        String::from_utf8_lossy(data)
    );
    let body = Bytes::copy_from_slice(data);
    assert_eq!(
        rewrite_model(&body, &model, &model).ok(),
        Some(body.clone())
    );

    let out = match rewrite_model(&body, &model, TO) {
        Ok(out) => out,
        Err(e) => panic!(
            "inspect accepted a body the rewrite refuses ({e}): {:?}",
            String::from_utf8_lossy(data)
        ),
    };
    let v: serde_json::Value = match serde_json::from_slice(&out) {
        Ok(v) => v,
        Err(e) => panic!(
            "rewritten body is not JSON ({e}): {:?}",
            String::from_utf8_lossy(&out)
        ),
    };
    assert_eq!(
        v.get("model").and_then(|m| m.as_str()),
        Some(TO),
        "model not rewritten: {:?}",
        String::from_utf8_lossy(&out)
    );
    assert_eq!(
        inspect(&out),
        Ok(Inspected {
            model: TO.to_string(),
            stream,
            max_output,
        }),
        "the rewritten body routes differently: {:?}",
        String::from_utf8_lossy(&out)
    );
});
