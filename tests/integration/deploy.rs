//! The deployment artefacts against the real API server and a real sidecar:
//!
//! - every object of deploy/kubernetes/*.yaml, of `kustomize build` of the base and of
//!   each overlay in deploy/kubernetes/kustomize/, and of `helm template` of
//!   deploy/helm/safewrite (default values and each ci/*-values.yaml) is submitted with
//!   server-side dry-run (`dryRun=All&fieldValidation=Strict`) into a namespace that
//!   enforces, warns and audits PodSecurity `restricted`, and must be admitted with no
//!   warning; each workload's pod template is also submitted as a Pod, where `enforce`
//!   applies (a Deployment itself only gets warnings), and a non-compliant pod is
//!   shown to be refused, so the check has teeth;
//! - the sidecar container is the same in the three forms;
//! - every Role grants exactly get, create and update on Leases (what `Lead` needs);
//! - promtool checks the alert rules and runs their unit tests;
//! - every metric the alert rules and the Grafana dashboard name is exported by a live
//!   sidecar.
//!
//! kustomize, helm and promtool come from `tests/harness/binaries.sh deploy` (built once
//! per machine from their Go modules, cached outside the checkout).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, PostParams};
use kube::core::GroupVersionKind;
use kube::discovery::Scope;
use serde_json::{Value, json};

use safewrite_api::pb;
use safewrite_api::pb::writer_service_client::WriterServiceClient;

use crate::support::{self, ControlPlane, Sidecar, repo_root};

/// The directory holding kustomize, helm and promtool (and the control plane's tools).
pub(crate) fn deploy_tools() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let out = Command::new("bash")
            .arg(repo_root().join("tests/harness/binaries.sh"))
            .arg("deploy")
            .stderr(Stdio::inherit())
            .output()
            .expect("run tests/harness/binaries.sh deploy");
        assert!(
            out.status.success(),
            "tests/harness/binaries.sh deploy failed"
        );
        let text = String::from_utf8(out.stdout).expect("utf-8 path");
        PathBuf::from(text.lines().last().expect("a path line").trim())
    })
    .clone()
}

/// Runs `tool args` from the repository root and returns its stdout; panics with its
/// stderr when it fails.
pub(crate) fn run(tool: &Path, args: &[&str]) -> String {
    let out = Command::new(tool)
        .args(args)
        .current_dir(repo_root())
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("run {}: {e}", tool.display()));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{} {args:?} failed ({}):\n{stdout}\n{}",
        tool.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// A pinned version from tests/harness/versions.env.
pub(crate) fn pinned(name: &str) -> String {
    let text = std::fs::read_to_string(repo_root().join("tests/harness/versions.env"))
        .expect("read versions.env");
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}=")))
        .unwrap_or_else(|| panic!("{name} in versions.env"))
        .trim()
        .to_string()
}

/// The files of `dir` whose names end with `suffix`, sorted.
fn files(dir: &Path, suffix: &str) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.to_string_lossy().ends_with(suffix))
        .collect();
    files.sort();
    files
}

fn relative(path: &Path) -> String {
    path.strip_prefix(repo_root())
        .unwrap_or(path)
        .display()
        .to_string()
}

