//! The request's list-entry mutations, checked once before anything is sent: each field
//! as the API server would check it (metav1.Condition's rules, qualified names), named
//! exactly when it is refused.

use serde_json::Value;

use safewrite_api::pb;
use safewrite_api::target::{ApiVersion, FieldViolation, Kind, Name};

use super::change::{CONDITIONS, Condition, EntryChange, FieldPath, Owner};
use crate::value::{parse_json, short, type_name};

// === impl FieldPath ===

impl FieldPath {
    /// Parses `text` (`field` is its place in the request); empty takes `default`.
    fn parse(field: &str, text: &str, default: Option<&str>) -> Result<Self, FieldViolation> {
        let text = match (text, default) {
            ("", Some(default)) => default,
            ("", None) => {
                return Err(FieldViolation::new(
                    field,
                    "required: a path such as status.parents",
                ));
            }
            (text, _) => text,
        };
        let bad = |why: &str| {
            FieldViolation::new(
                field,
                format!("{why}: field names joined by dots, such as status.parents"),
            )
        };
        if text.len() > 512 {
            return Err(bad("longer than 512 characters"));
        }
        let segments: Vec<String> = text.split('.').map(str::to_string).collect();
        if segments.len() > 16 {
            return Err(bad("more than 16 field names"));
        }
        if segments.iter().any(|s| {
            s.is_empty()
                || !s
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '$')
        }) {
            return Err(bad("not a path"));
        }
        Ok(FieldPath {
            text: text.to_string(),
            segments,
        })
    }
}

// === impl EntryChange ===

impl EntryChange {
    /// Validates a `set_condition` mutation; `field` is the mutation's place in the
    /// request.
    pub(crate) fn set_condition(
        field: &str,
        set: &pb::SetCondition,
    ) -> Result<Self, FieldViolation> {
        set_conditions(&format!("{field}.set_condition"), set)
    }

    /// Validates a `remove_condition` mutation.
    pub(crate) fn remove_condition(
        field: &str,
        remove: &pb::RemoveCondition,
    ) -> Result<Self, FieldViolation> {
        remove_conditions(&format!("{field}.remove_condition"), remove)
    }

    /// Validates a `finalizer` mutation.
    pub(crate) fn finalizer(
        field: &str,
        change: &pb::FinalizerChange,
    ) -> Result<Self, FieldViolation> {
        let field = format!("{field}.finalizer.finalizer");
        qualified_name(&field, &change.finalizer, 253 + 1 + 63)?;
        Ok(EntryChange::Finalizer {
            value: change.finalizer.clone(),
            remove: change.remove,
        })
    }

    /// Validates an `owner_reference` mutation.
    pub(crate) fn owner_reference(
        field: &str,
        change: &pb::OwnerReferenceChange,
    ) -> Result<Self, FieldViolation> {
        let owner = owner(
            &format!("{field}.owner_reference.owner"),
            change.owner.as_ref(),
        )?;
        Ok(EntryChange::Owner {
            owner,
            remove: change.remove,
        })
    }

    /// Validates a `list_entry` mutation.
    pub(crate) fn list_entry(
        field: &str,
        change: &pb::ListEntryChange,
    ) -> Result<Self, FieldViolation> {
        list_entry(&format!("{field}.list_entry"), change)
    }
}

fn set_conditions(field: &str, set: &pb::SetCondition) -> Result<EntryChange, FieldViolation> {
    let path = FieldPath::parse(&format!("{field}.path"), &set.path, Some(CONDITIONS))?;
    if set.conditions.is_empty() {
        return Err(FieldViolation::new(
            format!("{field}.conditions"),
            "at least one condition is required",
        ));
    }
    let mut conditions: Vec<Condition> = Vec::with_capacity(set.conditions.len());
    for (i, c) in set.conditions.iter().enumerate() {
        let field = format!("{field}.conditions[{i}]");
        let condition = condition(&field, c)?;
        if conditions.iter().any(|seen| seen.type_ == condition.type_) {
            return Err(FieldViolation::new(
                format!("{field}.type"),
                format!("{:?} is set twice in one request", condition.type_),
            ));
        }
        conditions.push(condition);
    }
    Ok(EntryChange::SetConditions { path, conditions })
}

fn remove_conditions(
    field: &str,
    remove: &pb::RemoveCondition,
) -> Result<EntryChange, FieldViolation> {
    let path = FieldPath::parse(&format!("{field}.path"), &remove.path, Some(CONDITIONS))?;
    if remove.types.is_empty() {
        return Err(FieldViolation::new(
            format!("{field}.types"),
            "at least one condition type is required",
        ));
    }
    for (i, t) in remove.types.iter().enumerate() {
        qualified_name(&format!("{field}.types[{i}]"), t, 316)?;
    }
    Ok(EntryChange::RemoveConditions {
        path,
        types: remove.types.clone(),
    })
}

