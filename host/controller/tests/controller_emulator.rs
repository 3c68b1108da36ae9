//! The controller against the embedded API server: elections, pre-emption, legacy holders,
//! conflicts, GC, and faults (500s, 409 storms, dropped watches, a restart mid-election).

mod controller_support;

use conclave_controller::ControllerConfig;
use conclave_core::plan::Mode;
use conclave_core::strategy::OLDEST_EMULATION_VERSION as OEV;
use conclave_emulator::{Emulator, EmulatorConfig, Failure, Verb};
use conclave_testkit::{CandidateResponder, SeededSets, lease_candidate, oldest_emulation_winner};
use controller_support::{
    CoordinatedHolder, HolderAudit, HolderWrites, LeaseWrites, NS, PingAnswerer, Renewer, WAIT,
    candidate, config, crash_the_best_leader, create_lease, emulator, failover_config, free_addr,
    http_get, metric_sum, scrape, stale_candidate_pinged, start, start_deciding, wait_event,
    wait_lease,
};
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::coordination::v1beta1::LeaseCandidate;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

fn micro(at: jiff::Timestamp) -> MicroTime {
    MicroTime(at)
}

fn ago(seconds: i64) -> MicroTime {
    micro(jiff::Timestamp::now() - jiff::SignedDuration::from_secs(seconds))
}

/// Releases Lease `name` as client-go does: empty holder, a one-second duration, renewed and
/// acquired at the moment of release. Returns the released Lease and that moment.
async fn release(leases: &Api<Lease>, name: &str) -> (Lease, jiff::Timestamp) {
    let mut lease = leases.get(name).await.expect("the Lease to release");
    let spec = lease.spec.as_mut().expect("a Lease spec");
    let released_at = jiff::Timestamp::now();
    spec.holder_identity = Some(String::new());
    spec.lease_duration_seconds = Some(1);
    spec.renew_time = Some(micro(released_at));
    spec.acquire_time = Some(micro(released_at));
    let released = leases
        .replace(name, &PostParams::default(), &lease)
        .await
        .expect("released");
    (released, released_at)
}

#[tokio::test(flavor = "multi_thread")]
async fn creates_the_lease_for_the_oldest_emulation_version() {
    let (_emu, client) = emulator().await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), NS);
    let _controller = start(client.clone(), config(NS, "c1"));
    let _a = candidate(&client, "baz1", "l", "1.20.0", "1.20.0", OEV).await;
    let _b = candidate(&client, "baz2", "l", "1.20.0", "1.19.0", OEV).await;
    let _c = candidate(&client, "baz3", "l", "1.19.0", "1.19.0", OEV).await;
    let _d = candidate(&client, "baz4", "l", "1.20.0", "1.19.0", OEV).await;
    let record = wait_lease(&leases, "l", "baz3 to hold l", |r| {
        r.holder() == Some("baz3")
    })
    .await;
    assert_eq!(record.strategy(), Some(OEV));
    assert!(
        record.elected_by_conclave,
        "annotation elected-by: conclave"
    );
    assert_eq!(record.lease_duration_seconds, Some(5));
    assert!(record.renew_time.is_some() && record.acquire_time.is_some());
    wait_event(&client, NS, "l", "Elected").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn better_candidate_preempts_the_holder_which_steps_down() {
    let (_emu, client) = emulator().await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), NS);
    let audit = HolderAudit::start(leases.clone(), "l");
    let _controller = start(client.clone(), config(NS, "c1"));
    let _new = candidate(&client, "new", "l", "1.31.0", "1.31.0", OEV).await;
    let new_holder = CoordinatedHolder::start(leases.clone(), "l", "new");
    wait_lease(&leases, "l", "new to hold l", |r| r.holder() == Some("new")).await;

    let _old = candidate(&client, "old", "l", "1.30.0", "1.30.0", OEV).await;
    let _old_holder = CoordinatedHolder::start(leases.clone(), "l", "old");
    wait_event(&client, NS, "l", "Preempted").await;
    let record = wait_lease(&leases, "l", "old to take over after new steps down", |r| {
        r.holder() == Some("old")
    })
    .await;
    assert!(
        new_holder.releases() >= 1,
        "new stepped down through a release"
    );
    // preferredHolder is cleared once the preferred candidate holds the Lease.
    let record = if record.preferred().is_some() {
        wait_lease(&leases, "l", "preferredHolder cleared", |r| {
            r.holder() == Some("old") && r.preferred().is_none()
        })
        .await
    } else {
        record
    };
    assert_eq!(record.preferred(), None);
    audit.assert_never_two_holders();
}

