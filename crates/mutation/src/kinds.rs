//! A mutation of the request, validated and compiled once ([`Mutation::from_proto`]),
//! then applied to the fresh object on every attempt ([`Mutation::apply`]).

use serde_json::Value;

use safewrite_api::deadline::AnswerBy;
use safewrite_api::pb;
use safewrite_api::target::FieldViolation;

use crate::cel::Cel;
use crate::entries::EntryChange;
use crate::error::ApplyError;
use crate::value::{EXCERPT, parse_json, short, type_name};

/// A validated mutation.
#[derive(Debug, Clone)]
pub enum Mutation {
    /// RFC 6902.
    JsonPatch(json_patch::Patch),
    /// RFC 7386.
    MergePatch(Value),
    /// Server-side apply; `configuration` is a JSON object.
    Apply {
        /// The applied configuration, a JSON object.
        configuration: Value,
        /// Server-side apply's `force`: take the fields other managers own.
        force: bool,
    },
    /// A CEL expression returning a merge patch.
    Cel(Cel),
    /// A change to one entry of a list: conditions, finalizers, owner references, keyed
    /// list entries ([`crate::entries`]).
    Entry(EntryChange),
}

// === impl Mutation ===

impl Mutation {
    /// Validates and compiles the request's mutation; `field` is its path in the request.
    pub fn from_proto(
        field: &str,
        mutation: Option<&pb::Mutation>,
    ) -> Result<Self, FieldViolation> {
        use pb::mutation::Kind;
        let kind = mutation.and_then(|m| m.kind.as_ref()).ok_or_else(|| {
            FieldViolation::new(
                field,
                "a mutation is required: set one of json_patch, merge_patch, apply, cel, set_condition, remove_condition, finalizer, owner_reference or list_entry",
            )
        })?;
        match kind {
            Kind::JsonPatch(p) => {
                let field = format!("{field}.json_patch.patch_json");
                let value = parse_json(&field, &p.patch_json)?;
                let patch: json_patch::Patch = serde_json::from_value(value).map_err(|e| {
                    FieldViolation::new(
                        &field,
                        format!(
                            "not an RFC 6902 JSON Patch (an array of operations): {}",
                            short(&e.to_string(), EXCERPT)
                        ),
                    )
                })?;
                Ok(Mutation::JsonPatch(patch))
            }
            Kind::MergePatch(p) => {
                let field = format!("{field}.merge_patch.patch_json");
                let value = parse_json(&field, &p.patch_json)?;
                if !value.is_object() {
                    return Err(FieldViolation::new(
                        &field,
                        format!(
                            "a merge patch must be a JSON object, got {}",
                            type_name(&value)
                        ),
                    ));
                }
                Ok(Mutation::MergePatch(value))
            }
            Kind::Apply(a) => {
                let field = format!("{field}.apply.configuration_json");
                let value = parse_json(&field, &a.configuration_json)?;
                if !value.is_object() {
                    return Err(FieldViolation::new(
                        &field,
                        "an apply configuration must be a JSON object",
                    ));
                }
                Ok(Mutation::Apply {
                    configuration: value,
                    force: a.force,
                })
            }
            Kind::Cel(c) => Ok(Mutation::Cel(Cel::compile(
                &format!("{field}.cel.expression"),
                &c.expression,
            )?)),
            Kind::SetCondition(set) => EntryChange::set_condition(field, set).map(Mutation::Entry),
            Kind::RemoveCondition(remove) => {
                EntryChange::remove_condition(field, remove).map(Mutation::Entry)
            }
            Kind::Finalizer(change) => EntryChange::finalizer(field, change).map(Mutation::Entry),
            Kind::OwnerReference(change) => {
                EntryChange::owner_reference(field, change).map(Mutation::Entry)
            }
            Kind::ListEntry(change) => EntryChange::list_entry(field, change).map(Mutation::Entry),
        }
    }

