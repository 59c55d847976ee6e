//! Injection against the real API server:
//!
//! - deploy/kubernetes/injection/policy.yaml (a MutatingAdmissionPolicy and its
//!   bindings) is created on a control plane of its own (it is cluster-wide); then, with
//!   server-side dry-run into namespaces that enforce PodSecurity `restricted`: Pods that
//!   opted in (by their label or their namespace's), a Deployment's and a Job's pod
//!   templates as Pods, come out with the sidecar and are admitted; Pods that did not opt
//!   in, or opted out, come out untouched; an already injected Pod comes out unchanged;
//!   and a Pod injected by `safewrite inject` (the library) is the very Pod the policy
//!   makes, with and without the annotations that tune it;
//! - `safewrite inject` (the binary) over the Helm chart's and kustomize's rendered
//!   example workloads, with their hand-written sidecar taken out, puts back that same
//!   sidecar, and every object it writes is admitted under `restricted` with no warning;
//!   over the renderings as they are, it changes nothing.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

use safewrite::inject;

use crate::deploy::{
    Answer, create, deploy_tools, objects, pinned, pod_of, restricted_namespace, run, submit,
};
use crate::support::{ControlPlane, repo_root};

const POLICY: &str = "deploy/kubernetes/injection/policy.yaml";

/// The documents of a YAML text, empty ones dropped.
fn documents(yaml: &str) -> Vec<Value> {
    serde_saphyr::from_multiple::<Value>(yaml)
        .expect("YAML")
        .into_iter()
        .filter(|d| !d.is_null())
        .collect()
}

/// A container admitted under PodSecurity `restricted`.
fn app(name: &str) -> Value {
    json!({"name": name, "image": format!("example.invalid/{name}:1"),
        "securityContext": {"runAsNonRoot": true, "runAsUser": 65532,
            "allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"}}})
}

fn pod(name: &str, labels: Value, annotations: Value, spec: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": labels, "annotations": annotations},
        "spec": spec})
}

/// A dry-run create of `object` in `namespace`.
async fn dry_run(client: &kube::Client, namespace: &str, object: &Value) -> Answer {
    submit(client, namespace, object, true).await
}

/// Panics unless the answer admits the object with no warning.
fn admitted(what: &str, answer: &Answer) {
    assert!(
        answer.status.is_success() && answer.warnings.is_empty(),
        "{what}: {} {:?} {}",
        answer.status,
        answer.warnings,
        answer.body
    );
}

/// The names of a pod spec's init containers.
fn init_names(spec: &Value) -> Vec<String> {
    spec["initContainers"]
        .as_array()
        .map(|l| {
            l.iter()
                .map(|c| c["name"].as_str().unwrap_or("").to_string())
                .collect()
        })
        .unwrap_or_default()
}

fn has_sidecar(spec: &Value) -> bool {
    init_names(spec).iter().any(|n| n == "safewrite")
}

/// A pod spec without what the ServiceAccount admission plugin adds (the
/// kube-api-access-* volume, with a random name, and its mounts), whose position
/// depends on which mutation came first.
fn without_service_account_token(spec: &Value) -> Value {
    let mut spec = spec.clone();
    let generated = |v: &Value| {
        v["name"]
            .as_str()
            .is_some_and(|n| n.starts_with("kube-api-access-"))
    };
    let strip = |object: &mut Value, key: &str| {
        if let Some(list) = object.get_mut(key).and_then(Value::as_array_mut) {
            list.retain(|v| !generated(v));
            if list.is_empty() {
                object.as_object_mut().expect("object").remove(key);
            }
        }
    };
    strip(&mut spec, "volumes");
    for key in ["containers", "initContainers"] {
        if let Some(list) = spec.get_mut(key).and_then(Value::as_array_mut) {
            for container in list {
                strip(container, "volumeMounts");
            }
        }
    }
    spec
}

