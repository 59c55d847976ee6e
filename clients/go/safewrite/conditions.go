package safewrite

// Status conditions (metav1.Condition in status.conditions) set the way Kubernetes
// expects: lastTransitionTime moves only when the condition's status changes, and
// setting a condition that is already there changes nothing, so the sidecar writes
// nothing (OutcomeUnchanged) and a controller does not wake itself up.

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	safewritev1 "safewrite.dev/clients/go/safewrite/v1"
)

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
// [OutcomeUnchanged]. Options are as for [Client.TransactStatus].
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
