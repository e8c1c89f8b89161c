//! Request translation, both ways: total where both dialects can say the
//! same thing, and a [`Untranslatable`] value naming the first thing that
//! cannot be carried otherwise. Nothing is dropped silently; the few fields
//! that are dropped are hints with no effect on the answer (cache markers,
//! `store: false`, default service tiers), listed in [`droppable`].

use crate::anthropic as a;
use crate::openai as o;
use crate::{Reason, Untranslatable};
use serde_json::{Map, Value};

/// `max_tokens` sent to Anthropic when an OpenAI caller set no limit
/// (Anthropic requires one; OpenAI's default is the model's maximum).
pub const DEFAULT_MAX_TOKENS: u64 = 4096;

/// OpenAI accepts at most this many stop sequences.
const OPENAI_MAX_STOPS: usize = 4;

/// Image types Anthropic accepts inline.
const ANTHROPIC_IMAGE_TYPES: [&str; 4] = ["image/jpeg", "image/png", "image/gif", "image/webp"];

fn refuse(reason: Reason, detail: impl Into<String>) -> Untranslatable {
    Untranslatable {
        reason,
        detail: detail.into(),
    }
}

/// Fields that change nothing about the answer and may be left behind.
pub fn droppable(field: &str, value: &Value) -> bool {
    match field {
        "prompt_cache_key" | "prompt_cache_retention" | "prompt_cache_options" => true,
        "cache_control" | "include_obfuscation" => true,
        "store" => matches!(value, Value::Null | Value::Bool(false)),
        "service_tier" => matches!(
            value.as_str(),
            None | Some("auto" | "default" | "standard_only")
        ),
        _ => false,
    }
}

/// Why a field with no counterpart cannot be carried, as a metric label.
fn reason_for(field: &str) -> Reason {
    match field {
        "logprobs" | "top_logprobs" => Reason::Logprobs,
        "n" => Reason::SeveralChoices,
        "response_format" | "modalities" | "audio" | "prediction" | "output_config" => {
            Reason::OutputFormat
        }
        "temperature" | "top_p" | "top_k" | "frequency_penalty" | "presence_penalty"
        | "logit_bias" | "seed" => Reason::Sampling,
        "reasoning_effort" | "thinking" | "verbosity" => Reason::Reasoning,
        "functions" | "function_call" | "web_search_options" | "container" | "mcp_servers" => {
            Reason::ToolKind
        }
        "metadata" | "user" | "safety_identifier" => Reason::Metadata,
        _ => Reason::UnknownField,
    }
}

fn check_other(other: &Map<String, Value>) -> Result<(), Untranslatable> {
    for (k, v) in other {
        if v.is_null() || droppable(k, v) {
            continue;
        }
        return Err(refuse(
            reason_for(k),
            format!("`{k}` has no counterpart in the other dialect"),
        ));
    }
    Ok(())
}

impl TryFrom<o::ChatRequest> for a::MessagesRequest {
    type Error = Untranslatable;

