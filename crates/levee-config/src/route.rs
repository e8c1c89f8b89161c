//! Stage two for routes: targets resolved to providers, the retry policy,
//! deadline and budget built by the policy core, and route-level breaker
//! blocks applied to the providers they reach.

use crate::defaults;
use crate::error::{ConfigError, Problem, RouteProblem, Source};
use crate::locate::Seg::{self, Index, Key};
use crate::model::{Match, Provider, Route, Target};
use crate::raw::{
    RawBackoff, RawBreaker, RawMember, RawOn, RawRetry, RawRoute, RawTarget, RawTargetFull,
};
use levee_policy::backoff::{self, Backoff, Jitter};
use levee_policy::classify::{Classifier, RetryOn};
use levee_policy::deadline::DeadlinePolicy;
use levee_policy::planner::balance::{Group, MAX_TARGETS};
use levee_policy::planner::RoutePolicy;
use levee_policy::{BreakerSettings, BudgetSettings, RetryBudget};
use std::time::Duration;

/// A route's problem and the path to it, relative to the route.
struct RouteError {
    path: Vec<Seg<'static>>,
    problem: RouteProblem,
}

impl RouteError {
    fn new(path: &[Seg<'static>], problem: impl Into<RouteProblem>) -> Self {
        RouteError {
            path: path.to_vec(),
            problem: problem.into(),
        }
    }
}

/// Which route, if any, set each provider's breaker through a route-level
/// `circuit_breaker` block, and the settings in force.
struct Breakers {
    /// What each provider itself declared.
    declared: Vec<BreakerSettings>,
    /// What is in force now.
    current: Vec<BreakerSettings>,
    set_by: Vec<Option<usize>>,
}

/// Resolves every route against `providers` (whose breakers route-level
/// blocks may set); `declared` is each provider's own breaker settings.
pub(crate) fn resolve_routes(
    src: Source<'_>,
    raw: &[RawRoute],
    providers: &mut [Provider],
    declared: Vec<BreakerSettings>,
    builtin_mock: bool,
) -> Result<Vec<Route>, ConfigError> {
    let mut breakers = Breakers {
        current: declared.clone(),
        set_by: vec![None; declared.len()],
        declared,
    };
    let mut routes: Vec<Route> = Vec::with_capacity(raw.len());
    for (i, r) in raw.iter().enumerate() {
        let at = |path: Vec<Seg<'static>>, name: String, problem: RouteProblem| {
            let mut full = vec![Key("routes"), Index(i)];
            full.extend(path);
            let problem = Problem::Route {
                number: i + 1,
                name,
                problem,
            };
            ConfigError::at(src, &full, problem)
        };
        let (matcher, name) = matcher(r).map_err(|e| at(e.path, route_name(r), e.problem))?;
        if let Some((name, other)) = duplicate_exact(&matcher, &routes) {
            let problem = RouteProblem::DuplicateExact { name, other };
            return Err(at(vec![Key("match")], route_name(r), problem));
        }
        let route = resolve_route(i, r, matcher, &name, providers, &mut breakers, builtin_mock)
            .map_err(|e| at(e.path, name.clone(), e.problem))?;
        routes.push(route);
    }
    Ok(routes)
}

/// A route's name before its match is checked.
fn route_name(r: &RawRoute) -> String {
    let m = r.matcher.as_ref();
    m.and_then(|m| m.model.clone())
        .or_else(|| m.and_then(|m| m.models.as_ref()?.first().cloned()))
        .or_else(|| m.and_then(|m| m.model_prefix.clone()))
        .or_else(|| m.and_then(|m| m.path.clone()))
        .unwrap_or_else(|| "default".to_string())
}

/// The first exact name of `m` an earlier route also matches exactly, for
/// the same endpoint, and that route's number.
fn duplicate_exact(m: &Match, earlier: &[Route]) -> Option<(String, usize)> {
    for (j, other) in earlier.iter().enumerate() {
        let paths_meet = match (&m.path, &other.matcher.path) {
            (Some(a), Some(b)) => a == b,
            _ => true,
        };
        if !paths_meet {
            continue;
        }
        if let Some(name) = m.models.iter().find(|n| other.matcher.models.contains(n)) {
            return Some((name.clone(), j + 1));
        }
    }
    None
}

