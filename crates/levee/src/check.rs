//! `levee check`: validate a config, print each route's retry schedule and the
//! caller census — which callers' deadlines let a retry (or the fallback)
//! start at all (a deadline-aware retry never runs when the
//! callers' deadlines are too short).
//!
//! Every number comes from `levee_policy::RoutePolicy::schedule` and
//! `census`, the code the gateway decides with: derived, not restated here.

use crate::table::{secs, table, yes_no};
use levee_config::{Api, Caller, Config, ConfigError, InFlightCap, Route};
use levee_policy::AttemptKind;
use levee_wire::Dialect;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Flags of `levee check`.
#[derive(Debug, clap::Args)]
pub struct CheckArgs {
    /// Config file.
    #[arg(long, required_unless_present = "census_from")]
    pub config: Option<PathBuf>,
    /// Print the census a running gateway keeps from its live traffic,
    /// read from its admin listener (like http://127.0.0.1:9090), instead of
    /// judging a config's `callers:`. With `--strict` and a callers list
    /// (`--callers`, or `--config`'s `callers:`), a live caller missing from
    /// the list fails the check.
    #[arg(long, value_name = "URL", conflicts_with = "probe")]
    pub census_from: Option<String>,
    /// YAML list of callers `[{ name, deadline }]`, instead of the config's `callers:`.
    #[arg(long, value_name = "FILE")]
    pub callers: Option<PathBuf>,
    /// Exit 1 when a caller can neither retry nor fall back on some route,
    /// or when a route is predicted to answer fewer calls than no gateway
    /// in one of the standard incidents;
    /// with `--census-from`, also when a live caller cannot retry (its
    /// fallback alone does not pass) or is not on the callers list.
    #[arg(long)]
    pub strict: bool,
    /// Also reach each provider's base_url from here (DNS, TCP, TLS for
    /// https) and exit 1 when one cannot be reached.
    #[arg(long, requires = "config")]
    pub probe: bool,
    /// The longest each probe step may take, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 5000)]
    pub probe_timeout_ms: u64,
    /// Warn, instead of failing, when a variable the config reads a secret
    /// from (a provider's `api_key_env`, a `{ env: VAR }` header or query
    /// value, a caller key's `env`) is not set here: for
    /// checking a config where its secrets are absent, as in CI. `serve` and
    /// a reload still refuse the config where the variable is not set.
    #[arg(long, requires = "config")]
    pub allow_missing_env: bool,
}

/// Why `--callers` could not be read.
#[derive(Debug, thiserror::Error)]
enum CallersError {
    #[error("cannot read callers file {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("callers file {path} line {line}: {message} (write a list like `- {{ name: queue-worker, deadline: 40s }}`)")]
    AtLine {
        path: String,
        line: usize,
        message: String,
    },
    #[error("callers file {path}: {message} (write a list like `- {{ name: queue-worker, deadline: 40s }}`)")]
    General { path: String, message: String },
}

fn load_callers(path: &Path) -> Result<Vec<Caller>, CallersError> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| CallersError::Read {
        path: shown.clone(),
        source,
    })?;
    levee_config::parse_callers(&text).map_err(|e| match e {
        ConfigError::AtLine { line, message } => CallersError::AtLine {
            path: shown,
            line,
            message: message.to_string(),
        },
        other => CallersError::General {
            path: shown,
            message: other.to_string(),
        },
    })
}

