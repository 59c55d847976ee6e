//! The allow-list of what callers may write through the sidecar: which groups and kinds,
//! in which namespaces, which subresource (`main`, `status`) and by which operation
//! (`update`, `patch-status`, `transact`, `create-if-missing`, `get`, `lead`, `delete`). It
//! is checked at the request boundary, on the validated [`WriteSpec`], before any request
//! is sent: a write it does not allow is refused with PERMISSION_DENIED (reason
//! `POLICY_DENIED`) naming what was denied and the flag that would allow it.
//!
//! Rules come from `--allow RULE` (repeatable) and from a `--policy FILE` (YAML or
//! JSON); a write is allowed when a rule allows it. The flag syntax is
//!
//! ```text
//! GROUP/KIND[:NAMESPACES[:SUBRESOURCES[:OPERATIONS]]]
//! ```
//!
//! - `GROUP/KIND`: `apps/Deployment`, `core/ConfigMap` (`core`, or `v1`, is the core
//!   group), `example.com/*` (every kind of a group), or `*` (every kind);
//! - `NAMESPACES`: a comma-separated list of namespaces, `team-*` prefixes, `-` for
//!   cluster-scoped objects, or `*` (the default: every namespace and cluster-scoped);
//! - `SUBRESOURCES`: `main`, `status`, or `*` (the default);
//! - `OPERATIONS`: `update` (UpdateWithRetry), `patch-status` (PatchStatus), `transact`
//!   (Transact), `create-if-missing` (creating a missing target, with update or
//!   transact), `get` (Get, reading the object back), `lead` (Lead, campaigning for a
//!   `coordination.k8s.io/Lease`), `delete` (Delete, on the main resource), or `*` (the
//!   default, every operation, `delete` included).
//!
//! Rules only allow, and add up: a write needs a rule matching its kind, namespace and
//! subresource that grants its operation, and, when it may create its target, one that
//! grants `create-if-missing` too (the same rule or another). A wildcard never matches a
//! Secret (`core/Secret`): Secrets are written only through a rule that names
//! `core/Secret`. With no rule at all the policy is the default, `*`: every kind but
//! Secrets. Any rule given replaces the default (keep it with `--allow '*'`).

mod file;
mod rule;

use std::path::Path;

pub use file::PolicyError;
pub use rule::{Operation, Rule, RuleError};
use rule::{group_kind, is_secret, subresource_name};

use safewrite_engine::{Subresource, WriteSpec};

/// What callers may write.
#[derive(Debug, Clone)]
pub struct AllowList {
    rules: Vec<Rule>,
    default: bool,
}

// === impl AllowList ===

impl Default for AllowList {
    /// The policy when none is given: every kind but Secrets.
    fn default() -> Self {
        AllowList {
            rules: vec![Rule::everything()],
            default: true,
        }
    }
}

/// A write the policy refused: what was asked, why no rule allows it, and the rule that
/// would.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denied {
    /// The operation no rule grants.
    pub operation: Operation,
    /// `group/kind` of the target, as rules write it (`core/Secret`).
    pub kind: String,
    /// The target's namespace, empty for a cluster-scoped object.
    pub namespace: String,
    /// The target's name.
    pub name: String,
    /// `main` or `status`.
    pub subresource: &'static str,
    /// Why no rule allows it, in a few words.
    pub why: String,
    /// The rule that would allow it, in the flag syntax.
    pub rule: String,
    /// The flags that would allow it, as they would be added to the command line.
    pub allow: String,
}

// === impl AllowList ===

impl AllowList {
    /// The policy of `rules` (from `--allow`) and of the file at `file` (`--policy`);
    /// the default policy when there are neither.
    ///
    /// # Errors
    /// A [`PolicyError`] when the file cannot be read or a rule in it does not parse.
    pub fn load(rules: &[Rule], file: Option<&Path>) -> Result<AllowList, PolicyError> {
        let mut all = rules.to_vec();
        if let Some(path) = file {
            all.extend(file::load(path)?);
        }
        if rules.is_empty() && file.is_none() {
            return Ok(AllowList::default());
        }
        Ok(AllowList {
            rules: all,
            default: false,
        })
    }

    /// Whether no policy was given (every kind but Secrets).
    pub fn is_default(&self) -> bool {
        self.default
    }

    /// The rules, in the order given.
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// Whether some rule allows writing Secrets (their data is then in results).
    pub fn allows_secrets(&self) -> bool {
        self.rules.iter().any(Rule::names_secrets)
    }