/// KEP-5366's graceful hand-off when the pre-empted leader takes longer than the ack window to
/// stop its work and release: the controller checked the preferred candidate was alive when it
/// pre-empted, so the released Lease goes to it at once. Pinging it again would add a round trip
/// to every slow step-down, and a late ack would hand the Lease to someone else first.
#[tokio::test(flavor = "multi_thread")]
async fn a_slow_step_down_hands_the_lease_to_the_preferred_candidate_without_another_ping() {
    let (_emu, client) = emulator().await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), NS);
    let candidates: Api<LeaseCandidate> = Api::namespaced(client.clone(), NS);
    let config = ControllerConfig {
        lease_duration_seconds: 60,
        ..config(NS, "c1")
    };
    let _controller = start(client.clone(), config);
    let _new = candidate(&client, "new", "l", "1.31.0", "1.31.0", OEV).await;
    wait_lease(&leases, "l", "new to hold l", |r| r.holder() == Some("new")).await;
    // new renews the Lease every 300 ms as a leader does, until it is asked to step down: a
    // pre-emption waits for its first renewal, then is written early in its renewal period.
    let renewing = tokio::spawn({
        let leases = leases.clone();
        async move {
            loop {
                let mut lease = leases.get("l").await.unwrap();
                let spec = lease.spec.as_mut().unwrap();
                if spec.preferred_holder.is_some() {
                    return;
                }
                spec.renew_time = Some(ago(0));
                // A conflict with the controller's pre-emption is read again on the next round.
                let _ = leases.replace("l", &PostParams::default(), &lease).await;
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
        }
    });

    // Fresh when it appears, so the holder is pre-empted for it at once; it answers no ping.
    let old = lease_candidate(NS, "old", "l", "1.30.0", Some("1.30.0"), OEV);
    candidates
        .create(&PostParams::default(), &old)
        .await
        .unwrap();
    wait_lease(&leases, "l", "new to be pre-empted for old", |r| {
        r.holder() == Some("new") && r.preferred() == Some("old")
    })
    .await;
    renewing.await.unwrap();

    // The step-down outlasts the ack window (2 s): old last showed life 10 s ago.
    let mut acked = candidates.get("old").await.unwrap();
    let spec = acked.spec.as_mut().unwrap();
    spec.ping_time = Some(ago(11));
    spec.renew_time = Some(ago(10));
    let acked = candidates
        .replace("old", &PostParams::default(), &acked)
        .await
        .unwrap();
    // Released as client-go's release writes it: preferredHolder goes with the holder.
    let mut released = leases.get("l").await.unwrap();
    let spec = released.spec.as_mut().unwrap();
    spec.holder_identity = Some(String::new());
    spec.preferred_holder = None;
    spec.lease_duration_seconds = Some(1);
    spec.renew_time = Some(ago(0));
    leases
        .replace("l", &PostParams::default(), &released)
        .await
        .unwrap();

    wait_lease(&leases, "l", "old to take over from the release", |r| {
        r.holder() == Some("old")
    })
    .await;
    let ping_time = candidates.get("old").await.unwrap().spec.unwrap().ping_time;
    assert_eq!(
        ping_time,
        acked.spec.unwrap().ping_time,
        "old was pinged again after the release"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn legacy_holder_keeps_the_lease_until_it_expires() {
    let (_emu, client) = emulator().await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), NS);
    create_lease(
        &leases,
        "l",
        LeaseSpec {
            holder_identity: Some("legacy".into()),
            lease_duration_seconds: Some(3),
            renew_time: Some(ago(0)),
            ..LeaseSpec::default()
        },
    )
    .await;
    let legacy = CoordinatedHolder::start(leases.clone(), "l", "legacy");
    let _controller = start(client.clone(), config(NS, "c1"));
    let _a = candidate(&client, "a", "l", "1.31.0", "1.31.0", OEV).await;
    // The candidate is registered and acks pings; give the controller several ack windows and
    // Lease renewals to (wrongly) act; the legacy holder must keep the Lease and nobody may ask
    // it to step down.
    for _ in 0..20 {
        tokio::time::sleep(Duration::from_millis(400)).await;
        let record = controller_support::wait_lease(&leases, "l", "lease", |_| true).await;
        assert_eq!(
            record.holder(),
            Some("legacy"),
            "legacy keeps the Lease while live"
        );
        assert_eq!(
            record.preferred(),
            None,
            "a legacy holder is not pre-empted"
        );
    }
    drop(legacy);
    wait_lease(&leases, "l", "a to take over the expired Lease", |r| {
        r.holder() == Some("a")
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn conflicts_and_unknown_strategies_write_nothing() {
    let (_emu, client) = emulator().await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), NS);
    // Both candidates exist before the controller starts: alone, `a` would be elected at once.
    let _a = candidate(&client, "a", "conflicted", "1.31.0", "1.31.0", OEV).await;
    let _b = candidate(
        &client,
        "b",
        "conflicted",
        "1.31.0",
        "1.31.0",
        "example.com/other",
    )
    .await;
    let _controller = start(client.clone(), config(NS, "c1"));
    let event = wait_event(&client, NS, "conflicted", "StrategyConflict").await;
    assert!(event.note.unwrap_or_default().contains("example.com/other"));
    let _c = candidate(
        &client,
        "c",
        "unknown",
        "1.31.0",
        "1.31.0",
        "example.com/nope",
    )
    .await;
    wait_event(&client, NS, "unknown", "UnknownStrategy").await;
    assert!(leases.get_opt("conflicted").await.unwrap().is_none());
    assert!(leases.get_opt("unknown").await.unwrap().is_none());
}

#[tokio::test(flavor = "multi_thread")]
async fn the_leases_own_strategy_is_honoured() {
    let (_emu, client) = emulator().await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), NS);
    create_lease(
        &leases,
        "l",
        LeaseSpec {
            strategy: Some(OEV.into()),
            ..LeaseSpec::default()
        },
    )
    .await;
    let _controller = start(client.clone(), config(NS, "c1"));
    // The candidates ask for a strategy no plugin implements; the Lease's own one wins.
    let _a = candidate(&client, "a", "l", "1.31.0", "1.30.0", "example.com/nope").await;
    let _b = candidate(&client, "b", "l", "1.31.0", "1.31.0", "example.com/nope").await;
    let record = wait_lease(&leases, "l", "a elected by the Lease's strategy", |r| {
        r.holder() == Some("a")
    })
    .await;
    assert_eq!(record.strategy(), Some(OEV));
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unresponsive_best_candidate_is_left_out() {
    let (_emu, client) = emulator().await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), NS);
    let candidates: Api<LeaseCandidate> = Api::namespaced(client.clone(), NS);
    // The best candidate by version renewed a minute ago and never answers pings.
    let mut dead = lease_candidate(NS, "dead", "l", "1.29.0", Some("1.29.0"), OEV);
    dead.spec.as_mut().unwrap().renew_time = Some(ago(60));
    candidates
        .create(&PostParams::default(), &dead)
        .await
        .unwrap();
    let _controller = start(client.clone(), config(NS, "c1"));
    let _live = candidate(&client, "live", "l", "1.31.0", "1.31.0", OEV).await;
    wait_lease(&leases, "l", "live to be elected", |r| {
        r.holder() == Some("live")
    })
    .await;
    let dead = candidates.get("dead").await.unwrap();
    assert!(
        dead.spec.unwrap().ping_time.is_some(),
        "the dead candidate was pinged before being left out"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn released_and_deleted_leases_are_reassigned() {
    let (_emu, client) = emulator().await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), NS);
    let _controller = start(client.clone(), config(NS, "c1"));
    let _a = candidate(&client, "a", "l", "1.31.0", "1.31.0", OEV).await;
    wait_lease(&leases, "l", "a to hold l", |r| r.holder() == Some("a")).await;

    // Released as client-go does: empty holder, strategy dropped.
    let mut lease = leases.get("l").await.unwrap();
    let spec = lease.spec.as_mut().unwrap();
    spec.holder_identity = Some(String::new());
    spec.strategy = None;
    spec.lease_duration_seconds = Some(1);
    leases
        .replace("l", &PostParams::default(), &lease)
        .await
        .unwrap();
    let record = wait_lease(&leases, "l", "a to be re-elected", |r| {
        r.holder() == Some("a")
    })
    .await;
    assert_eq!(record.strategy(), Some(OEV), "the strategy is written back");

    leases.delete("l", &Default::default()).await.unwrap();
    wait_lease(&leases, "l", "l re-created", |r| r.holder() == Some("a")).await;
}

