//! kube-rs against the emulator: CRUD, optimistic concurrency, validation, selectors, paging,
//! patches, server-side apply, deletes, namespaces and events.

mod common;

use common::api_code;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::coordination::v1beta1::{LeaseCandidate, LeaseCandidateSpec};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions};
use serde_json::json;
use std::collections::BTreeMap;

fn lease(name: &str, holder: &str) -> Lease {
    Lease {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(holder.into()),
            lease_duration_seconds: Some(15),
            ..Default::default()
        }),
    }
}

fn candidate(name: &str, lease_name: &str, labels: &[(&str, &str)]) -> LeaseCandidate {
    LeaseCandidate {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some(
                labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect::<BTreeMap<_, _>>(),
            ),
            ..Default::default()
        },
        spec: Some(LeaseCandidateSpec {
            lease_name: lease_name.into(),
            binary_version: "1.33.0".into(),
            emulation_version: Some("1.33.0".into()),
            strategy: "OldestEmulationVersion".into(),
            ..Default::default()
        }),
    }
}

#[tokio::test]
async fn create_get_update_delete_with_resource_versions() {
    let (emulator, client) = common::start().await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), "default");
    let created = leases
        .create(&PostParams::default(), &lease("a", "x"))
        .await
        .unwrap();
    let rv1: u64 = created
        .metadata
        .resource_version
        .clone()
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        created
            .metadata
            .uid
            .as_deref()
            .is_some_and(|u| u.len() == 36)
    );
    assert!(created.metadata.creation_timestamp.is_some());
    assert_eq!(created.metadata.namespace.as_deref(), Some("default"));
    assert_eq!(
        leases
            .get("a")
            .await
            .unwrap()
            .spec
            .unwrap()
            .holder_identity
            .as_deref(),
        Some("x")
    );

    let (code, reason, message) = api_code(
        leases
            .create(&PostParams::default(), &lease("a", "y"))
            .await,
    );
    assert_eq!((code, reason.as_str()), (409, "AlreadyExists"));
    assert_eq!(message, r#"leases.coordination.k8s.io "a" already exists"#);

    let mut changed = created.clone();
    changed.spec.as_mut().unwrap().holder_identity = Some("y".into());
    let updated = leases
        .replace("a", &PostParams::default(), &changed)
        .await
        .unwrap();
    let rv2: u64 = updated
        .metadata
        .resource_version
        .clone()
        .unwrap()
        .parse()
        .unwrap();
    assert!(rv2 > rv1, "{rv2} > {rv1}");
    assert_eq!(updated.metadata.uid, created.metadata.uid);

    // The same write again carries the old resourceVersion: Conflict, with kube-apiserver's text.
    let (code, reason, message) =
        api_code(leases.replace("a", &PostParams::default(), &changed).await);
    assert_eq!((code, reason.as_str()), (409, "Conflict"));
    assert_eq!(
        message,
        r#"Operation cannot be fulfilled on leases.coordination.k8s.io "a": the object has been modified; please apply your changes to the latest version and try again"#
    );

    // A write that changes nothing keeps the resourceVersion.
    let same = leases
        .replace("a", &PostParams::default(), &updated)
        .await
        .unwrap();
    assert_eq!(
        same.metadata.resource_version,
        updated.metadata.resource_version
    );
    assert_eq!(emulator.resource_version(), rv2);

    // Leases do not allow unconditional updates.
    let mut unconditional = updated.clone();
    unconditional.metadata.resource_version = None;
    let (code, reason, message) = api_code(
        leases
            .replace("a", &PostParams::default(), &unconditional)
            .await,
    );
    assert_eq!((code, reason.as_str()), (422, "Invalid"));
    assert!(message.contains("metadata.resourceVersion"), "{message}");

    // PUT creates a missing lease (AllowCreateOnUpdate).
    let put_created = leases
        .replace("b", &PostParams::default(), &lease("b", "z"))
        .await
        .unwrap();
    assert!(put_created.metadata.uid.is_some());

    leases.delete("a", &DeleteParams::default()).await.unwrap();
    let (code, reason, message) = api_code(leases.get("a").await);
    assert_eq!((code, reason.as_str()), (404, "NotFound"));
    assert_eq!(message, r#"leases.coordination.k8s.io "a" not found"#);
    let (code, _, _) = api_code(leases.delete("a", &DeleteParams::default()).await);
    assert_eq!(code, 404);
}

#[tokio::test]
async fn missing_namespace_is_not_found_and_namespaces_can_be_created_and_deleted() {
    let (_emulator, client) = common::start().await;
    let nowhere: Api<Lease> = Api::namespaced(client.clone(), "nowhere");
    let (code, reason, message) = api_code(
        nowhere
            .create(&PostParams::default(), &lease("a", "x"))
            .await,
    );
    assert_eq!(
        (code, reason.as_str(), message.as_str()),
        (404, "NotFound", r#"namespaces "nowhere" not found"#)
    );

    let namespaces: Api<Namespace> = Api::all(client.clone());
    let names: Vec<String> = namespaces
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect();
    for want in ["default", "kube-node-lease", "kube-public", "kube-system"] {
        assert!(names.contains(&want.to_string()), "{names:?}");
    }
    let ns = Namespace {
        metadata: ObjectMeta {
            name: Some("nowhere".into()),
            ..Default::default()
        },
        ..Default::default()
    };
    let created = namespaces
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    assert_eq!(created.status.unwrap().phase.as_deref(), Some("Active"));
    nowhere
        .create(&PostParams::default(), &lease("a", "x"))
        .await
        .unwrap();
    let bad = Namespace {
        metadata: ObjectMeta {
            name: Some("Not_Valid".into()),
            ..Default::default()
        },
        ..Default::default()
    };
    assert_eq!(
        api_code(namespaces.create(&PostParams::default(), &bad).await).0,
        422
    );

    namespaces
        .delete("nowhere", &DeleteParams::default())
        .await
        .unwrap();
    assert_eq!(api_code(nowhere.get("a").await).0, 404);
    assert_eq!(api_code(namespaces.get("nowhere").await).0, 404);
}

#[tokio::test]
async fn validation_rejects_like_kube_apiserver() {
    let (_emulator, client) = common::start().await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), "default");
    let mut bad = lease("bad", "x");
    bad.spec.as_mut().unwrap().lease_duration_seconds = Some(0);
    bad.spec.as_mut().unwrap().preferred_holder = Some("y".into());
    let err = leases
        .create(&PostParams::default(), &bad)
        .await
        .unwrap_err();
    let kube::Error::Api(status) = err else {
        panic!("expected API error")
    };
    assert_eq!((status.code, status.reason.as_str()), (422, "Invalid"));
    assert_eq!(
        status.message,
        "Lease.coordination.k8s.io \"bad\" is invalid: [spec.leaseDurationSeconds: Invalid value: 0: must be greater than 0, spec.preferredHolder: Forbidden: may only be specified if `strategy` is defined]"
    );
    let causes = status.details.unwrap().causes;
    let fields: Vec<_> = causes
        .iter()
        .map(|c| (c.field.as_str(), c.reason.as_str()))
        .collect();
    assert_eq!(
        fields,
        vec![
            ("spec.leaseDurationSeconds", "FieldValueInvalid"),
            ("spec.preferredHolder", "FieldValueForbidden")
        ]
    );

    let mut bad_strategy = lease("s", "x");
    bad_strategy.spec.as_mut().unwrap().strategy = Some("foobar".into());
    let (code, _, message) = api_code(leases.create(&PostParams::default(), &bad_strategy).await);
    assert_eq!(code, 422);
    assert!(
        message.contains("spec.strategy.strategy: Unsupported value: \"foobar\""),
        "{message}"
    );
    let (code, _, _) = api_code(
        leases
            .create(&PostParams::default(), &lease("Not_A_DNS_Name", "x"))
            .await,
    );
    assert_eq!(code, 422);

    let candidates: Api<LeaseCandidate> = Api::namespaced(client.clone(), "default");
    // ConfigMap-key names: capitals and underscores are fine for LeaseCandidates.
    let ok = candidates
        .create(&PostParams::default(), &candidate("Node_A.x", "l", &[]))
        .await
        .unwrap();
    let mut newer = candidate("v", "l", &[]);
    newer.spec.as_mut().unwrap().emulation_version = Some("1.34.0".into());
    let (code, _, message) = api_code(candidates.create(&PostParams::default(), &newer).await);
    assert_eq!(code, 422);
    assert!(message.contains("spec.binaryVersion: Invalid value: \"1.33.0\": must be greater than or equal to `emulationVersion`"), "{message}");
    let mut missing = candidate("m", "l", &[]);
    missing.spec.as_mut().unwrap().binary_version = String::new();
    missing.spec.as_mut().unwrap().emulation_version = None;
    let (code, _, message) = api_code(candidates.create(&PostParams::default(), &missing).await);
    assert_eq!(code, 422);
    assert!(
        message.contains("spec.binaryVersion: Required value"),
        "{message}"
    );
    assert!(message.contains("spec.emulationVersion: Required value: must be specified when `strategy` is 'OldestEmulationVersion'"), "{message}");

    // leaseName is immutable.
    let mut moved = ok.clone();
    moved.spec.as_mut().unwrap().lease_name = "other".into();
    let (code, _, message) = api_code(
        candidates
            .replace("Node_A.x", &PostParams::default(), &moved)
            .await,
    );
    assert_eq!(code, 422);
    assert!(
        message.contains("spec.leaseName: Invalid value: \"other\": field is immutable"),
        "{message}"
    );

    // Wrong types are rejected by decoding (400), unknown fields with fieldValidation=Strict too.
    let (code, reason, _) = api_code(
        leases.patch("s2", &PatchParams::apply("t"), &Patch::Apply(json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "spec": {"leaseDurationSeconds": "ten"}}))).await,
    );
    assert_eq!((code, reason.as_str()), (400, "BadRequest"));
    let strict = PatchParams {
        field_validation: Some(kube::api::ValidationDirective::Strict),
        ..PatchParams::apply("t")
    };
    let (code, _, message) = api_code(
        leases.patch("s3", &strict, &Patch::Apply(json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "s3"}, "spec": {"bogus": 1}}))).await,
    );
    assert_eq!(code, 400);
    assert!(
        message.contains("unknown field \"spec.bogus\""),
        "{message}"
    );
}