/// Labels a namespace.
async fn label(cp: &ControlPlane, namespace: &str, key: &str, value: &str) {
    let api: Api<Namespace> = Api::all(cp.admin_client().await);
    let mut ns = api.get(namespace).await.expect("get namespace");
    ns.metadata
        .labels
        .get_or_insert_with(BTreeMap::new)
        .insert(key.into(), value.into());
    api.replace(namespace, &PostParams::default(), &ns)
        .await
        .expect("label namespace");
}

/// A namespace under `restricted` with its `default` ServiceAccount (no
/// controller-manager runs to create it; Pods are refused without it).
async fn namespace(cp: &ControlPlane, client: &kube::Client) -> String {
    let ns = restricted_namespace(cp).await;
    let sa = json!({"apiVersion": "v1", "kind": "ServiceAccount",
        "metadata": {"name": "default"}});
    let answer = create(
        client,
        &ns,
        "v1",
        "ServiceAccount",
        "application/json",
        serde_json::to_vec(&sa).unwrap(),
        false,
    )
    .await;
    assert!(answer.status.is_success(), "create SA: {}", answer.body);
    ns
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_policy_injects_opted_in_pods_as_safewrite_inject_does() {
    // Cluster-wide objects: a control plane of its own, with no flag (the API is GA and
    // served by default in 1.36).
    let cp = ControlPlane::start();
    let client = cp.admin_client().await;
    let policy = std::fs::read_to_string(repo_root().join(POLICY)).expect("read policy");
    for object in documents(&policy) {
        let answer = create(
            &client,
            "",
            object["apiVersion"].as_str().unwrap(),
            object["kind"].as_str().unwrap(),
            "application/json",
            serde_json::to_vec(&object).unwrap(),
            false,
        )
        .await;
        assert!(
            answer.status.is_success() && answer.warnings.is_empty(),
            "create {} {}: {} {:?} {}",
            object["kind"],
            object["metadata"]["name"],
            answer.status,
            answer.warnings,
            answer.body
        );
    }
    // Pods opt in by their own label here; every Pod of `labelled` is opted in.
    let plain = namespace(&cp, &client).await;
    let labelled = namespace(&cp, &client).await;
    label(&cp, &labelled, inject::INJECT_LABEL, "enabled").await;
    let opt_in = json!({inject::INJECT_LABEL: "enabled"});
    let mut report = Vec::new();

    // The policy takes a moment to be loaded: dry-run until it injects (bounded).
    let started = Instant::now();
    let probe = pod(
        "probe",
        opt_in.clone(),
        json!({}),
        json!({"containers": [app("app")]}),
    );
    loop {
        let answer = dry_run(&client, &plain, &probe).await;
        admitted("probe", &answer);
        if has_sidecar(&answer.body["spec"]) {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the policy injected nothing within 60 s: {}",
            answer.body["spec"]
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    report.push(format!(
        "policy active after {:.1}s",
        started.elapsed().as_secs_f64()
    ));

    // An opted-in Pod: the sidecar first among init containers, the address on every
    // container, and the whole Pod is what `safewrite inject` makes of it.
    let tuned = json!({
        inject::IMAGE_ANNOTATION: "registry.example.invalid/safewrite:9.9.9",
        inject::ALLOW_ANNOTATION: "core/ConfigMap:$(POD_NAMESPACE) example.com/Widget",
        inject::ARGS_ANNOTATION: "--qps 50 --burst 100",
        inject::TOKEN_SECRET_ANNOTATION: "safewrite-token",
    });
    // A container that says where the sidecar is itself keeps its own address.
    let mut other = app("other");
    other["env"] = json!([{"name": "SAFEWRITE_ADDRESS", "value": "unix:///var/run/s.sock"}]);
    let spec = json!({"initContainers": [app("migrate")], "containers": [app("app"), other]});
    for (name, annotations) in [("opted-in", json!({})), ("opted-in-tuned", tuned)] {
        let original = pod(name, opt_in.clone(), annotations, spec.clone());
        let by_policy = dry_run(&client, &plain, &original).await;
        admitted(name, &by_policy);
        let injected = &by_policy.body["spec"];
        assert_eq!(init_names(injected), ["safewrite", "migrate"], "{injected}");
        let sidecar = &injected["initContainers"][0];
        assert_eq!(sidecar["restartPolicy"], "Always");
        assert_eq!(
            sidecar["startupProbe"]["exec"]["command"],
            json!(["/safewrite", "health", "--address", inject::ADDRESS])
        );
        for container in injected["containers"].as_array().unwrap() {
            let env = container["env"].as_array().expect("env");
            assert_eq!(
                env.iter()
                    .filter(|e| e["name"] == "SAFEWRITE_ADDRESS")
                    .count(),
                1,
                "{container}"
            );
        }
        // The same Pod through `safewrite inject`: the policy leaves it alone (it has
        // the container), and the API server's answer is the same Pod.
        let mut by_cli = original.clone();
        assert_eq!(
            inject::inject_object(&mut by_cli, &inject::Defaults::default()),
            1
        );
        let answer = dry_run(&client, &plain, &by_cli).await;
        admitted(&format!("{name} (safewrite inject)"), &answer);
        assert_eq!(
            without_service_account_token(&answer.body["spec"]),
            without_service_account_token(injected),
            "{name}: the policy and safewrite inject differ"
        );
        // Submitting the injected Pod again changes nothing (into the namespace that opts
        // everything in, too).
        for ns in [&plain, &labelled] {
            let mut again = by_cli.clone();
            again["metadata"]["name"] = json!(format!("{name}-again"));
            let answer = dry_run(&client, ns, &again).await;
            admitted(&format!("{name} again"), &answer);
            assert_eq!(
                without_service_account_token(&answer.body["spec"]),
                without_service_account_token(injected),
                "{name}: an injected Pod was changed"
            );
        }
        report.push(format!(
            "Pod {name}: admitted, injected ({}), equal to safewrite inject's, unchanged when resubmitted",
            sidecar["image"]
        ));
    }

    // A Deployment's and a Job's pod templates, as the Pods their controllers would
    // create, in the namespace that opts every Pod in.
    let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "controller"},
        "spec": {"selector": {"matchLabels": {"app": "controller"}}, "template": {
            "metadata": {"labels": {"app": "controller"}},
            "spec": {"containers": [app("controller")]}}}});
    let job = json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "once"},
        "spec": {"template": {"spec": {"restartPolicy": "Never",
            "containers": [app("once")]}}}});
    for workload in [deployment, job] {
        let kind = workload["kind"].as_str().unwrap().to_string();
        let answer = dry_run(&client, &labelled, &workload).await;
        admitted(&kind, &answer);
        // The policy matches Pods only: the workload itself is not changed.
        assert!(!has_sidecar(&answer.body["spec"]["template"]["spec"]));
        let as_pod = pod_of(&kind.to_lowercase(), &answer.body).expect("a pod template");
        let answer = dry_run(&client, &labelled, &as_pod).await;
        admitted(&format!("{kind} as a Pod"), &answer);
        let spec = &answer.body["spec"];
        assert_eq!(init_names(spec), ["safewrite"], "{spec}");
        assert_eq!(
            spec["containers"][0]["env"],
            json!([{"name": "SAFEWRITE_ADDRESS", "value": inject::ADDRESS}])
        );
        report.push(format!(
            "{kind}'s pod template as a Pod (namespace opted in): admitted, injected"
        ));
    }

    // Not opted in, or opted out: untouched (compared with the same Pod in a namespace
    // and with labels the bindings cannot match).
    let bare_spec = json!({"containers": [app("app")]});
    let cases = [
        ("not-opted-in", plain.clone(), json!({})),
        (
            "opted-out",
            labelled.clone(),
            json!({inject::INJECT_LABEL: "disabled"}),
        ),
    ];
    for (name, ns, labels) in cases {
        let answer = dry_run(
            &client,
            &ns,
            &pod(name, labels, json!({}), bare_spec.clone()),
        )
        .await;
        admitted(name, &answer);
        let spec = &answer.body["spec"];
        assert!(!has_sidecar(spec), "{name}: {spec}");
        assert!(spec["containers"][0].get("env").is_none(), "{name}: {spec}");
        report.push(format!("Pod {name}: admitted, untouched"));
    }

    println!("server-side dry-run, PodSecurity restricted, with {POLICY}:");
    for line in &report {
        println!("  {line}");
    }
}

