//! Per-call resource limits, the overrides a sidecar or the operator sets on them, and the
//! wasmtime limiter that enforces them.

use serde::Deserialize;
use std::time::Duration;

/// The resources one call into a plugin may use. Every call starts from a fresh instance, so these
/// bound each election separately.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// CPU-time budget for one call (instantiation plus `elect`), measured on the calling thread
    /// and checked at every epoch tick (1 ms); a call past it is interrupted. Sidecar key: `time_ms`.
    pub time: Duration,
    /// Largest linear memory, in bytes; growing past it traps. Sidecar key: `memory_bytes`.
    pub memory_bytes: usize,
    /// Largest table, in elements. Sidecar key: `table_elements`.
    pub table_elements: usize,
    /// Most core instances, tables and memories one component instantiation may create (a Rust
    /// plugin needs 3, a componentize-py plugin built with `--stub-wasi` 38). Sidecar key:
    /// `instances`.
    pub instances: usize,
}

impl Limits {
    /// The hard ceiling for [`Limits::memory_bytes`]; the pooling allocator reserves this much
    /// address space per slot.
    pub const MAX_MEMORY_BYTES: usize = 256 << 20;
    /// The hard ceiling for [`Limits::table_elements`].
    pub const MAX_TABLE_ELEMENTS: usize = 100_000;
    /// The hard ceiling for [`Limits::instances`]; the pooling allocator admits this many core
    /// instances in one component.
    pub const MAX_INSTANCES: usize = 128;

    /// Checks the limits against the engine's hard ceilings.
    pub fn validate(&self) -> Result<(), String> {
        if self.time.is_zero() {
            return Err("time_ms must be positive".into());
        }
        if self.memory_bytes == 0 || self.memory_bytes > Self::MAX_MEMORY_BYTES {
            return Err(format!(
                "memory_bytes must be between 1 and {}",
                Self::MAX_MEMORY_BYTES
            ));
        }
        if self.table_elements > Self::MAX_TABLE_ELEMENTS {
            return Err(format!(
                "table_elements must be at most {}",
                Self::MAX_TABLE_ELEMENTS
            ));
        }
        if self.instances == 0 || self.instances > Self::MAX_INSTANCES {
            return Err(format!(
                "instances must be between 1 and {}",
                Self::MAX_INSTANCES
            ));
        }
        Ok(())
    }
}

impl Default for Limits {
    /// 10 ms, 16 MiB of memory, 10 000 table elements, 64 instances (enough for the components
    /// the Python and JavaScript toolchains build).
    fn default() -> Self {
        Self {
            time: Duration::from_millis(10),
            memory_bytes: 16 << 20,
            table_elements: 10_000,
            instances: 64,
        }
    }
}

/// Limits set field by field over others: a sidecar's `limits` over the engine's defaults, and
/// the operator's command-line limits over both. Unset fields keep what is below them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitOverrides {
    /// Replaces [`Limits::time`], in milliseconds.
    pub time_ms: Option<u64>,
    /// Replaces [`Limits::memory_bytes`].
    pub memory_bytes: Option<usize>,
    /// Replaces [`Limits::table_elements`].
    pub table_elements: Option<usize>,
    /// Replaces [`Limits::instances`].
    pub instances: Option<usize>,
}

impl LimitOverrides {
    /// `limits` with every field set here replaced.
    #[must_use]
    pub fn apply(&self, mut limits: Limits) -> Limits {
        if let Some(ms) = self.time_ms {
            limits.time = Duration::from_millis(ms);
        }
        limits.memory_bytes = self.memory_bytes.unwrap_or(limits.memory_bytes);
        limits.table_elements = self.table_elements.unwrap_or(limits.table_elements);
        limits.instances = self.instances.unwrap_or(limits.instances);
        limits
    }

    /// The fields both set to different values, as `(sidecar key, this value, the other's)`: what
    /// applying `self` over `other` replaces, for the warning that says so.
    #[must_use]
    pub fn replaced(&self, other: &Self) -> Vec<(&'static str, u64, u64)> {
        let widen = |value: usize| u64::try_from(value).unwrap_or(u64::MAX);
        let pairs = [
            ("time_ms", self.time_ms, other.time_ms),
            (
                "memory_bytes",
                self.memory_bytes.map(widen),
                other.memory_bytes.map(widen),
            ),
            (
                "table_elements",
                self.table_elements.map(widen),
                other.table_elements.map(widen),
            ),
            (
                "instances",
                self.instances.map(widen),
                other.instances.map(widen),
            ),
        ];
        pairs
            .into_iter()
            .filter_map(|(key, mine, theirs)| match (mine, theirs) {
                (Some(mine), Some(theirs)) if mine != theirs => Some((key, mine, theirs)),
                _ => None,
            })
            .collect()
    }
}

/// Which limit a call hit, recorded by [`CallLimiter`] so the error can say so.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum LimitHit {
    /// Memory growth to `desired` bytes was refused.
    Memory { desired: usize, limit: usize },
    /// Table growth to `desired` elements was refused.
    Table { desired: usize, limit: usize },
}

impl std::fmt::Display for LimitHit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Memory { desired, limit } => {
                write!(f, "memory grew to {desired} bytes, limit {limit}")
            }
            Self::Table { desired, limit } => {
                write!(f, "table grew to {desired} elements, limit {limit}")
            }
        }
    }
}

/// Enforces [`Limits`] on one store.
#[derive(Debug)]
pub(super) struct CallLimiter {
    limits: Limits,
    /// The first limit hit in this call.
    pub(super) hit: Option<LimitHit>,
}

impl CallLimiter {
    pub(super) fn new(limits: Limits) -> Self {
        Self { limits, hit: None }
    }
}

impl wasmtime::ResourceLimiter for CallLimiter {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.limits.memory_bytes {
            let hit = LimitHit::Memory {
                desired,
                limit: self.limits.memory_bytes,
            };
            self.hit.get_or_insert(hit);
            // Trap rather than let `memory.grow` return -1: a plugin out of memory cannot decide.
            return Err(wasmtime::Error::msg(hit.to_string()));
        }
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.limits.table_elements {
            let hit = LimitHit::Table {
                desired,
                limit: self.limits.table_elements,
            };
            self.hit.get_or_insert(hit);
            return Err(wasmtime::Error::msg(hit.to_string()));
        }
        Ok(true)
    }

    fn instances(&self) -> usize {
        self.limits.instances
    }

    fn tables(&self) -> usize {
        self.limits.instances
    }

    fn memories(&self) -> usize {
        self.limits.instances
    }
}
