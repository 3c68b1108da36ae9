//! Why the controller could not run: the crate's [`Error`], returned by [`run`](crate::run()).

use crate::own_leases::CONTROLLER_LEASE;
use std::net::SocketAddr;

/// Why the controller could not run.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The configuration is unusable.
    #[error("invalid controller configuration: {0}")]
    Config(String),
    /// The controller's own leader election failed.
    #[error("leader election for {CONTROLLER_LEASE}: {0}")]
    Election(#[from] conclave_candidate::Error),
    /// The controller's own Lease cannot be taken or watched until an operator acts (see
    /// [`ControllerConfig::fail_when_blocked`](crate::ControllerConfig::fail_when_blocked)).
    #[error("{0}")]
    OwnLeaseBlocked(conclave_candidate::Blocked),
    /// The metrics server could not bind.
    #[error("cannot serve metrics on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The socket error.
        #[source]
        source: std::io::Error,
    },
}
