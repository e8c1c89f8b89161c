//! What translation costs per request, for ordinary sizes: a chat request
//! of about 1.3 KB (system prompt, six turns, a tool and a tool call) each
//! way, a JSON answer each way, and one SSE event of a streamed answer.
//! Run: `cargo bench -p levee-translate --bench translate`.

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use levee_translate::{
    translate_request, translate_response, Dialect, StreamOptions, StreamTranslator,
};

mod common;
use common::{openai_answer, openai_request, A_EVENT, A_START, O_EVENT};

fn anthropic_request() -> Vec<u8> {
    let o = openai_request();
    let t = translate_request(Dialect::OpenAi, Dialect::Anthropic, &o, "claude-sonnet-4-5")
        .expect("the bench request translates");
    t.body.to_vec()
}

fn bench(c: &mut Criterion) {
    let o = openai_request();
    let a = anthropic_request();
    let mut g = c.benchmark_group("request");
    g.throughput(Throughput::Bytes(o.len() as u64));
    // The floor: parsing the same body into a document and writing it back.
    g.bench_function("json_value_roundtrip_floor", |b| {
        b.iter(|| {
            let v: serde_json::Value = serde_json::from_slice(black_box(&o)).unwrap();
            serde_json::to_vec(&v).unwrap()
        })
    });
    g.bench_function("parse_openai_typed", |b| {
        b.iter(|| {
            serde_json::from_slice::<levee_translate::openai::ChatRequest>(black_box(&o)).unwrap()
        })
    });
    g.bench_function("openai_to_anthropic", |b| {
        b.iter(|| translate_request(Dialect::OpenAi, Dialect::Anthropic, black_box(&o), "claude"))
    });
    g.throughput(Throughput::Bytes(a.len() as u64));
    g.bench_function("anthropic_to_openai", |b| {
        b.iter(|| {
            translate_request(
                Dialect::Anthropic,
                Dialect::OpenAi,
                black_box(&a),
                "gpt-4.1",
            )
        })
    });
    g.finish();

    let oa = openai_answer();
    let aa = translate_response(Dialect::OpenAi, Dialect::Anthropic, &oa, 0)
        .expect("the bench answer translates")
        .to_vec();
    let mut g = c.benchmark_group("answer");
    g.bench_function("openai_to_anthropic", |b| {
        b.iter(|| translate_response(Dialect::OpenAi, Dialect::Anthropic, black_box(&oa), 0))
    });
    g.bench_function("anthropic_to_openai", |b| {
        b.iter(|| translate_response(Dialect::Anthropic, Dialect::OpenAi, black_box(&aa), 0))
    });
    g.finish();

    // One text event of a stream, after the stream has started.
    let opts = StreamOptions {
        include_usage: true,
        created: 1,
    };
    let start = A_START;
    let a_event = A_EVENT;
    let o_event = O_EVENT;
    let mut g = c.benchmark_group("stream_event");
    g.bench_function("anthropic_to_openai", |b| {
        let mut t = StreamTranslator::new(Dialect::Anthropic, Dialect::OpenAi, opts).unwrap();
        t.push(start.as_bytes());
        b.iter(|| t.push(black_box(a_event)))
    });
    g.bench_function("openai_to_anthropic", |b| {
        let mut t = StreamTranslator::new(Dialect::OpenAi, Dialect::Anthropic, opts).unwrap();
        t.push(o_event);
        b.iter(|| t.push(black_box(o_event)))
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
