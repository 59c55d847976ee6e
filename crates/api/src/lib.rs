//! The `safewrite.v1` contract and the vocabulary every layer of safewrite shares: the
//! generated messages and service ([`pb`]), the reasons an answer carries and each one's
//! retry advice ([`reasons`]), typed and escaped targets ([`target`]), resourceVersions
//! compared as the API server defines them ([`resource_version`]), the caller's deadline
//! ([`deadline`]) and the backoff between attempts ([`backoff`]).
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod backoff;
pub mod codec;
pub mod deadline;
pub mod reasons;
pub mod resource_version;
pub mod schema;
pub mod target;

/// Generated protobuf messages and the tonic service for `safewrite.v1`.
pub mod pb {
    #![allow(
        missing_docs,
        clippy::doc_lazy_continuation,
        clippy::large_enum_variant
    )]
    tonic::include_proto!("safewrite.v1");

    /// The encoded file descriptor set, served by gRPC server reflection.
    pub const FILE_DESCRIPTOR_SET: &[u8] =
        tonic::include_file_descriptor_set!("safewrite_descriptor");

    /// A PatchStatus request carries the fields of an UpdateWithRetry one, for the status
    /// subresource.
    impl From<PatchStatusRequest> for UpdateWithRetryRequest {
        fn from(body: PatchStatusRequest) -> Self {
            UpdateWithRetryRequest {
                target: body.target,
                mutation: body.mutation,
                preconditions: body.preconditions,
                retry_policy: body.retry_policy,
                options: body.options,
            }
        }
    }
}
