//! Conclave's built-in strategy: Kubernetes' `OldestEmulationVersion`, with a deterministic
//! tie-break.
//!
//! Upstream's rule (KEP-4355): a candidate whose binary or emulation version does not parse is
//! ineligible; among the rest the lowest emulation version wins, then the lowest binary version,
//! then the oldest `creationTimestamp`. Versions compare by semver precedence. Unlike upstream, a
//! full tie is broken by candidate name, so the answer never depends on list order. The plugin also
//! answers to `MinimumCompatibilityVersion`, the KEP's original name for the rule.
// no_std in the component; the native build (linked by the host for `strategy bench`, and the
// cdylib that `cargo test` builds) takes std's allocator and panic handler.
#![cfg_attr(target_arch = "wasm32", no_std)]

use conclave_strategy::prelude::*;
use conclave_strategy::{MINIMUM_COMPATIBILITY_VERSION, OLDEST_EMULATION_VERSION};

/// The `OldestEmulationVersion` strategy.
pub struct OldestEmulationVersion;

impl Strategy for OldestEmulationVersion {
    const STRATEGIES: &'static [&'static str] =
        &[OLDEST_EMULATION_VERSION, MINIMUM_COMPATIBILITY_VERSION];
    const DESCRIPTION: &'static str = "lowest emulation version, then lowest binary version, then \
         oldest creation time, then name (Kubernetes' built-in rule)";

    // Versions and creation times are all the rule reads; names order the candidates. Nothing is
    // compared with `now`: the same candidates get the same answer at any time.
    const READS: Reads = Reads {
        now: false,
        ..Reads::NOTHING
    };

    fn elect(request: &ElectionRequest) -> Result<Option<u32>, String> {
        Ok(pick_oldest_emulation_version(&request.candidates))
    }
}

conclave_strategy::export_strategy!(OldestEmulationVersion);
