//! The list-entry changes' semantics on plain objects: conditions as
//! meta.SetStatusCondition, finalizers and owners as controllerutil, keyed entries.

use std::time::{Duration, SystemTime};

use serde_json::{Value, json};

use safewrite_api::pb;
use safewrite_api::target::FieldViolation;

use super::*;
use crate::ApplyError;

fn at(seconds: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_790_000_000 + seconds)
}

fn change(kind: pb::mutation::Kind) -> Result<EntryChange, FieldViolation> {
    let mutation = pb::Mutation { kind: Some(kind) };
    match crate::Mutation::from_proto("mutation", Some(&mutation))? {
        crate::Mutation::Entry(change) => Ok(change),
        _ => panic!("not a list-entry kind"),
    }
}

fn set(conditions: Vec<pb::Condition>) -> EntryChange {
    change(pb::mutation::Kind::SetCondition(pb::SetCondition {
        conditions,
        path: String::new(),
    }))
    .unwrap()
}

fn condition(type_: &str, status: &str, reason: &str) -> pb::Condition {
    pb::Condition {
        r#type: type_.into(),
        status: status.into(),
        reason: reason.into(),
        ..Default::default()
    }
}

fn widget(conditions: Value) -> Value {
    json!({"metadata": {"name": "w", "generation": 3}, "status": {"conditions": conditions}})
}

#[test]
fn a_new_condition_is_appended_with_the_time_of_the_write_and_the_generation() {
    let other = json!({"type": "Other", "status": "True", "reason": "Theirs", "lastTransitionTime": "2020-01-01T00:00:00Z", "x-unknown": 1});
    let new = set(vec![condition("Ready", "True", "Done")])
        .apply(&widget(json!([other.clone()])), at(0))
        .unwrap();
    assert_eq!(
        new["status"]["conditions"],
        json!([other, {"type": "Ready", "status": "True", "reason": "Done", "message": "",
            "observedGeneration": 3, "lastTransitionTime": "2026-09-21T14:13:20Z"}])
    );
}

#[test]
fn the_transition_time_moves_only_with_the_status() {
    let ready = |status: &str, reason: &str| set(vec![condition("Ready", status, reason)]);
    let first = ready("True", "Done")
        .apply(&widget(json!([])), at(0))
        .unwrap();
    // Same status, new reason: the time stays; same everything: nothing changes.
    let second = ready("True", "StillDone").apply(&first, at(60)).unwrap();
    assert_eq!(
        second["status"]["conditions"][0]["lastTransitionTime"],
        first["status"]["conditions"][0]["lastTransitionTime"]
    );
    assert_eq!(second["status"]["conditions"][0]["reason"], "StillDone");
    assert_eq!(
        ready("True", "StillDone").apply(&second, at(120)).unwrap(),
        second
    );
    // A new status takes the time of the write, or the caller's.
    let third = ready("False", "Broken").apply(&second, at(180)).unwrap();
    assert_eq!(
        third["status"]["conditions"][0]["lastTransitionTime"],
        "2026-09-21T14:16:20Z"
    );
    let mut given = condition("Ready", "True", "Back");
    given.last_transition_time = "2026-01-02T03:04:05.678Z".into();
    let fourth = set(vec![given]).apply(&third, at(240)).unwrap();
    assert_eq!(
        fourth["status"]["conditions"][0]["lastTransitionTime"], "2026-01-02T03:04:05Z",
        "stored in seconds, as the API server stores it"
    );
}

#[test]
fn observed_generation_is_the_fresh_objects_unless_given() {
    let mut given = condition("Ready", "True", "Done");
    given.observed_generation = Some(9);
    let new = set(vec![given]).apply(&widget(json!([])), at(0)).unwrap();
    assert_eq!(new["status"]["conditions"][0]["observedGeneration"], 9);
    // An object without a generation (a ConfigMap): no observedGeneration at all.
    let plain = json!({"metadata": {"name": "c"}});
    let new = set(vec![condition("Ready", "True", "Done")])
        .apply(&plain, at(0))
        .unwrap();
    assert!(
        new["status"]["conditions"][0]
            .get("observedGeneration")
            .is_none()
    );
}

#[test]
fn conditions_are_removed_by_type_and_the_others_keep_their_order() {
    let list = json!([{"type": "A"}, {"type": "B"}, {"type": "C"}]);
    let remove = change(pb::mutation::Kind::RemoveCondition(pb::RemoveCondition {
        types: vec!["B".into(), "Z".into()],
        path: String::new(),
    }))
    .unwrap();
    let new = remove.apply(&widget(list), at(0)).unwrap();
    assert_eq!(
        new["status"]["conditions"],
        json!([{"type": "A"}, {"type": "C"}])
    );
    // No list: nothing to remove, nothing created.
    let bare = json!({"metadata": {"name": "w"}});
    assert_eq!(remove.apply(&bare, at(0)).unwrap(), bare);
}

