//! Small helpers shared by more than one module (no I/O, no state).

/// The value of one ASCII hex digit (either case).
pub fn hex_digit(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

// Links mimalloc's C library into every binary built on this crate (tests included, where it
// is not the global allocator), so the declaration below always resolves.
extern crate mimalloc;

extern "C" {
    /// mimalloc's `mi_collect` (the global allocator is mimalloc, linked through the
    /// `mimalloc` crate, which does not re-export it).
    fn mi_collect(force: bool);
}

/// Hand memory the allocator holds free back to the system (after a large, short-lived
/// allocation such as parsing a model's files). Not for the hot path: it walks the heap.
pub fn release_free_memory() {
    // SAFETY: `mi_collect` takes no pointers; it only releases the allocator's own free pages.
    unsafe { mi_collect(true) };
}
