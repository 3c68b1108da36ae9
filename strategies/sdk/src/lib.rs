//! The SDK for Conclave strategy plugins.
//!
//! A strategy decides who leads a Lease. Write one by implementing [`Strategy`] and exporting it
//! with [`export_strategy!`]; build the crate (a `cdylib`) with
//! `cargo build --target wasm32-wasip2 --release` and the result is a WebAssembly component that
//! implements `conclave:strategy@0.4.0` (see `wit/strategy.wit`) and imports nothing but the
//! host's log.
//!
//! ```ignore
//! #![cfg_attr(target_arch = "wasm32", no_std)]
//! use conclave_strategy::prelude::*;
//!
//! struct Newest;
//!
//! impl Strategy for Newest {
//!     const STRATEGIES: &'static [&'static str] = &["example.com/newest"];
//!     const DESCRIPTION: &'static str = "the highest emulation version leads, then the first name";
//!     // Versions and times always arrive; this rule reads no other field, and never compares
//!     // anything with `now`.
//!     const READS: Reads = Reads { now: false, ..Reads::NOTHING };
//!
//!     fn elect(request: &ElectionRequest) -> Result<Option<u32>, String> {
//!         Ok(request
//!             .candidates
//!             .iter()
//!             .filter_map(|c| Some((core::cmp::Reverse(c.emulation_version()?.order), c.position())))
//!             .min()
//!             .map(|(_, i)| i))
//!     }
//! }
//!
//! conclave_strategy::export_strategy!(Newest);
//! ```
//!
//! # What a rule gets, and what it answers
//!
//! - Candidates arrive sorted by name, so "the first name" is the lowest position. They cross
//!   into the component as columns (one list per field, the fastest shape to copy);
//!   `request.candidates.iter()` gives each as a [`Candidate`] all the same.
//! - Versions arrive parsed ([`ParsedVersion`]); compare them by `order`.
//! - Other fields (name, strategy, version text, labels, annotations) arrive only when
//!   [`Strategy::READS`] asks for them: each string costs an allocation inside the plugin, and
//!   for most rules crossing into the component was most of the cost of an election. The default
//!   reads everything; narrow it once the rule works.
//! - `request.now` is the election's time, the plugin's only clock. [`Reads::now`] says whether the
//!   answer may depend on it: `true` (the default, always safe) has the plugin asked again at every
//!   renewal of the Lease by its holder; a rule that never compares anything with `now` declares
//!   `false`, and such renewals cost nothing.
//! - `elect` answers with the winner's position ([`Candidate::position`]).
//!
//! [`native::elect_native`] runs a strategy on a controller-side request without WebAssembly, exactly as
//! the host would hand it to the component: use it in unit tests.
//!
//! # `no_std`
//!
//! Plugins are `no_std` with `alloc` in the component: a `std` guest for wasm32-wasip2 imports a
//! dozen WASI interfaces it never uses, which the host refuses. [`export_strategy!`] supplies what
//! `no_std` needs on wasm32: a global allocator, a panic handler that logs the panic and traps,
//! and the `cabi_realloc` export the component model calls to pass data in.
//!
//! The allocator is a bump allocator (see [`BumpAllocator`]): every election runs in a fresh
//! instance that is discarded afterwards, so memory is never reused across calls and freeing it
//! within one is rarely worth its cost. A plugin that allocates and frees a lot within one call can
//! use dlmalloc instead with the SDK's `dlmalloc` feature.
#![cfg_attr(not(test), no_std)]
#![deny(unsafe_code)]

extern crate alloc;

use alloc::string::String;

pub use conclave_core::strategy::{MINIMUM_COMPATIBILITY_VERSION, OLDEST_EMULATION_VERSION};
pub use conclave_core::time::Timestamp;
/// Semantic versions parsed the way Kubernetes parses them, for rules that read the version text:
/// [`Version::parse_tolerant`] is the rule the election controller compares with,
/// [`Version::parse_strict`] the one the API server validates with.
pub use conclave_core::version::{PreRelease, Version, VersionError};

/// The generated guest bindings for `wit/strategy.wit`. Authors use [`Strategy`] and the types
/// re-exported at the crate root instead; these are public for [`export_strategy!`].
#[allow(unsafe_code, missing_docs, clippy::all)]
pub mod bindings {
    wit_bindgen::generate!({
        path: "../../wit",
        world: "conclave:strategy/strategy",
        pub_export_macro: true,
        export_macro_name: "__export_strategy_world",
        default_bindings_module: "conclave_strategy::bindings",
    });
}

