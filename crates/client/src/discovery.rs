//! API discovery: apiVersion + kind -> the resource to call (plural, scope, whether a
//! status subresource exists), read from the group-version's resource list
//! (`/api/v1`, `/apis/<group>/<version>`) through the client stack like any read, so its
//! failures are the same [`RequestError`]s and answers as a read's.
//!
//! One list answers for every kind of its group-version and is cached:
//!
//! - a kind found stays cached until an answer shows the mapping stale: the engine asks
//!   for a [`Discovery::refresh`] (e.g. a status write to a kind listed without a status
//!   subresource: the subresource may have been added to its CRD since) or drops the
//!   group-version with [`Discovery::forget`] (a 404 from the resource path itself);
//! - a kind missing from the list, or a group-version not served, is an unknown kind
//!   for [`UNKNOWN_TTL`]: asking again within that time costs no request, asking after it
//!   reads the list again (a CRD installed since is found);
//! - concurrent misses of one group-version share one request.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kube::core::gvk::GroupVersion;
use kube::discovery::ApiResource;
use serde_json::Value;
use tokio::time::Instant;

use safewrite_api::deadline::AnswerBy;

use super::answer::{Answer, RequestError};
use super::apiserver;
use super::handle::ApiClient;

/// How long a kind found missing stays unknown before the list is read again.
pub const UNKNOWN_TTL: Duration = Duration::from_secs(3);

/// Past this many group-versions cached, the answers "not served" that have expired are
/// dropped, so that callers naming ever new groups cannot grow the cache without bound.
const PRUNE_ABOVE: usize = 256;

/// What the engine needs to know about a kind.
#[derive(Debug, Clone)]
pub struct Resolved {
    /// Group, version, kind and plural.
    pub resource: ApiResource,
    /// Namespaced (true) or cluster-scoped (false).
    pub namespaced: bool,
    /// Whether the resource has a `status` subresource.
    pub has_status: bool,
}

/// Why a kind could not be resolved.
#[derive(Debug, Clone, thiserror::Error)]
pub enum DiscoveryError {
    /// The apiVersion does not parse.
    #[error("apiVersion {0:?} is not of the form \"v1\" or \"group/version\"")]
    BadApiVersion(String),
    /// The API server serves no such kind at that apiVersion.
    #[error("the API server serves no kind {kind:?} in {api_version:?}")]
    UnknownKind {
        /// The apiVersion asked for.
        api_version: String,
        /// The kind asked for.
        kind: String,
    },
    /// The request for the resource list got no answer (retryable as for any read).
    #[error("failed to discover {api_version}: {source}")]
    Request {
        /// The apiVersion whose resource list was asked for.
        api_version: String,
        /// Why the request got no answer.
        #[source]
        source: RequestError,
    },
    /// The API server refused the request for the resource list (401, 403, 429, 5xx...).
    #[error("failed to discover {api_version}: HTTP {}: {}", answer.code, answer.message())]
    Refused {
        /// The apiVersion whose resource list was asked for.
        api_version: String,
        /// The API server's answer.
        answer: Answer,
    },
}

/// What one read of a group-version's resource list found.
struct Listing {
    /// When it was read.
    read_at: Instant,
    /// Kind -> resource; `None` when the group-version is not served.
    kinds: Option<HashMap<String, Arc<Resolved>>>,
}

// === impl Listing ===

impl Listing {
    /// The kind as of this listing: found, unknown (still fresh), or `None` (ask again).
    fn lookup(
        &self,
        api_version: &str,
        kind: &str,
    ) -> Option<Result<Arc<Resolved>, DiscoveryError>> {
        if let Some(found) = self.kinds.as_ref().and_then(|kinds| kinds.get(kind)) {
            return Some(Ok(found.clone()));
        }
        (self.read_at.elapsed() < UNKNOWN_TTL).then(|| {
            Err(DiscoveryError::UnknownKind {
                api_version: api_version.to_string(),
                kind: kind.to_string(),
            })
        })
    }
}

/// The discovery cache, shared by every request.
#[derive(Clone)]
pub struct Discovery {
    client: ApiClient,
    listings: Arc<Mutex<HashMap<String, Arc<Listing>>>>,
    /// One lock per group-version, held while its list is read.
    reading: Arc<Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>>,
}

// === impl Discovery ===

impl Discovery {
    /// An empty cache that reads resource lists through `client`.
    pub fn new(client: ApiClient) -> Self {
        Self {
            client,
            listings: Arc::default(),
            reading: Arc::default(),
        }
    }

    fn listing(&self, api_version: &str) -> Option<Arc<Listing>> {
        self.listings
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(api_version)
            .cloned()
    }