#[tokio::test]
async fn selectors_and_paging() {
    let (_emulator, client) = common::start().await;
    let candidates: Api<LeaseCandidate> = Api::namespaced(client.clone(), "kube-system");
    for (i, (lease_name, tier)) in [
        ("one", "a"),
        ("one", "b"),
        ("two", "a"),
        ("two", "c"),
        ("three", ""),
    ]
    .iter()
    .enumerate()
    {
        let labels: Vec<(&str, &str)> = if tier.is_empty() {
            vec![("app", "x")]
        } else {
            vec![("app", "x"), ("tier", tier)]
        };
        candidates
            .create(
                &PostParams::default(),
                &candidate(&format!("c{i}"), lease_name, &labels),
            )
            .await
            .unwrap();
    }
    Api::<LeaseCandidate>::namespaced(client.clone(), "default")
        .create(
            &PostParams::default(),
            &candidate("elsewhere", "one", &[("app", "x")]),
        )
        .await
        .unwrap();

    let names = |list: kube::api::ObjectList<LeaseCandidate>| -> Vec<String> {
        list.items
            .into_iter()
            .filter_map(|c| c.metadata.name)
            .collect()
    };
    let select = |labels: &'static str, fields: &'static str| {
        let api = candidates.clone();
        async move {
            names(
                api.list(&ListParams::default().labels(labels).fields(fields))
                    .await
                    .unwrap(),
            )
        }
    };
    assert_eq!(select("tier=a", "").await, vec!["c0", "c2"]);
    assert_eq!(select("tier==a", "").await, vec!["c0", "c2"]);
    assert_eq!(select("tier!=a", "").await, vec!["c1", "c3", "c4"]);
    assert_eq!(select("tier in (b,c)", "").await, vec!["c1", "c3"]);
    assert_eq!(select("tier notin (a)", "").await, vec!["c1", "c3", "c4"]);
    assert_eq!(select("tier", "").await, vec!["c0", "c1", "c2", "c3"]);
    assert_eq!(select("!tier", "").await, vec!["c4"]);
    assert_eq!(select("", "spec.leaseName=two").await, vec!["c2", "c3"]);
    assert_eq!(select("tier=a", "spec.leaseName=two").await, vec!["c2"]);
    assert_eq!(select("", "metadata.name=c4").await, vec!["c4"]);
    assert_eq!(
        select("", "spec.leaseName!=one").await,
        vec!["c2", "c3", "c4"]
    );
    let (code, reason, _) = api_code(
        candidates
            .list(&ListParams::default().fields("spec.strategy=x"))
            .await,
    );
    assert_eq!((code, reason.as_str()), (400, "BadRequest"));
    let (code, _, _) = api_code(
        candidates
            .list(&ListParams::default().labels("tier in a"))
            .await,
    );
    assert_eq!(code, 400);

    let all: Api<LeaseCandidate> = Api::all(client.clone());
    let everywhere = names(
        all.list(&ListParams::default().fields("spec.leaseName=one"))
            .await
            .unwrap(),
    );
    assert_eq!(everywhere, vec!["elsewhere", "c0", "c1"]);

    // Paging: limit 2 gives three pages with continue tokens, no duplicates, nothing missed.
    let mut seen = Vec::new();
    let mut token: Option<String> = None;
    let mut pages = 0;
    loop {
        let mut lp = ListParams::default().limit(2);
        if let Some(t) = &token {
            lp = lp.continue_token(t);
        }
        let page = candidates.list(&lp).await.unwrap();
        pages += 1;
        if pages == 1 {
            assert_eq!(page.metadata.remaining_item_count, Some(3));
        }
        token = page.metadata.continue_.clone().filter(|t| !t.is_empty());
        seen.extend(names(page));
        if token.is_none() {
            break;
        }
    }
    assert_eq!(pages, 3);
    assert_eq!(seen, vec!["c0", "c1", "c2", "c3", "c4"]);
}

