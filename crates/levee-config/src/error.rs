//! What can be wrong with a configuration. Every problem names the key, says
//! what to write instead, and — through [`ConfigError::AtLine`] — the line.

use crate::locate::{locate, Seg};
use levee_policy::admission::RateError;
use levee_policy::backoff::BackoffError;
use levee_policy::breaker::BreakerError;
use levee_policy::budget::BudgetError;
use levee_policy::classify::RetryOnError;
use levee_policy::deadline::DeadlinePolicyError;
use levee_policy::planner::PlanError;

/// Why a configuration was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error(
        "cannot read config file {path}: {source} (check the path and that Levee may read it)"
    )]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("config line {line}: {message}")]
    AtLine { line: usize, message: Problem },
    /// A problem with no line to point at (a raw configuration validated
    /// without the text it came from).
    #[error("config: {0}")]
    General(Problem),
}

/// The YAML a raw configuration was read from, and the path of the
/// configuration's node in it (empty when it is the whole document).
#[derive(Clone, Copy)]
pub(crate) struct Source<'a> {
    pub text: &'a str,
    pub prefix: &'a [Seg<'a>],
}

impl ConfigError {
    /// `problem`, at the line of the node `path` (relative to the
    /// configuration) leads to in `src` (or the nearest enclosing node the
    /// parser finds).
    pub(crate) fn at(src: Source<'_>, path: &[Seg<'_>], problem: impl Into<Problem>) -> Self {
        let message = problem.into();
        let mut full = src.prefix.to_vec();
        full.extend_from_slice(path);
        match locate(src.text, &full) {
            Some(line) => ConfigError::AtLine { line, message },
            None => ConfigError::General(message),
        }
    }

    /// The line the error points at, if any.
    pub fn line(&self) -> Option<usize> {
        match self {
            ConfigError::AtLine { line, .. } => Some(*line),
            _ => None,
        }
    }
}

/// A YAML reader's error as (line, message without the position the reader
/// appends to its text).
pub fn yaml_message(e: &serde_norway::Error) -> (Option<usize>, String) {
    let text = e.to_string();
    let Some(loc) = e.location() else {
        return (None, text);
    };
    let suffix = format!(" at line {} column {}", loc.line(), loc.column());
    let message = text.strip_suffix(&suffix).unwrap_or(&text).to_string();
    (Some(loc.line()), message)
}

/// ", on lines 2 and 5", or as much of it as is known.
fn lines_of(first: Option<usize>, again: Option<usize>) -> String {
    match (first, again) {
        (Some(a), Some(b)) if a == b => format!(", both on line {a}"),
        (Some(a), Some(b)) => format!(", on lines {a} and {b}"),
        (Some(a), None) | (None, Some(a)) => format!(", once on line {a}"),
        (None, None) => String::new(),
    }
}

