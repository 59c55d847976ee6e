//! The change flags as the request's mutation: a generic patch (--cel, --merge,
//! --json-patch, --apply), or one of the changes to one entry of a list that the proto
//! names (--set-condition / --remove-condition, --add-finalizer / --remove-finalizer,
//! --add-owner / --remove-owner, --upsert-entry / --remove-entry). Values are parsed
//! here, before anything is sent, and one that cannot be read says what to write
//! instead. What the sidecar validates anyway (a qualified name, a reason's spelling) is
//! left to it, and what depends on the object (a second controller, a path to something
//! that is not a list) can only be said by it.

use serde_json::{Map, Value};

use safewrite_api::pb;
use safewrite_api::pb::mutation::Kind as M;

use super::args::{ChangeFlags, ChangeOptions};
use super::fail::Fail;
use super::kinds;

/// The flag of the change given, or `None` when none is (clap lets at most one through).
pub fn flag(change: &ChangeFlags) -> Option<&'static str> {
    let given = [
        ("--cel", change.cel.is_some()),
        ("--merge", change.merge.is_some()),
        ("--json-patch", change.json_patch.is_some()),
        ("--apply", change.apply.is_some()),
        ("--exec", change.exec.is_some()),
        ("--set-condition", change.set_condition.is_some()),
        ("--remove-condition", !change.remove_condition.is_empty()),
        ("--add-finalizer", change.add_finalizer.is_some()),
        ("--remove-finalizer", change.remove_finalizer.is_some()),
        ("--add-owner", change.add_owner.is_some()),
        ("--remove-owner", change.remove_owner.is_some()),
        ("--upsert-entry", change.upsert_entry.is_some()),
        ("--remove-entry", change.remove_entry.is_some()),
    ];
    given
        .into_iter()
        .find(|(_, set)| *set)
        .map(|(flag, _)| flag)
}

/// The owner the change names, as its flag and `KIND/NAME` parsed; `None` for the other
/// changes. The kind is resolved as the object's is (see `cli::write`).
///
/// # Errors
/// An owner that is not `KIND/NAME`.
pub fn owner(change: &ChangeFlags) -> Result<Option<kinds::Typed>, Fail> {
    let (flag, text) = match (&change.add_owner, &change.remove_owner) {
        (Some(text), _) => ("--add-owner", text),
        (None, Some(text)) => ("--remove-owner", text),
        (None, None) => return Ok(None),
    };
    kinds::parse(text)
        .map(Some)
        .map_err(|fail| Fail::invalid(format!("{flag} {}", fail.message)))
}

/// Checks that each of `options` goes with the change given (`flag`).
///
/// # Errors
/// The first option given without its change, saying which change it goes with.
pub fn check_options(flag: &str, options: &ChangeOptions) -> Result<(), Fail> {
    let conditions = ["--set-condition", "--remove-condition"];
    let owners = ["--add-owner", "--remove-owner"];
    let given: [(&str, bool, &[&str]); 7] = [
        ("--reason", options.reason.is_some(), &conditions[..1]),
        ("--message", options.message.is_some(), &conditions[..1]),
        (
            "--observed-generation",
            options.observed_generation.is_some(),
            &conditions[..1],
        ),
        (
            "--conditions-path",
            options.conditions_path.is_some(),
            &conditions,
        ),
        ("--controller", options.controller, &owners[..1]),
        (
            "--block-owner-deletion",
            options.block_owner_deletion,
            &owners[..1],
        ),
        (
            "--owner-api-version",
            options.owner_api_version.is_some(),
            &owners,
        ),
    ];
    for (option, set, with) in given {
        if set && !with.contains(&flag) {
            return Err(Fail::invalid(format!(
                "{option} goes with {} only, not with {flag}: drop it",
                with.join(" or ")
            )));
        }
    }
    Ok(())
}

