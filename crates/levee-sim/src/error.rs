//! The simulator's errors: each says where the problem is and what to write instead.

/// Why a scenario could not be loaded or a run could not be written out.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error("cannot read scenario {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("scenario line {line}: {message}")]
    AtLine { line: usize, message: String },
    #[error("scenario: {0}")]
    General(String),
    #[error("trace {path} line {line}: {message}")]
    Trace {
        path: String,
        line: usize,
        message: String,
    },
    #[error("cannot write plot {path}: {message}")]
    Plot { path: String, message: String },
}

impl SimError {
    /// An error at `line` when known, else a general one.
    pub(crate) fn at(line: Option<usize>, message: impl Into<String>) -> Self {
        match line {
            Some(line) => SimError::AtLine {
                line,
                message: message.into(),
            },
            None => SimError::General(message.into()),
        }
    }
}