    /// OpenAI Chat Completions → Anthropic Messages.
    fn try_from(mut r: o::ChatRequest) -> Result<Self, Untranslatable> {
        // `top_k` is not an OpenAI field, but OpenAI-compatible servers take
        // it and callers send it as an extra body field: Anthropic has it.
        let top_k = match r.other.remove("top_k") {
            None | Some(Value::Null) => None,
            Some(v) => Some(v.as_u64().ok_or_else(|| {
                refuse(
                    Reason::Sampling,
                    "`top_k` must be a whole number for Anthropic",
                )
            })?),
        };
        check_other(&r.other)?;
        if r.n.is_some_and(|n| n != 1) {
            return Err(refuse(
                Reason::SeveralChoices,
                "`n` > 1: Anthropic answers with one message",
            ));
        }
        // OpenAI's temperature runs from 0 to 2, Anthropic's from 0 to 1:
        // the same number means the same below 1, and nothing above it.
        if let Some(t) = r.temperature.filter(|t| *t > 1.0) {
            return Err(refuse(
                Reason::Sampling,
                format!("`temperature` {t} is above Anthropic's maximum of 1"),
            ));
        }
        let (system, messages) = messages_to_anthropic(r.messages)?;
        let tools = r
            .tools
            .map(|ts| ts.into_iter().map(tool_to_anthropic).collect())
            .transpose()?;
        let mut tool_choice = r.tool_choice.map(choice_to_anthropic).transpose()?;
        if r.parallel_tool_calls == Some(false) {
            match &mut tool_choice {
                Some(c) if c.kind == "none" => {}
                Some(c) => c.disable_parallel_tool_use = Some(true),
                None => {
                    tool_choice = Some(a::ToolChoice {
                        kind: "auto".into(),
                        name: None,
                        disable_parallel_tool_use: Some(true),
                    })
                }
            }
        }
        let user_id = match (r.user, r.safety_identifier) {
            (Some(u), Some(s)) if u != s => {
                return Err(refuse(
                    Reason::Metadata,
                    "`user` and `safety_identifier` differ; Anthropic has one `user_id`",
                ))
            }
            (u, s) => u.or(s),
        };
        let stop_sequences = r.stop.map(|s| match s {
            o::Stop::One(s) => vec![s],
            o::Stop::Many(v) => v,
        });
        Ok(a::MessagesRequest {
            model: r.model,
            max_tokens: r
                .max_completion_tokens
                .or(r.max_tokens)
                .unwrap_or(DEFAULT_MAX_TOKENS),
            messages,
            system,
            stop_sequences,
            temperature: r.temperature,
            top_p: r.top_p,
            top_k,
            tools,
            tool_choice,
            metadata: user_id.map(|u| a::Metadata { user_id: Some(u) }),
            stream: r.stream,
            cache_control: None,
            other: Map::new(),
        })
    }
}

fn text_to_system(c: o::TextContent) -> a::System {
    match c {
        o::TextContent::Text(s) => a::System::Text(s),
        o::TextContent::Parts(ps) => a::System::Blocks(
            ps.into_iter()
                .map(|p| a::TextBlock {
                    kind: o::TextTag::Text,
                    text: p.text,
                    cache_control: None,
                    citations: None,
                })
                .collect(),
        ),
    }
}

fn no_name(name: &Option<String>) -> Result<(), Untranslatable> {
    match name {
        Some(_) => Err(refuse(
            Reason::MessageName,
            "a message `name` has no counterpart in Anthropic Messages",
        )),
        None => Ok(()),
    }
}

/// Leading system/developer messages become `system`; later ones stay in place.
fn messages_to_anthropic(
    msgs: Vec<o::Message>,
) -> Result<(Option<a::System>, Vec<a::Message>), Untranslatable> {
    let mut system: Vec<a::System> = Vec::new();
    let mut out: Vec<a::Message> = Vec::with_capacity(msgs.len());
    let mut last_was_tool = false;
    for m in msgs {
        let is_tool = matches!(m, o::Message::Tool(_));
        match m {
            o::Message::System(s) | o::Message::Developer(s) => {
                no_name(&s.name)?;
                if out.is_empty() {
                    system.push(text_to_system(s.content));
                } else {
                    out.push(a::Message::System(a::SystemTurn {
                        content: text_to_system(s.content),
                    }));
                }
            }
            o::Message::User(u) => {
                no_name(&u.name)?;
                let content = match u.content {
                    o::UserContent::Text(s) => a::Content::Text(s),
                    o::UserContent::Parts(ps) => a::Content::Blocks(
                        ps.into_iter()
                            .map(user_part_to_anthropic)
                            .collect::<Result<_, _>>()?,
                    ),
                };
                out.push(a::Message::User(a::Turn { content }));
            }
            o::Message::Assistant(m) => out.push(assistant_to_anthropic(m)?),
            o::Message::Tool(t) => {
                let block = a::Block::ToolResult {
                    tool_use_id: t.tool_call_id,
                    content: Some(match t.content {
                        o::TextContent::Text(s) => a::ToolResultContent::Text(s),
                        o::TextContent::Parts(ps) => a::ToolResultContent::Blocks(
                            ps.into_iter().map(|p| text_block(p.text)).collect(),
                        ),
                    }),
                    is_error: None,
                    cache_control: None,
                    toolset_name: None,
                };
                // Results of one turn's parallel calls go back in one user turn.
                match out.last_mut() {
                    Some(a::Message::User(a::Turn {
                        content: a::Content::Blocks(bs),
                    })) if last_was_tool => bs.push(block),
                    _ => out.push(a::Message::User(a::Turn {
                        content: a::Content::Blocks(vec![block]),
                    })),
                }
            }
        }
        last_was_tool = is_tool;
    }
    let system = match system.len() {
        0 => None,
        1 => system.pop(),
        _ => Some(a::System::Blocks(
            system
                .into_iter()
                .flat_map(|s| match s {
                    a::System::Text(t) => vec![a::TextBlock {
                        kind: o::TextTag::Text,
                        text: t,
                        cache_control: None,
                        citations: None,
                    }],
                    a::System::Blocks(b) => b,
                })
                .collect(),
        )),
    };
    Ok((system, out))
}