/// The mutation of `change`, read before anything is sent; `None` for --exec, which is
/// no mutation but a command. The owner of --add-owner / --remove-owner has no
/// apiVersion nor Kind until [`resolve_owner`] gives them.
///
/// # Errors
/// A value that cannot be read, saying what to write instead.
pub fn mutation(change: &ChangeFlags, options: &ChangeOptions) -> Result<Option<M>, Fail> {
    let conditions_path = match &options.conditions_path {
        Some(text) => {
            field_path("--conditions-path", text, "status.conditions")?;
            text.clone()
        }
        None => String::new(),
    };
    Ok(Some(if let Some(expression) = &change.cel {
        M::Cel(pb::CelMutation {
            expression: expression.clone(),
        })
    } else if let Some(patch) = &change.merge {
        M::MergePatch(pb::MergePatch {
            patch_json: patch.clone(),
        })
    } else if let Some(patch) = &change.json_patch {
        M::JsonPatch(pb::JsonPatch {
            patch_json: patch.clone(),
        })
    } else if let Some(file) = &change.apply {
        M::Apply(pb::ServerSideApply {
            configuration_json: super::request::read_object("--apply", file)?.to_string(),
            force: true,
        })
    } else if let Some(text) = &change.set_condition {
        M::SetCondition(pb::SetCondition {
            conditions: vec![condition(text, options)?],
            path: conditions_path,
        })
    } else if !change.remove_condition.is_empty() {
        if let Some(empty) = change.remove_condition.iter().find(|t| t.is_empty()) {
            return Err(Fail::invalid(format!(
                "--remove-condition {empty:?}: give the condition's type, e.g. --remove-condition Ready"
            )));
        }
        M::RemoveCondition(pb::RemoveCondition {
            types: change.remove_condition.clone(),
            path: conditions_path,
        })
    } else if let Some(finalizer) = change
        .add_finalizer
        .as_ref()
        .or(change.remove_finalizer.as_ref())
    {
        M::Finalizer(pb::FinalizerChange {
            finalizer: finalizer.clone(),
            remove: change.remove_finalizer.is_some(),
        })
    } else if let Some(typed) = owner(change)? {
        M::OwnerReference(pb::OwnerReferenceChange {
            owner: Some(pb::OwnerReference {
                api_version: String::new(),
                kind: String::new(),
                name: typed.name,
                // The sidecar reads the owner for it.
                uid: String::new(),
                controller: options.controller,
                block_owner_deletion: options.block_owner_deletion,
            }),
            remove: change.remove_owner.is_some(),
        })
    } else if let Some(text) = &change.upsert_entry {
        M::ListEntry(list_entry("--upsert-entry", text, false)?)
    } else if let Some(text) = &change.remove_entry {
        M::ListEntry(list_entry("--remove-entry", text, true)?)
    } else {
        return Ok(None);
    }))
}

/// Gives the owner of `mutation` its kind, resolved from the `KIND` of its `KIND/NAME`.
pub fn resolve_owner(mutation: &mut Option<M>, kind: kinds::Kind) {
    if let Some(M::OwnerReference(change)) = mutation
        && let Some(owner) = &mut change.owner
    {
        owner.api_version = kind.api_version;
        owner.kind = kind.kind;
    }
}

/// `TYPE=STATUS` with --reason, --message and --observed-generation. STATUS is taken in
/// any case and sent as the API spells it.
fn condition(text: &str, options: &ChangeOptions) -> Result<pb::Condition, Fail> {
    let example = "e.g. --set-condition Ready=True --reason Reconciled";
    let Some((type_, status)) = text.split_once('=') else {
        return Err(Fail::invalid(format!(
            "--set-condition {text:?}: write TYPE=STATUS, {example}"
        )));
    };
    if type_.is_empty() {
        return Err(Fail::invalid(format!(
            "--set-condition {text:?}: the condition's type comes before the =, {example}"
        )));
    }
    let status = match status.to_ascii_lowercase().as_str() {
        "true" => "True",
        "false" => "False",
        "unknown" => "Unknown",
        _ => {
            return Err(Fail::invalid(format!(
                "--set-condition {text:?}: the status after the = is True, False or Unknown, {example}"
            )));
        }
    };
    let Some(reason) = options.reason.clone() else {
        return Err(Fail::invalid(format!(
            "--set-condition needs --reason: a CamelCase word saying why, {example}"
        )));
    };
    Ok(pb::Condition {
        r#type: type_.to_string(),
        status: status.to_string(),
        reason,
        message: options.message.clone().unwrap_or_default(),
        observed_generation: options.observed_generation,
        last_transition_time: String::new(),
    })
}

