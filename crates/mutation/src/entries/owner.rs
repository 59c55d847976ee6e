//! Owner references as controller-runtime's `controllerutil` matches them: a reference is
//! an owner's when its API group (of `apiVersion`, the version ignored), kind and name are
//! the owner's. The uid is what is written, never what is matched, so an owner deleted and
//! recreated under its name is the same owner and adopts the object, as
//! `SetControllerReference` does.

use serde_json::{Map, Value};

use super::apply::push;
use super::change::Owner;
use crate::error::ApplyError;
use crate::value::short;

/// Where the references are in `metadata`.
const REFERENCES: &str = "ownerReferences";

impl Owner {
    /// Whether `reference` is this owner's: the same API group, kind and name (the
    /// version may differ), as `controllerutil`'s `referSameObject`. A stored apiVersion
    /// that is not `version` or `group/version` names no owner.
    fn is_referred_by(&self, reference: &Value) -> bool {
        reference["kind"].as_str() == Some(&self.kind)
            && reference["name"].as_str() == Some(&self.name)
            && reference["apiVersion"]
                .as_str()
                .and_then(group_of)
                .is_some_and(|group| group == self.api_version.group())
    }

    /// `SetOwnerReference` / `SetControllerReference`: refuses a controller when the
    /// object's controller (its first reference with `controller: true`) is another
    /// owner; then the first reference of this owner takes the request's apiVersion, uid
    /// and flags in place, or the request's reference is appended.
    pub(super) fn ensure_in(&self, metadata: &mut Map<String, Value>) -> Result<(), ApplyError> {
        // UpdateWithRetry reads the uid before the loop; a Transact proposal must give it.
        let Some(uid) = self.uid.as_deref() else {
            return Err(ApplyError::PathDoesNotFit {
                field: "mutation.owner_reference.owner.uid".into(),
                reason: "required in a Transact proposal: give the owner's uid".into(),
            });
        };
        let references = metadata.get(REFERENCES).and_then(Value::as_array);
        if self.controller
            && let Some(controller) = references
                .into_iter()
                .flatten()
                .find(|r| r["controller"].as_bool() == Some(true))
            && !self.is_referred_by(controller)
        {
            return Err(ApplyError::AlreadyOwned(describe(controller)));
        }
        let at = references.and_then(|list| list.iter().position(|r| self.is_referred_by(r)));
        let reference = match at {
            Some(at) => metadata[REFERENCES][at]
                .as_object_mut()
                .expect("a reference that matched is an object"),
            None => {
                let mut reference = Map::new();
                reference.insert(
                    "apiVersion".into(),
                    Value::String(self.api_version.to_string()),
                );
                reference.insert("kind".into(), Value::String(self.kind.to_string()));
                reference.insert("name".into(), Value::String(self.name.to_string()));
                reference.insert("uid".into(), Value::String(uid.to_string()));
                push(metadata, REFERENCES, Value::Object(reference));
                let list = metadata[REFERENCES].as_array_mut().expect("just pushed");
                list.last_mut()
                    .and_then(Value::as_object_mut)
                    .expect("just pushed")
            }
        };
        self.write_into(reference, uid);
        Ok(())
    }

    /// The request's apiVersion, uid and flags, written over a reference of this owner;
    /// a value that is already so is not touched (a flag stored `false` is one absent).
    fn write_into(&self, reference: &mut Map<String, Value>, uid: &str) {
        for (field, wanted) in [("apiVersion", &*self.api_version.to_string()), ("uid", uid)] {
            if reference.get(field).and_then(Value::as_str) != Some(wanted) {
                reference.insert(field.into(), Value::String(wanted.to_string()));
            }
        }
        for (flag, wanted) in [
            ("controller", self.controller),
            ("blockOwnerDeletion", self.block_owner_deletion),
        ] {
            let set = reference.get(flag).and_then(Value::as_bool) == Some(true);
            if wanted && !set {
                reference.insert(flag.into(), Value::Bool(true));
            } else if !wanted && set {
                reference.remove(flag);
            }
        }
    }

    /// `RemoveOwnerReference`: the first reference of this owner goes (matched by API
    /// group, kind and name only); an emptied list goes too, as the API server drops it.
    pub(super) fn remove_from(&self, metadata: &mut Map<String, Value>) {
        let Some(list) = metadata.get_mut(REFERENCES).and_then(Value::as_array_mut) else {
            return;
        };
        if let Some(at) = list.iter().position(|r| self.is_referred_by(r)) {
            list.remove(at);
        }
        if list.is_empty() {
            metadata.remove(REFERENCES);
        }
    }
}

/// The group of an apiVersion as apimachinery's `schema.ParseGroupVersion` reads it: empty
/// for `v1` (and for an empty apiVersion), `apps` for `apps/v1`, none for more slashes.
fn group_of(api_version: &str) -> Option<&str> {
    match api_version.split_once('/') {
        None => Some(""),
        Some((_, version)) if version.contains('/') => None,
        Some((group, _)) => Some(group),
    }
}

/// The controller that is in the way, named by the object's own strings (quoted short:
/// they may be anything).
fn describe(reference: &Value) -> String {
    let field = |name: &str| short(reference[name].as_str().unwrap_or_default(), 80);
    format!(
        "{}/{} (apiVersion {}, uid {})",
        field("kind"),
        field("name"),
        field("apiVersion"),
        field("uid")
    )
}
