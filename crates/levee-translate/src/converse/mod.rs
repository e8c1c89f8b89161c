//! Amazon Bedrock's Converse API: a Messages request written as a
//! `Converse` / `ConverseStream` request, and the answers (a whole
//! `ConverseResponse`, or a `ConverseStream` event by event) written back
//! as Messages answers; and the other way (`reverse`), for clients that
//! call Levee with Converse requests. Converse is how Bedrock serves every model of its
//! catalogue (Llama, Mistral, Nova, Cohere, DeepSeek, Claude) with one
//! request shape; an OpenAI chat request reaches it through the Messages
//! translation first.
//!
//! The shapes are those of the `bedrock-runtime` 2023-09-30 service model
//! (the one boto3 and the AWS SDKs are generated from): content blocks are
//! one-key unions (`text`, `image`, `document`, `toolUse`, `toolResult`,
//! `reasoningContent`, `cachePoint`), inference settings sit under
//! `inferenceConfig`, tools under `toolConfig`, and what has no Converse
//! field (`top_k`, `thinking`) goes in `additionalModelRequestFields`, as
//! Bedrock documents for model-specific parameters. What Converse cannot
//! carry (an image by URL, server tools, `tool_choice: none`) is refused
//! with an [`Untranslatable`] naming it, never dropped.

mod answer;
mod events;
mod reverse;

pub use answer::{message_from_converse, stop_reason};
pub use events::ConverseToMessages;
pub use reverse::{converse_from_message, messages_from_converse, MessagesToConverse};

use serde_json::{json, Map, Value};

use crate::{Reason, Untranslatable};

fn refuse(reason: Reason, param: Option<&'static str>, detail: String) -> Untranslatable {
    Untranslatable {
        reason,
        detail,
        param,
    }
}

fn invalid(detail: &str) -> Untranslatable {
    refuse(
        Reason::InvalidBody,
        None,
        format!("not a valid Messages request: {detail}"),
    )
}

/// The Converse request for a Messages request `body` (its `model` and
/// `stream` are left out: Converse takes the model in the URL and streams
/// by operation). `Err`: a field Converse cannot carry, named.
pub fn request_from_messages(body: &[u8]) -> Result<Vec<u8>, Untranslatable> {
    let fields: Map<String, Value> =
        serde_json::from_slice(body).map_err(|e| invalid(&e.to_string()))?;
    let mut out = Map::new();
    let mut inference = Map::new();
    let mut extra = Map::new();
    let mut tools: Option<Value> = None;
    let mut choice: Option<Value> = None;
    for (key, value) in fields {
        match key.as_str() {
            "model" | "stream" | "anthropic_version" => {}
            "messages" => {
                out.insert("messages".into(), messages(&value)?);
            }
            "system" => {
                let system = system(&value)?;
                if !system.is_empty() {
                    out.insert("system".into(), Value::Array(system));
                }
            }
            "max_tokens" => {
                inference.insert("maxTokens".into(), value);
            }
            "temperature" => {
                inference.insert("temperature".into(), value);
            }
            "top_p" => {
                inference.insert("topP".into(), value);
            }
            "stop_sequences" => {
                inference.insert("stopSequences".into(), value);
            }
            // Model-specific parameters Converse passes to the model as
            // they are.
            "top_k" | "thinking" | "anthropic_beta" => {
                extra.insert(key, value);
            }
            "metadata" => {
                if let Some(user) = value.get("user_id").and_then(Value::as_str) {
                    out.insert("requestMetadata".into(), json!({ "user_id": user }));
                }
            }
            "tools" => tools = Some(value),
            "tool_choice" => choice = Some(value),
            _ if value.is_null() || crate::request::droppable(&key, &value) => {}
            _ => {
                let param = crate::request::known_param(&key);
                return Err(refuse(
                    crate::request::reason_of(&key),
                    param,
                    format!("Amazon Bedrock's Converse API has no counterpart for `{key}`"),
                ));
            }
        }
    }
    if !out.contains_key("messages") {
        return Err(invalid("`messages` is required"));
    }
    if !inference.is_empty() {
        out.insert("inferenceConfig".into(), Value::Object(inference));
    }
    if let Some(config) = tool_config(tools.as_ref(), choice.as_ref())? {
        out.insert("toolConfig".into(), config);
    }
    if !extra.is_empty() {
        out.insert("additionalModelRequestFields".into(), Value::Object(extra));
    }
    serde_json::to_vec(&Value::Object(out)).map_err(|e| invalid(&e.to_string()))
}