    /// Resolves a kind, from the cache or else from the API server; `deadline` (the
    /// RPC's) bounds the request.
    ///
    /// # Errors
    /// [`DiscoveryError::BadApiVersion`] and [`DiscoveryError::UnknownKind`] are final;
    /// `Request` and `Refused` are a failed read, classified as such.
    pub async fn resolve(
        &self,
        api_version: &str,
        kind: &str,
        deadline: AnswerBy,
    ) -> Result<Arc<Resolved>, DiscoveryError> {
        let path = list_path(api_version)?;
        if let Some(known) = self
            .listing(api_version)
            .and_then(|l| l.lookup(api_version, kind))
        {
            return known;
        }
        self.read(api_version, &path, deadline, Duration::ZERO)
            .await?
            .lookup(api_version, kind)
            .unwrap_or_else(|| unknown_kind(api_version, kind))
    }

    /// Resolves a kind from a fresh read of its list, unless the list was read less than
    /// `fresh` ago (then from that): for an answer that shows the cached mapping stale.
    ///
    /// # Errors
    /// As [`Discovery::resolve`].
    pub async fn refresh(
        &self,
        api_version: &str,
        kind: &str,
        deadline: AnswerBy,
        fresh: Duration,
    ) -> Result<Arc<Resolved>, DiscoveryError> {
        let path = list_path(api_version)?;
        self.read(api_version, &path, deadline, fresh)
            .await?
            .lookup(api_version, kind)
            .unwrap_or_else(|| unknown_kind(api_version, kind))
    }

    /// Drops what is known of a group-version: the next request for one of its kinds
    /// reads its list again.
    pub fn forget(&self, api_version: &str) {
        self.listings
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(api_version);
    }

    /// Reads the list of `api_version`, unless another caller read it within `fresh`
    /// (or while this one waited for it).
    async fn read(
        &self,
        api_version: &str,
        path: &str,
        deadline: AnswerBy,
        fresh: Duration,
    ) -> Result<Arc<Listing>, DiscoveryError> {
        let asked = Instant::now();
        let lock = self
            .reading
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(api_version.to_string())
            .or_default()
            .clone();
        let _reading = match deadline.instant() {
            Some(deadline) => tokio::time::timeout_at(deadline, lock.lock())
                .await
                .map_err(|_| DiscoveryError::Request {
                    api_version: api_version.to_string(),
                    source: RequestError::Timeout {
                        after: deadline.saturating_duration_since(asked),
                        sent: false,
                    },
                })?,
            None => lock.lock().await,
        };
        if let Some(listing) = self.listing(api_version)
            && (listing.read_at >= asked || listing.read_at.elapsed() < fresh)
        {
            return Ok(listing);
        }
        let request = http::Request::get(path)
            .body(Vec::new())
            .expect("a discovery path is a valid URI");
        let answer = apiserver::send(&self.client, request, None, deadline)
            .await
            .map_err(|source| DiscoveryError::Request {
                api_version: api_version.to_string(),
                source,
            })?;
        let kinds = match answer.code {
            200 => Some(
                parse_list(&answer).map_err(|source| DiscoveryError::Request {
                    api_version: api_version.to_string(),
                    source,
                })?,
            ),
            404 => None,
            _ => {
                return Err(DiscoveryError::Refused {
                    api_version: api_version.to_string(),
                    answer,
                });
            }
        };
        let listing = Arc::new(Listing {
            read_at: Instant::now(),
            kinds,
        });
        let mut listings = self.listings.lock().unwrap_or_else(|e| e.into_inner());
        listings.insert(api_version.to_string(), listing.clone());
        if listings.len() > PRUNE_ABOVE {
            listings.retain(|_, l| l.kinds.is_some() || l.read_at.elapsed() < UNKNOWN_TTL);
            let mut reading = self.reading.lock().unwrap_or_else(|e| e.into_inner());
            reading.retain(|gv, lock| Arc::strong_count(lock) > 1 || listings.contains_key(gv));
        }
        Ok(listing)
    }
}

/// The unknown-kind error (a listing just read always answers; this is its miss).
fn unknown_kind(api_version: &str, kind: &str) -> Result<Arc<Resolved>, DiscoveryError> {
    Err(DiscoveryError::UnknownKind {
        api_version: api_version.to_string(),
        kind: kind.to_string(),
    })
}

/// The path of an apiVersion's resource list.
fn list_path(api_version: &str) -> Result<String, DiscoveryError> {
    let gv: GroupVersion = api_version
        .parse()
        .map_err(|_| DiscoveryError::BadApiVersion(api_version.to_string()))?;
    let segment_ok = |s: &str| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.')
    };
    if !segment_ok(&gv.version) || !(gv.group.is_empty() || segment_ok(&gv.group)) {
        return Err(DiscoveryError::BadApiVersion(api_version.to_string()));
    }
    Ok(if gv.group.is_empty() {
        format!("/api/{}", gv.version)
    } else {
        format!("/apis/{}/{}", gv.group, gv.version)
    })
}

