//! conclave-testkit.
