//! Callers that sign with AWS Signature Version 4 (boto3, the AWS SDKs,
//! anthropic's `AnthropicBedrock`), checked against the key pairs the
//! gateway issues in `keys:` (`access_key_id` with its secret), as an
//! S3-compatible store checks them: the signature is recomputed by the AWS
//! SDK's own signer over the request as it arrived (the fields it names,
//! the path and query, the body) and compared in constant time. Any region
//! is accepted; the scope's service must be `bedrock`; `x-amz-date` must
//! be within 15 minutes of the gateway's clock; the pairs are long-term,
//! so a session token is refused.

use std::time::{Duration, UNIX_EPOCH};

use aws_credential_types::Credentials;
use aws_sigv4::http_request::{sign, SignableBody, SignableRequest, SigningSettings};
use aws_sigv4::sign::v4;
use aws_smithy_runtime_api::client::identity::Identity;
use aws_smithy_types::date_time::{DateTime, Format};

use super::*;

/// The scheme of a SigV4 `authorization` value.
const SCHEME: &str = crate::http::callerfields::SIGV4_SCHEME;

/// How far a request's `x-amz-date` may be from the gateway's clock.
const MAX_SKEW_S: u64 = 15 * 60;

/// The parts of an `authorization: AWS4-HMAC-SHA256 …` value.
struct Authorization<'a> {
    access_key_id: &'a str,
    date: &'a str,
    region: &'a str,
    service: &'a str,
    signed_headers: Vec<&'a str>,
    signature: &'a str,
}

fn parse(value: &str) -> Option<Authorization<'_>> {
    let rest = value.strip_prefix(SCHEME)?;
    let (mut credential, mut signed, mut signature) = (None, None, None);
    for part in rest.split(',') {
        match part.trim().split_once('=') {
            Some(("Credential", v)) => credential = Some(v),
            Some(("SignedHeaders", v)) => signed = Some(v),
            Some(("Signature", v)) => signature = Some(v),
            _ => {}
        }
    }
    let scope: Vec<&str> = credential?.split('/').collect();
    let [access_key_id, date, region, service, "aws4_request"] = scope[..] else {
        return None;
    };
    Some(Authorization {
        access_key_id,
        date,
        region,
        service,
        signed_headers: signed?.split(';').collect(),
        signature: signature?,
    })
}

/// Whether `authorization` is a SigV4 signature.
pub(super) fn is_signed(authorization: Option<&HeaderValue>) -> bool {
    authorization.is_some_and(|v| crate::http::callerfields::is_sigv4(v.as_bytes()))
}

/// The access key id a SigV4 `authorization` names (`None`: not SigV4, or
/// malformed).
pub(super) fn access_key_id(authorization: &HeaderValue) -> Option<&str> {
    parse(authorization.to_str().ok()?).map(|a| a.access_key_id)
}

fn refused(msg: String) -> LeveeError {
    LeveeError::of(Why::Unauthorized, msg)
}

