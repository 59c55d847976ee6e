//! Kinds as kubectl users type them: `configmap/x`, `cm/x`, `configmaps/x`, `ConfigMap/x`,
//! `deployments.apps/x`, `widgets.example.com/x` (plural, singular, short name or Kind,
//! with an optional `.group`), resolved to apiVersion + Kind + scope through API
//! discovery (the aggregated discovery document, whose resources carry their short
//! names), or without API access through [`BUILT_IN`], the built-in kinds' names.

use serde_json::Value;

use safewrite_api::deadline::AnswerBy;
use safewrite_client::{ApiClient, apiserver};

use super::fail::Fail;

/// What the command line names: the resource part of `KIND/NAME`, split at its first dot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Typed {
    /// Plural, singular, short name or Kind, as typed.
    pub resource: String,
    /// The group after the first dot, if any (`apps` of `deployments.apps`).
    pub group: Option<String>,
    /// The object's name.
    pub name: String,
}

/// A kind resolved to what a write request names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kind {
    /// `v1`, `apps/v1`, ...
    pub api_version: String,
    /// `ConfigMap`, `Deployment`, ...
    pub kind: String,
    /// Namespaced (`Some(true)`), cluster-scoped (`Some(false)`), or not known (a Kind
    /// given with --api-version and found in no table): the namespace flag decides.
    pub namespaced: Option<bool>,
    /// What `-o name` prints before the slash: `configmap`, `deployment.apps`.
    pub display: String,
}

/// Parses `KIND/NAME`.
///
/// # Errors
/// An invalid-input failure saying what the form is.
pub fn parse(text: &str) -> Result<Typed, Fail> {
    let bad = || {
        Fail::invalid(format!(
            "{text:?} is not KIND/NAME: name the object as kubectl does, e.g. configmap/my-config, cm/my-config or deployments.apps/web"
        ))
    };
    let (resource, name) = text.split_once('/').ok_or_else(bad)?;
    if resource.is_empty() || name.is_empty() || name.contains('/') {
        return Err(bad());
    }
    let (resource, group) = match resource.split_once('.') {
        Some((resource, group)) if !group.is_empty() => (resource, Some(group.to_string())),
        Some(_) => return Err(bad()),
        None => (resource, None),
    };
    Ok(Typed {
        resource: resource.to_string(),
        group,
        name: name.to_string(),
    })
}

/// One built-in kind: Kind, plural, short names, apiVersion, namespaced.
type BuiltIn = (
    &'static str,
    &'static str,
    &'static [&'static str],
    &'static str,
    bool,
);

/// The built-in kinds safewrite knows without asking the API server (sidecar mode without
/// a kubeconfig). Any other kind needs its Kind and --api-version, or API access.
pub const BUILT_IN: &[BuiltIn] = &[
    ("ConfigMap", "configmaps", &["cm"], "v1", true),
    ("Secret", "secrets", &[], "v1", true),
    ("Pod", "pods", &["po"], "v1", true),
    ("Service", "services", &["svc"], "v1", true),
    ("ServiceAccount", "serviceaccounts", &["sa"], "v1", true),
    ("Namespace", "namespaces", &["ns"], "v1", false),
    ("Node", "nodes", &["no"], "v1", false),
    (
        "PersistentVolumeClaim",
        "persistentvolumeclaims",
        &["pvc"],
        "v1",
        true,
    ),
    (
        "PersistentVolume",
        "persistentvolumes",
        &["pv"],
        "v1",
        false,
    ),
    ("Endpoints", "endpoints", &["ep"], "v1", true),
    ("Event", "events", &["ev"], "v1", true),
    ("LimitRange", "limitranges", &["limits"], "v1", true),
    ("ResourceQuota", "resourcequotas", &["quota"], "v1", true),
    (
        "ReplicationController",
        "replicationcontrollers",
        &["rc"],
        "v1",
        true,
    ),
    ("Deployment", "deployments", &["deploy"], "apps/v1", true),
    ("ReplicaSet", "replicasets", &["rs"], "apps/v1", true),
    ("StatefulSet", "statefulsets", &["sts"], "apps/v1", true),
    ("DaemonSet", "daemonsets", &["ds"], "apps/v1", true),
    ("Job", "jobs", &[], "batch/v1", true),
    ("CronJob", "cronjobs", &["cj"], "batch/v1", true),
    (
        "Ingress",
        "ingresses",
        &["ing"],
        "networking.k8s.io/v1",
        true,
    ),
    (
        "NetworkPolicy",
        "networkpolicies",
        &["netpol"],
        "networking.k8s.io/v1",
        true,
    ),
    (
        "PodDisruptionBudget",
        "poddisruptionbudgets",
        &["pdb"],
        "policy/v1",
        true,
    ),
    (
        "HorizontalPodAutoscaler",
        "horizontalpodautoscalers",
        &["hpa"],
        "autoscaling/v2",
        true,
    ),
    ("Role", "roles", &[], "rbac.authorization.k8s.io/v1", true),
    (
        "RoleBinding",
        "rolebindings",
        &[],
        "rbac.authorization.k8s.io/v1",
        true,
    ),
    (
        "ClusterRole",
        "clusterroles",
        &[],
        "rbac.authorization.k8s.io/v1",
        false,
    ),
    (
        "ClusterRoleBinding",
        "clusterrolebindings",
        &[],
        "rbac.authorization.k8s.io/v1",
        false,
    ),
    (
        "StorageClass",
        "storageclasses",
        &["sc"],
        "storage.k8s.io/v1",
        false,
    ),
    ("Lease", "leases", &[], "coordination.k8s.io/v1", true),
    (
        "PriorityClass",
        "priorityclasses",
        &["pc"],
        "scheduling.k8s.io/v1",
        false,
    ),
    (
        "CustomResourceDefinition",
        "customresourcedefinitions",
        &["crd", "crds"],
        "apiextensions.k8s.io/v1",
        false,
    ),
];