/// The route's match and its name (its first exact name, its prefix, its
/// path, or `default`).
fn matcher(r: &RawRoute) -> Result<(Match, String), RouteError> {
    let raw = r.matcher.as_ref();
    let mut models: Vec<String> = raw.and_then(|m| m.model.clone()).into_iter().collect();
    if let Some(list) = raw.and_then(|m| m.models.as_ref()) {
        if list.is_empty() {
            return Err(RouteError::new(
                &[Key("match"), Key("models")],
                RouteProblem::EmptyModels,
            ));
        }
        for m in list {
            if !models.contains(m) {
                models.push(m.clone());
            }
        }
    }
    if models.iter().any(String::is_empty) {
        return Err(RouteError::new(&[Key("match")], RouteProblem::EmptyModels));
    }
    let model_prefix = raw.and_then(|m| m.model_prefix.clone());
    if !models.is_empty() && model_prefix.is_some() {
        return Err(RouteError::new(
            &[Key("match")],
            RouteProblem::ExactAndPrefix,
        ));
    }
    let matcher = Match {
        models,
        model_prefix,
        path: raw.and_then(|m| m.path.clone()),
    };
    let name = matcher
        .models
        .first()
        .cloned()
        .or_else(|| matcher.model_prefix.clone())
        .or_else(|| matcher.path.clone())
        .unwrap_or_else(|| "default".to_string());
    Ok((matcher, name))
}

fn resolve_route(
    i: usize,
    r: &RawRoute,
    matcher: Match,
    name: &str,
    providers: &mut [Provider],
    breakers: &mut Breakers,
    builtin_mock: bool,
) -> Result<Route, RouteError> {
    let expected = r
        .expected_attempt_ms
        .map_or(defaults::EXPECTED_ATTEMPT_MS, |v| v.0);
    let (targets, groups, first_entry) = match &r.targets {
        Some(list) => listed_targets(list, providers, expected)?,
        None => (
            vec![default_target(&matcher, providers, expected, builtin_mock)?],
            Vec::new(),
            1,
        ),
    };
    if let Some(b) = &r.circuit_breaker {
        apply_breaker(i, b, &targets, providers, breakers)?;
    }
    let d = r.deadline.as_ref();
    let defaults = DeadlinePolicy::default();
    let deadline = DeadlinePolicy::new(
        d.and_then(|d| d.default)
            .map_or(defaults.default_deadline(), |x| x.0),
        d.and_then(|d| d.max).map_or(defaults.max(), |x| x.0),
    )
    .map_err(|e| RouteError::new(&[Key("deadline")], e))?;
    let passthrough = passthrough(r.passthrough.as_deref().unwrap_or_default())?;
    let passthrough_methods = passthrough_methods(r)?;
    Ok(Route {
        name: name.to_string(),
        matcher,
        deadline,
        policy: policy(r, &targets, None)?
            .with_groups(groups.clone())
            .map_err(|e| RouteError::new(&[Key("targets")], e))?,
        once: policy(r, &targets, Some(1))?
            .with_groups(groups)
            .map_err(|e| RouteError::new(&[Key("targets")], e))?,
        passthrough,
        passthrough_methods,
        on_untranslatable: r.on_untranslatable.unwrap_or_default(),
        first_entry,
        budget: budget(r.retry.as_ref())?,
        targets,
        max_in_flight: r
            .max_in_flight
            .map_or(defaults::ROUTE_MAX_IN_FLIGHT, |v| v.0),
        first_byte_timeout: r.first_byte_timeout.map(|d| d.0),
        stream_idle_timeout: r
            .stream_idle_timeout
            .map_or(defaults::STREAM_IDLE_TIMEOUT, |d| d.0),
    })
}

