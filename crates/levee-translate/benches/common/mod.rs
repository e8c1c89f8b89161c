//! The bodies the translation bench and the `cost` example measure: an
//! ordinary chat request of about 1.3 KB (system prompt, six turns, a tool
//! and a tool call) and an ordinary answer.

use serde_json::json;

/// The OpenAI chat request.
pub fn openai_request() -> Vec<u8> {
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

/// The OpenAI answer to it.
pub fn openai_answer() -> Vec<u8> {
    json!({"id": "chatcmpl-abc", "object": "chat.completion", "created": 1, "model": "gpt-4.1",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "Your parcel is with DHL and should arrive tomorrow. I have asked our support team to refund the express fee; you will get an email within two days.", "refusal": null}, "finish_reason": "stop", "logprobs": null}],
        "usage": {"prompt_tokens": 312, "completion_tokens": 41, "total_tokens": 353, "prompt_tokens_details": {"cached_tokens": 0}}})
    .to_string()
    .into_bytes()
}

/// The first event of an Anthropic stream.
pub const A_START: &str = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude\",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":9,\"output_tokens\":1}}}\n\n";
/// One text delta of an Anthropic stream.
pub const A_EVENT: &[u8] = b"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\" parcel\"}}\n\n";
/// One text delta of an OpenAI stream.
pub const O_EVENT: &[u8] = b"data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"gpt-4.1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\" parcel\"},\"logprobs\":null,\"finish_reason\":null}]}\n\n";
