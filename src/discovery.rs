//! API discovery: apiVersion + kind -> the resource to call (plural, scope, whether a
//! status subresource exists). Answers are cached; a miss asks the API server again, so
//! a CRD installed after start-up works without a restart.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use kube::core::gvk::{GroupVersion, GroupVersionKind};
use kube::discovery::{ApiResource, Scope};

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
#[derive(Debug, thiserror::Error)]
pub enum DiscoveryError {
    /// The apiVersion does not parse.
    #[error("apiVersion {0:?} is not of the form \"v1\" or \"group/version\"")]
    BadApiVersion(String),
    /// The API server serves no such kind at that apiVersion.
    #[error("the API server serves no kind {kind:?} in {api_version:?}")]
    UnknownKind { api_version: String, kind: String },
    /// Discovery itself failed (transport, authorization): retryable by the caller.
    #[error("failed to discover {api_version} {kind}: {source}")]
    Failed {
        api_version: String,
        kind: String,
        #[source]
        source: kube::Error,
    },
}

/// apiVersion + kind -> what discovery found.
type Cache = HashMap<(String, String), Arc<Resolved>>;

/// The discovery cache, shared by every request.
#[derive(Clone)]
pub struct Discovery {
    client: kube::Client,
    cache: Arc<RwLock<Cache>>,
}

impl Discovery {
    pub fn new(client: kube::Client) -> Self {
        Self {
            client,
            cache: Arc::default(),
        }
    }

    /// Resolves a kind, from the cache or else from the API server.
    pub async fn resolve(
        &self,
        api_version: &str,
        kind: &str,
    ) -> Result<Arc<Resolved>, DiscoveryError> {
        let key = (api_version.to_string(), kind.to_string());
        if let Some(hit) = self.cache.read().expect("discovery cache").get(&key) {
            return Ok(hit.clone());
        }
        let gv: GroupVersion = api_version
            .parse()
            .map_err(|_| DiscoveryError::BadApiVersion(api_version.to_string()))?;
        let gvk = GroupVersionKind::gvk(&gv.group, &gv.version, kind);
        let unknown = || DiscoveryError::UnknownKind {
            api_version: api_version.to_string(),
            kind: kind.to_string(),
        };
        let (resource, caps) = match kube::discovery::pinned_kind(&self.client, &gvk).await {
            Ok(found) => found,
            Err(kube::Error::Api(status)) if status.code == 404 => return Err(unknown()),
            Err(kube::Error::Discovery(_)) => return Err(unknown()),
            Err(source) => {
                return Err(DiscoveryError::Failed {
                    api_version: api_version.to_string(),
                    kind: kind.to_string(),
                    source,
                });
            }
        };
        let resolved = Arc::new(Resolved {
            has_status: caps
                .subresources
                .iter()
                .any(|(sub, _)| sub.plural == "status"),
            namespaced: caps.scope == Scope::Namespaced,
            resource,
        });
        self.cache
            .write()
            .expect("discovery cache")
            .insert(key, resolved.clone());
        Ok(resolved)
    }
}
