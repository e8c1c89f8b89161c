//! Admission of a request that has a route: what the caller said (its
//! deadline, its SDK's patience, its retries), the deadline resolved,
//! what each target is sent, the bulkhead slot and the idempotency key;
//! then the driver.

use super::*;

/// The SDK's own patience, for non-streaming calls: the Anthropic SDK sends
/// `x-stainless-timeout` (or `NOT_GIVEN`), the OpenAI SDK only
/// `x-stainless-read-timeout`. The first that is a number wins.
pub(super) fn sdk_patience<'a>(said: &Said<'a>) -> Option<&'a [u8]> {
    [said.stainless_timeout, said.stainless_read_timeout]
        .into_iter()
        .flatten()
        .map(HeaderValue::as_bytes)
        .find(|v| {
            std::str::from_utf8(v)
                .ok()
                .and_then(|s| s.trim().parse::<f64>().ok())
                .is_some_and(|x| x.is_finite() && x > 0.0)
        })
}

/// The request's header fields Levee reads, found in one pass over its
/// header map. A lookup by name hashes the name (~150 instructions) and
/// most of these fields are absent from most requests: nine lookups cost
/// more than one walk over the three to six fields a request has. The
/// first value of a repeated field counts, as with a lookup.
#[derive(Default)]
pub(super) struct Said<'a> {
    pub(super) api_key: Option<&'a HeaderValue>,
    pub(super) authorization: Option<&'a HeaderValue>,
    pub(super) idempotency_key: Option<&'a HeaderValue>,
    pub(super) stainless_retry_count: Option<&'a HeaderValue>,
    pub(super) stainless_timeout: Option<&'a HeaderValue>,
    pub(super) stainless_read_timeout: Option<&'a HeaderValue>,
    pub(super) timeout_ms: Option<&'a HeaderValue>,
    pub(super) deadline_ms: Option<&'a HeaderValue>,
    pub(super) caller: Option<&'a HeaderValue>,
}

impl<'a> Said<'a> {
    /// The credentials sent: the `x-api-key` value, else the
    /// `authorization` value (`true`: its token follows a scheme).
    pub(super) fn credentials(&self) -> Option<(HeaderValue, bool)> {
        self.api_key
            .map(|v| (v.clone(), false))
            .or_else(|| self.authorization.map(|v| (v.clone(), true)))
    }

    pub(super) fn of(h: &'a HeaderMap) -> Said<'a> {
        let mut said = Said::default();
        for (name, value) in h {
            let slot = match name.as_str() {
                // Azure's clients send their key as `api-key`.
                n if n == headers::X_API_KEY.as_str() || n == "api-key" => &mut said.api_key,
                "authorization" => &mut said.authorization,
                n if n == headers::IDEMPOTENCY_KEY.as_str() => &mut said.idempotency_key,
                n if n == headers::X_STAINLESS_RETRY_COUNT.as_str() => {
                    &mut said.stainless_retry_count
                }
                n if n == headers::X_STAINLESS_TIMEOUT.as_str() => &mut said.stainless_timeout,
                n if n == headers::X_STAINLESS_READ_TIMEOUT.as_str() => {
                    &mut said.stainless_read_timeout
                }
                n if n == headers::X_TIMEOUT_MS.as_str() => &mut said.timeout_ms,
                n if n == headers::X_DEADLINE_MS.as_str() => &mut said.deadline_ms,
                crate::observe::census::CALLER_HEADER => &mut said.caller,
                _ => continue,
            };
            if slot.is_none() {
                *slot = Some(value);
            }
        }
        said
    }
}

/// The caller's `idempotency-key`, checked; and whether its SDK says this
/// is its own retry (counted as a caller-layer retry).
pub(super) fn caller_layer(
    shared: &Shared,
    said: &Said,
) -> Result<(Option<String>, bool), LeveeError> {
    let key = match said.idempotency_key.map(|v| v.to_str()) {
        None => None,
        Some(Ok(k)) if !k.trim().is_empty() && k.len() <= 256 => Some(k.to_string()),
        Some(_) => {
            let msg = "levee: header `idempotency-key` must be 1 to 256 visible ASCII characters";
            return Err(LeveeError::bad_request(msg));
        }
    };
    let sdk_retry = said
        .stainless_retry_count
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u32>().ok())
        .is_some_and(|n| n > 0);
    if sdk_retry {
        observer::report(shared, RequestEvent::CallerRetry);
    }
    Ok((key, sdk_retry))
}

