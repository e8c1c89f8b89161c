//! The SSE translators under arbitrary splits of the upstream bytes: the
//! output does not depend on where the network cut the stream, and what the
//! caller accumulates from it is the answer the upstream streamed (text,
//! tool calls with their argument deltas, stop reason, usage).

use levee_translate::{Dialect, StreamOptions, StreamTranslator};
use proptest::prelude::*;
use serde_json::{json, Value};

/// One streamed answer, independent of dialect.
#[derive(Debug, Clone)]
struct Answer {
    texts: Vec<String>,
    /// (id, name, argument pieces)
    calls: Vec<(String, String, Vec<String>)>,
    truncated: bool,
    input: u64,
    output: u64,
    crlf: bool,
}

fn answer() -> impl Strategy<Value = Answer> {
    let args = prop::collection::btree_map("[a-z]{1,6}", "(?s).{0,8}", 0..3).prop_flat_map(|m| {
        let s = serde_json::to_string(&m).unwrap();
        let n = s.len();
        prop::collection::vec(0..=n, 0..4).prop_map(move |mut cuts| {
            cuts.retain(|c| s.is_char_boundary(*c));
            cuts.sort_unstable();
            let mut pieces = Vec::new();
            let mut at = 0;
            for c in cuts.into_iter().chain([n]) {
                pieces.push(s[at..c].to_string());
                at = c;
            }
            pieces
        })
    });
    (
        prop::collection::vec("(?s).{0,10}", 0..5),
        prop::collection::vec(("[a-z0-9_]{1,8}", "[a-z_]{1,8}", args), 0..3),
        any::<bool>(),
        0u64..5000,
        1u64..5000,
        any::<bool>(),
    )
        .prop_map(|(texts, calls, truncated, input, output, crlf)| Answer {
            texts,
            calls: calls
                .into_iter()
                .map(|(id, n, a)| (format!("call_{id}"), n, a))
                .collect(),
            truncated,
            input,
            output,
            crlf,
        })
}

fn eol(a: &Answer) -> &'static str {
    if a.crlf {
        "\r\n"
    } else {
        "\n"
    }
}

fn openai_stream(a: &Answer) -> String {
    let nl = eol(a);
    let mut out = String::new();
    let mut chunk = |choices: Value, usage: Value| {
        let c = json!({"id":"chatcmpl-x","object":"chat.completion.chunk","created":1,"model":"gpt","choices":choices,"usage":usage});
        out.push_str(&format!("data: {c}{nl}{nl}"));
    };
    let delta =
        |d: Value, f: Value| json!([{"index":0,"delta":d,"logprobs":null,"finish_reason":f}]);
    chunk(
        delta(json!({"role":"assistant","content":""}), Value::Null),
        Value::Null,
    );
    for t in &a.texts {
        chunk(delta(json!({"content": t}), Value::Null), Value::Null);
    }
    for (k, (id, name, pieces)) in a.calls.iter().enumerate() {
        chunk(
            delta(
                json!({"tool_calls":[{"index":k,"id":id,"type":"function","function":{"name":name,"arguments":""}}]}),
                Value::Null,
            ),
            Value::Null,
        );
        for p in pieces {
            chunk(
                delta(
                    json!({"tool_calls":[{"index":k,"function":{"arguments":p}}]}),
                    Value::Null,
                ),
                Value::Null,
            );
        }
    }
    let finish = match (a.calls.is_empty(), a.truncated) {
        (false, _) => "tool_calls",
        (true, true) => "length",
        (true, false) => "stop",
    };
    chunk(delta(json!({}), json!(finish)), Value::Null);
    chunk(
        json!([]),
        json!({"prompt_tokens":a.input,"completion_tokens":a.output,"total_tokens":a.input + a.output}),
    );
    out.push_str(&format!("data: [DONE]{nl}{nl}"));
    out
}

