//! Request inspection: the model and the stream flag, from the JSON body.
//! The body is read borrowed, without building a document, and validated in
//! full on every route — invalid UTF-8 or a lone surrogate anywhere, a number
//! out of range, nesting deeper than 128 — so a body is refused (400) the
//! same way whether or not a target rewrites the model name, and never
//! forwarded raw to a provider that would have to make sense of it.

use crate::http::quickjson::{CAP_LIMIT, OUTPUT_CAPS};
use bytes::Bytes;
use serde::Deserialize;
use std::borrow::Cow;

/// What routing and admission need from a request body.
#[derive(Debug, PartialEq, Eq)]
pub struct Inspected {
    pub model: String,
    pub stream: bool,
    /// The largest top-level output cap (`max_tokens`,
    /// `max_completion_tokens`, `max_output_tokens`) given as an integer of
    /// at most 12 digits; `None` without one.
    pub max_output: Option<u64>,
}

/// Why a body cannot be routed.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum InspectError {
    #[error("request body is not valid JSON: {0}")]
    InvalidJson(String),
    #[error("request body has no `model` string")]
    MissingModel,
    #[error("request body must be a JSON object")]
    NotAnObject,
}

/// Reads `model` and `stream` from a JSON object body.
pub fn inspect(body: &[u8]) -> Result<Inspected, InspectError> {
    // serde would read a JSON array into a struct's fields in order.
    if body.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return Err(InspectError::NotAnObject);
    }
    // One pass reads the two fields and validates the rest (reading them,
    // then validating in a second pass, cost 7,400 instructions for a
    // 130-byte chat request: an eighth of the gateway's own per request).
    // UTF-8 checked once over the whole body: read from a `&str`, serde_json
    // does not check each string again (it did, ~90 instructions a string,
    // ~1,100 for a chat request's dozen).
    let text = std::str::from_utf8(body).map_err(|e| {
        InspectError::InvalidJson(format!("invalid UTF-8 at byte {}", e.valid_up_to()))
    })?;
    // Most bodies are read without serde; the rest get its verdict.
    if let Some(top) = crate::http::quickjson::top(text) {
        return match top.model {
            Some(m) if !m.is_empty() => Ok(Inspected {
                model: m.to_owned(),
                stream: top.stream,
                max_output: top.max_output,
            }),
            _ => Err(InspectError::MissingModel),
        };
    }
    by_serde(text)
}

/// Whether a JSON object body says `"stream": true`, for a pass-through
/// body that need have no `model`; `false` for anything else.
pub fn stream_flag(body: &[u8]) -> bool {
    #[derive(Deserialize)]
    struct Flag {
        #[serde(default)]
        stream: Option<bool>,
    }
    serde_json::from_slice::<Flag>(body).is_ok_and(|f| f.stream == Some(true))
}

/// The verdict of `serde_json`'s visitor, for a body the quick reader
/// leaves to it.
fn by_serde(text: &str) -> Result<Inspected, InspectError> {
    let peek: Peek<'_> = serde_json::from_str(text).map_err(|e| {
        let mut m = e.to_string();
        m.truncate(200);
        InspectError::InvalidJson(m)
    })?;
    let model = peek
        .model
        .filter(|m| !m.is_empty())
        .ok_or(InspectError::MissingModel)?;
    Ok(Inspected {
        model: model.into_owned(),
        stream: peek.stream,
        max_output: peek.max_output,
    })
}

/// The top-level object: `model` (a string or null), `stream` (true only
/// when it is the JSON `true`), every other member validated as [`Valid`].
/// A field given twice is an error, as serde's derived structs make it.
struct Peek<'a> {
    model: Option<Cow<'a, str>>,
    stream: bool,
    max_output: Option<u64>,
}

impl<'de> Deserialize<'de> for Peek<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(PeekVisitor)
    }
}

struct PeekVisitor;

