use super::*;

fn converse(body: Value) -> Value {
    let out = request_from_messages(body.to_string().as_bytes()).unwrap();
    serde_json::from_slice(&out).unwrap()
}

#[test]
fn a_messages_request_becomes_the_converse_shape() {
    let v = converse(json!({
        "model": "meta.llama3-70b-instruct-v1:0",
        "stream": true,
        "max_tokens": 300,
        "temperature": 0.2,
        "top_p": 0.9,
        "top_k": 40,
        "stop_sequences": ["END"],
        "system": [{ "type": "text", "text": "Be brief.", "cache_control": { "type": "ephemeral" } }],
        "messages": [
            { "role": "user", "content": [
                { "type": "text", "text": "What is in this image?" },
                { "type": "image", "source": { "type": "base64", "media_type": "image/png", "data": "iVBORw0K" } },
            ]},
            { "role": "assistant", "content": [
                { "type": "tool_use", "id": "t1", "name": "look", "input": { "q": 1 } },
            ]},
            { "role": "user", "content": [
                { "type": "tool_result", "tool_use_id": "t1", "content": "a cat", "is_error": true },
            ]},
        ],
        "tools": [{ "name": "look", "description": "Looks.", "input_schema": { "type": "object" } }],
        "tool_choice": { "type": "tool", "name": "look" },
    }));
    assert!(v.get("model").is_none() && v.get("stream").is_none(), "{v}");
    assert_eq!(
        v["inferenceConfig"],
        json!({ "maxTokens": 300, "temperature": 0.2, "topP": 0.9, "stopSequences": ["END"] })
    );
    assert_eq!(v["additionalModelRequestFields"], json!({ "top_k": 40 }));
    assert_eq!(
        v["system"],
        json!([{ "text": "Be brief." }, { "cachePoint": { "type": "default" } }])
    );
    let m = &v["messages"];
    assert_eq!(
        m[0]["content"][0],
        json!({ "text": "What is in this image?" })
    );
    assert_eq!(
        m[0]["content"][1],
        json!({ "image": { "format": "png", "source": { "bytes": "iVBORw0K" } } })
    );
    assert_eq!(
        m[1]["content"][0],
        json!({ "toolUse": { "toolUseId": "t1", "name": "look", "input": { "q": 1 } } })
    );
    assert_eq!(
        m[2]["content"][0],
        json!({ "toolResult": { "toolUseId": "t1", "content": [{ "text": "a cat" }], "status": "error" } })
    );
    assert_eq!(
        v["toolConfig"]["tools"][0],
        json!({ "toolSpec": { "name": "look", "description": "Looks.", "inputSchema": { "json": { "type": "object" } } } })
    );
    assert_eq!(
        v["toolConfig"]["toolChoice"],
        json!({ "tool": { "name": "look" } })
    );
}

#[test]
fn what_converse_cannot_carry_is_refused_by_name() {
    let refused = |body: Value| request_from_messages(body.to_string().as_bytes()).unwrap_err();
    let base = |extra: (&str, Value)| {
        let mut b = json!({ "model": "m", "max_tokens": 5, "messages": [{ "role": "user", "content": "hi" }] });
        b[extra.0] = extra.1;
        b
    };
    let e = refused(base(("service_tier", json!("priority"))));
    assert_eq!(e.param, Some("service_tier"), "{e}");
    let e = refused(base((
        "tools",
        json!([{ "type": "web_search_20250305", "name": "web_search" }]),
    )));
    assert_eq!(e.reason, Reason::ToolKind, "{e}");
    let e = refused(
        json!({ "model": "m", "max_tokens": 5, "messages": [{ "role": "user", "content": [
        { "type": "image", "source": { "type": "url", "url": "https://example.com/a.png" } } ] }] }),
    );
    assert_eq!(e.reason, Reason::ContentPart, "{e}");
    // A tool choice without tools is nothing to carry; with tools, `none`
    // (Converse has no such choice) is refused.
    let v = converse(base(("tool_choice", json!({ "type": "none" }))));
    assert!(v.get("toolConfig").is_none(), "{v}");
    let mut b = base((
        "tools",
        json!([{ "name": "f", "input_schema": { "type": "object" } }]),
    ));
    b["tool_choice"] = json!({ "type": "none" });
    assert_eq!(refused(b).param, Some("tool_choice"));
    // A hint that changes nothing is left behind.
    let v = converse(base(("service_tier", json!("auto"))));
    assert!(v.get("service_tier").is_none(), "{v}");
}

