package safewrite

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	safewritev1 "safewrite.dev/clients/go/safewrite/v1"
)

// Domain is the google.rpc.ErrorInfo domain of every error the sidecar returns.
const Domain = "safewrite.dev"

// Sentinel errors, one per class of failure. Every error a [Client] method returns for a
// failed call is an [*Error] that matches exactly one of them with [errors.Is]:
//
//	if errors.Is(err, safewrite.ErrConflict) { return requeue() }
var (
	// ErrConflict (ABORTED): conflicts outlasted the retry policy, a strict
	// resourceVersion precondition did not match (reason RESOURCE_VERSION_MISMATCH), or
	// server-side apply met another field manager's fields (reason FieldManagerConflict).
	ErrConflict = errors.New("safewrite: conflict")
	// ErrInvalid (INVALID_ARGUMENT): a malformed request, or an object the API server
	// refused as invalid (422); [Error.FieldViolations] names the fields.
	ErrInvalid = errors.New("safewrite: invalid")
	// ErrPreconditionFailed (FAILED_PRECONDITION): a precondition was false, a JSON
	// Patch test failed, the mutation does not apply, a finalizer cannot be added to an
	// object being deleted ([Error.ReasonCode] REASON_OBJECT_DELETING), or another owner
	// is already the object's controller (REASON_ALREADY_OWNED), or a fenced write
	// ([WithFence]) met a later leader's epoch (REASON_FENCED) or a sidecar not leading
	// under its epoch (REASON_NOT_LEADER); nothing was written and [Error.CurrentObject]
	// holds the object as it is now. Also a call that needs an RPC, a field or an enum
	// value the sidecar lacks (REASON_UNKNOWN_FIELD, never retryable): refused by this
	// client before sending when the sidecar's rpc Capabilities says it lacks it, else by
	// the sidecar; the message names it, the sidecar's version and the version that
	// has it (docs/compatibility.md).
	ErrPreconditionFailed = errors.New("safewrite: precondition failed")
	// ErrUnavailable (UNAVAILABLE): the API server or the sidecar is unreachable,
	// throttling, or behind an open circuit breaker, or a Get's minimum resourceVersion
	// is one the API server has not reached yet ([Error.ReasonCode]
	// REASON_RESOURCE_VERSION_TOO_LARGE); retry after the delay of [Error.RetryDelay].
	ErrUnavailable = errors.New("safewrite: unavailable")
	// ErrResourceExhausted (RESOURCE_EXHAUSTED): the sidecar is shedding load or its rate
	// limit would outlast the deadline; retry after the delay of [Error.RetryDelay].
	ErrResourceExhausted = errors.New("safewrite: resource exhausted")
	// ErrPermissionDenied (PERMISSION_DENIED): the sidecar's identity may not do this
	// (403).
	ErrPermissionDenied = errors.New("safewrite: permission denied")
	// ErrUnauthenticated (UNAUTHENTICATED): the sidecar wants the token of its
	// --token-file and the call carried none (reason TOKEN_REQUIRED) or another one
	// (TOKEN_INVALID), see [WithToken]; or the API server refused the sidecar's
	// credentials (401).
	ErrUnauthenticated = errors.New("safewrite: unauthenticated")
	// ErrNotFound (NOT_FOUND): the object does not exist (see [WithCreateIfMissing]),
	// or its kind is unknown to the API server (reason UNKNOWN_KIND).
	ErrNotFound = errors.New("safewrite: not found")
	// ErrDeadlineExceeded (DEADLINE_EXCEEDED): the call's deadline passed. An [*Error] with this
	// code also matches [context.DeadlineExceeded]. The sidecar's own answer (reason
	// DEADLINE_EXCEEDED) says no write is in doubt, and [Error.Retryable] is true; a call
	// its context cut off on this side (no reason) may have left a write in flight, and
	// is retryable only with an idempotency key.
	ErrDeadlineExceeded = errors.New("safewrite: deadline exceeded")
	// ErrCanceled (CANCELLED): the call was canceled. An [*Error] with this code also
	// matches [context.Canceled]. Like a deadline met on this side, it is retryable only
	// with an idempotency key; a transaction its caller ended (reason
	// TRANSACTION_CANCELLED) is not retryable.
	ErrCanceled = errors.New("safewrite: canceled")
	// ErrOutcomeUnknown (UNKNOWN with reason WRITE_OUTCOME_UNKNOWN): the sidecar sent a
	// write but its answer was lost, or the call's deadline cut it off, so it may or may
	// not have been applied, and the sidecar did not retry it (the call had no
	// idempotency key). [Error.Retryable] is then false: read the object to find out
	// before deciding. A call with [WithIdempotencyKey] may simply be sent again with the
	// same key (should one end here, [Error.Retryable] is true).
	ErrOutcomeUnknown = errors.New("safewrite: write outcome unknown")
	// ErrInternal (INTERNAL, DATA_LOSS, any other UNKNOWN): the API server failed
	// internally (e.g. an admission webhook), or an answer was not understood.
	ErrInternal = errors.New("safewrite: internal error")
	// ErrUnimplemented (UNIMPLEMENTED): the sidecar does not implement this RPC.
	ErrUnimplemented = errors.New("safewrite: unimplemented")
)