/// A leader that releases its Lease on the way out while its LeaseCandidate outlives it, as
/// kube-scheduler does on SIGTERM (client-go does not delete the candidate), or as the demo's
/// stopping replica looked when the deletion of its candidate reached the controller after its
/// release: the controller pings the leaver instead of writing it back, and elects the next best
/// once the ping goes unanswered.
#[tokio::test(flavor = "multi_thread")]
async fn an_instance_that_released_its_lease_is_not_elected_again_without_a_sign_of_life() {
    let (_emu, client) = emulator().await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), NS);
    let candidates: Api<LeaseCandidate> = Api::namespaced(client.clone(), NS);
    let writes = LeaseWrites::start(leases.clone()).await;
    let leaver = lease_candidate(NS, "leaver", "l", "1.30.0", Some("1.30.0"), OEV);
    candidates
        .create(&PostParams::default(), &leaver)
        .await
        .unwrap();
    let answerer = PingAnswerer::start(candidates.clone(), "leaver");
    let _controller = start(client.clone(), config(NS, "c1"));
    let _stayer = candidate(&client, "stayer", "l", "1.31.0", "1.31.0", OEV).await;
    wait_lease(&leases, "l", "leaver (the oldest) to hold l", |r| {
        r.holder() == Some("leaver")
    })
    .await;

    // Its last renewal, then its release; from then on nothing of it answers.
    drop(answerer);
    let mut renewed = candidates.get("leaver").await.unwrap();
    renewed.spec.as_mut().unwrap().renew_time = Some(ago(0));
    candidates
        .replace("leaver", &PostParams::default(), &renewed)
        .await
        .unwrap();
    let (released, released_at) = release(&leases, "l").await;

    wait_lease(&leases, "l", "stayer to be elected", |r| {
        r.holder() == Some("stayer")
    })
    .await;
    let holders_after_release: Vec<Option<String>> = writes
        .of("l")
        .iter()
        .skip_while(|w| {
            Some(&w.record.resource_version) != released.metadata.resource_version.as_ref()
        })
        .map(|w| w.record.holder().map(str::to_owned))
        .collect();
    assert!(
        !holders_after_release.is_empty()
            && !holders_after_release.contains(&Some("leaver".into())),
        "the leaver was written back: holders after its release {holders_after_release:?}"
    );
    let pinged = candidates
        .get("leaver")
        .await
        .unwrap()
        .spec
        .unwrap()
        .ping_time;
    assert!(
        pinged.as_ref().is_some_and(|ping| ping.0 >= released_at),
        "the leaver was pinged after its release ({pinged:?})"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn stale_candidates_are_garbage_collected() {
    let (_emu, client) = emulator().await;
    let candidates: Api<LeaseCandidate> = Api::namespaced(client.clone(), NS);
    let mut stale = lease_candidate(NS, "stale", "l", "1.31.0", Some("1.31.0"), OEV);
    let spec = stale.spec.as_mut().unwrap();
    spec.renew_time = Some(ago(7200));
    spec.ping_time = Some(ago(3600));
    candidates
        .create(&PostParams::default(), &stale)
        .await
        .unwrap();
    let _live = candidate(&client, "live", "l", "1.31.0", "1.31.0", OEV).await;
    let mut cfg = config(NS, "c1");
    cfg.candidate_gc_after = Duration::from_secs(10);
    let _controller = start(client.clone(), cfg);
    let deadline = tokio::time::Instant::now() + WAIT;
    while candidates.get_opt("stale").await.unwrap().is_some() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "stale candidate not collected"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        candidates.get_opt("live").await.unwrap().is_some(),
        "a candidate that answers pings is kept"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn elections_complete_after_500s_409_storms_and_dropped_watches() {
    let (emu, client) = emulator().await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), NS);
    let audit = HolderAudit::start(leases.clone(), "l");
    let faults = emu.faults().clone();
    faults.fail_next(Verb::Create, "leases", 3, Failure::InternalError);
    faults.fail_next(Verb::Update, "leasecandidates", 3, Failure::InternalError);
    let metrics_addr = free_addr();
    let mut cfg = config(NS, "c1");
    cfg.metrics_addr = Some(metrics_addr);
    // The controller's own Lease is an update on `leases` too: renew it rarely, so the injected
    // conflicts below meet its election writes.
    cfg.own_lease_duration = Duration::from_secs(30);
    cfg.own_renew_deadline = Duration::from_secs(20);
    cfg.own_retry_period = Duration::from_secs(10);
    let _controller = start(client.clone(), cfg);
    let _a = candidate(&client, "a", "l", "1.31.0", "1.31.0", OEV).await;
    // The holders (and the second writer below) write by patch, each with the resourceVersion
    // read as precondition, so the updates that meet injected faults are the controller's.
    let _holder_a =
        CoordinatedHolder::start_writing(leases.clone(), "l", "a", HolderWrites::MergePatch);
    wait_lease(&leases, "l", "a elected despite 500s", |r| {
        r.holder() == Some("a")
    })
    .await;
    let conflicts_before = metric_sum(&scrape(metrics_addr).await, LEASE_UPDATE_CONFLICTS);

    // A 409 storm while the controller must pre-empt a for a better candidate: the next five
    // Lease updates answer 409 Conflict, and another writer keeps bumping the Lease's
    // resourceVersion.
    faults.fail_next(Verb::Update, "leases", 5, Failure::Conflict);
    let storm = tokio::spawn({
        let leases = leases.clone();
        async move {
            for i in 0..200u32 {
                if let Ok(lease) = leases.get("l").await {
                    let patch = serde_json::json!({
                        "metadata": {
                            "resourceVersion": lease.metadata.resource_version,
                            "labels": {"storm": i.to_string()},
                        },
                    });
                    let _ = leases
                        .patch("l", &PatchParams::default(), &Patch::Merge(&patch))
                        .await;
                }
            }
        }
    });
    faults.drop_watches();
    let _b = candidate(&client, "b", "l", "1.30.0", "1.30.0", OEV).await;
    let _holder_b =
        CoordinatedHolder::start_writing(leases.clone(), "l", "b", HolderWrites::MergePatch);
    faults.drop_watches();
    faults.fail_next(Verb::Update, "leases", 2, Failure::InternalError);
    wait_event(&client, NS, "l", "Preempted").await;
    wait_lease(&leases, "l", "b to hold l after the storm", |r| {
        r.holder() == Some("b")
    })
    .await;
    storm.await.unwrap();
    faults.drop_watches();
    let conflicts =
        metric_sum(&scrape(metrics_addr).await, LEASE_UPDATE_CONFLICTS) - conflicts_before;
    eprintln!("the controller met {conflicts} Lease update conflicts in the storm");
    assert!(
        conflicts >= 1.0,
        "the controller's Lease updates met the injected 409s (conflicts metric {conflicts})"
    );
    audit.assert_never_two_holders();
}

/// The controller's Lease updates answered 409, from `/metrics`.
const LEASE_UPDATE_CONFLICTS: &str =
    "conclave_api_writes_total{operation=\"lease_update\",result=\"conflict\"}";