#[test]
fn a_condition_the_api_server_would_refuse_names_its_field() {
    let cases = [
        (condition("Ready", "Maybe", "Done"), "conditions[0].status"),
        (condition("Ready", "True", ""), "conditions[0].reason"),
        (
            condition("Ready", "True", "Not a word"),
            "conditions[0].reason",
        ),
        (condition("Ready", "True", "Ends,"), "conditions[0].reason"),
        (condition("a/b/c", "True", "Done"), "conditions[0].type"),
        (condition("-Ready", "True", "Done"), "conditions[0].type"),
        (
            condition(&"x".repeat(64), "True", "Done"),
            "conditions[0].type",
        ),
    ];
    for (bad, field) in cases {
        let err = change(pb::mutation::Kind::SetCondition(pb::SetCondition {
            conditions: vec![bad.clone()],
            path: String::new(),
        }))
        .unwrap_err();
        assert_eq!(
            err.field,
            format!("mutation.set_condition.{field}"),
            "{bad:?}"
        );
    }
    let mut long = condition("Ready", "True", "Done");
    long.message = "m".repeat(32769);
    let mut time = condition("Ready", "True", "Done");
    time.last_transition_time = "yesterday".into();
    let twice = vec![
        condition("Ready", "True", "A"),
        condition("Ready", "False", "B"),
    ];
    for (conditions, field) in [
        (vec![long], "conditions[0].message"),
        (vec![time], "conditions[0].last_transition_time"),
        (twice, "conditions[1].type"),
        (vec![], "conditions"),
    ] {
        let err = change(pb::mutation::Kind::SetCondition(pb::SetCondition {
            conditions,
            path: String::new(),
        }))
        .unwrap_err();
        assert_eq!(err.field, format!("mutation.set_condition.{field}"));
    }
    // The longest forms accepted: a 253-character prefix and a 63-character name.
    let prefix = ["a", "b", "c"].map(|l| l.repeat(63)).join(".") + "." + &"d".repeat(61);
    let long_type = format!("{prefix}/{}", "n".repeat(62));
    assert_eq!(long_type.len(), 316);
    assert!(
        change(pb::mutation::Kind::SetCondition(pb::SetCondition {
            conditions: vec![condition(&long_type, "Unknown", "A1_b,c:d")],
            path: String::new(),
        }))
        .is_ok()
    );
}

fn finalizer(value: &str, remove: bool) -> EntryChange {
    change(pb::mutation::Kind::Finalizer(pb::FinalizerChange {
        finalizer: value.into(),
        remove,
    }))
    .unwrap()
}

#[test]
fn finalizers_are_added_and_removed_by_value() {
    let object = json!({"metadata": {"name": "c", "finalizers": ["a.io/x"]}});
    let added = finalizer("b.io/y", false).apply(&object, at(0)).unwrap();
    assert_eq!(added["metadata"]["finalizers"], json!(["a.io/x", "b.io/y"]));
    assert_eq!(
        finalizer("b.io/y", false).apply(&added, at(0)).unwrap(),
        added
    );
    let removed = finalizer("a.io/x", true).apply(&added, at(0)).unwrap();
    assert_eq!(removed["metadata"]["finalizers"], json!(["b.io/y"]));
    assert_eq!(
        finalizer("a.io/x", true).apply(&removed, at(0)).unwrap(),
        removed
    );
    // The last one removed takes the list with it.
    let none = finalizer("b.io/y", true).apply(&removed, at(0)).unwrap();
    assert_eq!(none, json!({"metadata": {"name": "c"}}));
}

#[test]
fn no_new_finalizer_on_an_object_being_deleted() {
    let deleting = json!({"metadata": {"name": "c", "deletionTimestamp": "2026-01-01T00:00:00Z",
        "finalizers": ["a.io/x"]}});
    assert_eq!(
        finalizer("b.io/y", false).apply(&deleting, at(0)),
        Err(ApplyError::Deleting("b.io/y".into()))
    );
    // One already there is no addition; removing is always allowed.
    assert_eq!(
        finalizer("a.io/x", false).apply(&deleting, at(0)).unwrap(),
        deleting
    );
    let last = finalizer("a.io/x", true).apply(&deleting, at(0)).unwrap();
    assert!(is_gone(&last));
    assert!(!is_gone(&deleting));
    let grace = json!({"metadata": {"deletionTimestamp": "t", "deletionGracePeriodSeconds": 30}});
    assert!(
        !is_gone(&grace),
        "a pod waiting out its grace period is not gone"
    );
}

