//! A provider's auth header and its `headers:` and `query:` extras,
//! resolved from the config and the environment, and why a provider could
//! not be set up ([`UpstreamError`]).

use http::header::{self, HeaderName, HeaderValue};
use levee_config::Provider;

/// Why a provider could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    #[error("provider `{provider}`: environment variable `{var}` (api_key_env) is not set; export it or remove `api_key_env`")]
    MissingKey { provider: String, var: String },
    #[error("provider `{provider}`: environment variable `{var}` (named in `{key}`) is not set; export it or write the value in the config")]
    MissingValue {
        provider: String,
        key: &'static str,
        var: String,
    },
    #[error("provider `{provider}`: the key in `{var}` is not a valid header value")]
    BadKey { provider: String, var: String },
    #[error(transparent)]
    Platform(#[from] crate::upstream::platform::PlatformError),
}

/// What a query parameter's name or value keeps unescaped: RFC 3986's
/// unreserved characters.
const QUERY_PART: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// The header a provider's requests authenticate with, read now from the
/// environment variable its `api_key_env` names (none without one), and the
/// key itself (to redact). `levee check` reads keys through this too, so it
/// refuses what `serve` and a reload refuse.
pub fn provider_auth(
    p: &Provider,
) -> Result<Option<(HeaderName, HeaderValue, String)>, UpstreamError> {
    let Some(var) = p
        .api_key_env
        .as_ref()
        .filter(|_| p.auth != levee_config::Auth::None)
    else {
        return Ok(None);
    };
    let key = std::env::var(var).map_err(|_| UpstreamError::MissingKey {
        provider: p.name.clone(),
        var: var.clone(),
    })?;
    let (name, value) = match &p.auth {
        levee_config::Auth::Header(n) => (
            HeaderName::from_bytes(n.as_bytes()).map_err(|_| UpstreamError::BadKey {
                provider: p.name.clone(),
                var: var.clone(),
            })?,
            key,
        ),
        levee_config::Auth::Bearer | levee_config::Auth::None => {
            (header::AUTHORIZATION, format!("Bearer {key}"))
        }
    };
    let mut v = HeaderValue::from_str(&value).map_err(|_| UpstreamError::BadKey {
        provider: p.name.clone(),
        var: var.clone(),
    })?;
    v.set_sensitive(true);
    let secret = key_of(&value).to_string();
    Ok(Some((name, v, secret)))
}

/// A provider's `headers:` and `query:`, resolved: values written in the
/// config, or read now from the variables `{ env: VAR }` names.
#[derive(Debug, Default)]
pub struct Extras {
    /// Sent with every request.
    pub headers: Vec<(HeaderName, HeaderValue)>,
    /// Encoded (`a=b&c=d`), added to every URI.
    pub query: String,
    /// The values read from the environment, to redact like the key.
    pub env_values: Vec<String>,
}

/// Why one of a provider's `headers:` or `query:` entries cannot be used.
#[derive(Debug)]
pub struct ExtraProblem {
    /// `headers` or `query`.
    pub field: &'static str,
    /// The entry's name.
    pub name: String,
    pub error: UpstreamError,
}

/// Resolves a provider's `headers:` and `query:` (`serve`, a reload and
/// `levee check` alike); `Err` lists every entry that cannot be used.
pub fn provider_extras(p: &Provider) -> Result<Extras, Vec<ExtraProblem>> {
    let mut extras = Extras::default();
    let mut problems = Vec::new();
    let mut resolve = |field: &'static str, name: &str, v: &levee_config::ValueSource| match v {
        levee_config::ValueSource::Text(t) => Some(t.clone()),
        levee_config::ValueSource::Env(var) => match std::env::var(var) {
            Ok(value) => {
                extras.env_values.push(value.clone());
                Some(value)
            }
            Err(_) => {
                problems.push(ExtraProblem {
                    field,
                    name: name.to_string(),
                    error: UpstreamError::MissingValue {
                        provider: p.name.clone(),
                        key: field,
                        var: var.clone(),
                    },
                });
                None
            }
        },
    };
    let mut headers = Vec::with_capacity(p.headers.len());
    let mut bad_headers = Vec::new();
    for (name, v) in &p.headers {
        let Some(value) = resolve("headers", name, v) else {
            continue;
        };
        let header = HeaderName::from_bytes(name.as_bytes())
            .ok()
            .zip(HeaderValue::from_str(&value).ok());
        match header {
            Some((n, mut value)) => {
                value.set_sensitive(matches!(v, levee_config::ValueSource::Env(_)));
                headers.push((n, value));
            }
            None => bad_headers.push(ExtraProblem {
                field: "headers",
                name: name.clone(),
                error: UpstreamError::BadKey {
                    provider: p.name.clone(),
                    var: format!("headers.{name}"),
                },
            }),
        }
    }
    let mut query = String::new();
    for (name, v) in &p.query {
        let Some(value) = resolve("query", name, v) else {
            continue;
        };
        if !query.is_empty() {
            query.push('&');
        }
        query.extend(percent_encoding::utf8_percent_encode(name, QUERY_PART));
        query.push('=');
        query.extend(percent_encoding::utf8_percent_encode(&value, QUERY_PART));
    }
    problems.extend(bad_headers);
    if !problems.is_empty() {
        return Err(problems);
    }
    extras.headers = headers;
    extras.query = query;
    Ok(extras)
}

/// The key inside an auth header value (`Bearer KEY` or `KEY`).
fn key_of(value: &str) -> &str {
    value.strip_prefix("Bearer ").unwrap_or(value)
}
