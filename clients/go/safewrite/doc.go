// Package safewrite is the Go client of the safewrite sidecar, which performs
// conflict-safe read-modify-write of Kubernetes objects on a controller's behalf.
//
// A call names an object and says what to change; the sidecar reads the fresh object,
// applies the change, writes it with the resourceVersion it read, and on a conflict
// starts over from a fresh read, within the call's context deadline:
//
//	c, err := safewrite.NewClient("") // $SAFEWRITE_ADDRESS, else 127.0.0.1:50051; or "unix:///run/safewrite/safewrite.sock"
//	if err != nil { ... }
//	defer c.Close()
//	ref := safewrite.ObjectRef{APIVersion: "v1", Kind: "ConfigMap", Namespace: "default", Name: "counter"}
//	res, err := c.Update(ctx, ref, safewrite.CEL(`{"data": {"n": string(int(object.data.n) + 1)}}`))
//
// Mutations are re-applied to the fresh object on every attempt (see [CEL],
// [MergePatch], [MergeFrom], [JSONPatch] and [Apply]), so read-dependent changes are
// never lost. Their types say what they take ([JSONObject], [JSONPatchOps], an
// [Object] for [MergePatchObject] and [ApplyObject]), so a wrong argument does not
// compile.
// Others change one entry of a list that other writers share, leaving their entries as
// they are: conditions ([SetConditions]), finalizers ([AddFinalizer],
// [RemoveFinalizer], whose removal may answer [OutcomeGone]), owner references
// ([SetControllerReference]) and keyed lists ([UpsertListEntry]).
// [Client.Transact] runs the same loop with the caller's own Go function as the
// mutation, on an [*unstructured.Unstructured]:
//
//	res, err := c.Transact(ctx, ref, func(obj *unstructured.Unstructured) error {
//		return unstructured.SetNestedField(obj.Object, "ready", "data", "phase")
//	})
//
// [Client.Typed] makes the same calls on typed objects (controller-runtime's
// client.Object) through a runtime.Scheme, decoding the result into the caller's
// object; [SetCondition] and [Client.SetCondition] set status conditions so that an
// identical set writes nothing. [Client.Get] reads your own writes: the object at
// least as new as a write's result,
//
//	got, err := c.Get(ctx, ref, safewrite.AtLeast(res))
//
// from the sidecar's remembered copy when it is new enough, else from a live read.
// [Client.Delete] deletes an object conditioned on the object it decided on (a missing
// one is [DeleteOutcomeGone], not an error).
//
// [Client.Lead] campaigns for a Lease through the sidecar and streams leadership
// events; [Client.RunWhileLeading] runs work only while leading, with the leadership's
// fence in its context ([ContextWithFence]), so that every write under it is one a
// deposed leader cannot make:
//
//	err := c.RunWhileLeading(ctx, "default", "my-controller", func(ctx context.Context) error {
//		_, err := c.Update(ctx, ref, safewrite.CEL(`{"data": {"n": string(int(object.data.n) + 1)}}`)) // fenced
//		return err
//	})
//
// The context's deadline is the sidecar's deadline too: it never sleeps past it, and
// canceling the context cancels the call (a transaction writes nothing after that).
//
// Failures are [*Error] values that match sentinel errors with [errors.Is] (for
// example [ErrConflict], [ErrInvalid], [ErrPreconditionFailed], [ErrNotFound],
// [ErrDeadlineExceeded]) and carry the sidecar's rich details: the Kubernetes reason,
// field violations, the retry delay, the current object of a failed precondition, and
// the attempts made.
//
// Calls continue the caller's trace: the OpenTelemetry span context of ctx goes to the
// sidecar as W3C traceparent metadata (see [WithoutTracePropagation]), and results and
// errors carry the trace's id ([Result.TraceID], [Error.TraceID]).
package safewrite