    /// Checks a validated write: `operation` on its target and subresource,
    /// `create-if-missing` too when it may create the target, and `lead` on the Lease of
    /// its fence when it has one (a fence reads that Lease, and names a leadership the
    /// caller could only have through rpc Lead: fences only on what the policy allows).
    ///
    /// # Errors
    /// [`Denied`] for the first operation no rule grants.
    pub fn check(&self, spec: &WriteSpec, operation: Operation) -> Result<(), Box<Denied>> {
        let target = &spec.target;
        let request = Asked {
            group: target.api_version.group(),
            kind: &target.kind,
            namespace: &target.namespace,
            name: &target.name,
            subresource: spec.subresource,
        };
        self.check_request(&request, operation)?;
        if spec.create_if_missing.is_some() {
            self.check_request(&request, Operation::CreateIfMissing)?;
        }
        if let Some(fence) = &spec.fence {
            self.check_lead(&fence.namespace, &fence.name)?;
        }
        Ok(())
    }

    /// Checks a campaign for the Lease `namespace/name` (`coordination.k8s.io/Lease`,
    /// the `lead` operation on its main resource).
    ///
    /// # Errors
    /// [`Denied`] when no rule grants it.
    pub fn check_lead(&self, namespace: &str, name: &str) -> Result<(), Box<Denied>> {
        let request = Asked {
            group: "coordination.k8s.io",
            kind: "Lease",
            namespace,
            name,
            subresource: Subresource::Main,
        };
        self.check_request(&request, Operation::Lead)
    }

    fn check_request(&self, request: &Asked<'_>, operation: Operation) -> Result<(), Box<Denied>> {
        let of_kind: Vec<&Rule> = self
            .rules
            .iter()
            .filter(|r| r.matches_kind(request.group, request.kind))
            .collect();
        let in_namespace: Vec<&Rule> = of_kind
            .iter()
            .copied()
            .filter(|r| r.matches_namespace(request.namespace))
            .collect();
        let on_subresource: Vec<&Rule> = in_namespace
            .iter()
            .copied()
            .filter(|r| r.matches_subresource(request.subresource))
            .collect();
        if on_subresource.iter().any(|r| r.grants(operation)) {
            return Ok(());
        }
        Err(Box::new(self.denied(
            request,
            operation,
            &of_kind,
            &in_namespace,
            &on_subresource,
        )))
    }

    fn denied(
        &self,
        request: &Asked<'_>,
        operation: Operation,
        of_kind: &[&Rule],
        in_namespace: &[&Rule],
        on_subresource: &[&Rule],
    ) -> Denied {
        let kind = group_kind(request.group, request.kind);
        let place = if request.namespace.is_empty() {
            "cluster-scoped".to_string()
        } else {
            format!("in namespace {}", request.namespace)
        };
        let subresource = subresource_name(request.subresource);
        let cite = |rules: &[&Rule]| {
            let mut cited: Vec<String> = rules
                .iter()
                .take(3)
                .map(|r| format!("'{r}' ({})", r.origin))
                .collect();
            if rules.len() > 3 {
                cited.push(format!("{} more", rules.len() - 3));
            }
            cited.join(", ")
        };
        let why = if of_kind.is_empty() {
            if is_secret(request.group, request.kind) {
                if self.default {
                    "Secrets are denied unless allowed explicitly: no policy was given, and the default allows every kind except Secrets".to_string()
                } else {
                    "no rule names core/Secret (wildcards never match Secrets)".to_string()
                }
            } else {
                format!("no rule allows {kind}")
            }
        } else if in_namespace.is_empty() {
            format!(
                "the rules for {kind}, {}, do not cover objects {place}",
                cite(of_kind)
            )
        } else if on_subresource.is_empty() {
            format!(
                "the rules for {kind} {place}, {}, do not cover the {subresource} subresource",
                cite(in_namespace)
            )
        } else {
            format!(
                "the rules for {kind} {place} ({subresource}), {}, do not grant {}",
                cite(on_subresource),
                operation.name()
            )
        };
        let namespace = if request.namespace.is_empty() {
            "-"
        } else {
            request.namespace
        };
        let rule = format!("{kind}:{namespace}:{subresource}:{}", operation.name());
        // The default policy is replaced by any rule given: keep it with `*`.
        let allow = if self.default {
            format!("--allow '*' --allow '{rule}'")
        } else {
            format!("--allow '{rule}'")
        };
        Denied {
            operation,
            kind,
            namespace: request.namespace.to_string(),
            name: request.name.to_string(),
            subresource,
            why,
            rule,
            allow,
        }
    }
}