/// Where a request's deadline comes from: its own header (`x-timeout-ms`,
/// `x-deadline-ms`), its SDK's timeout, or neither (the route's default).
pub(super) fn deadline_source(said: &Said<'_>) -> &'static str {
    if said.timeout_ms.is_some() || said.deadline_ms.is_some() {
        "header"
    } else if sdk_patience(said).is_some() {
        "sdk_timeout"
    } else {
        "default"
    }
}

/// The request's deadline: its headers (or its SDK's patience) within the
/// route's bounds, for a stream as for a plain request; and, for a stream,
/// the caller's own deadline unclamped (`None` when it said nothing),
/// which alone bounds the stream after its first byte.
pub(super) fn resolve_deadline(
    shared: &Shared,
    route: &levee_config::Route,
    r: &Inbound,
    said: &Said,
    arrived: levee_policy::Instant,
) -> Result<(levee_policy::Instant, Option<levee_policy::Instant>), LeveeError> {
    let headers = DeadlineHeaders {
        timeout_ms: said.timeout_ms.map(HeaderValue::as_bytes),
        deadline_ms: said.deadline_ms.map(HeaderValue::as_bytes),
        patience_secs: sdk_patience(said),
    };
    // The wall clock matters only to an absolute deadline (`x-deadline-ms`).
    let unix_ms = said.deadline_ms.map_or(0, |_| shared.clock.unix_ms());
    let wants = levee_policy::DeadlinePolicy::caller_wants(headers, unix_ms)
        .map_err(|e| LeveeError::bad_request(format!("levee: {e}")))?;
    let deadline = route.deadline.resolve_remaining(wants, arrived);
    let own = if r.stream {
        wants.map(|w| arrived + w)
    } else {
        None
    };
    Ok((deadline, own))
}

/// A fresh UUIDv7 stamped `at`, as a header value: the idempotency key
/// Levee sends for a request that has none, and a request's own id. One
/// allocation that every attempt's copy shares (a `String` turned into a
/// header value took three: the string, its copy, and a shared header made
/// at the first clone).
pub(super) fn generated_key(shared: &Shared, at: levee_policy::Instant) -> HeaderValue {
    let text = crate::hex::hyphenated(shared.uuid_v7(at).as_bytes());
    HeaderValue::from_maybe_shared(Bytes::from_owner(text))
        .unwrap_or(HeaderValue::from_static("levee"))
}

/// The idempotency key Levee sends a provider for a request with a key of
/// its own: the hex SHA-256 of a fixed label, the caller's identity digest
/// and the store key (endpoint path and caller's key). Two callers using the
/// same key send the provider two different values, so one caller cannot
/// make the provider answer another caller's request from its own cache;
/// the same caller with the same key sends the same value on every attempt
/// and from every replica, so a provider deduplicates its retries.
pub(super) fn forwarded_key(caller: &[u8; 32], store_key: &str) -> HeaderValue {
    let digest = Sha256::new()
        .chain_update(b"levee idempotency-key v1\n")
        .chain_update(caller)
        .chain_update(store_key.as_bytes())
        .finalize();
    let mut text = [0u8; 64];
    for (pair, b) in text.chunks_exact_mut(2).zip(digest) {
        pair[0] = HEX[usize::from(b >> 4)];
        pair[1] = HEX[usize::from(b & 0xf)];
    }
    HeaderValue::from_maybe_shared(Bytes::from_owner(text))
        .unwrap_or(HeaderValue::from_static("levee"))
}

pub(super) use crate::hex::HEX;

/// The idempotency store's one bucket for every caller of a keyless gateway.
pub(super) const KEYLESS: [u8; 32] = [0xff; 32];

/// Admission: the deadline, what each target is sent, the bulkhead slot and
/// the idempotency key; then the driver. An `async` block, not an `async
/// fn`: an `async fn` keeps each argument twice in its future (the
/// argument's slot, and the local it is moved to), and `r` is 392 bytes.
#[allow(clippy::manual_async_fn)]
pub(super) fn admit<'a>(
    shared: &'a Arc<Shared>,
    r: Inbound,
    note: &'a mut Option<IdemNote>,
    id: &'a super::RequestId,
    admitted: &'a mut bool,
    sent: &'a AtomicU32,
) -> impl std::future::Future<Output = Result<Response<Body>, LeveeError>> + 'a {
    async move {
        let route = &shared.config.routes[r.route];
        // Once the body was whole: the deadline, the census and the added
        // latency count Levee's time, not the caller's upload.
        let arrived = r.read_at;
        let said = Said::of(&r.parts.headers);
        let (deadline, stream_deadline) = resolve_deadline(shared, route, &r, &said, arrived)?;
        let caller_slot = shared.census.admitted(
            r.caller.key_index(&shared.keys),
            said.caller.map(HeaderValue::as_bytes),
            r.route,
            deadline.saturating_since(arrived),
            arrived,
        );
        let deadline_source = the_callers_part(shared, &r, &said, caller_slot).await?;
        // What each target will be sent, checked now so that nothing about the
        // request itself can fail later and be blamed on a provider.
        let path_and_query: &str = r.parts.uri.path_and_query().map_or(r.path, |p| p.as_str());
        let plans = prepare_targets(shared, route, &r, path_and_query)?;
        // Cross-layer accounting: is a caller layer still retrying?
        let (key_header, sdk_retry) = caller_layer(shared, &said)?;
        let Some(bulkhead) = shared.routes[r.route].bulkhead.try_acquire() else {
            return Err(shed(shared, route));
        };
        let key = Keyed {
            header: key_header.as_deref(),
            counted: sdk_retry,
            deadline,
        };
        let made_id = id.made.then_some(&id.value);
        let (lease, idem) = match claim_idempotency(shared, &r, key, note, made_id, arrived).await?
        {
            Keying::Lead { lease, idem } => (lease, idem),
            Keying::Replayed(resp) => return Ok(resp),
        };
        let origin = Origin {
            arrived,
            id: &id.value,
            said: &said,
            path_and_query,
            caller_slot,
            deadline_source,
        };
        let obs = observer_of(shared, &r, origin);
        *admitted = true;
        let ask = ask_of(shared, &r, &said, caller_slot);
        // A created response, or an object created through a passthrough path
        // (a file, a batch): its id is noted with the provider that answered.
        let creates_stored = r.parts.method == Method::POST
            && (r.path == levee_wire::paths::RESPONSES
                || (!r.rewrite && r.path == PASSTHROUGH_LABEL));
        let ctx = Ctx {
            shared: Arc::clone(shared),
            bulkhead: Some(bulkhead),
            route: r.route,
            dialect: r.dialect,
            method: r.parts.method,
            once: r.once,
            parts_headers: r.parts.headers,
            plans,
            model: r.model,
            stream: r.stream,
            idem,
            caller_retry: sdk_retry,
            stream_deadline,
            ask,
            creates_stored,
        };
        crate::request::drive::run(shared, ctx, deadline, lease, obs, sent).await
    }
}