#[test]
fn a_converse_answer_reads_as_a_message() {
    let body = json!({
        "output": { "message": { "role": "assistant", "content": [
            { "reasoningContent": { "reasoningText": { "text": "hmm", "signature": "sig" } } },
            { "text": "Calling." },
            { "toolUse": { "toolUseId": "tooluse_1", "name": "look", "input": { "q": 2 } } },
        ]}},
        "stopReason": "tool_use",
        "usage": { "inputTokens": 12, "outputTokens": 7, "totalTokens": 19, "cacheReadInputTokens": 3 },
        "metrics": { "latencyMs": 120 },
    });
    let out =
        message_from_converse(body.to_string().as_bytes(), "meta.llama", "msg_bdrk_1").unwrap();
    let m: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(m["type"], "message");
    assert_eq!(m["model"], "meta.llama");
    assert_eq!(m["stop_reason"], "tool_use");
    assert_eq!(
        m["content"][0],
        json!({ "type": "thinking", "thinking": "hmm", "signature": "sig" })
    );
    assert_eq!(
        m["content"][1],
        json!({ "type": "text", "text": "Calling." })
    );
    assert_eq!(
        m["content"][2],
        json!({ "type": "tool_use", "id": "tooluse_1", "name": "look", "input": { "q": 2 } })
    );
    assert_eq!(
        m["usage"],
        json!({ "input_tokens": 12, "output_tokens": 7, "cache_read_input_tokens": 3 })
    );
    assert_eq!(stop_reason("guardrail_intervened"), "refusal");
    assert!(message_from_converse(b"{\"message\":\"x\"}", "m", "i").is_err());
}

/// The SSE events `t` writes for the Converse events given.
fn sse_of(t: &mut ConverseToMessages, events: &[(&str, Value)]) -> Vec<(String, Value)> {
    let mut out = Vec::new();
    for (kind, payload) in events {
        t.event(kind, payload.to_string().as_bytes(), &mut out)
            .unwrap();
    }
    t.finish(&mut out);
    let text = String::from_utf8(out).unwrap();
    text.split("\n\n")
        .filter(|e| !e.is_empty())
        .map(|e| {
            let (head, data) = e.split_once("\ndata: ").unwrap();
            let kind = head.strip_prefix("event: ").unwrap().to_string();
            let v: Value = serde_json::from_str(data).unwrap();
            assert_eq!(v["type"], kind.as_str());
            (kind, v)
        })
        .collect()
}

