//! What one target of a route is sent for one request, prepared at
//! admission (`handler`) and read by the driver and the planner's
//! dependencies (`attempt`).

use bytes::Bytes;

/// What one target of the route is sent, prepared at admission.
pub(crate) struct Plan {
    /// The body: the caller's, its model rewritten, or translated.
    pub(crate) body: Bytes,
    pub(crate) uri: http::Uri,
    /// How the exchange crosses dialects (`None`: the same dialect).
    pub(crate) crossing: Option<crate::request::crossing::Crossing>,
    /// Skipped for this request: the target cannot carry it, for this
    /// reason.
    pub(crate) skip: Option<crate::observe::outcome::SkipReason>,
    /// Never sent: the request may be sent only once, and an earlier target
    /// takes it.
    pub(crate) held: bool,
    /// The caller's parameters left out for this target (the route's
    /// `on_untranslatable: drop`), comma-separated.
    pub(crate) dropped: Option<String>,
    /// Levee asked for the usage chunk the caller did not: it is left out
    /// of the caller's stream.
    pub(crate) strip_usage: bool,
}

impl Plan {
    pub(crate) fn skipped(&self) -> bool {
        self.skip.is_some() || self.held
    }
}
