//! The rest of the AWS default credential chain, after the environment's
//! keys and a shared credentials file's static keys, in the order and with
//! the variables the AWS SDKs use:
//!
//! 1. the profile's `credential_process` (in the credentials file or
//!    `~/.aws/config`, `AWS_CONFIG_FILE`), run with `sh -c`; its JSON
//!    (`Version: 1`) gives the keys and their `Expiration`. AWS SSO works
//!    through it: `credential_process = aws configure export-credentials
//!    --profile NAME --format process`;
//! 2. web identity (EKS IRSA): the profile's `web_identity_token_file` and
//!    `role_arn`, else `AWS_WEB_IDENTITY_TOKEN_FILE` and `AWS_ROLE_ARN`
//!    (`AWS_ROLE_SESSION_NAME`), traded at STS `AssumeRoleWithWebIdentity`
//!    (`AWS_ENDPOINT_URL_STS`, else `AWS_ENDPOINT_URL`, else the region's
//!    STS);
//! 3. container credentials (ECS task roles, EKS Pod Identity):
//!    `AWS_CONTAINER_CREDENTIALS_RELATIVE_URI` (at `169.254.170.2`) or
//!    `…_FULL_URI`, with `AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE` (read at
//!    each fetch) or `…_TOKEN`;
//! 4. the EC2 instance profile through IMDSv2
//!    (`AWS_EC2_METADATA_SERVICE_ENDPOINT`, else `169.254.169.254`; off
//!    with `AWS_EC2_METADATA_DISABLED=true`).
//!
//! Fetched keys are kept until five minutes before they expire, then
//! fetched again in the background while the current ones are still used;
//! a fetch that fails keeps them until their expiry, and only then does an
//! attempt fail (`credentials_unavailable`). Every key fetched is told to
//! the redaction for its lifetime. Plain `http://` endpoints are used only
//! on loopback or link-local addresses.

use super::Keys;
use crate::observe::live_secrets::Learned;
use crate::upstream::transport::Connector;
use bytes::Bytes;
use http::header::{HeaderValue, ACCEPT, AUTHORIZATION, CONTENT_TYPE};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// The longest one fetch (every request it makes) may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);
/// Most bytes of one answer of a credential endpoint.
const MAX_ANSWER: usize = 64 * 1024;
/// How long past their expiry fetched keys stay redacted (a late echo).
const REDACT_PAST_EXPIRY_MS: u64 = 60 * 60 * 1000;
/// How long keys that do not expire stay redacted after they were fetched.
const REDACT_UNDATED_MS: u64 = 24 * 60 * 60 * 1000;

/// Where fetched keys come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum How {
    Process {
        command: String,
        profile: String,
    },
    WebIdentity {
        token_file: PathBuf,
        role_arn: String,
        session: String,
        sts: String,
    },
    Container {
        url: String,
        token: Option<String>,
        token_file: Option<PathBuf>,
    },
    Imds {
        endpoint: String,
    },
}

impl How {
    /// Where the keys come from, in words (`levee check --probe`, errors).
    pub(super) fn source(&self) -> String {
        match self {
            How::Process { profile, .. } => format!("profile `{profile}`'s credential_process"),
            How::WebIdentity { role_arn, .. } => format!("web identity, role {role_arn}"),
            How::Container { url, .. } => format!("container credentials at {url}"),
            How::Imds { endpoint } => format!("EC2 instance profile (IMDSv2 at {endpoint})"),
        }
    }
}

/// Keys fetched from one source (kept and refreshed by
/// [`super::super::kept::Kept`]).
pub(super) struct Fetched {
    pub(super) how: How,
    client: Client<Connector, Full<Bytes>>,
    pub(super) learned: Arc<Learned>,
}

impl super::super::kept::Refetch for Fetched {
    type Value = Arc<Keys>;

