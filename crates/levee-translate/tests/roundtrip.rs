//! A → B → A preserves everything both dialects can express: requests
//! generated in each dialect's canonical form (the form the other side's
//! translation produces) come back identical, and so do answers.

use levee_translate::anthropic as a;
use levee_translate::openai as o;
use levee_translate::response;
use proptest::prelude::*;
use serde_json::{Map, Value};

fn text() -> impl Strategy<Value = String> {
    "(?s).{0,12}"
}

fn nonempty() -> impl Strategy<Value = String> {
    "(?s).{1,12}"
}

fn ident() -> impl Strategy<Value = String> {
    "[a-zA-Z][a-zA-Z0-9_]{0,10}"
}

fn args() -> impl Strategy<Value = Map<String, Value>> {
    let leaf = prop_oneof![
        any::<bool>().prop_map(Value::Bool),
        any::<i32>().prop_map(Value::from),
        text().prop_map(Value::String),
        Just(Value::Null),
    ];
    prop::collection::btree_map(ident(), leaf, 0..4).prop_map(|m| m.into_iter().collect())
}

fn schema() -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("type".into(), Value::String("object".into()));
    m
}

fn image_url() -> impl Strategy<Value = String> {
    prop_oneof![
        "[A-Za-z0-9+/]{4,16}".prop_map(|d| format!("data:image/png;base64,{d}")),
        "[a-z]{1,8}".prop_map(|p| format!("https://example.com/{p}.jpg")),
    ]
}

// ---------------------------------------------------------------------------
// OpenAI → Anthropic → OpenAI
// ---------------------------------------------------------------------------

fn o_user() -> impl Strategy<Value = o::Message> {
    let part = prop_oneof![
        text().prop_map(|text| o::UserPart::Text { text }),
        image_url().prop_map(|url| o::UserPart::ImageUrl {
            image_url: o::ImageUrl { url, detail: None },
            prompt_cache_breakpoint: None,
        }),
    ];
    prop_oneof![
        text().prop_map(o::UserContent::Text),
        prop::collection::vec(part, 1..4).prop_map(o::UserContent::Parts),
    ]
    .prop_map(|content| {
        o::Message::User(o::UserMessage {
            content,
            name: None,
        })
    })
}

/// An assistant turn, and the tool results that follow it.
fn o_exchange() -> impl Strategy<Value = Vec<o::Message>> {
    let call = (ident(), ident(), args()).prop_map(|(id, name, a)| o::ToolCall {
        id,
        kind: o::FunctionTag::Function,
        function: o::FunctionCall {
            name,
            arguments: serde_json::to_string(&a).unwrap(),
        },
    });
    let plain = prop_oneof![
        text().prop_map(o::AssistantContent::Text),
        prop::collection::vec(
            text().prop_map(|text| o::AssistantPart::Text { text }),
            1..3
        )
        .prop_map(o::AssistantContent::Parts),
    ]
    .prop_map(|c| {
        vec![o::Message::Assistant(o::AssistantMessage {
            content: Some(c),
            tool_calls: None,
            refusal: None,
            name: None,
            audio: None,
            function_call: None,
        })]
    });
    let with_tools = (
        prop::option::of(nonempty()),
        prop::collection::vec(call, 1..3),
        prop::collection::vec(text(), 3),
    )
        .prop_map(|(t, calls, results)| {
            let mut out = vec![];
            let ids: Vec<String> = calls.iter().map(|c| c.id.clone()).collect();
            out.push(o::Message::Assistant(o::AssistantMessage {
                content: t.map(o::AssistantContent::Text),
                tool_calls: Some(calls),
                refusal: None,
                name: None,
                audio: None,
                function_call: None,
            }));
            for (id, r) in ids.into_iter().zip(results) {
                out.push(o::Message::Tool(o::ToolMessage {
                    content: o::TextContent::Text(r),
                    tool_call_id: id,
                }));
            }
            out
        });
    prop_oneof![plain, with_tools]
}

