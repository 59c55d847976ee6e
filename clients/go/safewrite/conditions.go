package safewrite

// Status conditions (metav1.Condition in status.conditions) set the way Kubernetes
// expects: lastTransitionTime moves only when the condition's status changes, and
// setting a condition that is already there changes nothing, so the sidecar writes
// nothing (OutcomeUnchanged) and a controller does not wake itself up. The mutations
// (SetConditions, RemoveConditions) have the sidecar do it; SetCondition and
// SetUnstructuredCondition do it here, on an object in hand.

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	safewritev1 "safewrite.dev/clients/go/safewrite/v1"
)

// SetConditions sets conditions in the object's status.conditions, in the sidecar, on
// the fresh object of every attempt, as apimachinery's meta.SetStatusCondition does:
// the entry of each condition's type is updated in place (a new type is appended after
// the others), its lastTransitionTime changes only when its status does, and every
// other entry, and every field of an entry that metav1.Condition does not have, is
// kept as it is and where it is. Conditions set to what they are write nothing
// ([OutcomeUnchanged]), so a controller may set its conditions on every reconcile.
// Send it with [Client.PatchStatus] for a kind with a status subresource (through
// [Client.Update] it is refused there, as Update never writes such a status), with
// [Client.Update] for a kind without one:
//
//	res, err := c.PatchStatus(ctx, ref, safewrite.SetConditions(metav1.Condition{
//		Type: "Ready", Status: metav1.ConditionTrue, Reason: "Reconciled", Message: "all good",
//	}))
//
// Two zero values have a meaning:
//
//   - LastTransitionTime zero is the time of the write, to the second; a time is used
//     only when the condition is new or its status changes;
//   - ObservedGeneration 0 is the metadata.generation of the fresh object the change is
//     applied to, read again on every attempt (none when the object has none).
//
// (The helpers that set conditions in this client, [SetCondition] and
// [Client.SetCondition], leave a condition whose ObservedGeneration is 0 without one.)
//
// Each condition needs Type, Status and Reason, and a type may be given once; the
// sidecar checks their format as the API server validates metav1.Condition. A failure
// is [ErrInvalid] naming the field, e.g. "mutation.set_condition.conditions[0].reason":
// here for no condition, an empty Type, Status or Reason, a type given twice; by the
// sidecar for the rest.
func SetConditions(conditions ...metav1.Condition) Mutation {
	return SetConditionsAt("", conditions...)
}

// SetConditionsAt is [SetConditions] on the conditions list at path, field names
// joined by dots (e.g. "status.nested.conditions"); "" is "status.conditions". A
// missing list is created; a path through a value that is not an object, or to one
// that is not a list, fails with [ErrInvalid].
func SetConditionsAt(path string, conditions ...metav1.Condition) Mutation {
	if len(conditions) == 0 {
		return Mutation{err: fieldError("mutation.set_condition.conditions", "no condition to set")}
	}
	set := &safewritev1.SetCondition{Path: path}
	seen := map[string]bool{}
	for i, cond := range conditions {
		field := fmt.Sprintf("mutation.set_condition.conditions[%d]", i)
		switch {
		case cond.Type == "":
			return Mutation{err: fieldError(field+".type", "the condition has no type")}
		case seen[cond.Type]:
			return Mutation{err: fieldError(field+".type", "type %q is given twice", cond.Type)}
		case cond.Status == "":
			return Mutation{err: fieldError(field+".status", "condition %s has no status", cond.Type)}
		case cond.Reason == "":
			return Mutation{err: fieldError(field+".reason", "condition %s has no reason", cond.Type)}
		}
		seen[cond.Type] = true
		set.Conditions = append(set.Conditions, conditionProto(cond))
	}
	return Mutation{pb: &safewritev1.Mutation{Kind: &safewritev1.Mutation_SetCondition{SetCondition: set}}}
}

// conditionProto is cond as the proto's Condition: a zero ObservedGeneration and a zero
// LastTransitionTime are left unset, for the sidecar to fill in.
func conditionProto(cond metav1.Condition) *safewritev1.Condition {
	out := &safewritev1.Condition{
		Type:    cond.Type,
		Status:  string(cond.Status),
		Reason:  cond.Reason,
		Message: cond.Message,
	}
	if cond.ObservedGeneration != 0 {
		out.ObservedGeneration = proto.Int64(cond.ObservedGeneration)
	}
	if !cond.LastTransitionTime.IsZero() {
		out.LastTransitionTime = cond.LastTransitionTime.UTC().Format(time.RFC3339)
	}
	return out
}

// RemoveConditions removes the conditions of the given types from the object's
// status.conditions, in the sidecar, on the fresh object of every attempt; the other
// entries keep their order, and removing a type that is not there writes nothing
// ([OutcomeUnchanged]). Send it as [SetConditions]. The error is [ErrInvalid] for no
// type or an empty one.
func RemoveConditions(types ...string) Mutation {
	return RemoveConditionsAt("", types...)
}

// RemoveConditionsAt is [RemoveConditions] on the conditions list at path, as for
// [SetConditionsAt].
func RemoveConditionsAt(path string, types ...string) Mutation {
	if len(types) == 0 {
		return Mutation{err: fieldError("mutation.remove_condition.types", "no condition type to remove")}
	}
	for i, t := range types {
		if t == "" {
			return Mutation{err: fieldError(fmt.Sprintf("mutation.remove_condition.types[%d]", i), "the condition type is empty")}
		}
	}
	return Mutation{pb: &safewritev1.Mutation{Kind: &safewritev1.Mutation_RemoveCondition{
		RemoveCondition: &safewritev1.RemoveCondition{Types: append([]string(nil), types...), Path: path},
	}}}
}

