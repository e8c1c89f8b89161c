//! The normal answer to a valid request, by endpoint: a stream, a JSON
//! body, a kept Responses answer, or the endpoint's own 4xx (an unknown
//! model, a bad page query, a path or method not served).

use std::sync::atomic::Ordering;

use bytes::Bytes;
use http::{Response, StatusCode};
use levee_wire::models::Page;

use super::native::{Ask, Streamed};
use super::respond::{error_json, json_answer, stream_answer};
use crate::answer::{self, EmbeddingsAsk, Reply};
use crate::body::MockBody;
use crate::clock;
use crate::request::{self, Body, Endpoint};
use crate::shared::Shared;
use crate::stats::RequestGuard;

impl Ask<'_> {
    /// The normal answer to a valid request.
    pub(super) fn answer(
        self,
        shared: &Shared,
        body: &Body<'_>,
        stream: Streamed,
        guard: RequestGuard,
    ) -> Response<MockBody> {
        let reply = self.reply(shared, body);
        if reply.stored {
            let completed = answer::response(&reply);
            shared
                .responses()
                .keep(answer::response_id(reply.id), completed, self.bytes);
        }
        if let Some(chunks) = self.stream_chunks(body, &reply) {
            return stream_answer(chunks, stream.chunk_delay, stream.cut_after, guard);
        }
        match self.buffered(shared, body, &reply) {
            Ok((status, bytes)) => json_answer(status, bytes, guard),
            Err((status, message)) => error_json(self.dialect, status, &message, None, guard),
        }
    }

    /// What the answer is made of: the model, a fresh id, the time, the
    /// token counts, the forced tool, and whether a Responses answer is kept.
    fn reply<'b>(&self, shared: &Shared, body: &'b Body<'_>) -> Reply<'b> {
        Reply {
            model: body.model.as_deref().unwrap_or("mock-model"),
            id: shared.ids.fetch_add(1, Ordering::Relaxed),
            created: clock::unix_secs(),
            prompt_tokens: request::prompt_tokens(self.bytes.len()),
            pieces: Reply::pieces_for(body.max_tokens()),
            tool: body.forced_tool(self.dialect),
            stored: self.endpoint == Endpoint::Responses && body.stored(),
        }
    }

    /// The events of a streamed answer, when the request asked for a stream
    /// from an endpoint that streams.
    fn stream_chunks(&self, body: &Body<'_>, reply: &Reply<'_>) -> Option<Vec<Bytes>> {
        match self.endpoint {
            _ if !body.streaming() => None,
            Endpoint::Chat => Some(answer::chat_completion_stream(reply, body.include_usage())),
            Endpoint::Messages => Some(answer::anthropic_message_stream(reply)),
            Endpoint::Responses => Some(answer::response_stream(reply)),
            _ => None,
        }
    }

    /// A buffered answer's status and JSON body, or the status and message
    /// of the endpoint's own error.
    fn buffered(
        &self,
        shared: &Shared,
        body: &Body<'_>,
        reply: &Reply<'_>,
    ) -> Result<(StatusCode, Bytes), (StatusCode, String)> {
        let query = self.parts.uri.query();
        let kept = |(status, body): crate::stored::Answered| {
            let status = StatusCode::from_u16(status).unwrap_or(StatusCode::OK);
            (status, body)
        };
        let answered = match self.endpoint {
            Endpoint::Chat => (StatusCode::OK, answer::chat_completion(reply)),
            Endpoint::Messages => (StatusCode::OK, answer::anthropic_message(reply)),
            Endpoint::CountTokens => (StatusCode::OK, answer::token_count(reply.prompt_tokens)),
            Endpoint::Responses => (StatusCode::OK, answer::response(reply)),
            Endpoint::ResponseGet(ref id) => kept(shared.responses().get(id)),
            Endpoint::ResponseInputItems(ref id) => kept(shared.responses().input_items(id, query)),
            Endpoint::ResponseCancel(ref id) => kept(shared.responses().cancel(id)),
            Endpoint::ResponseDelete(ref id) => kept(shared.responses().delete(id)),
            Endpoint::Embeddings => {
                let ask = EmbeddingsAsk {
                    inputs: body.embedding_inputs(),
                    dimensions: body.dimensions(),
                    base64: body.base64(),
                };
                let bytes = answer::embeddings(reply.model, reply.prompt_tokens, &ask);
                (StatusCode::OK, bytes)
            }
            Endpoint::Models => match Page::of_query(query) {
                Ok(page) => {
                    let active = shared.active();
                    let all = answer::catalogue(self.dialect, active.set.served_models());
                    (StatusCode::OK, answer::models(self.dialect, &all, &page))
                }
                Err(message) => return Err((StatusCode::BAD_REQUEST, message)),
            },
            Endpoint::Model(ref id) => match answer::model(
                self.dialect,
                &answer::catalogue(self.dialect, shared.active().set.served_models()),
                id,
            ) {
                Some(bytes) => (StatusCode::OK, bytes),
                None => {
                    let message = answer::no_such_model(self.dialect, id);
                    return Err((StatusCode::NOT_FOUND, message));
                }
            },
            Endpoint::NotFound | Endpoint::MethodNotAllowed => return Err(self.not_served(shared)),
        };
        Ok(answered)
    }

    /// A path this mock does not serve (404) or a method it does not take
    /// there (405), and a message naming what it does serve.
    fn not_served(&self, shared: &Shared) -> (StatusCode, String) {
        let status = if self.endpoint == Endpoint::NotFound {
            StatusCode::NOT_FOUND
        } else {
            StatusCode::METHOD_NOT_ALLOWED
        };
        let message = format!(
            "Invalid URL ({} {}): levee mock answers {} and GET /v1/models",
            self.parts.method,
            self.parts.uri.path(),
            shared.api.serves()
        );
        (status, message)
    }
}