fn o_request() -> impl Strategy<Value = o::ChatRequest> {
    let tool = (ident(), prop::option::of(text())).prop_map(|(name, description)| o::Tool {
        kind: "function".into(),
        function: Some(o::FunctionDefinition {
            name,
            description,
            parameters: Some(schema()),
            strict: None,
        }),
        custom: None,
    });
    let choice = prop_oneof![
        Just(None),
        prop::sample::select(vec!["auto", "none", "required"])
            .prop_map(|m| Some(o::ToolChoice::Mode(m.into()))),
        ident().prop_map(|name| Some(o::ToolChoice::Named(o::NamedToolChoice {
            kind: "function".into(),
            function: Some(o::FunctionName { name }),
            custom: None,
            allowed_tools: None,
        }))),
    ];
    (
        prop::option::of(text()),
        prop::collection::vec((o_user(), o_exchange()), 1..4),
        1u64..100_000,
        prop::option::of(prop::collection::vec(nonempty(), 1..=4)),
        prop::option::of(prop::collection::vec(tool, 1..3)),
        choice,
        any::<bool>(),
        prop::option::of(ident()),
        prop::option::of(any::<bool>()),
    )
        .prop_map(
            |(system, turns, max, stop, tools, tool_choice, serial, user, stream)| {
                let mut messages = Vec::new();
                if let Some(s) = system {
                    messages.push(o::Message::System(o::SystemMessage {
                        content: o::TextContent::Text(s),
                        name: None,
                    }));
                }
                for (u, ex) in turns {
                    messages.push(u);
                    messages.extend(ex);
                }
                let forced_none =
                    matches!(&tool_choice, Some(o::ToolChoice::Mode(m)) if m == "none");
                let parallel_tool_calls =
                    (serial && tool_choice.is_some() && !forced_none).then_some(false);
                o::ChatRequest {
                    model: "m".into(),
                    messages,
                    max_completion_tokens: Some(max),
                    max_tokens: None,
                    temperature: None,
                    top_p: None,
                    stop: stop.map(o::Stop::Many),
                    tools,
                    tool_choice,
                    parallel_tool_calls,
                    user,
                    safety_identifier: None,
                    stream,
                    stream_options: (stream == Some(true)).then_some(o::StreamOptions {
                        include_usage: Some(true),
                        include_obfuscation: None,
                    }),
                    n: None,
                    other: Map::new(),
                }
            },
        )
}

// ---------------------------------------------------------------------------
// Anthropic → OpenAI → Anthropic
// ---------------------------------------------------------------------------

fn a_text_block(text: String) -> a::Block {
    a::Block::Text {
        text,
        cache_control: None,
        citations: None,
    }
}

fn a_user() -> impl Strategy<Value = a::Message> {
    let block = prop_oneof![
        text().prop_map(a_text_block),
        "[A-Za-z0-9+/]{4,16}".prop_map(|data| a::Block::Image {
            source: a::ImageSource::Base64 {
                media_type: "image/jpeg".into(),
                data,
            },
            cache_control: None,
            transformations: None,
        }),
        "[a-z]{1,8}".prop_map(|p| a::Block::Image {
            source: a::ImageSource::Url {
                url: format!("https://example.com/{p}.png"),
            },
            cache_control: None,
            transformations: None,
        }),
    ];
    prop_oneof![
        text().prop_map(a::Content::Text),
        prop::collection::vec(block, 1..4).prop_map(a::Content::Blocks),
    ]
    .prop_map(|content| a::Message::User(a::Turn { content }))
}

fn a_exchange() -> impl Strategy<Value = Vec<a::Message>> {
    let plain = prop_oneof![
        text().prop_map(a::Content::Text),
        prop::collection::vec(text().prop_map(a_text_block), 1..3).prop_map(a::Content::Blocks),
    ]
    .prop_map(|content| vec![a::Message::Assistant(a::Turn { content })]);
    let tool_use = (ident(), ident(), args()).prop_map(|(id, name, input)| (id, name, input));
    let result = prop_oneof![
        text().prop_map(a::ToolResultContent::Text),
        prop::collection::vec(text().prop_map(a_text_block), 1..3)
            .prop_map(a::ToolResultContent::Blocks),
    ];
    let with_tools = (
        prop::collection::vec(nonempty(), 0..3),
        prop::collection::vec(tool_use, 1..3),
        prop::collection::vec(result, 3),
    )
        .prop_map(|(texts, uses, results)| {
            let mut blocks: Vec<a::Block> = texts.into_iter().map(a_text_block).collect();
            let ids: Vec<String> = uses.iter().map(|u| u.0.clone()).collect();
            blocks.extend(uses.into_iter().map(|(id, name, input)| a::Block::ToolUse {
                id,
                name,
                input,
                cache_control: None,
                caller: None,
                toolset_name: None,
            }));
            let results = ids
                .into_iter()
                .zip(results)
                .map(|(tool_use_id, content)| a::Block::ToolResult {
                    tool_use_id,
                    content: Some(content),
                    is_error: None,
                    cache_control: None,
                    toolset_name: None,
                })
                .collect();
            vec![
                a::Message::Assistant(a::Turn {
                    content: a::Content::Blocks(blocks),
                }),
                a::Message::User(a::Turn {
                    content: a::Content::Blocks(results),
                }),
            ]
        });
    prop_oneof![plain, with_tools]
}

