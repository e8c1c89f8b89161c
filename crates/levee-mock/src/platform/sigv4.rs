//! Bedrock's SigV4 check (`--api bedrock`): the `Authorization` field
//! parsed, the session token the key id requires, `x-amz-date` within 15
//! minutes of the mock's clock, and the signature recomputed with the AWS
//! SDK's own signer over the fields the client signed, then compared.

use std::time::{Duration, UNIX_EPOCH};

use aws_credential_types::Credentials;
use aws_sigv4::http_request::{sign, SignableBody, SignableRequest, SigningSettings};
use aws_sigv4::sign::v4;
use aws_smithy_runtime_api::client::identity::Identity;
use aws_smithy_types::date_time::{DateTime, Format};

use super::bedrock::{
    forbidden, TEST_ACCESS_KEY_ID, TEST_SECRET_ACCESS_KEY, TEST_SESSION_ACCESS_KEY_ID,
    TEST_SESSION_TOKEN,
};
use super::Refused;

/// How far a request's `x-amz-date` may be from the mock's clock.
const MAX_SKEW_S: u64 = 15 * 60;

const SIGNATURE_MISMATCH: &str = "The request signature we calculated does not match the signature you provided. Check your AWS Secret Access Key and signing method. Consult the service documentation for details.";

/// The parts of an `Authorization: AWS4-HMAC-SHA256 …` field.
struct Authorization<'a> {
    access_key_id: &'a str,
    date: &'a str,
    region: &'a str,
    service: &'a str,
    signed_headers: Vec<&'a str>,
    signature: &'a str,
}

fn parse_authorization(value: &str) -> Option<Authorization<'_>> {
    let rest = value.strip_prefix("AWS4-HMAC-SHA256 ")?;
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

/// Unix seconds of an `x-amz-date` (`20240102T030405Z`).
fn parse_amz_date(v: &str) -> Option<u64> {
    let b = v.as_bytes();
    let shape = b.len() == 16
        && b[8] == b'T'
        && b[15] == b'Z'
        && b[..8].iter().chain(&b[9..15]).all(u8::is_ascii_digit);
    if !shape {
        return None;
    }
    let rfc3339 = format!(
        "{}-{}-{}T{}:{}:{}Z",
        &v[..4],
        &v[4..6],
        &v[6..8],
        &v[9..11],
        &v[11..13],
        &v[13..15]
    );
    let t = DateTime::from_str(&rfc3339, Format::DateTime).ok()?;
    u64::try_from(t.secs()).ok()
}

/// `x-amz-date`'s form of unix seconds.
fn amz_date(secs: u64) -> String {
    let t = DateTime::from_secs(i64::try_from(secs).unwrap_or(i64::MAX));
    t.fmt(Format::DateTime)
        .map(|s| s.chars().filter(|c| *c != '-' && *c != ':').collect())
        .unwrap_or_default()
}

/// Checks the request's SigV4 signature as Bedrock does.
pub(super) fn verify(parts: &http::request::Parts, body: &[u8], now: u64) -> Result<(), Refused> {
    let field = |name: &str| parts.headers.get(name).and_then(|v| v.to_str().ok());
    let auth = authorization(field("authorization"))?;
    let token = session_token(&auth, field("x-amz-security-token"))?;
    let signed_at = signing_time(&auth, field("x-amz-date"), now)?;
    let signs = |name: &str| auth.signed_headers.contains(&name);
    if !signs("host") || !signs("x-amz-date") || (token.is_some() && !signs("x-amz-security-token"))
    {
        return Err(forbidden(
            "InvalidSignatureException",
            "'Host', 'X-Amz-Date' (and with temporary credentials 'X-Amz-Security-Token') must be SignedHeaders in the AWS Authorization.",
        ));
    }
    let expected = signature(parts, body, &auth, token, signed_at)
        .ok_or_else(|| forbidden("InvalidSignatureException", SIGNATURE_MISMATCH))?;
    if expected != auth.signature {
        return Err(forbidden("InvalidSignatureException", SIGNATURE_MISMATCH));
    }
    Ok(())
}

