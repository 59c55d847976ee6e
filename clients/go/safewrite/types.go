package safewrite

import (
	"encoding/json"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utiljson "k8s.io/apimachinery/pkg/util/json"

	safewritev1 "safewrite.dev/clients/go/safewrite/v1"
)

// ObjectRef names one Kubernetes object.
type ObjectRef struct {
	// APIVersion is the object's apiVersion, e.g. "v1", "apps/v1". Required.
	APIVersion string
	// Kind is the object's kind, e.g. "ConfigMap". Required.
	Kind string
	// Namespace is required for namespaced kinds and must be empty for cluster-scoped
	// ones.
	Namespace string
	// Name is the object's metadata.name. Required.
	Name string
}

// Ref returns the ObjectRef of the object of kind gvk named namespace/name.
func Ref(gvk schema.GroupVersionKind, namespace, name string) ObjectRef {
	apiVersion, kind := gvk.ToAPIVersionAndKind()
	return ObjectRef{APIVersion: apiVersion, Kind: kind, Namespace: namespace, Name: name}
}

// RefOf returns the ObjectRef of obj, typed or unstructured, from its apiVersion and
// kind (TypeMeta) and its metadata. Typed objects as client-go and controller-runtime
// return them often have no TypeMeta: for those use [RefFor] or [Typed.RefOf], which
// take apiVersion and kind from a scheme.
func RefOf(obj Object) ObjectRef {
	apiVersion, kind := obj.GetObjectKind().GroupVersionKind().ToAPIVersionAndKind()
	return ObjectRef{
		APIVersion: apiVersion,
		Kind:       kind,
		Namespace:  obj.GetNamespace(),
		Name:       obj.GetName(),
	}
}

// String returns "apiVersion/Kind namespace/name".
func (r ObjectRef) String() string {
	if r.Namespace == "" {
		return fmt.Sprintf("%s/%s %s", r.APIVersion, r.Kind, r.Name)
	}
	return fmt.Sprintf("%s/%s %s/%s", r.APIVersion, r.Kind, r.Namespace, r.Name)
}

func (r ObjectRef) proto() *safewritev1.ObjectRef {
	return &safewritev1.ObjectRef{
		ApiVersion: r.APIVersion,
		Kind:       r.Kind,
		Namespace:  r.Namespace,
		Name:       r.Name,
	}
}

// Outcome says what a successful call did.
type Outcome int32

const (
	// OutcomeUnspecified is never returned by a successful call.
	OutcomeUnspecified Outcome = Outcome(safewritev1.Outcome_OUTCOME_UNSPECIFIED)
	// OutcomeUpdated: the object was changed and written.
	OutcomeUpdated Outcome = Outcome(safewritev1.Outcome_OUTCOME_UPDATED)
	// OutcomeUnchanged: the mutation left the object as it was; nothing was written.
	OutcomeUnchanged Outcome = Outcome(safewritev1.Outcome_OUTCOME_UNCHANGED)
	// OutcomeCreated: the object did not exist and was created (see
	// [WithCreateIfMissing]).
	OutcomeCreated Outcome = Outcome(safewritev1.Outcome_OUTCOME_CREATED)
	// OutcomeAborted: a transaction function returned [ErrAbort]; nothing was written.
	OutcomeAborted Outcome = Outcome(safewritev1.Outcome_OUTCOME_ABORTED)
	// OutcomeGone: the object does not exist any more, after a [RemoveFinalizer]: it
	// was already gone (nothing was written, and [Result.Object] is nil), or the
	// removal took the last finalizer of an object being deleted, so the API server
	// deleted it ([Result.Object] is the object as last written). A status write that
	// would follow has nothing to write to: skip it. See [Result.Gone].
	OutcomeGone Outcome = Outcome(safewritev1.Outcome_OUTCOME_GONE)
)

// String returns "Updated", "Unchanged", "Created", "Aborted", "Gone" or "Unspecified".
func (o Outcome) String() string {
	switch o {
	case OutcomeUpdated:
		return "Updated"
	case OutcomeUnchanged:
		return "Unchanged"
	case OutcomeCreated:
		return "Created"
	case OutcomeAborted:
		return "Aborted"
	case OutcomeGone:
		return "Gone"
	case OutcomeUnspecified:
		return "Unspecified"
	default:
		return fmt.Sprintf("Outcome(%d)", int32(o))
	}
}

// Wrote reports whether the call wrote the object (it was updated or created). It is
// false for [OutcomeGone], whose object is gone whether or not the last write was
// this call's.
func (o Outcome) Wrote() bool { return o == OutcomeUpdated || o == OutcomeCreated }

