//! The Gemini API's OpenAI-compatible endpoint: OpenAI's wire format under
//! its own base URL and key. Only its errors need adapting: it answers them
//! in Google's shape (often as a one-element array), which callers get in
//! OpenAI's.

use http::Response;

use super::{google, Platform};
use crate::upstream::body::UpstreamBody;

#[derive(Debug)]
pub(super) struct Gemini;

impl Platform for Gemini {
    fn maps_answers(&self) -> bool {
        true
    }

    fn answer(
        &self,
        resp: Response<UpstreamBody>,
        _stream: bool,
        _path: &str,
    ) -> Response<UpstreamBody> {
        google::errors(resp, levee_wire::Dialect::OpenAi)
    }
}
