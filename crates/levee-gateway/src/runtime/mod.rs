//! The running gateway: the state every request of a config generation
//! shares (`shared`), the generation's identity (`generation`), reload
//! without a restart (`reload`), the end of the shutdown grace period
//! (`shutdown`) and worker threads bound to CPUs (`affinity`).

pub mod affinity;
pub(crate) mod generation;
pub(crate) mod reload;
pub(crate) mod shared;
pub(crate) mod shutdown;
pub(crate) mod warm;
