//! Shared helpers for the emulator's integration tests.
#![allow(dead_code)]

use conclave_emulator::{Emulator, EmulatorConfig, RunningEmulator};
use std::time::Duration;

/// Starts an emulator on a free port with short bookmarks and a kube client for it.
pub async fn start() -> (RunningEmulator, kube::Client) {
    start_with(EmulatorConfig {
        bookmark_interval: Duration::from_millis(300),
        ..EmulatorConfig::default()
    })
    .await
}

/// Starts an emulator with `config` and a kube client for it.
pub async fn start_with(config: EmulatorConfig) -> (RunningEmulator, kube::Client) {
    let emulator = Emulator::start(config).await.expect("emulator starts");
    let client = client_for(&emulator.url());
    (emulator, client)
}

/// A kube client for a plain-HTTP server URL.
pub fn client_for(url: &str) -> kube::Client {
    let config = kube::Config::new(url.parse().expect("valid URL"));
    kube::Client::try_from(config).expect("client builds")
}

/// Generous bound for waiting on conditions (never a timing assertion).
pub const WAIT: Duration = Duration::from_secs(30);

/// The `code` of a kube API error, or panics with the unexpected result.
pub fn api_code<T: std::fmt::Debug>(result: Result<T, kube::Error>) -> (u16, String, String) {
    match result {
        Err(kube::Error::Api(status)) => {
            (status.code, status.reason.clone(), status.message.clone())
        }
        other => panic!("expected an API error, got {other:?}"),
    }
}
