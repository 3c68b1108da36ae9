//! The SDK for Conclave strategy plugins.
//!
//! A strategy decides who leads a Lease. Write one by implementing [`Strategy`] and exporting it
//! with [`export_strategy!`]; build the crate (a `cdylib`) with
//! `cargo build --target wasm32-wasip2 --release` and the result is a WebAssembly component that
//! implements `conclave:strategy@0.1.0` (see `wit/strategy.wit`) and imports nothing but the
//! host's log.
//!
//! ```ignore
//! #![no_std]
//! use conclave_strategy::prelude::*;
//!
//! struct FirstByName;
//!
//! impl Strategy for FirstByName {
//!     const STRATEGIES: &'static [&'static str] = &["example.com/first-by-name"];
//!     const DESCRIPTION: &'static str = "elects the candidate whose name sorts first";
//!
//!     fn elect(request: &ElectionRequest) -> Result<Option<String>, String> {
//!         Ok(request.candidates.iter().map(|c| &c.name).min().cloned())
//!     }
//! }
//!
//! conclave_strategy::export_strategy!(FirstByName);
//! ```
//!
//! Plugins are `#![no_std]` with `alloc`: a `std` guest for wasm32-wasip2 imports a dozen WASI
//! interfaces it never uses, which the host refuses. [`export_strategy!`] supplies what `no_std`
//! needs on wasm32: a global allocator, a panic handler that logs the panic and traps, and the
//! `cabi_realloc` export the component model calls to pass data in.
//!
//! The allocator is a bump allocator (see [`BumpAllocator`]): every election runs in a fresh
//! instance that is discarded afterwards, so memory is never reused across calls and freeing it
//! within one is rarely worth its cost. A plugin that allocates and frees a lot within one call can
//! use dlmalloc instead with the SDK's `dlmalloc` feature.
#![cfg_attr(not(test), no_std)]
#![deny(unsafe_code)]

extern crate alloc;

use alloc::string::String;

pub use conclave_core::election::{OldestEmulationRank, pick_oldest_emulation_version};
pub use conclave_core::request::{CandidateView, ElectionRequest, LeaseView};
pub use conclave_core::strategy::{MINIMUM_COMPATIBILITY_VERSION, OLDEST_EMULATION_VERSION};
pub use conclave_core::time::Timestamp;
/// Semantic versions parsed the way Kubernetes parses them: [`Version::parse_tolerant`] is the rule
/// the election controller compares with, [`Version::parse_strict`] the one the API server
/// validates with. Ordering is semver precedence with build metadata ignored.
pub use conclave_core::version::{PreRelease, Version, VersionError};

/// The generated guest bindings for `wit/strategy.wit`. Authors use [`Strategy`] instead; these are
/// public for [`export_strategy!`] and for plugins that need the raw WIT types.
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

#[cfg(target_arch = "wasm32")]
mod alloc_bump;
#[cfg(target_arch = "wasm32")]
pub use alloc_bump::BumpAllocator;

/// What a strategy author writes: the names the strategy answers to, a description, and the rule.
pub trait Strategy {
    /// The strategy names this plugin implements, as they appear in `spec.strategy`
    /// (e.g. `OldestEmulationVersion`, or a domain-prefixed name such as `example.com/priority`).
    const STRATEGIES: &'static [&'static str];

    /// A one-line description of the rule, shown by `conclave strategy inspect`.
    const DESCRIPTION: &'static str;

    /// Decides one election.
    ///
    /// Return `Ok(Some(name))` with the name of one of `request.candidates`, `Ok(None)` when nobody
    /// should lead, or `Err(message)` when the strategy cannot decide (for example its settings in
    /// `request.settings` are invalid). The host rejects any name that is not a candidate's. The
    /// answer must not depend on the order of `request.candidates`.
    fn elect(request: &ElectionRequest) -> Result<Option<String>, String>;
}

/// Everything a plugin usually needs: `use conclave_strategy::prelude::*;`.
pub mod prelude {
    pub use crate::{
        CandidateView, ElectionRequest, LeaseView, OldestEmulationRank, Strategy, Timestamp,
        Version, log, pick_oldest_emulation_version,
    };
    pub use alloc::borrow::ToOwned;
    pub use alloc::boxed::Box;
    pub use alloc::string::{String, ToString};
    pub use alloc::vec::Vec;
    pub use alloc::{format, vec};
}

fn timestamp(micros: Option<i64>) -> Option<Timestamp> {
    micros.map(Timestamp::from_micros)
}

impl From<bindings::Candidate> for CandidateView {
    fn from(c: bindings::Candidate) -> Self {
        Self {
            name: c.name,
            binary_version: c.binary_version,
            emulation_version: c.emulation_version,
            strategy: c.strategy,
            creation_time: timestamp(c.creation_time),
            renew_time: timestamp(c.renew_time),
            ping_time: timestamp(c.ping_time),
            labels: c.labels,
            annotations: c.annotations,
        }
    }
}

impl From<bindings::Lease> for LeaseView {
    fn from(l: bindings::Lease) -> Self {
        Self {
            namespace: l.namespace,
            name: l.name,
            holder: l.holder,
            preferred_holder: l.preferred_holder,
            strategy: l.strategy,
            expired: l.expired,
        }
    }
}

/// Converts the WIT request into the plain-data request strategies are written against.
#[must_use]
pub fn request_from_wit(request: bindings::ElectionRequest) -> ElectionRequest {
    ElectionRequest {
        lease: request.lease.into(),
        now: Timestamp::from_micros(request.now),
        settings: request.settings,
        candidates: request.candidates.into_iter().map(Into::into).collect(),
    }
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
        }
    }

    /// The `elect` export of a plugin built from `S`.
    pub fn elect<S: Strategy>(
        request: bindings::ElectionRequest,
    ) -> Result<Option<String>, String> {
        let request = super::request_from_wit(request);
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
            ) -> ::core::result::Result<
                ::core::option::Option<$crate::__private::StringType>,
                $crate::__private::StringType,
            > {
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
    use alloc::vec;

    #[test]
    fn wit_request_converts_field_by_field() {
        let request = request_from_wit(bindings::ElectionRequest {
            lease: bindings::Lease {
                namespace: "ns".into(),
                name: "lease".into(),
                holder: Some("a".into()),
                preferred_holder: None,
                strategy: "S".into(),
                expired: true,
            },
            now: 42,
            settings: "{}".into(),
            candidates: vec![bindings::Candidate {
                name: "a".into(),
                binary_version: "1.31.0".into(),
                emulation_version: "1.30.0".into(),
                strategy: "S".into(),
                creation_time: Some(1),
                renew_time: None,
                ping_time: Some(3),
                labels: vec![("k".into(), "v".into())],
                annotations: Vec::new(),
            }],
        });
        assert_eq!(request.lease.holder.as_deref(), Some("a"));
        assert!(request.lease.expired);
        assert_eq!(request.now, Timestamp::from_micros(42));
        let candidate = &request.candidates[0];
        assert_eq!(candidate.creation_time, Some(Timestamp::from_micros(1)));
        assert_eq!(candidate.renew_time, None);
        assert_eq!(candidate.ping_time, Some(Timestamp::from_micros(3)));
        assert_eq!(candidate.label("k"), Some("v"));
        assert_eq!(candidate.emulation_version, "1.30.0");
    }

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
