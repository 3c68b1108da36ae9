//! The writer on its own, on the embedded API server: it sends only while this replica leads.
//! A replica whose term of the controller Lease ends while one of its writes is in flight sends
//! nothing afterwards (no Lease write, no ping, no garbage collection), and counts each write it
//! dropped. Pings reach the instance that released a Lease unless it renewed since, and a
//! candidate deleted after it was cached is no error.

use conclave_controller::CandidateKey;
use conclave_controller::index::Pings;
use conclave_controller::leadership::Leadership;
use conclave_controller::metrics::{Metrics, Operation, OperationLabels};
use conclave_controller::writer::{WriteError, Writer};
use conclave_core::k8s::{lease_record, micro_time, now, timestamp};
use conclave_core::lease::Release;
use conclave_core::strategy::OLDEST_EMULATION_VERSION as OEV;
use conclave_emulator::{Emulator, EmulatorConfig, RunningEmulator};
use conclave_testkit::lease_candidate;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::coordination::v1beta1::LeaseCandidate;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};
use prometheus_client::registry::Registry;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

const NS: &str = "default";

/// A candidate of Lease `l` that last renewed `renewed_ago` ago.
async fn candidate(api: &Api<LeaseCandidate>, name: &str, renewed_ago: Duration) -> LeaseCandidate {
    let mut object = lease_candidate(NS, name, "l", "1.31.0", Some("1.31.0"), OEV);
    if let Some(spec) = object.spec.as_mut() {
        spec.renew_time = Some(micro_time(now() - renewed_ago));
    }
    api.create(&PostParams::default(), &object)
        .await
        .expect("candidate created")
}

/// The embedded API server and a client of it.
async fn start_emulator() -> (RunningEmulator, Client) {
    let emulator = Emulator::start(EmulatorConfig::default())
        .await
        .expect("emulator starts");
    let client =
        Client::try_from(kube::Config::new(emulator.url().parse().expect("url"))).expect("client");
    (emulator, client)
}

/// A writer of a replica that leads the controller for as long as `term` runs, and its metrics.
fn leading_writer(client: &Client, term: CancellationToken) -> (Writer, Metrics) {
    let metrics = Metrics::new(&mut Registry::default());
    let leadership = Leadership::new(CancellationToken::new(), Duration::from_secs(8));
    leadership.begin(term, CancellationToken::new());
    let pings = Arc::new(Pings::new(metrics.pings_acked.clone()));
    let writer = Writer::new(
        client.clone(),
        metrics.clone(),
        leadership,
        pings,
        Duration::from_secs(30),
    );
    (writer, metrics)
}

fn dropped(metrics: &Metrics, operation: Operation) -> u64 {
    metrics
        .writes_dropped
        .get_or_create(&OperationLabels { operation })
        .get()
}