impl<'de> serde::de::Visitor<'de> for PeekVisitor {
    type Value = Peek<'de>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Peek<'de>, A::Error> {
        use serde::de::Error;
        let mut model: Option<Option<Cow<'de, str>>> = None;
        let mut stream: Option<bool> = None;
        // Each cap's last value (as `serde_json::Value` keeps a key given
        // twice), then the largest.
        let mut caps: [Option<u64>; 3] = [None; 3];
        while let Some(key) = map.next_key::<Text<'de>>()? {
            match key.0.as_ref() {
                "model" if model.is_some() => return Err(A::Error::duplicate_field("model")),
                "model" => model = Some(map.next_value::<Option<Text<'de>>>()?.map(|t| t.0)),
                "stream" if stream.is_some() => return Err(A::Error::duplicate_field("stream")),
                "stream" => stream = Some(map.next_value::<Scalar>()?.is_true()),
                k => match OUTPUT_CAPS.iter().position(|c| *c == k.as_bytes()) {
                    Some(slot) => caps[slot] = map.next_value::<Scalar>()?.cap(),
                    None => {
                        map.next_value::<Valid>()?;
                    }
                },
            }
        }
        Ok(Peek {
            model: model.flatten(),
            stream: stream.unwrap_or(false),
            max_output: caps.into_iter().flatten().max(),
        })
    }
}

/// A decoded string, borrowed from the body when it has no escapes
/// (`Cow<str>`'s own `Deserialize` always copies).
struct Text<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for Text<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_str(TextVisitor)
    }
}

struct TextVisitor;

impl<'de> serde::de::Visitor<'de> for TextVisitor {
    type Value = Text<'de>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a string")
    }
    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Text<'de>, E> {
        Ok(Text(Cow::Borrowed(v)))
    }
    fn visit_str<E>(self, v: &str) -> Result<Text<'de>, E> {
        Ok(Text(Cow::Owned(v.to_owned())))
    }
}

/// A member's value as the top level reads it: a boolean, a non-negative
/// integer, or anything else (validated as [`Valid`]).
enum Scalar {
    Bool(bool),
    Uint(u64),
    Other,
}

impl Scalar {
    /// Whether it is the JSON `true` (`stream`).
    fn is_true(&self) -> bool {
        matches!(self, Scalar::Bool(true))
    }

    /// It as an output cap: an integer of at most 12 digits.
    fn cap(&self) -> Option<u64> {
        match *self {
            Scalar::Uint(v) if v < CAP_LIMIT => Some(v),
            _ => None,
        }
    }
}

impl<'de> Deserialize<'de> for Scalar {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ScalarVisitor)
    }
}

struct ScalarVisitor;

