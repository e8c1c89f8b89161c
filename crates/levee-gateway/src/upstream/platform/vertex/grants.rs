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
            Some("external_account") => Err(format!(
                "{shown} is a workload identity federation (`external_account`) configuration, which Levee does not read yet: on GKE use workload identity (the metadata server: leave `credentials_file` and GOOGLE_APPLICATION_CREDENTIALS unset), or give a service-account key"
            )),
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
        }
    }

    /// The token request to make at `unix_ms`.
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
