//! Amazon Bedrock's Converse face (`--api bedrock`): `POST
//! /model/{modelId}/converse` and `/converse-stream`, checked against the
//! `bedrock-runtime` 2023-09-30 service model as strictly as Bedrock
//! checks them, for any model id.
//!
//! - Request: a JSON object of the Converse members only (`messages`,
//!   `system`, `inferenceConfig`, `toolConfig`,
//!   `additionalModelRequestFields`, `requestMetadata`, …; any other key is
//!   a `ValidationException`). Every content block is a union with exactly
//!   one member; roles are `user` and `assistant`, starting with `user` and
//!   alternating; `toolUse` and `toolResult` blocks need a `toolConfig`;
//!   `maxTokens` is at least 1, `temperature` and `topP` lie in [0, 1].
//!   The request is then answered by the strict Anthropic API, written as
//!   a Messages request (`additionalModelRequestFields` as top-level
//!   fields, `maxTokens` 4096 when absent).
//! - Answer: `{"output": {"message"}, "stopReason", "usage", "metrics"}`;
//!   a stream as event-stream frames `messageStart`,
//!   `contentBlockStart` (tool use only), `contentBlockDelta`,
//!   `contentBlockStop`, `messageStop`, `metadata` (the usage), each JSON
//!   payload with Bedrock's `p` padding field. Errors as for `InvokeModel`.

use bytes::Bytes;
use serde_json::{json, Map, Value};

use super::Refused;

/// The members of a Converse request body (the model id is in the URL).
const MEMBERS: [&str; 12] = [
    "messages",
    "system",
    "inferenceConfig",
    "toolConfig",
    "guardrailConfig",
    "additionalModelRequestFields",
    "promptVariables",
    "additionalModelResponseFieldPaths",
    "requestMetadata",
    "performanceConfig",
    "serviceTier",
    "outputConfig",
];

/// A `maxTokens` for a request that set none (the Messages API needs one).
const DEFAULT_MAX_TOKENS: u64 = 4096;

fn invalid(message: String) -> Refused {
    super::bedrock::validation(&message)
}

/// The one member of a union value at `at`, or a refusal.
fn union<'v>(v: &'v Value, at: &str) -> Result<(&'v str, &'v Value), Refused> {
    match v.as_object() {
        Some(o) if o.len() == 1 => o
            .iter()
            .next()
            .map(|(k, v)| (k.as_str(), v))
            .ok_or_else(|| invalid(format!("{at}: expected one member"))),
        _ => Err(invalid(format!(
            "{at}: a union must have exactly one member set"
        ))),
    }
}

fn string<'v>(v: &'v Value, key: &str, at: &str) -> Result<&'v str, Refused> {
    v.get(key)
        .and_then(Value::as_str)
        .ok_or_else(|| invalid(format!("{at}.{key}: required string is missing")))
}

/// The Messages request for a Converse request `body` to `model`.
pub(super) fn native_body(body: &[u8], model: &str, stream: bool) -> Result<Bytes, Refused> {
    let fields: Map<String, Value> = serde_json::from_slice(body)
        .map_err(|_| invalid("The request body is not a JSON object.".into()))?;
    if let Some(k) = fields.keys().find(|k| !MEMBERS.contains(&k.as_str())) {
        return Err(invalid(format!("extraneous key [{k}] is not permitted")));
    }
    let mut out = Map::new();
    out.insert("model".into(), json!(model));
    let messages = fields
        .get("messages")
        .and_then(Value::as_array)
        .ok_or_else(|| invalid("messages: required list is missing".into()))?;
    let has_tools = fields.get("toolConfig").is_some();
    out.insert("messages".into(), self::messages(messages, has_tools)?);
    if let Some(system) = fields.get("system") {
        out.insert("system".into(), self::system(system)?);
    }
    inference(fields.get("inferenceConfig"), &mut out)?;
    if let Some(config) = fields.get("toolConfig") {
        tools(config, &mut out)?;
    }
    if let Some(extra) = fields.get("additionalModelRequestFields") {
        let extra = extra
            .as_object()
            .ok_or_else(|| invalid("additionalModelRequestFields: expected a document".into()))?;
        for (k, v) in extra {
            out.insert(k.clone(), v.clone());
        }
    }
    if stream {
        out.insert("stream".into(), json!(true));
    }
    Ok(Bytes::from(Value::Object(out).to_string()))
}