impl<'de> serde::de::Visitor<'de> for ScalarVisitor {
    type Value = Scalar;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Scalar, E> {
        Ok(Scalar::Bool(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Scalar, E> {
        Ok(Scalar::Uint(v))
    }
    fn visit_i64<E>(self, _: i64) -> Result<Scalar, E> {
        Ok(Scalar::Other)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Scalar, E> {
        Ok(Scalar::Other)
    }
    fn visit_str<E>(self, _: &str) -> Result<Scalar, E> {
        Ok(Scalar::Other)
    }
    fn visit_unit<E>(self) -> Result<Scalar, E> {
        Ok(Scalar::Other)
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, seq: A) -> Result<Scalar, A::Error> {
        ValidVisitor.visit_seq(seq).map(|_| Scalar::Other)
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<Scalar, A::Error> {
        ValidVisitor.visit_map(map).map(|_| Scalar::Other)
    }
}

/// A JSON value checked as strictly as `serde_json::Value` parses it
/// (strings decoded, numbers in range, depth limited), without building it.
struct Valid;

impl<'de> Deserialize<'de> for Valid {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ValidVisitor)
    }
}

struct ValidVisitor;

impl<'de> serde::de::Visitor<'de> for ValidVisitor {
    type Value = Valid;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, _: bool) -> Result<Valid, E> {
        Ok(Valid)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Valid, E> {
        Ok(Valid)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Valid, E> {
        Ok(Valid)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Valid, E> {
        Ok(Valid)
    }
    fn visit_str<E>(self, _: &str) -> Result<Valid, E> {
        Ok(Valid)
    }
    fn visit_unit<E>(self) -> Result<Valid, E> {
        Ok(Valid)
    }
    fn visit_none<E>(self) -> Result<Valid, E> {
        Ok(Valid)
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Valid, A::Error> {
        while seq.next_element::<Valid>()?.is_some() {}
        Ok(Valid)
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Valid, A::Error> {
        while map.next_entry::<Valid, Valid>()?.is_some() {}
        Ok(Valid)
    }
}

/// The body with `model` replaced (the original bytes when unchanged). Fails
/// when the body is not a JSON document `serde_json` can rebuild (invalid
/// UTF-8 or a lone surrogate in another field, a number out of range, nesting
/// deeper than 128): such a body is refused, never forwarded unrewritten.
pub fn rewrite_model(body: &Bytes, from: &str, to: &str) -> Result<Bytes, InspectError> {
    if from == to {
        return Ok(body.clone());
    }
    let invalid = |e: serde_json::Error| {
        let mut m = e.to_string();
        m.truncate(200);
        InspectError::InvalidJson(m)
    };
    let mut v: serde_json::Value = serde_json::from_slice(body).map_err(invalid)?;
    let obj = v.as_object_mut().ok_or(InspectError::NotAnObject)?;
    obj.insert("model".into(), serde_json::Value::String(to.to_string()));
    serde_json::to_vec(&v).map(Bytes::from).map_err(invalid)
}

/// A chat completions stream body that asks for usage in its last chunk
/// (`stream_options.include_usage: true`), when it does not already;
/// `None` when it does (or is not a JSON object).
pub fn asking_usage(body: &Bytes) -> Option<Bytes> {
    let mut v: serde_json::Value = serde_json::from_slice(body).ok()?;
    let obj = v.as_object_mut()?;
    let options = obj
        .entry("stream_options")
        .or_insert_with(|| serde_json::Value::Object(serde_json::Map::new()));
    let options = options.as_object_mut()?;
    if options.get("include_usage") == Some(&serde_json::Value::Bool(true)) {
        return None;
    }
    options.insert("include_usage".into(), serde_json::Value::Bool(true));
    serde_json::to_vec(&v).ok().map(Bytes::from)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn model_and_stream() {
        assert_eq!(
            inspect(br#"{"model":"a/b","stream":true,"messages":[]}"#),
            Ok(Inspected {
                model: "a/b".into(),
                stream: true,
                max_output: None,
            })
        );
        assert_eq!(
            inspect(br#"{"model":"x\u0041"}"#).map(|i| i.model),
            Ok("xA".into())
        );
        assert_eq!(
            inspect(br#"{"messages":[]}"#),
            Err(InspectError::MissingModel)
        );
        assert_eq!(inspect(br#"{"model":""}"#), Err(InspectError::MissingModel));
        assert!(matches!(
            inspect(b"{nope"),
            Err(InspectError::InvalidJson(_))
        ));
        assert_eq!(inspect(b"[1]"), Err(InspectError::NotAnObject));
        assert_eq!(inspect(br#" ["a", true]"#), Err(InspectError::NotAnObject));
        assert!(matches!(
            inspect(br#"{"model":5}"#),
            Err(InspectError::InvalidJson(_))
        ));
    }

    /// What `inspect` answers, computed from a whole `serde_json::Value`.
    fn reference(body: &[u8]) -> Result<Inspected, InspectError> {
        if body.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
            return Err(InspectError::NotAnObject);
        }
        let v: serde_json::Value =
            serde_json::from_slice(body).map_err(|e| InspectError::InvalidJson(e.to_string()))?;
        let stream = v.get("stream") == Some(&serde_json::Value::Bool(true));
        let max_output = ["max_tokens", "max_completion_tokens", "max_output_tokens"]
            .into_iter()
            .filter_map(|k| v.get(k)?.as_u64().filter(|n| *n < 1_000_000_000_000))
            .max();
        match v.get("model") {
            Some(serde_json::Value::String(m)) if !m.is_empty() => Ok(Inspected {
                model: m.clone(),
                stream,
                max_output,
            }),
            None | Some(serde_json::Value::Null) | Some(serde_json::Value::String(_)) => {
                Err(InspectError::MissingModel)
            }
            Some(_) => Err(InspectError::InvalidJson("model is not a string".into())),
        }
    }

    /// The same answer, with the JSON error's wording left out.
    fn kind(r: Result<Inspected, InspectError>) -> Result<Inspected, InspectError> {
        r.map_err(|e| match e {
            InspectError::InvalidJson(_) => InspectError::InvalidJson(String::new()),
            e => e,
        })
    }

    #[test]
    fn the_one_pass_reads_what_a_whole_parse_reads() {
        let mut bodies: Vec<Vec<u8>> = [
            &br#"{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}],"stream":true}"#[..],
            br#"{"stream":false,"model":"m"}"#,
            br#"{"model":"m","stream":"true"}"#,
            br#"{"model":"m","stream":1}"#,
            br#"{"model":"m","stream":null}"#,
            br#"{"model":"m","stream":{"a":[true]}}"#,
            br#"{"model":"m","stream":[true]}"#,
            br#"{"model":"m\"q\u00e9"}"#,
            br#"{"model":null,"stream":true}"#,
            br#"{"model":["m"]}"#,
            br#"{"model":{"m":1}}"#,
            br#"{"model":true}"#,
            br#"{"model":"m","stream":tru}"#,
            br#"{"model":"m",}"#,
            br#"{"model":"m"} x"#,
            br#"  {"mod\u0065l":"escaped key"}  "#,
            br#"{}"#,
            br#"{"model":"m","x":"\udc00"}"#,
            b"{\"model\":\"\xc3\"}",
            br#"{"model":"m","max_tokens":64,"max_output_tokens":9,"max_tokens":3}"#,
            br#"{"model":"m","max\u005ftokens":64,"x":{"max_tokens":99}}"#,
            br#"{"model":"m","max_completion_tokens":1000000000000,"max_tokens":-1}"#,
        ]
        .iter()
        .map(|b| b.to_vec())
        .collect();
        let seeds =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/seeds/inspect");
        for entry in std::fs::read_dir(&seeds).unwrap() {
            let path = entry.unwrap().path();
            if path.is_file() {
                bodies.push(std::fs::read(path).unwrap());
            }
        }
        for body in &bodies {
            assert_eq!(
                kind(inspect(body)),
                kind(reference(body)),
                "{:?}",
                String::from_utf8_lossy(body)
            );
        }
    }

    /// JSON-like text: mostly valid, with the shapes the quick reader must
    /// leave to `serde_json` (escapes, exponents, long numbers, controls,
    /// surrogates, duplicates, deep nesting) mixed in.
    fn json_text() -> impl Strategy<Value = String> {
        let string = |parts: Vec<&'static str>| {
            prop::collection::vec(prop::sample::select(parts), 0..6)
                .prop_map(|parts| format!("\"{}\"", parts.concat()))
        };
        let leaf = prop_oneof![
            4 => prop::sample::select(vec!["null", "true", "false", "0", "-0", "7", "-12.5", "0.25"])
                .prop_map(str::to_string),
            4 => string(vec!["a", "model", " ", "é", "日", "\\n", "\\\"", "\\\\", "\\/", "\\t"]),
            1 => prop::sample::select(vec![
                "tru", "01", "1.", "1e3", "-2E-4", "1e400", "123456789012345678901234567890",
                "-", ".5",
            ])
            .prop_map(str::to_string),
            1 => "[0-9]{1,330}",
            1 => prop::sample::select(vec!["64", "999999999999", "1000000000000", "00"])
                .prop_map(str::to_string),
            1 => string(vec!["a", "\\u00e9", "\\ud800", "\\udc00", "\\ud83d\\ude00", "\\ud800\\u0041", "\\ud800a", "\\u00zz", "\\u004", "\\q", "\n", "\u{1}", "\u{7f}"]),
        ];
        let value = leaf.prop_recursive(5, 40, 5, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..5)
                    .prop_map(|v| format!("[{}]", v.join(","))),
                prop::collection::vec(("[a-z]{0,3}", inner), 0..5).prop_map(|v| {
                    let members: Vec<String> =
                        v.iter().map(|(k, v)| format!("\"{k}\":{v}")).collect();
                    format!("{{{}}}", members.join(","))
                }),
            ]
        });
        let key = prop::sample::select(vec![
            "model",
            "stream",
            "messages",
            "x",
            "model",
            "stream",
            "mod\\u0065l",
            "stream ",
            "max_tokens",
            "max_output_tokens",
            "max\\u005ftokens",
        ]);
        let top = prop::collection::vec((key, value.clone(), prop::bool::ANY), 0..6).prop_map(
            |members| {
                let members: Vec<String> = members
                    .iter()
                    .map(|(k, v, spaced)| {
                        if *spaced {
                            format!(" \"{k}\" :\t{v}\n")
                        } else {
                            format!("\"{k}\":{v}")
                        }
                    })
                    .collect();
                format!("{{{}}}", members.join(","))
            },
        );
        let model = prop::sample::select(vec!["\"gpt-4o\"", "\"\"", "null", "\"a\\\"b\"", "3"]);
        (top, model, prop::bool::ANY).prop_map(|(top, model, lead)| {
            if lead && top.len() > 2 {
                format!("{{\"model\":{model},{}", &top[1..])
            } else {
                top
            }
        })
    }

    /// The text with one byte taken out or one structural byte put in.
    fn mutated() -> impl Strategy<Value = Vec<u8>> {
        (
            json_text(),
            0usize..6,
            any::<prop::sample::Index>(),
            prop::sample::select(b"{}[],:\"\\ 0e-.tn\xc3".to_vec()),
        )
            .prop_map(|(text, how, at, byte)| {
                let mut b = text.into_bytes();
                let i = at.index(b.len() + 1);
                match how {
                    0..=3 => {}
                    4 if i < b.len() => {
                        b.remove(i);
                    }
                    _ => b.insert(i, byte),
                }
                b
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 4000, ..ProptestConfig::default() })]

        /// The quick reader and `serde_json` agree on every body: the same
        /// model, stream flag and kind of refusal.
        #[test]
        fn the_quick_reader_answers_what_serde_json_answers(body in mutated()) {
            let by_serde = match std::str::from_utf8(&body) {
                Ok(text) if body.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{') => {
                    by_serde(text)
                }
                _ => inspect(&body),
            };
            prop_assert_eq!(
                kind(inspect(&body)),
                kind(by_serde),
                "{:?}",
                String::from_utf8_lossy(&body)
            );
        }
    }

    /// The property above means something only if the generated bodies
    /// reach both paths: read by the quick reader, and left to serde.
    #[test]
    fn the_generated_bodies_reach_both_paths() {
        use proptest::strategy::ValueTree;
        let mut runner = proptest::test_runner::TestRunner::deterministic();
        let strategy = mutated();
        let (mut quick, mut serde) = (0, 0);
        for _ in 0..2000 {
            let body = strategy.new_tree(&mut runner).unwrap().current();
            match std::str::from_utf8(&body)
                .ok()
                .and_then(crate::http::quickjson::top)
            {
                Some(_) => quick += 1,
                None => serde += 1,
            }
        }
        assert!(quick > 300 && serde > 300, "quick {quick}, serde {serde}");
    }

    #[test]
    fn a_field_given_twice_is_refused() {
        for body in [
            &br#"{"model":"a","model":"b"}"#[..],
            br#"{"model":"a","stream":true,"stream":false}"#,
        ] {
            assert!(
                matches!(inspect(body), Err(InspectError::InvalidJson(m)) if m.contains("duplicate field")),
                "{:?}",
                String::from_utf8_lossy(body)
            );
        }
    }

    #[test]
    fn rewrite_keeps_everything_else() {
        let b = Bytes::from_static(br#"{"model":"anthropic/claude","max_tokens":5}"#);
        let out = rewrite_model(&b, "anthropic/claude", "claude").unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["model"], "claude");
        assert_eq!(v["max_tokens"], 5);
        assert_eq!(rewrite_model(&b, "x", "x").unwrap(), b);
    }

    #[test]
    fn bodies_that_cannot_be_parsed_in_full_are_refused_by_inspect() {
        let deep = format!(
            "{{\"model\":\"a\",\"x\":{}{}}}",
            "[".repeat(200),
            "]".repeat(200)
        );
        for body in [
            &br#"{"model":"a","x":1e400}"#[..],
            br#"{"model":"a","x":"\ud800"}"#,
            b"{\"model\":\"a\",\"x\":\"\xa0\"}",
            b"{\"model\":\"a\",\"\xff\":1}",
            deep.as_bytes(),
        ] {
            assert!(
                matches!(inspect(body), Err(InspectError::InvalidJson(_))),
                "{:?}",
                String::from_utf8_lossy(body)
            );
        }
        assert!(inspect(br#"{"model":"a","x":[1,2.5,-3,"\u00e9",{"y":null}]}"#).is_ok());
    }

    #[test]
    fn bodies_that_cannot_be_rewritten_are_refused_not_forwarded() {
        // Found by the `inspect` fuzz target: accepted by the borrowed peek,
        // rejected by a full parse.
        for body in [
            &br#"{"model":"a","x":1e400}"#[..],
            br#"{"model":"a","x":"\ud800"}"#,
            b"{\"model\":\"e\",\"x\":\"\xa0\"}",
        ] {
            if inspect(body).is_ok() {
                let b = Bytes::copy_from_slice(body);
                assert!(rewrite_model(&b, "a", "z").is_err(), "{body:?}");
            }
        }
        let deep = format!(
            "{{\"model\":\"a\",\"x\":{}{}}}",
            "[".repeat(200),
            "]".repeat(200)
        );
        let b = Bytes::from(deep);
        assert!(rewrite_model(&b, "a", "z").is_err());
    }
}