#[tokio::test]
async fn patch_types_and_server_side_apply() {
    let (_emulator, client) = common::start().await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), "default");
    let created = leases
        .create(
            &PostParams {
                field_manager: Some("creator".into()),
                ..Default::default()
            },
            &lease("p", "x"),
        )
        .await
        .unwrap();

    let merged = leases
        .patch(
            "p",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"spec": {"holderIdentity": "m"}, "metadata": {"labels": {"k": "v"}}}),
            ),
        )
        .await
        .unwrap();
    assert_eq!(
        merged.spec.as_ref().unwrap().holder_identity.as_deref(),
        Some("m")
    );
    assert_eq!(
        merged.spec.as_ref().unwrap().lease_duration_seconds,
        Some(15)
    );

    let json_patch: json_patch::Patch = serde_json::from_value(json!([
        {"op": "test", "path": "/spec/holderIdentity", "value": "m"},
        {"op": "replace", "path": "/spec/holderIdentity", "value": "j"}
    ]))
    .unwrap();
    let patched = leases
        .patch(
            "p",
            &PatchParams::default(),
            &Patch::<()>::Json(json_patch.clone()),
        )
        .await
        .unwrap();
    assert_eq!(
        patched.spec.as_ref().unwrap().holder_identity.as_deref(),
        Some("j")
    );
    // The test operation now fails: 422.
    assert_eq!(
        api_code(
            leases
                .patch("p", &PatchParams::default(), &Patch::<()>::Json(json_patch))
                .await
        )
        .0,
        422
    );

    let strategic = leases
        .patch(
            "p",
            &PatchParams::default(),
            &Patch::Strategic(
                json!({"metadata": {"finalizers": ["a/b"]}, "spec": {"leaseTransitions": 2}}),
            ),
        )
        .await
        .unwrap();
    assert_eq!(strategic.metadata.finalizers, Some(vec!["a/b".to_string()]));
    assert_eq!(strategic.spec.as_ref().unwrap().lease_transitions, Some(2));

    // A resourceVersion in a patch is a precondition.
    let stale = json!({"metadata": {"resourceVersion": created.metadata.resource_version}, "spec": {"holderIdentity": "late"}});
    let (code, reason, _) = api_code(
        leases
            .patch("p", &PatchParams::default(), &Patch::Merge(stale))
            .await,
    );
    assert_eq!((code, reason.as_str()), (409, "Conflict"));

    // Patching a missing object is NotFound; apply creates it.
    assert_eq!(
        api_code(
            leases
                .patch("nope", &PatchParams::default(), &Patch::Merge(json!({})))
                .await
        )
        .0,
        404
    );
    let config = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "ssa"}, "spec": {"holderIdentity": "me", "leaseDurationSeconds": 10}});
    let applied = leases
        .patch("ssa", &PatchParams::apply("alice"), &Patch::Apply(&config))
        .await
        .unwrap();
    let mf = applied.metadata.managed_fields.clone().unwrap();
    assert_eq!(mf.len(), 1);
    assert_eq!(
        (mf[0].manager.as_deref(), mf[0].operation.as_deref()),
        (Some("alice"), Some("Apply"))
    );

    // Re-applying the same config is a no-op.
    let again = leases
        .patch("ssa", &PatchParams::apply("alice"), &Patch::Apply(&config))
        .await
        .unwrap();
    assert_eq!(
        again.metadata.resource_version,
        applied.metadata.resource_version
    );

    // Another manager changing alice's field conflicts, unless forced.
    let bob = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "ssa"}, "spec": {"holderIdentity": "bob"}});
    let err = leases
        .patch("ssa", &PatchParams::apply("bob"), &Patch::Apply(&bob))
        .await
        .unwrap_err();
    let kube::Error::Api(status) = err else {
        panic!("expected conflict")
    };
    assert_eq!((status.code, status.reason.as_str()), (409, "Conflict"));
    assert_eq!(
        status.message,
        r#"Apply failed with 1 conflict: conflict with "alice": .spec.holderIdentity"#
    );
    let forced = leases
        .patch(
            "ssa",
            &PatchParams::apply("bob").force(),
            &Patch::Apply(&bob),
        )
        .await
        .unwrap();
    assert_eq!(
        forced.spec.as_ref().unwrap().holder_identity.as_deref(),
        Some("bob")
    );
    assert_eq!(
        forced.spec.as_ref().unwrap().lease_duration_seconds,
        Some(10)
    );

    // alice drops leaseDurationSeconds from her config: the field is removed (nobody else owns it).
    let slim = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "ssa", "labels": {"a": "1"}}});
    let slimmed = leases
        .patch("ssa", &PatchParams::apply("alice"), &Patch::Apply(&slim))
        .await
        .unwrap();
    assert_eq!(slimmed.spec.as_ref().unwrap().lease_duration_seconds, None);
    assert_eq!(
        slimmed.spec.as_ref().unwrap().holder_identity.as_deref(),
        Some("bob")
    );

    // An update by a third writer takes the field; alice re-applying a different value conflicts with it.
    leases
        .patch(
            "ssa",
            &PatchParams {
                field_manager: Some("carol".into()),
                ..Default::default()
            },
            &Patch::Merge(json!({"metadata": {"labels": {"a": "2"}}})),
        )
        .await
        .unwrap();
    let err = leases
        .patch("ssa", &PatchParams::apply("alice"), &Patch::Apply(&slim))
        .await
        .unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 409 && s.message.contains("\"carol\"") && s.message.contains(".metadata.labels.a")),
        "{err:?}"
    );

    // Apply needs a field manager.
    let no_manager = PatchParams {
        field_manager: None,
        ..PatchParams::apply("x")
    };
    assert_eq!(
        api_code(leases.patch("ssa", &no_manager, &Patch::Apply(&slim)).await).0,
        422
    );
}

