//! Workload identity federation (`external_account`): the subject token
//! read from its file or URL, exchanged at Google's STS for an access
//! token, and, with `service_account_impersonation_url`, that token traded
//! for the service account's (`generateAccessToken`).

use super::grants::External;
use super::tokens::{Granted, Tokens, SCOPE};
use super::*;

impl Tokens {
    /// A token for `x` and how long it lives.
    pub(super) async fn external(&self, x: &External) -> Result<(String, Duration), String> {
        let doc = self.subject_document(x).await?;
        let subject = x.subject_token(&doc)?;
        let req = http::Request::post(x.token_url.as_str())
            .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
            .header(ACCEPT, "application/json")
            .body(Full::new(Bytes::from(x.exchange_form(&subject))))
            .map_err(|_| format!("the STS endpoint `{}` is not a usable URL", x.token_url))?;
        let body = self.exchange(req, &x.token_url).await?;
        let sts: Granted = serde_json::from_slice(&body).map_err(|_| {
            format!(
                "the STS endpoint {} answered without an `access_token`",
                x.token_url
            )
        })?;
        let Some(url) = &x.service_account_impersonation_url else {
            let lifetime = Duration::from_secs(sts.expires_in.unwrap_or(3600));
            return Ok((sts.access_token, lifetime));
        };
        let mut bearer = HeaderValue::try_from(format!("Bearer {}", sts.access_token))
            .map_err(|_| "the STS endpoint issued a token a header cannot carry".to_string())?;
        bearer.set_sensitive(true);
        let ask = serde_json::json!({ "scope": [SCOPE], "lifetime": "3600s" }).to_string();
        let req = http::Request::post(url.as_str())
            .header(CONTENT_TYPE, "application/json")
            .header(http::header::AUTHORIZATION, bearer)
            .body(Full::new(Bytes::from(ask)))
            .map_err(|_| format!("`{url}` is not a usable URL"))?;
        let body = self.exchange(req, url).await?;
        #[derive(serde::Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Impersonated {
            access_token: String,
            expire_time: Option<String>,
        }
        let got: Impersonated = serde_json::from_slice(&body)
            .map_err(|_| format!("{url} answered without an `accessToken`"))?;
        let now = crate::clock::unix_ms();
        let lifetime = got
            .expire_time
            .as_deref()
            .and_then(levee_wire::civil::rfc3339_unix_ms)
            .map_or(Duration::from_secs(3600), |e| {
                Duration::from_millis(e.saturating_sub(now))
            });
        Ok((got.access_token, lifetime))
    }

    /// The document the subject token is in: the source file, or the
    /// source URL's answer (with its headers).
    async fn subject_document(&self, x: &External) -> Result<Bytes, String> {
        let src = &x.credential_source;
        if let Some(file) = &src.file {
            return std::fs::read(file).map(Bytes::from).map_err(|e| {
                format!("cannot read the subject token file {}: {e}", file.display())
            });
        }
        let url = src.url.as_deref().unwrap_or_default();
        let mut req = http::Request::get(url);
        for (k, v) in &src.headers {
            req = req.header(k.as_str(), v.as_str());
        }
        let req = req
            .body(Full::new(Bytes::new()))
            .map_err(|_| format!("the credential source `{url}` is not a usable URL"))?;
        self.exchange(req, url).await
    }
}
