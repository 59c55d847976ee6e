//! The fold: what one read object becomes when a batch's members are applied to it in
//! order, each seeing the effect of those before it ([`fold`]), exactly as if the
//! members had been written one after another; each member's own answer is produced
//! from the one write by `ends::answer_each`. A write made alone is a fold of one.

use serde_json::Value;

use super::member::FoldEntry;
use crate::body::{main_body, resource_version, status_body};
use crate::error::Failure;
use crate::idempotency;
use crate::spec::{Change, Mutator, Subresource};

/// What the running result of a batch made of one member.
#[derive(Debug)]
pub(crate) enum Verdict {
    /// Its change is in the body to write. The patch undoes it: applied to the running
    /// result right after this member's entry, it gives the result right before, so each
    /// member's own state can be produced from the written object when it is answered
    /// (`ends::answer_each`) instead of being kept.
    Changed(json_patch::Patch),
    /// Its change was already made (by the members before it, or before the read).
    Unchanged,
    /// Its idempotency key is on the object: made by an earlier write.
    AlreadyApplied,
    /// Its own code chose to write nothing.
    Aborted,
    /// It fails alone and is left out of the write. Its current object is filled in
    /// when it is answered (`ends::answer_each`).
    Failed(Failure),
}

/// Whether a member's failure was decided by the object it was offered, so that a stale
/// copy could have decided it wrongly: a false precondition, a mutation that does not
/// apply. Not a failure of the caller's own (gone, out of time, a broken Transact
/// protocol): no live read changes those, and after them nothing more may be written on
/// the caller's behalf.
pub(crate) fn verdict_of_the_object(failure: &Failure) -> bool {
    matches!(
        failure,
        Failure::PreconditionFailed { .. }
            | Failure::Fenced { .. }
            | Failure::Mutation { .. }
            | Failure::ResourceVersionMismatch { .. }
    )
}