#[test]
fn a_finalizer_must_be_a_qualified_name() {
    for bad in ["", "a b", "/x", "x/", "a/b/c", "-x", "UPPER.example.com/x"] {
        let err = change(pb::mutation::Kind::Finalizer(pb::FinalizerChange {
            finalizer: bad.into(),
            remove: false,
        }))
        .unwrap_err();
        assert_eq!(err.field, "mutation.finalizer.finalizer", "{bad:?}");
    }
    finalizer("kubernetes", false);
    finalizer("foregroundDeletion", false);
}

fn owner(uid: &str, controller: bool) -> pb::OwnerReference {
    pb::OwnerReference {
        api_version: "apps/v1".into(),
        kind: "Deployment".into(),
        name: format!("d-{uid}"),
        uid: uid.into(),
        controller,
        block_owner_deletion: false,
    }
}

fn ensure(owner: pb::OwnerReference, remove: bool) -> EntryChange {
    change(pb::mutation::Kind::OwnerReference(
        pb::OwnerReferenceChange {
            owner: Some(owner),
            remove,
        },
    ))
    .unwrap()
}

#[test]
fn owner_references_are_ensured_by_group_kind_and_name_with_one_controller() {
    let object = json!({"metadata": {"name": "c"}});
    let one = ensure(owner("u1", true), false)
        .apply(&object, at(0))
        .unwrap();
    assert_eq!(
        one["metadata"]["ownerReferences"],
        json!([{"apiVersion": "apps/v1", "kind": "Deployment", "name": "d-u1", "uid": "u1", "controller": true}])
    );
    assert_eq!(
        ensure(owner("u1", true), false).apply(&one, at(0)).unwrap(),
        one
    );
    let err = ensure(owner("u2", true), false)
        .apply(&one, at(0))
        .unwrap_err();
    assert_eq!(
        err,
        ApplyError::AlreadyOwned("Deployment/d-u1 (apiVersion apps/v1, uid u1)".into())
    );
    let two = ensure(owner("u2", false), false)
        .apply(&one, at(0))
        .unwrap();
    assert_eq!(
        two["metadata"]["ownerReferences"].as_array().unwrap().len(),
        2
    );
    // Ensuring without controller clears the flag, as SetOwnerReference; removal by
    // group, kind and name, whatever the uid.
    let demoted = ensure(owner("u1", false), false)
        .apply(&two, at(0))
        .unwrap();
    assert!(
        demoted["metadata"]["ownerReferences"][0]
            .get("controller")
            .is_none()
    );
    let gone = ensure(owner("u1", false), true)
        .apply(&demoted, at(0))
        .unwrap();
    assert_eq!(gone["metadata"]["ownerReferences"][0]["uid"], "u2");
    let mut by_name = owner("not-the-uid", false);
    by_name.name = "d-u2".into();
    by_name.api_version = "apps/v1beta1".into();
    let none = ensure(by_name, true).apply(&gone, at(0)).unwrap();
    assert_eq!(none, json!({"metadata": {"name": "c"}}));
}

/// `name`'s reference: an apps Deployment at `api_version`.
fn reference(api_version: &str, name: &str, uid: &str, controller: bool) -> pb::OwnerReference {
    pb::OwnerReference {
        api_version: api_version.into(),
        kind: "Deployment".into(),
        name: name.into(),
        uid: uid.into(),
        controller,
        block_owner_deletion: controller,
    }
}

fn owned_by(references: Value) -> Value {
    json!({"metadata": {"name": "c", "ownerReferences": references}})
}

#[test]
fn a_recreated_owner_adopts_the_object_in_place() {
    let object = owned_by(json!([
        {"apiVersion": "v1", "kind": "ConfigMap", "name": "a", "uid": "a1"},
        {"apiVersion": "apps/v1", "kind": "Deployment", "name": "d", "uid": "old",
         "controller": true, "blockOwnerDeletion": true, "future": 7},
        {"apiVersion": "example.com/v1", "kind": "Deployment", "name": "d", "uid": "e1"},
    ]));
    let adopted = ensure(reference("apps/v1", "d", "new", true), false)
        .apply(&object, at(0))
        .unwrap();
    let mut expected = object.clone();
    expected["metadata"]["ownerReferences"][1]["uid"] = json!("new");
    assert_eq!(adopted, expected);
    // Once adopted, the same request writes nothing.
    assert_eq!(
        ensure(reference("apps/v1", "d", "new", true), false)
            .apply(&adopted, at(0))
            .unwrap(),
        adopted
    );
}