/// Every rendered form of the deployment artefacts: (source, multi-document YAML).
fn rendered(tools: &Path, namespace: &str) -> Vec<(String, String)> {
    let root = repo_root();
    let kustomize = tools.join("kustomize");
    let helm = tools.join("helm");
    let mut sources = Vec::new();
    for file in files(&root.join("deploy/kubernetes"), ".yaml") {
        let text = std::fs::read_to_string(&file).expect("read manifest");
        sources.push((relative(&file), text));
    }
    let kustomizations = root.join("deploy/kubernetes/kustomize");
    let mut dirs = vec![kustomizations.join("base")];
    let mut overlays: Vec<PathBuf> = std::fs::read_dir(kustomizations.join("overlays"))
        .expect("read overlays")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.is_dir())
        .collect();
    overlays.sort();
    dirs.extend(overlays);
    for dir in dirs {
        let name = relative(&dir);
        sources.push((
            format!("kustomize build {name}"),
            run(&kustomize, &["build", &name]),
        ));
    }
    let chart = "deploy/helm/safewrite";
    let kube_version = pinned("KUBERNETES_VERSION");
    let mut values = vec![None];
    values.extend(
        files(&root.join(chart).join("ci"), "-values.yaml")
            .into_iter()
            .map(|f| Some(relative(&f))),
    );
    for values in values {
        let mut lint = vec!["lint", "--strict", chart];
        let mut template = vec![
            "template",
            "my-controller",
            chart,
            "--namespace",
            namespace,
            "--kube-version",
            &kube_version,
        ];
        if let Some(values) = &values {
            lint.extend(["--values", values.as_str()]);
            template.extend(["--values", values.as_str()]);
        }
        run(&helm, &lint);
        let source = match &values {
            Some(values) => format!("helm template {chart} --values {values}"),
            None => format!("helm template {chart}"),
        };
        sources.push((source, run(&helm, &template)));
    }
    sources
}

/// One object of a rendered source, as kustomize normalised it.
pub(crate) struct Object {
    pub(crate) api_version: String,
    pub(crate) kind: String,
    pub(crate) name: String,
    pub(crate) yaml: String,
}

/// Puts every object of `yaml` into `namespace` (through kustomize's namespace
/// transformer, which knows which kinds are namespaced and fixes RoleBinding subjects)
/// and splits the result into objects.
pub(crate) fn objects(kustomize: &Path, yaml: &str, namespace: &str) -> Vec<Object> {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(dir.path().join("objects.yaml"), yaml).expect("write objects");
    std::fs::write(
        dir.path().join("kustomization.yaml"),
        format!(
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n\
             namespace: {namespace}\nresources: [objects.yaml]\n"
        ),
    )
    .expect("write kustomization");
    let normalised = run(kustomize, &["build", dir.path().to_str().expect("utf-8")]);
    normalised
        .split("\n---\n")
        .filter(|doc| !doc.trim().is_empty())
        .map(|doc| {
            // kustomize writes keys sorted, top-level ones at column 0 and
            // metadata's fields two spaces in.
            let top = |key: &str| {
                doc.lines()
                    .find_map(|l| l.strip_prefix(&format!("{key}: ")))
                    .unwrap_or_else(|| panic!("no {key} in:\n{doc}"))
                    .trim()
                    .to_string()
            };
            let name = doc
                .lines()
                .skip_while(|l| *l != "metadata:")
                .skip(1)
                .take_while(|l| l.starts_with(' '))
                .find_map(|l| l.strip_prefix("  name: "))
                .unwrap_or_else(|| panic!("no metadata.name in:\n{doc}"))
                .trim()
                .to_string();
            Object {
                api_version: top("apiVersion"),
                kind: top("kind"),
                name,
                yaml: format!("{}\n", doc.trim_end()),
            }
        })
        .collect()
}

/// What the API server answered a create.
pub(crate) struct Answer {
    pub(crate) status: http::StatusCode,
    pub(crate) warnings: Vec<String>,
    pub(crate) body: Value,
}

/// Submits `object` (JSON; its apiVersion and kind say where) to `namespace`, for real or
/// as a server-side dry run, and returns the API server's answer.
pub(crate) async fn submit(
    client: &kube::Client,
    namespace: &str,
    object: &Value,
    dry_run: bool,
) -> Answer {
    create(
        client,
        namespace,
        object["apiVersion"].as_str().expect("apiVersion"),
        object["kind"].as_str().expect("kind"),
        "application/json",
        serde_json::to_vec(object).expect("JSON"),
        dry_run,
    )
    .await
}

