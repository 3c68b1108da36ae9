//! The two Leases the controller contends for itself: its own and kube-apiserver's built-in one.

/// The name of the controller's own Lease (in `controller_namespace`).
pub const CONTROLLER_LEASE: &str = "conclave-controller";

/// Namespace and name of kube-apiserver's built-in controller Lease.
pub const BUILTIN_LEASE: (&str, &str) = ("kube-system", "leader-election-controller");
