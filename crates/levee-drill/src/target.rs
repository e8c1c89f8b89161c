//! Base URLs of the gateway and the mock, and the loopback-only rule: the
//! drill sends load to 127.0.0.0/8, `localhost` or `[::1]` and nowhere else.

use std::net::{IpAddr, SocketAddr, ToSocketAddrs};

use crate::error::DrillError;

/// A validated `http://` base URL whose host is a loopback address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The resolved loopback address requests go to.
    pub addr: SocketAddr,
    /// `http://ADDR`, without a trailing slash.
    pub base: String,
}

impl Target {
    /// `base` + `path` (`path` starts with `/`).
    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }
}

fn is_loopback(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_loopback(),
        IpAddr::V6(v6) => {
            v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
    }
}

/// Parses `--gateway` / `--mock`: `http://HOST:PORT` with HOST one of
/// 127.0.0.0/8, `localhost` (every address it resolves to must be loopback)
/// or `[::1]`. Any other host is refused, whatever it resolves to.
pub fn parse(flag: &'static str, text: &str) -> Result<Target, DrillError> {
    let bad = |reason: &str| DrillError::Flag {
        flag,
        value: text.to_owned(),
        reason: reason.to_owned(),
    };
    let uri: http::Uri = text
        .trim()
        .parse()
        .map_err(|_| bad("not a URL like http://127.0.0.1:8080"))?;
    match uri.scheme_str() {
        Some("http") => {}
        Some(_) => {
            return Err(bad(
                "only http:// is supported (the drill talks to loopback)",
            ))
        }
        None => return Err(bad("give a URL with a scheme, like http://127.0.0.1:8080")),
    }
    if !matches!(uri.path(), "" | "/") || uri.query().is_some() {
        return Err(bad(
            "give the base URL without a path (the drill adds /v1/chat/completions or /_mock/...)",
        ));
    }
    let Some(host) = uri.host() else {
        return Err(bad("the URL has no host"));
    };
    let port = uri
        .port_u16()
        .ok_or_else(|| bad("give the port explicitly, like http://127.0.0.1:8080"))?;
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    let addr = if let Ok(ip) = bare.parse::<IpAddr>() {
        if !is_loopback(ip) {
            return Err(DrillError::NotLoopback {
                flag,
                url: text.to_owned(),
                host: host.to_owned(),
            });
        }
        SocketAddr::new(ip, port)
    } else if bare.eq_ignore_ascii_case("localhost") {
        let addrs: Vec<SocketAddr> = (bare, port)
            .to_socket_addrs()
            .map_err(|e| bad(&format!("cannot resolve localhost: {e}")))?
            .collect();
        if let Some(odd) = addrs.iter().find(|a| !is_loopback(a.ip())) {
            return Err(DrillError::NotLoopback {
                flag,
                url: text.to_owned(),
                host: format!("localhost (resolves to {})", odd.ip()),
            });
        }
        // Prefer IPv4: servers here bind 127.0.0.1 by default.
        addrs
            .iter()
            .find(|a| a.is_ipv4())
            .or(addrs.first())
            .copied()
            .ok_or_else(|| bad("localhost resolves to no address"))?
    } else {
        return Err(DrillError::NotLoopback {
            flag,
            url: text.to_owned(),
            host: host.to_owned(),
        });
    };
    Ok(Target {
        addr,
        base: format!("http://{addr}"),
    })
}

/// Parses `--pause-state`: `redis://[USER:PASSWORD@]HOST:PORT[/DB]` with
/// HOST loopback, as for [`parse`]; returns the URL as given (trimmed).
pub fn parse_redis(flag: &'static str, text: &str) -> Result<String, DrillError> {
    let t = text.trim();
    let Some(rest) = t.strip_prefix("redis://") else {
        return Err(DrillError::Flag {
            flag,
            value: text.to_owned(),
            reason: "give a URL like redis://127.0.0.1:6379 (the drill pauses a local store only)"
                .to_owned(),
        });
    };
    let authority = rest.split('/').next().unwrap_or("");
    let hostport = authority.rsplit('@').next().unwrap_or("");
    parse(flag, &format!("http://{hostport}"))?;
    Ok(t.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_hosts_are_accepted() {
        assert_eq!(
            parse("gateway", "http://127.0.0.1:8080")
                .map(|t| t.base)
                .ok(),
            Some("http://127.0.0.1:8080".to_owned())
        );
        assert!(parse("gateway", "http://127.9.8.7:1/").is_ok());
        assert_eq!(
            parse("mock", "http://[::1]:9100").map(|t| t.base).ok(),
            Some("http://[::1]:9100".to_owned())
        );
        let t = parse("mock", "http://localhost:9100");
        assert!(t.as_ref().is_ok_and(|t| t.addr.ip().is_loopback()), "{t:?}");
    }

    #[test]
    fn redis_urls_must_be_loopback_too() {
        assert!(parse_redis("pause-state", "redis://127.0.0.1:6379").is_ok());
        assert!(parse_redis("pause-state", "redis://:pw@127.0.0.1:6379/2").is_ok());
        for url in ["redis://10.0.0.1:6379", "redis://cache.internal:6379"] {
            let e = parse_redis("pause-state", url).expect_err(url);
            assert!(matches!(e, DrillError::NotLoopback { .. }), "{url}: {e}");
        }
        assert!(parse_redis("pause-state", "http://127.0.0.1:6379").is_err());
    }

    #[test]
    fn anything_else_is_refused_with_a_reason() {
        // (url, refused as not loopback rather than as a malformed flag)
        for (url, remote) in [
            ("http://10.0.0.1:8080", true),
            ("http://192.168.1.2:80", true),
            ("http://8.8.8.8:80", true),
            ("http://example.com:80", true),
            ("http://[::ffff:10.0.0.1]:80", true),
            ("http://0.0.0.0:80", true),
            ("https://127.0.0.1:8080", false),
            ("127.0.0.1:8080", false),
            ("http://127.0.0.1", false),
            ("http://127.0.0.1:8080/v1", false),
            ("not a url", false),
        ] {
            let e = parse("gateway", url).expect_err(url);
            if remote {
                assert!(matches!(e, DrillError::NotLoopback { .. }), "{url}: {e}");
                assert!(e.to_string().contains("loopback"), "{e}");
            } else {
                assert!(matches!(e, DrillError::Flag { .. }), "{url}: {e}");
            }
        }
    }
}