/// Runs `levee check`; returns the exit code.
pub fn run(args: CheckArgs) -> i32 {
    if let Some(url) = &args.census_from {
        let listed = match (&args.callers, &args.config) {
            (Some(p), _) => match load_callers(p) {
                Ok(c) => Some(c),
                Err(e) => {
                    eprintln!("levee check: {e}");
                    return 1;
                }
            },
            (None, Some(path)) => match Config::load(path) {
                Ok(c) => Some(c.callers),
                Err(e) => {
                    eprintln!("levee check: {}: {e}", path.display());
                    return 1;
                }
            },
            (None, None) => None,
        };
        return live(url, args.strict, listed.as_deref());
    }
    let Some(path) = &args.config else {
        eprintln!("levee check: pass --config FILE or --census-from URL");
        return 1;
    };
    let config = match Config::load(path) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("levee check: {}: {e}", path.display());
            return 1;
        }
    };
    let callers = match &args.callers {
        Some(p) => match load_callers(p) {
            Ok(c) => c,
            Err(e) => {
                eprintln!("levee check: {e}");
                return 1;
            }
        },
        None => config.callers.clone(),
    };
    let mut refused = false;
    for (missing, problem) in key_problems(&config, path) {
        let shown = path.display();
        if missing && args.allow_missing_env {
            eprintln!("levee check: warning: {shown}: {problem}; `levee serve` and a SIGHUP reload refuse this config where it is not set");
        } else {
            refused = true;
            let hint = match missing {
                true => " (to check it where its secrets are absent, as in CI, pass --allow-missing-env)",
                false => "",
            };
            eprintln!("levee check: {shown}: {problem}; `levee serve` and a SIGHUP reload refuse this config{hint}");
        }
    }
    if refused {
        return 1;
    }
    let (mut text, stranded) = render(&config, path, &callers);
    let worse = crate::predict::report(&mut text, &config, path);
    print!("{text}");
    let probed = match args.probe {
        true => crate::probe::run(&config, Duration::from_millis(args.probe_timeout_ms)),
        false => 0,
    };
    if args.strict && crate::census_check::report_stranded(&stranded) {
        return 1;
    }
    if args.strict && worse > 0 {
        eprintln!("levee check --strict: {worse} incident prediction(s) worse than no gateway");
        return 1;
    }
    probed
}

/// Every value the gateway would read from the environment at start and on
/// a reload and could not read here (keys through the gateway's own
/// functions, so `check` refuses what `serve` refuses), each with its config
/// line when the file can be read again: (only the variable is missing, the
/// problem).
fn key_problems(config: &Config, path: &Path) -> Vec<(bool, String)> {
    use levee_config::locate::{locate, Seg};
    use levee_gateway::preflight::UpstreamError;
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let at = |segs: &[Seg<'_>]| {
        locate(&text, segs).map_or(String::new(), |line| format!("config line {line}: "))
    };
    let mut out = Vec::new();
    for p in &config.providers {
        if let Err(e) = levee_gateway::preflight::provider_auth(p) {
            let missing = matches!(e, UpstreamError::MissingKey { .. });
            let line = at(&[
                Seg::Key("providers"),
                Seg::Key(&p.name),
                Seg::Key("api_key_env"),
            ]);
            out.push((missing, format!("{line}{e}")));
        }
        if let Err(e) = levee_gateway::preflight::PlatformRuntime::new(p) {
            use levee_gateway::preflight::PlatformError;
            let missing = matches!(e, PlatformError::MissingCredentials { .. });
            let line = at(&[Seg::Key("providers"), Seg::Key(&p.name), Seg::Key("api")]);
            out.push((missing, format!("{line}{e}")));
        }
        for problem in levee_gateway::preflight::provider_extras(p)
            .err()
            .unwrap_or_default()
        {
            let missing = matches!(problem.error, UpstreamError::MissingValue { .. });
            let line = at(&[
                Seg::Key("providers"),
                Seg::Key(&p.name),
                Seg::Key(problem.field),
                Seg::Key(&problem.name),
            ]);
            out.push((missing, format!("{line}{}", problem.error)));
        }
    }
    if let Err(e) = levee_gateway::preflight::check_backend(&config.state) {
        let line = at(&[Seg::Key("state"), Seg::Key(e.key())]);
        out.push((e.is_missing(), format!("{line}{e}")));
    }
    for (i, key) in config.keys.iter().enumerate() {
        if let Err(e) = levee_gateway::preflight::caller_key(key) {
            let line = at(&[Seg::Key("keys"), Seg::Index(i), Seg::Key("env")]);
            out.push((true, format!("{line}{e}")));
        }
    }
    out
}