/// The `Authorization` field's parts: present, complete, and scoped to
/// the `bedrock` service.
fn authorization(field: Option<&str>) -> Result<Authorization<'_>, Refused> {
    let Some(auth) = field else {
        return Err(forbidden(
            "MissingAuthenticationTokenException",
            "Missing Authentication Token",
        ));
    };
    let auth = parse_authorization(auth).ok_or_else(|| {
        forbidden(
            "IncompleteSignatureException",
            "Authorization header requires 'Credential', 'Signature' and 'SignedHeaders' parameters (AWS4-HMAC-SHA256 Credential=KEY/DATE/REGION/bedrock/aws4_request, SignedHeaders=…, Signature=…).",
        )
    })?;
    if auth.service != "bedrock" {
        return Err(forbidden(
            "InvalidSignatureException",
            &format!(
                "Credential should be scoped to correct service: 'bedrock', not '{}'.",
                auth.service
            ),
        ));
    }
    Ok(auth)
}

/// The session token the access key id requires (`None` for long-term
/// credentials), checked against the request's `x-amz-security-token`: an
/// unknown key id, or a token missing, extra or wrong, is refused.
fn session_token(
    auth: &Authorization<'_>,
    given: Option<&str>,
) -> Result<Option<&'static str>, Refused> {
    let unrecognized = || {
        forbidden(
            "UnrecognizedClientException",
            "The security token included in the request is invalid.",
        )
    };
    let token = match auth.access_key_id {
        TEST_ACCESS_KEY_ID => None,
        TEST_SESSION_ACCESS_KEY_ID => Some(TEST_SESSION_TOKEN),
        _ => return Err(unrecognized()),
    };
    if given != token {
        return Err(unrecognized());
    }
    Ok(token)
}

/// Unix seconds of the request's `x-amz-date`: present, in ISO 8601 basic
/// format, on the credential scope's date, and within [`MAX_SKEW_S`] of
/// `now`.
fn signing_time(auth: &Authorization<'_>, date: Option<&str>, now: u64) -> Result<u64, Refused> {
    let Some(date) = date else {
        return Err(forbidden(
            "IncompleteSignatureException",
            "Authorization header requires existence of a 'X-Amz-Date' header.",
        ));
    };
    let Some(signed_at) = parse_amz_date(date) else {
        return Err(forbidden(
            "IncompleteSignatureException",
            &format!("Date must be in ISO-8601 'basic format'. Got '{date}'. See http://en.wikipedia.org/wiki/ISO_8601"),
        ));
    };
    if !date.starts_with(auth.date) || auth.date.len() != 8 {
        return Err(forbidden(
            "InvalidSignatureException",
            &format!(
                "Credential should be scoped to a valid date: '{}' is not the date of X-Amz-Date '{date}'.",
                auth.date
            ),
        ));
    }
    if signed_at + MAX_SKEW_S < now {
        return Err(forbidden(
            "InvalidSignatureException",
            &format!(
                "Signature expired: {date} is now earlier than {} ({} - 15 min.)",
                amz_date(now - MAX_SKEW_S),
                amz_date(now)
            ),
        ));
    }
    if signed_at > now + MAX_SKEW_S {
        return Err(forbidden(
            "InvalidSignatureException",
            &format!(
                "Signature not yet current: {date} is still later than {} ({} + 15 min.)",
                amz_date(now + MAX_SKEW_S),
                amz_date(now)
            ),
        ));
    }
    Ok(signed_at)
}

/// The signature the AWS SDK's signer gives this request over the fields
/// it names (`None` when a named field is missing).
fn signature(
    parts: &http::request::Parts,
    body: &[u8],
    auth: &Authorization<'_>,
    token: Option<&str>,
    signed_at: u64,
) -> Option<String> {
    let authority = parts.uri.authority().map(|a| a.as_str());
    let mut fields: Vec<(&str, &str)> = Vec::new();
    for name in &auth.signed_headers {
        // The signer writes these two from the time and the credentials.
        if matches!(*name, "x-amz-date" | "x-amz-security-token") {
            continue;
        }
        let mut values = parts.headers.get_all(*name).iter().peekable();
        if values.peek().is_none() {
            // HTTP/2 carries the host as `:authority`.
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
        TEST_SECRET_ACCESS_KEY,
        token.map(str::to_string),
        None,
        "levee-mock",
    ));
    let mut settings = SigningSettings::default();
    // Exactly the fields the client signed.
    settings.excluded_headers = None;
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region(auth.region)
        .name("bedrock")
        .time(UNIX_EPOCH + Duration::from_secs(signed_at))
        .settings(settings)
        .build()
        .ok()?
        .into();
    let (_, signature) = sign(request, &params).ok()?.into_parts();
    Some(signature)
}
