//! Config loading: any UTF-8 text either parses into a valid `Config` or is
//! refused with an error; never a panic. An accepted config must also build
//! the runtime objects the gateway makes from it at start-up.
#![no_main]

use levee_config::Config;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match Config::parse(text) {
        Ok(c) => {
            for p in &c.providers {
                let _ = p.new_state();
            }
            for r in &c.routes {
                let _ = r.budget.clone();
                for t in 0..r.targets.len() {
                    let _ = r.rewrite_model(t, "openai/gpt-4.1");
                }
            }
            let _ = c.route_for("/v1/chat/completions", "openai/gpt-4.1");
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
});
