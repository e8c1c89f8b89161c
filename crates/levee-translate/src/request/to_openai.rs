//! Anthropic Messages → OpenAI Chat Completions: the system prompt,
//! messages and their blocks (tool results become tool messages), tools
//! and the tool choice.

use super::{check_other, refuse, refuse_param};
use crate::anthropic as a;
use crate::openai as o;
use crate::{Reason, Untranslatable};
use serde_json::{Map, Value};

/// OpenAI accepts at most this many stop sequences.
const OPENAI_MAX_STOPS: usize = 4;

impl TryFrom<a::MessagesRequest> for o::ChatRequest {
    type Error = Untranslatable;

    /// Anthropic Messages → OpenAI Chat Completions.
    fn try_from(r: a::MessagesRequest) -> Result<Self, Untranslatable> {
        check_other(&r.other)?;
        if r.top_k.is_some() {
            return Err(refuse_param(
                Reason::Sampling,
                "top_k",
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
                return Err(refuse_param(
                    Reason::TooManyStops,
                    "stop_sequences",
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
