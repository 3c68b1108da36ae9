//! The hand-written strategy component (`fixtures/strategy.wat`, `conclave:strategy@0.1.0`)
//! whose `elect` runs a body given as WebAssembly text: runaway loops, memory bombs, traps and
//! wrong answers for the sandbox's tests, with no toolchain to build them.

/// The component's text, with `{{NAME_LEN}}`, `{{NAME}}` and `{{ELECT}}` to fill in.
const TEMPLATE: &str = include_str!("../fixtures/strategy.wat");

/// An `elect` that never returns: only the time limit stops it.
pub const SPIN: &str = "(loop $spin (br $spin)) (unreachable)";
/// An `elect` that grows its memory until the memory limit stops it.
pub const MEMORY_BOMB: &str =
    "(loop $grow (drop (memory.grow (i32.const 16))) (br $grow)) (unreachable)";
/// An `elect` that traps at once (`unreachable`, as a Rust panic ends).
pub const TRAP: &str = "(unreachable)";

/// The component's text claiming `strategy` (at most 64 bytes), whose `elect` runs `body`.
///
/// # Panics
/// When `strategy` is longer than the template's room for it.
#[must_use]
pub fn fixture_text(strategy: &str, body: &str) -> String {
    assert!(strategy.len() <= 64, "a strategy name of at most 64 bytes");
    let len = u32::try_from(strategy.len())
        .expect("at most 64 bytes")
        .to_le_bytes();
    let len: String = len.iter().map(|b| format!("\\{b:02x}")).collect();
    TEMPLATE
        .replace("{{NAME_LEN}}", &len)
        .replace("{{NAME}}", strategy)
        .replace("{{ELECT}}", body)
}

/// [`fixture_text`] assembled into the component's binary, as operators load plugins.
///
/// # Panics
/// When `body` is not valid WebAssembly text.
#[must_use]
pub fn fixture_component(strategy: &str, body: &str) -> Vec<u8> {
    wat::parse_str(fixture_text(strategy, body)).expect("the fixture assembles")
}
