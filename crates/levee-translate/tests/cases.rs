//! Concrete translations: what is carried, what is refused and why.

use levee_translate::{
    translate_request, translate_response, Dialect, Reason, StreamOptions, StreamTranslator,
};
use serde_json::{json, Value};

fn req(caller: Dialect, target: Dialect, body: Value) -> Result<Value, Reason> {
    translate_request(caller, target, body.to_string().as_bytes(), "backup")
        .map(|t| serde_json::from_slice(&t.body).unwrap())
        .map_err(|e| e.reason)
}

#[test]
fn an_openai_chat_with_tools_becomes_an_anthropic_message() {
    let body = json!({
        "model": "gpt-test",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": [
                {"type": "text", "text": "What is in this picture?"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
                {"type": "image_url", "image_url": {"url": "https://example.com/a.jpg", "detail": "auto"}}
            ]},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "look", "arguments": "{\"x\":1}"}},
                {"id": "call_2", "type": "function", "function": {"name": "look", "arguments": "{}"}}
            ]},
            {"role": "tool", "tool_call_id": "call_1", "content": "a cat"},
            {"role": "tool", "tool_call_id": "call_2", "content": [{"type": "text", "text": "a hat"}]}
        ],
        "max_completion_tokens": 100,
        "stop": "END",
        "tools": [{"type": "function", "function": {"name": "look", "description": "d", "parameters": {"type": "object", "properties": {"x": {"type": "integer"}}}}}],
        "tool_choice": {"type": "function", "function": {"name": "look"}},
        "parallel_tool_calls": false,
        "user": "u1",
        "stream": true,
        "stream_options": {"include_usage": true},
        "store": false,
        "prompt_cache_key": "k"
    });
    let a = req(Dialect::OpenAi, Dialect::Anthropic, body).unwrap();
    assert_eq!(a["model"], "backup");
    assert_eq!(a["system"], "Be brief.");
    assert_eq!(a["max_tokens"], 100);
    assert_eq!(a["stop_sequences"], json!(["END"]));
    assert_eq!(a["metadata"], json!({"user_id": "u1"}));
    assert_eq!(a["stream"], true);
    assert_eq!(
        a["tool_choice"],
        json!({"type": "tool", "name": "look", "disable_parallel_tool_use": true})
    );
    assert_eq!(
        a["tools"][0]["input_schema"]["properties"]["x"]["type"],
        "integer"
    );
    let m = a["messages"].as_array().unwrap();
    assert_eq!(m.len(), 3, "{m:?}");
    assert_eq!(
        m[0]["content"][1]["source"],
        json!({"type": "base64", "media_type": "image/png", "data": "AAAA"})
    );
    assert_eq!(m[0]["content"][2]["source"]["type"], "url");
    assert_eq!(m[1]["content"][0]["type"], "tool_use");
    assert_eq!(m[1]["content"][0]["input"], json!({"x": 1}));
    // Both results in one user turn.
    assert_eq!(m[2]["role"], "user");
    assert_eq!(m[2]["content"][1]["tool_use_id"], "call_2");
    for dropped in ["store", "prompt_cache_key", "stream_options", "n"] {
        assert!(a.get(dropped).is_none(), "{dropped}");
    }
}

#[test]
fn max_tokens_has_a_default_for_anthropic() {
    let body = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
    let a = req(Dialect::OpenAi, Dialect::Anthropic, body).unwrap();
    assert_eq!(a["max_tokens"], levee_translate::DEFAULT_MAX_TOKENS);
}

#[test]
fn what_anthropic_cannot_carry_is_refused_with_a_reason() {
    let base = || json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
    let with = |k: &str, v: Value| {
        let mut b = base();
        b[k] = v;
        req(Dialect::OpenAi, Dialect::Anthropic, b).unwrap_err()
    };
    assert_eq!(with("n", json!(2)), Reason::SeveralChoices);
    assert_eq!(with("logprobs", json!(true)), Reason::Logprobs);
    assert_eq!(with("temperature", json!(1.2)), Reason::Sampling);
    assert_eq!(with("top_k", json!("many")), Reason::Sampling);
    assert_eq!(with("seed", json!(7)), Reason::Sampling);
    assert_eq!(
        with("response_format", json!({"type": "json_object"})),
        Reason::OutputFormat
    );
    assert_eq!(with("metadata", json!({"a": "b"})), Reason::Metadata);
    assert_eq!(with("store", json!(true)), Reason::UnknownField);
    assert_eq!(with("frobnicate", json!(1)), Reason::UnknownField);
    assert_eq!(
        with(
            "tools",
            json!([{"type": "custom", "custom": {"name": "x"}}])
        ),
        Reason::ToolKind
    );
    let audio = json!([{"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": "x", "format": "wav"}}]}]);
    assert_eq!(with("messages", audio), Reason::ContentPart);
    let named = json!([{"role": "user", "content": "hi", "name": "bob"}]);
    assert_eq!(with("messages", named), Reason::MessageName);
    assert_eq!(with("messages", json!("hi")), Reason::InvalidBody);
}

