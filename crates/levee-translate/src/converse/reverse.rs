//! The other way: a Converse request (as boto3's `converse` and
//! `converse_stream` send it) read as a Messages request, and the Messages
//! answer, whole or event by event, written as Converse answers. This is
//! how a client written against Bedrock's Converse API is served by any
//! route, Anthropic's own API included.

use serde_json::{json, Map, Value};

use super::{invalid, refuse};
use crate::{BadAnswer, Reason, Untranslatable};

/// `max_tokens` for a Converse request that set no `maxTokens` (Converse
/// lets the model decide; the Messages API needs a number).
pub const DEFAULT_MAX_TOKENS: u64 = crate::DEFAULT_MAX_TOKENS;

fn str_of<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

/// The one member of a union value.
fn member(v: &Value) -> Option<(&str, &Value)> {
    let o = v.as_object()?;
    (o.len() == 1).then(|| o.iter().next().map(|(k, v)| (k.as_str(), v)))?
}

/// The Messages request for a Converse request `body` to `model`.
pub fn messages_from_converse(
    body: &[u8],
    model: &str,
    stream: bool,
) -> Result<Vec<u8>, Untranslatable> {
    let fields: Map<String, Value> =
        serde_json::from_slice(body).map_err(|e| invalid(&e.to_string()))?;
    let mut out = Map::new();
    out.insert("model".into(), json!(model));
    let mut max_tokens = DEFAULT_MAX_TOKENS;
    for (key, value) in &fields {
        match key.as_str() {
            "messages" => {
                out.insert("messages".into(), messages(value)?);
            }
            "system" => {
                let blocks = blocks(value, |b| match member(b) {
                    Some(("text", Value::String(t))) => {
                        Ok(Some(json!({ "type": "text", "text": t })))
                    }
                    _ => Err(refuse(
                        Reason::ContentPart,
                        None,
                        "a system block other than text or cachePoint has no Messages counterpart"
                            .into(),
                    )),
                })?;
                out.insert("system".into(), Value::Array(blocks));
            }
            "inferenceConfig" => {
                for (k, v) in value.as_object().into_iter().flatten() {
                    let to = match k.as_str() {
                        "maxTokens" => {
                            max_tokens = v.as_u64().unwrap_or(max_tokens);
                            continue;
                        }
                        "temperature" => "temperature",
                        "topP" => "top_p",
                        "stopSequences" => "stop_sequences",
                        other => return Err(unknown(&format!("inferenceConfig.{other}"))),
                    };
                    out.insert(to.into(), v.clone());
                }
            }
            "toolConfig" => tools(value, &mut out)?,
            "additionalModelRequestFields" => {
                for (k, v) in value.as_object().into_iter().flatten() {
                    out.insert(k.clone(), v.clone());
                }
            }
            "requestMetadata" => {
                if let Some(user) = str_of(value, "user_id") {
                    out.insert("metadata".into(), json!({ "user_id": user }));
                }
            }
            other => return Err(unknown(other)),
        }
    }
    out.insert("max_tokens".into(), json!(max_tokens));
    if stream {
        out.insert("stream".into(), json!(true));
    }
    serde_json::to_vec(&Value::Object(out)).map_err(|e| invalid(&e.to_string()))
}

fn unknown(field: &str) -> Untranslatable {
    refuse(
        Reason::UnknownField,
        None,
        format!("the Converse field `{field}` has no counterpart in the Messages API"),
    )
}

/// A list of Converse blocks as Messages blocks, each made by `one`; a
/// `cachePoint` marks the block before it with `cache_control`.
fn blocks(
    list: &Value,
    one: impl Fn(&Value) -> Result<Option<Value>, Untranslatable>,
) -> Result<Vec<Value>, Untranslatable> {
    let list = list
        .as_array()
        .ok_or_else(|| invalid("expected a list of blocks"))?;
    let mut out: Vec<Value> = Vec::with_capacity(list.len());
    for b in list {
        if b.get("cachePoint").is_some() {
            if let Some(last) = out.last_mut() {
                last["cache_control"] = json!({ "type": "ephemeral" });
            }
            continue;
        }
        if let Some(block) = one(b)? {
            out.push(block);
        }
    }
    Ok(out)
}

fn messages(list: &Value) -> Result<Value, Untranslatable> {
    let list = list
        .as_array()
        .ok_or_else(|| invalid("`messages` must be a list"))?;
    let mut out = Vec::with_capacity(list.len());
    for m in list {
        let role = str_of(m, "role").ok_or_else(|| invalid("a message has no `role`"))?;
        let content = blocks(m.get("content").unwrap_or(&Value::Null), |b| {
            block(b).map(Some)
        })?;
        out.push(json!({ "role": role, "content": content }));
    }
    Ok(Value::Array(out))
}

