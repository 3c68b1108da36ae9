//! The plugin's default allocator: a bump allocator over the instance's linear memory.
//!
//! The host runs every election in a fresh instance and throws it away afterwards, so nothing a
//! plugin allocates needs to outlive one call, and memory never needs to be handed back for reuse
//! by a later call. Allocation is then a pointer bump (the host's per-string `cabi_realloc` calls
//! that pass the request in cost a few instructions each), and freeing is free: only the most
//! recent allocation is given back (which makes a growing `Vec` or `String` reallocate in place);
//! everything else stays allocated until the instance is discarded.
//!
//! The price is that a plugin which allocates and frees a lot within one call (building many
//! temporary strings in a loop, say) uses more memory than it would with a general allocator, and
//! may reach its memory limit sooner. Such a plugin can switch to dlmalloc with the SDK's
//! `dlmalloc` feature.
#![allow(unsafe_code)]

use core::alloc::{GlobalAlloc, Layout};
use core::sync::atomic::{AtomicUsize, Ordering};

/// Bytes in one WebAssembly page.
const PAGE: usize = 64 * 1024;
/// Pages requested at least per `memory.grow`: each growth is a call into the host, so grow in
/// steps of 256 KiB rather than page by page.
const MIN_GROW_PAGES: usize = 4;

unsafe extern "C" {
    /// The first byte past the stack and the data segments, defined by the linker (wasm-ld).
    static __heap_base: u8;
}

/// The address [`__heap_base`] stands for.
fn heap_base() -> usize {
    // SAFETY: only the symbol's address is taken, never its value.
    core::ptr::addr_of!(__heap_base) as usize
}

/// A bump allocator over linear memory 0; see the module docs.
pub struct BumpAllocator {
    /// The next free byte; 0 until the first allocation.
    next: AtomicUsize,
    /// One past the last byte of linear memory, as far as this allocator knows.
    end: AtomicUsize,
}

impl BumpAllocator {
    /// An allocator that has handed out nothing yet.
    #[must_use]
    pub const fn new() -> Self {
        Self {
            next: AtomicUsize::new(0),
            end: AtomicUsize::new(0),
        }
    }

    /// Reserves `size` bytes at `align`, growing memory when needed; null when memory cannot grow.
    fn bump(&self, size: usize, align: usize) -> *mut u8 {
        let mut next = self.next.load(Ordering::Relaxed);
        if next == 0 {
            // Start where the linker ends the stack and the data segments, inside the memory the
            // module declares: most elections then never grow memory, which would cost the host an
            // mprotect now and another when it resets the instance's slot.
            next = heap_base();
            self.end.store(
                core::arch::wasm32::memory_size::<0>() * PAGE,
                Ordering::Relaxed,
            );
        }
        let Some(start) = next.checked_next_multiple_of(align) else {
            return core::ptr::null_mut();
        };
        let Some(stop) = start.checked_add(size) else {
            return core::ptr::null_mut();
        };
        if !self.reserve(stop) {
            return core::ptr::null_mut();
        }
        self.next.store(stop, Ordering::Relaxed);
        start as *mut u8
    }

    /// Makes sure memory reaches `stop`, growing it if needed; false when it cannot grow.
    fn reserve(&self, stop: usize) -> bool {
        let end = self.end.load(Ordering::Relaxed);
        if stop <= end {
            return true;
        }
        let pages = (stop - end).div_ceil(PAGE).max(MIN_GROW_PAGES);
        if core::arch::wasm32::memory_grow::<0>(pages) == usize::MAX {
            return false;
        }
        self.end.store(end + pages * PAGE, Ordering::Relaxed);
        true
    }
}

impl Default for BumpAllocator {
    fn default() -> Self {
        Self::new()
    }
}

// SAFETY: `alloc` returns either null or a block of `layout.size()` bytes at `layout.align()` that
// no other live allocation overlaps (the bump pointer only moves past handed-out blocks, and only
// moves back over the most recent block when that block is freed or shrunk). Plugins are
// single-threaded wasm32 instances, so the relaxed atomics are never contended.
unsafe impl GlobalAlloc for BumpAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        self.bump(layout.size(), layout.align())
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        let end = ptr as usize + layout.size();
        if end == self.next.load(Ordering::Relaxed) {
            self.next.store(ptr as usize, Ordering::Relaxed);
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let start = ptr as usize;
        let is_last = start + layout.size() == self.next.load(Ordering::Relaxed);
        if is_last && let Some(stop) = start.checked_add(new_size) {
            if !self.reserve(stop) {
                return core::ptr::null_mut();
            }
            self.next.store(stop, Ordering::Relaxed);
            return ptr;
        }
        if new_size <= layout.size() {
            return ptr;
        }
        let new = self.bump(new_size, layout.align());
        if !new.is_null() {
            // SAFETY: both blocks are live, at least `layout.size()` bytes long, and distinct.
            unsafe { core::ptr::copy_nonoverlapping(ptr, new, layout.size()) };
        }
        new
    }
}