// ErrAbort ends a transaction without writing: return it (or an error wrapping it) from
// a [TransactFunc]. The transaction's [Result] then has [OutcomeAborted] and no error is
// returned; the error's text is recorded as the abort reason.
var ErrAbort = errors.New("safewrite: transaction aborted")

// sentinel returns the sentinel error of a gRPC code and failure reason.
func sentinel(code codes.Code, reason Reason) error {
	switch code {
	case codes.Aborted:
		return ErrConflict
	case codes.InvalidArgument, codes.OutOfRange:
		return ErrInvalid
	case codes.FailedPrecondition:
		return ErrPreconditionFailed
	case codes.Unavailable:
		return ErrUnavailable
	case codes.ResourceExhausted:
		return ErrResourceExhausted
	case codes.PermissionDenied:
		return ErrPermissionDenied
	case codes.Unauthenticated:
		return ErrUnauthenticated
	case codes.NotFound:
		return ErrNotFound
	case codes.DeadlineExceeded:
		return ErrDeadlineExceeded
	case codes.Canceled:
		return ErrCanceled
	case codes.Unimplemented:
		return ErrUnimplemented
	case codes.Unknown:
		if reason == safewritev1.Reason_REASON_WRITE_OUTCOME_UNKNOWN {
			return ErrOutcomeUnknown
		}
		return ErrInternal
	default:
		return ErrInternal
	}
}

// FieldViolation is one field the request or the object got wrong
// (google.rpc.BadRequest).
type FieldViolation struct {
	// Field is the path of the field, e.g. "metadata.labels".
	Field string
	// Description says what is wrong with it.
	Description string
}