#[tokio::test]
async fn delete_preconditions_finalizers_and_collections() {
    let (_emulator, client) = common::start().await;
    let candidates: Api<LeaseCandidate> = Api::namespaced(client.clone(), "default");
    let created = candidates
        .create(
            &PostParams::default(),
            &candidate("d", "l", &[("group", "g")]),
        )
        .await
        .unwrap();
    let wrong_uid = DeleteParams::default().preconditions(Preconditions {
        uid: Some("not-the-uid".into()),
        resource_version: None,
    });
    let (code, reason, message) = api_code(candidates.delete("d", &wrong_uid).await);
    assert_eq!((code, reason.as_str()), (409, "Conflict"));
    assert!(
        message
            .contains("the UID in the precondition (not-the-uid) does not match the UID in record"),
        "{message}"
    );
    let wrong_rv = DeleteParams::default().preconditions(Preconditions {
        uid: None,
        resource_version: Some("1".into()),
    });
    assert_eq!(api_code(candidates.delete("d", &wrong_rv).await).0, 409);
    let right = DeleteParams::default().preconditions(Preconditions {
        uid: created.metadata.uid.clone(),
        resource_version: created.metadata.resource_version.clone(),
    });
    candidates.delete("d", &right).await.unwrap();
    assert_eq!(api_code(candidates.get("d").await).0, 404);

    // Finalizers hold the object until they are removed.
    let mut held = candidate("held", "l", &[]);
    held.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    candidates
        .create(&PostParams::default(), &held)
        .await
        .unwrap();
    candidates
        .delete("held", &DeleteParams::default())
        .await
        .unwrap();
    let marked = candidates.get("held").await.unwrap();
    assert!(marked.metadata.deletion_timestamp.is_some());
    candidates
        .patch(
            "held",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .unwrap();
    assert_eq!(api_code(candidates.get("held").await).0, 404);

    for i in 0..4 {
        let group = if i % 2 == 0 { "even" } else { "odd" };
        candidates
            .create(
                &PostParams::default(),
                &candidate(&format!("n{i}"), "l", &[("group", group)]),
            )
            .await
            .unwrap();
    }
    let deleted = candidates
        .delete_collection(
            &DeleteParams::default(),
            &ListParams::default().labels("group=even"),
        )
        .await
        .unwrap();
    let names: Vec<String> = deleted
        .left()
        .expect("a list of deleted objects")
        .items
        .into_iter()
        .filter_map(|c| c.metadata.name)
        .collect();
    assert_eq!(names, vec!["n0", "n2"]);
    let left: Vec<String> = candidates
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|c| c.metadata.name)
        .collect();
    assert_eq!(left, vec!["n1", "n3"]);
}