/// A route's targets, flat (a group's members in a run), its balanced
/// groups, and how many targets its first entry has.
fn listed_targets(
    list: &[RawTarget],
    providers: &[Provider],
    route_expected: u64,
) -> Result<(Vec<Target>, Vec<Group>, usize), RouteError> {
    if list.is_empty() {
        return Err(RouteError::new(
            &[Key("targets")],
            RouteProblem::EmptyTargets,
        ));
    }
    let mut targets = Vec::with_capacity(list.len());
    let mut groups = Vec::new();
    let mut first_entry = 1;
    for (ti, t) in list.iter().enumerate() {
        let at = [Key("targets"), Index(ti)];
        let (name, model, expected) = match t {
            RawTarget::Name(n) => (Some(n.as_str()), None, None),
            RawTarget::Full(f) if f.balance.is_none() => {
                if f.strategy.is_some() {
                    let problem = RouteProblem::GroupShape("`strategy` is a balanced group's");
                    return Err(RouteError::new(&at, problem));
                }
                (
                    f.provider.as_deref(),
                    f.model.clone(),
                    f.expected_attempt_ms,
                )
            }
            RawTarget::Full(g) => {
                let group = group(g, &at, targets.len())?;
                if ti == 0 {
                    first_entry = group.weights.len();
                }
                for (mi, m) in g.balance.iter().flatten().enumerate() {
                    let mat = [Key("targets"), Index(ti), Key("balance"), Index(mi)];
                    let expected = g.expected_attempt_ms.map_or(route_expected, |v| v.0);
                    let (name, model, own) = match m {
                        RawMember::Name(n) => (Some(n.as_str()), None, None),
                        RawMember::Full(f) => (
                            f.provider.as_deref(),
                            f.model.clone(),
                            f.expected_attempt_ms,
                        ),
                    };
                    let mut target =
                        one_target(name, model, own.map_or(expected, |v| v.0), providers, &mat)?;
                    target.weight = group.weights[mi];
                    target.group = Some(groups.len());
                    targets.push(target);
                }
                groups.push(group);
                continue;
            }
        };
        let expected = expected.map_or(route_expected, |v| v.0);
        targets.push(one_target(name, model, expected, providers, &at)?);
    }
    if targets.len() > MAX_TARGETS {
        let problem = RouteProblem::Plan(levee_policy::planner::PlanError::TooManyTargets(
            targets.len(),
        ));
        return Err(RouteError::new(&[Key("targets")], problem));
    }
    Ok((targets, groups, first_entry))
}

