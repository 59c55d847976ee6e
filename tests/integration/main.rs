//! The integration suite: one test binary, so that one control plane (etcd +
//! kube-apiserver, from tests/harness/controlplane.sh) serves every test that can share
//! it, and the suite links once. A test that stops the API server or reads its global
//! counters starts a control plane of its own.

#[path = "../support/mod.rs"]
mod support;

mod apf;
mod boundary;
mod breaker;
mod cli;
mod cli_delete;
mod cli_lead;
mod client_stack;
mod delete;
mod demo;
mod deploy;
mod engine;
mod entries;
mod exactly_once;
mod fence;
mod fenced;
mod get;
mod harness;
mod inject;
mod jaeger_harness;
mod lead;
mod linearizability;
mod listeners;
mod managed_fields;
mod memory;
mod no_write;
mod node;
mod observability;
mod policy;
mod ratelimit;
mod restart;
mod sidecar;
mod skew;
mod traces;
mod transact;
mod versions;
