//! `safewrite inject`: adds the safewrite native sidecar to the pod templates of
//! manifests, the way `linkerd inject --manual` does, for clusters without the
//! MutatingAdmissionPolicy of deploy/kubernetes/injection/policy.yaml (Kubernetes before
//! 1.36) or for manifests kept in git.
//!
//! It adds exactly what that policy adds (tests/integration/inject.rs submits both to a
//! real API server and compares the pods): the `safewrite` init container with
//! `restartPolicy: Always` first among the init containers, `SAFEWRITE_ADDRESS` on every
//! container that lacks it and, with a token Secret, the Secret's volume, its mount in
//! every container, `--token-file` for the sidecar and `SAFEWRITE_TOKEN_FILE` for the
//! others. The same pod annotations choose the image, the allow rules, more flags and
//! the token Secret; the command's flags are the defaults when a pod names none.
//!
//! A pod template that already has a container named `safewrite`, or is labelled
//! `safewrite.dev/inject: disabled`, is left as it is, and so is every object that is
//! not a Pod, a workload with a pod template (Deployment, StatefulSet, DaemonSet,
//! ReplicaSet, ReplicationController, Job, CronJob) or a `List` of them: injecting twice
//! is injecting once.

use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use serde_json::{Map, Value, json};

/// The image the sidecar runs when neither `--image` nor the pod's annotation names one
/// (the placeholder of deploy/kubernetes/sidecar.yaml and of the policy).
pub const DEFAULT_IMAGE: &str = concat!("example.invalid/safewrite:", env!("CARGO_PKG_VERSION"));
/// Where the sidecar listens, and what `SAFEWRITE_ADDRESS` says.
pub const ADDRESS: &str = "127.0.0.1:50051";
/// The name of the injected container.
pub const CONTAINER: &str = "safewrite";
/// The label that opts a namespace or a pod in (`enabled`) or a pod out (`disabled`).
pub const INJECT_LABEL: &str = "safewrite.dev/inject";
/// Pod annotation: the sidecar's image.
pub const IMAGE_ANNOTATION: &str = "safewrite.dev/image";
/// Pod annotation: the sidecar's allow rules, space-separated.
pub const ALLOW_ANNOTATION: &str = "safewrite.dev/allow";
/// Pod annotation: more `serve` flags, space-separated.
pub const ARGS_ANNOTATION: &str = "safewrite.dev/args";
/// Pod annotation: the Secret whose key `token` is the sidecar's shared token.
pub const TOKEN_SECRET_ANNOTATION: &str = "safewrite.dev/token-secret";
/// The token Secret's volume.
pub const TOKEN_VOLUME: &str = "safewrite-token";
/// Where the token Secret is mounted.
pub(crate) const TOKEN_DIR: &str = "/var/run/secrets/safewrite";
/// The token file the sidecar reads (`--token-file`).
pub(crate) const TOKEN_FILE: &str = "/var/run/secrets/safewrite/token";

/// Options of `safewrite inject`.
#[derive(Debug, Clone, clap::Args)]
pub struct InjectArgs {
    /// Manifests to inject: files, directories (their *.yaml, *.yml and *.json files,
    /// recursively, in name order) or `-` for standard input (the default). YAML
    /// (several documents) or JSON; written to standard output in the same format.
    #[arg(value_name = "PATH")]
    pub paths: Vec<PathBuf>,
    /// The sidecar's image, for pods without a `safewrite.dev/image` annotation.
    #[arg(long, value_name = "IMAGE", default_value = DEFAULT_IMAGE)]
    pub image: String,
    /// An allow rule for the sidecar (SAFEWRITE_ALLOW), repeatable, for pods without a
    /// `safewrite.dev/allow` annotation.
    #[arg(long = "allow", value_name = "RULE")]
    pub allow: Vec<String>,
    /// A Secret whose key `token` is the sidecar's shared token, for pods without a
    /// `safewrite.dev/token-secret` annotation.
    #[arg(long, value_name = "NAME")]
    pub token_secret: Option<String>,
}

