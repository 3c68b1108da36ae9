//! A Kubernetes client for leader election: kube's default client, with `TCP_NODELAY` on.
//!
//! kube's own client leaves Nagle's algorithm on. A small request written in more than one TCP
//! segment (a TLS record for the headers, another for the body) then waits for the server's
//! delayed ACK, about 40 ms on Linux, before its last segment leaves. Leader election is a chain
//! of small writes (renew, pre-empt, release, take over), so each stall delays a hand-off.
//! kube-apiserver and client-go set `TCP_NODELAY`, as Go does by default; so does this client.

use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use kube::client::ConfigExt as _;
use kube::client::retry::RetryPolicy;
use tower::ServiceBuilder;
use tower::retry::RetryLayer;

/// Builds a client from `config` like `kube::Client::try_from(config)`: the same TLS, auth,
/// timeouts, extra headers and retries, but with `TCP_NODELAY` on its connections. Through a
/// proxy (`config.proxy_url`) it is kube's own client, proxy support included.
///
/// # Errors
///
/// As `kube::Client::try_from`: the TLS or auth settings in `config` cannot be used.
pub fn client(config: kube::Config) -> Result<kube::Client, kube::Error> {
    if config.proxy_url.is_some() {
        return kube::Client::try_from(config);
    }
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    let https = config.rustls_https_connector_with_connector(http)?;
    let mut connector = hyper_timeout::TimeoutConnector::new(https);
    connector.set_connect_timeout(config.connect_timeout);
    connector.set_read_timeout(config.read_timeout);
    connector.set_write_timeout(config.write_timeout);
    connector.set_reset_reader_on_write(config.reset_reader_on_write);
    let http_client: hyper_util::client::legacy::Client<_, kube::client::Body> =
        hyper_util::client::legacy::Client::builder(TokioExecutor::new()).build(connector);
    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(
            config
                .default_retry
                .then(|| RetryLayer::new(RetryPolicy::server_retry())),
        )
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .map_err(tower::BoxError::from)
        .service(http_client);
    Ok(kube::Client::new(service, config.default_namespace))
}
