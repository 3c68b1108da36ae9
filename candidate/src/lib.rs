//! conclave-candidate.
