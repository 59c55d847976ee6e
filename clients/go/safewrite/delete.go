package safewrite

// Delete: a DELETE conditioned on the object it decided on, retried as a write is.

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	safewritev1 "safewrite.dev/clients/go/safewrite/v1"
)

// PropagationPolicy says whether and how the garbage collector deletes a deleted
// object's dependents (DeleteOptions.propagationPolicy): the proto's PropagationPolicy.
type PropagationPolicy int32

const (
	// PropagationDefault: the API server's default for the kind (usually background).
	PropagationDefault PropagationPolicy = PropagationPolicy(safewritev1.PropagationPolicy_PROPAGATION_POLICY_UNSPECIFIED)
	// PropagationBackground: the object is deleted at once; the garbage collector
	// deletes its dependents after.
	PropagationBackground PropagationPolicy = PropagationPolicy(safewritev1.PropagationPolicy_PROPAGATION_POLICY_BACKGROUND)
	// PropagationForeground: the object is kept, being deleted, until its blocking
	// dependents are deleted ([DeleteOutcomeDeleting]).
	PropagationForeground PropagationPolicy = PropagationPolicy(safewritev1.PropagationPolicy_PROPAGATION_POLICY_FOREGROUND)
	// PropagationOrphan: the object is deleted; its dependents are kept, their owner
	// references to it removed.
	PropagationOrphan PropagationPolicy = PropagationPolicy(safewritev1.PropagationPolicy_PROPAGATION_POLICY_ORPHAN)
)

// WithPropagationPolicy sets what happens to a deleted object's dependents; only for
// [Client.Delete] (a write refuses it with [ErrInvalid]).
func WithPropagationPolicy(p PropagationPolicy) WriteOption {
	return func(cfg *writeConfig) { cfg.propagation = p }
}

// DeleteOutcome says what a successful [Client.Delete] did: the proto's DeleteOutcome.
type DeleteOutcome int32

const (
	// DeleteOutcomeUnspecified is never returned by a successful call.
	DeleteOutcomeUnspecified DeleteOutcome = DeleteOutcome(safewritev1.DeleteOutcome_DELETE_OUTCOME_UNSPECIFIED)
	// DeleteOutcomeDeleted: the API server accepted the delete and the object is gone
	// (with [WithDryRun]: would be).
	DeleteOutcomeDeleted DeleteOutcome = DeleteOutcome(safewritev1.DeleteOutcome_DELETE_OUTCOME_DELETED)
	// DeleteOutcomeDeleting: the API server accepted the delete, but the object is only
	// marked for deletion: it has finalizers (or foreground propagation added one) and
	// stays readable, with a deletionTimestamp ([DeleteResult.DeletionTimestamp]), until
	// they are removed.
	DeleteOutcomeDeleting DeleteOutcome = DeleteOutcome(safewritev1.DeleteOutcome_DELETE_OUTCOME_DELETING)
	// DeleteOutcomeGone: the object was not there; this call deleted nothing. Another
	// writer may have deleted it, or an earlier attempt of this call whose answer was
	// lost. Not an error.
	DeleteOutcomeGone DeleteOutcome = DeleteOutcome(safewritev1.DeleteOutcome_DELETE_OUTCOME_GONE)
)

// String returns "Deleted", "Deleting", "Gone" or "Unspecified".
func (o DeleteOutcome) String() string {
	switch o {
	case DeleteOutcomeDeleted:
		return "Deleted"
	case DeleteOutcomeDeleting:
		return "Deleting"
	case DeleteOutcomeGone:
		return "Gone"
	case DeleteOutcomeUnspecified:
		return "Unspecified"
	default:
		return fmt.Sprintf("DeleteOutcome(%d)", int32(o))
	}
}

// DeleteResult describes a successful [Client.Delete].
type DeleteResult struct {
	// Outcome says what happened.
	Outcome DeleteOutcome
	// Object is the object as the API server answered the DELETE (for
	// [DeleteOutcomeDeleting] with its deletionTimestamp), with integral numbers as
	// int64 as in [Result.Object]; nil when the API server answered a Status instead,
	// and for [DeleteOutcomeGone].
	Object *unstructured.Unstructured
	// DeletionTimestamp is Object's metadata.deletionTimestamp: since when it is being
	// deleted; zero when it has none.
	DeletionTimestamp time.Time
	// Attempts is the number of attempts made, the last included.
	Attempts int
	// AttemptRecords describes each attempt, in order (HTTPStatus is the DELETE's, or
	// the read's when the read was refused or found nothing).
	AttemptRecords []AttemptRecord
	// TraceID is the W3C trace id of the sidecar's span of the call, as
	// [Result.TraceID]; empty when the sidecar's tracing is off.
	TraceID string

	objectJSON string // Object as the sidecar sent it
}

