package safewrite

// The client's view of every Reason of the proto, with no sidecar: each value is known
// to the Status mapping (a proto with a new value fails here until the client maps it)
// and carries its retry advice, is read back from a status as the sidecar sends it, and
// gives a Status the apierrors predicates read as intended. (Retryable is checked row by
// row against the shared advice table in conformance_test.go.)

import (
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	safewritev1 "safewrite.dev/clients/go/safewrite/v1"
)

// sidecarError is the status the sidecar sends for reason (ErrorInfo reason text, and
// the WriteFailure enum when withEnum), decoded by FromError.
func sidecarError(t *testing.T, code codes.Code, infoReason string, reason Reason, withEnum bool, md map[string]string, details ...protoadapt.MessageV1) *Error {
	t.Helper()
	wf := &safewritev1.WriteFailure{}
	if withEnum {
		wf.Reason = reason
	}
	all := append([]protoadapt.MessageV1{
		protoadapt.MessageV1Of(&errdetails.ErrorInfo{Reason: infoReason, Domain: Domain, Metadata: md}),
		protoadapt.MessageV1Of(wf),
	}, details...)
	st, err := status.New(code, "it failed").WithDetails(all...)
	if err != nil {
		t.Fatal(err)
	}
	var swErr *Error
	if !errors.As(FromError(st.Err()), &swErr) {
		t.Fatal("not an *Error")
	}
	return swErr
}

// keyed marks e as the error of a call that carried an idempotency key.
func keyed(e *Error) *Error {
	e.Idempotent = true
	return e
}

func TestEveryReasonIsKnown(t *testing.T) {
	if len(safewritev1.Reason_name) < 32 {
		t.Fatalf("the generated enum has %d values", len(safewritev1.Reason_name))
	}
	for number, name := range safewritev1.Reason_name {
		reason := Reason(number)
		c, ok := reasonClass(reason)
		if !ok {
			t.Errorf("%s is not mapped by reasonClass: give it a Status", name)
			continue
		}
		if retry := advice.byReason[reason]; retry == safewritev1.Retry_RETRY_UNSPECIFIED {
			t.Errorf("%s has no (retry) option in the proto", name)
		}
		if reason == safewritev1.Reason_REASON_UNSPECIFIED {
			continue
		}
		if !c.byAnswer && !c.invalid && (c.code < 400 || c.code > 599 || c.reason == "") {
			t.Errorf("%s maps to %q %d", name, c.reason, c.code)
		}
		info := strings.TrimPrefix(name, "REASON_")
		if reason == safewritev1.Reason_REASON_API_SERVER {
			info = "NotFound"
		}
		// The enum is read from WriteFailure, and from the ErrorInfo reason alone (a
		// sidecar older than the enum).
		for _, withEnum := range []bool{true, false} {
			e := sidecarError(t, codes.Unavailable, info, reason, withEnum, nil)
			if e.ReasonCode != reason || e.Reason != info {
				t.Errorf("%s (enum sent %v): read as %s / %q", name, withEnum, e.ReasonCode, e.Reason)
			}
			if st := e.Status(); st.Code == 0 || st.Status != metav1.StatusFailure {
				t.Errorf("%s: Status %+v", name, st)
			}
		}
	}
}

