//! `levee check --probe`: reach each provider's `base_url` from this machine
//! before a deploy — resolve its host (DNS), open a TCP connection, and for
//! `https` complete a TLS handshake with the same trust the gateway uses
//! (the bundled web-PKI roots) — and report each problem per provider. An
//! expired certificate, one for another name, a TLS-intercepting proxy or a
//! host name the resolver does not know then shows here, not as the first
//! caller's error. Every step has its own timeout; providers are probed at
//! the same time.

use levee_config::{Config, Provider};
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// The step of a probe that failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    Dns,
    Connect,
    Tls,
    /// A cloud provider's credentials (a key file, a token endpoint).
    Credentials,
}

impl Step {
    fn name(self) -> &'static str {
        match self {
            Step::Dns => "dns",
            Step::Connect => "connect",
            Step::Tls => "tls",
            Step::Credentials => "credentials",
        }
    }

    fn advice(self) -> &'static str {
        match self {
            Step::Dns => "check the host name in base_url and this machine's resolver",
            Step::Connect => {
                "check the address and port in base_url and any firewall or proxy on the way"
            }
            Step::Tls => {
                "the gateway will refuse this certificate too: it must chain to a public root, be in date and name this host (a TLS-intercepting proxy also shows here)"
            }
            Step::Credentials => {
                "the gateway could not sign or authorise a request either: check the credentials the provider's settings name"
            }
        }
    }
}

/// One provider's result.
#[derive(Debug)]
pub struct Probe {
    pub provider: String,
    pub url: String,
    /// What worked, in order (`dns 2 addresses`, `tcp 3 ms`, `tls 12 ms`).
    pub steps: Vec<String>,
    /// The step that failed and why.
    pub problem: Option<(Step, String)>,
}

/// Probes every provider (at once), each step bounded by `step_timeout`.
pub async fn probe_all(config: &Config, step_timeout: Duration) -> Vec<Probe> {
    let tls = Arc::new(tls_config());
    let tasks: Vec<_> = config
        .providers
        .iter()
        .map(|p| tokio::spawn(probe_one(p.clone(), Arc::clone(&tls), step_timeout)))
        .collect();
    let mut out = Vec::with_capacity(tasks.len());
    for (task, p) in tasks.into_iter().zip(&config.providers) {
        out.push(task.await.unwrap_or_else(|e| Probe {
            provider: p.name.clone(),
            url: p.base_url.to_string(),
            steps: Vec::new(),
            problem: Some((Step::Connect, format!("the probe failed: {e}"))),
        }));
    }
    out
}

/// The trust the gateway's upstream client has: web-PKI roots, ring.
fn tls_config() -> rustls::ClientConfig {
    let roots = rustls::RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map(|b| b.with_root_certificates(roots).with_no_client_auth())
        .unwrap_or_else(|_| {
            // The ring provider supports the default versions; keep a usable config regardless.
            rustls::ClientConfig::builder()
                .with_root_certificates(rustls::RootCertStore::empty())
                .with_no_client_auth()
        })
}

#[allow(clippy::disallowed_methods)] // timing a probe step for the report
fn now() -> std::time::Instant {
    std::time::Instant::now()
}

fn ms(since: std::time::Instant) -> u128 {
    since.elapsed().as_millis()
}

async fn probe_one(p: Provider, tls: Arc<rustls::ClientConfig>, limit: Duration) -> Probe {
    let probe = reach(&p, tls, limit).await;
    if probe.problem.is_some() || p.platform == levee_config::Platform::Direct {
        return probe;
    }
    credentials(&p, probe, limit).await
}

/// A cloud provider's credentials load and (Vertex) a token is obtained.
async fn credentials(p: &Provider, mut probe: Probe, limit: Duration) -> Probe {
    let t = now();
    let platform = match levee_gateway::preflight::PlatformRuntime::new(p) {
        Ok(platform) => platform,
        Err(e) => return fail(probe, Step::Credentials, e.to_string()),
    };
    match tokio::time::timeout(limit, platform.probe()).await {
        Err(_) => fail(
            probe,
            Step::Credentials,
            format!("no token within {limit:?}"),
        ),
        Ok(Err(e)) => fail(probe, Step::Credentials, e.to_string()),
        Ok(Ok(())) => {
            let from = platform
                .credential_source()
                .map(|s| format!(" from {s}"))
                .unwrap_or_default();
            probe.steps.push(format!("credentials{from} {} ms", ms(t)));
            probe
        }
    }
}

