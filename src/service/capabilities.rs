//! rpc Capabilities: what this sidecar is (its version) and what it knows (the RPCs, and
//! every field and enum value of the contract), read from its own descriptor set, so a
//! client can refuse a call its sidecar cannot serve before sending it
//! (docs/compatibility.md).

use std::sync::LazyLock;

use safewrite_api::pb;
use safewrite_api::schema::SCHEMA;

/// The product's version, which `safewrite --version` prints.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The answer, the same for every call: built once.
pub fn answer() -> pb::CapabilitiesResponse {
    static ANSWER: LazyLock<pb::CapabilitiesResponse> =
        LazyLock::new(|| pb::CapabilitiesResponse {
            version: VERSION.to_string(),
            methods: SCHEMA.methods().to_vec(),
            fields: SCHEMA.fields(),
            enum_values: SCHEMA.enum_values().to_vec(),
        });
    ANSWER.clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn it_names_its_version_and_what_it_knows() {
        let answer = answer();
        assert_eq!(answer.version, env!("CARGO_PKG_VERSION"));
        assert!(
            answer
                .methods
                .iter()
                .any(|m| m == "safewrite.v1.WriterService/Capabilities")
        );
        assert!(
            answer
                .methods
                .iter()
                .any(|m| m == "safewrite.v1.WriterService/UpdateWithRetry")
        );
        assert!(
            answer
                .fields
                .iter()
                .any(|f| f == "safewrite.v1.WriteOptions.fence")
        );
        assert!(
            answer
                .enum_values
                .iter()
                .any(|v| v == "safewrite.v1.Outcome.OUTCOME_UNCHANGED")
        );
    }
}