// Error is a failed safewrite call: the gRPC status and its decoded details. Use
// [errors.Is] with the sentinel errors to branch on its class, and [errors.As] to read
// its details:
//
//	var swErr *safewrite.Error
//	if errors.As(err, &swErr) && swErr.CurrentObject != nil { ... }
type Error struct {
	// Code is the gRPC status code.
	Code codes.Code
	// Message is the sidecar's message: what happened and what to do.
	Message string
	// Reason is the google.rpc.ErrorInfo reason: the Kubernetes Status reason (e.g.
	// "Conflict", "Invalid", "Forbidden") or a safewrite one (e.g.
	// "PRECONDITION_FAILED", "RESOURCE_VERSION_MISMATCH"). Empty when the status had no
	// ErrorInfo (for example when the sidecar was unreachable, or the error was found
	// on this side before anything was sent; but a call refused because the sidecar
	// lacks what it needs has UNKNOWN_FIELD, as the sidecar's own refusal).
	Reason string
	// ReasonCode is why the call failed, as the proto's enum (WriteFailure.reason): a
	// safewrite reason such as safewritev1.Reason_REASON_CIRCUIT_OPEN, or
	// safewritev1.Reason_REASON_API_SERVER when the API server's answer decided the
	// failure (Reason then holds its Status reason). REASON_UNSPECIFIED when the error
	// did not come from the sidecar (it was unreachable, the context ended) and for
	// errors found on this side, except malformed requests (REASON_INVALID_REQUEST) and
	// calls that need what the sidecar lacks (REASON_UNKNOWN_FIELD).
	ReasonCode Reason
	// Target is the object the call named; empty for errors made by [FromError].
	Target ObjectRef
	// Domain is the ErrorInfo domain ([Domain]), or empty.
	Domain string
	// Metadata is the ErrorInfo metadata (e.g. "attempts", "http_status").
	Metadata map[string]string
	// FieldViolations are the fields at fault (google.rpc.BadRequest).
	FieldViolations []FieldViolation
	// CurrentObject is, for ErrPreconditionFailed, the object the check failed on, so
	// the caller can decide what to do without another read: as read, or, when the call
	// was committed together with others, as it stood at this call's turn (after the
	// changes of the calls before it); nil otherwise.
	CurrentObject *unstructured.Unstructured
	// Attempts is the number of attempts made before the failure (0 when no request
	// reached the API server).
	Attempts int
	// AttemptRecords describes each of those attempts, in order.
	AttemptRecords []AttemptRecord
	// Idempotent is true when the call carried an idempotency key
	// ([WithIdempotencyKey]): then a write whose outcome is unknown ([ErrOutcomeUnknown])
	// may be sent again with the same key, and [Error.Retryable] says so. It is true
	// for a read ([Client.Get]) too, which writes nothing, and for a call refused before
	// it was sent because its sidecar's features could not be learned (rpc
	// Capabilities failed; docs/compatibility.md). False for errors made by
	// [FromError], which does not know the call.
	Idempotent bool
	// TraceID is the W3C trace id (32 hex digits) of the sidecar's span of the call:
	// the trace of the caller's span when ctx carried one (the client propagates it,
	// unless [WithoutTracePropagation]), else a trace of its own. Empty when the
	// sidecar's tracing is off, or when the error did not come from the sidecar.
	TraceID string

	// retryDelay is the google.rpc.RetryInfo delay; see RetryDelay.
	retryDelay time.Duration
	// hasRetryDelay: the status carried a google.rpc.RetryInfo.
	hasRetryDelay bool

	status *status.Status
}

// RetryDelay returns how long the sidecar asks to wait before the call is sent again
// (its google.rpc.RetryInfo), and whether it gave one: ok is false when the status
// carried no RetryInfo, and then delay is zero. A delay is given with throttling, load
// shedding and an open circuit breaker ([ErrUnavailable], [ErrResourceExhausted]).
func (e *Error) RetryDelay() (delay time.Duration, ok bool) {
	return e.retryDelay, e.hasRetryDelay
}

// Error returns "safewrite: CODE (Reason): Message".
func (e *Error) Error() string {
	head := e.Code.String()
	if e.Reason != "" {
		head += " (" + e.Reason + ")"
	}
	return "safewrite: " + head + ": " + e.Message
}

// Is reports whether target is the sentinel error of e's class (see [ErrConflict] and
// the others). A DEADLINE_EXCEEDED error also matches [context.DeadlineExceeded], and
// a CANCELLED one [context.Canceled].
func (e *Error) Is(target error) bool {
	if target == sentinel(e.Code, e.ReasonCode) {
		return true
	}
	switch e.Code {
	case codes.DeadlineExceeded:
		return target == context.DeadlineExceeded
	case codes.Canceled:
		return target == context.Canceled
	}
	return false
}

// GRPCStatus returns the gRPC status e was decoded from, so [status.FromError] and
// [status.Code] work on it.
func (e *Error) GRPCStatus() *status.Status {
	if e.status != nil {
		return e.status
	}
	return status.New(e.Code, e.Message)
}

// clientError is an error found on this side, before anything was sent.
func clientError(code codes.Code, format string, args ...any) *Error {
	e := &Error{Code: code, Message: fmt.Sprintf(format, args...)}
	if code == codes.InvalidArgument {
		e.ReasonCode = safewritev1.Reason_REASON_INVALID_REQUEST
	}
	return e
}

// fieldError is an error found on this side in one field of the request, named as the
// sidecar names it (e.g. "mutation.finalizer.finalizer"), so that it reads like the
// sidecar's own refusal: [ErrInvalid], REASON_INVALID_REQUEST, one field violation.
func fieldError(field, format string, args ...any) *Error {
	description := fmt.Sprintf(format, args...)
	e := clientError(codes.InvalidArgument, "%s: %s", field, description)
	e.FieldViolations = []FieldViolation{{Field: field, Description: description}}
	return e
}

