//! The flags of `safewrite update` and `safewrite patch-status`.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use safewrite_api::pb;

use super::fail::Fail;
use super::output::Output;
use crate::health::Address;

/// The help text after the flags: exit codes and examples.
const AFTER_HELP: &str = "\
Exit codes:
  0  written, created, unchanged (nothing to write), or gone: --remove-finalizer found the
     object missing, or removed the last finalizer of an object being deleted
  1  the --exec command exited non-zero: nothing was written
  2  invalid: a bad flag or value, KIND/NAME, JSON, CEL or object (INVALID_ARGUMENT)
  3  precondition failed: --if, --uid or a JSON Patch test is false, the change does not
     apply to the object, --add-finalizer on an object being deleted, --add-owner
     --controller when another owner is the controller, or the owner does not exist
     (FAILED_PRECONDITION); nothing was written
  4  conflict: still conflicting after --max-attempts, or --resource-version is not the
     object's (ABORTED); nothing was written
  5  not found: the object (without --create-if-missing) or its kind (NOT_FOUND)
  6  denied: RBAC or the sidecar's policy refused, or credentials/token are wrong
     (PERMISSION_DENIED, UNAUTHENTICATED)
  7  unavailable, or the outcome is unknown: API server or sidecar unreachable, deadline
     passed, overloaded (UNAVAILABLE, UNKNOWN, DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED...)

Modes: with SAFEWRITE_ADDRESS or --address the write goes through that sidecar (its
retry, classification, rate limit, breaker and policy); otherwise it runs the same engine
in this process against the API server of --kubeconfig, KUBECONFIG, ~/.kube/config or
the in-cluster service account.

Kinds: as kubectl takes them (configmap/x, cm/x, configmaps/x, ConfigMap/x,
deployments.apps/x, widgets.example.com/x), resolved through API discovery. Through a
sidecar without a kubeconfig, only the built-in kinds' names are known (configmaps/cm,
secrets, pods/po, services/svc, deployments/deploy, statefulsets/sts, jobs, cronjobs/cj,
...); name any other kind by its Kind with --api-version (e.g. Widget/x --api-version
example.com/v1, and -n '' when it is cluster-scoped).

Changes: exactly one per command. --set-condition and --remove-condition write
status.conditions (or --conditions-path): use patch-status for kinds with a status
subresource, update for kinds without one; --add/--remove-finalizer and
--add/--remove-owner write metadata: use update. An owner's KIND is resolved as the
object's (--owner-api-version for a Kind the built-in names do not know); its uid is read
by the write. --upsert-entry/--remove-entry take PATH[KEY=VALUE,...]=JSON: the list at
PATH, the entry whose KEY fields equal these strings (a bare KEY takes its value from
JSON, for keys that are not strings), and JSON, an object of the entry's other fields
(optional); values cannot hold , or ].

-o jsonpath=TEMPLATE supports a subset: text with {.field.path} and {.list[0].field}
(and {.metadata.labels['app.kubernetes.io/name']}); strings print bare, other values as
JSON, a missing field as nothing.

Examples:
  # Increment a counter with jq; conflicts re-read and re-run jq
  safewrite update cm/counter --exec 'jq \".data.n |= (tonumber + 1 | tostring)\"'

  # Scale up only while the Deployment is not paused
  safewrite update deployments.apps/web --if '!has(object.spec.paused) || !object.spec.paused' \\
      --cel '{\"spec\": {\"replicas\": object.spec.replicas + 1}}'

  # Create-or-update: create from the manifest when missing, then merge the change
  safewrite update cm/settings --create-if-missing settings.yaml --merge '{\"data\": {\"mode\": \"on\"}}'

  # Set a status field of a custom resource, printing the new resourceVersion
  safewrite patch-status widgets.example.com/w1 --merge '{\"status\": {\"ready\": true}}' \\
      -o jsonpath='{.metadata.resourceVersion}'

  # Set its Ready condition (lastTransitionTime moves only when the status does)
  safewrite patch-status widgets.example.com/w1 --set-condition Ready=True \\
      --reason Reconciled --message 'all replicas ready'

  # Release a finalizer; prints widget.example.com/w1 gone when that let it be deleted
  safewrite update widgets.example.com/w1 --remove-finalizer example.com/cleanup";

/// Options of `safewrite update` and `safewrite patch-status`.
#[derive(Debug, Clone, Args)]
#[command(after_help = AFTER_HELP)]
pub struct WriteArgs {
    /// The object, as kubectl names it: KIND/NAME (e.g. cm/counter, deployments.apps/web).
    #[arg(value_name = "KIND/NAME")]
    pub object: String,

    /// Namespace of the object [default: the kubeconfig context's, else "default"].
    #[arg(short = 'n', long)]
    pub namespace: Option<String>,

    /// apiVersion of the kind (e.g. apps/v1); needed for kinds named by Kind without
    /// discovery.
    #[arg(long)]
    pub api_version: Option<String>,