#[test]
fn a_converse_stream_reads_as_the_messages_stream() {
    let mut t = ConverseToMessages::new("mistral.large", "msg_bdrk_2");
    let events = sse_of(
        &mut t,
        &[
            ("messageStart", json!({ "role": "assistant" })),
            (
                "contentBlockDelta",
                json!({ "contentBlockIndex": 0, "delta": { "text": "Hel" } }),
            ),
            (
                "contentBlockDelta",
                json!({ "contentBlockIndex": 0, "delta": { "text": "lo" } }),
            ),
            ("contentBlockStop", json!({ "contentBlockIndex": 0 })),
            (
                "contentBlockStart",
                json!({ "contentBlockIndex": 1, "start": { "toolUse": { "toolUseId": "tu1", "name": "f" } } }),
            ),
            (
                "contentBlockDelta",
                json!({ "contentBlockIndex": 1, "delta": { "toolUse": { "input": "{\"a\":" } } }),
            ),
            (
                "contentBlockDelta",
                json!({ "contentBlockIndex": 1, "delta": { "toolUse": { "input": "1}" } } }),
            ),
            ("contentBlockStop", json!({ "contentBlockIndex": 1 })),
            ("messageStop", json!({ "stopReason": "tool_use" })),
            (
                "metadata",
                json!({ "usage": { "inputTokens": 9, "outputTokens": 4, "totalTokens": 13 }, "metrics": { "latencyMs": 5 } }),
            ),
        ],
    );
    let kinds: Vec<&str> = events.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        kinds,
        [
            "message_start",
            "content_block_start",
            "content_block_delta",
            "content_block_delta",
            "content_block_stop",
            "content_block_start",
            "content_block_delta",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop",
        ]
    );
    assert_eq!(events[0].1["message"]["model"], "mistral.large");
    assert_eq!(
        events[1].1["content_block"],
        json!({ "type": "text", "text": "" })
    );
    assert_eq!(
        events[3].1["delta"],
        json!({ "type": "text_delta", "text": "lo" })
    );
    assert_eq!(
        events[5].1["content_block"],
        json!({ "type": "tool_use", "id": "tu1", "name": "f", "input": {} })
    );
    assert_eq!(
        events[7].1["delta"],
        json!({ "type": "input_json_delta", "partial_json": "1}" })
    );
    assert_eq!(events[9].1["delta"]["stop_reason"], "tool_use");
    assert_eq!(
        events[9].1["usage"],
        json!({ "input_tokens": 9, "output_tokens": 4 })
    );
    assert!(t.finished());
}

#[test]
fn a_stream_without_its_usage_still_ends_and_one_cut_short_does_not() {
    let mut t = ConverseToMessages::new("m", "i");
    let events = sse_of(
        &mut t,
        &[
            (
                "contentBlockDelta",
                json!({ "contentBlockIndex": 0, "delta": { "text": "x" } }),
            ),
            ("messageStop", json!({ "stopReason": "max_tokens" })),
        ],
    );
    let kinds: Vec<&str> = events.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        kinds,
        [
            "message_start",
            "content_block_start",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop"
        ]
    );
    assert_eq!(events[4].1["delta"]["stop_reason"], "max_tokens");
    let mut cut = ConverseToMessages::new("m", "i");
    let events = sse_of(
        &mut cut,
        &[(
            "contentBlockDelta",
            json!({ "contentBlockIndex": 0, "delta": { "text": "x" } }),
        )],
    );
    assert!(events.iter().all(|(k, _)| k != "message_stop"));
    assert!(!cut.finished());
}

