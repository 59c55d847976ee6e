//! Decodes arbitrary bytes as an `UpdateWithRetryRequest` and runs it through the
//! request validation of the service edge (`safewrite::service::validate::validate`): any
//! request must be either refused with a short field violation or turned into a
//! `WriteSpec`.
#![no_main]

use std::sync::LazyLock;
use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use prost::Message;
use safewrite::service::validate::{RequestParts, validate};
use safewrite_api::backoff::Backoff;
use safewrite_api::pb;
use safewrite_api::target::FieldManager;
use safewrite_engine::{EngineConfig, Subresource};

#[path = "common.rs"]
mod common;

static CONFIG: LazyLock<EngineConfig> = LazyLock::new(|| EngineConfig {
    max_attempts: 5,
    backoff: Backoff {
        initial: Duration::from_millis(10),
        max: Duration::from_secs(1),
    },
    request_timeout: Duration::from_secs(5),
    field_manager: FieldManager::parse("options.field_manager", "safewrite").expect("valid"),
    retry_budget_percent: 0.2,
    retry_budget_min_per_second: 10,
    group_commit: true,
    memory_bytes: 0,
    remember_secrets: false,
});

fuzz_target!(|data: &[u8]| {
    let Ok(request) = pb::UpdateWithRetryRequest::decode(data) else {
        return;
    };
    for subresource in [Subresource::Main, Subresource::Status] {
        let parts = RequestParts {
            target: request.target.as_ref(),
            mutation: request.mutation.as_ref(),
            preconditions: request.preconditions.as_ref(),
            retry_policy: request.retry_policy.as_ref(),
            options: request.options.as_ref(),
        };
        if let Err(violation) = validate(parts, subresource, &CONFIG) {
            common::check_violation(&violation);
        }
    }
});