/// A path of field names joined by dots, as the proto takes it; `example` is one.
fn field_path(flag: &str, text: &str, example: &str) -> Result<(), Fail> {
    let name = |s: &str| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '$'))
    };
    if text.split('.').all(name) {
        return Ok(());
    }
    Err(Fail::invalid(format!(
        "{flag} {text:?} is not a path: write field names joined by dots, e.g. {example}"
    )))
}

/// `PATH[KEY=VALUE,...]=JSON` (the `=JSON` optional): the list, its key fields and the
/// entry. A `KEY=VALUE` puts the string VALUE into the entry; a bare `KEY` takes its
/// value from JSON (for a key that is not a string).
fn list_entry(flag: &str, text: &str, remove: bool) -> Result<pb::ListEntryChange, Fail> {
    let form = if remove {
        "PATH[KEY=VALUE,...], e.g. 'status.parents[controllerName=example.com/gw]'"
    } else {
        "PATH[KEY=VALUE,...]=JSON, e.g. 'status.parents[controllerName=example.com/gw]={\"conditions\": []}'"
    };
    let bad = |why: &str| Fail::invalid(format!("{flag} {text:?}: {why}: write {form}"));
    let open = text
        .find('[')
        .ok_or_else(|| bad("the entry's key fields go in brackets after the list's path"))?;
    let path = &text[..open];
    if path.is_empty() {
        return Err(bad("the list's path comes before the ["));
    }
    field_path(flag, path, "status.parents")?;
    let close = text[open..]
        .find(']')
        .map(|at| open + at)
        .ok_or_else(|| bad("the [ is not closed"))?;
    let json = match &text[close + 1..] {
        "" => None,
        rest => Some(
            rest.strip_prefix('=')
                .ok_or_else(|| bad("after the ] comes =JSON or nothing"))?,
        ),
    };
    let mut entry = entry_fields(json, &bad)?;
    let keys = entry_keys(&text[open + 1..close], &mut entry, &bad)?;
    Ok(pb::ListEntryChange {
        path: path.to_string(),
        keys,
        entry_json: Value::Object(entry).to_string(),
        remove,
    })
}

/// The entry's fields from the `JSON` after `]=` (none without one); `bad` says why not.
fn entry_fields(
    json: Option<&str>,
    bad: &dyn Fn(&str) -> Fail,
) -> Result<Map<String, Value>, Fail> {
    let Some(json) = json else {
        return Ok(Map::new());
    };
    match serde_json::from_str::<Value>(json) {
        Ok(Value::Object(entry)) => Ok(entry),
        Ok(other) => Err(bad(&format!(
            "the JSON after the = is {}, not an object of the entry's fields",
            safewrite_mutation::type_name(&other)
        ))),
        Err(error) => Err(bad(&format!(
            "the JSON after the = does not parse ({error}); quote the whole value in single quotes"
        ))),
    }
}