pub mod log;
pub mod native;
mod rank;
mod request;

#[cfg(target_arch = "wasm32")]
mod alloc_bump;
#[cfg(target_arch = "wasm32")]
pub use alloc_bump::BumpAllocator;

pub use bindings::{CandidateColumns, CandidateFields, ElectionRequest, Lease};
pub use rank::{OldestEmulationKey, pick_oldest_emulation_version};
pub use request::{Candidate, ParsedVersion, Reads, positions};

/// What a strategy author writes: the names the strategy answers to, a description, what it
/// reads, and the rule.
pub trait Strategy {
    /// The strategy names this plugin implements, as they appear in `spec.strategy`
    /// (e.g. `OldestEmulationVersion`, or a domain-prefixed name such as `example.com/priority`).
    const STRATEGIES: &'static [&'static str];

    /// A one-line description of the rule, shown by `conclave strategy inspect`.
    const DESCRIPTION: &'static str;

    /// The candidate fields the rule reads beyond versions and times (the rest arrive as `None`),
    /// and whether its answer may depend on `now`. Everything, `now` included, by default.
    const READS: Reads = Reads::EVERYTHING;

    /// Decides one election.
    ///
    /// Return `Ok(Some(i))` when the candidate at position `i` should lead, `Ok(None)` when nobody
    /// should lead, or `Err(message)` when the strategy cannot decide (for example its settings in
    /// `request.settings` are invalid). The host rejects a position past the end. Candidates are
    /// sorted by name; the answer must depend on nothing but the request.
    fn elect(request: &ElectionRequest) -> Result<Option<u32>, String>;
}

/// Everything a plugin usually needs: `use conclave_strategy::prelude::*;`.
pub mod prelude {
    pub use crate::{
        Candidate, CandidateColumns, CandidateFields, ElectionRequest, Lease, OldestEmulationKey,
        ParsedVersion, Reads, Strategy, Timestamp, Version, log, pick_oldest_emulation_version,
        positions,
    };
    pub use alloc::borrow::ToOwned;
    pub use alloc::boxed::Box;
    pub use alloc::string::{String, ToString};
    pub use alloc::vec::Vec;
    pub use alloc::{format, vec};
}

/// Support for [`export_strategy!`]; not part of the public API.
#[doc(hidden)]
pub mod __private {
    use super::{Strategy, bindings};
    use alloc::string::{String, ToString};

    pub use alloc::string::String as StringType;

    /// The plugin's global allocator: dlmalloc with the `dlmalloc` feature, else the bump
    /// allocator.
    #[cfg(all(target_arch = "wasm32", feature = "dlmalloc"))]
    pub type GlobalAllocator = dlmalloc::GlobalDlmalloc;
    /// Builds the plugin's global allocator.
    #[cfg(all(target_arch = "wasm32", feature = "dlmalloc"))]
    pub const fn global_allocator() -> GlobalAllocator {
        dlmalloc::GlobalDlmalloc
    }
    /// The plugin's global allocator: dlmalloc with the `dlmalloc` feature, else the bump
    /// allocator.
    #[cfg(all(target_arch = "wasm32", not(feature = "dlmalloc")))]
    pub type GlobalAllocator = crate::BumpAllocator;
    /// Builds the plugin's global allocator.
    #[cfg(all(target_arch = "wasm32", not(feature = "dlmalloc")))]
    pub const fn global_allocator() -> GlobalAllocator {
        crate::BumpAllocator::new()
    }

    /// The `info` export of a plugin built from `S`.
    pub fn info<S: Strategy>(version: &str) -> bindings::PluginInfo {
        bindings::PluginInfo {
            strategies: S::STRATEGIES.iter().map(ToString::to_string).collect(),
            description: S::DESCRIPTION.to_string(),
            version: version.to_string(),
            reads: S::READS.to_wit(),
        }
    }

    /// The `elect` export of a plugin built from `S`.
    pub fn elect<S: Strategy>(request: bindings::ElectionRequest) -> Result<Option<u32>, String> {
        let answer = S::elect(&request);
        // The instance is discarded after this call: walking the request to free it is wasted work.
        core::mem::forget(request);
        answer
    }

    /// Logs a panic through the host's log without allocating (the panic may be an allocation
    /// failure), then traps so the host sees the call fail.
    #[cfg(target_arch = "wasm32")]
    pub fn panic(info: &core::panic::PanicInfo<'_>) -> ! {
        use core::fmt::Write;
        let mut buffer = crate::log::FixedBuffer::<512>::new();
        let _ = write!(buffer, "plugin panicked: {info}");
        crate::log::log(crate::log::Level::Error, buffer.as_str());
        core::arch::wasm32::unreachable()
    }

