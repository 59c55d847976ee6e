//! Policy files (`--policy FILE`): YAML (or JSON) with one key, `allow`, a list of rules, each in the flag
//! syntax or a map of `kinds`, `namespaces`, `subresources` and `operations`.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::rule::{
    ALL_OPERATIONS, Rule, RuleError, parse_group_kind, parse_namespaces, split_list,
};

/// Why a policy could not be loaded. Each is a configuration problem reported in one
/// line at start.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    /// The policy file could not be read.
    #[error("failed to read policy file {}", path.display())]
    Read {
        /// The policy file's path.
        path: PathBuf,
        /// Why it could not be read.
        #[source]
        source: std::io::Error,
    },
    /// The policy file is not YAML or JSON of the expected shape.
    #[error("failed to load policy file {}: {message}", path.display())]
    Invalid {
        /// The policy file's path.
        path: PathBuf,
        /// What the parser said.
        message: String,
    },
    /// A rule of the policy file does not parse.
    #[error("failed to load policy file {}: rule {index}: {source}", path.display())]
    Rule {
        /// The policy file's path.
        path: PathBuf,
        /// The rule's index in the file's list, from 0.
        index: usize,
        /// Why the rule does not parse.
        #[source]
        source: RuleError,
    },
}

/// The rules of the policy file at `path`.
pub(super) fn load(path: &Path) -> Result<Vec<Rule>, PolicyError> {
    let text = std::fs::read_to_string(path).map_err(|source| PolicyError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    parse_file(path, &text)
}

/// The rules of a policy file: YAML (or JSON) with one key, `allow`, a list whose items
/// are rules in the flag syntax or maps with `kinds` (required), `namespaces`,
/// `subresources` and `operations`, each a string or a list of strings.
fn parse_file(path: &Path, text: &str) -> Result<Vec<Rule>, PolicyError> {
    let items = allow_items(path, text)?;
    let mut rules = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let index = i + 1;
        let origin = format!("{} rule {index}", path.display());
        let at = |source: RuleError| PolicyError::Rule {
            path: path.to_path_buf(),
            index,
            source,
        };
        match item {
            Value::String(text) => {
                let mut rule = Rule::parse(text).map_err(at)?;
                rule.origin = origin;
                rules.push(rule);
            }
            Value::Object(map) => rules.extend(map_rules(map, &origin).map_err(at)?),
            _ => {
                return Err(at(RuleError(
                    "a rule is a string in the --allow syntax or a map with kinds, namespaces, subresources, operations".into(),
                )));
            }
        }
    }
    Ok(rules)
}

/// The items of the file's `allow` list; the file is a map with no other key.
fn allow_items(path: &Path, text: &str) -> Result<Vec<Value>, PolicyError> {
    let invalid = |message: String| PolicyError::Invalid {
        path: path.to_path_buf(),
        message,
    };
    let document: Value = if text.trim_start().starts_with('{') {
        serde_json::from_str(text).map_err(|e| invalid(e.to_string()))?
    } else {
        // Its first line: the rest is a rendering of the source around the error.
        serde_saphyr::from_str(text).map_err(|e| {
            let text = e.to_string();
            invalid(text.lines().next().unwrap_or("not YAML").trim().to_string())
        })?
    };
    let Value::Object(mut top) = document else {
        return Err(invalid(
            "expected a map with the key allow (a list of rules)".into(),
        ));
    };
    if let Some(key) = top.keys().find(|k| *k != "allow") {
        return Err(invalid(format!(
            "unknown key {key:?}: the only key is allow (a list of rules)"
        )));
    }
    match top.remove("allow") {
        Some(Value::Array(items)) => Ok(items),
        Some(Value::Null) => Ok(Vec::new()),
        _ => Err(invalid(
            "allow must be a list of rules (an empty list allows nothing)".into(),
        )),
    }
}

/// The rules of one map item (one per kind it names), each with `origin`.
fn map_rules(map: &Map<String, Value>, origin: &str) -> Result<Vec<Rule>, RuleError> {
    if let Some(key) = map
        .keys()
        .find(|k| !["kinds", "namespaces", "subresources", "operations"].contains(&k.as_str()))
    {
        return Err(RuleError(format!(
            "unknown key {key:?}: use kinds, namespaces, subresources and operations"
        )));
    }
    let list = |key: &str| strings(map.get(key)).map_err(|e| RuleError(format!("{key}: {e}")));
    let kinds = list("kinds")?;
    if kinds.is_empty() {
        return Err(RuleError(
            "kinds is required: GROUP/KIND items such as apps/Deployment, or *".into(),
        ));
    }
    let namespaces = parse_namespaces(&list("namespaces")?)?;
    let subresources = list("subresources")?;
    let operations = list("operations")?;
    let mut rules = Vec::new();
    for kind in kinds {
        let (group, kind) = parse_group_kind(&kind)?;
        let rule = Rule {
            group,
            kind,
            namespaces: namespaces.clone(),
            main: true,
            status: true,
            operations: ALL_OPERATIONS,
            origin: origin.to_string(),
        }
        .with_subresources(&subresources)?
        .with_operations(&operations)?;
        rules.push(rule);
    }
    Ok(rules)
}

/// A string or a list of strings (numbers are taken as their text), each item split at
/// commas like the flag syntax; absent or null is empty.
fn strings(value: Option<&Value>) -> Result<Vec<String>, String> {
    let one = |v: &Value| match v {
        Value::String(s) => Ok(split_list(s)),
        Value::Number(n) => Ok(vec![n.to_string()]),
        _ => Err("expected a string or a list of strings".to_string()),
    };
    match value {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) => Ok(items
            .iter()
            .map(one)
            .collect::<Result<Vec<_>, _>>()?
            .concat()),
        Some(v) => one(v),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policy_files_hold_yaml_or_json_rules() {
        let path = Path::new("policy.yaml");
        let yaml = r#"
# what the controller writes
allow:
  - kinds: [apps/Deployment, apps/StatefulSet]
    namespaces: [ns1, "team-*"]
    subresources: status
    operations: [patch-status, transact]
  - "core/ConfigMap:ns1:main"
"#;
        let rules = parse_file(path, yaml).unwrap();
        let printed: Vec<String> = rules.iter().map(Rule::to_string).collect();
        assert_eq!(
            printed,
            [
                "apps/Deployment:ns1,team-*:status:patch-status,transact",
                "apps/StatefulSet:ns1,team-*:status:patch-status,transact",
                "core/ConfigMap:ns1:main:*",
            ]
        );
        assert_eq!(rules[2].origin(), "policy.yaml rule 2");
        let json = r#"{"allow": [{"kinds": "core/Secret", "namespaces": "vault"}]}"#;
        let rules = parse_file(path, json).unwrap();
        assert!(rules[0].names_secrets());
        // An empty list allows nothing.
        assert!(parse_file(path, "allow: []").unwrap().is_empty());

        for (text, says) in [
            (
                "allow:\n  - kinds: apps/Deployment\n    namespace: ns1\n",
                "unknown key \"namespace\"",
            ),
            ("rules: []", "unknown key \"rules\""),
            ("allow:\n  - namespaces: [a]\n", "kinds is required"),
            ("allow:\n  - Deployment\n", "rule 1"),
            ("allow: {}", "allow must be a list"),
            ("- a", "expected a map"),
        ] {
            let err = parse_file(path, text).unwrap_err().to_string();
            assert!(err.contains(says), "{text:?}: {err}");
        }
    }
}