/// What an injection adds, before a pod's annotations are read: the command's flags.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Defaults {
    /// The sidecar's image (`--image`).
    pub image: String,
    /// Allow rules, space-separated (`--allow`); empty for none.
    pub allow: String,
    /// The token Secret (`--token-secret`); empty for none.
    pub token_secret: String,
}

// === impl Defaults ===

impl Default for Defaults {
    fn default() -> Self {
        Defaults {
            image: DEFAULT_IMAGE.to_string(),
            allow: String::new(),
            token_secret: String::new(),
        }
    }
}

impl From<&InjectArgs> for Defaults {
    fn from(args: &InjectArgs) -> Self {
        Defaults {
            image: args.image.clone(),
            allow: args.allow.join(" "),
            token_secret: args.token_secret.clone().unwrap_or_default(),
        }
    }
}

/// The settings of one pod's sidecar: its annotations over the defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Knobs {
    pub(crate) image: String,
    pub(crate) allow: String,
    pub(crate) args: Vec<String>,
    pub(crate) token_secret: String,
}

// === impl Knobs ===

impl Knobs {
    /// The policy's variables: each annotation when present, else the default.
    pub fn of(metadata: Option<&Value>, defaults: &Defaults) -> Knobs {
        let annotation = |key: &str| {
            metadata
                .and_then(|m| m.pointer("/annotations"))
                .and_then(|a| a.get(key))
                .and_then(Value::as_str)
        };
        Knobs {
            image: annotation(IMAGE_ANNOTATION)
                .unwrap_or(&defaults.image)
                .to_string(),
            allow: annotation(ALLOW_ANNOTATION)
                .unwrap_or(&defaults.allow)
                .trim()
                .to_string(),
            args: annotation(ARGS_ANNOTATION)
                .unwrap_or("")
                .split(' ')
                .filter(|a| !a.is_empty())
                .map(str::to_string)
                .collect(),
            token_secret: annotation(TOKEN_SECRET_ANNOTATION)
                .unwrap_or(&defaults.token_secret)
                .trim()
                .to_string(),
        }
    }
}

