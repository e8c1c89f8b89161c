//! Runs one translation case N times, for `perf stat` (instructions and CPU
//! time per translation, which a shared, loaded machine does not distort the
//! way wall-clock timings are): `cost CASE N`. `bench/translate.sh` runs it.

use levee_translate::{
    translate_request, translate_response, Dialect, StreamOptions, StreamTranslator,
};
use std::hint::black_box;

#[path = "../benches/common/mod.rs"]
mod common;
use common::{openai_answer, openai_request, A_EVENT, A_START, O_EVENT};

fn main() {
    let mut args = std::env::args().skip(1);
    let case = args.next().unwrap_or_default();
    let n: u64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(100_000);
    let o = openai_request();
    let a = translate_request(Dialect::OpenAi, Dialect::Anthropic, &o, "claude")
        .map(|t| t.body.to_vec())
        .unwrap_or_default();
    let oa = openai_answer();
    let aa = translate_response(Dialect::OpenAi, Dialect::Anthropic, &oa, 0)
        .map(|b| b.to_vec())
        .unwrap_or_default();
    let opts = StreamOptions {
        include_usage: true,
        created: 1,
    };
    let mut a2o = StreamTranslator::new(Dialect::Anthropic, Dialect::OpenAi, opts);
    let mut o2a = StreamTranslator::new(Dialect::OpenAi, Dialect::Anthropic, opts);
    if let (Some(t), Some(u)) = (a2o.as_mut(), o2a.as_mut()) {
        t.push(A_START.as_bytes());
        u.push(O_EVENT);
    }
    for _ in 0..n {
        match case.as_str() {
            "none" => {}
            "floor" => {
                let v: serde_json::Value =
                    serde_json::from_slice(black_box(&o)).unwrap_or_default();
                black_box(serde_json::to_vec(&v).ok());
            }
            "parse_openai" => {
                black_box(
                    serde_json::from_slice::<levee_translate::openai::ChatRequest>(black_box(&o))
                        .ok(),
                );
            }
            "parse_value" => {
                black_box(serde_json::from_slice::<serde_json::Value>(black_box(&o)).ok());
            }
            "request_o2a" => {
                black_box(
                    translate_request(Dialect::OpenAi, Dialect::Anthropic, black_box(&o), "claude")
                        .ok(),
                );
            }
            "request_a2o" => {
                black_box(
                    translate_request(
                        Dialect::Anthropic,
                        Dialect::OpenAi,
                        black_box(&a),
                        "gpt-4.1",
                    )
                    .ok(),
                );
            }
            "answer_o2a" => {
                black_box(
                    translate_response(Dialect::OpenAi, Dialect::Anthropic, black_box(&oa), 0).ok(),
                );
            }
            "answer_a2o" => {
                black_box(
                    translate_response(Dialect::Anthropic, Dialect::OpenAi, black_box(&aa), 0).ok(),
                );
            }
            "event_a2o" => {
                black_box(a2o.as_mut().map(|t| t.push(black_box(A_EVENT))));
            }
            "event_o2a" => {
                black_box(o2a.as_mut().map(|t| t.push(black_box(O_EVENT))));
            }
            other => {
                eprintln!("cost: unknown case `{other}`");
                std::process::exit(2);
            }
        }
    }
}
