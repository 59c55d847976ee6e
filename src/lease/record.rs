//! The Lease object as a campaign reads and writes it: its holder, its epoch (the
//! annotation [`EPOCH_ANNOTATION`]), its duration, and the bodies of the three writes
//! (acquire or renew, create, release). Every body carries the resourceVersion it was
//! made from, so the API server refuses it with a 409 if anyone wrote in between.

use std::time::SystemTime;

use serde_json::{Value, json};

use super::timing::LeaseName;

/// The annotation that carries the Lease's epoch: a decimal number that grows by one with
/// every acquisition, written in the same conditional write that acquires.
pub const EPOCH_ANNOTATION: &str = "safewrite.dev/epoch";

/// The Lease's `spec.holderIdentity`, empty when none.
pub fn holder(lease: &Value) -> &str {
    lease["spec"]["holderIdentity"].as_str().unwrap_or("")
}

/// The Lease's epoch; 0 when it carries none (never acquired through safewrite).
pub fn epoch(lease: &Value) -> u64 {
    lease["metadata"]["annotations"][EPOCH_ANNOTATION]
        .as_str()
        .and_then(|text| text.parse().ok())
        .unwrap_or(0)
}

/// The Lease's `metadata.resourceVersion`.
pub fn resource_version(lease: &Value) -> &str {
    lease["metadata"]["resourceVersion"].as_str().unwrap_or("")
}

/// The Lease's `spec.leaseDurationSeconds`, when set.
pub fn lease_seconds(lease: &Value) -> Option<u64> {
    lease["spec"]["leaseDurationSeconds"].as_u64()
}

/// Now, as the Lease's MicroTime fields write it.
fn micro_time() -> String {
    humantime::format_rfc3339_micros(SystemTime::now()).to_string()
}

/// What a write of the Lease makes of it.
#[derive(Debug, Clone, Copy)]
pub struct Claim<'a> {
    /// The identity that holds it.
    pub identity: &'a str,
    /// Its epoch.
    pub epoch: u64,
    /// The lease duration, in seconds.
    pub lease_seconds: u64,
}

/// `lease` held by `claim`: a renewal when `claim` is the record's own holder and
/// epoch (acquireTime and transitions kept), else an acquisition (acquireTime now, one
/// more transition when the holder changes). Conditional on `lease`'s resourceVersion.
pub fn claimed(lease: &Value, claim: Claim<'_>) -> Value {
    let renewal = holder(lease) == claim.identity && epoch(lease) == claim.epoch;
    let now = micro_time();
    let mut next = lease.clone();
    let spec = &mut next["spec"];
    if !renewal {
        let transitions = spec["leaseTransitions"].as_u64().unwrap_or(0);
        let moved = u64::from(holder(lease) != claim.identity);
        spec["leaseTransitions"] = json!(transitions + moved);
        spec["acquireTime"] = json!(now);
    }
    spec["holderIdentity"] = json!(claim.identity);
    spec["leaseDurationSeconds"] = json!(claim.lease_seconds);
    spec["renewTime"] = json!(now);
    next["metadata"]["annotations"][EPOCH_ANNOTATION] = json!(claim.epoch.to_string());
    next
}

/// A new Lease held by `claim`, for a create (which loses to any other create).
pub fn created(lease: &LeaseName, claim: Claim<'_>) -> Value {
    let now = micro_time();
    json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": &*lease.name,
            "namespace": &*lease.namespace,
            "annotations": {EPOCH_ANNOTATION: claim.epoch.to_string()},
        },
        "spec": {
            "holderIdentity": claim.identity,
            "leaseDurationSeconds": claim.lease_seconds,
            "acquireTime": now,
            "renewTime": now,
            "leaseTransitions": 0,
        },
    })
}

/// `lease` released the way client-go's ReleaseOnCancel releases: no holder, a duration
/// of 1 s, renewed now, so the next candidate takes it at its next try. The epoch stays.
/// Conditional on `lease`'s resourceVersion.
pub fn released(lease: &Value) -> Value {
    let now = micro_time();
    let mut next = lease.clone();
    let spec = &mut next["spec"];
    if let Some(spec) = spec.as_object_mut() {
        spec.remove("holderIdentity");
    }
    spec["leaseDurationSeconds"] = json!(1);
    spec["renewTime"] = json!(now);
    spec["acquireTime"] = json!(now);
    next
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(by: &str, epoch: &str) -> Value {
        json!({"metadata": {"resourceVersion": "7", "annotations": {EPOCH_ANNOTATION: epoch}},
               "spec": {"holderIdentity": by, "leaseTransitions": 3, "acquireTime": "then"}})
    }

    #[test]
    fn a_renewal_keeps_acquire_time_and_transitions_and_epoch() {
        let claim = Claim {
            identity: "a",
            epoch: 4,
            lease_seconds: 2,
        };
        let next = claimed(&held("a", "4"), claim);
        assert_eq!(next["spec"]["acquireTime"], "then");
        assert_eq!(next["spec"]["leaseTransitions"], 3);
        assert_eq!(epoch(&next), 4);
        assert_eq!(
            resource_version(&next),
            "7",
            "conditional on the version read"
        );
    }

    #[test]
    fn an_acquisition_counts_a_transition_only_when_the_holder_changes() {
        let taken = claimed(
            &held("b", "4"),
            Claim {
                identity: "a",
                epoch: 5,
                lease_seconds: 2,
            },
        );
        assert_eq!(taken["spec"]["leaseTransitions"], 4);
        assert_eq!((holder(&taken), epoch(&taken)), ("a", 5));
        let again = claimed(
            &held("a", "4"),
            Claim {
                identity: "a",
                epoch: 5,
                lease_seconds: 2,
            },
        );
        assert_eq!(again["spec"]["leaseTransitions"], 3);
        assert_ne!(again["spec"]["acquireTime"], "then");
    }

    #[test]
    fn a_release_clears_the_holder_and_keeps_the_epoch() {
        let free = released(&held("a", "4"));
        assert_eq!(holder(&free), "");
        assert_eq!(lease_seconds(&free), Some(1));
        assert_eq!(epoch(&free), 4);
        assert_eq!(resource_version(&free), "7");
    }
}