/// A balanced group's shape checked (members, weights), starting at
/// target `start`.
fn group(g: &RawTargetFull, at: &[Seg<'static>], start: usize) -> Result<Group, RouteError> {
    if g.provider.is_some() || g.model.is_some() {
        let problem = RouteProblem::GroupShape("`provider` and `model` go on its members");
        return Err(RouteError::new(at, problem));
    }
    let members = g.balance.as_deref().unwrap_or_default();
    if members.is_empty() {
        return Err(RouteError::new(at, RouteProblem::EmptyGroup));
    }
    let mut weights = Vec::with_capacity(members.len());
    for (mi, m) in members.iter().enumerate() {
        let weight = match m {
            RawMember::Full(f) => f.weight.unwrap_or(1.0),
            RawMember::Name(_) => 1.0,
        };
        if !weight.is_finite() || weight <= 0.0 {
            let wat = [at, &[Key("balance"), Index(mi), Key("weight")]].concat();
            return Err(RouteError::new(&wat, RouteProblem::Weight(weight)));
        }
        weights.push(weight);
    }
    Ok(Group {
        start,
        weights,
        strategy: g.strategy.unwrap_or_default().0,
    })
}

/// One provider target (alone or a group's member) at `at`.
fn one_target(
    name: Option<&str>,
    model: Option<String>,
    expected: u64,
    providers: &[Provider],
    at: &[Seg<'static>],
) -> Result<Target, RouteError> {
    let Some(name) = name else {
        return Err(RouteError::new(at, RouteProblem::NoProvider));
    };
    let Some(provider) = providers.iter().position(|p| p.name == name) else {
        let known: Vec<&str> = providers.iter().map(|p| p.name.as_str()).collect();
        let problem = RouteProblem::UnknownProvider {
            name: name.to_string(),
            known: known.join(", "),
        };
        return Err(RouteError::new(at, problem));
    };
    Ok(Target {
        provider,
        model,
        expected_attempt: Duration::from_millis(expected),
        group: None,
        weight: 1.0,
    })
}

/// No `targets`: the provider named like the model prefix; else, with the
/// built-in mock or no model prefix (the default route of a config without
/// `routes:`), the first provider.
fn default_target(
    matcher: &Match,
    providers: &[Provider],
    expected: u64,
    builtin_mock: bool,
) -> Result<Target, RouteError> {
    let guess = matcher
        .model_prefix
        .as_deref()
        .map(|p| p.trim_end_matches(['/', ':']))
        .unwrap_or("");
    let provider = match providers.iter().position(|p| p.name == guess) {
        Some(p) => p,
        None if builtin_mock || matcher.model_prefix.is_none() => 0,
        None => {
            let problem = RouteProblem::NoDefaultTarget {
                guess: guess.to_string(),
            };
            return Err(RouteError::new(&[], problem));
        }
    };
    Ok(Target {
        provider,
        model: None,
        expected_attempt: Duration::from_millis(expected),
        group: None,
        weight: 1.0,
    })
}

/// A route-level breaker block sets the breakers of its targets' providers
/// (fields it omits keep the provider's values). Breakers belong to the
/// provider's fault domains, which every route reaching it shares, so two
/// routes may not ask for different ones.
fn apply_breaker(
    i: usize,
    raw: &RawBreaker,
    targets: &[Target],
    providers: &mut [Provider],
    breakers: &mut Breakers,
) -> Result<(), RouteError> {
    let at = [Key("circuit_breaker")];
    for t in targets {
        let p = t.provider;
        let s = raw.merge(breakers.declared[p]);
        let built = s.build().map_err(|e| RouteError::new(&at, e))?;
        if let Some(j) = breakers.set_by[p] {
            if j != i && breakers.current[p] != s {
                let problem = RouteProblem::BreakerConflict {
                    other: j + 1,
                    provider: providers[p].name.clone(),
                };
                return Err(RouteError::new(&at, problem));
            }
        }
        providers[p].breaker = built;
        breakers.current[p] = s;
        breakers.set_by[p] = Some(i);
    }
    Ok(())
}

/// The endpoints Levee serves itself, which a `passthrough` entry may not
/// name: they are carried with their full semantics already.
const SERVED: [&str; 7] = [
    "/v1/chat/completions",
    "/v1/messages",
    "/v1/messages/count_tokens",
    "/v1/embeddings",
    "/v1/responses",
    "/v1/models",
    "/v1/models/",
];

/// `passthrough:` checked: each entry a path under `/v1/` (a prefix when it
/// ends in `/`) of visible characters, without a query, a fragment, a
/// percent escape or a `.`/`..` segment, and not an endpoint Levee serves.
fn passthrough(entries: &[String]) -> Result<Vec<String>, RouteError> {
    let mut out = Vec::with_capacity(entries.len());
    for (i, e) in entries.iter().enumerate() {
        let why = if !e.starts_with("/v1/") || e.len() <= "/v1/".len() {
            Some("must be a path under `/v1/`, such as `/v1/files` or the prefix `/v1/batches/`")
        } else if e.len() > 256 {
            Some("is longer than 256 characters")
        } else if !e.bytes().all(|b| b.is_ascii_graphic()) || e.contains(['?', '#', '%']) {
            Some("may hold only visible ASCII characters, without `?`, `#` or `%`: a path, not a URL")
        } else if e
            .strip_suffix('/')
            .unwrap_or(e)
            .split('/')
            .skip(1)
            .any(|seg| seg.is_empty() || seg == "." || seg == "..")
        {
            Some("may not have an empty, `.` or `..` segment")
        } else if SERVED.contains(&e.as_str()) {
            Some("is an endpoint Levee serves itself: leave it out")
        } else {
            None
        };
        if let Some(why) = why {
            let problem = RouteProblem::Passthrough {
                entry: e.chars().take(80).collect(),
                why,
            };
            return Err(RouteError::new(&[Key("passthrough"), Index(i)], problem));
        }
        out.push(e.clone());
    }
    Ok(out)
}

/// The methods a passthrough path takes by default.
const PASSTHROUGH_METHODS: [http::Method; 3] =
    [http::Method::GET, http::Method::POST, http::Method::DELETE];

/// `passthrough_methods:` checked: each one of HTTP's own request methods
/// a provider API uses (`GET`, `HEAD`, `POST`, `PUT`, `PATCH`, `DELETE`,
/// `OPTIONS`), only beside `passthrough`. Default `GET`, `POST`, `DELETE`.
fn passthrough_methods(r: &RawRoute) -> Result<Vec<http::Method>, RouteError> {
    let Some(listed) = &r.passthrough_methods else {
        return Ok(PASSTHROUGH_METHODS.to_vec());
    };
    let at = |i: usize| [Key("passthrough_methods"), Index(i)];
    if r.passthrough.is_none() {
        let problem = RouteProblem::PassthroughMethod {
            method: String::new(),
            why: "is set without `passthrough`: list the paths too, or leave it out",
        };
        return Err(RouteError::new(&[Key("passthrough_methods")], problem));
    }
    let mut out = Vec::with_capacity(listed.len());
    for (i, m) in listed.iter().enumerate() {
        let method = match m.as_str() {
            "GET" => http::Method::GET,
            "HEAD" => http::Method::HEAD,
            "POST" => http::Method::POST,
            "PUT" => http::Method::PUT,
            "PATCH" => http::Method::PATCH,
            "DELETE" => http::Method::DELETE,
            "OPTIONS" => http::Method::OPTIONS,
            _ => {
                let problem = RouteProblem::PassthroughMethod {
                    method: m.chars().take(20).collect(),
                    why: "is not one of GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS (upper case)",
                };
                return Err(RouteError::new(&at(i), problem));
            }
        };
        out.push(method);
    }
    Ok(out)
}

/// The route's retry policy; `max_attempts` replaces the configured
/// attempts per target when given.
fn policy(
    r: &RawRoute,
    targets: &[Target],
    max_attempts: Option<u32>,
) -> Result<RoutePolicy, RouteError> {
    let retry = r.retry.as_ref();
    let expected: Vec<Duration> = targets.iter().map(|t| t.expected_attempt).collect();
    let mut policy = RoutePolicy::new(
        &expected,
        max_attempts.unwrap_or(
            retry
                .and_then(|r| r.max_attempts)
                .unwrap_or(defaults::MAX_ATTEMPTS),
        ),
        classifier(retry.and_then(|r| r.on.as_deref()))?,
        backoff(retry.and_then(|r| r.backoff.as_ref()))?,
        retry
            .and_then(|r| r.respect_retry_after)
            .unwrap_or(defaults::RESPECT_RETRY_AFTER),
    )
    .map_err(|e| RouteError::new(&[Key("retry"), Key("max_attempts")], e))?;
    if let Some(cap) = retry.and_then(|r| r.retry_after_cap) {
        policy = policy.with_retry_after_cap(cap.0);
    }
    match r.attempt_timeout {
        Some(t) if t.0.is_zero() => Err(RouteError::new(
            &[Key("attempt_timeout")],
            RouteProblem::ZeroAttemptTimeout,
        )),
        t => Ok(policy.with_attempt_timeout(t.map(|t| t.0))),
    }
}

fn classifier(on: Option<&[RawOn]>) -> Result<Classifier, RouteError> {
    let Some(on) = on else {
        return Ok(Classifier::default());
    };
    let mut entries = Vec::with_capacity(on.len());
    for (j, o) in on.iter().enumerate() {
        let entry = match o {
            RawOn::Code(c) => RetryOn::status(*c),
            RawOn::Name(n) => n.parse(),
        };
        entries.push(entry.map_err(|e| RouteError::new(&[Key("retry"), Key("on"), Index(j)], e))?);
    }
    Ok(Classifier::new(&entries))
}

fn backoff(b: Option<&RawBackoff>) -> Result<Backoff, RouteError> {
    let Some(b) = b else {
        return Ok(Backoff::default());
    };
    let at = [Key("retry"), Key("backoff")];
    let jitter = match b.jitter.as_deref() {
        None => Jitter::default(),
        Some(j) => j
            .parse()
            .map_err(|e| RouteError::new(&[Key("retry"), Key("backoff"), Key("jitter")], e))?,
    };
    let built = match &b.schedule_ms {
        Some(_) if b.base_ms.is_some() || b.multiplier.is_some() => {
            return Err(RouteError::new(&at, RouteProblem::BackoffBoth))
        }
        Some(s) => Backoff::schedule(s, jitter),
        None => {
            let base = b.base_ms.unwrap_or(backoff::DEFAULT_BASE_MS);
            Backoff::exponential(
                base,
                b.multiplier.unwrap_or(backoff::DEFAULT_MULTIPLIER),
                b.max_ms.unwrap_or(backoff::DEFAULT_MAX_MS.max(base)),
                jitter,
            )
        }
    };
    built.map_err(|e| RouteError::new(&at, e))
}

fn budget(retry: Option<&RawRetry>) -> Result<RetryBudget, RouteError> {
    let d = BudgetSettings::default();
    let Some(b) = retry.and_then(|r| r.budget.as_ref()) else {
        return Ok(RetryBudget::default_policy());
    };
    BudgetSettings {
        ratio: b.ratio.unwrap_or(d.ratio),
        min_per_second: b.min_per_second.unwrap_or(d.min_per_second),
        window: b.window.map_or(d.window, |w| w.0),
        refunds: b.refunds.unwrap_or(d.refunds),
    }
    .build()
    .map_err(|e| RouteError::new(&[Key("retry"), Key("budget")], e))
}

impl RawBreaker {
    /// These fields over `base` (the fields left out keep `base`'s values).
    pub(crate) fn merge(&self, base: BreakerSettings) -> BreakerSettings {
        BreakerSettings {
            error_ratio: self.error_ratio.unwrap_or(base.error_ratio),
            window: self.window.map_or(base.window, |w| w.0),
            min_requests: self.min_requests.unwrap_or(base.min_requests),
            open_for: self.open_for.map_or(base.open_for, |w| w.0),
            half_open_probes: self.half_open_probes.unwrap_or(base.half_open_probes),
            probe_interval: self.probe_interval.map_or(base.probe_interval, |w| w.0),
        }
    }
}