#[tokio::test]
async fn a_replica_that_loses_its_lease_while_a_write_is_in_flight_writes_nothing_afterwards() {
    let (emulator, client) = start_emulator().await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), NS);
    let candidates: Api<LeaseCandidate> = Api::namespaced(client.clone(), NS);
    let stale = candidate(&candidates, "stale", Duration::from_secs(60)).await;
    let expired = candidate(&candidates, "expired", Duration::from_secs(7200)).await;

    let term = CancellationToken::new();
    let (writer, metrics) = leading_writer(&client, term.clone());
    let writer = Arc::new(writer);
    let desired = lease_record(&Lease {
        metadata: ObjectMeta {
            namespace: Some(NS.into()),
            name: Some("l".into()),
            ..ObjectMeta::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some("stale".into()),
            lease_duration_seconds: Some(15),
            ..LeaseSpec::default()
        }),
    });

    // The Lease is created while this replica leads; its server answers slowly from now on.
    let created = writer
        .write_lease(None, &desired)
        .await
        .expect("written while leading");
    emulator.faults().set_latency(Duration::from_millis(500));
    let in_flight = tokio::spawn({
        let writer = writer.clone();
        let (base, mut desired) = (created.clone(), desired.clone());
        desired.holder_identity = Some("other".into());
        async move { writer.write_lease(Some(&base), &desired).await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    // The controller Lease is lost (no shutdown under way) while that write is in flight.
    term.cancel();
    let _ = in_flight.await.expect("the in-flight write returns");
    emulator.faults().set_latency(Duration::ZERO);
    let lease_before = leases.get("l").await.expect("the Lease");

    let mut retry = desired.clone();
    retry.holder_identity = Some("third".into());
    assert!(matches!(
        writer.write_lease(Some(&lease_before), &retry).await,
        Err(WriteError::NotLeading)
    ));
    assert!(matches!(
        writer
            .ping_all(
                &[Arc::new(stale.clone())],
                now(),
                Duration::from_secs(5),
                None,
            )
            .await,
        Err(WriteError::NotLeading)
    ));
    let gc = writer
        .collect_candidate(
            &CandidateKey::new(NS, "expired"),
            now(),
            Duration::from_secs(1800),
        )
        .await;
    assert!(matches!(gc, Err(WriteError::NotLeading)), "{gc:?}");

    let lease_after = leases.get("l").await.expect("the Lease");
    assert_eq!(
        lease_after.metadata.resource_version, lease_before.metadata.resource_version,
        "no Lease write after the loss"
    );
    let stale_after = candidates.get("stale").await.expect("stale candidate");
    assert_eq!(
        stale_after.metadata.resource_version, stale.metadata.resource_version,
        "no ping after the loss"
    );
    assert!(
        candidates.get_opt("expired").await.expect("get").is_some(),
        "no garbage collection after the loss ({:?})",
        expired.metadata.name
    );
    assert_eq!(dropped(&metrics, Operation::LeaseUpdate), 1);
    assert_eq!(dropped(&metrics, Operation::Ping), 1);
    assert_eq!(dropped(&metrics, Operation::CandidateDelete), 1);
    assert_eq!(metrics.pings_sent.get(), 0);
    emulator.shutdown().await.expect("emulator stops");
}

#[tokio::test]
async fn a_releaser_is_pinged_though_it_renewed_recently_and_a_vanished_candidate_is_no_error() {
    let (emulator, client) = start_emulator().await;
    let candidates: Api<LeaseCandidate> = Api::namespaced(client.clone(), NS);
    let leaver = candidate(&candidates, "leaver", Duration::from_secs(1)).await;
    let stayer = candidate(&candidates, "stayer", Duration::from_secs(1)).await;
    let gone = candidate(&candidates, "gone", Duration::from_secs(60)).await;
    candidates
        .delete("gone", &Default::default())
        .await
        .expect("deleted");

    let (writer, metrics) = leading_writer(&client, CancellationToken::new());
    // "leaver" released the Lease after its last renewal, so that renewal says nothing about it.
    let released_at = now();
    let release = Release {
        by: "leaver",
        at: released_at,
        seen_at: released_at,
    };
    writer
        .ping_all(
            &[Arc::new(leaver), Arc::new(stayer), Arc::new(gone)],
            now(),
            Duration::from_secs(5),
            Some(release),
        )
        .await
        .expect("a candidate deleted after it was cached is not an error");

    let ping_time = |c: &LeaseCandidate| {
        c.spec
            .as_ref()
            .and_then(|s| s.ping_time.as_ref())
            .map(|t| timestamp(t.0))
    };
    let leaver = candidates.get("leaver").await.expect("leaver");
    assert!(
        ping_time(&leaver).is_some_and(|ping| ping >= released_at),
        "the releaser is pinged: {:?}",
        leaver.spec
    );
    let stayer = candidates.get("stayer").await.expect("stayer");
    assert_eq!(ping_time(&stayer), None, "a fresh candidate is not pinged");
    assert_eq!(metrics.pings_sent.get(), 1);
    emulator.shutdown().await.expect("emulator stops");
}
