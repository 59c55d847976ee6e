//! The handle every request to the API server is sent through: the client stack
//! (`stack.rs` builds it), boxed so that it can be cloned and called on the caller's
//! own task.

use std::sync::Arc;

use bytes::Bytes;
use http_body_util::Full;
use tower::util::BoxCloneSyncService;
use tower::{BoxError, ServiceExt as _};

/// The client stack, called on the caller's own task: a request goes from the caller
/// through the layers to the connection, with no task in between (kube's client would
/// hand every request to a buffer task first). Cheap to clone.
#[derive(Clone)]
pub struct ApiClient {
    stack: BoxCloneSyncService<
        http::Request<kube::client::Body>,
        http::Response<Full<Bytes>>,
        BoxError,
    >,
    /// The namespace of the configuration's context (`default` when it names none).
    namespace: Arc<str>,
}

impl ApiClient {
    /// The handle of `stack`, for a configuration whose namespace is `namespace`.
    pub fn new<S>(stack: S, namespace: &str) -> ApiClient
    where
        S: tower::Service<
                http::Request<kube::client::Body>,
                Response = http::Response<Full<Bytes>>,
                Error = BoxError,
            > + Clone
            + Send
            + Sync
            + 'static,
        S::Future: Send + 'static,
    {
        ApiClient {
            stack: BoxCloneSyncService::new(stack),
            namespace: namespace.into(),
        }
    }

    /// Exchanges `request` through the stack; the answer's body is read whole.
    ///
    /// # Errors
    /// The stack's error when no whole answer came back.
    pub async fn exchange(
        &self,
        request: http::Request<kube::client::Body>,
    ) -> Result<http::Response<Full<Bytes>>, BoxError> {
        self.stack.clone().oneshot(request).await
    }

    /// The namespace of the configuration's context, for requests that name none.
    pub fn default_namespace(&self) -> &str {
        &self.namespace
    }
}