/// POSTs `body` (YAML or JSON, as `content_type` says) to the collection of
/// `api_version`/`kind` in `namespace`; `dry_run` adds `dryRun=All`. Always with
/// `fieldValidation=Strict`: an unknown or duplicate field is an error, not a warning.
pub(crate) async fn create(
    client: &kube::Client,
    namespace: &str,
    api_version: &str,
    kind: &str,
    content_type: &str,
    body: Vec<u8>,
    dry_run: bool,
) -> Answer {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let gvk = GroupVersionKind::gvk(group, version, kind);
    let (resource, capabilities) = kube::discovery::pinned_kind(client, &gvk)
        .await
        .unwrap_or_else(|e| panic!("discover {api_version} {kind}: {e}"));
    let mut path = if group.is_empty() {
        format!("/api/{version}")
    } else {
        format!("/apis/{group}/{version}")
    };
    if matches!(capabilities.scope, Scope::Namespaced) {
        path.push_str(&format!("/namespaces/{namespace}"));
    }
    path.push_str(&format!("/{}?fieldValidation=Strict", resource.plural));
    if dry_run {
        path.push_str("&dryRun=All");
    }
    let request = http::Request::post(path)
        .header(http::header::CONTENT_TYPE, content_type)
        .header(http::header::ACCEPT, "application/json")
        .body(kube::client::Body::from(body))
        .expect("request");
    let response = client.send(request).await.expect("send to the API server");
    let status = response.status();
    let warnings = response
        .headers()
        .get_all("warning")
        .iter()
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        .collect();
    let bytes = response
        .into_body()
        .collect_bytes()
        .await
        .expect("read the answer");
    let body = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| json!({"raw": String::from_utf8_lossy(&bytes)}));
    Answer {
        status,
        warnings,
        body,
    }
}

/// A namespace labelled to enforce, warn about and audit PodSecurity `restricted`.
pub(crate) async fn restricted_namespace(cp: &ControlPlane) -> String {
    let ns = cp.namespace("deploy").await;
    let api: Api<Namespace> = Api::all(cp.admin_client().await);
    let mut namespace = api.get(&ns).await.expect("get namespace");
    let labels = namespace.metadata.labels.get_or_insert_with(BTreeMap::new);
    for mode in ["enforce", "warn", "audit"] {
        labels.insert(
            format!("pod-security.kubernetes.io/{mode}"),
            "restricted".into(),
        );
        labels.insert(
            format!("pod-security.kubernetes.io/{mode}-version"),
            "latest".into(),
        );
    }
    api.replace(&ns, &PostParams::default(), &namespace)
        .await
        .expect("label namespace");
    ns
}

/// A workload's pod template (from the API server's defaulted answer) as a Pod.
pub(crate) fn pod_of(name: &str, workload: &Value) -> Option<Value> {
    let template = workload.pointer("/spec/template")?;
    Some(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": format!("{name}-pod"),
            "labels": template.pointer("/metadata/labels").cloned().unwrap_or(json!({})),
        },
        "spec": template["spec"],
    }))
}

/// The safewrite sidecar of a workload's answer, without its image (which the forms
/// set differently on purpose).
fn sidecar_of(workload: &Value) -> Option<Value> {
    let mut sidecar = workload
        .pointer("/spec/template/spec/initContainers")?
        .as_array()?
        .iter()
        .find(|c| c["name"] == "safewrite")?
        .clone();
    sidecar.as_object_mut()?.remove("image");
    Some(sidecar)
}

