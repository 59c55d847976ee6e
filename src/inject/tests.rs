use serde_json::{Value, json};

use super::*;

fn deployment() -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "c", "annotations": {"unrelated": "kept"}},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "c"}}, "template": {
            "metadata": {"labels": {"app": "c"}},
            "spec": {
                "initContainers": [{"name": "migrate", "image": "m:1"}],
                "containers": [
                    {"name": "app", "image": "a:1", "env": [{"name": "A", "value": "1"}]},
                    {"name": "other", "image": "o:1",
                     "env": [{"name": "SAFEWRITE_ADDRESS", "value": "unix:///s"}]}]}}}})
}

fn with_token() -> Defaults {
    Defaults {
        token_secret: "tok".into(),
        ..Defaults::default()
    }
}

#[test]
fn a_deployment_gets_the_sidecar_first_and_the_address_everywhere() {
    let mut d = deployment();
    assert_eq!(inject_object(&mut d, &Defaults::default()), 1);
    let spec = &d["spec"]["template"]["spec"];
    let init: Vec<_> = spec["initContainers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(init, ["safewrite", "migrate"]);
    assert_eq!(
        spec["initContainers"][0],
        sidecar(&Knobs::of(None, &Defaults::default()))
    );
    assert_eq!(spec["initContainers"][0]["restartPolicy"], "Always");
    assert_eq!(
        spec["containers"][0]["env"],
        json!([{"name": "A", "value": "1"}, {"name": "SAFEWRITE_ADDRESS", "value": ADDRESS}])
    );
    // A container that names its own address keeps it, alone.
    assert_eq!(
        spec["containers"][1]["env"],
        json!([{"name": "SAFEWRITE_ADDRESS", "value": "unix:///s"}])
    );
    assert!(spec.get("volumes").is_none());
    // Outside the pod template nothing changed.
    let mut before = deployment();
    before["spec"]["template"] = Value::Null;
    d["spec"]["template"] = Value::Null;
    assert_eq!(d, before);
}

#[test]
fn annotations_choose_the_image_allow_rules_flags_and_token() {
    let mut d = deployment();
    d["spec"]["template"]["metadata"]["annotations"] = json!({
        IMAGE_ANNOTATION: "r.invalid/sw:2",
        ALLOW_ANNOTATION: " core/ConfigMap ",
        ARGS_ANNOTATION: "--qps 50  --burst 100",
        TOKEN_SECRET_ANNOTATION: "sw-token",
    });
    let defaults = Defaults {
        image: "ignored:1".into(),
        allow: "ignored/Kind".into(),
        token_secret: "ignored".into(),
    };
    inject_object(&mut d, &defaults);
    let spec = &d["spec"]["template"]["spec"];
    let sidecar = &spec["initContainers"][0];
    assert_eq!(sidecar["image"], "r.invalid/sw:2");
    assert_eq!(
        sidecar["args"],
        json!([
            "serve",
            "--token-file",
            TOKEN_FILE,
            "--qps",
            "50",
            "--burst",
            "100"
        ])
    );
    assert_eq!(
        sidecar["env"][1],
        json!({"name": "SAFEWRITE_ALLOW", "value": "core/ConfigMap"})
    );
    assert_eq!(sidecar["volumeMounts"], json!([token_mount()]));
    assert_eq!(
        spec["volumes"],
        json!([{"name": TOKEN_VOLUME, "secret": {"secretName": "sw-token"}}])
    );
    for container in spec["containers"].as_array().unwrap() {
        assert_eq!(container["volumeMounts"], json!([token_mount()]));
        assert!(has_named(
            container.get("env"),
            "name",
            "SAFEWRITE_TOKEN_FILE"
        ));
    }
    // The init container that is not the sidecar is not given the address.
    assert!(spec["initContainers"][1].get("env").is_none());
}

#[test]
fn injecting_twice_is_injecting_once() {
    let list = json!({"apiVersion": "v1", "kind": "List", "items": [
        deployment(),
        {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "cj"},
         "spec": {"schedule": "* * * * *", "jobTemplate": {"spec": {"template": {
            "spec": {"restartPolicy": "Never", "containers": [{"name": "j", "image": "j:1"}]}}}}}},
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
         "spec": {"containers": [{"name": "p", "image": "p:1"}]}},
    ]});
    for defaults in [Defaults::default(), with_token()] {
        let mut once = list.clone();
        assert_eq!(inject_object(&mut once, &defaults), 3);
        let mut twice = once.clone();
        assert_eq!(inject_object(&mut twice, &defaults), 0);
        assert_eq!(twice, once);
        // And through the text form, YAML and JSON.
        let yaml = inject_text(&serde_saphyr::to_string(&list).unwrap(), &defaults).unwrap();
        assert_eq!(inject_text(&yaml, &defaults).unwrap(), yaml);
        let json = inject_text(&list.to_string(), &defaults).unwrap();
        assert_eq!(inject_text(&json, &defaults).unwrap(), json);
        assert_eq!(serde_json::from_str::<Value>(&json).unwrap(), once);
    }
}