    /// Applies the mutation to a copy of `fresh` and returns the new object. Not for
    /// server-side apply, which the API server performs. A CEL mutation waits for an
    /// evaluation slot and evaluates no later than `deadline`.
    pub async fn apply(&self, fresh: &Value, deadline: AnswerBy) -> Result<Value, ApplyError> {
        match self {
            Mutation::JsonPatch(patch) => {
                let mut doc = fresh.clone();
                json_patch::patch(&mut doc, patch).map_err(|err| {
                    let index = err.operation;
                    let path = patch
                        .0
                        .get(index)
                        .map(|op| short(op.path().as_ref(), EXCERPT))
                        .unwrap_or_default();
                    match err.kind {
                        json_patch::PatchErrorKind::TestFailed => {
                            ApplyError::TestFailed { index, path }
                        }
                        kind => ApplyError::PatchDoesNotApply {
                            index,
                            path,
                            reason: short(&kind.to_string(), EXCERPT),
                        },
                    }
                })?;
                Ok(doc)
            }
            Mutation::MergePatch(patch) => {
                let mut doc = fresh.clone();
                json_patch::merge(&mut doc, patch);
                Ok(doc)
            }
            Mutation::Cel(cel) => {
                let patch = cel.evaluate(fresh, deadline).await?;
                if !patch.is_object() {
                    return Err(ApplyError::CelNotAMap(type_name(&patch).into()));
                }
                let mut doc = fresh.clone();
                json_patch::merge(&mut doc, &patch);
                Ok(doc)
            }
            Mutation::Apply { configuration, .. } => {
                let mut doc = fresh.clone();
                json_patch::merge(&mut doc, configuration);
                Ok(doc)
            }
            Mutation::Entry(change) => change.apply(fresh, std::time::SystemTime::now()),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::Mutation;
    use crate::cel::{Cel, CelError};
    use crate::error::ApplyError;
    use safewrite_api::deadline::AnswerBy;
    use safewrite_api::pb;

    fn cel(expression: &str) -> Option<pb::Mutation> {
        Some(pb::Mutation {
            kind: Some(pb::mutation::Kind::Cel(pb::CelMutation {
                expression: expression.into(),
            })),
        })
    }

    fn json_patch(patch: &str) -> Option<pb::Mutation> {
        Some(pb::Mutation {
            kind: Some(pb::mutation::Kind::JsonPatch(pb::JsonPatch {
                patch_json: patch.into(),
            })),
        })
    }

    #[tokio::test]
    async fn cel_increments_a_counter_read_from_the_fresh_object() {
        let m = Mutation::from_proto(
            "mutation",
            cel(r#"{"data": {"n": string(int(object.data.n) + 1)}}"#).as_ref(),
        )
        .unwrap();
        let fresh = json!({"data": {"n": "41", "keep": "x"}});
        let new = m.apply(&fresh, AnswerBy::NONE).await.unwrap();
        assert_eq!(new, json!({"data": {"n": "42", "keep": "x"}}));
    }

    #[tokio::test]
    async fn cel_appends_to_a_list_only_if_absent() {
        let expr = r#"{"spec": {"items": "b" in object.spec.items ? object.spec.items : object.spec.items + ["b"]}}"#;
        let m = Mutation::from_proto("mutation", cel(expr).as_ref()).unwrap();
        let once = m
            .apply(&json!({"spec": {"items": ["a"]}}), AnswerBy::NONE)
            .await
            .unwrap();
        assert_eq!(once, json!({"spec": {"items": ["a", "b"]}}));
        let twice = m.apply(&once, AnswerBy::NONE).await.unwrap();
        assert_eq!(twice, once);
    }

    #[tokio::test]
    async fn json_integers_are_cel_ints() {
        let m = Mutation::from_proto(
            "mutation",
            cel(r#"{"status": {"count": object.status.count + 1}}"#).as_ref(),
        )
        .unwrap();
        let new = m
            .apply(&json!({"status": {"count": 0}}), AnswerBy::NONE)
            .await
            .unwrap();
        assert_eq!(new, json!({"status": {"count": 1}}));
    }

    #[test]
    fn bad_cel_is_a_field_violation_naming_the_field() {
        let err = Mutation::from_proto("mutation", cel("{{{").as_ref()).unwrap_err();
        assert_eq!(err.field, "mutation.cel.expression");
        assert!(err.description.contains("does not compile"), "{err}");
    }

    #[tokio::test]
    async fn cel_that_is_not_a_map_or_fails_on_the_object_is_an_apply_error() {
        let m = Mutation::from_proto("m", cel("1 + 1").as_ref()).unwrap();
        assert!(matches!(
            m.apply(&json!({}), AnswerBy::NONE).await,
            Err(ApplyError::CelNotAMap(_))
        ));
        let m = Mutation::from_proto("m", cel("{'a': object.missing.key}").as_ref()).unwrap();
        assert!(matches!(
            m.apply(&json!({}), AnswerBy::NONE).await,
            Err(ApplyError::Cel(CelError::Failed(_)))
        ));
    }

    #[tokio::test]
    async fn json_patch_test_failure_is_a_precondition_failure() {
        let m = Mutation::from_proto(
            "mutation",
            json_patch(r#"[{"op": "test", "path": "/a", "value": 1}, {"op": "replace", "path": "/a", "value": 2}]"#).as_ref(),
        )
        .unwrap();
        assert_eq!(
            m.apply(&json!({"a": 1}), AnswerBy::NONE).await.unwrap(),
            json!({"a": 2})
        );
        assert_eq!(
            m.apply(&json!({"a": 5}), AnswerBy::NONE).await.unwrap_err(),
            ApplyError::TestFailed {
                index: 0,
                path: "/a".into()
            }
        );
    }

    #[test]
    fn malformed_patches_name_their_field() {
        let err = Mutation::from_proto("mutation", json_patch("{not json").as_ref()).unwrap_err();
        assert_eq!(err.field, "mutation.json_patch.patch_json");
        let err =
            Mutation::from_proto("mutation", json_patch(r#"{"op": "add"}"#).as_ref()).unwrap_err();
        assert!(err.description.contains("RFC 6902"), "{err}");
        let merge = Some(pb::Mutation {
            kind: Some(pb::mutation::Kind::MergePatch(pb::MergePatch {
                patch_json: "[1, 2]".into(),
            })),
        });
        let err = Mutation::from_proto("mutation", merge.as_ref()).unwrap_err();
        assert_eq!(err.field, "mutation.merge_patch.patch_json");
        assert!(err.description.contains("must be a JSON object"), "{err}");
        let err = Mutation::from_proto("mutation", None).unwrap_err();
        assert_eq!(err.field, "mutation");
    }

    #[tokio::test]
    async fn patch_errors_quote_a_short_excerpt() {
        let long = "a".repeat(20_000);
        let err = Mutation::from_proto(
            "mutation",
            json_patch(&format!(r#"[{{"op": "{long}", "path": "/a"}}]"#)).as_ref(),
        )
        .unwrap_err();
        assert!(err.description.len() < 300, "{err}");
        let err =
            Mutation::from_proto("mutation", json_patch(&format!("[{long}")).as_ref()).unwrap_err();
        assert!(err.description.len() < 300, "{err}");
        let m = Mutation::from_proto(
            "mutation",
            json_patch(&format!(r#"[{{"op": "remove", "path": "/{long}"}}]"#)).as_ref(),
        )
        .unwrap();
        let err = m.apply(&json!({}), AnswerBy::NONE).await.unwrap_err();
        assert!(err.to_string().len() < 600, "{err}");
    }

    #[tokio::test]
    async fn cel_conditions_must_return_bool() {
        let c = Cel::compile("c", "object.spec.size > 2").unwrap();
        assert!(
            c.holds(&json!({"spec": {"size": 3}}), AnswerBy::NONE)
                .await
                .unwrap()
        );
        assert!(
            !c.holds(&json!({"spec": {"size": 1}}), AnswerBy::NONE)
                .await
                .unwrap()
        );
        let c = Cel::compile("c", "'yes'").unwrap();
        assert!(matches!(
            c.holds(&json!({}), AnswerBy::NONE).await,
            Err(CelError::NotABool(_))
        ));
    }
}