/// The verbs a Role (the API server's answer) grants on `coordination.k8s.io` leases,
/// sorted, wildcards included as `*`.
fn lease_verbs(role: &Value) -> Vec<String> {
    let names = |rule: &Value, key: &str| -> Vec<String> {
        rule[key]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default()
    };
    let rules = role["rules"].as_array().cloned().unwrap_or_default();
    let mut verbs: Vec<String> = rules
        .iter()
        .filter(|rule| {
            let groups = names(rule, "apiGroups");
            let resources = names(rule, "resources");
            groups
                .iter()
                .any(|g| g == "coordination.k8s.io" || g == "*")
                && resources.iter().any(|r| r == "leases" || r == "*")
        })
        .flat_map(|rule| names(rule, "verbs"))
        .collect();
    verbs.sort();
    verbs.dedup();
    verbs
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn manifests_are_admitted_under_restricted_pod_security() {
    let tools = deploy_tools();
    let cp = ControlPlane::shared();
    let client = cp.admin_client().await;

    let mut report = Vec::new();
    let mut failures = Vec::new();
    let mut sidecars = Vec::new();
    let mut roles = Vec::new();
    // Each source goes into a namespace of its own, as a separate installation would.
    for (source, yaml) in rendered(&tools, "default") {
        let ns = restricted_namespace(cp).await;
        report.push(format!("{source} (namespace {ns}):"));
        let objects = objects(&tools.join("kustomize"), &yaml, &ns);
        assert!(!objects.is_empty(), "{source} rendered no object");
        let mut pods = Vec::new();
        for object in &objects {
            let what = format!("{}/{}", object.kind, object.name);
            let answer = create(
                &client,
                &ns,
                &object.api_version,
                &object.kind,
                "application/yaml",
                object.yaml.clone().into_bytes(),
                true,
            )
            .await;
            let admitted = answer.status.is_success();
            report.push(format!(
                "  {what}: {} ({}){}",
                if admitted { "admitted" } else { "REFUSED" },
                answer.status.as_u16(),
                if answer.warnings.is_empty() {
                    String::new()
                } else {
                    format!(", warnings: {}", answer.warnings.join(" | "))
                }
            ));
            if !admitted {
                failures.push(format!(
                    "{source}: {what} refused: {}",
                    answer.body["message"]
                ));
                continue;
            }
            if !answer.warnings.is_empty() {
                failures.push(format!(
                    "{source}: {what} warned: {}",
                    answer.warnings.join(" | ")
                ));
            }
            // The ServiceAccount must exist for its Pods to be admitted (the
            // ServiceAccount admission plugin looks it up): create it for real.
            if object.kind == "ServiceAccount" {
                let real = create(
                    &client,
                    &ns,
                    "v1",
                    "ServiceAccount",
                    "application/yaml",
                    object.yaml.clone().into_bytes(),
                    false,
                )
                .await;
                assert!(
                    real.status.is_success() || real.status == http::StatusCode::CONFLICT,
                    "create {what}: {}",
                    real.body
                );
            }
            if object.kind == "Role" {
                roles.push((source.clone(), lease_verbs(&answer.body)));
            }
            if let Some(pod) = pod_of(&object.name, &answer.body) {
                pods.push((format!("{what} as a Pod"), pod));
            }
            if object.kind == "Deployment"
                && let Some(sidecar) = sidecar_of(&answer.body)
            {
                sidecars.push((source.clone(), sidecar));
            }
        }
        for (what, pod) in pods {
            let answer = create(
                &client,
                &ns,
                "v1",
                "Pod",
                "application/json",
                serde_json::to_vec(&pod).expect("pod json"),
                true,
            )
            .await;
            let admitted = answer.status.is_success();
            report.push(format!(
                "  {what}: {} ({}){}",
                if admitted { "admitted" } else { "REFUSED" },
                answer.status.as_u16(),
                if answer.warnings.is_empty() {
                    String::new()
                } else {
                    format!(", warnings: {}", answer.warnings.join(" | "))
                }
            ));
            if !admitted {
                failures.push(format!(
                    "{source}: {what} refused: {}",
                    answer.body["message"]
                ));
            } else if !answer.warnings.is_empty() {
                failures.push(format!(
                    "{source}: {what} warned: {}",
                    answer.warnings.join(" | ")
                ));
            }
        }
    }
    println!("server-side dry-run, PodSecurity restricted (enforce, warn, audit):");
    for line in &report {
        println!("  {line}");
    }
    assert!(
        failures.is_empty(),
        "refusals or warnings:\n{}",
        failures.join("\n")
    );

    // Every Role lets the sidecar's Lead campaign do exactly what it does to a Lease
    // (src/lease/campaign.rs): read it, create it, replace it; no patch, delete, list.
    assert!(
        roles.len() >= 3,
        "sidecar.yaml, the kustomize base and the chart each have a Role: {roles:?}"
    );
    for (source, verbs) in &roles {
        assert_eq!(
            verbs,
            &["create", "get", "update"],
            "{source}'s Role grants these verbs on coordination.k8s.io leases"
        );
    }

    // Every form runs the same sidecar: sidecar.yaml, the kustomize base and the chart's
    // defaults (overlays and the chart's variants change settings on purpose).
    let reference = sidecars
        .iter()
        .find(|(s, _)| s == "deploy/kubernetes/sidecar.yaml")
        .expect("sidecar.yaml has the sidecar")
        .1
        .clone();
    for source in [
        "kustomize build deploy/kubernetes/kustomize/base",
        "helm template deploy/helm/safewrite",
    ] {
        let (_, sidecar) = sidecars
            .iter()
            .find(|(s, _)| s == source)
            .unwrap_or_else(|| panic!("{source} has no safewrite sidecar"));
        assert_eq!(
            sidecar, &reference,
            "{source}'s sidecar differs from deploy/kubernetes/sidecar.yaml's"
        );
    }
    assert!(
        reference["restartPolicy"] == "Always" && reference.get("startupProbe").is_some(),
        "the sidecar is native and has a startup probe: {reference}"
    );

    // The check has teeth: a pod without the restricted securityContext is refused
    // (enforce), and the same template in a Deployment draws a warning (warn).
    let ns = restricted_namespace(cp).await;
    let bare = json!({"name": "bare", "image": "example.invalid/bare:1"});
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "bare"},
        "spec": {"containers": [bare]}});
    let answer = create(
        &client,
        &ns,
        "v1",
        "Pod",
        "application/json",
        serde_json::to_vec(&pod).unwrap(),
        true,
    )
    .await;
    assert_eq!(
        answer.status,
        http::StatusCode::FORBIDDEN,
        "a non-compliant Pod must be refused: {}",
        answer.body
    );
    let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "bare"},
        "spec": {"selector": {"matchLabels": {"app": "bare"}}, "template": {
            "metadata": {"labels": {"app": "bare"}}, "spec": {"containers": [bare]}}}});
    let answer = create(
        &client,
        &ns,
        "apps/v1",
        "Deployment",
        "application/json",
        serde_json::to_vec(&deployment).unwrap(),
        true,
    )
    .await;
    assert!(
        answer.status.is_success() && answer.warnings.iter().any(|w| w.contains("PodSecurity")),
        "a non-compliant Deployment must be admitted with a PodSecurity warning: {} {:?}",
        answer.status,
        answer.warnings
    );
}