    #[command(flatten)]
    pub(crate) change: ChangeFlags,

    #[command(flatten)]
    pub(crate) change_options: ChangeOptions,

    /// Precondition: a CEL expression over `object` that must be true on the fresh object
    /// before each attempt (else exit 3, nothing written).
    #[arg(long = "if", value_name = "CEL")]
    pub precondition: Option<String>,

    /// Precondition: the object's metadata.uid must be this.
    #[arg(long)]
    pub uid: Option<String>,

    /// Strict compare-and-swap: the object must be at this resourceVersion (else exit 4).
    #[arg(long)]
    pub resource_version: Option<String>,

    /// Create the object from this JSON or YAML file (`-` for stdin) when it is missing;
    /// the change is applied to it first.
    #[arg(long, value_name = "FILE|-")]
    pub create_if_missing: Option<String>,

    /// Recorded on the object with the change, so that running the command again (after
    /// a lost answer, or a retried script) changes it at most once.
    #[arg(long)]
    pub idempotency_key: Option<String>,

    /// Send the write with dryRun=All: validated and admitted, not stored.
    #[arg(long)]
    pub dry_run: bool,

    /// Field manager recorded for the write [default: safewrite].
    #[arg(long)]
    pub field_manager: Option<String>,

    #[command(flatten)]
    pub(crate) fence: FenceArgs,

    /// How long the whole command may take (attempts, backoff and --exec runs included).
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    pub timeout: Duration,

    /// Attempts (the first included) before a conflict is given up [default: 50].
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub max_attempts: Option<u32>,

    /// Print the written object: json, yaml, name (e.g. configmap/x) or
    /// jsonpath=TEMPLATE. Without it, one line such as `configmap/x updated`. When
    /// --remove-finalizer leaves the object gone: the object as last written (the last
    /// finalizer's removal), or nothing when it was missing already (name: the name).
    #[arg(short = 'o', long, value_parser = Output::parse)]
    pub(crate) output: Option<Output>,

    #[command(flatten)]
    pub(crate) connect: ConnectArgs,
}

/// Where a command goes: a sidecar, else the API server of a kubeconfig (in-process).
#[derive(Debug, Clone, Default, Args)]
pub struct ConnectArgs {
    /// Go through the sidecar at this address (host:port, unix:///path) instead of
    /// in-process.
    #[arg(long, env = "SAFEWRITE_ADDRESS", value_parser = Address::parse)]
    pub address: Option<Address>,

    /// File holding the sidecar's shared token, sent as `authorization: Bearer`.
    #[arg(long, env = "SAFEWRITE_TOKEN_FILE")]
    pub token_file: Option<PathBuf>,

    /// Kubeconfig file [default: $KUBECONFIG, ~/.kube/config, then in-cluster].
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,

    /// Kubeconfig context to use instead of the current context.
    #[arg(long)]
    pub context: Option<String>,
}

/// The leadership a write or delete is made under (see `safewrite lead`).
#[derive(Debug, Clone, Default, Args)]
pub struct FenceArgs {
    /// Fence with this Lease: made only while leading under --fence-epoch, and refused
    /// (exit 3) when the object records a later epoch. Set by `safewrite lead` for its
    /// command.
    #[arg(long, env = "SAFEWRITE_LEASE", value_name = "NAMESPACE/NAME")]
    pub fence: Option<String>,

    /// The epoch of the leadership --fence names. Set by `safewrite lead`.
    #[arg(long, env = "SAFEWRITE_LEASE_EPOCH", value_name = "N")]
    pub fence_epoch: Option<u64>,

    /// Unfenced even inside `safewrite lead` (ignore --fence and its variables).
    #[arg(long)]
    pub no_fence: bool,
}

// === impl FenceArgs ===

impl FenceArgs {
    /// The fence of --fence and --fence-epoch (or their variables), none with --no-fence.
    ///
    /// # Errors
    /// Exit 2: a lease that is not NAMESPACE/NAME, or one of the two without the other.
    pub fn fence(&self) -> Result<Option<pb::Fence>, Fail> {
        if self.no_fence {
            return Ok(None);
        }
        match (&self.fence, self.fence_epoch) {
            (None, None) => Ok(None),
            (Some(lease), Some(epoch)) => {
                let Some((namespace, name)) = lease.split_once('/') else {
                    return Err(Fail::invalid(format!(
                        "--fence {lease:?}: expected NAMESPACE/NAME"
                    )));
                };
                Ok(Some(pb::Fence {
                    lease_namespace: namespace.to_string(),
                    lease_name: name.to_string(),
                    epoch,
                }))
            }
            (Some(_), None) => Err(Fail::invalid(
                "--fence needs --fence-epoch (SAFEWRITE_LEASE_EPOCH); or --no-fence",
            )),
            (None, Some(_)) => Err(Fail::invalid(
                "--fence-epoch needs --fence (SAFEWRITE_LEASE); or --no-fence",
            )),
        }
    }
}

