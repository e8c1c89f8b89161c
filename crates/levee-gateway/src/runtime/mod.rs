//! The running gateway: the state every request of a config generation
//! shares (`shared`), the generation's identity (`generation`), reload
//! without a restart (`reload`) and the end of the shutdown grace period
//! (`shutdown`).

pub(crate) mod generation;
pub(crate) mod reload;
pub(crate) mod shared;
pub(crate) mod shutdown;