#[tokio::test(flavor = "multi_thread")]
async fn watchers_recover_from_expired_watch_history() {
    let (emu, client) = emulator_without_bookmarks().await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), NS);
    let relists = WatchRelists::start(leases.clone());
    let mut cfg = config(NS, "c1");
    // Elected holders keep the Lease for an hour without renewing: nothing writes in the
    // controller's namespace while the fault is set up.
    cfg.lease_duration_seconds = 3600;
    let _controller = start(client.clone(), cfg);
    let _a = candidate(&client, "a", "l", "1.31.0", "1.31.0", OEV).await;
    wait_lease(&leases, "l", "a elected", |r| r.holder() == Some("a")).await;
    let listed = relists.count();

    // A write outside the watched namespace moves the store past every watcher's resume point;
    // then the history is forgotten and every watch is cut: each resumes from a version older
    // than the kept history and gets 410 Gone, in the middle of the run.
    let elsewhere: Api<Lease> = Api::namespaced(client.clone(), "kube-system");
    create_lease(&elsewhere, "bump", LeaseSpec::default()).await;
    emu.faults().expire_history();
    emu.faults().drop_watches();
    let deadline = tokio::time::Instant::now() + WAIT;
    while relists.count() == listed {
        assert!(
            tokio::time::Instant::now() < deadline,
            "a watcher in the controller's namespace never got 410 and relisted"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Both of the controller's watchers recovered: a new candidate (candidate watch) is elected
    // for a new Lease, and a released Lease (Lease watch) is reassigned.
    let _b = candidate(&client, "b", "m", "1.31.0", "1.31.0", OEV).await;
    wait_lease(&leases, "m", "b elected after the 410", |r| {
        r.holder() == Some("b")
    })
    .await;
    release(&leases, "l").await;
    wait_lease(&leases, "l", "l reassigned after the 410", |r| {
        r.holder() == Some("a")
    })
    .await;
}

/// Finding 2 of the second review: the controller's Lease watch is down (its events held back,
/// then the watch cut and resumed past the kept history: 410 Gone and a relist); meanwhile the
/// holder renews its Lease, unseen, and the Lease is then deleted. The relist finds it missing.
/// Its holder may lead until its last renewal plus its duration, a renewal this controller never
/// saw: the Lease is not created again before that (it was at once, 8 s too early).
#[tokio::test(flavor = "multi_thread")]
async fn a_lease_deleted_during_a_watch_outage_is_held_for_its_holders_unseen_renewals() {
    let (emu, client) = emulator_without_bookmarks().await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), NS);
    let duration = 6;
    let mut cfg = config(NS, "c1");
    cfg.lease_duration_seconds = duration;
    let _controller = start(client.clone(), cfg);
    let _a = candidate(&client, "a", "l", "1.31.0", "1.31.0", OEV).await;
    wait_lease(&leases, "l", "a elected", |r| r.holder() == Some("a")).await;
    tokio::time::timeout(WAIT, emu.faults().watch_followed("leases", Some(NS)))
        .await
        .expect("the controller to watch Leases");

    // The outage: the controller sees nothing of what follows until its relist.
    emu.faults().hold_watch_events("leases");
    let mut last_renewal = jiff::Timestamp::now();
    let renewing_until = last_renewal + jiff::SignedDuration::from_secs(i64::from(duration) + 2);
    while jiff::Timestamp::now() < renewing_until {
        let mut lease = leases.get("l").await.unwrap();
        let spec = lease.spec.as_mut().unwrap();
        if spec.holder_identity.as_deref() == Some("a") {
            let now = jiff::Timestamp::now();
            spec.renew_time = Some(micro(now));
            if leases
                .replace("l", &PostParams::default(), &lease)
                .await
                .is_ok()
            {
                last_renewal = now;
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    leases.delete("l", &Default::default()).await.unwrap();
    // A write outside the watched namespace moves the store past the watch's resume point; the
    // history is forgotten and the watch cut: it resumes from a version older than the kept
    // history, gets 410 Gone, and relists.
    let elsewhere: Api<Lease> = Api::namespaced(client.clone(), "kube-system");
    create_lease(&elsewhere, "bump", LeaseSpec::default()).await;
    emu.faults().expire_history();
    emu.faults().drop_watches();
    emu.faults().release_watch_events("leases");

    assert_created_again_after_the_term(&leases, last_renewal, duration).await;
}

/// Waits until Lease `l` is created again with a holder, and asserts that it was not acquired
/// before `a`'s term could have ended: its last renewal, at `last_renewal`, plus `duration`.
async fn assert_created_again_after_the_term(
    leases: &Api<Lease>,
    last_renewal: jiff::Timestamp,
    duration: i32,
) {
    let recreated = wait_lease(leases, "l", "the Lease created again", |r| {
        r.holder().is_some()
    })
    .await;
    let term_end = conclave_core::k8s::timestamp(last_renewal)
        + Duration::from_secs(u64::try_from(duration).unwrap());
    let acquired = recreated.acquire_time.expect("acquireTime");
    assert!(
        acquired >= term_end,
        "created again at {acquired} for {:?}, while a, which renewed it last at {last_renewal}, \
         may lead until {term_end}",
        recreated.holder()
    );
}

/// Issue 47, finding 2, its other half: a controller that starts after a held Lease was deleted
/// never saw it, nor its holder's renewals. The holder (cut off from the API server, or slow to
/// notice) may lead until its last renewal plus its duration; the Lease is not created for
/// another candidate before that.
#[tokio::test(flavor = "multi_thread")]
async fn a_controller_started_after_a_held_lease_was_deleted_does_not_create_it_while_its_holder_may_lead()
 {
    let (_emu, client) = emulator().await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), NS);
    let duration = 6;
    let mut cfg = config(NS, "c1");
    cfg.lease_duration_seconds = duration;
    cfg.unseen_lease_hold = None;
    let first = start(client.clone(), cfg.clone());
    let _a = candidate(&client, "a", "l", "1.31.0", "1.31.0", OEV).await;
    wait_lease(&leases, "l", "a elected", |r| r.holder() == Some("a")).await;
    first.stop().await;

    // With no controller running, a renews once more and the Lease is deleted; then a controller
    // starts.
    let mut lease = leases.get("l").await.unwrap();
    let last_renewal = jiff::Timestamp::now();
    lease.spec.as_mut().unwrap().renew_time = Some(micro(last_renewal));
    leases
        .replace("l", &PostParams::default(), &lease)
        .await
        .unwrap();
    leases.delete("l", &Default::default()).await.unwrap();
    let _b = candidate(&client, "b", "l", "1.31.0", "1.31.0", OEV).await;
    cfg.identity = "c2".into();
    let _second = start(client.clone(), cfg);

    assert_created_again_after_the_term(&leases, last_renewal, duration).await;
}

/// A kube-apiserver's election of the built-in controller, as client-go runs it: it holds
/// `kube-system/leader-election-controller` as `identity`, renewing every 500 ms with a 2 s
/// duration, and stops for good once it finds another holder (client-go's renewal then fails
/// and it steps down; it never overwrites a live holder). Returns when it stopped.
async fn apiserver_holding_the_builtin_lease(
    client: Client,
    identity: &'static str,
) -> tokio::task::JoinHandle<jiff::Timestamp> {
    let api: Api<Lease> = Api::namespaced(client, "kube-system");
    let at = jiff::Timestamp::now();
    create_lease(
        &api,
        "leader-election-controller",
        LeaseSpec {
            holder_identity: Some(identity.into()),
            lease_duration_seconds: Some(2),
            acquire_time: Some(micro(at)),
            renew_time: Some(micro(at)),
            ..LeaseSpec::default()
        },
    )
    .await;
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_millis(500)).await;
            let Ok(mut lease) = api.get("leader-election-controller").await else {
                continue;
            };
            let spec = lease.spec.as_mut().expect("spec");
            if spec.holder_identity.as_deref() != Some(identity) {
                return jiff::Timestamp::now();
            }
            spec.renew_time = Some(micro(jiff::Timestamp::now()));
            let _ = api
                .replace("leader-election-controller", &PostParams::default(), &lease)
                .await;
        }
    })
}

/// Issue 48: the take-over (on by default, with `--mode auto`). A kube-apiserver runs the
/// built-in election controller; Conclave's active replica writes itself as the holder of that
/// controller's Lease, keeps it, and elects the OldestEmulationVersion Lease only three of the
/// replaced holder's lease durations after it took it (the apiserver's controller may run until
/// its renew deadline and its release have passed). Then a graceful stop of the replica hands
/// it to the next active replica at once (the same installation), and a crash of every
/// replica leaves it to expire, unreleased, for a kube-apiserver to take.
#[tokio::test(flavor = "multi_thread")]
async fn the_take_over_holds_the_builtin_lease_and_elects_once_the_apiserver_stopped() {
    let (_emu, client) = emulator().await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), NS);
    let builtin: Api<Lease> = Api::namespaced(client.clone(), "kube-system");
    let apiserver = apiserver_holding_the_builtin_lease(client.clone(), "apiserver-1_0f0f").await;
    let addr = free_addr();
    let auto = |identity: &str| {
        let mut cfg = config(NS, identity);
        cfg.mode = Mode::Auto;
        cfg.take_over = true;
        cfg
    };
    let mut first = auto("c1");
    first.metrics_addr = Some(addr);
    let c1 = start(client.clone(), first);
    let _a = candidate(&client, "a", "l", "1.31.0", "1.31.0", OEV).await;

    let taken = wait_lease(
        &builtin,
        "leader-election-controller",
        "c1 takes it over",
        |r| r.holder() == Some("conclave/kube-system/c1"),
    )
    .await;
    let stepped_down = tokio::time::timeout(WAIT, apiserver)
        .await
        .expect("the apiserver saw another holder")
        .expect("no panic");
    let elected = wait_lease(&leases, "l", "a elected by Conclave", |r| {
        r.holder() == Some("a")
    })
    .await;
    let safe_from = taken.acquire_time.expect("acquireTime") + Duration::from_secs(3 * 2);
    assert!(
        elected.acquire_time.expect("acquireTime") >= safe_from,
        "Conclave elected at {:?}, before the apiserver it replaced (which saw it at \
         {stepped_down}) must have stopped ({safe_from})",
        elected.acquire_time
    );
    wait_metrics(addr, "the take-over gauge", |body| {
        metric_sum(body, "conclave_builtin_taken_over ") == 1.0
    })
    .await;
    wait_event(
        &client,
        "kube-system",
        "leader-election-controller",
        "BuiltinTakenOver",
    )
    .await;

    // A second replica; the first stops gracefully: the second takes the Lease from its own
    // installation at once.
    let c2 = start(client.clone(), auto("c2"));
    c1.stop().await;
    wait_lease(&builtin, "leader-election-controller", "c2 holds it", |r| {
        r.holder() == Some("conclave/kube-system/c2")
    })
    .await;

    // Every replica crashes: the Lease is not released, and its renewals stop.
    c2.crash();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let last = builtin.get("leader-election-controller").await.unwrap();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let later = builtin.get("leader-election-controller").await.unwrap();
    assert_eq!(
        last.metadata.resource_version, later.metadata.resource_version,
        "nothing renews it once every replica is gone"
    );
    assert_eq!(
        later.spec.and_then(|s| s.holder_identity).as_deref(),
        Some("conclave/kube-system/c2"),
        "not released: a kube-apiserver takes it at expiry"
    );
}