/// The sidecar container: deploy/kubernetes/sidecar.yaml's, without its example allow
/// rules, as the policy's JSON Patch builds it.
pub fn sidecar(knobs: &Knobs) -> Value {
    let health = json!(["/safewrite", "health", "--address", ADDRESS]);
    let mut args = vec!["serve".to_string()];
    if !knobs.token_secret.is_empty() {
        args.extend(["--token-file".to_string(), TOKEN_FILE.to_string()]);
    }
    args.extend(knobs.args.iter().cloned());
    let mut env = vec![json!({"name": "POD_NAMESPACE",
        "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}})];
    if !knobs.allow.is_empty() {
        env.push(json!({"name": "SAFEWRITE_ALLOW", "value": knobs.allow}));
    }
    for (name, value) in [
        ("SAFEWRITE_LISTEN", ADDRESS),
        ("SAFEWRITE_METRICS_LISTEN", "127.0.0.1:9464"),
        ("SAFEWRITE_SHUTDOWN_GRACE", "20s"),
        ("SAFEWRITE_MAX_IN_FLIGHT", "1024"),
        ("SAFEWRITE_LOG_FORMAT", "json"),
        ("TOKIO_WORKER_THREADS", "2"),
    ] {
        env.push(json!({"name": name, "value": value}));
    }
    let mut container = json!({
        "name": CONTAINER,
        "image": knobs.image,
        "imagePullPolicy": "IfNotPresent",
        "restartPolicy": "Always",
        "args": args,
        "env": env,
        "startupProbe": {"exec": {"command": health},
            "periodSeconds": 1, "timeoutSeconds": 3, "failureThreshold": 120},
        "readinessProbe": {"exec": {"command": health},
            "periodSeconds": 10, "timeoutSeconds": 3, "failureThreshold": 3},
        "resources": {"requests": {"cpu": "100m", "memory": "96Mi"},
            "limits": {"memory": "192Mi"}},
        "securityContext": {
            "runAsNonRoot": true, "runAsUser": 65532, "runAsGroup": 65532,
            "allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true,
            "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"}},
        "terminationMessagePolicy": "FallbackToLogsOnError",
    });
    if !knobs.token_secret.is_empty() {
        container["volumeMounts"] = json!([token_mount()]);
    }
    container
}

fn token_mount() -> Value {
    json!({"name": TOKEN_VOLUME, "mountPath": TOKEN_DIR, "readOnly": true})
}

fn has_named(list: Option<&Value>, key: &str, value: &str) -> bool {
    list.and_then(Value::as_array)
        .is_some_and(|items| items.iter().any(|i| i[key] == value))
}

/// Appends `items` to the array at `object[key]`, creating it when absent.
fn append(object: &mut Map<String, Value>, key: &str, items: Vec<Value>) {
    if items.is_empty() {
        return;
    }
    match object.get_mut(key) {
        Some(Value::Array(list)) => list.extend(items),
        _ => {
            object.insert(key.to_string(), Value::Array(items));
        }
    }
}

/// Injects the sidecar into one pod (its metadata and spec), as the policy does. Returns
/// whether anything changed: nothing does for a pod that opted out or already has a
/// `safewrite` container, or whose spec is not an object with `containers`.
pub fn inject_pod(metadata: Option<&Value>, spec: &mut Value, defaults: &Defaults) -> bool {
    let opted_out = metadata
        .and_then(|m| m.pointer("/labels"))
        .and_then(|l| l.get(INJECT_LABEL))
        .is_some_and(|v| v == "disabled");
    if opted_out
        || !spec["containers"].is_array()
        || has_named(spec.get("containers"), "name", CONTAINER)
        || has_named(spec.get("initContainers"), "name", CONTAINER)
    {
        return false;
    }
    let knobs = Knobs::of(metadata, defaults);
    let token = !knobs.token_secret.is_empty();
    let Some(spec) = spec.as_object_mut() else {
        return false;
    };
    // Every container: SAFEWRITE_ADDRESS (and the token) after its own entries, unless
    // it sets them itself (the policy's server-side apply merges by name and path).
    if let Some(Value::Array(containers)) = spec.get_mut("containers") {
        for container in containers.iter_mut() {
            let Some(container) = container.as_object_mut() else {
                continue;
            };
            let mut env = vec![json!({"name": "SAFEWRITE_ADDRESS", "value": ADDRESS})];
            if token {
                env.push(json!({"name": "SAFEWRITE_TOKEN_FILE", "value": TOKEN_FILE}));
            }
            env.retain(|e| {
                !has_named(
                    container.get("env"),
                    "name",
                    e["name"].as_str().unwrap_or(""),
                )
            });
            append(container, "env", env);
            if token && !has_named(container.get("volumeMounts"), "mountPath", TOKEN_DIR) {
                append(container, "volumeMounts", vec![token_mount()]);
            }
        }
    }
    if token && !has_named(spec.get("volumes"), "name", TOKEN_VOLUME) {
        append(
            spec,
            "volumes",
            vec![json!({"name": TOKEN_VOLUME, "secret": {"secretName": knobs.token_secret}})],
        );
    }
    // The sidecar first: a native sidecar starts before the init containers after it.
    match spec.get_mut("initContainers") {
        Some(Value::Array(init)) => init.insert(0, sidecar(&knobs)),
        _ => {
            spec.insert("initContainers".into(), json!([sidecar(&knobs)]));
        }
    }
    true
}

/// Where a kind keeps its pod template (`metadata` + `spec`), from the object's root.
fn template_path(api_version: &str, kind: &str) -> Option<&'static str> {
    let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
    match (group, kind) {
        ("", "Pod") => Some(""),
        ("", "ReplicationController")
        | ("apps", "Deployment" | "StatefulSet" | "DaemonSet" | "ReplicaSet")
        | ("batch", "Job") => Some("/spec/template"),
        ("batch", "CronJob") => Some("/spec/jobTemplate/spec/template"),
        _ => None,
    }
}

/// Injects the sidecar into one object (a `List`'s items too). Returns the number of pod
/// templates changed; any other object is left exactly as it is.
pub fn inject_object(object: &mut Value, defaults: &Defaults) -> usize {
    let api_version = object["apiVersion"].as_str().unwrap_or("").to_string();
    let kind = object["kind"].as_str().unwrap_or("").to_string();
    if kind.ends_with("List") && object["items"].is_array() {
        return object["items"]
            .as_array_mut()
            .map(|items| items.iter_mut().map(|i| inject_object(i, defaults)).sum())
            .unwrap_or(0);
    }
    let Some(path) = template_path(&api_version, &kind) else {
        return 0;
    };
    let Some(template) = object.pointer_mut(path) else {
        return 0;
    };
    let metadata = template.get("metadata").cloned();
    let Some(spec) = template.get_mut("spec") else {
        return 0;
    };
    usize::from(inject_pod(metadata.as_ref(), spec, defaults))
}

/// Whether a text is JSON rather than YAML (its first non-blank character).
fn is_json(text: &str) -> bool {
    text.trim_start().starts_with(['{', '['])
}

/// Injects every document of one manifest text (YAML with any number of documents, or
/// JSON) and writes it back in the same format. Empty documents are dropped; a document
/// that is not an object (a mapping) is an error.
pub fn inject_text(text: &str, defaults: &Defaults) -> Result<String, String> {
    if is_json(text) {
        let mut out = String::new();
        let stream = serde_json::Deserializer::from_str(text).into_iter::<Value>();
        for value in stream {
            let mut value = value.map_err(|e| format!("JSON: {e}"))?;
            if !value.is_object() {
                return Err(format!("JSON: not an object: {value}"));
            }
            inject_object(&mut value, defaults);
            out.push_str(&serde_json::to_string_pretty(&value).map_err(|e| e.to_string())?);
            out.push('\n');
        }
        return Ok(out);
    }
    let documents: Vec<Value> =
        serde_saphyr::from_multiple(text).map_err(|e| format!("YAML: {e}"))?;
    let mut out = String::new();
    for (index, mut document) in documents.into_iter().filter(|d| !d.is_null()).enumerate() {
        if !document.is_object() {
            return Err(format!(
                "YAML document {}: not a mapping: {document}",
                index + 1
            ));
        }
        inject_object(&mut document, defaults);
        let yaml = serde_saphyr::to_string(&document).map_err(|e| format!("YAML: {e}"))?;
        out.push_str("---\n");
        out.push_str(&yaml);
        if !yaml.ends_with('\n') {
            out.push('\n');
        }
    }
    Ok(out)
}

/// The manifest files of a path: itself, or a directory's YAML and JSON files.
fn manifest_files(path: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    if !path.is_dir() {
        out.push(path.to_path_buf());
        return Ok(());
    }
    let mut entries: Vec<PathBuf> = std::fs::read_dir(path)?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    entries.sort();
    for entry in entries {
        let manifest = entry
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| matches!(e, "yaml" | "yml" | "json"));
        if entry.is_dir() || manifest {
            manifest_files(&entry, out)?;
        }
    }
    Ok(())
}