// withKey returns err, the error of a call sent with cfg, with [Error.Idempotent] set
// when the call carried an idempotency key.
func withKey(err error, cfg *writeConfig) error {
	var swErr *Error
	if errors.As(err, &swErr) && cfg.options.GetIdempotencyKey() != "" {
		swErr.Idempotent = true
	}
	return err
}

// withTarget returns err, the error of a call about ref, with [Error.Target] set.
func withTarget(err error, ref ObjectRef) error {
	var swErr *Error
	if errors.As(err, &swErr) && swErr.Target == (ObjectRef{}) {
		swErr.Target = ref
	}
	return err
}

// FromError converts an error returned by a gRPC call to the sidecar into an [*Error],
// decoding the status details. It returns nil for nil, and err itself when err already
// is (or wraps) an [*Error]. Context errors become CANCELLED or DEADLINE_EXCEEDED; other
// errors that carry no gRPC status become an INTERNAL [*Error] with err's text.
func FromError(err error) error {
	if err == nil {
		return nil
	}
	var already *Error
	if errors.As(err, &already) {
		return err
	}
	st, ok := status.FromError(err)
	if !ok {
		if errors.Is(err, context.DeadlineExceeded) {
			st = status.New(codes.DeadlineExceeded, err.Error())
		} else if errors.Is(err, context.Canceled) {
			st = status.New(codes.Canceled, err.Error())
		} else {
			st = status.New(codes.Internal, err.Error())
		}
	}
	return fromStatus(st)
}

func fromStatus(st *status.Status) *Error {
	// The sidecar's advice names the proto's field; the caller sets this client's option.
	message := strings.ReplaceAll(st.Message(), "options.create_if_missing_json", "safewrite.WithCreateIfMissing")
	e := &Error{Code: st.Code(), Message: message, status: st}
	for _, detail := range st.Details() {
		switch d := detail.(type) {
		case *errdetails.ErrorInfo:
			e.Reason = d.GetReason()
			e.Domain = d.GetDomain()
			if md := d.GetMetadata(); len(md) > 0 {
				e.Metadata = make(map[string]string, len(md))
				for k, v := range md {
					e.Metadata[k] = v
				}
			}
		case *errdetails.BadRequest:
			for _, v := range d.GetFieldViolations() {
				e.FieldViolations = append(e.FieldViolations, FieldViolation{
					Field: v.GetField(), Description: v.GetDescription(),
				})
			}
		case *errdetails.RetryInfo:
			e.hasRetryDelay = true
			e.retryDelay = d.GetRetryDelay().AsDuration()
		case *safewritev1.WriteFailure:
			e.ReasonCode = d.GetReason()
			e.AttemptRecords = attemptRecords(d.GetAttemptRecords())
			e.TraceID = d.GetTraceId()
			if text := d.GetCurrentObjectJson(); text != "" {
				if obj, err := decodeObject(text); err == nil {
					e.CurrentObject = obj
				}
			}
		}
	}
	if e.ReasonCode == safewritev1.Reason_REASON_UNSPECIFIED {
		e.ReasonCode = reasonOf(e.Domain, e.Reason)
	}
	e.Attempts = len(e.AttemptRecords)
	if n, err := strconv.Atoi(e.Metadata["attempts"]); err == nil && n > e.Attempts {
		e.Attempts = n
	}
	return e
}

// Reason says why a call failed: the proto's enum safewrite.v1.Reason. Its values are
// the generated constants safewritev1.Reason_REASON_*; [Error.ReasonCode] holds one.
type Reason = safewritev1.Reason

// reasonOf is the Reason of an ErrorInfo reason, for a status without a WriteFailure
// reason (a sidecar older than the enum): safewrite's own reasons are the enum value's
// name without its REASON_ prefix; any other reason of domain safewrite.dev was the API
// server's.
func reasonOf(domain, reason string) Reason {
	if reason == "" || domain != Domain {
		return safewritev1.Reason_REASON_UNSPECIFIED
	}
	if value, ok := safewritev1.Reason_value["REASON_"+reason]; ok {
		r := Reason(value)
		if r != safewritev1.Reason_REASON_UNSPECIFIED && r != safewritev1.Reason_REASON_API_SERVER {
			return r
		}
	}
	return safewritev1.Reason_REASON_API_SERVER
}
