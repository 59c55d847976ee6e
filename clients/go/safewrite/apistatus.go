package safewrite

// What a failure means to Kubernetes code: the metav1.Status of an *Error, so that the
// predicates of k8s.io/apimachinery/pkg/api/errors (IsNotFound, IsConflict, ...) and
// controller-runtime's client.IgnoreNotFound work on it, decided per Reason in
// reasonClass, one switch over the proto's enum. Whether the call may be sent again is
// the proto's to say (advice.go).

import (
	"math"
	"strconv"
	"strings"

	"google.golang.org/grpc/codes"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	safewritev1 "safewrite.dev/clients/go/safewrite/v1"
)

// *Error is an apierrors.APIStatus.
var _ apierrors.APIStatus = (*Error)(nil)

// StatusClientClosedRequest is the HTTP-like code of the Status of a call canceled by
// its caller: Kubernetes has none, and no apierrors predicate matches it.
const StatusClientClosedRequest = 499

// class is what one failure reason means to a Kubernetes caller.
type class struct {
	// reason and code are the Status reason and HTTP code of the failure.
	reason metav1.StatusReason
	code   int32
	// invalid: Invalid (422) when the error names fields, else BadRequest (400).
	invalid bool
	// byAnswer: the API server's answer (ErrorInfo reason, http_status), else the gRPC
	// code, decides the Status.
	byAnswer bool
}

// reasonClass returns the class of r. ok is false for a value this client does not
// know, from a proto newer than the client (a test checks every value of the proto).
func reasonClass(r Reason) (c class, ok bool) {
	switch r {
	case safewritev1.Reason_REASON_UNSPECIFIED, safewritev1.Reason_REASON_API_SERVER,
		// The caller canceled (CANCELLED) or broke the stream (INVALID_ARGUMENT).
		safewritev1.Reason_REASON_TRANSACTION_CANCELLED,
		// The transport failed (its code says how).
		safewritev1.Reason_REASON_REQUEST_NOT_READ:
		return class{byAnswer: true}, true
	case safewritev1.Reason_REASON_INVALID_REQUEST, safewritev1.Reason_REASON_INVALID_CEL:
		return class{invalid: true}, true
	case safewritev1.Reason_REASON_UNKNOWN_KIND:
		// What the API server answers for a resource it does not serve.
		return class{reason: metav1.StatusReasonNotFound, code: 404}, true
	case safewritev1.Reason_REASON_PRECONDITION_FAILED,
		safewritev1.Reason_REASON_RESOURCE_VERSION_MISMATCH,
		safewritev1.Reason_REASON_FIELD_MANAGER_CONFLICT,
		safewritev1.Reason_REASON_FENCED, safewritev1.Reason_REASON_NOT_LEADER:
		// The API server answers a failed uid or resourceVersion precondition, and a
		// server-side apply conflict, with 409 Conflict; a fence is a precondition too.
		return class{reason: metav1.StatusReasonConflict, code: 409}, true
	case safewritev1.Reason_REASON_MUTATION_DOES_NOT_APPLY:
		// As the API server answers a patch that does not apply.
		return class{reason: metav1.StatusReasonInvalid, code: 422}, true
	case safewritev1.Reason_REASON_OBJECT_DELETING, safewritev1.Reason_REASON_ALREADY_OWNED:
		// As the API server answers a new finalizer on an object being deleted, and a
		// second controller reference: the object's metadata refused as invalid.
		return class{reason: metav1.StatusReasonInvalid, code: 422}, true
	case safewritev1.Reason_REASON_CEL_BUSY, safewritev1.Reason_REASON_RATE_LIMITED,
		safewritev1.Reason_REASON_OVERLOADED:
		return class{reason: metav1.StatusReasonTooManyRequests, code: 429}, true
	case safewritev1.Reason_REASON_DEADLINE_EXCEEDED, safewritev1.Reason_REASON_TRANSACTION_IDLE:
		return class{reason: metav1.StatusReasonTimeout, code: 504}, true
	case safewritev1.Reason_REASON_API_SERVER_UNREACHABLE,
		safewritev1.Reason_REASON_RETRY_BUDGET_EXHAUSTED,
		safewritev1.Reason_REASON_CIRCUIT_OPEN:
		return class{reason: metav1.StatusReasonServiceUnavailable, code: 503}, true
	case safewritev1.Reason_REASON_WRITE_OUTCOME_UNKNOWN:
		// As the API server answers a write that "may still be in progress".
		return class{reason: metav1.StatusReasonTimeout, code: 504}, true
	case safewritev1.Reason_REASON_RESOURCE_VERSION_TOO_LARGE:
		// As the API server answers a read whose resourceVersion its cache has not reached.
		return class{reason: metav1.StatusReasonTimeout, code: 504}, true
	case safewritev1.Reason_REASON_BAD_ANSWER:
		return class{reason: metav1.StatusReasonInternalError, code: 500}, true
	case safewritev1.Reason_REASON_REQUEST_TOO_LARGE:
		return class{reason: metav1.StatusReasonRequestEntityTooLarge, code: 413}, true
	case safewritev1.Reason_REASON_MALFORMED_REQUEST:
		return class{reason: metav1.StatusReasonBadRequest, code: 400}, true
	case safewritev1.Reason_REASON_UNKNOWN_FIELD:
		// As the API server answers a field it does not know under strict field
		// validation.
		return class{reason: metav1.StatusReasonBadRequest, code: 400}, true
	case safewritev1.Reason_REASON_UNIMPLEMENTED:
		return class{reason: metav1.StatusReasonMethodNotAllowed, code: 405}, true
	case safewritev1.Reason_REASON_POLICY_DENIED:
		return class{reason: metav1.StatusReasonForbidden, code: 403}, true
	case safewritev1.Reason_REASON_TOKEN_REQUIRED, safewritev1.Reason_REASON_TOKEN_INVALID:
		return class{reason: metav1.StatusReasonUnauthorized, code: 401}, true
	}
	return class{}, false
}

