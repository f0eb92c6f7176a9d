//! The allocator's settings. mimalloc, the binary's global allocator, keeps memory it freed
//! for about a second before giving it back (its purge delay), and backs its arena with
//! transparent huge pages where the system allows them; both show up as resident memory that
//! holds nothing; and it gives freed memory back only when some thread next calls into it. The
//! functions here run at start and every second while idle (`main`), and around model loads
//! (the control thread), never on a request's way.
//!
//! The figures behind them are in `perf/RESULTS.md`, "Memory".

// Links mimalloc's C library into every binary built on this crate (tests included, where it
// is not the global allocator), so the declarations below always resolve.
extern crate mimalloc;

use std::ffi::{c_int, c_long};

extern "C" {
    /// mimalloc's `mi_collect` (the `mimalloc` crate does not re-export it).
    fn mi_collect(force: bool);
    fn mi_option_get(option: c_int) -> c_long;
    fn mi_option_set(option: c_int, value: c_long);
}

/// `mi_option_purge_delay` in mimalloc 3's `mi_option_t` (the bundled 3.3; its Rust bindings
/// do not name it). Milliseconds between freeing memory and giving it back; default 1,000.
const PURGE_DELAY: c_int = 15;

/// Hand memory the allocator holds free back to the system (after a large, short-lived
/// allocation such as parsing a model's files). Not for the hot path: it walks the heap.
pub fn release_free_memory() {
    // SAFETY: `mi_collect` takes no pointers; it only releases the allocator's own free pages.
    unsafe { mi_collect(true) };
}

/// Give back to the system what threads freed and the allocator has kept past its delay.
/// mimalloc does that only when some thread next frees or allocates through its slow path: a
/// shard that goes quiet after a burst would keep the burst's memory resident (measured: 9 MB
/// after 200 streams at once, until the next request). Cheap (the calling thread's few pages
/// and a look at the arena's purge clock); meant for a thread that wakes now and then anyway.
pub fn give_back_due() {
    // SAFETY: `mi_collect` takes no pointers; without `force` it only frees pages that are
    // empty and purges memory whose delay is over.
    unsafe { mi_collect(false) };
}

/// Run `f` with freed memory given back to the system at once, then restore the delay and
/// release what is left. For large, short-lived work (building a tokenizer takes about six
/// times its file's size for a moment, most of it freed and allocated again within the
/// call): with the delay, memory freed early in the call is still resident when the call
/// peaks. Other threads allocating meanwhile purge at once too, which costs them a little
/// time, not correctness. Calls may overlap (one control thread per server): the delay comes
/// back when the last one ends.
pub fn purging_at_once<T>(f: impl FnOnce() -> T) -> T {
    let guard = EagerPurge::enter();
    let out = f();
    drop(guard);
    release_free_memory();
    out
}

/// How many [`purging_at_once`] calls are running, and the delay to restore after the last.
static EAGER: std::sync::Mutex<(usize, c_long)> = std::sync::Mutex::new((0, 0));

struct EagerPurge;

impl EagerPurge {
    fn enter() -> EagerPurge {
        let mut g = EAGER.lock().unwrap_or_else(|p| p.into_inner());
        if g.0 == 0 {
            // SAFETY: reading and setting an option by its index; no pointers are involved.
            g.1 = unsafe { mi_option_get(PURGE_DELAY) };
            // SAFETY: as above.
            unsafe { mi_option_set(PURGE_DELAY, 0) };
        }
        g.0 += 1;
        EagerPurge
    }
}

impl Drop for EagerPurge {
    fn drop(&mut self) {
        let mut g = EAGER.lock().unwrap_or_else(|p| p.into_inner());
        g.0 -= 1;
        if g.0 == 0 {
            // SAFETY: setting an option by its index; no pointers are involved.
            unsafe { mi_option_set(PURGE_DELAY, g.1) };
        }
    }
}

/// Keep this process off transparent huge pages. mimalloc asks for them on its arena; each
/// first touch of a 2 MiB region then makes all of it resident, and memory given back inside
/// one stays resident: ~10 MB more at rest and up to ~20 MB more at the start's peak, for no
/// measurable gain per request. (mimalloc's own `allow_thp` option does this same call, but
/// it is read before `main` runs.) Call before any thread starts.
pub fn without_huge_pages() {
    // SAFETY: PR_SET_THP_DISABLE takes integer arguments only and changes only this
    // process's memory policy.
    unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_purge_delay_index_names_the_purge_delay() {
        if std::env::var_os("MIMALLOC_PURGE_DELAY").is_some() {
            return;
        }
        // SAFETY: reading an option by its index.
        assert_eq!(unsafe { mi_option_get(PURGE_DELAY) }, 1000, "mimalloc 3's default purge delay");
        let seen = purging_at_once(|| {
            // SAFETY: as above.
            unsafe { mi_option_get(PURGE_DELAY) }
        });
        assert_eq!(seen, 0);
        // SAFETY: as above.
        assert_eq!(unsafe { mi_option_get(PURGE_DELAY) }, 1000, "restored");
    }

    #[test]
    fn without_huge_pages_sets_the_process_flag() {
        without_huge_pages();
        // SAFETY: PR_GET_THP_DISABLE takes no pointers.
        assert_eq!(unsafe { libc::prctl(libc::PR_GET_THP_DISABLE, 0, 0, 0, 0) }, 1);
    }
}