#[test]
fn alert_rules_pass_promtool() {
    let promtool = deploy_tools().join("promtool");
    let checked = run(
        &promtool,
        &[
            "check",
            "rules",
            "--lint-fatal",
            "deploy/monitoring/alerts.yaml",
        ],
    );
    println!("promtool check rules:\n{checked}");
    let tested = run(
        &promtool,
        &["test", "rules", "deploy/monitoring/alerts_test.yaml"],
    );
    println!("promtool test rules:\n{tested}");
}

/// The metric names (as PromQL sees them: `_total`, `_bucket`, ...) a /metrics text
/// exports, from its samples and from its `# TYPE` lines (a family is typed before its
/// first sample exists).
fn exported_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut parts = rest.split_whitespace();
            let (Some(name), Some(kind)) = (parts.next(), parts.next()) else {
                continue;
            };
            let suffixes: &[&str] = match kind {
                "counter" => &["_total", "_created"],
                "histogram" | "gaugehistogram" => &["_bucket", "_sum", "_count", "_created"],
                "summary" => &["", "_sum", "_count", "_created"],
                "info" => &["_info"],
                _ => &[""],
            };
            for suffix in suffixes {
                names.insert(format!("{name}{suffix}"));
            }
        } else if !line.starts_with('#')
            && let Some(name) = line.split(['{', ' ']).next().filter(|n| !n.is_empty())
        {
            names.insert(name.to_string());
        }
    }
    names
}

/// The metric names `text` uses: every `safewrite_*` or `process_*` identifier.
fn used_names(text: &str) -> BTreeSet<String> {
    let metric = regex::Regex::new(r"\b(?:safewrite|process)_[a-zA-Z0-9_]+").unwrap();
    metric
        .find_iter(text)
        .map(|m| m.as_str().to_string())
        .collect()
}

