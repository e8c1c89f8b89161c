//! Which endpoint a request asks for and which dialect answers it, for each
//! `--api`, and the endpoints each `--api` serves (for a 404's message).

use http::HeaderMap;
use levee_wire::Dialect;

use crate::request::Endpoint;
use crate::MockApi;

impl MockApi {
    /// The endpoint asked for and the dialect to answer in: both dialects
    /// read the dialect from the request; one dialect answers every path in
    /// its own, and knows nothing of the other's paths.
    pub(super) fn route(
        self,
        method: &http::Method,
        path: &str,
        headers: &HeaderMap,
    ) -> (Endpoint, Dialect) {
        let endpoint = Endpoint::route(method, path);
        match self {
            // A cloud's request reaches here rewritten, in its native API.
            MockApi::Both | MockApi::Vertex => (endpoint, Dialect::of_request(path, headers)),
            MockApi::OpenAi | MockApi::Azure => {
                (served(endpoint, Dialect::OpenAi), Dialect::OpenAi)
            }
            MockApi::Bedrock => (served(endpoint, Dialect::Anthropic), Dialect::Anthropic),
            MockApi::Anthropic => (served(endpoint, Dialect::Anthropic), Dialect::Anthropic),
        }
    }

    /// The endpoints this mock answers, for a 404's message.
    pub(super) fn serves(self) -> &'static str {
        match self {
            MockApi::Both => {
                "POST /v1/chat/completions, /v1/messages, /v1/messages/count_tokens, /v1/embeddings, /v1/responses, /v1/responses/{id}/cancel, GET and DELETE /v1/responses/{id}, GET /v1/responses/{id}/input_items"
            }
            MockApi::OpenAi => {
                "POST /v1/chat/completions, /v1/embeddings, /v1/responses, /v1/responses/{id}/cancel, GET and DELETE /v1/responses/{id}, GET /v1/responses/{id}/input_items"
            }
            MockApi::Anthropic => "POST /v1/messages, /v1/messages/count_tokens",
            MockApi::Azure => {
                "POST /openai/v1/chat/completions (and the v1 API's other paths), /openai/deployments/{deployment}/chat/completions|completions|embeddings?api-version="
            }
            MockApi::Bedrock => {
                "POST /model/{modelId}/invoke, /model/{modelId}/invoke-with-response-stream"
            }
            MockApi::Vertex => {
                "POST /v1/projects/{p}/locations/{r}/publishers/anthropic/models/{m}:rawPredict|:streamRawPredict, /v1/projects/{p}/locations/{r}/endpoints/openapi/chat/completions, /token"
            }
        }
    }
}

/// A provider serving one dialect knows nothing of the other's paths.
fn served(endpoint: Endpoint, dialect: Dialect) -> Endpoint {
    let foreign = match dialect {
        Dialect::OpenAi => matches!(endpoint, Endpoint::Messages | Endpoint::CountTokens),
        Dialect::Anthropic => matches!(
            endpoint,
            Endpoint::Chat
                | Endpoint::Embeddings
                | Endpoint::Responses
                | Endpoint::ResponseGet(_)
                | Endpoint::ResponseInputItems(_)
                | Endpoint::ResponseCancel(_)
                | Endpoint::ResponseDelete(_)
        ),
    };
    if foreign {
        Endpoint::NotFound
    } else {
        endpoint
    }
}