#[test]
fn other_kinds_opted_out_pods_and_hand_written_sidecars_are_untouched() {
    let untouched = [
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"},
            "data": {"containers": "[]"}}),
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"},
            "spec": {"ports": [{"port": 80}]}}),
        // A custom resource that looks like a Deployment is not one.
        json!({"apiVersion": "example.com/v1", "kind": "Deployment", "metadata": {"name": "x"},
            "spec": {"template": {"spec": {"containers": [{"name": "a", "image": "a"}]}}}}),
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "out",
            "labels": {INJECT_LABEL: "disabled"}},
            "spec": {"containers": [{"name": "a", "image": "a"}]}}),
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "own"},
            "spec": {"containers": [{"name": "a", "image": "a"}, {"name": "safewrite", "image": "s"}]}}),
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "native"},
            "spec": {"initContainers": [{"name": "safewrite", "image": "s", "restartPolicy": "Always"}],
                "containers": [{"name": "a", "image": "a"}]}}),
    ];
    for object in untouched {
        let mut copy = object.clone();
        assert_eq!(inject_object(&mut copy, &with_token()), 0, "{object}");
        assert_eq!(copy, object);
    }
}

#[test]
fn yaml_keeps_every_scalar_and_every_document() {
    let text = "# a comment\n\
        apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n\
        data: {a: \"1024\", b: \"true\", c: \"0.1.0\", d: \"\", e: \"null\", f: \"~\", g: \"yes\",\n\
        h: \"on\", i: \"0x10\", j: \"1e3\", k: \"- x\", l: \"a: b\", m: \"#x\", n: \"multi\\nline\\n\"}\n\
        ---\n---\n\
        apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\n\
        spec: {replicas: 2, paused: false, template: {spec: {containers: [{name: a, image: a}]}}}\n";
    let original: Vec<Value> = serde_saphyr::from_multiple(text).unwrap();
    let out = inject_text(text, &Defaults::default()).unwrap();
    let parsed: Vec<Value> = serde_saphyr::from_multiple(&out).unwrap();
    let original: Vec<Value> = original.into_iter().filter(|d| !d.is_null()).collect();
    assert_eq!(parsed.len(), 2, "{out}");
    assert_eq!(parsed[0], original[0], "{out}");
    assert_eq!(parsed[0]["data"]["a"], "1024");
    assert_eq!(parsed[1]["spec"]["replicas"], 2);
    assert_eq!(parsed[1]["spec"]["paused"], false);
    let mut expected = original[1].clone();
    inject_object(&mut expected, &Defaults::default());
    assert_eq!(parsed[1], expected);
}

#[test]
fn directories_are_read_in_name_order() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    for name in ["b.yaml", "a.json", "sub/c.yml", "notes.txt"] {
        std::fs::write(dir.path().join(name), "").unwrap();
    }
    let mut files = Vec::new();
    manifest_files(dir.path(), &mut files).unwrap();
    let names: Vec<_> = files
        .iter()
        .map(|f| f.strip_prefix(dir.path()).unwrap().display().to_string())
        .collect();
    assert_eq!(names, ["a.json", "b.yaml", "sub/c.yml"]);
}

#[test]
fn a_document_that_is_not_an_object_is_an_error() {
    for text in ["just text\n", "- a\n- b\n", "[1, 2]", "\"s\""] {
        assert!(inject_text(text, &Defaults::default()).is_err(), "{text}");
    }
    assert_eq!(inject_text("---\n---\n", &Defaults::default()).unwrap(), "");
}