/// What admission owes the caller: where its deadline came from (a
/// caller that sent none is counted), and its own rules (its models,
/// budget and limits), which may refuse the request.
async fn the_callers_part(
    shared: &Shared,
    r: &Inbound,
    said: &Said<'_>,
    caller_slot: usize,
) -> Result<&'static str, LeveeError> {
    let source = deadline_source(said);
    if source == "default" {
        let id = u32::try_from(caller_slot).unwrap_or(u32::MAX);
        shared
            .metrics
            .no_deadline(id, || shared.census.caller_label(caller_slot));
    }
    if let Some(rules) = crate::request::spending::rules_of(shared, caller_name(shared, r, said)) {
        // Boxed: its Redis round trip's future (~3.9 KiB) held inline made
        // every request's future that much larger, rules or not.
        Box::pin(crate::request::spending::admit(shared, rules, &r.model)).await?;
    }
    Ok(source)
}

/// A request's idempotency key as the caller sent it (`x-idempotency-key`
/// or `idempotency-key`), whether a caller layer is retrying, and the
/// request's deadline (a follower waits for its leader until then).
pub(super) struct Keyed<'a> {
    pub(super) header: Option<&'a str>,
    pub(super) counted: bool,
    pub(super) deadline: levee_policy::Instant,
}

/// How a request's idempotency key came out: this request leads (its
/// lease on the key, `None` when it is not stored, and the key sent
/// upstream), or an earlier one's stored answer is replayed.
pub(super) enum Keying {
    Lead {
        lease: Option<Lease>,
        idem: HeaderValue,
    },
    Replayed(Response<Body>),
}

