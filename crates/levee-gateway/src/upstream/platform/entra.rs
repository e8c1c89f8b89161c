//! Microsoft Entra ID access tokens for an Azure OpenAI resource when the
//! config names neither a key nor a token file, in the order Azure's
//! identity libraries use:
//!
//! 1. workload identity (AKS): `AZURE_FEDERATED_TOKEN_FILE`,
//!    `AZURE_CLIENT_ID`, `AZURE_TENANT_ID` (`AZURE_AUTHORITY_HOST`, else
//!    `https://login.microsoftonline.com/`): the file's token is the client
//!    assertion of a client-credentials grant;
//! 2. managed identity: `IDENTITY_ENDPOINT` with `IDENTITY_HEADER` (App
//!    Service, Container Apps, Functions), else the instance metadata
//!    service at `169.254.169.254` (VMs; `AZURE_CLIENT_ID` picks a
//!    user-assigned identity).
//!
//! A token is kept until five minutes before it expires, then asked for
//! again in the background while it is still used; a request that fails
//! keeps the current one until its expiry. Each token is told to the
//! redaction for its lifetime. Plain `http://` endpoints only on loopback
//! or link-local addresses.

use crate::observe::live_secrets::Learned;
use crate::upstream::transport::Connector;
use bytes::Bytes;
use http::header::{HeaderValue, ACCEPT, CONTENT_TYPE};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// The scope (and resource) of an Azure OpenAI token.
const SCOPE: &str = "https://cognitiveservices.azure.com/.default";
const RESOURCE: &str = "https://cognitiveservices.azure.com";
/// The longest one token request may take.
const TIMEOUT: Duration = Duration::from_secs(10);
/// Most bytes of an answer.
const MAX_ANSWER: usize = 64 * 1024;

/// Where the tokens come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Source {
    Workload {
        token_file: PathBuf,
        client_id: String,
        token_url: String,
    },
    AppService {
        endpoint: String,
        header: String,
    },
    Imds {
        endpoint: String,
        client_id: Option<String>,
    },
}

impl Source {
    /// The chain's source in this environment.
    pub(super) fn from_env(env: &dyn Fn(&str) -> Option<String>) -> Result<Source, String> {
        let checked = |url: &str, what: &str| {
            levee_config::check_credential_url(url).map_err(|why| format!("{what}: {why}"))
        };
        if let (Some(file), Some(client), Some(tenant)) = (
            env("AZURE_FEDERATED_TOKEN_FILE"),
            env("AZURE_CLIENT_ID"),
            env("AZURE_TENANT_ID"),
        ) {
            let authority = env("AZURE_AUTHORITY_HOST")
                .unwrap_or_else(|| "https://login.microsoftonline.com/".to_string());
            let token_url = format!(
                "{}/{tenant}/oauth2/v2.0/token",
                authority.trim_end_matches('/')
            );
            checked(&token_url, "AZURE_AUTHORITY_HOST")?;
            return Ok(Source::Workload {
                token_file: PathBuf::from(file),
                client_id: client,
                token_url,
            });
        }
        if let (Some(endpoint), Some(header)) = (env("IDENTITY_ENDPOINT"), env("IDENTITY_HEADER")) {
            checked(&endpoint, "IDENTITY_ENDPOINT")?;
            return Ok(Source::AppService { endpoint, header });
        }
        Ok(Source::Imds {
            endpoint: "http://169.254.169.254/metadata/identity/oauth2/token".to_string(),
            client_id: env("AZURE_CLIENT_ID"),
        })
    }

    /// Where the tokens come from, in words.
    pub(super) fn describe(&self) -> String {
        match self {
            Source::Workload { client_id, .. } => {
                format!("workload identity (client {client_id}, AZURE_FEDERATED_TOKEN_FILE)")
            }
            Source::AppService { endpoint, .. } => format!("managed identity at {endpoint}"),
            Source::Imds { .. } => "managed identity (instance metadata service)".to_string(),
        }
    }
}

/// Tokens from one source (kept and refreshed by [`super::kept::Kept`]).
pub(super) struct EntraTokens {
    pub(super) source: Source,
    client: Client<Connector, Full<Bytes>>,
    pub(super) learned: Arc<Learned>,
}

impl std::fmt::Debug for EntraTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.source.describe())
    }
}

impl super::kept::Refetch for EntraTokens {
    type Value = HeaderValue;

    async fn fetch(&self) -> Result<(HeaderValue, Option<u64>), String> {
        let (value, expires_ms) = self.fetch_token(crate::clock::unix_ms()).await?;
        Ok((value, Some(expires_ms)))
    }

    fn describe(&self) -> String {
        self.source.describe()
    }
}

impl EntraTokens {
    pub(super) fn new(source: Source, connector: Connector) -> Self {
        EntraTokens {
            source,
            client: Client::builder(TokioExecutor::new())
                .pool_max_idle_per_host(0)
                .build(connector),
            learned: Arc::default(),
        }
    }

