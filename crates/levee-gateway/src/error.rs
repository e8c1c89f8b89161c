//! The boxed error that bodies and connectors carry across module lines.

/// Errors a body or a connection may fail with.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