fn messages(list: &[Value], has_tools: bool) -> Result<Value, Refused> {
    let mut out = Vec::with_capacity(list.len());
    let mut last: Option<&str> = None;
    for (i, m) in list.iter().enumerate() {
        let at = format!("messages[{i}]");
        let role = string(m, "role", &at)?;
        match (role, last) {
            ("user" | "assistant", Some(prev)) if prev == role => {
                return Err(invalid(
                    "A conversation must alternate between user and assistant roles.".into(),
                ))
            }
            ("assistant", None) => {
                return Err(invalid(
                    "A conversation must start with a user message.".into(),
                ))
            }
            ("user" | "assistant", _) => {}
            _ => return Err(invalid(format!("{at}.role: must be user or assistant"))),
        }
        last = Some(role);
        let blocks = m
            .get("content")
            .and_then(Value::as_array)
            .ok_or_else(|| invalid(format!("{at}.content: required list is missing")))?;
        let mut content = Vec::with_capacity(blocks.len());
        for (j, b) in blocks.iter().enumerate() {
            if let Some(block) = block(b, &format!("{at}.content[{j}]"), has_tools)? {
                content.push(block);
            }
        }
        out.push(json!({ "role": role, "content": content }));
    }
    Ok(Value::Array(out))
}

/// One Converse content block as a Messages block (`None`: a cache point).
fn block(b: &Value, at: &str, has_tools: bool) -> Result<Option<Value>, Refused> {
    let (kind, v) = union(b, at)?;
    let needs_tools = || {
        invalid("The toolConfig field must be defined when using toolUse and toolResult content blocks.".into())
    };
    Ok(Some(match kind {
        "text" => {
            json!({ "type": "text", "text": v.as_str().ok_or_else(|| invalid(format!("{at}.text: expected a string")))? })
        }
        "image" => image(v, at)?,
        "toolUse" if !has_tools => return Err(needs_tools()),
        "toolUse" => json!({
            "type": "tool_use",
            "id": string(v, "toolUseId", at)?,
            "name": string(v, "name", at)?,
            "input": v.get("input").ok_or_else(|| invalid(format!("{at}.toolUse.input: required")))?,
        }),
        "toolResult" if !has_tools => return Err(needs_tools()),
        "toolResult" => {
            let parts = v
                .get("content")
                .and_then(Value::as_array)
                .ok_or_else(|| invalid(format!("{at}.toolResult.content: required list")))?;
            let mut content = Vec::with_capacity(parts.len());
            for p in parts {
                let (k, pv) = union(p, at)?;
                content.push(match k {
                    "text" => json!({ "type": "text", "text": pv }),
                    "json" => json!({ "type": "text", "text": pv.to_string() }),
                    "image" => image(pv, at)?,
                    other => {
                        return Err(invalid(format!(
                            "{at}: the mock does not take a `{other}` tool result"
                        )))
                    }
                });
            }
            let mut r = json!({ "type": "tool_result", "tool_use_id": string(v, "toolUseId", at)?, "content": content });
            if v.get("status").and_then(Value::as_str) == Some("error") {
                r["is_error"] = json!(true);
            }
            r
        }
        "cachePoint" => return Ok(None),
        "document" | "reasoningContent" | "guardContent" | "video" | "audio" => {
            return Err(invalid(format!(
                "{at}: the mock does not take `{kind}` blocks"
            )))
        }
        other => {
            return Err(invalid(format!(
                "{at}: unknown content block member `{other}`"
            )))
        }
    }))
}

fn image(v: &Value, at: &str) -> Result<Value, Refused> {
    let format = string(v, "format", at)?;
    if !matches!(format, "png" | "jpeg" | "gif" | "webp") {
        return Err(invalid(format!(
            "{at}.image.format: `{format}` is not png, jpeg, gif or webp"
        )));
    }
    let (kind, data) = union(v.get("source").unwrap_or(&Value::Null), at)?;
    if kind != "bytes" || !data.is_string() {
        return Err(invalid(format!(
            "{at}.image.source: only bytes are served by the mock"
        )));
    }
    Ok(
        json!({ "type": "image", "source": { "type": "base64", "media_type": format!("image/{format}"), "data": data } }),
    )
}

