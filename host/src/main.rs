//! The `conclave` binary.
fn main() {}
