//! Why a mutation could not be applied to the fresh object: the wing's one error, which
//! the engine maps to its failures. CEL's own errors ([`CelError`]) convert into it.

use crate::cel::CelError;

/// Why a mutation could not be applied to the fresh object. Depends on the object, not
/// only on the request: reported as FAILED_PRECONDITION with the current object, except
/// the CEL bounds (see `respond::to_status`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApplyError {
    /// A JSON Patch `test` operation did not hold.
    #[error("JSON Patch test operation {index} ({path}) does not hold on the current object")]
    TestFailed {
        /// The operation's index in the patch, from 0.
        index: usize,
        /// The operation's `path`.
        path: String,
    },
    /// A JSON Patch operation cannot apply to the current object (e.g. a missing path).
    #[error("JSON Patch operation {index} ({path}) does not apply to the current object: {reason}")]
    PatchDoesNotApply {
        /// The operation's index in the patch, from 0.
        index: usize,
        /// The operation's `path`.
        path: String,
        /// Why it does not apply.
        reason: String,
    },
    /// The CEL expression could not be evaluated on the current object, or its
    /// evaluation was stopped (see [`CelError`]).
    #[error(transparent)]
    Cel(#[from] CelError),
    /// The CEL mutation did not return a map.
    #[error("CEL mutation must return a map (a merge patch), returned {0}")]
    CelNotAMap(String),
    /// A finalizer cannot be added: the object is being deleted.
    #[error(
        "finalizer {0:?} cannot be added: the object is being deleted (it has a deletionTimestamp), and the API server accepts no new finalizer on it"
    )]
    Deleting(String),
    /// Another owner is the object's controller.
    #[error(
        "the object is already controlled by {0}: an object has at most one controller; remove that reference first, or ensure this owner without controller"
    )]
    AlreadyOwned(String),
    /// A list path runs through a value that is not an object, or ends at one that is
    /// not a list, on the current object: the request's path does not fit the object.
    #[error("{reason}")]
    PathDoesNotFit {
        /// The request field that names the path.
        field: String,
        /// What in the object does not fit; the error's whole message.
        reason: String,
    },
    /// The object has no metadata to hold a finalizer or an owner reference. (Its
    /// message has said "CEL" since the list entries were written; clients may match
    /// it, so it stays.)
    #[error("CEL expression failed on the current object: the object has no metadata")]
    NoMetadata,
}

#[cfg(test)]
mod tests {
    use super::ApplyError;
    use crate::cel::CelError;

    #[test]
    fn a_cel_error_reads_the_same_inside_the_wings_error() {
        for error in [
            CelError::Failed("no such key: missing".into()),
            CelError::NotABool("a string".into()),
            CelError::TooSlow(std::time::Duration::from_millis(250)),
            CelError::TooCostly {
                cost: 11,
                limit: 10,
            },
            CelError::ResultTooLarge {
                size: 11,
                limit: 10,
            },
            CelError::TooManySteps(5),
            CelError::Busy,
            CelError::Deadline,
        ] {
            let message = error.to_string();
            assert_eq!(ApplyError::from(error).to_string(), message);
        }
        assert_eq!(
            ApplyError::from(CelError::TooManySteps(5)).to_string(),
            "CEL evaluation took more than 5 comprehension steps and was stopped"
        );
        assert_eq!(
            ApplyError::NoMetadata.to_string(),
            "CEL expression failed on the current object: the object has no metadata"
        );
    }
}