// Delete deletes the object ref names (Delete), conditioned on the object it decided
// on: every attempt reads the object live, checks the preconditions on it ([WithUID],
// [WithResourceVersion], [WithPreconditionCEL], [WithPreconditions]) and sends one
// DELETE that carries that object's uid and resourceVersion as preconditions, so the
// API server deletes exactly that object. A writer that changed it in between makes
// the DELETE conflict, and the sidecar reads again and decides again, as for writes
// ([WithRetryPolicy]). Options: [WithPropagationPolicy], [WithDryRun], [WithFence]
// (or a fence in ctx: [ContextWithFence]); the options of writes only
// ([WithFieldManager], [WithCreateIfMissing], [WithIdempotencyKey], [WithWriteAlone])
// are refused with [ErrInvalid].
//
// An object that is not there is an answer, not an error: [DeleteOutcomeGone]. So a
// Delete is always safe to send again, also after [ErrDeadlineExceeded] or
// [ErrUnavailable]: if an earlier DELETE was applied, it answers Gone or Deleting.
//
// A failure is an [*Error]: [ErrPreconditionFailed] with [Error.CurrentObject] when a
// precondition is false on the fresh object (a uid of an object deleted and recreated
// under the same name, a CEL condition) and, with a fence, when the sidecar does not
// lead under it ([Error.ReasonCode] REASON_NOT_LEADER) or the object records a later
// epoch (REASON_FENCED), nothing deleted; [ErrConflict] when an exact resourceVersion
// is not the object's (REASON_RESOURCE_VERSION_MISMATCH, not retried) or conflicts
// outlasted the retry policy; [ErrPermissionDenied] when the sidecar's policy does not
// allow deleting it (nothing is sent); and the others as for writes.
func (c *Client) Delete(ctx context.Context, ref ObjectRef, opts ...WriteOption) (*DeleteResult, error) {
	req, err := deleteRequest(ctx, ref, opts)
	if err != nil {
		return nil, withTarget(err, ref)
	}
	ctx, cancel := c.callContext(ctx)
	defer cancel()
	if err := c.check(ctx, safewritev1.WriterService_Delete_FullMethodName, req); err != nil {
		return nil, withTarget(err, ref)
	}
	resp, err := c.stub.Delete(ctx, req, c.callOpts...)
	if err != nil {
		return nil, withTarget(FromError(err), ref)
	}
	return deleteResultFrom(resp)
}

// deleteRequest is the DeleteRequest of a Delete of ref with opts under ctx.
func deleteRequest(ctx context.Context, ref ObjectRef, opts []WriteOption) (*safewritev1.DeleteRequest, error) {
	cfg, err := newWriteConfig(opts)
	if err != nil {
		return nil, err
	}
	cfg.fenceFromContext(ctx)
	o := cfg.options
	switch {
	case o.GetFieldManager() != "":
		return nil, clientError(codes.InvalidArgument, "Delete takes no field manager (WithFieldManager)")
	case o.GetCreateIfMissingJson() != "":
		return nil, clientError(codes.InvalidArgument, "Delete takes no object to create (WithCreateIfMissing)")
	case o.GetIdempotencyKey() != "":
		return nil, clientError(codes.InvalidArgument, "Delete takes no idempotency key (WithIdempotencyKey): it is always safe to send again")
	case o.GetWriteAlone():
		return nil, clientError(codes.InvalidArgument, "Delete takes no WithWriteAlone: a delete is never committed together with writes")
	}
	return &safewritev1.DeleteRequest{
		Target:            ref.proto(),
		Preconditions:     cfg.preconditions,
		PropagationPolicy: safewritev1.PropagationPolicy(cfg.propagation),
		DryRun:            o.GetDryRun(),
		RetryPolicy:       cfg.retryPolicy,
		Fence:             o.GetFence(),
	}, nil
}

func deleteResultFrom(resp *safewritev1.DeleteResponse) (*DeleteResult, error) {
	res := &DeleteResult{
		Outcome:        DeleteOutcome(resp.GetOutcome()),
		Attempts:       int(resp.GetAttempts()),
		AttemptRecords: attemptRecords(resp.GetAttemptRecords()),
		TraceID:        resp.GetTraceId(),
	}
	if text := resp.GetObjectJson(); text != "" {
		obj, err := decodeObject(text)
		if err != nil {
			return nil, clientError(codes.Internal, "the sidecar's deleted object is not a JSON object: %v", err)
		}
		res.Object, res.objectJSON = obj, text
	}
	if ts := resp.GetDeletionTimestamp(); ts != "" {
		t, err := time.Parse(time.RFC3339, ts)
		if err != nil {
			return nil, clientError(codes.Internal, "the sidecar's deletion timestamp %q: %v", ts, err)
		}
		res.DeletionTimestamp = t
	}
	return res, nil
}

// Delete is [Client.Delete] of obj, named by its kind (from the scheme), namespace and
// name. When the API server answered with the object (being deleted, or as it was
// deleted), obj becomes that object; otherwise obj is left as it was.
func (t *Typed) Delete(ctx context.Context, obj Object, opts ...WriteOption) (*DeleteResult, error) {
	ref, err := t.RefOf(obj)
	if err != nil {
		return nil, err
	}
	res, err := t.client.Delete(ctx, ref, opts...)
	if err != nil || res.objectJSON == "" {
		return res, err
	}
	if err := decodeInto(res.objectJSON, obj); err != nil {
		return res, withTarget(clientError(codes.Internal, "the object the sidecar returned does not decode into %T: %v", obj, err), ref)
	}
	return res, nil
}
