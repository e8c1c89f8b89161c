//! The way to Redis, by how it is deployed (`state.mode`):
//!
//! - `standalone`: one server, through the client's connection manager
//!   (reconnects by itself);
//! - `cluster`: the client's cluster connection from the `nodes` seeds,
//!   which follows the slot map itself: `MOVED` and `ASK`, a resharding and
//!   a primary's failover are the client library's to handle, not Levee's;
//! - `sentinel`: the primary the sentinels (`nodes`) name for
//!   `sentinel_master`, asked again after a failover (a connection error,
//!   or a write refused with `READONLY` by a primary demoted to replica).
//!
//! Every way is made lazily: a Redis that is down at start is a fallback,
//! not a failure, and the first call that finds it connects.

use std::sync::Mutex;
use std::time::Duration;

use redis::aio::ConnectionManager;
use redis::cluster_async::ClusterConnection;
use redis::IntoConnectionInfo;
use redis::{Cmd, RedisError, RedisFuture, RedisResult, Value};

/// One connection, of whichever kind: cheap to clone, shared by calls.
#[derive(Clone)]
pub(crate) enum Conn {
    Manager(ConnectionManager),
    Cluster(ClusterConnection),
}

impl redis::aio::ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Manager(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Manager(c) => c.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Manager(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }
}

/// The way to Redis.
pub(crate) enum Link {
    Single(ConnectionManager),
    Cluster {
        client: redis::cluster::ClusterClient,
        conn: tokio::sync::Mutex<Option<ClusterConnection>>,
    },
    Sentinel {
        client: tokio::sync::Mutex<redis::sentinel::SentinelClient>,
        conn: Mutex<Option<ConnectionManager>>,
        config: redis::aio::ConnectionManagerConfig,
    },
}

impl Link {
    /// Whether this is a cluster (whose writes `WAIT` cannot follow: the
    /// command is not routed to the key's primary).
    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self, Link::Cluster { .. })
    }

    /// A connection, made now when there is none.
    pub(crate) async fn get(&self) -> RedisResult<Conn> {
        match self {
            Link::Single(m) => Ok(Conn::Manager(m.clone())),
            Link::Cluster { client, conn } => {
                let mut held = conn.lock().await;
                if let Some(c) = held.as_ref() {
                    return Ok(Conn::Cluster(c.clone()));
                }
                let c = client.get_async_connection().await?;
                *held = Some(c.clone());
                Ok(Conn::Cluster(c))
            }
            Link::Sentinel {
                client,
                conn,
                config,
            } => {
                if let Some(m) = conn.lock().unwrap_or_else(|e| e.into_inner()).clone() {
                    return Ok(Conn::Manager(m));
                }
                let primary = client.lock().await.async_get_client().await?;
                // Connected now (not lazily): the call that asked the
                // sentinels has the rest of its budget to use it, and one
                // that runs out of it leaves nothing half made behind.
                let m = ConnectionManager::new_with_config(primary, config.clone()).await?;
                *conn.lock().unwrap_or_else(|e| e.into_inner()) = Some(m.clone());
                Ok(Conn::Manager(m))
            }
        }
    }

    /// A call failed with `e` (`None`: it timed out). Under Sentinel, a
    /// connection error, a timeout (a dead primary's address may answer
    /// nothing within the state's small budget, never with an error) or a
    /// write refused by a demoted primary (`READONLY`) means the primary
    /// may have moved, so the next call asks the sentinels again. (Redis
    /// is skipped for a second after three failures in a row, so the
    /// sentinels are asked at most a few times a second.)
    pub(crate) fn failed(&self, e: Option<&RedisError>) {
        if let Link::Sentinel { conn, .. } = self {
            let moved = e.is_none_or(|e| {
                e.is_io_error()
                    || e.is_connection_dropped()
                    || e.is_connection_refusal()
                    || e.code() == Some("READONLY")
            });
            if moved {
                *conn.lock().unwrap_or_else(|e| e.into_inner()) = None;
            }
        }
    }
}