fn text_block(text: String) -> a::Block {
    a::Block::Text {
        text,
        cache_control: None,
        citations: None,
    }
}

fn user_part_to_anthropic(p: o::UserPart) -> Result<a::Block, Untranslatable> {
    match p {
        o::UserPart::Text { text } => Ok(text_block(text)),
        o::UserPart::ImageUrl { image_url, .. } => {
            if !matches!(image_url.detail.as_deref(), None | Some("auto")) {
                return Err(refuse(
                    Reason::ContentPart,
                    "image `detail` other than `auto` has no counterpart in Anthropic",
                ));
            }
            let source = match parse_data_url(&image_url.url) {
                Some((media_type, data)) => {
                    if !ANTHROPIC_IMAGE_TYPES.contains(&media_type) {
                        return Err(refuse(
                            Reason::ContentPart,
                            format!("image type `{media_type}` is not accepted by Anthropic"),
                        ));
                    }
                    a::ImageSource::Base64 {
                        media_type: media_type.to_string(),
                        data: data.to_string(),
                    }
                }
                None if image_url.url.starts_with("https://")
                    || image_url.url.starts_with("http://") =>
                {
                    a::ImageSource::Url { url: image_url.url }
                }
                None => {
                    return Err(refuse(
                        Reason::ContentPart,
                        "image URL is neither http(s) nor a base64 data URL",
                    ))
                }
            };
            Ok(a::Block::Image {
                source,
                cache_control: None,
                transformations: None,
            })
        }
        o::UserPart::Unsupported => Err(refuse(
            Reason::ContentPart,
            "audio and file parts have no counterpart in Anthropic Messages",
        )),
    }
}

/// `data:image/png;base64,AAAA` → (`image/png`, `AAAA`).
fn parse_data_url(url: &str) -> Option<(&str, &str)> {
    let rest = url.strip_prefix("data:")?;
    let (meta, data) = rest.split_once(',')?;
    let media_type = meta.strip_suffix(";base64")?;
    Some((media_type, data))
}

fn assistant_to_anthropic(m: o::AssistantMessage) -> Result<a::Message, Untranslatable> {
    no_name(&m.name)?;
    if m.audio.is_some() || m.function_call.is_some() || m.refusal.is_some() {
        return Err(refuse(
            Reason::ContentPart,
            "assistant `audio`, `function_call` or `refusal` has no counterpart in Anthropic",
        ));
    }
    let calls = m.tool_calls.unwrap_or_default();
    let content = match (m.content, calls.is_empty()) {
        (Some(o::AssistantContent::Text(s)), true) => {
            return Ok(a::Message::Assistant(a::Turn {
                content: a::Content::Text(s),
            }))
        }
        (None, true) => {
            return Ok(a::Message::Assistant(a::Turn {
                content: a::Content::Text(String::new()),
            }))
        }
        (c, _) => c,
    };
    let mut blocks = Vec::with_capacity(calls.len() + 1);
    match content {
        None => {}
        Some(o::AssistantContent::Text(s)) if s.is_empty() => {}
        Some(o::AssistantContent::Text(s)) => blocks.push(text_block(s)),
        Some(o::AssistantContent::Parts(ps)) => {
            for p in ps {
                match p {
                    o::AssistantPart::Text { text } => blocks.push(text_block(text)),
                    o::AssistantPart::Refusal { .. } => {
                        return Err(refuse(
                            Reason::ContentPart,
                            "a refusal part has no counterpart in Anthropic",
                        ))
                    }
                }
            }
        }
    }
    for c in calls {
        let input: Map<String, Value> =
            serde_json::from_str(&c.function.arguments).map_err(|_| {
                refuse(
                    Reason::ToolArguments,
                    format!(
                        "tool call `{}` arguments are not a JSON object",
                        c.function.name
                    ),
                )
            })?;
        blocks.push(a::Block::ToolUse {
            id: c.id,
            name: c.function.name,
            input,
            cache_control: None,
            caller: None,
            toolset_name: None,
        });
    }
    Ok(a::Message::Assistant(a::Turn {
        content: a::Content::Blocks(blocks),
    }))
}

