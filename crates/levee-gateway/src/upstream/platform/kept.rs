//! A credential fetched from an identity endpoint and kept: used until
//! five minutes before it expires, then fetched again in the background
//! while it is still used; one fetch at a time (the others wait for it);
//! a fetch that fails keeps the current one until its expiry. The AWS
//! chain's fetched keys and Entra ID's tokens are kept this way.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

/// A credential is fetched again this long before it expires.
pub(super) const REFRESH_BEFORE_MS: u64 = 5 * 60 * 1000;

/// Where a kept credential is fetched from.
pub(super) trait Refetch: Send + Sync + 'static {
    type Value: Clone + Send + Sync + 'static;
    /// A fresh credential and when it expires (unix ms; `None`: never).
    fn fetch(&self) -> impl Future<Output = Result<(Self::Value, Option<u64>), String>> + Send;
    /// Where it comes from, in words.
    fn describe(&self) -> String;
}

/// A credential from `inner`, kept and refreshed.
pub(super) struct Kept<F: Refetch> {
    pub(super) inner: F,
    held: Mutex<Option<(F::Value, Option<u64>)>>,
    flight: tokio::sync::Mutex<()>,
    refreshing: AtomicBool,
}

impl<F: Refetch> std::fmt::Debug for Kept<F> {
    /// Where the credential comes from, never what it is.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.inner.describe())
    }
}

impl<F: Refetch> Kept<F> {
    pub(super) fn new(inner: F) -> Self {
        Kept {
            inner,
            held: Mutex::new(None),
            flight: tokio::sync::Mutex::new(()),
            refreshing: AtomicBool::new(false),
        }
    }

    fn held(&self) -> Option<(F::Value, Option<u64>)> {
        self.held
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The credential held now, if any.
    pub(super) fn cached(&self) -> Option<F::Value> {
        self.held().map(|(v, _)| v)
    }

    /// A credential good at `now_ms`: the one held, or fetched now.
    pub(super) async fn get(self: &Arc<Self>, now_ms: u64) -> Result<F::Value, String> {
        if let Some((v, expires)) = self.held() {
            match expires {
                None => return Ok(v),
                Some(e) if now_ms.saturating_add(REFRESH_BEFORE_MS) < e => return Ok(v),
                Some(e) if now_ms < e => {
                    self.refresh_in_background();
                    return Ok(v);
                }
                Some(_) => {}
            }
        }
        let _one = self.flight.lock().await;
        if let Some((v, _)) = self.held().filter(|(_, e)| e.is_none_or(|e| now_ms < e)) {
            return Ok(v);
        }
        let (v, expires) = self.inner.fetch().await?;
        self.store(v.clone(), expires);
        Ok(v)
    }

    fn store(&self, v: F::Value, expires: Option<u64>) {
        *self.held.lock().unwrap_or_else(PoisonError::into_inner) = Some((v, expires));
    }

    fn refresh_in_background(self: &Arc<Self>) {
        if self.refreshing.swap(true, Ordering::AcqRel) {
            return;
        }
        let me = Arc::clone(self);
        tokio::spawn(async move {
            let _one = me.flight.lock().await;
            match me.inner.fetch().await {
                Ok((v, expires)) => me.store(v, expires),
                Err(e) => {
                    tracing::warn!(target: "levee", source = %me.inner.describe(), error = %e, "credential refresh failed; the current one stays in use until it expires")
                }
            }
            me.refreshing.store(false, Ordering::Release);
        });
    }
}
