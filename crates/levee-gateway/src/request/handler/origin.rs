//! Where a request for a stored object goes: a stored response is read
//! where it was created, and an object a passthrough prefix names where
//! its creation was noted. Both ask the store, and `origin_of` boxes that
//! call: no other request's future holds a store call's (~3.9 KiB).

use super::*;

/// Where a request for a stored object goes: a stored response is read
/// where it was created, and so is an object a passthrough prefix names
/// when its creation was noted (the route, and the one provider to send
/// it to).
pub(super) async fn origin_of(
    shared: &Shared,
    kind: Kind,
    asked: &str,
) -> Result<(Kind, Option<usize>), LeveeError> {
    // Only a stored or listed object's request asks the store; boxed, so
    // the store's future (~3.9 KiB) is not part of every request's.
    match kind {
        Kind::Stored { .. } | Kind::Listed { .. } => {
            Box::pin(object_origin(shared, kind, asked)).await
        }
        k => Ok((k, None)),
    }
}

async fn object_origin(
    shared: &Shared,
    kind: Kind,
    asked: &str,
) -> Result<(Kind, Option<usize>), LeveeError> {
    Ok(match kind {
        Kind::Stored { route, label } => {
            let (route, provider) = stored_origin(shared, asked, route).await?;
            (Kind::Stored { route, label }, Some(provider))
        }
        Kind::Listed { route, label } => match listed_origin(shared, asked, route).await {
            Some((route, provider)) => (Kind::Listed { route, label }, Some(provider)),
            None => (kind, None),
        },
        k => (k, None),
    })
}

/// Where the object a passthrough request to `path` (on `route`) names
/// was created, when that was noted: its route and provider.
async fn listed_origin(shared: &Shared, path: &str, route: usize) -> Option<(usize, usize)> {
    let config = &shared.config;
    let id = config.routes[route].passthrough_object(path)?;
    let o = shared.origins.get(shared.redis.as_deref(), id).await?;
    let p = config.providers.iter().position(|p| p.name == o.provider)?;
    let reaches = |r: usize| config.routes[r].targets.iter().any(|t| t.provider == p);
    let r = config
        .routes
        .iter()
        .position(|x| x.name == o.route && x.passes_through(path))
        .filter(|&r| reaches(r))
        .or_else(|| Some(route).filter(|&r| reaches(r)))?;
    Some((r, p))
}

/// The route and provider a read of the stored response at `path` goes
/// to: where it was created, as noted when it was. Without a note, the
/// one OpenAI-dialect provider the routes reach (`fallback`'s), when there
/// is only one; else a 404 that says why.
async fn stored_origin(
    shared: &Shared,
    path: &str,
    fallback: usize,
) -> Result<(usize, usize), LeveeError> {
    let rest = path.strip_prefix(paths::RESPONSE_ITEM).unwrap_or("");
    let id = rest.split('/').next().unwrap_or("");
    let config = &shared.config;
    let reaches = |r: usize, p: usize| config.routes[r].targets.iter().any(|t| t.provider == p);
    if let Some(o) = shared.origins.get(shared.redis.as_deref(), id).await {
        let provider = config.providers.iter().position(|p| p.name == o.provider);
        if let Some(p) = provider {
            let named = config.routes.iter().position(|r| r.name == o.route);
            let route = named
                .filter(|&r| reaches(r, p))
                .or_else(|| Some(fallback).filter(|&r| reaches(r, p)))
                .or_else(|| (0..config.routes.len()).find(|&r| reaches(r, p)));
            if let Some(r) = route {
                return Ok((r, p));
            }
        }
    }
    let mut openai = config
        .routes
        .iter()
        .flat_map(|r| r.targets.iter().map(|t| t.provider))
        .filter(|&p| config.providers[p].api == Api::OpenAi);
    if let Some(only) = openai.next() {
        if openai.all(|p| p == only) && reaches(fallback, only) {
            return Ok((fallback, only));
        }
    }
    let msg = format!(
        "levee: no record of where response `{}` was created (not through this gateway, or longer ago than its lifetime), and more than one provider could hold it",
        printable(id)
    );
    Err(LeveeError::of(Why::NotFound, msg))
}