#[test]
fn an_owner_at_another_version_is_the_same_owner() {
    let object = owned_by(json!([
        {"apiVersion": "apps/v1beta1", "kind": "Deployment", "name": "d", "uid": "u",
         "controller": true}
    ]));
    let moved = ensure(reference("apps/v1", "d", "u", true), false)
        .apply(&object, at(0))
        .unwrap();
    assert_eq!(
        moved["metadata"]["ownerReferences"],
        json!([{"apiVersion": "apps/v1", "kind": "Deployment", "name": "d", "uid": "u",
                "controller": true, "blockOwnerDeletion": true}])
    );
    // Another group is another owner, whatever the kind and name: a second controller
    // is refused, an ordinary owner appended.
    let err = ensure(reference("example.com/v1", "d", "u", true), false)
        .apply(&moved, at(0))
        .unwrap_err();
    assert_eq!(
        err,
        ApplyError::AlreadyOwned("Deployment/d (apiVersion apps/v1, uid u)".into())
    );
    let two = ensure(reference("example.com/v1", "d", "u", false), false)
        .apply(&moved, at(0))
        .unwrap();
    assert_eq!(
        two["metadata"]["ownerReferences"][1]["apiVersion"],
        "example.com/v1"
    );
    // A stored apiVersion apimachinery cannot parse names no owner.
    let odd = owned_by(
        json!([{"apiVersion": "apps/v1/x", "kind": "Deployment", "name": "d", "uid": "u"}]),
    );
    let appended = ensure(reference("apps/v1", "d", "u", false), false)
        .apply(&odd, at(0))
        .unwrap();
    assert_eq!(
        appended["metadata"]["ownerReferences"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
}

#[test]
fn a_different_controller_is_already_owned_and_named() {
    let object = owned_by(json!([
        {"apiVersion": "v1", "kind": "ConfigMap", "name": "a", "uid": "a1"},
        {"apiVersion": "apps/v1", "kind": "Deployment", "name": "boss", "uid": "b1",
         "controller": true},
    ]));
    let err = ensure(reference("apps/v1", "d", "u", true), false)
        .apply(&object, at(0))
        .unwrap_err();
    assert_eq!(
        err,
        ApplyError::AlreadyOwned("Deployment/boss (apiVersion apps/v1, uid b1)".into())
    );
    // Without controller there is no check, as SetOwnerReference has none.
    let owned = ensure(reference("apps/v1", "d", "u", false), false)
        .apply(&object, at(0))
        .unwrap();
    assert_eq!(owned["metadata"]["ownerReferences"][2]["name"], "d");
}

#[test]
fn an_identical_reference_writes_nothing_and_a_false_flag_is_an_absent_one() {
    let object = owned_by(json!([
        {"apiVersion": "apps/v1", "kind": "Deployment", "name": "d", "uid": "u",
         "controller": false, "blockOwnerDeletion": false}
    ]));
    let same = ensure(reference("apps/v1", "d", "u", false), false)
        .apply(&object, at(0))
        .unwrap();
    assert_eq!(same, object);
}

#[test]
fn removal_takes_the_first_reference_of_the_group_kind_and_name() {
    let object = owned_by(json!([
        {"apiVersion": "v1", "kind": "Deployment", "name": "d", "uid": "core"},
        {"apiVersion": "apps/v1beta1", "kind": "Deployment", "name": "d", "uid": "old"},
        {"apiVersion": "apps/v1", "kind": "Deployment", "name": "d", "uid": "new"},
    ]));
    let removed = ensure(reference("apps/v1", "d", "another", false), true)
        .apply(&object, at(0))
        .unwrap();
    assert_eq!(
        removed["metadata"]["ownerReferences"],
        json!([
            {"apiVersion": "v1", "kind": "Deployment", "name": "d", "uid": "core"},
            {"apiVersion": "apps/v1", "kind": "Deployment", "name": "d", "uid": "new"},
        ])
    );
    // Nothing of that owner: nothing changes.
    let other = ensure(reference("apps/v1", "e", "", false), true);
    assert!(other.owner_to_resolve().is_none());
    assert_eq!(other.apply(&object, at(0)).unwrap(), object);
}

#[test]
fn an_owner_needs_its_identity() {
    for (mut bad, field) in [
        (owner("u", false), "api_version"),
        (owner("u", false), "kind"),
        (owner("u", false), "name"),
    ] {
        match field {
            "api_version" => bad.api_version.clear(),
            "kind" => bad.kind.clear(),
            _ => bad.name.clear(),
        }
        let err = change(pb::mutation::Kind::OwnerReference(
            pb::OwnerReferenceChange {
                owner: Some(bad),
                remove: false,
            },
        ))
        .unwrap_err();
        assert_eq!(err.field, format!("mutation.owner_reference.owner.{field}"));
    }
    let without_uid = ensure(owner("", false), false);
    assert!(without_uid.owner_to_resolve().is_some());
    let err = without_uid
        .apply(&json!({"metadata": {}}), at(0))
        .unwrap_err();
    assert!(matches!(err, ApplyError::PathDoesNotFit { .. }), "{err:?}");
}

fn entry(
    path: &str,
    keys: &[&str],
    entry: Value,
    remove: bool,
) -> Result<EntryChange, FieldViolation> {
    change(pb::mutation::Kind::ListEntry(pb::ListEntryChange {
        path: path.into(),
        keys: keys.iter().map(|k| k.to_string()).collect(),
        entry_json: entry.to_string(),
        remove,
    }))
}

#[test]
fn keyed_entries_are_merged_appended_and_removed_in_place() {
    let route = json!({"metadata": {}, "status": {"parents": [
        {"controllerName": "a", "ref": "x", "n": 1},
        {"controllerName": "b", "ref": "x"},
        {"controllerName": "a", "ref": "y"},
    ]}});
    let keys = ["controllerName", "ref"];
    let upsert = entry(
        "status.parents",
        &keys,
        json!({"controllerName": "a", "ref": "x", "n": null, "m": 2}),
        false,
    )
    .unwrap();
    let new = upsert.apply(&route, at(0)).unwrap();
    assert_eq!(
        new["status"]["parents"][0],
        json!({"controllerName": "a", "ref": "x", "m": 2})
    );
    assert_eq!(
        new["status"]["parents"].as_array().unwrap()[1..],
        route["status"]["parents"].as_array().unwrap()[1..]
    );
    assert_eq!(upsert.apply(&new, at(0)).unwrap(), new);
    let append = entry(
        "status.parents",
        &keys,
        json!({"controllerName": "c", "ref": "x", "gone": null}),
        false,
    )
    .unwrap();
    let new = append.apply(&route, at(0)).unwrap();
    assert_eq!(
        new["status"]["parents"][3],
        json!({"controllerName": "c", "ref": "x"})
    );
    let remove = entry(
        "status.parents",
        &keys,
        json!({"controllerName": "b", "ref": "x"}),
        true,
    )
    .unwrap();
    let new = remove.apply(&route, at(0)).unwrap();
    assert_eq!(new["status"]["parents"].as_array().unwrap().len(), 2);
    assert_eq!(new["status"]["parents"][1]["ref"], "y");
    // A missing list is made on upsert, and left alone by a removal.
    let bare = json!({"metadata": {}});
    assert_eq!(
        append.apply(&bare, at(0)).unwrap()["status"]["parents"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    assert_eq!(remove.apply(&bare, at(0)).unwrap(), bare);
}

#[test]
fn a_path_that_does_not_fit_the_object_names_the_field() {
    let upsert = entry("spec.size.parents", &["k"], json!({"k": 1}), false).unwrap();
    let err = upsert
        .apply(&json!({"spec": {"size": 1}}), at(0))
        .unwrap_err();
    let ApplyError::PathDoesNotFit { field, reason } = err else {
        panic!("{err:?}");
    };
    assert_eq!(field, "mutation.list_entry.path");
    assert!(reason.contains("spec.size"), "{reason}");
    let not_a_list = entry("spec.size", &["k"], json!({"k": 1}), false).unwrap();
    assert!(
        not_a_list
            .apply(&json!({"spec": {"size": 1}}), at(0))
            .is_err()
    );
    for (path, keys, value, field) in [
        ("spec.p", vec!["k"], json!({"other": 1}), "entry_json"),
        ("spec.p", vec!["k"], json!({"k": null}), "entry_json"),
        ("spec.p", vec!["k"], json!([1]), "entry_json"),
        ("spec.p", vec![], json!({"k": 1}), "keys"),
        ("spec.p", vec!["k", "k"], json!({"k": 1}), "keys[1]"),
        ("", vec!["k"], json!({"k": 1}), "path"),
        ("spec..p", vec!["k"], json!({"k": 1}), "path"),
        ("spec.p q", vec!["k"], json!({"k": 1}), "path"),
    ] {
        let err = entry(path, &keys, value, false).unwrap_err();
        assert_eq!(
            err.field,
            format!("mutation.list_entry.{field}"),
            "{path} {keys:?}"
        );
    }
}
