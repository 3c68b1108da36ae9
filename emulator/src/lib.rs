//! conclave-emulator.
