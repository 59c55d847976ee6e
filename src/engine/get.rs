//! Read your own writes: the object at least as new as a resourceVersion the caller
//! names (the one its own write answered with), from the remembered copy when that copy
//! is at or past it, else from a live read, which the API server answers from etcd with a
//! quorum read, so at least as new as any write that has been answered (the object's own
//! resourceVersion is when it last changed, which may be older than the minimum: that is
//! no staleness, the object has not changed since). Without a minimum, or when versions
//! are not decimal numbers (the API server's resourceVersions are comparable since
//! Kubernetes 1.35; one that is not a number is read live), always a live read.

use std::sync::Arc;

use serde_json::Value;

use super::api::{Api, Read};
use super::attempts::Attempts;
use super::body::resource_version;
use super::decide::Step;
use super::error::WriteError;
use crate::target::ObjectPath;

/// An object read for a caller.
#[derive(Debug, Clone)]
pub struct Got {
    pub object: Value,
    /// Answered from the remembered copy, without a request.
    pub remembered: bool,
}

/// `version` as a number, when it is one (comparable).
fn comparable(version: &str) -> Option<u64> {
    (!version.is_empty() && version.bytes().all(|b| b.is_ascii_digit()))
        .then(|| version.parse().ok())
        .flatten()
}

/// Reads `request` at least as new as `min_version`, its `attempts` begun. One attempt:
/// a refusal or fault is the caller's to retry, with the same advice as a write's read.
pub(super) async fn get(
    api: &Api,
    request: ObjectPath,
    mut attempts: Attempts,
    min_version: Option<&str>,
) -> Result<Got, WriteError> {
    let min = min_version.and_then(comparable);
    if let Some(min) = min
        && let Some(copy) = api.memory.peek(request.as_str())
        && comparable(&resource_version(&copy)).is_some_and(|at| at >= min)
    {
        return Ok(Got {
            object: Value::clone(&copy),
            remembered: true,
        });
    }
    attempts.begin();
    let failure = match api.read(&request, attempts.deadline, attempts.made()).await {
        // A quorum read is the object as of now, at a revision past every write
        // answered before it, whatever its own (last modified) resourceVersion says.
        Read::Found(object) => {
            return Ok(Got {
                object: Arc::unwrap_or_clone(object),
                remembered: false,
            });
        }
        Read::Missing(answer) | Read::Ended(Some(answer), _) => {
            attempts.current().note(&answer);
            match Step::from_answer(&answer, None) {
                Step::Fail(failure) | Step::Retry(_, failure) => failure,
                Step::Done(_) => unreachable!("a refused read does not finish"),
            }
        }
        Read::Ended(None, Step::Fail(failure) | Step::Retry(_, failure)) => failure,
        Read::Ended(None, Step::Done(_)) => unreachable!("a read does not finish a write"),
    };
    Err(attempts.fail(failure))
}

#[cfg(test)]
mod tests {
    use super::comparable;

    #[test]
    fn only_decimal_versions_compare() {
        assert_eq!(comparable("12345"), Some(12345));
        assert_eq!(comparable(""), None);
        assert_eq!(comparable("-1"), None);
        assert_eq!(comparable("abc"), None);
        assert_eq!(comparable("99999999999999999999999"), None);
    }
}