/// An emulator that sends no bookmarks, and a client: a watcher's resume point is the last event
/// it saw in its own scope, so expiring the history makes its resume fail with 410 Gone.
async fn emulator_without_bookmarks() -> (conclave_emulator::RunningEmulator, Client) {
    let emu = Emulator::start(EmulatorConfig {
        bookmark_interval: Duration::from_secs(3600),
        ..EmulatorConfig::default()
    })
    .await
    .expect("emulator starts");
    let client =
        Client::try_from(kube::Config::new(emu.url().parse().expect("url"))).expect("client");
    (emu, client)
}

/// Counts the relists (a full list after a 410 or at start) of a watcher on `api`, which is
/// in the same scope as the controller's own watchers.
struct WatchRelists {
    count: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl WatchRelists {
    fn start(api: Api<Lease>) -> Self {
        let count = Arc::new(AtomicUsize::new(0));
        let seen = count.clone();
        let task = tokio::spawn(async move {
            let stream = watcher(api, watcher::Config::default()).default_backoff();
            futures::pin_mut!(stream);
            while let Some(event) = stream.next().await {
                if let Ok(watcher::Event::InitDone) = event {
                    seen.fetch_add(1, Ordering::SeqCst);
                }
            }
        });
        Self { count, task }
    }

    fn count(&self) -> usize {
        self.count.load(Ordering::SeqCst)
    }
}

impl Drop for WatchRelists {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_controller_restart_in_the_middle_of_an_election_completes_it() {
    let (emu, client) = emulator().await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), NS);
    let candidates: Api<LeaseCandidate> = Api::namespaced(client.clone(), NS);
    let audit = HolderAudit::start(leases.clone(), "l");
    // Slow API: the first controller is mid-way (pings sent or in flight) when it crashes.
    emu.faults().set_latency(Duration::from_millis(150));
    let first = start(client.clone(), config(NS, "c1"));
    stale_candidate_pinged(&candidates, "a", "l", || "the first controller".into()).await;
    first.crash();
    emu.faults().set_latency(Duration::ZERO);
    // The candidate comes alive (answers pings) only now; a second controller finishes the job
    // once the crashed one's Lease expires.
    let _responder = CandidateResponder::register(
        client.clone(),
        lease_candidate(NS, "b", "l", "1.31.0", Some("1.31.0"), OEV),
    )
    .await
    .unwrap();
    let _second = start(client.clone(), config(NS, "c2"));
    let record = wait_lease(&leases, "l", "an election after the restart", |r| {
        r.holder().is_some()
    })
    .await;
    assert_eq!(
        record.holder(),
        Some("b"),
        "the unresponsive candidate is left out"
    );
    audit.assert_never_two_holders();
}

#[tokio::test(flavor = "multi_thread")]
async fn third_party_mode_leaves_oldest_emulation_version_alone() {
    let (_emu, client) = emulator().await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), NS);
    let mut cfg = config(NS, "c1");
    cfg.mode = Mode::ThirdParty;
    let _controller = start(client.clone(), cfg);
    let _a = candidate(&client, "a", "l", "1.31.0", "1.31.0", OEV).await;
    // A different Lease with an unknown third-party strategy proves the controller is working.
    let _b = candidate(&client, "b", "tp", "1.31.0", "1.31.0", "example.com/nope").await;
    wait_event(&client, NS, "tp", "UnknownStrategy").await;
    assert!(leases.get_opt("l").await.unwrap().is_none());
}

/// A strategy whose plugin always fails, as a trapping or over-limit plugin would.
struct Failing;

impl conclave_controller::Decide for Failing {
    fn has_strategy(&self, _strategy: &str) -> bool {
        true
    }

    fn elect(
        &self,
        strategy: &str,
        _request: &conclave_core::request::ElectionRequest,
    ) -> Result<Option<String>, conclave_controller::DecideError> {
        Err(conclave_controller::DecideError {
            kind: conclave_controller::DecideErrorKind::Trap,
            message: format!("strategy {strategy:?} trapped: unreachable"),
        })
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn plugin_errors_leave_the_lease_as_it_is() {
    let (_emu, client) = emulator().await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), NS);
    create_lease(
        &leases,
        "l",
        LeaseSpec {
            holder_identity: Some(String::new()),
            strategy: Some(OEV.into()),
            ..LeaseSpec::default()
        },
    )
    .await;
    let before = leases.get("l").await.unwrap();
    let _a = candidate(&client, "a", "l", "1.31.0", "1.31.0", OEV).await;
    let shutdown = tokio_util::sync::CancellationToken::new();
    let task = tokio::spawn(conclave_controller::run(
        client.clone(),
        std::sync::Arc::new(Failing),
        config(NS, "c1"),
        shutdown.clone(),
    ));
    let event = wait_event(&client, NS, "l", "PluginError").await;
    assert!(event.note.unwrap_or_default().contains("trap"));
    // Retried with backoff: the Event becomes a series; the Lease is never written.
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client.clone(), NS);
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let retried = events
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .iter()
            .any(|e| {
                e.reason.as_deref() == Some("PluginError")
                    && e.series.as_ref().is_some_and(|s| s.count >= 2)
            });
        if retried {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the failing election was not retried"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let after = leases.get("l").await.unwrap();
    assert_eq!(
        after.metadata.resource_version, before.metadata.resource_version,
        "a failing plugin must not change the Lease"
    );
    shutdown.cancel();
    task.await
        .unwrap()
        .expect("the controller survives plugin errors and stops cleanly");
}

/// The engine's decisions, counted: `reads_clock` is the engine's own (what each plugin declared),
/// so a count shows whether a renewal called the plugin.
struct CountingEngine {
    engine: conclave_engine::Engine,
    calls: AtomicUsize,
}

impl conclave_controller::Decide for CountingEngine {
    fn has_strategy(&self, strategy: &str) -> bool {
        self.engine.has_strategy(strategy)
    }

    fn reads_clock(&self, strategy: &str) -> bool {
        conclave_controller::Decide::reads_clock(&self.engine, strategy)
    }

    fn elect(
        &self,
        strategy: &str,
        request: &conclave_core::request::ElectionRequest,
    ) -> Result<Option<String>, conclave_controller::DecideError> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        conclave_controller::Decide::elect(&self.engine, strategy, request)
    }
}

