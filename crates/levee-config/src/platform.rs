//! Where a provider runs: everything this crate knows about the clouds. The
//! `api:` words ([`ApiKind`]), each kind's dialect and default auth, each
//! cloud's settings ([`Platform`]), and building a provider's platform and
//! base URL from the keys written for it ([`PlatformKeys`]): which keys go
//! with which kind, the defaults the kind's SDK uses, and the key at fault
//! when one is refused. The rest of the crate reaches the clouds only
//! through these platform-neutral names.

use crate::values::{one_of, Api, Auth};
use serde::de::Deserializer;
use std::path::{Path, PathBuf};

/// A provider's `api`: the dialect it speaks and where it runs. The cloud
/// kinds speak one of the two dialects ([`ApiKind::dialect`]) with their own
/// URLs, auth and (Bedrock) stream framing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ApiKind {
    Anthropic,
    OpenAi,
    /// Azure OpenAI: OpenAI's dialect, `api-key` or an Entra ID bearer token.
    Azure,
    /// The Gemini API's OpenAI-compatible endpoint.
    Gemini,
    /// Amazon Bedrock, SigV4-signed: Anthropic's models by `InvokeModel`,
    /// every other model by the Converse API.
    Bedrock,
    /// Anthropic models on Google Vertex AI (`rawPredict`), OAuth2 tokens.
    Vertex,
    /// Vertex AI's OpenAI-compatible endpoint (Gemini and partner models).
    VertexOpenAi,
}

impl ApiKind {
    /// The wire dialect requests to this kind are written in.
    pub fn dialect(self) -> Api {
        match self {
            ApiKind::Anthropic | ApiKind::Bedrock | ApiKind::Vertex => Api::Anthropic,
            ApiKind::OpenAi | ApiKind::Azure | ApiKind::Gemini | ApiKind::VertexOpenAi => {
                Api::OpenAi
            }
        }
    }

    /// The `api:` word.
    pub fn word(self) -> &'static str {
        match self {
            ApiKind::Anthropic => "anthropic",
            ApiKind::OpenAi => "openai",
            ApiKind::Azure => "azure",
            ApiKind::Gemini => "gemini",
            ApiKind::Bedrock => "bedrock",
            ApiKind::Vertex => "vertex",
            ApiKind::VertexOpenAi => "vertex-openai",
        }
    }

    /// How this kind's own SDK sends a key from `api_key_env`: Azure's
    /// `api-key`, Gemini's bearer, Vertex's bearer token; Bedrock signs
    /// instead of sending one.
    pub(crate) fn key_auth(self) -> Auth {
        match self {
            ApiKind::Azure => Auth::Header("api-key".into()),
            ApiKind::Bedrock => Auth::None,
            // An OAuth2 access token, whichever dialect the endpoint speaks.
            ApiKind::Vertex | ApiKind::VertexOpenAi => Auth::Bearer,
            other => dialect_auth(other.dialect()),
        }
    }
}

impl<'de> serde::Deserialize<'de> for ApiKind {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        one_of(
            d,
            "api",
            &[
                ("anthropic", ApiKind::Anthropic),
                ("openai", ApiKind::OpenAi),
                ("azure", ApiKind::Azure),
                ("gemini", ApiKind::Gemini),
                ("bedrock", ApiKind::Bedrock),
                ("vertex", ApiKind::Vertex),
                ("vertex-openai", ApiKind::VertexOpenAi),
            ],
        )
    }
}

/// How each dialect's own SDK sends its key.
pub(crate) fn dialect_auth(api: Api) -> Auth {
    match api {
        Api::OpenAi => Auth::Bearer,
        Api::Anthropic => Auth::Header("x-api-key".into()),
    }
}

/// Whose list prices a provider's model has (`prices`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Vendor {
    OpenAi,
    Anthropic,
}

/// Where a provider runs, with each cloud's own settings.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub enum Platform {
    /// The dialect's own API (or anything that speaks it at `base_url`).
    #[default]
    Direct,
    /// Azure OpenAI. With `api_version`, the deployments URL shape
    /// (`/openai/deployments/{model}/chat/completions?api-version=…`, a
    /// target's model naming the deployment); without, the v1 API under
    /// `base_url`. `token_file`: an Entra ID bearer token re-read when the
    /// file changes.
    Azure {
        api_version: Option<String>,
        token_file: Option<PathBuf>,
    },
    /// The Gemini API's OpenAI-compatible endpoint.
    Gemini,
    /// Anthropic models on Amazon Bedrock, SigV4-signed with credentials
    /// from the environment or the shared credentials file.
    Bedrock {
        region: String,
        profile: Option<String>,
        credentials_file: Option<PathBuf>,
    },
    /// Google Vertex AI: Anthropic models (`openai: false`) or the
    /// OpenAI-compatible endpoint, with OAuth2 tokens from a service-account
    /// key (`credentials_file`) or a token in `api_key_env`.
    Vertex {
        project: String,
        region: String,
        credentials_file: Option<PathBuf>,
        token_url: Option<String>,
        openai: bool,
    },
}