/// The change: exactly one of these (checked when the command runs, to say so in one line).
#[derive(Debug, Clone, Args)]
#[group(multiple = false)]
pub struct ChangeFlags {
    /// A CEL expression over `object` giving a merge patch, e.g.
    /// '{"data": {"n": string(int(object.data.n) + 1)}}'.
    #[arg(long, value_name = "EXPR")]
    pub cel: Option<String>,

    /// A JSON merge patch (RFC 7386), e.g. '{"data": {"mode": "on"}}'.
    #[arg(long, value_name = "JSON")]
    pub merge: Option<String>,

    /// A JSON Patch (RFC 6902); its `test` operations are preconditions.
    #[arg(long, value_name = "JSON")]
    pub json_patch: Option<String>,

    /// Server-side apply of this JSON or YAML file (`-` for stdin), with --force-conflicts.
    #[arg(long, value_name = "FILE|-")]
    pub apply: Option<String>,

    /// Run CMD with `sh -c` on every attempt, the fresh object (JSON) on its stdin; its
    /// stdout (JSON) is the new object. Exiting non-zero aborts (exit 1, nothing
    /// written); printing the object unchanged writes nothing.
    #[arg(long, value_name = "CMD")]
    pub exec: Option<String>,

    /// Set one condition of status.conditions, as meta.SetStatusCondition: STATUS is
    /// True, False or Unknown; --reason is required, --message and --observed-generation
    /// optional. lastTransitionTime moves only when STATUS does.
    #[arg(long, value_name = "TYPE=STATUS")]
    pub set_condition: Option<String>,

    /// Remove the condition of this type from status.conditions (repeatable).
    #[arg(long, value_name = "TYPE")]
    pub remove_condition: Vec<String>,

    /// Add this finalizer to metadata.finalizers (refused, exit 3, while the object is
    /// being deleted).
    #[arg(long, value_name = "FINALIZER")]
    pub add_finalizer: Option<String>,

    /// Remove this finalizer. When the object is gone (already, or because this removed
    /// its last finalizer while it was being deleted) the command prints `KIND/NAME gone`
    /// and exits 0.
    #[arg(long, value_name = "FINALIZER")]
    pub remove_finalizer: Option<String>,

    /// Make the object KIND/NAME (in the object's namespace, or cluster-scoped) an owner
    /// in metadata.ownerReferences, with its uid as read now (a reference to the same API
    /// group, kind and name takes it in place); with --controller and
    /// --block-owner-deletion.
    #[arg(long, value_name = "KIND/NAME")]
    pub add_owner: Option<String>,

    /// Remove the owner reference to KIND/NAME (the first matched by API group, kind and
    /// name, as controllerutil.RemoveOwnerReference).
    #[arg(long, value_name = "KIND/NAME")]
    pub remove_owner: Option<String>,

    /// Upsert one entry of a list of objects keyed by some of their fields, e.g.
    /// 'status.parents[controllerName=example.com/gw]={"conditions": []}': the entry whose
    /// key fields equal these is merged with JSON (RFC 7386), else a new one is appended.
    /// KEY=VALUE sets a key to a string; a bare KEY takes its value from JSON.
    #[arg(long, value_name = "PATH[KEY=VALUE,...]=JSON")]
    pub upsert_entry: Option<String>,

    /// Remove the entry whose key fields equal these, e.g.
    /// 'status.parents[controllerName=example.com/gw]' (a bare KEY takes its value from
    /// an =JSON after the brackets).
    #[arg(long, value_name = "PATH[KEY=VALUE,...]")]
    pub remove_entry: Option<String>,
}

/// What some changes take besides their own value; each goes with the changes it names
/// (checked in `cli/change.rs`, to say so in one line).
#[derive(Debug, Clone, Default, Args)]
pub struct ChangeOptions {
    /// With --set-condition: the condition's reason, a CamelCase word (e.g. Reconciled).
    #[arg(long)]
    pub reason: Option<String>,

    /// With --set-condition: a human-readable message [default: empty].
    #[arg(long)]
    pub message: Option<String>,

    /// With --set-condition: the generation the condition was computed from [default:
    /// the object's metadata.generation as read on each attempt].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(i64).range(0..))]
    pub observed_generation: Option<i64>,

    /// With --set-condition or --remove-condition: where the conditions list is, as field
    /// names joined by dots [default: status.conditions].
    #[arg(long, value_name = "PATH")]
    pub conditions_path: Option<String>,

    /// With --add-owner: the owner is the object's managing controller (refused, exit 3,
    /// when another owner is).
    #[arg(long)]
    pub controller: bool,

    /// With --add-owner: the garbage collector keeps the owner until this object is
    /// deleted (foreground deletion).
    #[arg(long)]
    pub block_owner_deletion: bool,

    /// With --add-owner or --remove-owner: the apiVersion of the owner's kind; needed for
    /// kinds named by Kind without discovery, as --api-version is for the object.
    #[arg(long, value_name = "API_VERSION")]
    pub owner_api_version: Option<String>,
}