/// The request's idempotency key: the caller's, claimed in the store
/// (`Replayed`: the stored answer), or one Levee makes for this request
/// (the request's id, `made_id`, when Levee made that).
/// The store keys it by endpoint too: an answer is replayed only to the
/// endpoint (and dialect) that produced it.
async fn claim_idempotency(
    shared: &Arc<Shared>,
    r: &Inbound,
    key: Keyed<'_>,
    note: &mut Option<IdemNote>,
    made_id: Option<&HeaderValue>,
    arrived: levee_policy::Instant,
) -> Result<Keying, LeveeError> {
    let store_key = key
        .header
        .map(|k| crate::state::idempotency::store_key(r.parts.uri.path(), k));
    let Some(stored) = store_key.as_deref() else {
        return Ok(Keying::Lead {
            lease: None,
            idem: made_id
                .cloned()
                .unwrap_or_else(|| generated_key(shared, arrived)),
        });
    };
    let caller = r.caller.digest();
    let (bucket, scoped) = r.caller.store_scope(caller, stored);
    let claim = KeyClaim {
        caller: bucket,
        key: &scoped,
        body_hash: Sha256::digest(&r.body).into(),
        counted: key.counted,
    };
    let route = &shared.config.routes[r.route];
    Ok(
        match claim_key(shared, claim, &route.name, key.deadline, note).await? {
            Led::Lead(lease) => Keying::Lead {
                lease,
                idem: forwarded_key(&caller, stored),
            },
            Led::Replayed(resp) => Keying::Replayed(resp),
        },
    )
}

/// Where and when an admitted request came from, for its observer.
pub(super) struct Origin<'a, 'h> {
    pub(super) arrived: levee_policy::Instant,
    pub(super) id: &'a HeaderValue,
    pub(super) said: &'a Said<'h>,
    pub(super) path_and_query: &'a str,
    /// The caller's slot in the census.
    pub(super) caller_slot: usize,
    pub(super) deadline_source: &'static str,
}

/// The observer of an admitted request: its route, its trace, and who
/// sent it asking what.
fn observer_of(shared: &Arc<Shared>, r: &Inbound, o: Origin<'_, '_>) -> Observer {
    let route = &shared.config.routes[r.route];
    let trace = match &shared.telemetry {
        Some(t) => t.request(&r.parts.headers, &route.name),
        None => crate::observe::telemetry::RequestTrace::off(),
    };
    let mut obs = Observer::admitted(
        Arc::clone(shared),
        r.route,
        trace,
        o.arrived,
        // Only a `--record` tape needs them (the path and the caller's model).
        shared
            .recorder
            .is_some()
            .then(|| (o.path_and_query.to_string(), r.model.clone())),
        observer::Asked {
            id: o.id.clone(),
            key: r.caller.key_index(&shared.keys),
            caller: o.said.caller.cloned(),
            caller_slot: u32::try_from(o.caller_slot).unwrap_or(u32::MAX),
            deadline_source: o.deadline_source,
            path: r.path,
            template: (r.path == PASSTHROUGH_LABEL)
                .then(|| route.passthrough_template(r.parts.uri.path()))
                .flatten()
                .map(String::into_boxed_str),
            dialect: r.dialect,
            stream: r.stream,
        },
    );
    if r.only_provider.is_some() {
        // A stored object's read goes to where it lives: the targets
        // before that one are not passed over, they were never candidates.
        obs.not_a_fallback();
    }
    obs
}

/// The caller's place in the providers' allowances: its key's name, or
/// without keys the name it gives (a caller not in `callers:` by its
/// census slot, with an equal share); and the tokens the request may cost.
fn ask_of(
    shared: &Shared,
    r: &Inbound,
    said: &Said<'_>,
    caller_slot: usize,
) -> levee_policy::allowance::Ask {
    shared.config.ask(
        caller_name(shared, r, said),
        u16::try_from(caller_slot & 0xffff).ok(),
        crate::upstream::allowance::estimate_with(r.body.len(), r.output_cap),
    )
}

/// The caller's name: its gateway key's, or without keys the name it
/// gives in `x-levee-caller`.
fn caller_name<'a>(shared: &'a Shared, r: &Inbound, said: &Said<'a>) -> Option<&'a str> {
    let key_name = r
        .caller
        .key_index(&shared.keys)
        .and_then(|i| shared.config.keys.get(i));
    key_name
        .map(CallerKey::name)
        .or_else(|| said.caller.and_then(|v| v.to_str().ok()))
}

