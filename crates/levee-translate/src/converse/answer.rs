//! A whole `ConverseResponse` written as a Messages answer.

use serde_json::{json, Map, Value};

use crate::BadAnswer;

/// The Messages `stop_reason` for a Converse `stopReason`. A guardrail or
/// content filter that stopped the answer is a `refusal`; a malformed
/// model output (the model's own fault, answered 200 by Bedrock) ends the
/// turn as `end_turn`, the one reason every Messages client handles.
pub fn stop_reason(converse: &str) -> &'static str {
    match converse {
        "tool_use" => "tool_use",
        "max_tokens" => "max_tokens",
        "stop_sequence" => "stop_sequence",
        "guardrail_intervened" | "content_filtered" => "refusal",
        "model_context_window_exceeded" => "model_context_window_exceeded",
        _ => "end_turn",
    }
}

/// The Messages `usage` for a Converse `usage` (`inputTokens`,
/// `outputTokens`, `cacheReadInputTokens`, `cacheWriteInputTokens`).
pub(super) fn usage(u: Option<&Value>) -> Map<String, Value> {
    let n = |k: &str| u.and_then(|u| u.get(k)).and_then(Value::as_u64);
    let mut out = Map::new();
    out.insert("input_tokens".into(), json!(n("inputTokens").unwrap_or(0)));
    out.insert(
        "output_tokens".into(),
        json!(n("outputTokens").unwrap_or(0)),
    );
    if let Some(r) = n("cacheReadInputTokens") {
        out.insert("cache_read_input_tokens".into(), json!(r));
    }
    if let Some(w) = n("cacheWriteInputTokens") {
        out.insert("cache_creation_input_tokens".into(), json!(w));
    }
    out
}

/// One Converse content block of an answer as a Messages block (`None`
/// for what a Messages answer has no block for: a cache point, an empty
/// union).
fn block(b: &Value) -> Option<Value> {
    if let Some(t) = b.get("text").and_then(Value::as_str) {
        return Some(json!({ "type": "text", "text": t }));
    }
    if let Some(u) = b.get("toolUse") {
        return Some(json!({
            "type": "tool_use",
            "id": u.get("toolUseId").cloned().unwrap_or(Value::Null),
            "name": u.get("name").cloned().unwrap_or(Value::Null),
            "input": u.get("input").cloned().unwrap_or_else(|| json!({})),
        }));
    }
    let r = b.get("reasoningContent")?;
    if let Some(t) = r.get("reasoningText") {
        return Some(json!({
            "type": "thinking",
            "thinking": t.get("text").cloned().unwrap_or_else(|| json!("")),
            "signature": t.get("signature").cloned().unwrap_or_else(|| json!("")),
        }));
    }
    r.get("redactedContent")
        .map(|d| json!({ "type": "redacted_thinking", "data": d }))
}

/// The Messages answer for a `ConverseResponse` body: `id` and `model`
/// name it (Converse answers carry neither).
pub fn message_from_converse(body: &[u8], model: &str, id: &str) -> Result<Vec<u8>, BadAnswer> {
    let bad = |why: String| BadAnswer(format!("Amazon Bedrock's Converse answer {why}"));
    let v: Value = serde_json::from_slice(body).map_err(|e| bad(format!("is not JSON: {e}")))?;
    let message = v
        .get("output")
        .and_then(|o| o.get("message"))
        .ok_or_else(|| bad("has no `output.message`".into()))?;
    let content: Vec<Value> = message
        .get("content")
        .and_then(Value::as_array)
        .map(|c| c.iter().filter_map(block).collect())
        .unwrap_or_default();
    let stop = v
        .get("stopReason")
        .and_then(Value::as_str)
        .map_or("end_turn", stop_reason);
    let out = json!({
        "id": id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop,
        "stop_sequence": Value::Null,
        "usage": usage(v.get("usage")),
    });
    serde_json::to_vec(&out).map_err(|e| bad(e.to_string()))
}