fn str_of<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

/// `{"cachePoint": {"type": "default"}}` after a block that asked to be
/// cached.
fn cache_point(block: &Value, into: &mut Vec<Value>) {
    if block.get("cache_control").is_some_and(|c| !c.is_null()) {
        into.push(json!({ "cachePoint": { "type": "default" } }));
    }
}

fn system(v: &Value) -> Result<Vec<Value>, Untranslatable> {
    let mut out = Vec::new();
    match v {
        Value::String(s) if s.is_empty() => {}
        Value::String(s) => out.push(json!({ "text": s })),
        Value::Array(blocks) => {
            for b in blocks {
                let text = str_of(b, "text").ok_or_else(|| {
                    refuse(
                        Reason::ContentPart,
                        Some("system"),
                        "a system block that is not text has no Converse counterpart".into(),
                    )
                })?;
                out.push(json!({ "text": text }));
                cache_point(b, &mut out);
            }
        }
        _ => return Err(invalid("`system` must be a string or an array of blocks")),
    }
    Ok(out)
}

fn messages(v: &Value) -> Result<Value, Untranslatable> {
    let list = v
        .as_array()
        .ok_or_else(|| invalid("`messages` must be an array"))?;
    let mut out = Vec::with_capacity(list.len());
    for m in list {
        let role = str_of(m, "role").ok_or_else(|| invalid("a message has no `role`"))?;
        if role != "user" && role != "assistant" {
            return Err(invalid(&format!("a message's role is `{role}`")));
        }
        let content = match m.get("content") {
            Some(Value::String(s)) => vec![json!({ "text": s })],
            Some(Value::Array(blocks)) => content_blocks(blocks)?,
            _ => return Err(invalid("a message's `content` must be a string or blocks")),
        };
        out.push(json!({ "role": role, "content": content }));
    }
    Ok(Value::Array(out))
}

fn content_blocks(blocks: &[Value]) -> Result<Vec<Value>, Untranslatable> {
    let mut out = Vec::with_capacity(blocks.len());
    for b in blocks {
        out.push(block(b)?);
        cache_point(b, &mut out);
    }
    Ok(out)
}

fn part(kind: &str) -> Untranslatable {
    refuse(
        Reason::ContentPart,
        None,
        format!("a `{kind}` block has no counterpart in Amazon Bedrock's Converse API"),
    )
}

/// One Messages content block as a Converse `ContentBlock`.
fn block(b: &Value) -> Result<Value, Untranslatable> {
    let kind = str_of(b, "type").unwrap_or("");
    Ok(match kind {
        "text" => json!({ "text": str_of(b, "text").unwrap_or("") }),
        "image" => json!({ "image": image(b)? }),
        "document" => json!({ "document": document(b)? }),
        "tool_use" => json!({ "toolUse": {
            "toolUseId": str_of(b, "id").unwrap_or(""),
            "name": str_of(b, "name").unwrap_or(""),
            "input": b.get("input").cloned().unwrap_or_else(|| json!({})),
        }}),
        "tool_result" => json!({ "toolResult": tool_result(b)? }),
        "thinking" => {
            let mut text = Map::new();
            text.insert("text".into(), json!(str_of(b, "thinking").unwrap_or("")));
            if let Some(sig) = str_of(b, "signature") {
                text.insert("signature".into(), json!(sig));
            }
            json!({ "reasoningContent": { "reasoningText": text } })
        }
        "redacted_thinking" => json!({ "reasoningContent": {
            "redactedContent": str_of(b, "data").unwrap_or(""),
        }}),
        other => return Err(part(other)),
    })
}

/// An image block's Converse form: base64 data only (Converse reads images
/// from bytes or S3, never from a URL).
fn image(b: &Value) -> Result<Value, Untranslatable> {
    let source = b
        .get("source")
        .ok_or_else(|| invalid("an image without `source`"))?;
    if str_of(source, "type") != Some("base64") {
        return Err(refuse(
            Reason::ContentPart,
            None,
            "Amazon Bedrock's Converse API takes images as bytes, not by URL".into(),
        ));
    }
    let format = str_of(source, "media_type")
        .and_then(|t| t.strip_prefix("image/"))
        .filter(|f| matches!(*f, "png" | "jpeg" | "gif" | "webp"))
        .ok_or_else(|| part("image (of a type other than png, jpeg, gif, webp)"))?;
    Ok(json!({ "format": format, "source": { "bytes": str_of(source, "data").unwrap_or("") } }))
}