/// The route's bulkhead is full: the request is shed at once, never queued.
pub(super) fn shed(shared: &Shared, route: &levee_config::Route) -> LeveeError {
    let shed = levee_policy::Failure::shed();
    observer::report(
        shared,
        RequestEvent::Shed {
            route: &route.name,
            reason: shed.reason,
        },
    );
    let msg = format!(
        "levee: route `{}` is at its max_in_flight; rejected at once rather than queued",
        route.name
    );
    LeveeError::failure(&shed, msg)
}

/// Refuses a request no target of `route` can carry (each skipped, none
/// held back by a one-attempt route), saying why the first refusal gave:
/// untranslatable (each target's refusal counted) before a platform's.
fn refuse_if_none_can_carry(
    shared: &Shared,
    route: &levee_config::Route,
    plans: &[Plan],
    refused: Option<levee_translate::Untranslatable>,
    platform_refused: Option<String>,
) -> Result<(), LeveeError> {
    if !plans.iter().all(Plan::skipped) {
        return Ok(());
    }
    let why = match (refused, platform_refused) {
        (Some(why), _) => {
            for (t, plan) in plans.iter().enumerate() {
                let provider = &shared.providers[route.targets[t].provider];
                if let Some(label) = plan.skip {
                    observer::report(
                        shared,
                        RequestEvent::TranslationRefused {
                            route: &route.name,
                            provider: &provider.name,
                            reason: label,
                        },
                    );
                }
            }
            why.to_string()
        }
        (None, Some(why)) => why,
        (None, None) => return Ok(()),
    };
    let msg = format!(
        "levee: no target of route `{}` can carry this request: {why}",
        route.name
    );
    Err(LeveeError::bad_request(msg))
}

/// Each target's body and URI — the model rewritten, or the request
/// translated for a target of the other dialect, or the target skipped when
/// it cannot carry the request — checked now so that nothing about the
/// request itself can fail later and be blamed on a provider. `Err` is the
/// status and message of a 400-class answer when no target can take the
/// request as sent, or when the route's `on_untranslatable: fail` and its
/// first entry cannot.
pub(super) fn prepare_targets(
    shared: &Shared,
    route: &levee_config::Route,
    r: &Inbound,
    path_and_query: &str,
) -> Result<Vec<Plan>, LeveeError> {
    let mut plans = Vec::with_capacity(route.targets.len());
    let mut refused: Option<levee_translate::Untranslatable> = None;
    let mut platform_refused: Option<String> = None;
    for t in 0..route.targets.len() {
        let (body, upstream_path, crossing, skip, dropped) = match carry(shared, route, r, t)? {
            Carried::Body(body, path, crossing, dropped) => {
                let path = path.unwrap_or(path_and_query);
                (body, path, crossing, None, dropped)
            }
            Carried::Refused(why) if must_fail(route, &plans, t) => {
                return Err(untranslatable(shared, route, t, &why));
            }
            Carried::Refused(why) => {
                // Counted when the planner chooses this target, or below
                // when no target can take the request: a backup that cannot
                // carry embeddings changes nothing while the primary answers.
                let skip = SkipReason::Untranslatable(why.reason);
                refused.get_or_insert(why);
                (Bytes::new(), path_and_query, None, Some(skip), None)
            }
        };
        let provider = &shared.providers[route.targets[t].provider];
        let (body, strip_usage) = ask_usage(shared, r, t, route, crossing.is_none(), body);
        // A cloud platform may move the model into the path and reshape
        // the body; a request it cannot serve skips the target.
        let (body, uri, skip) = match provider.platform.target(upstream_path, &body) {
            _ if skip.is_some() => (body, provider.uri_for(upstream_path), skip),
            Ok(None) => (body, provider.uri_for(upstream_path), skip),
            Ok(Some((path, body))) => (body, provider.platform_uri(&path), skip),
            Err(msg) => {
                platform_refused.get_or_insert(msg);
                (
                    Bytes::new(),
                    provider.uri_for(upstream_path),
                    Some(SkipReason::PlatformUnsupported),
                )
            }
        };
        let Some(uri) = uri else {
            let msg = "levee: the request URI is too long to forward";
            return Err(LeveeError::of(Why::UriTooLong, msg));
        };
        // A request sent at most once has one target: the first that can
        // carry it; the others are held back (not a retry, not a fallback).
        let held = r.once && skip.is_none() && plans.iter().any(|p: &Plan| !p.skipped());
        let held = held
            || r.only_provider
                .is_some_and(|p| p != route.targets[t].provider);
        plans.push(Plan {
            body,
            uri,
            crossing,
            skip,
            held,
            dropped,
            strip_usage,
        });
    }
    refuse_if_none_can_carry(shared, route, &plans, refused, platform_refused)?;
    Ok(plans)
}

