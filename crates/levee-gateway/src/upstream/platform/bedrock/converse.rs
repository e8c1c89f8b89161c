//! Every model of the catalogue that is not Anthropic's goes through the
//! Converse API (`/model/{id}/converse`, `/converse-stream`): the Messages
//! request written as a Converse request, and the answer read back as a
//! Messages answer, whole or event by event (`levee_translate::converse`).
//! Anthropic's own models stay on `InvokeModel`, which takes the Messages
//! body as it is and so carries everything the Messages API can say.

use super::*;
use levee_translate::converse::{message_from_converse, request_from_messages};

/// Whether Bedrock serves `model` (a model id, an inference profile id or
/// an ARN of either) through `InvokeModel` with the Messages body: it is
/// one of Anthropic's (`anthropic.claude-…`, `us.anthropic.claude-…`).
/// Every other id, an application inference profile's ARN included (it
/// does not say whose model it is), goes through Converse, which serves
/// them all.
pub(super) fn uses_invoke(model: &str) -> bool {
    let id = model.rsplit('/').next().unwrap_or(model);
    id.starts_with("anthropic.") || id.split('.').nth(1) == Some("anthropic")
}

/// The Converse path and body for the Messages request `fields` (its
/// `model` and `stream` already taken out).
pub(super) fn target(
    fields: &Map<String, Value>,
    model: &str,
    stream: bool,
) -> Result<(String, Bytes), String> {
    let body = serde_json::to_vec(fields).map_err(|e| e.to_string())?;
    let converse = request_from_messages(&body).map_err(|e| {
        format!("Amazon Bedrock's Converse API (model `{model}`) cannot carry this request: {e}")
    })?;
    let op = if stream {
        "converse-stream"
    } else {
        "converse"
    };
    let path = format!("/model/{}/{op}", utf8_percent_encode(model, LABEL));
    Ok((path, Bytes::from(converse)))
}

/// The model of a Converse attempt's path (`/model/{id}/converse` or
/// `/converse-stream`, the id percent-decoded); `None` for any other
/// operation.
pub(super) fn converse_model(path: &str) -> Option<String> {
    let rest = path.split('?').next()?.strip_prefix("/model/")?;
    let (id, op) = rest.rsplit_once('/')?;
    if op != "converse" && op != "converse-stream" {
        return None;
    }
    Some(
        percent_encoding::percent_decode_str(id)
            .decode_utf8_lossy()
            .into_owned(),
    )
}

/// The Messages `id` of an answer Bedrock gave: its request id, which
/// names it in Bedrock's logs too.
pub(super) fn message_id(headers: &http::HeaderMap) -> String {
    let rid = headers
        .get("x-amzn-requestid")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let rid: String = rid
        .chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .take(64)
        .collect();
    format!("msg_bdrk_{}", if rid.is_empty() { "levee" } else { &rid })
}

/// The most of a Converse answer read (the gateway keeps no more of any
/// answer).
const MAX_ANSWER: usize = 64 * 1024 * 1024;

/// A whole Converse answer read, then given as one Messages answer.
pub(super) struct ConverseAnswer {
    read: Vec<u8>,
    model: String,
    id: String,
}

impl ConverseAnswer {
    pub(super) fn new(model: String, id: String) -> Self {
        ConverseAnswer {
            read: Vec::new(),
            model,
            id,
        }
    }
}

impl Reframe for ConverseAnswer {
    fn data(&mut self, data: Bytes) -> Step {
        if self.read.len() + data.len() > MAX_ANSWER {
            let e = format!("Amazon Bedrock's Converse answer is over {MAX_ANSWER} bytes");
            return Step::Fail(e.into());
        }
        self.read.extend_from_slice(&data);
        Step::More
    }

    fn end(&mut self) -> Step {
        match message_from_converse(&self.read, &self.model, &self.id) {
            Ok(body) => Step::Last(Some(Bytes::from(body))),
            Err(e) => Step::Fail(e.to_string().into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anthropic_models_stay_on_invoke_and_the_rest_converse() {
        for id in [
            "anthropic.claude-sonnet-4-5-20250929-v1:0",
            "us.anthropic.claude-sonnet-4-5-20250929-v1:0",
            "global.anthropic.claude-haiku-4-5",
            "arn:aws:bedrock:us-east-1::foundation-model/anthropic.claude-3-haiku-20240307-v1:0",
            "arn:aws:bedrock:us-east-1:123456789012:inference-profile/eu.anthropic.claude-3-7-sonnet",
        ] {
            assert!(uses_invoke(id), "{id}");
        }
        for id in [
            "meta.llama3-1-70b-instruct-v1:0",
            "us.meta.llama3-2-90b-instruct-v1:0",
            "mistral.mistral-large-2407-v1:0",
            "amazon.nova-pro-v1:0",
            "cohere.command-r-plus-v1:0",
            "arn:aws:bedrock:us-east-1:123456789012:application-inference-profile/a1b2c3",
            "anthropicish.model",
        ] {
            assert!(!uses_invoke(id), "{id}");
        }
        assert_eq!(
            converse_model("/model/meta.llama3-1-70b-instruct-v1%3A0/converse-stream").as_deref(),
            Some("meta.llama3-1-70b-instruct-v1:0")
        );
        assert_eq!(converse_model("/model/anthropic.claude/invoke"), None);
    }
}