/// Takes the hand-written safewrite sidecar (and SAFEWRITE_ADDRESS) out of a rendered
/// manifest's workloads: what a controller's manifests look like before injection.
fn without_sidecar(yaml: &str) -> (String, usize) {
    let mut removed = 0;
    let mut docs = documents(yaml);
    for doc in &mut docs {
        let Some(spec) = doc.pointer_mut("/spec/template/spec") else {
            continue;
        };
        if let Some(init) = spec.get_mut("initContainers").and_then(Value::as_array_mut) {
            let before = init.len();
            init.retain(|c| c["name"] != "safewrite");
            removed += before - init.len();
            if init.is_empty() {
                spec.as_object_mut().unwrap().remove("initContainers");
            }
        }
        for container in spec["containers"].as_array_mut().expect("containers") {
            if let Some(env) = container.get_mut("env").and_then(Value::as_array_mut) {
                env.retain(|e| e["name"] != "SAFEWRITE_ADDRESS");
                if env.is_empty() {
                    container.as_object_mut().unwrap().remove("env");
                }
            }
        }
    }
    let text = docs
        .iter()
        .map(|d| format!("---\n{}", serde_saphyr::to_string(d).expect("yaml")))
        .collect();
    (text, removed)
}

/// `safewrite inject ARGS` with `input` on its standard input.
fn safewrite_inject(args: &[&str], input: &str) -> String {
    let mut child = Command::new(env!("CARGO_BIN_EXE_safewrite"))
        .arg("inject")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run safewrite inject");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .expect("write stdin");
    let out = child.wait_with_output().expect("wait");
    assert!(
        out.status.success(),
        "safewrite inject {args:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

/// The safewrite init container of a workload's (or Pod's) answer.
fn sidecar_in(object: &Value) -> Option<Value> {
    let spec = object
        .pointer("/spec/template/spec")
        .or_else(|| object.get("spec"))?;
    spec["initContainers"]
        .as_array()?
        .iter()
        .find(|c| c["name"] == "safewrite")
        .cloned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn safewrite_inject_puts_the_hand_written_sidecar_back_and_is_admitted() {
    let tools = deploy_tools();
    let kustomize = tools.join("kustomize");
    let helm = tools.join("helm");
    let cp = ControlPlane::shared();
    let client = cp.admin_client().await;
    let kube_version = pinned("KUBERNETES_VERSION");
    let values = std::fs::read_to_string(repo_root().join("deploy/helm/safewrite/values.yaml"))
        .expect("values.yaml");
    // The example's allow rules, as the chart's values give them.
    let allow: Vec<String> = documents(&values)[0]["sidecar"]["allow"]
        .as_array()
        .expect("sidecar.allow")
        .iter()
        .map(|r| r.as_str().unwrap().to_string())
        .collect();
    let mut flags = Vec::new();
    for rule in &allow {
        flags.extend(["--allow", rule.as_str()]);
    }
    let sources = [
        (
            "kustomize build deploy/kubernetes/kustomize/base",
            run(&kustomize, &["build", "deploy/kubernetes/kustomize/base"]),
        ),
        (
            "helm template deploy/helm/safewrite",
            run(
                &helm,
                &[
                    "template",
                    "my-controller",
                    "deploy/helm/safewrite",
                    "--kube-version",
                    &kube_version,
                ],
            ),
        ),
    ];
    let mut report = Vec::new();
    for (source, rendered) in sources {
        // As rendered (the sidecar is there): nothing changes.
        let same = safewrite_inject(&flags, &rendered);
        assert_eq!(
            documents(&same),
            documents(&rendered),
            "{source}: safewrite inject changed a manifest that has its sidecar"
        );
        let (bare, removed) = without_sidecar(&rendered);
        assert_eq!(removed, 1, "{source}: one hand-written sidecar");
        let injected = safewrite_inject(&flags, &bare);
        let ns = namespace(cp, &client).await;
        report.push(format!("{source} | safewrite inject (namespace {ns}):"));
        let mut pods = Vec::new();
        let mut compared = 0;
        for object in objects(&kustomize, &injected, &ns) {
            let what = format!("{}/{}", object.kind, object.name);
            let value: Value = documents(&object.yaml).remove(0);
            let answer = dry_run(&client, &ns, &value).await;
            admitted(&format!("{source}: {what}"), &answer);
            report.push(format!("  {what}: admitted ({})", answer.status.as_u16()));
            if object.kind == "ServiceAccount" {
                let real = create(
                    &client,
                    &ns,
                    "v1",
                    "ServiceAccount",
                    "application/json",
                    serde_json::to_vec(&value).unwrap(),
                    false,
                )
                .await;
                assert!(real.status.is_success(), "create {what}: {}", real.body);
            }
            if let Some(pod) = pod_of(&object.name, &answer.body) {
                pods.push((format!("{what} as a Pod"), pod));
            }
            // The injected sidecar is the hand-written one, once both went through the
            // API server.
            if object.kind == "Deployment" {
                let original = objects(&kustomize, &rendered, &ns)
                    .into_iter()
                    .find(|o| o.kind == "Deployment")
                    .expect("the rendered Deployment");
                let original = dry_run(&client, &ns, &documents(&original.yaml).remove(0)).await;
                assert_eq!(
                    sidecar_in(&answer.body).expect("injected sidecar"),
                    sidecar_in(&original.body).expect("hand-written sidecar"),
                    "{source}: the injected sidecar differs from the hand-written one"
                );
                compared += 1;
            }
        }
        assert_eq!(compared, 1, "{source}: one Deployment");
        for (what, pod) in pods {
            let answer = dry_run(&client, &ns, &pod).await;
            admitted(&format!("{source}: {what}"), &answer);
            assert!(has_sidecar(&answer.body["spec"]), "{what}");
            report.push(format!(
                "  {what}: admitted ({}), sidecar {:?}",
                answer.status.as_u16(),
                init_names(&answer.body["spec"])
            ));
        }
    }
    println!("server-side dry-run, PodSecurity restricted:");
    for line in &report {
        println!("  {line}");
    }
}

/// The policy's objects of a rendering, with the image its first variable defaults to.
fn policy_objects(yaml: &str) -> (Vec<Value>, Vec<String>) {
    let mut images = Vec::new();
    let mut objects: Vec<Value> = documents(yaml)
        .into_iter()
        .filter(|d| {
            d["kind"]
                .as_str()
                .is_some_and(|k| k.starts_with("MutatingAdmissionPolicy"))
        })
        .collect();
    let image = regex::Regex::new(r"orValue\('([^']*)'\)$").unwrap();
    for object in &mut objects {
        if let Some(variable) = object.pointer_mut("/spec/variables/0/expression") {
            let expression = variable.as_str().unwrap().to_string();
            let found = image
                .captures(&expression)
                .unwrap_or_else(|| panic!("no default image in {expression}"))[1]
                .to_string();
            *variable = json!(expression.replace(&found, "IMAGE"));
            images.push(found);
        }
    }
    (objects, images)
}

#[test]
fn helm_and_kustomize_render_the_same_policy_with_their_image() {
    let tools = deploy_tools();
    let policy = std::fs::read_to_string(repo_root().join(POLICY)).expect("read policy");
    let (reference, images) = policy_objects(&policy);
    assert_eq!(images, [inject::DEFAULT_IMAGE]);
    assert_eq!(reference.len(), 3, "a policy and two bindings");
    let kube_version = pinned("KUBERNETES_VERSION");
    let helm = |extra: &[&str]| {
        let mut args = vec![
            "template",
            "my-controller",
            "deploy/helm/safewrite",
            "--kube-version",
            &kube_version,
        ];
        args.extend(extra);
        run(&tools.join("helm"), &args)
    };
    let renderings = [
        (
            "helm template --values ci/injection-values.yaml",
            helm(&["--values", "deploy/helm/safewrite/ci/injection-values.yaml"]),
            concat!(
                "registry.example.invalid/platform/safewrite:",
                env!("CARGO_PKG_VERSION")
            ),
        ),
        (
            "kustomize build overlays/injection",
            run(
                &tools.join("kustomize"),
                &["build", "deploy/kubernetes/kustomize/overlays/injection"],
            ),
            concat!(
                "example.invalid/widgets/safewrite:",
                env!("CARGO_PKG_VERSION")
            ),
        ),
        (
            "kustomize build deploy/kubernetes/injection",
            run(
                &tools.join("kustomize"),
                &["build", "deploy/kubernetes/injection"],
            ),
            inject::DEFAULT_IMAGE,
        ),
    ];
    for (source, yaml, image) in renderings {
        let (objects, images) = policy_objects(&yaml);
        assert_eq!(images, [image], "{source}");
        assert_eq!(objects, reference, "{source}: not the policy of {POLICY}");
    }
    // Off by default in the chart.
    let (objects, _) = policy_objects(&helm(&[]));
    assert!(objects.is_empty(), "the chart injects by default");
}

#[test]
fn safewrite_inject_reads_files_directories_and_json() {
    let dir = tempfile::tempdir().expect("temp dir");
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
        "spec": {"containers": [app("app")]}});
    let list = json!({"apiVersion": "v1", "kind": "List", "items": [pod.clone(),
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "1"}}]});
    std::fs::create_dir(dir.path().join("more")).unwrap();
    std::fs::write(
        dir.path().join("a.yaml"),
        serde_saphyr::to_string(&pod).unwrap(),
    )
    .unwrap();
    std::fs::write(dir.path().join("more/b.json"), list.to_string()).unwrap();
    std::fs::write(dir.path().join("notes.txt"), "not a manifest").unwrap();
    let path = dir.path().to_str().unwrap();
    let out = safewrite_inject(&["--image", "r.invalid/sw:1", path], "");
    // a.yaml as YAML, then more/b.json as JSON.
    let (yaml, json) = out.split_once("\n{").expect("YAML, then JSON");
    let yaml = documents(yaml);
    let json: Value = serde_json::from_str(&format!("{{{json}")).expect("JSON");
    let mut expected = pod.clone();
    let defaults = inject::Defaults {
        image: "r.invalid/sw:1".into(),
        ..inject::Defaults::default()
    };
    inject::inject_object(&mut expected, &defaults);
    assert_eq!(yaml, [expected.clone()]);
    assert_eq!(json["items"][0], expected);
    assert_eq!(json["items"][1], list["items"][1]);
    // An input that cannot be read or parsed: exit 1, naming it.
    for bad in [
        dir.path().join("missing.yaml"),
        dir.path().join("notes.txt"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_safewrite"))
            .args(["inject", bad.to_str().unwrap()])
            .stdin(Stdio::null())
            .output()
            .expect("run safewrite inject");
        assert_eq!(out.status.code(), Some(1), "{}", bad.display());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(bad.to_str().unwrap()), "{stderr}");
    }
}