fn part(kind: &str) -> Untranslatable {
    refuse(
        Reason::ContentPart,
        None,
        format!("a Converse `{kind}` block has no Messages counterpart"),
    )
}

/// One Converse content block as a Messages block.
fn block(b: &Value) -> Result<Value, Untranslatable> {
    let (kind, v) =
        member(b).ok_or_else(|| invalid("a content block must have exactly one member"))?;
    Ok(match kind {
        "text" => json!({ "type": "text", "text": v }),
        "image" => image(v)?,
        "document" => {
            let data = v
                .pointer("/source/bytes")
                .ok_or_else(|| part("document (not bytes)"))?;
            if str_of(v, "format") != Some("pdf") {
                return Err(part("document (not PDF)"));
            }
            json!({ "type": "document", "title": v.get("name"), "source": { "type": "base64", "media_type": "application/pdf", "data": data } })
        }
        "toolUse" => json!({
            "type": "tool_use",
            "id": v.get("toolUseId"),
            "name": v.get("name"),
            "input": v.get("input").cloned().unwrap_or_else(|| json!({})),
        }),
        "toolResult" => {
            let parts = blocks(v.get("content").unwrap_or(&json!([])), |p| {
                Ok(Some(match member(p) {
                    Some(("text", t)) => json!({ "type": "text", "text": t }),
                    Some(("json", j)) => json!({ "type": "text", "text": j.to_string() }),
                    Some(("image", i)) => image(i)?,
                    _ => return Err(part("toolResult content")),
                }))
            })?;
            let mut r = json!({ "type": "tool_result", "tool_use_id": v.get("toolUseId"), "content": parts });
            if str_of(v, "status") == Some("error") {
                r["is_error"] = json!(true);
            }
            r
        }
        "reasoningContent" => match member(v) {
            Some(("reasoningText", t)) => json!({
                "type": "thinking",
                "thinking": t.get("text"),
                "signature": t.get("signature").cloned().unwrap_or_else(|| json!("")),
            }),
            Some(("redactedContent", d)) => json!({ "type": "redacted_thinking", "data": d }),
            _ => return Err(part("reasoningContent")),
        },
        other => return Err(part(other)),
    })
}

fn image(v: &Value) -> Result<Value, Untranslatable> {
    let format = str_of(v, "format").ok_or_else(|| invalid("an image without `format`"))?;
    let data = v
        .pointer("/source/bytes")
        .ok_or_else(|| part("image (from S3)"))?;
    Ok(
        json!({ "type": "image", "source": { "type": "base64", "media_type": format!("image/{format}"), "data": data } }),
    )
}

fn tools(config: &Value, out: &mut Map<String, Value>) -> Result<(), Untranslatable> {
    let list = config.get("tools").unwrap_or(&Value::Null);
    let tools = blocks(list, |t| match member(t) {
        Some(("toolSpec", spec)) => {
            let mut tool = json!({
                "name": spec.get("name"),
                "input_schema": spec.pointer("/inputSchema/json").cloned().unwrap_or_else(|| json!({ "type": "object" })),
            });
            if let Some(d) = spec.get("description") {
                tool["description"] = d.clone();
            }
            Ok(Some(tool))
        }
        _ => Err(refuse(
            Reason::ToolKind,
            None,
            "a Converse system tool has no Messages counterpart".into(),
        )),
    })?;
    out.insert("tools".into(), Value::Array(tools));
    if let Some(choice) = config.get("toolChoice") {
        let choice = match member(choice) {
            Some(("auto", _)) => json!({ "type": "auto" }),
            Some(("any", _)) => json!({ "type": "any" }),
            Some(("tool", t)) => json!({ "type": "tool", "name": t.get("name") }),
            _ => return Err(invalid("`toolChoice` must be auto, any or tool")),
        };
        out.insert("tool_choice".into(), choice);
    }
    Ok(())
}

/// The Converse `stopReason` of a Messages `stop_reason`.
fn converse_stop(messages: &str) -> &'static str {
    match messages {
        "tool_use" => "tool_use",
        "max_tokens" => "max_tokens",
        "stop_sequence" => "stop_sequence",
        "refusal" => "content_filtered",
        "model_context_window_exceeded" => "model_context_window_exceeded",
        _ => "end_turn",
    }
}