// SetCondition sets cond in a typed conditions list and reports whether the list
// changed. A condition of cond.Type that is not there is added. One that is gets
// cond's status, reason, message and observedGeneration; its lastTransitionTime
// changes only when its status does. The transition time is cond.LastTransitionTime,
// or now (to the second, as it is stored) when that is zero.
func SetCondition(conditions *[]metav1.Condition, cond metav1.Condition) bool {
	if cond.LastTransitionTime.IsZero() {
		cond.LastTransitionTime = metav1.NewTime(time.Now().Truncate(time.Second))
	}
	return apimeta.SetStatusCondition(conditions, cond)
}

// SetUnstructuredCondition sets cond in obj's status.conditions as [SetCondition]
// does, touching only the fields that change, so an object that already has the
// condition is left exactly as it was (and reported unchanged). The error is for a
// status.conditions that is not a list of objects.
func SetUnstructuredCondition(obj *unstructured.Unstructured, cond metav1.Condition) (bool, error) {
	if cond.Type == "" {
		return false, clientError(codes.InvalidArgument, "the condition has no type")
	}
	if cond.LastTransitionTime.IsZero() {
		cond.LastTransitionTime = metav1.NewTime(time.Now().Truncate(time.Second))
	}
	list, found, err := unstructured.NestedSlice(obj.Object, "status", "conditions")
	if err != nil {
		return false, clientError(codes.InvalidArgument, "status.conditions: %v", err)
	}
	if !found {
		list = nil
	}
	for i, item := range list {
		existing, ok := item.(map[string]any)
		if !ok {
			return false, clientError(codes.InvalidArgument, "status.conditions[%d] is not an object", i)
		}
		if existing["type"] != cond.Type {
			continue
		}
		changed := false
		set := func(key string, value any) {
			if existing[key] != value {
				existing[key] = value
				changed = true
			}
		}
		if existing["status"] != string(cond.Status) {
			set("status", string(cond.Status))
			set("lastTransitionTime", cond.LastTransitionTime.UTC().Format(time.RFC3339))
		}
		set("reason", cond.Reason)
		set("message", cond.Message)
		if old, _ := existing["observedGeneration"].(int64); old != cond.ObservedGeneration {
			if cond.ObservedGeneration == 0 {
				delete(existing, "observedGeneration")
			} else {
				existing["observedGeneration"] = cond.ObservedGeneration
			}
			changed = true
		}
		if !changed {
			return false, nil
		}
		return true, unstructured.SetNestedSlice(obj.Object, list, "status", "conditions")
	}
	added, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&cond)
	if err != nil {
		return false, clientError(codes.InvalidArgument, "the condition: %v", err)
	}
	return true, unstructured.SetNestedSlice(obj.Object, append(list, added), "status", "conditions")
}

// SetCondition sets cond in status.conditions of the object ref names, through its
// status subresource, as [SetUnstructuredCondition] does on the fresh object in a
// transaction (proposing the new list as a merge patch): retried on conflict, and a condition that is already there (same type,
// status, reason, message and observedGeneration) writes nothing and answers
// [OutcomeUnchanged]. Options are as for [Client.TransactStatus]. The [SetConditions]
// mutation does the same in the sidecar, with [Client.PatchStatus], but reads an
// ObservedGeneration of 0 as the object's generation.
func (c *Client) SetCondition(ctx context.Context, ref ObjectRef, cond metav1.Condition, opts ...WriteOption) (*Result, error) {
	if cond.LastTransitionTime.IsZero() {
		// One time for every attempt.
		cond.LastTransitionTime = metav1.NewTime(time.Now().Truncate(time.Second))
	}
	return c.transact(ctx, ref, true, conditionProposer(cond), opts)
}

// SetCondition is [Client.SetCondition] for a typed object, named as for
// [Typed.Update]; on success obj is the object as this call left it ([Result.Object]:
// as written, or as read when unchanged). Its kind's status must hold conditions as a
// list of metav1.Condition at status.conditions.
func (t *Typed) SetCondition(ctx context.Context, obj Object, cond metav1.Condition, opts ...WriteOption) (*Result, error) {
	ref, err := t.RefOf(obj)
	if err != nil {
		return nil, err
	}
	res, err := t.client.SetCondition(ctx, ref, cond, opts...)
	return t.decodeResult(res, err, obj)
}

// conditionProposer sets cond on each fresh object and proposes, as a merge patch,
// the new conditions list, or the empty patch when the object already has cond.
func conditionProposer(cond metav1.Condition) proposer {
	return func(fresh *safewritev1.FreshObject) (*safewritev1.TransactRequest, error) {
		obj, err := decodeObject(fresh.GetObjectJson())
		if err != nil {
			return nil, clientError(codes.Internal, "the sidecar's fresh object is not a JSON object: %v", err)
		}
		patch := map[string]any{}
		changed, err := SetUnstructuredCondition(obj, cond)
		if err != nil {
			return nil, fmt.Errorf("setting condition %s: %w", cond.Type, err)
		}
		if changed {
			list, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
			patch["status"] = map[string]any{"conditions": list}
		}
		text, err := json.Marshal(patch)
		if err != nil {
			return nil, clientError(codes.InvalidArgument, "the conditions: %v", err)
		}
		return mutationProposal(fresh, &safewritev1.Mutation{Kind: &safewritev1.Mutation_MergePatch{
			MergePatch: &safewritev1.MergePatch{PatchJson: string(text)},
		}}), nil
	}
}
