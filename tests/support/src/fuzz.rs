//! The case count of the fuzz tests (`tests/fuzz_*.rs` of the emulator, the controller, the
//! engine and the CLI): a modest default in `cargo test`, more for a long run.

/// Set this environment variable to a number of cases for a long fuzz run.
pub const FUZZ_CASES_ENV: &str = "CONCLAVE_FUZZ_CASES";

/// The cases a fuzz test runs: [`FUZZ_CASES_ENV`] when it holds a number, else `default`.
#[must_use]
pub fn fuzz_cases(default: u32) -> u32 {
    std::env::var(FUZZ_CASES_ENV)
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(default)
}