/// An engine serving only the plugin at `path`, as `conclave run --plugins` loads it.
fn engine_of(path: &std::path::Path) -> conclave_engine::Engine {
    conclave_engine::Engine::from_file(conclave_engine::EngineConfig::default(), path)
        .unwrap_or_else(|error| panic!("{} loads: {error}", path.display()))
}

/// Elects Lease `l` under `strategy` (two candidates, which then stay silent), lets its holder
/// renew it every 200 ms, and returns how many of those renewals were written and how many
/// strategy calls the controller made meanwhile, once the Lease had settled.
async fn strategy_calls_during_renewals(
    engine: conclave_engine::Engine,
    strategy: &str,
) -> (usize, usize) {
    let (_emu, client) = emulator().await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), NS);
    let writes = LeaseWrites::start(leases.clone()).await;
    let decider = Arc::new(CountingEngine {
        engine,
        calls: AtomicUsize::new(0),
    });
    let _controller = start_deciding(client.clone(), decider.clone(), config(NS, "c1"));
    let _a = candidate(&client, "a", "l", "1.30.0", "1.30.0", strategy).await;
    let _b = candidate(&client, "b", "l", "1.31.0", "1.31.0", strategy).await;
    wait_lease(&leases, "l", "a to hold l", |r| r.holder() == Some("a")).await;
    let renewer = Renewer::start(
        leases.clone(),
        "l",
        "a",
        Duration::from_millis(200),
        jiff::SignedDuration::ZERO,
    );
    // The first renewals settle the Lease (the first one changes its duration, too).
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (calls_before, writes_before) =
        (decider.calls.load(Ordering::Relaxed), writes.of("l").len());
    tokio::time::sleep(Duration::from_secs(4)).await;
    let calls = decider.calls.load(Ordering::Relaxed) - calls_before;
    let window = writes.of("l").split_off(writes_before);
    renewer.crash().await;
    assert!(
        window
            .iter()
            .all(|w| w.record.holder() == Some("a") && w.record.preferred().is_none()),
        "only a's renewals were written: {window:#?}"
    );
    (window.len(), calls)
}

/// Issue 31: a plugin built against `conclave:strategy@0.4.0` that declares its answer does not
/// depend on `now` (`conclave.dev/priority`, loaded from a file like any third-party plugin) is
/// not called for its holder's renewals, which change nothing else.
#[tokio::test(flavor = "multi_thread")]
async fn a_plugin_that_declares_it_reads_no_clock_is_not_called_at_renewals() {
    let built = conclave_testkit::wasm_build::build_plugins(&["priority"]).join("priority.wasm");
    let engine = engine_of(&built);
    assert!(!engine.reads_now("conclave.dev/priority"));
    let (renewals, calls) = strategy_calls_during_renewals(engine, "conclave.dev/priority").await;
    assert!(renewals >= 10, "{renewals} renewals in 4 s");
    assert_eq!(calls, 0, "strategy calls during {renewals} renewals");
}

/// The same rule built against `conclave:strategy@0.3.0` (the engine's `fixtures/v0.3` built-in),
/// which cannot declare that it ignores `now`, is called again at its holder's renewals.
#[tokio::test(flavor = "multi_thread")]
async fn a_0_3_plugin_is_called_at_its_holders_renewals() {
    let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../engine/tests/fixtures/v0.3/oldest_emulation_version.wasm");
    let engine = engine_of(&fixture);
    assert_eq!(engine.plugins()[0].contract, "0.3.0");
    let (renewals, calls) = strategy_calls_during_renewals(engine, OEV).await;
    assert!(renewals >= 10, "{renewals} renewals in 4 s");
    assert!(
        calls * 2 >= renewals,
        "{calls} strategy calls during {renewals} renewals"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn metrics_health_and_readiness_are_served() {
    let (_emu, client) = emulator().await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), NS);
    let addr = free_addr();
    let mut cfg = config(NS, "c1");
    cfg.metrics_addr = Some(addr);
    let _controller = start(client.clone(), cfg);
    let _a = candidate(&client, "a", "l", "1.31.0", "1.31.0", OEV).await;
    wait_lease(&leases, "l", "a elected", |r| r.holder() == Some("a")).await;
    let deadline = tokio::time::Instant::now() + WAIT;
    let body = loop {
        let (status, body) = http_get(addr, "/metrics").await;
        if status.contains("200")
            && body.contains("conclave_elections_total{strategy=\"OldestEmulationVersion\",outcome=\"create\"} 1")
        {
            break body;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "metrics never showed the election: {body}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    for name in [
        "conclave_election_latency_seconds",
        "conclave_plugin_call_seconds",
        "conclave_managed_leases 1",
        "conclave_active 1",
    ] {
        assert!(body.contains(name), "{name} missing from /metrics:\n{body}");
    }
    assert!(http_get(addr, "/healthz").await.0.contains("200"));
    assert!(http_get(addr, "/readyz").await.0.contains("200"));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_follower_takes_over_when_the_active_replica_shuts_down() {
    let (_emu, client) = emulator().await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), NS);
    let own: Api<Lease> = Api::namespaced(client.clone(), "kube-system");
    let first = start(client.clone(), config(NS, "replica-1"));
    let active = wait_lease(&own, "conclave-controller", "an active replica", |r| {
        r.holder().is_some()
    })
    .await;
    assert_eq!(active.holder(), Some("replica-1"));
    let second = start(client.clone(), config(NS, "replica-2"));
    let _a = candidate(&client, "a", "l", "1.31.0", "1.31.0", OEV).await;
    wait_lease(&leases, "l", "a elected by replica-1", |r| {
        r.holder() == Some("a")
    })
    .await;

    // SIGTERM path: in-flight work finishes, the Lease is released, the follower takes over at
    // once (its caches are warm) and keeps electing.
    first.stop().await;
    wait_lease(&own, "conclave-controller", "replica-2 active", |r| {
        r.holder() == Some("replica-2")
    })
    .await;
    let _b = candidate(&client, "b", "m", "1.31.0", "1.31.0", OEV).await;
    wait_lease(&leases, "m", "b elected by replica-2", |r| {
        r.holder() == Some("b")
    })
    .await;
    second.stop().await;
}

/// Crash failover when the dead leader was the best candidate: its LeaseCandidate lingers and
/// never answers, yet the next leader is written about when the Lease expires (10 s after the
/// last renewal), not an ack window (4 s) later, because the controller pinged the overdue
/// holder's candidate before expiry.
#[tokio::test(flavor = "multi_thread")]
async fn a_crashed_best_leader_is_replaced_at_lease_expiry_not_an_ack_window_later() {
    let (_emu, client) = emulator().await;
    let _controller = start(client.clone(), failover_config(NS, "c1"));
    let failover = crash_the_best_leader(&client, NS, "1.31.0", "1.30.0").await;
    eprintln!("next leader written {failover:#} after the last renewal (10 s Lease)");
    // Upstream's rule cannot be faster than lease + ack window (14 s): at expiry it pings the
    // dead best candidate and waits out the window. Asserting below that, with 4 s to spare.
    assert!(
        failover < jiff::SignedDuration::from_secs(14),
        "next leader written {failover:#} after the last renewal"
    );
}