#[test]
fn what_openai_cannot_carry_is_refused_with_a_reason() {
    let base =
        || json!({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]});
    let with = |k: &str, v: Value| {
        let mut b = base();
        b[k] = v;
        req(Dialect::Anthropic, Dialect::OpenAi, b).unwrap_err()
    };
    assert_eq!(
        with("thinking", json!({"type": "adaptive"})),
        Reason::Reasoning
    );
    assert_eq!(with("top_k", json!(5)), Reason::Sampling);
    assert_eq!(
        with(
            "tools",
            json!([{"type": "web_search_20250305", "name": "web_search"}])
        ),
        Reason::ToolKind
    );
    let doc = json!([{"role": "user", "content": [{"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "x"}}]}]);
    assert_eq!(with("messages", doc), Reason::ContentPart);
    let err = json!([{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "boom", "is_error": true}]}]);
    assert_eq!(with("messages", err), Reason::ToolError);
    assert_eq!(
        with("stop_sequences", json!(["a", "b", "c", "d", "e"])),
        Reason::TooManyStops
    );
}

#[test]
fn an_anthropic_message_with_tools_becomes_an_openai_chat() {
    let body = json!({
        "model": "claude-test",
        "max_tokens": 64,
        "system": [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
        "messages": [
            {"role": "user", "content": "Weather?"},
            {"role": "assistant", "content": [
                {"type": "text", "text": "Looking."},
                {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Oslo"}}
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "cold"},
                {"type": "text", "text": "Thanks"}
            ]}
        ],
        "tools": [{"name": "weather", "description": "w", "input_schema": {"type": "object"}}],
        "tool_choice": {"type": "any", "disable_parallel_tool_use": true},
        "metadata": {"user_id": "u"},
        "stop_sequences": ["X"],
        "stream": true,
        "service_tier": "auto"
    });
    let o = req(Dialect::Anthropic, Dialect::OpenAi, body).unwrap();
    assert_eq!(o["model"], "backup");
    assert_eq!(o["max_completion_tokens"], 64);
    assert_eq!(o["tool_choice"], "required");
    assert_eq!(o["parallel_tool_calls"], false);
    assert_eq!(o["user"], "u");
    assert_eq!(o["stop"], json!(["X"]));
    assert_eq!(o["stream_options"], json!({"include_usage": true}));
    let m = o["messages"].as_array().unwrap();
    assert_eq!(m[0]["role"], "system");
    assert_eq!(m[0]["content"][0]["text"], "Be brief.");
    assert!(m[0]["content"][0].get("cache_control").is_none());
    assert_eq!(m[2]["content"], "Looking.");
    assert_eq!(
        m[2]["tool_calls"][0]["function"]["arguments"],
        "{\"city\":\"Oslo\"}"
    );
    assert_eq!(
        m[3],
        json!({"role": "tool", "tool_call_id": "toolu_1", "content": "cold"})
    );
    assert_eq!(m[4]["role"], "user");
    assert_eq!(m[4]["content"][0]["text"], "Thanks");
    assert!(o.get("service_tier").is_none());
}

#[test]
fn responses_carry_content_tool_calls_reasons_and_usage() {
    let c = json!({
        "id": "chatcmpl-abc", "object": "chat.completion", "created": 5, "model": "gpt-4.1",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": null, "refusal": null,
            "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
            "finish_reason": "stop", "logprobs": null}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13,
            "prompt_tokens_details": {"cached_tokens": 4}}
    });
    let out = translate_response(
        Dialect::OpenAi,
        Dialect::Anthropic,
        c.to_string().as_bytes(),
        0,
    )
    .unwrap();
    let a: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(a["id"], "msg_abc");
    assert_eq!(a["type"], "message");
    assert_eq!(a["model"], "gpt-4.1");
    assert_eq!(
        a["stop_reason"], "tool_use",
        "a forced call finishes with `stop`"
    );
    assert_eq!(
        a["content"][0],
        json!({"type": "tool_use", "id": "call_1", "name": "f", "input": {}})
    );
    assert_eq!(a["usage"]["input_tokens"], 6);
    assert_eq!(a["usage"]["cache_read_input_tokens"], 4);
    assert_eq!(a["usage"]["output_tokens"], 3);

    let back = translate_response(Dialect::Anthropic, Dialect::OpenAi, &out, 5).unwrap();
    let o: Value = serde_json::from_slice(&back).unwrap();
    assert_eq!(o["id"], "chatcmpl-abc");
    assert_eq!(o["choices"][0]["finish_reason"], "tool_calls");
    assert_eq!(o["usage"]["prompt_tokens"], 10);
    assert_eq!(o["usage"]["total_tokens"], 13);
    assert_eq!(
        o["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"],
        "{}"
    );
}

#[test]
fn a_backup_answer_that_is_not_its_dialect_is_a_bad_answer() {
    assert!(translate_response(Dialect::OpenAi, Dialect::Anthropic, b"<html>", 0).is_err());
    let two = json!({"id": "x", "object": "chat.completion", "created": 1, "model": "m", "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "a"}, "finish_reason": "stop"},
        {"index": 1, "message": {"role": "assistant", "content": "b"}, "finish_reason": "stop"}]});
    assert!(translate_response(
        Dialect::OpenAi,
        Dialect::Anthropic,
        two.to_string().as_bytes(),
        0
    )
    .is_err());
}