fn system(v: &Value) -> Result<Value, Refused> {
    let list = v
        .as_array()
        .ok_or_else(|| invalid("system: expected a list".into()))?;
    let mut out = Vec::new();
    for (i, b) in list.iter().enumerate() {
        match union(b, &format!("system[{i}]"))? {
            ("text", Value::String(t)) if !t.trim().is_empty() => {
                out.push(json!({ "type": "text", "text": t }))
            }
            ("text", _) => return Err(invalid(format!("system[{i}].text: must not be blank"))),
            ("cachePoint", _) => {}
            (other, _) => {
                return Err(invalid(format!(
                    "system[{i}]: the mock does not take `{other}`"
                )))
            }
        }
    }
    Ok(Value::Array(out))
}

fn inference(config: Option<&Value>, out: &mut Map<String, Value>) -> Result<(), Refused> {
    let empty = Map::new();
    let config = match config {
        None => &empty,
        Some(c) => c
            .as_object()
            .ok_or_else(|| invalid("inferenceConfig: expected a structure".into()))?,
    };
    for (k, v) in config {
        let unit = |name: &str| match v.as_f64() {
            Some(x) if (0.0..=1.0).contains(&x) => Ok(()),
            _ => Err(invalid(format!(
                "inferenceConfig.{name}: must be a number in [0, 1]"
            ))),
        };
        match k.as_str() {
            "maxTokens" if v.as_u64().is_some_and(|n| n >= 1) => {}
            "maxTokens" => {
                return Err(invalid(
                    "inferenceConfig.maxTokens: must be an integer of at least 1".into(),
                ))
            }
            "temperature" | "topP" => unit(k)?,
            "stopSequences"
                if v.as_array().is_some_and(|s| {
                    s.iter().all(|x| x.as_str().is_some_and(|x| !x.is_empty()))
                }) => {}
            "stopSequences" => {
                return Err(invalid(
                    "inferenceConfig.stopSequences: must be non-empty strings".into(),
                ))
            }
            other => {
                return Err(invalid(format!(
                    "inferenceConfig: extraneous key [{other}] is not permitted"
                )))
            }
        }
    }
    let max = config
        .get("maxTokens")
        .and_then(Value::as_u64)
        .unwrap_or(DEFAULT_MAX_TOKENS);
    out.insert("max_tokens".into(), json!(max));
    for (from, to) in [
        ("temperature", "temperature"),
        ("topP", "top_p"),
        ("stopSequences", "stop_sequences"),
    ] {
        if let Some(v) = config.get(from) {
            out.insert(to.into(), v.clone());
        }
    }
    Ok(())
}

fn tools(config: &Value, out: &mut Map<String, Value>) -> Result<(), Refused> {
    let list = config
        .get("tools")
        .and_then(Value::as_array)
        .filter(|t| !t.is_empty())
        .ok_or_else(|| invalid("toolConfig.tools: required non-empty list".into()))?;
    let mut tools = Vec::with_capacity(list.len());
    for (i, t) in list.iter().enumerate() {
        let at = format!("toolConfig.tools[{i}]");
        match union(t, &at)? {
            ("toolSpec", spec) => {
                let schema = union(spec.get("inputSchema").unwrap_or(&Value::Null), &at)?;
                if schema.0 != "json" {
                    return Err(invalid(format!("{at}.inputSchema: expected `json`")));
                }
                let mut tool =
                    json!({ "name": string(spec, "name", &at)?, "input_schema": schema.1 });
                if let Some(d) = spec.get("description") {
                    tool["description"] = d.clone();
                }
                tools.push(tool);
            }
            ("cachePoint", _) => {}
            (other, _) => return Err(invalid(format!("{at}: the mock does not take `{other}`"))),
        }
    }
    out.insert("tools".into(), Value::Array(tools));
    if let Some(choice) = config.get("toolChoice") {
        let choice = match union(choice, "toolConfig.toolChoice")? {
            ("auto", _) => json!({ "type": "auto" }),
            ("any", _) => json!({ "type": "any" }),
            ("tool", v) => {
                json!({ "type": "tool", "name": string(v, "name", "toolConfig.toolChoice.tool")? })
            }
            (other, _) => {
                return Err(invalid(format!(
                    "toolConfig.toolChoice: unknown member `{other}`"
                )))
            }
        };
        out.insert("tool_choice".into(), choice);
    }
    Ok(())
}

