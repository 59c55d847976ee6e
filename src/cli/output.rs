//! `-o json|yaml|name|jsonpath=TEMPLATE`: the written object, as kubectl prints it.
//! JSONPath is a subset: literal text with `{.a.b}`, `{.list[0].field}` and
//! `{.metadata.labels['app.kubernetes.io/name']}`; strings print bare, other values as
//! JSON, a missing field as nothing.

use serde_json::Value;

/// An output format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    Json,
    Yaml,
    Name,
    JsonPath(Vec<Piece>),
}

/// A piece of a JSONPath template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    Text(String),
    Path(Vec<PathStep>),
}

/// A step of a path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathStep {
    Key(String),
    Index(usize),
}

impl Output {
    /// Parses the value of `-o`.
    ///
    /// # Errors
    /// A message naming the formats, or what is wrong with the template.
    pub fn parse(text: &str) -> Result<Output, String> {
        match text {
            "json" => Ok(Output::Json),
            "yaml" => Ok(Output::Yaml),
            "name" => Ok(Output::Name),
            _ => match text.strip_prefix("jsonpath=") {
                Some(template) => template_of(template).map(Output::JsonPath),
                None => Err(format!(
                    "{text:?}: use json, yaml, name or jsonpath=TEMPLATE (e.g. jsonpath={{.data.n}})"
                )),
            },
        }
    }

    /// The object in this format; `name` is `kind[.group]/name`.
    ///
    /// # Errors
    /// A message when the object cannot be printed so.
    pub fn render(&self, object: &Value, name: &str) -> Result<String, String> {
        match self {
            Output::Json => serde_json::to_string_pretty(object).map_err(|e| e.to_string()),
            Output::Yaml => serde_saphyr::to_string(object)
                .map(|text| text.trim_end().to_string())
                .map_err(|e| e.to_string()),
            Output::Name => Ok(name.to_string()),
            Output::JsonPath(pieces) => Ok(pieces
                .iter()
                .map(|piece| match piece {
                    Piece::Text(text) => text.clone(),
                    Piece::Path(steps) => match lookup(object, steps) {
                        None => String::new(),
                        Some(Value::String(s)) => s.clone(),
                        Some(other) => other.to_string(),
                    },
                })
                .collect()),
        }
    }
}

fn lookup<'a>(object: &'a Value, steps: &[PathStep]) -> Option<&'a Value> {
    steps.iter().try_fold(object, |node, step| match step {
        PathStep::Key(key) => node.get(key.as_str()),
        PathStep::Index(i) => node.get(*i),
    })
}

fn template_of(template: &str) -> Result<Vec<Piece>, String> {
    let mut pieces = Vec::new();
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        if open > 0 {
            pieces.push(Piece::Text(rest[..open].to_string()));
        }
        let close = rest[open..]
            .find('}')
            .ok_or_else(|| format!("jsonpath {template:?}: a {{ is not closed"))?;
        pieces.push(Piece::Path(path_of(&rest[open + 1..open + close]).map_err(
            |why| format!("jsonpath {template:?}: {why} (supported: {{.a.b}}, {{.list[0].x}}, {{.labels['a.b/c']}})"),
        )?));
        rest = &rest[open + close + 1..];
    }
    if !rest.is_empty() {
        pieces.push(Piece::Text(rest.to_string()));
    }
    Ok(pieces)
}

fn path_of(path: &str) -> Result<Vec<PathStep>, String> {
    let mut steps = Vec::new();
    let mut rest = path.trim();
    if rest == "." || rest == "@" {
        return Ok(steps);
    }
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix("['") {
            let end = after.find("']").ok_or("a ['...'] is not closed")?;
            steps.push(PathStep::Key(after[..end].to_string()));
            rest = &after[end + 2..];
        } else if let Some(after) = rest.strip_prefix('[') {
            let end = after.find(']').ok_or("a [...] is not closed")?;
            let index = after[..end]
                .parse()
                .map_err(|_| format!("[{}] is not a list index", &after[..end]))?;
            steps.push(PathStep::Index(index));
            rest = &after[end + 1..];
        } else if let Some(after) = rest.strip_prefix('.') {
            let end = after.find(['.', '[']).unwrap_or(after.len());
            if end == 0 {
                return Err(format!("{path:?} has an empty field name"));
            }
            steps.push(PathStep::Key(after[..end].to_string()));
            rest = &after[end..];
        } else {
            return Err(format!("{path:?} must start with a dot"));
        }
    }
    Ok(steps)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn jsonpath_prints_fields_indexes_and_quoted_keys() {
        let object = json!({
            "metadata": {"name": "x", "labels": {"app.kubernetes.io/name": "web"}},
            "data": {"n": "3"},
            "list": [{"a": 1}, {"a": {"b": true}}]
        });
        let out = |t: &str| {
            Output::parse(&format!("jsonpath={t}"))
                .unwrap()
                .render(&object, "cm/x")
                .unwrap()
        };
        assert_eq!(out("{.data.n}"), "3");
        assert_eq!(out("n={.data.n};"), "n=3;");
        assert_eq!(out("{.list[1].a}"), r#"{"b":true}"#);
        assert_eq!(out("{.metadata.labels['app.kubernetes.io/name']}"), "web");
        assert_eq!(out("{.data.missing}"), "");
        for bad in [
            "jsonpath={.data",
            "jsonpath={data}",
            "jsonpath={.list[x]}",
            "table",
        ] {
            assert!(Output::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(
            Output::Name.render(&object, "configmap/x").unwrap(),
            "configmap/x"
        );
    }
}