#[test]
fn a_converse_request_reads_as_a_messages_request() {
    let body = json!({
        "messages": [
            { "role": "user", "content": [{ "text": "Look." }, { "cachePoint": { "type": "default" } },
                { "image": { "format": "png", "source": { "bytes": "iVBO" } } }] },
            { "role": "assistant", "content": [{ "toolUse": { "toolUseId": "t", "name": "f", "input": { "a": 1 } } }] },
            { "role": "user", "content": [{ "toolResult": { "toolUseId": "t", "content": [{ "json": { "ok": true } }], "status": "error" } }] },
        ],
        "system": [{ "text": "Be brief." }],
        "inferenceConfig": { "maxTokens": 50, "topP": 0.5, "stopSequences": ["X"] },
        "toolConfig": { "tools": [{ "toolSpec": { "name": "f", "inputSchema": { "json": { "type": "object" } } } }],
            "toolChoice": { "any": {} } },
        "additionalModelRequestFields": { "top_k": 3 },
    });
    let out = messages_from_converse(body.to_string().as_bytes(), "claude-x", true).unwrap();
    let m: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(
        (
            m["model"].as_str(),
            m["stream"].as_bool(),
            m["max_tokens"].as_u64()
        ),
        (Some("claude-x"), Some(true), Some(50))
    );
    assert_eq!(m["top_p"], 0.5);
    assert_eq!(m["top_k"], 3);
    assert_eq!(m["stop_sequences"], json!(["X"]));
    assert_eq!(
        m["system"],
        json!([{ "type": "text", "text": "Be brief." }])
    );
    let user = &m["messages"][0]["content"];
    assert_eq!(
        user[0],
        json!({ "type": "text", "text": "Look.", "cache_control": { "type": "ephemeral" } })
    );
    assert_eq!(
        user[1]["source"],
        json!({ "type": "base64", "media_type": "image/png", "data": "iVBO" })
    );
    assert_eq!(
        m["messages"][1]["content"][0],
        json!({ "type": "tool_use", "id": "t", "name": "f", "input": { "a": 1 } })
    );
    let result = &m["messages"][2]["content"][0];
    assert_eq!(
        (
            result["is_error"].as_bool(),
            result["content"][0]["text"].as_str()
        ),
        (Some(true), Some(r#"{"ok":true}"#))
    );
    assert_eq!(m["tool_choice"], json!({ "type": "any" }));
    assert_eq!(m["tools"][0]["input_schema"], json!({ "type": "object" }));
    // No maxTokens: the Messages API's default; guardrails have no counterpart.
    let m: Value =
        serde_json::from_slice(&messages_from_converse(br#"{"messages":[]}"#, "m", false).unwrap())
            .unwrap();
    assert_eq!(m["max_tokens"], crate::DEFAULT_MAX_TOKENS);
    let e =
        messages_from_converse(br#"{"messages":[],"guardrailConfig":{}}"#, "m", false).unwrap_err();
    assert!(e.detail.contains("guardrailConfig"), "{e}");
}

#[test]
fn a_messages_answer_writes_as_converse_whole_and_event_by_event() {
    let answer = json!({ "id": "m", "type": "message", "role": "assistant", "model": "x",
        "content": [{ "type": "text", "text": "Hi" }, { "type": "tool_use", "id": "t", "name": "f", "input": {} }],
        "stop_reason": "tool_use", "usage": { "input_tokens": 4, "output_tokens": 2 } });
    let c: Value =
        serde_json::from_slice(&converse_from_message(answer.to_string().as_bytes()).unwrap())
            .unwrap();
    assert_eq!(c["stopReason"], "tool_use");
    assert_eq!(
        c["output"]["message"]["content"][1]["toolUse"]["toolUseId"],
        "t"
    );
    assert_eq!(
        c["usage"],
        json!({ "inputTokens": 4, "outputTokens": 2, "totalTokens": 6 })
    );
    let mut w = MessagesToConverse::default();
    let mut kinds = Vec::new();
    let mut last = Value::Null;
    for e in [
        json!({ "type": "message_start", "message": { "usage": { "input_tokens": 7, "output_tokens": 1 } } }),
        json!({ "type": "content_block_start", "index": 0, "content_block": { "type": "text", "text": "" } }),
        json!({ "type": "content_block_delta", "index": 0, "delta": { "type": "text_delta", "text": "Hi" } }),
        json!({ "type": "content_block_stop", "index": 0 }),
        json!({ "type": "message_delta", "delta": { "stop_reason": "end_turn" }, "usage": { "output_tokens": 3 } }),
        json!({ "type": "message_stop" }),
    ] {
        for (k, p) in w.event(&e) {
            kinds.push(k);
            last = p;
        }
    }
    assert_eq!(
        kinds,
        [
            "messageStart",
            "contentBlockDelta",
            "contentBlockStop",
            "messageStop",
            "metadata"
        ]
    );
    assert_eq!(
        last["usage"],
        json!({ "inputTokens": 7, "outputTokens": 3, "totalTokens": 10 })
    );
}