// codeClass is the class of a failure that only its gRPC code describes.
func codeClass(code codes.Code) class {
	switch code {
	case codes.InvalidArgument, codes.OutOfRange:
		return class{invalid: true}
	case codes.NotFound:
		return class{reason: metav1.StatusReasonNotFound, code: 404}
	case codes.AlreadyExists:
		return class{reason: metav1.StatusReasonAlreadyExists, code: 409}
	case codes.Aborted:
		return class{reason: metav1.StatusReasonConflict, code: 409}
	case codes.FailedPrecondition:
		return class{reason: metav1.StatusReasonConflict, code: 409}
	case codes.PermissionDenied:
		return class{reason: metav1.StatusReasonForbidden, code: 403}
	case codes.Unauthenticated:
		return class{reason: metav1.StatusReasonUnauthorized, code: 401}
	case codes.ResourceExhausted:
		return class{reason: metav1.StatusReasonTooManyRequests, code: 429}
	case codes.Unavailable:
		return class{reason: metav1.StatusReasonServiceUnavailable, code: 503}
	case codes.DeadlineExceeded:
		return class{reason: metav1.StatusReasonTimeout, code: 504}
	case codes.Canceled:
		return class{reason: metav1.StatusReasonUnknown, code: StatusClientClosedRequest}
	case codes.Unimplemented:
		return class{reason: metav1.StatusReasonMethodNotAllowed, code: 405}
	default: // Unknown, Internal, DataLoss
		return class{reason: metav1.StatusReasonInternalError, code: 500}
	}
}