/// The default Gemini API base URL (its OpenAI-compatible endpoint).
const GEMINI_BASE_URL: &str = "https://generativelanguage.googleapis.com/v1beta/openai";

/// A refusal of a provider's key: the key at fault and the problem.
pub(crate) type KeyProblem = (&'static str, String);

/// The keys of one provider that decide where it runs, as written.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PlatformKeys<'a> {
    pub api: ApiKind,
    pub base_url: Option<&'a http::Uri>,
    /// Whether `auth` is written.
    pub auth: bool,
    /// Whether `api_key_env` is written.
    pub api_key_env: bool,
    pub region: Option<&'a str>,
    pub project: Option<&'a str>,
    pub api_version: Option<&'a str>,
    pub token_file: Option<&'a Path>,
    pub credentials_file: Option<&'a Path>,
    pub profile: Option<&'a str>,
    pub token_url: Option<&'a str>,
}

/// Checks a URL credentials are asked at (a token endpoint, a metadata
/// server): `https://`, or plain `http://` only to this machine (loopback)
/// or a link-local address (a cloud's metadata service). A signed
/// assertion or a refresh token is a bearer credential for an hour or
/// more; over plain HTTP to any other host, everyone on the path has it.
pub fn check_credential_url(url: &str) -> Result<(), String> {
    let uri: http::Uri = url
        .parse()
        .map_err(|_| format!("`{url}` is not a URL like `https://oauth2.googleapis.com/token`"))?;
    let host = uri.host().unwrap_or("");
    match uri.scheme_str() {
        Some("https") if !host.is_empty() => Ok(()),
        Some("http") if is_local_host(host) => Ok(()),
        Some("http") => Err(format!(
            "`{url}` is plain http:// to `{host}`: credentials go over https://, or plain http:// only to loopback or a link-local address"
        )),
        _ => Err(format!("`{url}` is not an http(s) URL")),
    }
}

/// Whether `host` is this machine or link-local: `localhost` and names
/// under it (RFC 6761: they resolve to loopback), 127.0.0.0/8, `::1`,
/// 169.254.0.0/16, `fe80::/10`.
pub fn is_local_host(host: &str) -> bool {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    let lower = bare.to_ascii_lowercase();
    if lower == "localhost" || lower.ends_with(".localhost") {
        return true;
    }
    match bare.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V4(a)) => a.is_loopback() || a.is_link_local(),
        Ok(std::net::IpAddr::V6(a)) => a.is_loopback() || (a.segments()[0] & 0xffc0) == 0xfe80,
        Err(_) => false,
    }
}

/// How a vendor names its models: what a target on it with no `model` of
/// its own must be sent, for `levee check`'s routing warnings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ModelNames {
    /// The vendor, as a person says it.
    pub vendor: &'static str,
    /// How its model names start.
    pub starts: &'static [&'static str],
    /// Its names in words.
    pub shape: &'static str,
}

impl Platform {
    /// Whose list prices a provider of `api` at `base_url` has, whatever
    /// the model: OpenAI's and Anthropic's own hosts, and Bedrock at
    /// Anthropic's list price (for Anthropic's models only:
    /// [`Platform::list_name`]).
    pub fn list_vendor(&self, api: Api, base_url: &http::Uri) -> Option<Vendor> {
        match (self, api, base_url.host()) {
            (Platform::Direct, Api::OpenAi, Some("api.openai.com")) => Some(Vendor::OpenAi),
            (Platform::Direct, Api::Anthropic, Some("api.anthropic.com")) => {
                Some(Vendor::Anthropic)
            }
            (Platform::Bedrock { .. }, _, _) => Some(Vendor::Anthropic),
            _ => None,
        }
    }

    /// `model`'s name in its vendor's price list (`None`: a model on
    /// Bedrock that is not Anthropic's).
    pub fn list_name<'m>(&self, model: &'m str) -> Option<&'m str> {
        match self {
            Platform::Bedrock { .. } => {
                let id = model.rsplit('/').next().unwrap_or(model);
                id.split("anthropic.").nth(1)
            }
            _ => Some(model),
        }
    }

    /// How the vendor behind a provider of `api` at `base_url` names its
    /// models, where that is known; `None` where any name may be right (an
    /// OpenAI-compatible server, Azure deployments, Vertex, Gemini).
    pub fn model_names(&self, api: Api, base_url: &http::Uri) -> Option<ModelNames> {
        match (self, api, base_url.host()) {
            (Platform::Bedrock { .. }, _, _) => Some(ModelNames {
                vendor: "Bedrock",
                starts: &["anthropic.", "us.", "eu.", "apac.", "global.", "arn:"],
                shape: "`anthropic.claude-…`, an inference profile such as `us.anthropic.claude-…`, or an ARN",
            }),
            (Platform::Direct, Api::Anthropic, Some("api.anthropic.com")) => Some(ModelNames {
                vendor: "Anthropic",
                starts: &["claude-"],
                shape: "`claude-…`",
            }),
            (Platform::Direct, Api::OpenAi, Some("api.openai.com")) => Some(ModelNames {
                vendor: "OpenAI",
                starts: &[
                    "gpt-", "o1", "o3", "o4", "chatgpt-", "text-embedding-", "omni-moderation",
                    "codex-", "computer-use", "davinci", "babbage", "ft:",
                ],
                shape: "`gpt-…`, `o3…`, `text-embedding-…`",
            }),
            _ => None,
        }
    }
}