/// DNS, TCP and (https) TLS to the provider's `base_url`.
async fn reach(p: &Provider, tls: Arc<rustls::ClientConfig>, limit: Duration) -> Probe {
    let mut probe = Probe {
        provider: p.name.clone(),
        url: p.base_url.to_string(),
        steps: Vec::new(),
        problem: None,
    };
    let https = p.base_url.scheme_str() == Some("https");
    let Some(host) = p
        .base_url
        .host()
        .map(|h| h.trim_matches(['[', ']']).to_string())
    else {
        probe.problem = Some((Step::Dns, "base_url has no host".into()));
        return probe;
    };
    let port = p
        .base_url
        .port_u16()
        .unwrap_or(if https { 443 } else { 80 });
    let t = now();
    let addrs: Vec<SocketAddr> =
        match tokio::time::timeout(limit, tokio::net::lookup_host((host.as_str(), port))).await {
            Err(_) => return fail(probe, Step::Dns, format!("no answer within {limit:?}")),
            Ok(Err(e)) => return fail(probe, Step::Dns, format!("cannot resolve `{host}`: {e}")),
            Ok(Ok(a)) => a.collect(),
        };
    if addrs.is_empty() {
        return fail(probe, Step::Dns, format!("`{host}` has no addresses"));
    }
    probe
        .steps
        .push(format!("dns {} address(es) {} ms", addrs.len(), ms(t)));
    let t = now();
    let mut last = String::new();
    let mut stream = None;
    for a in &addrs {
        match tokio::time::timeout(limit, tokio::net::TcpStream::connect(a)).await {
            Ok(Ok(s)) => {
                stream = Some((s, *a));
                break;
            }
            Ok(Err(e)) => last = format!("{a}: {e}"),
            Err(_) => last = format!("{a}: no answer within {limit:?}"),
        }
    }
    let Some((stream, addr)) = stream else {
        return fail(probe, Step::Connect, last);
    };
    probe.steps.push(format!("tcp {addr} {} ms", ms(t)));
    if !https {
        return probe;
    }
    let Ok(name) = rustls::pki_types::ServerName::try_from(host.clone()) else {
        return fail(
            probe,
            Step::Tls,
            format!("`{host}` is not a valid TLS server name"),
        );
    };
    let t = now();
    let connector = tokio_rustls::TlsConnector::from(tls);
    match tokio::time::timeout(limit, connector.connect(name, stream)).await {
        Err(_) => fail(probe, Step::Tls, format!("no handshake within {limit:?}")),
        Ok(Err(e)) => fail(probe, Step::Tls, e.to_string()),
        Ok(Ok(s)) => {
            let version = s
                .get_ref()
                .1
                .protocol_version()
                .map(|v| format!("{v:?}"))
                .unwrap_or_default();
            probe.steps.push(format!("tls {version} {} ms", ms(t)));
            probe
        }
    }
}

fn fail(mut probe: Probe, step: Step, why: String) -> Probe {
    probe.problem = Some((step, why));
    probe
}

/// Probes `config`'s providers, prints one line per provider (stdout) and
/// each problem with what to do (stderr); returns the exit code (1 when any
/// provider cannot be reached).
pub fn run(config: &Config, step_timeout: Duration) -> i32 {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("levee check --probe: cannot start the async runtime: {e}");
            return 1;
        }
    };
    let probes = rt.block_on(probe_all(config, step_timeout));
    // A lookup that timed out may still run on a blocking thread: do not wait for it.
    rt.shutdown_background();
    let mut out = format!(
        "\nProbe (DNS, TCP, and TLS for https, to each provider's base_url; {} s per step):\n",
        step_timeout.as_secs_f64()
    );
    let mut failed = 0;
    for p in &probes {
        let status = match &p.problem {
            None => "ok".to_string(),
            Some((step, why)) => {
                failed += 1;
                eprintln!(
                    "levee check --probe: provider `{}` ({}): {} failed: {why}; {}",
                    p.provider,
                    p.url,
                    step.name(),
                    step.advice()
                );
                format!("FAILED {}: {why}", step.name())
            }
        };
        let _ = writeln!(
            out,
            "  {:<16} {:<40} {}{}{}",
            p.provider,
            p.url,
            p.steps.join(", "),
            if p.steps.is_empty() { "" } else { " · " },
            status
        );
    }
    print!("{out}");
    i32::from(failed > 0)
}
