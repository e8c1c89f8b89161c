//! Reading a running gateway's census from its admin listener, as
//! `levee check --census-from` does.

use super::report::CensusReport;
use std::time::Duration;

/// Why a running gateway's census could not be read.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error(
        "`{0}` is not an http:// address of a Levee admin listener (like http://127.0.0.1:9090)"
    )]
    Url(String),
    #[error("cannot reach {url}: {source}; is the gateway running, and is this its admin address (`admin.listen`)?")]
    Connect {
        url: String,
        source: hyper_util::client::legacy::Error,
    },
    #[error("{url} did not answer within {0:?}", FETCH_TIMEOUT)]
    Timeout { url: String },
    #[error("{url} answered HTTP {status}; is this a Levee admin listener (`admin.listen`)?")]
    Status { url: String, status: u16 },
    #[error(
        "{url} did not send a census ({message}); is this a Levee admin listener of this version?"
    )]
    Body { url: String, message: String },
}

/// How long [`fetch`] waits for the admin listener.
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(10);

/// Reads the census of the gateway whose admin listener is at `admin`
/// (`http://host:port`, with or without `/census`).
pub async fn fetch(admin: &str) -> Result<CensusReport, FetchError> {
    use http_body_util::BodyExt;
    let base = admin.trim_end_matches('/');
    let url = if base.ends_with("/census") {
        base.to_string()
    } else {
        format!("{base}/census")
    };
    let uri: http::Uri = url.parse().map_err(|_| FetchError::Url(admin.into()))?;
    if uri.scheme_str() != Some("http") || uri.host().is_none() {
        return Err(FetchError::Url(admin.into()));
    }
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<http_body_util::Empty<bytes::Bytes>>();
    let req = http::Request::get(uri)
        .body(http_body_util::Empty::new())
        .map_err(|_| FetchError::Url(admin.into()))?;
    let read = async {
        let resp = client
            .request(req)
            .await
            .map_err(|source| FetchError::Connect {
                url: url.clone(),
                source,
            })?;
        let status = resp.status().as_u16();
        if status != 200 {
            return Err(FetchError::Status {
                url: url.clone(),
                status,
            });
        }
        let body = http_body_util::Limited::new(resp.into_body(), 16 << 20)
            .collect()
            .await
            .map_err(|e| FetchError::Body {
                url: url.clone(),
                message: e.to_string(),
            })?
            .to_bytes();
        serde_json::from_slice(&body).map_err(|e| FetchError::Body {
            url: url.clone(),
            message: e.to_string(),
        })
    };
    tokio::time::timeout(FETCH_TIMEOUT, read)
        .await
        .map_err(|_| FetchError::Timeout { url: url.clone() })?
}
