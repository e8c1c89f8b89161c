//! One provider's model list as last fetched (`GET /v1/models` reads and
//! refreshes it in [`crate::request::models`]; each provider's runtime holds one).

use std::sync::Arc;

/// One model as a provider lists it, in either dialect's terms.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listed {
    pub id: String,
    /// OpenAI's `created` (unix seconds), or Anthropic's `created_at` read.
    pub created: i64,
    /// Anthropic's `created_at` as the provider wrote it.
    pub created_at: Option<String>,
    pub display_name: Option<String>,
    pub owned_by: Option<String>,
    pub lifecycle: Option<String>,
}

/// A provider's list as last fetched, and when.
pub(crate) struct Fetched {
    pub(crate) at: levee_policy::Instant,
    /// `None`: the fetch failed.
    pub(crate) models: Option<Arc<[Listed]>>,
}

/// One provider's model list, fetched when asked for and kept a while.
/// Requests arriving while a fetch runs wait for it rather than starting
/// their own.
#[derive(Default)]
pub struct ModelCache {
    pub(crate) state: tokio::sync::Mutex<Option<Fetched>>,
}

impl std::fmt::Debug for ModelCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelCache").finish_non_exhaustive()
    }
}