fn tool_to_anthropic(t: o::Tool) -> Result<a::Tool, Untranslatable> {
    let f = match (t.kind.as_str(), t.function) {
        ("function", Some(f)) => f,
        (kind, _) => {
            return Err(refuse(
                Reason::ToolKind,
                format!("`{kind}` tools have no counterpart in Anthropic"),
            ))
        }
    };
    if f.strict == Some(true) {
        return Err(refuse(
            Reason::ToolKind,
            "`strict` function schemas have no counterpart in Anthropic tools",
        ));
    }
    let schema = f.parameters.unwrap_or_else(|| {
        let mut m = Map::new();
        m.insert("type".into(), Value::String("object".into()));
        m.insert("properties".into(), Value::Object(Map::new()));
        m
    });
    Ok(a::Tool {
        name: f.name,
        kind: None,
        description: f.description,
        input_schema: Some(schema),
        cache_control: None,
        other: Map::new(),
    })
}

fn choice_to_anthropic(c: o::ToolChoice) -> Result<a::ToolChoice, Untranslatable> {
    let (kind, name) = match c {
        o::ToolChoice::Mode(m) => match m.as_str() {
            "none" => ("none", None),
            "auto" => ("auto", None),
            "required" => ("any", None),
            other => {
                return Err(refuse(
                    Reason::ToolKind,
                    format!("tool_choice `{other}` is not known"),
                ))
            }
        },
        o::ToolChoice::Named(n) => match (n.kind.as_str(), n.function) {
            ("function", Some(f)) => ("tool", Some(f.name)),
            (kind, _) => {
                return Err(refuse(
                    Reason::ToolKind,
                    format!("tool_choice of type `{kind}` has no counterpart in Anthropic"),
                ))
            }
        },
    };
    Ok(a::ToolChoice {
        kind: kind.into(),
        name,
        disable_parallel_tool_use: None,
    })
}

// ---------------------------------------------------------------------------
// Anthropic → OpenAI
// ---------------------------------------------------------------------------

impl TryFrom<a::MessagesRequest> for o::ChatRequest {
    type Error = Untranslatable;

    /// Anthropic Messages → OpenAI Chat Completions.
    fn try_from(r: a::MessagesRequest) -> Result<Self, Untranslatable> {
        check_other(&r.other)?;
        if r.top_k.is_some() {
            return Err(refuse(
                Reason::Sampling,
                "`top_k`: OpenAI Chat Completions has no top_k",
            ));
        }
        let mut messages = Vec::with_capacity(r.messages.len() + 1);
        if let Some(s) = r.system {
            messages.push(o::Message::System(o::SystemMessage {
                content: system_to_openai(s)?,
                name: None,
            }));
        }
        for m in r.messages {
            message_to_openai(m, &mut messages)?;
        }
        let stop = match r.stop_sequences {
            Some(v) if v.len() > OPENAI_MAX_STOPS => {
                return Err(refuse(
                    Reason::TooManyStops,
                    format!("{} stop sequences; OpenAI accepts at most 4", v.len()),
                ))
            }
            Some(v) => Some(o::Stop::Many(v)),
            None => None,
        };
        let tools = r
            .tools
            .map(|ts| ts.into_iter().map(tool_to_openai).collect())
            .transpose()?;
        let (tool_choice, parallel_tool_calls) = match r.tool_choice {
            None => (None, None),
            Some(c) => choice_to_openai(c)?,
        };
        let streaming = r.stream == Some(true);
        Ok(o::ChatRequest {
            model: r.model,
            messages,
            max_completion_tokens: Some(r.max_tokens),
            max_tokens: None,
            temperature: r.temperature,
            top_p: r.top_p,
            stop,
            tools,
            tool_choice,
            parallel_tool_calls,
            user: r.metadata.and_then(|m| m.user_id),
            safety_identifier: None,
            stream: r.stream,
            // Anthropic callers always get usage; OpenAI sends it only when asked.
            stream_options: streaming.then_some(o::StreamOptions {
                include_usage: Some(true),
                include_obfuscation: None,
            }),
            n: None,
            other: Map::new(),
        })
    }
}