/// `levee check --census-from`: the census a running gateway measured,
/// judged against the callers list when one is given.
fn live(url: &str, strict: bool, listed: Option<&[levee_config::Caller]>) -> i32 {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("levee check: cannot start an async runtime: {e}");
            return 1;
        }
    };
    let report = match runtime.block_on(levee_gateway::census::fetch(url)) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("levee check: {e}");
            return 1;
        }
    };
    let (text, stranded) = render_live(url, &report);
    print!("{text}");
    // A caller the list does not name: a new service nobody judged.
    let unlisted: Vec<&str> = match listed {
        Some(list) => report
            .callers
            .iter()
            .map(|c| c.name.as_str())
            .filter(|name| !list.iter().any(|l| l.name == *name))
            .collect(),
        None => Vec::new(),
    };
    if listed.is_none() && strict {
        eprintln!("levee check --strict: no callers list given (--callers FILE or --config FILE): live callers are not checked against one");
    }
    if !strict {
        return 0;
    }
    let mut failed = false;
    for name in &unlisted {
        failed = true;
        eprintln!(
            "levee check --strict: caller `{name}` sends traffic but is not on the callers list: add it with its deadline, so its retries are judged before it meets an incident"
        );
    }
    for (caller, route, fallback) in &stranded {
        failed = true;
        let what = match fallback {
            true => "cannot retry (only its fallback can start)",
            false => "can neither retry nor fall back",
        };
        eprintln!(
            "levee check --strict: caller `{caller}` (observed p50 deadline) {what} on route `{route}`: lengthen its deadline or shorten the route's schedule"
        );
    }
    i32::from(failed)
}

/// The live census as text, and every (caller, route) pair whose retry
/// cannot start at the caller's observed p50 deadline (`true`: its
/// fallback can).
fn render_live(
    url: &str,
    report: &levee_gateway::census::CensusReport,
) -> (String, Vec<(String, String, bool)>) {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "census from {url}: {} caller(s) seen, {} target(s)",
        report.callers.len(),
        report.targets.len()
    );
    let (rows, stranded) = live_caller_rows(report);
    let _ = writeln!(
        out,
        "\ncaller census (observed; judged at each caller's p50 deadline)"
    );
    if rows.is_empty() {
        let _ = writeln!(out, "  no requests seen yet");
    } else {
        table(
            &mut out,
            &[
                "caller",
                "requests",
                "deadline p5",
                "deadline p50",
                "route",
                "retry can start?",
                "fallback reachable?",
            ],
            &rows,
        );
    }
    let _ = writeln!(out, "\ntargets");
    table(
        &mut out,
        &[
            "route",
            "provider",
            "expected_attempt",
            "observed p99",
            "warning",
        ],
        &live_target_rows(report),
    );
    (out, stranded)
}

/// A duration in milliseconds as seconds, or `-` when none was observed.
fn observed_ms(v: Option<u64>) -> String {
    v.map_or("-".to_string(), |m| secs(Duration::from_millis(m)))
}

/// A (caller, route) pair whose retry cannot start at the caller's
/// observed p50 deadline, and whether its fallback can.
type Stranded = (String, String, bool);

/// One census row per (caller, route) pair, and the pairs whose retry
/// cannot start at the caller's observed p50 deadline.
fn live_caller_rows(
    report: &levee_gateway::census::CensusReport,
) -> (Vec<Vec<String>>, Vec<Stranded>) {
    let mut stranded = Vec::new();
    let mut rows = Vec::new();
    for c in &report.callers {
        for r in &c.routes {
            if !r.retry_can_start {
                let fallback = r.fallback_can_start == Some(true);
                stranded.push((c.name.clone(), r.route.clone(), fallback));
            }
            rows.push(vec![
                c.name.clone(),
                c.requests.to_string(),
                observed_ms(c.deadline_ms.p5),
                observed_ms(c.deadline_ms.p50),
                r.route.clone(),
                yes_no(Some(r.retry_can_start)).to_string(),
                yes_no(r.fallback_can_start).to_string(),
            ]);
        }
    }
    (rows, stranded)
}

