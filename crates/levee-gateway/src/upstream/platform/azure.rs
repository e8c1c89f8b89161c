//! Azure OpenAI: OpenAI's wire format under Azure's two URL shapes, with an
//! `api-key` (the provider's `api_key_env`, sent by the common auth code) or
//! an Entra ID bearer token read from a file that an identity agent
//! rewrites before the token expires.
//!
//! - The v1 API: `{endpoint}/openai/v1/chat/completions`, the model in the
//!   body.
//! - Deployments (`api_version` set): `{endpoint}/openai/deployments/{model}/
//!   chat/completions?api-version=…`, the target's model naming the
//!   deployment.

use std::path::PathBuf;
use std::sync::Mutex;
use std::time::SystemTime;

use bytes::Bytes;
use http::header::HeaderValue;

use super::{Pending, Platform, PlatformError};
use crate::http::outbound::Outbound;

/// An Azure OpenAI resource.
#[derive(Debug)]
pub struct Azure {
    provider: String,
    api_version: Option<String>,
    token: Option<TokenFile>,
    /// Neither a key nor a token file: Entra ID tokens from the
    /// environment's workload or managed identity.
    entra: Option<std::sync::Arc<super::kept::Kept<super::entra::EntraTokens>>>,
}

/// An Entra ID token kept in a file: read again when its modification time
/// or length changes.
#[derive(Debug)]
struct TokenFile {
    path: PathBuf,
    cached: Mutex<Option<Cached>>,
    /// Each token read, told to the redaction for a day (an Entra ID
    /// access token lives at most that long).
    learned: std::sync::Arc<crate::observe::live_secrets::Learned>,
}

/// How long a token read from a `token_file` stays redacted after it was
/// last read: an Entra ID access token lives 24 hours at most.
const TOKEN_FILE_KEEP_MS: u64 = 24 * 3600 * 1000;

#[derive(Debug, Clone)]
struct Cached {
    stamp: (Option<SystemTime>, u64),
    value: HeaderValue,
}

impl Azure {
    /// The provider `p` (of `api: azure`); with neither `api_key_env` nor
    /// `token_file`, its tokens come from the environment's identity,
    /// asked through `connector` (the provider's, else the network).
    pub(super) fn of(
        p: &levee_config::Provider,
        connector: Option<&crate::upstream::transport::Connector>,
    ) -> Result<Self, PlatformError> {
        let mut me = match &p.platform {
            levee_config::Platform::Azure {
                api_version,
                token_file,
            } => Self::new(&p.name, api_version.clone(), token_file.clone()),
            _ => Self::new(&p.name, None, None),
        };
        if me.token.is_none() && p.api_key_env.is_none() {
            let env = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
            let source = super::entra::Source::from_env(&env).map_err(|detail| {
                PlatformError::Credentials {
                    provider: p.name.clone(),
                    detail,
                }
            })?;
            let connector = connector
                .cloned()
                .unwrap_or_else(crate::upstream::transport::credentials_connector);
            me.entra = Some(std::sync::Arc::new(super::kept::Kept::new(
                super::entra::EntraTokens::new(source, connector),
            )));
        }
        Ok(me)
    }

    fn new(provider: &str, api_version: Option<String>, token_file: Option<PathBuf>) -> Self {
        Azure {
            provider: provider.to_string(),
            api_version,
            token: token_file.map(|path| TokenFile {
                path,
                cached: Mutex::new(None),
                learned: std::sync::Arc::default(),
            }),
            entra: None,
        }
    }

    /// Sets `authorization: Bearer <token>` from the token file, read again
    /// when it changed.
    fn send_token(&self, req: &mut Outbound<Bytes>) -> Result<(), PlatformError> {
        let Some(file) = &self.token else {
            return Ok(());
        };
        super::set_bearer(req, &self.provider, file.current())
    }

    /// The token file can be read and holds a token.
    fn read_token(&self) -> Result<(), PlatformError> {
        match &self.token {
            None => Ok(()),
            Some(file) => file
                .current()
                .map(|_| ())
                .map_err(|detail| PlatformError::Credentials {
                    provider: self.provider.clone(),
                    detail,
                }),
        }
    }
}

impl Platform for Azure {
    /// The deployments shape moves the model into the path; the v1 API
    /// under a bare endpoint gets `/openai/v1` (a `base_url` that already
    /// ends in `/openai/v1` is joined like any OpenAI base URL).
    fn target(&self, path: &str, body: &Bytes) -> Result<Option<(String, Bytes)>, String> {
        let Some(version) = &self.api_version else {
            return Ok(path
                .strip_prefix("/v1/")
                .map(|rest| (format!("/openai/v1/{rest}"), body.clone())));
        };
        let (bare, query) = match path.split_once('?') {
            Some((p, q)) => (p, Some(q)),
            None => (path, None),
        };
        let op = match bare {
            "/v1/chat/completions" => "chat/completions",
            "/v1/completions" => "completions",
            "/v1/embeddings" => "embeddings",
            "/v1/models" => {
                return Ok(Some((format!("/openai/models?api-version={}", encode(version)), body.clone())))
            }
            other => {
                return Err(format!(
                    "Azure OpenAI deployments serve chat completions, completions and embeddings, not `{other}`; use the v1 API (leave out `api_version`) for it"
                ))
            }
        };
        let (model, _) = super::model_and_stream(body)
            .ok_or("an Azure OpenAI deployment is named by the request's `model`, and this request has none")?;
        let mut out = format!(
            "/openai/deployments/{}/{op}?api-version={}",
            percent_encoding::utf8_percent_encode(&model, SEGMENT),
            encode(version)
        );
        if let Some(q) = query {
            out.push('&');
            out.push_str(q);
        }
        Ok(Some((out, body.clone())))
    }
    /// Whether a token file is read, or an identity's token set, at each
    /// attempt.
    fn authorizes(&self) -> bool {
        self.token.is_some() || self.entra.is_some()
    }

