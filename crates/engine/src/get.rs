//! Read your own writes: the object at least as new as a resourceVersion the caller
//! names (the one its own write answered with), compared as KEP-5504 defines
//! ([`safewrite_api::resource_version`]). From the remembered copy when that copy is at or past
//! the minimum, without a request; else with one GET carrying `resourceVersion=<min>`,
//! the API server's "not older than" read, served from its watch cache (no etcd round
//! trip) at a revision at or past the minimum, whatever the object's own (last
//! modified) resourceVersion says. A minimum the server's cache does not reach within
//! its wait (about 3 s) is refused with its retry delay (`ResourceVersionTooLarge`,
//! never an OK); a caller's deadline that comes first ends the read at the deadline.
//! Without a minimum, or with one that is not well formed (never compared), a live
//! (quorum) read.

use std::sync::Arc;

use serde_json::Value;

use safewrite_api::resource_version::{WellFormed, at_least};
use safewrite_api::target::ObjectPath;

use super::api::{Api, Read};
use super::attempt_log::AttemptLog;
use super::body::resource_version;
use super::decide::Failed;
use super::error::WriteError;

/// An object read for a caller.
#[derive(Debug, Clone)]
pub struct Got {
    /// The object, at least as new as the version asked for.
    pub object: Value,
    /// Answered from the remembered copy, without a request.
    pub remembered: bool,
}

/// Reads `request` at least as new as `min_version`, its `attempts` begun. One attempt:
/// a refusal or fault is the caller's to retry, with the same advice as a write's read.
pub(super) async fn get(
    api: &Api,
    request: ObjectPath,
    mut attempts: AttemptLog,
    min_version: Option<&str>,
) -> Result<Got, WriteError> {
    let min = min_version.and_then(WellFormed::parse);
    if let Some(min) = &min
        && let Some(copy) = api.memory.peek(request.as_str())
        && at_least(&resource_version(&copy), min.as_str())
    {
        return Ok(Got {
            object: Value::clone(&copy),
            remembered: true,
        });
    }
    attempts.begin();
    let (deadline, made) = (attempts.deadline, attempts.made());
    let read = match &min {
        Some(min) => api.read_not_older_than(&request, min, deadline, made).await,
        None => api.read(&request, deadline, made).await,
    };
    let failure = match read {
        // Either read answers the object at a revision at or past the minimum (a quorum
        // read: past every write answered before it), whatever its own resourceVersion.
        Read::Found(object) => {
            return Ok(Got {
                object: Arc::unwrap_or_clone(object),
                remembered: false,
            });
        }
        Read::Missing(answer) | Read::Ended(Some(answer), _) => {
            attempts.current().note(&answer);
            Failed::from_answer(&answer, None).into_failure()
        }
        Read::Ended(None, failed) => failed.into_failure(),
    };
    Err(attempts.fail(failure))
}
