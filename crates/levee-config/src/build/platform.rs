//! What a provider's `api` (direct, Azure, Gemini, Bedrock, Vertex) decides:
//! its platform and base URL, from the cloud keys that go with it, and how
//! its key is sent.

use crate::model::Platform;
use crate::raw::RawProvider;
use crate::values::{Api, ApiKind};

/// The default Gemini API base URL (its OpenAI-compatible endpoint).
const GEMINI_BASE_URL: &str = "https://generativelanguage.googleapis.com/v1beta/openai";

/// A refusal of a provider's key: the key at fault and the problem.
type KeyProblem = (&'static str, String);

/// A provider's platform and base URL from its `api` and the keys that go
/// with it; `Err` names the key at fault and the problem.
pub(super) fn platform(p: &RawProvider) -> Result<(Platform, http::Uri), KeyProblem> {
    check_cloud_keys(p)?;
    Ok(match p.api {
        ApiKind::OpenAi => (Platform::Direct, needs_url(p, "https://api.openai.com/v1")?),
        ApiKind::Anthropic => (Platform::Direct, needs_url(p, "https://api.anthropic.com")?),
        ApiKind::Azure => azure(p)?,
        ApiKind::Gemini => (
            Platform::Gemini,
            written_url(p).unwrap_or_else(|| http::Uri::from_static(GEMINI_BASE_URL)),
        ),
        ApiKind::Bedrock => bedrock(p)?,
        ApiKind::Vertex | ApiKind::VertexOpenAi => vertex(p)?,
    })
}

/// Refuses a cloud key set for a kind it does not belong to.
fn check_cloud_keys(p: &RawProvider) -> Result<(), KeyProblem> {
    // Each cloud key, with the kinds it belongs to.
    let keys: [(&'static str, bool, &[ApiKind]); 7] = [
        (
            "region",
            p.region.is_some(),
            &[ApiKind::Bedrock, ApiKind::Vertex, ApiKind::VertexOpenAi],
        ),
        (
            "project",
            p.project.is_some(),
            &[ApiKind::Vertex, ApiKind::VertexOpenAi],
        ),
        ("api_version", p.api_version.is_some(), &[ApiKind::Azure]),
        ("token_file", p.token_file.is_some(), &[ApiKind::Azure]),
        (
            "credentials_file",
            p.credentials_file.is_some(),
            &[ApiKind::Bedrock, ApiKind::Vertex, ApiKind::VertexOpenAi],
        ),
        ("profile", p.profile.is_some(), &[ApiKind::Bedrock]),
        (
            "token_url",
            p.token_url.is_some(),
            &[ApiKind::Vertex, ApiKind::VertexOpenAi],
        ),
    ];
    for (key, set, kinds) in keys {
        if set && !kinds.contains(&p.api) {
            let belongs: Vec<&str> = kinds.iter().map(|k| k.word()).collect();
            return Err((
                key,
                format!(
                    "`{key}` is for `api: {}` providers, not `api: {}`",
                    belongs.join("` or `api: "),
                    p.api.word()
                ),
            ));
        }
    }
    Ok(())
}

/// The provider's written `base_url`, if any.
fn written_url(p: &RawProvider) -> Option<http::Uri> {
    p.base_url.as_ref().map(|b| b.0.clone())
}

/// The written `base_url` of a kind with no default one; `example` is the
/// one the refusal suggests.
fn needs_url(p: &RawProvider, example: &str) -> Result<http::Uri, KeyProblem> {
    written_url(p).ok_or_else(|| {
        let word = p.api.word();
        (
            "base_url",
            format!("`api: {word}` needs `base_url` (e.g. `{example}`)"),
        )
    })
}

/// The value of a cloud key the provider's kind cannot do without, trimmed;
/// missing or blank is refused with an example value.
fn required(p: &RawProvider, key: &'static str, v: &Option<String>) -> Result<String, KeyProblem> {
    match v.as_deref().map(str::trim) {
        Some(v) if !v.is_empty() => Ok(v.to_string()),
        _ => Err((
            key,
            format!(
                "`api: {}` needs `{key}` (e.g. `{key}: {}`)",
                p.api.word(),
                match key {
                    "region" if p.api == ApiKind::Bedrock => "us-east-1",
                    "region" => "us-east5",
                    _ => "my-project",
                }
            ),
        )),
    }
}

/// A base URL built from the region; one that makes no URL is refused at
/// `region`.
fn region_url(s: String) -> Result<http::Uri, KeyProblem> {
    s.parse().map_err(|_| {
        (
            "region",
            format!("`{s}` is not a URL: is the region a plain name like `us-east-1`?"),
        )
    })
}

/// An `api: azure` provider's platform and base URL.
fn azure(p: &RawProvider) -> Result<(Platform, http::Uri), KeyProblem> {
    if p.token_file.is_some() && p.api_key_env.is_some() {
        return Err(("token_file", "`token_file` (an Entra ID token) and `api_key_env` (an API key) both authenticate: keep one".into()));
    }
    Ok((
        Platform::Azure {
            api_version: p.api_version.clone(),
            token_file: p.token_file.clone(),
        },
        needs_url(p, "https://my-resource.openai.azure.com")?,
    ))
}

/// An `api: bedrock` provider's platform and base URL (from the region
/// unless written).
fn bedrock(p: &RawProvider) -> Result<(Platform, http::Uri), KeyProblem> {
    if p.auth.is_some() || p.api_key_env.is_some() {
        let key = if p.auth.is_some() {
            "auth"
        } else {
            "api_key_env"
        };
        return Err((key, format!("`api: bedrock` signs requests with AWS credentials (the AWS_* environment variables or the shared credentials file): remove `{key}`")));
    }
    let region = required(p, "region", &p.region)?;
    let base = match written_url(p) {
        Some(u) => u,
        None => region_url(format!("https://bedrock-runtime.{region}.amazonaws.com"))?,
    };
    Ok((
        Platform::Bedrock {
            region,
            profile: p.profile.clone(),
            credentials_file: p.credentials_file.clone(),
        },
        base,
    ))
}

/// An `api: vertex` or `api: vertex-openai` provider's platform and base URL
/// (from the region unless written).
fn vertex(p: &RawProvider) -> Result<(Platform, http::Uri), KeyProblem> {
    let region = required(p, "region", &p.region)?;
    let project = required(p, "project", &p.project)?;
    let base = match written_url(p) {
        Some(u) => u,
        None if region == "global" => http::Uri::from_static("https://aiplatform.googleapis.com"),
        None => region_url(format!("https://{region}-aiplatform.googleapis.com"))?,
    };
    Ok((
        Platform::Vertex {
            project,
            region,
            credentials_file: p.credentials_file.clone(),
            token_url: p.token_url.clone(),
            openai: p.api == ApiKind::VertexOpenAi,
        },
        base,
    ))
}

/// How each dialect's own SDK sends its key.
pub(super) fn default_auth(api: Api) -> crate::values::Auth {
    match api {
        Api::OpenAi => crate::values::Auth::Bearer,
        Api::Anthropic => crate::values::Auth::Header("x-api-key".into()),
    }
}

/// How each kind's own SDK sends a key from `api_key_env`: Azure's
/// `api-key`, Gemini's bearer, Vertex's bearer token.
pub(super) fn kind_auth(kind: ApiKind) -> crate::values::Auth {
    match kind {
        ApiKind::Azure => crate::values::Auth::Header("api-key".into()),
        ApiKind::Bedrock => crate::values::Auth::None,
        // An OAuth2 access token, whichever dialect the endpoint speaks.
        ApiKind::Vertex | ApiKind::VertexOpenAi => crate::values::Auth::Bearer,
        other => default_auth(other.dialect()),
    }
}
