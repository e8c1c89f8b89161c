//! How a Vertex AI provider gets its access tokens, in Application Default
//! Credentials' order: the provider's `credentials_file`, else the file
//! `GOOGLE_APPLICATION_CREDENTIALS` names, else gcloud's well-known file
//! (`~/.config/gcloud/application_default_credentials.json`), else the
//! metadata server (GKE workload identity, GCE, Cloud Run: the address
//! `GCE_METADATA_HOST` gives, else `metadata.google.internal`). A file is
//! a service-account key (the JWT bearer grant) or user credentials
//! (`authorized_user`, from `gcloud auth application-default login`: the
//! refresh-token grant).

use super::tokens::{ServiceAccount, GOOGLE_TOKEN_URL, SCOPE};
use std::path::{Path, PathBuf};

/// The metadata server's name on Google's clouds.
const METADATA_HOST: &str = "metadata.google.internal";

/// Where a provider's tokens come from.
pub(super) enum Grant {
    ServiceAccount(ServiceAccount),
    User {
        file: PathBuf,
        client_id: String,
        client_secret: String,
        refresh_token: String,
        token_url: String,
    },
    Metadata {
        base: String,
    },
    /// Workload identity federation (`external_account`): a subject token
    /// from a file or a URL, exchanged at Google's STS, then (with
    /// `service_account_impersonation_url`) traded for a service account's.
    External(External),
}

/// An `external_account` credentials file's parts Levee uses.
#[derive(serde::Deserialize)]
pub(super) struct External {
    #[serde(skip)]
    pub(super) file: PathBuf,
    pub(super) audience: String,
    pub(super) subject_token_type: String,
    pub(super) token_url: String,
    pub(super) service_account_impersonation_url: Option<String>,
    pub(super) credential_source: CredentialSource,
}

/// Where the subject token is read: a file, or a URL (with its headers).
#[derive(serde::Deserialize)]
pub(super) struct CredentialSource {
    pub(super) file: Option<PathBuf>,
    pub(super) url: Option<String>,
    #[serde(default)]
    pub(super) headers: std::collections::HashMap<String, String>,
    pub(super) format: Option<SourceFormat>,
    pub(super) environment_id: Option<String>,
}

/// A subject token as text, or a field of a JSON document.
#[derive(serde::Deserialize)]
pub(super) struct SourceFormat {
    #[serde(rename = "type")]
    pub(super) kind: Option<String>,
    pub(super) subject_token_field_name: Option<String>,
}

/// One token request: where, and the form to post (`None`: a `GET` with
/// `Metadata-Flavor: Google`).
pub(super) struct TokenRequest {
    pub(super) url: String,
    pub(super) form: Option<String>,
}

impl Grant {
    /// The grant of the credentials file at `path`, by its `type`.
    pub(super) fn load(path: &Path, token_url: Option<&str>) -> Result<Grant, String> {
        #[derive(serde::Deserialize)]
        struct Kind {
            #[serde(rename = "type")]
            kind: Option<String>,
            client_id: Option<String>,
            client_secret: Option<String>,
            refresh_token: Option<String>,
        }
        let shown = path.display();
        let text = std::fs::read(path)
            .map_err(|e| format!("cannot read the credentials file {shown}: {e}"))?;
        let k: Kind = serde_json::from_slice(&text).map_err(|e| {
            format!("{shown} is not a Google credentials file (a JSON object): {e}")
        })?;
        match k.kind.as_deref() {
            Some("authorized_user") => {
                let need = |v: Option<String>, name: &str| {
                    v.filter(|v| !v.is_empty())
                        .ok_or_else(|| format!("{shown} (`authorized_user`) has no `{name}`"))
                };
                let token_url = token_url.unwrap_or(GOOGLE_TOKEN_URL).to_string();
                levee_config::check_credential_url(&token_url)
                    .map_err(|why| format!("the token endpoint: {why}"))?;
                Ok(Grant::User {
                    file: path.to_path_buf(),
                    client_id: need(k.client_id, "client_id")?,
                    client_secret: need(k.client_secret, "client_secret")?,
                    refresh_token: need(k.refresh_token, "refresh_token")?,
                    token_url,
                })
            }
            Some("external_account") => External::load(path, &text).map(Grant::External),
            _ => ServiceAccount::load(path, token_url).map(Grant::ServiceAccount),
        }
    }

    /// The metadata server, at `GCE_METADATA_HOST` (`host[:port]`) when set.
    pub(super) fn metadata(env: &dyn Fn(&str) -> Option<String>) -> Result<Grant, String> {
        let host = env("GCE_METADATA_HOST").unwrap_or_else(|| METADATA_HOST.to_string());
        let base = format!("http://{host}");
        let uri: http::Uri = base
            .parse()
            .map_err(|_| format!("GCE_METADATA_HOST `{host}` is not a host[:port]"))?;
        let name = uri.host().unwrap_or("");
        if name != METADATA_HOST && !levee_config::is_local_host(name) {
            return Err(format!(
                "GCE_METADATA_HOST `{host}`: the metadata server is asked over plain http, so it must be `{METADATA_HOST}`, loopback or a link-local address"
            ));
        }
        Ok(Grant::Metadata { base })
    }