func TestStatusMapping(t *testing.T) {
	is := map[string]func(error) bool{
		"NotFound": apierrors.IsNotFound, "Conflict": apierrors.IsConflict, "Invalid": apierrors.IsInvalid,
		"BadRequest": apierrors.IsBadRequest, "Forbidden": apierrors.IsForbidden, "Unauthorized": apierrors.IsUnauthorized,
		"TooManyRequests": apierrors.IsTooManyRequests, "Timeout": apierrors.IsTimeout,
		"ServiceUnavailable": apierrors.IsServiceUnavailable, "InternalError": apierrors.IsInternalError,
		"AlreadyExists": apierrors.IsAlreadyExists, "RequestEntityTooLarge": apierrors.IsRequestEntityTooLargeError,
		"MethodNotAllowed": apierrors.IsMethodNotSupported, "ServerTimeout": apierrors.IsServerTimeout,
	}
	violation := protoadapt.MessageV1Of(&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{
		{Field: "target.name", Description: "bad"}}})
	retry := protoadapt.MessageV1Of(&errdetails.RetryInfo{RetryDelay: durationpb.New(1500 * time.Millisecond)})
	for _, tc := range []struct {
		name      string
		err       *Error
		want      string // the one predicate that holds
		code      int32
		retryable bool
	}{
		{"api NotFound", sidecarError(t, codes.NotFound, "NotFound", safewritev1.Reason_REASON_API_SERVER, true, map[string]string{"http_status": "404"}), "NotFound", 404, false},
		{"api Conflict", sidecarError(t, codes.Aborted, "Conflict", safewritev1.Reason_REASON_API_SERVER, true, map[string]string{"http_status": "409"}), "Conflict", 409, true},
		{"api AlreadyExists", sidecarError(t, codes.Aborted, "AlreadyExists", safewritev1.Reason_REASON_API_SERVER, true, map[string]string{"http_status": "409"}), "AlreadyExists", 409, true},
		// The gRPC code decides the API server's answers, not the HTTP status.
		{"api AlreadyExists as ALREADY_EXISTS", sidecarError(t, codes.AlreadyExists, "AlreadyExists", safewritev1.Reason_REASON_API_SERVER, true, map[string]string{"http_status": "409"}), "AlreadyExists", 409, false},
		{"api 504 as DEADLINE_EXCEEDED", sidecarError(t, codes.DeadlineExceeded, "Timeout", safewritev1.Reason_REASON_API_SERVER, true, map[string]string{"http_status": "504"}), "Timeout", 504, false},
		{"api 504 as DEADLINE_EXCEEDED, keyed", keyed(sidecarError(t, codes.DeadlineExceeded, "Timeout", safewritev1.Reason_REASON_API_SERVER, true, map[string]string{"http_status": "504"})), "Timeout", 504, true},
		{"api Invalid", sidecarError(t, codes.InvalidArgument, "Invalid", safewritev1.Reason_REASON_API_SERVER, true, map[string]string{"http_status": "422"}, violation), "Invalid", 422, false},
		{"api BadRequest", sidecarError(t, codes.InvalidArgument, "BadRequest", safewritev1.Reason_REASON_API_SERVER, true, map[string]string{"http_status": "400"}), "BadRequest", 400, false},
		{"api Forbidden", sidecarError(t, codes.PermissionDenied, "Forbidden", safewritev1.Reason_REASON_API_SERVER, true, map[string]string{"http_status": "403"}), "Forbidden", 403, false},
		{"api Unauthorized", sidecarError(t, codes.Unauthenticated, "Unauthorized", safewritev1.Reason_REASON_API_SERVER, true, map[string]string{"http_status": "401"}), "Unauthorized", 401, false},
		{"api TooManyRequests", sidecarError(t, codes.Unavailable, "TooManyRequests", safewritev1.Reason_REASON_API_SERVER, true, map[string]string{"http_status": "429"}, retry), "TooManyRequests", 429, true},
		{"api ServerTimeout", sidecarError(t, codes.Unavailable, "ServerTimeout", safewritev1.Reason_REASON_API_SERVER, true, map[string]string{"http_status": "500"}), "ServerTimeout", 500, true},
		{"api InternalError", sidecarError(t, codes.Internal, "InternalError", safewritev1.Reason_REASON_API_SERVER, true, map[string]string{"http_status": "500"}), "InternalError", 500, true},
		{"api HTTP_404", sidecarError(t, codes.NotFound, "HTTP_404", safewritev1.Reason_REASON_API_SERVER, true, map[string]string{"http_status": "404"}), "NotFound", 404, false},
		{"api HTTP_503", sidecarError(t, codes.Unavailable, "HTTP_503", safewritev1.Reason_REASON_API_SERVER, true, nil), "ServiceUnavailable", 503, true},
		{"unknown kind", sidecarError(t, codes.NotFound, "UNKNOWN_KIND", safewritev1.Reason_REASON_UNKNOWN_KIND, true, nil), "NotFound", 404, false},
		{"precondition", sidecarError(t, codes.FailedPrecondition, "PRECONDITION_FAILED", safewritev1.Reason_REASON_PRECONDITION_FAILED, true, nil), "Conflict", 409, false},
		{"rv mismatch", sidecarError(t, codes.Aborted, "RESOURCE_VERSION_MISMATCH", safewritev1.Reason_REASON_RESOURCE_VERSION_MISMATCH, true, nil), "Conflict", 409, false},
		{"field managers", sidecarError(t, codes.Aborted, "FIELD_MANAGER_CONFLICT", safewritev1.Reason_REASON_FIELD_MANAGER_CONFLICT, true, nil), "Conflict", 409, false},
		{"invalid request", sidecarError(t, codes.InvalidArgument, "INVALID_REQUEST", safewritev1.Reason_REASON_INVALID_REQUEST, true, nil, violation), "Invalid", 422, false},
		{"invalid, no field", sidecarError(t, codes.InvalidArgument, "INVALID_REQUEST", safewritev1.Reason_REASON_INVALID_REQUEST, true, nil), "BadRequest", 400, false},
		{"mutation", sidecarError(t, codes.FailedPrecondition, "MUTATION_DOES_NOT_APPLY", safewritev1.Reason_REASON_MUTATION_DOES_NOT_APPLY, true, nil), "Invalid", 422, false},
		{"object deleting", sidecarError(t, codes.FailedPrecondition, "OBJECT_DELETING", safewritev1.Reason_REASON_OBJECT_DELETING, true, nil), "Invalid", 422, false},
		{"already owned", keyed(sidecarError(t, codes.FailedPrecondition, "ALREADY_OWNED", safewritev1.Reason_REASON_ALREADY_OWNED, true, nil)), "Invalid", 422, false},
		{"fenced", keyed(sidecarError(t, codes.FailedPrecondition, "FENCED", safewritev1.Reason_REASON_FENCED, true, nil)), "Conflict", 409, false},
		{"not leader", sidecarError(t, codes.FailedPrecondition, "NOT_LEADER", safewritev1.Reason_REASON_NOT_LEADER, true, nil), "Conflict", 409, false},
		{"policy", sidecarError(t, codes.PermissionDenied, "POLICY_DENIED", safewritev1.Reason_REASON_POLICY_DENIED, true, nil), "Forbidden", 403, false},
		{"token", sidecarError(t, codes.Unauthenticated, "TOKEN_INVALID", safewritev1.Reason_REASON_TOKEN_INVALID, true, nil), "Unauthorized", 401, false},
		{"circuit", sidecarError(t, codes.Unavailable, "CIRCUIT_OPEN", safewritev1.Reason_REASON_CIRCUIT_OPEN, true, nil, retry), "ServiceUnavailable", 503, true},
		{"rv too large", sidecarError(t, codes.Unavailable, "RESOURCE_VERSION_TOO_LARGE", safewritev1.Reason_REASON_RESOURCE_VERSION_TOO_LARGE, true, nil, retry), "Timeout", 504, true},
		{"overloaded", sidecarError(t, codes.ResourceExhausted, "OVERLOADED", safewritev1.Reason_REASON_OVERLOADED, true, nil, retry), "TooManyRequests", 429, true},
		{"deadline", sidecarError(t, codes.DeadlineExceeded, "DEADLINE_EXCEEDED", safewritev1.Reason_REASON_DEADLINE_EXCEEDED, true, nil), "Timeout", 504, true},
		{"outcome unknown", sidecarError(t, codes.Unknown, "WRITE_OUTCOME_UNKNOWN", safewritev1.Reason_REASON_WRITE_OUTCOME_UNKNOWN, true, nil), "Timeout", 504, false},
		// With an idempotency key the same call applies the change at most once.
		{"outcome unknown, keyed", keyed(sidecarError(t, codes.Unknown, "WRITE_OUTCOME_UNKNOWN", safewritev1.Reason_REASON_WRITE_OUTCOME_UNKNOWN, true, nil)), "Timeout", 504, true},
		// The key changes nothing else.
		{"invalid request, keyed", keyed(sidecarError(t, codes.InvalidArgument, "INVALID_REQUEST", safewritev1.Reason_REASON_INVALID_REQUEST, true, nil)), "BadRequest", 400, false},
		{"bad answer", sidecarError(t, codes.Internal, "BAD_ANSWER", safewritev1.Reason_REASON_BAD_ANSWER, true, nil), "InternalError", 500, false},
		{"bad answer, keyed", keyed(sidecarError(t, codes.Internal, "BAD_ANSWER", safewritev1.Reason_REASON_BAD_ANSWER, true, nil)), "InternalError", 500, true},
		{"transaction cancelled", keyed(sidecarError(t, codes.Canceled, "TRANSACTION_CANCELLED", safewritev1.Reason_REASON_TRANSACTION_CANCELLED, true, nil)), "", StatusClientClosedRequest, false},
		{"request not read", sidecarError(t, codes.DeadlineExceeded, "REQUEST_NOT_READ", safewritev1.Reason_REASON_REQUEST_NOT_READ, true, nil), "Timeout", 504, true},
		{"too large", sidecarError(t, codes.OutOfRange, "REQUEST_TOO_LARGE", safewritev1.Reason_REASON_REQUEST_TOO_LARGE, true, nil), "RequestEntityTooLarge", 413, false},
		{"unimplemented", sidecarError(t, codes.Unimplemented, "UNIMPLEMENTED", safewritev1.Reason_REASON_UNIMPLEMENTED, true, nil), "MethodNotAllowed", 405, false},
		{"no sidecar", FromError(status.Error(codes.Unavailable, "connection refused")).(*Error), "ServiceUnavailable", 503, true},
		{"canceled", FromError(status.Error(codes.Canceled, "canceled")).(*Error), "", StatusClientClosedRequest, false},
		// Cut off by its own context, a call may have left a write in flight.
		{"context deadline", FromError(status.Error(codes.DeadlineExceeded, "context deadline exceeded")).(*Error), "Timeout", 504, false},
		{"context deadline, keyed", keyed(FromError(status.Error(codes.DeadlineExceeded, "context deadline exceeded")).(*Error)), "Timeout", 504, true},
		{"bare INTERNAL", FromError(status.Error(codes.Internal, "webhook")).(*Error), "InternalError", 500, true},
		{"client-side invalid", clientError(codes.InvalidArgument, "no mutation"), "BadRequest", 400, false},
	} {
		var holds []string
		for name, pred := range is {
			if pred(tc.err) {
				holds = append(holds, name)
			}
		}
		if (tc.want == "" && len(holds) != 0) || (tc.want != "" && (len(holds) != 1 || holds[0] != tc.want)) {
			t.Errorf("%s: predicates %v hold, want only %q (Status %+v)", tc.name, holds, tc.want, tc.err.Status())
		}
		st := tc.err.Status()
		if st.Code != tc.code {
			t.Errorf("%s: code %d, want %d", tc.name, st.Code, tc.code)
		}
		if got := tc.err.Retryable(); got != tc.retryable {
			t.Errorf("%s: Retryable() = %v", tc.name, got)
		}
		if delay, ok := tc.err.RetryDelay(); ok && (st.Details == nil || st.Details.RetryAfterSeconds != 2) {
			t.Errorf("%s: retry delay %v gives Details %+v", tc.name, delay, st.Details)
		}
		if len(tc.err.FieldViolations) > 0 && (st.Details == nil || len(st.Details.Causes) != 1 || st.Details.Causes[0].Field != "target.name") {
			t.Errorf("%s: causes %+v", tc.name, st.Details)
		}
	}
	// Wrapped, the predicates still see it; nil and foreign errors are not retryable.
	wrapped := errors.Join(errors.New("reconcile"), sidecarError(t, codes.NotFound, "NotFound", safewritev1.Reason_REASON_API_SERVER, true, nil))
	if !apierrors.IsNotFound(wrapped) || Retryable(nil) || Retryable(errors.New("x")) {
		t.Error("a wrapped *Error")
	}
}