/// Every string of the dashboard's queries: targets' `expr` and variables' `query`.
fn dashboard_queries(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (key, value) in map {
                match (key.as_str(), value) {
                    ("expr" | "query" | "definition", Value::String(s)) => out.push(s.clone()),
                    _ => dashboard_queries(value, out),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| dashboard_queries(v, out)),
        _ => {}
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn monitoring_uses_only_exported_metrics() {
    let cp = ControlPlane::shared();
    let ns = cp.namespace("deploy-metrics").await;
    let api: Api<ConfigMap> = Api::namespaced(cp.admin_client().await, &ns);
    let cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "n"}, "data": {"n": "0"}})).unwrap();
    api.create(&PostParams::default(), &cm).await.unwrap();
    let sidecar = Sidecar::start(&["--kubeconfig", cp.admin_kubeconfig().to_str().unwrap()]);
    // One write, so that the labelled families have samples too.
    let mut client = WriterServiceClient::new(sidecar.channel().await);
    let result = client
        .update_with_retry(support::keyed_increment(&ns, "n", None))
        .await
        .expect("one write")
        .into_inner()
        .result
        .expect("a result");
    assert_eq!(result.outcome(), pb::Outcome::Updated);
    // And one campaign, for the leadership families.
    let mut campaign = client
        .lead(pb::LeadRequest {
            namespace: ns.clone(),
            name: "metrics".into(),
            ..Default::default()
        })
        .await
        .expect("a campaign")
        .into_inner();
    let first = campaign
        .message()
        .await
        .expect("an event")
        .expect("an event");
    assert_eq!(first.state(), pb::LeadState::Leading);
    let mut exported = exported_names(&sidecar.metrics());

    // A family without samples is not rendered at all: the breaker's transitions appear
    // once it has changed state. A second sidecar whose API server refuses connections
    // opens its breaker on the first write's failed requests.
    let dir = tempfile::tempdir().expect("temp dir");
    let refused = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let kubeconfig = dir.path().join("refused.kubeconfig");
    let text = std::fs::read_to_string(cp.admin_kubeconfig())
        .expect("kubeconfig")
        .replace(cp.server(), &format!("https://127.0.0.1:{refused}"));
    std::fs::write(&kubeconfig, text).expect("write kubeconfig");
    let unreachable = Sidecar::start(&[
        "--kubeconfig",
        kubeconfig.to_str().unwrap(),
        "--breaker-failures",
        "2",
    ]);
    let mut client = WriterServiceClient::new(unreachable.channel().await);
    let mut text = String::new();
    for _ in 0..5 {
        let mut request = tonic::Request::new(support::keyed_increment(&ns, "n", None));
        request.set_timeout(std::time::Duration::from_secs(3));
        let answer = client.update_with_retry(request).await;
        assert!(answer.is_err(), "a write without an API server succeeded");
        text = unreachable.metrics();
        if text.contains("safewrite_breaker_transitions_total{") {
            break;
        }
    }
    assert!(
        text.contains("safewrite_breaker_transitions_total{"),
        "the breaker of a sidecar with an unreachable API server never changed state:\n{text}"
    );
    exported.extend(exported_names(&text));

    let root = repo_root();
    let alerts = std::fs::read_to_string(root.join("deploy/monitoring/alerts.yaml")).unwrap();
    let dashboard: Value = serde_json::from_str(
        &std::fs::read_to_string(root.join("deploy/monitoring/dashboard.json")).unwrap(),
    )
    .expect("dashboard.json is JSON");
    let mut queries = Vec::new();
    dashboard_queries(&dashboard, &mut queries);
    assert!(!queries.is_empty(), "the dashboard has no query");
    for (file, used) in [
        ("deploy/monitoring/alerts.yaml", used_names(&alerts)),
        (
            "deploy/monitoring/dashboard.json",
            used_names(&queries.join("\n")),
        ),
    ] {
        assert!(!used.is_empty(), "{file} names no metric");
        let missing: Vec<_> = used.difference(&exported).collect();
        println!("{file} uses {} metrics: {used:?}", used.len());
        assert!(
            missing.is_empty(),
            "{file} uses metrics the sidecar does not export: {missing:?}\nexported: {exported:?}"
        );
    }
}