/// Why the Redis backend could not be set up (the URL shown redacted).
#[derive(Debug, thiserror::Error)]
pub enum RedisSetupError {
    #[error("state.url `{url}` is not a Redis URL like `redis://127.0.0.1:6379`: {source}")]
    Url {
        url: String,
        source: redis::RedisError,
    },
    #[error("state.tls: {what} `{path}` cannot be read: {source}")]
    File {
        what: &'static str,
        path: String,
        source: std::io::Error,
    },
    #[error("state.tls: the certificates for `{url}` cannot be used: {source}")]
    Tls {
        url: String,
        source: redis::RedisError,
    },
    #[error("state.password_env: environment variable `{0}` is not set; export it, or put the password in the URL")]
    Password(String),
}

impl RedisSetupError {
    /// The `state` key at fault.
    pub fn key(&self) -> &'static str {
        match self {
            RedisSetupError::Url { .. } => "url",
            RedisSetupError::File { .. } | RedisSetupError::Tls { .. } => "tls",
            RedisSetupError::Password(_) => "password_env",
        }
    }

    /// Whether this is a value missing from the environment (`levee check
    /// --allow-missing-env` warns).
    pub fn is_missing(&self) -> bool {
        matches!(self, RedisSetupError::Password(_))
    }
}

/// `levee check`: the way to Redis `state` says can be made (its TLS files
/// read and parsed, its password variable set, its URLs read); nothing is
/// connected. `Ok` for the memory backend.
pub fn check_backend(state: &levee_config::StateBackend) -> Result<(), RedisSetupError> {
    match state {
        levee_config::StateBackend::Memory => Ok(()),
        levee_config::StateBackend::Redis { url, connect, .. } => prepare(url, connect).map(|_| ()),
    }
}

/// How long making a connection, and each answer, may take.
const CONNECT_TIMEOUT: Duration = Duration::from_millis(250);

/// The way to Redis for `url` and `connect` (see the module's words).
pub(crate) fn link(
    url: &str,
    connect: &levee_config::RedisConnect,
) -> Result<Link, RedisSetupError> {
    match prepare(url, connect)? {
        // Made here, not in `prepare`: the manager starts a task, so it
        // needs a runtime (`levee check` has none).
        Prepared::Single(client, config) => ConnectionManager::new_lazy_with_config(client, config)
            .map(Link::Single)
            .map_err(|source| RedisSetupError::Url {
                url: levee_config::redact_url(url),
                source,
            }),
        Prepared::Link(link) => Ok(link),
    }
}

/// The way to Redis, all its settings read and checked, nothing started.
enum Prepared {
    Single(redis::Client, redis::aio::ConnectionManagerConfig),
    Link(Link),
}