    /// Sets `authorization: Bearer <token>` from the token file, read again
    /// when it changed, or the identity's token.
    fn authorize<'a>(&'a self, req: &'a mut Outbound<Bytes>, unix_ms: u64) -> Pending<'a> {
        match &self.entra {
            Some(e) => {
                Box::pin(
                    async move { super::set_bearer(req, &self.provider, e.get(unix_ms).await) },
                )
            }
            None => Box::pin(std::future::ready(self.send_token(req))),
        }
    }

    /// The token file can be read and holds a token, or the identity
    /// issues one.
    fn probe(&self, unix_ms: u64) -> Pending<'_> {
        match &self.entra {
            Some(e) => Box::pin(async move {
                e.get(unix_ms)
                    .await
                    .map(|_| ())
                    .map_err(|detail| PlatformError::Credentials {
                        provider: self.provider.clone(),
                        detail,
                    })
            }),
            None => Box::pin(std::future::ready(self.read_token())),
        }
    }

    fn learned(&self) -> Option<std::sync::Arc<crate::observe::live_secrets::Learned>> {
        match (&self.token, &self.entra) {
            (Some(t), _) => Some(std::sync::Arc::clone(&t.learned)),
            (None, Some(e)) => Some(std::sync::Arc::clone(&e.inner.learned)),
            (None, None) => None,
        }
    }

    fn credential_source(&self) -> Option<String> {
        match (&self.token, &self.entra) {
            (Some(t), _) => Some(format!("token_file {}", t.path.display())),
            (None, Some(e)) => Some(e.inner.source.describe()),
            (None, None) => Some("api_key_env".to_string()),
        }
    }
}

impl TokenFile {
    fn current(&self) -> Result<HeaderValue, String> {
        let where_ = || format!("`token_file` {}", self.path.display());
        let meta = std::fs::metadata(&self.path).map_err(|e| format!("{}: {e}", where_()))?;
        let stamp = (meta.modified().ok(), meta.len());
        let mut cached = self.cached.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = cached.as_ref().filter(|c| c.stamp == stamp) {
            return Ok(c.value.clone());
        }
        let text = std::fs::read_to_string(&self.path).map_err(|e| format!("{}: {e}", where_()))?;
        let token = text.trim();
        if token.is_empty() {
            return Err(format!(
                "{} is empty: it must hold an Entra ID access token",
                where_()
            ));
        }
        let mut value = HeaderValue::from_str(&format!("Bearer {token}"))
            .map_err(|_| format!("{} holds characters a header cannot carry", where_()))?;
        value.set_sensitive(true);
        self.learned.learn(
            token,
            crate::clock::unix_ms().saturating_add(TOKEN_FILE_KEEP_MS),
        );
        *cached = Some(Cached {
            stamp,
            value: value.clone(),
        });
        Ok(value)
    }
}

/// What a path segment keeps unescaped: RFC 3986's unreserved characters.
const SEGMENT: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

fn encode(s: &str) -> percent_encoding::PercentEncode<'_> {
    percent_encoding::utf8_percent_encode(s, SEGMENT)
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::header::AUTHORIZATION;

    fn body(model: &str) -> Bytes {
        Bytes::from(format!(r#"{{"model":"{model}","messages":[]}}"#))
    }

    #[test]
    fn the_v1_api_goes_under_openai_v1() {
        let a = Azure::new("az", None, None);
        let (path, _) = a
            .target("/v1/chat/completions", &body("gpt-4o"))
            .unwrap()
            .unwrap();
        assert_eq!(path, "/openai/v1/chat/completions");
    }

    #[test]
    fn a_deployment_is_named_by_the_model_with_the_api_version() {
        let a = Azure::new("az", Some("2024-10-21".into()), None);
        let (path, _) = a
            .target("/v1/chat/completions", &body("my gpt/4o"))
            .unwrap()
            .unwrap();
        assert_eq!(
            path,
            "/openai/deployments/my%20gpt%2F4o/chat/completions?api-version=2024-10-21"
        );
        let (path, _) = a.target("/v1/embeddings", &body("emb")).unwrap().unwrap();
        assert_eq!(
            path,
            "/openai/deployments/emb/embeddings?api-version=2024-10-21"
        );
        assert!(a
            .target("/v1/responses", &body("x"))
            .unwrap_err()
            .contains("v1 API"));
    }

    #[test]
    fn a_token_file_is_read_again_when_it_changes() {
        let dir = std::env::temp_dir().join(format!("levee-azure-token-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("token");
        std::fs::write(&path, "first\n").unwrap();
        let a = Azure::new("az", None, Some(path.clone()));
        let mut req = Outbound::post(http::Uri::from_static("http://x/"), Bytes::new());
        a.send_token(&mut req).unwrap();
        assert_eq!(req.fields.get(&AUTHORIZATION).unwrap(), "Bearer first");
        // A different length changes the stamp even within the file
        // system's timestamp granularity.
        std::fs::write(&path, "second-token\n").unwrap();
        a.send_token(&mut req).unwrap();
        assert_eq!(
            req.fields.get(&AUTHORIZATION).unwrap(),
            "Bearer second-token"
        );
        std::fs::write(&path, "  \n").unwrap();
        let e = a.send_token(&mut req).unwrap_err().to_string();
        assert!(e.contains("empty"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