/// A condition as the API server's validation of metav1.Condition accepts it.
fn condition(field: &str, c: &pb::Condition) -> Result<Condition, FieldViolation> {
    qualified_name(&format!("{field}.type"), &c.r#type, 316)?;
    if !matches!(c.status.as_str(), "True" | "False" | "Unknown") {
        return Err(FieldViolation::new(
            format!("{field}.status"),
            format!(
                "must be \"True\", \"False\" or \"Unknown\", not {:?}",
                short(&c.status, 40)
            ),
        ));
    }
    let reason_field = format!("{field}.reason");
    if c.reason.is_empty() {
        return Err(FieldViolation::new(
            reason_field,
            "required: a CamelCase word, e.g. \"Reconciled\"",
        ));
    }
    if c.reason.len() > 1024 || !is_reason(&c.reason) {
        return Err(FieldViolation::new(
            reason_field,
            "must match ^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$ and be at most 1024 characters, e.g. \"Reconciled\"",
        ));
    }
    if c.message.len() > 32768 {
        return Err(FieldViolation::new(
            format!("{field}.message"),
            format!("{} bytes: at most 32768", c.message.len()),
        ));
    }
    if let Some(generation) = c.observed_generation
        && generation < 0
    {
        return Err(FieldViolation::new(
            format!("{field}.observed_generation"),
            "must not be negative",
        ));
    }
    let last_transition_time = match c.last_transition_time.as_str() {
        "" => None,
        text => Some(rfc3339(&format!("{field}.last_transition_time"), text)?),
    };
    Ok(Condition {
        type_: c.r#type.clone(),
        status: c.status.clone(),
        reason: c.reason.clone(),
        message: c.message.clone(),
        observed_generation: c.observed_generation,
        last_transition_time,
    })
}

/// An RFC 3339 time in UTC, as the API server stores it: in seconds.
fn rfc3339(field: &str, text: &str) -> Result<String, FieldViolation> {
    humantime::parse_rfc3339(text)
        .map(|time| humantime::format_rfc3339_seconds(time).to_string())
        .map_err(|_| {
            FieldViolation::new(
                field,
                format!(
                    "{:?} is not an RFC 3339 time in UTC, e.g. \"2026-11-26T15:04:05Z\"",
                    short(text, 40)
                ),
            )
        })
}

fn is_reason(text: &str) -> bool {
    let bytes = text.as_bytes();
    let inner = |b: &u8| b.is_ascii_alphanumeric() || matches!(b, b'_' | b',' | b':');
    bytes[0].is_ascii_alphabetic()
        && bytes.iter().all(inner)
        && (bytes.len() == 1
            || bytes[bytes.len() - 1].is_ascii_alphanumeric()
            || bytes[bytes.len() - 1] == b'_')
}

/// A Kubernetes qualified name: `[prefix/]name`, the name at most 63 characters of
/// `[A-Za-z0-9-_.]` starting and ending alphanumeric, the prefix a DNS-1123 subdomain;
/// at most `max` characters in all.
fn qualified_name(field: &str, text: &str, max: usize) -> Result<(), FieldViolation> {
    let (prefix, name) = match text.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, text),
    };
    let name_ok = !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && name.as_bytes()[0].is_ascii_alphanumeric()
        && name.as_bytes()[name.len() - 1].is_ascii_alphanumeric();
    let prefix_ok = prefix.is_none_or(safewrite_api::target::is_dns1123_subdomain);
    if text.len() <= max && name_ok && prefix_ok {
        return Ok(());
    }
    Err(FieldViolation::new(
        field,
        format!(
            "{:?} is not a qualified name ([prefix/]name: the name at most 63 characters of [A-Za-z0-9-_.] starting and ending alphanumeric, the prefix a DNS subdomain, e.g. \"example.com/cleanup\"; at most {max} in all)",
            short(text, 60)
        ),
    ))
}

fn owner(field: &str, owner: Option<&pb::OwnerReference>) -> Result<Owner, FieldViolation> {
    let Some(o) = owner else {
        return Err(FieldViolation::new(
            field,
            "required: the owner's api_version, kind and name",
        ));
    };
    let required = |name: &str, value: &str| {
        if value.is_empty() {
            Err(FieldViolation::new(format!("{field}.{name}"), "required"))
        } else {
            Ok(())
        }
    };
    required("api_version", &o.api_version)?;
    required("kind", &o.kind)?;
    required("name", &o.name)?;
    let uid = match o.uid.as_str() {
        "" => None,
        uid => Some(safewrite_api::target::opaque(&format!("{field}.uid"), uid)?),
    };
    Ok(Owner {
        api_version: ApiVersion::parse(&format!("{field}.api_version"), &o.api_version)?,
        kind: Kind::parse(&format!("{field}.kind"), &o.kind)?,
        name: Name::parse(&format!("{field}.name"), &o.name)?,
        uid,
        controller: o.controller,
        block_owner_deletion: o.block_owner_deletion,
    })
}

fn list_entry(field: &str, change: &pb::ListEntryChange) -> Result<EntryChange, FieldViolation> {
    let path = FieldPath::parse(&format!("{field}.path"), &change.path, None)?;
    let keys_field = format!("{field}.keys");
    if change.keys.is_empty() {
        return Err(FieldViolation::new(
            keys_field,
            "at least one key field is required, e.g. controllerName",
        ));
    }
    for (i, key) in change.keys.iter().enumerate() {
        if key.is_empty() || key.len() > 253 || change.keys[..i].contains(key) {
            return Err(FieldViolation::new(
                format!("{keys_field}[{i}]"),
                "a key field's name: not empty, at most 253 characters, each named once",
            ));
        }
    }
    let entry_field = format!("{field}.entry_json");
    let entry = parse_json(&entry_field, &change.entry_json)?;
    let Value::Object(entry) = entry else {
        return Err(FieldViolation::new(
            entry_field,
            format!("an entry must be a JSON object, got {}", type_name(&entry)),
        ));
    };
    if let Some(missing) = change
        .keys
        .iter()
        .find(|k| entry.get(k.as_str()).is_none_or(Value::is_null))
    {
        return Err(FieldViolation::new(
            entry_field,
            format!("the entry lacks its key field {:?}", short(missing, 60)),
        ));
    }
    Ok(EntryChange::ListEntry {
        path,
        keys: change.keys.clone(),
        entry,
        remove: change.remove,
    })
}