/// The key fields named in the brackets (`KEY=VALUE` or a bare `KEY`, comma-separated),
/// each `VALUE` put into `entry`; `bad` says what is wrong.
fn entry_keys(
    brackets: &str,
    entry: &mut Map<String, Value>,
    bad: &dyn Fn(&str) -> Fail,
) -> Result<Vec<String>, Fail> {
    let mut keys: Vec<String> = Vec::new();
    for item in brackets.split(',') {
        let item = item.trim_start();
        let (key, value) = match item.split_once('=') {
            Some((key, value)) => (key.trim_end(), Some(value)),
            None => (item.trim_end(), None),
        };
        if key.is_empty() {
            return Err(bad("a key field's name is missing in the brackets"));
        }
        if keys.iter().any(|k| k == key) {
            return Err(bad(&format!("the key {key:?} is named twice")));
        }
        match value {
            Some(value) => match entry.get(key) {
                Some(Value::String(s)) if s == value => {}
                Some(other) => {
                    return Err(bad(&format!(
                        "the key {key:?} is {value:?} in the brackets and {other} in the JSON: give it once"
                    )));
                }
                None => {
                    entry.insert(key.to_string(), Value::String(value.to_string()));
                }
            },
            None if entry.get(key).is_none_or(Value::is_null) => {
                return Err(bad(&format!(
                    "the key {key:?} has no value: give it in the brackets ({key}=VALUE) or in the JSON after ]="
                )));
            }
            None => {}
        }
        keys.push(key.to_string());
    }
    Ok(keys)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn options() -> ChangeOptions {
        ChangeOptions {
            reason: Some("Reconciled".into()),
            ..Default::default()
        }
    }

    #[test]
    fn a_condition_is_type_equals_status_with_a_reason() {
        let mut with = options();
        with.message = Some("all good".into());
        with.observed_generation = Some(3);
        let c = condition("example.com/Ready=true", &with).unwrap();
        assert_eq!(
            (c.r#type.as_str(), c.status.as_str(), c.reason.as_str()),
            ("example.com/Ready", "True", "Reconciled")
        );
        assert_eq!(
            (c.message.as_str(), c.observed_generation),
            ("all good", Some(3))
        );
        assert_eq!(
            condition("Ready=unknown", &options()).unwrap().status,
            "Unknown"
        );
        for bad in ["Ready", "=True", "Ready=", "Ready=yes", "Ready=True=False"] {
            let fail = condition(bad, &options()).unwrap_err();
            assert!(
                fail.message.contains("e.g. --set-condition"),
                "{bad}: {}",
                fail.message
            );
        }
        let fail = condition("Ready=True", &ChangeOptions::default()).unwrap_err();
        assert!(fail.message.contains("needs --reason"), "{}", fail.message);
    }

    #[test]
    fn an_entry_takes_its_keys_from_the_brackets_and_the_rest_from_json() {
        let e = list_entry(
            "--upsert-entry",
            r#"status.parents[controllerName=example.com/gw, section=a=b]={"conditions": []}"#,
            false,
        )
        .unwrap();
        assert_eq!(e.path, "status.parents");
        assert_eq!(e.keys, ["controllerName", "section"]);
        let entry: Value = serde_json::from_str(&e.entry_json).unwrap();
        assert_eq!(
            entry,
            json!({"controllerName": "example.com/gw", "section": "a=b", "conditions": []})
        );
        assert!(!e.remove);
        // A bare key takes its value from the JSON (here an object).
        let e = list_entry(
            "--remove-entry",
            r#"status.parents[parentRef,controllerName=x]={"parentRef": {"name": "g"}}"#,
            true,
        )
        .unwrap();
        assert_eq!(e.keys, ["parentRef", "controllerName"]);
        assert!(e.remove);
        // The same value in both places is no contradiction; no JSON is the keys alone.
        list_entry("--upsert-entry", r#"l[k=v]={"k": "v"}"#, false).unwrap();
        let e = list_entry("--remove-entry", "spec.list[name=a]", true).unwrap();
        assert_eq!(e.entry_json, r#"{"name":"a"}"#);
    }

    #[test]
    fn a_bad_entry_says_what_to_write() {
        for bad in [
            "status.parents",
            "[k=v]={}",
            "status..parents[k=v]",
            "status.parents[k=v",
            "status.parents[]",
            "status.parents[k=v,]",
            "status.parents[k=v]{}",
            "status.parents[k=v]=[1]",
            "status.parents[k=v]={not json",
            "status.parents[k=v,k=w]",
            r#"status.parents[k=v]={"k": "w"}"#,
            "status.parents[k]",
            r#"status.parents[k]={"k": null}"#,
        ] {
            let fail = list_entry("--upsert-entry", bad, false).unwrap_err();
            assert_eq!(fail.class, super::super::Class::Invalid);
            assert!(
                fail.message.contains("write PATH[KEY=VALUE,...]=JSON")
                    || fail.message.contains("is not a path"),
                "{bad}: {}",
                fail.message
            );
        }
        let fail = list_entry("--upsert-entry", "l[k=v]=[1]", false).unwrap_err();
        assert!(
            fail.message.contains("a list, not an object"),
            "{}",
            fail.message
        );
    }

    #[test]
    fn options_go_with_their_change() {
        let reason = options();
        assert!(check_options("--set-condition", &reason).is_ok());
        let fail = check_options("--merge", &reason).unwrap_err();
        assert_eq!(
            fail.message,
            "--reason goes with --set-condition only, not with --merge: drop it"
        );
        let path = ChangeOptions {
            conditions_path: Some("status.x".into()),
            ..Default::default()
        };
        assert!(check_options("--remove-condition", &path).is_ok());
        let owner = ChangeOptions {
            controller: true,
            owner_api_version: Some("v1".into()),
            ..Default::default()
        };
        assert!(check_options("--add-owner", &owner).is_ok());
        let fail = check_options("--remove-owner", &owner).unwrap_err();
        assert!(
            fail.message
                .starts_with("--controller goes with --add-owner")
        );
    }

    #[test]
    fn each_change_flag_makes_its_mutation() {
        let change = |f: &dyn Fn(&mut ChangeFlags)| {
            let mut change = ChangeFlags {
                cel: None,
                merge: None,
                json_patch: None,
                apply: None,
                exec: None,
                set_condition: None,
                remove_condition: Vec::new(),
                add_finalizer: None,
                remove_finalizer: None,
                add_owner: None,
                remove_owner: None,
                upsert_entry: None,
                remove_entry: None,
            };
            f(&mut change);
            change
        };
        let none = change(&|_| {});
        assert_eq!(flag(&none), None);
        assert!(mutation(&none, &options()).unwrap().is_none());

        let c = change(&|c| c.remove_finalizer = Some("example.com/x".into()));
        assert_eq!(flag(&c), Some("--remove-finalizer"));
        match mutation(&c, &ChangeOptions::default()).unwrap() {
            Some(M::Finalizer(f)) => assert!(f.remove && f.finalizer == "example.com/x"),
            other => panic!("{other:?}"),
        }

        let c = change(&|c| c.remove_condition = vec!["A".into(), "B".into()]);
        let with_path = ChangeOptions {
            conditions_path: Some("status.sub.conditions".into()),
            ..Default::default()
        };
        match mutation(&c, &with_path).unwrap() {
            Some(M::RemoveCondition(r)) => {
                assert_eq!(
                    (r.types.len(), r.path.as_str()),
                    (2, "status.sub.conditions")
                )
            }
            other => panic!("{other:?}"),
        }
        let bad_path = ChangeOptions {
            conditions_path: Some("status/conditions".into()),
            ..Default::default()
        };
        assert!(mutation(&c, &bad_path).is_err());

        let c = change(&|c| c.add_owner = Some("cm/parent".into()));
        assert_eq!(owner(&c).unwrap().unwrap().name, "parent");
        let kind = kinds::offline(
            &kinds::parse("cm/parent").unwrap(),
            None,
            "--owner-api-version",
        )
        .unwrap();
        let owning = ChangeOptions {
            controller: true,
            ..Default::default()
        };
        let mut made = mutation(&c, &owning).unwrap();
        resolve_owner(&mut made, kind);
        match made {
            Some(M::OwnerReference(o)) => {
                let owner = o.owner.unwrap();
                assert_eq!(
                    (
                        owner.api_version.as_str(),
                        owner.kind.as_str(),
                        owner.name.as_str()
                    ),
                    ("v1", "ConfigMap", "parent")
                );
                assert!(owner.controller && !owner.block_owner_deletion && owner.uid.is_empty());
                assert!(!o.remove);
            }
            other => panic!("{other:?}"),
        }
        let c = change(&|c| c.remove_owner = Some("cm".into()));
        assert!(
            owner(&c)
                .unwrap_err()
                .message
                .starts_with("--remove-owner \"cm\"")
        );
    }
}