/// The group of an apiVersion (`""` for the core group).
fn group_of(api_version: &str) -> &str {
    api_version.rsplit_once('/').map_or("", |(group, _)| group)
}

fn display(kind: &str, group: &str) -> String {
    match group {
        "" => kind.to_ascii_lowercase(),
        group => format!("{}.{group}", kind.to_ascii_lowercase()),
    }
}

/// Whether `typed` names a resource with these names (case-insensitive, as kubectl).
fn names(typed: &str, kind: &str, plural: &str, singular: &str, short: &[&str]) -> bool {
    let typed = typed.to_ascii_lowercase();
    typed == plural
        || typed == singular
        || typed == kind.to_ascii_lowercase()
        || short.iter().any(|s| *s == typed)
}

/// Resolves `typed` from [`BUILT_IN`], or, with `api_version`, takes it as a Kind of that
/// apiVersion; `version_flag` is the flag that gives it (for the message).
///
/// # Errors
/// Invalid input saying how to name a kind the table lacks.
pub fn offline(typed: &Typed, api_version: Option<&str>, version_flag: &str) -> Result<Kind, Fail> {
    for (kind, plural, short, version, namespaced) in BUILT_IN {
        let group = group_of(version);
        let group_ok = typed.group.as_deref().is_none_or(|g| g == group);
        let version_ok = api_version.is_none_or(|v| group_of(v) == group);
        if group_ok
            && version_ok
            && names(
                &typed.resource,
                kind,
                plural,
                &kind.to_ascii_lowercase(),
                short,
            )
        {
            return Ok(Kind {
                api_version: api_version.unwrap_or(version).to_string(),
                kind: kind.to_string(),
                namespaced: Some(*namespaced),
                display: display(kind, group),
            });
        }
    }
    match api_version {
        Some(v) if typed.resource.starts_with(|c: char| c.is_ascii_uppercase()) => Ok(Kind {
            api_version: v.to_string(),
            kind: typed.resource.clone(),
            namespaced: None,
            display: display(&typed.resource, group_of(v)),
        }),
        _ => Err(Fail::invalid(format!(
            "cannot resolve {:?} without API discovery: name the Kind (e.g. Widget/x) with {version_flag}, or give a kubeconfig",
            typed.resource
        ))),
    }
}

/// Accept header of the aggregated discovery document (Kubernetes 1.30+).
const AGGREGATED: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList";

/// Resolves `typed` through API discovery: the core group first (one request for the
/// kinds most scripts write), then every other group, as kubectl does.
///
/// # Errors
/// Not found for a kind no group serves; the API server's refusal or silence otherwise.
pub async fn discover(
    client: &ApiClient,
    typed: &Typed,
    api_version: Option<&str>,
) -> Result<Kind, Fail> {
    let wanted_group = match (api_version, typed.group.as_deref()) {
        (Some(v), _) => Some(group_of(v).to_string()),
        (None, group) => group.map(str::to_string),
    };
    let roots: &[&str] = match wanted_group.as_deref() {
        Some("") => &["/api"],
        Some(_) => &["/apis"],
        None => &["/api", "/apis"],
    };
    for root in roots {
        let list = fetch(client, root).await?;
        if let Some(found) = find(&list, typed, wanted_group.as_deref(), api_version) {
            return Ok(found);
        }
    }
    Err(Fail::not_found(format!(
        "the API server serves no resource {:?}{}: check the spelling (kubectl api-resources lists them) or install its CRD",
        typed.resource,
        wanted_group
            .map(|g| format!(" in group {g:?}"))
            .unwrap_or_default()
    )))
}

async fn fetch(client: &ApiClient, root: &str) -> Result<Value, Fail> {
    let request = http::Request::get(root)
        .header(http::header::ACCEPT, AGGREGATED)
        .body(Vec::new())
        .map_err(|e| Fail::invalid(e.to_string()))?;
    let answer = apiserver::send(client, request, None, AnswerBy::NONE)
        .await
        .map_err(|e| Fail::unavailable(format!("API discovery ({root}) failed: {e}")))?;
    if answer.code >= 300 {
        let message = format!(
            "API discovery ({root}) failed: HTTP {}: {}",
            answer.code,
            answer.message()
        );
        return Err(match answer.code {
            401 | 403 => Fail::denied(message),
            _ => Fail::unavailable(message),
        });
    }
    let list: Value = answer
        .object()
        .map_err(|e| Fail::unavailable(format!("API discovery ({root}): {e}")))?;
    if list["kind"] != "APIGroupDiscoveryList" {
        return Err(Fail::unavailable(format!(
            "the API server does not serve aggregated discovery at {root} (Kubernetes 1.30+): name the Kind with --api-version instead"
        )));
    }
    Ok(list)
}

