//! Redis URLs: checked before use, and never shown with their password.

/// A `state.url` that is not a Redis URL; shows the URL redacted.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "`state.url` `{shown}` is not a Redis URL like `redis://[:password@]host:6379[/db]`: {why}"
)]
pub struct BadRedisUrl {
    shown: String,
    why: &'static str,
}

/// A Redis URL as it may be shown: the password (and a user name) replaced
/// by `***`, so no message, log line or `levee check` output carries it.
/// Conservative on malformed input: everything before the last `@` is
/// hidden, and so are query values (`?password=…`).
pub fn redact_url(url: &str) -> String {
    let shown = match url.rfind('@') {
        None => url.to_string(),
        Some(at) => match url.split_once("://") {
            Some((scheme, rest)) if rest.len() > url.len() - at - 1 => {
                format!("{scheme}://***@{}", &url[at + 1..])
            }
            _ => format!("***@{}", &url[at + 1..]),
        },
    };
    match shown.split_once('?') {
        None => shown,
        Some((base, query)) => {
            let names: Vec<&str> = query
                .split('&')
                .map(|p| p.split_once('=').map_or(p, |(n, _)| n))
                .collect();
            format!("{base}?{}=***", names.join("=***&"))
        }
    }
}

/// Checks a `state.url`: `redis://` or `rediss://` with a host, an optional
/// port and database number, or `redis+unix://` / `unix://` with a path.
/// Errors show the URL redacted.
pub fn check_redis_url(url: &str) -> Result<(), BadRedisUrl> {
    let bad = |why: &'static str| {
        Err(BadRedisUrl {
            shown: redact_url(url),
            why,
        })
    };
    let Some((scheme, rest)) = url.split_once("://") else {
        return bad("no `scheme://`");
    };
    match scheme {
        "redis+unix" | "unix" => {
            if rest.is_empty() {
                return bad("no socket path");
            }
            return Ok(());
        }
        "redis" | "rediss" => {}
        _ => return bad("the scheme must be redis, rediss, redis+unix or unix"),
    }
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let hostport = authority
        .rfind('@')
        .map_or(authority, |at| &authority[at + 1..]);
    let (host, port) = if let Some(v6) = hostport.strip_prefix('[') {
        match v6.split_once(']') {
            Some((h, p)) => (h, p.strip_prefix(':')),
            None => return bad("unclosed `[` in the host"),
        }
    } else {
        match hostport.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (hostport, None),
        }
    };
    if host.is_empty()
        || !host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_' | b':'))
    {
        return bad("no valid host");
    }
    if let Some(p) = port {
        if p.parse::<u16>().map_or(true, |p| p == 0) {
            return bad("the port must be a number from 1 to 65535");
        }
    }
    let path = tail.split(['?', '#']).next().unwrap_or("");
    let db = path.trim_start_matches('/');
    if !db.is_empty() && db.parse::<u32>().is_err() {
        return bad("the path must be a database number (`/0`)");
    }
    Ok(())
}
