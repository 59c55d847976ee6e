//! How a failed command ends: its [`Class`] (the exit code) and one line saying what
//! happened, with the request fields and RPCs a refusal names put as this command's
//! flags and commands ([`Fail::status`]).

/// The class of a failure, and its exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    ExecFailed = 1,
    Invalid = 2,
    Precondition = 3,
    Conflict = 4,
    NotFound = 5,
    Denied = 6,
    Unavailable = 7,
    /// `safewrite lead`: leadership was lost while the command ran, and it was stopped.
    Lost = 8,
}

// === impl Class ===

impl Class {
    /// The class of a gRPC code (as the sidecar answers, or the in-process engine would).
    pub fn of(code: tonic::Code) -> Class {
        use tonic::Code;
        match code {
            Code::InvalidArgument | Code::OutOfRange | Code::Unimplemented => Class::Invalid,
            Code::FailedPrecondition => Class::Precondition,
            Code::Aborted | Code::AlreadyExists => Class::Conflict,
            Code::NotFound => Class::NotFound,
            Code::PermissionDenied | Code::Unauthenticated => Class::Denied,
            _ => Class::Unavailable,
        }
    }
}

/// A failure of the command: its class and one line saying what happened and what to do.
#[derive(Debug, Clone)]
pub struct Fail {
    pub class: Class,
    pub message: String,
}

// === impl Fail ===

impl Fail {
    pub fn new(class: Class, message: impl Into<String>) -> Fail {
        Fail {
            class,
            message: message.into(),
        }
    }
    pub fn invalid(message: impl Into<String>) -> Fail {
        Fail::new(Class::Invalid, message)
    }
    pub fn not_found(message: impl Into<String>) -> Fail {
        Fail::new(Class::NotFound, message)
    }
    pub fn denied(message: impl Into<String>) -> Fail {
        Fail::new(Class::Denied, message)
    }
    pub fn unavailable(message: impl Into<String>) -> Fail {
        Fail::new(Class::Unavailable, message)
    }

    /// A refused write, as the sidecar (or the engine through `respond`) answered it;
    /// `change` is the flag of the command's change (e.g. `--add-finalizer`).
    pub fn status(status: &tonic::Status, change: &str) -> Fail {
        let class = Class::of(status.code());
        // The current object of a refusal is in the gRPC details, which a shell does not
        // see; the request's fields are this command's flags, its RPCs its commands.
        let mut message = status
            .message()
            .replace(" (the current object is in the WriteFailure detail)", "");
        // Nor does it see the RetryInfo: its delay is said instead.
        if let Some(delay) = retry_delay(status) {
            message = message.replace("the RetryInfo delay", &delay);
        }
        for (field, flag) in FLAGS {
            message = name_flag(&message, field, &flag.replace(CHANGE, change));
        }
        for (rpc, command) in COMMANDS {
            message = message.replace(rpc, command);
        }
        Fail::new(class, message)
    }
}

/// The delay of a status's RetryInfo detail, in words ("1s", "250ms").
fn retry_delay(status: &tonic::Status) -> Option<String> {
    use tonic_types::StatusExt as _;
    let delay = status.get_details_retry_info()?.retry_delay?;
    Some(humantime::format_duration(delay).to_string())
}

/// An error with its causes, in one line (as `safewrite health` says it).
pub fn one_line(error: &dyn std::error::Error) -> String {
    crate::health::describe(error)
}

/// `message` with `field` (and the `[index]` that may follow it) named as `flag`.
fn name_flag(message: &str, field: &str, flag: &str) -> String {
    let mut named = String::with_capacity(message.len());
    let mut rest = message;
    while let Some(at) = rest.find(field) {
        named.push_str(&rest[..at]);
        named.push_str(flag);
        rest = &rest[at + field.len()..];
        if let Some(index) = rest.strip_prefix('[')
            && let Some(end) = index.find(']')
            && end > 0
            && index[..end].bytes().all(|b| b.is_ascii_digit())
        {
            rest = &index[end + 1..];
        }
    }
    named.push_str(rest);
    named
}

/// Stands for the flag of the command's change in [`FLAGS`].
const CHANGE: &str = "{change}";

/// The RPCs an answer may name, and the commands that call them.
const COMMANDS: &[(&str, &str)] = &[
    ("UpdateWithRetry", "safewrite update"),
    ("PatchStatus", "safewrite patch-status"),
    ("rpc Lead", "safewrite lead"),
];