/// A leader that renews late (every 7 s of a 10 s Lease, so past the point where it counts as
/// overdue) but in time keeps its Lease: the controller pings its LeaseCandidate, which answers,
/// and never takes the Lease over before it expires.
#[tokio::test(flavor = "multi_thread")]
async fn a_leader_renewing_late_but_in_time_keeps_its_lease() {
    let (_emu, client) = emulator().await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), NS);
    let _controller = start(client.clone(), failover_config(NS, "c1"));
    let _best = candidate(&client, "slow", "late", "1.31.0", "1.30.0", OEV).await;
    let _next = candidate(&client, "other", "late", "1.31.0", "1.31.0", OEV).await;
    wait_lease(&leases, "late", "slow elected", |r| {
        r.holder() == Some("slow")
    })
    .await;
    let audit = HolderAudit::start(leases.clone(), "late");
    let renewer = Renewer::start(
        leases.clone(),
        "late",
        "slow",
        Duration::from_secs(7),
        jiff::SignedDuration::ZERO,
    );
    tokio::time::sleep(Duration::from_secs(24)).await;
    let spec = leases.get("late").await.unwrap().spec.unwrap_or_default();
    assert_eq!(spec.holder_identity.as_deref(), Some("slow"));
    assert_eq!(spec.preferred_holder, None);
    let changes = audit.changes();
    assert!(
        changes.iter().all(|change| !change.contains("other")),
        "the late leader was replaced: {changes:?}"
    );
    let pinged = Api::<LeaseCandidate>::namespaced(client.clone(), NS)
        .get("slow")
        .await
        .unwrap()
        .spec
        .and_then(|spec| spec.ping_time);
    assert!(
        pinged.is_some(),
        "the overdue holder's candidate was pinged"
    );
    renewer.crash().await;
}

/// A live legacy holder (no LeaseCandidate) whose clock runs 12 s behind the controller's writes
/// `renewTime`s that look expired on arrival (10 s Lease). Judged by when the controller saw each
/// renewal arrive, as client-go judges, its Lease is not expired, and it keeps it.
#[tokio::test(flavor = "multi_thread")]
async fn a_live_holder_whose_clock_runs_behind_is_not_replaced() {
    let (_emu, client) = emulator().await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), NS);
    create_lease(
        &leases,
        "skewed",
        LeaseSpec {
            holder_identity: Some("legacy".into()),
            lease_duration_seconds: Some(10),
            renew_time: Some(micro(jiff::Timestamp::now())),
            ..LeaseSpec::default()
        },
    )
    .await;
    let renewer = Renewer::start(
        leases.clone(),
        "skewed",
        "legacy",
        Duration::from_secs(1),
        jiff::SignedDuration::from_secs(12),
    );
    let audit = HolderAudit::start(leases.clone(), "skewed");
    let mut cfg = config(NS, "c1");
    cfg.lease_duration_seconds = 10;
    let _controller = start(client.clone(), cfg);
    let _c = candidate(&client, "c", "skewed", "1.31.0", "1.31.0", OEV).await;
    tokio::time::sleep(Duration::from_secs(8)).await;
    let spec = leases.get("skewed").await.unwrap().spec.unwrap_or_default();
    assert_eq!(
        spec.holder_identity.as_deref(),
        Some("legacy"),
        "changes: {:?}",
        audit.changes()
    );
    // Once it stops renewing, its Lease expires by the controller's clock and c is elected.
    renewer.crash().await;
    wait_lease(&leases, "skewed", "c elected after the expiry", |r| {
        r.holder() == Some("c")
    })
    .await;
}

/// No needless first leader: candidates registered in one batch (seeded random sets of 1 to 6,
/// random versions) get the best of the batch as the Lease's first holder, never the first to
/// arrive pre-empted a moment later.
#[tokio::test(flavor = "multi_thread")]
async fn a_batch_of_candidates_gets_its_best_as_first_holder() {
    const SEED: u64 = 0x5eed_4355;
    const SETS: usize = 20;
    let (_emu, client) = emulator().await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), NS);
    let candidates: Api<LeaseCandidate> = Api::namespaced(client.clone(), NS);
    // A settle window far longer than the default 30 ms, so that a busy machine stalling the
    // test between two creates cannot split a batch (the bench measures the default).
    let mut cfg = config(NS, "c1");
    cfg.first_election_settle = conclave_core::step::Settle::after_gap(Duration::from_millis(300));
    let _controller = start(client.clone(), cfg);
    let mut random = SeededSets::new(SEED);
    let mut needless = Vec::new();
    for set in 0..SETS {
        let lease = format!("batch-{set}");
        let audit = HolderAudit::start(leases.clone(), &lease);
        let size = random.size(6);
        let mut responders = Vec::new();
        for i in 0..size {
            let (binary, emulation) = random.versions(34);
            responders.push(
                candidate(
                    &client,
                    &format!("{lease}-{i}"),
                    &lease,
                    &binary,
                    &emulation,
                    OEV,
                )
                .await,
            );
        }
        let created: Vec<LeaseCandidate> =
            futures::future::join_all(responders.iter().map(|r| candidates.get(r.name())))
                .await
                .into_iter()
                .map(|c| c.expect("candidate"))
                .collect();
        let best = oldest_emulation_winner(&created).expect("a best candidate");
        wait_lease(&leases, &lease, "the best of the batch", |r| {
            r.holder() == Some(best.as_str()) && r.preferred().is_none()
        })
        .await;
        let changes = audit.changes();
        if !changes.is_empty() {
            needless.push(format!("{lease}: first holder replaced by {changes:?}"));
        }
    }
    assert!(
        needless.is_empty(),
        "seed {SEED:#x}: needless first terms in {} of {SETS} sets: {needless:#?}",
        needless.len()
    );
}

/// Waits until the replica serving `/metrics` at `addr` reports `conclave_leases_without_holder`
/// as `expected`.
async fn wait_leaderless(addr: std::net::SocketAddr, expected: f64, what: &str) {
    wait_metrics(
        addr,
        &format!("conclave_leases_without_holder to become {expected} ({what})"),
        |body| metric_sum(body, "conclave_leases_without_holder") == expected,
    )
    .await;
}

/// `conclave_leases_without_holder`: 0 while the elected holder renews; 1 once every candidate
/// of the Lease is dead (the holder stopped renewing, no candidate answers its ping, their
/// LeaseCandidates remain); 0 again once a new instance is elected and renews. A follower always
/// reports 0, so the two replicas' series sum to the number of Leases.
#[tokio::test(flavor = "multi_thread")]
async fn counts_leases_without_holder_while_candidates_exist() {
    let (_emu, client) = emulator().await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), NS);
    let own: Api<Lease> = Api::namespaced(client.clone(), "kube-system");
    let (active_addr, follower_addr) = (free_addr(), free_addr());
    let mut cfg = config(NS, "c1");
    cfg.metrics_addr = Some(active_addr);
    let _active = start(client.clone(), cfg);
    wait_lease(
        &own,
        conclave_controller::CONTROLLER_LEASE,
        "c1 active",
        |r| r.holder() == Some("c1"),
    )
    .await;
    let mut cfg = config(NS, "c2");
    cfg.metrics_addr = Some(follower_addr);
    let _follower = start(client.clone(), cfg);

    let a = candidate(&client, "a", "l", "1.31.0", "1.31.0", OEV).await;
    let a_renews = CoordinatedHolder::start(leases.clone(), "l", "a");
    wait_lease(&leases, "l", "a elected", |r| r.holder() == Some("a")).await;
    // Another Lease, held all along: never counted.
    let _c = candidate(&client, "c", "m", "1.31.0", "1.31.0", OEV).await;
    let _c_renews = CoordinatedHolder::start(leases.clone(), "m", "c");
    wait_lease(&leases, "m", "c elected", |r| r.holder() == Some("c")).await;
    wait_leaderless(active_addr, 0.0, "both Leases held").await;

    // Every candidate of l dies: its holder stops renewing and nothing answers pings.
    drop(a_renews);
    a.stop();
    wait_leaderless(active_addr, 1.0, "l expired, a dead").await;
    let follower = scrape(follower_addr).await;
    assert_eq!(
        metric_sum(&follower, "conclave_leases_without_holder"),
        0.0,
        "{follower}"
    );
    assert!(follower.contains("conclave_active 0"), "{follower}");

    // A new instance registers and is elected.
    let _b = candidate(&client, "b", "l", "1.31.0", "1.31.0", OEV).await;
    let _b_renews = CoordinatedHolder::start(leases.clone(), "l", "b");
    wait_lease(&leases, "l", "b elected", |r| r.holder() == Some("b")).await;
    wait_leaderless(active_addr, 0.0, "b holds l").await;
}

