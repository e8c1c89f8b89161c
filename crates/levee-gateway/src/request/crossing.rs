//! Fallback across dialects: where a target's provider speaks the other
//! dialect than the caller (an Anthropic caller whose backup is an OpenAI
//! provider, or the reverse), the request is translated for that target at
//! admission, and what comes back — a JSON answer, an SSE stream event by
//! event, an error body — is translated back into the caller's dialect
//! (`levee-translate` does the work; this module decides when and wires it).
//!
//! A request the target's dialect cannot carry (several choices, logprobs,
//! audio, documents, thinking, server tools…) is not sent there altered: the
//! target is skipped for that request and the reason counted in
//! `levee_translation_refused_total{route,provider,reason}`.

use bytes::Bytes;
use levee_config::Api;
use levee_translate::{StreamOptions, StreamTranslator, Untranslatable};
use levee_wire::Dialect;

/// How one target's exchange crosses dialects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Crossing {
    pub caller: Dialect,
    pub upstream: Dialect,
    /// The OpenAI caller asked for usage in its stream.
    pub include_usage: bool,
}

/// What a target is sent.
#[derive(Debug)]
pub enum Prepared {
    /// Same dialect: the caller's body (model rewritten) and path.
    Same,
    /// Translated body and the target dialect's path.
    Crossed {
        body: Bytes,
        path: &'static str,
        crossing: Crossing,
    },
    /// The target cannot carry this request.
    Skip(Untranslatable),
}

/// Decides, and translates if needed, what a target of `api` is sent for a
/// caller request on `path` with `body`, the model renamed to `model`.
pub fn prepare(caller: Dialect, api: Api, path: &str, body: &[u8], model: &str) -> Prepared {
    let (from, to) = (caller, api);
    if from == to {
        return Prepared::Same;
    }
    if path != from.chat_path() {
        return Prepared::Skip(Untranslatable {
            reason: levee_translate::Reason::Endpoint,
            detail: format!("`{path}` has no counterpart in the {} API", to.name()),
            param: None,
        });
    }
    match levee_translate::translate_request(from, to, body, model) {
        Ok(t) => Prepared::Crossed {
            body: t.body,
            path: t.path,
            crossing: Crossing {
                caller: from,
                upstream: to,
                include_usage: t.include_usage,
            },
        },
        Err(e) => Prepared::Skip(e),
    }
}

/// [`prepare`] under a route's `on_untranslatable: drop`: the top-level
/// parameters the target cannot carry left out, one by one, until it can
/// (at most eight); and the names left out. When leaving them out is not
/// enough, the first refusal, nothing dropped.
pub fn prepare_dropping(
    caller: Dialect,
    api: Api,
    path: &str,
    body: &[u8],
    model: &str,
) -> (Prepared, Vec<&'static str>) {
    let first = prepare(caller, api, path, body, model);
    let Prepared::Skip(why) = &first else {
        return (first, Vec::new());
    };
    let mut param = why.param;
    let mut dropped = Vec::new();
    let mut current = Bytes::copy_from_slice(body);
    while let Some(p) = param.filter(|_| dropped.len() < 8) {
        let Some(less) = without_param(&current, p) else {
            break;
        };
        dropped.push(p);
        current = less;
        match prepare(caller, api, path, &current, model) {
            Prepared::Skip(why) => param = why.param,
            done => return (done, dropped),
        }
    }
    (first, Vec::new())
}

/// `body` (a JSON object) without its top-level `param`; `None` when it
/// is not an object or has no such member.
fn without_param(body: &[u8], param: &str) -> Option<Bytes> {
    let mut object: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(body).ok()?;
    object.remove(param)?;
    serde_json::to_vec(&object).ok().map(Bytes::from)
}

impl Crossing {
    /// A success body in the caller's dialect.
    pub fn response(
        &self,
        body: &[u8],
        unix_secs: u64,
    ) -> Result<Bytes, levee_translate::BadAnswer> {
        levee_translate::translate_response(self.upstream, self.caller, body, unix_secs)
    }

    /// An upstream error body in the caller's dialect.
    pub fn error(&self, status: u16, body: &[u8]) -> Bytes {
        levee_translate::error::translate(self.upstream, self.caller, status, body)
    }

    /// A translator for this exchange's SSE stream.
    pub fn stream(&self, unix_secs: u64) -> Option<StreamTranslator> {
        StreamTranslator::new(
            self.upstream,
            self.caller,
            StreamOptions {
                include_usage: self.include_usage,
                created: unix_secs,
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_chat_paths_cross() {
        let body = br#"{"model":"m","input":"x"}"#;
        match prepare(Dialect::OpenAi, Api::Anthropic, "/v1/embeddings", body, "c") {
            Prepared::Skip(e) => assert_eq!(e.reason, levee_translate::Reason::Endpoint),
            other => panic!("{other:?}"),
        }
        let chat = br#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#;
        match prepare(
            Dialect::OpenAi,
            Api::Anthropic,
            "/v1/chat/completions",
            chat,
            "c",
        ) {
            Prepared::Crossed { path, .. } => assert_eq!(path, "/v1/messages"),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            prepare(Dialect::OpenAi, Api::OpenAi, "/v1/embeddings", body, "c"),
            Prepared::Same
        ));
    }
}
