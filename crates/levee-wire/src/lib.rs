//! `levee-wire`: the one vocabulary of the wire that Levee's gateway, its
//! mock provider, its dialect translator and its drill share. It names the
//! two dialects (OpenAI and Anthropic) and the rule that tells which one a
//! request speaks ([`Dialect::of_request`]), the endpoint paths ([`paths`]),
//! each dialect's error body and the error `type` it gives each HTTP status
//! ([`error`]), the recorded-exchange line the gateway writes and the mock
//! replays ([`tape::TapeEntry`]), the counters the mock reports at
//! `GET /_mock/stats` ([`stats::Stats`]), the rate-limit fields
//! providers send on their answers ([`ratelimit::read`]), the page of the
//! model list a query asks for ([`models::Page`]), the day-count calendar
//! their RFC 3339 times need ([`civil`]), the log-normal fit of a latency
//! from its median and p99 ([`latency`]), and the connection wrapper both
//! servers observe their accepted sockets with ([`conn::Watched`]).
//!
//! It does no I/O of its own and holds no state: types, tables, pure
//! functions, and a wrapper that passes a stream's I/O through. The
//! error tables follow what the providers themselves send (OpenAI answers a
//! bad key with 401, type `invalid_request_error`, code `invalid_api_key`;
//! Anthropic with 401, type `authentication_error`), so an official SDK
//! raises the same typed error whether the provider, the mock or Levee
//! wrote the body.
#![forbid(unsafe_code)]

/// Calendar dates and RFC 3339 times (the policy core's arithmetic).
pub use levee_policy::civil;
pub mod conn;
pub mod error;
pub mod headers;
pub mod latency;
pub mod models;
pub mod paths;
pub mod ratelimit;
pub mod sse;
pub mod stats;
pub mod tape;

/// Which provider API a request speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dialect {
    /// OpenAI: chat completions, embeddings, Responses, models.
    OpenAi,
    /// Anthropic: messages, models.
    Anthropic,
}

impl Dialect {
    /// The dialect a request speaks: the path decides where it names one
    /// dialect's endpoint (`/v1/messages…` is Anthropic's; chat completions,
    /// embeddings and Responses are OpenAI's); elsewhere (`/v1/models`, an
    /// unknown path) a request carrying `anthropic-version` is Anthropic's,
    /// any other OpenAI's.
    pub fn of_request(path: &str, headers: &http::HeaderMap) -> Dialect {
        match Dialect::of_path(path) {
            Some(d) => d,
            None if headers.contains_key(headers::ANTHROPIC_VERSION) => Dialect::Anthropic,
            None => Dialect::OpenAi,
        }
    }

    /// The dialect a path alone decides (`None` for `/v1/models` and paths
    /// of neither dialect): the first half of [`Dialect::of_request`], for a
    /// route's `match.path` where there are no headers yet. A stored
    /// response (`/v1/responses/{id}…`) is OpenAI's.
    pub fn of_path(path: &str) -> Option<Dialect> {
        if path.starts_with(paths::MESSAGES) {
            Some(Dialect::Anthropic)
        } else if paths::OPENAI_ONLY.contains(&path) || path.starts_with(paths::RESPONSE_ITEM) {
            Some(Dialect::OpenAi)
        } else {
            None
        }
    }

    /// The path a chat request of this dialect is sent to.
    pub fn chat_path(self) -> &'static str {
        match self {
            Dialect::OpenAi => paths::CHAT_COMPLETIONS,
            Dialect::Anthropic => paths::MESSAGES,
        }
    }

    /// `openai` / `anthropic`.
    pub fn name(self) -> &'static str {
        match self {
            Dialect::OpenAi => "openai",
            Dialect::Anthropic => "anthropic",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderMap;

    #[test]
    fn the_path_decides_then_the_anthropic_version_header() {
        let none = HeaderMap::new();
        let mut anthropic = HeaderMap::new();
        anthropic.insert("anthropic-version", "2023-06-01".parse().unwrap());
        for (path, headers, want) in [
            ("/v1/messages", &none, Dialect::Anthropic),
            ("/v1/messages/count_tokens", &none, Dialect::Anthropic),
            ("/v1/chat/completions", &anthropic, Dialect::OpenAi),
            ("/v1/embeddings", &anthropic, Dialect::OpenAi),
            ("/v1/responses/resp_1/cancel", &anthropic, Dialect::OpenAi),
            ("/v1/models", &none, Dialect::OpenAi),
            ("/v1/models", &anthropic, Dialect::Anthropic),
            ("/nowhere", &anthropic, Dialect::Anthropic),
            ("/nowhere", &none, Dialect::OpenAi),
        ] {
            assert_eq!(Dialect::of_request(path, headers), want, "{path}");
        }
    }
}
