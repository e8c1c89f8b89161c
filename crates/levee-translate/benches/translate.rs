//! What translation costs per request, for ordinary sizes: a chat request
//! of about 1.3 KB (system prompt, six turns, a tool and a tool call) each
//! way, a JSON answer each way, and one SSE event of a streamed answer.
//! Run: `cargo bench -p levee-translate --bench translate`.

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use levee_translate::{
    translate_request, translate_response, Dialect, StreamOptions, StreamTranslator,
};
use serde_json::json;

fn openai_request() -> Vec<u8> {
    json!({
        "model": "gpt-4.1",
        "messages": [
            {"role": "system", "content": "You are a helpful assistant for an online shop. Answer briefly and politely; when you need an order's status, call the tool."},
            {"role": "user", "content": "Hello! I ordered a pair of running shoes last week and they have not arrived yet."},
            {"role": "assistant", "content": "I am sorry to hear that. Could you give me your order number so I can look it up?"},
            {"role": "user", "content": "Sure, it is 4711-0815. I paid for express delivery, so it should have been here on Monday."},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "call_abc123", "type": "function", "function": {"name": "order_status", "arguments": "{\"order\":\"4711-0815\"}"}}]},
            {"role": "tool", "tool_call_id": "call_abc123", "content": "{\"status\":\"in transit\",\"carrier\":\"DHL\",\"eta\":\"tomorrow\"}"},
            {"role": "user", "content": "So when will it come? And can I get the express fee back?"}
        ],
        "tools": [{"type": "function", "function": {"name": "order_status", "description": "Look up an order's delivery status by its number.", "parameters": {"type": "object", "properties": {"order": {"type": "string", "description": "The order number, like 4711-0815."}}, "required": ["order"]}}}],
        "max_completion_tokens": 512,
        "user": "customer-42",
        "stream": true,
        "stream_options": {"include_usage": true}
    })
    .to_string()
    .into_bytes()
}

fn anthropic_request() -> Vec<u8> {
    let o = openai_request();
    let t = translate_request(Dialect::OpenAi, Dialect::Anthropic, &o, "claude-sonnet-4-5")
        .expect("the bench request translates");
    t.body.to_vec()
}

fn openai_answer() -> Vec<u8> {
    json!({"id": "chatcmpl-abc", "object": "chat.completion", "created": 1, "model": "gpt-4.1",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "Your parcel is with DHL and should arrive tomorrow. I have asked our support team to refund the express fee; you will get an email within two days.", "refusal": null}, "finish_reason": "stop", "logprobs": null}],
        "usage": {"prompt_tokens": 312, "completion_tokens": 41, "total_tokens": 353, "prompt_tokens_details": {"cached_tokens": 0}}})
    .to_string()
    .into_bytes()
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
    let start = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude\",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":9,\"output_tokens\":1}}}\n\n";
    let a_event = b"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\" parcel\"}}\n\n";
    let o_event = b"data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"gpt-4.1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\" parcel\"},\"logprobs\":null,\"finish_reason\":null}]}\n\n";
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
