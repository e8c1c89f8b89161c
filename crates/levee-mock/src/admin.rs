//! The control plane under `/_mock/`: stats, reset, live fault replacement.
//! These requests are never counted in stats and never see faults.

use bytes::Bytes;
use http::header::{HeaderValue, CONTENT_TYPE};
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use levee_wire::paths;

use crate::body::MockBody;
use crate::faults::parse_faults;
use crate::shared::Shared;

/// Fault documents larger than this are refused.
const MAX_FAULTS_DOC: usize = 1024 * 1024;

pub(crate) async fn handle(shared: &Shared, req: Request<Incoming>) -> Response<MockBody> {
    let method = req.method().clone();
    match (method, req.uri().path()) {
        (Method::GET, paths::MOCK_STATS) => match serde_json::to_vec(&shared.stats.snapshot()) {
            Ok(json) => answer(StatusCode::OK, json.into()),
            Err(e) => problem(StatusCode::INTERNAL_SERVER_ERROR, &format!("stats: {e}")),
        },
        (Method::POST, paths::MOCK_RESET) => {
            shared.stats.reset();
            answer(StatusCode::OK, Bytes::from_static(br#"{"ok":true}"#))
        }
        (Method::POST, paths::MOCK_FAULTS) => {
            let bytes = match Limited::new(req.into_body(), MAX_FAULTS_DOC)
                .collect()
                .await
            {
                Ok(c) => c.to_bytes(),
                Err(e) => {
                    let msg = format!("could not read the fault document (at most 1 MiB): {e}");
                    return problem(StatusCode::BAD_REQUEST, &msg);
                }
            };
            let Ok(text) = std::str::from_utf8(&bytes) else {
                return problem(StatusCode::BAD_REQUEST, "the fault document is not UTF-8");
            };
            match parse_faults(text) {
                Ok(set) => {
                    let mut body = serde_json::json!({
                        "ok": true,
                        "faults": set.len(),
                        "capacity": set.capacity_limit().map(|(max, status)| {
                            serde_json::json!({ "max_in_flight": max, "status": status })
                        }),
                    });
                    if let Some([rpm, tpm, itpm, otpm]) = set.rate_limits() {
                        body["rate_limit"] = serde_json::json!({
                            "requests_per_minute": rpm,
                            "tokens_per_minute": tpm,
                            "input_tokens_per_minute": itpm,
                            "output_tokens_per_minute": otpm,
                        });
                    }
                    shared.set_faults(set);
                    answer(StatusCode::OK, Bytes::from(body.to_string()))
                }
                Err(e) => problem(StatusCode::BAD_REQUEST, &e.to_string()),
            }
        }
        (_, path) => {
            let msg = format!(
                "no mock admin endpoint {path}: use GET /_mock/stats, POST /_mock/reset \
                 or POST /_mock/faults"
            );
            problem(StatusCode::NOT_FOUND, &msg)
        }
    }
}

fn answer(status: StatusCode, body: Bytes) -> Response<MockBody> {
    let mut res = Response::new(MockBody::untracked(body));
    *res.status_mut() = status;
    res.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    res
}

fn problem(status: StatusCode, message: &str) -> Response<MockBody> {
    let body = serde_json::json!({ "error": { "message": message, "type": "levee_mock_error" } });
    answer(status, Bytes::from(body.to_string()))
}
