//! safewrite: a gRPC sidecar that owns the read-modify-write loop of Kubernetes writes
//! for controllers written in any language. See README.md and docs/ for the model.
//!
//! This crate is the sidecar: its command line, its gRPC service, leadership and the
//! process around them. The layers below are crates of their own: `safewrite_api` (the
//! contract and shared vocabulary), `safewrite_mutation` (the mutation languages),
//! `safewrite_client` (the API-server client stack) and `safewrite_engine` (the write
//! loop).
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod auth;
pub mod cli;
pub mod health;
pub mod inject;
pub mod lease;
pub mod listen;
pub mod metrics;
pub mod process;
pub mod runtime;
pub mod service;
pub mod telemetry;