/// `safewrite inject`: every input, injected, to standard output. Exit 1 (and nothing
/// written for that input) when an input cannot be read or parsed.
pub fn run(args: InjectArgs) -> ExitCode {
    let defaults = Defaults::from(&args);
    let mut paths = args.paths.clone();
    if paths.is_empty() {
        paths.push(PathBuf::from("-"));
    }
    let mut stdout = std::io::stdout().lock();
    for path in paths {
        let mut files = Vec::new();
        if path.as_os_str() == "-" {
            files.push(path);
        } else if let Err(e) = manifest_files(&path, &mut files) {
            eprintln!("safewrite inject: {}: {e}", path.display());
            return ExitCode::FAILURE;
        }
        for file in files {
            let text = if file.as_os_str() == "-" {
                let mut text = String::new();
                std::io::stdin().read_to_string(&mut text).map(|_| text)
            } else {
                std::fs::read_to_string(&file)
            };
            let injected = text
                .map_err(|e| e.to_string())
                .and_then(|t| inject_text(&t, &defaults));
            match injected {
                Ok(out) => {
                    if stdout.write_all(out.as_bytes()).is_err() {
                        return ExitCode::FAILURE;
                    }
                }
                Err(e) => {
                    eprintln!("safewrite inject: {}: {e}", file.display());
                    return ExitCode::FAILURE;
                }
            }
        }
    }
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests;