/// (event name, data) of each translated event.
fn events(out: &[u8]) -> Vec<(String, Value)> {
    levee_wire::sse::events(std::str::from_utf8(out).expect("UTF-8 out"))
}

#[test]
fn an_openai_stream_with_a_tool_call_becomes_anthropic_events() {
    let up = concat!(
        "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"gpt\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}]}\n\n",
        "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"gpt\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"},\"finish_reason\":null}]}\n\n",
        "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"gpt\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"\"}}]},\"finish_reason\":null}]}\n\n",
        "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"gpt\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"{\\\"a\\\":\"}}]},\"finish_reason\":null}]}\n\n",
        "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"gpt\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"1}\"}}]},\"finish_reason\":null}]}\n\n",
        "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"gpt\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n",
        "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"gpt\",\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":5,\"total_tokens\":12}}\n\n",
        "data: [DONE]\n\n"
    );
    let opts = StreamOptions {
        include_usage: false,
        created: 0,
    };
    let mut t = StreamTranslator::new(Dialect::OpenAi, Dialect::Anthropic, opts).unwrap();
    let mut out = t.push(up.as_bytes()).to_vec();
    out.extend_from_slice(&t.finish());
    let ev = events(&out);
    let names: Vec<&str> = ev.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "message_start",
            "content_block_start",
            "content_block_delta",
            "content_block_stop",
            "content_block_start",
            "content_block_delta",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop"
        ]
    );
    assert_eq!(ev[0].1["message"]["id"], "msg_1");
    assert_eq!(ev[4].1["content_block"]["type"], "tool_use");
    assert_eq!(ev[4].1["index"], 1);
    assert_eq!(ev[6].1["delta"]["partial_json"], "1}");
    assert_eq!(ev[8].1["delta"]["stop_reason"], "tool_use");
    assert_eq!(
        ev[8].1["usage"],
        json!({"output_tokens": 5, "input_tokens": 7})
    );
}

#[test]
fn an_anthropic_stream_becomes_openai_chunks_with_usage_when_asked() {
    let up = concat!(
        "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_9\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude\",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":9,\"output_tokens\":1}}}\n\n",
        "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
        "event: ping\ndata: {\"type\":\"ping\"}\n\n",
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hello\"}}\n\n",
        "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
        "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"max_tokens\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":4}}\n\n",
        "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
    );
    let opts = StreamOptions {
        include_usage: true,
        created: 77,
    };
    let mut t = StreamTranslator::new(Dialect::Anthropic, Dialect::OpenAi, opts).unwrap();
    let mut out = t.push(up.as_bytes()).to_vec();
    out.extend_from_slice(&t.finish());
    let ev = events(&out);
    assert_eq!(ev.len(), 5, "{}", String::from_utf8_lossy(&out));
    assert_eq!(ev[0].1["choices"][0]["delta"]["role"], "assistant");
    assert_eq!(ev[0].1["id"], "chatcmpl-9");
    assert_eq!(ev[0].1["created"], 77);
    assert_eq!(ev[1].1["choices"][0]["delta"]["content"], "Hello");
    assert_eq!(ev[2].1["choices"][0]["finish_reason"], "length");
    assert_eq!(ev[3].1["choices"], json!([]));
    assert_eq!(ev[3].1["usage"]["prompt_tokens"], 9);
    assert_eq!(ev[3].1["usage"]["completion_tokens"], 4);
    assert_eq!(ev[4].1, Value::String("[DONE]".into()));
}

#[test]
fn a_stream_cut_before_its_end_ends_with_an_error_event() {
    let up = "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"g\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"x\"},\"finish_reason\":null}]}\n\n";
    let opts = StreamOptions {
        include_usage: false,
        created: 0,
    };
    let mut t = StreamTranslator::new(Dialect::OpenAi, Dialect::Anthropic, opts).unwrap();
    t.push(up.as_bytes());
    let tail = t.finish();
    let ev = events(&tail);
    assert_eq!(ev.last().unwrap().0, "error");
}