/// A document block's Converse form: a PDF as bytes, or plain text.
fn document(b: &Value) -> Result<Value, Untranslatable> {
    let source = b
        .get("source")
        .ok_or_else(|| invalid("a document without `source`"))?;
    let name = str_of(b, "title").unwrap_or("document");
    // Converse allows letters, digits, spaces, hyphens, parentheses and
    // brackets in a document's name.
    let name: String = name
        .chars()
        .map(|c| {
            if c.is_alphanumeric() || " -()[]".contains(c) {
                c
            } else {
                ' '
            }
        })
        .collect();
    let data = str_of(source, "data").unwrap_or("");
    match (str_of(source, "type"), str_of(source, "media_type")) {
        (Some("base64"), Some("application/pdf")) => Ok(json!({
            "format": "pdf", "name": name, "source": { "bytes": data },
        })),
        (Some("text"), _) => Ok(json!({
            "format": "txt", "name": name, "source": { "text": data },
        })),
        _ => Err(part("document (other than base64 PDF or text)")),
    }
}

fn tool_result(b: &Value) -> Result<Value, Untranslatable> {
    let content = match b.get("content") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(s)) => vec![json!({ "text": s })],
        Some(Value::Array(parts)) => parts
            .iter()
            .map(|p| match str_of(p, "type") {
                Some("text") => Ok(json!({ "text": str_of(p, "text").unwrap_or("") })),
                Some("image") => Ok(json!({ "image": image(p)? })),
                Some("document") => Ok(json!({ "document": document(p)? })),
                other => Err(part(other.unwrap_or("untyped"))),
            })
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(invalid("a tool result's `content` must be text or blocks")),
    };
    let mut out = Map::new();
    out.insert(
        "toolUseId".into(),
        json!(str_of(b, "tool_use_id").unwrap_or("")),
    );
    out.insert("content".into(), Value::Array(content));
    if b.get("is_error") == Some(&Value::Bool(true)) {
        out.insert("status".into(), json!("error"));
    }
    Ok(Value::Object(out))
}

/// `toolConfig` from the Messages `tools` and `tool_choice`.
fn tool_config(
    tools: Option<&Value>,
    choice: Option<&Value>,
) -> Result<Option<Value>, Untranslatable> {
    let tool_kind = |detail: String| refuse(Reason::ToolKind, Some("tools"), detail);
    let Some(tools) = tools.and_then(Value::as_array).filter(|t| !t.is_empty()) else {
        return Ok(None);
    };
    let mut specs = Vec::with_capacity(tools.len());
    for t in tools {
        if let Some(kind) = str_of(t, "type").filter(|k| *k != "custom") {
            return Err(tool_kind(format!(
                "the server tool `{kind}` has no counterpart in Amazon Bedrock's Converse API"
            )));
        }
        let mut spec = Map::new();
        spec.insert("name".into(), json!(str_of(t, "name").unwrap_or("")));
        if let Some(d) = str_of(t, "description").filter(|d| !d.is_empty()) {
            spec.insert("description".into(), json!(d));
        }
        let schema = t
            .get("input_schema")
            .cloned()
            .unwrap_or_else(|| json!({"type": "object"}));
        spec.insert("inputSchema".into(), json!({ "json": schema }));
        specs.push(json!({ "toolSpec": spec }));
        cache_point(t, &mut specs);
    }
    let mut config = Map::new();
    config.insert("tools".into(), Value::Array(specs));
    if let Some(c) = choice {
        if c.get("disable_parallel_tool_use") == Some(&Value::Bool(true)) {
            return Err(refuse(
                Reason::ToolKind,
                Some("tool_choice"),
                "Amazon Bedrock's Converse API cannot disable parallel tool use".into(),
            ));
        }
        let mapped = match str_of(c, "type") {
            Some("auto") | None => json!({ "auto": {} }),
            Some("any") => json!({ "any": {} }),
            Some("tool") => json!({ "tool": { "name": str_of(c, "name").unwrap_or("") } }),
            Some(other) => {
                return Err(refuse(
                    Reason::ToolKind,
                    Some("tool_choice"),
                    format!("Amazon Bedrock's Converse API has no tool choice `{other}`"),
                ))
            }
        };
        config.insert("toolChoice".into(), mapped);
    }
    Ok(Some(Value::Object(config)))
}

#[cfg(test)]
mod tests;