// AttemptRecord is a short record of one attempt.
type AttemptRecord struct {
	// Number is the attempt's number, starting at 1.
	Number int
	// ResourceVersionRead is the resourceVersion of the fresh object the attempt read.
	ResourceVersionRead string
	// HTTPStatus is the HTTP status of the write, or of the read when the read itself
	// was refused; 0 when no write was sent and the read succeeded, or when no answer
	// came.
	HTTPStatus int
	// Reason is the Kubernetes Status reason of the answer (e.g. "Conflict"); empty on
	// success.
	Reason string
	// Backoff is how long the sidecar slept after this attempt; zero for the last.
	Backoff time.Duration
	// BatchSize is how many requests the attempt's write carried: 1 for a write made
	// alone, more when concurrent calls to the same object were committed together
	// (see [WithWriteAlone]); 0 when no write was sent.
	BatchSize int
}

func attemptRecords(records []*safewritev1.AttemptRecord) []AttemptRecord {
	if len(records) == 0 {
		return nil
	}
	out := make([]AttemptRecord, len(records))
	for i, r := range records {
		out[i] = AttemptRecord{
			Number:              int(r.GetNumber()),
			ResourceVersionRead: r.GetResourceVersionRead(),
			HTTPStatus:          int(r.GetHttpStatus()),
			Reason:              r.GetReason(),
			Backoff:             r.GetBackoff().AsDuration(),
			BatchSize:           int(r.GetBatchSize()),
		}
	}
	return out
}

// Result describes a successful call.
type Result struct {
	// Outcome says what the call did.
	Outcome Outcome
	// Object is the object as this call left it: as written by the write that carried
	// its change, with that write's resourceVersion (or as read, when unchanged or
	// aborted). When the call was committed together with others
	// ([AttemptRecord.BatchSize] above 1), it is the object right after this call's own
	// change, in the batch's order: the changes of the calls after it are not in it. An
	// unchanged call gets the object as it stood at its turn. Nil for [OutcomeGone]
	// when nothing was written.
	Object *unstructured.Unstructured
	// ResourceVersion is Object's resourceVersion: of the write that carried it, or of
	// the read when Object is the object as read.
	ResourceVersion string
	// Attempts is the number of attempts made, the last included.
	Attempts int
	// AttemptRecords describes each attempt, in order.
	AttemptRecords []AttemptRecord
	// TraceID is the W3C trace id (32 hex digits) of the sidecar's span of the call:
	// the trace of the caller's span when ctx carried one (the client propagates it,
	// unless [WithoutTracePropagation]), else a trace of its own. Empty when the
	// sidecar's tracing is off.
	TraceID string
	// AlreadyApplied is true when the call's idempotency key (see
	// [WithIdempotencyKey]) was already recorded on the object: an earlier attempt or
	// call made the change, and nothing was written this time. Object is then the
	// object as read (committed together with others: as it stood at this call's turn).
	AlreadyApplied bool

	objectJSON string // Object as the sidecar sent it
}

// Gone reports whether the object does not exist any more ([OutcomeGone]): a
// [RemoveFinalizer] found it gone, or took its last finalizer while it was being
// deleted, so the API server deleted it. A controller then has nothing left to write
// (skip the status write that would follow). A typed call leaves its object as it was
// when [Result.Object] is nil.
//
//	res, err := typed.Update(ctx, widget, safewrite.RemoveFinalizer("example.com/cleanup"))
//	if err != nil { return err }
//	if res.Gone() { return nil }
func (r *Result) Gone() bool { return r != nil && r.Outcome == OutcomeGone }

func resultFrom(r *safewritev1.WriteResult) (*Result, error) {
	if r == nil {
		return nil, clientError(codes.Internal, "the sidecar answered without a result")
	}
	res := &Result{
		Outcome:         Outcome(r.GetOutcome()),
		ResourceVersion: r.GetResourceVersion(),
		Attempts:        int(r.GetAttempts()),
		AttemptRecords:  attemptRecords(r.GetAttemptRecords()),
		TraceID:         r.GetTraceId(),
		AlreadyApplied:  r.GetAlreadyApplied(),
	}
	if text := r.GetObjectJson(); text != "" {
		obj, err := decodeObject(text)
		if err != nil {
			return nil, clientError(codes.Internal, "the sidecar's result object is not a JSON object: %v", err)
		}
		res.Object = obj
		res.objectJSON = text
	}
	return res, nil
}

// decodeObject parses a JSON object into an Unstructured, with integral numbers as
// int64 as the apimachinery helpers (unstructured.NestedInt64, ...) expect.
func decodeObject(text string) (*unstructured.Unstructured, error) {
	var m map[string]any
	if err := utiljson.Unmarshal([]byte(text), &m); err != nil {
		return nil, err
	}
	if m == nil {
		return nil, fmt.Errorf("null is not an object")
	}
	return &unstructured.Unstructured{Object: m}, nil
}

// encodeObject renders an Unstructured's content as JSON.
func encodeObject(obj *unstructured.Unstructured) (string, error) {
	if obj == nil || obj.Object == nil {
		return "", fmt.Errorf("the object is nil")
	}
	data, err := json.Marshal(obj.Object)
	if err != nil {
		return "", err
	}
	return string(data), nil
}
