//! safewrite: a gRPC sidecar that owns the read-modify-write loop of Kubernetes writes
//! for controllers written in any language. See README.md and docs/ for the model.

pub mod auth;
pub mod backoff;
pub mod cli;
pub mod client;
pub mod deadline;
pub mod engine;
pub mod health;
pub mod inject;
pub mod lease;
pub mod listen;
pub mod metrics;
pub mod mutation;
pub mod process;
pub mod reasons;
pub mod requests;
pub mod resource_version;
pub mod runtime;
pub mod service;
pub mod target;
pub mod telemetry;

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
}