    /// gcloud's well-known credentials file, when it exists.
    pub(super) fn well_known(env: &dyn Fn(&str) -> Option<String>) -> Option<PathBuf> {
        let dir = env("CLOUDSDK_CONFIG")
            .map(PathBuf::from)
            .or_else(|| env("HOME").map(|h| Path::new(&h).join(".config").join("gcloud")))?;
        let file = dir.join("application_default_credentials.json");
        file.exists().then_some(file)
    }

    /// Where the tokens come from, in words.
    pub(super) fn describe(&self) -> String {
        match self {
            Grant::ServiceAccount(k) => format!("service-account key {}", k.file.display()),
            Grant::User { file, .. } => format!("user credentials {}", file.display()),
            Grant::Metadata { base } => format!("the metadata server at {base}"),
            Grant::External(x) => format!(
                "workload identity federation configuration {}",
                x.file.display()
            ),
        }
    }

    /// The token request to make at `unix_ms` (a federation's takes
    /// several steps: `Tokens::external`).
    pub(super) fn request(&self, unix_ms: u64) -> Result<TokenRequest, String> {
        let enc = |v: &str| {
            percent_encoding::utf8_percent_encode(v, percent_encoding::NON_ALPHANUMERIC).to_string()
        };
        Ok(match self {
            Grant::ServiceAccount(k) => TokenRequest {
                url: k.token_url.clone(),
                form: Some(format!(
                    "grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer&assertion={}",
                    k.assertion(unix_ms / 1000)?
                )),
            },
            Grant::User {
                client_id,
                client_secret,
                refresh_token,
                token_url,
                ..
            } => TokenRequest {
                url: token_url.clone(),
                form: Some(format!(
                    "grant_type=refresh_token&client_id={}&client_secret={}&refresh_token={}",
                    enc(client_id),
                    enc(client_secret),
                    enc(refresh_token)
                )),
            },
            Grant::External(x) => {
                return Err(format!(
                    "{}: a federation's token is exchanged in steps, not one request",
                    x.file.display()
                ))
            }
            Grant::Metadata { base } => TokenRequest {
                url: format!(
                    "{base}/computeMetadata/v1/instance/service-accounts/default/token?scopes={}",
                    enc(SCOPE)
                ),
                form: None,
            },
        })
    }

    /// The secrets a grant holds (redacted from the start).
    pub(super) fn secrets(&self) -> Vec<String> {
        match self {
            Grant::User {
                client_secret,
                refresh_token,
                ..
            } => vec![client_secret.clone(), refresh_token.clone()],
            _ => Vec::new(),
        }
    }
}

impl External {
    /// An `external_account` file's settings, checked: a file or URL
    /// source (AWS-sourced ones, `environment_id`, are refused), endpoints
    /// over https (plain http only on loopback or link-local).
    fn load(path: &Path, text: &[u8]) -> Result<External, String> {
        let shown = path.display();
        let mut x: External = serde_json::from_slice(text).map_err(|e| {
            format!("{shown} is not a complete `external_account` configuration: {e}")
        })?;
        x.file = path.to_path_buf();
        let src = &x.credential_source;
        if src.environment_id.is_some() {
            return Err(format!(
                "{shown}: an AWS-sourced `external_account` is not read; on AWS, give Levee a service-account key or use a file- or URL-sourced configuration"
            ));
        }
        if src.file.is_none() && src.url.is_none() {
            return Err(format!(
                "{shown}: `credential_source` names neither a `file` nor a `url`"
            ));
        }
        let urls = [
            Some(&x.token_url),
            x.service_account_impersonation_url.as_ref(),
            src.url.as_ref(),
        ];
        for url in urls.into_iter().flatten() {
            levee_config::check_credential_url(url).map_err(|why| format!("{shown}: {why}"))?;
        }
        Ok(x)
    }

    /// The STS token-exchange form for `subject_token`.
    pub(super) fn exchange_form(&self, subject_token: &str) -> String {
        let enc = |v: &str| {
            percent_encoding::utf8_percent_encode(v, percent_encoding::NON_ALPHANUMERIC).to_string()
        };
        format!(
            "grant_type={}&audience={}&scope={}&requested_token_type={}&subject_token={}&subject_token_type={}",
            enc("urn:ietf:params:oauth:grant-type:token-exchange"),
            enc(&self.audience),
            enc(SCOPE),
            enc("urn:ietf:params:oauth:token-type:access_token"),
            enc(subject_token),
            enc(&self.subject_token_type)
        )
    }

    /// The subject token from a document read at the source: the whole
    /// text, or the JSON field the format names.
    pub(super) fn subject_token(&self, doc: &[u8]) -> Result<String, String> {
        let format = self.credential_source.format.as_ref();
        match format.and_then(|f| f.kind.as_deref()) {
            Some("json") => {
                let field = format
                    .and_then(|f| f.subject_token_field_name.as_deref())
                    .ok_or(
                        "the credential source's JSON format names no `subject_token_field_name`",
                    )?;
                let v: serde_json::Value = serde_json::from_slice(doc)
                    .map_err(|_| "the credential source is not JSON".to_string())?;
                v.get(field)
                    .and_then(|t| t.as_str())
                    .map(str::to_string)
                    .ok_or_else(|| format!("the credential source has no `{field}`"))
            }
            _ => Ok(String::from_utf8_lossy(doc).trim().to_string()),
        }
        .and_then(|t| match t.is_empty() {
            true => Err("the credential source holds no subject token".to_string()),
            false => Ok(t),
        })
    }
}