fn a_request() -> impl Strategy<Value = a::MessagesRequest> {
    let system = prop_oneof![
        Just(None),
        text().prop_map(|t| Some(a::System::Text(t))),
        prop::collection::vec(text(), 1..3).prop_map(|ts| Some(a::System::Blocks(
            ts.into_iter()
                .map(|text| a::TextBlock {
                    kind: o::TextTag::Text,
                    text,
                    cache_control: None,
                    citations: None,
                })
                .collect()
        ))),
    ];
    let tool = (ident(), prop::option::of(text())).prop_map(|(name, description)| a::Tool {
        name,
        kind: None,
        description,
        input_schema: Some(schema()),
        cache_control: None,
        other: Map::new(),
    });
    let choice = (
        prop::sample::select(vec!["auto", "any", "none", "tool"]),
        ident(),
        any::<bool>(),
    )
        .prop_map(|(kind, name, serial)| a::ToolChoice {
            kind: kind.into(),
            name: (kind == "tool").then_some(name),
            disable_parallel_tool_use: (serial && kind != "none").then_some(true),
        });
    (
        system,
        prop::collection::vec((a_user(), a_exchange()), 1..4),
        1u64..100_000,
        prop::option::of(prop::collection::vec(nonempty(), 1..=4)),
        prop::option::of(prop::collection::vec(tool, 1..3)),
        prop::option::of(choice),
        prop::option::of(ident()),
        prop::option::of(any::<bool>()),
    )
        .prop_map(
            |(system, turns, max_tokens, stop_sequences, tools, tool_choice, user, stream)| {
                let mut messages = Vec::new();
                for (u, ex) in turns {
                    messages.push(u);
                    messages.extend(ex);
                }
                a::MessagesRequest {
                    model: "m".into(),
                    max_tokens,
                    messages,
                    system,
                    stop_sequences,
                    temperature: None,
                    top_p: None,
                    top_k: None,
                    tools,
                    tool_choice,
                    metadata: user.map(|u| a::Metadata { user_id: Some(u) }),
                    stream,
                    cache_control: None,
                    other: Map::new(),
                }
            },
        )
}

// ---------------------------------------------------------------------------
// Answers
// ---------------------------------------------------------------------------

fn a_answer() -> impl Strategy<Value = a::MessageResponse> {
    (
        "[a-zA-Z0-9]{1,12}",
        prop::option::of(nonempty()),
        prop::collection::vec((ident(), ident(), args()), 0..3),
        prop::sample::select(vec!["end_turn", "max_tokens", "tool_use", "refusal"]),
        (0u64..10_000, 0u64..10_000, prop::option::of(0u64..10_000)),
    )
        .prop_map(|(id, t, calls, stop, (input, output, read))| {
            let mut content: Vec<a::ResponseBlock> = t
                .into_iter()
                .map(|text| a::ResponseBlock::Text { text })
                .collect();
            content.extend(
                calls
                    .into_iter()
                    .map(|(id, name, input)| a::ResponseBlock::ToolUse {
                        id,
                        name,
                        input: Value::Object(input),
                    }),
            );
            a::MessageResponse {
                id: format!("msg_{id}"),
                kind: "message".into(),
                role: "assistant".into(),
                model: "claude".into(),
                content,
                stop_reason: Some(stop.into()),
                stop_sequence: None,
                usage: a::Usage {
                    input_tokens: input,
                    output_tokens: output,
                    cache_creation_input_tokens: None,
                    cache_read_input_tokens: read,
                },
            }
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn openai_requests_survive_a_round_trip_through_anthropic(r in o_request()) {
        let there = a::MessagesRequest::try_from(r.clone()).expect("expressible in Anthropic");
        // And through the wire: what is sent is what the other side parses.
        let wire = serde_json::to_vec(&there).unwrap();
        let parsed: a::MessagesRequest = serde_json::from_slice(&wire).unwrap();
        let back = o::ChatRequest::try_from(parsed).expect("and back");
        prop_assert_eq!(back, r);
    }

    #[test]
    fn anthropic_requests_survive_a_round_trip_through_openai(r in a_request()) {
        let there = o::ChatRequest::try_from(r.clone()).expect("expressible in OpenAI");
        let wire = serde_json::to_vec(&there).unwrap();
        let parsed: o::ChatRequest = serde_json::from_slice(&wire).unwrap();
        let back = a::MessagesRequest::try_from(parsed).expect("and back");
        prop_assert_eq!(back, r);
    }

    #[test]
    fn anthropic_answers_survive_a_round_trip_through_openai(m in a_answer()) {
        // Stop reasons: a tool call means tool_use on both sides.
        let has_calls = m.content.iter().any(|b| matches!(b, a::ResponseBlock::ToolUse { .. }));
        let there = response::to_openai(m.clone(), 7);
        let wire = serde_json::to_vec(&there).unwrap();
        let parsed: o::ChatCompletion = serde_json::from_slice(&wire).unwrap();
        let back = a::MessageResponse::try_from(parsed).expect("and back");
        let mut want = m;
        if has_calls {
            want.stop_reason = Some("tool_use".into());
        }
        prop_assert_eq!(back, want);
    }
}