/// The request fields an answer may name, and the flags that set them; a field that
/// contains another comes before it.
const FLAGS: &[(&str, &str)] = &[
    ("retry_policy.max_attempts", "--max-attempts"),
    ("preconditions.cel", "--if"),
    ("preconditions.uid", "--uid"),
    ("preconditions.resource_version", "--resource-version"),
    ("mutation.cel.expression", "--cel"),
    ("mutation.merge_patch.patch_json", "--merge"),
    ("mutation.json_patch.patch_json", "--json-patch"),
    ("mutation.apply.configuration_json", "--apply"),
    (
        "mutation.set_condition.conditions[0].type",
        "--set-condition TYPE",
    ),
    (
        "mutation.set_condition.conditions[0].status",
        "--set-condition STATUS",
    ),
    ("mutation.set_condition.conditions[0].reason", "--reason"),
    ("mutation.set_condition.conditions[0].message", "--message"),
    (
        "mutation.set_condition.conditions[0].observed_generation",
        "--observed-generation",
    ),
    ("mutation.set_condition.path", "--set-condition"),
    ("mutation.remove_condition.types", "--remove-condition"),
    ("mutation.remove_condition.path", "--remove-condition"),
    ("mutation.finalizer.finalizer", CHANGE),
    ("mutation.finalizer", CHANGE),
    (
        "mutation.owner_reference.owner.api_version",
        "{change} KIND",
    ),
    ("mutation.owner_reference.owner.kind", "{change} KIND"),
    ("mutation.owner_reference.owner.name", "{change} NAME"),
    ("mutation.owner_reference.owner", CHANGE),
    ("mutation.owner_reference", CHANGE),
    ("mutation.list_entry.path", "{change} PATH"),
    ("mutation.list_entry.keys", "{change} KEY"),
    ("mutation.list_entry.entry_json", "{change} JSON"),
    ("mutation.list_entry", CHANGE),
    ("options.create_if_missing_json", "--create-if-missing"),
    ("options.idempotency_key", "--idempotency-key"),
    ("options.field_manager", "--field-manager"),
    ("fence.lease_namespace", "--fence"),
    ("fence.lease_name", "--fence"),
    ("fence.epoch", "--fence-epoch"),
    ("propagation_policy", "--cascade"),
    ("target.api_version", "--api-version"),
    ("target.namespace", "--namespace"),
    ("target.name", "NAME"),
    ("target.kind", "KIND"),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_name_the_flags_and_commands() {
        let said = |message: &str, flag: &str| {
            Fail::status(&tonic::Status::invalid_argument(message), flag).message
        };
        assert_eq!(
            said(
                "invalid request: mutation.set_condition.path: Widget has a status subresource, and UpdateWithRetry never writes status: use PatchStatus; nothing was sent",
                "--set-condition"
            ),
            "invalid request: --set-condition: Widget has a status subresource, and safewrite update never writes status: use safewrite patch-status; nothing was sent"
        );
        assert_eq!(
            said(
                "mutation.set_condition.conditions[0].reason: required",
                "--set-condition"
            ),
            "--reason: required"
        );
        assert_eq!(
            said(
                "mutation.remove_condition.types[12]: bad",
                "--remove-condition"
            ),
            "--remove-condition: bad"
        );
        assert_eq!(
            said(
                "mutation.finalizer.finalizer: bad; mutation.finalizer: no",
                "--add-finalizer"
            ),
            "--add-finalizer: bad; --add-finalizer: no"
        );
        assert_eq!(
            said(
                "mutation.owner_reference.owner.kind: unknown",
                "--remove-owner"
            ),
            "--remove-owner KIND: unknown"
        );
        assert_eq!(
            said("mutation.list_entry.keys[1]: twice", "--upsert-entry"),
            "--upsert-entry KEY: twice"
        );
        // A shell sees no RetryInfo: its delay is said.
        let open = crate::service::respond::to_status(&safewrite_engine::WriteError {
            failure: safewrite_engine::Failure::CircuitOpen {
                retry_after: std::time::Duration::from_secs(2),
            },
            attempts: Vec::new(),
        });
        assert!(
            Fail::status(&open, "--merge")
                .message
                .ends_with("; retry after 2s"),
            "{}",
            Fail::status(&open, "--merge").message
        );
        // An index that is not one stays.
        assert_eq!(name_flag("a.b[x]", "a.b", "--f"), "--f[x]");
    }
}