/// The Lease a step read after a write conflict stands in the cache until the watch catches up.
/// Here the holder made its Lease itself (as a component that is not yet coordinated does, or
/// the previous active replica just before a hand-over) while the controller's watch lags behind:
/// the controller's create is refused as a conflict, it reads the Lease, and finds its holder is
/// the best. Then an operator deletes the Lease and the holder's LeaseCandidate, still ahead of
/// the watch. Were the read forgotten, the controller would see no Lease and no deletion, and
/// create the Lease for the other candidate at once while the deleted Lease's holder still leads
/// (the model's two-leader trace, tests/model/README.md). It must wait, as for any Lease deleted
/// while held, until the holder's term could have ended.
#[tokio::test(flavor = "multi_thread")]
async fn a_lease_read_after_a_conflict_stands_in_while_the_watch_lags() {
    let (emu, client) = emulator().await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), NS);
    let candidates: Api<LeaseCandidate> = Api::namespaced(client.clone(), NS);
    let addr = free_addr();
    let mut cfg = config(NS, "c1");
    cfg.metrics_addr = Some(addr);
    let _controller = start(client.clone(), cfg);
    wait_metrics(addr, "the controller to be active", |body| {
        body.contains("conclave_active 1")
    })
    .await;

    // The controller's caches are synced once it is active, but its Lease watch may open just
    // after: held before that, the watch would replay the Lease's creation at once.
    tokio::time::timeout(WAIT, emu.faults().watch_followed("leases", Some(NS)))
        .await
        .expect("the controller to watch Leases");
    emu.faults().hold_watch_events("leases");
    let duration = 10;
    let renewed = jiff::Timestamp::now();
    create_lease(
        &leases,
        "l",
        LeaseSpec {
            holder_identity: Some("a".into()),
            lease_duration_seconds: Some(duration),
            acquire_time: Some(micro(renewed)),
            renew_time: Some(micro(renewed)),
            strategy: Some(OEV.into()),
            ..LeaseSpec::default()
        },
    )
    .await;
    let a = candidate(&client, "a", "l", "1.30.0", "1.30.0", OEV).await;
    let _b = candidate(&client, "b", "l", "1.31.0", "1.31.0", OEV).await;
    // The controller tried to create the Lease, was refused, and read it; its cache holds both
    // candidates.
    let conflicts = r#"conclave_api_writes_total{operation="lease_create",result="conflict"}"#;
    wait_metrics(addr, "the create's conflict and both candidates", |body| {
        metric_sum(body, conflicts) >= 1.0 && metric_sum(body, "conclave_candidates ") == 2.0
    })
    .await;

    leases.delete("l", &Default::default()).await.unwrap();
    a.stop();
    candidates.delete("a", &Default::default()).await.unwrap();
    // The candidate's deletion starts a step at once, on what the controller knows while its
    // watch of Leases lags. The watch stays held until the cache shows the deletion (the gauge
    // is refreshed every 2 s) and a second more: time for that step to act, not a bound.
    wait_metrics(addr, "the candidate's deletion", |body| {
        metric_sum(body, "conclave_candidates ") == 1.0
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    emu.faults().release_watch_events("leases");

    let elected = wait_lease(&leases, "l", "b to be elected", |r| r.holder() == Some("b")).await;
    let term_end = renewed + jiff::SignedDuration::from_secs(duration.into());
    let acquired = jiff::Timestamp::from_microsecond(
        elected
            .acquire_time
            .expect("acquireTime written")
            .as_micros(),
    )
    .unwrap();
    assert!(
        acquired >= term_end,
        "b was elected at {acquired}, while a, whose Lease was deleted, could lead until \
         {term_end}"
    );
}

/// Finding 3 of the second review: the Lease is deleted while the controller's write of it (a
/// pre-emption) is on its way back as a conflict, held back 2 s while the watch delivers the
/// deletion. The read after the conflict finds the Lease deleted, which the cache already shows:
/// the controller creates it again for the best candidate once the deleted holder's term is
/// over, instead of waiting for a watch event that never comes (only the controller creates the
/// Lease).
#[tokio::test(flavor = "multi_thread")]
async fn a_lease_deleted_while_a_refused_write_is_on_its_way_back_is_created_again() {
    let (emu, client) = emulator().await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), NS);
    let _controller = start(client.clone(), config(NS, "c1"));
    let _a = candidate(&client, "a", "l", "1.31.0", "1.31.0", OEV).await;
    let elected = wait_lease(&leases, "l", "a elected", |r| r.holder() == Some("a")).await;
    emu.faults().fail_next_held(
        Verb::Update,
        "leases",
        "l",
        1,
        Failure::Conflict,
        Duration::from_secs(2),
    );
    let _b = candidate(&client, "b", "l", "1.30.0", "1.30.0", OEV).await;
    // b's registration leads to a pre-emption write, which arrives and is held.
    let deadline = tokio::time::Instant::now() + WAIT;
    while emu.faults().failures_pending(Verb::Update, "leases") > 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the controller never wrote the Lease for b's pre-emption"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    leases.delete("l", &Default::default()).await.unwrap();

    let recreated = wait_lease(&leases, "l", "the Lease created again for b", |r| {
        r.holder() == Some("b")
    })
    .await;
    let term_end = elected.renew_time.expect("renewTime")
        + Duration::from_secs(u64::try_from(elected.lease_duration_seconds.unwrap_or(0)).unwrap());
    assert!(
        recreated.acquire_time.expect("acquireTime") >= term_end,
        "b was elected before a's term, whose Lease was deleted, ended at {term_end}"
    );
}

/// Waits until the controller's `/metrics` at `addr` satisfy `check`.
async fn wait_metrics(addr: std::net::SocketAddr, what: &str, check: impl Fn(&str) -> bool) {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let body = scrape(addr).await;
        if check(&body) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}; /metrics:\n{body}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A holder that answers pings but never renews the Lease it was given (its RBAC or an admission
/// policy refuses its Lease updates) is set aside once the Lease expires: the next best is
/// elected, and the Warning Event says for how long the holder sits out (a minute the first
/// time), so an operator knows when it will be tried again.
#[tokio::test(flavor = "multi_thread")]
async fn a_holder_that_never_renews_sits_out_for_a_minute_and_the_event_says_so() {
    let (_emu, client) = emulator().await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), NS);
    let _controller = start(client.clone(), config(NS, "c1"));
    // Both answer pings and neither renews the Lease: `a`, the best, is elected first.
    let _a = candidate(&client, "a", "l", "1.30.0", "1.30.0", OEV).await;
    let _b = candidate(&client, "b", "l", "1.31.0", "1.31.0", OEV).await;
    wait_lease(&leases, "l", "a to hold l", |r| r.holder() == Some("a")).await;
    wait_lease(&leases, "l", "b to be elected instead", |r| {
        r.holder() == Some("b")
    })
    .await;
    let event = wait_event(&client, NS, "l", "HolderNeverRenewed").await;
    let note = event.note.unwrap_or_default();
    assert!(
        note.contains("a sits out this Lease's elections for 60 s (time 1 in a row)"),
        "{note}"
    );
}