    async fn fetch_token(&self, now_ms: u64) -> Result<(HeaderValue, u64), String> {
        let what = self.source.describe();
        let req = self.request()?;
        let exchange = async {
            let resp = self
                .client
                .request(req)
                .await
                .map_err(|e| format!("cannot reach it: {e}"))?;
            let status = resp.status();
            let body = Limited::new(resp.into_body(), MAX_ANSWER)
                .collect()
                .await
                .map_err(|e| format!("it broke off its answer: {e}"))?
                .to_bytes();
            Ok::<_, String>((status, body))
        };
        let (status, body) = tokio::time::timeout(TIMEOUT, exchange)
            .await
            .map_err(|_| format!("{what}: no answer within {} s", TIMEOUT.as_secs()))?
            .map_err(|e| format!("{what}: {e}"))?;
        if !status.is_success() {
            return Err(format!("{what} refused a token ({status})"));
        }
        self.read(&body, now_ms).map_err(|e| format!("{what}: {e}"))
    }

    fn request(&self) -> Result<http::Request<Full<Bytes>>, String> {
        let bad = |u: &str| format!("`{u}` is not a usable URL");
        match &self.source {
            Source::Workload {
                token_file,
                client_id,
                token_url,
            } => {
                let assertion = std::fs::read_to_string(token_file).map_err(|e| {
                    format!(
                        "cannot read AZURE_FEDERATED_TOKEN_FILE {}: {e}",
                        token_file.display()
                    )
                })?;
                let enc = |v: &str| {
                    percent_encoding::utf8_percent_encode(v, percent_encoding::NON_ALPHANUMERIC)
                        .to_string()
                };
                let form = format!(
                    "grant_type=client_credentials&client_id={}&scope={}&client_assertion_type={}&client_assertion={}",
                    enc(client_id),
                    enc(SCOPE),
                    enc("urn:ietf:params:oauth:client-assertion-type:jwt-bearer"),
                    enc(assertion.trim())
                );
                http::Request::post(token_url.as_str())
                    .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
                    .header(ACCEPT, "application/json")
                    .body(Full::new(Bytes::from(form)))
                    .map_err(|_| bad(token_url))
            }
            Source::AppService { endpoint, header } => {
                let url = format!("{endpoint}?api-version=2019-08-01&resource={RESOURCE}");
                let mut h = HeaderValue::from_str(header).map_err(|_| {
                    "IDENTITY_HEADER holds characters a header cannot carry".to_string()
                })?;
                h.set_sensitive(true);
                http::Request::get(url.as_str())
                    .header("x-identity-header", h)
                    .body(Full::new(Bytes::new()))
                    .map_err(|_| bad(&url))
            }
            Source::Imds {
                endpoint,
                client_id,
            } => {
                let mut url = format!("{endpoint}?api-version=2018-02-01&resource={RESOURCE}");
                if let Some(c) = client_id {
                    url.push_str(&format!("&client_id={c}"));
                }
                http::Request::get(url.as_str())
                    .header("metadata", "true")
                    .body(Full::new(Bytes::new()))
                    .map_err(|_| bad(&url))
            }
        }
    }

    /// A token answer: `expires_in` (seconds, the token endpoint's) or
    /// `expires_on` (unix seconds, a managed identity's; a number or a
    /// string of one).
    fn read(&self, body: &[u8], now_ms: u64) -> Result<(HeaderValue, u64), String> {
        #[derive(serde::Deserialize)]
        struct Answer {
            access_token: Option<String>,
            expires_in: Option<serde_json::Value>,
            expires_on: Option<serde_json::Value>,
        }
        let a: Answer = serde_json::from_slice(body)
            .map_err(|_| "its answer is not a token's JSON".to_string())?;
        let token = a
            .access_token
            .filter(|t| !t.is_empty())
            .ok_or("its answer has no access_token")?;
        let secs = |v: &serde_json::Value| match v {
            serde_json::Value::Number(n) => n.as_u64(),
            serde_json::Value::String(s) => s.trim().parse().ok(),
            _ => None,
        };
        let expires_ms = match (
            a.expires_on.as_ref().and_then(secs),
            a.expires_in.as_ref().and_then(secs),
        ) {
            (Some(on), _) => on.saturating_mul(1000),
            (None, Some(within)) => now_ms.saturating_add(within.saturating_mul(1000)),
            (None, None) => now_ms.saturating_add(3_600_000),
        };
        let mut value = HeaderValue::from_str(&format!("Bearer {token}"))
            .map_err(|_| "it issued a token a header cannot carry".to_string())?;
        value.set_sensitive(true);
        self.learned
            .learn(&token, expires_ms.saturating_add(60 * 60 * 1000));
        Ok((value, expires_ms))
    }
}
