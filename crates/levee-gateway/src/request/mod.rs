//! One request's life: admission (`handler`), what each target is sent
//! (`plan`, `crossing`), the planner driven attempt by attempt (`drive`,
//! `attempt`), a committed stream relayed (`stream`), the model list
//! (`models`), and the request's observer, which every step reports to
//! (`observer`).

pub(crate) mod attempt;
pub(crate) mod crossing;
pub(crate) mod drive;
pub(crate) mod handler;
pub(crate) mod models;
pub(crate) mod observer;
pub(crate) mod plan;
pub(crate) mod spending;
pub(crate) mod stream;