// class returns the class of e: its reason's, else (for the API server's answers and
// errors without a reason) what the answer or the gRPC code says.
func (e *Error) class() class {
	c, ok := reasonClass(e.ReasonCode)
	if ok && !c.byAnswer {
		return c
	}
	fallback := codeClass(e.Code)
	if e.ReasonCode != safewritev1.Reason_REASON_API_SERVER {
		return fallback
	}
	// The API server's Status reason as it sent it, or HTTP_<code> when it sent none.
	answer := class{reason: metav1.StatusReason(e.Reason)}
	httpCode := e.Metadata["http_status"]
	if rest, ok := strings.CutPrefix(e.Reason, "HTTP_"); ok {
		answer.reason = metav1.StatusReasonUnknown
		if httpCode == "" {
			httpCode = rest
		}
	}
	if n, err := strconv.ParseInt(httpCode, 10, 32); err == nil && n > 0 {
		answer.code = int32(n)
	} else {
		answer.code = fallback.code
	}
	return answer
}

// Status returns e as a Kubernetes Status, which makes *Error an apierrors.APIStatus:
// apierrors.IsNotFound(err), apierrors.IsConflict(err) and controller-runtime's
// client.IgnoreNotFound(err) give the answer they give for the API server's own errors.
//
// When the API server's answer decided the failure (ReasonCode REASON_API_SERVER) the
// Status has its reason and HTTP code, as the API server sent them. safewrite's own
// failures map to the Status the API server gives for the same thing: UNKNOWN_KIND is
// 404 NotFound; PRECONDITION_FAILED, RESOURCE_VERSION_MISMATCH,
// FIELD_MANAGER_CONFLICT, FENCED and NOT_LEADER are 409 Conflict; INVALID_REQUEST and INVALID_CEL are 422
// Invalid with a cause per field violation (400 BadRequest when none is named),
// MUTATION_DOES_NOT_APPLY, OBJECT_DELETING and ALREADY_OWNED are 422 Invalid; CEL_BUSY, RATE_LIMITED and OVERLOADED are 429
// TooManyRequests; DEADLINE_EXCEEDED and TRANSACTION_IDLE are 504 Timeout, as are
// WRITE_OUTCOME_UNKNOWN and RESOURCE_VERSION_TOO_LARGE; API_SERVER_UNREACHABLE, RETRY_BUDGET_EXHAUSTED and CIRCUIT_OPEN
// are 503 ServiceUnavailable; POLICY_DENIED is 403 Forbidden; TOKEN_REQUIRED and
// TOKEN_INVALID are 401 Unauthorized; REQUEST_TOO_LARGE is 413, MALFORMED_REQUEST 400,
// UNIMPLEMENTED 405, BAD_ANSWER 500 InternalError. Errors without a reason map by their
// gRPC code the same way; a canceled call is [StatusClientClosedRequest] with no
// reason. Details carry the target's name and kind, the field violations as causes,
// and the retry delay in whole seconds.
func (e *Error) Status() metav1.Status {
	c := e.class()
	if c.invalid {
		c.reason, c.code = metav1.StatusReasonBadRequest, 400
		if len(e.FieldViolations) > 0 {
			c.reason, c.code = metav1.StatusReasonInvalid, 422
		}
	}
	st := metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusFailure,
		Message:  e.Message,
		Reason:   c.reason,
		Code:     c.code,
	}
	details := &metav1.StatusDetails{Name: e.Target.Name, Kind: e.Target.Kind}
	if e.Target.APIVersion != "" {
		if gv, err := schema.ParseGroupVersion(e.Target.APIVersion); err == nil {
			details.Group = gv.Group
		}
	}
	causeType := metav1.CauseTypeFieldValueInvalid
	if c.reason != metav1.StatusReasonInvalid {
		causeType = ""
	}
	for _, v := range e.FieldViolations {
		details.Causes = append(details.Causes, metav1.StatusCause{Type: causeType, Field: v.Field, Message: v.Description})
	}
	if delay, ok := e.RetryDelay(); ok && delay > 0 {
		details.RetryAfterSeconds = int32(min(math.Ceil(delay.Seconds()), math.MaxInt32))
	}
	if details.Name != "" || details.Kind != "" || len(details.Causes) > 0 || details.RetryAfterSeconds > 0 {
		st.Details = details
	}
	return st
}
