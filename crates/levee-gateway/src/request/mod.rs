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

/// The largest allocation jemalloc (the `levee` binary's allocator) serves
/// from its thread cache's fast path, and frees there. One of 4,097 bytes
/// or more takes its general path: ~250 instructions more to allocate and
/// as many to free (callgrind, jemalloc 5.3).
pub(crate) const FAST_PATH_MAX: usize = 4096;

/// Fails the build when `F`, a future boxed once a request (the answer's,
/// the driver's), is over [`FAST_PATH_MAX`] bytes. At 4,848 and 4,280
/// bytes the two cost ~1,000 instructions a request (2.8 %) in jemalloc's
/// general path. To bring one back under: box an await that is rare
/// inside it (a Redis or store call), keep fewer values across its awaits
/// (a value borrowed, or matched by parts, keeps its slot to the end of
/// its scope), or make it an `async` block, not an `async fn` (which keeps
/// each argument twice).
pub(crate) fn fits_fast_path<F>(_: &F) {
    const {
        assert!(
            std::mem::size_of::<F>() <= FAST_PATH_MAX,
            "a future boxed once a request is over jemalloc's 4 KiB fast path"
        )
    };
}
