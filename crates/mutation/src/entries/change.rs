//! What a list-entry change is: the change, its conditions, its owner and its path,
//! and what they say of themselves (which part of the object they touch).

use serde_json::{Map, Value};

use safewrite_api::target::{ApiVersion, Kind, Name};

/// Where conditions are when the request names no path.
pub const CONDITIONS: &str = "status.conditions";

/// A change to one entry (or, for conditions, a few entries) of a list.
#[derive(Debug, Clone, PartialEq)]
pub enum EntryChange {
    /// Upsert conditions by type, in order.
    SetConditions {
        /// The conditions list ([`CONDITIONS`] unless the request named another).
        path: FieldPath,
        /// The conditions, at least one, each type once.
        conditions: Vec<Condition>,
    },
    /// Remove the conditions of these types.
    RemoveConditions {
        /// The conditions list ([`CONDITIONS`] unless the request named another).
        path: FieldPath,
        /// The condition types to remove, at least one, each a qualified name.
        types: Vec<String>,
    },
    /// Add or remove one finalizer.
    Finalizer {
        /// The finalizer, a qualified name.
        value: String,
        /// Remove it instead of adding it.
        remove: bool,
    },
    /// Ensure or remove one owner reference.
    Owner {
        /// The owner the reference names.
        owner: Owner,
        /// Remove the reference instead of ensuring it.
        remove: bool,
    },
    /// Upsert or remove one entry of a keyed list.
    ListEntry {
        /// The list.
        path: FieldPath,
        /// The fields that identify an entry: at least one, each named once.
        keys: Vec<String>,
        /// The entry, merged into the stored one (RFC 7386); it has every key field.
        entry: Map<String, Value>,
        /// Remove the entry with `entry`'s keys instead of upserting it.
        remove: bool,
    },
}

/// One condition to set, validated as the API server validates `metav1.Condition`.
#[derive(Debug, Clone, PartialEq)]
pub struct Condition {
    pub(crate) type_: String,
    pub(crate) status: String,
    pub(crate) reason: String,
    pub(crate) message: String,
    /// `None`: the generation of the object the change is applied to.
    pub(crate) observed_generation: Option<i64>,
    /// RFC 3339, UTC, in seconds; `None`: the time of the write.
    pub(crate) last_transition_time: Option<String>,
}

/// An owner, validated; its uid is `None` until read from the owner itself.
#[derive(Debug, Clone, PartialEq)]
pub struct Owner {
    /// The owner's apiVersion, written into the reference (only its group is matched).
    pub api_version: ApiVersion,
    /// The owner's kind.
    pub kind: Kind,
    /// The owner's name (in the object's namespace when its kind is namespaced).
    pub name: Name,
    /// The owner's uid: from the request, or read from the owner before the loop.
    pub uid: Option<String>,
    pub(crate) controller: bool,
    pub(crate) block_owner_deletion: bool,
}

/// A path of field names, as the request spelled it (for messages) and split at dots.
#[derive(Debug, Clone, PartialEq)]
pub struct FieldPath {
    pub(super) text: String,
    pub(super) segments: Vec<String>,
}

impl FieldPath {
    pub(crate) fn as_str(&self) -> &str {
        &self.text
    }

    /// Whether the path runs through `status`.
    pub fn in_status(&self) -> bool {
        self.segments[0] == "status"
    }
}

impl EntryChange {
    /// The request field of a path that lies in `status`, when the change touches only
    /// status: the main resource of a kind with a status subresource cannot write it.
    pub fn status_field(&self) -> Option<&'static str> {
        match self {
            EntryChange::SetConditions { path, .. } if path.in_status() => {
                Some("mutation.set_condition.path")
            }
            EntryChange::RemoveConditions { path, .. } if path.in_status() => {
                Some("mutation.remove_condition.path")
            }
            EntryChange::ListEntry { path, .. } if path.in_status() => {
                Some("mutation.list_entry.path")
            }
            _ => None,
        }
    }

    /// The request field of a change outside `status`, which the status subresource
    /// cannot write.
    pub fn outside_status_field(&self) -> Option<&'static str> {
        match self {
            EntryChange::Finalizer { .. } => Some("mutation.finalizer"),
            EntryChange::Owner { .. } => Some("mutation.owner_reference"),
            EntryChange::SetConditions { path, .. } if !path.in_status() => {
                Some("mutation.set_condition.path")
            }
            EntryChange::RemoveConditions { path, .. } if !path.in_status() => {
                Some("mutation.remove_condition.path")
            }
            EntryChange::ListEntry { path, .. } if !path.in_status() => {
                Some("mutation.list_entry.path")
            }
            _ => None,
        }
    }

    /// Whether this is the removal of a finalizer: an object that does not exist has
    /// none, so the removal is done (OUTCOME_GONE).
    pub fn removes_a_finalizer(&self) -> bool {
        matches!(self, EntryChange::Finalizer { remove: true, .. })
    }

    /// An owner named without a uid, which must be read before the change can apply.
    pub fn owner_to_resolve(&self) -> Option<&Owner> {
        match self {
            EntryChange::Owner {
                owner,
                remove: false,
            } if owner.uid.is_none() => Some(owner),
            _ => None,
        }
    }
}

impl Owner {
    /// `Kind/name`, for messages.
    pub fn describe(&self) -> String {
        format!("{}/{}", &*self.kind, &*self.name)
    }
}
