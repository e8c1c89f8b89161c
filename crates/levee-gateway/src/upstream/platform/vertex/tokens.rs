//! OAuth2 access tokens for a service-account key: the key file read, the
//! JWT bearer grant (RFC 7523) at its token endpoint, and the cache that
//! refreshes a token in the background before it expires.

use super::*;

/// The scope a Vertex AI token is asked for.
pub(super) const SCOPE: &str = "https://www.googleapis.com/auth/cloud-platform";
/// Google's token endpoint: where tokens are asked for when neither
/// `token_url` nor the key names another, and the assertion's audience always.
pub(super) const GOOGLE_TOKEN_URL: &str = "https://oauth2.googleapis.com/token";
/// How long the assertion of a token request is valid (Google's maximum).
pub(super) const ASSERTION_LIFETIME_S: u64 = 3600;
/// The longest a token request may take, connection included.
pub(super) const TOKEN_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest token endpoint answer read.
pub(super) const MAX_TOKEN_ANSWER: usize = 64 * 1024;
/// A token is refreshed once less than this, or a tenth of its lifetime,
/// whichever is less, is left.
pub(super) const MAX_MARGIN: Duration = Duration::from_secs(300);
/// After a background refresh failed, the next is tried no sooner than this.
pub(super) const RETRY_REFRESH_AFTER: Duration = Duration::from_secs(10);

/// The parts of a service-account key file Levee uses.
pub(super) struct ServiceAccount {
    pub(super) file: PathBuf,
    pub(super) client_email: String,
    pub(super) key_id: Option<String>,
    pub(super) key: jsonwebtoken::EncodingKey,
    /// Where tokens are asked for (`token_url`, else the key's `token_uri`).
    pub(super) token_url: String,
}

#[derive(serde::Deserialize)]
pub(super) struct KeyFile {
    #[serde(rename = "type")]
    pub(super) kind: Option<String>,
    pub(super) client_email: Option<String>,
    pub(super) private_key_id: Option<String>,
    pub(super) private_key: Option<String>,
    pub(super) token_uri: Option<String>,
}

impl ServiceAccount {
    /// Reads and checks a key file; an error names the file and what is
    /// wrong with it, never its contents.
    pub(super) fn load(path: &Path, token_url: Option<&str>) -> Result<Self, String> {
        let shown = path.display();
        let text = std::fs::read(path)
            .map_err(|e| format!("cannot read the service-account key {shown}: {e}"))?;
        let file: KeyFile = serde_json::from_slice(&text)
            .map_err(|e| format!("{shown} is not a service-account key (a JSON object): {e}"))?;
        match file.kind.as_deref() {
            Some("service_account") => {}
            Some("authorized_user") => return Err(format!(
                "{shown} holds user credentials (`authorized_user`, from `gcloud auth application-default login`); Levee needs a service-account key (`gcloud iam service-accounts keys create`), or an access token in the variable `api_key_env` names"
            )),
            Some(other) => return Err(format!(
                "{shown} is a `{other}` credential; Levee takes a service-account key (`type: service_account`) or an access token in the variable `api_key_env` names"
            )),
            None => return Err(format!(
                "{shown} has no `type`: is it a service-account key (`type: service_account`)?"
            )),
        }
        let client_email = file
            .client_email
            .filter(|e| !e.is_empty())
            .ok_or_else(|| format!("{shown} has no `client_email`"))?;
        let pem = file
            .private_key
            .ok_or_else(|| format!("{shown} has no `private_key`"))?;
        let key = jsonwebtoken::EncodingKey::from_rsa_pem(pem.as_bytes()).map_err(|_| {
            format!("the `private_key` in {shown} is not an RSA private key in PEM form")
        })?;
        let token_url = token_url
            .map(str::to_string)
            .or(file.token_uri)
            .unwrap_or_else(|| GOOGLE_TOKEN_URL.to_string());
        if let Err(why) = levee_config::check_credential_url(&token_url) {
            return Err(format!(
                "the token endpoint (`token_url`, else the key's `token_uri`): {why}"
            ));
        }
        Ok(ServiceAccount {
            file: path.to_path_buf(),
            client_email,
            key_id: file.private_key_id.filter(|k| !k.is_empty()),
            key,
            token_url,
        })
    }

    /// The signed assertion of a token request made at `unix_s`.
    pub(super) fn assertion(&self, unix_s: u64) -> Result<String, String> {
        #[derive(serde::Serialize)]
        pub(super) struct Claims<'a> {
            iss: &'a str,
            sub: &'a str,
            aud: &'a str,
            scope: &'a str,
            iat: u64,
            exp: u64,
        }
        let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::RS256);
        header.kid = self.key_id.clone();
        let claims = Claims {
            iss: &self.client_email,
            sub: &self.client_email,
            // Google's token endpoint, wherever the request is sent (a
            // private endpoint, a test's): as Google's own auth library writes it.
            aud: GOOGLE_TOKEN_URL,
            scope: SCOPE,
            iat: unix_s,
            exp: unix_s + ASSERTION_LIFETIME_S,
        };
        jsonwebtoken::encode(&header, &claims, &self.key).map_err(|e| {
            format!(
                "cannot sign a token request with the key in {}: {e}",
                self.file.display()
            )
        })
    }
}