    async fn fetch(&self) -> Result<(Arc<Keys>, Option<u64>), String> {
        let (keys, expires_ms) = self.fetch_keys().await?;
        let now = crate::clock::unix_ms();
        let until = expires_ms.map_or(now.saturating_add(REDACT_UNDATED_MS), |e| {
            e.saturating_add(REDACT_PAST_EXPIRY_MS)
        });
        for secret in [&keys.access_key_id, &keys.secret_access_key]
            .into_iter()
            .chain(keys.session_token.as_ref())
        {
            self.learned.learn(secret, until);
        }
        Ok((keys, expires_ms))
    }

    fn describe(&self) -> String {
        self.how.source()
    }
}

impl Fetched {
    pub(super) fn new(how: How, connector: Connector) -> Self {
        Fetched {
            how,
            // A fetch every few hours: no connection is kept for the next.
            client: Client::builder(TokioExecutor::new())
                .pool_max_idle_per_host(0)
                .build(connector),
            learned: Arc::default(),
        }
    }

    async fn fetch_keys(&self) -> Result<(Arc<Keys>, Option<u64>), String> {
        let source = self.how.source();
        let fetched = tokio::time::timeout(FETCH_TIMEOUT, async {
            match &self.how {
                How::Process { command, .. } => process(command).await,
                How::WebIdentity {
                    token_file,
                    role_arn,
                    session,
                    sts,
                } => self.web_identity(token_file, role_arn, session, sts).await,
                How::Container {
                    url,
                    token,
                    token_file,
                } => {
                    self.container(url, token.as_deref(), token_file.as_deref())
                        .await
                }
                How::Imds { endpoint } => self.imds(endpoint).await,
            }
        })
        .await
        .map_err(|_| format!("{source}: no answer within {} s", FETCH_TIMEOUT.as_secs()))?;
        fetched.map_err(|e| format!("{source}: {e}"))
    }

    /// One request; its status and body (at most [`MAX_ANSWER`] bytes).
    async fn call(
        &self,
        req: http::Request<Full<Bytes>>,
    ) -> Result<(http::StatusCode, Bytes), String> {
        let url = req.uri().to_string();
        let resp = self
            .client
            .request(req)
            .await
            .map_err(|e| format!("cannot reach {url}: {e}"))?;
        let status = resp.status();
        let body = Limited::new(resp.into_body(), MAX_ANSWER)
            .collect()
            .await
            .map_err(|e| format!("{url} broke off its answer: {e}"))?
            .to_bytes();
        Ok((status, body))
    }

    async fn web_identity(
        &self,
        token_file: &Path,
        role_arn: &str,
        session: &str,
        sts: &str,
    ) -> Result<(Arc<Keys>, Option<u64>), String> {
        let token = std::fs::read_to_string(token_file).map_err(|e| {
            format!(
                "cannot read the web identity token {}: {e}",
                token_file.display()
            )
        })?;
        let form = form(&[
            ("Action", "AssumeRoleWithWebIdentity"),
            ("Version", "2011-06-15"),
            ("RoleArn", role_arn),
            ("RoleSessionName", session),
            ("WebIdentityToken", token.trim()),
        ]);
        let req = http::Request::post(sts)
            .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(Full::new(Bytes::from(form)))
            .map_err(|_| format!("the STS endpoint `{sts}` is not a usable URL"))?;
        let (status, body) = self.call(req).await?;
        if !status.is_success() {
            return Err(format!(
                "STS AssumeRoleWithWebIdentity at {sts} refused ({status}){}",
                tag(&body, "Code")
                    .map(|c| format!(": {c}"))
                    .unwrap_or_default()
            ));
        }
        let get = |name: &str| {
            tag(&body, name).ok_or_else(|| format!("STS answered {status} without `{name}`"))
        };
        held(
            get("AccessKeyId")?,
            get("SecretAccessKey")?,
            Some(get("SessionToken")?),
            tag(&body, "Expiration").as_deref(),
        )
    }

