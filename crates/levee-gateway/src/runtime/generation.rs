//! Which config generation runs: its number, its content hash and when it
//! was loaded, and the counter of reloads every generation shares.

use crate::clock::Clock;
use levee_config::Config;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use sha2::{Digest, Sha256};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    pub result: String,
}

/// Which config a generation runs.
#[derive(Clone, Debug)]
pub struct Generation {
    /// 1 for the config the process started with, +1 per accepted reload.
    pub number: u64,
    /// The first 12 hex digits of the sha256 of the config file as read
    /// (`sha256sum levee.yaml` starts with them); without a file, of the
    /// validated config.
    pub hash: String,
    /// When this generation was loaded (unix ms).
    pub loaded_unix_ms: u64,
    reloads: Family<ResultLabel, Counter>,
}

impl Generation {
    /// The first generation; registers `levee_config_reloads_total`.
    pub fn first(config: &Config, registry: &mut Registry, clock: &Clock) -> Self {
        let reloads = Family::<ResultLabel, Counter>::default();
        registry.register(
            "levee_config_reloads",
            "Config reloads (SIGHUP) by result: ok (the new config serves new requests) or error (refused; the running config kept)",
            reloads.clone(),
        );
        for result in ["ok", "error"] {
            let _ = reloads.get_or_create(&ResultLabel {
                result: result.into(),
            });
        }
        Generation {
            number: 1,
            hash: hash_of(format!("{config:?}").as_bytes()),
            loaded_unix_ms: clock.unix_ms(),
            reloads,
        }
    }

    /// The generation after this one, loaded at `loaded_unix_ms` from a
    /// config whose hash is `hash`; it counts reloads on the same family.
    pub(crate) fn next(&self, hash: String, loaded_unix_ms: u64) -> Generation {
        Generation {
            number: self.number + 1,
            hash,
            loaded_unix_ms,
            reloads: self.reloads.clone(),
        }
    }

    /// The config's version as `/readyz` and the status page show it.
    pub fn version(&self) -> String {
        format!(
            "config {} generation {} loaded_unix_ms {}",
            self.hash, self.number, self.loaded_unix_ms
        )
    }

    /// Counts a reload by its result (`ok` or `error`).
    pub(crate) fn count(&self, result: &str) {
        self.reloads
            .get_or_create(&ResultLabel {
                result: result.into(),
            })
            .inc();
    }
}

/// A short content hash: the first 12 hex digits of sha256.
pub fn hash_of(bytes: &[u8]) -> String {
    hex::encode(&Sha256::digest(bytes)[..6])
}