impl PlatformKeys<'_> {
    /// The provider's platform and base URL from its `api` and the keys
    /// that go with it; `Err` names the key at fault and the problem.
    pub(crate) fn platform(&self) -> Result<(Platform, http::Uri), KeyProblem> {
        check_cloud_keys(self)?;
        Ok(match self.api {
            ApiKind::OpenAi => (
                Platform::Direct,
                needs_url(self, "https://api.openai.com/v1")?,
            ),
            ApiKind::Anthropic => (
                Platform::Direct,
                needs_url(self, "https://api.anthropic.com")?,
            ),
            ApiKind::Azure => azure(self)?,
            ApiKind::Gemini => (
                Platform::Gemini,
                written_url(self).unwrap_or_else(|| http::Uri::from_static(GEMINI_BASE_URL)),
            ),
            ApiKind::Bedrock => bedrock(self)?,
            ApiKind::Vertex | ApiKind::VertexOpenAi => vertex(self)?,
        })
    }
}

/// Refuses a cloud key set for a kind it does not belong to.
fn check_cloud_keys(p: &PlatformKeys<'_>) -> Result<(), KeyProblem> {
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
fn written_url(p: &PlatformKeys<'_>) -> Option<http::Uri> {
    p.base_url.cloned()
}

/// The written `base_url` of a kind with no default one; `example` is the
/// one the refusal suggests.
fn needs_url(p: &PlatformKeys<'_>, example: &str) -> Result<http::Uri, KeyProblem> {
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
fn required(
    p: &PlatformKeys<'_>,
    key: &'static str,
    v: Option<&str>,
) -> Result<String, KeyProblem> {
    match v.map(str::trim) {
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
fn azure(p: &PlatformKeys<'_>) -> Result<(Platform, http::Uri), KeyProblem> {
    if p.token_file.is_some() && p.api_key_env {
        return Err(("token_file", "`token_file` (an Entra ID token) and `api_key_env` (an API key) both authenticate: keep one".into()));
    }
    Ok((
        Platform::Azure {
            api_version: p.api_version.map(str::to_string),
            token_file: p.token_file.map(Path::to_path_buf),
        },
        needs_url(p, "https://my-resource.openai.azure.com")?,
    ))
}

/// An `api: bedrock` provider's platform and base URL (from the region
/// unless written).
fn bedrock(p: &PlatformKeys<'_>) -> Result<(Platform, http::Uri), KeyProblem> {
    if p.auth || p.api_key_env {
        let key = if p.auth { "auth" } else { "api_key_env" };
        return Err((key, format!("`api: bedrock` signs requests with AWS credentials (the AWS_* environment variables or the shared credentials file): remove `{key}`")));
    }
    let region = required(p, "region", p.region)?;
    let base = match written_url(p) {
        Some(u) => u,
        None => region_url(format!("https://bedrock-runtime.{region}.amazonaws.com"))?,
    };
    Ok((
        Platform::Bedrock {
            region,
            profile: p.profile.map(str::to_string),
            credentials_file: p.credentials_file.map(Path::to_path_buf),
        },
        base,
    ))
}

/// An `api: vertex` or `api: vertex-openai` provider's platform and base URL
/// (from the region unless written).
fn vertex(p: &PlatformKeys<'_>) -> Result<(Platform, http::Uri), KeyProblem> {
    if let Some(url) = p.token_url {
        check_credential_url(url).map_err(|why| ("token_url", format!("`token_url`: {why}")))?;
    }
    let region = required(p, "region", p.region)?;
    let project = required(p, "project", p.project)?;
    let base = match written_url(p) {
        Some(u) => u,
        None if region == "global" => http::Uri::from_static("https://aiplatform.googleapis.com"),
        None => region_url(format!("https://{region}-aiplatform.googleapis.com"))?,
    };
    Ok((
        Platform::Vertex {
            project,
            region,
            credentials_file: p.credentials_file.map(Path::to_path_buf),
            token_url: p.token_url.map(str::to_string),
            openai: p.api == ApiKind::VertexOpenAi,
        },
        base,
    ))
}
