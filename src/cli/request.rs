//! The request both modes send, built from the flags: the target, the change, the
//! preconditions and options, as UpdateWithRetry / PatchStatus fields or a Transact
//! begin.

use serde_json::Value;

use safewrite_api::pb;

use super::args::WriteArgs;
use super::fail::Fail;
use super::kinds;

/// Which write: the main resource or the status subresource.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteKind {
    /// `safewrite update`: the main resource.
    Update,
    /// `safewrite patch-status`: the status subresource.
    PatchStatus,
}

/// The request both modes send: UpdateWithRetry / PatchStatus fields, or a Transact begin
/// when `exec` is set.
#[derive(Debug, Clone)]
pub struct Request {
    pub verb: WriteKind,
    pub target: pb::ObjectRef,
    /// None for --exec.
    pub mutation: Option<pb::Mutation>,
    pub preconditions: pb::Preconditions,
    pub retry_policy: pb::RetryPolicy,
    pub options: pb::WriteOptions,
    pub exec: Option<String>,
    /// What `-o name` prints before the slash.
    pub display: String,
    /// The flag of the change, which refusals name for the field that carries it.
    pub flag: &'static str,
}

/// Builds the request from the flags and the change's `mutation` (of the change `flag`).
pub fn build(
    verb: WriteKind,
    flag: &'static str,
    args: &WriteArgs,
    typed: &kinds::Typed,
    kind: kinds::Kind,
    default_namespace: Option<&str>,
    mutation: Option<pb::mutation::Kind>,
) -> Result<Request, Fail> {
    let namespace = match (kind.namespaced, &args.namespace) {
        (Some(false), _) => String::new(),
        (_, Some(namespace)) => namespace.clone(),
        (_, None) => default_namespace.unwrap_or("default").to_string(),
    };
    let create_if_missing_json = match &args.create_if_missing {
        Some(file) => read_object("--create-if-missing", file)?.to_string(),
        None => String::new(),
    };
    Ok(Request {
        verb,
        target: pb::ObjectRef {
            api_version: kind.api_version,
            kind: kind.kind,
            namespace,
            name: typed.name.clone(),
        },
        mutation: mutation.map(|kind| pb::Mutation { kind: Some(kind) }),
        preconditions: pb::Preconditions {
            uid: args.uid.clone().unwrap_or_default(),
            resource_version: args.resource_version.clone().unwrap_or_default(),
            cel: args.precondition.clone().unwrap_or_default(),
        },
        retry_policy: pb::RetryPolicy {
            max_attempts: args.max_attempts.unwrap_or(0),
            ..Default::default()
        },
        options: pb::WriteOptions {
            field_manager: args.field_manager.clone().unwrap_or_default(),
            dry_run: args.dry_run,
            create_if_missing_json,
            idempotency_key: args.idempotency_key.clone().unwrap_or_default(),
            write_alone: false,
            fence: args.fence.fence()?,
        },
        exec: args.change.exec.clone(),
        display: kind.display,
        flag,
    })
}

/// An object from a JSON or YAML file, or stdin for `-`.
pub fn read_object(flag: &str, file: &str) -> Result<Value, Fail> {
    let text = if file == "-" {
        std::io::read_to_string(std::io::stdin())
            .map_err(|e| Fail::invalid(format!("{flag} -: cannot read stdin: {e}")))?
    } else {
        std::fs::read_to_string(file)
            .map_err(|e| Fail::invalid(format!("{flag} {file}: cannot read it: {e}")))?
    };
    let value: Value = match serde_json::from_str(&text) {
        Ok(value) => value,
        Err(_) => serde_saphyr::from_str(&text).map_err(|e| {
            let line = e.to_string();
            let line = line.lines().next().unwrap_or("").to_string();
            Fail::invalid(format!("{flag} {file}: neither JSON nor YAML: {line}"))
        })?,
    };
    if !value.is_object() {
        return Err(Fail::invalid(format!(
            "{flag} {file}: must hold one object (a mapping), not {}",
            safewrite_mutation::type_name(&value)
        )));
    }
    Ok(value)
}