/// Applies each member's idempotency check, preconditions and mutation, in order, to
/// the running result that starts as `fresh`: each member sees the effect of those
/// before it, exactly as if each had been written in entry. The body to write (with the
/// keys of the members that changed it) and each member's verdict. A failure's current
/// object is left empty here: `ends::answer_each` gives it the state at the member's entry.
pub(crate) async fn fold(
    fresh: &Value,
    has_status: bool,
    entries: &mut [FoldEntry<'_>],
) -> (Value, Vec<Verdict>) {
    let version = resource_version(fresh);
    // The object as read until a member changes it: a write made alone copies it at
    // most once (its change), never to start the fold.
    let mut running = std::borrow::Cow::Borrowed(fresh);
    let mut verdicts = Vec::with_capacity(entries.len());
    for (index, entry) in entries.iter_mut().enumerate() {
        // The first member's change is never undone: no member before it needs a state.
        let undo = index > 0;
        let (mut verdict, body) = apply_member(entry, &running, has_status, &version, undo).await;
        if let Some(body) = body {
            running = std::borrow::Cow::Owned(body);
        }
        if let Verdict::Failed(failure) = &mut verdict
            && let Some(current) = failure.current_mut()
        {
            *current = Value::Null;
        }
        verdicts.push(verdict);
    }
    (running.into_owned(), verdicts)
}

/// One member's verdict on the running result, and the new running result when it
/// changed it.
async fn apply_member(
    entry: &mut FoldEntry<'_>,
    running: &Value,
    has_status: bool,
    version: &str,
    undo: bool,
) -> (Verdict, Option<Value>) {
    let spec = entry.mutator.spec;
    if let Some(key) = &spec.idempotency_key
        && idempotency::applied(running, key)
    {
        return (Verdict::AlreadyApplied, None);
    }
    if let Some(fence) = &spec.fence
        && let Err(failure) = fence.admits(running)
    {
        return (Verdict::Failed(failure), None);
    }
    let deadline = entry.mutator.deadline;
    if let Err(failure) = spec.preconditions.check(running, deadline).await {
        return (Verdict::Failed(failure), None);
    }
    let mutated = match entry.mutator.mutate(entry.attempt, running, false).await {
        Ok(Change::Object(mutated)) => mutated,
        Ok(Change::Abort) => return (Verdict::Aborted, None),
        Err(failure) => return (Verdict::Failed(failure), None),
    };
    let mut body = match spec.subresource {
        Subresource::Main => main_body(running, mutated, has_status, version),
        Subresource::Status => status_body(running, &mutated),
    };
    if body == *running {
        return (Verdict::Unchanged, None);
    }
    if let Some(key) = &spec.idempotency_key {
        idempotency::record(&mut body, [key.as_str()]);
    }
    if let Some(fence) = &spec.fence
        && spec.subresource == Subresource::Main
    {
        fence.record(&mut body);
    }
    let undo = if undo {
        json_patch::diff(&body, running)
    } else {
        json_patch::Patch::default()
    };
    (Verdict::Changed(undo), Some(body))
}

#[cfg(test)]
mod tests {
    //! Group commit's semantics: a batch's fold equals writing its members one at a
    //! time, in order, for random members (merge patches, JSON Patches with `test`,
    //! patches that do not apply, CEL increments, CEL preconditions, idempotency keys).
    use std::time::Duration;

    use std::sync::Arc;

    use serde_json::json;

    use super::*;
    use crate::MAX_MEMBERS;
    use crate::result::{Object, Serial};
    use crate::spec::WriteSpec;
    use crate::spec::configmap_write;
    use crate::write::member::MemberMutator;
    use safewrite_api::backoff::Backoff;
    use safewrite_api::deadline::AnswerBy;
    use safewrite_mutation::{Cel, Mutation};

    fn spec(mutation: Mutation, cel: Option<Cel>, key: Option<&str>) -> WriteSpec {
        let policy = crate::RetryPolicy {
            max_attempts: 5,
            backoff: Backoff {
                initial: Duration::from_millis(10),
                max: Duration::from_secs(1),
            },
        };
        let mut spec = configmap_write(mutation, policy);
        spec.preconditions.cel = cel;
        spec.idempotency_key = key.map(str::to_string);
        spec
    }

    fn random_member(rng: &mut fastrand::Rng, increment: &Cel, guard: &Cel) -> WriteSpec {
        let pick = rng.u64(..);
        let mut values = fastrand::Rng::with_seed(pick);
        let mut value = || json!(["0", "1", "2"][values.usize(..3)]);
        let mutation = match rng.usize(..5) {
            0 => Mutation::MergePatch(json!({"data": {"a": value()}})),
            1 => {
                let b = if rng.bool() { Value::Null } else { value() };
                Mutation::MergePatch(json!({"data": {"b": b}}))
            }
            2 => Mutation::JsonPatch(
                serde_json::from_value(json!([
                    {"op": "test", "path": "/data/a", "value": value()},
                    {"op": "replace", "path": "/data/a", "value": value()}
                ]))
                .unwrap(),
            ),
            3 => Mutation::JsonPatch(
                serde_json::from_value(json!([{"op": "remove", "path": "/data/b"}])).unwrap(),
            ),
            _ => Mutation::Cel(increment.clone()),
        };
        let precondition = rng.bool().then(|| guard.clone()).filter(|_| rng.bool());
        let key = ["k1", "k2", "k3", "k4"][rng.usize(..4)];
        spec(mutation, precondition, rng.bool().then_some(key))
    }

    /// A verdict's name, for comparing (failures by kind).
    fn name(verdict: &Verdict) -> String {
        match verdict {
            Verdict::Changed(_) => "changed".into(),
            Verdict::Unchanged => "unchanged".into(),
            Verdict::AlreadyApplied => "already_applied".into(),
            Verdict::Aborted => "aborted".into(),
            Verdict::Failed(failure) => format!("failed:{}", failure.kind()),
        }
    }

    /// Folds `specs` (declarative members) over `fresh`.
    async fn fold_specs(fresh: &Value, specs: &[&WriteSpec]) -> (Value, Vec<Verdict>) {
        let mut entries: Vec<FoldEntry> = specs
            .iter()
            .map(|spec| FoldEntry {
                attempt: 1,
                mutator: MemberMutator {
                    spec,
                    own: None,
                    deadline: AnswerBy::NONE,
                },
            })
            .collect();
        fold(fresh, false, &mut entries).await
    }

    /// Each member's state as `ends::answer_each` gives it: the object as read before the
    /// first change, else made from the batch's [`Serial`], shared (copied) for all
    /// but the one made last, which takes the written object itself.
    fn states(fresh: &Value, verdicts: Vec<Verdict>, body: Value, written: Value) -> Vec<Value> {
        let first_change = verdicts
            .iter()
            .position(|v| matches!(v, Verdict::Changed(_)))
            .unwrap_or(verdicts.len());
        let undos = verdicts
            .into_iter()
            .map(|verdict| match verdict {
                Verdict::Changed(undo) => Some(undo),
                _ => None,
            })
            .collect::<Vec<_>>();
        let count = undos.len();
        let serial = Arc::new(Serial::new(Arc::new(written), body, undos));
        let mut objects: Vec<Object> = (0..count)
            .map(|at| match at >= first_change {
                true => Object::Serial(serial.clone(), at),
                false => Object::Shared(Arc::new(fresh.clone())),
            })
            .collect();
        drop(serial);
        // Made from the first member on, so that the last one takes the object itself.
        let last = objects.pop();
        let mut answers: Vec<Value> = objects.into_iter().map(Object::into_value).collect();
        answers.extend(last.map(Object::into_value));
        answers
    }

    fn without_version(mut object: Value) -> Value {
        object["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("resourceVersion");
        object
    }

    #[tokio::test]
    async fn a_batch_equals_its_members_written_one_at_a_time() {
        let increment =
            Cel::compile("c", r#"{"data": {"a": string(int(object.data.a) + 1)}}"#).unwrap();
        let guard = Cel::compile("p", r#"object.data.a != "2""#).unwrap();
        let mut rng = fastrand::Rng::with_seed(20261123);
        let mut seen = std::collections::BTreeSet::new();
        for case in 0..400 {
            let fresh = json!({
                "metadata": {"name": "o", "resourceVersion": "1"},
                "data": {"a": "0", "b": "0"}
            });
            let members: Vec<WriteSpec> = (0..rng.usize(1..10))
                .map(|_| random_member(&mut rng, &increment, &guard))
                .collect();

            // One at a time: each member reads what the one before it wrote.
            // One at a time: each member reads what the one before it wrote, and its
            // answer is the object right after its entry.
            let mut state = fresh.clone();
            let mut one_by_one = Vec::new();
            let mut own_states = Vec::new();
            for (version, member) in (2..).zip(&members) {
                let (body, mut verdicts) = fold_specs(&state, &[member]).await;
                let verdict = verdicts.pop().unwrap();
                if matches!(verdict, Verdict::Changed(_)) {
                    state = body;
                    state["metadata"]["resourceVersion"] = json!(version.to_string());
                }
                one_by_one.push(name(&verdict));
                own_states.push(state.clone());
            }

            let specs: Vec<_> = members.iter().collect();
            let (body, verdicts) = fold_specs(&fresh, &specs).await;
            let batched: Vec<String> = verdicts.iter().map(name).collect();
            assert_eq!(batched, one_by_one, "case {case}: outcomes");
            assert_eq!(
                without_version(body.clone()),
                without_version(state),
                "case {case}: final object"
            );

            // Each member's answer is its own state: the server's object (its version
            // and its own fields) with the later members' changes undone.
            let mut written = body.clone();
            written["metadata"]["resourceVersion"] = json!("99");
            written["metadata"]["managedFields"] = json!([{"manager": "server"}]);
            let first_change = verdicts
                .iter()
                .position(|v| matches!(v, Verdict::Changed(_)))
                .unwrap_or(verdicts.len());
            let answers = states(&fresh, verdicts, body, written);
            for (i, (answer, own)) in answers.into_iter().zip(&own_states).enumerate() {
                let (version, server_fields) = if i < first_change {
                    ("1", false)
                } else {
                    ("99", true)
                };
                assert_eq!(
                    answer["metadata"]["resourceVersion"], version,
                    "case {case}: member {i}"
                );
                let mut answer = without_version(answer);
                let fields = answer["metadata"]
                    .as_object_mut()
                    .unwrap()
                    .remove("managedFields");
                assert_eq!(fields.is_some(), server_fields, "case {case}: member {i}");
                assert_eq!(
                    answer,
                    without_version(own.clone()),
                    "case {case}: member {i}'s state"
                );
            }
            seen.extend(batched);
        }
        // The generator reaches every kind of verdict.
        for kind in [
            "changed",
            "unchanged",
            "already_applied",
            "failed:precondition_failed",
            "failed:mutation_failed",
        ] {
            assert!(seen.contains(kind), "{kind} never happened: {seen:?}");
        }
    }

    #[tokio::test]
    async fn a_state_the_servers_object_cannot_give_comes_from_the_body_sent() {
        let fresh = json!({"metadata": {"name": "o", "resourceVersion": "7"}, "data": {"a": "0"}});
        let set =
            |k: &str, v: &str| spec(Mutation::MergePatch(json!({"data": {k: v}})), None, None);
        let (first, second) = (set("a", "1"), set("b", "2"));
        let (body, verdicts) = fold_specs(&fresh, &[&first, &second]).await;
        // The server dropped data.b (and added data.c), so undoing the second member's
        // change cannot apply to its object: the body sent stands in, at version 8.
        let written = json!({"metadata": {"name": "o", "resourceVersion": "8"}, "data": {"a": "1", "c": "s"}});
        let answers = states(&fresh, verdicts, body, written.clone());
        assert_eq!(answers[1], written);
        assert_eq!(
            answers[0],
            json!({"metadata": {"name": "o", "resourceVersion": "8"}, "data": {"a": "1"}})
        );
    }

    #[tokio::test]
    async fn a_failing_member_is_left_out_and_the_others_see_each_other() {
        let fresh = json!({"metadata": {"name": "o", "resourceVersion": "7"}, "data": {"a": "0"}});
        let set = |v: &str| spec(Mutation::MergePatch(json!({"data": {"a": v}})), None, None);
        let missing = spec(
            Mutation::JsonPatch(
                serde_json::from_value(json!([{"op": "remove", "path": "/data/zzz"}])).unwrap(),
            ),
            None,
            None,
        );
        let (first, second, third) = (set("1"), missing, set("1"));
        let (body, verdicts) = fold_specs(&fresh, &[&first, &second, &third]).await;
        assert_eq!(body["data"]["a"], "1");
        assert_eq!(
            body["metadata"]["resourceVersion"], "7",
            "written at the version read"
        );
        let names: Vec<String> = verdicts.iter().map(name).collect();
        assert_eq!(names, ["changed", "failed:mutation_failed", "unchanged"]);
    }

    #[tokio::test]
    async fn every_member_key_is_recorded_in_the_one_write() {
        let fresh = json!({"metadata": {"name": "o", "resourceVersion": "7"}, "data": {"a": "0"}});
        let members: Vec<WriteSpec> = (0..MAX_MEMBERS)
            .map(|i| {
                spec(
                    Mutation::MergePatch(json!({"data": {format!("k{i}"): "x"}})),
                    None,
                    Some(&format!("key-{i}")),
                )
            })
            .collect();
        let specs: Vec<_> = members.iter().collect();
        let (body, _) = fold_specs(&fresh, &specs).await;
        for i in 0..MAX_MEMBERS {
            assert!(idempotency::applied(&body, &format!("key-{i}")), "key-{i}");
        }
    }
}