/// Checks a signed request's signature over `parts` and `body`, as it
/// arrived, when the gateway has keys (without keys every caller is
/// admitted, a signing one too). Unsigned requests pass: their key was
/// checked already.
pub(super) fn verify(
    shared: &Shared,
    parts: &http::request::Parts,
    body: &[u8],
) -> Result<(), LeveeError> {
    // A gateway without keys checks no signature: the lookup is skipped too.
    if shared.keys.is_empty() {
        return Ok(());
    }
    let Some(value) = parts.headers.get(http::header::AUTHORIZATION) else {
        return Ok(());
    };
    if !is_signed(Some(value)) {
        return Ok(());
    }
    let text = value.to_str().unwrap_or("");
    let auth = parse(text).ok_or_else(|| {
        refused("levee: the SigV4 authorization needs Credential=KEY/DATE/REGION/SERVICE/aws4_request, SignedHeaders= and Signature=".into())
    })?;
    let key = shared
        .signing
        .iter()
        .find(|k| k.access_key_id == auth.access_key_id)
        .ok_or_else(|| {
            refused("levee: the access key id is not one of this gateway's keys".into())
        })?;
    if auth.service != "bedrock" {
        return Err(refused(format!(
            "levee: the signature must be scoped to service `bedrock`, not `{}`",
            auth.service
        )));
    }
    if parts.headers.contains_key("x-amz-security-token") {
        return Err(refused(
            "levee: the gateway's key pairs are long-term credentials: send no session token"
                .into(),
        ));
    }
    let field = |n: &str| parts.headers.get(n).and_then(|v| v.to_str().ok());
    let now = shared.clock.unix_ms() / 1000;
    let signed_at = signing_time(&auth, field("x-amz-date"), now)?;
    if !auth.signed_headers.contains(&"host") || !auth.signed_headers.contains(&"x-amz-date") {
        return Err(refused(
            "levee: `host` and `x-amz-date` must be among the signed headers".into(),
        ));
    }
    let expected = signature(parts, body, &auth, &key.secret, signed_at).unwrap_or_default();
    if !constant_time_eq(expected.as_bytes(), auth.signature.as_bytes()) {
        return Err(refused("levee: the request signature does not match: check the secret access key and that nothing between the client and the gateway rewrites the request".into()));
    }
    Ok(())
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Unix seconds of `x-amz-date` (`20240102T030405Z`): present, on the
/// scope's date, within [`MAX_SKEW_S`] of `now`.
fn signing_time(auth: &Authorization<'_>, date: Option<&str>, now: u64) -> Result<u64, LeveeError> {
    let date = date.ok_or_else(|| refused("levee: a signed request needs `x-amz-date`".into()))?;
    let b = date.as_bytes();
    let shape = b.len() == 16
        && b[8] == b'T'
        && b[15] == b'Z'
        && b[..8].iter().chain(&b[9..15]).all(u8::is_ascii_digit);
    let bad = || {
        refused(format!("levee: `x-amz-date: {date}` is not an ISO 8601 basic time on the credential scope's date"))
    };
    if !shape || !date.starts_with(auth.date) || auth.date.len() != 8 {
        return Err(bad());
    }
    let rfc3339 = format!(
        "{}-{}-{}T{}:{}:{}Z",
        &date[..4],
        &date[4..6],
        &date[6..8],
        &date[9..11],
        &date[11..13],
        &date[13..15]
    );
    let t = DateTime::from_str(&rfc3339, Format::DateTime).map_err(|_| bad())?;
    let t = u64::try_from(t.secs()).map_err(|_| bad())?;
    if t.abs_diff(now) > MAX_SKEW_S {
        return Err(refused(format!(
            "levee: the signature's time {date} is more than 15 minutes from the gateway's clock"
        )));
    }
    Ok(t)
}

/// The signature the AWS SDK's signer gives the request over the fields it
/// names (`None` when a named field is missing).
fn signature(
    parts: &http::request::Parts,
    body: &[u8],
    auth: &Authorization<'_>,
    secret: &str,
    signed_at: u64,
) -> Option<String> {
    let authority = parts.uri.authority().map(|a| a.as_str());
    let mut fields: Vec<(&str, &str)> = Vec::new();
    for name in &auth.signed_headers {
        // The signer writes `x-amz-date` from the time.
        if *name == "x-amz-date" {
            continue;
        }
        let mut values = parts.headers.get_all(*name).iter().peekable();
        if values.peek().is_none() {
            fields.push((name, authority.filter(|_| *name == "host")?));
        }
        for v in values {
            fields.push((name, v.to_str().ok()?));
        }
    }
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let request = SignableRequest::new(
        parts.method.as_str(),
        path,
        fields.into_iter(),
        SignableBody::Bytes(body),
    )
    .ok()?;
    let identity = Identity::from(Credentials::new(
        auth.access_key_id,
        secret,
        None,
        None,
        "levee-caller",
    ));
    let mut settings = SigningSettings::default();
    // Exactly the fields the client signed.
    settings.excluded_headers = None;
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region(auth.region)
        .name(auth.service)
        .time(UNIX_EPOCH + Duration::from_secs(signed_at))
        .settings(settings)
        .build()
        .ok()?
        .into();
    let (_, signature) = sign(request, &params).ok()?.into_parts();
    Some(signature)
}