fn no_citations(c: &Option<Value>) -> Result<(), Untranslatable> {
    match c {
        Some(v) if !v.is_null() => Err(refuse(
            Reason::ContentPart,
            "citations have no counterpart in OpenAI",
        )),
        _ => Ok(()),
    }
}

fn system_to_openai(s: a::System) -> Result<o::TextContent, Untranslatable> {
    Ok(match s {
        a::System::Text(t) => o::TextContent::Text(t),
        a::System::Blocks(bs) => o::TextContent::Parts(
            bs.into_iter()
                .map(|b| {
                    no_citations(&b.citations)?;
                    Ok(o::TextPart {
                        kind: o::TextTag::Text,
                        text: b.text,
                    })
                })
                .collect::<Result<_, Untranslatable>>()?,
        ),
    })
}

fn unsupported_block() -> Untranslatable {
    refuse(
        Reason::ContentPart,
        "document, thinking, search-result and server-tool blocks have no counterpart in OpenAI",
    )
}

fn message_to_openai(m: a::Message, out: &mut Vec<o::Message>) -> Result<(), Untranslatable> {
    match m {
        a::Message::System(s) => out.push(o::Message::System(o::SystemMessage {
            content: system_to_openai(s.content)?,
            name: None,
        })),
        a::Message::User(t) => match t.content {
            a::Content::Text(s) => out.push(user_text(o::UserContent::Text(s))),
            a::Content::Blocks(bs) => user_blocks_to_openai(bs, out)?,
        },
        a::Message::Assistant(t) => out.push(assistant_to_openai(t.content)?),
    }
    Ok(())
}

fn user_text(content: o::UserContent) -> o::Message {
    o::Message::User(o::UserMessage {
        content,
        name: None,
    })
}

/// Tool results become `tool` messages in place; the other blocks of the
/// turn become user messages between them.
fn user_blocks_to_openai(
    bs: Vec<a::Block>,
    out: &mut Vec<o::Message>,
) -> Result<(), Untranslatable> {
    let mut parts: Vec<o::UserPart> = Vec::new();
    for b in bs {
        match b {
            a::Block::Text {
                text, citations, ..
            } => {
                no_citations(&citations)?;
                parts.push(o::UserPart::Text { text });
            }
            a::Block::Image {
                source,
                transformations,
                ..
            } => {
                if transformations.as_ref().is_some_and(|t| !t.is_null()) {
                    return Err(refuse(
                        Reason::ContentPart,
                        "image `transformations` have no counterpart in OpenAI",
                    ));
                }
                let url = match source {
                    a::ImageSource::Base64 { media_type, data } => {
                        format!("data:{media_type};base64,{data}")
                    }
                    a::ImageSource::Url { url } => url,
                    a::ImageSource::Unsupported => {
                        return Err(refuse(
                            Reason::ContentPart,
                            "image `file` sources have no counterpart in OpenAI",
                        ))
                    }
                };
                parts.push(o::UserPart::ImageUrl {
                    image_url: o::ImageUrl { url, detail: None },
                    prompt_cache_breakpoint: None,
                });
            }
            a::Block::ToolResult {
                tool_use_id,
                content,
                is_error,
                ..
            } => {
                if !parts.is_empty() {
                    out.push(user_text(o::UserContent::Parts(std::mem::take(&mut parts))));
                }
                if is_error == Some(true) {
                    return Err(refuse(
                        Reason::ToolError,
                        "a tool result marked `is_error` has no counterpart in OpenAI",
                    ));
                }
                out.push(o::Message::Tool(o::ToolMessage {
                    content: tool_result_to_openai(content)?,
                    tool_call_id: tool_use_id,
                }));
            }
            a::Block::ToolUse { .. } => {
                return Err(refuse(
                    Reason::InvalidBody,
                    "a `tool_use` block in a user turn",
                ))
            }
            a::Block::Unsupported => return Err(unsupported_block()),
        }
    }
    if !parts.is_empty() {
        out.push(user_text(o::UserContent::Parts(parts)));
    }
    Ok(())
}