/// The group-version a resource path addresses (`/api/v1/...` -> `v1`,
/// `/apis/g/v/...` -> `g/v`), to [`Discovery::forget`] when the path is not served.
pub fn group_version_of(path: &str) -> Option<String> {
    let mut segments = path.split('/').filter(|s| !s.is_empty());
    match segments.next()? {
        "api" => segments.next().map(str::to_string),
        "apis" => Some(format!("{}/{}", segments.next()?, segments.next()?)),
        _ => None,
    }
}

/// Whether a 404 says the resource path itself is not served (rather than that the
/// object is missing: that answer names the object in its details).
pub fn is_unserved_path(answer: &Answer) -> bool {
    answer.code == 404
        && answer
            .status()
            .is_none_or(|s| s.details.is_none_or(|d| d.name.is_empty()))
}

/// The kinds of a resource list (`APIResourceList`), with their subresources.
fn parse_list(answer: &Answer) -> Result<HashMap<String, Arc<Resolved>>, RequestError> {
    let list: Value = answer.object()?;
    let group_version = list["groupVersion"].as_str().unwrap_or_default();
    let (group, version) = match group_version.split_once('/') {
        Some((group, version)) => (group, version),
        None => ("", group_version),
    };
    let resources = list["resources"].as_array().cloned().unwrap_or_default();
    let names: Vec<&str> = resources
        .iter()
        .filter_map(|r| r["name"].as_str())
        .collect();
    let mut kinds = HashMap::new();
    for resource in &resources {
        let (Some(plural), Some(kind)) = (resource["name"].as_str(), resource["kind"].as_str())
        else {
            continue;
        };
        if plural.contains('/') {
            continue; // a subresource
        }
        let status = format!("{plural}/status");
        kinds.entry(kind.to_string()).or_insert_with(|| {
            Arc::new(Resolved {
                resource: ApiResource {
                    group: group.to_string(),
                    version: version.to_string(),
                    api_version: group_version.to_string(),
                    kind: kind.to_string(),
                    plural: plural.to_string(),
                },
                namespaced: resource["namespaced"].as_bool().unwrap_or(false),
                has_status: names.contains(&status.as_str()),
            })
        });
    }
    Ok(kinds)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(code: u16, body: Value) -> Answer {
        Answer::new(code, &http::HeaderMap::new(), body.to_string().into())
    }

    #[test]
    fn a_resource_list_gives_kinds_scopes_and_status() {
        let list = answer(
            200,
            serde_json::json!({
                "kind": "APIResourceList", "groupVersion": "test.safewrite.dev/v1",
                "resources": [
                    {"name": "widgets", "kind": "Widget", "namespaced": true, "verbs": []},
                    {"name": "widgets/status", "kind": "Widget", "namespaced": true, "verbs": []},
                    {"name": "gadgets", "kind": "Gadget", "namespaced": false, "verbs": []},
                ]
            }),
        );
        let kinds = parse_list(&list).unwrap();
        let widget = &kinds["Widget"];
        assert_eq!(widget.resource.plural, "widgets");
        assert_eq!(widget.resource.api_version, "test.safewrite.dev/v1");
        assert_eq!(widget.resource.group, "test.safewrite.dev");
        assert!(widget.namespaced && widget.has_status);
        let gadget = &kinds["Gadget"];
        assert!(!gadget.namespaced && !gadget.has_status);
    }

    #[test]
    fn paths_of_lists_and_resources() {
        assert_eq!(list_path("v1").unwrap(), "/api/v1");
        assert_eq!(list_path("apps/v1").unwrap(), "/apis/apps/v1");
        assert!(matches!(
            list_path("a/b/c"),
            Err(DiscoveryError::BadApiVersion(_))
        ));
        assert!(matches!(
            list_path("a?b/v1"),
            Err(DiscoveryError::BadApiVersion(_))
        ));
        assert_eq!(
            group_version_of("/api/v1/namespaces/a/configmaps/b").as_deref(),
            Some("v1")
        );
        assert_eq!(
            group_version_of("/apis/test.safewrite.dev/v1/namespaces/a/widgets/w/status")
                .as_deref(),
            Some("test.safewrite.dev/v1")
        );
        assert_eq!(group_version_of("/readyz"), None);
    }

    #[test]
    fn a_missing_object_is_not_an_unserved_path() {
        let missing = answer(
            404,
            serde_json::json!({"kind": "Status", "status": "Failure", "reason": "NotFound",
                "code": 404, "message": "configmaps \"b\" not found",
                "details": {"name": "b", "kind": "configmaps"}}),
        );
        assert!(!is_unserved_path(&missing));
        let unserved = answer(
            404,
            serde_json::json!({"kind": "Status", "status": "Failure", "reason": "NotFound",
                "code": 404, "message": "the server could not find the requested resource",
                "details": {}}),
        );
        assert!(is_unserved_path(&unserved));
    }
}