    async fn container(
        &self,
        url: &str,
        token: Option<&str>,
        token_file: Option<&Path>,
    ) -> Result<(Arc<Keys>, Option<u64>), String> {
        let token = match token_file {
            Some(f) => Some(
                std::fs::read_to_string(f)
                    .map_err(|e| {
                        format!(
                            "cannot read AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE {}: {e}",
                            f.display()
                        )
                    })?
                    .trim()
                    .to_string(),
            ),
            None => token.map(str::to_string),
        };
        let mut req = http::Request::get(url).header(ACCEPT, "application/json");
        if let Some(t) = token {
            let mut v = HeaderValue::from_str(&t).map_err(|_| {
                "the container authorization token holds characters a header cannot carry"
                    .to_string()
            })?;
            v.set_sensitive(true);
            req = req.header(AUTHORIZATION, v);
        }
        let req = req
            .body(Full::new(Bytes::new()))
            .map_err(|_| format!("`{url}` is not a usable URL"))?;
        let (status, body) = self.call(req).await?;
        if !status.is_success() {
            return Err(format!(
                "the container credentials endpoint answered {status}"
            ));
        }
        json_keys(&body)
    }

    async fn imds(&self, endpoint: &str) -> Result<(Arc<Keys>, Option<u64>), String> {
        let base = endpoint.trim_end_matches('/');
        let put = http::Request::put(format!("{base}/latest/api/token"))
            .header("x-aws-ec2-metadata-token-ttl-seconds", "21600")
            .body(Full::new(Bytes::new()))
            .map_err(|_| format!("`{endpoint}` is not a usable URL"))?;
        let (status, token) = self.call(put).await?;
        if !status.is_success() {
            return Err(format!("IMDSv2 refused a session token ({status})"));
        }
        let token = String::from_utf8_lossy(&token).trim().to_string();
        let get = |path: String| {
            http::Request::get(format!("{base}{path}"))
                .header("x-aws-ec2-metadata-token", token.as_str())
                .body(Full::new(Bytes::new()))
                .map_err(|_| format!("`{endpoint}` is not a usable URL"))
        };
        let roles = "/latest/meta-data/iam/security-credentials/".to_string();
        let (status, listed) = self.call(get(roles.clone())?).await?;
        if !status.is_success() {
            return Err(format!(
                "this instance has no instance profile (IMDS answered {status} for its roles)"
            ));
        }
        let role = String::from_utf8_lossy(&listed)
            .lines()
            .next()
            .map(str::trim)
            .filter(|r| !r.is_empty())
            .map(str::to_string)
            .ok_or("this instance's instance profile names no role")?;
        let (status, body) = self.call(get(format!("{roles}{role}"))?).await?;
        if !status.is_success() {
            return Err(format!(
                "IMDS answered {status} for role `{role}`'s credentials"
            ));
        }
        json_keys(&body)
    }
}

/// Runs a `credential_process` and reads its JSON.
async fn process(command: &str) -> Result<(Arc<Keys>, Option<u64>), String> {
    let out = tokio::process::Command::new("sh")
        .arg("-c")
        .arg(command)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .map_err(|e| format!("cannot run the credential_process: {e}"))?;
    if !out.status.success() {
        return Err(format!("the credential_process exited with {}", out.status));
    }
    json_keys(&out.stdout)
}

/// Keys from a JSON answer: a container or IMDS endpoint's (`Token`) or a
/// credential_process's (`SessionToken`, `Version: 1`).
fn json_keys(body: &[u8]) -> Result<(Arc<Keys>, Option<u64>), String> {
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "PascalCase")]
    struct Answer {
        access_key_id: Option<String>,
        secret_access_key: Option<String>,
        #[serde(alias = "SessionToken")]
        token: Option<String>,
        expiration: Option<String>,
    }
    let a: Answer = serde_json::from_slice(body)
        .map_err(|_| "the answer is not the JSON of AWS credentials".to_string())?;
    let (Some(id), Some(secret)) = (a.access_key_id, a.secret_access_key) else {
        return Err("the answer has no AccessKeyId and SecretAccessKey".into());
    };
    held(id, secret, a.token, a.expiration.as_deref())
}