    /// The component model's `cabi_realloc`: the host allocates guest memory through it to pass
    /// arguments in.
    ///
    /// # Safety
    ///
    /// Called only by the canonical ABI with a pointer/size/alignment it got from a previous call
    /// (or null and zero), as the component model specifies.
    #[cfg(target_arch = "wasm32")]
    #[allow(unsafe_code)]
    pub unsafe fn cabi_realloc(
        old_ptr: *mut u8,
        old_len: usize,
        align: usize,
        new_len: usize,
    ) -> *mut u8 {
        use alloc::alloc::{Layout, alloc, realloc};
        if new_len == 0 {
            return align as *mut u8;
        }
        let ptr = if old_len == 0 {
            // SAFETY: the canonical ABI passes a power-of-two alignment and a non-zero size.
            unsafe { alloc(Layout::from_size_align_unchecked(new_len, align)) }
        } else {
            // SAFETY: `old_ptr` was returned by this function with this size and alignment.
            unsafe {
                realloc(
                    old_ptr,
                    Layout::from_size_align_unchecked(old_len, align),
                    new_len,
                )
            }
        };
        if ptr.is_null() {
            core::arch::wasm32::unreachable();
        }
        ptr
    }
}

// Plugins are no_std, so nothing links wasi-libc for the `memcmp` that `core` calls (string and
// slice comparison). wasi-libc's `memcmp` is pure computation and imports nothing.
#[cfg(target_arch = "wasm32")]
#[link(name = "c")]
#[allow(unsafe_code)]
unsafe extern "C" {}

/// Exports a [`Strategy`] as the plugin's `info` and `elect`, and supplies the `no_std` runtime a
/// wasm32 component needs (allocator, panic handler, `cabi_realloc`). Use it once per plugin crate:
///
/// ```ignore
/// conclave_strategy::export_strategy!(MyStrategy);
/// ```
///
/// The plugin's version in `info` is the plugin crate's `CARGO_PKG_VERSION`. The exports exist
/// only on wasm32: built natively (as an `rlib`, for tests or a native benchmark), the crate is a
/// plain library whose [`Strategy`] can be called directly.
#[macro_export]
macro_rules! export_strategy {
    ($strategy:ty) => {
        #[cfg(target_arch = "wasm32")]
        #[doc(hidden)]
        pub struct __ConclaveStrategyGuest;

        #[cfg(target_arch = "wasm32")]
        impl $crate::bindings::Guest for __ConclaveStrategyGuest {
            fn info() -> $crate::bindings::PluginInfo {
                $crate::__private::info::<$strategy>(env!("CARGO_PKG_VERSION"))
            }

            fn elect(
                request: $crate::bindings::ElectionRequest,
            ) -> ::core::result::Result<::core::option::Option<u32>, $crate::__private::StringType>
            {
                $crate::__private::elect::<$strategy>(request)
            }
        }

        #[cfg(target_arch = "wasm32")]
        $crate::bindings::__export_strategy_world!(
            __ConclaveStrategyGuest with_types_in $crate::bindings
        );

        #[cfg(target_arch = "wasm32")]
        #[global_allocator]
        static __CONCLAVE_ALLOCATOR: $crate::__private::GlobalAllocator =
            $crate::__private::global_allocator();

        #[cfg(target_arch = "wasm32")]
        #[panic_handler]
        fn __conclave_panic(info: &::core::panic::PanicInfo<'_>) -> ! {
            $crate::__private::panic(info)
        }

        /// The component model's `cabi_realloc` export.
        ///
        /// # Safety
        ///
        /// Called only by the canonical ABI.
        #[cfg(target_arch = "wasm32")]
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn cabi_realloc(
            old_ptr: *mut u8,
            old_len: usize,
            align: usize,
            new_len: usize,
        ) -> *mut u8 {
            // SAFETY: forwarded unchanged from the canonical ABI.
            unsafe { $crate::__private::cabi_realloc(old_ptr, old_len, align, new_len) }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_buffer_cuts_at_a_character_boundary() {
        use core::fmt::Write;
        let mut buffer = log::FixedBuffer::<5>::new();
        write!(buffer, "ab€cd").unwrap();
        assert_eq!(buffer.as_str(), "ab€");
        let mut buffer = log::FixedBuffer::<4>::new();
        write!(buffer, "ab€").unwrap();
        assert_eq!(buffer.as_str(), "ab");
    }
}