/// One row per route target: its expected attempt time, its observed p99,
/// and a warning when the p99 is above what the census assumes.
fn live_target_rows(report: &levee_gateway::census::CensusReport) -> Vec<Vec<String>> {
    report
        .targets
        .iter()
        .map(|t| {
            let over = t.observed_p99_ms.is_some_and(|p| p > t.expected_attempt_ms);
            vec![
                t.route.clone(),
                t.provider.clone(),
                secs(Duration::from_millis(t.expected_attempt_ms)),
                observed_ms(t.observed_p99_ms),
                if over {
                    "p99 above expected_attempt_ms: the census rests on it; raise it".to_string()
                } else {
                    String::new()
                },
            ]
        })
        .collect()
}

fn kind(k: AttemptKind) -> &'static str {
    match k {
        AttemptKind::First => "first",
        AttemptKind::Retry => "retry",
        AttemptKind::Fallback => "fallback",
    }
}

fn target_name(config: &Config, route: &Route, t: usize) -> String {
    let target = &route.targets[t];
    let provider = &config.providers[target.provider].name;
    match &target.model {
        Some(m) => format!("{provider} ({m})"),
        None => provider.clone(),
    }
}

/// The report, and every (caller, route) pair that can neither retry nor fall back.
fn render(
    config: &Config,
    path: &Path,
    callers: &[Caller],
) -> (String, Vec<crate::census_check::Stranded>) {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{}: valid — {} provider(s), {} route(s), {} caller(s)",
        path.display(),
        config.providers.len(),
        config.routes.len(),
        callers.len()
    );
    render_provider_caps(&mut out, config);
    for route in &config.routes {
        render_route(&mut out, config, route);
    }
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let routing = crate::routing::warnings(config, &text);
    if !routing.is_empty() {
        let _ = writeln!(out, "\nrouting");
        for w in routing {
            let _ = writeln!(out, "  warning: {w}");
        }
    }
    crate::floors::render(&mut out, config);
    let stranded = crate::census_check::render_census(&mut out, config, callers);
    (out, stranded)
}

/// A route's targets, deadline, bulkhead and retry schedule.
fn render_route(out: &mut String, config: &Config, route: &Route) {
    let _ = writeln!(out, "\nroute `{}`", route.name);
    let expected: Vec<String> = route
        .targets
        .iter()
        .enumerate()
        .map(|(t, x)| {
            format!(
                "{} expected_attempt {}",
                target_name(config, route, t),
                secs(x.expected_attempt)
            )
        })
        .collect();
    let _ = writeln!(out, "  targets: {}", expected.join("; "));
    let _ = writeln!(
        out,
        "  deadline: default {}, max {}",
        secs(route.deadline.default_deadline()),
        secs(route.deadline.max())
    );
    render_route_cap(out, config, route);
    let rows: Vec<Vec<String>> = route
        .policy
        .schedule()
        .iter()
        .map(|s| {
            vec![
                s.attempt.to_string(),
                target_name(config, route, s.target),
                kind(s.kind).to_string(),
                if s.wait.is_zero() {
                    "-".to_string()
                } else {
                    secs(s.wait)
                },
                match s.kind {
                    AttemptKind::Fallback => "after a failure".to_string(),
                    _ => secs(s.start_after),
                },
                secs(s.needs_remaining),
                secs(s.needs_deadline),
            ]
        })
        .collect();
    table(
        out,
        &[
            "attempt",
            "target",
            "kind",
            "wait (max)",
            "earliest start",
            "needs remaining",
            "needs deadline",
        ],
        &rows,
    );
    for w in dialect_warnings(config, route) {
        let _ = writeln!(out, "  warning: {w}");
    }
}