fn held(
    id: String,
    secret: String,
    token: Option<String>,
    expiration: Option<&str>,
) -> Result<(Arc<Keys>, Option<u64>), String> {
    let expires_ms = match expiration {
        None => None,
        Some(e) => Some(
            levee_wire::civil::rfc3339_unix_ms(e)
                .ok_or_else(|| format!("`Expiration` {e:?} is not an RFC 3339 time"))?,
        ),
    };
    Ok((
        Arc::new(Keys::new(id, secret, token.filter(|t| !t.is_empty()))),
        expires_ms,
    ))
}

/// The text of the first `<name>…</name>` in an XML answer.
fn tag(body: &[u8], name: &str) -> Option<String> {
    let text = std::str::from_utf8(body).ok()?;
    let open = format!("<{name}>");
    let start = text.find(&open)? + open.len();
    let end = text[start..].find(&format!("</{name}>"))? + start;
    Some(text[start..end].trim().to_string())
}

/// What a form value keeps unescaped: RFC 3986's unreserved characters.
const UNRESERVED: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// An `application/x-www-form-urlencoded` body.
fn form(pairs: &[(&str, &str)]) -> String {
    pairs
        .iter()
        .map(|(k, v)| {
            format!(
                "{k}={}",
                percent_encoding::utf8_percent_encode(v, UNRESERVED)
            )
        })
        .collect::<Vec<_>>()
        .join("&")
}

/// A profile's settings in an AWS INI file: `[name]` in the credentials
/// file, `[profile name]` (or `[default]`) in the config file.
pub(super) fn profile_settings(
    text: &str,
    profile: &str,
    config: bool,
) -> Option<HashMap<String, String>> {
    let wanted = |section: &str| {
        let section = section.trim();
        match config {
            true if profile == "default" => section == "default" || section == "profile default",
            true => section.strip_prefix("profile ").map(str::trim) == Some(profile),
            false => section == profile,
        }
    };
    let mut inside = false;
    let mut found = None::<HashMap<String, String>>;
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            inside = wanted(name);
            if inside {
                found.get_or_insert_with(HashMap::new);
            }
            continue;
        }
        if let (true, Some((k, v))) = (inside, line.split_once('=')) {
            if let Some(f) = found.as_mut() {
                f.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
            }
        }
    }
    found
}

/// Where the chain goes after the environment's and the file's static
/// keys, for `profile` whose settings (credentials file, then config file)
/// are `settings`; `ambient`: the config names neither a profile nor a
/// file, so the environment's web identity, container and instance
/// sources count. `Err`: a source is set but cannot be used.
pub(super) fn choose(
    profile: &str,
    settings: &HashMap<String, String>,
    ambient: bool,
    region: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<How>, String> {
    if let Some(command) = settings.get("credential_process").filter(|c| !c.is_empty()) {
        return Ok(Some(How::Process {
            command: command.clone(),
            profile: profile.to_string(),
        }));
    }
    let sts = || {
        env("AWS_ENDPOINT_URL_STS")
            .or_else(|| env("AWS_ENDPOINT_URL"))
            .unwrap_or_else(|| format!("https://sts.{region}.amazonaws.com/"))
    };
    let session = || env("AWS_ROLE_SESSION_NAME").unwrap_or_else(|| "levee".to_string());
    if let (Some(file), Some(role)) = (
        settings.get("web_identity_token_file"),
        settings.get("role_arn"),
    ) {
        let sts = sts();
        checked(&sts, "the STS endpoint")?;
        return Ok(Some(How::WebIdentity {
            token_file: PathBuf::from(file),
            role_arn: role.clone(),
            session: settings
                .get("role_session_name")
                .cloned()
                .unwrap_or_else(session),
            sts,
        }));
    }
    if !ambient {
        return Ok(None);
    }
    if let (Some(file), Some(role)) = (env("AWS_WEB_IDENTITY_TOKEN_FILE"), env("AWS_ROLE_ARN")) {
        let sts = sts();
        checked(&sts, "the STS endpoint")?;
        return Ok(Some(How::WebIdentity {
            token_file: PathBuf::from(file),
            role_arn: role,
            session: session(),
            sts,
        }));
    }
    let container = env("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI")
        .map(|rel| format!("http://169.254.170.2{rel}"))
        .or_else(|| env("AWS_CONTAINER_CREDENTIALS_FULL_URI"));
    if let Some(url) = container {
        checked(&url, "AWS_CONTAINER_CREDENTIALS_FULL_URI")?;
        return Ok(Some(How::Container {
            url,
            token: env("AWS_CONTAINER_AUTHORIZATION_TOKEN"),
            token_file: env("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE").map(PathBuf::from),
        }));
    }
    if env("AWS_EC2_METADATA_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true")) {
        return Ok(None);
    }
    let endpoint = env("AWS_EC2_METADATA_SERVICE_ENDPOINT")
        .unwrap_or_else(|| "http://169.254.169.254".to_string());
    checked(&endpoint, "AWS_EC2_METADATA_SERVICE_ENDPOINT")?;
    Ok(Some(How::Imds { endpoint }))
}