/// An OpenAI chat stream to an OpenAI provider (the dialect's own API, or
/// a server that speaks it) that did not ask for usage is sent asking for
/// it, so that its tokens are counted; `true`: the extra chunk is to be
/// left out of the caller's stream. (The clouds' OpenAI endpoints are left
/// as the caller wrote them: an older Azure `api-version` refuses
/// `stream_options`.)
fn ask_usage(
    shared: &Shared,
    r: &Inbound,
    t: usize,
    route: &levee_config::Route,
    same_dialect: bool,
    body: Bytes,
) -> (Bytes, bool) {
    let p = &shared.config.providers[route.targets[t].provider];
    let fits = same_dialect
        && r.stream
        && r.dialect == Dialect::OpenAi
        && r.path == paths::CHAT_COMPLETIONS
        && p.api == Api::OpenAi
        && p.platform == levee_config::Platform::Direct;
    match fits.then(|| inspect::asking_usage(&body)).flatten() {
        Some(asked) => (asked, true),
        None => (body, false),
    }
}

/// Whether the route's `on_untranslatable: fail` refuses the request now
/// that target `t` cannot carry it: `t` is the last of the route's first
/// entry, and no target of that entry before it could carry it either.
fn must_fail(route: &levee_config::Route, plans: &[Plan], t: usize) -> bool {
    route.on_untranslatable == levee_config::OnUntranslatable::Fail
        && t + 1 == route.first_entry
        && plans[..t].iter().all(|p| p.skip.is_some())
}

/// The 400 of `on_untranslatable: fail`, naming the parameter and the target.
fn untranslatable(
    shared: &Shared,
    route: &levee_config::Route,
    t: usize,
    why: &levee_translate::Untranslatable,
) -> LeveeError {
    let provider = &shared.providers[route.targets[t].provider];
    let msg = format!(
        "levee: target `{}` of route `{}` cannot carry this request{}: {why} (the route's on_untranslatable is `fail`)",
        provider.name,
        route.name,
        why.param
            .map(|p| format!(" (parameter `{p}`)"))
            .unwrap_or_default(),
    );
    LeveeError::bad_request(msg)
}

/// What target `t` is sent, or why it cannot carry the request.
enum Carried {
    /// The body; the upstream path when a translation moved it; how the
    /// exchange crosses dialects; the parameters left out for it
    /// (`on_untranslatable: drop`), comma-separated.
    Body(
        Bytes,
        Option<&'static str>,
        Option<crossing::Crossing>,
        Option<String>,
    ),
    Refused(levee_translate::Untranslatable),
}

/// Target `t`'s body for the request, by the route's `on_untranslatable`:
/// `skip` passes over a target that cannot carry it, `drop` leaves out the
/// parameters it cannot carry (and says which), and `fail` refuses with a
/// 400 when a target of the route's first entry cannot carry it.
fn carry(
    shared: &Shared,
    route: &levee_config::Route,
    r: &Inbound,
    t: usize,
) -> Result<Carried, LeveeError> {
    use levee_config::OnUntranslatable;
    let to = route.rewrite_model(t, &r.model);
    let provider = &shared.providers[route.targets[t].provider];
    let (caller, path, body) = (r.dialect, r.path, &r.body);
    let (prepared, dropped) = match route.on_untranslatable {
        // The target's platform takes the request as the caller wrote it.
        _ if provider.platform.carries(caller, path) => (crossing::Prepared::Same, Vec::new()),
        OnUntranslatable::Drop => crossing::prepare_dropping(caller, provider.api, path, body, to),
        _ => (
            crossing::prepare(caller, provider.api, path, body, to),
            Vec::new(),
        ),
    };
    let dropped = (!dropped.is_empty()).then(|| dropped.join(", "));
    Ok(match prepared {
        crossing::Prepared::Same if !r.rewrite => Carried::Body(body.clone(), None, None, None),
        crossing::Prepared::Same => match rewrite_model(body, &r.model, to) {
            Ok(b) => Carried::Body(b, None, None, None),
            Err(e) => return Err(LeveeError::bad_request(format!("levee: {e}"))),
        },
        crossing::Prepared::Crossed {
            body,
            path,
            crossing,
        } => Carried::Body(body, Some(path), Some(crossing), dropped),
        crossing::Prepared::Skip(why) => Carried::Refused(why),
    })
}