/// A Converse `usage` for a Messages `usage`.
fn converse_usage(u: Option<&Value>) -> Value {
    let n = |k: &str| u.and_then(|u| u.get(k)).and_then(Value::as_u64);
    let (i, o) = (
        n("input_tokens").unwrap_or(0),
        n("output_tokens").unwrap_or(0),
    );
    let mut out = json!({ "inputTokens": i, "outputTokens": o, "totalTokens": i + o });
    if let Some(r) = n("cache_read_input_tokens") {
        out["cacheReadInputTokens"] = json!(r);
    }
    if let Some(w) = n("cache_creation_input_tokens") {
        out["cacheWriteInputTokens"] = json!(w);
    }
    out
}

/// One Messages answer block as a Converse block (`None`: none there).
fn converse_block(b: &Value) -> Option<Value> {
    Some(match str_of(b, "type")? {
        "text" => json!({ "text": b.get("text") }),
        "tool_use" => {
            json!({ "toolUse": { "toolUseId": b.get("id"), "name": b.get("name"), "input": b.get("input") } })
        }
        "thinking" => {
            json!({ "reasoningContent": { "reasoningText": { "text": b.get("thinking"), "signature": b.get("signature") } } })
        }
        "redacted_thinking" => json!({ "reasoningContent": { "redactedContent": b.get("data") } }),
        _ => return None,
    })
}

/// The `ConverseResponse` for a Messages answer `body`.
pub fn converse_from_message(body: &[u8]) -> Result<Vec<u8>, BadAnswer> {
    let v: Value = serde_json::from_slice(body)
        .map_err(|e| BadAnswer(format!("the Messages answer is not JSON: {e}")))?;
    let content: Vec<Value> = v
        .get("content")
        .and_then(Value::as_array)
        .map(|c| c.iter().filter_map(converse_block).collect())
        .unwrap_or_default();
    let out = json!({
        "output": { "message": { "role": "assistant", "content": content } },
        "stopReason": str_of(&v, "stop_reason").map_or("end_turn", converse_stop),
        "usage": converse_usage(v.get("usage")),
        "metrics": { "latencyMs": 0 },
    });
    serde_json::to_vec(&out).map_err(|e| BadAnswer(e.to_string()))
}

/// A Messages stream written as Converse stream events: each SSE event's
/// JSON gives zero or more `(event type, payload)`. The input tokens from
/// `message_start` and the output tokens from `message_delta` are kept for
/// the closing `metadata` event.
#[derive(Default)]
pub struct MessagesToConverse {
    usage: Map<String, Value>,
}

impl MessagesToConverse {
    /// The Converse events for one Messages stream event.
    pub fn event(&mut self, event: &Value) -> Vec<(&'static str, Value)> {
        let index = event.get("index").cloned().unwrap_or(json!(0));
        match str_of(event, "type") {
            Some("message_start") => {
                self.keep(event.pointer("/message/usage"));
                vec![("messageStart", json!({ "role": "assistant" }))]
            }
            Some("content_block_start") => {
                match event.pointer("/content_block/type").and_then(Value::as_str) {
                    Some("tool_use") => {
                        let b = &event["content_block"];
                        let start = json!({ "toolUse": { "toolUseId": b.get("id"), "name": b.get("name") } });
                        vec![(
                            "contentBlockStart",
                            json!({ "contentBlockIndex": index, "start": start }),
                        )]
                    }
                    _ => Vec::new(),
                }
            }
            Some("content_block_delta") => {
                let d = &event["delta"];
                let delta = match str_of(d, "type") {
                    Some("text_delta") => json!({ "text": d.get("text") }),
                    Some("input_json_delta") => {
                        json!({ "toolUse": { "input": d.get("partial_json") } })
                    }
                    Some("thinking_delta") => {
                        json!({ "reasoningContent": { "text": d.get("thinking") } })
                    }
                    Some("signature_delta") => {
                        json!({ "reasoningContent": { "signature": d.get("signature") } })
                    }
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
                self.keep(event.get("usage"));
                let stop = event
                    .pointer("/delta/stop_reason")
                    .and_then(Value::as_str)
                    .map_or("end_turn", converse_stop);
                vec![("messageStop", json!({ "stopReason": stop }))]
            }
            Some("message_stop") => {
                let usage = converse_usage(Some(&Value::Object(std::mem::take(&mut self.usage))));
                vec![(
                    "metadata",
                    json!({ "usage": usage, "metrics": { "latencyMs": 0 } }),
                )]
            }
            _ => Vec::new(),
        }
    }

    fn keep(&mut self, usage: Option<&Value>) {
        for (k, v) in usage.and_then(Value::as_object).into_iter().flatten() {
            if v.as_u64().is_some_and(|n| n > 0) || !self.usage.contains_key(k) {
                self.usage.insert(k.clone(), v.clone());
            }
        }
    }
}
