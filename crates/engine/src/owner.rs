//! An owner named without a uid: read once, before the write's loop, so that the
//! reference carries the uid of the object that exists now. A namespaced owner lives in
//! the object's own namespace; a cluster-scoped object cannot have one.

use serde_json::Value;

use safewrite_api::deadline::AnswerBy;
use safewrite_api::deadline::CallDeadline;
use safewrite_api::target::FieldViolation;
use safewrite_api::target::{Namespace, ResourcePath, Verb, WriteParams};
use safewrite_mutation::{EntryChange, Mutation};

use super::api::{Api, Sent};
use super::decide::Failed;
use super::error::{Failure, Unresolved, WriteError, unresolved};
use super::spec::WriteSpec;

const FIELD: &str = "mutation.owner_reference.owner";

impl Api {
    /// `spec` with its owner's uid read from the owner, when it names an owner to ensure
    /// without one; `None` when there is nothing to read.
    pub(super) async fn with_owner_uid(
        &self,
        spec: &WriteSpec,
        deadline: CallDeadline,
    ) -> Result<Option<WriteSpec>, WriteError> {
        let Some(Mutation::Entry(change)) = &spec.mutation else {
            return Ok(None);
        };
        let Some(owner) = change.owner_to_resolve() else {
            return Ok(None);
        };
        let deadline = deadline.answer_by();
        let uid = self
            .owner_uid(spec, owner, deadline)
            .await
            .map_err(|failure| WriteError {
                failure,
                attempts: Vec::new(),
            })?;
        let mut resolved = spec.clone();
        if let Some(Mutation::Entry(EntryChange::Owner { owner, .. })) = &mut resolved.mutation {
            owner.uid = Some(uid);
        }
        Ok(Some(resolved))
    }

    async fn owner_uid(
        &self,
        spec: &WriteSpec,
        owner: &safewrite_mutation::entries::Owner,
        deadline: AnswerBy,
    ) -> Result<String, Failure> {
        let resolved = match self
            .discovery
            .resolve(&owner.api_version, &owner.kind, deadline)
            .await
        {
            Ok(resolved) => resolved,
            Err(error) => {
                return Err(match unresolved(error, deadline.instant(), 1) {
                    Unresolved::Invalid(
                        unknown @ (Failure::UnknownKind { .. } | Failure::BadApiVersion(_)),
                    ) => Failure::Invalid(FieldViolation::new(
                        format!("{FIELD}.kind"),
                        format!("{unknown}: is the owner's kind served?"),
                    )),
                    Unresolved::Invalid(failure) | Unresolved::Request(_, failure) => failure,
                });
            }
        };
        let namespace = if resolved.namespaced {
            if spec.target.namespace.is_empty() {
                return Err(Failure::Invalid(FieldViolation::new(
                    FIELD,
                    format!(
                        "{} is namespaced and {} is cluster-scoped: a cluster-scoped object cannot have a namespaced owner",
                        &*owner.kind, &*spec.target.kind
                    ),
                )));
            }
            spec.target.namespace.clone()
        } else {
            Namespace::parse(FIELD, "").expect("empty is cluster-scoped")
        };
        let resource = &resolved.resource;
        let path = ResourcePath::new(&resource.group, &resource.version, &resource.plural)
            .ok_or_else(|| {
                Failure::Invalid(FieldViolation::new(
                    format!("{FIELD}.kind"),
                    "discovery answered a resource path that is not a DNS name",
                ))
            })?
            .object(&namespace, &owner.name);
        let get = path.request(Verb::Get, false, &WriteParams::default(), Vec::new());
        let answer = match self.send(get, deadline, 1).await {
            Sent::Answer(answer) => answer,
            Sent::Failed(failure, ..) => return Err(failure),
        };
        if answer.code == 404 {
            let place = if namespace.is_empty() {
                String::new()
            } else {
                format!(" in namespace {}", &*namespace)
            };
            return Err(Failure::PreconditionFailed {
                reason: format!("the owner {} does not exist{place}", owner.describe()),
                current: Value::Null,
            });
        }
        if answer.code != 200 {
            return Err(Failed::from_answer(&answer, None).into_failure());
        }
        let object = answer.object().map_err(Failure::BadAnswer)?;
        match object["metadata"]["uid"].as_str() {
            Some(uid) if !uid.is_empty() => Ok(uid.to_string()),
            _ => Err(Failure::Invalid(FieldViolation::new(
                FIELD,
                format!("the owner {} has no metadata.uid", owner.describe()),
            ))),
        }
    }
}
