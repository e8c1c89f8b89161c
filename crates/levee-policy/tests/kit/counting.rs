//! A global allocator that counts the allocations made on each thread, and
//! the bytes they hold (wrapping the system allocator), for tests that hold
//! a code path to an allocation or memory budget. The policy core's
//! no-allocation test and the gateway's per-request allocation and
//! per-stream memory tests install it.
#![allow(dead_code)] // each test reads the counter it needs

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

pub struct Counting;

thread_local! {
    // A const-initialised `Cell<u64>` needs no allocation and no destructor,
    // so it is safe to touch from inside the allocator.
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
    // Bytes allocated on this thread less bytes freed on it.
    static LIVE: Cell<i64> = const { Cell::new(0) };
}

fn count() {
    // `try_with`: the slot may already be gone while a thread is being torn down.
    let _ = ALLOCATIONS.try_with(|c| c.set(c.get() + 1));
}

fn hold(bytes: i64) {
    let _ = LIVE.try_with(|c| c.set(c.get() + bytes));
}

/// Allocations made on this thread so far.
pub fn allocations() -> u64 {
    ALLOCATIONS.with(Cell::get)
}

/// Heap bytes allocated on this thread and not yet freed (on it): the
/// difference between two readings is what the code in between keeps.
pub fn live_bytes() -> i64 {
    LIVE.with(Cell::get)
}

// SAFETY: every call is forwarded unchanged to `System`; counting has no
// effect on the memory handed out.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        hold(layout.size() as i64);
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count();
        hold(layout.size() as i64);
        // SAFETY: same contract as ours.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        hold(new_size as i64 - layout.size() as i64);
        // SAFETY: same contract as ours.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        hold(-(layout.size() as i64));
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }
}
