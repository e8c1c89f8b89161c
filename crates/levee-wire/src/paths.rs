//! The provider endpoints Levee knows, by path.

/// OpenAI chat completions.
pub const CHAT_COMPLETIONS: &str = "/v1/chat/completions";
/// Anthropic messages.
pub const MESSAGES: &str = "/v1/messages";
/// OpenAI embeddings.
pub const EMBEDDINGS: &str = "/v1/embeddings";
/// OpenAI Responses.
pub const RESPONSES: &str = "/v1/responses";
/// The model list (both dialects; `/v1/models/{id}` for one model).
pub const MODELS: &str = "/v1/models";
/// Anthropic's token count for a Messages request (`POST`, the body of a
/// `/v1/messages` request without `max_tokens`).
pub const COUNT_TOKENS: &str = "/v1/messages/count_tokens";
/// Where OpenAI keeps a stored response: `{RESPONSE_ITEM}{id}` (`GET`,
/// `DELETE`), `…/{id}/input_items` (`GET`), `…/{id}/cancel` (`POST`).
pub const RESPONSE_ITEM: &str = "/v1/responses/";

/// The endpoints that take a request body (POST), in both dialects.
pub const POST: [&str; 4] = [CHAT_COMPLETIONS, MESSAGES, EMBEDDINGS, RESPONSES];

/// Paths only OpenAI serves.
pub const OPENAI_ONLY: [&str; 3] = [CHAT_COMPLETIONS, EMBEDDINGS, RESPONSES];

/// The keys of the mock's `by_path` counts: each endpoint, then `other`.
pub const COUNTED: [&str; 6] = [
    CHAT_COMPLETIONS,
    MESSAGES,
    EMBEDDINGS,
    RESPONSES,
    MODELS,
    "other",
];

/// Index into [`COUNTED`] for a request path (`/v1/models/{id}` counts as
/// `/v1/models`).
pub fn counted_index(path: &str) -> usize {
    match COUNTED[..4].iter().position(|p| *p == path) {
        Some(i) => i,
        None if path == MODELS || path.starts_with("/v1/models/") => 4,
        None => 5,
    }
}

/// The mock's counters (`GET`, a [`crate::stats::Stats`]).
pub const MOCK_STATS: &str = "/_mock/stats";
/// The mock's fault set (`POST` a fault document to replace it).
pub const MOCK_FAULTS: &str = "/_mock/faults";
/// Zeroes the mock's counters (`POST`).
pub const MOCK_RESET: &str = "/_mock/reset";
