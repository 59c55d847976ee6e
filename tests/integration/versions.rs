//! The version matrix's own claims, against the API server the harness started: it is the
//! Kubernetes the matrix asked for (tests/matrix.sh sets `SAFEWRITE_KUBERNETES`; without it,
//! the default of tests/harness/versions.env), and each feature of docs/versions.md is
//! there from the minor the table says and absent below it.

use crate::support;

use k8s_openapi::api::core::v1::{ConfigMap, Pod, ServiceAccount};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use support::ControlPlane;

/// The matrix entry (Kubernetes version) this run is for, resolved as
/// tests/harness/binaries.sh resolves it.
fn expected_version() -> String {
    let env = std::fs::read_to_string(support::repo_root().join("tests/harness/versions.env"))
        .expect("read tests/harness/versions.env");
    let value = |key: &str| {
        env.lines()
            .find_map(|line| line.strip_prefix(&format!("{key}=")))
            .unwrap_or_else(|| panic!("{key} in tests/harness/versions.env"))
            .trim_matches('"')
            .to_string()
    };
    let Ok(wanted) = std::env::var("SAFEWRITE_KUBERNETES") else {
        return value("KUBERNETES_VERSION");
    };
    let wanted = wanted.trim_start_matches('v');
    value("KUBERNETES_MATRIX")
        .split_whitespace()
        .map(|entry| entry.split('=').next().expect("version=etcd"))
        .find(|version| {
            let version = version.trim_start_matches('v');
            version == wanted || version.starts_with(&format!("{wanted}."))
        })
        .unwrap_or_else(|| panic!("SAFEWRITE_KUBERNETES={wanted} is not in the matrix"))
        .to_string()
}

/// The minor of a version such as "v1.35.4".
fn minor(version: &str) -> u32 {
    version
        .split('.')
        .nth(1)
        .and_then(|m| m.parse().ok())
        .unwrap_or_else(|| panic!("a minor in {version:?}"))
}

#[tokio::test]
async fn the_api_server_is_the_version_the_matrix_asked_for() {
    let cp = ControlPlane::shared();
    let info = cp
        .admin_client()
        .await
        .apiserver_version()
        .await
        .expect("GET /version");
    assert_eq!(
        info.git_version,
        expected_version(),
        "the harness started another Kubernetes than the matrix entry: {info:?}"
    );
}

/// MutatingAdmissionPolicy `admissionregistration.k8s.io/v1` (deploy/kubernetes/injection)
/// is served by default from 1.36; below it, `safewrite inject` is the way (docs/versions.md).
#[tokio::test]
async fn mutating_admission_policy_v1_is_served_from_1_36() {
    let cp = ControlPlane::shared();
    let client = cp.admin_client().await;
    let served = client
        .list_api_group_resources("admissionregistration.k8s.io/v1")
        .await
        .expect("discovery of admissionregistration.k8s.io/v1")
        .resources
        .iter()
        .any(|r| r.name == "mutatingadmissionpolicies");
    let version = expected_version();
    assert_eq!(
        served,
        minor(&version) >= 36,
        "MutatingAdmissionPolicy v1 on {version}: docs/versions.md's row is wrong"
    );
}

/// The aggregated discovery document (`safewrite update` without `--api-version` reads it)
/// is served on every version of the matrix (1.30+).
#[tokio::test]
async fn aggregated_discovery_is_served() {
    let cp = ControlPlane::shared();
    let client = cp.admin_client().await;
    let request = http::Request::get("/apis")
        .header(
            http::header::ACCEPT,
            "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList",
        )
        .body(Vec::new())
        .expect("request");
    let text = client.request_text(request).await.expect("GET /apis");
    let list: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    assert_eq!(list["kind"], "APIGroupDiscoveryList", "{text:.300}");
}

/// A native sidecar (an init container with `restartPolicy: Always`, how the sidecar is
/// deployed and injected) is accepted by the API server on every version of the matrix.
#[tokio::test]
async fn native_sidecars_are_accepted() {
    let cp = ControlPlane::shared();
    let ns = cp.namespace("versions").await;
    let client = cp.admin_client().await;
    // No controller manager runs here to make the namespace's default ServiceAccount.
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), &ns);
    accounts
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "default"}})).expect("sa"),
        )
        .await
        .expect("create the default ServiceAccount");
    let pods: Api<Pod> = Api::namespaced(client, &ns);
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "with-sidecar"},
        "spec": {
            "automountServiceAccountToken": false,
            "initContainers": [{"name": "safewrite", "image": "example.invalid/safewrite:0",
                                "restartPolicy": "Always"}],
            "containers": [{"name": "controller", "image": "example.invalid/controller:0"}],
        }
    }))
    .expect("pod");
    let created = pods
        .create(&PostParams::default(), &pod)
        .await
        .expect("a pod with a native sidecar is accepted");
    let init = &created.spec.expect("spec").init_containers.expect("init")[0];
    assert_eq!(init.restart_policy.as_deref(), Some("Always"), "{init:?}");
}

/// resourceVersions are well formed and grow with each write as KEP-5504 defines (digit
/// strings without a leading zero; shorter is older, equal lengths compare lexically):
/// part of the API from 1.35, and what every version of the matrix does.
#[tokio::test]
async fn resource_versions_grow_as_kep_5504_compares_them() {
    let cp = ControlPlane::shared();
    let ns = cp.namespace("versions").await;
    let api: Api<ConfigMap> = Api::namespaced(cp.admin_client().await, &ns);
    let mut versions = Vec::new();
    for n in 0..3 {
        let patch = json!({"apiVersion": "v1", "kind": "ConfigMap",
                           "metadata": {"name": "rv"}, "data": {"n": n.to_string()}});
        let written = api
            .patch(
                "rv",
                &PatchParams::apply("versions-test"),
                &Patch::Apply(&patch),
            )
            .await
            .expect("apply");
        versions.push(written.metadata.resource_version.expect("resourceVersion"));
    }
    for version in &versions {
        assert!(
            !version.starts_with('0') && version.bytes().all(|b| b.is_ascii_digit()),
            "{version:?} is not a well-formed resourceVersion"
        );
    }
    for pair in versions.windows(2) {
        let (older, newer) = (&pair[0], &pair[1]);
        assert!(
            (older.len(), older) < (newer.len(), newer),
            "{older} then {newer}: not growing by KEP-5504's order"
        );
    }
}