/// A tool result's content: text only (OpenAI tool messages carry no images).
fn tool_result_to_openai(
    content: Option<a::ToolResultContent>,
) -> Result<o::TextContent, Untranslatable> {
    Ok(match content {
        None => o::TextContent::Text(String::new()),
        Some(a::ToolResultContent::Text(s)) => o::TextContent::Text(s),
        Some(a::ToolResultContent::Blocks(bs)) => o::TextContent::Parts(
            bs.into_iter()
                .map(|b| match b {
                    a::Block::Text {
                        text, citations, ..
                    } => {
                        no_citations(&citations)?;
                        Ok(o::TextPart {
                            kind: o::TextTag::Text,
                            text,
                        })
                    }
                    _ => Err(refuse(
                        Reason::ContentPart,
                        "tool results other than text have no counterpart in OpenAI",
                    )),
                })
                .collect::<Result<_, Untranslatable>>()?,
        ),
    })
}

fn assistant_to_openai(c: a::Content) -> Result<o::Message, Untranslatable> {
    let blocks = match c {
        a::Content::Text(s) => {
            return Ok(o::Message::Assistant(o::AssistantMessage {
                content: Some(o::AssistantContent::Text(s)),
                tool_calls: None,
                refusal: None,
                name: None,
                audio: None,
                function_call: None,
            }))
        }
        a::Content::Blocks(bs) => bs,
    };
    let mut texts = Vec::new();
    let mut calls = Vec::new();
    for b in blocks {
        match b {
            a::Block::Text {
                text, citations, ..
            } => {
                no_citations(&citations)?;
                texts.push(text);
            }
            a::Block::ToolUse {
                id,
                name,
                input,
                caller,
                ..
            } => {
                if caller.as_ref().is_some_and(|c| !c.is_null()) {
                    return Err(unsupported_block());
                }
                let arguments = serde_json::to_string(&input)
                    .map_err(|e| refuse(Reason::ToolArguments, e.to_string()))?;
                calls.push(o::ToolCall {
                    id,
                    kind: o::FunctionTag::Function,
                    function: o::FunctionCall { name, arguments },
                });
            }
            _ => return Err(unsupported_block()),
        }
    }
    let content = match (texts.len(), calls.is_empty()) {
        (0, _) => None,
        (1, false) => texts.pop().map(o::AssistantContent::Text),
        _ => Some(o::AssistantContent::Parts(
            texts
                .into_iter()
                .map(|text| o::AssistantPart::Text { text })
                .collect(),
        )),
    };
    Ok(o::Message::Assistant(o::AssistantMessage {
        content,
        tool_calls: (!calls.is_empty()).then_some(calls),
        refusal: None,
        name: None,
        audio: None,
        function_call: None,
    }))
}

fn tool_to_openai(t: a::Tool) -> Result<o::Tool, Untranslatable> {
    if t.kind.as_deref().is_some_and(|k| k != "custom") || t.input_schema.is_none() {
        return Err(refuse(
            Reason::ToolKind,
            format!("server tool `{}` has no counterpart in OpenAI", t.name),
        ));
    }
    if let Some(k) = t.other.keys().next() {
        return Err(refuse(
            Reason::ToolKind,
            format!("tool setting `{k}` has no counterpart in OpenAI"),
        ));
    }
    Ok(o::Tool {
        kind: "function".into(),
        function: Some(o::FunctionDefinition {
            name: t.name,
            description: t.description,
            parameters: t.input_schema,
            strict: None,
        }),
        custom: None,
    })
}

fn choice_to_openai(
    c: a::ToolChoice,
) -> Result<(Option<o::ToolChoice>, Option<bool>), Untranslatable> {
    let choice = match (c.kind.as_str(), c.name) {
        ("auto", _) => o::ToolChoice::Mode("auto".into()),
        ("any", _) => o::ToolChoice::Mode("required".into()),
        ("none", _) => o::ToolChoice::Mode("none".into()),
        ("tool", Some(name)) => o::ToolChoice::Named(o::NamedToolChoice {
            kind: "function".into(),
            function: Some(o::FunctionName { name }),
            custom: None,
            allowed_tools: None,
        }),
        (kind, _) => {
            return Err(refuse(
                Reason::ToolKind,
                format!("tool_choice `{kind}` has no counterpart in OpenAI"),
            ))
        }
    };
    let parallel = c.disable_parallel_tool_use.and_then(|d| d.then_some(false));
    Ok((Some(choice), parallel))
}