/// The first resource of an aggregated discovery list that `typed` names.
fn find(
    list: &Value,
    typed: &Typed,
    group: Option<&str>,
    api_version: Option<&str>,
) -> Option<Kind> {
    let empty = Vec::new();
    for item in list["items"].as_array().unwrap_or(&empty) {
        let group_name = item["metadata"]["name"].as_str().unwrap_or("");
        if group.is_some_and(|g| g != group_name) {
            continue;
        }
        // Versions are listed in order of preference: the first that has it wins.
        for version in item["versions"].as_array().unwrap_or(&empty) {
            let version_name = version["version"].as_str().unwrap_or("");
            let gv = match group_name {
                "" => version_name.to_string(),
                g => format!("{g}/{version_name}"),
            };
            if api_version.is_some_and(|v| v != gv) {
                continue;
            }
            for resource in version["resources"].as_array().unwrap_or(&empty) {
                let plural = resource["resource"].as_str().unwrap_or("");
                let kind = resource["responseKind"]["kind"].as_str().unwrap_or("");
                let singular = resource["singularResource"].as_str().unwrap_or("");
                let short: Vec<&str> = resource["shortNames"]
                    .as_array()
                    .map(|s| s.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                if kind.is_empty() || !names(&typed.resource, kind, plural, singular, &short) {
                    continue;
                }
                return Some(Kind {
                    api_version: gv,
                    kind: kind.to_string(),
                    namespaced: Some(resource["scope"] == "Namespaced"),
                    display: display(kind, group_name),
                });
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn typed(text: &str) -> Typed {
        parse(text).unwrap()
    }

    #[test]
    fn kubectl_forms_parse() {
        assert_eq!(
            typed("deployments.apps/web"),
            Typed {
                resource: "deployments".into(),
                group: Some("apps".into()),
                name: "web".into()
            }
        );
        assert_eq!(
            typed("widgets.example.com/x").group.as_deref(),
            Some("example.com")
        );
        for bad in ["cm", "cm/", "/x", "cm/x/y", "cm./x"] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_table_knows_short_names_plurals_and_kinds() {
        for text in ["cm/x", "configmaps/x", "configmap/x", "ConfigMap/x"] {
            let kind = offline(&typed(text), None, "--api-version").unwrap();
            assert_eq!(
                (kind.api_version.as_str(), kind.kind.as_str()),
                ("v1", "ConfigMap")
            );
            assert_eq!(kind.display, "configmap");
        }
        let deploy = offline(&typed("deploy.apps/x"), None, "--api-version").unwrap();
        assert_eq!(deploy.api_version, "apps/v1");
        assert_eq!(deploy.display, "deployment.apps");
        assert_eq!(
            offline(&typed("ns/x"), None, "--api-version")
                .unwrap()
                .namespaced,
            Some(false)
        );
        // A group the table's kind is not in does not match it.
        assert!(offline(&typed("cm.example.com/x"), None, "--api-version").is_err());
        // Any other kind: its Kind with --api-version.
        let widget = offline(&typed("Widget/x"), Some("example.com/v1"), "--api-version").unwrap();
        assert_eq!((widget.kind.as_str(), widget.namespaced), ("Widget", None));
        assert!(offline(&typed("widgets/x"), Some("example.com/v1"), "--api-version").is_err());
        assert!(offline(&typed("Widget/x"), None, "--api-version").is_err());
    }

    #[test]
    fn discovery_matches_short_names_in_preferred_order() {
        let list = json!({"kind": "APIGroupDiscoveryList", "items": [
            {"metadata": {"name": "example.com"}, "versions": [
                {"version": "v2", "resources": [{"resource": "widgets", "singularResource": "widget",
                    "shortNames": ["wd"], "scope": "Cluster", "responseKind": {"kind": "Widget"}}]},
                {"version": "v1", "resources": [{"resource": "widgets", "singularResource": "widget",
                    "scope": "Cluster", "responseKind": {"kind": "Widget"}}]}
            ]}
        ]});
        let found = find(&list, &typed("wd/x"), None, None).unwrap();
        assert_eq!(found.api_version, "example.com/v2");
        assert_eq!(found.namespaced, Some(false));
        assert_eq!(found.display, "widget.example.com");
        let pinned = find(&list, &typed("widget/x"), None, Some("example.com/v1")).unwrap();
        assert_eq!(pinned.api_version, "example.com/v1");
        assert!(find(&list, &typed("wd.other.io/x"), Some("other.io"), None).is_none());
        assert!(find(&list, &typed("gadgets/x"), None, None).is_none());
    }
}
