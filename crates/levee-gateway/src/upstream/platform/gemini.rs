//! The Gemini API's OpenAI-compatible endpoint: OpenAI's wire format under
//! its own base URL and key. Only its errors need adapting: it answers them
//! in Google's shape (often as a one-element array), which callers get in
//! OpenAI's.

use bytes::Bytes;
use http::Response;

use super::{done, google, Pending, Platform};
use crate::http::outbound::Outbound;
use crate::upstream::body::UpstreamBody;

#[derive(Debug)]
pub(super) struct Gemini;

impl Platform for Gemini {
    fn target(&self, _path: &str, _body: &Bytes) -> Result<Option<(String, Bytes)>, String> {
        Ok(None)
    }

    fn authorizes(&self) -> bool {
        false
    }

    fn authorize<'a>(&'a self, _req: &'a mut Outbound<Bytes>, _unix_ms: u64) -> Pending<'a> {
        done()
    }

    fn maps_answers(&self) -> bool {
        true
    }

    fn answer(&self, resp: Response<UpstreamBody>, _stream: bool) -> Response<UpstreamBody> {
        google::errors(resp, levee_wire::Dialect::OpenAi)
    }

    fn probe(&self, _unix_ms: u64) -> Pending<'_> {
        done()
    }
}