/// An access token and when to stop using it.
#[derive(Clone)]
pub(super) struct Token {
    /// `Bearer …`, marked sensitive.
    pub(super) value: HeaderValue,
    /// On the gateway's clock (tokio's, so paused-time tests move it).
    pub(super) expires: levee_policy::Instant,
    pub(super) refresh_at: levee_policy::Instant,
}

#[derive(Default)]
pub(super) struct Cache {
    pub(super) token: Option<Token>,
    /// No background refresh before this (one just failed).
    pub(super) quiet_until: Option<levee_policy::Instant>,
    /// When the last token request that found no valid token failed, and why.
    pub(super) failed: Option<(levee_policy::Instant, String)>,
}

/// A service account's tokens: cached, refreshed one request at a time.
pub(super) struct Tokens {
    pub(super) provider: String,
    pub(super) grant: super::grants::Grant,
    pub(super) client: Client<Connector, Full<Bytes>>,
    pub(super) clock: Clock,
    pub(super) cache: Mutex<Cache>,
    /// Held while a token is being fetched: concurrent attempts that need
    /// one wait for that fetch instead of making their own.
    pub(super) flight: tokio::sync::Mutex<()>,
    /// A background refresh is running.
    pub(super) refreshing: AtomicBool,
    /// Each token issued, told to the redaction for its lifetime.
    pub(super) learned: Arc<crate::observe::live_secrets::Learned>,
}

impl Tokens {
    pub(super) fn new(provider: &str, grant: super::grants::Grant, connector: Connector) -> Self {
        Tokens {
            provider: provider.to_string(),
            grant,
            // A token lasts about an hour: no connection is kept for the next.
            client: Client::builder(TokioExecutor::new())
                .pool_max_idle_per_host(0)
                .build(connector),
            clock: Clock::new(),
            cache: Mutex::new(Cache::default()),
            flight: tokio::sync::Mutex::new(()),
            refreshing: AtomicBool::new(false),
            learned: Arc::default(),
        }
    }

    pub(super) fn cache(&self) -> std::sync::MutexGuard<'_, Cache> {
        self.cache.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The header value to send now.
    pub(super) async fn bearer(self: &Arc<Self>, unix_ms: u64) -> Result<HeaderValue, String> {
        let now = self.clock.now();
        let (token, quiet) = {
            let c = self.cache();
            (c.token.clone(), c.quiet_until.is_some_and(|q| now < q))
        };
        match token {
            Some(t) if now < t.refresh_at => Ok(t.value),
            Some(t) if now < t.expires => {
                if !quiet {
                    self.refresh_in_background(unix_ms);
                }
                Ok(t.value)
            }
            _ => self.fresh(unix_ms).await.map(|t| t.value),
        }
    }

    /// A valid token, fetched now unless another caller has just fetched
    /// one; a caller that waited on a fetch that failed gets its error
    /// rather than making the next (a token endpoint that does not answer
    /// holds every waiter once, not once each).
    pub(super) async fn fresh(&self, unix_ms: u64) -> Result<Token, String> {
        let asked = self.clock.now();
        let _flight = self.flight.lock().await;
        let now = self.clock.now();
        {
            let c = self.cache();
            if let Some(t) = c.token.clone().filter(|t| now < t.expires) {
                return Ok(t);
            }
            if let Some((_, e)) = c.failed.as_ref().filter(|(at, _)| *at >= asked) {
                return Err(e.clone());
            }
        }
        match self.fetch(unix_ms).await {
            Ok(token) => {
                let mut c = self.cache();
                c.token = Some(token.clone());
                c.failed = None;
                Ok(token)
            }
            Err(e) => {
                self.cache().failed = Some((self.clock.now(), e.clone()));
                Err(e)
            }
        }
    }

    /// Starts one refresh in the background unless one is running; the
    /// current token stays in use until it succeeds.
    pub(super) fn refresh_in_background(self: &Arc<Self>, unix_ms: u64) {
        if self.refreshing.swap(true, Ordering::AcqRel) {
            return;
        }
        let me = Arc::clone(self);
        tokio::spawn(async move {
            let _running = Running(&me.refreshing);
            let _flight = me.flight.lock().await;
            let due = me
                .cache()
                .token
                .as_ref()
                .is_none_or(|t| me.clock.now() >= t.refresh_at);
            if !due {
                return;
            }
            match me.fetch(unix_ms).await {
                Ok(token) => {
                    let mut c = me.cache();
                    c.token = Some(token);
                    c.quiet_until = None;
                }
                Err(e) => {
                    tracing::warn!(provider = %me.provider, error = %e, "Vertex AI token refresh failed; the current token stays in use until it expires");
                    me.cache().quiet_until = Some(me.clock.now() + RETRY_REFRESH_AFTER);
                }
            }
        });
    }