#[test]
fn a_mid_stream_error_keeps_its_kind_in_the_other_dialect() {
    let opts = StreamOptions {
        include_usage: false,
        created: 0,
    };
    // Anthropic overloaded -> OpenAI's type for 529 (server_error), Levee's code.
    let up = "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"busy\"}}\n\n";
    let mut t = StreamTranslator::new(Dialect::Anthropic, Dialect::OpenAi, opts).unwrap();
    let mut out = t.push(up.as_bytes()).to_vec();
    out.extend_from_slice(&t.finish());
    let ev = events(&out);
    let e = &ev.last().unwrap().1["error"];
    assert_eq!(e["type"], "server_error", "{ev:?}");
    assert_eq!(e["code"], "upstream_error");
    assert_eq!(e["message"], "busy");
    // OpenAI's request-rate 429 (`requests`) -> Anthropic's rate_limit_error.
    let up = "data: {\"error\":{\"message\":\"slow down\",\"type\":\"requests\",\"param\":null,\"code\":\"rate_limit_exceeded\"}}\n\n";
    let mut t = StreamTranslator::new(Dialect::OpenAi, Dialect::Anthropic, opts).unwrap();
    let mut out = t.push(up.as_bytes()).to_vec();
    out.extend_from_slice(&t.finish());
    let ev = events(&out);
    let (name, v) = ev.last().unwrap();
    assert_eq!(name, "error");
    assert_eq!(v["error"]["type"], "rate_limit_error", "{ev:?}");
    assert_eq!(v["error"]["message"], "slow down");
}

#[test]
fn a_role_after_the_content_reads_the_same() {
    let first = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]});
    let later = r#"{"model":"m","messages":[{"content":"hi","role":"user"},{"content":"yo","role":"assistant"}]}"#;
    let a = req(Dialect::OpenAi, Dialect::Anthropic, first).unwrap();
    let b = translate_request(
        Dialect::OpenAi,
        Dialect::Anthropic,
        later.as_bytes(),
        "backup",
    )
    .unwrap();
    assert_eq!(a, serde_json::from_slice::<Value>(&b.body).unwrap());
    let bad = json!({"model": "m", "messages": [{"role": "robot", "content": "hi"}]});
    assert_eq!(
        req(Dialect::OpenAi, Dialect::Anthropic, bad).unwrap_err(),
        Reason::InvalidBody
    );
    let bad = json!({"model": "m", "messages": [{"content": "hi"}]});
    assert_eq!(
        req(Dialect::OpenAi, Dialect::Anthropic, bad).unwrap_err(),
        Reason::InvalidBody
    );
    let a_later = r#"{"model":"m","max_tokens":5,"messages":[{"content":"hi","role":"user"}]}"#;
    assert!(
        translate_request(Dialect::Anthropic, Dialect::OpenAi, a_later.as_bytes(), "g").is_ok()
    );
}

#[test]
fn usage_from_the_network_saturates_instead_of_overflowing() {
    let m = json!({"id": "msg_1", "type": "message", "role": "assistant", "model": "c",
        "content": [{"type": "text", "text": "x"}], "stop_reason": "end_turn",
        "usage": {"input_tokens": u64::MAX, "output_tokens": u64::MAX, "cache_read_input_tokens": 5}});
    let out = translate_response(
        Dialect::Anthropic,
        Dialect::OpenAi,
        m.to_string().as_bytes(),
        0,
    )
    .unwrap();
    let o: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(o["usage"]["total_tokens"], u64::MAX);
}

#[test]
fn sampling_parameters_cross_where_both_dialects_have_them() {
    let body = json!({
        "model": "m", "messages": [{"role": "user", "content": "hi"}],
        "temperature": 0.7, "top_p": 0.9, "top_k": 40, "stop": ["END"]
    });
    let a = req(Dialect::OpenAi, Dialect::Anthropic, body).unwrap();
    assert_eq!(a["temperature"], 0.7);
    assert_eq!(a["top_p"], 0.9);
    assert_eq!(a["top_k"], 40);
    assert_eq!(a["stop_sequences"], json!(["END"]));
    let back = json!({
        "model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}],
        "temperature": 0.3, "top_p": 0.5, "stop_sequences": ["x"]
    });
    let o = req(Dialect::Anthropic, Dialect::OpenAi, back.clone()).unwrap();
    assert_eq!(o["temperature"], 0.3);
    assert_eq!(o["top_p"], 0.5);
    assert_eq!(o["stop"], json!(["x"]));
    let mut with_k = back;
    with_k["top_k"] = json!(5);
    assert_eq!(
        req(Dialect::Anthropic, Dialect::OpenAi, with_k).unwrap_err(),
        Reason::Sampling
    );
}