/// What a write asks for, in the parts the policy looks at.
struct Asked<'a> {
    group: &'a str,
    kind: &'a str,
    namespace: &'a str,
    name: &'a str,
    subresource: Subresource,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lead_is_an_operation_on_leases_in_a_namespace() {
        let p = policy(&["coordination.k8s.io/Lease:team-a:main:lead"]);
        assert!(p.check_lead("team-a", "l").is_ok());
        assert!(p.check_lead("team-b", "l").is_err());
        let writes_only = policy(&["coordination.k8s.io/Lease:team-a:main:update"]);
        let denied = writes_only.check_lead("team-a", "l").unwrap_err();
        assert_eq!(denied.operation, Operation::Lead);
        assert!(
            policy(&[]).check_lead("any", "l").is_ok(),
            "the default allows it"
        );
    }

    #[test]
    fn a_fenced_write_needs_lead_on_its_lease() {
        use safewrite_api::target::{ApiVersion, FieldManager, Kind, Name, Namespace};
        use safewrite_engine::fence::Fence;
        use safewrite_engine::{Preconditions, RetryPolicy, Subresource, Target, WriteSpec};
        let fenced = |namespace: &str| WriteSpec {
            target: Target {
                api_version: ApiVersion::parse("v", "v1").unwrap(),
                kind: Kind::parse("k", "ConfigMap").unwrap(),
                namespace: Namespace::parse("n", "team-a").unwrap(),
                name: Name::parse("n", "o").unwrap(),
            },
            subresource: Subresource::Main,
            mutation: Some(safewrite_mutation::Mutation::MergePatch(serde_json::json!(
                {}
            ))),
            preconditions: Preconditions::default(),
            policy: RetryPolicy {
                max_attempts: 1,
                backoff: safewrite_api::backoff::Backoff {
                    initial: std::time::Duration::from_millis(10),
                    max: std::time::Duration::from_secs(1),
                },
            },
            field_manager: FieldManager::parse("f", "safewrite").unwrap(),
            dry_run: false,
            create_if_missing: None,
            idempotency_key: None,
            write_alone: false,
            fence: Some(Fence {
                namespace: Namespace::parse("f", namespace).unwrap(),
                name: Name::parse("f", "l").unwrap(),
                epoch: 1,
            }),
        };
        let p = policy(&[
            "core/ConfigMap:team-a:main:update,delete",
            "coordination.k8s.io/Lease:team-a:main:lead",
        ]);
        assert!(p.check(&fenced("team-a"), Operation::Update).is_ok());
        assert!(p.check(&fenced("team-a"), Operation::Delete).is_ok());
        let denied = p.check(&fenced("team-b"), Operation::Update).unwrap_err();
        assert_eq!(denied.operation, Operation::Lead);
        assert_eq!(
            (denied.kind.as_str(), denied.namespace.as_str()),
            ("coordination.k8s.io/Lease", "team-b")
        );
        let unfenced_only = policy(&["core/ConfigMap:team-a:main:update"]);
        assert!(
            unfenced_only
                .check(&fenced("team-a"), Operation::Update)
                .is_err()
        );
        assert!(policy(&[]).check(&fenced("any"), Operation::Update).is_ok());
    }

    #[test]
    fn delete_is_an_operation_rules_grant_or_not() {
        use Operation::Delete;
        use Subresource::Main;
        let p = policy(&["core/ConfigMap:team-a:main:update,delete"]);
        assert!(ask(&p, "", "ConfigMap", "team-a", Main, Delete).is_ok());
        let writes_only = policy(&["core/ConfigMap:team-a:main:update"]);
        let denied = ask(&writes_only, "", "ConfigMap", "team-a", Main, Delete).unwrap_err();
        assert_eq!(denied.operation, Operation::Delete);
        assert!(denied.allow.contains(":delete'"), "{}", denied.allow);
        assert!(ask(&policy(&[]), "", "ConfigMap", "any", Main, Delete).is_ok());
        assert!(
            ask(&policy(&[]), "", "Secret", "any", Main, Delete).is_err(),
            "a wildcard never deletes Secrets"
        );
    }

    fn policy(rules: &[&str]) -> AllowList {
        let rules: Vec<Rule> = rules.iter().map(|r| Rule::parse(r).unwrap()).collect();
        AllowList::load(&rules, None).unwrap()
    }

    fn ask(
        policy: &AllowList,
        api_group: &str,
        kind: &str,
        namespace: &str,
        subresource: Subresource,
        operation: Operation,
    ) -> Result<(), Box<Denied>> {
        policy.check_request(
            &Asked {
                group: api_group,
                kind,
                namespace,
                name: "x",
                subresource,
            },
            operation,
        )
    }

    use Operation::*;
    use Subresource::{Main, Status};

    #[test]
    fn the_default_allows_everything_but_secrets() {
        let p = AllowList::default();
        assert!(p.is_default() && !p.allows_secrets());
        assert!(ask(&p, "apps", "Deployment", "a", Main, Update).is_ok());
        assert!(ask(&p, "", "ConfigMap", "a", Status, PatchStatus).is_ok());
        assert!(ask(&p, "", "Namespace", "", Main, CreateIfMissing).is_ok());
        let denied = ask(&p, "", "Secret", "a", Main, Update).unwrap_err();
        assert_eq!(denied.kind, "core/Secret");
        assert_eq!(denied.rule, "core/Secret:a:main:update");
        assert_eq!(
            denied.allow,
            "--allow '*' --allow 'core/Secret:a:main:update'"
        );
        assert!(
            denied.why.contains("denied unless allowed explicitly"),
            "{}",
            denied.why
        );
        // A kind named Secret in another group is not a Kubernetes Secret.
        assert!(ask(&p, "example.com", "Secret", "a", Main, Update).is_ok());
    }

    #[test]
    fn wildcards_never_match_secrets_and_a_named_rule_does() {
        let p = policy(&["*", "core/*", "*/Secret"]);
        assert!(ask(&p, "", "Secret", "a", Main, Update).is_err());
        let p = policy(&["*", "core/Secret:vault:main:update"]);
        assert!(p.allows_secrets());
        assert!(ask(&p, "", "Secret", "vault", Main, Update).is_ok());
        assert!(ask(&p, "", "Secret", "other", Main, Update).is_err());
        assert!(ask(&p, "", "Secret", "vault", Main, Transact).is_err());
        let p = policy(&["v1/Secret"]);
        assert!(ask(&p, "", "Secret", "any", Status, Transact).is_ok());
        assert!(ask(&p, "", "ConfigMap", "any", Main, Update).is_err());
    }

    #[test]
    fn rules_match_kind_namespace_subresource_and_operation() {
        let p = policy(&[
            "apps/Deployment:ns1,ns2:main,status",
            "example.com/*:team-*:status:patch-status,transact",
            "core/Namespace:-:main:update",
        ]);
        assert!(ask(&p, "apps", "Deployment", "ns2", Status, PatchStatus).is_ok());
        assert!(ask(&p, "apps", "Deployment", "ns3", Main, Update).is_err());
        assert!(ask(&p, "apps", "StatefulSet", "ns1", Main, Update).is_err());
        assert!(ask(&p, "example.com", "Widget", "team-a", Status, Transact).is_ok());
        assert!(ask(&p, "example.com", "Widget", "team-a", Main, Update).is_err());
        assert!(ask(&p, "example.com", "Widget", "other", Status, Transact).is_err());
        assert!(ask(&p, "", "Namespace", "", Main, Update).is_ok());
        assert!(ask(&p, "", "Namespace", "", Main, CreateIfMissing).is_err());
        // `-` is cluster-scoped only; a prefix never matches cluster-scoped.
        assert!(ask(&p, "", "Namespace", "x", Main, Update).is_err());
    }

    #[test]
    fn a_denial_names_the_closest_rules_and_the_flag_that_allows_it() {
        let p = policy(&["apps/Deployment:ns1:main:update"]);
        let d = ask(&p, "apps", "Deployment", "ns2", Main, Update).unwrap_err();
        assert!(
            d.why.contains("do not cover objects in namespace ns2"),
            "{}",
            d.why
        );
        assert!(
            d.why
                .contains("'apps/Deployment:ns1:main:update' (--allow)"),
            "{}",
            d.why
        );
        assert_eq!(d.allow, "--allow 'apps/Deployment:ns2:main:update'");
        let d = ask(&p, "apps", "Deployment", "ns1", Status, PatchStatus).unwrap_err();
        assert!(d.why.contains("the status subresource"), "{}", d.why);
        let d = ask(&p, "apps", "Deployment", "ns1", Main, CreateIfMissing).unwrap_err();
        assert!(
            d.why.contains("do not grant create-if-missing"),
            "{}",
            d.why
        );
        let d = ask(&p, "", "Node", "", Main, Update).unwrap_err();
        assert_eq!(d.why, "no rule allows core/Node");
        assert_eq!(d.rule, "core/Node:-:main:update");
    }
}