    /// Drops the cached token (the provider refused it).
    pub(super) fn forget(&self) {
        self.cache().token = None;
    }

    /// One token request: the grant's, at its endpoint (a workload
    /// identity federation's subject token, exchange and impersonation).
    pub(super) async fn fetch(&self, unix_ms: u64) -> Result<Token, String> {
        let started = self.clock.now();
        if let super::grants::Grant::External(x) = &self.grant {
            let (token, lifetime) = self.external(x).await?;
            return self.token(&token, lifetime, started, unix_ms, &x.token_url);
        }
        let asked = self.grant.request(unix_ms)?;
        let url = asked.url.clone();
        let req = match asked.form {
            Some(form) => http::Request::post(url.as_str())
                .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
                .header(ACCEPT, "application/json")
                .body(Full::new(Bytes::from(form))),
            None => http::Request::get(url.as_str())
                .header("metadata-flavor", "Google")
                .body(Full::new(Bytes::new())),
        }
        .map_err(|_| format!("the token endpoint `{url}` is not a usable URL"))?;
        let body = self.exchange(req, &url).await?;
        let granted: Granted = serde_json::from_slice(&body)
            .map_err(|_| format!("the token endpoint {url} answered without an `access_token`"))?;
        let lifetime = Duration::from_secs(granted.expires_in.unwrap_or(3600).max(1));
        self.token(&granted.access_token, lifetime, started, unix_ms, &url)
    }

    /// One request to a token endpoint, within [`TOKEN_TIMEOUT`]: its body
    /// when it succeeds, else why not.
    pub(super) async fn exchange(
        &self,
        req: http::Request<Full<Bytes>>,
        url: &str,
    ) -> Result<Bytes, String> {
        let exchange = async {
            let resp = self
                .client
                .request(req)
                .await
                .map_err(|e| format!("cannot reach the token endpoint {url}: {}", chain(&e)))?;
            let status = resp.status();
            let body = Limited::new(resp.into_body(), MAX_TOKEN_ANSWER)
                .collect()
                .await
                .map_err(|e| format!("the token endpoint {url} broke off its answer: {e}"))?
                .to_bytes();
            Ok::<_, String>((status, body))
        };
        let (status, body) = tokio::time::timeout(TOKEN_TIMEOUT, exchange)
            .await
            .map_err(|_| {
                format!(
                    "the token endpoint {url} did not answer within {} s",
                    TOKEN_TIMEOUT.as_secs()
                )
            })??;
        if !status.is_success() {
            return Err(format!(
                "the token endpoint {url} refused the {} ({status}){}",
                self.grant.describe(),
                grant_error(&body)
            ));
        }
        Ok(body)
    }

    /// The token `access_token`, valid for `lifetime` from `started`: the
    /// header, when to refresh it; told to the redaction for its lifetime.
    fn token(
        &self,
        access_token: &str,
        lifetime: Duration,
        started: levee_policy::Instant,
        unix_ms: u64,
        url: &str,
    ) -> Result<Token, String> {
        let mut value = HeaderValue::try_from(format!("Bearer {access_token}"))
            .ok()
            .filter(|_| !access_token.is_empty())
            .ok_or_else(|| {
                format!("the token endpoint {url} issued a token a header cannot carry")
            })?;
        value.set_sensitive(true);
        let lifetime = lifetime.max(Duration::from_secs(1));
        // Redacted for its lifetime and a minute more (a late echo).
        let keep = u64::try_from(lifetime.as_millis()).unwrap_or(u64::MAX);
        self.learned.learn(
            access_token,
            unix_ms.saturating_add(keep).saturating_add(60_000),
        );
        let margin = MAX_MARGIN.min(lifetime / 10);
        Ok(Token {
            value,
            expires: started + lifetime,
            refresh_at: started + (lifetime - margin),
        })
    }
}

/// A token endpoint's answer.
#[derive(serde::Deserialize)]
pub(super) struct Granted {
    pub(super) access_token: String,
    pub(super) expires_in: Option<u64>,
}

/// Clears the "background refresh running" flag however the task ends.
pub(super) struct Running<'a>(&'a AtomicBool);

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

/// An error and its causes, as one line.
pub(super) fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        out.push_str(": ");
        out.push_str(&c.to_string());
        cause = c.source();
    }
    out
}

/// `: error: description` from an OAuth2 error answer (RFC 6749 §5.2),
/// each at most 200 characters; empty when it has none.
pub(super) fn grant_error(body: &[u8]) -> String {
    let Ok(v) = serde_json::from_slice::<Value>(body) else {
        return String::new();
    };
    let short = |k: &str| {
        v.get(k)
            .and_then(Value::as_str)
            .map(|s| s.chars().take(200).collect::<String>())
    };
    match (short("error"), short("error_description")) {
        (Some(e), Some(d)) => format!(": {e}: {d}"),
        (Some(e), None) => format!(": {e}"),
        _ => String::new(),
    }
}