fn api_name(api: Api) -> &'static str {
    match api {
        Api::OpenAi => "openai",
        Api::Anthropic => "anthropic",
    }
}

/// A route whose targets speak another dialect than its callers (the
/// `match.path`'s dialect, else the first target's): those targets get
/// translated requests, and requests that use what their dialect cannot
/// carry skip them — the fallback may then not be there when it is needed.
fn dialect_warnings(config: &Config, route: &Route) -> Vec<String> {
    let api_of = |t: usize| config.providers[route.targets[t].provider].api;
    let callers = match route.matcher.path.as_deref().map(Dialect::of_path) {
        Some(Some(Dialect::Anthropic)) => Api::Anthropic,
        Some(_) => Api::OpenAi,
        None => api_of(0),
    };
    let crossing: Vec<String> = (0..route.targets.len())
        .filter(|&t| api_of(t) != callers)
        .map(|t| target_name(config, route, t))
        .collect();
    if crossing.is_empty() {
        return Vec::new();
    }
    let other = if callers == Api::Anthropic {
        "OpenAI Chat Completions cannot carry thinking, documents, citations, server tools, top_k or tool results marked is_error"
    } else {
        "Anthropic Messages cannot carry n > 1, logprobs, a temperature above 1, penalties, seed, response_format, audio or file parts, strict or custom tools, and embeddings or Responses requests"
    };
    vec![format!(
        "{} speak(s) {}, not the {} dialect of this route's callers: requests are translated for them, and a request using what they cannot carry skips them (counted in levee_translation_refused_total{{reason}}). {other}.",
        crossing.join(", "),
        api_name(if callers == Api::Anthropic { Api::OpenAi } else { Api::Anthropic }),
        api_name(callers),
    )]
}

/// Each provider's in-flight cap and where it comes from.
fn render_provider_caps(out: &mut String, config: &Config) {
    let _ = writeln!(
        out,
        "\nproviders (max_in_flight: upstream attempts in flight above which Levee sheds)"
    );
    for (ix, p) in config.providers.iter().enumerate() {
        let why = match p.max_in_flight_from {
            InFlightCap::Configured => format!("{} (configured)", p.max_in_flight),
            InFlightCap::Derived {
                requests_per_minute,
                burst,
                expected_attempt,
            } => format!(
                "{} (derived: rate_limit {requests_per_minute}/min for {} each, the longest expected_attempt of its targets, plus burst {burst})",
                p.max_in_flight,
                secs(expected_attempt)
            ),
            InFlightCap::None => {
                let bound: u64 = config
                    .routes
                    .iter()
                    .filter(|r| r.targets.iter().any(|t| t.provider == ix))
                    .map(|r| u64::from(r.max_in_flight))
                    .sum();
                format!("none (no rate_limit to size it from; the bulkheads of the routes using it bound it at {bound})")
            }
        };
        let _ = writeln!(out, "  provider `{}`: max_in_flight {why}", p.name);
    }
}

/// A route's bulkhead, what its first target's provider allows, and the
/// request rate that holds at the first target's expected attempt time.
fn render_route_cap(out: &mut String, config: &Config, route: &Route) {
    let origin = if route.max_in_flight == levee_config::defaults::ROUTE_MAX_IN_FLIGHT {
        "default"
    } else {
        "configured"
    };
    let first = &route.targets[0];
    let provider = &config.providers[first.provider];
    let effective = route.max_in_flight.min(provider.max_in_flight);
    let limited_by = if effective < route.max_in_flight {
        format!(" (provider `{}`'s cap, shared)", provider.name)
    } else {
        String::new()
    };
    let per_second = f64::from(effective) / first.expected_attempt.as_secs_f64().max(0.001);
    let _ = writeln!(
        out,
        "  in flight: max_in_flight {} ({origin}), effective {effective}{limited_by}: ~{per_second:.0} requests/s at the first target's expected_attempt {} before shedding",
        route.max_in_flight,
        secs(first.expected_attempt)
    );
}