/// The Converse `stopReason` of a Messages `stop_reason`.
fn stop_reason(messages: &str) -> &str {
    match messages {
        "refusal" => "content_filtered",
        other => other,
    }
}

/// A Messages answer as a `ConverseResponse`.
pub(super) fn answer(native: &[u8]) -> Bytes {
    let v: Value = serde_json::from_slice(native).unwrap_or(Value::Null);
    let content: Vec<Value> = v
        .get("content")
        .and_then(Value::as_array)
        .map(|c| {
            c.iter()
                .filter_map(|b| match b.get("type").and_then(Value::as_str) {
                    Some("text") => Some(json!({ "text": b["text"] })),
                    Some("tool_use") => Some(json!({ "toolUse": { "toolUseId": b["id"], "name": b["name"], "input": b["input"] } })),
                    _ => None,
                })
                .collect()
        })
        .unwrap_or_default();
    let stop = v
        .get("stop_reason")
        .and_then(Value::as_str)
        .map_or("end_turn", stop_reason);
    let out = json!({
        "output": { "message": { "role": "assistant", "content": content } },
        "stopReason": stop,
        "usage": usage(v.get("usage")),
        "metrics": { "latencyMs": 1 },
    });
    Bytes::from(out.to_string())
}

fn usage(u: Option<&Value>) -> Value {
    let n = |k: &str| {
        u.and_then(|u| u.get(k))
            .and_then(Value::as_u64)
            .unwrap_or(0)
    };
    let (i, o) = (n("input_tokens"), n("output_tokens"));
    json!({ "inputTokens": i, "outputTokens": o, "totalTokens": i + o })
}

/// A Messages stream's events as Converse events: each SSE event's JSON
/// gives zero or more `(event type, payload)`. `usage` keeps the counts
/// seen so far (input from `message_start`, output from `message_delta`)
/// for the closing `metadata` event.
pub(super) fn events(event: &Value, usage: &mut (u64, u64)) -> Vec<(&'static str, Value)> {
    let index = event.get("index").cloned().unwrap_or(json!(0));
    match event.get("type").and_then(Value::as_str) {
        Some("message_start") => {
            usage.0 = event
                .pointer("/message/usage/input_tokens")
                .and_then(Value::as_u64)
                .unwrap_or(0);
            vec![("messageStart", json!({ "role": "assistant" }))]
        }
        Some("content_block_start") => {
            match event.pointer("/content_block/type").and_then(Value::as_str) {
                Some("tool_use") => {
                    let b = &event["content_block"];
                    vec![(
                        "contentBlockStart",
                        json!({ "contentBlockIndex": index, "start": { "toolUse": { "toolUseId": b["id"], "name": b["name"] } } }),
                    )]
                }
                _ => Vec::new(),
            }
        }
        Some("content_block_delta") => {
            let d = &event["delta"];
            let delta = match d.get("type").and_then(Value::as_str) {
                Some("text_delta") => json!({ "text": d["text"] }),
                Some("input_json_delta") => json!({ "toolUse": { "input": d["partial_json"] } }),
                _ => return Vec::new(),
            };
            vec![(
                "contentBlockDelta",
                json!({ "contentBlockIndex": index, "delta": delta }),
            )]
        }
        Some("content_block_stop") => {
            vec![("contentBlockStop", json!({ "contentBlockIndex": index }))]
        }
        Some("message_delta") => {
            usage.1 = event
                .pointer("/usage/output_tokens")
                .and_then(Value::as_u64)
                .unwrap_or(usage.1);
            let stop = event
                .pointer("/delta/stop_reason")
                .and_then(Value::as_str)
                .unwrap_or("end_turn");
            vec![("messageStop", json!({ "stopReason": stop_reason(stop) }))]
        }
        Some("message_stop") => {
            let (i, o) = *usage;
            vec![(
                "metadata",
                json!({ "usage": { "inputTokens": i, "outputTokens": o, "totalTokens": i + o }, "metrics": { "latencyMs": 1 } }),
            )]
        }
        _ => Vec::new(),
    }
}