/// Reads and checks every setting of the way to Redis: URLs, the password
/// variable, the TLS files. Starts nothing.
fn prepare(url: &str, connect: &levee_config::RedisConnect) -> Result<Prepared, RedisSetupError> {
    use levee_config::RedisMode;
    let first = connect.nodes.first().map_or(url, String::as_str);
    if first.starts_with("rediss://") {
        // The one crypto provider Levee builds (ring); the Redis client asks
        // for the process default.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
    let password = match &connect.password_env {
        Some(var) => Some(std::env::var(var).map_err(|_| RedisSetupError::Password(var.clone()))?),
        None => None,
    };
    let certs = certificates(connect.tls.as_ref())?;
    let manager = || {
        redis::aio::ConnectionManagerConfig::new()
            .set_connection_timeout(Some(CONNECT_TIMEOUT))
            .set_response_timeout(Some(CONNECT_TIMEOUT))
            .set_number_of_retries(1)
            .set_max_delay(Duration::from_millis(500))
    };
    let bad_url = |u: &str| {
        let shown = levee_config::redact_url(u);
        move |source| RedisSetupError::Url { url: shown, source }
    };
    match connect.mode {
        RedisMode::Standalone => {
            let mut info = url.into_connection_info().map_err(bad_url(url))?;
            if let Some(p) = &password {
                let settings = info.redis_settings().clone().set_password(p);
                info = info.set_redis_settings(settings);
            }
            let client = match certs {
                Some(c) => redis::Client::build_with_tls(info, c).map_err(bad_url(url))?,
                None => redis::Client::open(info).map_err(bad_url(url))?,
            };
            Ok(Prepared::Single(client, manager()))
        }
        RedisMode::Cluster => {
            let mut b =
                redis::cluster::ClusterClientBuilder::new(connect.nodes.iter().map(String::as_str))
                    .connection_timeout(CONNECT_TIMEOUT)
                    .response_timeout(CONNECT_TIMEOUT)
                    .retries(2);
            if let Some(p) = &password {
                b = b.password(p);
            }
            if let Some(c) = certs {
                b = b.certs(c);
            }
            let client = b.build().map_err(bad_url(first))?;
            Ok(Prepared::Link(Link::Cluster {
                client,
                conn: tokio::sync::Mutex::new(None),
            }))
        }
        RedisMode::Sentinel => {
            sentinel(connect, password.as_deref(), certs, manager()).map(Prepared::Link)
        }
    }
}

/// The way to the primary the sentinels name.
fn sentinel(
    connect: &levee_config::RedisConnect,
    password: Option<&str>,
    certs: Option<redis::TlsCertificates>,
    config: redis::aio::ConnectionManagerConfig,
) -> Result<Link, RedisSetupError> {
    use redis::sentinel::{SentinelClientBuilder, SentinelServerType};
    let bad_url = |u: &str| {
        let shown = levee_config::redact_url(u);
        move |source| RedisSetupError::Url { url: shown, source }
    };
    let first = connect.nodes.first().map_or("", String::as_str);
    let addrs = connect
        .nodes
        .iter()
        .map(|n| {
            n.as_str()
                .into_connection_info()
                .map(|i| i.addr().clone())
                .map_err(bad_url(n))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let master = connect.sentinel_master.clone().unwrap_or_default();
    let mut b = SentinelClientBuilder::new(addrs, master, SentinelServerType::Master)
        .map_err(bad_url(first))?;
    if let Some(p) = password {
        b = b.set_client_to_redis_password(p);
    }
    if let Some(c) = certs {
        b = b
            .set_client_to_redis_tls_mode(redis::TlsMode::Secure)
            .set_client_to_redis_certificates(c);
    }
    let client = b.build().map_err(bad_url(first))?;
    Ok(Link::Sentinel {
        client: tokio::sync::Mutex::new(client),
        conn: Mutex::new(None),
        config,
    })
}

/// The TLS files of `tls` read: the CA (which must hold a PEM certificate)
/// and the client's certificate and key.
fn certificates(
    tls: Option<&levee_config::RedisTls>,
) -> Result<Option<redis::TlsCertificates>, RedisSetupError> {
    let Some(tls) = tls else { return Ok(None) };
    let read = |what: &'static str, path: &std::path::Path| {
        std::fs::read(path).map_err(|source| RedisSetupError::File {
            what,
            path: path.display().to_string(),
            source,
        })
    };
    let root_cert = tls
        .ca_file
        .as_deref()
        .map(|p| read("ca_file", p))
        .transpose()?;
    if let (Some(pem), Some(path)) = (&root_cert, &tls.ca_file) {
        if !pem.windows(27).any(|w| w == b"-----BEGIN CERTIFICATE-----") {
            return Err(RedisSetupError::File {
                what: "ca_file",
                path: path.display().to_string(),
                source: std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    "it holds no PEM certificate (-----BEGIN CERTIFICATE-----)",
                ),
            });
        }
    }
    let client_tls = match &tls.client {
        Some((cert, key)) => Some(redis::ClientTlsConfig {
            client_cert: read("cert_file", cert)?,
            client_key: read("key_file", key)?,
        }),
        None => None,
    };
    Ok(Some(redis::TlsCertificates {
        client_tls,
        root_cert,
    }))
}