fn anthropic_stream(a: &Answer) -> String {
    let nl = eol(a);
    let mut out = String::new();
    let mut ev = |name: &str, data: Value| {
        out.push_str(&format!("event: {name}{nl}data: {data}{nl}{nl}"));
    };
    ev(
        "message_start",
        json!({"type":"message_start","message":{"id":"msg_x","type":"message","role":"assistant","model":"claude","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":a.input,"output_tokens":1}}}),
    );
    let mut index = 0;
    if !a.texts.is_empty() {
        ev(
            "content_block_start",
            json!({"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}),
        );
        ev("ping", json!({"type":"ping"}));
        for t in &a.texts {
            ev(
                "content_block_delta",
                json!({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":t}}),
            );
        }
        ev(
            "content_block_stop",
            json!({"type":"content_block_stop","index":0}),
        );
        index = 1;
    }
    for (id, name, pieces) in &a.calls {
        ev(
            "content_block_start",
            json!({"type":"content_block_start","index":index,"content_block":{"type":"tool_use","id":id,"name":name,"input":{}}}),
        );
        for p in pieces {
            ev(
                "content_block_delta",
                json!({"type":"content_block_delta","index":index,"delta":{"type":"input_json_delta","partial_json":p}}),
            );
        }
        ev(
            "content_block_stop",
            json!({"type":"content_block_stop","index":index}),
        );
        index += 1;
    }
    let stop = match (a.calls.is_empty(), a.truncated) {
        (false, _) => "tool_use",
        (true, true) => "max_tokens",
        (true, false) => "end_turn",
    };
    ev(
        "message_delta",
        json!({"type":"message_delta","delta":{"stop_reason":stop,"stop_sequence":null},"usage":{"output_tokens":a.output}}),
    );
    ev("message_stop", json!({"type":"message_stop"}));
    out
}

fn translate(from: Dialect, to: Dialect, bytes: &[u8], cuts: &[usize]) -> Vec<u8> {
    let opts = StreamOptions {
        include_usage: true,
        created: 1,
    };
    let mut t = StreamTranslator::new(from, to, opts).unwrap();
    let mut out = Vec::new();
    let mut at = 0;
    for &c in cuts.iter().chain([&bytes.len()]) {
        out.extend_from_slice(&t.push(&bytes[at..c]));
        at = c;
    }
    out.extend_from_slice(&t.finish());
    out
}

fn cuts(len: usize, raw: &[prop::sample::Index]) -> Vec<usize> {
    let mut c: Vec<usize> = raw.iter().map(|i| i.index(len + 1)).collect();
    c.sort_unstable();
    c
}

/// (event name, data) of each translated event.
fn events(out: &[u8]) -> Vec<(String, Value)> {
    levee_wire::sse::events(std::str::from_utf8(out).expect("UTF-8 out"))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn openai_to_anthropic_does_not_depend_on_splits(a in answer(), raw in prop::collection::vec(any::<prop::sample::Index>(), 0..24)) {
        let up = openai_stream(&a);
        let whole = translate(Dialect::OpenAi, Dialect::Anthropic, up.as_bytes(), &[]);
        let split = translate(Dialect::OpenAi, Dialect::Anthropic, up.as_bytes(), &cuts(up.len(), &raw));
        prop_assert_eq!(&split, &whole);

        let ev = events(&whole);
        prop_assert_eq!(ev.first().map(|e| e.0.as_str()), Some("message_start"));
        prop_assert_eq!(ev.last().map(|e| e.0.as_str()), Some("message_stop"));
        let text: String = ev.iter().filter_map(|(_, d)| d["delta"]["text"].as_str()).collect();
        prop_assert_eq!(text, a.texts.concat());
        let starts: Vec<&Value> = ev.iter()
            .filter(|(n, d)| n == "content_block_start" && d["content_block"]["type"] == "tool_use")
            .map(|(_, d)| d).collect();
        prop_assert_eq!(starts.len(), a.calls.len());
        for (s, (id, name, pieces)) in starts.iter().zip(&a.calls) {
            prop_assert_eq!(&s["content_block"]["id"], &json!(id));
            prop_assert_eq!(&s["content_block"]["name"], &json!(name));
            let args: String = ev.iter()
                .filter(|(_, d)| d["index"] == s["index"])
                .filter_map(|(_, d)| d["delta"]["partial_json"].as_str())
                .collect();
            prop_assert_eq!(args, pieces.concat());
        }
        let delta = &ev[ev.len() - 2].1;
        let want = match (a.calls.is_empty(), a.truncated) {
            (false, _) => "tool_use",
            (true, true) => "max_tokens",
            (true, false) => "end_turn",
        };
        prop_assert_eq!(&delta["delta"]["stop_reason"], &json!(want));
        prop_assert_eq!(&delta["usage"]["input_tokens"], &json!(a.input));
        prop_assert_eq!(&delta["usage"]["output_tokens"], &json!(a.output));
        // Blocks are opened and closed in order, never interleaved.
        let mut open = None;
        for (n, d) in &ev {
            match n.as_str() {
                "content_block_start" => { prop_assert!(open.is_none()); open = Some(d["index"].clone()); }
                "content_block_delta" => prop_assert_eq!(Some(d["index"].clone()), open.clone()),
                "content_block_stop" => { prop_assert_eq!(Some(d["index"].clone()), open.take()); }
                _ => {}
            }
        }
    }

    #[test]
    fn anthropic_to_openai_does_not_depend_on_splits(a in answer(), raw in prop::collection::vec(any::<prop::sample::Index>(), 0..24)) {
        let up = anthropic_stream(&a);
        let whole = translate(Dialect::Anthropic, Dialect::OpenAi, up.as_bytes(), &[]);
        let split = translate(Dialect::Anthropic, Dialect::OpenAi, up.as_bytes(), &cuts(up.len(), &raw));
        prop_assert_eq!(&split, &whole);

        let ev = events(&whole);
        prop_assert_eq!(&ev.last().unwrap().1, &json!("[DONE]"));
        let chunks: Vec<&Value> = ev.iter().map(|(_, d)| d).filter(|d| d.is_object()).collect();
        for c in &chunks {
            prop_assert_eq!(&c["object"], &json!("chat.completion.chunk"));
            prop_assert_eq!(&c["id"], &json!("chatcmpl-x"));
        }
        let text: String = chunks.iter().filter_map(|c| c["choices"][0]["delta"]["content"].as_str()).collect();
        prop_assert_eq!(text, a.texts.concat());
        for (k, (id, name, pieces)) in a.calls.iter().enumerate() {
            let mine: Vec<&Value> = chunks.iter()
                .filter_map(|c| c["choices"][0]["delta"]["tool_calls"].get(0))
                .filter(|tc| tc["index"] == json!(k))
                .collect();
            prop_assert_eq!(&mine[0]["id"], &json!(id));
            prop_assert_eq!(&mine[0]["function"]["name"], &json!(name));
            let args: String = mine.iter().filter_map(|tc| tc["function"]["arguments"].as_str()).collect();
            prop_assert_eq!(args, pieces.concat());
        }
        let finishes: Vec<&str> = chunks.iter().filter_map(|c| c["choices"][0]["finish_reason"].as_str()).collect();
        let want = match (a.calls.is_empty(), a.truncated) {
            (false, _) => "tool_calls",
            (true, true) => "length",
            (true, false) => "stop",
        };
        prop_assert_eq!(finishes, vec![want]);
        let usage = &chunks.last().unwrap()["usage"];
        prop_assert_eq!(&usage["prompt_tokens"], &json!(a.input));
        prop_assert_eq!(&usage["completion_tokens"], &json!(a.output));
    }
}
