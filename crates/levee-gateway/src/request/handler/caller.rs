//! Who is calling: the gateway key a request carries, checked in constant
//! time, and the caller it names.

use super::*;

/// The token of an `authorization` value: the auth scheme is
/// case-insensitive (`Bearer`, `bearer`, `BEARER`).
pub(super) fn bearer_token(v: &[u8]) -> &[u8] {
    match v.get(..7) {
        Some(scheme) if scheme.eq_ignore_ascii_case(b"bearer ") => v[7..].trim_ascii_start(),
        _ => v,
    }
}

/// The caller's identity for idempotency: its gateway key, else a digest of
/// the credentials it sent, else anonymous. `Err` (401) when gateway keys
/// are configured and none matches.
pub(super) fn authenticate(shared: &Shared, said: &Said) -> Result<Caller, LeveeError> {
    if sigv4::is_signed(said.authorization) {
        return signer(shared, said.authorization);
    }
    let presented = said.credentials();
    if shared.keys.is_empty() {
        return Ok(Caller::Presented(presented));
    }
    let digest = presented
        .as_ref()
        .map(|(v, bearer)| credential_digest(v, *bearer));
    match digest {
        Some(d) if crate::observe::census::key_index(&shared.keys, &d).is_some() => {
            Ok(Caller::Checked(d))
        }
        _ => {
            let msg = "levee: missing or invalid API key for this gateway";
            Err(LeveeError::of(Why::Unauthorized, msg))
        }
    }
}

/// The caller of a SigV4-signed request: the key pair its access key id
/// names (its signature is checked once the body is read), or without
/// gateway keys, the access key id as the credentials it presented.
fn signer(shared: &Shared, authorization: Option<&HeaderValue>) -> Result<Caller, LeveeError> {
    let id = authorization.and_then(sigv4::access_key_id);
    if shared.keys.is_empty() {
        let presented = id.and_then(|id| HeaderValue::from_str(id).ok());
        return Ok(Caller::Presented(presented.map(|v| (v, false))));
    }
    match shared
        .signing
        .iter()
        .find(|k| Some(k.access_key_id.as_str()) == id)
    {
        Some(k) => Ok(Caller::Checked(k.digest)),
        None => {
            let msg = "levee: the request is signed with an access key id that is not one of this gateway's keys";
            Err(LeveeError::of(Why::Unauthorized, msg))
        }
    }
}

/// Who sent a request. The SHA-256 digest of its credentials (~3,600
/// instructions for an OpenAI key, 5 % of a whole proxied request from an
/// SDK) is
/// made only when something needs it: checking it against the gateway's
/// keys, or claiming an idempotency key the caller brought.
pub(super) enum Caller {
    /// Matched one of the gateway's keys: this digest.
    Checked([u8; 32]),
    /// No gateway keys to check against: the `x-api-key` value, or the
    /// `authorization` value (`true`: its token is after the scheme), if any.
    Presented(Option<(HeaderValue, bool)>),
}

impl Caller {
    /// The digest of the credentials sent; all zero for none.
    pub(super) fn digest(&self) -> [u8; 32] {
        match self {
            Caller::Checked(d) => *d,
            Caller::Presented(Some((v, bearer))) => credential_digest(v, *bearer),
            Caller::Presented(None) => [0; 32],
        }
    }

    /// Where a keyed request lives in the idempotency store: the bucket it
    /// shares the store's room with, and its key there. Fair shares go to
    /// the callers the operator named (the gateway's keys). On a keyless
    /// gateway anyone can make up credentials (100 made-up `authorization`
    /// values once took 100 shares and evicted another caller's answers),
    /// so keyless callers share one bucket; each still finds only its own
    /// answers, its credentials' digest being part of its key.
    pub(super) fn store_scope(&self, digest: [u8; 32], store_key: &str) -> ([u8; 32], String) {
        match self {
            Caller::Checked(_) => (digest, store_key.to_string()),
            Caller::Presented(_) => {
                let mut scoped = String::with_capacity(65 + store_key.len());
                for b in digest {
                    scoped.push(char::from(HEX[usize::from(b >> 4)]));
                    scoped.push(char::from(HEX[usize::from(b & 0xf)]));
                }
                scoped.push(' ');
                scoped.push_str(store_key);
                (KEYLESS, scoped)
            }
        }
    }

    /// Which of the gateway's keys the caller used.
    pub(super) fn key_index(&self, keys: &[[u8; 32]]) -> Option<usize> {
        match self {
            Caller::Checked(d) => crate::observe::census::key_index(keys, d),
            Caller::Presented(_) => None,
        }
    }
}

pub(super) fn credential_digest(v: &HeaderValue, bearer: bool) -> [u8; 32] {
    let token = if bearer {
        bearer_token(v.as_bytes())
    } else {
        v.as_bytes()
    };
    Sha256::digest(token).into()
}
