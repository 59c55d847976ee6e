//! Fenced writes: a write made under a leadership (a Lease and the epoch of its
//! acquisition, [`Fence`]) that a deposed leader cannot make. Two checks, and the API
//! server decides the second:
//!
//! - **held** (NOT_LEADER): the sidecar still leads under the fence's epoch. Where one of
//!   its own campaigns (`rpc Lead`) is for the Lease, it answers from that campaign's
//!   state ([`Holdings`]): leading under that epoch and its renew deadline not passed.
//!   Otherwise (a process that runs no campaign, e.g. `safewrite update` inside a
//!   `safewrite lead` of its own, or a controller with its own election) the Lease is read:
//!   its epoch is the fence's and it has not expired by its renew time plus duration on
//!   this process's clock.
//! - **admitted** (FENCED): the object records no later epoch of the Lease. A write to the
//!   main resource records its epoch on the object (annotation [`ANNOTATION`]) in the same
//!   request as its change, and every write carries the resourceVersion it read, so the
//!   check and the write are one conditional write: on every object written with a fence
//!   the epochs of the writes that landed never decrease in resourceVersion order,
//!   whatever the clocks and pauses. The held check only keeps a deposed leader from
//!   writing objects its successor has not written yet, as far as clocks allow.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use serde_json::{Map, Value};
use tokio::time::Instant;

use safewrite_api::target::{Name, Namespace};

use super::error::Failure;

/// The annotation recording, per Lease ("namespace/name"), the latest epoch a fenced
/// write was made under: a JSON object of Lease to epoch.
pub const ANNOTATION: &str = "safewrite.dev/fence";

/// The epoch annotation every acquisition writes on the Lease (kept in step with
/// `lease::record`).
pub const LEASE_EPOCH_ANNOTATION: &str = "safewrite.dev/epoch";

/// A write's fence: the Lease ("namespace/name") and the caller's epoch.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Fence {
    /// The Lease's namespace.
    pub namespace: Namespace,
    /// The Lease's name.
    pub name: Name,
    /// The epoch the caller leads under, from 1.
    pub epoch: u64,
}

// === impl Fence ===

impl Fence {
    /// The Lease as the annotation names it: "namespace/name".
    pub fn lease(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// FENCED when `object` records a later epoch of this fence's Lease.
    pub(crate) fn admits(&self, object: &Value) -> Result<(), Failure> {
        match recorded(object, &self.lease()) {
            Some(recorded) if recorded > self.epoch => Err(Failure::Fenced {
                lease: self.lease(),
                recorded,
                epoch: self.epoch,
                current: object.clone(),
            }),
            _ => Ok(()),
        }
    }

    /// Whether `object` records an earlier epoch than this fence's (or none).
    pub(crate) fn behind(&self, object: &Value) -> bool {
        recorded(object, &self.lease()).is_none_or(|recorded| recorded < self.epoch)
    }

    /// Records this fence's epoch on `body` (the other Leases' entries kept).
    pub(crate) fn record(&self, body: &mut Value) {
        let Some(metadata) = body.get_mut("metadata").and_then(Value::as_object_mut) else {
            return;
        };
        let annotations = metadata
            .entry("annotations")
            .or_insert_with(|| Value::Object(Map::new()));
        if !annotations.is_object() {
            *annotations = Value::Object(Map::new());
        }
        let annotations = annotations.as_object_mut().expect("an object");
        let mut entries = annotations
            .get(ANNOTATION)
            .and_then(Value::as_str)
            .and_then(|text| serde_json::from_str::<Map<String, Value>>(text).ok())
            .unwrap_or_default();
        entries.insert(self.lease(), Value::from(self.epoch));
        annotations.insert(
            ANNOTATION.to_string(),
            Value::String(Value::Object(entries).to_string()),
        );
    }
}

/// The epoch `object` records for `lease`, if any. An entry that does not parse counts as
/// none: it was not written by a fenced write.
pub fn recorded(object: &Value, lease: &str) -> Option<u64> {
    let text = object
        .pointer("/metadata/annotations")?
        .get(ANNOTATION)?
        .as_str()?;
    let entries: Map<String, Value> = serde_json::from_str(text).ok()?;
    entries.get(lease)?.as_u64()
}

/// What this process's campaigns hold, published by each campaign as its state changes.
#[derive(Debug, Default)]
pub struct Holdings {
    leases: Mutex<HashMap<String, HashMap<u64, Holding>>>,
}

/// One campaign's leadership: its epoch, and until when it leads without a renewal.
#[derive(Debug, Clone, Copy)]
pub struct Holding {
    /// The epoch the campaign leads under.
    pub epoch: u64,
    /// When its leadership lapses unless renewed: the last renewal plus the renew
    /// deadline.
    pub until: Instant,
}

/// The answer of [`Holdings::check`].
#[derive(Debug, PartialEq, Eq)]
pub enum Leads {
    /// A campaign of this process leads under the epoch.
    Yes,
    /// Campaigns of this process are for the Lease, and none leads under the epoch: why.
    No(String),
    /// No campaign of this process is for the Lease.
    Unknown,
}

// === impl Holdings ===

impl Holdings {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, HashMap<u64, Holding>>> {
        self.leases.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Campaign `campaign` for `lease` leads now as `holding` (`None`: it does not lead).
    pub fn publish(&self, lease: &str, campaign: u64, holding: Option<Holding>) {
        let mut leases = self.lock();
        let campaigns = leases.entry(lease.to_string()).or_default();
        match holding {
            Some(holding) => {
                campaigns.insert(campaign, holding);
            }
            None => {
                campaigns.insert(
                    campaign,
                    Holding {
                        epoch: 0,
                        until: Instant::now(),
                    },
                );
            }
        }
    }

