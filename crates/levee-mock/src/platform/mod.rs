//! The clouds' faces over the two dialect APIs (`--api azure|bedrock|vertex`).
//!
//! A cloud request is checked first, as strictly as the cloud checks it
//! (its key, signature or token; its URL shape; its body's version field),
//! then rewritten into the dialect's own request and answered by the same
//! code as every other mock request (faults, tape, stats). The answer is
//! then put back into the cloud's framing and error shapes.

use bytes::Bytes;
use http::header::{HeaderValue, CONTENT_TYPE};
use http::{Response, StatusCode};

use crate::body::MockBody;
use crate::MockApi;

mod azure;
pub(crate) mod bedrock;
mod converse;
mod embed;
mod sigv4;
pub(crate) mod vertex;

/// A cloud request, accepted and rewritten into its dialect's own.
pub(crate) struct Accepted {
    /// The dialect's own body.
    pub body: Bytes,
    /// The strict dialect API that answers it.
    pub native: MockApi,
    /// What [`encode`] needs to put the answer back into the cloud's shape.
    pub ctx: Ctx,
}

/// What a cloud's answer is re-shaped by.
pub(crate) enum Ctx {
    Azure,
    Vertex,
    /// Bedrock: SSE to event-stream frames, errors to Bedrock's shapes;
    /// `converse`: a Converse operation's answer shapes; `embed`: an
    /// embedding model's.
    Bedrock {
        converse: bool,
        embed: Option<embed::Family>,
    },
}

/// What the clouds' faces keep between requests.
pub(crate) struct Clouds {
    /// The access tokens Vertex AI's token endpoint has issued.
    pub vertex: vertex::Issuer,
}

impl Clouds {
    pub(crate) fn new(stats: std::sync::Arc<crate::stats::Collector>) -> Clouds {
        Clouds {
            vertex: vertex::Issuer::new(stats),
        }
    }
}

/// Checks a cloud request and rewrites `parts` (URI, fields) and the body
/// into the dialect's own. `Err`: the cloud's refusal, sent as it is (an
/// unknown path, a missing or bad credential).
pub(crate) fn accept(
    api: MockApi,
    parts: &mut http::request::Parts,
    body: Bytes,
    now_unix_s: u64,
    clouds: &Clouds,
) -> Result<Accepted, Refused> {
    match api {
        MockApi::Azure => azure::accept(parts, body),
        MockApi::Vertex => vertex::accept(parts, body, now_unix_s, &clouds.vertex),
        MockApi::Bedrock => bedrock::accept(parts, body, now_unix_s),
        MockApi::OpenAi | MockApi::Anthropic | MockApi::Both => {
            Err(Refused::not_found("not a cloud mock"))
        }
    }
}

/// The dialect's answer in the cloud's framing and error shapes.
pub(crate) fn encode(ctx: &Ctx, resp: Response<MockBody>) -> Response<MockBody> {
    match ctx {
        Ctx::Azure => azure::encode(resp),
        Ctx::Vertex => vertex::encode(resp),
        Ctx::Bedrock { converse, embed } => bedrock::encode(resp, *converse, *embed),
    }
}

/// A cloud's refusal before the request reaches the dialect API.
pub(crate) struct Refused {
    pub status: StatusCode,
    /// `true` for a credential refusal (counted as `unauthorized`).
    pub auth: bool,
    pub body: Bytes,
    pub headers: Vec<(&'static str, HeaderValue)>,
}

impl Refused {
    /// A plain JSON refusal.
    pub(crate) fn json(status: StatusCode, auth: bool, body: serde_json::Value) -> Refused {
        Refused {
            status,
            auth,
            body: Bytes::from(body.to_string()),
            headers: Vec::new(),
        }
    }

    fn not_found(message: &str) -> Refused {
        Refused::json(
            StatusCode::NOT_FOUND,
            false,
            serde_json::json!({ "message": message }),
        )
    }

    /// The refusal as an answer.
    pub(crate) fn into_response(self) -> Response<MockBody> {
        let mut resp = Response::new(MockBody::untracked(self.body));
        *resp.status_mut() = self.status;
        resp.headers_mut()
            .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        for (name, value) in self.headers {
            resp.headers_mut().insert(name, value);
        }
        resp
    }
}

/// Rewrites `parts`' URI to `path_and_query` (an origin-form target).
pub(crate) fn set_path(
    parts: &mut http::request::Parts,
    path_and_query: &str,
) -> Result<(), Refused> {
    parts.uri = path_and_query
        .parse()
        .map_err(|_| Refused::not_found("the rewritten path is not a valid URI"))?;
    Ok(())
}