#[tokio::test]
async fn events_from_the_kube_recorder_are_stored() {
    use kube::runtime::events::{Event, EventType, Recorder, Reporter};
    let (_emulator, client) = common::start().await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), "default");
    let l = leases
        .create(&PostParams::default(), &lease("ev", "x"))
        .await
        .unwrap();
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: "conclave".into(),
            instance: None,
        },
    );
    let reference = kube::Resource::object_ref(&l, &());
    recorder
        .publish(
            &Event {
                type_: EventType::Normal,
                reason: "Elected".into(),
                note: Some("x won".into()),
                action: "Elect".into(),
                secondary: None,
            },
            &reference,
        )
        .await
        .unwrap();
    let events: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(client.clone(), "default");
    let list = events.list(&ListParams::default()).await.unwrap();
    assert_eq!(list.items.len(), 1);
    let e = &list.items[0];
    assert_eq!(e.reason.as_deref(), Some("Elected"));
    assert_eq!(
        e.regarding.as_ref().and_then(|r| r.name.as_deref()),
        Some("ev")
    );
    let core: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(client.clone(), "default");
    let ev = k8s_openapi::api::core::v1::Event {
        metadata: ObjectMeta {
            name: Some("core-ev".into()),
            ..Default::default()
        },
        involved_object: reference,
        reason: Some("Seen".into()),
        ..Default::default()
    };
    core.create(&PostParams::default(), &ev).await.unwrap();
    assert_eq!(
        core.list(&ListParams::default().fields("reason=Seen"))
            .await
            .unwrap()
            .items
            .len(),
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_side_apply_takes_the_name_from_the_url_when_the_body_has_none() {
    let (_emulator, client) = common::start().await;
    let leases: Api<Lease> = Api::namespaced(client, "default");
    let applied = leases
        .patch(
            "nameless",
            &PatchParams::apply("lease-manager"),
            &Patch::Apply(json!({
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "spec": {"holderIdentity": "a", "leaseDurationSeconds": 5}
            })),
        )
        .await
        .unwrap();
    assert_eq!(applied.metadata.name.as_deref(), Some("nameless"));
    assert_eq!(
        leases
            .get("nameless")
            .await
            .unwrap()
            .spec
            .unwrap()
            .holder_identity
            .as_deref(),
        Some("a")
    );
}

/// `dryRun=All` (kube-rs `dry_run: true`): each write answers with the object it would store,
/// and conflicts and preconditions still apply, but nothing is stored and no resourceVersion is
/// spent, so no watcher sees an event.
#[tokio::test]
async fn dry_run_writes_answer_but_store_nothing() {
    let (emulator, client) = common::start().await;
    let leases: Api<Lease> = Api::namespaced(client, "default");
    let stored = leases
        .create(&PostParams::default(), &lease("l", "a"))
        .await
        .unwrap();
    let before = (emulator.resource_version(), emulator.object_count());
    let dry_post = PostParams {
        dry_run: true,
        ..PostParams::default()
    };

    let would_create = leases.create(&dry_post, &lease("new", "b")).await.unwrap();
    assert_eq!(would_create.metadata.name.as_deref(), Some("new"));
    assert!(would_create.metadata.uid.is_some());
    assert!(leases.get_opt("new").await.unwrap().is_none());
    let (code, _, _) = api_code(leases.create(&dry_post, &lease("l", "b")).await);
    assert_eq!(
        code, 409,
        "a dry-run create of an existing object conflicts"
    );

    let mut changed = stored.clone();
    changed.spec.as_mut().unwrap().holder_identity = Some("b".into());
    let would_replace = leases.replace("l", &dry_post, &changed).await.unwrap();
    assert_eq!(
        would_replace.spec.unwrap().holder_identity.as_deref(),
        Some("b")
    );
    let mut stale = changed.clone();
    stale.metadata.resource_version = Some("1".into());
    let (code, _, _) = api_code(leases.replace("l", &dry_post, &stale).await);
    assert_eq!(
        code, 409,
        "a dry-run update keeps the resourceVersion precondition"
    );

    let dry_patch = PatchParams {
        dry_run: true,
        ..PatchParams::default()
    };
    let would_patch = leases
        .patch(
            "l",
            &dry_patch,
            &Patch::Merge(json!({ "spec": { "holderIdentity": "c" } })),
        )
        .await
        .unwrap();
    assert_eq!(
        would_patch.spec.unwrap().holder_identity.as_deref(),
        Some("c")
    );
    let would_apply = leases
        .patch(
            "l",
            &PatchParams::apply("dry").force().dry_run(),
            &Patch::Apply(json!({
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "spec": { "holderIdentity": "d" }
            })),
        )
        .await
        .unwrap();
    assert_eq!(
        would_apply.spec.unwrap().holder_identity.as_deref(),
        Some("d")
    );

    let dry_delete = DeleteParams {
        dry_run: true,
        ..DeleteParams::default()
    };
    leases.delete("l", &dry_delete).await.unwrap();
    leases
        .delete_collection(&dry_delete, &ListParams::default())
        .await
        .unwrap();

    assert_eq!(
        (emulator.resource_version(), emulator.object_count()),
        before,
        "a dry run stored something"
    );
    assert_eq!(leases.get("l").await.unwrap(), stored);
}

/// Pods as a kubelet and an election controller use them: the server sets a new Pod's status,
/// the status subresource changes only the status (with a resourceVersion precondition), a
/// write to the Pod keeps the status, a watch sees each change, and a Pod with a finalizer is
/// only marked for deletion.
#[tokio::test]
async fn pods_have_a_status_subresource_written_as_a_kubelet_writes_it() {
    use k8s_openapi::api::core::v1::Pod;
    let (_emulator, client) = common::start().await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "web-0", "finalizers": ["test.conclave.dev/hold"]},
        "spec": {"containers": [{"name": "app", "image": "app:1"}]},
        "status": {"phase": "Running"}
    }))
    .unwrap();
    let created = pods.create(&PostParams::default(), &pod).await.unwrap();
    assert_eq!(
        created.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Pending"),
        "a client's status is not taken at creation"
    );
    let status = json!({"status": {"phase": "Running", "containerStatuses": [{
        "name": "app", "image": "app:1", "imageID": "", "ready": true, "restartCount": 0,
        "containerID": "containerd://aaaa",
        "state": {"running": {"startedAt": "2026-12-04T10:00:00Z"}}
    }]}});
    let running = pods
        .patch_status("web-0", &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
    let statuses = running.status.clone().unwrap().container_statuses.unwrap();
    assert_eq!(
        statuses[0].container_id.as_deref(),
        Some("containerd://aaaa")
    );
    assert_eq!(
        running.spec, created.spec,
        "the status subresource changes only the status"
    );

    // A write to the Pod keeps the status; one to the status with a stale resourceVersion is a
    // conflict.
    let mut relabelled = running.clone();
    relabelled.metadata.labels = Some([("a".to_owned(), "b".to_owned())].into());
    relabelled.status = None;
    let relabelled = pods
        .replace("web-0", &PostParams::default(), &relabelled)
        .await
        .unwrap();
    assert_eq!(relabelled.status, running.status);
    let (code, _, _) = api_code(
        pods.replace_status("web-0", &PostParams::default(), &running)
            .await,
    );
    assert_eq!(code, 409);
    let fetched = pods.get_status("web-0").await.unwrap();
    assert_eq!(fetched.status, running.status);

    // Deleted with a finalizer: marked, still there; then gone once the finalizer is removed.
    pods.delete("web-0", &DeleteParams::default())
        .await
        .unwrap();
    let marked = pods.get("web-0").await.unwrap();
    assert!(marked.metadata.deletion_timestamp.is_some());
    pods.patch(
        "web-0",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    assert!(pods.get_opt("web-0").await.unwrap().is_none());

    let listed = pods.list(&ListParams::default()).await.unwrap();
    assert!(listed.items.is_empty());
}

/// A component pointed at the emulator with a resource it does not serve (a ConfigMap cache, a
/// Deployment controller) is told what the emulator serves and to use a real control plane,
/// in a `Status` as kube-apiserver's 404 (same code, reason and leading sentence).
#[tokio::test]
async fn resources_not_served_are_a_not_found_status_saying_what_is_served() {
    let (_emulator, client) = common::start().await;
    let configmaps: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(client.clone(), "default");
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(client.clone(), "default");
    let widgets = client
        .request::<serde_json::Value>(
            http::Request::get("/apis/coordination.k8s.io/v1/namespaces/default/widgets")
                .body(Vec::new())
                .unwrap(),
        )
        .await;
    for (what, (code, reason, message)) in [
        (
            "configmaps",
            api_code(configmaps.list(&ListParams::default()).await),
        ),
        ("deployments", api_code(deployments.get("web").await)),
        ("widgets", api_code(widgets)),
    ] {
        assert_eq!((code, reason.as_str()), (404, "NotFound"), "{what}");
        assert_eq!(
            message,
            "the server could not find the requested resource: the Conclave emulator serves only \
             v1 Namespaces, v1 Events, coordination.k8s.io/v1 Leases, \
             coordination.k8s.io/v1beta1 LeaseCandidates, v1 Pods (with status) and \
             events.k8s.io/v1 Events; for other resources (ConfigMaps, Deployments, custom \
             resources), use a real control plane",
            "{what}"
        );
    }
}

/// As kube-apiserver's NamespaceLifecycle admission: `default`, `kube-system` and `kube-public`
/// may not be deleted (403). Found by `fuzz_http`, which deleted `default`.
#[tokio::test]
async fn the_system_namespaces_may_not_be_deleted() {
    let (_emulator, client) = common::start().await;
    let namespaces: Api<Namespace> = Api::all(client);
    for name in ["default", "kube-system", "kube-public"] {
        let (code, reason, message) =
            api_code(namespaces.delete(name, &DeleteParams::default()).await);
        assert_eq!((code, reason.as_str()), (403, "Forbidden"), "{name}");
        assert_eq!(
            message,
            format!("namespaces \"{name}\" is forbidden: this namespace may not be deleted")
        );
        namespaces.get(name).await.expect("still there");
    }
}