/// One thing wrong with a configuration.
#[derive(Debug, thiserror::Error)]
pub enum Problem {
    /// Found while reading the YAML: a syntax error, an unknown key, a wrong
    /// type, or a value whose own check failed (a duration, an address, a
    /// URL, a number that must be at least 1). The reader prefixes the key.
    #[error("{0}")]
    Yaml(String),
    /// A key given twice in one mapping; the error's line is the second.
    #[error("{what} twice{}: {fix}", lines_of(*.first, *.again))]
    DuplicateKey {
        /// What is repeated, and where: "provider `openai` is defined".
        what: String,
        first: Option<usize>,
        again: Option<usize>,
        fix: &'static str,
    },
    #[error(
        "tabs are not allowed in YAML indentation (a tab at column {column}): indent with spaces"
    )]
    TabIndent { column: usize },
    #[error("provider `{provider}`: `circuit_breaker`: {source}")]
    ProviderBreaker {
        provider: String,
        source: BreakerError,
    },
    #[error("provider `{provider}`: {problem}")]
    ProviderField { provider: String, problem: String },
    #[error("provider `{provider}`: `rate_limit`: {source}")]
    ProviderRate { provider: String, source: RateError },
    #[error("route {number} (`{name}`): {problem}")]
    Route {
        /// 1-based, in file order.
        number: usize,
        name: String,
        problem: RouteProblem,
    },
    #[error("a key needs exactly one of `sha256` (the sha256 of the caller's key), `env` (a variable holding the key), or the pair `access_key_id` (16 to 128 letters and digits) and `secret_access_key_env` (a variable holding its secret), for SigV4-signed requests")]
    KeySource,
    #[error("`models` must list at least one model name (`gpt-4o`, or `gpt-4o*` for every name beginning so); leave it out to allow every model")]
    CallerModels,
    #[error("`limits.caller_names` must be at most {0}: each name is a value of the metrics' `caller` label")]
    CallerNames(usize),
    #[error("`budget.usd` must be a number of US dollars, 0 or more, like `50` (0 stops every priced call)")]
    BudgetAmount,
    #[error("caller `{0}` is given different `models`, `limits` or `budget` in two places: give a caller's rules once (keys that share a name share its rules)")]
    CallerRulesDiffer(String),
    #[error("`prices` names provider `{0}`, which `providers` does not list")]
    PriceProvider(String),
    #[error("`{0}` must be a number of US dollars per million tokens, 0 or more, like `2.50`")]
    PriceAmount(&'static str),
    #[error("an `admin.allowed_hosts` entry must be a host name like `levee-admin` or `levee.default.svc.cluster.local` (no scheme, port or path; `*.example.internal` for any name under one)")]
    AllowedHost,
    #[error(
        "`idempotency.max_entries` must be at least 1 and `idempotency.max_bytes` at least 1024"
    )]
    IdempotencyTooSmall,
    #[error("`limits.max_header_bytes` must be at least 1024: the official SDKs send ~700 bytes of header fields")]
    HeaderLimitTooSmall,
    #[error("`state.{0}` applies only with `backend: redis`: remove it or set `backend: redis`")]
    RedisOnly(&'static str),
    #[error("`state.nodes` lists a cluster's seed nodes or the sentinels: set `mode: cluster` or `mode: sentinel`, or use `url` for one server")]
    RedisNodesStandalone,
    #[error("`mode: cluster` and `mode: sentinel` need `nodes`: the cluster's seed nodes, or the sentinels, as Redis URLs")]
    RedisNodesNeeded,
    #[error("`mode: sentinel` needs `sentinel_master`: the primary's name the sentinels know (`sentinel monitor NAME …`)")]
    RedisSentinelMaster,
    #[error("`sentinel_master` applies only with `mode: sentinel`")]
    RedisMasterWithoutSentinel,
    #[error("`state.tls` needs a `rediss://` URL (TLS); with `redis://` the connection would be plain text")]
    RedisTlsScheme,
    #[error("`state.tls` needs `cert_file` and `key_file` together (mutual TLS), or neither")]
    RedisClientPair,
    #[error("provider `{0}`: `http2_max_streams` applies only to HTTP/2, and `http2: never` speaks HTTP/1.1: remove it or set `http2: auto` or `http2: always`")]
    Http2MaxStreamsUnused(String),
}

/// What is wrong with one route.
#[derive(Debug, thiserror::Error)]
pub enum RouteProblem {
    #[error("target `{name}` is not a provider (known: {known}): add it under `providers:` or fix the name")]
    UnknownProvider { name: String, known: String },
    #[error("`targets` must list at least one provider")]
    EmptyTargets,
    #[error("no `targets`, and no provider named `{guess}` to default to: add `targets: [{guess}]` or a provider of that name")]
    NoDefaultTarget { guess: String },
    #[error("its `circuit_breaker` differs from route {other}'s for provider `{provider}`: a provider's breakers are shared by every route that reaches it, so set them once (on the provider, or the same on each route)")]
    BreakerConflict { other: usize, provider: String },
    #[error("`circuit_breaker`: {0}")]
    Breaker(#[from] BreakerError),
    #[error("{0}")]
    Deadline(#[from] DeadlinePolicyError),
    #[error("`retry.on`: {0}")]
    RetryOn(#[from] RetryOnError),
    #[error("`retry.backoff`: {0}")]
    Backoff(#[from] BackoffError),
    #[error("`retry.backoff`: use either `schedule_ms` or `base_ms`/`multiplier`, not both")]
    BackoffBoth,
    #[error("{0}")]
    Plan(#[from] PlanError),
    #[error("`retry.budget`: {0}")]
    Budget(#[from] BudgetError),
    #[error("`attempt_timeout` must be positive: leave it out for no cap beyond the deadline")]
    ZeroAttemptTimeout,
    #[error("`passthrough` entry `{entry}`: {why}")]
    Passthrough { entry: String, why: &'static str },
    #[error("`passthrough_methods` entry `{method}` {why}")]
    PassthroughMethod { method: String, why: &'static str },
    #[error("`match` has exact names (`model`/`models`) and `model_prefix`: a route matches exact names or a prefix, not both; split it in two routes")]
    ExactAndPrefix,
    #[error("`match.models` is empty or names an empty model: list the exact names, like `[gpt-4o, gpt-4o-2024-08-06]`")]
    EmptyModels,
    #[error("model `{name}` is matched exactly by route {other} too: an exact name belongs to one route (for that endpoint)")]
    DuplicateExact { name: String, other: usize },
    #[error("a balanced group needs at least one member: `balance: [ {{ provider: NAME, model: MODEL, weight: 1 }}, ... ]`")]
    EmptyGroup,
    #[error(
        "`weight` must be a number above 0 (got {0}): a member's share of its group's traffic"
    )]
    Weight(f64),
    #[error("a target needs `provider: NAME` (or a provider's name alone)")]
    NoProvider,
    #[error("{0}: a target is a provider or a balanced group (`balance:`), not both")]
    GroupShape(&'static str),
}