    /// Campaign `campaign` for `lease` ended.
    pub fn withdraw(&self, lease: &str, campaign: u64) {
        let mut leases = self.lock();
        if let Some(campaigns) = leases.get_mut(lease) {
            campaigns.remove(&campaign);
            if campaigns.is_empty() {
                leases.remove(lease);
            }
        }
    }

    /// Whether a campaign of this process leads `fence`'s Lease under its epoch now.
    pub fn check(&self, fence: &Fence, now: Instant) -> Leads {
        let leases = self.lock();
        let Some(campaigns) = leases.get(&fence.lease()) else {
            return Leads::Unknown;
        };
        let mine = campaigns.values().find(|h| h.epoch == fence.epoch);
        match mine {
            Some(holding) if holding.until > now => Leads::Yes,
            Some(holding) => Leads::No(format!(
                "its renew deadline passed {:?} ago without a renewal",
                now - holding.until
            )),
            None => Leads::No(match campaigns.values().map(|h| h.epoch).max() {
                Some(epoch) if epoch > 0 => format!("it leads under epoch {epoch}"),
                _ => "it does not lead".to_string(),
            }),
        }
    }
}

/// Whether the Lease `lease` (as read) is held under `epoch` and unexpired at `now` (the
/// wall clock): its epoch annotation (else `spec.leaseTransitions` + 1, for a Lease of
/// another election) equals `epoch`, it has a holder, and its `renewTime` plus
/// `leaseDurationSeconds` is after `now`. This compares the holder's clock with this
/// process's, as every Lease reader does; the object check does not. Why not, else.
pub(crate) fn lease_holds(lease: &Value, epoch: u64, now: SystemTime) -> Result<(), String> {
    let spec = lease.get("spec");
    let field = |name: &str| spec.and_then(|s| s.get(name));
    let of_lease = lease
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(LEASE_EPOCH_ANNOTATION))
        .and_then(Value::as_str)
        .and_then(|e| e.parse::<u64>().ok())
        .unwrap_or_else(|| {
            field("leaseTransitions")
                .and_then(Value::as_u64)
                .unwrap_or(0)
                + 1
        });
    let holder = field("holderIdentity")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if holder.is_empty() {
        return Err("the Lease has no holder".to_string());
    }
    if of_lease != epoch {
        return Err(format!(
            "the Lease is held by {holder} under epoch {of_lease}"
        ));
    }
    let renewed = field("renewTime")
        .and_then(Value::as_str)
        .and_then(|t| humantime::parse_rfc3339_weak(t).ok());
    let seconds = field("leaseDurationSeconds")
        .and_then(Value::as_u64)
        .unwrap_or(0);
    match renewed {
        Some(renewed) if renewed + Duration::from_secs(seconds) > now => Ok(()),
        _ => Err(format!("the Lease held by {holder} has expired")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn fence(epoch: u64) -> Fence {
        Fence {
            namespace: Namespace::parse("namespace", "ns").unwrap(),
            name: Name::parse("name", "l").unwrap(),
            epoch,
        }
    }

    #[test]
    fn a_write_records_its_epoch_and_keeps_other_leases() {
        let mut object = json!({"metadata": {"name": "o", "annotations": {
            ANNOTATION: r#"{"other/x": 9}"#, "keep": "me"}}});
        assert!(fence(3).behind(&object));
        fence(3).record(&mut object);
        assert_eq!(recorded(&object, "ns/l"), Some(3));
        assert_eq!(recorded(&object, "other/x"), Some(9));
        assert_eq!(object["metadata"]["annotations"]["keep"], "me");
        assert!(!fence(3).behind(&object));
        let mut bare = json!({"metadata": {"name": "o"}});
        fence(1).record(&mut bare);
        assert_eq!(recorded(&bare, "ns/l"), Some(1));
    }

    #[test]
    fn only_a_later_recorded_epoch_fences() {
        let mut object = json!({"metadata": {}});
        fence(5).record(&mut object);
        assert!(fence(5).admits(&object).is_ok());
        assert!(fence(6).admits(&object).is_ok());
        match fence(4).admits(&object) {
            Err(Failure::Fenced {
                recorded, epoch, ..
            }) => assert_eq!((recorded, epoch), (5, 4)),
            other => panic!("{other:?}"),
        }
        // A hand-written entry that does not parse fences nothing.
        let garbled = json!({"metadata": {"annotations": {ANNOTATION: "not json"}}});
        assert!(fence(1).admits(&garbled).is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn holdings_answer_for_the_epoch_until_the_renew_deadline() {
        let holdings = Holdings::default();
        let now = Instant::now();
        assert_eq!(holdings.check(&fence(2), now), Leads::Unknown);
        let until = now + Duration::from_secs(1);
        holdings.publish("ns/l", 7, Some(Holding { epoch: 2, until }));
        assert_eq!(holdings.check(&fence(2), now), Leads::Yes);
        assert!(
            matches!(holdings.check(&fence(1), now), Leads::No(why) if why.contains("epoch 2"))
        );
        assert!(
            matches!(holdings.check(&fence(2), until), Leads::No(why) if why.contains("renew deadline"))
        );
        holdings.publish("ns/l", 7, None);
        assert!(
            matches!(holdings.check(&fence(2), now), Leads::No(why) if why.contains("does not lead"))
        );
        holdings.withdraw("ns/l", 7);
        assert_eq!(holdings.check(&fence(2), now), Leads::Unknown);
    }

    #[test]
    fn a_lease_read_holds_for_its_epoch_until_it_expires() {
        let renewed = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let lease = |annotations: Value, transitions: u64| {
            json!({"metadata": {"annotations": annotations}, "spec": {
                "holderIdentity": "a",
                "leaseDurationSeconds": 15,
                "leaseTransitions": transitions,
                "renewTime": humantime::format_rfc3339_micros(renewed).to_string(),
            }})
        };
        let ours = lease(json!({LEASE_EPOCH_ANNOTATION: "4"}), 0);
        let at = |s| renewed + Duration::from_secs(s);
        assert!(lease_holds(&ours, 4, at(10)).is_ok());
        assert!(
            lease_holds(&ours, 3, at(10))
                .unwrap_err()
                .contains("epoch 4")
        );
        assert!(
            lease_holds(&ours, 4, at(15))
                .unwrap_err()
                .contains("expired")
        );
        // Another election's Lease: its transitions + 1.
        let theirs = lease(json!({}), 2);
        assert!(lease_holds(&theirs, 3, at(1)).is_ok());
        let free = json!({"spec": {"holderIdentity": ""}});
        assert!(lease_holds(&free, 1, at(1)).is_err());
    }
}