/// `url` as a credential endpoint: https, or plain http on loopback or
/// link-local only.
fn checked(url: &str, what: &str) -> Result<(), String> {
    levee_config::check_credential_url(url).map_err(|why| format!("{what}: {why}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_sts_writes_is_read() {
        let xml = b"<R><Credentials><AccessKeyId>ASIA1</AccessKeyId><SessionToken>tok</SessionToken></Credentials></R>";
        assert_eq!(tag(xml, "AccessKeyId").as_deref(), Some("ASIA1"));
        assert_eq!(tag(xml, "Expiration"), None);
    }

    #[test]
    fn the_chain_is_walked_in_the_sdks_order() {
        let vars = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.to_string())
            }
        };
        let none = HashMap::new();
        let imds = choose("default", &none, true, "us-east-1", &vars(&[])).unwrap();
        assert_eq!(
            imds,
            Some(How::Imds {
                endpoint: "http://169.254.169.254".into()
            })
        );
        let off = choose(
            "default",
            &none,
            true,
            "us-east-1",
            &vars(&[("AWS_EC2_METADATA_DISABLED", "true")]),
        );
        assert_eq!(off, Ok(None));
        let both = vars(&[
            ("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "/v2/creds"),
            ("AWS_WEB_IDENTITY_TOKEN_FILE", "/var/run/token"),
            ("AWS_ROLE_ARN", "arn:aws:iam::1:role/r"),
        ]);
        assert!(
            matches!(choose("default", &none, true, "eu-west-1", &both), Ok(Some(How::WebIdentity { sts, .. })) if sts == "https://sts.eu-west-1.amazonaws.com/")
        );
        let ecs = vars(&[("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "/v2/creds")]);
        assert!(
            matches!(choose("default", &none, true, "us-east-1", &ecs), Ok(Some(How::Container { url, .. })) if url == "http://169.254.170.2/v2/creds")
        );
        let far = vars(&[(
            "AWS_CONTAINER_CREDENTIALS_FULL_URI",
            "http://creds.example.com/x",
        )]);
        assert!(choose("default", &none, true, "us-east-1", &far).is_err());
        let mut process = HashMap::new();
        process.insert("credential_process".to_string(), "/bin/creds".to_string());
        assert!(matches!(
            choose("p", &process, false, "us-east-1", &vars(&[])),
            Ok(Some(How::Process { .. }))
        ));
        // A named profile without a source of its own stops the chain.
        assert_eq!(choose("p", &none, false, "us-east-1", &vars(&[])), Ok(None));
    }

    #[test]
    fn profiles_are_read_from_both_files() {
        let config =
            "[default]\nregion = x\n[profile build]\ncredential_process = /bin/creds --json\n";
        assert_eq!(
            profile_settings(config, "build", true).unwrap()["credential_process"],
            "/bin/creds --json"
        );
        assert!(profile_settings(config, "default", true).is_some());
        assert!(profile_settings("[build]\nx = 1\n", "build", false).is_some());
        assert!(profile_settings(config, "other", true).is_none());
    }
}
