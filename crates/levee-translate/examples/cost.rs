//! Runs one translation case N times, for `perf stat` (instructions and CPU
//! time per translation, which a shared, loaded machine does not distort the
//! way wall-clock timings are): `cost CASE N`. `bench/translate.sh` runs it.

use levee_translate::{
    translate_request, translate_response, Dialect, StreamOptions, StreamTranslator,
};
use serde_json::json;
use std::hint::black_box;

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

fn openai_answer() -> Vec<u8> {
    json!({"id": "chatcmpl-abc", "object": "chat.completion", "created": 1, "model": "gpt-4.1",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "Your parcel is with DHL and should arrive tomorrow. I have asked our support team to refund the express fee; you will get an email within two days.", "refusal": null}, "finish_reason": "stop", "logprobs": null}],
        "usage": {"prompt_tokens": 312, "completion_tokens": 41, "total_tokens": 353, "prompt_tokens_details": {"cached_tokens": 0}}})
    .to_string()
    .into_bytes()
}

const A_START: &str = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude\",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":9,\"output_tokens\":1}}}\n\n";
const A_EVENT: &[u8] = b"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\" parcel\"}}\n\n";
const O_EVENT: &[u8] = b"data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"gpt-4.1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\" parcel\"},\"logprobs\":null,\"finish_reason\":null}]}\n\n";

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
